//! vmod `curl` from VCL: each function's semantics against scripted
//! origins on loopback, with the VCL suspended at every call and resumed
//! once the answer is in (as the server runs it).

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::curl_vcl::*;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Action, LogKind, Scratch};
use lacquer_vcl::subs::BuiltinSub;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A scripted origin: answers every request with `answer`, keeps each
/// request (head and body) it received, counts connections.
struct Origin {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    conns: Arc<Mutex<u32>>,
}

async fn origin(answer: &'static str) -> Origin {
    origin_with(answer, None).await
}

/// [`origin`], speaking TLS through `tls` when given.
async fn origin_with(
    answer: &'static str,
    tls: Option<lacquer_tls::tokio_rustls::TlsAcceptor>,
) -> Origin {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let conns = Arc::new(Mutex::new(0));
    let (s2, c2) = (seen.clone(), conns.clone());
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            *c2.lock().unwrap() += 1;
            let (tls, seen) = (tls.clone(), s2.clone());
            tokio::spawn(async move {
                match tls {
                    Some(a) => {
                        if let Ok(t) = a.accept(s).await {
                            serve(t, answer, seen).await;
                        }
                    }
                    None => serve(s, answer, seen).await,
                }
            });
        }
    });
    Origin { port, seen, conns }
}

async fn serve<S>(mut s: S, answer: &'static str, seen: Arc<Mutex<Vec<String>>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut have = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&have[..end + 4]).into_owned();
            let len = head
                .lines()
                .find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    n.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if have.len() < end + 4 + len {
                break;
            }
            let body = String::from_utf8_lossy(&have[end + 4..end + 4 + len]).into_owned();
            have.drain(..end + 4 + len);
            // No body for HEAD (nor for the PURGE asked with head()).
            let out = if head.starts_with("HEAD ") || head.starts_with("PURGE ") {
                &answer[..answer.find("\r\n\r\n").map_or(answer.len(), |i| i + 4)]
            } else {
                answer
            };
            seen.lock().unwrap().push(head + &body);
            if s.write_all(out.as_bytes()).await.is_err() {
                return;
            }
        }
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => have.extend_from_slice(&buf[..n]),
        }
    }
}

/// An origin that answers after `delay`, with the request's URL in
/// `X-Url`.
async fn slow_origin(delay: Duration) -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let mut have = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    if let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&have[..end]).into_owned();
                        have.drain(..end + 4);
                        let url = head.split(' ').nth(1).unwrap_or("").to_string();
                        tokio::time::sleep(delay).await;
                        let out = format!(
                            "HTTP/1.1 201 Created\r\nX-Url: {url}\r\nContent-Length: 2\r\n\r\nhi"
                        );
                        if s.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => have.extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
    });
    port
}

const OK: &str = "HTTP/1.1 200 OK\r\nX-Dup: first\r\nContent-Length: 5\r\nX-Dup: last\r\nOAuth-User-Id: 42\r\n\r\nhello";

#[tokio::test]
async fn get_status_header_body_and_request_headers() {
    let o = origin(OK).await;
    let l = load(&format!(
        r#"
sub vcl_recv {{
    curl.header_add("OAuth-Token: abc");
    curl.header_add("Accept:");
    curl.header_add("X-Empty;");
    curl.fetch("http://127.0.0.1:{}/oauth/token_validation?x=1#frag");
    set req.http.status = curl.status();
    set req.http.dup = curl.header("x-dup");
    set req.http.user = curl.header("OAuth-User-Id");
    set req.http.body = curl.body();
    if (!curl.header("nope")) {{ set req.http.missing = "null"; }}
    if (curl.error()) {{ set req.http.error = "set"; }}
    return (hash);
}}"#,
        o.port
    ));
    let mut c = MockContext::new("GET", "/");
    let (a, waits) = l.run(BuiltinSub::Recv, &mut c).await;
    assert_eq!((a, waits), (Action::Hash, 1), "{:?}", c.logs);
    assert_eq!(hdr(&c, "status").as_deref(), Some("200"));
    assert_eq!(hdr(&c, "dup").as_deref(), Some("last"));
    assert_eq!(hdr(&c, "user").as_deref(), Some("42"));
    assert_eq!(hdr(&c, "body").as_deref(), Some("hello"));
    assert_eq!(hdr(&c, "missing").as_deref(), Some("null"));
    assert_eq!(hdr(&c, "error"), None);
    let seen = o.seen.lock().unwrap();
    let want = format!(
        "GET /oauth/token_validation?x=1 HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nOAuth-Token: abc\r\nX-Empty: \r\n\r\n",
        o.port
    );
    assert_eq!(seen[0], want);
    // The call is logged: a Timestamp and a Notice with status and time.
    assert_eq!(c.vmod.timestamps.len(), 1, "{:?}", c.vmod.timestamps);
    let notes = c.logs_of(LogKind::Notice);
    assert!(
        notes[0].starts_with(&format!("curl: GET http://127.0.0.1:{}/oauth", o.port)),
        "{notes:?}"
    );
    assert!(notes[0].contains(" 200 "), "{notes:?}");
    // The duration in seconds with six decimals, as the record always had.
    let secs = notes[0].rsplit(' ').next().unwrap();
    let (whole, frac) = secs.split_once('.').expect("seconds with decimals");
    assert!(
        !whole.is_empty()
            && whole.bytes().all(|b| b.is_ascii_digit())
            && frac.len() == 6
            && frac.bytes().all(|b| b.is_ascii_digit()),
        "{notes:?}"
    );
}

