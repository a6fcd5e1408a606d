//! Loaded VCLs: compiling a VCL into something requests can run, its
//! backends (pools, probes), its vmod state, and the registry behind
//! `vcl.load`, `vcl.use`, `vcl.label`, `vcl.discard` and `vcl.list`.
//!
//! A [`LoadedVcl`] is immutable and shared (`Arc`): a request keeps the VCL
//! it started with even when another one becomes active, so a switch never
//! disturbs requests in flight. Backends belong to their VCL; probes run
//! while the VCL is warm and stop when it goes cold or is discarded.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lacquer_vcl::diag::Diagnostics;
use lacquer_vcl::exec::{self, Action, Backend, Context, Scratch, Value, Vmods};
use lacquer_vcl::ir::{BackendDef, ProbeDef, Program};
use lacquer_vcl::source::SourceMap;
use lacquer_vcl::subs::BuiltinSub;
use tokio::task::JoinHandle;

use crate::backend::pool::{Address, Pool};
use crate::backend::probe::{self, Health, ProbeSpec};
use crate::task::TaskSub;
use lacquer_vsl::Tag;

/// A backend of a loaded VCL, ready for fetches.
pub struct BackendRt {
    /// The name in VCL (`default`).
    pub vcl_name: String,
    /// `<vcl>.<backend>`, as `backend.list` and counters name it.
    pub name: String,
    pub none: bool,
    pub pool: Pool,
    pub health: Health,
    pub probe: Option<ProbeSpec>,
    pub host_header: Option<String>,
    pub connect_timeout: Option<f64>,
    pub first_byte_timeout: Option<f64>,
    pub between_bytes_timeout: Option<f64>,
    /// Bytes sent first on every new connection (`.preamble`).
    pub preamble: Option<Arc<[u8]>>,
    /// PROXY protocol version sent first on each connection
    /// (`.proxy_header`); such connections are never reused, since the
    /// header names one client.
    pub proxy_header: Option<u8>,
}

impl std::fmt::Debug for BackendRt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendRt")
            .field("name", &self.name)
            .finish()
    }
}

impl BackendRt {
    fn new(vcl: &str, def: &BackendDef, probes: &[ProbeDef], prefer_ipv6: bool) -> Self {
        let addr = match &def.path {
            Some(p) => Address::Unix(p.into()),
            None => {
                let pick = def
                    .addrs
                    .iter()
                    .find(|a| a.is_ipv6() == prefer_ipv6)
                    .or_else(|| def.addrs.first())
                    .copied()
                    .unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
                Address::Tcp(pick)
            }
        };
        // The Host a bereq without one gets: .host_header, else .host, and
        // 0.0.0.0 for a Unix-socket (.path) backend, as varnishd.
        let host = def
            .host_header
            .clone()
            .or_else(|| (!def.host.is_empty()).then(|| def.host.clone()))
            .or_else(|| def.path.is_some().then(|| "0.0.0.0".to_string()));
        let proxy_header = def.proxy_header.and_then(|v| u8::try_from(v).ok());
        let probe = def.probe.and_then(|i| probes.get(i)).map(|p| {
            let mut spec = ProbeSpec::new(
                p.url.as_deref(),
                p.request.as_deref(),
                host.as_deref().unwrap_or("localhost"),
                p.expected_response.map(|v| v.min(999) as u16),
                p.timeout,
                p.interval,
                p.window.map(|v| v.min(64) as u32),
                p.threshold.map(|v| v.min(64) as u32),
                p.initial.map(|v| v.min(64) as u32),
            );
            spec.proxy_header = proxy_header;
            spec
        });
        let health = match &probe {
            Some(spec) => Health::probed(spec),
            None => Health::unprobed(),
        };
        BackendRt {
            vcl_name: def.name.clone(),
            name: format!("{vcl}.{}", def.name),
            none: def.none,
            pool: Pool::new(
                addr,
                def.preamble.clone(),
                def.max_connections.map(|m| m as usize),
            ),
            health,
            probe,
            host_header: host,
            connect_timeout: def.connect_timeout,
            first_byte_timeout: def.first_byte_timeout,
            between_bytes_timeout: def.between_bytes_timeout,
            preamble: def.preamble.clone(),
            proxy_header,
        }
    }

    /// The PROXY header this backend is sent first for a client session
    /// (`.proxy_header`): the session's client and server addresses, as
    /// varnishd sends them (v1 with the client address as received).
    pub fn proxy_preface(&self, sess: &crate::task::SessInfo) -> Option<Vec<u8>> {
        use lacquer_http::proxy::{encode_v1, encode_v2};
        Some(match self.proxy_header? {
            1 => encode_v1(
                &String::from_utf8_lossy(&sess.client_ip),
                &sess.client_port,
                sess.server,
            ),
            _ => encode_v2(sess.client, sess.server, None),
        })
    }

