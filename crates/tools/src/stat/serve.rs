//! `lacquer stat --listen ADDR`: a small HTTP/1.1 server for scrapers.
//! `GET /metrics` answers the Prometheus exposition of `prom`, and
//! `GET /stats.json` varnishstat's `-j` document, each from a fresh
//! snapshot; `HEAD` answers the same heads. Anything else is 404 (405 for
//! other methods). Requests are small and bounded: a head over 8 KiB is
//! refused with 431, a client silent for 10 s is dropped, at most 64
//! connections are served at once, and each answer closes the connection.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::{Source, prom, select};

/// Longest request head accepted.
pub const MAX_HEAD: usize = 8192;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once.
const MAX_CONNS: usize = 64;

/// An answer before encoding.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Content type.
    pub ctype: &'static str,
    /// Body (left out for HEAD).
    pub body: String,
}

impl Response {
    fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            ctype: "text/plain; charset=utf-8",
            body: format!("{body}\n"),
        }
    }

    /// The bytes on the wire; `head` leaves the body out but keeps its
    /// length.
    pub fn encode(&self, head: bool) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            431 => "Request Header Fields Too Large",
            _ => "Service Unavailable",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            self.ctype,
            self.body.len()
        );
        if self.status == 405 {
            out.push_str("Allow: GET, HEAD\r\n");
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        if !head {
            out.extend_from_slice(self.body.as_bytes());
        }
        out
    }
}

/// The answer to `method target`, from a fresh snapshot of `source`
/// reduced by the `-f` globs.
pub fn respond(method: &str, target: &str, source: &Mutex<Source>, globs: &[String]) -> Response {
    if method != "GET" && method != "HEAD" {
        return Response::text(405, "only GET and HEAD are served");
    }
    let path = target.split(['?', '#']).next().unwrap_or("");
    let json = match path {
        "/metrics" => false,
        "/stats.json" => true,
        _ => return Response::text(404, "not found; try /metrics or /stats.json"),
    };
    let snap = source.lock().unwrap_or_else(|e| e.into_inner()).snapshot();
    match snap {
        Ok(snap) => {
            let snap = select(snap, globs);
            if json {
                Response {
                    status: 200,
                    ctype: "application/json",
                    body: lacquer_vsl::vsc::render_json(&snap, SystemTime::now()),
                }
            } else {
                Response {
                    status: 200,
                    ctype: "text/plain; version=0.0.4; charset=utf-8",
                    body: prom::render(&snap),
                }
            }
        }
        Err(e) => Response::text(503, &format!("cannot read the counters: {e}")),
    }
}

/// Reads one request head from `s` and answers it.
async fn connection(mut s: TcpStream, source: Arc<Mutex<Source>>, globs: Arc<Vec<String>>) {
    let mut buf = Vec::with_capacity(1024);
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    let (resp, head) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => {
                let method = req.method.unwrap_or("");
                let target = req.path.unwrap_or("");
                break (respond(method, target, &source, &globs), method == "HEAD");
            }
            Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
                break (Response::text(431, "request head too large"), false);
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => {
                break (Response::text(431, "too many request headers"), false);
            }
            Err(e) => break (Response::text(400, &format!("bad request: {e}")), false),
        }
        let mut chunk = [0u8; 2048];
        let want = chunk.len().min(MAX_HEAD - buf.len());
        match tokio::time::timeout_at(deadline, s.read(&mut chunk[..want])).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => break (Response::text(408, "request not received in time"), false),
        }
    };
    if s.write_all(&resp.encode(head)).await.is_err() || s.shutdown().await.is_err() {
        return;
    }
    // Lingering close: closing with unread input would reset the
    // connection and could destroy the answer before the client reads it
    // (a refused oversized head), so drain a bounded amount first.
    let mut drained = 0;
    let mut sink = [0u8; 4096];
    while drained < 64 * 1024 {
        match tokio::time::timeout(Duration::from_secs(1), s.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => break,
        }
    }
}

/// Serves scrapers on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, source: Source, globs: Vec<String>) {
    let source = Arc::new(Mutex::new(source));
    let globs = Arc::new(globs);
    let slots = Arc::new(Semaphore::new(MAX_CONNS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((s, _)) = listener.accept().await else {
            // Out of descriptors or similar: wait a little, go on.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (source, globs) = (source.clone(), globs.clone());
        tokio::spawn(async move {
            connection(s, source, globs).await;
            drop(permit);
        });
    }
}

/// `--listen ADDR`: binds and serves until interrupted.
pub fn main(addr: &str, source: Source, globs: Vec<String>) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the server runtime: {e}"))?;
    rt.block_on(async {
        let l = TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        if let Ok(a) = l.local_addr() {
            eprintln!("lacquer stat: serving http://{a}/metrics and http://{a}/stats.json");
        }
        tokio::select! {
            _ = serve(l, source, globs) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lacquer_vsl::vsc::{Vsc, VscConfig, tables};

    #[test]
    fn routes_and_encoding() {
        let dir = std::env::temp_dir().join(format!("lq-stat-serve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = lacquer_vsl::vsc::vsc_path(&dir);
        let missing = Mutex::new(Source::new(dir.join("nope")));
        let r = respond("GET", "/metrics", &missing, &[]);
        assert_eq!(r.status, 503);
        assert!(
            r.body.starts_with("cannot read the counters: "),
            "{}",
            r.body
        );
        let vsc = Vsc::create(&path, &VscConfig::default()).unwrap();
        let main = vsc.add_section(&tables::MAIN, "MAIN").unwrap();
        main.add(tables::Main::cache_hit, 5);
        let src = Mutex::new(Source::new(path));
        let r = respond("GET", "/metrics?x=1", &src, &["MAIN.cache_*".to_string()]);
        assert_eq!(r.status, 200);
        assert!(
            r.body.contains("\nvarnish_main_cache_hit 5\n"),
            "{}",
            r.body
        );
        assert!(!r.body.contains("uptime"), "globs apply");
        let r = respond("HEAD", "/stats.json", &src, &[]);
        assert_eq!((r.status, r.ctype), (200, "application/json"));
        assert_eq!(respond("GET", "/", &src, &[]).status, 404);
        assert_eq!(respond("GET", "/metrics/x", &src, &[]).status, 404);
        let r = respond("POST", "/metrics", &src, &[]);
        assert_eq!(r.status, 405);
        let wire = String::from_utf8(r.encode(false)).unwrap();
        assert!(
            wire.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{wire}"
        );
        assert!(wire.contains("\r\nAllow: GET, HEAD\r\n"));
        let ok = Response::text(200, "hi");
        assert_eq!(
            String::from_utf8(ok.encode(true)).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
        );
        assert!(ok.encode(false).ends_with(b"\r\n\r\nhi\n"));
        drop(main);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