#[tokio::test]
async fn post_head_and_a_one_shot_method() {
    let o = origin(OK).await;
    let l = load(&format!(
        r#"
sub vcl_recv {{
    curl.post("http://127.0.0.1:{p}/form", "a=1&b=2");
    set req.http.post = curl.status() + " " + curl.body();
    curl.head("http://127.0.0.1:{p}/h");
    set req.http.head = curl.status() + " [" + curl.body() + "]";
    curl.set_method("PURGE");
    curl.head("http://127.0.0.1:{p}/p");
    curl.head("http://127.0.0.1:{p}/p2");
    return (hash);
}}"#,
        p = o.port
    ));
    let mut c = MockContext::new("GET", "/");
    let (a, waits) = l.run(BuiltinSub::Recv, &mut c).await;
    assert_eq!((a, waits), (Action::Hash, 4), "{:?}", c.logs);
    assert_eq!(hdr(&c, "post").as_deref(), Some("200 hello"));
    // HEAD reads no body even with a Content-Length.
    assert_eq!(hdr(&c, "head").as_deref(), Some("200 []"));
    let seen = o.seen.lock().unwrap();
    assert!(
        seen[0].starts_with("POST /form HTTP/1.1\r\n"),
        "{}",
        seen[0]
    );
    assert!(seen[0].contains("\r\nContent-Length: 7\r\n"));
    assert!(seen[0].contains("\r\nContent-Type: application/x-www-form-urlencoded\r\n"));
    assert!(seen[0].ends_with("\r\n\r\na=1&b=2"));
    assert!(seen[1].starts_with("HEAD /h HTTP/1.1\r\n"));
    assert!(seen[2].starts_with("PURGE /p HTTP/1.1\r\n"));
    assert!(seen[3].starts_with("HEAD /p2 HTTP/1.1\r\n"));
    // Every call went over the one pooled connection.
    assert_eq!(*o.conns.lock().unwrap(), 1);
}

#[tokio::test]
async fn refused_and_silent_endpoints_give_status_0_and_an_error() {
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let silent_port = silent_endpoint().await;
    let l = load(&format!(
        r#"
sub vcl_recv {{
    curl.get("http://127.0.0.1:{refused}/");
    set req.http.refused = curl.status() + " " + curl.error();
    curl.set_timeout(200);
    curl.get("http://127.0.0.1:{silent_port}/");
    set req.http.silent = curl.status() + " " + curl.error();
    return (hash);
}}"#
    ));
    let mut c = MockContext::new("GET", "/");
    let t0 = Instant::now();
    let (a, _) = l.run(BuiltinSub::Recv, &mut c).await;
    let took = t0.elapsed();
    assert_eq!(a, Action::Hash);
    let refused = hdr(&c, "refused").unwrap();
    assert!(
        refused.starts_with("0 Couldn't connect to server"),
        "{refused}"
    );
    let silent = hdr(&c, "silent").unwrap();
    assert!(silent.starts_with("0 Timeout was reached"), "{silent}");
    assert!(
        took >= Duration::from_millis(200) && took <= Duration::from_millis(225 + 50),
        "{took:?}"
    );
    // Failures are logged as VCL_Error.
    assert_eq!(c.logs_of(LogKind::Error).len(), 2, "{:?}", c.logs);
}

