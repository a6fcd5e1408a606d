//! The interface between the VCL executor and its host: the [`Context`]
//! trait the server implements for one task (a client request or a backend
//! fetch), and the [`Vmods`] trait the vmods crate implements.
//!
//! Hot variables (URL, method, headers) are reached through methods that
//! return borrowed bytes, so a condition like `req.url ~ "^/static"` reads
//! the URL in place; everything rare goes through one `get`/`set` pair keyed
//! by [`VarId`], a plain enum switch with no string lookups.

use super::privs::{SharedPrivs, TaskPrivs};
use super::value::Value;
use crate::subs::BuiltinSub;
use crate::vars::VarId;
use bytes::Bytes;
use std::sync::Arc;

/// Which HTTP object a header or a start-line field belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HttpWhich {
    Req,
    ReqTop,
    Bereq,
    Beresp,
    Resp,
    Obj,
}

impl HttpWhich {
    /// The VCL spelling of the object (`req`, `beresp`, ...).
    pub fn name(self) -> &'static str {
        match self {
            HttpWhich::Req => "req",
            HttpWhich::ReqTop => "req_top",
            HttpWhich::Bereq => "bereq",
            HttpWhich::Beresp => "beresp",
            HttpWhich::Resp => "resp",
            HttpWhich::Obj => "obj",
        }
    }

    /// The HTTP object of a header variable family (`VarId::ReqHttp` ->
    /// `Req`), or of a whole-object variable (`VarId::Req`).
    pub fn of_var(id: VarId) -> Option<HttpWhich> {
        Some(match id {
            VarId::ReqHttp | VarId::Req => HttpWhich::Req,
            VarId::ReqTopHttp => HttpWhich::ReqTop,
            VarId::BereqHttp | VarId::Bereq => HttpWhich::Bereq,
            VarId::BerespHttp | VarId::Beresp => HttpWhich::Beresp,
            VarId::RespHttp | VarId::Resp => HttpWhich::Resp,
            VarId::ObjHttp => HttpWhich::Obj,
            _ => return None,
        })
    }
}

/// A header name as used by VCL: the spelling written in the source (used
/// when the header is created) and its lowercase form (used to look it up;
/// header names are case-insensitive).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HeaderName {
    /// Shared, so a host that keeps names as strings (the mock) takes a
    /// reference instead of a copy when `set` creates a header.
    pub name: Arc<str>,
    pub lower: Box<[u8]>,
    /// The spelling as shared bytes: a header line created by `set` takes
    /// a reference to it instead of a copy.
    pub spelling: Bytes,
}

impl HeaderName {
    /// Builds a header name from its source spelling.
    pub fn new(name: &str) -> HeaderName {
        HeaderName {
            name: name.into(),
            lower: name.to_ascii_lowercase().into_bytes().into(),
            spelling: Bytes::copy_from_slice(name.as_bytes()),
        }
    }
}

/// Where a log record written by VCL goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    /// `VCL_Log` (std.log).
    Log,
    /// `VCL_Error`: a runtime error that fails the task.
    Error,
    /// `VCL_acl`: the result of a logged ACL match.
    Acl,
    /// `Error`: a problem a vmod reports without failing the task.
    Problem,
    /// `Notice`: something worth knowing about how a request was handled.
    Notice,
    /// `Debug`: diagnostics (masked from the log unless asked for).
    Debug,
}

/// What the executor needs from the task it runs for. One implementation per
/// kind of task lives in the server; [`super::mock::MockContext`] is a
/// self-contained one for tests and benchmarks.
///
/// Errors returned as `Err(message)` make the executor log `VCL_Error` with
/// that message and end the subroutine with `Action::Fail`.
pub trait Context {
    /// The value of a header, the first one if it occurs several times;
    /// `None` if absent. `name.lower` is already lowercase.
    fn header(&self, which: HttpWhich, name: &HeaderName) -> Option<&[u8]>;
    /// Replaces every occurrence of the header by one with this value; an
    /// error (a value the server refuses, e.g. with a newline) fails VCL.
    fn set_header(
        &mut self,
        which: HttpWhich,
        name: &HeaderName,
        value: &[u8],
    ) -> Result<(), String>;
    /// Removes every occurrence of the header.
    fn unset_header(&mut self, which: HttpWhich, name: &HeaderName);

