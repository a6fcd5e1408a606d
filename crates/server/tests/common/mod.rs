//! Test harness: an in-process lacquerd on a loopback port, scripted
//! backends, and a small HTTP/1.1 client.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use lacquer_http::{BodyKind, Limits, parse_request_buf, parse_response};
use lacquer_server::mgt::daemon::{self, BootVcl, Config, Running};
use lacquer_server::runtime::params::ParamSet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the backend saw it.
#[derive(Clone, Debug)]
pub struct SeenReq {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl SeenReq {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A scripted backend: `reply` turns each request into raw response bytes.
pub struct Backend {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
    pub seen: Arc<std::sync::Mutex<Vec<SeenReq>>>,
}

impl Backend {
    pub fn count(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn last(&self) -> SeenReq {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }
}

pub async fn backend<F>(reply: F) -> Backend
where
    F: Fn(&SeenReq) -> (Duration, Vec<u8>) + Send + Sync + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let reply = Arc::new(reply);
    let (h2, s2) = (hits.clone(), seen.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (hits, seen, reply) = (h2.clone(), s2.clone(), reply.clone());
            tokio::spawn(async move {
                let mut buf = BytesMut::new();
                loop {
                    let Some(head) = read_head(&mut s, &mut buf).await else {
                        return;
                    };
                    let mut body = Vec::new();
                    if let BodyKind::Length(n) = head.body {
                        while (buf.len() as u64) < n {
                            if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                                return;
                            }
                        }
                        body = buf.split_to(n as usize).to_vec();
                    }
                    let req = SeenReq {
                        method: String::from_utf8_lossy(&head.method).into(),
                        url: String::from_utf8_lossy(&head.target).into(),
                        headers: head
                            .headers
                            .iter()
                            .map(|(k, v)| {
                                (
                                    String::from_utf8_lossy(k).into(),
                                    String::from_utf8_lossy(v).into(),
                                )
                            })
                            .collect(),
                        body,
                    };
                    hits.fetch_add(1, Ordering::SeqCst);
                    let (delay, out) = reply(&req);
                    seen.lock().unwrap().push(req);
                    tokio::time::sleep(delay).await;
                    if s.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Backend { addr, hits, seen }
}

/// Reads one request head off `s` (what follows stays in `buf`); `None`
/// when the connection closes or sends something unparsable first.
pub async fn read_head(s: &mut TcpStream, buf: &mut BytesMut) -> Option<lacquer_http::RequestHead> {
    loop {
        match parse_request_buf(buf, &Limits::request()) {
            Ok(Some(h)) => return Some(h),
            Ok(None) => {}
            Err(_) => return None,
        }
        if s.read_buf(buf).await.unwrap_or(0) == 0 {
            return None;
        }
    }
}

/// A plain `200` response with a body and extra headers.
pub fn ok(body: &str, extra: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Starts lacquerd with `vcl` (where `${b1}` is replaced by the first
/// backend's `.host`/`.port` block).
pub async fn lacquer(vcl: &str, params: &[&str]) -> Running {
    lacquer_on(vcl, params, "127.0.0.1:0").await
}

/// Starts lacquerd as [`lacquer`] does, listening on `listen` (an `-a`
/// argument, e.g. `127.0.0.1:0,PROXY`).
pub async fn lacquer_on(vcl: &str, params: &[&str], listen: &str) -> Running {
    let mut p = ParamSet::default();
    for a in params {
        p.apply_arg(a).unwrap();
    }
    let dir = std::env::temp_dir().join(format!(
        "lacquer-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    p.set("vsl_space", "1M").unwrap();
    let cfg = Config {
        listen: vec![lacquer_server::mgt::listen::parse_listen(listen, 0).unwrap()],
        vcl: BootVcl::Inline(vcl.to_string()),
        storage: vec!["malloc,64m".to_string()],
        params: p,
        workdir: dir,
        identity: None,
        admin: None,
        secret: None,
        reverse_cli: None,
        debug: false,
        pidfile: None,
        cli_file: None,
        tls: None,
    };
    daemon::start(cfg).await.expect("daemon starts")
}

/// A daemon configuration without VCL or secret, listening on a free
/// loopback port with a small store, working in `lacquer-<tag>-<pid>`:
/// for tests that start it themselves (`-I` files, CLI authentication).
pub fn bare_config(tag: &str) -> Config {
    let mut p = ParamSet::default();
    p.set("vsl_space", "1M").unwrap();
    Config {
        listen: vec![lacquer_server::mgt::listen::parse_listen("127.0.0.1:0", 0).unwrap()],
        vcl: BootVcl::None,
        storage: vec!["malloc,8m".to_string()],
        params: p,
        workdir: std::env::temp_dir().join(format!("lacquer-{tag}-{}", std::process::id())),
        identity: None,
        admin: None,
        secret: Some("none".into()),
        reverse_cli: None,
        debug: false,
        pidfile: None,
        cli_file: None,
        tls: None,
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// VCL header with one backend at `addr`.
pub fn vcl_with(addr: SocketAddr, rest: &str) -> String {
    format!(
        "vcl 4.1;\nbackend b1 {{ .host = \"{}\"; .port = \"{}\"; }}\n{rest}",
        addr.ip(),
        addr.port()
    )
}

/// A parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends raw bytes and reads one response (to `HEAD` if `head`).
pub async fn raw(addr: SocketAddr, req: &[u8], head: bool) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    read_resp(&mut s, head).await
}

/// Reads one response from `s` (TCP or Unix socket; `head`: the request
/// was a HEAD, so no body). Reads byte by byte up to the end of the body,
/// never past it: pipelined responses on the same connection stay for the
/// next call.
pub async fn read_resp<S: tokio::io::AsyncRead + Unpin>(s: &mut S, head: bool) -> Resp {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1];
    let (h, n) = loop {
        if let Some((h, n)) = parse_response(&buf, &Limits::response()).unwrap() {
            break (h, n);
        }
        let r = tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk))
            .await
            .expect("response within 10s")
            .unwrap();
        assert!(r > 0, "connection closed before a response: {buf:?}");
        buf.extend_from_slice(&chunk[..r]);
    };
    let kind = h.body_kind(head).unwrap();
    let mut rest = buf[n..].to_vec();
    let body = match kind {
        BodyKind::None => Vec::new(),
        BodyKind::Length(len) => {
            let have = rest.len();
            rest.resize(len as usize, 0);
            s.read_exact(&mut rest[have..]).await.unwrap();
            rest
        }
        BodyKind::Chunked => {
            let mut dec = lacquer_http::ChunkedDecoder::for_response(Default::default());
            let mut out = Vec::new();
            loop {
                let (used, done) = dec.decode_to(&rest, &mut out).unwrap();
                rest.drain(..used);
                if done {
                    break;
                }
                let r = s.read(&mut chunk).await.unwrap();
                assert!(r > 0);
                rest.extend_from_slice(&chunk[..r]);
            }
            out
        }
        BodyKind::Eof => {
            let mut out = rest;
            s.read_to_end(&mut out).await.unwrap();
            out
        }
    };
    Resp {
        status: h.status,
        headers: h
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(k).into(),
                    String::from_utf8_lossy(v).into(),
                )
            })
            .collect(),
        body,
    }
}

/// `GET url` with extra header lines.
pub async fn get(addr: SocketAddr, url: &str, extra: &str) -> Resp {
    let req = format!("GET {url} HTTP/1.1\r\nHost: test\r\n{extra}\r\n");
    raw(addr, req.as_bytes(), false).await
}
