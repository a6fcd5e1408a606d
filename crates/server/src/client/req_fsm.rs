//! The client request state machine, as varnishd's `cache_req_fsm.c`.
//!
//! ```text
//!            ┌──────────── restart (≤ max_restarts) ◀───────────────┐
//!            ▼                                                      │
//!        vcl_recv ──hash──▶ vcl_hash ──▶ lookup ──hit──▶ vcl_hit ──deliver──▶ vcl_deliver ──▶ transmit
//!         │ │ │ │                          │ │ busy: wait, lookup again    │
//!         │ │ │ │                          │ └─miss/hit-for-miss─▶ vcl_miss ──fetch──▶ fetch task
//!         │ │ │ │                          └─hit-for-pass──┐
//!         │ │ │ └─pass─────────────────────▶ vcl_pass ◀────┘──fetch──▶ fetch task (private)
//!         │ │ └─pipe──▶ vcl_pipe ──▶ tunnel
//!         │ └─purge──▶ purge ──▶ vcl_purge
//!         └─synth──▶ vcl_synth ──▶ transmit
//! ```
//!
//! Every state keeps Varnish's log records and counters so that varnishlog
//! users see the transactions they expect.

use crate::pid;
use crate::runtime::counters::Main;
use lacquer_vsl::push_u64;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use lacquer_cache::{Lookup, LookupRequest, ObjRef};
use lacquer_http::Headers;
use lacquer_vcl::exec::{Action, Scratch, Workspace as _};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vsl::Tag;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::client::cond::{RangeOutcome, apply_range, not_modified};
use crate::client::req_task::ReqTask;
use crate::client::txio::{TimedWriter, TxError};
use crate::fetch::bo_task::BoTask;
use crate::fetch::fetch_fsm::{FetchJob, FetchMode, FetchOutcome};
use crate::fetch::gzip::Gunzip;
use crate::runtime::msg::{HeaderView, ReqMsg, RespMsg};
use crate::runtime::task::SessInfo;
use crate::runtime::ws::{Workspace, header_len};

/// `Via` header value Lacquer adds to responses.
pub const VIA: &str = "1.1 varnish (Lacquer/0.1)";

/// The client connection a request arrived on: the bytes of an HTTP/1
/// connection, or an HTTP/2 stream (request body in, response body out)
/// whose response head goes out through `h2` instead of as bytes.
pub struct ClientConn<S> {
    pub stream: S,
    pub rbuf: BytesMut,
    pub h2: Option<crate::client::h2::StreamHead>,
}

