//! The backend fetch state machine: from a prepared `bereq` to an object in
//! the cache (or a private one for pass), as varnishd's `cache_fetch.c`.
//!
//! ```text
//! vcl_backend_fetch ──fetch──▶ connect, send, read head ──▶ vcl_backend_response
//!       │ error                     │ failure                   │ deliver: unbusy, stream body
//!       ▼                           ▼                           │ retry ──▶ (again, ≤ max_retries)
//! vcl_backend_error ◀───────────────┘                           │ error ──▶ vcl_backend_error
//!       │ deliver: synthetic object      retry ──▶ (again)      │ abandon/fail ──▶ failed
//! ```
//!
//! A fetch runs in its own task: a client that goes away never stops it,
//! and every client waiting on the object reads the one stored copy as it
//! arrives. The client that started it learns the outcome through a oneshot
//! channel as soon as the object's headers exist (or, without
//! `beresp.do_stream`, when its body is complete).

use crate::pid;
use crate::runtime::counters::Main;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use lacquer_cache::{BusyObj, NewBody, NewObject, ObjKind, ObjMeta, ObjRef, PiecePlan};
use lacquer_http::{BodyKind, Limits, parse_response_buf};
use lacquer_vcl::exec::{Action, Scratch, Workspace as _};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vsl::{Tag, push_u64};
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;

use crate::backend::pool::ConnectError;
use crate::fetch::bo_task::BoTask;
use crate::fetch::bodyio::{BodyIoError, BodyStream};
use crate::fetch::gzip::FetchChain;
use crate::fetch::rfc2616::{self, Defaults, RespInfo};
use crate::runtime::msg::RespMsg;
use crate::runtime::vcls::BackendRt;
use crate::runtime::ws::{header_len, size};

/// A segment for the fetch, or why the body could not be read. An empty
/// segment marks the end of the body: a channel that closes without it
/// means the body is incomplete.
pub type Segment = Result<Bytes, String>;

/// The body as a fetch sends it.
#[derive(Debug)]
pub enum FetchBody {
    None,
    /// Kept in memory: sent with `Content-Length`, again on a retry.
    Cached(Bytes),
    /// Streamed from the client: sent once, with the client's framing
    /// (`Length`) or chunked. `go` tells the client side that the fetch
    /// sends it now: as varnishd (the body is read by `V1F_SendReq`), a
    /// fetch that never sends it (an error or abandon in
    /// vcl_backend_fetch, `unset bereq.body`) leaves it on the client
    /// connection unread.
    Stream {
        length: Option<u64>,
        rx: tokio::sync::mpsc::Receiver<Segment>,
        go: Option<tokio::sync::oneshot::Sender<()>>,
    },
    /// Streamed already: it cannot be sent again (no retry).
    Taken,
}

/// What the fetch is for.
pub enum FetchMode {
    /// A cache miss: fill `busy`; `stale` (within keep) allows revalidation.
    Miss {
        busy: BusyObj,
        stale: Option<ObjRef>,
    },
    /// A hit-for-miss: fill `busy`, nobody waits on it; the object replaces
    /// the hit-for-miss `marker`.
    HitMiss { busy: BusyObj, marker: ObjRef },
    /// A grace hit's background refresh.
    Background { busy: BusyObj, stale: ObjRef },
    /// A pass: the object is private to the requesting client.
    Pass,
}

/// What the requesting client gets.
#[derive(Debug)]
pub enum FetchOutcome {
    /// Deliver this object (complete, or still streaming from a fetch
    /// that handed it over at its end).
    Object(ObjRef),
    /// Deliver this object, handed over before its body was fetched
    /// (varnishd's `BOS_STREAM`): the request that started the fetch
    /// frames its response as varnishd's does for a fetch in progress,
    /// however fast the body then arrives.
    Streaming(ObjRef),
    /// The fetch failed without an object: the client answers 503.
    Failed,
}

/// A fetch ready to run.
pub struct FetchJob {
    pub bo: BoTask,
    pub mode: FetchMode,
    /// The client request body, for a pass.
    pub req_body: FetchBody,
    pub notify: Option<oneshot::Sender<FetchOutcome>>,
}

enum Step {
    /// The fetch failed: run vcl_backend_error with this status/reason
    /// (reason None: default).
    Error(u16, Option<Bytes>),
    /// VCL returned `error(...)`: vcl_backend_error runs, but the fetch
    /// did not fail (`fetch_failed` is not counted).
    VclError(u16, Option<Bytes>),
    Fail,
}

/// The connection, head and body framing of a backend response.
struct Fetched {
    /// The stale object's body a 304 refreshed.
    reuse: Option<lacquer_storage::Body>,
    conn: crate::backend::pool::Conn,
    backend: Arc<BackendRt>,
    rbuf: BytesMut,
    body: BodyKind,
    /// The request went out with `Connection: close`, or the response
    /// came with it (or as HTTP/1.0 without keep-alive): the connection is
    /// not reused, whatever VCL does to the headers afterwards.
    close: bool,
    /// Body bytes read from the backend so far (unchunked, before any
    /// filter): what `BereqAcct` and `VBE.*.beresp_bodybytes` count.
    body_read: u64,
}

/// The reason of the 503 a failed fetch produces.
const FETCH_FAILED: &[u8] = b"Backend fetch failed";

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_finite() && s > 0.0 { s } else { 0.0 })
}

/// Runs a fetch to completion.
pub async fn run(mut job: FetchJob) {
    let max_retries = job.bo.sh.params().uint(pid!("max_retries")) as u32;
    let mut scratch = Scratch::default();
    job.bo.vsl.log(
        Tag::Begin,
        format_args!(
            "bereq {} {}",
            job.bo.req_vxid,
            match job.mode {
                FetchMode::Background { .. } => "bgfetch",
                FetchMode::Pass => "pass",
                _ => "fetch",
            }
        ),
    );
    job.bo.vsl.log_timestamp("Start", job.bo.t_bereq, 0.0, 0.0);
    let vcl = job.bo.vcl.clone();
    job.bo.vsl.log_str(Tag::VCL_use, &vcl.name);
    add_conditionals(&mut job);
    log_bereq(&mut job.bo);
    loop {
        let step = attempt(&mut job, &mut scratch).await;
        let (status, reason) = match step {
            Ok(()) => break,
            Err(Step::Fail) => {
                fail(&mut job);
                break;
            }
            Err(Step::Error(s, r)) => {
                job.bo.sh.counters.inc(Main::fetch_failed);
                (s, r)
            }
            Err(Step::VclError(s, r)) => (s, r),
        };
        match backend_error(&mut job, &mut scratch, status, reason).await {
            ErrorNext::Done => break,
            ErrorNext::Retry if no_retry(&mut job) => {
                fail(&mut job);
                break;
            }
            ErrorNext::Retry if job.bo.retries < max_retries => {
                job.bo.retries += 1;
                retry_step(&mut job.bo);
                continue;
            }
            ErrorNext::Retry => {
                job.bo
                    .vsl
                    .log_str(Tag::VCL_Error, "Too many retries, failing");
                fail(&mut job);
                break;
            }
            ErrorNext::Fail => {
                fail(&mut job);
                break;
            }
        }
    }
    if job.bo.ws.overflowed() {
        job.bo.sh.counters.inc(Main::ws_backend_overflow);
    }
    job.bo.ws.flush_trace(&mut job.bo.vsl);
    job.bo.charge_backend();
    job.bo.end_privs();
    let acct = job.bo.acct.record();
    job.bo.vsl.log_str(Tag::BereqAcct, &acct);
    job.bo.vsl.log_str(Tag::End, "");
    job.bo.vsl.flush();
}

/// A request body streamed from the client is gone once sent: as varnishd,
/// such a fetch cannot be retried (logged, and the fetch fails).
fn no_retry(job: &mut FetchJob) -> bool {
    if !matches!(job.req_body, FetchBody::Taken) {
        return false;
    }
    job.bo
        .vsl
        .log_str(Tag::Error, "Retry not possible, req.body not cached");
    true
}

fn fail(job: &mut FetchJob) {
    if let Some(n) = job.notify.take() {
        let _ = n.send(FetchOutcome::Failed);
    }
    match std::mem::replace(&mut job.mode, FetchMode::Pass) {
        FetchMode::Miss { busy, .. }
        | FetchMode::HitMiss { busy, .. }
        | FetchMode::Background { busy, .. } => busy.fail(),
        FetchMode::Pass => {}
    }
}

/// As varnishd's vbf_stp_retry: a retry goes on under a new vxid. The old
/// transaction gets its `Retry` timestamp and ends with a `Link` to the new
/// one, which begins with `bereq <old> retry` and logs the bereq again.
/// `beresp.do_esi` and `beresp.do_stream` start over (`do_gzip` and
/// `do_gunzip` do not, as in varnishd).
fn retry_step(bo: &mut BoTask) {
    bo.do_esi = false;
    bo.do_stream = true;
    let now = lacquer_http::date::now();
    bo.log_ts("Retry", now);
    let new = bo.sh.vxid.next();
    bo.vsl.log(Tag::Link, format_args!("bereq {new} retry"));
    bo.vsl.log_str(Tag::End, "");
    bo.vsl.flush();
    let old = bo.vxid;
    bo.vxid = new;
    bo.vxid_str = new.to_string();
    bo.vsl.set_vxid(lacquer_vsl::Vxid::backend(new));
    bo.vsl.log(Tag::Begin, format_args!("bereq {old} retry"));
    bo.vsl
        .log_timestamp("Start", bo.t_last, bo.t_last - bo.t_bereq, 0.0);
    log_bereq(bo);
}

