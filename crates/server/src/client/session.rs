//! Client sessions: accepting connections and reading requests off them.
//!
//! Lifecycle of a connection:
//!
//! 1. accepted (counted in `sess_conn`, logged `SessOpen`), refused at once
//!    while the cache is stopped;
//! 2. on a `PROXY` listener, read the PROXY protocol header first (within
//!    `timeout_idle`; junk, an overflow or a refused header closes the
//!    session as varnishd does) and take the client and server addresses
//!    it names;
//! 3. wait for a request head, at most `timeout_idle` (a closed or silent
//!    connection ends here);
//! 4. a malformed head gets a bare `400` and the connection closes; a good
//!    head becomes a request transaction run by [`crate::client::req_fsm::handle`];
//! 5. a request body stays on the connection until a pass streams it to
//!    the backend (only what `std.cache_req_body()` may keep is read before
//!    VCL runs); one nobody read is discarded before the response (or
//!    after it, for the few responses sent outside delivery), so the next
//!    pipelined request starts at the right byte (`crate::client::reqbody`);
//! 6. back to 3 while both sides keep the connection alive.
//!
//! Nothing here blocks a thread: a slow client costs one task. An idle
//! one costs little more than its socket: the requests of a busy spell run
//! in a boxed future of their own that holds the read buffer; once
//! `timeout_linger` passes between requests (nothing of the next one read
//! yet) that spell ends, the buffers go, and the session waits for the
//! socket to become readable (`sess_herd` counts these trips, as it counts
//! varnishd's sessions handed to its waiter). `timeout_idle` runs on.

use crate::pid;
use crate::runtime::counters::Main;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use lacquer_http::{BodyKind, Limits, parse_request_buf};
use lacquer_vsl::{Tag, VslBuf, Vxid};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, Sleep};

use crate::client::req_fsm::{After, ClientConn};
use crate::client::req_task::ReqTask;
use crate::runtime::msg::ReqMsg;
use crate::runtime::state::Shared;
use crate::runtime::task::{SessInfo, SessTimeouts};
use crate::runtime::ws::Workspace;
use crate::runtime::ws::size::{POINTER, SUCKADDR, TLV_HEAD};

fn timeouts(sh: &Shared) -> SessTimeouts {
    let p = sh.params();
    SessTimeouts {
        timeout_idle: p.duration(pid!("timeout_idle")),
        timeout_linger: p.duration(pid!("timeout_linger")),
        send_timeout: p.duration(pid!("send_timeout")),
        idle_send_timeout: p.duration(pid!("idle_send_timeout")),
    }
}

/// Serves one client connection until it closes.
///
/// `sock` is the handle VCL tunes the client socket through (on a Unix
/// socket only `SO_SNDBUF` applies).
pub async fn serve<S>(
    sh: Arc<Shared>,
    stream: S,
    sess: SessInfoArgs,
    sock: Option<crate::client::sock::SockCtl>,
) where
    S: AsyncRead + AsyncWrite + crate::client::sock::Readable + Unpin + Send,
{
    let t_open = lacquer_http::date::now();
    let Some(mut s) = Box::pin(open(sh, stream, sess, sock, t_open)).await else {
        return;
    };
    let svxid = s.svxid;
    // The requests of a busy spell are served by a future of their own,
    // boxed: its size (that of everything a request may await) is only
    // held while the client is active. Between spells the session keeps
    // no buffer either, and waits for the client's next bytes with
    // nothing but the socket and its timer (varnishd's waiter).
    let (reason, after_request) = loop {
        match Box::pin(requests(&mut s)).await {
            Turn::Idle(deadline) => {
                // The head that wakes the session must still be complete
                // by the same deadline.
                s.head_deadline = Some(deadline);
                // varnishd's count of sessions handed to its waiter.
                s.sh.counters.inc(Main::sess_herd);
                s.conn.rbuf = BytesMut::new();
                s.spare_log = Vec::new();
                drop(s.svsl.take_buffer());
                let ready = std::future::poll_fn(|cx| s.conn.stream.poll_readable(cx));
                tokio::select! {
                    biased;
                    r = ready => if r.is_err() {
                        s.sh.counters.inc(Main::sc_rem_close);
                        break ("REM_CLOSE", false);
                    },
                    () = lazy_sleep(s.idle_timer.as_mut(), deadline) => {
                        s.sh.counters.inc(Main::sc_rx_close_idle);
                        break ("RX_CLOSE_IDLE", false);
                    }
                }
            }
            Turn::H2(upgraded) => {
                let ctx = h2_ctx(&s.sh, &s.info, s.tmo, &s.sock, svxid);
                let rbuf = std::mem::take(&mut s.conn.rbuf);
                let h2 = crate::client::h2::serve(
                    ctx,
                    s.conn.stream,
                    rbuf,
                    &mut s.svsl,
                    upgraded.map(|u| *u),
                );
                // varnishd counts no `sess_closed` for an HTTP/2 session.
                break (Box::pin(h2).await, false);
            }
            Turn::End(reason) => break (reason, true),
            Turn::EndUncounted(reason) => break (reason, false),
        }
    };
    if reason == "RX_OVERFLOW"
        && let Some(sock) = &s.sock
    {
        sock.reset_on_close();
    }
    end(&s.sh, &mut s.svsl, t_open, reason, after_request)
}

