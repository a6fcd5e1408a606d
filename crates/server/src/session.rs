//! Client sessions: accepting connections and reading requests off them.
//!
//! Lifecycle of a connection:
//!
//! 1. accepted (counted in `sess_conn`, logged `SessOpen`), refused at once
//!    while the cache is stopped;
//! 2. wait for a request head, at most `timeout_idle` (a closed or silent
//!    connection ends here);
//! 3. a malformed head gets a bare `400` and the connection closes; a good
//!    head becomes a request transaction run by [`crate::req::handle`];
//! 4. a request body is read completely before VCL runs (at most 64 MiB,
//!    held in memory), so the next pipelined request starts at the right
//!    byte and VCL can inspect the body;
//! 5. back to 2 while both sides keep the connection alive.
//!
//! Nothing here blocks a thread: a slow client costs one task.

use crate::counters::Main;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use lacquer_http::{BodyKind, Limits, parse_request_buf};
use lacquer_vsl::{Tag, VslBuf, Vxid};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::bodyio::BodyStream;
use crate::msg::{ReqMsg, RespMsg};
use crate::req::{After, ClientConn};
use crate::rfc2616;
use crate::state::Shared;
use crate::task::{ReqTask, SessInfo, SessTimeouts};

fn timeouts(sh: &Shared) -> SessTimeouts {
    let p = sh.params();
    SessTimeouts {
        timeout_idle: p.duration("timeout_idle"),
        timeout_linger: p.duration("timeout_linger"),
        send_timeout: p.duration("send_timeout"),
        idle_send_timeout: p.duration("idle_send_timeout"),
    }
}

