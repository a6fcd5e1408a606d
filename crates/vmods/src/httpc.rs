//! A small asynchronous HTTP/1.1 client for vmods that call out from VCL
//! (`curl`): one request, one response read whole, over tokio sockets and
//! `lacquer-http`'s response parser and chunked decoder.
//!
//! Connections are kept alive and pooled process-wide per destination (a
//! host and port, a proxy, or a Unix socket path), so calls to the same
//! service reuse them as libcurl's connection cache does. A pooled
//! connection the server closed while idle is detected when the request
//! on it gets no answer at all, and the request is sent once more on a
//! new connection. Everything a call holds is owned by its future, which
//! the server awaits while the VCL that made it is suspended: dropping
//! the future (a client that left) closes its connection.
//!
//! HTTPS runs over any of those transports with rustls, through the
//! client configurations of `lacquer-tls` (one per distinct set of verify
//! options and CA files, shared process-wide so new connections resume
//! sessions); through an HTTP proxy it tunnels with `CONNECT`, as libcurl
//! does. Pooled connections are keyed by transport and TLS settings.
//!
//! A destination the host serves itself (lacquerd calling its own
//! listening address, as the auth-offload report's VCL does) can be
//! answered in process: the host installs a [`LocalConnector`] with
//! [`set_local_connector`], and a connection it hands out replaces the TCP
//! connect of a plain HTTP call (pooled like any other), so such a call
//! costs no socket, no system call and no kernel wake-up.
//!
//! Failures are reported with libcurl's messages (`curl.error()` shows
//! them), so VCL written for libvmod-curl sees the same text.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use lacquer_http::{BodyKind, ChunkedDecoder, ChunkedLimits, Limits, parse_response};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Longest response body kept (the body is held in memory for `body()`).
pub(crate) const MAX_BODY: usize = 64 << 20;

/// Idle connections kept per destination. At least as many as the calls
/// one service sees at once: a smaller pool closes the connections of a
/// busy moment and reconnects for the next one (at 100 concurrent calls
/// a cap of 64 cost a connect and a close for about 1 call in 100), and a
/// burst of calls finds its connections open the next time.
const MAX_IDLE: usize = 4096;

/// How long an idle pooled connection is trusted.
const IDLE_TTL: Duration = Duration::from_secs(30);

/// Where a request connects.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Dest {
    /// A TCP host (name or address) and port.
    Tcp(String, u16),
    /// A Unix domain socket path.
    Unix(String),
}

/// TLS over a request's transport.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TlsTarget {
    /// Verify options and trust.
    pub spec: lacquer_tls::client::BackendTls,
    /// The name sent as SNI and verified (the URL's host).
    pub name: String,
    /// Through an HTTP proxy: the `host:port` to `CONNECT` to first.
    pub tunnel: Option<String>,
}

/// One request, ready to send.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub dest: Dest,
    /// HTTPS: TLS on top of `dest`.
    pub tls: Option<TlsTarget>,
    /// The request head, terminated by the empty line.
    pub head: Vec<u8>,
    pub body: Vec<u8>,
    /// The response has no body whatever its headers say (HEAD, `NOBODY`).
    pub no_body: bool,
    /// Whole-call limit.
    pub timeout: Option<Duration>,
    /// Limit for establishing the connection.
    pub connect_timeout: Option<Duration>,
    /// Keep the texts of what happened on the way ([`Outcome::text`], for
    /// `set_debug(text)`); without it none is made.
    pub trace: bool,
}

/// A response read whole.
#[derive(Clone, Debug, Default)]
pub(crate) struct Response {
    pub status: u16,
    /// Header fields in wire order (sharing the received head's bytes).
    pub headers: lacquer_http::Headers,
    pub body: Vec<u8>,
    /// The raw response head (for debug logging).
    pub raw_head: bytes::Bytes,
}

/// What came of a call: the response or libcurl's message for the
/// failure, how long it took and what happened on the way (for
/// `set_debug(text)`).
#[derive(Debug)]
pub(crate) struct Outcome {
    pub result: Result<Response, String>,
    pub took: Duration,
    /// Empty unless the request asked for a trace.
    pub text: Vec<String>,
}

/// A call's duration as its log records show it: seconds with six
/// decimals, as `{:.6}` prints them, from the duration's integer
/// microseconds (rounded to the nearest) instead of through a float, whose
/// formatting costs more than the rest of the record.
pub(crate) struct Secs6(pub Duration);

