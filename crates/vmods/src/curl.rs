//! `vmod_curl`: libvmod-curl's API (HTTP calls from VCL) without a thread
//! per call. A call (`get`, `head`, `fetch`, `post`) builds its request
//! from the task's settings, hands the I/O to the [`crate::httpc`] client
//! as a future and suspends the VCL (see
//! [`lacquer_vcl::exec::VclRuntime::suspend`]); the server awaits the
//! answer on the task, and the VCL runs the call's statement again, which
//! now finds the outcome and stores it for `status()`, `header()`,
//! `body()` and `error()`.
//!
//! Semantics follow libvmod-curl's: state is per task (`PRIV_TASK`);
//! settings and added request headers stay until `free()`, a custom
//! method (`set_method`) serves one call; `status()` is 0 when no response
//! came (refused, timed out) and `error()` then says why; `header()` finds
//! the last of duplicate headers; redirects are not followed;
//! `header_add("Name:")` suppresses a header the client would send itself
//! (`Host`, `Accept`, and for `post` `Content-Type`), `"Name;"` sends it
//! empty. Each call is logged: a `Timestamp` record `Curl` and a `Notice`
//! with method, URL, status and duration, or `VCL_Error` with the failure.
//!
//! Limits: a call's timeout is `set_timeout()` or else the process-wide
//! default ([`set_defaults`], the `curl_timeout` parameter); calls in flight
//! in the process are capped ([`set_defaults`], `curl_max_inflight`): a
//! call over the cap fails at once (status 0, `error()` says why) and is
//! logged as `VCL_Error`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use lacquer_vcl::exec::{Context, HttpWhich, LogKind, Resume, Value};
use lacquer_vcl::subs::BuiltinSub;

use crate::args::Args;
use crate::httpc::{self, Dest, Outcome, Request, TlsTarget};
use crate::{Counters, Env, EventCtx, FuncImpl, ModuleImpl, VclEvent};

const DECL: &str = r#"
$Module curl
$Function VOID get(STRING url)
$Function VOID head(STRING url)
$Function VOID fetch(STRING url)
$Function VOID post(STRING url, STRING postfields)
$Function STRING header(STRING name)
$Function VOID free()
$Function INT status()
$Function STRING error()
$Function STRING body()
$Function VOID set_timeout(INT ms)
$Function VOID set_connect_timeout(INT ms)
$Function VOID set_ssl_verify_peer(INT verify)
$Function VOID set_ssl_verify_host(INT verify)
$Function VOID set_ssl_cafile(STRING path)
$Function VOID set_ssl_capath(STRING path)
$Function VOID header_add(STRING line)
$Function VOID header_remove(STRING name)
$Function VOID header_add_all()
$Function STRING escape(STRING s)
$Function STRING unescape(STRING s)
$Function VOID proxy(STRING proxy)
$Function VOID set_proxy(STRING proxy)
$Function VOID set_method(STRING method)
$Function VOID set_unix_path(STRING path)
$Function VOID set_debug(ENUM {none, text, header_in, header_out, data_in, data_out} what)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("get", get as FuncImpl),
        ("head", head),
        ("fetch", get),
        ("post", post),
        ("header", header),
        ("free", free),
        ("status", status),
        ("error", error),
        ("body", body),
        ("set_timeout", set_timeout),
        ("set_connect_timeout", set_connect_timeout),
        ("set_ssl_verify_peer", set_ssl_verify_peer),
        ("set_ssl_verify_host", set_ssl_verify_host),
        ("set_ssl_cafile", set_ssl_cafile),
        ("set_ssl_capath", set_ssl_capath),
        ("header_add", header_add),
        ("header_remove", header_remove),
        ("header_add_all", header_add_all),
        ("escape", escape),
        ("unescape", unescape),
        ("proxy", set_proxy),
        ("set_proxy", set_proxy),
        ("set_method", set_method),
        ("set_unix_path", set_unix_path),
        ("set_debug", set_debug),
    ],
    classes: &[],
    event: Some(event),
    filters: &[],
};

type R = Result<Value, String>;