/// As varnishd's vbf_stp_startfetch on a retry: the bereq keeps what the
/// attempt before did to it, and its `X-Varnish` is taken out and put back
/// last (after a `Host` the first attempt's backend added).
fn renew_x_varnish(bo: &mut BoTask) {
    let old: Vec<Bytes> = bo
        .bereq
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(b"x-varnish"))
        .map(|(_, v)| Bytes::copy_from_slice(v))
        .collect();
    for v in &old {
        bo.vsl.log_header(Tag::BereqUnset, b"X-Varnish", v);
    }
    bo.bereq.headers.remove("x-varnish");
    let xv = bo.vxid.to_string();
    bo.vsl
        .log_header(Tag::BereqHeader, b"X-Varnish", xv.as_bytes());
    bo.bereq.headers.append("X-Varnish", xv);
}

/// One pass through vcl_backend_fetch, the backend and vcl_backend_response,
/// repeated on `retry`.
async fn attempt(job: &mut FetchJob, scratch: &mut Scratch) -> Result<(), Step> {
    let max_retries = job.bo.sh.params().uint(pid!("max_retries")) as u32;
    loop {
        if job.bo.retries > 0 {
            renew_x_varnish(&mut job.bo);
        }
        let vcl = job.bo.vcl.clone();
        job.bo.now = lacquer_http::date::now();
        match vcl
            .run_async(BuiltinSub::BackendFetch, &mut job.bo, scratch)
            .await
        {
            // As varnishd's vbe_dir_gethdr: the connection state is the
            // first thing the fetch takes from its workspace; without room
            // for it the request is not sent. An overflow VCL only marked
            // (vtc.workspace_overflow) leaves the room, and the fetch goes on.
            Action::Fetch if !job.bo.ws.take(size::HTC) => {
                job.bo.ws.flush_trace(&mut job.bo.vsl);
                job.bo.vsl.log_str(Tag::FetchError, "out of workspace");
                return Err(Step::Error(503, Some(Bytes::from_static(FETCH_FAILED))));
            }
            Action::Fetch => job.bo.log_ts("Fetch", lacquer_http::date::now()),
            Action::Error { status, reason } => return Err(Step::VclError(status, reason)),
            Action::Abandon | Action::Fail => return Err(Step::Fail),
            other => {
                job.bo
                    .vsl
                    .log(Tag::VCL_Error, format_args!("illegal return {other:?}"));
                return Err(Step::Fail);
            }
        }
        // Not a number until a response head is stamped (send_and_receive).
        job.bo.t_beresp = f64::NAN;
        let fetched = match send_and_receive(job).await {
            Ok(f) => f,
            Err(e) => {
                if let NoResponse::FetchError(msg) = &e {
                    job.bo.vsl.log_str(Tag::FetchError, msg);
                }
                // As varnishd's vbf_stp_startfetch: the Beresp stamp is
                // taken whether or not a response came.
                if job.bo.t_beresp.is_nan() {
                    let now = lacquer_http::date::now();
                    job.bo.t_beresp = now;
                    job.bo.log_ts("Beresp", now);
                }
                return Err(Step::Error(503, Some(Bytes::from_static(FETCH_FAILED))));
            }
        };
        job.bo.now = lacquer_http::date::now();
        job.bo.t_beresp = job.bo.now;
        job.bo.beresp_has_body = !matches!(fetched.body, BodyKind::None | BodyKind::Length(0));
        job.bo.vfp_filters = None;
        compute_ttl(&mut job.bo);
        let mut fetched = fetched;
        job.bo.fast_304 = false;
        fetched.reuse = merge_304(job)?;
        job.bo.beresp_dropped = false;
        let action = vcl
            .run_async(BuiltinSub::BackendResponse, &mut job.bo, scratch)
            .await;
        // As varnishd (VRG_CheckBo right after vcl_backend_response): a
        // response that does not match the range asked for fails the
        // fetch, whatever vcl_backend_response decided; the error object
        // keeps the status and reason of a `return (error(..))` it chose
        // (`bo->err_code`), else 503.
        if job.bo.sh.params().flag(pid!("http_range_support"))
            && let Err(e) = crate::fetch::range::check_backend_range(
                job.bo.bereq_orig.headers.get("range"),
                job.bo.beresp.status,
                job.bo.beresp.headers.get("content-length"),
                job.bo.beresp.headers.get("content-range"),
            )
        {
            job.bo.vsl.log_str(Tag::Error, &e);
            drain_and_let_go(&mut job.bo, fetched).await;
            return Err(match action {
                Action::Error { status, reason } => Step::Error(status, reason),
                _ => Step::Error(503, Some(Bytes::from_static(FETCH_FAILED))),
            });
        }
        if job.bo.beresp_dropped && matches!(action, Action::Deliver | Action::Pass { .. }) {
            // As varnishd: the rollback let go of the response.
            let_go(&mut job.bo, fetched);
            job.bo
                .vsl
                .log_str(Tag::FetchError, "No backend connection (rollback?)");
            return Err(Step::Error(503, Some(Bytes::from_static(FETCH_FAILED))));
        }
        if matches!(action, Action::Deliver | Action::Pass { .. }) {
            job.bo.log_ts("Process", lacquer_http::date::now());
        }
        match action {
            Action::Deliver => {
                let Some(fetched) = refresh_in_place(job, fetched) else {
                    return Ok(());
                };
                return deliver(job, fetched, None).await;
            }
            Action::Pass { ttl } => {
                return deliver(job, fetched, Some(ttl.unwrap_or(job.bo.ttl))).await;
            }
            Action::Retry => {
                let_go(&mut job.bo, fetched);
                if no_retry(job) {
                    return Err(Step::Fail);
                }
                if job.bo.retries >= max_retries {
                    job.bo.retries += 1;
                    // As varnishd: out of retries here means a 503 from
                    // vcl_backend_error, not an outright failure.
                    job.bo
                        .vsl
                        .log_str(Tag::VCL_Error, "Too many retries, delivering 503");
                    return Err(Step::Error(503, Some(Bytes::from_static(FETCH_FAILED))));
                }
                job.bo.retries += 1;
                retry_step(&mut job.bo);
                continue;
            }
            Action::Error { status, reason } => return Err(Step::VclError(status, reason)),
            Action::Abandon | Action::Fail => return Err(Step::Fail),
            other => {
                job.bo
                    .vsl
                    .log(Tag::VCL_Error, format_args!("illegal return {other:?}"));
                return Err(Step::Fail);
            }
        }
    }
}

/// Why a fetch got no response it can use.
enum NoResponse {
    /// The `FetchError` to log.
    FetchError(String),
    /// A response whose body cannot be read: its records are written.
    Logged,
}

impl From<String> for NoResponse {
    fn from(msg: String) -> Self {
        NoResponse::FetchError(msg)
    }
}