impl std::fmt::Display for Secs6 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = self.0.as_nanos().saturating_add(500) / 1000;
        write!(f, "{}.{:06}", us / 1_000_000, us % 1_000_000)
    }
}

impl Secs6 {
    /// Appends the text [`Display`](std::fmt::Display) writes, without the
    /// formatting machinery (a call's `Notice` record is built so).
    pub(crate) fn push_to(&self, out: &mut Vec<u8>) {
        let us = self.0.as_nanos().saturating_add(500) / 1000;
        push_decimal(out, us / 1_000_000);
        out.push(b'.');
        let frac = us % 1_000_000;
        let at = out.len();
        push_decimal(out, frac);
        let digits = out.len() - at;
        // Zero-padded to six digits.
        out.splice(at..at, std::iter::repeat_n(b'0', 6 - digits));
    }
}

/// Appends `n` in decimal.
pub(crate) fn push_decimal(out: &mut Vec<u8>, n: u128) {
    let mut digits = [0u8; 40];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// A connection the client can send a request on.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// Opens an in-process connection to a TCP destination (host as written
/// in the URL, port) that the host serves itself, or `None` for one it
/// does not.
pub type LocalConnector = dyn Fn(&str, u16) -> Option<Box<dyn Stream>> + Send + Sync;

static LOCAL: OnceLock<Box<LocalConnector>> = OnceLock::new();

/// Installs the host's connector for destinations it serves itself (once
/// per process: a later call is ignored, so the connector should consult
/// the host's own registry of listeners).
pub fn set_local_connector(f: Box<LocalConnector>) {
    let _ = LOCAL.set(f);
}

/// A connection and the moment it went idle.
struct Idle {
    conn: Box<dyn Stream>,
    since: Instant,
}

/// What a pooled connection is: its transport and the TLS on it.
type PoolKey = (Dest, Option<TlsTarget>);

fn pool() -> &'static Mutex<HashMap<PoolKey, Vec<Idle>>> {
    static POOL: OnceLock<Mutex<HashMap<PoolKey, Vec<Idle>>>> = OnceLock::new();
    POOL.get_or_init(Default::default)
}

/// A recently idle connection to `dest`, if the pool has one.
fn take_idle(dest: &PoolKey) -> Option<Box<dyn Stream>> {
    let mut p = pool().lock().unwrap_or_else(|e| e.into_inner());
    let list = p.get_mut(dest)?;
    while let Some(idle) = list.pop() {
        if idle.since.elapsed() < IDLE_TTL {
            return Some(idle.conn);
        }
    }
    None
}

fn put_idle(dest: PoolKey, conn: Box<dyn Stream>) {
    let mut p = pool().lock().unwrap_or_else(|e| e.into_inner());
    let list = p.entry(dest).or_default();
    if list.len() < MAX_IDLE {
        list.push(Idle {
            conn,
            since: Instant::now(),
        });
    }
}

/// How many idle connections the pool holds for `dest` (for tests).
#[cfg(test)]
pub(crate) fn idle_count(dest: &PoolKey) -> usize {
    let p = pool().lock().unwrap_or_else(|e| e.into_inner());
    p.get(dest).map_or(0, Vec::len)
}

/// Sends `req` and reads its response, within its timeouts.
pub(crate) async fn send(req: Request) -> Outcome {
    let start = Instant::now();
    let mut text = Vec::new();
    let work = exchange(&req, &mut text);
    let result = match req.timeout {
        Some(t) => match tokio::time::timeout(t, work).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "Timeout was reached (operation timed out after {} milliseconds)",
                t.as_millis()
            )),
        },
        None => work.await,
    };
    if let Err(e) = &result {
        crate::curl::count(crate::curl::Stat::Failed);
        if e.starts_with("Timeout was reached") {
            crate::curl::count(crate::curl::Stat::Timeouts);
        }
    }
    Outcome {
        result,
        took: start.elapsed(),
        text,
    }
}

async fn exchange(req: &Request, text: &mut Vec<String>) -> Result<Response, String> {
    // One key for the pool, taken from and given back to.
    let key = (req.dest.clone(), req.tls.clone());
    if let Some(conn) = take_idle(&key) {
        if req.trace {
            text.push(format!(
                "Re-using existing connection to {}",
                show(&req.dest)
            ));
        }
        match on_conn(conn, req, &key).await {
            Ok(r) => return Ok(r),
            // The server closed the idle connection before this request
            // reached it: try a fresh one, as libcurl does.
            Err(Fault::Stale) => {
                if req.trace {
                    text.push("Connection died, retrying a fresh connect".into());
                }
            }
            Err(Fault::Failed(e)) => return Err(e),
        }
    }
    let conn = connect(req).await?;
    if req.trace {
        text.push(format!("Connected to {}", show(&req.dest)));
    }
    match on_conn(conn, req, &key).await {
        Ok(r) => Ok(r),
        Err(Fault::Stale) => Err("Empty reply from server".into()),
        Err(Fault::Failed(e)) => Err(e),
    }
}

