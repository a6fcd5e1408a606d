//! `vmod_wasm`: per-tenant edge programs in WebAssembly sandboxes, with
//! libvmod-riscv's VCL functions and JSON tenant configuration (switch by
//! changing the import and the file names). The sandbox itself lives in
//! `lacquer-sandbox`; this module maps VCL calls onto it.
//!
//! `embed_tenants`/`load_tenants` (in `vcl_init`) load every tenant of the
//! configuration into this VCL; `fork(tenant)` gives the task a fresh
//! instance of the tenant's current program (kept in `PRIV_TASK`, dropped
//! with the task); `run()` calls the hook of the current subroutine
//! (`on_recv`, `on_deliver`, ...), `vcall(hook)` and `call(function, arg)`
//! named exports. Before a call the task's messages are copied into the
//! sandbox; after it the changed ones are written back and the other
//! effects applied (backend, hash data, TTL, bans, log lines). A forged
//! response or a synth decision is read by VCL through `want_result()` /
//! `want_status()`; `run()` in `vcl_synth` writes a forged response into
//! `resp`. A hook that traps or exhausts its budget fails the VCL task
//! (a 503 from `vcl_recv`), leaving the request as it was before the call.
//!
//! Cacheable forges (libvmod-riscv's `forge(Cached, ...)`): the tenant's
//! `forge(true, ...)` makes `want_result()` say `"backend"`; VCL then sets
//! `req.backend_hint = wasm.vm_backend()` and looks the object up. On a
//! miss the fetch goes to the VM backend, a director of this VCL with no
//! network backend behind it, so the fetch reaches `vcl_backend_error`,
//! where `wasm.run()` writes the tenant's response into `beresp` with a
//! TTL (the tenant's `set_ttl`, else [`VM_TTL`]) and VCL returns
//! `deliver`: the object is stored like a backend response and later
//! requests hit it without the tenant building the body again.
//! `vm_backend(func, arg)` instead calls the tenant's function `func`
//! with `arg` in a fresh instance during that fetch (on misses only), and
//! its forge is the response. The fetch finds what to deliver by
//! `bereq`'s Host and URL, registered by the client request that called
//! `vm_backend()` for as long as that request lives.
//!
//! Live update: `live_update_file(tenant, file)` from VCL, or the CLI's
//! `wasm.update <tenant> <file>` ([`cli_update`]), swap a tenant's program
//! in every loaded VCL without a reload; tasks that forked before keep
//! the old program; a module that fails to load leaves the old one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use lacquer_sandbox::{
    CallError, Decision, HOOKS, Instance, Message, PoolConfig, Sandbox, Tenant, Which,
};
use lacquer_vcl::exec::{Context, HttpWhich, LogKind, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;

use crate::args::{Args, lossy};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module wasm
$Function BOOL embed_tenants(STRING json)
$Restrict vcl_init
$Function BOOL load_tenants(STRING path)
$Restrict vcl_init
$Function BOOL fork(STRING tenant, BOOL debug=0)
$Function BOOL active()
$Function STRING current_name()
$Function INT run()
$Function INT vcall(STRING hook)
$Function STRING call(STRING function, STRING arg="")
$Function STRING want_result()
$Function INT want_status()
$Function INT result_value(INT idx)
$Function STRING result_as_string(INT idx)
$Function BACKEND vm_backend(STRING func="", STRING arg="")
$Function BOOL live_update(STRING tenant, STRING program)
$Function BOOL live_update_file(STRING tenant, STRING file)
$Function VOID apply_hash()
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("embed_tenants", embed_tenants as FuncImpl),
        ("load_tenants", load_tenants),
        ("fork", fork),
        ("active", active),
        ("current_name", current_name),
        ("run", run),
        ("vcall", vcall),
        ("call", call),
        ("want_result", want_result),
        ("want_status", want_status),
        ("result_value", result_value),
        ("result_as_string", result_as_string),
        ("vm_backend", vm_backend),
        ("live_update", live_update),
        ("live_update_file", live_update_file),
        ("apply_hash", apply_hash),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

/// The environment variable naming the directory of precompiled tenant
/// modules (`lacquer_sandbox::PoolConfig::cache_dir`); unset, every load
/// compiles.
pub const CACHE_ENV: &str = "LACQUER_WASM_CACHE";

/// The environment variable setting how many sandboxes may exist at once
/// (`lacquer_sandbox::PoolConfig::slots`, default 1000): requests inside
/// a tenant at the same time plus the instances worker threads keep for
/// reuse. Each slot reserves address space for `max_memory` plus guard
/// pages, so a small number lets lacquerd run under valgrind (which
/// cannot reserve terabytes) and a large one serves more concurrent
/// tenant requests.
pub const SLOTS_ENV: &str = "LACQUER_WASM_SLOTS";

/// The pool configuration from lacquerd's environment.
fn pool_config() -> Result<PoolConfig, String> {
    let mut c = PoolConfig {
        cache_dir: std::env::var_os(CACHE_ENV).map(std::path::PathBuf::from),
        ..PoolConfig::default()
    };
    if let Some(v) = std::env::var_os(SLOTS_ENV) {
        let v = v.to_string_lossy();
        c.slots = v
            .trim()
            .parse()
            .ok()
            .filter(|&n: &u32| n > 0)
            .ok_or_else(|| {
                format!("wasm: {SLOTS_ENV}={v} is not a positive number of sandbox slots")
            })?;
    }
    Ok(c)
}

/// The process's sandbox engine, made on first use.
pub fn sandbox() -> Result<&'static Sandbox, String> {
    static S: OnceLock<Result<Sandbox, String>> = OnceLock::new();
    S.get_or_init(|| Sandbox::new(pool_config()?))
        .as_ref()
        .map_err(Clone::clone)
}