/// How a request ended for its connection.
#[derive(Debug)]
pub enum After {
    KeepAlive,
    Close,
    /// Writing the response failed: the session ends for this reason.
    TxFailed(TxError),
    /// The delivery could not be set up (a `resp.filters` naming an
    /// unknown filter): nothing was sent and the session ends
    /// (varnishd's `OVERLOAD`).
    Overload,
    /// The response went out and the session closes for this reason
    /// (varnishd's `REQ_CLOSE`, `REQ_HTTP10`, `RESP_CLOSE`, `TX_EOF`).
    CloseAs(&'static str),
    /// A pipe ended: the session closes as `TX_PIPE` when the tunnel had
    /// a backend connection, `TX_ERROR` when it had none (varnishd's
    /// `vbe_dir_http1pipe`).
    Piped(bool),
}

/// Where a request goes once vcl_hash has run.
enum AfterHash {
    Lookup,
    Pass,
    Pipe,
    Synth {
        status: u16,
        reason: Option<Bytes>,
    },
    /// `return (vcl(...))` where it is not allowed: vcl_hash runs, then
    /// the error is logged and a plain 503 follows.
    IllegalVcl(&'static str),
    /// `return (restart)` from vcl_recv: varnishd 7.1 runs vcl_hash for
    /// it too before the restart.
    Restart,
}

enum State {
    Recv,
    /// vcl_hash, which runs after every vcl_recv (as in varnishd), then
    /// where vcl_recv was going.
    Hash(AfterHash),
    Lookup,
    Miss {
        busy: lacquer_cache::BusyObj,
        stale: Option<ObjRef>,
        /// A hit-for-miss: the marker the fetched object replaces.
        hitmiss: Option<ObjRef>,
    },
    Hit(ObjRef, Option<lacquer_cache::BusyObj>),
    Pass,
    Pipe,
    Purge,
    Synth {
        status: u16,
        reason: Option<Bytes>,
    },
    Deliver {
        obj: ObjRef,
        hit: bool,
        pass: bool,
        /// The object came from this request's own fetch while its body
        /// was still being fetched (`FetchOutcome::Streaming`).
        streaming: bool,
    },
    Restart,
}

/// Handles one request on a client connection.
pub async fn handle<S>(t: &mut ReqTask, conn: &mut ClientConn<S>) -> After
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let sh = t.sh.clone();
    let mut scratch = Scratch::default();
    let max_restarts = sh.params().uint(pid!("max_restarts")) as u32;
    // As varnishd: the received head is the first thing in the client
    // workspace, and what std.rollback(req) goes back to (an ESI include's
    // request is built from its parent's and has nothing to add).
    t.ws.take(t.req_hdr_bytes);
    t.ws_req = t.ws.snapshot();
    if t.esi_level == 0 {
        sh.counters.inc(Main::client_req);
    }
    // As varnishd: the request as it arrived (http0) is kept for ESI
    // includes and rollbacks before X-Forwarded-For is added, which every
    // request gets, an include too (so an include's Accept-Encoding comes
    // before it).
    t.req_orig = t.req.clone();
    add_xff(t);
    let mut state = State::Recv;
    let mut vcl_switched = false;
    loop {
        if !sh.is_running() {
            // The cache process died under this request (a panic from
            // VCL): as with varnishd's child, the client gets no answer.
            return After::Close;
        }
        t.now = lacquer_http::date::now();
        state = match state {
            State::Recv => {
                t.is_hit = false;
                // As varnishd's cnt_recv_prep: a new round forgets the
                // reason of an earlier synth.
                t.synth_code.1 = None;
                t.lookup_hook = None;
                t.hash = None;
                t.digest = None;
                let vcl = t.vcl.clone();
                // A client waiting for 100 Continue sends its body only
                // then: a std.cache_req_body() in vcl_recv asks for it at
                // the call, so vcl_recv runs beside the connection.
                let action = if t.want_100
                    && t.body_pending.is_some()
                    && vcl.req_body_prefetch > 0
                    && conn.h2.is_none()
                {
                    let timeout = Duration::from_secs_f64(t.timeouts.timeout_idle.max(0.001));
                    let rt = tokio::runtime::Handle::current();
                    crate::client::reqbody::recv_with_body(conn, t, timeout, |t| {
                        vcl.run_blocking(BuiltinSub::Recv, t, &mut scratch, &rt)
                    })
                } else {
                    vcl.run_async(BuiltinSub::Recv, t, &mut scratch).await
                };
                // As varnishd: the owed 100 goes out once vcl_recv returns
                // (unless it failed or switches VCL), or when the body is
                // read after std.late_100_continue(true).
                let vcl_switch = matches!(action, Action::Vcl(_)) && t.restarts == 0;
                if t.want_100
                    && !t.late_100
                    && !vcl_switch
                    && !matches!(action, Action::Fail)
                    && send_100(t, conn).await.is_err()
                {
                    return After::TxFailed(TxError::Closed);
                }
                if t.req_body_failed && !matches!(action, Action::Fail) {
                    // As varnishd's cnt_recv: a body std.cache_req_body()
                    // could not keep ends the session without an answer
                    // (SC_RX_BODY), after the owed 100 went out and unless
                    // vcl_recv failed (which answers 503). Its FetchError
                    // was logged at the call; the request ends with its
                    // accounting.
                    t.end_privs();
                    let (rxh, rxb) = (t.req_hdr_bytes, t.req_body_bytes);
                    t.vsl.log(
                        Tag::ReqAcct,
                        format_args!("{rxh} {rxb} {} 0 0 0", rxh + rxb),
                    );
                    return After::CloseAs("RX_BODY");
                }
                let ae_rules = sh.params().flag(pid!("http_gzip_support"));
                match action {
                    Action::Hash | Action::Lookup => {
                        if ae_rules {
                            normalise_ae(&mut t.vsl, &mut t.req.headers);
                        }
                        State::Hash(AfterHash::Lookup)
                    }
                    Action::Pass { .. } => State::Hash(AfterHash::Pass),
                    Action::Pipe => State::Hash(AfterHash::Pipe),
                    Action::Purge => {
                        if ae_rules {
                            normalise_ae(&mut t.vsl, &mut t.req.headers);
                        }
                        t.purging = true;
                        State::Hash(AfterHash::Lookup)
                    }
                    Action::Synth { status, reason } => {
                        State::Hash(AfterHash::Synth { status, reason })
                    }
                    Action::Restart => State::Hash(AfterHash::Restart),
                    Action::Vcl(label) if t.restarts == 0 && !vcl_switched => {
                        match sh.vcl_by_label(&label) {
                            Some(v) => {
                                vcl_switched = true;
                                t.vsl
                                    .log(Tag::VCL_use, format_args!("{} via {}", v.name, label));
                                t.backend_hint = v.default_backend();
                                t.vcl = v;
                                t.req = t.req_orig.clone();
                                add_xff(t);
                                State::Recv
                            }
                            None => State::Synth {
                                status: 503,
                                reason: Some(Bytes::from_static(b"VCL failed")),
                            },
                        }
                    }
                    Action::Vcl(_) if t.restarts > 0 => {
                        State::Hash(AfterHash::IllegalVcl("Not after restarts"))
                    }
                    // As varnishd's cnt_recv: a second return(vcl) (from the
                    // VCL a label switched to) is not a VCL failure; vcl_hash
                    // runs and the request gets a 503 synth, the session kept.
                    Action::Vcl(_) => State::Hash(AfterHash::IllegalVcl("Only from active VCL")),
                    _ => fail_synth(t),
                }
            }
            State::Hash(next) => {
                t.hash = Some(lacquer_cache::HashBuilder::new());
                let vcl = t.vcl.clone();
                let action = vcl.run_async(BuiltinSub::Hash, t, &mut scratch).await;
                let h = t.hash.take().unwrap_or_default();
                t.digest = Some(h.finish());
                match (action, next) {
                    (Action::Lookup, AfterHash::Lookup) if t.purging => State::Purge,
                    (Action::Lookup, AfterHash::Lookup) => State::Lookup,
                    (Action::Lookup, AfterHash::Pass) => State::Pass,
                    // As varnishd's cnt_recv: a pipe an ESI include or an
                    // HTTP/2 request cannot take becomes a pass once
                    // vcl_hash ran, logged then.
                    (Action::Lookup, AfterHash::Pipe) if t.esi_level > 0 => {
                        t.vsl.log_str(
                            Tag::VCL_Error,
                            "vcl_recv{} returns pipe for ESI included object.  Doing pass.",
                        );
                        State::Pass
                    }
                    (Action::Lookup, AfterHash::Pipe) if conn.h2.is_some() => {
                        t.vsl.log_str(
                            Tag::VCL_Error,
                            "vcl_recv{} returns pipe for HTTP/2 request.  Doing pass.",
                        );
                        State::Pass
                    }
                    (Action::Lookup, AfterHash::Pipe) => State::Pipe,
                    (Action::Lookup, AfterHash::Synth { status, reason }) => {
                        State::Synth { status, reason }
                    }
                    (Action::Lookup, AfterHash::Restart) => State::Restart,
                    (Action::Lookup, AfterHash::IllegalVcl(why)) => {
                        t.vsl
                            .log(Tag::VCL_Error, format_args!("Illegal return(vcl): {why}"));
                        State::Synth {
                            status: 503,
                            reason: None,
                        }
                    }
                    _ => fail_synth(t),
                }
            }
            State::Lookup => lookup(t).await,
            State::Purge => {
                t.purging = false;
                let digest = t.digest.expect("digest computed in vcl_hash");
                sh.cache.purge(&digest, t.now, 0.0, 0.0, 0.0);
                let vcl = t.vcl.clone();
                match vcl.run_async(BuiltinSub::Purge, t, &mut scratch).await {
                    Action::Synth { status, reason } => State::Synth { status, reason },
                    Action::Restart => State::Restart,
                    _ => fail_synth(t),
                }
            }
            State::Hit(obj, bgfetch) => {
                t.obj = Some(obj.clone());
                // As varnishd: the Hit record comes before vcl_hit, its
                // ttl counted from the request's arrival as the lookup's.
                let ttl_left = obj.t_origin() + obj.ttl() - t.t_req;
                // As varnishd: a hit on an object still being fetched also
                // shows how much has arrived, and the length when known.
                let fetching = (!obj.body().is_finished()).then(|| {
                    let cl = crate::runtime::task::obj_header(&obj, b"content-length")
                        .and_then(|v| std::str::from_utf8(v).ok())
                        .and_then(|v| v.trim().parse::<u64>().ok());
                    (obj.body().len_so_far(), cl)
                });
                t.vsl.log_with(Tag::Hit, |o| {
                    push_u64(o, u64::from(obj.vxid()));
                    for v in [ttl_left, obj.grace(), obj.keep()] {
                        o.push(b' ');
                        lacquer_vsl::push_fixed6(o, v);
                    }
                    if let Some((so_far, len)) = fetching {
                        o.push(b' ');
                        push_u64(o, so_far);
                        if let Some(l) = len {
                            o.push(b' ');
                            push_u64(o, l);
                        }
                    }
                });
                let vcl = t.vcl.clone();
                let action = vcl.run_async(BuiltinSub::Hit, t, &mut scratch).await;
                match action {
                    Action::Deliver => {
                        if let Some(busy) = bgfetch {
                            start_bgfetch(t, busy, obj.clone());
                        }
                        if obj.t_origin() + obj.ttl() <= t.t_req {
                            sh.counters.inc(Main::cache_hit_grace);
                        }
                        sh.counters.inc(Main::cache_hit);
                        State::Deliver {
                            obj,
                            hit: true,
                            pass: false,
                            streaming: false,
                        }
                    }
                    Action::Pass { .. } => {
                        // A pass from a hit is still a hit (varnishd's
                        // is_hit): counted, and X-Varnish names the object.
                        sh.counters.inc(Main::cache_hit);
                        t.is_hit = true;
                        t.obj = None;
                        State::Pass
                    }
                    Action::Synth { status, reason } => {
                        t.obj = None;
                        State::Synth { status, reason }
                    }
                    Action::Restart => {
                        t.obj = None;
                        State::Restart
                    }
                    _ => {
                        t.obj = None;
                        fail_synth(t)
                    }
                }
            }
            State::Miss {
                busy,
                stale,
                hitmiss,
            } => {
                let vcl = t.vcl.clone();
                match vcl.run_async(BuiltinSub::Miss, t, &mut scratch).await {
                    Action::Fetch => {
                        // As varnishd's cnt_miss: a miss (a hit-for-miss
                        // too) counts when vcl_miss goes on to fetch.
                        sh.counters.inc(Main::cache_miss);
                        let mode = match hitmiss {
                            Some(marker) => FetchMode::HitMiss { busy, marker },
                            None => FetchMode::Miss { busy, stale },
                        };
                        match fetch(t, conn, mode, false).await {
                            Some((obj, streaming)) => State::Deliver {
                                obj,
                                hit: false,
                                pass: false,
                                streaming,
                            },
                            // A failed fetch (vcl_backend_* failed or
                            // abandoned) is a plain 503, as varnishd.
                            None => State::Synth {
                                status: 503,
                                reason: None,
                            },
                        }
                    }
                    Action::Pass { .. } => State::Pass,
                    Action::Synth { status, reason } => State::Synth { status, reason },
                    Action::Restart => State::Restart,
                    _ => fail_synth(t),
                }
            }
            State::Pass => {
                let vcl = t.vcl.clone();
                match vcl.run_async(BuiltinSub::Pass, t, &mut scratch).await {
                    Action::Fetch => {
                        sh.counters.inc(Main::s_pass);
                        match fetch(t, conn, FetchMode::Pass, true).await {
                            Some((obj, streaming)) => State::Deliver {
                                obj,
                                hit: t.is_hit,
                                pass: true,
                                streaming,
                            },
                            // A failed fetch (vcl_backend_* failed or
                            // abandoned) is a plain 503, as varnishd.
                            None => State::Synth {
                                status: 503,
                                reason: None,
                            },
                        }
                    }
                    Action::Synth { status, reason } => State::Synth { status, reason },
                    Action::Restart => State::Restart,
                    _ => fail_synth(t),
                }
            }
            State::Pipe => {
                sh.counters.inc(Main::s_pipe);
                match crate::client::pipe::pipe(t, conn, &mut scratch).await {
                    crate::client::pipe::Piped::Done(after) => return after,
                    crate::client::pipe::Piped::Synth(status, reason) => {
                        State::Synth { status, reason }
                    }
                }
            }
            State::Deliver {
                obj,
                hit,
                pass,
                streaming,
            } => match deliver(t, conn, obj, hit, pass, streaming, &mut scratch).await {
                Delivered::Done(after) => return after,
                Delivered::Restart => State::Restart,
                Delivered::Synth(status, reason) => State::Synth { status, reason },
            },
            State::Synth { status, reason } => {
                match synth(t, conn, status, reason, &mut scratch).await {
                    Delivered::Done(after) => return after,
                    Delivered::Restart => State::Restart,
                    Delivered::Synth(..) => unreachable!("vcl_synth cannot return synth"),
                }
            }
            State::Restart => {
                t.obj = None;
                // As varnishd: the count goes up first, so vcl_synth sees
                // max_restarts + 1 when the limit is exceeded.
                t.restarts += 1;
                if t.restarts > max_restarts {
                    t.vsl.log_str(Tag::VCL_Error, "Too many restarts");
                    // As varnishd's cnt_restart: only the status is set;
                    // the reason of the last synth of this request (say
                    // "VCL failed") stays.
                    State::Synth {
                        status: 503,
                        reason: t.synth_code.1.clone(),
                    }
                } else {
                    restart_vxid(t);
                    t.resp = RespMsg::new(200);
                    State::Recv
                }
            }
        };
    }
}

/// X-Forwarded-For gets the client address appended, once per request
/// (client or ESI include) before its first vcl_recv.
fn add_xff(t: &mut ReqTask) {
    let ip = t.sess.client_ip.clone();
    match t.req.headers.get("x-forwarded-for").map(<[u8]>::to_vec) {
        Some(mut v) => {
            for (k, old) in t.req.headers.iter() {
                if k.eq_ignore_ascii_case(b"x-forwarded-for") {
                    t.vsl.log_header(Tag::ReqUnset, k, old);
                }
            }
            t.req.headers.collect("x-forwarded-for");
            v = t
                .req
                .headers
                .get("x-forwarded-for")
                .map(<[u8]>::to_vec)
                .unwrap_or(v);
            v.extend_from_slice(b", ");
            v.extend_from_slice(&ip);
            t.ws.take(header_len(b"X-Forwarded-For", &v));
            t.vsl.log_header(Tag::ReqHeader, b"X-Forwarded-For", &v);
            // As varnishd: the new value goes at the end of the list.
            t.req.headers.remove("x-forwarded-for");
            t.req.headers.append("X-Forwarded-For", v);
        }
        None => {
            // As varnishd's http_PrintfHeader: with every header slot
            // (`http_max_hdr`) taken by the client's fields, the line is
            // lost and the workspace marked overflowed, which ends the
            // request in a 500 at delivery.
            let slots = t.ws.header_slots();
            if slots > 0 && t.req.headers.len() >= slots {
                t.sh.counters.inc(Main::losthdr);
                t.vsl
                    .log(Tag::Error, format_args!("out of workspace ({})", t.ws.id()));
                t.vsl.log_header(Tag::LostHeader, b"X-Forwarded-For", &ip);
                t.ws.mark_overflow();
                return;
            }
            t.ws.take(header_len(b"X-Forwarded-For", &ip));
            t.vsl.log_header(Tag::ReqHeader, b"X-Forwarded-For", &ip);
            t.req.headers.append("X-Forwarded-For", ip);
        }
    }
}

/// Removes a request's `Expect` header, logged as unset (HTTP/1 and
/// HTTP/2 consume `100-continue` themselves, as varnishd).
pub(crate) fn consume_expect(vsl: &mut lacquer_vsl::VslBuf, req: &mut ReqMsg) {
    if let Some((k, v)) = req
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(b"expect"))
    {
        vsl.log_header(Tag::ReqUnset, k, v);
    }
    req.headers.remove("expect");
}

/// The records that open a request's log (`ReqStart` and the request as
/// received), written when it arrives and again after each restart.
///
/// `ReqStart` is varnishd 7.1's `IP port listener`; a client that reached
/// us over TLS (our own handshake, or a terminator's PROXY v2 header with
/// `PP2_CLIENT_SSL`: both arrive as the session's TLVs) gets a fourth
/// field, `https`, as Varnish 9 logs it. Plain connections keep 7.1's
/// three fields, so log queries and tools written for 7.1 see no change.
pub(crate) fn log_req_start(vsl: &mut lacquer_vsl::VslBuf, sess: &SessInfo, req: &ReqMsg) {
    let https = lacquer_http::proxy::find_tlv(&sess.proxy_tlvs, PP2_TYPE_SSL)
        .and_then(|v| v.first())
        .is_some_and(|client| client & PP2_CLIENT_SSL != 0);
    vsl.log_with(Tag::ReqStart, |o| {
        o.extend_from_slice(&sess.client_ip);
        o.push(b' ');
        o.extend_from_slice(sess.client_port.as_bytes());
        o.push(b' ');
        o.extend_from_slice(sess.listener.as_bytes());
        if https {
            o.extend_from_slice(b" https");
        }
    });
    vsl.log_bytes(Tag::ReqMethod, &req.method);
    vsl.log_bytes(Tag::ReqURL, &req.url);
    vsl.log_bytes(Tag::ReqProtocol, &req.proto);
    for (k, v) in req.headers.iter() {
        vsl.log_header(Tag::ReqHeader, k, v);
    }
}

/// PROXY v2's TLS TLV and, in its first byte, the "client used TLS" bit.
const PP2_TYPE_SSL: u8 = 0x20;
const PP2_CLIENT_SSL: u8 = 0x01;