fn show(dest: &Dest) -> String {
    match dest {
        Dest::Tcp(h, p) => format!("{h} port {p}"),
        Dest::Unix(p) => format!("unix socket {p}"),
    }
}

async fn connect(req: &Request) -> Result<Box<dyn Stream>, String> {
    let work = async {
        let conn = transport(req).await?;
        match &req.tls {
            Some(t) => handshake(conn, t).await,
            None => Ok(conn),
        }
    };
    match req.connect_timeout {
        Some(t) => tokio::time::timeout(t, work).await.unwrap_or_else(|_| {
            Err(format!(
                "Timeout was reached (Connection timed out after {} milliseconds)",
                t.as_millis()
            ))
        }),
        None => work.await,
    }
}

/// The client configurations of every HTTPS call, by verify options.
fn connectors() -> &'static lacquer_tls::client::Connectors {
    static C: OnceLock<lacquer_tls::client::Connectors> = OnceLock::new();
    C.get_or_init(Default::default)
}

/// TLS on `conn` as `t` asks (after a proxy `CONNECT` when tunnelling),
/// with libcurl's messages for what fails.
async fn handshake(mut conn: Box<dyn Stream>, t: &TlsTarget) -> Result<Box<dyn Stream>, String> {
    if let Some(target) = &t.tunnel {
        conn = tunnel(conn, target).await?;
    }
    let config = connectors()
        .get(&t.spec)
        .map_err(|e| format!("Problem with the SSL CA cert (path? access rights?) ({e})"))?;
    let name = lacquer_tls::client::server_name(None, &t.name)
        .map_err(|e| format!("SSL connect error ({e})"))?;
    let tls = lacquer_tls::tokio_rustls::TlsConnector::from(config);
    match tls.connect(name, conn).await {
        Ok(s) => Ok(Box::new(s) as Box<dyn Stream>),
        Err(e) => {
            let why = lacquer_tls::client::describe(&e);
            Err(if why.contains("certificate rejected") {
                format!("SSL peer certificate or SSH remote key was not OK ({why})")
            } else {
                format!("SSL connect error ({why})")
            })
        }
    }
}

/// Asks an HTTP proxy for a tunnel to `target` (`host:port`).
async fn tunnel(mut conn: Box<dyn Stream>, target: &str) -> Result<Box<dyn Stream>, String> {
    let ask = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    conn.write_all(ask.as_bytes())
        .await
        .map_err(|e| format!("Failure when sending data to the peer ({e})"))?;
    let mut buf = BytesMut::with_capacity(1024);
    let limits = Limits::response();
    loop {
        if let Ok(Some((head, len))) = parse_response(&buf, &limits) {
            if !(200..300).contains(&head.status) {
                return Err(format!(
                    "Failure when receiving data from the peer (CONNECT tunnel failed, response {})",
                    head.status
                ));
            }
            if buf.len() > len {
                return Err("Weird server reply (data after the proxy's CONNECT answer)".into());
            }
            return Ok(conn);
        }
        if buf.len() > 64 * 1024 {
            return Err("Weird server reply (the proxy's CONNECT answer is too long)".into());
        }
        match conn.read_buf(&mut buf).await {
            Ok(0) => {
                return Err(
                    "Failure when receiving data from the peer (proxy closed the CONNECT)".into(),
                );
            }
            Ok(_) => {}
            Err(e) => return Err(recv_failed(&e)),
        }
    }
}