#[tokio::test]
async fn escape_unescape_header_remove_add_all_and_free() {
    let o = origin(OK).await;
    let l = load(&format!(
        r#"
sub vcl_recv {{
    set req.http.esc = curl.escape("a b/c?d=é~");
    set req.http.unesc = curl.unescape("a%20b%2Fc+%zz%4");
    curl.header_add("X-A: 1");
    curl.header_add("X-B: 2");
    curl.header_remove("x-a");
    curl.header_add_all();
    curl.get("http://127.0.0.1:{p}/one");
    curl.free();
    set req.http.after_free = curl.status();
    curl.get("http://127.0.0.1:{p}/two");
    return (hash);
}}"#,
        p = o.port
    ));
    let mut c = MockContext::new("GET", "/")
        .with_header(REQ, "X-Client", "yes")
        .with_header(REQ, "Content-Length", "3");
    let (a, _) = l.run(BuiltinSub::Recv, &mut c).await;
    assert_eq!(a, Action::Hash, "{:?}", c.logs);
    assert_eq!(hdr(&c, "esc").as_deref(), Some("a%20b%2Fc%3Fd%3D%C3%A9~"));
    assert_eq!(hdr(&c, "unesc").as_deref(), Some("a b/c+%zz%4"));
    assert_eq!(hdr(&c, "after_free").as_deref(), Some("0"));
    let seen = o.seen.lock().unwrap();
    assert!(!seen[0].contains("X-A"), "{}", seen[0]);
    assert!(seen[0].contains("\r\nX-B: 2\r\n"));
    assert!(seen[0].contains("\r\nX-Client: yes\r\n"));
    assert!(!seen[0].contains("Content-Length"));
    // free() dropped the added headers.
    assert!(!seen[1].contains("X-B"), "{}", seen[1]);
}