/// The TTL of an object a cacheable forge made when the tenant set none
/// (varnishd's `default_ttl` default); VCL may change `beresp.ttl` after
/// `wasm.run()` in `vcl_backend_error`.
pub const VM_TTL: f64 = 120.0;

/// The tenants of one VCL, its VM backend and the responses that
/// backend owes to requests in flight.
#[derive(Default)]
struct Tenants {
    map: HashMap<String, Arc<Tenant>>,
    /// The VM backend (a director without network backends), made when
    /// the first tenants load.
    vm: Option<lacquer_vcl::exec::Backend>,
    /// What a fetch through the VM backend delivers, by (Host, URL).
    pending: HashMap<VmKey, Arc<VmFetch>>,
}

/// A fetch through the VM backend is matched to the request that asked
/// for it by `Host` and URL.
type VmKey = (Vec<u8>, Vec<u8>);

/// The response a fetch through the VM backend delivers.
struct VmFetch {
    program: Arc<lacquer_sandbox::Program>,
    source: VmSource,
    /// The TTL the tenant set before asking (`set_ttl` in `on_recv`).
    ttl: Option<f64>,
}

enum VmSource {
    /// The response the tenant forged.
    Forged(lacquer_sandbox::Forged),
    /// A function to call in a fresh instance during the fetch.
    Call { func: String, arg: Vec<u8> },
}

/// The VM backend: resolves to no network backend, so a fetch through it
/// reaches `vcl_backend_error`, where `wasm.run()` delivers the tenant's
/// response.
struct VmDirector;

impl crate::host::Director for VmDirector {
    fn resolve(&self, _: &mut dyn Context) -> Option<lacquer_vcl::exec::Backend> {
        None
    }

    fn healthy(&self) -> Result<bool, String> {
        Ok(true)
    }

    fn list(&self) -> Option<crate::host::DirectorList> {
        None
    }
}

/// Every VCL's tenant set, for CLI updates.
fn all_sets() -> &'static Mutex<Vec<Weak<Mutex<Tenants>>>> {
    static S: OnceLock<Mutex<Vec<Weak<Mutex<Tenants>>>>> = OnceLock::new();
    S.get_or_init(Default::default)
}

/// This VCL's tenant set (in `PRIV_VCL`).
fn tenants(env: &Env) -> Arc<Mutex<Tenants>> {
    let mut state = env.vcl_state();
    state
        .get_or_insert_with(0, || {
            let t = Arc::new(Mutex::new(Tenants::default()));
            let mut all = all_sets().lock().unwrap_or_else(|e| e.into_inner());
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&t));
            t
        })
        .clone()
}

fn find(env: &Env, name: &str) -> Option<Arc<Tenant>> {
    let t = tenants(env);
    let t = t.lock().unwrap_or_else(|e| e.into_inner());
    t.map.get(name).cloned()
}

fn add_tenants(env: &Env, ctx: &mut dyn Context, json: &str, base: Option<&std::path::Path>) -> R {
    let sb = sandbox()?;
    let configs = lacquer_sandbox::config::parse(json, base)?;
    let mut loaded = Vec::with_capacity(configs.len());
    for c in configs {
        let p = sb.load_file(&c)?;
        ctx.log(
            LogKind::Debug,
            format!(
                "wasm: tenant '{}' loaded ({} bytes of image)",
                c.name, p.image_bytes
            )
            .as_bytes(),
        );
        loaded.push(Arc::new(Tenant::new(c, p)));
    }
    let set = tenants(env);
    let mut set = set.lock().unwrap_or_else(|e| e.into_inner());
    for t in loaded {
        set.map.insert(t.name().to_string(), t);
    }
    TENANTS_ADDED.fetch_add(1, Ordering::AcqRel);
    if set.vm.is_none() {
        set.vm = Some(env.add_director("wasm_vm", Arc::new(VmDirector)));
    }
    Ok(Value::Bool(true))
}

fn embed_tenants(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let json = lossy(a.str_or_empty(0)?).into_owned();
    add_tenants(env, ctx, &json, None)
}