    /// Whether fetches may use this backend now.
    pub fn healthy(&self) -> bool {
        !self.none && self.health.healthy()
    }

    /// The TCP address, for `beresp.backend.ip`.
    pub fn tcp_addr(&self) -> Option<std::net::SocketAddr> {
        match self.pool.address() {
            Address::Tcp(a) => Some(*a),
            Address::Unix(_) => None,
        }
    }
}

/// Temperature of a VCL (`vcl.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Temp {
    Auto,
    Warm,
    Cold,
}

impl Temp {
    pub fn parse(s: &str) -> Option<Temp> {
        match s {
            "auto" => Some(Temp::Auto),
            "warm" => Some(Temp::Warm),
            "cold" => Some(Temp::Cold),
            _ => None,
        }
    }
}

/// A compiled and initialised VCL.
pub struct LoadedVcl {
    pub name: String,
    pub ir: Arc<Program>,
    pub code: exec::code::Program,
    pub backends: Vec<Arc<BackendRt>>,
    pub host: Arc<VclHost>,
    pub vmods: Arc<dyn Vmods + Send + Sync>,
    /// Source files (name, text) for `vcl.show`.
    pub sources: Vec<(String, String)>,
    /// How much of a request body is read before VCL runs, so that
    /// `std.cache_req_body()` can keep it (see [`crate::reqbody`]).
    pub req_body_prefetch: u64,
    probes: std::sync::Mutex<Vec<JoinHandle<()>>>,
    warm: AtomicBool,
}

impl std::fmt::Debug for LoadedVcl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedVcl")
            .field("name", &self.name)
            .finish()
    }
}

/// The largest limit `std.cache_req_body()` is called with: its constant
/// argument, [`crate::reqbody::DYNAMIC_PREFETCH`] for a computed one, 0
/// when the VCL never calls it.
fn req_body_prefetch(ir: &lacquer_vcl::ir::Program) -> u64 {
    ir.first_args_of("std", "cache_req_body")
        .into_iter()
        .map(|a| match a {
            Some(lacquer_vcl::ir::Value::Bytes(b)) => b.max(0.0) as u64,
            _ => crate::reqbody::DYNAMIC_PREFETCH,
        })
        .max()
        .unwrap_or(0)
}

/// A method as `VCL_call` names it.
fn call_name(m: BuiltinSub) -> &'static str {
    match m {
        BuiltinSub::Recv => "RECV",
        BuiltinSub::Pipe => "PIPE",
        BuiltinSub::Pass => "PASS",
        BuiltinSub::Hash => "HASH",
        BuiltinSub::Purge => "PURGE",
        BuiltinSub::Miss => "MISS",
        BuiltinSub::Hit => "HIT",
        BuiltinSub::Deliver => "DELIVER",
        BuiltinSub::Synth => "SYNTH",
        BuiltinSub::BackendFetch => "BACKEND_FETCH",
        BuiltinSub::BackendResponse => "BACKEND_RESPONSE",
        BuiltinSub::BackendError => "BACKEND_ERROR",
        BuiltinSub::Init => "INIT",
        BuiltinSub::Fini => "FINI",
    }
}

/// Why a VCL could not be loaded.
#[derive(Debug)]
pub struct LoadError {
    /// The rendered diagnostics or reason, as `vcl.load` prints them.
    pub message: String,
}

impl LoadedVcl {
    /// Runs a built-in method for a task.
    pub fn run<C: Context + TaskSub>(
        &self,
        m: BuiltinSub,
        ctx: &mut C,
        scratch: &mut Scratch,
    ) -> Action {
        ctx.set_sub(m);
        if let Some(vsl) = ctx.task_vsl() {
            vsl.log_str(Tag::VCL_call, call_name(m));
        }
        let action = self.code.run(m, ctx, &*self.vmods, scratch);
        if matches!(action, Action::Fail) {
            ctx.count_vcl_fail();
        }
        if let Some(vsl) = ctx.task_vsl() {
            vsl.log_str(Tag::VCL_return, action.kind().name());
        }
        action
    }

    /// The default backend as a VCL value.
    pub fn default_backend(&self) -> Option<Backend> {
        let i = self.ir.default_backend?;
        Some(Backend {
            id: i as u32,
            name: Arc::from(self.ir.backends[i].name.as_str()),
        })
    }

    /// The concrete backend behind a BACKEND value: directors are asked,
    /// layer after layer, which backend they pick for this task.
    pub fn resolve_backend(&self, b: &Backend, ctx: &mut dyn Context) -> Option<Arc<BackendRt>> {
        let mut b = b.clone();
        // Directors may be layered; a cycle of directors ends here.
        for _ in 0..16 {
            if let Some(rt) = self.backends.get(b.id as usize) {
                return Some(rt.clone());
            }
            let d = self.host.director(b.id)?;
            b = d.resolve(ctx)?;
        }
        None
    }