    /// A STRING variable (`req.url`, `req.method`, `beresp.reason`, ...);
    /// `Ok(None)` is NULL. Also asked for `resp.body` / `beresp.body` when
    /// VCL appends to them (`set resp.body += ...`): return the body so far.
    fn get_str(&self, var: VarId) -> Result<Option<&[u8]>, String>;
    /// Sets a STRING variable, or replaces a BODY (`set resp.body = ...`).
    fn set_str(&mut self, var: VarId, value: &[u8]) -> Result<(), String>;

    /// Any other variable (INT, DURATION, BOOL, BACKEND, IP, TIME, ...).
    fn get(&self, var: VarId) -> Result<Value, String>;
    /// Sets any other variable; the value has the variable's type.
    fn set(&mut self, var: VarId, value: Value) -> Result<(), String>;
    /// `unset` of a non-header variable (`bereq.body`, `req.body`).
    fn unset(&mut self, var: VarId) -> Result<(), String>;
    /// A `storage.<name>.*` variable.
    fn storage_var(&self, var: VarId, storage: &str) -> Result<Value, String>;

    /// `hash_data()`: one call, one piece of hash input (`None` for NULL),
    /// the separator Varnish adds after each call is the server's job.
    fn hash_data(&mut self, data: Option<&[u8]>);
    /// `synthetic()`: appends to the synthetic body.
    fn synthetic(&mut self, data: &[u8]);
    /// `ban()`: adds a ban; `Err` is the reason it was rejected, which the
    /// executor logs as `VCL_Error` `ban(): REASON` (not a VCL failure).
    fn ban(&mut self, spec: &[u8]) -> Result<(), String>;
    /// Writes a log record in the task's transaction.
    fn log(&mut self, kind: LogKind, msg: &[u8]);
    /// Writes a record with any tag (by name, as `VSL_Name2Tag` takes it)
    /// for any transaction id, client or backend side, straight to the
    /// shared log (`vtc.vsl()`, which fakes logs for tests); `Err` names
    /// an unknown tag.
    fn log_raw(&mut self, tag: &str, vxid: u32, backend: bool, msg: &[u8]) -> Result<(), String>;
    /// `backend.resolve()`: asks the director behind `backend` which real
    /// backend it picks now (a plain backend resolves to itself).
    fn resolve_backend(&mut self, backend: &Value) -> Result<Value, String>;
    /// The current time (`now`), seconds since the epoch, constant within
    /// one subroutine call as in Varnish.
    fn now(&self) -> f64;

    // Services for native vmods (crate lacquer-vmods).