fn load_tenants(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let path = std::path::PathBuf::from(lossy(a.str_or_empty(0)?).into_owned());
    let json = std::fs::read_to_string(&path)
        .map_err(|e| format!("wasm.load_tenants: cannot read {}: {e}", path.display()))?;
    add_tenants(env, ctx, &json, path.parent())
}

/// One task's sandbox and what carries between its calls.
struct Forked {
    inst: Instance,
    /// Hash data from hooks run before `vcl_hash`, for `apply_hash()`.
    hash: Vec<Vec<u8>>,
    /// The backend the tenant chose, resolved.
    backend: Option<Value>,
    /// The TTL the tenant set in a client subroutine, for `vm_backend()`.
    ttl: Option<f64>,
    /// The VM fetch this task registered, withdrawn when the task ends.
    vm: Option<VmClaim>,
}

/// A response registered for the VM backend by one task.
struct VmClaim {
    set: Weak<Mutex<Tenants>>,
    key: VmKey,
    fetch: Arc<VmFetch>,
}

impl Drop for Forked {
    fn drop(&mut self) {
        let Some(c) = self.vm.take() else {
            return;
        };
        if let Some(set) = c.set.upgrade() {
            let mut set = set.lock().unwrap_or_else(|e| e.into_inner());
            if set
                .pending
                .get(&c.key)
                .is_some_and(|p| Arc::ptr_eq(p, &c.fetch))
            {
                set.pending.remove(&c.key);
            }
        }
    }
}

fn forked(ctx: &mut dyn Context) -> Option<&mut Forked> {
    ctx.privs().get_mut::<Forked>(0)
}

/// Bumped whenever a VCL adds tenants: the per-thread fork caches
/// ([`FORKS`]) were filled before and start over.
static TENANTS_ADDED: AtomicU64 = AtomicU64::new(0);

/// The most tenants one thread's fork cache holds before it starts over.
const FORK_CACHE_MAX: usize = 1024;

/// One worker thread's memory of the tenants it forked lately, so that a
/// fork takes no lock and touches no reference count shared with other
/// threads (the VCL's tenant map, its mutex, the tenant's program lock
/// and the `Arc`s cloned out of them were about a tenth of a wasm
/// request's CPU at 100 connections on two cores, the cache lines
/// bouncing between the cores).
///
/// Entries are for one VCL (`vcl`) and one generation of the tenant maps
/// (`added`, [`TENANTS_ADDED`]); a tenant's program is asked again when a
/// live update retired the one kept ([`lacquer_sandbox::Program::retired`]).
/// Like the per-thread instances kept for reuse, the entries keep a
/// discarded VCL's tenants alive until this thread forks in another VCL.
#[derive(Default)]
struct ForkCache {
    vcl: u64,
    added: u64,
    tenants: HashMap<Box<[u8]>, Known, std::hash::BuildHasherDefault<Fnv>>,
}

/// FNV-1a, for [`ForkCache`]'s tenant names: SipHash's keyed rounds were
/// a tenth of a fork. Flooding is not a concern there: only names of
/// configured tenants are ever inserted (at most [`FORK_CACHE_MAX`]), so a
/// name chosen by a client (`fork(req.http.host)`) costs one probe.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// A tenant a thread forked, and the program it had then.
type Known = (Arc<Tenant>, Arc<lacquer_sandbox::Program>);

thread_local! {
    static FORKS: std::cell::RefCell<ForkCache> = std::cell::RefCell::new(ForkCache::default());
}

/// A fresh (or reset) instance of tenant `name`'s current program; `None`
/// when this VCL has no such tenant.
fn fork_instance(env: &Env, name: &[u8]) -> Result<Option<Instance>, String> {
    let added = TENANTS_ADDED.load(Ordering::Acquire);
    let cached = FORKS
        .try_with(|f| {
            let mut f = f.try_borrow_mut().ok()?;
            if f.vcl != env.vcl_id || f.added != added {
                f.vcl = env.vcl_id;
                f.added = added;
                f.tenants.clear();
                return None;
            }
            let (t, p) = f.tenants.get_mut(name)?;
            if p.retired() {
                *p = t.program();
            }
            // Instantiated here, without cloning `p`: a reused instance
            // holds its own reference already.
            Some(sandbox().and_then(|sb| sb.instantiate(p)))
        })
        .ok()
        .flatten();
    if let Some(inst) = cached {
        return inst.map(Some);
    }
    let Some(t) = find(env, &lossy(name)) else {
        return Ok(None);
    };
    let p = t.program();
    let inst = sandbox()?.instantiate(&p)?;
    let _ = FORKS.try_with(|f| {
        if let Ok(mut f) = f.try_borrow_mut()
            && f.vcl == env.vcl_id
            && f.added == added
        {
            if f.tenants.len() >= FORK_CACHE_MAX {
                f.tenants.clear();
            }
            f.tenants.insert(name.into(), (t, p));
        }
    });
    Ok(Some(inst))
}