/// As varnishd, a restart continues under a new vxid: the old transaction
/// ends with a `Link` to the new one, which begins with `req <old> restart`
/// and logs the request again.
fn restart_vxid(t: &mut ReqTask) {
    let now = lacquer_http::date::now();
    t.stamp("Restart", now);
    let new = t.sh.vxid.next();
    // `req <vxid> restart` without formatting machinery (once per restart).
    let link = |vsl: &mut lacquer_vsl::VslBuf, tag, vxid: &[u8]| {
        vsl.log_with(tag, |o| {
            o.extend_from_slice(b"req ");
            o.extend_from_slice(vxid);
            o.extend_from_slice(b" restart");
        })
    };
    let (mut a, mut b) = ([0u8; 20], [0u8; 20]);
    let new_digits = lacquer_vsl::u64_digits(u64::from(new), &mut a);
    link(&mut t.vsl, Tag::Link, new_digits);
    t.vsl.log_str(Tag::End, "");
    t.vsl.flush();
    let old = lacquer_vsl::u64_digits(u64::from(t.vxid), &mut b);
    t.vxid = new;
    t.vxid_str.clear();
    t.vxid_str.extend(new_digits.iter().map(|d| char::from(*d)));
    t.vsl.set_vxid(lacquer_vsl::Vxid::client(new));
    link(&mut t.vsl, Tag::Begin, old);
    t.vsl.log_timestamp("Start", now, now - t.t_req, 0.0);
    t.t_last = now;
    let sess = t.sess.clone();
    log_req_start(&mut t.vsl, &sess, &t.req);
}

/// An ESI response's validator is weak: its bytes depend on the includes.
fn weaken_etag(t: &mut ReqTask) {
    let Some(etag) = t.resp.headers.get("etag").map(Bytes::copy_from_slice) else {
        return;
    };
    if etag.starts_with(b"W/") {
        return;
    }
    let mut weak = b"W/".to_vec();
    weak.extend_from_slice(&etag);
    t.vsl.log_header(Tag::RespUnset, b"ETag", &etag);
    t.vsl.log_header(Tag::RespHeader, b"ETag", &weak);
    t.resp.headers.remove("etag");
    t.resp.headers.append("ETag", weak);
}

/// A client-side subroutine failed: a 503 "VCL failed", and the
/// connection closes after it.
fn fail_synth(t: &mut ReqTask) -> State {
    vcl_failed(t);
    State::Synth {
        status: 503,
        reason: Some(Bytes::from_static(b"VCL failed")),
    }
}

/// A client-side subroutine failed (`MAIN.vcl_fail` counts it where VCL
/// runs): the connection closes after the response.
pub(crate) fn vcl_failed(t: &mut ReqTask) {
    t.vcl_failed = true;
    // As varnishd: the workspace goes back to the request as received.
    t.ws_rollback();
}

/// `n` in decimal, for header values (one exact-size allocation).
pub(crate) fn decimal(n: u64) -> Bytes {
    let mut buf = [0u8; 20];
    Bytes::copy_from_slice(lacquer_vsl::u64_digits(n, &mut buf))
}

/// Makes `Accept-Encoding` say `gzip` as varnishd's `http_ForceHeader`
/// does: one already saying so stays where it is, anything else goes
/// and the new line comes last.
pub(crate) fn force_gzip_ae(h: &mut Headers) {
    if h.get("accept-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case(b"gzip"))
    {
        return;
    }
    h.remove("accept-encoding");
    h.append("Accept-Encoding", "gzip");
}

/// `Accept-Encoding` after vcl_recv when `http_gzip_support` is on: `gzip`
/// when the client accepts it (see [`force_gzip_ae`]), else removed;
/// each change logged as varnishd logs it.
fn normalise_ae(vsl: &mut lacquer_vsl::VslBuf, h: &mut Headers) {
    let Some(gzip) = h
        .get("accept-encoding")
        .map(crate::fetch::gzip::accepts_gzip)
    else {
        return;
    };
    if gzip
        && h.get("accept-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case(b"gzip"))
    {
        return;
    }
    for (k, v) in h.iter() {
        if k.eq_ignore_ascii_case(b"accept-encoding") {
            vsl.log_header(Tag::ReqUnset, k, v);
        }
    }
    h.remove("accept-encoding");
    if gzip {
        vsl.log_header(Tag::ReqHeader, b"Accept-Encoding", b"gzip");
        h.append("Accept-Encoding", "gzip");
    }
}

async fn lookup(t: &mut ReqTask) -> State {
    let sh = t.sh.clone();
    let digest = t.digest.expect("digest computed in vcl_hash");
    // A vmod's hook serves this lookup (and its retries after waiting).
    let mut hook = t.lookup_hook.take();
    loop {
        let result = {
            let view = HeaderView(&t.req.headers);
            // As varnishd's HSH_Lookup: freshness and grace are judged at
            // the request's arrival (t_req), also after the waiting list,
            // so a request queued behind a fetch gets the object that
            // fetch made even if its ttl ended while it waited.
            let lr = LookupRequest {
                digest: &digest,
                url: &t.req.url,
                headers: &view,
                now: t.t_req,
                req_ttl: t.ttl,
                req_grace: t.grace,
                ignore_busy: t.hash_ignore_busy,
                always_miss: t.hash_always_miss,
                ignore_vary: t.hash_ignore_vary,
            };
            match hook.as_deref_mut() {
                Some(h) => sh.cache.lookup_hooked(&lr, &mut VclHook(h)),
                None => sh.cache.lookup(&lr),
            }
        };
        for v in result.banned {
            t.vsl.log(Tag::ExpBan, format_args!("{v} banned lookup"));
        }
        return match result.kind {
            Lookup::Hit(obj) => State::Hit(obj, None),
            Lookup::Grace { stale, bgfetch } => State::Hit(stale, bgfetch),
            Lookup::Miss { busy, stale } => State::Miss {
                busy,
                stale,
                hitmiss: None,
            },
            Lookup::HitMiss {
                busy,
                marker,
                vxid,
                dttl,
            } => {
                t.is_hitmiss = true;
                sh.counters.inc(Main::cache_hitmiss);
                t.vsl.log(Tag::HitMiss, format_args!("{vxid} {dttl:.6}"));
                State::Miss {
                    busy,
                    stale: None,
                    hitmiss: Some(marker),
                }
            }
            Lookup::HitPass { vxid, dttl } => {
                t.is_hitpass = true;
                sh.counters.inc(Main::cache_hitpass);
                t.vsl.log(Tag::HitPass, format_args!("{vxid} {dttl:.6}"));
                State::Pass
            }
            Lookup::Busy(waiter) => {
                waiter.wait().await;
                // varnishd 7.1 counts `client_req` each time an HTTP/1
                // request enters its state machine (HTTP1_Session's
                // H1PROC), so once more for every return from the
                // waiting list.
                if t.esi_level == 0 && !t.h2 {
                    sh.counters.inc(Main::client_req);
                }
                t.log_ts("Waitinglist");
                t.now = lacquer_http::date::now();
                continue;
            }
        };
    }
}

/// A vmod's lookup hook, as the cache asks it.
struct VclHook<'a>(&'a mut dyn lacquer_vcl::exec::LookupHook);

impl lacquer_cache::LookupHook for VclHook<'_> {
    fn candidate(&mut self, index: usize) -> lacquer_cache::HookVerdict {
        use lacquer_cache::HookVerdict as H;
        use lacquer_vcl::exec::LookupVerdict as V;
        match self.0.candidate(index) {
            V::Default => H::Default,
            V::Continue => H::Continue,
            V::Hit => H::Hit,
            V::Miss => H::Miss,
        }
    }
    fn finish(&mut self) -> Option<usize> {
        self.0.finish()
    }
}

/// Builds the backend request from the client request, as varnishd's
/// `http_FilterReq` does for a fetch or a pass.
fn make_bereq(t: &ReqTask, pass: bool, vxid: u32) -> ReqMsg {
    let mut h = Headers::new();
    let mask = if pass {
        lacquer_http::FILTER_PASS
    } else {
        lacquer_http::FILTER_FETCH
    };
    t.req.headers.copy_filtered(mask, &mut h);
    if !pass
        && t.req_body_kept
        && let Some(b) = t.req_body.as_ref()
        && let Some(at) = cl_position(&t.req.headers, mask)
    {
        // As varnishd 7.1: a cache fetch that sends a kept body keeps the
        // request's Content-Length where it was (std.cache_req_body() put
        // it there), though the fetch filter drops it otherwise.
        h = with_field_at(&h, at, b"Content-Length", &decimal(b.len() as u64));
    }
    let method = if pass || &t.req.method[..] != b"HEAD" {
        t.req.method.clone()
    } else {
        Bytes::from_static(b"GET")
    };
    let method = if pass {
        method
    } else {
        Bytes::from_static(b"GET")
    };
    if !pass && t.sh.params().flag(pid!("http_gzip_support")) {
        force_gzip_ae(&mut h);
    }
    if let Some(b) = t.req_body.as_ref().filter(|_| pass || t.req_body_kept) {
        // As varnishd: a body std.cache_req_body() kept goes to the
        // backend with its length, whatever the method (a cache fetch
        // sends it with its GET too).
        h.remove("transfer-encoding");
        h.set("Content-Length", decimal(b.len() as u64));
    }
    h.append("X-Varnish", vxid.to_string());
    ReqMsg {
        method,
        url: t.req.url.clone(),
        proto: Bytes::from_static(b"HTTP/1.1"),
        headers: h,
    }
}

/// Where the request's `Content-Length` lands among its fields that
/// survive the filter `mask` (none without one).
fn cl_position(req: &Headers, mask: u8) -> Option<usize> {
    let mut at = 0;
    for (name, _) in req.iter() {
        if name.eq_ignore_ascii_case(b"content-length") {
            return Some(at);
        }
        if lacquer_http::header_flags(name) & mask == 0 && !req.is_filtered(name) {
            at += 1;
        }
    }
    None
}

/// `h` with the field `name: value` inserted before its `at`th field.
fn with_field_at(h: &Headers, at: usize, name: &[u8], value: &[u8]) -> Headers {
    let mut out = Headers::new();
    for (i, (n, v)) in h.iter().enumerate() {
        if i == at {
            out.append(Bytes::copy_from_slice(name), Bytes::copy_from_slice(value));
        }
        out.append(Bytes::copy_from_slice(n), Bytes::copy_from_slice(v));
    }
    if at >= h.len() {
        out.append(Bytes::copy_from_slice(name), Bytes::copy_from_slice(value));
    }
    out
}