/// The connection under any TLS: TCP or a Unix socket.
async fn transport(req: &Request) -> Result<Box<dyn Stream>, String> {
    match &req.dest {
        Dest::Tcp(host, port) => {
            // Only plain HTTP: the host's in-process connections are to
            // its plain listeners.
            if req.tls.is_none()
                && let Some(s) = LOCAL.get().and_then(|f| f(host, *port))
            {
                return Ok(s);
            }
            let addrs: Vec<_> = tokio::net::lookup_host((host.as_str(), *port))
                .await
                .map_err(|_| {
                    format!("Couldn't resolve host name (Could not resolve host: {host})")
                })?
                .collect();
            let mut last = None;
            for a in addrs {
                match tokio::net::TcpStream::connect(a).await {
                    Ok(s) => {
                        s.set_nodelay(true).ok();
                        return Ok(Box::new(s) as Box<dyn Stream>);
                    }
                    Err(e) => last = Some(e),
                }
            }
            Err(format!(
                "Couldn't connect to server (Failed to connect to {host} port {port}: {})",
                last.map_or_else(|| "no address".to_string(), |e| e.to_string())
            ))
        }
        Dest::Unix(path) => match tokio::net::UnixStream::connect(path).await {
            Ok(s) => Ok(Box::new(s) as Box<dyn Stream>),
            Err(e) => Err(format!(
                "Couldn't connect to server (Failed to connect to unix socket {path}: {e})"
            )),
        },
    }
}

/// Why an exchange on one connection failed.
enum Fault {
    /// Nothing at all came back on a connection (closed while idle).
    Stale,
    Failed(String),
}

async fn on_conn(
    mut conn: Box<dyn Stream>,
    req: &Request,
    key: &PoolKey,
) -> Result<Response, Fault> {
    let sent = if req.body.is_empty() {
        conn.write_all(&req.head).await
    } else {
        // Head and body in one write.
        let mut out = Vec::with_capacity(req.head.len() + req.body.len());
        out.extend_from_slice(&req.head);
        out.extend_from_slice(&req.body);
        conn.write_all(&out).await
    };
    if sent.is_err() {
        return Err(Fault::Stale);
    }
    let mut buf = BytesMut::with_capacity(8192);
    let limits = Limits::response();
    let (head, raw_head) = loop {
        // Nothing to parse before the first read.
        match if buf.is_empty() {
            Ok(None)
        } else {
            parse_response(&buf, &limits)
        } {
            Ok(Some((head, len))) => {
                let raw = buf.split_to(len).freeze();
                // Interim responses (100 Continue) precede the real one.
                if (100..200).contains(&head.status) && head.status != 101 {
                    continue;
                }
                break (head, raw);
            }
            Ok(None) => {}
            Err(e) => return Err(Fault::Failed(format!("Weird server reply ({e})"))),
        }
        match conn.read_buf(&mut buf).await {
            Ok(0) if buf.is_empty() => return Err(Fault::Stale),
            Ok(0) => {
                return Err(Fault::Failed(
                    "Weird server reply (connection closed inside the response head)".into(),
                ));
            }
            Ok(_) => {}
            Err(_) if buf.is_empty() => return Err(Fault::Stale),
            Err(e) => {
                return Err(Fault::Failed(format!(
                    "Failure when receiving data from the peer ({e})"
                )));
            }
        }
    };
    let kind = if req.no_body {
        BodyKind::None
    } else {
        head.body_kind(false)
            .map_err(|e| Fault::Failed(format!("Weird server reply ({e})")))?
    };
    let mut body = Vec::new();
    let mut reusable = keep_alive(&head);
    match kind {
        BodyKind::None => {}
        BodyKind::Length(n) => {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if n > MAX_BODY {
                return Err(Fault::Failed(too_big()));
            }
            while buf.len() < n {
                match conn.read_buf(&mut buf).await {
                    Ok(0) => return Err(Fault::Failed(partial(n - buf.len()))),
                    Ok(_) => {}
                    Err(e) => return Err(Fault::Failed(recv_failed(&e))),
                }
            }
            body.extend_from_slice(&buf.split_to(n));
        }
        BodyKind::Chunked => {
            let mut dec = ChunkedDecoder::for_response(ChunkedLimits::default());
            loop {
                let (used, done) = dec.decode_to(&buf, &mut body).map_err(|e| {
                    Fault::Failed(format!("Problem (2) in the Chunked-Encoded data ({e})"))
                })?;
                let _ = buf.split_to(used);
                if body.len() > MAX_BODY {
                    return Err(Fault::Failed(too_big()));
                }
                if done {
                    break;
                }
                match conn.read_buf(&mut buf).await {
                    Ok(0) => {
                        return Err(Fault::Failed(
                            "transfer closed with outstanding read data remaining".into(),
                        ));
                    }
                    Ok(_) => {}
                    Err(e) => return Err(Fault::Failed(recv_failed(&e))),
                }
            }
        }
        BodyKind::Eof => {
            reusable = false;
            body.extend_from_slice(&buf.split());
            loop {
                match conn.read_buf(&mut body).await {
                    Ok(0) => break,
                    Ok(_) if body.len() > MAX_BODY => return Err(Fault::Failed(too_big())),
                    Ok(_) => {}
                    Err(e) => return Err(Fault::Failed(recv_failed(&e))),
                }
            }
        }
    }
    if reusable && buf.is_empty() {
        put_idle(key.clone(), conn);
    }
    Ok(Response {
        status: head.status,
        headers: head.headers,
        body,
        raw_head,
    })
}