/// Connects, sends bereq (and body), and reads the response head.
async fn send_and_receive(job: &mut FetchJob) -> Result<Fetched, NoResponse> {
    let bo = &mut job.bo;
    let Some(be) = bo.backend.clone() else {
        bo.sh.counters.inc(Main::backend_fail);
        return Err("No backend".to_string().into());
    };
    let vcl = bo.vcl.clone();
    let backend = vcl
        .resolve_backend(&be, &mut *bo)
        .ok_or_else(|| format!("Director {} returned no backend", be.name))?;
    // `backend x none;` is varnishd's NULL backend: VDI_Resolve finds none.
    if backend.none {
        return Err("No backend".to_string().into());
    }
    if !backend.healthy() {
        return Err(backend.refuse_unhealthy(&bo.sh.counters).into());
    }
    let params = bo.sh.params();
    let connect_timeout = bo
        .connect_timeout
        .or(backend.connect_timeout)
        .unwrap_or_else(|| params.duration(pid!("connect_timeout")));
    let first_byte = bo
        .first_byte_timeout
        .or(backend.first_byte_timeout)
        .unwrap_or_else(|| params.duration(pid!("first_byte_timeout")));
    let between = bo
        .between_bytes_timeout
        .or(backend.between_bytes_timeout)
        .unwrap_or_else(|| params.duration(pid!("between_bytes_timeout")));
    let idle = params.duration(pid!("backend_idle_timeout"));
    let holddown = crate::runtime::params::holddown(&params);
    let limits = Limits {
        require_host: false,
        ..Limits::from_varnish_params(
            params.bytes(pid!("http_resp_hdr_len")) as usize,
            params.bytes(pid!("http_resp_size")) as usize,
            params.uint(pid!("http_max_hdr")) as usize,
        )
    };
    drop(params);
    // Bytes of an earlier attempt belong to the backend that served it.
    bo.charge_backend();
    bo.acct_backend = Some(backend.clone());
    // beresp.backend is what the directors picked, not the director.
    bo.beresp_backend = Some(lacquer_vcl::exec::Backend {
        id: backend.id,
        name: Arc::from(backend.vcl_name.as_str()),
    });
    bo.beresp_backend_ip = backend.tcp_addr();
    // Host header from the backend definition when the request has none,
    // logged as varnishd logs it.
    if !bo.bereq.headers.contains("host")
        && let Some(h) = &backend.host_header
    {
        bo.vsl.log_header(Tag::BereqHeader, b"Host", h.as_bytes());
        bo.bereq.headers.append("Host", h.clone());
    }
    // A body an earlier pass of this request streamed (restart) is gone:
    // as varnishd 7.1 (V1F_SendReq, whose VRB_Iterate failure it does not
    // act on), the head still goes out with its framing, the body does
    // not, and the fetch waits for a response the backend, waiting for
    // the body, seldom sends: first_byte_timeout ends it.
    // As varnishd 7.1, `unset bereq.body` (which builtin.vcl does for
    // every GET) drops only a body still on the client connection: one
    // std.cache_req_body() kept is sent all the same.
    if !bo.has_body && matches!(job.req_body, FetchBody::Stream { .. } | FetchBody::Taken) {
        // `unset bereq.body`: no body, so no framing for one either.
        bo.bereq.headers.remove("content-length");
        bo.bereq.headers.remove("transfer-encoding");
    }
    // As varnishd's V1F_SendReq: a body of unknown length goes out chunked,
    // the header added as the request is sent (logged once connected).
    let chunked = bo.has_body
        && matches!(job.req_body, FetchBody::Stream { length: None, .. })
        && !bo.bereq.headers.contains("transfer-encoding");
    if chunked {
        bo.bereq.headers.append("Transfer-Encoding", "chunked");
    }
    let mut head = Vec::with_capacity(1024);
    bo.bereq.write_head(&mut head);
    // A reused connection the backend closed meanwhile is retried once
    // with a fresh one, as varnishd does.
    let mut tries = 0;
    loop {
        tries += 1;
        let mut conn = match backend
            .pool
            .get(secs(connect_timeout), secs(idle), holddown)
            .await
        {
            Ok(c) => c,
            Err(e @ ConnectError::Busy(_)) => {
                bo.sh.counters.inc(Main::backend_busy);
                return Err(format!("backend {}: {}", backend.vcl_name, e.fetch_error()).into());
            }
            Err(e) => {
                bo.sh.counters.inc(Main::backend_fail);
                return Err(format!("backend {}: {}", backend.vcl_name, e.fetch_error()).into());
            }
        };
        bo.log_ts("Connected", lacquer_http::date::now());
        if conn.reused {
            bo.sh.counters.inc(Main::backend_reuse);
        } else {
            bo.sh.counters.inc(Main::backend_conn);
        }
        bo.vsl.log(
            Tag::BackendOpen,
            format_args!(
                "{} {} {} {} {}",
                conn.local_port(),
                backend.vcl_name,
                backend.pool.address().log_peer(),
                conn.local_addr_string(),
                if conn.reused { "reuse" } else { "connect" }
            ),
        );
        if chunked && tries == 1 {
            bo.vsl
                .log_header(Tag::BereqHeader, b"Transfer-Encoding", b"chunked");
        }
        bo.log_ts("Bereq", lacquer_http::date::now());
        let sent = async {
            if let Some(p) = backend.proxy_preface(&bo.sess) {
                conn.stream.write_all(&p).await?;
            }
            if !conn.reused
                && let Some(p) = &backend.preamble
            {
                conn.stream.write_all(p).await?;
            }
            conn.stream.write_all(&head).await?;
            if let FetchBody::Cached(b) = &job.req_body {
                conn.stream.write_all(b).await?;
            }
            conn.stream.flush().await
        }
        .await;
        if let Err(e) = sent {
            if conn.reused && tries == 1 {
                break_retry(bo, conn.local_port(), &backend.vcl_name);
                continue;
            }
            bo.sh.counters.inc(Main::backend_fail);
            return Err(format!("backend write error: {e}").into());
        }
        bo.acct.bereq_hdr += head.len() as u64;
        if bo.has_body {
            match std::mem::replace(&mut job.req_body, FetchBody::Taken) {
                FetchBody::Stream { length, mut rx, go } => {
                    if let Some(go) = go {
                        let _ = go.send(());
                    }
                    match send_stream(&mut conn.stream, length, &mut rx).await {
                        Ok(n) => bo.acct.bereq_body += n,
                        // As V1F_SendReq: the client side's failure, then
                        // the send's, in `errno` words and the TX_ERROR
                        // close's description (varnishd's format leaves
                        // its last parenthesis open).
                        Err(e) => match e.strip_prefix("req.body read error: ") {
                            Some(why) => {
                                bo.vsl.log_str(Tag::FetchError, &e);
                                return Err(format!(
                                    "backend write error: {why} (Error transaction"
                                )
                                .into());
                            }
                            None => return Err(e.into()),
                        },
                    }
                }
                other => {
                    if let FetchBody::Cached(b) = &other {
                        bo.acct.bereq_body += b.len() as u64;
                    }
                    job.req_body = other;
                }
            }
        }
        // As varnishd (V1F_FetchRespHdr): a backend request counts once
        // it was sent and its response is awaited, whether or not one
        // comes. On a reused connection varnishd first waits (VCP_Wait)
        // for the connection to turn readable: a first-byte timeout there
        // fails the fetch before V1F_FetchRespHdr, so it is not counted.
        let mut counted = !conn.reused;
        if counted {
            bo.sh.counters.inc(Main::backend_req);
        }
        let mut rbuf = BytesMut::with_capacity(8192);
        let deadline = tokio::time::Instant::now() + secs(first_byte);
        let head = loop {
            let before = rbuf.len();
            match parse_response_buf(&mut rbuf, &limits) {
                Ok(Some(h)) => {
                    bo.acct.beresp_hdr += (before - rbuf.len()) as u64;
                    break Some(h);
                }
                Ok(None) => {}
                Err(e) => {
                    bo.acct.beresp_hdr += before as u64;
                    // As varnishd: a head past http_resp_size is an
                    // `overflow`; a refused one logs the bad header line
                    // (BogoHeader) and the buffer (HttpGarbage) first.
                    if e.kind() == lacquer_http::ErrorKind::HeadTooLarge {
                        return Err("overflow".to_string().into());
                    }
                    if e.is_header_fault() {
                        bo.vsl.log_str(Tag::BogoHeader, e.message());
                    }
                    let head = &rbuf[..rbuf.len().min(limits.max_head)];
                    bo.vsl
                        .log_bytes(Tag::HttpGarbage, lacquer_http::parse::garbage(head));
                    // `HTTP1_DissectResponse` then sets the status it
                    // failed with (`http_SetStatus(hp, 503, NULL)`).
                    bo.vsl.log_str(Tag::BerespStatus, "503");
                    bo.vsl.log_str(Tag::BerespReason, "Service Unavailable");
                    return Err("http format error".to_string().into());
                }
            }
            rbuf.reserve(8192);
            // As V1F_FetchRespHdr's HTC_RxStuff: the first byte within
            // first_byte_timeout, each later read of the head within
            // between_bytes_timeout (a trickled head is no timeout).
            let until = if rbuf.is_empty() {
                deadline
            } else {
                tokio::time::Instant::now() + secs(between)
            };
            let read = tokio::time::timeout_at(
                until,
                tokio::io::AsyncReadExt::read_buf(&mut conn.stream, &mut rbuf),
            )
            .await;
            if read.is_ok() && !counted {
                counted = true;
                bo.sh.counters.inc(Main::backend_req);
            }
            match read {
                Err(_) if !counted => {
                    return Err("first byte timeout (reused connection)".to_string().into());
                }
                // As varnishd's V1F_FetchRespHdr (HTC_RxStuff's status):
                // no byte yet is HTC_S_IDLE, part of a head HTC_S_TIMEOUT.
                Err(_) if rbuf.is_empty() => {
                    return Err("first byte timeout".to_string().into());
                }
                Err(_) => return Err("timeout".to_string().into()),
                Ok(Ok(0)) | Ok(Err(_))
                    if conn.reused
                        && tries == 1
                        && rbuf.is_empty()
                        && !matches!(job.req_body, FetchBody::Taken) =>
                {
                    break_retry(bo, conn.local_port(), &backend.vcl_name);
                    break None;
                }
                // HTC_S_EOF: the backend closed, or the read failed.
                Ok(Ok(0)) | Ok(Err(_)) => return Err("HTC eof (-1)".to_string().into()),
                Ok(Ok(_)) => {}
            }
        };
        let Some(head) = head else {
            continue;
        };
        let is_head = &bo.bereq.method[..] == b"HEAD";
        let Ok(body) = head.body_kind(is_head) else {
            // As varnishd (vbf_stp_startfetch, `BS_ERROR`): a body whose
            // framing cannot be read (a bad length or transfer coding, a
            // 204 that announces one) is counted (fetch_204, fetch_bad),
            // the response is logged as it came, then the failure.
            bo.sh.counters.inc(if head.status == 204 {
                Main::fetch_204
            } else {
                Main::fetch_bad
            });
            bo.beresp = RespMsg::from(head);
            bo.t_beresp = lacquer_http::date::now();
            bo.log_ts("Beresp", bo.t_beresp);
            log_resp(bo, Tag::BerespProtocol);
            bo.vsl.log_str(Tag::Error, "Body cannot be fetched");
            return Err(NoResponse::Logged);
        };
        // As varnishd: the connection state, the bytes read with the head
        // and the body's reader go into the fetch's workspace.
        let got = lacquer_http::response_head_len(&head) as u64;
        if !bo.ws.take(got + rbuf.len() as u64) {
            // varnishd reads the head into the workspace: it did not fit.
            return Err("http first read error: overflow".to_string().into());
        }
        if body != BodyKind::None {
            bo.ws.take(size::VFP_ENTRY);
        }
        bo.beresp = RespMsg::from(head);
        let close = bo.bereq.headers.has_token("connection", "close") || !persistent(&bo.beresp);
        bo.t_beresp = lacquer_http::date::now();
        bo.log_ts("Beresp", bo.t_beresp);
        bo.sh.counters.inc(if is_head {
            Main::fetch_head
        } else {
            match (bo.beresp.status, body) {
                (0..=199, _) => Main::fetch_1xx,
                (204, _) => Main::fetch_204,
                (304, _) => Main::fetch_304,
                (_, BodyKind::Chunked) => Main::fetch_chunked,
                (_, BodyKind::Length(_)) => Main::fetch_length,
                (_, BodyKind::Eof) => Main::fetch_eof,
                (_, BodyKind::None) => Main::fetch_none,
            }
        });
        log_resp(bo, Tag::BerespProtocol);
        // As varnishd (vbf_stp_startfetch): a 1xx answer (an interim
        // `100 Continue` included) is taken as the response and has no body
        // that could be read, so the fetch fails (503 from
        // vcl_backend_error) and the connection is dropped, instead of the
        // interim answer reaching the client.
        if !is_head && bo.beresp.status < 200 {
            bo.vsl.log_str(Tag::Error, "Body cannot be fetched");
            return Err(NoResponse::Logged);
        }
        // As varnishd (http_DoConnection): fields the backend's Connection
        // names stay visible to vcl_backend_response and are not stored
        // (`object_headers` leaves filtered fields out).
        if let Ok(tokens) = crate::runtime::msg::connection_tokens(&bo.beresp.headers) {
            for t in &tokens {
                bo.beresp.headers.mark_filtered(t);
            }
        }
        return Ok(Fetched {
            reuse: None,
            conn,
            backend,
            rbuf,
            body,
            close,
            body_read: 0,
        });
    }
}

