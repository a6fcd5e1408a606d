//! `vmod_http`, the split form of Varnish Enterprise's HTTP vmod: VCL
//! builds numbered requests (`init`, `req_set_*`, `req_copy_headers`),
//! sends them in the background (`req_send`: the request runs as a task of
//! its own on the [`crate::httpc`] client while VCL goes on) and collects
//! them later (`resp_wait`, or any `resp_get_*`, which waits first). Several
//! requests of one task may be in flight at once; waiting suspends the VCL
//! (see [`lacquer_vcl::exec::VclRuntime::suspend`]) instead of blocking.
//! `req_send_and_finish` sends and forgets: the call runs to its end (its
//! timeout) even after the task. A request the task never collects is
//! cancelled when the task ends.
//!
//! Calls share vmod `curl`'s limits: the `curl_timeout` default timeout
//! and the `curl_max_inflight` cap (a send over the cap fails at once,
//! status 0).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lacquer_vcl::exec::{Context, HttpWhich, LogKind, Resume, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;

use crate::args::Args;
use crate::curl::{self, Slot};
use crate::httpc::{self, Dest, Outcome, Request, TlsTarget};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module http
$Function VOID init(INT id)
$Function VOID req_set_url(INT id, STRING url)
$Function VOID req_set_method(INT id, STRING method)
$Function VOID req_set_header(INT id, STRING name, STRING value)
$Function VOID req_copy_headers(INT id)
$Function VOID req_set_body(INT id, STRING body)
$Function VOID req_set_timeout(INT id, DURATION timeout)
$Function VOID req_send(INT id)
$Function VOID req_send_and_finish(INT id)
$Function VOID resp_wait(INT id)
$Function BOOL resp_is_done(INT id)
$Function INT resp_get_status(INT id)
$Function STRING resp_get_header(INT id, STRING name, STRING default = "")
$Function STRING resp_get_body(INT id)
$Function STRING resp_get_error(INT id)
$Function STRING varnish_url(STRING path)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("init", init as FuncImpl),
        ("req_set_url", req_set_url),
        ("req_set_method", req_set_method),
        ("req_set_header", req_set_header),
        ("req_copy_headers", req_copy_headers),
        ("req_set_body", req_set_body),
        ("req_set_timeout", req_set_timeout),
        ("req_send", req_send),
        ("req_send_and_finish", req_send_and_finish),
        ("resp_wait", resp_wait),
        ("resp_is_done", resp_is_done),
        ("resp_get_status", resp_get_status),
        ("resp_get_header", resp_get_header),
        ("resp_get_body", resp_get_body),
        ("resp_get_error", resp_get_error),
        ("varnish_url", varnish_url),
    ],
    classes: &[],
    event: Some(curl::event),
    filters: &[],
};

type R = Result<Value, String>;

/// Where a call's task leaves its outcome.
type Shared = Arc<Mutex<Option<Outcome>>>;

/// A request sent in the background: its outcome once the task ran.
struct Sent {
    outcome: Shared,
    /// The call's task, until a wait takes it to await its end.
    task: Option<tokio::task::JoinHandle<()>>,
    /// Cancels the call when the VCL task ends without collecting it.
    abort: tokio::task::AbortHandle,
}

impl Drop for Sent {
    fn drop(&mut self) {
        self.abort.abort();
    }
}

/// One numbered request of a task.
#[derive(Default)]
struct Call {
    url: Option<Bytes>,
    method: Option<Bytes>,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    body: Option<Bytes>,
    timeout: Option<f64>,
    sent: Option<Sent>,
    /// The response (or the failure) once collected.
    done: Option<Result<httpc::Response, String>>,
}

#[derive(Default)]
struct Calls(HashMap<i64, Call>);

fn calls(ctx: &mut dyn Context) -> &mut HashMap<i64, Call> {
    &mut ctx.privs().get_or_insert_with(0, Calls::default).0
}

fn id(a: &Args<'_>) -> Result<i64, String> {
    Ok(a.int(0)?.unwrap_or(0))
}

/// The request `id`; using one before `init` is an error, as in Varnish
/// Enterprise.
fn call(ctx: &mut dyn Context, id: i64) -> Result<&mut Call, String> {
    calls(ctx)
        .get_mut(&id)
        .ok_or_else(|| format!("http: request {id} was not initialized with http.init({id})"))
}

fn init(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    calls(ctx).insert(id(a)?, Call::default());
    Ok(Value::Null)
}

fn req_set_url(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let url = a.bytes(1)?;
    call(ctx, id(a)?)?.url = url;
    Ok(Value::Null)
}

fn req_set_method(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let m = a.bytes(1)?;
    if let Some(m) = &m
        && !m.iter().all(|&b| lacquer_http::headers::is_tchar(b))
    {
        return Err(format!(
            "http.req_set_method(): \"{}\" is not a method name",
            String::from_utf8_lossy(m)
        ));
    }
    call(ctx, id(a)?)?.method = m;
    Ok(Value::Null)
}