/// Prepares a fetch task for this request.
pub fn new_bo(t: &ReqTask, pass: bool, bereq: ReqMsg, vxid: u32) -> BoTask {
    let sh = &t.sh;
    let bereq_orig = bereq.clone();
    // As varnishd: the backend request is copied into the fetch's
    // workspace; std.rollback(bereq) comes back to it before X-Varnish.
    let mut ws = Workspace::backend(&sh.params());
    for part in [&bereq.method, &bereq.url, &bereq.proto] {
        ws.take(part.len() as u64 + 1);
    }
    let is_xv = |k: &[u8]| k.eq_ignore_ascii_case(b"x-varnish");
    for (k, v) in bereq.headers.iter().filter(|(k, _)| !is_xv(k)) {
        ws.take(header_len(k, v));
    }
    let ws_bo = ws.snapshot();
    for (k, v) in bereq.headers.iter().filter(|(k, _)| is_xv(k)) {
        ws.take(header_len(k, v));
    }
    // Rare (a HEAD or HTTP/1.0 client): where varnishd's forced fields
    // fall among the copied headers, for the log.
    let client_line = (t.req.method != bereq.method || t.req.proto != bereq.proto).then(|| {
        let mut copied = Headers::new();
        t.req.headers.copy_filtered(
            if pass {
                lacquer_http::FILTER_PASS
            } else {
                lacquer_http::FILTER_FETCH
            },
            &mut copied,
        );
        let ae_appended = !pass
            && sh.params().flag(pid!("http_gzip_support"))
            && !copied
                .get("accept-encoding")
                .is_some_and(|v| v.eq_ignore_ascii_case(b"gzip"));
        crate::fetch::bo_task::ClientLine {
            method: t.req.method.clone(),
            proto: t.req.proto.clone(),
            copied: copied.len(),
            ae_appended,
        }
    });
    let mut bo = BoTask {
        sh: sh.clone(),
        vcl: t.vcl.clone(),
        sess: t.sess.clone(),
        vxid,
        req_vxid: t.vxid,
        vxid_str: vxid.to_string(),
        bereq,
        client_line,
        beresp: RespMsg::new(200),
        t_bereq: lacquer_http::date::now(),
        t_beresp: 0.0,
        retries: 0,
        // The hint starts as the default backend; VCL may set it NULL.
        backend: t.backend_hint.clone(),
        beresp_backend: None,
        beresp_backend_ip: None,
        connect_timeout: None,
        first_byte_timeout: None,
        between_bytes_timeout: None,
        uncacheable: pass,
        is_bgfetch: false,
        is_hitmiss: t.is_hitmiss,
        is_hitpass: t.is_hitpass,
        digest: t.digest,
        has_body: false,
        t_origin: 0.0,
        ttl: 0.0,
        grace: 0.0,
        keep: 0.0,
        do_stream: true,
        do_gzip: false,
        do_gunzip: false,
        do_esi: false,
        vfp_filters: None,
        beresp_has_body: false,
        was_304: false,
        fast_304: false,
        storage: None,
        storage_hint: None,
        synth_body: Vec::new(),
        acct: Default::default(),
        acct_backend: None,
        client_identity: t.client_identity.clone(),
        vsl: lacquer_vsl::VslBuf::with_capacity(
            sh.vsl.clone(),
            lacquer_vsl::Vxid::backend(vxid),
            2048,
        ),
        privs: Default::default(),
        now: lacquer_http::date::now(),
        bereq_orig,
        cur_sub: BuiltinSub::BackendFetch,
        t_last: lacquer_http::date::now(),
        pipe_req: None,
        pipe_bereq_vsl: None,
        pipe_xid: String::new(),
        pipe_vars: Vec::new(),
        ws,
        ws_bo,
        beresp_dropped: false,
    };
    // As varnishd: the store is chosen when the fetch starts, in turn among
    // the stores (Transient for a pass); VCL may change it.
    let store = if pass {
        sh.cache.transient()
    } else {
        sh.cache.next_store()
    };
    bo.set_storage(Some(std::sync::Arc::from(store.name())));
    bo
}

/// Starts a fetch and waits for its object. A body `std.cache_req_body()`
/// kept goes to the backend whole, with any fetch; a pass also forwards a
/// body it did not keep, streamed off the client connection while the
/// fetch sends it (see [`crate::client::reqbody`]).
async fn fetch<S>(
    t: &mut ReqTask,
    conn: &mut ClientConn<S>,
    mode: FetchMode,
    pass: bool,
) -> Option<(ObjRef, bool)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    use crate::client::reqbody::CHANNEL_SEGMENTS;
    use crate::fetch::fetch_fsm::FetchBody;
    let vxid = t.sh.vxid.next();
    let how = if pass { "pass" } else { "fetch" };
    t.vsl.log(Tag::Link, format_args!("bereq {vxid} {how}"));
    let bereq = make_bereq(t, pass, vxid);
    let mut bo = new_bo(t, pass, bereq, vxid);
    let mut stream = None;
    // As varnishd 7.1's VBF_Fetch, a cache miss is handed the client's
    // body still on the connection as a pass is: sent unless VCL unsets
    // bereq.body (builtin.vcl does for a GET). A body read ahead for
    // std.cache_req_body() but not kept is not sent on a miss.
    let req_body = if let Some(b) = t.req_body.as_ref().filter(|_| pass || t.req_body_kept) {
        FetchBody::Cached(b.clone())
    } else if !pass && t.req_body.is_some() {
        FetchBody::None
    } else if let Some(p) = t.body_pending.take() {
        let length = p.length();
        match length {
            Some(n) => {
                bo.bereq.headers.remove("transfer-encoding");
                bo.bereq.headers.set("Content-Length", n.to_string());
            }
            // As varnishd (V1F_SendReq), `Transfer-Encoding: chunked` is
            // added when the request is sent, after vcl_backend_fetch.
            None => {
                bo.bereq.headers.remove("content-length");
                bo.bereq.headers.remove("transfer-encoding");
            }
        }
        let (tx, rx) = tokio::sync::mpsc::channel(CHANNEL_SEGMENTS);
        let (go_tx, go_rx) = oneshot::channel();
        stream = Some((p, tx, go_rx));
        t.body_taken = true;
        FetchBody::Stream {
            length,
            rx,
            go: Some(go_tx),
        }
    } else if t.body_taken {
        // A restarted request whose body an earlier pass streamed: as
        // varnishd 7.1 (BS_TAKEN has nothing available), the fetch sends
        // no body and logs nothing about it.
        FetchBody::Taken
    } else {
        FetchBody::None
    };
    bo.has_body = !matches!(req_body, FetchBody::None);
    if !bo.has_body
        && bo
            .bereq
            .headers
            .get("content-length")
            .is_some_and(|v| v != b"0")
    {
        // No body goes out: no length announcing one (a length of 0 the
        // client sent stays, as varnishd's).
        bo.bereq.headers.remove("content-length");
    }
    let (tx, mut rx) = oneshot::channel();
    let job = FetchJob {
        bo,
        mode,
        req_body,
        notify: Some(tx),
    };
    tokio::spawn(crate::fetch::fetch_fsm::run(job));
    if pass && !t.req_body_kept && t.req_body.is_some() {
        // A body read with the head is still varnishd's to pull when the
        // fetch sends it (or ignores it): into an object of its own.
        t.log_body_storage();
    }
    let mut early = None;
    if let Some((p, body_tx, go_rx)) = stream {
        // As varnishd, the body is read off the client connection only
        // when the fetch sends it (and a client waiting for 100 Continue
        // is sent it only then): a fetch that answers without sending it
        // leaves it to be ignored before the response (`transmit`).
        let wanted = tokio::select! {
            go = go_rx => go.is_ok(),
            got = &mut rx => {
                early = Some(got);
                false
            }
        };
        if !wanted {
            t.body_pending = Some(p);
            t.body_taken = false;
            let got = match early {
                Some(got) => got,
                None => rx.await,
            };
            return fetch_outcome(t, got);
        }
        t.log_body_storage();
        if t.want_100
            && let Err(e) = send_100(t, conn).await
        {
            // The fetch sees the body end early and fails.
            t.vsl.log(
                Tag::FetchError,
                format_args!("req.body read error: sending 100 Continue: {e}"),
            );
            t.body_broken = true;
            t.body_rx_failed = true;
            drop(body_tx);
            return fetch_outcome(t, rx.await);
        }
        let timeout = Duration::from_secs_f64(t.timeouts.timeout_idle.max(0.001));
        let (kind, h2) = (p.kind(), conn.h2.is_some());
        let pump = p.pump(&mut conn.stream, &mut conn.rbuf, timeout, &body_tx);
        tokio::pin!(pump);
        tokio::select! {
            r = &mut pump => match r {
                Ok((n, left)) => {
                    t.sh.counters.add(Main::s_req_bodybytes, n);
                    t.req_body_bytes += n;
                    // As varnishd: the body read to its end is timestamped.
                    if left.is_none() {
                        t.log_ts("ReqBody");
                    }
                    t.body_pending = left;
                }
                Err(e) => {
                    // As varnishd: an HTTP/1 body's fault is the request's
                    // FetchError; a reset HTTP/2 stream logs none there.
                    if !h2 {
                        crate::client::reqbody::log_pull_error(&mut t.vsl, kind, &e);
                    }
                    t.body_broken = true;
                    t.body_rx_failed = true;
                }
            },
            // The backend answered before taking the whole body: what is
            // left of it can no longer be found on the connection.
            got = &mut rx => {
                t.body_broken = true;
                early = Some(got);
            }
        }
        // The fetch may have answered because the body failed to read
        // (the fetch logged why): the pump has returned its error by then,
        // and the session closes as varnishd's RX_BODY.
        if early.is_some() && matches!(poll_once(pump.as_mut()).await, Some(Err(_))) {
            t.body_rx_failed = true;
        }
    }
    let got = match early {
        Some(got) => got,
        None => rx.await,
    };
    fetch_outcome(t, got)
}

/// What a fetch's answer gives the request, timestamped and counted: the
/// object, and whether it was handed over while its body was still being
/// fetched.
fn fetch_outcome(
    t: &mut ReqTask,
    got: Result<FetchOutcome, oneshot::error::RecvError>,
) -> Option<(ObjRef, bool)> {
    t.log_ts("Fetch");
    t.sh.counters.inc(Main::s_fetch);
    match got {
        Ok(FetchOutcome::Object(o)) => Some((o, false)),
        Ok(FetchOutcome::Streaming(o)) => Some((o, true)),
        Ok(FetchOutcome::Failed) | Err(_) => None,
    }
}

/// Sends the `100 Continue` a client waits for before its body (logged
/// as varnishd logs it); the client will not get it twice.
async fn send_100<S>(t: &mut ReqTask, conn: &mut ClientConn<S>) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    t.want_100 = false;
    if let Some(h) = &conn.h2 {
        // As varnishd's h2_minimal_response: a HEADERS frame, logged as a
        // response of its own.
        crate::client::h2::log_100(&mut t.vsl);
        let mut block = Vec::new();
        lacquer_http::h2::encode_response_head(100, std::iter::empty(), &mut block);
        return h.send(block, false).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                format!("HTTP/2 stream: {e:?}"),
            )
        });
    }
    crate::client::reqbody::log_100(t);
    conn.stream
        .write_all(crate::client::reqbody::CONTINUE_100)
        .await
}

/// Starts a background refresh of a stale object delivered in grace.
fn start_bgfetch(t: &mut ReqTask, busy: lacquer_cache::BusyObj, stale: ObjRef) {
    let vxid = t.sh.vxid.next();
    t.vsl.log(Tag::Link, format_args!("bereq {vxid} bgfetch"));
    let bereq = make_bereq(t, false, vxid);
    let mut bo = new_bo(t, false, bereq, vxid);
    bo.is_bgfetch = true;
    // As varnishd's cnt_lookup: a background fetch counts as a fetch too.
    t.sh.counters.inc(Main::s_fetch);
    t.sh.counters.inc(Main::s_bgfetch);
    let req_body = match t.req_body.as_ref().filter(|_| t.req_body_kept) {
        Some(b) => crate::fetch::fetch_fsm::FetchBody::Cached(b.clone()),
        None => crate::fetch::fetch_fsm::FetchBody::None,
    };
    bo.has_body = matches!(req_body, crate::fetch::fetch_fsm::FetchBody::Cached(_));
    if !bo.has_body {
        // A background fetch sends no body the client may have had.
        bo.bereq.headers.remove("content-length");
    }
    let job = FetchJob {
        bo,
        mode: FetchMode::Background { busy, stale },
        req_body,
        notify: None,
    };
    tokio::spawn(crate::fetch::fetch_fsm::run(job));
    // As varnishd's VBF_Fetch: the request stamps `Fetch` once the
    // background fetch is on its way, as it does for any fetch.
    t.log_ts("Fetch");
}