/// Process-wide default timeout of a call in milliseconds (0: none).
static DEFAULT_TIMEOUT_MS: AtomicU64 = AtomicU64::new(0);
/// Most calls in flight in the process.
static MAX_INFLIGHT: AtomicU64 = AtomicU64::new(u64::MAX);
/// Calls in flight now.
static INFLIGHT: AtomicU64 = AtomicU64::new(0);

/// Sets the process-wide limits: the default whole-call timeout (`None`:
/// none, libcurl's default) and the cap on calls in flight.
pub fn set_defaults(timeout: Option<Duration>, max_inflight: u64) {
    DEFAULT_TIMEOUT_MS.store(
        timeout.map_or(0, |t| t.as_millis().max(1) as u64),
        Ordering::Relaxed,
    );
    MAX_INFLIGHT.store(max_inflight, Ordering::Relaxed);
}

/// The process-wide default timeout of a call, if any.
pub(crate) fn default_timeout() -> Option<Duration> {
    let d = DEFAULT_TIMEOUT_MS.load(Ordering::Relaxed);
    (d > 0).then(|| Duration::from_millis(d))
}

/// The `VMOD_CURL` counters, by their position in that counter table
/// (`lacquer_vsl::vsc::tables::VMOD_CURL`): vmods curl and http count
/// into one set, as they share the client and its limits.
#[derive(Clone, Copy)]
pub(crate) enum Stat {
    /// Calls made (sent, or refused before sending).
    Calls = 0,
    /// Calls that got no response (status 0).
    Failed = 1,
    /// Calls that reached a timeout (also `Failed`).
    Timeouts = 2,
    /// Calls refused at `curl_max_inflight` (also `Failed`).
    InflightCap = 3,
}

/// The published `VMOD_CURL` set: one for the process, as vmod debug's
/// `DEBUG` set, from the first VCL importing curl or http until the last
/// one is discarded.
fn stats() -> &'static RwLock<Option<Box<dyn Counters>>> {
    static SET: RwLock<Option<Box<dyn Counters>>> = RwLock::new(None);
    &SET
}

/// VCLs loaded that import curl or http (each import counts once).
static IMPORTS: AtomicUsize = AtomicUsize::new(0);

/// Counts one event in the `VMOD_CURL` set, when it is published.
pub(crate) fn count(s: Stat) {
    if let Some(set) = stats().read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        // The position is within the table (checked by the server's
        // counter test), so this cannot fail.
        let _ = set.add(s as usize, 1);
    }
}

/// A call that failed before it was sent (a bad URL, the cap): counted
/// as made and failed.
pub(crate) fn count_refused() {
    count(Stat::Calls);
    count(Stat::Failed);
}

/// The event handler of vmods curl and http: the first VCL loaded that
/// imports one publishes the `VMOD_CURL` counters, the last one
/// discarded withdraws them.
pub(crate) fn event(env: &Env, ev: VclEvent, cx: &dyn EventCtx) -> Result<(), String> {
    match ev {
        VclEvent::Load => {
            IMPORTS.fetch_add(1, Ordering::AcqRel);
            let mut set = stats().write().unwrap_or_else(|e| e.into_inner());
            if set.is_none() {
                match env.host.new_counters("VMOD_CURL", "") {
                    Ok(s) => *set = Some(s),
                    // A host without shared memory (a check, a test rig):
                    // the calls work, uncounted.
                    Err(e) => cx.log_debug(&format!("curl: no VMOD_CURL counters: {e}")),
                }
            }
        }
        VclEvent::Discard => {
            let before = IMPORTS
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    Some(n.saturating_sub(1))
                })
                .unwrap_or(0);
            if before == 1 {
                stats().write().unwrap_or_else(|e| e.into_inner()).take();
            }
        }
        VclEvent::Warm | VclEvent::Cold => {}
    }
    Ok(())
}

/// Holds one slot of the in-flight cap for as long as a call's future
/// lives (a dropped future gives it back too).
pub(crate) struct Slot;