fn fork(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let name = a.str_or_empty(0)?;
    let Some(inst) = fork_instance(env, name)? else {
        ctx.privs().remove::<Forked>(0);
        return Ok(Value::Bool(false));
    };
    if a.bool(1)?.unwrap_or(false) {
        ctx.log(
            LogKind::Debug,
            format!("wasm: forked tenant '{}'", lossy(name)).as_bytes(),
        );
    }
    ctx.privs().insert(
        0,
        Forked {
            inst,
            hash: Vec::new(),
            backend: None,
            ttl: None,
            vm: None,
        },
    );
    Ok(Value::Bool(true))
}

fn active(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Bool(forked(ctx).is_some()))
}

fn current_name(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(forked(ctx).map_or(Value::Null, |f| Value::str(f.inst.program().name.clone())))
}

/// The hook index `run()` calls in `sub`.
fn hook_of(sub: BuiltinSub) -> Option<usize> {
    let name = match sub {
        BuiltinSub::Recv => "on_recv",
        BuiltinSub::Pipe => "on_pipe",
        BuiltinSub::Pass => "on_pass",
        BuiltinSub::Hash => "on_hash",
        BuiltinSub::Purge => "on_purge",
        BuiltinSub::Miss => "on_miss",
        BuiltinSub::Hit => "on_hit",
        BuiltinSub::Deliver => "on_deliver",
        BuiltinSub::Synth => "on_synth",
        BuiltinSub::BackendFetch => "on_backend_fetch",
        BuiltinSub::BackendResponse => "on_backend_response",
        BuiltinSub::BackendError => "on_backend_error",
        BuiltinSub::Init | BuiltinSub::Fini => return None,
    };
    HOOKS.iter().position(|h| *h == name)
}

/// The most messages a subroutine has ([`messages`]).
const MAX_MSGS: usize = 2;

/// The messages the current subroutine has, as the sandbox names them
/// (at most [`MAX_MSGS`]).
fn messages(sub: BuiltinSub) -> &'static [(Which, HttpWhich)] {
    use HttpWhich as H;
    match sub {
        BuiltinSub::Recv
        | BuiltinSub::Hash
        | BuiltinSub::Purge
        | BuiltinSub::Hit
        | BuiltinSub::Miss => &[(Which::Req, H::Req)],
        BuiltinSub::Pipe | BuiltinSub::Pass => &[(Which::Req, H::Req), (Which::Bereq, H::Bereq)],
        BuiltinSub::Deliver | BuiltinSub::Synth => &[(Which::Req, H::Req), (Which::Resp, H::Resp)],
        BuiltinSub::BackendFetch => &[(Which::Bereq, H::Bereq)],
        BuiltinSub::BackendResponse | BuiltinSub::BackendError => {
            &[(Which::Bereq, H::Bereq), (Which::Beresp, H::Beresp)]
        }
        BuiltinSub::Init | BuiltinSub::Fini => &[],
    }
}

/// Variables of a message's fields: url, method, proto, reason, status.
fn field_vars(w: Which) -> [Option<VarId>; 5] {
    match w {
        Which::Req => [
            Some(VarId::ReqUrl),
            Some(VarId::ReqMethod),
            Some(VarId::ReqProto),
            None,
            None,
        ],
        Which::Bereq => [
            Some(VarId::BereqUrl),
            Some(VarId::BereqMethod),
            Some(VarId::BereqProto),
            None,
            None,
        ],
        Which::Beresp => [
            None,
            None,
            Some(VarId::BerespProto),
            Some(VarId::BerespReason),
            Some(VarId::BerespStatus),
        ],
        Which::Resp => [
            None,
            None,
            Some(VarId::RespProto),
            Some(VarId::RespReason),
            Some(VarId::RespStatus),
        ],
    }
}

fn load_message(ctx: &dyn Context, w: Which, h: HttpWhich) -> Message {
    let mut m = Message::default();
    load_message_into(ctx, w, h, &mut m);
    m
}

/// Makes `m` a copy of the task's message `h` (in `m`'s buffers).
fn load_message_into(ctx: &dyn Context, w: Which, h: HttpWhich, m: &mut Message) {
    let vars = field_vars(w);
    let text = |v: Option<VarId>| -> &[u8] {
        v.and_then(|v| ctx.get_str(v).ok().flatten())
            .unwrap_or_default()
    };
    let status = match vars[4].map(|v| ctx.get(v)) {
        Some(Ok(Value::Int(s))) => u16::try_from(s).unwrap_or(0),
        _ => 0,
    };
    m.refill(
        ctx.headers(h),
        [text(vars[0]), text(vars[1]), text(vars[2]), text(vars[3])],
        status,
    );
}