    /// The task's vmod state (`PRIV_TASK`), dropped when the task ends.
    fn privs(&mut self) -> &mut TaskPrivs;
    /// The top client request's vmod state (`PRIV_TOP`), shared with its
    /// ESI includes; `None` outside client tasks.
    fn top_privs(&mut self) -> Option<SharedPrivs>;
    /// The built-in subroutine being run (for vmods whose behaviour
    /// depends on it, like the shard director's default resolve mode).
    fn sub(&self) -> BuiltinSub;
    /// Every header line of an HTTP object, in order, as (name, value).
    fn headers(&self, which: HttpWhich) -> Vec<(&[u8], &[u8])>;
    /// Adds one more occurrence of a header after the existing lines
    /// (`header.append`); `Err` if the object is read-only here.
    fn add_header(
        &mut self,
        which: HttpWhich,
        name: &HeaderName,
        value: &[u8],
    ) -> Result<(), String>;
    /// Replaces every header line of an HTTP object by `lines`
    /// (`header.regsub`, `header.remove`); `Err` if read-only here.
    fn replace_headers(
        &mut self,
        which: HttpWhich,
        lines: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), String>;
    /// `std.rollback()`: restores an HTTP object to its received state.
    fn rollback(&mut self, which: HttpWhich) -> Result<(), String>;
    /// `std.cache_req_body()`: reads and keeps the request body if it is
    /// at most `max` bytes; `Ok(false)` when it is larger or unreadable.
    fn cache_req_body(&mut self, max: u64) -> Result<bool, String>;
    /// The request body kept by `cache_req_body`, `None` if not cached.
    fn cached_req_body(&self) -> Option<&[u8]>;
    /// `std.late_100_continue()`: delay `100 Continue` until the body is read.
    fn late_100_continue(&mut self, late: bool);
    /// `std.set_ip_tos()`: sets the client socket's TOS / traffic class.
    fn set_ip_tos(&mut self, tos: i64) -> Result<(), String>;
    /// `std.timestamp()`: writes a `Timestamp` log record with this label.
    fn timestamp(&mut self, label: &[u8]);
    /// `purge.hard()` / `purge.soft()` in `vcl_hit` / `vcl_miss`: sets
    /// TTL, grace and keep (a negative value leaves that one unchanged) of
    /// every object variant under the request's hash; returns how many.
    fn purge(&mut self, ttl: f64, grace: f64, keep: f64) -> Result<i64, String>;
    /// The request's hash digest once `vcl_hash` ran (SHA-256).
    fn digest(&self) -> Option<[u8; 32]>;
    /// The value of a PROXY protocol v2 TLV of the client session (type
    /// byte, e.g. 0x01 ALPN, 0x02 authority, 0x20 SSL).
    fn proxy_tlv(&self, kind: u8) -> Option<&[u8]>;
    /// Peer credentials (uid, gid) of a client on a Unix domain socket.
    fn peer_cred(&self) -> Option<(u32, u32)>;
    /// One of the task's workspaces (varnishd's per-task memory budgets),
    /// `None` when the task has no such workspace here (a client request
    /// has no backend workspace; `vcl_init` has none at all). The executor
    /// charges the strings it builds to [`WsKind::Task`].
    fn workspace(&mut self, which: WsKind) -> Option<&mut dyn Workspace>;
    /// `vmod tcp`: changes an option of the client's TCP socket.
    fn tcp_set(&mut self, op: TcpOp<'_>) -> Result<(), String>;
    /// `vmod tcp`: `TCP_INFO` of the client's socket; `Err` says why there
    /// is none (not a TCP connection, or the kernel's answer).
    fn tcp_info(&self) -> Result<TcpInfo, String>;
    /// Hooks the request's next cache lookup (varnishd's `VCF`, which
    /// `debug.catflap()` installs). The hook goes with that lookup, a
    /// pass, a restart or `std.rollback(req)`; only a client request has
    /// a lookup to hook.
    fn set_lookup_hook(&mut self, _hook: Box<dyn LookupHook>) -> Result<(), String> {
        Err("there is no cache lookup to hook outside a client request".into())
    }
    /// `utils.fast_304()` (Varnish Enterprise): when this fetch
    /// revalidated a stale object with a 304, refresh that object's
    /// lifetime in place (its stored headers and body as they are)
    /// instead of making a new object; does nothing after any other
    /// response. Only a fetch has a backend response to refresh from.
    fn fast_304(&mut self) -> Result<(), String> {
        Err("utils.fast_304(): only a backend fetch can refresh an object".into())
    }
    /// Whether `fast_304()` was asked for and applies to this fetch.
    fn is_fast_304(&self) -> bool {
        false
    }
}

/// What a [`LookupHook`] makes of one candidate object of a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupVerdict {
    /// Judge it as usual.
    Default,
    /// Skip it.
    Continue,
    /// Take it as a hit, fresh or not.
    Hit,
    /// Stop looking and fetch a new object.
    Miss,
}

