//! Pipe mode: after `vcl_pipe`, the client connection is tied to a fresh
//! backend connection and bytes are copied both ways until either side
//! closes or nothing moves for `pipe_timeout`.
//!
//! The backend request carries `Connection: close` (VCL may change it in
//! `vcl_pipe`) so that the backend does not keep the connection for
//! requests that were never meant for it. The connection is never pooled.

use crate::pid;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lacquer_vcl::exec::{Action, Context, Scratch};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vsl::{Tag, VslBuf, Vxid};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use bytes::Bytes;

use crate::client::req_fsm::{After, ClientConn, new_bo};
use crate::client::req_task::ReqTask;
use crate::runtime::counters::Main;
use crate::runtime::msg::ReqMsg;

/// How a pipe ended.
pub enum Piped {
    /// The tunnel ran (or broke); the client connection closes.
    Done(After),
    /// No tunnel: the client gets a synthetic response (`vcl_pipe`
    /// returned synth or failed, or `pipe_sess_max` pipes are already open).
    Synth(u16, Option<Bytes>),
}

/// Counts an open pipe in `MAIN.n_pipe` for as long as it lives.
struct PipeSlot<'a>(&'a crate::runtime::counters::Counters);

impl Drop for PipeSlot<'_> {
    fn drop(&mut self) {
        self.0.sub(Main::n_pipe, 1);
    }
}