fn store_message(
    ctx: &mut dyn Context,
    w: Which,
    h: HttpWhich,
    m: &mut Message,
) -> Result<(), String> {
    if m.headers_changed {
        match appended(ctx, h, &m.headers) {
            Some(kept) => {
                for (n, v) in &m.headers[kept..] {
                    // UTF-8: checked by `appended`.
                    let n = std::str::from_utf8(n).unwrap_or_default();
                    ctx.add_header(h, &header_name(n), v)?;
                }
            }
            None => ctx.replace_headers(h, std::mem::take(&mut m.headers))?,
        }
    }
    if m.fields_changed {
        let vars = field_vars(w);
        for (v, value) in vars[..4]
            .iter()
            .zip([&m.url, &m.method, &m.proto, &m.reason])
        {
            if let Some(v) = v
                && ctx.get_str(*v)?.is_none_or(|old| old != value.as_slice())
            {
                ctx.set_str(*v, value)?;
            }
        }
        if let Some(v) = vars[4]
            && ctx.get(v)? != Value::Int(i64::from(m.status))
        {
            ctx.set(v, Value::Int(i64::from(m.status)))?;
        }
    }
    Ok(())
}

/// When the tenant only added lines after the message's own (the common
/// edit: `append`, or `set` of a header the message did not have), how
/// many of the lines were the message's own, so that the others are
/// added instead of the whole header set being rebuilt; `None` for any
/// other edit (or a name that is not UTF-8).
fn appended(ctx: &dyn Context, h: HttpWhich, lines: &[(Vec<u8>, Vec<u8>)]) -> Option<usize> {
    let old = ctx.headers(h);
    let kept = lines.len() >= old.len()
        && old
            .iter()
            .zip(lines)
            .all(|((on, ov), (n, v))| *on == n.as_slice() && *ov == v.as_slice());
    let utf8 = lines[old.len().min(lines.len())..]
        .iter()
        .all(|(n, _)| std::str::from_utf8(n).is_ok());
    (kept && utf8).then_some(old.len())
}

/// The most header names [`NAMES`] keeps per thread.
const NAMES_MAX: usize = 16;