/// Opens the session: logs it, reads a PROXY header on a `PROXY`
/// listener, and takes the session workspace's share. `None` when the
/// session ended there (already logged).
async fn open<S>(
    sh: Arc<Shared>,
    stream: S,
    sess: SessInfoArgs,
    sock: Option<crate::client::sock::SockCtl>,
    t_open: f64,
) -> Option<Sess<S>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let svxid = sh.vxid.next();
    sh.counters.inc(Main::sess_conn);
    sh.counters.inc(Main::s_sess);
    let mut svsl = VslBuf::new(sh.vsl.clone(), Vxid::client(svxid));
    svsl.log_str(
        Tag::Begin,
        if sess.proxy {
            "sess 0 PROXY"
        } else {
            "sess 0 HTTP/1"
        },
    );
    svsl.log(
        Tag::SessOpen,
        format_args!(
            "{} {} {} {} {} {:.6} 0",
            sess.client.ip(),
            sess.client.port(),
            sess.listener,
            sess.local.ip(),
            sess.local.port(),
            t_open
        ),
    );
    let mut conn = ClientConn {
        stream,
        rbuf: BytesMut::with_capacity(8192),
        h2: None,
    };
    let mut info = SessInfo {
        vxid: svxid,
        vxid_str: svxid.to_string(),
        client: sess.client,
        client_ip: bytes::Bytes::from(sess.client.ip().to_string()),
        client_port: sess.client.port().to_string(),
        server: sess.local,
        peer: sess.client,
        local: sess.local,
        listener: sess.listener.clone(),
        endpoint: sess.endpoint.clone(),
        proxy_tlvs: sess.tlvs,
    };
    let mut ws = Workspace::session(sh.params().bytes(pid!("workspace_session")));
    if sess.proxy {
        // SessOpen is visible while the header is awaited.
        svsl.flush();
        let idle = sh.params().duration("timeout_idle");
        let deadline = Instant::now() + secs(idle);
        match read_proxy(&mut conn, &mut svsl, &mut ws, deadline).await {
            Ok(p) => {
                if let Some(a) = p.addrs {
                    info.client = a.client;
                    info.client_ip = bytes::Bytes::from(a.client_ip);
                    info.client_port = a.client_port;
                    info.server = a.server;
                }
                info.proxy_tlvs = p.tlvs;
            }
            Err(WS_OVERFLOW) => {
                sh.counters.inc(Main::ws_session_overflow);
                sh.counters.inc(Main::sc_rx_junk);
                end(&sh, &mut svsl, t_open, "RX_JUNK", false);
                return None;
            }
            Err(reason) => {
                if reason == "RX_OVERFLOW"
                    && let Some(sock) = &sock
                {
                    sock.reset_on_close();
                }
                sh.counters.inc(match reason {
                    "RX_OVERFLOW" => Main::sc_rx_overflow,
                    "RX_TIMEOUT" => Main::sc_rx_timeout,
                    "REM_CLOSE" => Main::sc_rem_close,
                    _ => Main::sc_rx_junk,
                });
                end(&sh, &mut svsl, t_open, reason, false);
                return None;
            }
        }
    }
    // The HTTP/1 protocol's private data comes last.
    if !ws.take(POINTER) {
        svsl.log_str(Tag::Error, "insufficient workspace (proto_priv)");
        sh.counters.inc(Main::ws_session_overflow);
        sh.counters.inc(Main::sc_rx_junk);
        end(&sh, &mut svsl, t_open, "RX_JUNK", false);
        return None;
    }
    svsl.flush();
    let tmo = timeouts(&sh);
    // One idle timer for the connection's life, re-armed only when it
    // fires early (see `lazy_sleep`): no timer-wheel work per request.
    let idle_timer = Box::pin(tokio::time::sleep(secs(tmo.timeout_idle)));
    Some(Sess {
        sh,
        conn,
        svsl,
        info: Arc::new(info),
        ws,
        tmo,
        spare_log: Vec::new(),
        idle_timer,
        sock,
        svxid,
        head_deadline: None,
    })
}

/// What a session keeps from one request to the next.
struct Sess<S> {
    sh: Arc<Shared>,
    conn: ClientConn<S>,
    /// The session's own log records (`Link`s, `SessClose`).
    svsl: VslBuf,
    info: Arc<SessInfo>,
    ws: Workspace,
    tmo: SessTimeouts,
    /// The allocation each request's log buffer reuses from the one before.
    spare_log: Vec<u8>,
    idle_timer: Pin<Box<Sleep>>,
    sock: Option<crate::client::sock::SockCtl>,
    svxid: u32,
    /// When the next request's head must be complete, if a wait for it
    /// began in an earlier busy spell (before `timeout_linger` herded it).
    head_deadline: Option<Instant>,
}

/// An `h2c` upgrade: the request it carried and the client's settings.
type H2Upgrade = (crate::client::h2::Upgraded, Vec<(u16, u32)>);