enum Delivered {
    Done(After),
    Restart,
    Synth(u16, Option<Bytes>),
}

/// vcl_deliver, then the response goes out.
async fn deliver<S>(
    t: &mut ReqTask,
    conn: &mut ClientConn<S>,
    obj: ObjRef,
    hit: bool,
    pass: bool,
    streaming: bool,
    scratch: &mut Scratch,
) -> Delivered
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    t.setup_deliver_resp(&obj, hit);
    let ar_forced = !pass && t.sh.params().flag(pid!("http_range_support")) && t.resp.status == 200;
    if ar_forced
        && t.ws.overflowed()
        && t.resp
            .headers
            .get("accept-ranges")
            .is_none_or(|v| v != b"bytes")
    {
        // http_ForceHeader on an overflowed workspace: the old line goes,
        // the new one is lost.
        t.resp.headers.remove("accept-ranges");
        t.printf_header_fits(b"Accept-Ranges", b"bytes");
    } else if ar_forced {
        t.ws.take(header_len(b"Accept-Ranges", b"bytes"));
        t.resp.headers.set("Accept-Ranges", "bytes");
        t.vsl
            .log_header(Tag::RespHeader, b"Accept-Ranges", b"bytes");
    }
    let vcl = t.vcl.clone();
    let action = vcl.run_async(BuiltinSub::Deliver, t, scratch).await;
    t.log_ts("Process");
    if !matches!(action, Action::Deliver) {
        cancel_fetch(&obj).await;
    }
    match action {
        Action::Deliver => {}
        Action::Restart => return Delivered::Restart,
        Action::Synth { status, reason } => return Delivered::Synth(status, reason),
        _ => {
            vcl_failed(t);
            return Delivered::Synth(503, Some(Bytes::from_static(b"VCL failed")));
        }
    }
    let after = transmit(t, conn, Some(obj.clone()), None, streaming).await;
    cancel_fetch(&obj).await;
    Delivered::Done(after)
}

/// As varnishd's `HSH_Cancel` (after vcl_deliver chose anything but
/// deliver, and after the response went out, whole or not): a private,
/// hit-for-miss or hit-for-pass object only this request delivers, still
/// being fetched, is abandoned, so the fetch stops reading its body and
/// closes the backend connection; the request waits for the fetch to end
/// (`ObjWaitState(BOS_FINISHED)`), so the connection is gone before the
/// next fetch looks for one.
async fn cancel_fetch(obj: &ObjRef) {
    let body = obj.body();
    if !obj.flags().transient() || body.is_finished() || body.is_failed() {
        return;
    }
    obj.abandon();
    // A failed fetch ends too; either way it has ended.
    let _ = body.wait_finished().await;
}

/// vcl_synth, then the synthetic response goes out.
async fn synth<S>(
    t: &mut ReqTask,
    conn: &mut ClientConn<S>,
    status: u16,
    reason: Option<Bytes>,
    scratch: &mut Scratch,
) -> Delivered
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let sh = t.sh.clone();
    sh.counters.inc(Main::s_synth);
    t.synth_code = (status, reason);
    t.setup_synth_resp();
    // varnishd's err_reason: the reason this synth started with, kept for
    // a later "Too many restarts" 503 of the same request.
    t.synth_code.1 = Some(t.resp.reason.clone());
    t.obj = None;
    t.synth_body.clear();
    let vcl = t.vcl.clone();
    let max_restarts = t.sh.params().uint(pid!("max_restarts")) as u32;
    let action = vcl.run_async(BuiltinSub::Synth, t, scratch).await;
    t.log_ts("Process");
    match action {
        Action::Deliver => {}
        // Past the limit a restart from vcl_synth delivers (as varnishd),
        // so a synth that always restarts cannot loop.
        Action::Restart if t.restarts > max_restarts => {}
        Action::Restart => return Delivered::Restart,
        _ if t.esi_level == 0 => {
            // As varnishd's cnt_synth: a failing vcl_synth gets the
            // transport's minimal response, a status line and nothing
            // else, and the session closes (seeds 170012, 170039).
            vcl_failed(t);
            t.synth_body.clear();
            let timeout = Duration::from_secs_f64(t.timeouts.send_timeout.max(0.001));
            return Delivered::Done(minimal_500(t, conn, timeout).await);
        }
        _ => {
            // A failing vcl_synth of an include: a bare 500.
            vcl_failed(t);
            t.resp = RespMsg::new(500);
            t.resp
                .headers
                .append("Date", lacquer_http::date::format_http_date(t.now));
            t.resp.headers.append("Server", "Varnish");
            t.resp.headers.append("X-Varnish", t.vxid.to_string());
            t.resp.headers.append("Connection", "close");
            t.synth_body.clear();
            t.log_resp();
        }
    }
    // As varnishd's cnt_synth: the length is set (any other one goes),
    // then the synthetic body becomes an object in Transient.
    let len = decimal(t.synth_body.len() as u64);
    for (k, v) in t.resp.headers.iter() {
        if k.eq_ignore_ascii_case(b"content-length") {
            t.vsl.log_header(Tag::RespUnset, k, v);
        }
    }
    t.resp.headers.remove("content-length");
    // http_PrintfHeader: the line takes client workspace, and is lost
    // when it does not fit.
    if t.printf_header_fits(b"Content-Length", &len) {
        t.vsl.log_header(Tag::RespHeader, b"Content-Length", &len);
        t.resp.headers.append("Content-Length", len);
    }
    t.log_synth_storage();
    let b = Bytes::from(std::mem::take(&mut t.synth_body));
    // As varnishd's cnt_synth: the response is an object in Transient
    // (the object, then the body as ObjGetSpace hands out room); when that
    // fails nothing is sent and the session closes as OVERLOAD. An ESI
    // include's synthetic body is written into its parent's response.
    let charge = if t.esi_level == 0 {
        let plan = {
            let params = sh.params();
            lacquer_cache::PiecePlan {
                estimate: None,
                chunk: params.bytes(pid!("fetch_chunksize")).max(1),
                max_chunk: params.bytes(pid!("fetch_maxchunksize")).max(1),
            }
        };
        match sh.cache.charge_synth(b.len() as u64, plan) {
            Ok(c) => Some(c),
            Err(_) => {
                t.vsl.log_str(Tag::Error, "Could not get storage");
                return Delivered::Done(no_delivery(t));
            }
        }
    } else {
        None
    };
    let after = transmit(t, conn, None, Some(b), false).await;
    if let Some(c) = charge {
        sh.cache.release_charge(c);
    }
    Delivered::Done(after)
}

/// Body segments at least this long are written from storage directly
/// instead of being copied into the output buffer first.
const DIRECT_WRITE: usize = 8 * 1024;

/// Writes `a` then `b` with vectored writes (one system call when the
/// socket takes both).
pub(crate) async fn write_both<S>(stream: &mut S, mut a: &[u8], mut b: &[u8]) -> std::io::Result<()>
where
    S: AsyncWrite + Unpin + ?Sized,
{
    while !a.is_empty() {
        let n = stream
            .write_vectored(&[std::io::IoSlice::new(a), std::io::IoSlice::new(b)])
            .await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        if n < a.len() {
            a = &a[n..];
        } else {
            b = &b[n - a.len()..];
            a = &[];
        }
    }
    stream.write_all(b).await
}

