//! One HTTP/2 stream as the request state machine sees its connection:
//! [`StreamIo`] reads the request body from the stream's DATA frames and
//! takes response body bytes as DATA frames, within the peer's flow
//! control windows (a write waits while either window is closed or the
//! connection's send queue is full); [`StreamHead`] sends the response
//! head as a HEADERS frame. [`run`] is the stream's task: it runs the
//! request through [`crate::client::req_fsm::handle`] exactly as an HTTP/1 request,
//! then ends the stream.
//!
//! The connection task (`super`) owns the socket; streams talk to it only
//! through the ordered `Out` channel and the [`Flow`] windows, whose lock
//! is taken in poll functions only (never across an `.await`).

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use lacquer_http::BodyKind;
use lacquer_vsl::{Tag, VslBuf, Vxid};
use std::future::Future;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use crate::client::req_fsm::ClientConn;
use crate::client::req_task::ReqTask;
use crate::runtime::counters::Main;
use crate::runtime::msg::ReqMsg;
use crate::runtime::state::Shared;
use crate::runtime::task::{SessInfo, SessTimeouts};

/// Most response bytes queued for the socket before writers wait.
const QUEUE_MAX: usize = 256 * 1024;

/// What a stream asks the connection task to send, in order.
#[derive(Debug)]
pub(crate) enum Out {
    /// A response head (HPACK block), split into HEADERS and CONTINUATION
    /// frames by the connection; `end` closes the stream with it.
    Headers { sid: u32, block: Vec<u8>, end: bool },
    /// Body bytes, already charged to the send windows.
    Data { sid: u32, data: Vec<u8> },
    /// The stream's task read this many bytes of its body: the receive
    /// window may be opened again.
    Consumed { sid: u32, n: u32 },
    /// The stream's task is done: the response ends (an empty DATA frame
    /// with END_STREAM unless it has ended already).
    Done { sid: u32 },
    /// The stream gives up (a send timeout): RST_STREAM with `code`,
    /// `why` logged on the session.
    Reset {
        sid: u32,
        code: u32,
        why: &'static str,
    },
}

/// The send side of flow control, shared by the connection task and the
/// stream tasks.
#[derive(Debug)]
pub(crate) struct Flow {
    /// The connection's send window.
    pub conn_window: i64,
    pub streams: HashMap<u32, TxStream>,
    /// Body bytes handed to the connection task and not written yet.
    pub queued: usize,
    pub queue_waiters: Vec<Waker>,
    /// The peer's SETTINGS_MAX_FRAME_SIZE.
    pub max_frame: usize,
    /// The connection is gone: every write fails.
    pub dead: bool,
}

/// One stream's send window.
#[derive(Debug)]
pub(crate) struct TxStream {
    pub window: i64,
    pub waker: Option<Waker>,
    /// Reset by the peer (or by an error): writes fail.
    pub reset: bool,
}

impl Flow {
    /// Wakes every writer (windows opened, the queue drained, or the
    /// connection ended).
    pub fn wake_all(&mut self) {
        for w in self.queue_waiters.drain(..) {
            w.wake();
        }
        for s in self.streams.values_mut() {
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
    }
}

/// A piece of request body as the connection received it (padding
/// removed), or the stream's reset.
pub(crate) type RxChunk = Result<Bytes, ()>;

/// The request state machine's view of a stream: request body in, response
/// body out.
pub struct StreamIo {
    sid: u32,
    flow: Arc<Mutex<Flow>>,
    out: mpsc::UnboundedSender<Out>,
    rx: mpsc::UnboundedReceiver<RxChunk>,
    pending: Bytes,
    /// Body bytes accepted for sending (shared with the [`StreamHead`]).
    sent: Arc<AtomicU64>,
    /// `send_timeout` and `idle_send_timeout` as the stream started.
    send_timeout: Duration,
    idle_send_timeout: Duration,
    /// When the response started going out, and since when a write has
    /// been waiting for the peer to open a window.
    t_send: Option<Instant>,
    t_winupd: Option<Instant>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl StreamIo {
    /// A write waits for a window: within `idle_send_timeout` of the wait's
    /// start and `send_timeout` of the response's, else the stream is
    /// cancelled (as varnishd's stream timeouts).
    fn wait_window(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let now = Instant::now();
        let since = *self.t_winupd.get_or_insert(now);
        let idle_end = since + self.idle_send_timeout;
        let send_end = self.t_send.unwrap_or(now) + self.send_timeout;
        let why = if now >= idle_end {
            Some("Hit idle_send_timeout waiting for WINDOW_UPDATE")
        } else if now >= send_end {
            Some("Hit send_timeout")
        } else {
            None
        };
        if let Some(why) = why {
            let _ = self.out.send(Out::Reset {
                sid: self.sid,
                code: lacquer_http::h2::code::CANCEL,
                why,
            });
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)));
        }
        let deadline = tokio::time::Instant::from_std(idle_end.min(send_end));
        let t = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        t.as_mut().reset(deadline);
        if t.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "HTTP/2 stream closed")
}