impl Slot {
    /// Takes a slot for a call about to be sent (counted as made), or
    /// `None` at the cap (counted as a cap hit and a failure).
    pub(crate) fn take() -> Option<Slot> {
        count(Stat::Calls);
        let max = MAX_INFLIGHT.load(Ordering::Relaxed);
        let mut cur = INFLIGHT.load(Ordering::Relaxed);
        loop {
            if cur >= max {
                count(Stat::InflightCap);
                count(Stat::Failed);
                return None;
            }
            match INFLIGHT.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Some(Slot),
                Err(now) => cur = now,
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        INFLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `set_debug` flags.
const DBG_TEXT: u8 = 1;
const DBG_HEADER_IN: u8 = 2;
const DBG_HEADER_OUT: u8 = 4;
const DBG_DATA_IN: u8 = 8;
const DBG_DATA_OUT: u8 = 16;

/// The outcome of a call in flight, filled in by its future.
type Pending = Arc<Mutex<Option<Outcome>>>;

/// A call in flight: what its statement needs to finish it when it runs
/// again.
struct InFlight {
    outcome: Pending,
    method: String,
    url: Bytes,
    head: Vec<u8>,
    body: Vec<u8>,
}

/// One task's curl state.
#[derive(Default)]
struct Curl {
    timeout_ms: Option<i64>,
    connect_timeout_ms: Option<i64>,
    verify_peer: bool,
    verify_host: bool,
    cafile: Option<Bytes>,
    capath: Option<Bytes>,
    proxy: Option<Bytes>,
    unix_path: Option<Bytes>,
    /// Custom method of the next call.
    method: Option<Bytes>,
    debug: u8,
    /// Added request header lines, in order.
    req_headers: Vec<Vec<u8>>,
    status: i64,
    error: Option<Bytes>,
    headers: lacquer_http::Headers,
    body: Bytes,
    in_flight: Option<InFlight>,
}

impl Curl {
    fn clear_response(&mut self) {
        self.status = 0;
        self.error = None;
        self.headers = lacquer_http::Headers::new();
        self.body = Bytes::new();
    }
}

fn state(ctx: &mut dyn Context) -> &mut Curl {
    ctx.privs().get_or_insert_with(0, Curl::default)
}

fn get(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    call(ctx, a, Kind::Get)
}

fn head(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    call(ctx, a, Kind::Head)
}

fn post(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    call(ctx, a, Kind::Post)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Get,
    Head,
    Post,
}

/// A parsed URL: where to connect and what to ask for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Url {
    pub host: String,
    pub port: u16,
    /// `host[:port]` as the `Host` header gives it.
    pub authority: String,
    /// Path and query (the fragment dropped), at least "/".
    pub target: String,
    /// `user:password` before the host, for basic authentication.
    pub userinfo: Option<String>,
    /// An `https` URL.
    pub tls: bool,
}

pub(crate) fn parse_url(url: &str) -> Result<Url, String> {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (url[..i].to_ascii_lowercase(), &url[i + 3..]),
        // libcurl guesses HTTP for a URL without a scheme.
        None => ("http".to_string(), url),
    };
    let tls = match scheme.as_str() {
        "http" => false,
        "https" => true,
        other => return Err(format!("Unsupported protocol ({other})")),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (auth, tail) = rest.split_at(end);
    let (userinfo, hostport) = match auth.rfind('@') {
        Some(i) => (Some(auth[..i].to_string()), &auth[i + 1..]),
        None => (None, auth),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let close = v6
            .find(']')
            .ok_or_else(|| format!("URL using bad/illegal format or missing URL ({url})"))?;
        let port = &v6[close + 1..];
        (v6[..close].to_string(), port.strip_prefix(':'))
    } else {
        match hostport.rfind(':') {
            Some(i) => (hostport[..i].to_string(), Some(&hostport[i + 1..])),
            None => (hostport.to_string(), None),
        }
    };
    if host.is_empty() {
        return Err(format!(
            "URL using bad/illegal format or missing URL ({url})"
        ));
    }
    let port = match port {
        None | Some("") if tls => 443,
        None | Some("") => 80,
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| format!("URL using bad/illegal format or missing URL (port in {url})"))?,
    };
    let tail = tail.split('#').next().unwrap_or("");
    let target = if tail.starts_with('/') {
        tail.to_string()
    } else {
        format!("/{tail}")
    };
    Ok(Url {
        authority: hostport.to_string(),
        host,
        port,
        target,
        userinfo,
        tls,
    })
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            out.push(if i <= c.len() {
                A[(n >> shift) as usize & 63] as char
            } else {
                '='
            });
        }
    }
    out
}