/// Runs a pipe; unless it ends in a synthetic response, the client
/// connection closes afterwards.
pub async fn pipe<S>(t: &mut ReqTask, conn: &mut ClientConn<S>, scratch: &mut Scratch) -> Piped
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let vxid = t.sh.vxid.next();
    t.vsl.log(Tag::Link, format_args!("bereq {vxid} pipe"));
    let mut headers = t.req.headers.clone();
    // As varnishd's cnt_pipe: a pipe's X-Varnish names the client request
    // and is appended (http_PrintfHeader); `Connection: close` is forced
    // (http_ForceHeader: a first Connection field saying `close` stays
    // where it is, seed 190028; else every Connection field goes and one
    // is appended after the others, seed 170025).
    headers.append("X-Varnish", t.vxid.to_string());
    let bereq = ReqMsg {
        method: t.req.method.clone(),
        url: t.req.url.clone(),
        proto: t.req.proto.clone(),
        headers,
    };
    let mut bo = new_bo(t, true, bereq, vxid);
    bo.pipe_req = Some(Box::new(t.req.clone()));
    bo.pipe_xid = t.vxid_str.clone();
    bo.pipe_vars = crate::fetch::bo_task::PIPE_REQ_VARS
        .iter()
        .filter_map(|v| Some((*v, t.get(*v).ok()?)))
        .collect();
    bo.cur_sub = BuiltinSub::Pipe;
    bo.vsl
        .log(Tag::Begin, format_args!("bereq {} pipe", t.vxid));
    bo.vsl.log_timestamp("Start", bo.t_bereq, 0.0, 0.0);
    crate::fetch::fetch_fsm::log_bereq(&mut bo);
    // Forced after the copy is logged, so the client's Connection fields
    // show as copied, then unset (varnishd's http_ForceHeader).
    if !bo
        .bereq
        .headers
        .get("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case(b"close"))
    {
        for (k, v) in bo.bereq.headers.iter() {
            if k.eq_ignore_ascii_case(b"connection") {
                bo.vsl.log_header(Tag::BereqUnset, k, v);
            }
        }
        bo.bereq.headers.remove("Connection");
        bo.bereq.headers.append("Connection", "close");
        bo.vsl.log_header(Tag::BereqHeader, b"Connection", b"close");
        // What std.rollback(bereq) comes back to has it too.
        bo.bereq_orig.headers = bo.bereq.headers.clone();
    }
    // As varnishd, vcl_pipe logs into the client request's transaction
    // (what the request logged so far goes out first, to keep its order),
    // while the changes to bereq stay the bereq's records.
    t.vsl.flush();
    let task_vsl = VslBuf::new(t.sh.vsl.clone(), Vxid::client(t.vxid));
    bo.pipe_bereq_vsl = Some(std::mem::replace(&mut bo.vsl, task_vsl));
    let vcl = t.vcl.clone();
    // As varnishd, vcl_pipe runs in the request's task: it sees and
    // extends the request's vmod state.
    std::mem::swap(&mut bo.privs, &mut t.privs);
    let action = vcl.run_async(BuiltinSub::Pipe, &mut bo, scratch).await;
    std::mem::swap(&mut bo.privs, &mut t.privs);
    if let Some(own) = bo.pipe_bereq_vsl.take() {
        std::mem::replace(&mut bo.vsl, own).flush();
    }
    let sh = t.sh.clone();
    let (result, pipe_acct) = match action {
        Action::Pipe => {
            // As varnishd's cnt_pipe: at most pipe_sess_max tunnels (0: no
            // limit); one more falls through to its VCL-failure branch (503
            // "VCL failed", the session closed as VCL_FAILURE), not counted
            // in vcl_fail since no subroutine failed.
            let max = sh.params().uint(pid!("pipe_sess_max"));
            if max > 0 && sh.counters.get(Main::n_pipe) >= max {
                sh.counters.inc(Main::pipe_limited);
                bo.vsl.log_str(Tag::BereqAcct, "0 0 0 0 0 0");
                bo.vsl.log_str(Tag::End, "");
                crate::client::req_fsm::vcl_failed(t);
                return Piped::Synth(503, Some(Bytes::from_static(b"VCL failed")));
            }
            sh.counters.inc(Main::n_pipe);
            let _slot = PipeSlot(&sh.counters);
            // What was read of the body goes first; the rest follows
            // straight from the connection.
            let lead = match (&t.req_body, t.body_pending.take()) {
                (Some(b), _) => Ok(vec![b.clone()]),
                (None, Some(p)) => p
                    .raw_prefix()
                    .map(<[Bytes]>::to_vec)
                    .ok_or_else(|| "pipe: part of a chunked body was read ahead".to_string()),
                (None, None) => Ok(Vec::new()),
            };
            let mut acct = PipeAcct {
                t_process: lacquer_http::date::now(),
                ..PipeAcct::default()
            };
            // The backend is picked in the request's task too (a director
            // may read what vcl_pipe set there).
            std::mem::swap(&mut bo.privs, &mut t.privs);
            let r = match lead {
                Ok(lead) => run_pipe(&mut bo, conn, &lead, &mut acct).await,
                Err(e) => Err(e),
            };
            std::mem::swap(&mut bo.privs, &mut t.privs);
            (r, Some(acct))
        }
        Action::Synth { status, reason } => {
            bo.vsl.log_str(Tag::End, "");
            return Piped::Synth(status, reason);
        }
        _ => {
            bo.vsl.log_str(Tag::BereqAcct, "0 0 0 0 0 0");
            bo.vsl.log_str(Tag::End, "");
            crate::client::req_fsm::vcl_failed(t);
            return Piped::Synth(503, Some(Bytes::from_static(b"VCL failed")));
        }
    };
    if let Err(e) = result {
        bo.vsl.log_str(Tag::FetchError, &e);
    }
    bo.vsl.log_str(Tag::BereqAcct, "0 0 0 0 0 0");
    bo.vsl.log_str(Tag::End, "");
    bo.vsl.flush();
    // As varnishd, the tunnel's byte counts go into the client request's
    // transaction: its head, the bereq head, bytes piped in and out.
    if let Some(a) = pipe_acct {
        t.stamp("Process", a.t_process);
        if a.t_sent > 0.0 {
            t.stamp("Pipe", a.t_sent);
        }
        t.log_ts("PipeSess");
        t.vsl.log(
            Tag::PipeAcct,
            format_args!(
                "{} {} {} {}",
                t.req_hdr_bytes, a.bereq_hdr, a.piped_in, a.piped_out
            ),
        );
        t.end_privs();
        // As varnishd's V1P_Charge: the request head's bytes move from the
        // request's account to the pipe's, and the backend is charged too.
        sh.counters.sub(Main::s_req_hdrbytes, t.req_hdr_bytes);
        sh.counters.add(Main::s_pipe_hdrbytes, t.req_hdr_bytes);
        sh.counters.add(Main::s_pipe_in, a.piped_in);
        sh.counters.add(Main::s_pipe_out, a.piped_out);
        if let Some(b) = &a.backend {
            let ps = &b.pool.stats;
            ps.pipe_hdrbytes.fetch_add(a.bereq_hdr, Ordering::Relaxed);
            ps.pipe_out.fetch_add(a.piped_in, Ordering::Relaxed);
            ps.pipe_in.fetch_add(a.piped_out, Ordering::Relaxed);
        }
        return Piped::Done(After::Piped(a.connected));
    }
    Piped::Done(After::Close)
}

/// What a tunnel moved, for `PipeAcct` and the `s_pipe_*` counters.
#[derive(Debug, Default)]
struct PipeAcct {
    /// Bytes of the bereq head sent to the backend.
    bereq_hdr: u64,
    /// Bytes from the client passed on after the head.
    piped_in: u64,
    /// Bytes from the backend passed on to the client.
    piped_out: u64,
    /// When vcl_pipe was done.
    t_process: f64,
    /// When the bereq went to the backend (0 if it did not).
    t_sent: f64,
    /// A backend connection was had (varnishd's session close reason is
    /// then `TX_PIPE`, else `TX_ERROR`).
    connected: bool,
    /// The backend piped to, charged with the tunnel's bytes.
    backend: Option<Arc<crate::runtime::vcls::BackendRt>>,
}

