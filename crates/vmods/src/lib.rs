//! Native VCL modules (vmods): `std`, `directors` and the other modules
//! Varnish users import, with the same VCL signatures as Varnish 7.1 and
//! varnish-modules.
//!
//! Each vmod lives in its own module with its declaration text (the format
//! of [`lacquer_vcl::vmod`]) and a table mapping declared names to Rust
//! functions. [`registry`] gives the compiler every declaration;
//! [`Runtime`] is built for one loaded VCL from the vmods it imports and
//! implements [`lacquer_vcl::exec::Vmods`], dispatching calls by index to
//! the Rust functions resolved once at load time, and holding the object
//! instances created in `vcl_init`.
//!
//! Server services that are not tied to one task (backend health, director
//! registration, the xkey index) come through the [`Host`] trait; per-task
//! services through the executor's `Context` (task state in
//! `Context::privs`, header lists, request body, purge, PROXY TLVs, socket
//! options).
//!
//! How the server uses it:
//!
//! 1. compile VCL against [`registry()`] (`lacquer_vcl::compile`), or
//!    [`registry_with_test_vmods()`] when running varnishtest cases (adds
//!    the test-only `debug`; `vtc`, which Varnish installs and production
//!    VCL imports for `vtc.sleep()` and the like, is in both);
//! 2. build [`Runtime::for_program`] with the server's [`Host`], and the
//!    executor program (`Program::from_ir`); run `vcl_init` with the
//!    runtime as the `Vmods` (objects are created there and directors
//!    registered with the host);
//! 3. pass the same runtime to every task of that VCL; when a backend
//!    value is a registered director, call [`Director::resolve`] with the
//!    backend task's context until a real backend comes out;
//! 4. drop the runtime when the VCL is discarded: its directors are
//!    removed from the host.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use lacquer_vcl::exec::regex::Regex;
use lacquer_vcl::exec::{Context, FuncRef, Value, VclRuntime, VmodArg, Vmods};
use lacquer_vcl::ir::{ImportedVmod, InstanceDef};
use lacquer_vcl::vars::VclVersion;
use lacquer_vcl::vmod::{VmodDecl, VmodRegistry};

mod accept;
mod args;
mod blob;
mod bodyaccess;
mod cookie;
mod curl;
mod debug;
mod directors;
mod header;
mod host;
mod http_vmod;
mod httpc;
mod kvstore;
mod mse;
mod proxy;
mod purge;
pub mod rnd;
mod saintmode;
mod str_vmod;
mod tcp;
mod tls;
mod unix;
mod urlplus;
mod utils;
mod var;
mod vmod_std;
mod vsthrottle;
mod vtc;
mod wasm;
mod xkey;

pub use host::{
    Counters, Director, DirectorList, DynamicBackend, DynamicTls, Endpoint, Host, ListedMember,
    MemberReport, ObjectEvent, ObjectEventFn,
};

pub use curl::set_defaults as curl_set_defaults;
pub use httpc::{LocalConnector, Stream as HttpcStream, set_local_connector};
pub use wasm::cli_update as wasm_cli_update;

use args::Args;

/// A vmod function: `(runtime env, task context, arguments) -> value`.
pub(crate) type FuncImpl = fn(&Env, &mut dyn Context, &Args<'_>) -> Result<Value, String>;
/// An object constructor: returns the new instance.
pub(crate) type CtorImpl = fn(&Env, &mut dyn Context, &str, &Args<'_>) -> Result<Obj, String>;
/// An object method: receives the instance it is called on.
pub(crate) type MethodImpl =
    fn(&Env, &AnyObj, &mut dyn Context, &Args<'_>) -> Result<Value, String>;
/// What an object instance is, seen from its methods.
pub(crate) type AnyObj = dyn Any + Send + Sync;
/// An object instance.
pub(crate) type Obj = Arc<dyn Any + Send + Sync>;

/// The implementation side of one object class.
pub(crate) struct ClassImpl {
    pub name: &'static str,
    pub ctor: CtorImpl,
    pub methods: &'static [(&'static str, MethodImpl)],
}

/// A VCL lifecycle event vmods may react to (Varnish's `$Event`): `Load`
/// before `vcl_init`, `Warm` and `Cold` as the VCL's temperature changes,
/// `Discard` when it is freed. A handler failing `Load` or `Warm` stops
/// that transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VclEvent {
    Load,
    Warm,
    Cold,
    Discard,
}