/// A vmod's say in one cache lookup: it sees the candidate objects (those
/// the lookup could deliver for this request: not busy, banned or of
/// another Vary) newest first, before their freshness is judged, and may
/// pick one at the end.
pub trait LookupHook: Send {
    /// The candidate at `index` (0: the newest).
    fn candidate(&mut self, index: usize) -> LookupVerdict;
    /// The scan is over: a candidate to deliver as a hit instead of what
    /// the scan found, if any.
    fn finish(&mut self) -> Option<usize>;
}

/// Which workspace of a task (the ENUM of `vtc.workspace_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WsKind {
    /// The running task's own workspace (varnishd's `ctx->ws`): the
    /// client workspace of a request, the backend workspace of a fetch.
    /// This is what `vtc`'s `client` names, in either kind of task.
    Task,
    /// The backend workspace (`workspace_backend`); only a fetch has one.
    Backend,
    /// The client connection's workspace (`workspace_session`).
    Session,
    /// The worker's scratch workspace (`workspace_thread`).
    Thread,
}

/// A point in a workspace to go back to; `None` when taken while the
/// workspace was overflowed (going back to it then changes nothing, as in
/// varnishd).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WsMark(pub Option<u64>);

/// A workspace as the executor and vmods use it: a byte budget fixed when
/// the task starts, that what VCL builds is charged to, marked overflowed
/// once something does not fit (the task then fails in a defined way).
pub trait Workspace {
    /// Bytes left.
    fn free(&self) -> u64;
    /// Takes `n` bytes (rounded up to 8, as varnishd aligns); `false` when
    /// they do not fit, and the workspace is then marked overflowed.
    fn alloc(&mut self, n: u64) -> bool;
    /// The current point, for [`Workspace::reset`].
    fn snapshot(&mut self) -> WsMark;
    /// Gives back everything taken since `mark`.
    fn reset(&mut self, mark: WsMark);
    /// Marks the workspace overflowed without taking anything.
    fn mark_overflow(&mut self);
    /// Whether something did not fit.
    fn overflowed(&self) -> bool;
}

/// A change to the client's TCP socket requested by `vmod tcp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpOp<'a> {
    /// `TCP_CONGESTION`: the congestion control algorithm, by name.
    Congestion(&'a [u8]),
    /// `SO_MAX_PACING_RATE`, in bytes per second.
    PacingRate(u64),
    /// `SO_SNDBUF`, in bytes (`debug.sndbuf()`).
    SendBuffer(u64),
}

/// The `TCP_INFO` fields `vmod tcp` reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpInfo {
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub lost: u32,
    pub retrans: u32,
    pub pmtu: u32,
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_cwnd: u32,
    pub advmss: u32,
    pub reordering: u32,
    /// The congestion control algorithm in use.
    pub congestion: Vec<u8>,
}

/// A vmod function, by module and function index in the vmod registry
/// (the positions in the declarations the compiler saw).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FuncRef {
    pub vmod: u32,
    pub func: u32,
}

/// An argument passed to a vmod: `None` when an optional (`[...]`)
/// argument was left out, so the callee can tell "not given" from NULL.
/// Hidden `PRIV_*` arguments are not passed: the vmod keeps its own state.
pub type VmodArg = Option<Value>;