impl AsyncWrite for StreamIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let me = self.get_mut();
        me.t_send.get_or_insert_with(Instant::now);
        let mut f = me.flow.lock().expect("flow lock");
        if f.dead {
            return Poll::Ready(Err(closed()));
        }
        if f.queued >= QUEUE_MAX {
            f.queue_waiters.push(cx.waker().clone());
            return Poll::Pending;
        }
        let conn_window = f.conn_window;
        let max_frame = f.max_frame;
        let Some(s) = f.streams.get_mut(&me.sid) else {
            return Poll::Ready(Err(closed()));
        };
        if s.reset {
            return Poll::Ready(Err(closed()));
        }
        let w = s.window.min(conn_window);
        if w <= 0 {
            s.waker = Some(cx.waker().clone());
            drop(f);
            return me.wait_window(cx);
        }
        me.t_winupd = None;
        let n = buf.len().min(w as usize).min(max_frame);
        s.window -= n as i64;
        f.conn_window -= n as i64;
        f.queued += n;
        drop(f);
        me.sent.fetch_add(n as u64, Ordering::Relaxed);
        if me
            .out
            .send(Out::Data {
                sid: me.sid,
                data: buf[..n].to_vec(),
            })
            .is_err()
        {
            return Poll::Ready(Err(closed()));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for StreamIo {
    /// Takes as much of the received body as fits (varnishd drains its
    /// whole receive buffer at once), then tells the connection how much
    /// was consumed so that it can open the stream's window again.
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let mut took = 0usize;
        let result = loop {
            if !me.pending.is_empty() {
                let n = me.pending.len().min(buf.remaining());
                buf.put_slice(&me.pending.split_to(n));
                took += n;
            }
            if buf.remaining() == 0 {
                break Poll::Ready(Ok(()));
            }
            match me.rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(data))) => me.pending = data,
                // The end of the body (what was taken first goes up).
                Poll::Ready(None) => break Poll::Ready(Ok(())),
                Poll::Ready(Some(Err(()))) if took == 0 => {
                    break Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "HTTP/2 stream reset",
                    )));
                }
                Poll::Ready(Some(Err(()))) => {
                    // Reported on the next read.
                    me.rx.close();
                    break Poll::Ready(Ok(()));
                }
                Poll::Pending if took == 0 => break Poll::Pending,
                Poll::Pending => break Poll::Ready(Ok(())),
            }
        };
        if took > 0 {
            let _ = me.out.send(Out::Consumed {
                sid: me.sid,
                n: took as u32,
            });
        }
        result
    }
}

/// Sends a stream's response head.
pub struct StreamHead {
    sid: u32,
    out: mpsc::UnboundedSender<Out>,
    sent: Arc<AtomicU64>,
}

impl StreamHead {
    /// Queues the HPACK `block` as the response head; `end` ends the
    /// stream with it (no body follows). Fails once the connection is gone.
    pub fn send(&self, block: Vec<u8>, end: bool) -> Result<(), crate::client::txio::TxError> {
        self.out
            .send(Out::Headers {
                sid: self.sid,
                block,
                end,
            })
            .map_err(|_| crate::client::txio::TxError::Closed)
    }

    /// Response body bytes the stream has sent (within the peer's
    /// windows: what a reset stream never sent is not counted).
    pub fn body_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

/// A timeout parameter as a duration (very long when not finite).
fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_finite() { s.max(0.001) } else { 1e9 })
}