thread_local! {
    /// Header names tenants appended lately on this thread: a
    /// `HeaderName` is three allocations and a lower-case copy, and a
    /// tenant appends the same few names on every request.
    static NAMES: std::cell::RefCell<Vec<std::rc::Rc<lacquer_vcl::exec::HeaderName>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Header name `n`, made once per thread for the names tenants use.
fn header_name(n: &str) -> std::rc::Rc<lacquer_vcl::exec::HeaderName> {
    let cached = NAMES.try_with(|c| {
        let mut c = c.try_borrow_mut().ok()?;
        if let Some(k) = c.iter().find(|k| &*k.name == n) {
            return Some(k.clone());
        }
        if c.len() >= NAMES_MAX {
            c.remove(0);
        }
        let k = std::rc::Rc::new(lacquer_vcl::exec::HeaderName::new(n));
        c.push(k.clone());
        Some(k)
    });
    cached
        .ok()
        .flatten()
        .unwrap_or_else(|| std::rc::Rc::new(lacquer_vcl::exec::HeaderName::new(n)))
}

/// Runs `f` on the task's instance with the subroutine's messages
/// copied in, then writes back what changed and applies the effects.
fn with_call(
    env: &Env,
    ctx: &mut dyn Context,
    what: &str,
    f: impl FnOnce(&mut Instance) -> Result<bool, CallError>,
) -> Result<bool, String> {
    let sub = ctx.sub();
    let msgs = messages(sub);
    let no_fork = || format!("wasm.{what}: no tenant forked for this task (call wasm.fork first)");
    // Arrays, not vectors, and the buffers of the task's earlier
    // messages: no allocation once the instance has served a request.
    let mut loaded: [Option<Message>; MAX_MSGS] = Default::default();
    {
        let task = forked(ctx).ok_or_else(no_fork)?.inst.task_mut();
        task.release_msgs();
        for slot in loaded.iter_mut().take(msgs.len()) {
            *slot = Some(task.spare_msg());
        }
    }
    for (slot, &(w, h)) in loaded.iter_mut().zip(msgs) {
        if let Some(m) = slot {
            load_message_into(ctx, w, h, m);
        }
    }
    let fk = forked(ctx).ok_or_else(no_fork)?;
    let task = fk.inst.task_mut();
    for (m, &(w, _)) in loaded.iter_mut().zip(msgs) {
        task.set_msg(w, m.take());
    }
    let result = f(&mut fk.inst);
    let task = fk.inst.task_mut();
    let effects = std::mem::take(&mut task.effects);
    let mut out: [Option<Message>; MAX_MSGS] = Default::default();
    for (m, &(w, _)) in out.iter_mut().zip(msgs) {
        *m = task.msgs[w as usize].take();
    }
    // The tenant's name only when a log line or an error needs it (a
    // clone of the program's `Arc` would be an atomic operation on a
    // counter every thread shares).
    let name = if effects.logs.is_empty() && effects.backend.is_none() {
        String::new()
    } else {
        fk.inst.program().name.clone()
    };
    let ran = match result {
        Ok(ran) => ran,
        Err(e) => {
            // The request stays as it was before the call.
            let msg = format!("wasm.{what}: {e}");
            ctx.log(LogKind::Error, msg.as_bytes());
            return Err(msg);
        }
    };
    for (m, &(w, h)) in out.iter_mut().zip(msgs) {
        if let Some(m) = m {
            store_message(ctx, w, h, m)?;
        }
    }
    if let Some(fk) = forked(ctx) {
        let task = fk.inst.task_mut();
        for m in out.into_iter().flatten() {
            task.recycle(m);
        }
    }
    for l in &effects.logs {
        let mut line = format!("wasm {name}: ").into_bytes();
        line.extend_from_slice(l);
        ctx.log(LogKind::Log, &line);
    }
    if let Some(b) = &effects.backend {
        let be = env.host.lookup_backend(b).ok_or_else(|| {
            format!(
                "wasm.{what}: tenant '{name}' chose backend '{b}', which this VCL does not have"
            )
        })?;
        let v = Value::Backend(be);
        if is_backend_sub(sub) {
            ctx.set(VarId::BereqBackend, v.clone())?
        } else {
            ctx.set(VarId::ReqBackendHint, v.clone())?
        }
        if let Some(fk) = forked(ctx) {
            fk.backend = Some(v);
        }
    }
    if !effects.hash_data.is_empty() {
        if sub == BuiltinSub::Hash {
            for d in &effects.hash_data {
                ctx.hash_data(Some(d));
            }
        } else if let Some(fk) = forked(ctx) {
            fk.hash.extend(effects.hash_data);
        }
    }
    if let Some(ttl) = effects.ttl {
        if is_backend_sub(sub) {
            ctx.set(VarId::BerespTtl, Value::Duration(ttl))?;
        } else if let Some(fk) = forked(ctx) {
            // For the object a cacheable forge makes (vm_backend()).
            fk.ttl = Some(ttl);
        }
    }
    if let Some(u) = effects.uncacheable {
        ctx.set(VarId::BerespUncacheable, Value::Bool(u))?;
    }
    for b in &effects.bans {
        ctx.ban(b)?;
    }
    Ok(ran)
}

fn is_backend_sub(sub: BuiltinSub) -> bool {
    matches!(
        sub,
        BuiltinSub::BackendFetch | BuiltinSub::BackendResponse | BuiltinSub::BackendError
    )
}

/// Writes a forged response into `resp` (in `vcl_synth`).
fn deliver_forged(ctx: &mut dyn Context) -> Result<bool, String> {
    // Taken out of the task while `ctx` writes it (no copy of the body),
    // then put back: `want_result()` and `want_status()` still see it.
    let Some(d) = forked(ctx).and_then(|fk| fk.inst.task_mut().decision.take()) else {
        return Ok(false);
    };
    let r = match &d {
        Decision::Forge(f) => write_forged(ctx, f).map(|()| true),
        _ => Ok(false),
    };
    if let Some(fk) = forked(ctx) {
        fk.inst.task_mut().decision = Some(d);
    }
    r
}

fn write_forged(ctx: &mut dyn Context, f: &lacquer_sandbox::Forged) -> Result<(), String> {
    ctx.set(VarId::RespStatus, Value::Int(i64::from(f.status)))?;
    if !f.content_type.is_empty() {
        ctx.set_header(HttpWhich::Resp, content_type(), &f.content_type)?;
    }
    ctx.synthetic(&f.body);
    Ok(())
}

/// `Content-Type`, made once (a `HeaderName` holds three allocations).
fn content_type() -> &'static lacquer_vcl::exec::HeaderName {
    static CT: OnceLock<lacquer_vcl::exec::HeaderName> = OnceLock::new();
    CT.get_or_init(|| lacquer_vcl::exec::HeaderName::new("Content-Type"))
}

fn run(env: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    if ctx.sub() == BuiltinSub::Synth && deliver_forged(ctx)? {
        return Ok(Value::Int(1));
    }
    if ctx.sub() == BuiltinSub::BackendError {
        if deliver_vm(env, ctx)? {
            return Ok(Value::Int(1));
        }
        if forked(ctx).is_none() {
            // A fetch that was not the VM backend's, in a task without a
            // tenant: nothing to do, VCL goes on.
            return Ok(Value::Int(0));
        }
    }
    let Some(hook) = hook_of(ctx.sub()) else {
        return Err("wasm.run: no tenant hook for this subroutine".into());
    };
    let ran = with_call(env, ctx, "run", |i| i.run_hook(hook))?;
    Ok(Value::Int(i64::from(ran)))
}

fn vcall(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let hook = lossy(a.str_or_empty(0)?).into_owned();
    with_call(env, ctx, "vcall", |i| i.call(&hook).map(|()| true))?;
    Ok(Value::Int(1))
}