/// The name of a `header_add` line (before ':' or ';'), trimmed.
fn line_name(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .position(|&b| b == b':' || b == b';')
        .unwrap_or(line.len());
    lacquer_http::headers::trim(&line[..end])
}

/// Builds the request head as libcurl would send it: the client's own
/// headers (`Host`, `Accept`, for a body `Content-Length` and
/// `Content-Type`) unless an added line replaces or suppresses them, then
/// the added lines.
fn build_head(
    c: &Curl,
    method: &[u8],
    kind: Kind,
    url: &Url,
    proxied: bool,
    body_len: usize,
) -> Vec<u8> {
    let mut h = Vec::with_capacity(256);
    h.extend_from_slice(method);
    h.push(b' ');
    if proxied {
        h.extend_from_slice(b"http://");
        h.extend_from_slice(url.authority.as_bytes());
    }
    h.extend_from_slice(url.target.as_bytes());
    h.extend_from_slice(b" HTTP/1.1\r\n");
    let added = |name: &[u8]| {
        c.req_headers
            .iter()
            .any(|l| line_name(l).eq_ignore_ascii_case(name))
    };
    let mut own: Vec<(&[u8], Vec<u8>)> = vec![(b"Host", url.authority.as_bytes().to_vec())];
    if let Some(ui) = &url.userinfo {
        own.push((
            b"Authorization",
            format!("Basic {}", base64(ui.as_bytes())).into_bytes(),
        ));
    }
    own.push((b"Accept", b"*/*".to_vec()));
    if kind == Kind::Post {
        own.push((b"Content-Length", body_len.to_string().into_bytes()));
        own.push((
            b"Content-Type",
            b"application/x-www-form-urlencoded".to_vec(),
        ));
    }
    for (name, value) in own {
        if !added(name) {
            line(&mut h, name, &value);
        }
    }
    for l in &c.req_headers {
        let name = line_name(l);
        let sep = l.iter().position(|&b| b == b':' || b == b';');
        match sep.map(|i| (l[i], lacquer_http::headers::trim(&l[i + 1..]))) {
            // "Name:" alone suppresses the header.
            Some((b':', [])) => {}
            Some((b':', v)) => line(&mut h, name, v),
            // "Name;" sends it empty.
            Some((_, [])) => line(&mut h, name, b""),
            // Anything else is sent as written.
            _ => {
                h.extend_from_slice(l);
                h.extend_from_slice(b"\r\n");
            }
        }
    }
    h.extend_from_slice(b"\r\n");
    h
}

pub(crate) fn line(h: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    h.extend_from_slice(name);
    h.extend_from_slice(b": ");
    h.extend_from_slice(value);
    h.extend_from_slice(b"\r\n");
}

fn ms(v: Option<i64>) -> Option<Duration> {
    v.filter(|&t| t > 0)
        .map(|t| Duration::from_millis(t as u64))
}