#[tokio::test]
async fn proxy_and_unix_socket_destinations() {
    let proxy = origin(OK).await;
    let dir = std::env::temp_dir().join(format!("lacquer-curl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.sock");
    let _ = std::fs::remove_file(&path);
    let ul = tokio::net::UnixListener::bind(&path).unwrap();
    let useen = Arc::new(Mutex::new(Vec::new()));
    let u2 = useen.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = ul.accept().await.unwrap();
            tokio::spawn(serve(s, OK, u2.clone()));
        }
    });
    let l = load(&format!(
        r#"
sub vcl_recv {{
    curl.set_proxy("http://127.0.0.1:{p}");
    curl.get("http://service.example:8080/via-proxy");
    set req.http.proxied = curl.status();
    curl.set_proxy("");
    curl.set_unix_path("{path}");
    curl.get("http://unix.example/via-socket");
    set req.http.unix = curl.status();
    return (hash);
}}"#,
        p = proxy.port,
        path = path.display()
    ));
    let mut c = MockContext::new("GET", "/");
    let (a, _) = l.run(BuiltinSub::Recv, &mut c).await;
    assert_eq!(a, Action::Hash, "{:?}", c.logs);
    assert_eq!(hdr(&c, "proxied").as_deref(), Some("200"));
    assert_eq!(hdr(&c, "unix").as_deref(), Some("200"));
    let seen = proxy.seen.lock().unwrap();
    assert!(
        seen[0].starts_with(
            "GET http://service.example:8080/via-proxy HTTP/1.1\r\nHost: service.example:8080\r\n"
        ),
        "{}",
        seen[0]
    );
    let useen = useen.lock().unwrap();
    assert!(useen[0].starts_with("GET /via-socket HTTP/1.1\r\nHost: unix.example\r\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TLS origin for `localhost` signed by a fresh CA: answers as
/// [`origin`] does; the CA is in `dir/ca.pem`.
async fn tls_origin(answer: &'static str, dir: &std::path::Path) -> Origin {
    use lacquer_tls::rustls::{self, pki_types};
    let ca = lacquer_tls::testcerts::Ca::new("curl test CA");
    ca.write(dir);
    let (cert, key) = ca.leaf_der("localhost", &["localhost"]);
    let provider = lacquer_tls::provider();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![pki_types::CertificateDer::from(cert)],
            pki_types::PrivateKeyDer::Pkcs8(key.into()),
        )
        .unwrap();
    let acceptor = lacquer_tls::tokio_rustls::TlsAcceptor::from(Arc::new(config));
    origin_with(answer, Some(acceptor)).await
}

/// Runs `calls` (VCL statements) in `vcl_recv` and returns `req.http.e`.
async fn https_call(calls: &str) -> String {
    let l = load(&format!(
        "sub vcl_recv {{\n{calls}\n    set req.http.e = curl.status() + \" \" + curl.error() + \" \" + curl.body();\n    return (hash);\n}}"
    ));
    let mut c = MockContext::new("GET", "/");
    let (a, _) = l.run(BuiltinSub::Recv, &mut c).await;
    assert_eq!(a, Action::Hash);
    hdr(&c, "e").unwrap()
}

/// Statements that verify the peer against the CA file `ca` (and its
/// name when `host`) and get `url`.
fn verified_get(ca: &str, host: bool, url: &str) -> String {
    format!(
        "    curl.set_ssl_verify_peer(1);\n    curl.set_ssl_verify_host({});\n    curl.set_ssl_cafile(\"{ca}\");\n    curl.get(\"{url}\");",
        u8::from(host)
    )
}

#[tokio::test]
async fn https_calls_verify_as_asked_and_reuse_their_connection() {
    let dir = lacquer_tls::testcerts::tempdir("curl-https");
    let o = tls_origin("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret", &dir).await;
    let url = format!("https://localhost:{}/x", o.port);
    let ca = dir.join("ca.pem").display().to_string();
    // Verified against the test CA, name included: two calls, one
    // connection.
    let twice = format!(
        "{}\n    curl.get(\"{url}\");",
        verified_get(&ca, true, &url)
    );
    let e = https_call(&twice).await;
    assert_eq!(e, "200  secret");
    assert_eq!(*o.conns.lock().unwrap(), 1);
    assert!(o.seen.lock().unwrap()[0].starts_with(&format!(
        "GET /x HTTP/1.1\r\nHost: localhost:{}\r\n",
        o.port
    )));
    // The same CA found in a directory (set_ssl_capath).
    let cadir = dir.join("cas");
    std::fs::create_dir_all(&cadir).unwrap();
    std::fs::copy(dir.join("ca.pem"), cadir.join("0a1b2c3d.0")).unwrap();
    let e = https_call(&format!(
        "    curl.set_ssl_verify_peer(1);\n    curl.set_ssl_capath(\"{}\");\n    curl.get(\"{url}\");",
        cadir.display()
    ))
    .await;
    assert_eq!(e, "200  secret");
    // libvmod-curl verifies nothing unless asked: the unknown CA is fine.
    let e = https_call(&format!("    curl.get(\"{url}\");")).await;
    assert_eq!(e, "200  secret");
    // Asked to verify without the CA: no response, and why.
    let e = https_call(&format!(
        "    curl.set_ssl_verify_peer(1);\n    curl.get(\"{url}\");"
    ))
    .await;
    assert!(
        e.starts_with("0 SSL peer certificate or SSH remote key was not OK (")
            && e.contains("unknown issuer"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn https_checks_the_name_only_with_verify_host() {
    let dir = lacquer_tls::testcerts::tempdir("curl-https-name");
    let o = tls_origin("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", &dir).await;
    // The certificate names localhost; the call goes to 127.0.0.1.
    let url = format!("https://127.0.0.1:{}/", o.port);
    let ca = dir.join("ca.pem").display().to_string();
    let e = https_call(&verified_get(&ca, false, &url)).await;
    assert_eq!(e, "200  ok");
    let e = https_call(&verified_get(&ca, true, &url)).await;
    assert!(
        e.starts_with("0 SSL peer certificate or SSH remote key was not OK (")
            && e.contains("name"),
        "{e}"
    );
    // A CA file that does not exist is said so.
    let missing = dir.join("missing.pem").display().to_string();
    let e = https_call(&verified_get(&missing, false, &url)).await;
    assert!(e.starts_with("0 Problem with the SSL CA cert"), "{e}");
    // Plain HTTP spoken to it is no answer at all.
    let e = https_call(&format!("    curl.get(\"http://127.0.0.1:{}/\");", o.port)).await;
    assert!(e.starts_with("0 "), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An HTTP proxy that only tunnels (`CONNECT`); keeps what it was asked.
async fn connect_proxy() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let a2 = asked.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let asked = a2.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read_exact(&mut b).await.is_err() {
                        return;
                    }
                    head.push(b[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let target = head.split(' ').nth(1).unwrap_or("").to_string();
                asked.lock().unwrap().push(head);
                let target = target.replace("localhost", "127.0.0.1");
                let Ok(mut up) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .unwrap();
                let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
            });
        }
    });
    (port, asked)
}

#[tokio::test]
async fn https_through_a_proxy_tunnels_with_connect() {
    let dir = lacquer_tls::testcerts::tempdir("curl-https-proxy");
    let o = tls_origin("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", &dir).await;
    let (proxy, asked) = connect_proxy().await;
    let ca = dir.join("ca.pem").display().to_string();
    let e = https_call(&format!(
        "    curl.set_proxy(\"http://127.0.0.1:{proxy}\");\n    curl.set_ssl_verify_peer(1);\n    curl.set_ssl_verify_host(1);\n    curl.set_ssl_cafile(\"{ca}\");\n    curl.get(\"https://localhost:{}/t\");",
        o.port
    ))
    .await;
    assert_eq!(e, "200  ok");
    let port = o.port;
    assert_eq!(
        asked.lock().unwrap()[0],
        format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n")
    );
    // Inside the tunnel the origin is asked as it would be directly.
    assert!(o.seen.lock().unwrap()[0].starts_with("GET /t HTTP/1.1\r\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_method_that_cannot_wait_fails_the_call() {
    let l = load(
        r#"
sub vcl_init {
    curl.get("http://127.0.0.1:1/");
}"#,
    );
    let mut c = MockContext::new("GET", "/");
    c.vmod.sub = Some(BuiltinSub::Init);
    let a = l
        .prog
        .run(BuiltinSub::Init, &mut c, &l.rt, &mut Scratch::default());
    assert_eq!(a, Action::Fail);
    assert!(c.logs_of(LogKind::Error)[0].contains("cannot wait for I/O here"));
}

#[tokio::test]
async fn debug_records_show_what_went_out_and_came_in() {
    let o = origin(OK).await;
    let l = load(&format!(
        r#"
sub vcl_recv {{
    curl.set_debug(header_out);
    curl.set_debug(header_in);
    curl.set_debug(data_in);
    curl.get("http://127.0.0.1:{}/d");
    return (hash);
}}"#,
        o.port
    ));
    let mut c = MockContext::new("GET", "/");
    l.run(BuiltinSub::Recv, &mut c).await;
    let dbg = c.logs_of(LogKind::Debug).join("|");
    assert!(dbg.contains("curl: header_out: GET /d HTTP/1.1"), "{dbg}");
    assert!(dbg.contains("curl: header_in: HTTP/1.1 200 OK"), "{dbg}");
    assert!(dbg.contains("curl: data_in: hello"), "{dbg}");
}

#[tokio::test]
async fn http_requests_run_in_the_background_and_are_collected_later() {
    let port = slow_origin(Duration::from_millis(100)).await;
    let l = load(&format!(
        r#"
import http;
sub vcl_recv {{
    http.init(1);
    http.req_set_url(1, "http://127.0.0.1:{port}/one");
    http.req_set_header(1, "X-Test", "a");
    http.req_send(1);
    http.init(2);
    http.req_set_url(2, "http://127.0.0.1:{port}/two");
    http.req_set_method(2, "POST");
    http.req_set_body(2, "b=1");
    http.req_send(2);
    set req.http.sent = "yes";
    http.resp_wait(1);
    set req.http.one = http.resp_get_status(1) + " " + http.resp_get_header(1, "x-url") + " " + http.resp_get_body(1);
    # Not waited for: the getter waits.
    set req.http.two = http.resp_get_status(2) + " " + http.resp_get_header(2, "X-Url");
    set req.http.dflt = http.resp_get_header(2, "missing", "none");
    http.init(3);
    set req.http.unsent = http.resp_get_status(3) + " " + http.resp_get_error(3);
    return (hash);
}}"#
    ));
    let mut c = MockContext::new("GET", "/");
    let t0 = Instant::now();
    let (a, _) = l.run(BuiltinSub::Recv, &mut c).await;
    let took = t0.elapsed();
    assert_eq!(a, Action::Hash, "{:?}", c.logs);
    assert_eq!(hdr(&c, "one").as_deref(), Some("201 /one hi"));
    assert_eq!(hdr(&c, "two").as_deref(), Some("201 /two"));
    assert_eq!(hdr(&c, "dflt").as_deref(), Some("none"));
    assert_eq!(
        hdr(&c, "unsent").as_deref(),
        Some("0 request not sent (http.req_send())")
    );
    // The two 100 ms calls were in flight together.
    assert!(took < Duration::from_millis(190), "{took:?}");
    assert_eq!(c.vmod.timestamps.len(), 2);
}

#[tokio::test]
async fn http_request_used_before_init_fails_the_call() {
    let l = load(
        r#"
import http;
sub vcl_recv {
    http.req_set_url(7, "http://127.0.0.1:1/");
    return (hash);
}"#,
    );
    let mut c = MockContext::new("GET", "/");
    let (a, _) = l.run(BuiltinSub::Recv, &mut c).await;
    assert_eq!(a, Action::Fail);
    assert!(c.logs_of(LogKind::Error)[0].contains("http.init(7)"));
}