fn call(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let func = lossy(a.str_or_empty(0)?).into_owned();
    let arg = a.str_or_empty(1)?.to_vec();
    if let Some(fk) = forked(ctx) {
        let t = fk.inst.task_mut();
        t.arg = arg;
        t.results.clear();
    }
    with_call(env, ctx, "call", |i| i.call(&func).map(|()| true))?;
    Ok(forked(ctx)
        .and_then(|fk| fk.inst.task().results.first().cloned())
        .map_or(Value::Null, Value::str))
}

fn want_result(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(forked(ctx)
        .and_then(|fk| fk.inst.task().decision.as_ref().map(Decision::name))
        .map_or(Value::str(""), Value::str))
}

fn want_status(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Int(
        forked(ctx)
            .and_then(|fk| fk.inst.task().decision.as_ref().map(Decision::status))
            .map_or(0, i64::from),
    ))
}

fn result(ctx: &mut dyn Context, a: &Args<'_>) -> Result<Option<Vec<u8>>, String> {
    let i = a.int(0)?.unwrap_or(0);
    Ok(usize::try_from(i)
        .ok()
        .and_then(|i| forked(ctx).and_then(|fk| fk.inst.task().results.get(i).cloned())))
}

fn result_value(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let v = result(ctx, a)?;
    Ok(Value::Int(
        v.and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse().ok())
            .unwrap_or(0),
    ))
}

fn result_as_string(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(result(ctx, a)?.map_or(Value::Null, Value::str))
}

/// The (Host, URL) of the request (client subroutines) or of `bereq`.
fn vm_key(ctx: &dyn Context) -> Result<VmKey, String> {
    let (h, url) = if is_backend_sub(ctx.sub()) {
        (HttpWhich::Bereq, VarId::BereqUrl)
    } else {
        (HttpWhich::Req, VarId::ReqUrl)
    };
    static HOST: OnceLock<lacquer_vcl::exec::HeaderName> = OnceLock::new();
    let host = ctx
        .header(
            h,
            HOST.get_or_init(|| lacquer_vcl::exec::HeaderName::new("Host")),
        )
        .unwrap_or_default()
        .to_vec();
    Ok((host, ctx.get_str(url)?.unwrap_or_default().to_vec()))
}

/// libvmod-riscv's `vm_backend(func, arg)`: a backend that makes the
/// response in the tenant. Without a function, the response the tenant
/// forged (a cacheable `forge`); with one, what that function forges when
/// called with `arg` during the fetch. The tenant's chosen backend, if it
/// forged nothing and no function is named (a `"backend"` decision of a
/// router tenant); NULL when no tenant is forked.
fn vm_backend(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let func = lossy(a.str_or_empty(0)?).into_owned();
    let arg = a.str_or_empty(1)?.to_vec();
    let key = vm_key(ctx)?;
    let set = tenants(env);
    let Some(fk) = forked(ctx) else {
        return Ok(Value::Null);
    };
    let source = match (&fk.inst.task().decision, func.is_empty()) {
        (_, false) => VmSource::Call { func, arg },
        (Some(Decision::Forge(f)), true) => VmSource::Forged(f.clone()),
        (_, true) => return Ok(fk.backend.clone().unwrap_or(Value::Null)),
    };
    let fetch = Arc::new(VmFetch {
        program: fk.inst.program().clone(),
        source,
        ttl: fk.ttl,
    });
    // One lock for the VM backend, the earlier claim of this task
    // (withdrawn) and this one (a lock shared by every worker thread).
    let vm = {
        let mut s = set.lock().unwrap_or_else(|e| e.into_inner());
        let vm =
            s.vm.clone()
                .ok_or("wasm.vm_backend: this VCL loaded no tenants")?;
        if let Some(old) = fk.vm.take()
            && s.pending
                .get(&old.key)
                .is_some_and(|p| Arc::ptr_eq(p, &old.fetch))
        {
            s.pending.remove(&old.key);
        }
        s.pending.insert(key.clone(), fetch.clone());
        vm
    };
    fk.vm = Some(VmClaim {
        set: Arc::downgrade(&set),
        key,
        fetch,
    });
    Ok(Value::Backend(vm))
}