impl VclEvent {
    /// Varnish's name for the event, as vmods log it.
    pub fn name(self) -> &'static str {
        match self {
            VclEvent::Load => "VCL_EVENT_LOAD",
            VclEvent::Warm => "VCL_EVENT_WARM",
            VclEvent::Cold => "VCL_EVENT_COLD",
            VclEvent::Discard => "VCL_EVENT_DISCARD",
        }
    }
}

/// What an event handler may consult: the VCL, the daemon's parameters
/// and the log.
pub trait EventCtx {
    fn vcl_name(&self) -> &str;
    /// A runtime parameter's current value as `param.show` prints it.
    fn param(&self, name: &str) -> Option<String>;
    /// Writes a `Debug` record outside any transaction.
    fn log_debug(&self, msg: &str);
    /// Writes a record of this kind outside any transaction (the log of
    /// `PRIV_VCL` fini hooks).
    fn log(&self, kind: lacquer_vcl::exec::LogKind, msg: &[u8]);
}

/// A vmod's event handler.
pub(crate) type EventImpl = fn(&Env, VclEvent, &dyn EventCtx) -> Result<(), String>;

/// The implementation side of one vmod: its declaration text, its
/// functions and classes by declared name, and its event handler.
pub(crate) struct ModuleImpl {
    pub decl: &'static str,
    pub functions: &'static [(&'static str, FuncImpl)],
    pub classes: &'static [ClassImpl],
    pub event: Option<EventImpl>,
    /// Body filters the vmod registers for the VCLs that import it.
    pub filters: &'static [BodyFilter],
}

/// A body filter a vmod registers (Varnish's VFP and VDP): VCL names it
/// in `beresp.filters` (`fetch`: applied as the object is stored) or in
/// `resp.filters` (`deliver`: applied as it is sent), once the VCL
/// imports the vmod.
pub struct BodyFilter {
    pub name: &'static str,
    pub fetch: bool,
    pub deliver: bool,
    /// A fresh instance for one body.
    pub new: fn() -> Box<dyn FilterStage>,
}

impl std::fmt::Debug for BodyFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// One body filter at work on one body: it sees the bytes in order, then
/// the end; an error ends the fetch or the delivery.
pub trait FilterStage: Send {
    /// Turns the next bytes of the body into output.
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), String>;
    /// The body ended: what the filter still has to say.
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), String>;
}

/// Every implemented vmod.
fn modules() -> Vec<&'static ModuleImpl> {
    vec![
        &vmod_std::MODULE,
        &directors::MODULE,
        &var::MODULE,
        &header::MODULE,
        &cookie::MODULE,
        &str_vmod::MODULE,
        &blob::MODULE,
        &purge::MODULE,
        &proxy::MODULE,
        &unix::MODULE,
        &vsthrottle::MODULE,
        &xkey::MODULE,
        &bodyaccess::MODULE,
        &tcp::MODULE,
        &saintmode::MODULE,
        &wasm::MODULE,
        &curl::MODULE,
        &http_vmod::MODULE,
        &tls::MODULE,
        &kvstore::MODULE,
        &urlplus::MODULE,
        &utils::MODULE,
        &mse::MODULE,
        &accept::MODULE,
        // Varnish installs vmod_vtc with varnishd and does not restrict
        // it: production VCL imports it (`vtc.sleep()`).
        &vtc::MODULE,
    ]
}

/// The test-only vmod (varnishtest's `debug`, which Varnish does not
/// install): offered to VCL only through [`registry_with_test_vmods`], so
/// production VCL can never import it by accident.
fn test_modules() -> Vec<&'static ModuleImpl> {
    vec![&debug::MODULE]
}