/// Sends a request body streamed from the client: segments as they come,
/// chunk-encoded when the client sent it chunked (`length` is `None`).
async fn send_stream<W>(
    w: &mut W,
    length: Option<u64>,
    rx: &mut tokio::sync::mpsc::Receiver<Segment>,
) -> Result<u64, String>
where
    W: tokio::io::AsyncWrite + Unpin,
{
    let werr = |e: std::io::Error| format!("backend write error: {e}");
    let mut size = Vec::with_capacity(18);
    let mut sent = 0u64;
    loop {
        let failed = match rx.recv().await {
            None => "req.body read error: the client went away".to_string(),
            Some(Err(e)) => e,
            Some(Ok(seg)) if seg.is_empty() => break,
            Some(Ok(seg)) => {
                if length.is_none() {
                    size.clear();
                    // Written as varnishd's V1L_Flush writes it (`00%zx`);
                    // the bytes count in BereqAcct.
                    lacquer_http::encode_chunk_header(seg.len(), &mut size);
                    w.write_all(&size).await.map_err(werr)?;
                }
                w.write_all(&seg).await.map_err(werr)?;
                sent += seg.len() as u64;
                if length.is_none() {
                    w.write_all(lacquer_http::CHUNK_END).await.map_err(werr)?;
                    // As varnishd (V1L counts what it writes): a chunked
                    // body's framing is among the bereq's body bytes.
                    sent += (size.len() + lacquer_http::CHUNK_END.len()) as u64;
                }
                continue;
            }
        };
        // As varnishd, a chunked body whose client side failed is still
        // terminated, so the backend is not left waiting for the rest;
        // the fetch fails all the same and the connection is not reused.
        if length.is_none() {
            let _ = w.write_all(lacquer_http::LAST_CHUNK).await;
            let _ = w.flush().await;
        }
        return Err(failed);
    }
    if length.is_none() {
        w.write_all(lacquer_http::LAST_CHUNK).await.map_err(werr)?;
        sent += lacquer_http::LAST_CHUNK.len() as u64;
    }
    w.flush().await.map_err(werr)?;
    Ok(sent)
}

/// A reused backend connection turned out closed: the request is sent once
/// more on a fresh one (varnishd's `backend_retry`).
fn break_retry(bo: &mut BoTask, port: u16, name: &str) {
    bo.sh.counters.inc(Main::backend_retry);
    bo.vsl.log_str(Tag::FetchError, "HTC eof (-1)");
    bo.vsl
        .log(Tag::BackendClose, format_args!("{port} {name} close"));
}

/// A revalidation of a stale object that may be refreshed by a 304 asks
/// the backend conditionally (varnishd's IMS candidates: a 200 with a
/// Last-Modified or ETag and a body — one still streaming counts, as
/// varnishd marks candidates when their fetch starts).
fn add_conditionals(job: &mut FetchJob) {
    let stale = match &job.mode {
        FetchMode::Miss {
            stale: Some(stale), ..
        } => stale,
        FetchMode::Background { stale, .. } => stale,
        _ => return,
    };
    let data = stale.data();
    let body = stale.body();
    if data.status != 200 || body.is_failed() || body.final_len() == Some(0) {
        return;
    }
    let lm = crate::runtime::task::obj_header(stale, b"last-modified").map(Bytes::copy_from_slice);
    let etag = crate::runtime::task::obj_header(stale, b"etag").map(Bytes::copy_from_slice);
    let bo = &mut job.bo;
    // As varnishd's vbf_stp_mkbereq: the conditions come before the
    // X-Varnish header the fetch adds last.
    for h in [&mut bo.bereq.headers, &mut bo.bereq_orig.headers] {
        let xv = h.get("x-varnish").map(Bytes::copy_from_slice);
        h.remove("x-varnish");
        if let Some(v) = &lm {
            h.append("If-Modified-Since", v.clone());
        }
        if let Some(v) = &etag {
            h.append("If-None-Match", v.clone());
        }
        if let Some(v) = xv {
            h.append("X-Varnish", v);
        }
    }
}

/// Logs the backend request as it stands (`BereqMethod` …).
///
/// The first time, a method or protocol the fetch forced is logged as
/// varnishd's `vbf_stp_mkbereq` logs it: the client's with the copied
/// headers, then the forced method, the appended `Accept-Encoding`, the
/// forced protocol, and what follows (conditions, `X-Varnish`).
pub fn log_bereq(bo: &mut BoTask) {
    let client = bo.client_line.take();
    let (method, proto) = match &client {
        Some(c) => (&c.method, &c.proto),
        None => (&bo.bereq.method, &bo.bereq.proto),
    };
    bo.vsl.log_bytes(Tag::BereqMethod, method);
    bo.vsl.log_bytes(Tag::BereqURL, &bo.bereq.url);
    bo.vsl.log_bytes(Tag::BereqProtocol, proto);
    let (method_at, proto_at) = match &client {
        Some(c) => (Some(c.copied), Some(c.copied + usize::from(c.ae_appended))),
        None => (None, None),
    };
    // The forced fields go before the header at their position (or after
    // the last one).
    let forced = |vsl: &mut lacquer_vsl::VslBuf, i: usize| {
        if Some(i) == method_at && bo.bereq.method != method {
            vsl.log_bytes(Tag::BereqMethod, &bo.bereq.method);
        }
        if Some(i) == proto_at && bo.bereq.proto != proto {
            vsl.log_bytes(Tag::BereqProtocol, &bo.bereq.proto);
        }
    };
    for (i, (k, v)) in bo.bereq.headers.iter().enumerate() {
        forced(&mut bo.vsl, i);
        bo.vsl.log_header(Tag::BereqHeader, k, v);
    }
    forced(&mut bo.vsl, bo.bereq.headers.len());
}

/// The response headers as owned pairs, to compare with after filters
/// changed them.
fn header_pairs(h: &lacquer_http::Headers) -> Vec<(Bytes, Bytes)> {
    h.iter()
        .map(|(k, v)| (Bytes::copy_from_slice(k), Bytes::copy_from_slice(v)))
        .collect()
}