async fn run_pipe<S>(
    bo: &mut crate::fetch::bo_task::BoTask,
    conn: &mut ClientConn<S>,
    lead: &[Bytes],
    acct: &mut PipeAcct,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let be = bo.backend.clone().ok_or("No backend")?;
    let vcl = bo.vcl.clone();
    let backend = vcl
        .resolve_backend(&be, &mut *bo)
        .ok_or_else(|| format!("Director {} returned no backend", be.name))?;
    // `backend x none;` is varnishd's NULL backend: VDI_Resolve finds none.
    if backend.none {
        return Err("No backend".to_string());
    }
    if !backend.healthy() {
        // As varnishd's vbe_dir_getfd, which a pipe goes through too.
        return Err(backend.refuse_unhealthy(&bo.sh.counters));
    }
    let params = bo.sh.params();
    let connect = backend
        .connect_timeout
        .unwrap_or_else(|| params.duration(pid!("connect_timeout")));
    let idle = Duration::from_secs_f64(params.duration(pid!("pipe_timeout")).max(0.001));
    let holddown = crate::runtime::params::holddown(&params);
    // As varnishd, a pipe may take over an idle pooled connection.
    let reuse = Duration::from_secs_f64(params.duration(pid!("backend_idle_timeout")).max(0.0));
    drop(params);
    let mut be_conn = backend
        .pool
        .get(Duration::from_secs_f64(connect.max(0.001)), reuse, holddown)
        .await
        .map_err(|e| {
            // As vbe_dir_getfd, which a pipe goes through too: a refused
            // or timed-out connect counts in backend_fail, a full
            // backend in backend_busy.
            bo.sh.counters.inc(match e {
                crate::backend::pool::ConnectError::Busy(_) => Main::backend_busy,
                _ => Main::backend_fail,
            });
            format!("backend {}: {}", backend.vcl_name, e.fetch_error())
        })?;
    acct.connected = true;
    bo.sh.counters.inc(if be_conn.reused {
        Main::backend_reuse
    } else {
        Main::backend_conn
    });
    acct.backend = Some(backend.clone());
    let mut head = backend.proxy_preface(&bo.sess).unwrap_or_default();
    if !be_conn.reused
        && let Some(p) = &backend.preamble
    {
        head.extend_from_slice(p);
    }
    let at = head.len();
    bo.bereq.write_head(&mut head);
    acct.bereq_hdr = (head.len() - at) as u64;
    // What was read of the body goes first, then whatever the client sent
    // after it.
    let pending_at = head.len();
    for b in lead {
        head.extend_from_slice(b);
    }
    head.extend_from_slice(&conn.rbuf.split());
    acct.piped_in = (head.len() - pending_at) as u64;
    be_conn
        .stream
        .write_all(&head)
        .await
        .map_err(|e| format!("pipe write: {e}"))?;
    acct.t_sent = lacquer_http::date::now();
    let (mut cr, mut cw) = tokio::io::split(&mut conn.stream);
    let (mut br, mut bw) = tokio::io::split(&mut be_conn.stream);
    let mut cbuf = vec![0u8; 16 * 1024];
    let mut bbuf = vec![0u8; 16 * 1024];
    // As varnishd's V1P_Process: the tunnel lives while either direction
    // does. A side that ends (end of file, a read or write error) stops
    // that direction and half-closes the other connection's write side;
    // the other direction goes on until it ends too. Nothing moving either
    // way for pipe_timeout ends both. Bytes count as they are written.
    let (mut c_open, mut b_open) = (true, true);
    let (mut to_backend, mut to_client) = (acct.piped_in, 0u64);
    while c_open || b_open {
        tokio::select! {
            biased;
            r = tokio::time::timeout(idle, br.read(&mut bbuf)), if b_open => match r {
                Err(_) => break,
                Ok(Ok(n)) if n > 0 && cw.write_all(&bbuf[..n]).await.is_ok() => {
                    to_client += n as u64;
                }
                Ok(_) => {
                    if !c_open {
                        break;
                    }
                    b_open = false;
                    let _ = cw.shutdown().await;
                }
            },
            r = tokio::time::timeout(idle, cr.read(&mut cbuf)), if c_open => match r {
                Err(_) => break,
                Ok(Ok(n)) if n > 0 && bw.write_all(&cbuf[..n]).await.is_ok() => {
                    to_backend += n as u64;
                }
                Ok(_) => {
                    if !b_open {
                        break;
                    }
                    c_open = false;
                    let _ = bw.shutdown().await;
                }
            },
        }
    }
    let _ = cw.flush().await;
    acct.piped_in = to_backend;
    acct.piped_out = to_client;
    Ok(())
}