fn req_set_header(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let name = a.str_or_empty(1)?.to_vec();
    let value = a.str_or_empty(2)?.to_vec();
    if !lacquer_http::is_valid_name(&name) || value.iter().any(|&b| b == b'\r' || b == b'\n') {
        return Err(format!(
            "http.req_set_header(): \"{}\" is not a header one can send",
            String::from_utf8_lossy(&name)
        ));
    }
    call(ctx, id(a)?)?.headers.push((name, value));
    Ok(Value::Null)
}

/// Copies the task's request headers (`req`, or `bereq` in backend
/// subroutines), without their framing.
fn req_copy_headers(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let which = if matches!(
        ctx.sub(),
        BuiltinSub::BackendFetch | BuiltinSub::BackendResponse | BuiltinSub::BackendError
    ) {
        HttpWhich::Bereq
    } else {
        HttpWhich::Req
    };
    let lines: Vec<(Vec<u8>, Vec<u8>)> = ctx
        .headers(which)
        .into_iter()
        .filter(|(n, _)| {
            !n.eq_ignore_ascii_case(b"content-length")
                && !n.eq_ignore_ascii_case(b"transfer-encoding")
        })
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
    call(ctx, id(a)?)?.headers.extend(lines);
    Ok(Value::Null)
}

fn req_set_body(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let body = a.bytes(1)?;
    call(ctx, id(a)?)?.body = body;
    Ok(Value::Null)
}

fn req_set_timeout(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let t = a.duration(1)?;
    call(ctx, id(a)?)?.timeout = t;
    Ok(Value::Null)
}

/// Builds the request of call `c`.
fn build(c: &Call) -> Result<Request, String> {
    let url = c.url.as_ref().ok_or("no URL set (http.req_set_url())")?;
    let u = curl::parse_url(&String::from_utf8_lossy(url))?;
    let method: &[u8] = c.method.as_deref().unwrap_or(b"GET");
    let body = c.body.clone().unwrap_or_default();
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(method);
    head.push(b' ');
    head.extend_from_slice(u.target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    let has = |n: &[u8]| c.headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(n));
    if !has(b"host") {
        curl::line(&mut head, b"Host", u.authority.as_bytes());
    }
    for (n, v) in &c.headers {
        curl::line(&mut head, n, v);
    }
    if !body.is_empty() || matches!(method, b"POST" | b"PUT" | b"PATCH") {
        curl::line(
            &mut head,
            b"Content-Length",
            body.len().to_string().as_bytes(),
        );
    }
    head.extend_from_slice(b"\r\n");
    // HTTPS verifies the chain and the name against the system's trust.
    let tls = u.tls.then(|| TlsTarget {
        spec: lacquer_tls::client::BackendTls {
            verify_host: true,
            ..Default::default()
        },
        name: u.host.clone(),
        tunnel: None,
    });
    Ok(Request {
        dest: Dest::Tcp(u.host, u.port),
        tls,
        head,
        body: body.to_vec(),
        no_body: method == b"HEAD",
        timeout: c
            .timeout
            .filter(|t| *t > 0.0)
            .map(std::time::Duration::from_secs_f64)
            .or_else(curl::default_timeout),
        connect_timeout: None,
        // vmod http has no debug switch: nothing reads the texts.
        trace: false,
    })
}

/// Starts call `id` as a task of its own; `Err` says why it could not.
fn start(ctx: &mut dyn Context, id: i64) -> Result<(Shared, tokio::task::JoinHandle<()>), String> {
    let c = call(ctx, id)?;
    let req = build(c).inspect_err(|_| curl::count_refused())?;
    let rt = tokio::runtime::Handle::try_current().map_err(|_| {
        "http: requests can only be sent from client or backend subroutines".to_string()
    })?;
    let slot = Slot::take().ok_or("Too many curl calls in flight (curl_max_inflight)")?;
    let outcome: Shared = Arc::default();
    let out = outcome.clone();
    let task = rt.spawn(async move {
        let o = httpc::send(req).await;
        drop(slot);
        *out.lock().unwrap_or_else(|e| e.into_inner()) = Some(o);
    });
    Ok((outcome, task))
}

fn req_send(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let id = id(a)?;
    match start(ctx, id) {
        Ok((outcome, task)) => {
            let c = call(ctx, id)?;
            c.sent = Some(Sent {
                outcome,
                abort: task.abort_handle(),
                task: Some(task),
            });
            c.done = None;
        }
        Err(e) => fail_call(ctx, id, e)?,
    }
    Ok(Value::Null)
}