/// Logs what the fetch filters did to beresp's headers as varnishd's
/// filter inits log it (`http_Unset`, `http_SetHeader`): the removed
/// lines first, in their order, then the added ones, in theirs (the order
/// varnishd's gzip/gunzip/testgunzip/esi inits produce: Content-Encoding,
/// Content-Length, the weakened ETag, the new Content-Encoding, Vary).
///
/// A line that stays is one of the longest run of lines kept in order; a
/// line unset and set again (it moved to the end, as `Content-Encoding:
/// gzip` does when gzip is redone) is logged both ways, as varnishd does.
fn log_header_changes(bo: &mut BoTask, before: &[(Bytes, Bytes)]) {
    let after = header_pairs(&bo.beresp.headers);
    let (n, m) = (before.len(), after.len());
    // Longest common subsequence, lengths of the suffixes (a head has
    // a few dozen lines at most).
    let mut lcs = vec![vec![0u16; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if before[i] == after[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut kept_before, mut kept_after) = (vec![false; n], vec![false; m]);
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if before[i] == after[j] {
            kept_before[i] = true;
            kept_after[j] = true;
            i += 1;
            j += 1;
        } else if lcs[i + 1][j] >= lcs[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    for (k, v) in before
        .iter()
        .zip(&kept_before)
        .filter(|(_, kept)| !**kept)
        .map(|(h, _)| h)
    {
        bo.vsl.log_header(Tag::BerespUnset, k, v);
    }
    for (k, v) in after
        .iter()
        .zip(&kept_after)
        .filter(|(_, kept)| !**kept)
        .map(|(h, _)| h)
    {
        bo.vsl.log_header(Tag::BerespHeader, k, v);
    }
}

/// Logs a response's start line and headers under the given family of tags
/// (`BerespProtocol` … or `ObjProtocol` …).
fn log_resp(bo: &mut BoTask, first: Tag) {
    let (proto, status, reason, header) = match first {
        Tag::ObjProtocol => (
            Tag::ObjProtocol,
            Tag::ObjStatus,
            Tag::ObjReason,
            Tag::ObjHeader,
        ),
        _ => (
            Tag::BerespProtocol,
            Tag::BerespStatus,
            Tag::BerespReason,
            Tag::BerespHeader,
        ),
    };
    bo.vsl.log_bytes(proto, &bo.beresp.proto);
    bo.vsl.log(status, format_args!("{}", bo.beresp.status));
    bo.vsl.log_bytes(reason, &bo.beresp.reason);
    for (k, v) in bo.beresp.headers.iter() {
        bo.vsl.log_header(header, k, v);
    }
}

fn compute_ttl(bo: &mut BoTask) {
    let params = bo.sh.params();
    let d = Defaults {
        ttl: params.duration(pid!("default_ttl")),
        grace: params.duration(pid!("default_grace")),
        keep: params.duration(pid!("default_keep")),
        clock_skew: params.uint(pid!("clock_skew")) as f64,
    };
    drop(params);
    if !bo.beresp.headers.contains("date") {
        let date = lacquer_http::date::format_http_date(bo.now);
        if time_header(bo, &date) {
            bo.vsl
                .log_header(Tag::BerespHeader, b"Date", date.as_bytes());
            bo.beresp.headers.append("Date", date);
        }
    }
    // As varnishd: these may be spread over several lines; VCL and the
    // TTL computation see them collected into one.
    collect_header(&mut bo.beresp.headers, "cache-control", "Cache-Control");
    collect_header(&mut bo.beresp.headers, "vary", "Vary");
    let h = &bo.beresp.headers;
    let info = RespInfo {
        status: bo.beresp.status,
        cache_control: h.get("cache-control"),
        age: h.get("age"),
        expires: h.get("expires"),
        date: h.get("date"),
    };
    let f = rfc2616::freshness(&info, bo.now, &d);
    bo.t_origin = f.t_origin;
    if bo.uncacheable {
        // A pass object (as varnishd): only the Age-adjusted origin is
        // kept, the ttl is negative and no `TTL RFC` record is written.
        bo.ttl = -1.0;
        bo.grace = 0.0;
        bo.keep = 0.0;
    } else {
        bo.vsl.log_str(Tag::TTL, &f.log_line(bo.now));
        bo.ttl = f.ttl;
        bo.grace = f.grace;
        bo.keep = f.keep;
    }
}

/// Joins repeated `name` headers into one comma-separated line.
fn collect_header(h: &mut lacquer_http::Headers, lower: &str, name: &'static str) {
    let mut n = 0;
    for (k, _) in h.iter() {
        if k.eq_ignore_ascii_case(lower.as_bytes()) {
            n += 1;
        }
    }
    if n < 2 {
        return;
    }
    let mut joined = Vec::new();
    for (k, v) in h.iter() {
        if k.eq_ignore_ascii_case(lower.as_bytes()) {
            if !joined.is_empty() {
                joined.extend_from_slice(b", ");
            }
            joined.extend_from_slice(v);
        }
    }
    h.set(name, joined);
}

/// As varnishd's `vbf_beresp2obj` for a fetch that is not a pass: a
/// `Vary` that `VRY_Create` refuses is logged and makes the object
/// uncacheable (a hit-for-miss, which varies on nothing) rather than
/// failing the fetch. Whether the value was accepted.
fn check_vary(bo: &mut BoTask) -> bool {
    let Some(v) = bo.beresp.headers.get("vary") else {
        return true;
    };
    let view = crate::runtime::msg::HeaderView(&bo.bereq.headers);
    if let Err(e) = lacquer_cache::vary::check_vary(v, &view) {
        bo.vsl.log_str(Tag::Error, e.message());
        bo.vsl.log_str(
            Tag::Error,
            "Illegal 'Vary' header from backend, making this a pass.",
        );
        bo.uncacheable = true;
        return false;
    }
    true
}

/// The store an object goes to; `None` when VCL set `beresp.storage` to
/// no store (the fetch then fails, as varnishd's "Could not get storage").
fn pick_store(bo: &BoTask, private: bool) -> Option<lacquer_cache::StoreRef> {
    let cache = &bo.sh.cache;
    // As varnishd's vbf_allocobj: uncacheable and short-lived objects go to
    // Transient whatever storage VCL asked for, and are counted.
    if private || bo.uncacheable {
        bo.sh.counters.inc(Main::beresp_uncacheable);
        return Some(cache.transient());
    }
    let shortlived = bo.sh.params().duration(pid!("shortlived"));
    if bo.ttl + bo.grace + bo.keep < shortlived {
        bo.sh.counters.inc(Main::beresp_shortlived);
        return Some(cache.transient());
    }
    let name = bo.storage.as_ref()?;
    // A hint naming no store falls back to the next one in turn.
    Some(cache.store(name).unwrap_or_else(|| cache.next_store()))
}

/// The parts of a new object that come from `beresp` and the timing;
/// callers fill in the body and gzip flag.
fn object_from(bo: &BoTask, kind: ObjKind) -> NewObject {
    NewObject {
        meta: ObjMeta {
            vxid: bo.vxid,
            t_origin: bo.t_origin,
            ttl: bo.ttl,
            grace: bo.grace,
            keep: bo.keep,
            kind,
        },
        status: bo.beresp.status,
        // Copied: a slice would keep the whole response read buffer alive.
        reason: Bytes::copy_from_slice(&bo.beresp.reason),
        headers: object_headers(&bo.beresp, bo.uncacheable || kind != ObjKind::Normal),
        gzip: false,
        esi: None,
        gzip_changed: false,
        body: NewBody::Empty,
        body_chunk: None,
        vary_bytes: stored_vary_bytes(bo),
    }
}

/// The size of the Vary data varnishd would keep with the object when it
/// differs from the matching spec's: under `http_gzip_support` varnishd
/// keeps `Accept-Encoding` (with the normalised request value) where
/// Lacquer drops it from matching.
fn stored_vary_bytes(bo: &BoTask) -> Option<u64> {
    if !bo.sh.params().flag(pid!("http_gzip_support")) {
        return None;
    }
    let v = bo.beresp.headers.get("vary")?;
    let spec =
        lacquer_cache::VarySpec::capture([v], &crate::runtime::msg::HeaderView(&bo.bereq.headers));
    Some(spec.map_or(0, |s| s.storage_size() as u64))
}

/// Headers stored in an object: beresp without hop-by-hop fields. As
/// varnishd, an uncacheable object (pass, hit-for-miss/pass) only loses
/// what a pass drops (`HTTPH_A_PASS`: hop-by-hop fields and `Age`) and
/// keeps e.g. the backend's `Accept-Ranges`, which cached objects drop
/// (`HTTPH_A_INS`).
fn object_headers(beresp: &RespMsg, uncacheable: bool) -> Vec<(Bytes, Bytes)> {
    let mut out = lacquer_http::Headers::new();
    let mask = if uncacheable {
        lacquer_http::FILTER_PASS_OBJ
    } else {
        lacquer_http::FILTER_INSERT
    };
    beresp.headers.copy_filtered(mask, &mut out);
    out.iter()
        .map(|(k, v)| (Bytes::copy_from_slice(k), Bytes::copy_from_slice(v)))
        .collect()
}

/// A 304 answering a conditional fetch: the stale object's headers are
/// merged under the new ones and its body is reused (before
/// vcl_backend_response runs, which sees `beresp.was_304`). A 304 nobody
/// asked for is an error, except for a pass.
fn merge_304(job: &mut FetchJob) -> Result<Option<lacquer_storage::Body>, Step> {
    let bo = &mut job.bo;
    if bo.beresp.status != 304 {
        return Ok(None);
    }
    let stale = match &job.mode {
        FetchMode::Miss { stale, .. } => stale.clone(),
        FetchMode::Background { stale, .. } => Some(stale.clone()),
        FetchMode::HitMiss { .. } => None,
        FetchMode::Pass => return Ok(None),
    };
    let Some(stale) = stale else {
        bo.vsl
            .log_str(Tag::Error, "304 response but not conditional fetch");
        return Err(Step::Error(503, Some(Bytes::from_static(FETCH_FAILED))));
    };
    let data = stale.data();
    // As varnishd's `vbf_304_logic`: when the stored encoding is ours,
    // not the backend's, the new ETag cannot be strong; the 304's
    // Content-Encoding and Content-Length never apply to the stored body.
    // Each change is logged as `http_Unset` and `http_PrintfHeader` log it.
    if data.gzip_changed
        && let Some(etag) = bo.beresp.headers.get("etag").map(<[u8]>::to_vec)
        && !etag.starts_with(b"W/")
    {
        unset_beresp(bo, "etag");
        let mut weak = b"W/".to_vec();
        weak.extend_from_slice(&etag);
        bo.vsl.log_header(Tag::BerespHeader, b"ETag", &weak);
        bo.beresp.headers.append("ETag", weak);
    }
    unset_beresp(bo, "content-encoding");
    unset_beresp(bo, "content-length");
    // As varnishd's HTTP_Merge: the 304's headers stay as they came, the
    // stored ones it does not have follow, and the status line becomes the
    // stored one; each change is logged.
    bo.beresp.status = data.status;
    bo.beresp.reason = data.reason.clone();
    bo.vsl.log_str(Tag::BerespProtocol, "HTTP/1.1");
    let status = u64::from(data.status);
    bo.vsl.log_with(Tag::BerespStatus, |o| push_u64(o, status));
    bo.vsl.log_bytes(Tag::BerespReason, &data.reason);
    let mut added = Vec::new();
    for (k, v) in data.headers.to_pairs() {
        if !bo.beresp.headers.contains(&k[..]) {
            added.push((k.clone(), v.clone()));
        }
    }
    for (k, v) in added {
        bo.vsl.log_header(Tag::BerespHeader, &k, &v);
        bo.beresp.headers.append(k, v);
    }
    bo.was_304 = true;
    Ok(Some(data.body.clone()))
}

/// Removes every `name` field of beresp, each logged as `BerespUnset`
/// (varnishd's `http_Unset`).
fn unset_beresp(bo: &mut BoTask, name: &str) {
    let gone: Vec<(Vec<u8>, Vec<u8>)> = bo
        .beresp
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    for (k, v) in &gone {
        bo.vsl.log_header(Tag::BerespUnset, k, v);
    }
    bo.beresp.headers.remove(name);
}

/// `utils.fast_304()` (Varnish Enterprise): a 304 delivered by
/// vcl_backend_response refreshes the stale object in place, with the
/// lifetime VCL gave beresp and its stored headers and body as they are
/// (`BusyObj::refresh_in_place`): no new object, no copy. The fetch ends
/// there (`None`), the refreshed object is what waiting clients get.
/// `Some` hands the response back for an ordinary insert: no
/// `fast_304()`, an uncacheable response, or a stale object that left the
/// cache meanwhile.
fn refresh_in_place(job: &mut FetchJob, f: Fetched) -> Option<Fetched> {
    let bo = &mut job.bo;
    if !bo.fast_304 || f.reuse.is_none() || bo.uncacheable {
        return Some(f);
    }
    let (busy, stale, background) = match std::mem::replace(&mut job.mode, FetchMode::Pass) {
        FetchMode::Miss {
            busy,
            stale: Some(stale),
        } => (busy, stale, false),
        FetchMode::Background { busy, stale } => (busy, stale, true),
        other => {
            job.mode = other;
            return Some(f);
        }
    };
    let life = lacquer_cache::Lifetime {
        t_origin: bo.t_origin,
        ttl: bo.ttl,
        grace: bo.grace,
        keep: bo.keep,
    };
    if let Err(busy) = busy.refresh_in_place(&stale, life) {
        job.mode = if background {
            FetchMode::Background { busy, stale }
        } else {
            FetchMode::Miss {
                busy,
                stale: Some(stale),
            }
        };
        return Some(f);
    }
    bo.vsl.log(
        Tag::Debug,
        format_args!("fast_304: object {} refreshed in place", stale.vxid()),
    );
    bo.vsl.log_str(Tag::Fetch_Body, "none -");
    body_done(bo, f, 0);
    if let Some(n) = job.notify.take() {
        let _ = n.send(FetchOutcome::Object(stale));
    }
    None
}

/// Turns the response into an object and streams its body.
async fn deliver(job: &mut FetchJob, mut f: Fetched, hfp_ttl: Option<f64>) -> Result<(), Step> {
    let reuse_body = f.reuse.take();
    let bo = &mut job.bo;
    // As varnishd's `vbf_stp_condfetch`: a stale object whose fetch is
    // still running is waited for before the new object is made (its
    // body and attributes are then complete), and if that fetch fails,
    // this one fails too.
    if let Some(stale) = &reuse_body
        && !stale.is_finished()
    {
        bo.vsl.log_str(
            Tag::Notice,
            "vsl: Conditional fetch wait for streaming object",
        );
        if stale.wait_finished().await.is_err() {
            bo.vsl.log_str(Tag::FetchError, "Template object failed");
            bo.sh.counters.inc(Main::fetch_failed);
            return Err(Step::Fail);
        }
    }
    // Body filters: VCL's beresp.filters, else varnishd's choice. A 304
    // refresh reuses the stale body as it was stored.
    // As varnishd (vbf_stp_fetch, `content_length == 0`): a response
    // without a body (an empty one, or none at all: HEAD, 204, 304 on a
    // pass) loses its Content-Encoding, there being nothing it encodes;
    // a 304 refresh keeps the stored object's.
    if matches!(f.body, BodyKind::Length(0)) || (f.body == BodyKind::None && reuse_body.is_none()) {
        bo.beresp.headers.remove("content-encoding");
    }
    let backend_gzip = bo
        .beresp
        .headers
        .get("content-encoding")
        .is_some_and(crate::fetch::gzip::is_gzip_encoding);
    let mut esi = None;
    let mut chain = match &reuse_body {
        Some(_) => {
            let stale = match &job.mode {
                FetchMode::Miss { stale, .. } => stale.clone(),
                FetchMode::Background { stale, .. } => Some(stale.clone()),
                _ => None,
            };
            FetchChain::unfiltered(
                stale.as_ref().is_some_and(|o| o.data().gzip),
                stale.as_ref().is_some_and(|o| o.data().gzip_changed),
            )
        }
        // The ESI stage does its own gzip work (see crate::fetch::esi).
        // As varnishd, a list that names esi parses the body whatever
        // beresp.do_esi says (the default list names it only with
        // do_esi), and a gzip body is inflated first only when the list
        // names gunzip: else the parser sees the compressed bytes, finds
        // nothing and the body is stored as it came (difftest seeds 2300,
        // 3246).
        None if f.body != BodyKind::None
            && let Some(gzip_out) = crate::fetch::gzip::esi_in_list(&bo.fetch_filter_list()) =>
        {
            let list = bo.fetch_filter_list();
            let names = crate::fetch::gzip::filter_names(&list);
            let inflated = backend_gzip && names.iter().any(|(_, n)| *n == "gunzip");
            // `gzip` after `esi` (a list VCL set) compresses what the
            // parser passes on, as esi_gzip does, unless the body still
            // has its Content-Encoding (seed 7226).
            let esi_at = names
                .iter()
                .rposition(|(_, n)| matches!(*n, "esi" | "esi_gzip"))
                .unwrap_or(0);
            let gzip_out = gzip_out
                || (names[esi_at..].iter().any(|(_, n)| *n == "gzip")
                    && (inflated || !backend_gzip));
            let backend_gzip = inflated;
            bo.vsl.log_str(Tag::Filters, &list);
            if bo.beresp.status == 206 {
                // As varnishd's ESI fetch filters: a part of a body
                // cannot be parsed, the filter fails to open.
                let name = if gzip_out { "esi_gzip" } else { "esi" };
                bo.vsl
                    .log_str(Tag::VCL_Error, "Attempted ESI on partial (206) response");
                bo.vsl.log(
                    Tag::FetchError,
                    format_args!("Fetch filter {name} failed to open"),
                );
                return Err(Step::Error(503, Some(Bytes::from_static(FETCH_FAILED))));
            }
            let before = header_pairs(&bo.beresp.headers);
            let e = crate::fetch::esi::stage(bo, backend_gzip, gzip_out);
            let stored_gzip = e.stores_gzip();
            log_header_changes(bo, &before);
            // As varnishd's vfp_esi_gzip_init: RFC2616_Vary_AE last (so
            // logged after the encoding changes), whatever
            // http_gzip_support says.
            if stored_gzip {
                let before = header_pairs(&bo.beresp.headers);
                crate::fetch::gzip::add_vary_accept_encoding(&mut bo.beresp.headers);
                log_header_changes(bo, &before);
            }
            esi = Some(e);
            FetchChain::unfiltered(stored_gzip, stored_gzip != backend_gzip)
        }
        None if bo.beresp_has_body || bo.vfp_filters.is_some() => {
            let list = bo.fetch_filter_list();
            bo.vsl.log_str(Tag::Filters, &list);
            let params = bo.sh.params();
            let level = params.uint(pid!("gzip_level")) as u32;
            drop(params);
            let vmods = bo.vcl.vmods.clone();
            let vmod = |name: &str| vmods.filter(name, false);
            let partial = bo.beresp.status == 206;
            let before = header_pairs(&bo.beresp.headers);
            let headers = &mut bo.beresp.headers;
            match crate::fetch::gzip::build_fetch_filters(&list, &vmod, headers, partial, level) {
                Ok(c) => {
                    log_header_changes(bo, &before);
                    c
                }
                Err(msg) => {
                    bo.vsl.log_str(Tag::FetchError, &msg);
                    return Err(Step::Error(503, Some(Bytes::from_static(FETCH_FAILED))));
                }
            }
        }
        None => {
            // As varnishd: a response without a body runs an empty
            // filter list, and says so.
            bo.vsl.log_str(Tag::Filters, "");
            FetchChain::default()
        }
    };
    for filter in chain.filters() {
        let counter = match filter {
            crate::fetch::gzip::FetchFilter::Gzip(_) => Main::n_gzip,
            crate::fetch::gzip::FetchFilter::Gunzip(_) => Main::n_gunzip,
            crate::fetch::gzip::FetchFilter::TestGunzip(..) => Main::n_test_gunzip,
            crate::fetch::gzip::FetchFilter::Vmod(..) => continue,
        };
        bo.sh.counters.inc(counter);
    }
    let vary_ok = matches!(job.mode, FetchMode::Pass) || check_vary(bo);
    let kind = match hfp_ttl {
        Some(_) => ObjKind::HitForPass,
        None if bo.uncacheable => ObjKind::HitForMiss,
        None => ObjKind::Normal,
    };
    if let Some(t) = hfp_ttl {
        // A hit-for-pass lasts exactly its ttl (logged at the return, see
        // BoTask::on_return): no grace, no keep.
        bo.ttl = t + (bo.now - bo.t_origin);
        bo.grace = 0.0;
        bo.keep = 0.0;
    }
    log_resp(bo, Tag::ObjProtocol);
    // As varnishd's vbf_beresp2obj: the storage is chosen (and logged)
    // before any of the body is read.
    // A hit-for-pass marker is uncacheable (VRT_hit_for_pass): Transient.
    let private = matches!(job.mode, FetchMode::Pass) || hfp_ttl.is_some();
    let Some(store) = pick_store(bo, private) else {
        bo.vsl.log_str(Tag::FetchError, "Could not get storage");
        return Err(Step::Error(503, Some(Bytes::from_static(FETCH_FAILED))));
    };
    // The store's kind and name, as varnishd logs them (`malloc s0`, `file s0`).
    bo.vsl.log(
        Tag::Storage,
        format_args!("{} {}", store.stevedore().kind(), store.name()),
    );
    // Without streaming the whole body is read before the object exists,
    // so a broken body still ends in vcl_backend_error (as varnishd).
    let mut prefetched: Option<(lacquer_storage::Body, u64)> = None;
    let mut esi_done = None;
    if !bo.do_stream && reuse_body.is_none() && f.body != BodyKind::None {
        // vbf_stp_fetch logs the body status before the first read.
        bo.vsl.log(
            Tag::Fetch_Body,
            format_args!("{} -", body_kind_name(f.body)),
        );
        let mut segs = Vec::new();
        let mut len = 0u64;
        let r = pump_body(
            between_bytes(bo, &f),
            &mut f,
            &mut chain,
            &mut esi,
            bo.sh.fetch_fragment(),
            || false,
            |seg| {
                len += seg.len() as u64;
                segs.push(seg);
                Ok(())
            },
        )
        .await;
        if let Err(fail) = &r {
            bo.acct.beresp_body += f.body_read;
            fail.log(bo);
            bo.vsl.log(
                Tag::BackendClose,
                format_args!("{} {} close", f.conn.local_port(), f.backend.vcl_name),
            );
            return Err(Step::Error(503, Some(Bytes::from_static(FETCH_FAILED))));
        }
        esi_done = r.ok().flatten();
        prefetched = Some((lacquer_storage::Body::from_segments(segs), len));
    }
    let prefetched_len = prefetched.as_ref().map(|(_, l)| *l);
    let new = NewObject {
        gzip: chain.gzip,
        gzip_changed: chain.changed,
        esi: match (&reuse_body, &esi_done) {
            (Some(_), _) => replaced_esi(&job.mode),
            (None, Some(done)) => done.esi.clone(),
            (None, None) => None,
        },
        body: match (&reuse_body, prefetched.map(|(b, _)| b), f.body) {
            (Some(b), _, _) => NewBody::Complete(b.clone()),
            (None, Some(b), _) => NewBody::Complete(b),
            (None, None, BodyKind::None) => NewBody::Empty,
            (None, None, _) => NewBody::Streamed,
        },
        // A body read before the object existed is charged as varnishd's
        // fetch allocates it: the backend's length, then fetch_chunksize
        // pieces. A revalidated copy, only when a filter changed it.
        body_chunk: (reuse_body.is_none() || chain.changed).then(|| PiecePlan {
            estimate: match f.body {
                BodyKind::Length(n) if reuse_body.is_none() => Some(n),
                _ => None,
            },
            chunk: bo.sh.params().bytes(pid!("fetch_chunksize")).max(1),
            max_chunk: bo.sh.params().bytes(pid!("fetch_maxchunksize")).max(1),
        }),
        ..object_from(bo, kind)
    };
    // With http_gzip_support every fetch asks the backend for gzip and
    // clients get gunzipped copies as needed, so Accept-Encoding does not
    // split variants.
    let gzip_support = bo.sh.params().flag(pid!("http_gzip_support"));
    let vary_spec = bo.beresp.headers.get("vary").filter(|_| vary_ok).map(|v| {
        if gzip_support {
            strip_token(v, b"accept-encoding")
        } else {
            v.to_vec()
        }
    });
    let (busy, replaced) = match std::mem::replace(&mut job.mode, FetchMode::Pass) {
        FetchMode::Pass => (None, None),
        FetchMode::Miss { busy, stale } => (Some(busy), stale),
        FetchMode::Background { busy, stale } => (Some(busy), Some(stale)),
        FetchMode::HitMiss { busy, marker } => (Some(busy), Some(marker)),
    };
    let inserted = match busy {
        None => bo.sh.cache.insert_private(new, &store),
        Some(busy) => {
            if let Some(v) = vary_spec.as_ref().filter(|v| !v.is_empty())
                && let Some(spec) = lacquer_cache::VarySpec::capture(
                    [&v[..]],
                    &crate::runtime::msg::HeaderView(&bo.bereq.headers),
                )
            {
                busy.set_vary(spec);
            }
            busy.unbusy(new, &store)
        }
    };
    // As varnishd: a successful refresh retires the object it replaces.
    if inserted.is_ok()
        && let Some(old) = &replaced
    {
        bo.sh.cache.kill(old);
    }
    let unbusied = match inserted {
        Ok(u) => u,
        Err(e) => {
            // As varnishd, which stores the body as it reads it: the body
            // bytes read are those that had room.
            bo.acct.beresp_body += e.stored;
            bo.vsl.log(Tag::FetchError, format_args!("{e}"));
            return Err(Step::Error(503, Some(Bytes::from_static(FETCH_FAILED))));
        }
    };
    let obj = unbusied.obj.clone();
    let stream_early = bo.do_stream;
    if stream_early && let Some(n) = job.notify.take() {
        let _ = n.send(if unbusied.body.is_some() {
            FetchOutcome::Streaming(obj.clone())
        } else {
            FetchOutcome::Object(obj.clone())
        });
    }
    // As varnishd's vbf_stp_condfetch: a 304 that refreshes the stale
    // object copies its body, nothing is read from the backend.
    if reuse_body.is_none() && prefetched_len.is_none() {
        bo.vsl.log(
            Tag::Fetch_Body,
            format_args!(
                "{} {}",
                body_kind_name(f.body),
                if stream_early && f.body != BodyKind::None {
                    "stream"
                } else {
                    "-"
                }
            ),
        );
    }
    if let Some(done) = &esi_done {
        crate::fetch::esi::log_done(bo, done);
    }
    if let Some(mut writer) = unbusied.body {
        // Storage as varnishd allocates it: the backend's length at once
        // when known (filters or not), then fetch_chunksize pieces.
        let expected = match f.body {
            BodyKind::Length(n) => Some(n),
            _ => None,
        };
        writer.plan({
            let params = bo.sh.params();
            PiecePlan {
                estimate: expected,
                chunk: params.bytes(pid!("fetch_chunksize")).max(1),
                max_chunk: params.bytes(pid!("fetch_maxchunksize")).max(1),
            }
        });
        let mut no_room = false;
        let result = pump_body(
            between_bytes(bo, &f),
            &mut f,
            &mut chain,
            &mut None,
            bo.sh.fetch_fragment(),
            || obj.flags().abandoned(),
            |seg| {
                writer.push(seg).map_err(|e| {
                    no_room = true;
                    e.to_string()
                })
            },
        )
        .await;
        match result {
            Ok(_) => {
                let len = writer.len();
                writer.finish();
                body_done(bo, f, len);
            }
            Err(BodyFail { msg, .. }) if msg == PASS_ABANDONED => {
                // Not a failure: the object ends with what was read (so a
                // hit-for-pass or hit-for-miss still gets made) and the
                // backend connection, its body unread, is closed.
                // Logged as varnishd 7.1 logs it: a `Debug` record, and
                // the close reason is `SC_RX_BODY`'s text.
                bo.vsl.log(Tag::Debug, format_args!("Fetch: {msg}"));
                let len = writer.len();
                writer.finish();
                bo.vsl.log(
                    Tag::BackendClose,
                    format_args!(
                        "{} {} close Failure receiving req.body",
                        f.conn.local_port(),
                        f.backend.vcl_name
                    ),
                );
                bo.log_ts("BerespBody", lacquer_http::date::now());
                bo.end_privs();
                bo.vsl.log(Tag::Length, format_args!("{len}"));
            }
            Err(fail) => {
                // varnishd reads a body into its storage: when storage ran
                // out, what it read is what had room (unfiltered bodies;
                // a filter's input is not what it stored).
                bo.acct.beresp_body += if no_room && chain.filters().is_empty() {
                    writer.len()
                } else {
                    f.body_read
                };
                fail.log(bo);
                bo.sh.counters.inc(Main::fetch_failed);
                writer.fail();
            }
        }
    } else {
        // A prefetched body, a revalidated copy, or none: the same close
        // and length records.
        let len = match &reuse_body {
            Some(_) => obj.body().len_so_far(),
            None => prefetched_len.unwrap_or(0),
        };
        body_done(bo, f, len);
    }

    if let Some(n) = job.notify.take() {
        let _ = n.send(FetchOutcome::Object(obj));
    }
    Ok(())
}

/// Why a fetch stopped reading a body its client abandoned (varnishd's
/// FetchError text).
const PASS_ABANDONED: &str = "Pass delivery abandoned";

/// The between-bytes timeout of a fetch: VCL's, the backend's, the parameter.
fn between_bytes(bo: &BoTask, f: &Fetched) -> f64 {
    bo.between_bytes_timeout
        .or(f.backend.between_bytes_timeout)
        .unwrap_or_else(|| bo.sh.params().duration(pid!("between_bytes_timeout")))
}

/// Why a body stopped: the socket's error text when a read failed
/// (varnishd's `v1f_read` logs `strerror(errno)` as a `FetchError` of its
/// own), then the message of the filter that gave up.
#[derive(Debug)]
struct BodyFail {
    read_error: Option<String>,
    msg: String,
}

impl From<String> for BodyFail {
    fn from(msg: String) -> Self {
        BodyFail {
            read_error: None,
            msg,
        }
    }
}

impl BodyFail {
    /// The failure's `FetchError` records, in varnishd's order.
    fn log(&self, bo: &mut BoTask) {
        if let Some(e) = &self.read_error {
            bo.vsl.log_str(Tag::FetchError, e);
        }
        bo.vsl.log_str(Tag::FetchError, &self.msg);
    }
}

/// varnishd's `FetchError` records for a body read that failed
/// (`cache_http1_vfp.c`): the chunked parser's own message, or which
/// framing ran out of bytes; a read that failed (a timeout is `EAGAIN`
/// from the socket's receive timeout there) adds its error text first.
fn body_error(kind: BodyKind, stream: &BodyStream, e: BodyIoError) -> BodyFail {
    let read_error = match &e {
        BodyIoError::Timeout => Some("Resource temporarily unavailable".to_string()),
        BodyIoError::Io(io) => Some(errno_text(io)),
        BodyIoError::Eof | BodyIoError::Framing(_) => None,
    };
    let msg = match (e, kind) {
        (BodyIoError::Framing(msg), _) => msg,
        (_, BodyKind::Length(_)) => "straight insufficient bytes".into(),
        (_, BodyKind::Chunked) if stream.in_chunk_data() => "chunked insufficient bytes".into(),
        (_, BodyKind::Chunked) => "chunked read err".into(),
        (_, BodyKind::Eof | BodyKind::None) => "eof socket fail".into(),
    };
    BodyFail { read_error, msg }
}

/// An I/O error as `strerror` words it: Rust's text without its
/// ` (os error N)` suffix.
pub(crate) fn errno_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Reads a backend body through the fetch filters, or the ESI stage,
/// handing each piece to `push`; what the ESI stage found once the body is
/// complete.
async fn pump_body(
    bbt: f64,
    f: &mut Fetched,
    chain: &mut FetchChain,
    esi: &mut Option<crate::fetch::esi::EsiFetch>,
    frag: usize,
    abandoned: impl Fn() -> bool,
    mut push: impl FnMut(Bytes) -> Result<(), String>,
) -> Result<Option<crate::fetch::esi::Finished>, BodyFail> {
    let mut stream = BodyStream::new(f.body, true);
    loop {
        // As varnishd (vbf_stp_fetchbody): before each read, a private
        // object nobody delivers any more ends the fetch.
        if abandoned() {
            return Err(PASS_ABANDONED.to_string().into());
        }
        let seg = match stream
            .next(&mut f.conn.stream, &mut f.rbuf, secs(bbt))
            .await
        {
            Ok(Some(s)) => {
                f.body_read += s.len() as u64;
                s
            }
            Ok(None) => break,
            Err(e) => return Err(body_error(f.body, &stream, e)),
        };
        // `debug.fragfetch` cuts the body into small pieces.
        let mut rest = seg;
        while !rest.is_empty() {
            let seg = rest.split_to(frag.min(rest.len()));
            if let Some(e) = esi.as_mut() {
                let mut failed = None;
                e.feed(seg, &mut |b: Bytes| {
                    if failed.is_none()
                        && let Err(x) = push(b)
                    {
                        failed = Some(x);
                    }
                })?;
                if let Some(x) = failed {
                    return Err(x.into());
                }
                continue;
            }
            let seg = chain.feed(seg).map_err(|e| e.to_string())?;
            if seg.is_empty() {
                continue;
            }
            push(seg)?;
        }
    }
    let tail = chain.finish().map_err(|e| e.to_string())?;
    if !tail.is_empty() {
        push(tail)?;
    }
    match esi.take() {
        Some(e) => {
            let mut failed = None;
            let done = e.finish(&mut |b: Bytes| {
                if failed.is_none()
                    && let Err(x) = push(b)
                {
                    failed = Some(x);
                }
            })?;
            match failed {
                Some(x) => Err(x.into()),
                None => Ok(Some(done)),
            }
        }
        None => Ok(None),
    }
}

/// The ESI instructions of the object a 304 refreshed, kept with its body.
fn replaced_esi(mode: &FetchMode) -> Option<Bytes> {
    match mode {
        FetchMode::Miss {
            stale: Some(stale), ..
        }
        | FetchMode::Background { stale, .. } => stale.data().esi.clone(),
        _ => None,
    }
}

/// Whether the backend connection may be reused: not when the request
/// asked to close it, and as the response says (HTTP/1.1 unless
/// `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`).
fn backend_keeps_alive(bo: &BoTask, f: &Fetched) -> bool {
    !f.close && persistent(&bo.beresp)
}

/// Whether a response lets its connection be reused.
fn persistent(beresp: &RespMsg) -> bool {
    let version = if &beresp.proto[..] == b"HTTP/1.0" {
        lacquer_http::Version::Http10
    } else {
        lacquer_http::Version::Http11
    };
    lacquer_http::persistence(&beresp.headers, version).keep_alive()
}

/// Whether the connection may go back to the pool: the backend keeps it
/// alive and it did not start with a PROXY header naming this client.
/// Bodies at most this long are read and dropped to keep the backend
/// connection of a response that is not used; longer ones close it.
const DRAIN_MAX: u64 = 64 * 1024;

/// Lets go of a response whose body nobody wants: a short body of a
/// reusable connection is read (within `between_bytes_timeout`) and the
/// connection recycled; anything else closes it.
async fn drain_and_let_go(bo: &mut BoTask, mut f: Fetched) {
    if let BodyKind::Length(n) = f.body
        && n <= DRAIN_MAX
        && reusable(bo, &f)
    {
        let bbt = secs(between_bytes(bo, &f));
        let mut stream = BodyStream::new(f.body, true);
        let mut read = 0u64;
        loop {
            match stream.next(&mut f.conn.stream, &mut f.rbuf, bbt).await {
                Ok(Some(seg)) => read += seg.len() as u64,
                Ok(None) if read == n && f.rbuf.is_empty() => {
                    f.body = BodyKind::None;
                    break;
                }
                _ => break,
            }
        }
    }
    let_go(bo, f);
}

fn reusable(bo: &BoTask, f: &Fetched) -> bool {
    f.backend.proxy_header.is_none() && backend_keeps_alive(bo, f)
}

/// A response given up before its body was read (a retry, a rollback):
/// the connection goes back to the pool when no body is left on it.
fn let_go(bo: &mut BoTask, f: Fetched) {
    let empty = matches!(f.body, BodyKind::None | BodyKind::Length(0)) && f.rbuf.is_empty();
    let recycle = empty && reusable(bo, &f);
    let port = f.conn.local_port();
    let how = if recycle { "recycle" } else { "close" };
    bo.vsl.log(
        Tag::BackendClose,
        format_args!("{port} {} {how}", f.backend.vcl_name),
    );
    if recycle {
        bo.sh.counters.inc(Main::backend_recycle);
        f.backend.pool.recycle(f.conn);
    }
}

/// The body is in: timestamps, length, and the connection goes back to
/// the pool when the framing allows.
fn body_done(bo: &mut BoTask, f: Fetched, len: u64) {
    // As varnishd's acct: what came from the backend, not what was stored.
    bo.acct.beresp_body += f.body_read;
    let port = f.conn.local_port();
    let keep_alive = reusable(bo, &f);
    if f.body != BodyKind::Eof && keep_alive {
        bo.vsl.log(
            Tag::BackendClose,
            format_args!("{port} {} recycle", f.backend.vcl_name),
        );
        bo.sh.counters.inc(Main::backend_recycle);
        f.backend.pool.recycle(f.conn);
    } else if !keep_alive {
        bo.vsl.log(
            Tag::BackendClose,
            format_args!(
                "{port} {} close Backend/VCL requested close",
                f.backend.vcl_name
            ),
        );
    } else {
        bo.vsl.log(
            Tag::BackendClose,
            format_args!("{port} {} close", f.backend.vcl_name),
        );
    }
    bo.log_ts("BerespBody", lacquer_http::date::now());
    bo.end_privs();
    bo.vsl.log(Tag::Length, format_args!("{len}"));
}

/// A comma-separated list without `token` (case-insensitive).
fn strip_token(list: &[u8], token: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(list.len());
    for item in list.split(|b| *b == b',') {
        let t = item.trim_ascii();
        if t.is_empty() || t.eq_ignore_ascii_case(token) {
            continue;
        }
        if !out.is_empty() {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(t);
    }
    out
}

/// The body status as `Fetch_Body` logs it (varnishd's number and name).
fn body_kind_name(k: BodyKind) -> &'static str {
    match k {
        BodyKind::None => "0 none",
        BodyKind::Length(_) => "3 length",
        BodyKind::Chunked => "2 chunked",
        BodyKind::Eof => "4 eof",
    }
}

enum ErrorNext {
    Done,
    Retry,
    Fail,
}

/// vcl_backend_error and the synthetic object it makes.
/// Charges a `Date` line as varnishd's `http_TimeHeader` does (the
/// name and a 30-byte date buffer from the workspace): without room the
/// line is lost (`LostHeader Date: `, `MAIN.losthdr`) and the workspace
/// marked overflowed (seed 230020: a workspace nearly used up in
/// vcl_backend_fetch, then vcl_backend_error's made-up response).
fn time_header(bo: &mut BoTask, date: &str) -> bool {
    if bo.ws.take(header_len(b"Date", date.as_bytes())) {
        return true;
    }
    bo.vsl.log_str(Tag::LostHeader, "Date: ");
    bo.sh.counters.inc(Main::losthdr);
    false
}

async fn backend_error(
    job: &mut FetchJob,
    scratch: &mut Scratch,
    status: u16,
    reason: Option<Bytes>,
) -> ErrorNext {
    let bo = &mut job.bo;
    bo.now = lacquer_http::date::now();
    bo.log_ts("Error", bo.now);
    bo.beresp = RespMsg::new(status);
    if let Some(r) = reason {
        bo.beresp.reason = r;
    }
    let date = lacquer_http::date::format_http_date(bo.now);
    if time_header(bo, &date) {
        bo.beresp.headers.append("Date", date);
    }
    bo.beresp.headers.append("Server", "Varnish");
    // As varnishd's vbf_stp_error: the made-up response is logged as
    // beresp before vcl_backend_error sees it.
    log_resp(bo, Tag::BerespProtocol);
    bo.synth_body.clear();
    bo.t_origin = bo.now;
    // As varnishd's vbf_stp_error: with requests on the waiting list the
    // error object is cached briefly (ttl 1 s, grace and keep 5 s) so the
    // list drains on it, each waiter getting this 503, instead of each one
    // fetching from the failing backend in turn; else it expires at once.
    let waiters = match &job.mode {
        FetchMode::Miss { busy, .. }
        | FetchMode::HitMiss { busy, .. }
        | FetchMode::Background { busy, .. } => busy.has_waiters(),
        FetchMode::Pass => false,
    };
    (bo.ttl, bo.grace, bo.keep) = if waiters {
        (1.0, 5.0, 5.0)
    } else {
        (0.0, 0.0, 0.0)
    };
    let vcl = bo.vcl.clone();
    match vcl.run_async(BuiltinSub::BackendError, bo, scratch).await {
        Action::Deliver => {}
        Action::Retry => return ErrorNext::Retry,
        _ => return ErrorNext::Fail,
    }
    let body = Bytes::from(std::mem::take(&mut bo.synth_body));
    bo.beresp.headers.remove("content-length");
    // As varnishd: the error object of a cacheable fetch is an ordinary
    // object (`obj.uncacheable` false), expired at once unless
    // vcl_backend_error gave it a ttl.
    let kind = if bo.uncacheable {
        ObjKind::HitForMiss
    } else {
        ObjKind::Normal
    };
    // As varnishd (vbf_beresp2obj): the error object is stored as any
    // other, in Transient only when it is uncacheable (a pass is, from
    // its start) or short-lived. Not by the fetch mode: an object that
    // could not be stored has given up its busy object already, and its
    // error object counts as short-lived, not uncacheable.
    let store = pick_store(bo, false).unwrap_or_else(|| bo.sh.cache.transient());
    bo.vsl.log(
        Tag::Storage,
        format_args!("{} {}", store.stevedore().kind(), store.name()),
    );
    bo.vsl.log(Tag::Length, format_args!("{}", body.len()));
    let new = NewObject {
        gzip: false,
        gzip_changed: false,
        body: NewBody::Complete(lacquer_storage::Body::from_segments(vec![body])),
        ..object_from(bo, kind)
    };
    let inserted = match std::mem::replace(&mut job.mode, FetchMode::Pass) {
        FetchMode::Pass => bo.sh.cache.insert_private(new, &store),
        FetchMode::Miss { busy, .. }
        | FetchMode::HitMiss { busy, .. }
        | FetchMode::Background { busy, .. } => busy.unbusy(new, &store),
    };
    match inserted {
        Ok(u) => {
            if let Some(n) = job.notify.take() {
                let _ = n.send(FetchOutcome::Object(u.obj));
            }
            ErrorNext::Done
        }
        Err(_) => ErrorNext::Fail,
    }
}