/// Serves one client connection until it closes.
pub async fn serve<S>(sh: Arc<Shared>, stream: S, sess: SessInfoArgs)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let t_open = rfc2616::now();
    let svxid = sh.vxid.next();
    let info = Arc::new(SessInfo {
        vxid: svxid,
        vxid_str: svxid.to_string(),
        client: sess.client,
        client_ip: bytes::Bytes::from(sess.client.ip().to_string()),
        local: sess.local,
        listener: sess.listener.clone(),
        endpoint: sess.endpoint.clone(),
        unix: sess.unix,
    });
    sh.counters.inc(Main::sess_conn);
    sh.counters.inc(Main::s_sess);
    let mut svsl = VslBuf::new(sh.vsl.clone(), Vxid::client(svxid));
    svsl.log_str(Tag::Begin, "sess 0 HTTP/1");
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
    svsl.flush();
    let mut conn = ClientConn {
        stream,
        rbuf: BytesMut::with_capacity(8192),
    };
    let mut tmo = timeouts(&sh);
    let reason = loop {
        if !conn.rbuf.is_empty() {
            // The client sent the next request before the previous answer.
            sh.counters.inc(Main::sess_readahead);
        }
        let params = sh.params();
        let limits = Limits {
            require_host: false,
            https_scheme: params.bit("feature", "https_scheme"),
            ..Limits::from_varnish_params(
                params.bytes("http_req_hdr_len") as usize,
                params.bytes("http_req_size") as usize,
                params.uint("http_max_hdr") as usize,
            )
        };
        drop(params);
        // 2. Wait for a complete head.
        let idle = Duration::from_secs_f64(tmo.timeout_idle.max(0.001));
        let head = loop {
            match parse_request_buf(&mut conn.rbuf, &limits) {
                Ok(Some(h)) => break Ok(h),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            conn.rbuf.reserve(8192);
            match tokio::time::timeout(idle, conn.stream.read_buf(&mut conn.rbuf)).await {
                Err(_) => {
                    sh.counters.inc(Main::sc_rx_timeout);
                    return end(&sh, &mut svsl, t_open, "RX_TIMEOUT");
                }
                Ok(Ok(0)) | Ok(Err(_)) => {
                    sh.counters.inc(Main::sc_rem_close);
                    return end(&sh, &mut svsl, t_open, "REM_CLOSE");
                }
                Ok(Ok(_)) => {}
            }
        };
        let head = match head {
            Ok(h) => h,
            Err(e) if e.status().is_none() => {
                // An oversized head: varnishd closes without an answer.
                sh.counters.inc(Main::sc_rx_overflow);
                svsl.log_str(Tag::Debug, e.message());
                break "RX_OVERFLOW";
            }
            Err(e) => {
                // As varnishd: the bad request is a transaction of its own,
                // answered with a bare status line, and the session ends.
                sh.counters.inc(Main::client_req_400);
                let junk = e.kind() == lacquer_http::ErrorKind::Malformed;
                sh.counters.inc(if junk {
                    Main::sc_rx_junk
                } else {
                    Main::sc_rx_bad
                });
                let status = e.status().unwrap_or(400);
                let reason = crate::msg::reason(status);
                let out = format!("HTTP/1.1 {status} {reason}\r\n\r\n");
                let _ = conn.stream.write_all(out.as_bytes()).await;
                let _ = conn.stream.flush().await;
                let head = &conn.rbuf[..head_end(&conn.rbuf)];
                let vxid = sh.vxid.next();
                svsl.log(Tag::Link, format_args!("req {vxid} rxreq"));
                svsl.log_str(Tag::Debug, e.message());
                svsl.flush();
                let mut vsl = VslBuf::new(sh.vsl.clone(), Vxid::client(vxid));
                let now = rfc2616::now();
                vsl.log(Tag::Begin, format_args!("req {svxid} rxreq"));
                vsl.log_timestamp("Start", now, 0.0, 0.0);
                vsl.log_timestamp("Req", now, 0.0, 0.0);
                vsl.log_bytes(Tag::HttpGarbage, head);
                vsl.log_str(Tag::RespProtocol, "HTTP/1.1");
                vsl.log(Tag::RespStatus, format_args!("{status}"));
                vsl.log_str(Tag::RespReason, reason);
                let (rx, tx) = (head.len(), out.len());
                sh.counters.add(Main::s_req_hdrbytes, rx as u64);
                sh.counters.add(Main::s_resp_hdrbytes, tx as u64);
                vsl.log(Tag::ReqAcct, format_args!("{rx} 0 {rx} {tx} 0 {tx}"));
                vsl.log_str(Tag::End, "");
                break if junk { "RX_JUNK" } else { "RX_BAD" };
            }
        };
        let req_hdr_bytes = crate::msg::request_head_len(&head);
        let body_kind = head.body;
        let expect = lacquer_http::expect(&head.headers);
        let mut req = ReqMsg::from(head);
        // Headers the client's Connection header names are hop-by-hop and
        // go no further; naming a well-known end-to-end header is refused.
        match crate::msg::connection_tokens(&req.headers) {
            Ok(tokens) => crate::msg::drop_connection_tokens(&mut req.headers, &tokens),
            Err(name) => {
                sh.counters.inc(Main::client_req_400);
                sh.counters.inc(Main::sc_rx_bad);
                let _ = conn
                    .stream
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                    .await;
                svsl.log(
                    Tag::Debug,
                    format_args!(
                        "Connection names end-to-end header {}",
                        String::from_utf8_lossy(&name)
                    ),
                );
                break "RX_BAD";
            }
        }
        if expect == lacquer_http::Expect::Unsupported {
            sh.counters.inc(Main::client_req_417);
            let _ = conn
                .stream
                .write_all(b"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\n\r\n")
                .await;
            break "RX_JUNK";
        }
        let Some(vcl) = sh.active_vcl() else {
            let _ = conn
                .stream
                .write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await;
            break "OVERLOAD";
        };
        let vxid = sh.vxid.next();
        svsl.log(Tag::Link, format_args!("req {vxid} rxreq"));
        svsl.flush();
        let mut vsl = VslBuf::with_capacity(sh.vsl.clone(), Vxid::client(vxid), 2048);
        let t_req = rfc2616::now();
        vsl.log(Tag::Begin, format_args!("req {svxid} rxreq"));
        // As varnishd: Start and Req (the head is complete), then the VCL
        // the request runs on.
        vsl.log_timestamp("Start", t_req, 0.0, 0.0);
        vsl.log_timestamp("Req", t_req, 0.0, 0.0);
        vsl.log_str(Tag::VCL_use, &vcl.name);
        crate::req::log_req_start(&mut vsl, &info, &req);
        let mut task = ReqTask {
            sh: sh.clone(),
            vcl,
            sess: info.clone(),
            timeouts: tmo,
            vxid,
            vxid_str: vxid.to_string(),
            req_orig: req.clone(),
            req,
            t_req,
            restarts: 0,
            client_identity: None,
            backend_hint: None,
            ttl: None,
            grace: None,
            hash_always_miss: false,
            hash_ignore_busy: false,
            hash_ignore_vary: false,
            esi: false,
            is_hitmiss: false,
            is_hitpass: false,
            is_hit: false,
            storage: None,
            hash: None,
            purging: false,
            vcl_failed: false,
            req_hdr_bytes: req_hdr_bytes as u64,
            req_body_bytes: 0,
            acct_record: None,
            piped: false,
            digest: None,
            resp: RespMsg::new(200),
            obj: None,
            synth_body: Vec::new(),
            vsl,
            privs: Default::default(),
            req_body: None,
            req_body_failed: false,
            now: t_req,
            cur_sub: lacquer_vcl::subs::BuiltinSub::Recv,
            t_last: t_req,
        };
        task.backend_hint = task.vcl.default_backend();
        sh.counters.add(Main::s_req_hdrbytes, req_hdr_bytes as u64);
        // The request body is read before VCL runs, so that VCL (and
        // std.cache_req_body) can use it and a pass can forward it.
        if body_kind != BodyKind::None {
            if expect == lacquer_http::Expect::Continue
                && conn
                    .stream
                    .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                    .await
                    .is_err()
            {
                break "REM_CLOSE";
            }
            let mut s = BodyStream::new(body_kind, false);
            let t = Duration::from_secs_f64(tmo.timeout_idle.max(0.001));
            match s
                .collect(&mut conn.stream, &mut conn.rbuf, t, MAX_REQ_BODY)
                .await
            {
                Ok(b) => {
                    sh.counters.add(Main::s_req_bodybytes, b.len() as u64);
                    task.req_body_bytes = b.len() as u64;
                    task.req_body = Some(b);
                }
                Err(e) => {
                    task.vsl
                        .log(Tag::ReqAcct, format_args!("body read error: {e}"));
                    task.vsl.flush();
                    sh.counters.inc(Main::sc_rx_body);
                    // A body that never completes (timeout, EOF) ends the
                    // session silently, as varnishd; bad framing gets a 400.
                    if matches!(e, crate::bodyio::BodyIoError::Framing(_)) {
                        let _ = conn
                            .stream
                            .write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                            .await;
                    }
                    break "RX_BODY";
                }
            }
        }
        let after = crate::req::handle(&mut task, &mut conn).await;
        let now = rfc2616::now();
        if !task.piped {
            task.vsl
                .log_timestamp("Resp", now, now - t_req, now - task.t_last);
        }
        if let Some((tag, rec)) = task.acct_record.take() {
            task.vsl.log_str(tag, &rec);
        }
        task.vsl.log_str(Tag::End, "");
        task.vsl.flush();
        tmo = task.timeouts;
        let vcl_failed = task.vcl_failed;
        drop(task);
        if vcl_failed {
            sh.counters.inc(Main::sc_vcl_failure);
            break "VCL_FAILURE";
        }
        if after == After::Close {
            break "REQ_CLOSE";
        }
    };
    end(&sh, &mut svsl, t_open, reason)
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

fn end(sh: &Shared, svsl: &mut VslBuf, t_open: f64, reason: &str) {
    sh.counters.inc(Main::sess_closed);
    svsl.log(
        Tag::SessClose,
        format_args!("{reason} {:.3}", rfc2616::now() - t_open),
    );
    svsl.log_str(Tag::End, "");
    svsl.flush();
}

/// The largest request body Lacquer accepts (it is held in memory).
const MAX_REQ_BODY: u64 = 64 << 20;

/// What the acceptor knows about a new connection.
#[derive(Clone, Debug)]
pub struct SessInfoArgs {
    pub client: SocketAddr,
    pub local: SocketAddr,
    pub listener: Arc<str>,
    pub endpoint: Arc<str>,
    pub unix: bool,
}

#[cfg(test)]
mod tests {
    use super::head_end;

    #[test]
    fn bad_head_ends_at_its_first_blank_line() {
        assert_eq!(head_end(b"GET\n\nGET / HTTP/1.1\r\n\r\n"), 5);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"), 24);
        assert_eq!(head_end(b"GET / HTT"), 9);
    }
}