/// Everything a stream task needs from its connection.
pub(crate) struct StreamCtx {
    pub sh: Arc<Shared>,
    pub info: Arc<SessInfo>,
    pub tmo: SessTimeouts,
    pub sock: Option<crate::client::sock::SockCtl>,
    pub sid: u32,
    pub svxid: u32,
    pub vxid: u32,
    pub flow: Arc<Mutex<Flow>>,
    pub out: mpsc::UnboundedSender<Out>,
    pub rx: mpsc::UnboundedReceiver<RxChunk>,
    /// The fields an `h2c` upgrade took out of the request.
    pub unset: Vec<(Bytes, Bytes)>,
}

/// Runs one request received on stream `c.sid`: its head `req` came in
/// `hdr_bytes` bytes of header block; its body, if any, follows in DATA
/// frames (`body`).
pub(crate) async fn run(c: StreamCtx, req: ReqMsg, hdr_bytes: u64, body: BodyKind, t_req: f64) {
    let sh = c.sh.clone();
    let sid = c.sid;
    let out = c.out.clone();
    let sent = Arc::new(AtomicU64::new(0));
    let head = StreamHead {
        sid,
        out: c.out.clone(),
        sent: sent.clone(),
    };
    let io = StreamIo {
        sid,
        flow: c.flow.clone(),
        out: c.out,
        rx: c.rx,
        pending: Bytes::new(),
        sent,
        send_timeout: secs(c.tmo.send_timeout),
        idle_send_timeout: secs(c.tmo.idle_send_timeout),
        t_send: None,
        t_winupd: None,
        timer: None,
    };
    let mut conn = ClientConn {
        stream: io,
        rbuf: BytesMut::new(),
        h2: Some(head),
    };
    let mut vsl = VslBuf::new(sh.vsl.clone(), Vxid::client(c.vxid));
    vsl.log(Tag::Begin, format_args!("req {} rxreq", c.svxid));
    vsl.log_timestamp("Start", t_req, 0.0, 0.0);
    for (k, v) in &c.unset {
        vsl.log_header(Tag::ReqUnset, k, v);
    }
    // As varnishd's h2_new_req: the protocol is set (and logged) when the
    // stream's request is made, before its fields are.
    vsl.log_str(Tag::ReqProtocol, "HTTP/2.0");
    vsl.log_timestamp("Req", t_req, 0.0, 0.0);
    serve_request(
        sh, &c.info, c.tmo, c.sock, &mut conn, req, hdr_bytes, body, t_req, vsl, c.vxid,
    )
    .await;
    let _ = out.send(Out::Done { sid });
}