/// A parsed vmod: its declaration, implementation, and whether it is a
/// test-only vmod.
type Parsed = (Arc<VmodDecl>, &'static ModuleImpl, bool);

/// Parsed declarations of every implemented vmod (production then
/// test-only), parsed once.
fn parsed() -> &'static [Parsed] {
    static PARSED: OnceLock<Vec<Parsed>> = OnceLock::new();
    PARSED.get_or_init(|| {
        let prod = modules().into_iter().map(|m| (m, false));
        let test = test_modules().into_iter().map(|m| (m, true));
        prod.chain(test)
            .map(|(m, is_test)| {
                let d = VmodDecl::parse(m.decl)
                    .unwrap_or_else(|e| panic!("built-in vmod declaration is invalid: {e}"));
                (Arc::new(d), m, is_test)
            })
            .collect()
    })
}

/// The declarations of every production vmod this crate implements, for
/// the compiler.
pub fn registry() -> VmodRegistry {
    let mut r = VmodRegistry::new();
    for (d, _, is_test) in parsed() {
        if !is_test {
            r.add((**d).clone());
        }
    }
    r
}

/// Everything in [`registry`] plus the test-only vmod `debug`,
/// for a server running varnishtest cases (`-p debug=+vtc_mode`).
pub fn registry_with_test_vmods() -> VmodRegistry {
    let mut r = VmodRegistry::new();
    for (d, _, _) in parsed() {
        r.add((**d).clone());
    }
    r
}

/// Shared, per-VCL state every vmod function can reach.
pub(crate) struct Env {
    /// Distinct for every loaded VCL (values such as SUBs are only
    /// meaningful in the VCL that made them).
    pub vcl_id: u64,
    pub host: Arc<dyn Host>,
    /// The VCL syntax version of the loaded program (4.0 or 4.1).
    pub syntax: f64,
    /// `std.fileread()` cache: a file is read once per VCL.
    pub files: Mutex<HashMap<Vec<u8>, Result<bytes::Bytes, String>>>,
    /// Regexes given as strings to vmods, compiled once per VCL.
    regexes: Mutex<HashMap<Vec<u8>, Arc<Regex>>>,
    /// Directors this VCL registered with the host, removed on drop.
    directors: Mutex<Vec<lacquer_vcl::exec::Backend>>,
    /// Per-VCL vmod state (Varnish's `PRIV_VCL`).
    vcl: Mutex<lacquer_vcl::exec::privs::TaskPrivs>,
}

impl Env {
    /// Per-VCL vmod state, locked.
    pub fn vcl_state(&self) -> std::sync::MutexGuard<'_, lacquer_vcl::exec::privs::TaskPrivs> {
        self.vcl.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a director with the host for the life of this VCL.
    pub fn add_director(&self, name: &str, dir: Arc<dyn Director>) -> lacquer_vcl::exec::Backend {
        let be = self.host.add_director(name, dir);
        self.directors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(be.clone());
        be
    }

    /// Compiles (or fetches from the cache) a regex passed as a string;
    /// same engine and PCRE-compatible semantics as VCL's own `~`.
    pub fn regex(&self, pattern: &[u8]) -> Result<Arc<Regex>, String> {
        let mut cache = self.regexes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = cache.get(pattern) {
            return Ok(r.clone());
        }
        let text =
            std::str::from_utf8(pattern).map_err(|_| "regex is not valid UTF-8".to_string())?;
        let r = Arc::new(Regex::new(text).map_err(|e| format!("bad regex \"{text}\": {e}"))?);
        // Patterns built at runtime could grow the cache without bound.
        if cache.len() >= 1024 {
            cache.clear();
        }
        cache.insert(pattern.to_vec(), r.clone());
        Ok(r)
    }
}

struct LoadedVmod {
    event: Option<EventImpl>,
    filters: &'static [BodyFilter],
    functions: Vec<FuncImpl>,
    classes: Vec<&'static ClassImpl>,
    /// Method implementations per class, in declaration order.
    methods: Vec<Vec<MethodImpl>>,
}