/// `get`, `head`, `post`: on its first run the statement starts the call
/// and suspends the VCL; run again once the answer is in, it stores it.
fn call(ctx: &mut dyn Context, a: &Args<'_>, kind: Kind) -> R {
    if let Some(f) = state(ctx).in_flight.take() {
        finish(ctx, f);
        return Ok(Value::Null);
    }
    let url = a.bytes(0)?.unwrap_or_default();
    let fields = if kind == Kind::Post {
        a.bytes(1)?.unwrap_or_default()
    } else {
        Bytes::new()
    };
    let c = state(ctx);
    c.clear_response();
    let method = c.method.take();
    let method = method.unwrap_or(Bytes::from_static(match kind {
        Kind::Get => b"GET",
        Kind::Head => b"HEAD",
        Kind::Post => b"POST",
    }));
    let method_name = String::from_utf8_lossy(&method).into_owned();
    let prepared = prepare(c, kind, &url, &method, &fields);
    let (req, head) = match prepared {
        Ok(r) => r,
        Err(e) => {
            count_refused();
            c.error = Some(Bytes::from(e.clone()));
            let msg = format!("curl: {method_name} {}: {e}", String::from_utf8_lossy(&url));
            ctx.log(LogKind::Error, msg.as_bytes());
            return Ok(Value::Null);
        }
    };
    let Some(slot) = Slot::take() else {
        let e = "Too many curl calls in flight (curl_max_inflight)";
        c.error = Some(Bytes::from_static(e.as_bytes()));
        let msg = format!("curl: {method_name} {}: {e}", String::from_utf8_lossy(&url));
        ctx.log(LogKind::Error, msg.as_bytes());
        return Ok(Value::Null);
    };
    let outcome: Pending = Arc::default();
    let out = outcome.clone();
    let wait = Box::pin(async move {
        let o = httpc::send(req).await;
        drop(slot);
        *out.lock().unwrap_or_else(|e| e.into_inner()) = Some(o);
    });
    a.vcl().suspend(wait, Resume::Again)?;
    state(ctx).in_flight = Some(InFlight {
        outcome,
        method: method_name,
        url,
        head,
        // Kept only for `set_debug(data_out)`.
        body: if state(ctx).debug & DBG_DATA_OUT != 0 {
            fields.to_vec()
        } else {
            Vec::new()
        },
    });
    Ok(Value::Null)
}

/// The request for a call, and a copy of its head when debug logging
/// shows it (empty otherwise).
fn prepare(
    c: &Curl,
    kind: Kind,
    url: &[u8],
    method: &[u8],
    fields: &[u8],
) -> Result<(Request, Vec<u8>), String> {
    let text = std::str::from_utf8(url)
        .map_err(|_| "URL using bad/illegal format or missing URL".to_string())?;
    let u = parse_url(text)?;
    let dest = if let Some(path) = &c.unix_path {
        Dest::Unix(String::from_utf8_lossy(path).into_owned())
    } else if let Some(p) = c.proxy.as_ref().filter(|p| !p.is_empty()) {
        let p = parse_url(&String::from_utf8_lossy(p))
            .map_err(|e| format!("Couldn't resolve proxy name ({e})"))?;
        Dest::Tcp(p.host, p.port)
    } else {
        Dest::Tcp(u.host.clone(), u.port)
    };
    let proxied = c.unix_path.is_none() && c.proxy.as_ref().is_some_and(|p| !p.is_empty());
    let path = |p: &Option<Bytes>| {
        p.as_ref()
            .filter(|p| !p.is_empty())
            .map(|p| std::path::PathBuf::from(String::from_utf8_lossy(p).into_owned()))
    };
    // As libvmod-curl: peer and host are verified only when asked.
    let tls = u.tls.then(|| TlsTarget {
        spec: lacquer_tls::client::BackendTls {
            sni: true,
            verify_peer: c.verify_peer,
            verify_host: c.verify_host,
            ca_file: path(&c.cafile),
            ca_dir: path(&c.capath),
            client_cert: None,
        },
        name: u.host.clone(),
        tunnel: proxied.then(|| format!("{}:{}", bracketed(&u.host), u.port)),
    });
    // Through a proxy, plain HTTP asks for the absolute URL; HTTPS goes
    // through a tunnel and asks the origin as it would directly.
    let head = build_head(c, method, kind, &u, proxied && !u.tls, fields.len());
    let timeout = ms(c.timeout_ms).or_else(default_timeout);
    // A copy of the head is kept for `set_debug(header_out)` only.
    let kept = if c.debug & DBG_HEADER_OUT != 0 {
        head.clone()
    } else {
        Vec::new()
    };
    Ok((
        Request {
            dest,
            tls,
            head,
            body: fields.to_vec(),
            no_body: kind == Kind::Head,
            timeout,
            connect_timeout: ms(c.connect_timeout_ms),
            trace: c.debug & DBG_TEXT != 0,
        },
        kept,
    ))
}