/// Records why call `id` has no response, and logs it.
fn fail_call(ctx: &mut dyn Context, id: i64, e: String) -> Result<(), String> {
    let msg = format!("http: request {id}: {e}");
    ctx.log(LogKind::Error, msg.as_bytes());
    call(ctx, id)?.done = Some(Err(e));
    Ok(())
}

fn req_send_and_finish(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let id = id(a)?;
    match start(ctx, id) {
        // Not kept: the call runs to its end (its timeout) without the
        // task.
        Ok(_) => {}
        Err(e) => fail_call(ctx, id, e)?,
    }
    calls(ctx).remove(&id);
    Ok(Value::Null)
}

/// Collects call `id` if it finished: `None` when it is still in flight
/// (its outcome is then what `wait` must await).
fn collect(ctx: &mut dyn Context, id: i64) -> Result<Option<()>, String> {
    let c = call(ctx, id)?;
    let Some(sent) = &c.sent else {
        if c.done.is_none() {
            c.done = Some(Err("request not sent (http.req_send())".into()));
        }
        return Ok(None);
    };
    let taken = sent
        .outcome
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let Some(o) = taken else {
        return Ok(Some(()));
    };
    c.sent = None;
    let took = httpc::Secs6(o.took);
    let status = o.result.as_ref().map(|r| r.status).map_err(Clone::clone);
    c.done = Some(o.result);
    ctx.timestamp(b"Http");
    match status {
        Ok(s) => {
            let msg = format!("http: request {id} {s} {took}");
            ctx.log(LogKind::Notice, msg.as_bytes());
        }
        Err(e) => {
            let msg = format!("http: request {id}: {e} ({took}s)");
            ctx.log(LogKind::Error, msg.as_bytes());
        }
    }
    Ok(None)
}

/// Makes sure call `id` is collected: suspends the VCL (to resume with
/// `how`) while it is in flight. `Ok(true)` when the VCL was suspended.
fn wait(ctx: &mut dyn Context, a: &Args<'_>, id: i64, how: Resume) -> Result<bool, String> {
    if collect(ctx, id)?.is_none() {
        return Ok(false);
    }
    // The call's task fills the outcome before it ends: awaiting its end
    // is awaiting the outcome.
    let task = call(ctx, id)?
        .sent
        .as_mut()
        .and_then(|s| s.task.take())
        .ok_or_else(|| format!("http: request {id} is already being waited for"))?;
    let wait = Box::pin(async move {
        let _ = task.await;
    });
    a.vcl().suspend(wait, how)?;
    Ok(true)
}

fn resp_wait(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let id = id(a)?;
    // Run again after the wait, it collects the call.
    wait(ctx, a, id, Resume::Again)?;
    Ok(Value::Null)
}

fn resp_is_done(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let id = id(a)?;
    collect(ctx, id)?;
    Ok(Value::Bool(call(ctx, id)?.sent.is_none()))
}

/// The response of call `id`, waiting for it first (the statement runs
/// again once it is in).
fn response<'c>(
    ctx: &'c mut dyn Context,
    a: &Args<'_>,
) -> Result<Option<&'c Result<httpc::Response, String>>, String> {
    let id = id(a)?;
    if wait(ctx, a, id, Resume::Again)? {
        return Ok(None);
    }
    Ok(call(ctx, id)?.done.as_ref())
}

fn resp_get_status(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Int(match response(ctx, a)? {
        Some(Ok(r)) => i64::from(r.status),
        _ => 0,
    }))
}

fn resp_get_header(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let name = a.str_or_empty(1)?.to_vec();
    let default = a.bytes(2)?;
    let found = match response(ctx, a)? {
        Some(Ok(r)) => r
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(&name))
            .map(|(_, v)| Bytes::copy_from_slice(v)),
        _ => None,
    };
    Ok(found.or(default).map_or(Value::Null, Value::Str))
}

fn resp_get_body(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match response(ctx, a)? {
        Some(Ok(r)) => Value::Str(Bytes::copy_from_slice(&r.body)),
        _ => Value::Null,
    })
}

fn resp_get_error(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match response(ctx, a)? {
        Some(Err(e)) => Value::Str(Bytes::copy_from_slice(e.as_bytes())),
        _ => Value::Null,
    })
}

/// A URL back to this Varnish: the address the client request came in on
/// (`local.endpoint`'s address), then `path`.
fn varnish_url(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let path = String::from_utf8_lossy(a.str_or_empty(0)?).into_owned();
    let addr = match ctx.get(VarId::ServerIp)? {
        Value::Ip(sa) => sa,
        other => {
            return Err(format!(
                "http.varnish_url(): no local address here (server.ip is {})",
                other.type_name()
            ));
        }
    };
    let sep = if path.starts_with('/') { "" } else { "/" };
    Ok(Value::str(format!("http://{addr}{sep}{path}").into_bytes()))
}