struct Instance {
    vmod: usize,
    class: usize,
    obj: OnceLock<Obj>,
}

/// The vmods of one loaded VCL: implements [`Vmods`] for the executor.
pub struct Runtime {
    env: Env,
    vmods: Vec<LoadedVmod>,
    instances: Vec<Instance>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("vmods", &self.vmods.len())
            .field("instances", &self.instances.len())
            .finish()
    }
}

impl Runtime {
    /// Builds the runtime for a compiled program: `imports` are the
    /// program's imported vmods in import order (the `vmod` index of a
    /// [`FuncRef`]), `instances` its `new` objects (the instance index of
    /// method calls).
    pub fn new(
        imports: &[ImportedVmod],
        instances: &[InstanceDef],
        version: VclVersion,
        host: Arc<dyn Host>,
    ) -> Result<Runtime, String> {
        let mut vmods = Vec::with_capacity(imports.len());
        for imp in imports {
            // Test-only vmods are found too: a program can only import
            // them if it was compiled against `registry_with_test_vmods`.
            let (_, module, _) = parsed()
                .iter()
                .find(|(d, _, _)| d.name == imp.name)
                .ok_or_else(|| format!("vmod '{}' is not implemented by this server", imp.name))?;
            let mut functions = Vec::with_capacity(imp.decl.functions.len());
            for f in &imp.decl.functions {
                let (_, fi) = module
                    .functions
                    .iter()
                    .find(|(n, _)| *n == f.name)
                    .ok_or_else(|| format!("vmod {}: no function '{}'", imp.name, f.name))?;
                functions.push(*fi);
            }
            let mut classes = Vec::new();
            let mut methods = Vec::new();
            for o in &imp.decl.objects {
                let ci = module
                    .classes
                    .iter()
                    .find(|c| c.name == o.name)
                    .ok_or_else(|| format!("vmod {}: no object '{}'", imp.name, o.name))?;
                let mut ms = Vec::with_capacity(o.methods.len());
                for m in &o.methods {
                    let (_, mi) =
                        ci.methods
                            .iter()
                            .find(|(n, _)| *n == m.name)
                            .ok_or_else(|| {
                                format!(
                                    "vmod {}: object {} has no method '{}'",
                                    imp.name, o.name, m.name
                                )
                            })?;
                    ms.push(*mi);
                }
                classes.push(ci);
                methods.push(ms);
            }
            vmods.push(LoadedVmod {
                event: module.event,
                filters: module.filters,
                functions,
                classes,
                methods,
            });
        }
        let mut insts = Vec::with_capacity(instances.len());
        for i in instances {
            let ok = vmods.get(i.vmod).is_some_and(|v| i.class < v.classes.len());
            if !ok {
                return Err(format!(
                    "object '{}' refers to an unknown vmod class",
                    i.name
                ));
            }
            insts.push(Instance {
                vmod: i.vmod,
                class: i.class,
                obj: OnceLock::new(),
            });
        }
        Ok(Runtime {
            env: Env {
                vcl_id: {
                    static NEXT: std::sync::atomic::AtomicU64 =
                        std::sync::atomic::AtomicU64::new(0);
                    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                },
                host,
                syntax: match version {
                    VclVersion::V40 => 4.0,
                    VclVersion::V41 => 4.1,
                },
                files: Mutex::new(HashMap::new()),
                regexes: Mutex::new(HashMap::new()),
                directors: Mutex::new(Vec::new()),
                vcl: Mutex::new(lacquer_vcl::exec::privs::TaskPrivs::new()),
            },
            vmods,
            instances: insts,
        })
    }
}

impl Runtime {
    /// Builds the runtime for a program compiled against [`registry`].
    pub fn for_program(
        program: &lacquer_vcl::ir::Program,
        host: Arc<dyn Host>,
    ) -> Result<Runtime, String> {
        Runtime::new(&program.vmods, &program.instances, program.version, host)
    }
}