/// A host as it goes before `:port`: IPv6 addresses in brackets.
fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// Stores a finished call's outcome and logs it.
fn finish(ctx: &mut dyn Context, f: InFlight) {
    let taken = f.outcome.lock().unwrap_or_else(|e| e.into_inner()).take();
    let url = String::from_utf8_lossy(&f.url).into_owned();
    let Some(o) = taken else {
        let msg = format!("curl: {} {url}: resumed before the call ended", f.method);
        state(ctx).error = Some(Bytes::from_static(b"Call did not complete"));
        ctx.log(LogKind::Error, msg.as_bytes());
        return;
    };
    let debug = state(ctx).debug;
    if debug & DBG_TEXT != 0 {
        for t in &o.text {
            ctx.log(LogKind::Debug, format!("curl: {t}").as_bytes());
        }
    }
    if debug & DBG_HEADER_OUT != 0 {
        ctx.log(
            LogKind::Debug,
            &[b"curl: header_out: ", &f.head[..]].concat(),
        );
    }
    if debug & DBG_DATA_OUT != 0 && !f.body.is_empty() {
        ctx.log(LogKind::Debug, &[b"curl: data_out: ", &f.body[..]].concat());
    }
    ctx.timestamp(b"Curl");
    let took = httpc::Secs6(o.took);
    match o.result {
        Ok(r) => {
            if debug & DBG_HEADER_IN != 0 {
                ctx.log(
                    LogKind::Debug,
                    &[b"curl: header_in: ", &r.raw_head[..]].concat(),
                );
            }
            if debug & DBG_DATA_IN != 0 && !r.body.is_empty() {
                ctx.log(LogKind::Debug, &[b"curl: data_in: ", &r.body[..]].concat());
            }
            // "curl: METHOD URL STATUS SECONDS", built without format!
            // (the formatting machinery cost more than the rest of the call's
            // bookkeeping).
            let mut msg = Vec::with_capacity(32 + f.method.len() + url.len());
            msg.extend_from_slice(b"curl: ");
            msg.extend_from_slice(f.method.as_bytes());
            msg.push(b' ');
            msg.extend_from_slice(url.as_bytes());
            msg.push(b' ');
            httpc::push_decimal(&mut msg, u128::from(r.status));
            msg.push(b' ');
            took.push_to(&mut msg);
            ctx.log(LogKind::Notice, &msg);
            let c = state(ctx);
            c.status = i64::from(r.status);
            c.headers = r.headers;
            c.body = Bytes::from(r.body);
        }
        Err(e) => {
            let msg = format!("curl: {} {url}: {e} ({took}s)", f.method);
            ctx.log(LogKind::Error, msg.as_bytes());
            state(ctx).error = Some(Bytes::from(e));
        }
    }
}

fn header(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let Some(name) = a.str(0)? else {
        return Ok(Value::Null);
    };
    let c = state(ctx);
    // The last of duplicate fields wins, as in libvmod-curl.
    Ok(c.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .last()
        .map_or(Value::Null, |(_, v)| Value::Str(Bytes::copy_from_slice(v))))
}

fn free(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    // A call in flight cannot be here: its statement runs first.
    *state(ctx) = Curl::default();
    Ok(Value::Null)
}

fn status(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Int(state(ctx).status))
}

fn error(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let c = state(ctx);
    // As libvmod-curl: no error once there is a status.
    if c.status != 0 {
        return Ok(Value::Null);
    }
    Ok(c.error.clone().map_or(Value::Null, Value::Str))
}

fn body(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Str(state(ctx).body.clone()))
}

fn set_timeout(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    state(ctx).timeout_ms = a.int(0)?;
    Ok(Value::Null)
}

fn set_connect_timeout(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    state(ctx).connect_timeout_ms = a.int(0)?;
    Ok(Value::Null)
}