    /// `backend.resolve()` for VCL.
    pub fn resolve_value(&self, v: &Value, ctx: &mut dyn Context) -> Result<Value, String> {
        match v {
            Value::Backend(b) => Ok(match self.resolve_backend(b, ctx) {
                Some(rt) => Value::Backend(Backend {
                    id: self
                        .backends
                        .iter()
                        .position(|x| Arc::ptr_eq(x, &rt))
                        .unwrap_or(0) as u32,
                    name: Arc::from(rt.vcl_name.as_str()),
                }),
                None => Value::Null,
            }),
            Value::Null => Ok(Value::Null),
            other => Err(format!("cannot resolve a {}", other.type_name())),
        }
    }

    /// Starts the probes of this VCL's backends.
    pub fn warm_up(self: &Arc<Self>, vsl: Arc<lacquer_vsl::Vsl>) {
        if self.warm.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut handles = self.probes.lock().unwrap_or_else(|e| e.into_inner());
        for b in &self.backends {
            let Some(spec) = b.probe.clone() else {
                continue;
            };
            let b = b.clone();
            let vsl = vsl.clone();
            handles.push(tokio::spawn(async move {
                loop {
                    let r = probe::poll(b.pool.address(), &spec).await;
                    let tr = b.health.record(&spec, &r);
                    vsl.log_immediate(
                        lacquer_vsl::Tag::Backend_health,
                        lacquer_vsl::Vxid::plain(0),
                        format_args!(
                            "{} {} {} {} {} {} {:.6} {:.6} {}",
                            b.name,
                            tr.verdict,
                            probe::flags(&r),
                            tr.good,
                            spec.threshold,
                            spec.window,
                            r.elapsed,
                            tr.avg,
                            r.status_line
                        ),
                    );
                    tokio::time::sleep(spec.interval).await;
                }
            }));
        }
    }

    /// Stops the probes (the VCL went cold or is discarded).
    pub fn cool_down(&self) {
        self.warm.store(false, Ordering::Release);
        for h in self
            .probes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            h.abort();
        }
    }

    pub fn is_warm(&self) -> bool {
        self.warm.load(Ordering::Acquire)
    }
}

impl Drop for LoadedVcl {
    fn drop(&mut self) {
        self.cool_down();
    }
}

/// What the vmods of one VCL see of the server: its backends and the
/// directors they create.
pub struct VclHost {
    backends: Vec<Arc<BackendRt>>,
    /// Directors by registration order; their ids follow the backends'.
    directors: std::sync::RwLock<Vec<(String, Arc<dyn lacquer_vmods::Director>)>>,
}

impl std::fmt::Debug for VclHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VclHost")
            .field("backends", &self.backends.len())
            .finish()
    }
}

impl VclHost {
    fn director(&self, id: u32) -> Option<Arc<dyn lacquer_vmods::Director>> {
        let i = (id as usize).checked_sub(self.backends.len())?;
        self.directors
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(i)
            .map(|(_, d)| d.clone())
    }
}

/// Stands in for a director whose VCL object is gone.
struct Removed;

impl lacquer_vmods::Director for Removed {
    fn resolve(&self, _ctx: &mut dyn Context) -> Option<Backend> {
        None
    }
    fn healthy(&self) -> bool {
        false
    }
}

impl lacquer_vmods::Host for VclHost {
    fn backend_healthy(&self, backend: &Backend) -> bool {
        match self.backends.get(backend.id as usize) {
            Some(b) => b.healthy(),
            None => self.director(backend.id).is_some_and(|d| d.healthy()),
        }
    }

    fn add_director(&self, name: &str, director: Arc<dyn lacquer_vmods::Director>) -> Backend {
        let mut ds = self.directors.write().unwrap_or_else(|e| e.into_inner());
        ds.push((name.to_string(), director));
        Backend {
            id: (self.backends.len() + ds.len() - 1) as u32,
            name: Arc::from(name),
        }
    }

    fn lookup_backend(&self, name: &str) -> Option<Backend> {
        if let Some(i) = self.backends.iter().position(|b| b.vcl_name == name) {
            return Some(Backend {
                id: i as u32,
                name: Arc::from(name),
            });
        }
        let ds = self.directors.read().unwrap_or_else(|e| e.into_inner());
        ds.iter().position(|(n, _)| n == name).map(|i| Backend {
            id: (self.backends.len() + i) as u32,
            name: Arc::from(name),
        })
    }

    fn backend_changed(&self, backend: &Backend) -> f64 {
        self.backends
            .get(backend.id as usize)
            .map_or(0.0, |b| b.health.last_change())
    }