impl Runtime {
    /// Tells every imported vmod with a handler about a lifecycle event,
    /// in import order; the first failure stops there and is returned.
    pub fn event(&self, ev: VclEvent, cx: &dyn EventCtx) -> Result<(), String> {
        for v in &self.vmods {
            if let Some(f) = v.event {
                f(&self.env, ev, cx)?;
            }
        }
        if ev == VclEvent::Discard {
            // As varnishd, the VCL's PRIV_VCL values end after the
            // discard event; their end checks cannot stop that.
            let mut state = std::mem::take(&mut *self.env.vcl_state());
            for e in state.finish(&mut |kind, msg| cx.log(kind, msg)) {
                cx.log(lacquer_vcl::exec::LogKind::Error, e.as_bytes());
            }
        }
        Ok(())
    }
}

impl Runtime {
    /// The body filter `name` of an imported vmod, for fetch
    /// (`deliver` false) or for delivery; the first vmod in import order
    /// that has it.
    pub fn filter(&self, name: &str, deliver: bool) -> Option<&'static BodyFilter> {
        self.vmods
            .iter()
            .flat_map(|v| v.filters.iter())
            .find(|f| f.name == name && if deliver { f.deliver } else { f.fetch })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let dirs = std::mem::take(
            self.env
                .directors
                .get_mut()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for d in &dirs {
            self.env.host.remove_director(d);
        }
    }
}

impl Vmods for Runtime {
    fn call(
        &self,
        ctx: &mut dyn Context,
        vcl: &mut dyn VclRuntime,
        func: FuncRef,
        args: &[VmodArg],
    ) -> Result<Value, String> {
        let f = self
            .vmods
            .get(func.vmod as usize)
            .and_then(|v| v.functions.get(func.func as usize))
            .ok_or_else(|| format!("unknown vmod function {}.{}", func.vmod, func.func))?;
        f(&self.env, ctx, &Args::new(args, vcl))
    }

    fn construct(
        &self,
        ctx: &mut dyn Context,
        vcl: &mut dyn VclRuntime,
        class: FuncRef,
        instance: u32,
        name: &str,
        args: &[VmodArg],
    ) -> Result<(), String> {
        let inst = self
            .instances
            .get(instance as usize)
            .ok_or_else(|| format!("unknown object instance {instance} ({name})"))?;
        if inst.vmod != class.vmod as usize || inst.class != class.func as usize {
            return Err(format!(
                "object {name}: class does not match its declaration"
            ));
        }
        let ci = self.vmods[inst.vmod].classes[inst.class];
        let obj = (ci.ctor)(&self.env, ctx, name, &Args::new(args, vcl))?;
        inst.obj
            .set(obj)
            .map_err(|_| format!("object {name} is already constructed"))
    }

    fn method(
        &self,
        ctx: &mut dyn Context,
        vcl: &mut dyn VclRuntime,
        instance: u32,
        method: u32,
        args: &[VmodArg],
    ) -> Result<Value, String> {
        let inst = self
            .instances
            .get(instance as usize)
            .ok_or_else(|| format!("unknown object instance {instance}"))?;
        let m = self.vmods[inst.vmod].methods[inst.class]
            .get(method as usize)
            .ok_or_else(|| format!("unknown method {method} of object instance {instance}"))?;
        let obj = inst
            .obj
            .get()
            .ok_or_else(|| format!("object instance {instance} used before it was created"))?;
        m(&self.env, obj.as_ref(), ctx, &Args::new(args, vcl))
    }
}

/// Downcasts an object instance to its class's Rust type. The dispatch
/// tables only route a class's methods to its own instances, so a mismatch
/// is a broken internal invariant.
pub(crate) fn this<T: 'static>(o: &AnyObj) -> &T {
    o.downcast_ref::<T>()
        .expect("vmod method dispatched to an instance of another class")
}

/// Seconds since the epoch, as varnishd's real-time clock.
pub(crate) fn wall_clock() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