fn set_ssl_verify_peer(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    state(ctx).verify_peer = a.int(0)?.unwrap_or(0) != 0;
    Ok(Value::Null)
}

fn set_ssl_verify_host(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    state(ctx).verify_host = a.int(0)?.unwrap_or(0) != 0;
    Ok(Value::Null)
}

fn set_ssl_cafile(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    state(ctx).cafile = a.bytes(0)?;
    Ok(Value::Null)
}

fn set_ssl_capath(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    state(ctx).capath = a.bytes(0)?;
    Ok(Value::Null)
}

fn header_add(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let Some(l) = a.str(0)? else {
        return Ok(Value::Null);
    };
    if l.iter().any(|&b| b == b'\r' || b == b'\n') {
        return Err("curl.header_add(): a header line cannot hold CR or LF".into());
    }
    let l = l.to_vec();
    state(ctx).req_headers.push(l);
    Ok(Value::Null)
}

fn header_remove(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let Some(name) = a.str(0)? else {
        return Ok(Value::Null);
    };
    let name = name.to_vec();
    state(ctx)
        .req_headers
        .retain(|l| !line_name(l).eq_ignore_ascii_case(&name));
    Ok(Value::Null)
}

/// Adds every header of the task's request (`req`, or `bereq` in backend
/// subroutines), except its framing (`Content-Length`,
/// `Transfer-Encoding`), as libvmod-curl does.
fn header_add_all(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let which = if matches!(
        ctx.sub(),
        BuiltinSub::BackendFetch | BuiltinSub::BackendResponse | BuiltinSub::BackendError
    ) {
        HttpWhich::Bereq
    } else {
        HttpWhich::Req
    };
    let lines: Vec<Vec<u8>> = ctx
        .headers(which)
        .into_iter()
        .filter(|(n, _)| {
            !n.eq_ignore_ascii_case(b"content-length")
                && !n.eq_ignore_ascii_case(b"transfer-encoding")
        })
        .map(|(n, v)| [n, b": ", v].concat())
        .collect();
    state(ctx).req_headers.extend(lines);
    Ok(Value::Null)
}

/// URL-encodes as `curl_easy_escape`: everything but `A-Za-z0-9-._~`.
fn escape(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let Some(s) = a.str(0)? else {
        return Ok(Value::Null);
    };
    let mut out = Vec::with_capacity(s.len());
    for &b in s {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    Ok(Value::Str(out.into()))
}

/// Decodes `%XX` escapes as `curl_easy_unescape` (a `+` stays a `+`; a
/// `%` not followed by two hex digits stays as it is).
fn unescape(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let Some(s) = a.str(0)? else {
        return Ok(Value::Null);
    };
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%'
            && let (Some(h), Some(l)) = (
                s.get(i + 1).copied().and_then(hex),
                s.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(s[i]);
        i += 1;
    }
    Ok(Value::Str(out.into()))
}

fn set_proxy(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    state(ctx).proxy = a.bytes(0)?;
    Ok(Value::Null)
}

fn set_method(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let m = a.bytes(0)?;
    if let Some(m) = &m
        && !m.iter().all(|&b| lacquer_http::headers::is_tchar(b))
    {
        return Err(format!(
            "curl.set_method(): \"{}\" is not a method name",
            String::from_utf8_lossy(m)
        ));
    }
    state(ctx).method = m;
    Ok(Value::Null)
}

fn set_unix_path(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    state(ctx).unix_path = a.bytes(0)?.filter(|p| !p.is_empty());
    Ok(Value::Null)
}

fn set_debug(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let flag = match a.enum_(0)?.unwrap_or("none") {
        "text" => DBG_TEXT,
        "header_in" => DBG_HEADER_IN,
        "header_out" => DBG_HEADER_OUT,
        "data_in" => DBG_DATA_IN,
        "data_out" => DBG_DATA_OUT,
        _ => 0,
    };
    let c = state(ctx);
    c.debug = if flag == 0 { 0 } else { c.debug | flag };
    Ok(Value::Null)
}