    fn remove_director(&self, backend: &Backend) {
        if let Some(i) = (backend.id as usize).checked_sub(self.backends.len()) {
            let mut ds = self.directors.write().unwrap_or_else(|e| e.into_inner());
            // Keep later ids stable: the slot stays, unusable.
            if let Some(slot) = ds.get_mut(i) {
                slot.1 = Arc::new(Removed);
            }
        }
    }

    fn xkey_purge(&self, _keys: &[&[u8]], _soft: bool) -> i64 {
        0
    }
}

/// Options for compiling a VCL in this daemon.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub err_unref: bool,
    pub storages: Vec<String>,
    pub labels: Vec<String>,
    pub vcl_path: Vec<String>,
    pub unsafe_path: bool,
    pub prefer_ipv6: bool,
    /// The test-only vmods (`debug`, `vtc`) may be imported: only when the
    /// daemon runs with `-p debug=+vtc_mode`, as varnishtest starts it.
    pub test_vmods: bool,
}

/// Compiles VCL source (`name` is the file name used in messages).
pub fn compile(
    vcl_name: &str,
    file_name: &str,
    text: &str,
    opts: &LoadOptions,
) -> Result<LoadedVcl, LoadError> {
    let registry = if opts.test_vmods {
        lacquer_vmods::registry_with_test_vmods()
    } else {
        lacquer_vmods::registry()
    };
    let copts = lacquer_vcl::compile::CompileOptions {
        err_unref: opts.err_unref,
        storages: opts.storages.clone(),
        labels: opts.labels.clone(),
    };
    let mut sm = SourceMap::new();
    let main = sm.add(file_name, text, lacquer_vcl::source::FileKind::Main);
    let popts = lacquer_vcl::parser::ParseOptions {
        vcl_path: opts.vcl_path.clone(),
        unsafe_path: opts.unsafe_path,
        ..Default::default()
    };
    let ir = lacquer_vcl::compile::compile_file(&mut sm, main, &popts, &copts, &registry).map_err(
        |d: Diagnostics| LoadError {
            message: d.render(&sm),
        },
    )?;
    let code = exec::code::Program::from_ir(&ir).map_err(|message| LoadError { message })?;
    let backends: Vec<Arc<BackendRt>> = ir
        .backends
        .iter()
        .map(|d| Arc::new(BackendRt::new(vcl_name, d, &ir.probes, opts.prefer_ipv6)))
        .collect();
    let host = Arc::new(VclHost {
        backends: backends.clone(),
        directors: Default::default(),
    });
    let vmods = lacquer_vmods::Runtime::new(&ir.vmods, &ir.instances, ir.version, host.clone())
        .map_err(|message| LoadError { message })?;
    let sources = sm
        .files()
        .filter(|(_, f)| f.kind() != lacquer_vcl::source::FileKind::Builtin)
        .map(|(_, f)| (f.name().to_string(), f.text().to_string()))
        .collect();
    let prefetch = req_body_prefetch(&ir);
    Ok(LoadedVcl {
        name: vcl_name.to_string(),
        ir,
        code,
        backends,
        host,
        vmods: Arc::new(vmods),
        sources,
        req_body_prefetch: prefetch,
        probes: Default::default(),
        warm: AtomicBool::new(false),
    })
}

/// Reads and compiles a VCL file.
pub fn compile_path(
    vcl_name: &str,
    path: &Path,
    opts: &LoadOptions,
) -> Result<LoadedVcl, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError {
        message: format!("Cannot read file '{}': {e}", path.display()),
    })?;
    compile(vcl_name, &path.display().to_string(), &text, opts)
}

/// One entry of the registry.
#[derive(Debug)]
pub struct Entry {
    pub vcl: Arc<LoadedVcl>,
    pub temp: Temp,
}

/// Loaded VCLs and labels (management side).
#[derive(Debug, Default)]
pub struct VclRegistry {
    pub vcls: BTreeMap<String, Entry>,
    /// label -> VCL name
    pub labels: BTreeMap<String, String>,
    pub active: Option<String>,
    /// The label `vcl.use` named, when the active VCL was chosen by one.
    pub active_label: Option<String>,
    /// Load order, for `vcl.list`.
    pub order: Vec<String>,
}

impl VclRegistry {
    pub fn insert(&mut self, vcl: Arc<LoadedVcl>, temp: Temp) {
        let name = vcl.name.clone();
        self.order.retain(|n| n != &name);
        self.order.push(name.clone());
        self.vcls.insert(name, Entry { vcl, temp });
    }

    /// The VCL a name or label refers to.
    pub fn resolve(&self, name: &str) -> Option<Arc<LoadedVcl>> {
        let target = self.labels.get(name).map(String::as_str).unwrap_or(name);
        self.vcls.get(target).map(|e| e.vcl.clone())
    }
}