/// What a vmod may ask of the VCL program that called it (Varnish's
/// `VRT_acl_match`, `VRT_check_call` and `VRT_call`). ACLs and subroutines
/// reach vmods as indexes into that program ([`Value::Acl`],
/// [`Value::Sub`]), and the executor owns the program and the call stack,
/// so it hands one of these to every vmod call. The task context goes back
/// in as the vmod received it.
pub trait VclRuntime {
    /// Whether `ip` matches ACL `acl`, logged (`VCL_acl`) like `~` when the
    /// ACL has the `-log` flag.
    fn acl_match(
        &mut self,
        ctx: &mut dyn Context,
        acl: u32,
        ip: std::net::SocketAddr,
    ) -> Result<bool, String>;
    /// Why calling subroutine `sub` now would fail (not callable from the
    /// running built-in method, or already running), `None` if it may be.
    fn check_call(&self, ctx: &dyn Context, sub: u32) -> Option<String>;
    /// Runs subroutine `sub` as `call` would, after the checks of
    /// [`Self::check_call`]. Returns `false` when the task must stop (the
    /// call failed, or the subroutine chose a `return` action): the vmod
    /// should return at once; the executor then fails or returns.
    fn call(&mut self, ctx: &mut dyn Context, sub: u32) -> bool;
    /// The regex a REGEX argument (`Value::Regex(i)`) names: compiled
    /// with the program, as varnishd compiles vmod REGEX arguments with
    /// the VCL. `None` for an index the program does not have.
    fn regex(&self, i: u32) -> Option<&super::regex::Regex>;
    /// Suspends the running VCL once this vmod call returns: the host
    /// awaits `wait` (the vmod's I/O, which leaves its outcome in the
    /// vmod's task state) and then resumes the subroutine where it stopped
    /// (see [`Resume`]). The vmod's return value is then ignored. `Err`
    /// says why VCL cannot wait here (a run that cannot be suspended, as
    /// `vcl_init`, or a subroutine a vmod runs); the vmod should fail the
    /// call with that message.
    fn suspend(&mut self, wait: Wait, resume: Resume) -> Result<(), String> {
        drop((wait, resume));
        Err("VCL cannot wait for I/O here".into())
    }
}

/// The I/O a suspended VCL subroutine waits for: a future the host awaits
/// before it resumes the subroutine. It owns everything it uses (it runs
/// while the task's context is free) and reports its outcome through state
/// it shares with the vmod that made it (typically the vmod's `PRIV_TASK`).
pub type Wait = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>;

/// Where a suspended subroutine goes on once its [`Wait`] is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resume {
    /// After the statement that suspended (a VOID call that did its I/O:
    /// `curl.fetch()`). Its value, if any, is dropped.
    After,
    /// At the start of the statement that suspended, which runs again: its
    /// vmod call must then find its answer ready and not suspend again (a
    /// getter that waited for a response started earlier).
    Again,
}

/// Native vmod behaviour, implemented by the vmods crate. All calls receive
/// the task's context as a trait object so vmods can read and write headers
/// and log.
pub trait Vmods {
    /// Calls a function.
    fn call(
        &self,
        ctx: &mut dyn Context,
        vcl: &mut dyn VclRuntime,
        func: FuncRef,
        args: &[VmodArg],
    ) -> Result<Value, String>;
    /// Constructs object `instance` of class `class` (index among the
    /// vmod's objects) in `vcl_init`; `name` is the VCL name of the object.
    fn construct(
        &self,
        ctx: &mut dyn Context,
        vcl: &mut dyn VclRuntime,
        class: FuncRef,
        instance: u32,
        name: &str,
        args: &[VmodArg],
    ) -> Result<(), String>;
    /// Calls method `method` (index in the class's method list) on an
    /// object instance.
    fn method(
        &self,
        ctx: &mut dyn Context,
        vcl: &mut dyn VclRuntime,
        instance: u32,
        method: u32,
        args: &[VmodArg],
    ) -> Result<Value, String>;
}

/// The vmod table of a program that imports no vmods: every call is an
/// error (the compiler never emits one, so this is never reached in
/// practice).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoVmods;

impl Vmods for NoVmods {
    fn call(
        &self,
        _: &mut dyn Context,
        _: &mut dyn VclRuntime,
        f: FuncRef,
        _: &[VmodArg],
    ) -> Result<Value, String> {
        Err(format!("no vmod loaded for function {}.{}", f.vmod, f.func))
    }
    fn construct(
        &self,
        _: &mut dyn Context,
        _: &mut dyn VclRuntime,
        _: FuncRef,
        _: u32,
        name: &str,
        _: &[VmodArg],
    ) -> Result<(), String> {
        Err(format!("no vmod loaded to construct {name}"))
    }
    fn method(
        &self,
        _: &mut dyn Context,
        _: &mut dyn VclRuntime,
        i: u32,
        m: u32,
        _: &[VmodArg],
    ) -> Result<Value, String> {
        Err(format!("no vmod loaded for method {m} of object {i}"))
    }
}