/// The request's transaction on the stream, from its VCL to its End.
#[allow(clippy::too_many_arguments)]
async fn serve_request(
    sh: Arc<Shared>,
    info: &Arc<SessInfo>,
    tmo: SessTimeouts,
    sock: Option<crate::client::sock::SockCtl>,
    conn: &mut ClientConn<StreamIo>,
    req: ReqMsg,
    hdr_bytes: u64,
    body: BodyKind,
    t_req: f64,
    mut vsl: VslBuf,
    vxid: u32,
) {
    let Some(vcl) = sh.active_vcl() else {
        minimal_response(conn, &mut vsl, 503);
        vsl.log(
            Tag::ReqAcct,
            format_args!("{hdr_bytes} 0 {hdr_bytes} 0 0 0"),
        );
        vsl.log_str(Tag::End, "");
        return;
    };
    vsl.log_str(Tag::VCL_use, &vcl.name);
    let mut req = req;
    let expect = lacquer_http::expect(&req.headers);
    if expect == lacquer_http::Expect::Unsupported {
        // As varnishd (h2_do_req counts every request the state machine
        // finished, cnt_transport's 417 included).
        sh.counters.inc(Main::client_req);
        sh.counters.inc(Main::client_req_417);
        minimal_response(conn, &mut vsl, 417);
        vsl.log(
            Tag::ReqAcct,
            format_args!("{hdr_bytes} 0 {hdr_bytes} 0 0 0"),
        );
        vsl.log_str(Tag::End, "");
        return;
    }
    // As on HTTP/1: the Expect header is consumed (logged as unset
    // before the request is), and a body still to come is asked for
    // with an interim 100.
    let want_100 = expect == lacquer_http::Expect::Continue && body != BodyKind::None;
    if expect == lacquer_http::Expect::Continue {
        crate::client::req_fsm::consume_expect(&mut vsl, &mut req);
    }
    crate::client::req_fsm::log_req_start(&mut vsl, info, &req);
    if req.headers.count("host") > 1 {
        // As varnishd's vcl_recv entry check: a bare 400.
        vsl.log_str(Tag::BogoHeader, "Multiple Host: headers");
        // Counted as a request, as h2_do_req counts every request the
        // state machine finished.
        sh.counters.inc(Main::client_req);
        sh.counters.inc(Main::client_req_400);
        minimal_response(conn, &mut vsl, 400);
        sh.counters.add(Main::s_req_hdrbytes, hdr_bytes);
        vsl.log(
            Tag::ReqAcct,
            format_args!("{hdr_bytes} 0 {hdr_bytes} 0 0 0"),
        );
        vsl.log_str(Tag::End, "");
        return;
    }
    let mut task = ReqTask::new(sh.clone(), vcl, info.clone(), tmo, vxid, req, t_req, vsl);
    task.req_hdr_bytes = hdr_bytes;
    task.sock = sock;
    task.h2 = true;
    sh.counters.add(Main::s_req_hdrbytes, hdr_bytes);
    let body_timeout = std::time::Duration::from_secs_f64(tmo.timeout_idle.max(0.001));
    let mut ok = true;
    // As varnishd, the owed 100 goes out when vcl_recv returns (or the
    // body is read), unless a std.cache_req_body() in this VCL reads the
    // body ahead of it: then it goes out now.
    let prefetch = task.vcl.req_body_prefetch > 0;
    if body != BodyKind::None {
        if want_100
            && prefetch
            && let Some(h) = &conn.h2
        {
            log_100(&mut task.vsl);
            let mut block = Vec::new();
            lacquer_http::h2::encode_response_head(100, std::iter::empty(), &mut block);
            let _ = h.send(block, false);
        }
        let ahead = crate::client::reqbody::take_ahead(
            &mut task,
            body,
            &mut conn.stream,
            &mut conn.rbuf,
            body_timeout,
        )
        .await;
        if let Err(e) = ahead {
            task.vsl
                .log(Tag::FetchError, format_args!("req.body read error: {e}"));
            let rx = task.req_hdr_bytes;
            task.vsl
                .log(Tag::ReqAcct, format_args!("{rx} 0 {rx} 0 0 0"));
            ok = false;
        }
        task.want_100 = want_100 && !prefetch;
    }
    if ok {
        crate::client::req_fsm::handle(&mut task, conn).await;
    }
    task.ws.flush_trace(&mut task.vsl);
    task.vsl.log_str(Tag::End, "");
    if lacquer_vcl::exec::Workspace::overflowed(&task.ws) {
        sh.counters.inc(Main::ws_client_overflow);
    }
}

/// Logs an interim `100 Continue` on a stream as varnishd's
/// `h2_minimal_response` does.
pub(crate) fn log_100(vsl: &mut VslBuf) {
    vsl.log_str(Tag::RespProtocol, "HTTP/2.0");
    vsl.log_str(Tag::RespStatus, "100");
    vsl.log_str(Tag::RespReason, "Continue");
}

/// A response of just a status (varnishd's `minimal_response`), ending
/// the stream.
pub(crate) fn minimal_response(conn: &mut ClientConn<StreamIo>, vsl: &mut VslBuf, status: u16) {
    vsl.log_str(Tag::RespProtocol, "HTTP/2.0");
    vsl.log(Tag::RespStatus, format_args!("{status:03}"));
    vsl.log_str(Tag::RespReason, crate::runtime::msg::reason(status));
    let mut block = Vec::new();
    lacquer_http::h2::encode_response_head(status, std::iter::empty(), &mut block);
    if let Some(h) = &conn.h2 {
        let _ = h.send(block, status >= 200);
    }
}