/// In `vcl_backend_error` of a fetch through the VM backend: writes the
/// tenant's response into `beresp`; false for other fetches.
fn deliver_vm(env: &Env, ctx: &mut dyn Context) -> Result<bool, String> {
    let set = tenants(env);
    let Some(vm) = set.lock().unwrap_or_else(|e| e.into_inner()).vm.clone() else {
        return Ok(false);
    };
    if !matches!(ctx.get(VarId::BereqBackend), Ok(Value::Backend(b)) if b.id == vm.id) {
        return Ok(false);
    }
    let key = vm_key(ctx)?;
    let fetch = set
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pending
        .get(&key)
        .cloned();
    let Some(fetch) = fetch else {
        return Err(format!(
            "wasm.run: the VM backend has no response for Host '{}' URL '{}': the request that chose it is gone (a background fetch outlives it) or changed bereq's Host or URL",
            String::from_utf8_lossy(&key.0),
            String::from_utf8_lossy(&key.1)
        ));
    };
    let (forged, ttl) = match &fetch.source {
        VmSource::Forged(f) => (f.clone(), fetch.ttl),
        VmSource::Call { func, arg } => {
            let mut inst = sandbox()?.instantiate(&fetch.program)?;
            let bereq = load_message(ctx, Which::Bereq, HttpWhich::Bereq);
            let task = inst.task_mut();
            task.set_msg(Which::Bereq, Some(bereq));
            task.arg = arg.clone();
            inst.call(func).map_err(|e| {
                let m = format!("wasm.run: vm_backend('{func}'): {e}");
                ctx.log(LogKind::Error, m.as_bytes());
                m
            })?;
            let name = fetch.program.name.clone();
            let task = inst.task_mut();
            for l in std::mem::take(&mut task.effects.logs) {
                let mut line = format!("wasm {name}: ").into_bytes();
                line.extend_from_slice(&l);
                ctx.log(LogKind::Log, &line);
            }
            let task = inst.task();
            match &task.decision {
                Some(Decision::Forge(f)) => (f.clone(), task.effects.ttl.or(fetch.ttl)),
                _ => {
                    return Err(format!(
                        "wasm.run: vm_backend('{func}'): tenant '{name}' forged no response"
                    ));
                }
            }
        }
    };
    ctx.set(VarId::BerespStatus, Value::Int(i64::from(forged.status)))?;
    if !forged.content_type.is_empty() {
        ctx.set_header(HttpWhich::Beresp, content_type(), &forged.content_type)?;
    }
    ctx.synthetic(&forged.body);
    ctx.set(VarId::BerespTtl, Value::Duration(ttl.unwrap_or(VM_TTL)))?;
    Ok(true)
}

fn apply_hash(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let pending = forked(ctx).map(|fk| std::mem::take(&mut fk.hash));
    for d in pending.unwrap_or_default() {
        ctx.hash_data(Some(&d));
    }
    Ok(Value::Null)
}

/// Updates `tenant` in `sets` from `bytes`; how many VCLs had it.
fn update_in(sets: &[Arc<Mutex<Tenants>>], tenant: &str, bytes: &[u8]) -> Result<usize, String> {
    let sb = sandbox()?;
    let found: Vec<Arc<Tenant>> = sets
        .iter()
        .filter_map(|s| {
            s.lock()
                .unwrap_or_else(|e| e.into_inner())
                .map
                .get(tenant)
                .cloned()
        })
        .collect();
    if found.is_empty() {
        return Err(format!("wasm: no loaded VCL has a tenant '{tenant}'"));
    }
    for t in &found {
        t.update(sb, bytes)?;
    }
    Ok(found.len())
}

fn live_update(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let tenant = lossy(a.str_or_empty(0)?).into_owned();
    let bytes = a.str_or_empty(1)?.to_vec();
    live_update_bytes(env, ctx, &tenant, &bytes)
}

fn live_update_bytes(env: &Env, ctx: &mut dyn Context, tenant: &str, bytes: &[u8]) -> R {
    match update_in(&[tenants(env)], tenant, bytes) {
        Ok(_) => Ok(Value::Bool(true)),
        Err(e) => {
            ctx.log(LogKind::Error, format!("wasm.live_update: {e}").as_bytes());
            Ok(Value::Bool(false))
        }
    }
}

fn live_update_file(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let tenant = lossy(a.str_or_empty(0)?).into_owned();
    let file = lossy(a.str_or_empty(1)?).into_owned();
    match std::fs::read(&file) {
        Ok(b) => live_update_bytes(env, ctx, &tenant, &b),
        Err(e) => {
            ctx.log(
                LogKind::Error,
                format!("wasm.live_update_file: cannot read {file}: {e}").as_bytes(),
            );
            Ok(Value::Bool(false))
        }
    }
}

/// The CLI's `wasm.update <tenant> <file>`: loads the file as the
/// tenant's program in every loaded VCL that has the tenant. Returns the
/// reply text; on failure nothing changed.
pub fn cli_update(tenant: &str, file: &str) -> Result<String, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let sets: Vec<Arc<Mutex<Tenants>>> = all_sets()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let n = update_in(&sets, tenant, &bytes)?;
    Ok(format!("tenant '{tenant}' updated in {n} VCL(s)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_subroutine_has_more_messages_than_a_call_copies() {
        // `with_call` copies at most MAX_MSGS messages into the sandbox.
        for sub in lacquer_vcl::subs::ALL_BUILTIN_SUBS {
            assert!(messages(sub).len() <= MAX_MSGS, "{sub:?}");
        }
        assert!(
            lacquer_vcl::subs::ALL_BUILTIN_SUBS
                .iter()
                .any(|&s| messages(s).len() == MAX_MSGS)
        );
    }
}