fn keep_alive(head: &lacquer_http::ResponseHead) -> bool {
    if head.headers.has_token("connection", "close") {
        return false;
    }
    match head.version {
        lacquer_http::Version::Http11 => true,
        _ => head.headers.has_token("connection", "keep-alive"),
    }
}

fn too_big() -> String {
    format!("Maximum file size exceeded (response body over {MAX_BODY} bytes)")
}

fn partial(left: usize) -> String {
    format!("Transferred a partial file (transfer closed with {left} bytes remaining to read)")
}

fn recv_failed(e: &std::io::Error) -> String {
    format!("Failure when receiving data from the peer ({e})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A server that answers each request on a connection with `answer`,
    /// counting accepted connections.
    async fn server(
        answer: &'static [u8],
    ) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let conns = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c2 = conns.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                c2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut have = Vec::new();
                    loop {
                        let Ok(n) = s.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        have.extend_from_slice(&buf[..n]);
                        while let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                            have.drain(..end + 4);
                            if s.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (port, conns)
    }

    fn get(port: u16) -> Request {
        Request {
            dest: Dest::Tcp("127.0.0.1".into(), port),
            tls: None,
            head: format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").into_bytes(),
            body: Vec::new(),
            no_body: false,
            timeout: Some(Duration::from_secs(5)),
            connect_timeout: None,
            trace: false,
        }
    }

    #[test]
    fn decimals_are_pushed_as_display_prints_them() {
        for n in [0u128, 7, 10, 200, 65535, u128::from(u64::MAX)] {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }

    #[test]
    fn durations_print_as_six_decimals() {
        for (nanos, want) in [
            (0u64, "0.000000"),
            (5_000, "0.000005"),
            (1_234_567_890, "1.234568"),
            (100_000_400, "0.100000"),
            (999_999_600, "1.000000"),
            (12_000_000_000, "12.000000"),
        ] {
            let d = Duration::from_nanos(nanos);
            assert_eq!(Secs6(d).to_string(), want);
            assert_eq!(format!("{:.6}", d.as_secs_f64()), want);
            let mut out = b"x ".to_vec();
            Secs6(d).push_to(&mut out);
            assert_eq!(out, format!("x {want}").into_bytes());
        }
    }

    #[tokio::test]
    async fn chunked_responses_are_decoded_and_connections_reused() {
        let (port, conns) = server(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX: 1\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        )
        .await;
        for _ in 0..3 {
            let o = send(get(port)).await;
            let r = o.result.unwrap();
            assert_eq!((r.status, &r.body[..]), (200, &b"abc"[..]));
        }
        assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(idle_count(&(Dest::Tcp("127.0.0.1".into(), port), None)), 1);
    }

    #[tokio::test]
    async fn a_closing_server_gets_a_new_connection_each_time() {
        let (port, conns) = server(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n").await;
        for _ in 0..2 {
            assert_eq!(send(get(port)).await.result.unwrap().status, 204);
        }
        assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_refused_connection_says_so() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let e = send(get(port)).await.result.unwrap_err();
        assert!(e.starts_with("Couldn't connect to server"), "{e}");
    }

    #[tokio::test]
    async fn a_silent_server_times_out_on_time() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (_s, _) = l.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(10)).await;
        });
        let mut req = get(port);
        req.timeout = Some(Duration::from_millis(200));
        let o = send(req).await;
        assert!(o.result.unwrap_err().starts_with("Timeout was reached"));
        assert!(o.took >= Duration::from_millis(200) && o.took < Duration::from_millis(400));
    }

    #[tokio::test]
    async fn a_short_body_is_an_error() {
        let (port, _) =
            server(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nabc").await;
        // The server keeps the connection open after a short body: the
        // whole-call timeout ends the wait.
        let mut req = get(port);
        req.timeout = Some(Duration::from_millis(100));
        let e = send(req).await.result.unwrap_err();
        assert!(e.starts_with("Timeout was reached"), "{e}");
    }
}