/// Polls `f` once: its output if it is ready now, `None` if it would wait
/// (its waker stays registered, so it can be awaited afterwards).
async fn poll_once<F: std::future::Future>(mut f: std::pin::Pin<&mut F>) -> Option<F::Output> {
    std::future::poll_fn(|cx| match f.as_mut().poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

/// The response when the client workspace overflowed before delivery, as
/// varnishd's: a fixed 500 written as is, and the connection closes.
async fn overflowed_500<S>(
    t: &mut ReqTask,
    conn: &mut ClientConn<S>,
    timeout: Duration,
    error: &str,
) -> After
where
    S: AsyncWrite + Unpin,
{
    const R_500: &[u8] =
        b"HTTP/1.1 500 Internal Server Error\r\nServer: Varnish\r\nConnection: close\r\n\r\n";
    t.ws.flush_trace(&mut t.vsl);
    if let Some(head) = conn.h2.as_ref() {
        // varnishd's fixed HTTP/2 answer: 500, no body, Server.
        t.vsl.log_str(Tag::RespProtocol, "HTTP/2.0");
        t.vsl.log_str(Tag::Error, "workspace_client overflow");
        t.vsl.log_str(Tag::RespStatus, "500");
        t.vsl.log_str(Tag::RespReason, "Internal Server Error");
        t.sh.counters.inc(Main::client_resp_500);
        let mut block = Vec::new();
        lacquer_http::h2::encode_response_head(
            500,
            [(&b"content-length"[..], &b"0"[..]), (b"server", b"Varnish")].into_iter(),
            &mut block,
        );
        let _ = head.send(block, true);
        log_unsent(t);
        return After::Close;
    }
    t.vsl.log_str(Tag::Error, error);
    t.vsl.log_str(Tag::RespProtocol, "HTTP/1.1");
    t.vsl.log_str(Tag::RespStatus, "500");
    t.vsl.log_str(Tag::RespReason, "Internal Server Error");
    t.sh.counters.inc(Main::client_resp_500);
    let _ = tokio::time::timeout(timeout, async {
        conn.stream.write_all(R_500).await?;
        conn.stream.flush().await
    })
    .await;
    // As varnishd, the bytes of this answer are not accounted, and the
    // session closes as TX_EOF (seed 190007).
    log_unsent(t);
    After::CloseAs("TX_EOF")
}

/// varnishd's `minimal_response(req, 500)`: the status line alone (on
/// HTTP/2 a `:status` alone), logged as a response, and the connection
/// closes. Its bytes count as response header bytes.
async fn minimal_500<S>(t: &mut ReqTask, conn: &mut ClientConn<S>, timeout: Duration) -> After
where
    S: AsyncWrite + Unpin,
{
    const R_500: &[u8] = b"HTTP/1.1 500 Internal Server Error\r\n\r\n";
    let h2 = conn.h2.is_some();
    t.vsl
        .log_str(Tag::RespProtocol, if h2 { "HTTP/2.0" } else { "HTTP/1.1" });
    t.vsl.log_str(Tag::RespStatus, "500");
    t.vsl.log_str(Tag::RespReason, "Internal Server Error");
    let mut sent = 0;
    if let Some(head) = conn.h2.as_ref() {
        let mut block = Vec::new();
        lacquer_http::h2::encode_response_head(500, std::iter::empty(), &mut block);
        let _ = head.send(block, true);
    } else {
        let wrote = tokio::time::timeout(timeout, async {
            conn.stream.write_all(R_500).await?;
            conn.stream.flush().await
        })
        .await;
        if matches!(wrote, Ok(Ok(()))) {
            sent = R_500.len() as u64;
        }
    }
    t.sh.counters.add(Main::s_resp_hdrbytes, sent);
    t.log_ts("Resp");
    t.end_privs();
    let (rxh, rxb) = (t.req_hdr_bytes, t.req_body_bytes);
    t.vsl.log(
        Tag::ReqAcct,
        format_args!("{rxh} {rxb} {} {sent} 0 {sent}", rxh + rxb),
    );
    After::Close
}

/// The `Resp` timestamp and the accounting of a request whose response
/// counts as not sent: what it received, nothing transmitted.
fn log_unsent(t: &mut ReqTask) {
    t.log_ts("Resp");
    t.end_privs();
    let (rxh, rxb, txh) = (t.req_hdr_bytes, t.req_body_bytes, t.interim_hdr_bytes);
    t.sh.counters.add(Main::s_resp_hdrbytes, txh);
    t.vsl.log(
        Tag::ReqAcct,
        format_args!("{rxh} {rxb} {} {txh} 0 {txh}", rxh + rxb),
    );
}

/// A vmod delivery filter failed mid-body: logged, and the connection
/// must close.
fn filter_failed(vsl: &mut lacquer_vsl::VslBuf, e: String) -> TxError {
    vsl.log(Tag::Debug, format_args!("Delivery filter failed: {e}"));
    TxError::Aborted
}

/// Ends a request whose delivery could not be set up: nothing is sent,
/// the accounting says so and the session closes.
/// Whether the workspace charges of a default delivery filter list are
/// modelled: the empty list and `gunzip` (measured against varnishd 7.1.1
/// with `vtc.workspace_alloc`); `esi` and `range` allocate more of their
/// own as they start, which is not charged, so such lists are not either.
fn default_list_modelled(list: &[u8]) -> bool {
    list.is_empty() || list == b" gunzip"
}

/// Charges the client workspace for a response's delivery filters as
/// varnishd's cnt_transmit allocates them: the list's text (with its NUL)
/// and an entry per stacked processor. `false` when they do not fit (the
/// "Failure to push processors" branch: no response, the session
/// closes). Only for HTTP/1 and a default list [`default_list_modelled`]
/// covers.
fn stack_on_ws(t: &mut ReqTask, list: &str) -> bool {
    let entries = list.split_ascii_whitespace().count() as u64;
    // The text is built in the rest of the workspace (WS_VSB_new), or in a
    // 2-byte static buffer when less than 2 bytes are left: there only an
    // empty list fits, and it takes nothing (std_b00011's overflow case).
    let text_fits = if t.ws.free() < 2 {
        list.is_empty()
    } else {
        t.ws.take(list.len() as u64 + 1)
    };
    text_fits && (0..entries).all(|_| t.ws.take(crate::runtime::ws::size::VDP_ENTRY))
}

fn no_delivery(t: &mut ReqTask) -> After {
    log_unsent(t);
    After::Overload
}

/// Writes `t.resp` and the body (from the object, or the synthetic bytes).
async fn transmit<S>(
    t: &mut ReqTask,
    conn: &mut ClientConn<S>,
    obj: Option<ObjRef>,
    mut synth: Option<Bytes>,
    streaming: bool,
) -> After
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    if t.esi_level > 0 {
        // An ESI include: its body goes into the including response.
        return crate::client::esi::include_body(t, conn, obj, synth).await;
    }
    // As varnishd (VRB_Ignore): a request body nobody used is read (on
    // HTTP/2 its window given back) and thrown away before the response
    // goes out, and a client that does not deliver it in time gets the
    // response with `Connection: close`.
    // As varnishd (VRB_Ignore returns at once when req->doclose is set),
    // nothing is read when the session closes after this response anyway:
    // the request asked for it (`Connection: close`, HTTP/1.0), VCL
    // failed, or, from vcl_synth (cnt_synth sets doclose before it
    // ignores the body), the response says `Connection: close`. A client
    // still waiting for 100 Continue is not sent the 100 either, and its
    // response's `Connection: close` counts from vcl_deliver too (vcl_synth
    // may remove the one it was given to veto that).
    let closing = t.vcl_failed
        || ((synth.is_some() || t.want_100) && t.resp.headers.has_token("connection", "close"))
        || !lacquer_http::persistence(
            &t.req.headers,
            if t.req.is_http10() {
                lacquer_http::Version::Http10
            } else {
                lacquer_http::Version::Http11
            },
        )
        .keep_alive();
    if !closing && let Some(p) = t.body_pending.take() {
        let kind = p.kind();
        t.log_body_storage();
        let timeout = Duration::from_secs_f64(t.timeouts.timeout_idle.max(0.001));
        let sent = if t.want_100 {
            send_100(t, conn).await
        } else {
            Ok(())
        };
        let discarded = match sent {
            Ok(()) => p.discard(&mut conn.stream, &mut conn.rbuf, timeout).await,
            Err(e) => Err(e.into()),
        };
        match discarded {
            Ok(n) => {
                t.sh.counters.add(Main::s_req_bodybytes, n);
                t.req_body_bytes += n;
                t.log_ts("ReqBody");
            }
            Err(e) => {
                crate::client::reqbody::log_pull_error(&mut t.vsl, kind, &e);
                t.body_broken = true;
                t.body_rx_failed = true;
            }
        }
    }
    let sh = t.sh.clone();
    let params = sh.params();
    // As varnishd (cnt_transmit reads req->http0): whether the client gets
    // a body depends on the method it sent, not on one VCL set.
    let head_only = &t.req_orig.method[..] == b"HEAD";
    // As varnishd, whether the request asked to close was decided when it
    // was received (HTTP1_DissectRequest): VCL changing req.http.Connection
    // or req.proto does not change it.
    let persist = lacquer_http::persistence(
        &t.req_orig.headers,
        if t.req_orig.is_http10() {
            lacquer_http::Version::Http10
        } else {
            lacquer_http::Version::Http11
        },
    );
    // As varnishd's V1D_Deliver (http_HdrIs): only a response Connection
    // header that is exactly `close` (any case) closes; any other value VCL
    // left (`x-foo`, `keep-alive, close`) goes out verbatim and the
    // connection stays open.
    let vcl_conn = t.resp.headers.get("connection").map(Bytes::copy_from_slice);
    let resp_close = vcl_conn
        .as_deref()
        .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"close"));
    let mut keep = persist.keep_alive() && !resp_close && !t.vcl_failed && !t.body_broken;
    // The Connection header follows this decision, taken before the body:
    // an HTTP/1.0 body without length closes the connection (below) under
    // the header it was given.
    let keep_for_header = keep;
    // Why the session will close, as varnishd's doclose: the request's
    // Connection header or HTTP/1.0 first, then the response's
    // `Connection: close`; a body without length to an HTTP/1.0 client
    // (below) overrides both.
    let mut close_as = match persist {
        lacquer_http::Persistence::Close => "REQ_CLOSE",
        lacquer_http::Persistence::Http10 => "REQ_HTTP10",
        // As varnishd's VRB_Ignore: a body that failed to read closes the
        // session as RX_BODY when nothing closed it before.
        lacquer_http::Persistence::KeepAlive if t.body_rx_failed => "RX_BODY",
        lacquer_http::Persistence::KeepAlive if resp_close => "RESP_CLOSE",
        lacquer_http::Persistence::KeepAlive => "REQ_CLOSE",
    };
    // What vcl_deliver/vcl_synth left (already logged); delivery's own
    // changes are logged below as they differ.
    let (mut status0, mut reason0) = (t.resp.status, t.resp.reason.clone());
    let cl0 = t
        .resp
        .headers
        .get("content-length")
        .map(Bytes::copy_from_slice);
    // HTTP/2 frames the body itself and has no connection header.
    let h2 = conn.h2.is_some();
    // VCL's Connection stays where it is when the decision keeps it: a
    // closing response replaces any value but `close` (V1D_Deliver).
    let replace_conn = h2 || (!keep_for_header && !resp_close);
    for tag_name in ["connection", "transfer-encoding"] {
        if tag_name == "connection" && !replace_conn {
            continue;
        }
        for (k, v) in t.resp.headers.iter() {
            if k.eq_ignore_ascii_case(tag_name.as_bytes()) {
                t.vsl.log_header(Tag::RespUnset, k, v);
            }
        }
        t.resp.headers.remove(tag_name);
    }
    t.resp.proto = Bytes::from_static(b"HTTP/1.1");

    // Decide the body and its framing.
    let mut body_len: Option<u64>;
    let mut range: Option<(u64, u64)> = None;
    let mut gunzip = false;
    let mut send_body = true;
    let mut esi: Option<crate::esi::Program> = None;
    let mut esi_head = false;
    // The delivery filters: resp.filters as VCL set them, else the
    // default list (esi, gunzip, range) decided below as varnishd does.
    let mut plan = None;
    let plan_error = match &t.vdp_filters {
        Some(list) if obj.is_some() => {
            let list = String::from_utf8_lossy(list).into_owned();
            match crate::client::vdp::DeliveryPlan::parse(&list, &t.vcl.vmods) {
                Ok(p) => {
                    plan = Some(p);
                    None
                }
                Err(e) => Some(e),
            }
        }
        _ => None,
    };
    // As varnishd's cnt_deliver: a conditional request answered from the
    // cache becomes a 304 before delivery stacks its filters. The decision
    // reads the stored headers whatever delivery then does to the body (a
    // gunzipped object gets its 304 too), with the ETag an ESI delivery
    // weakens already weak.
    let mut is_304 = false;
    if let Some(o) = &obj
        && plan_error.is_none()
        && t.resp.status == 200
    {
        let data = o.data();
        let esi_on = plan.as_ref().map_or(t.esi, |p| p.esi) && data.esi.is_some();
        let etag = t.resp.headers.get("etag").map(|e| {
            if esi_on && !e.starts_with(b"W/") {
                [&b"W/"[..], e].concat()
            } else {
                e.to_vec()
            }
        });
        if not_modified(
            // With a Range, only a strong ETag match counts.
            t.req.headers.contains("range"),
            t.req.headers.get("if-none-match"),
            t.req.headers.get("if-modified-since"),
            etag.as_deref(),
            t.resp.headers.get("last-modified"),
            crate::client::cond::stored_last_modified(data.last_modified(), o.t_origin()),
            t.t_req,
        ) {
            is_304 = true;
            t.resp.status = 304;
            t.resp.reason = Bytes::from_static(b"Not Modified");
            t.vsl.log_str(Tag::RespProtocol, "HTTP/1.1");
            t.vsl.log_str(Tag::RespStatus, "304");
            t.vsl.log_bytes(Tag::RespReason, &t.resp.reason);
            (status0, reason0) = (t.resp.status, t.resp.reason.clone());
            send_body = false;
        }
    }
    // As varnishd's cnt_transmit: every response, a HEAD's and a
    // synthetic one's too, stacks its delivery filters and logs the list.
    let mut ws_charged = false;
    if obj.is_some() || synth.is_some() {
        let list = String::from_utf8_lossy(t.delivery_filters()).into_owned();
        t.vsl.log_str(Tag::Filters, &list);
        ws_charged =
            conn.h2.is_none() && t.vdp_filters.is_none() && default_list_modelled(list.as_bytes());
        if let Some(e) = plan_error {
            drop(params);
            t.vsl.log_str(Tag::Error, &e);
            t.vsl.log_str(Tag::Error, "Failure to push processors");
            return no_delivery(t);
        }
        if ws_charged && !stack_on_ws(t, &list) {
            drop(params);
            t.vsl.log_str(Tag::Error, "Failure to push processors");
            return no_delivery(t);
        }
    }
    let (mut before_gunzip, mut after_gunzip) = match &mut plan {
        Some(p) => (
            std::mem::take(&mut p.before_gunzip),
            std::mem::take(&mut p.after_gunzip),
        ),
        None => (Vec::new(), Vec::new()),
    };
    match (&obj, &synth) {
        (Some(o), _) => {
            let data = o.data();
            // As varnishd's cnt_transmit: the length is the object's once
            // the fetch has finished. The request that started a streaming
            // fetch sees it in progress (varnishd wakes it at BOS_STREAM,
            // before the body is read), whatever the fetch did since.
            let final_len = o.body().final_len().filter(|_| !streaming);
            body_len = final_len;
            if body_len.is_none() {
                // Still being fetched: the backend's Content-Length (the
                // fetch drops it whenever a filter changes the length)
                // frames the response, as varnishd does, unless
                // vcl_deliver removed it.
                body_len = t
                    .resp
                    .headers
                    .get("content-length")
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .and_then(|v| v.trim().parse::<u64>().ok());
            }
            // A HEAD that was passed stores no body: the backend's
            // Content-Length still describes the resource (as varnishd),
            // but a Range is checked against what is stored (varnishd's
            // resp_len: a bodiless fetch has finished when delivery
            // starts), so it is unsatisfiable (difftest seeds 3154, 3171).
            let stored_empty = head_only && o.body().final_len() == Some(0);
            if stored_empty {
                body_len = Some(0);
            }
            if head_only
                && body_len == Some(0)
                && let Some(cl) = t
                    .resp
                    .headers
                    .get("content-length")
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
            {
                body_len = Some(cl);
            }
            let want_gunzip = match &plan {
                Some(p) => p.gunzip,
                None => {
                    params.flag(pid!("http_gzip_support"))
                        && !t
                            .req
                            .headers
                            .get("accept-encoding")
                            .is_some_and(crate::fetch::gzip::accepts_gzip)
                }
            };
            if data.gzip && want_gunzip {
                gunzip = true;
                sh.counters.inc(Main::n_gunzip);
                body_len = gunzip_response(t, o, final_len);
            } else if want_gunzip && plan.is_some() && data.esi.is_none() {
                // `gunzip` named in resp.filters for a body that is not
                // gzip: varnishd's gunzip VDP does not look at the object,
                // so the head goes out without a length and the first bytes
                // fail to inflate, ending the delivery (difftest seeds
                // 2079, 2158).
                gunzip = true;
                sh.counters.inc(Main::n_gunzip);
                gunzip_response(t, o, None);
                body_len = None;
            }
            if plan.as_ref().map_or(t.esi, |p| p.esi)
                && let Some(code) = data.esi.clone()
            {
                // The length is not known before the includes ran (a HEAD
                // gets no length either, as varnishd).
                body_len = None;
                weaken_etag(t);
                if head_only {
                    esi_head = true;
                } else {
                    match crate::esi::Program::new(code) {
                        Ok(p) => esi = Some(p),
                        Err(e) => t.vsl.log(Tag::Error, format_args!("{e}")),
                    }
                }
            }
            if is_304 {
                // Decided before the filters (above).
            } else if t.resp.status == 200
                && plan
                    .as_ref()
                    .map_or_else(|| params.flag(pid!("http_range_support")), |p| p.range)
                // A gunzipped body of unknown length still has its Range
                // header checked: a malformed one is a 416 (varnishd's
                // range filter runs after gunzip whatever the length).
                && esi.is_none()
                && let Some(r) = t.req.headers.get("range")
                && crate::client::cond::if_range_allows(
                    t.req.headers.get("if-range"),
                    t.resp.headers.get("etag"),
                    t.resp.headers.get("last-modified"),
                    t.resp.headers.get("date"),
                )
            {
                let range_len = if stored_empty { Some(0) } else { body_len };
                match apply_range(r, range_len) {
                    RangeOutcome::Full => {}
                    RangeOutcome::Partial { start, end } => {
                        t.resp.status = 206;
                        t.resp.reason = Bytes::from_static(b"Partial Content");
                        let total = range_len.map_or("*".to_string(), |l| l.to_string());
                        let cr = format!("bytes {start}-{end}/{total}");
                        t.vsl
                            .log_header(Tag::RespHeader, b"Content-Range", cr.as_bytes());
                        t.resp.headers.set("Content-Range", cr);
                        range = Some((start, end));
                        body_len = Some(end - start + 1);
                        // As varnishd: the range filter is stacked for a
                        // HEAD too and ends having sent none of the range,
                        // which closes the session (SC_RANGE_SHORT) after
                        // a head that said keep-alive.
                        if head_only {
                            keep = false;
                            close_as = "RANGE_SHORT";
                        }
                    }
                    RangeOutcome::Unsatisfiable { reason } => {
                        t.vsl.log(Tag::Debug, format_args!("RANGE_FAIL {reason}"));
                        t.resp.status = 416;
                        t.resp.reason = Bytes::from_static(b"Requested Range Not Satisfiable");
                        if let Some(l) = range_len {
                            let cr = format!("bytes */{l}");
                            t.vsl
                                .log_header(Tag::RespHeader, b"Content-Range", cr.as_bytes());
                            t.resp.headers.set("Content-Range", cr);
                        }
                        send_body = false;
                        body_len = Some(0);
                    }
                }
            }
        }
        (None, Some(b)) => body_len = Some(b.len() as u64),
        (None, None) => body_len = Some(0),
    }
    // As varnishd's default filter list: a synthetic 200 is cut to a
    // Range too (it has no validators, so an If-Range never matches).
    // A HEAD gets the 206 head, and since the range filter then sees none
    // of the bytes it promised, varnishd closes the session as
    // RANGE_SHORT.
    if obj.is_none()
        && t.resp.status == 200
        && t.sh.params().flag(pid!("http_range_support"))
        && let Some(b) = synth.as_mut()
        && let Some(r) = t.req.headers.get("range")
        && crate::client::cond::if_range_allows(
            t.req.headers.get("if-range"),
            t.resp.headers.get("etag"),
            t.resp.headers.get("last-modified"),
            t.resp.headers.get("date"),
        )
    {
        let len = b.len() as u64;
        match apply_range(r, Some(len)) {
            RangeOutcome::Full => {}
            RangeOutcome::Partial { start, end } => {
                t.resp.status = 206;
                t.resp.reason = Bytes::from_static(b"Partial Content");
                let cr = format!("bytes {start}-{end}/{len}");
                t.vsl
                    .log_header(Tag::RespHeader, b"Content-Range", cr.as_bytes());
                t.resp.headers.set("Content-Range", cr);
                *b = b.slice(start as usize..end as usize + 1);
                body_len = Some(end - start + 1);
                if head_only {
                    keep = false;
                    close_as = "RANGE_SHORT";
                }
            }
            RangeOutcome::Unsatisfiable { reason } => {
                t.vsl.log(Tag::Debug, format_args!("RANGE_FAIL {reason}"));
                t.resp.status = 416;
                t.resp.reason = Bytes::from_static(b"Requested Range Not Satisfiable");
                let cr = format!("bytes */{len}");
                t.vsl
                    .log_header(Tag::RespHeader, b"Content-Range", cr.as_bytes());
                t.resp.headers.set("Content-Range", cr);
                *b = Bytes::new();
                body_len = Some(0);
            }
        }
    }
    let no_body_status = t.resp.status < 200 || t.resp.status == 204 || t.resp.status == 304;
    // As varnishd's V1D_Deliver: chunked framing only for a response
    // that sends a body, so never on the answer to a HEAD.
    let chunked = !h2
        && send_body
        && !head_only
        && !no_body_status
        && body_len.is_none()
        && !t.req.is_http10()
        && !esi_head;
    if body_len.is_none() && t.req.is_http10() && send_body && !head_only && !no_body_status {
        keep = false;
        close_as = "TX_EOF";
    } else if body_len.is_none() && t.req.is_http10() {
        keep = false;
    }
    // As varnishd: a Content-Length that says the length is kept where
    // it is, another one goes and the right one comes last; Connection
    // then Transfer-Encoding follow it.
    // As varnishd's cnt_transmit: the answer to a HEAD for a pass or an
    // uncacheable object keeps the Content-Length the backend sent, or
    // none (a HEAD passed on stores no body to measure).
    let cl_as_is = head_only && obj.as_ref().is_some_and(|o| o.flags().transient());
    if no_body_status {
        t.resp.headers.remove("content-length");
    } else if let Some(l) = body_len.filter(|_| !cl_as_is) {
        let l = decimal(l);
        if t.resp.headers.get("content-length") != Some(&l[..]) {
            t.resp.headers.remove("content-length");
            // http_PrintfHeader: on an overflowed workspace the line is
            // lost (the delivery then ends in the minimal 500).
            if lacquer_vcl::exec::Workspace::overflowed(&t.ws) {
                t.printf_header_fits(b"Content-Length", &l);
            } else {
                t.resp.headers.append("Content-Length", l);
            }
        }
    } else if !cl_as_is {
        t.resp.headers.remove("content-length");
    }
    let conn_hdr = match (h2, keep_for_header) {
        (true, _) => None,
        (false, true) if vcl_conn.is_some() => None,
        (false, true) => Some("keep-alive"),
        (false, false) if !replace_conn => None,
        (false, false) => Some("close"),
    };
    if let Some(v) = conn_hdr {
        t.resp.headers.append("Connection", v);
    }
    if chunked {
        t.resp.headers.append("Transfer-Encoding", "chunked");
    }
    if t.resp.status != status0 {
        // As varnishd's http_PutResponse: the whole status line is set.
        t.vsl.log_str(Tag::RespProtocol, "HTTP/1.1");
        let status = u64::from(t.resp.status);
        t.vsl.log_with(Tag::RespStatus, |o| push_u64(o, status));
    }
    if t.resp.reason != reason0 {
        t.vsl.log_bytes(Tag::RespReason, &t.resp.reason);
    }
    let cl1 = t.resp.headers.get("content-length");
    if cl1 != cl0.as_deref() {
        if let Some(v) = &cl0 {
            t.vsl.log_header(Tag::RespUnset, b"Content-Length", v);
        }
        if let Some(v) = cl1 {
            t.vsl.log_header(Tag::RespHeader, b"Content-Length", v);
        }
    }
    if let Some(v) = conn_hdr {
        t.vsl
            .log_header(Tag::RespHeader, b"Connection", v.as_bytes());
    }
    if chunked {
        t.vsl
            .log_header(Tag::RespHeader, b"Transfer-Encoding", b"chunked");
    }
    let (send_timeout, idle_send) = (t.timeouts.send_timeout, t.timeouts.idle_send_timeout);
    drop(params);
    let timeout = Duration::from_secs_f64(send_timeout.max(0.001));
    let write_body = send_body && !head_only && !no_body_status;
    // As varnishd 7.1's V1D_Deliver, in its order: a body to send (not a
    // HEAD's, a 204's or an empty one) first stacks the HTTP/1 writer, an
    // entry on the client workspace; without room the fixed 500 goes out,
    // with the error text 7.1 gives that branch. Only then is an
    // overflowed client workspace looked at (a marked workspace with room
    // left still takes the entry, as WS_Alloc).
    if write_body
        && body_len != Some(0)
        && ws_charged
        && !t.ws.take(crate::runtime::ws::size::VDP_ENTRY)
    {
        return overflowed_500(t, conn, timeout, "workspace_thread overflow").await;
    }
    if t.ws.overflowed() {
        return overflowed_500(t, conn, timeout, "workspace_client overflow").await;
    }
    let mut out = Vec::with_capacity(512);
    let hdr_bytes;
    if let Some(head) = conn.h2.as_ref() {
        // The head is a HEADERS frame; only the body is written as bytes.
        t.vsl.log_str(Tag::RespProtocol, "HTTP/2.0");
        let mut block = Vec::with_capacity(256);
        lacquer_http::h2::encode_response_head(t.resp.status, t.resp.headers.iter(), &mut block);
        hdr_bytes = block.len() as u64;
        let end = !write_body || body_len == Some(0);
        if let Err(e) = head.send(block, end) {
            return After::TxFailed(e);
        }
    } else {
        t.resp.write_head(&mut out);
        hdr_bytes = out.len() as u64;
    }
    let mut body_bytes = 0u64;
    let result: Result<(), TxError> = if write_body
        && synth.is_none()
        && let Some(o) = obj.as_ref()
        && let Some(prog) = esi.take()
    {
        // ESI delivery writes as includes complete; send_timeout bounds
        // the whole of it, idle_send_timeout each write (see esi::deliver).
        // Vmod filters see what the ESI stage puts out, includes and all.
        before_gunzip.append(&mut after_gunzip);
        let framing = crate::client::esi::TopFraming {
            chunked,
            gzip: prog.gzip() && !gunzip,
            idle_send: Duration::from_secs_f64(idle_send.max(0.001)),
            filters: before_gunzip,
        };
        let head = std::mem::take(&mut out);
        let top = crate::client::esi::deliver_top(t, &mut conn.stream, o, prog, framing, head);
        match tokio::time::timeout(Duration::from_secs_f64(send_timeout.max(0.0)), top).await {
            Ok((r, n)) => {
                body_bytes = n;
                r.map_err(|e| {
                    t.vsl.log(Tag::Debug, format_args!("Write error: {e}"));
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        TxError::Closed
                    } else {
                        TxError::Failed
                    }
                })
            }
            Err(_) => {
                t.vsl
                    .log_str(Tag::Debug, "Hit total send timeout in ESI delivery");
                Err(TxError::Failed)
            }
        }
    } else {
        let mut w = TimedWriter::new(&mut conn.stream, send_timeout, idle_send);
        let gz_buffer = (t.sh.params().bytes(pid!("gzip_buffer")) as usize).max(1);
        let vsl = &mut t.vsl;
        async {
            if !write_body {
                w.write(vsl, &[&out]).await?;
                return w.flush(vsl).await;
            }
            if let Some(b) = &synth {
                body_bytes = b.len() as u64;
                w.write(vsl, &[&out, b]).await?;
                return w.flush(vsl).await;
            }
            let o = obj.as_ref().expect("object or synth body");
            // A range of a gunzipped body is cut from the plain bytes.
            // A private (pass) body has this delivery as its only reader:
            // what it has taken from a body still being fetched is freed
            // as it goes, as varnishd frees a private object's delivered
            // storage while it streams.
            let private = o.flags().private();
            let reader_of = |start: u64, end: Option<u64>| {
                if private {
                    o.body().consuming_reader(start, end)
                } else {
                    o.body().range_reader(start, end)
                }
            };
            let (mut reader, mut plain_range) = match (range, gunzip) {
                (Some((s, e)), false) => (reader_of(s, Some(e + 1)), None),
                (Some((s, e)), true) => (reader_of(0, None), Some((s, e + 1 - s))),
                (None, _) => (reader_of(0, None), None),
            };
            let mut gz = gunzip.then(Gunzip::new);
            let mut plain = Vec::new();
            // As varnishd's gunzip VDP: plain bytes go on in pieces of
            // `gzip_buffer` (its output buffer, passed on when full), the
            // rest at the end of the body; what a failing fetch leaves
            // short of a full buffer is never sent.
            let mut gz_pending = Vec::new();
            // Small bodies go out with the head in one write; large storage
            // segments queue in `batch` (ahead of `out`) and leave together
            // in one vectored write, straight from storage.
            let mut batch = crate::client::txio::SegmentBatch::default();
            loop {
                let item = {
                    let mut next = std::pin::pin!(reader.next());
                    match poll_once(next.as_mut()).await {
                        Some(item) => item,
                        None => {
                            // The fetch has nothing more yet: what is buffered
                            // (the head, small segments) goes out before
                            // waiting, so a streamed body reaches the client
                            // as it arrives.
                            batch.send(&mut w, vsl, &mut out).await?;
                            next.await
                        }
                    }
                };
                let stored = match item {
                    Err(e) => {
                        vsl.log(Tag::Debug, format_args!("Body of the object failed: {e}"));
                        // As varnishd: what was ready (the head, earlier
                        // pieces) still goes out before the close.
                        let _ = batch.send(&mut w, vsl, &mut out).await;
                        let _ = w.flush(vsl).await;
                        return Err(TxError::Aborted);
                    }
                    // The body is whole: what gunzip holds goes out last.
                    Ok(None) if !gz_pending.is_empty() => Bytes::new(),
                    Ok(None) => break,
                    Ok(Some(s)) => s,
                };
                let last = stored.is_empty() && !gz_pending.is_empty();
                if private {
                    o.release_delivered(reader.passed());
                }
                let pre;
                let raw: &[u8] = if last || before_gunzip.is_empty() {
                    &stored
                } else {
                    pre = match crate::client::vdp::run(&mut before_gunzip, &stored) {
                        Ok(p) => p,
                        Err(e) => {
                            let err = filter_failed(vsl, e);
                            let _ = batch.send(&mut w, vsl, &mut out).await;
                            let _ = w.flush(vsl).await;
                            return Err(err);
                        }
                    };
                    &pre
                };
                let mut seg: &[u8] = match gz.as_mut() {
                    Some(g) => {
                        if let Err(e) = g.feed(raw, &mut gz_pending) {
                            vsl.log(Tag::Debug, format_args!("Gunzip of the object failed: {e}"));
                            let _ = batch.send(&mut w, vsl, &mut out).await;
                            let _ = w.flush(vsl).await;
                            return Err(TxError::Aborted);
                        }
                        let n = if last {
                            gz_pending.len()
                        } else {
                            gz_pending.len() / gz_buffer * gz_buffer
                        };
                        plain.clear();
                        plain.extend(gz_pending.drain(..n));
                        &plain
                    }
                    None => raw,
                };
                if let Some((skip, take)) = plain_range.as_mut() {
                    let drop_n = (*skip).min(seg.len() as u64) as usize;
                    *skip -= drop_n as u64;
                    seg = &seg[drop_n..];
                    let keep_n = (*take).min(seg.len() as u64) as usize;
                    *take -= keep_n as u64;
                    seg = &seg[..keep_n];
                }
                let post;
                if !after_gunzip.is_empty() {
                    post = crate::client::vdp::run(&mut after_gunzip, seg)
                        .map_err(|e| filter_failed(vsl, e))?;
                    seg = &post;
                }
                if seg.is_empty() {
                    continue;
                }
                body_bytes += seg.len() as u64;
                let unfiltered =
                    gz.is_none() && before_gunzip.is_empty() && after_gunzip.is_empty();
                if seg.len() >= DIRECT_WRITE && unfiltered {
                    // A large segment goes out straight from storage (the
                    // whole stored segment: ranges come cut by the reader).
                    if chunked {
                        lacquer_http::encode_chunk_header(seg.len(), &mut out);
                    }
                    batch.push(&mut out, stored.clone());
                    if chunked {
                        out.extend_from_slice(b"\r\n");
                    }
                    if batch.full() {
                        batch.send(&mut w, vsl, &mut out).await?;
                    }
                    continue;
                }
                if chunked {
                    lacquer_http::encode_chunk(seg, &mut out);
                } else {
                    out.extend_from_slice(seg);
                }
                if out.len() >= 16 * 1024 {
                    batch.send(&mut w, vsl, &mut out).await?;
                }
            }
            // The filters end in list order: the ones before gunzip end
            // into the ones after it.
            let mut tail = crate::client::vdp::finish(&mut before_gunzip)
                .map_err(|e| filter_failed(vsl, e))?;
            if !tail.is_empty() || !after_gunzip.is_empty() {
                tail = crate::client::vdp::run(&mut after_gunzip, &tail)
                    .map_err(|e| filter_failed(vsl, e))?;
                tail.extend(
                    crate::client::vdp::finish(&mut after_gunzip)
                        .map_err(|e| filter_failed(vsl, e))?,
                );
            }
            if !tail.is_empty() {
                body_bytes += tail.len() as u64;
                if chunked {
                    lacquer_http::encode_chunk(&tail, &mut out);
                } else {
                    out.extend_from_slice(&tail);
                }
            }
            if chunked {
                out.extend_from_slice(lacquer_http::LAST_CHUNK);
            }
            batch.send(&mut w, vsl, &mut out).await?;
            w.flush(vsl).await
        }
        .await
    };
    if let Some(h) = conn.h2.as_ref() {
        // What the stream's windows let out, not what was queued.
        body_bytes = h.body_sent();
    }
    let hdr_bytes = hdr_bytes + t.interim_hdr_bytes;
    sh.counters.add(Main::s_resp_hdrbytes, hdr_bytes);
    sh.counters.add(Main::s_resp_bodybytes, body_bytes);
    t.log_ts("Resp");
    t.end_privs();
    let (rxh, rxb) = (t.req_hdr_bytes, t.req_body_bytes);
    t.vsl.log_with(Tag::ReqAcct, |o| {
        for (i, n) in [
            rxh,
            rxb,
            rxh + rxb,
            hdr_bytes,
            body_bytes,
            hdr_bytes + body_bytes,
        ]
        .into_iter()
        .enumerate()
        {
            if i > 0 {
                o.push(b' ');
            }
            push_u64(o, n);
        }
    });
    match result {
        Ok(()) if keep => After::KeepAlive,
        Ok(()) => After::CloseAs(close_as),
        Err(e) => After::TxFailed(e),
    }
}

/// A delivery gunzip's response (`cnt_transmit`): it loses its
/// `Content-Encoding` (logged), and its length is the plain length, known
/// once the object is complete (its gzip trailer says it).
pub(crate) fn gunzip_response(t: &mut ReqTask, o: &ObjRef, final_len: Option<u64>) -> Option<u64> {
    for (k, v) in t.resp.headers.iter() {
        if k.eq_ignore_ascii_case(b"content-encoding") {
            t.vsl.log_header(Tag::RespUnset, k, v);
        }
    }
    t.resp.headers.remove("content-encoding");
    final_len
        .zip(o.body().tail(4))
        .and_then(|(len, tail)| crate::fetch::gzip::gzip_plain_len(len, &tail))
        .filter(|l| *l > 0)
}