/// How a busy spell of a session ends.
enum Turn {
    /// No new request within `timeout_linger`: the session waits without
    /// its buffers, at most until this deadline (`timeout_idle`).
    Idle(Instant),
    /// HTTP/2 takes the connection over: prior knowledge (`None`) or an
    /// `h2c` upgrade of this request with the client's settings (boxed: a
    /// request is large and this is rare).
    H2(Option<Box<H2Upgrade>>),
    /// The session closes after a request (varnishd's `H1CLEANUP`: a
    /// request answered, refused as bad, or its connection given up), for
    /// this reason: counted in `sess_closed`.
    End(&'static str),
    /// The session closes outside a request's cleanup: while waiting for
    /// a request's head (varnishd's `SES_DeleteHS` from `H1NEWREQ`) or in
    /// a failed `h2c` upgrade (an HTTP/2 session by then), for this
    /// reason: not counted in `sess_closed`.
    EndUncounted(&'static str),
}

/// A duration parameter (seconds) as a timer length, at least 1 ms.
fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.001))
}

/// Serves requests off the connection until the client goes quiet for
/// `timeout_linger` between requests, HTTP/2 takes over, or the session
/// ends.
async fn requests<S>(s: &mut Sess<S>) -> Turn
where
    S: AsyncRead + AsyncWrite + crate::client::sock::Readable + Unpin + Send,
{
    let Sess {
        sh,
        conn,
        svsl,
        info,
        ws,
        tmo,
        spare_log,
        idle_timer,
        sock,
        svxid,
        head_deadline,
    } = s;
    let svxid = *svxid;
    if spare_log.capacity() == 0 {
        spare_log.reserve(2048);
    }
    let mut linger_timer = std::pin::pin!(tokio::time::sleep(secs(tmo.timeout_linger)));
    loop {
        let params = sh.params();
        let limits = Limits {
            require_host: false,
            https_scheme: params.bit(pid!("feature"), "https_scheme"),
            ..Limits::from_varnish_params(
                params.bytes(pid!("http_req_hdr_len")) as usize,
                params.bytes(pid!("http_req_size")) as usize,
                params.uint(pid!("http_max_hdr")) as usize,
            )
        };
        drop(params);
        // 2. Wait for a complete head.
        let idle = secs(tmo.timeout_idle);
        let h2_on = sh.params().bit(pid!("feature"), "http2");
        // As varnishd's `HTC_RxStuff` from `t_idle`: the whole head must
        // come within `timeout_idle` of the session becoming idle, however
        // the client spreads its bytes (a trickled head is `RX_TIMEOUT`).
        let deadline = head_deadline
            .take()
            .unwrap_or_else(|| Instant::now() + idle);
        let head = loop {
            // As varnishd's `HTC_RxStuff`: a buffer of nothing but white
            // space (line ends left after the last request) is dropped,
            // neither part of the next request nor a request begun.
            if conn
                .rbuf
                .iter()
                .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
            {
                conn.rbuf.clear();
            }
            // A prior-knowledge preface is read whole, as varnishd does.
            let buffered = conn.rbuf.len();
            match lacquer_http::h2::preface_state(&conn.rbuf) {
                Some(true) => break Err(None),
                Some(false) if !conn.rbuf.is_empty() => {}
                _ => match parse_request_buf(&mut conn.rbuf, &limits) {
                    // ReqAcct counts the head's bytes as received (bare
                    // LF line ends, folds), as varnishd's rxbuf length.
                    Ok(Some(h)) => break Ok((h, buffered - conn.rbuf.len())),
                    Ok(None) => {}
                    Err(e) => break Err(Some(e)),
                },
            }
            conn.rbuf.reserve(8192);
            let now = Instant::now();
            // Between requests (nothing of the next one read yet) the
            // wait lasts `timeout_linger` with the buffers, then the
            // session waits on without them (see `serve`).
            let linger = (conn.rbuf.is_empty() && tmo.timeout_linger < tmo.timeout_idle)
                .then(|| (linger_timer.as_mut(), now + secs(tmo.timeout_linger)));
            match read_more(conn, idle_timer.as_mut(), deadline, linger).await {
                // As varnishd: idle without a byte of a request is not an
                // error, a request begun and not finished is.
                Wait::Timeout if conn.rbuf.is_empty() => {
                    sh.counters.inc(Main::sc_rx_close_idle);
                    return Turn::EndUncounted("RX_CLOSE_IDLE");
                }
                Wait::Timeout => {
                    sh.counters.inc(Main::sc_rx_timeout);
                    return Turn::EndUncounted("RX_TIMEOUT");
                }
                Wait::Linger => return Turn::Idle(deadline),
                Wait::Read(Ok(0)) | Wait::Read(Err(_)) => {
                    sh.counters.inc(Main::sc_rem_close);
                    return Turn::EndUncounted("REM_CLOSE");
                }
                Wait::Read(Ok(_)) => {}
            }
        };
        let (head, req_hdr_bytes) = match head {
            Ok(h) => h,
            // With HTTP/2 on the preface starts an HTTP/2 session, else
            // the session closes without an answer.
            Err(None) if h2_on => {
                svsl.log_str(Tag::Debug, "H2 Prior Knowledge Upgrade");
                return Turn::H2(None);
            }
            Err(None) => {
                sh.counters.inc(Main::sc_req_http20);
                return Turn::End("REQ_HTTP20");
            }
            Err(Some(e)) if e.status().is_none() => {
                // An oversized head: varnishd closes without an answer.
                sh.counters.inc(Main::sc_rx_overflow);
                svsl.log_str(Tag::Debug, e.message());
                return Turn::EndUncounted("RX_OVERFLOW");
            }
            Err(Some(e)) => {
                // As varnishd: the bad request is a transaction of its own,
                // answered with a bare status line, and the session ends.
                sh.counters.inc(Main::client_req_400);
                // As varnishd: whatever its request dissector refuses
                // (grammar, framing, Host, sizes) closes as RX_JUNK; only
                // a Connection header naming a protected header (its
                // http_DoConnection) is RX_BAD.
                //
                // Two Host or Content-Length fields pass varnishd's
                // dissector and are refused in vcl_recv's preamble
                // (cnt_recv): a client_req, closed as RX_BAD.
                let in_recv = matches!(
                    (e.kind(), e.message()),
                    (lacquer_http::ErrorKind::Host, "Multiple Host: headers")
                        | (
                            lacquer_http::ErrorKind::Framing,
                            "Multiple Content-Length: headers"
                        )
                );
                if in_recv {
                    sh.counters.inc(Main::client_req);
                }
                let junk = e.kind() != lacquer_http::ErrorKind::Connection && !in_recv;
                sh.counters.inc(if junk {
                    Main::sc_rx_junk
                } else {
                    Main::sc_rx_bad
                });
                let status = e.status().unwrap_or(400);
                let reason = crate::runtime::msg::reason(status);
                let out = format!("HTTP/1.1 {status} {reason}\r\n\r\n");
                let _ = conn.stream.write_all(out.as_bytes()).await;
                let _ = conn.stream.flush().await;
                let head = &conn.rbuf[..head_end(&conn.rbuf)];
                let vxid = sh.vxid.next();
                svsl.log(Tag::Link, format_args!("req {vxid} rxreq"));
                if !e.is_header_fault() {
                    svsl.log_str(Tag::Debug, e.message());
                }
                svsl.flush();
                let mut vsl = VslBuf::new(sh.vsl.clone(), Vxid::client(vxid));
                let now = lacquer_http::date::now();
                vsl.log(Tag::Begin, format_args!("req {svxid} rxreq"));
                vsl.log_timestamp("Start", now, 0.0, 0.0);
                vsl.log_timestamp("Req", now, 0.0, 0.0);
                if in_recv {
                    // The head passed the dissector: the request is logged
                    // as any other, then refused in vcl_recv's preamble
                    // with the reason as a BogoHeader (no HttpGarbage).
                    if let Some(vcl) = sh.active_vcl() {
                        vsl.log_str(Tag::VCL_use, &vcl.name);
                    }
                    crate::client::req_fsm::log_req_start(&mut vsl, info, &split_head(head));
                    vsl.log_str(Tag::BogoHeader, e.message());
                } else {
                    // A bad header line is the request's own record, as
                    // varnishd's header dissector logs it.
                    if e.is_header_fault() {
                        vsl.log_str(Tag::BogoHeader, e.message());
                    }
                    vsl.log_bytes(Tag::HttpGarbage, lacquer_http::parse::garbage(head));
                }
                end_refused(sh, &mut vsl, status, reason, head.len(), out.len());
                return Turn::End(if junk { "RX_JUNK" } else { "RX_BAD" });
            }
        };
        let body_kind = head.body;
        let expect = lacquer_http::expect(&head.headers);
        let mut req = ReqMsg::from(head);
        // `Upgrade: h2c` from a request without a body (HTTP/1.0 too, as
        // varnishd 7.1.1): the request becomes stream 1 of an HTTP/2
        // session.
        if h2_on && body_kind == BodyKind::None && req.headers.has_token("upgrade", "h2c") {
            svsl.log_str(Tag::Debug, "H2 Optimistic Upgrade");
            let Some(pairs) = req
                .headers
                .get("http2-settings")
                .and_then(crate::client::h2::upgrade_settings)
            else {
                svsl.log_str(Tag::Debug, "H2: Bad HTTP-Settings");
                crate::client::h2::log_failed_upgrade(sh, svsl, req_hdr_bytes as u64, &[], false);
                sh.counters.inc(Main::sc_rx_junk);
                return Turn::EndUncounted("RX_JUNK");
            };
            if conn
                .stream
                .write_all(crate::client::h2::RESP_101)
                .await
                .is_err()
            {
                sh.counters.inc(Main::sc_rem_close);
                return Turn::EndUncounted("REM_CLOSE");
            }
            // As varnishd's h2_ou_session: both fields are unset (and
            // logged so in the request's transaction).
            let unset = ["upgrade", "http2-settings"]
                .iter()
                .flat_map(|n| {
                    req.headers
                        .iter()
                        .filter(|(k, _)| k.eq_ignore_ascii_case(n.as_bytes()))
                        .map(|(k, v)| {
                            (
                                bytes::Bytes::copy_from_slice(k),
                                bytes::Bytes::copy_from_slice(v),
                            )
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            req.headers.remove("upgrade");
            req.headers.remove("http2-settings");
            req.proto = bytes::Bytes::from_static(b"HTTP/2.0");
            let up = crate::client::h2::Upgraded {
                req,
                hdr_bytes: req_hdr_bytes as u64,
                t_req: lacquer_http::date::now(),
                unset,
            };
            return Turn::H2(Some(Box::new((up, pairs))));
        }
        // Headers the client's Connection header names are hop-by-hop: VCL
        // still sees them in `req`, the backend request leaves them out
        // (varnishd's `http_DoConnection` marks them `HDF_FILTER`); naming a
        // well-known end-to-end header is refused with varnishd's minimal
        // 400 (`cnt_transport`).
        match crate::runtime::msg::connection_tokens(&req.headers) {
            Ok(tokens) => {
                for t in &tokens {
                    req.headers.mark_filtered(t);
                }
            }
            Err(name) => {
                // As varnishd's cnt_transport: a request of its own
                // (counted, and charged with its head and the 400).
                const R_400: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\r\n";
                sh.counters.inc(Main::client_req);
                sh.counters.inc(Main::client_req_400);
                sh.counters.inc(Main::sc_rx_bad);
                let sent = conn.stream.write_all(R_400).await.is_ok();
                svsl.log(
                    Tag::Debug,
                    format_args!(
                        "Connection names end-to-end header {}",
                        String::from_utf8_lossy(&name)
                    ),
                );
                let vxid = sh.vxid.next();
                log_req_link(svsl, Tag::Link, vxid);
                svsl.flush();
                let mut vsl = VslBuf::new(sh.vsl.clone(), Vxid::client(vxid));
                vsl.log(Tag::Begin, format_args!("req {svxid} rxreq"));
                let now = lacquer_http::date::now();
                vsl.log_timestamp("Start", now, 0.0, 0.0);
                vsl.log_timestamp("Req", now, 0.0, 0.0);
                if let Some(vcl) = sh.active_vcl() {
                    vsl.log_str(Tag::VCL_use, &vcl.name);
                }
                let tx = if sent { R_400.len() } else { 0 };
                end_refused(sh, &mut vsl, 400, "Bad Request", req_hdr_bytes, tx);
                return Turn::End("RX_BAD");
            }
        }
        let Some(vcl) = sh.active_vcl() else {
            let _ = conn
                .stream
                .write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await;
            return Turn::End("OVERLOAD");
        };
        let vxid = sh.vxid.next();
        log_req_link(svsl, Tag::Link, vxid);
        svsl.flush();
        let mut vsl = VslBuf::with_buffer(
            sh.vsl.clone(),
            Vxid::client(vxid),
            std::mem::take(spare_log),
        );
        let t_req = lacquer_http::date::now();
        log_req_link(&mut vsl, Tag::Begin, svxid);
        // As varnishd: Start and Req (the head is complete), then the VCL
        // the request runs on.
        vsl.log_timestamp("Start", t_req, 0.0, 0.0);
        vsl.log_timestamp("Req", t_req, 0.0, 0.0);
        vsl.log_str(Tag::VCL_use, &vcl.name);
        // As varnishd: an expectation other than 100-continue is refused
        // with a minimal response, the request's only records, and the
        // session ends.
        if expect == lacquer_http::Expect::Unsupported {
            // As varnishd, the refused request still went through the
            // request state machine (cnt_transport), so it is a client_req.
            sh.counters.inc(Main::client_req);
            sh.counters.inc(Main::client_req_417);
            sh.counters.inc(Main::sc_rx_junk);
            let out = b"HTTP/1.1 417 Expectation Failed\r\n\r\n";
            let _ = conn.stream.write_all(out).await;
            end_refused(
                sh,
                &mut vsl,
                417,
                "Expectation Failed",
                req_hdr_bytes,
                out.len(),
            );
            vsl.flush();
            return Turn::End("RX_JUNK");
        }
        // As varnishd: the Expect header is consumed here (logged as unset
        // before the request is), and `100 Continue` is only wanted from
        // an HTTP/1.1 client that has not already sent body bytes.
        let want_100 = expect == lacquer_http::Expect::Continue
            && &req.proto[..] != b"HTTP/1.0"
            && conn.rbuf.is_empty();
        if expect == lacquer_http::Expect::Continue {
            crate::client::req_fsm::consume_expect(&mut vsl, &mut req);
        }
        crate::client::req_fsm::log_req_start(&mut vsl, info, &req);
        let mut task = ReqTask::new(sh.clone(), vcl, info.clone(), *tmo, vxid, req, t_req, vsl);
        task.req_hdr_bytes = req_hdr_bytes as u64;
        task.sock = sock.clone();
        // The session's workspace is lent to the request and given back
        // when it ends.
        task.sess_ws = std::mem::replace(ws, Workspace::session(0));
        sh.counters.add(Main::s_req_hdrbytes, req_hdr_bytes as u64);
        // The request body stays on the connection (see crate::client::reqbody),
        // except what std.cache_req_body() may keep, read ahead here. A
        // client waiting for 100 Continue has sent nothing yet: the 100
        // goes out when vcl_recv returns or the body is read (only a
        // single-threaded runtime, which cannot run vcl_recv beside the
        // connection, sends it now for a VCL that may cache the body).
        let body_timeout = secs(tmo.timeout_idle);
        let defer_100 = want_100
            && (task.vcl.req_body_prefetch == 0
                || tokio::runtime::Handle::current().runtime_flavor()
                    == tokio::runtime::RuntimeFlavor::MultiThread);
        if body_kind == BodyKind::None {
            // As varnishd (cnt_recv): the 100 is owed whether a body
            // follows or not, and goes out when vcl_recv returns.
            task.want_100 = want_100;
        } else if defer_100 {
            task.want_100 = true;
            task.body_pending = Some(crate::client::reqbody::Pending::new(body_kind));
        } else {
            if want_100 {
                crate::client::reqbody::log_100(&mut task);
                if conn
                    .stream
                    .write_all(crate::client::reqbody::CONTINUE_100)
                    .await
                    .is_err()
                {
                    return Turn::End("REM_CLOSE");
                }
            }
            let ahead = crate::client::reqbody::take_ahead(
                &mut task,
                body_kind,
                &mut conn.stream,
                &mut conn.rbuf,
                body_timeout,
            )
            .await;
            if let Err(e) = ahead {
                return Turn::End(body_error(sh, &mut task, body_kind, e));
            }
        }
        let mut after = crate::client::req_fsm::handle(&mut task, conn).await;
        if task.body_rx_failed {
            // As V1F_SendReq and VRB_Ignore set doclose: SC_RX_BODY.
            after = After::CloseAs("RX_BODY");
        } else if task.body_broken && !matches!(after, After::CloseAs("RX_BODY")) {
            after = After::Close;
        }
        // A body nobody read is read now and thrown away, so the next
        // request starts at the right byte.
        if task.want_100 && task.body_pending.is_some() {
            // The client still waits for 100 Continue: its body never
            // comes, so the connection cannot carry another request.
            if matches!(after, After::KeepAlive) {
                after = After::Close;
            }
        } else if let Some(p) = task.body_pending.take()
            && !matches!(after, After::Close | After::CloseAs(_))
        {
            match p
                .discard(&mut conn.stream, &mut conn.rbuf, body_timeout)
                .await
            {
                Ok(n) => sh.counters.add(Main::s_req_bodybytes, n),
                Err(_) => after = After::CloseAs("RX_BODY"),
            }
        }
        task.ws.flush_trace(&mut task.vsl);
        task.vsl.log_str(Tag::End, "");
        if lacquer_vcl::exec::Workspace::overflowed(&task.ws) {
            sh.counters.inc(Main::ws_client_overflow);
        }
        *spare_log = task.vsl.take_buffer();
        *tmo = task.timeouts;
        *ws = std::mem::replace(&mut task.sess_ws, Workspace::session(0));
        let vcl_failed = task.vcl_failed;
        drop(task);
        // A VCL failure set the close reason first (cnt_vclfail); delivery
        // overrides it where varnishd's V1D_Deliver writes doclose again:
        // the fixed 500 of an overflowed workspace and an HTTP/1.0 body
        // without length both close as TX_EOF.
        if vcl_failed && !matches!(after, After::CloseAs("TX_EOF")) {
            sh.counters.inc(Main::sc_vcl_failure);
            return Turn::End("VCL_FAILURE");
        }
        match after {
            // As varnishd's H1CLEANUP: bytes of the next request already
            // read when one ends (pipelining) count, not those read with
            // a PROXY header or after an idle wait.
            After::KeepAlive if !conn.rbuf.is_empty() => sh.counters.inc(Main::sess_readahead),
            After::KeepAlive => {}
            After::Close => return Turn::End("REQ_CLOSE"),
            After::CloseAs(reason) => {
                sh.counters.inc(match reason {
                    "REQ_HTTP10" => Main::sc_req_http10,
                    "RESP_CLOSE" => Main::sc_resp_close,
                    "TX_EOF" => Main::sc_tx_eof,
                    "RANGE_SHORT" => Main::sc_range_short,
                    "RX_BODY" => Main::sc_rx_body,
                    _ => Main::sc_req_close,
                });
                return Turn::End(reason);
            }
            After::TxFailed(e) => {
                sh.counters.inc(match e {
                    crate::client::txio::TxError::Closed
                    | crate::client::txio::TxError::Aborted => Main::sc_rem_close,
                    crate::client::txio::TxError::Failed => Main::sc_tx_error,
                });
                return Turn::End(e.close_reason());
            }
            After::Overload => {
                sh.counters.inc(Main::sc_overload);
                return Turn::End("OVERLOAD");
            }
            After::Piped(true) => {
                sh.counters.inc(Main::sc_tx_pipe);
                return Turn::End("TX_PIPE");
            }
            After::Piped(false) => {
                sh.counters.inc(Main::sc_tx_error);
                return Turn::End("TX_ERROR");
            }
        }
    }
}

/// What an HTTP/2 session taking over this connection shares with its
/// streams.
fn h2_ctx(
    sh: &Arc<Shared>,
    info: &Arc<SessInfo>,
    tmo: SessTimeouts,
    sock: &Option<crate::client::sock::SockCtl>,
    svxid: u32,
) -> Arc<crate::client::h2::SessCtx> {
    Arc::new(crate::client::h2::SessCtx {
        sh: sh.clone(),
        info: info.clone(),
        tmo,
        sock: sock.clone(),
        svxid,
    })
}

/// `req VXID rxreq`: the session's `Link` to a request, or the request's
/// `Begin` naming its session.
fn log_req_link(vsl: &mut VslBuf, tag: Tag, vxid: u32) {
    vsl.log_with(tag, |o| {
        o.extend_from_slice(b"req ");
        lacquer_vsl::push_u64(o, u64::from(vxid));
        o.extend_from_slice(b" rxreq");
    });
}

/// How a wait for the client's bytes ended.
enum Wait {
    Read(std::io::Result<usize>),
    /// `timeout_idle` passed.
    Timeout,
    /// `timeout_linger` passed.
    Linger,
}

/// Reads more of the client's bytes, until `deadline` (with `timer`) or
/// the optional linger deadline (with its own timer).
async fn read_more<S>(
    conn: &mut ClientConn<S>,
    timer: Pin<&mut Sleep>,
    deadline: Instant,
    linger: Option<(Pin<&mut Sleep>, Instant)>,
) -> Wait
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let linger = async {
        match linger {
            Some((t, at)) => lazy_sleep(t, at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        r = conn.stream.read_buf(&mut conn.rbuf) => Wait::Read(r),
        () = lazy_sleep(timer, deadline) => Wait::Timeout,
        () = linger => Wait::Linger,
    }
}

/// Sleeps until `at` on `timer`, which may be armed for an earlier
/// deadline (a previous wait's): when it fires early it is moved to `at`
/// and the wait goes on, so the common case — the client is back in time —
/// never touches the timer wheel.
async fn lazy_sleep(mut timer: Pin<&mut Sleep>, at: Instant) {
    if timer.deadline() > at {
        timer.as_mut().reset(at);
    }
    loop {
        timer.as_mut().await;
        if Instant::now() >= at {
            return;
        }
        timer.as_mut().reset(at);
    }
}

/// Reads and parses the PROXY header a `PROXY` listener expects before
/// HTTP, within `deadline` (the session's `timeout_idle`), logging what
/// varnishd logs. Bytes after the header stay in the read buffer as the
/// start of the first request. `Err` is the session close reason: junk,
/// an overflow, a timeout, the client closing, or a header refused.
async fn read_proxy<S>(
    conn: &mut ClientConn<S>,
    svsl: &mut VslBuf,
    ws: &mut Workspace,
    deadline: Instant,
) -> Result<lacquer_http::proxy::Proxied, &'static str>
where
    S: AsyncRead + Unpin,
{
    use lacquer_http::proxy::{Record, Scan, parse, scan};
    loop {
        match scan(&conn.rbuf) {
            Scan::Complete(n) => {
                let header = conn.rbuf.split_to(n);
                let parsed = parse(&header);
                // As varnishd: the addresses and the client's address as
                // text go into the session workspace before the Proxy
                // record, the TLVs after it.
                if let Ok(p) = &parsed.result
                    && let Some(a) = &p.addrs
                    && !(ws.take(SUCKADDR)
                        && ws.take(SUCKADDR)
                        && ws.take(a.client_ip.len() as u64 + 1)
                        && ws.take(a.client_port.len() as u64 + 1))
                {
                    svsl.log_str(Tag::Error, "insufficient workspace");
                    return Err(WS_OVERFLOW);
                }
                for r in &parsed.log {
                    match r {
                        Record::Proxy(t) => svsl.log_str(Tag::Proxy, t),
                        Record::Garbage(t) => svsl.log_str(Tag::ProxyGarbage, t),
                    }
                }
                let p = parsed.result.map_err(|()| "RX_JUNK")?;
                if p.version == 2
                    && p.addrs.is_some()
                    && !(ws.take(TLV_HEAD + p.tlvs.len() as u64) && ws.take(POINTER))
                {
                    svsl.log_str(Tag::Error, "insufficient workspace");
                    return Err(WS_OVERFLOW);
                }
                return Ok(p);
            }
            Scan::Junk => return Err("RX_JUNK"),
            Scan::Overflow => return Err("RX_OVERFLOW"),
            Scan::More => {}
        }
        conn.rbuf.reserve(2048);
        match tokio::time::timeout_at(deadline, conn.stream.read_buf(&mut conn.rbuf)).await {
            Err(_) => return Err("RX_TIMEOUT"),
            Ok(Ok(0)) | Ok(Err(_)) => return Err("REM_CLOSE"),
            Ok(Ok(_)) => {}
        }
    }
}

/// `read_proxy`'s answer when the session workspace overflowed.
const WS_OVERFLOW: &str = "WS_OVERFLOW";

/// A request body could not be read ahead: the request's transaction ends
/// and so does the session, silently, as varnishd's (the body's
/// `FetchError`, then `SC_RX_BODY`).
fn body_error(
    sh: &Shared,
    task: &mut ReqTask,
    kind: BodyKind,
    e: crate::fetch::bodyio::BodyIoError,
) -> &'static str {
    crate::client::reqbody::log_pull_error(&mut task.vsl, kind, &e);
    // varnishd meets the fault in vcl_recv (std.cache_req_body()), so the
    // request went through its state machine: a client_req.
    sh.counters.inc(Main::client_req);
    // The request's transaction ends here, with nothing sent.
    let (rx, tx) = (task.req_hdr_bytes, task.interim_hdr_bytes);
    sh.counters.add(Main::s_resp_hdrbytes, tx);
    task.vsl
        .log(Tag::ReqAcct, format_args!("{rx} 0 {rx} {tx} 0 {tx}"));
    task.vsl.log_str(Tag::End, "");
    task.vsl.flush();
    sh.counters.inc(Main::sc_rx_body);
    "RX_BODY"
}

/// A request head the dissector accepted but the request rules refused
/// (two Host or Content-Length fields), split into its first-line fields
/// and its header lines as received, for the request's log records.
fn split_head(head: &[u8]) -> ReqMsg {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .skip_while(|l| l.is_empty());
    let first = lines.next().unwrap_or_default();
    let mut fields = first
        .split(|&b| b == b' ' || b == b'\t')
        .filter(|f| !f.is_empty())
        .map(bytes::Bytes::copy_from_slice);
    let mut req = ReqMsg {
        method: fields.next().unwrap_or_default(),
        url: fields.next().unwrap_or_default(),
        proto: fields.next().unwrap_or_default(),
        headers: lacquer_http::Headers::new(),
    };
    for line in lines.take_while(|l| !l.is_empty()) {
        let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
        let value = line.get(colon + 1..).unwrap_or_default().trim_ascii();
        req.headers.append(
            bytes::Bytes::copy_from_slice(&line[..colon]),
            bytes::Bytes::copy_from_slice(value),
        );
    }
    req
}

/// Ends the transaction of a request refused with a bare status line
/// before VCL ran (varnishd's minimal responses): the answer logged as a
/// response, the head's `rx` bytes and the answer's `tx` bytes charged and
/// in `ReqAcct`.
fn end_refused(sh: &Shared, vsl: &mut VslBuf, status: u16, reason: &str, rx: usize, tx: usize) {
    vsl.log_str(Tag::RespProtocol, "HTTP/1.1");
    vsl.log(Tag::RespStatus, format_args!("{status}"));
    vsl.log_str(Tag::RespReason, reason);
    sh.counters.add(Main::s_req_hdrbytes, rx as u64);
    sh.counters.add(Main::s_resp_hdrbytes, tx as u64);
    vsl.log(Tag::ReqAcct, format_args!("{rx} 0 {rx} {tx} 0 {tx}"));
    vsl.log_str(Tag::End, "");
}

/// Where the (bad) head in `buf` ends: after its blank line, or all of
/// `buf` when there is none.
fn head_end(buf: &[u8]) -> usize {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(buf.len()),
    }
}

/// Logs the session's end. `after_request`: the close was decided while
/// serving a request, the only case varnishd counts in `sess_closed`
/// (`HTTP1_Session`'s `H1CLEANUP`); a client that leaves or times out
/// between requests, a PROXY header refused and an HTTP/2 session are not.
fn end(sh: &Shared, svsl: &mut VslBuf, t_open: f64, reason: &str, after_request: bool) {
    if after_request {
        sh.counters.inc(Main::sess_closed);
    }
    if close_is_error(reason) {
        sh.counters.inc(Main::sess_closed_err);
    }
    svsl.log(
        Tag::SessClose,
        format_args!("{reason} {:.3}", lacquer_http::date::now() - t_open),
    );
    svsl.log_str(Tag::End, "");
    svsl.flush();
}

/// Whether varnishd counts a session closed for `reason` in
/// `sess_closed_err` (its table of close reasons marks these errors).
fn close_is_error(reason: &str) -> bool {
    matches!(
        reason,
        "REQ_HTTP10"
            | "RX_BAD"
            | "RX_BODY"
            | "RX_JUNK"
            | "RX_OVERFLOW"
            | "RX_TIMEOUT"
            | "TX_ERROR"
            | "OVERLOAD"
            | "PIPE_OVERFLOW"
            | "RANGE_SHORT"
            | "REQ_HTTP20"
            | "VCL_FAILURE"
    )
}

/// What the acceptor knows about a new connection.
#[derive(Clone, Debug)]
pub struct SessInfoArgs {
    pub client: SocketAddr,
    pub local: SocketAddr,
    pub listener: Arc<str>,
    pub endpoint: Arc<str>,
    /// The listener expects a PROXY protocol header first (`-a …,PROXY`).
    pub proxy: bool,
    /// PROXY v2 TLV bytes the connection brings by itself: what Lacquer's
    /// own TLS handshake negotiated (`crate::client::tls`), empty otherwise.
    pub tlvs: Vec<u8>,
}

impl SessInfoArgs {
    /// A connection accepted on the listener `listener` (written as
    /// `endpoint` on the command line) from `client` to `local`; `proxy`
    /// when the listener expects a PROXY header. It brings no TLVs of its
    /// own (TLS termination adds them).
    pub fn new(
        client: SocketAddr,
        local: SocketAddr,
        listener: Arc<str>,
        endpoint: Arc<str>,
        proxy: bool,
    ) -> SessInfoArgs {
        SessInfoArgs {
            client,
            local,
            listener,
            endpoint,
            proxy,
            tlvs: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{head_end, split_head};

    #[test]
    fn refused_head_splits_into_its_lines() {
        let r = split_head(b"GET  /x HTTP/1.1\r\nHost: a\r\nHost:b \r\n\r\n");
        assert_eq!(
            (&r.method[..], &r.url[..], &r.proto[..]),
            (&b"GET"[..], &b"/x"[..], &b"HTTP/1.1"[..])
        );
        let lines: Vec<_> = r
            .headers
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        assert_eq!(
            lines,
            vec![
                (b"Host".to_vec(), b"a".to_vec()),
                (b"Host".to_vec(), b"b".to_vec())
            ]
        );
    }

    #[test]
    fn bad_head_ends_at_its_first_blank_line() {
        assert_eq!(head_end(b"GET\n\nGET / HTTP/1.1\r\n\r\n"), 5);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"), 24);
        assert_eq!(head_end(b"GET / HTT"), 9);
    }
}
