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
use lacquer_vcl::exec::{self, Action, Backend, Context, LogKind, Scratch, Value};
use lacquer_vcl::ir::{BackendDef, ProbeDef, Program};
use lacquer_vcl::source::SourceMap;
use lacquer_vcl::subs::BuiltinSub;
use tokio::task::JoinHandle;

use crate::backend::pool::{Address, Pool};
use crate::backend::probe::{self, Health, ProbeSpec};
use crate::runtime::state::Shared;
use crate::runtime::task::TaskSub;
use lacquer_vmods::{DynamicBackend, Endpoint, VclEvent};
use lacquer_vsl::Tag;

/// A backend of a loaded VCL, ready for fetches.
pub struct BackendRt {
    /// The identity VCL values carry (`Backend::id`): the declaration
    /// index for a VCL backend, a fresh number for one made at runtime.
    pub id: u32,
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

/// The probe spec of a VCL probe for a backend whose Host is `host`.
fn probe_spec(p: &ProbeDef, host: Option<&str>) -> ProbeSpec {
    ProbeSpec::new(
        p.url.as_deref(),
        p.request.as_deref(),
        host.unwrap_or("localhost"),
        p.expected_response.map(|v| v.min(999) as u16),
        p.timeout,
        p.interval,
        p.window.map(|v| v.min(64) as u32),
        p.threshold.map(|v| v.min(64) as u32),
        p.initial.map(|v| v.min(64) as u32),
    )
}

/// A pool over TLS for a backend with `.ssl = 1`; its name for SNI and
/// verification is `.host_header` if set, else `.host`.
fn tls_pool(pool: Pool, def: &BackendDef) -> Pool {
    let Some(t) = &def.tls else {
        return pool;
    };
    let spec = lacquer_tls::client::BackendTls {
        sni: t.sni,
        verify_peer: t.verify_peer,
        verify_host: t.verify_host,
        ca_file: t.ca_file.as_ref().map(Into::into),
        ca_dir: None,
        client_cert: t.certificate.as_ref().map(Into::into),
    };
    let name = def.host_header.as_deref().unwrap_or(&def.host);
    pool.with_tls(crate::backend::pool::PoolTls::new(&spec, name))
}

impl BackendRt {
    fn new(vcl: &str, id: u32, def: &BackendDef, probes: &[ProbeDef], prefer_ipv6: bool) -> Self {
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
            let mut spec = probe_spec(p, host.as_deref());
            spec.proxy_header = proxy_header;
            spec
        });
        let health = match &probe {
            Some(spec) => Health::probed(spec),
            None => Health::unprobed(),
        };
        BackendRt {
            id,
            vcl_name: def.name.clone(),
            name: format!("{vcl}.{}", def.name),
            none: def.none,
            pool: tls_pool(
                Pool::new(
                    addr,
                    def.preamble.clone(),
                    def.max_connections.map(|m| m as usize),
                ),
                def,
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
    pub fn proxy_preface(&self, sess: &crate::runtime::task::SessInfo) -> Option<Vec<u8>> {
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

    /// A backend a vmod creates at runtime.
    fn dynamic(vcl: &str, id: u32, spec: DynamicBackend, probe: Option<&ProbeDef>) -> Self {
        let addr = match spec.endpoint {
            Endpoint::Tcp(a) => Address::Tcp(a),
            Endpoint::Unix(p) => Address::Unix(p),
        };
        let probe = probe.map(|p| probe_spec(p, spec.host_header.as_deref()));
        let health = match &probe {
            Some(spec) => Health::probed(spec),
            None => Health::unprobed(),
        };
        let mut pool = Pool::new(addr, None, None);
        if let Some(t) = &spec.tls {
            // The name for SNI and verification: the Host the vmod gave
            // (its address as written), as `.host` for a declared backend.
            let tls = lacquer_tls::client::BackendTls {
                sni: t.sni,
                verify_peer: t.verify_peer,
                verify_host: t.verify_host,
                ca_file: t.ca_file.clone(),
                ca_dir: None,
                client_cert: t.certificate.clone(),
            };
            let name = spec.host_header.as_deref().unwrap_or("localhost");
            pool = pool.with_tls(crate::backend::pool::PoolTls::new(&tls, name));
        }
        BackendRt {
            id,
            name: format!("{vcl}.{}", spec.name),
            vcl_name: spec.name,
            none: false,
            pool,
            health,
            probe,
            host_header: spec.host_header,
            connect_timeout: None,
            first_byte_timeout: None,
            between_bytes_timeout: None,
            preamble: None,
            proxy_header: None,
        }
    }

    /// Whether fetches may use this backend now.
    pub fn healthy(&self) -> bool {
        !self.none && self.health.healthy()
    }

    /// A fetch or pipe refused because the backend is sick, counted as
    /// varnishd's `vbe_dir_getfd` counts it (`MAIN.backend_unhealthy` and
    /// the backend's `unhealthy`); the error text to fail with.
    pub fn refuse_unhealthy(&self, counters: &crate::runtime::counters::Counters) -> String {
        counters.inc(crate::runtime::counters::Main::backend_unhealthy);
        self.pool.stats.unhealthy.fetch_add(1, Ordering::Relaxed);
        format!("backend {}: unhealthy", self.vcl_name)
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
    /// The name `vcl.list` and the cache process's `vcl.load` use.
    pub fn name(self) -> &'static str {
        match self {
            Temp::Auto => "auto",
            Temp::Warm => "warm",
            Temp::Cold => "cold",
        }
    }

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
    pub vmods: Arc<lacquer_vmods::Runtime>,
    /// Source files (name, text) for `vcl.show`.
    pub sources: Vec<(String, String)>,
    /// How much of a request body is read before VCL runs, so that
    /// `std.cache_req_body()` can keep it (see [`crate::client::reqbody`]).
    pub req_body_prefetch: u64,
    /// The compiler's warnings, rendered as `vcl.load` reports them.
    pub warnings: String,
}

impl std::fmt::Debug for LoadedVcl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedVcl")
            .field("name", &self.name)
            .finish()
    }
}

/// How much is read ahead when the VCL calls `std.cache_req_body()` with
/// a limit computed at run time.
pub const DYNAMIC_PREFETCH: u64 = 64 << 20;

/// The largest limit `std.cache_req_body()` is called with: its constant
/// argument, [`DYNAMIC_PREFETCH`] for a computed one, 0
/// when the VCL never calls it.
fn req_body_prefetch(ir: &lacquer_vcl::ir::Program) -> u64 {
    ir.first_args_of("std", "cache_req_body")
        .into_iter()
        .map(|a| match a {
            Some(lacquer_vcl::ir::Value::Bytes(b)) => b.max(0.0) as u64,
            _ => DYNAMIC_PREFETCH,
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
    /// Runs a built-in method for a task that cannot wait (`vcl_init`,
    /// `vcl_fini`): a vmod asking to wait for I/O fails the call.
    pub fn run<C: Context + TaskSub>(
        &self,
        m: BuiltinSub,
        ctx: &mut C,
        scratch: &mut Scratch,
    ) -> Action {
        self.call_logged(m, ctx, |ctx| self.code.run(m, ctx, &*self.vmods, scratch))
    }

    /// Runs a built-in method for a request or fetch task; a vmod may
    /// suspend it to wait for I/O, which this awaits on the task (no
    /// thread waits) before it resumes the method.
    pub async fn run_async<C: Context + TaskSub>(
        &self,
        m: BuiltinSub,
        ctx: &mut C,
        scratch: &mut Scratch,
    ) -> Action {
        ctx.set_sub(m);
        if let Some(vsl) = ctx.task_vsl() {
            vsl.log_str(Tag::VCL_call, call_name(m));
        }
        let mut run = self.code.start(m, ctx, &*self.vmods, scratch);
        let action = loop {
            match run {
                exec::Run::Done(a) => break a,
                exec::Run::Suspended(s) => {
                    s.wait.await;
                    run = self.code.resume(s.point, ctx, &*self.vmods, scratch);
                }
            }
        };
        self.returned(ctx, action)
    }

    /// [`Self::run_async`] for a method run on a thread of its own inside
    /// the runtime (vcl_recv beside a connection serving its body,
    /// `reqbody::recv_with_body`): the thread blocks on each wait.
    pub fn run_blocking<C: Context + TaskSub>(
        &self,
        m: BuiltinSub,
        ctx: &mut C,
        scratch: &mut Scratch,
        rt: &tokio::runtime::Handle,
    ) -> Action {
        self.call_logged(m, ctx, |ctx| {
            let mut run = self.code.start(m, ctx, &*self.vmods, scratch);
            loop {
                match run {
                    exec::Run::Done(a) => break a,
                    exec::Run::Suspended(s) => {
                        rt.block_on(s.wait);
                        run = self.code.resume(s.point, ctx, &*self.vmods, scratch);
                    }
                }
            }
        })
    }

    /// Logs `VCL_call`, runs `body`, counts a failure, logs `VCL_return`.
    fn call_logged<C: Context + TaskSub>(
        &self,
        m: BuiltinSub,
        ctx: &mut C,
        body: impl FnOnce(&mut C) -> Action,
    ) -> Action {
        ctx.set_sub(m);
        if let Some(vsl) = ctx.task_vsl() {
            vsl.log_str(Tag::VCL_call, call_name(m));
        }
        let action = body(ctx);
        self.returned(ctx, action)
    }

    /// Counts a failed method and logs what it returned.
    fn returned<C: Context + TaskSub>(&self, ctx: &mut C, action: Action) -> Action {
        if matches!(action, Action::Fail) {
            ctx.count_vcl_fail();
        }
        ctx.on_return(&action);
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
            match self.host.lookup(b.id)? {
                Target::Backend(rt) => return Some(rt),
                Target::Director(d) => b = d.resolve(ctx)?,
            }
        }
        None
    }

    /// `backend.resolve()` for VCL.
    pub fn resolve_value(&self, v: &Value, ctx: &mut dyn Context) -> Result<Value, String> {
        match v {
            Value::Backend(b) => Ok(match self.resolve_backend(b, ctx) {
                Some(rt) => Value::Backend(Backend {
                    id: rt.id,
                    name: Arc::from(rt.vcl_name.as_str()),
                }),
                None => Value::Null,
            }),
            Value::Null => Ok(Value::Null),
            other => Err(format!("cannot resolve a {}", other.type_name())),
        }
    }

    /// Warms the VCL up: its vmods hear `Warm` (and may refuse, leaving it
    /// cold), then its backends' probes start.
    pub fn warm_up(self: &Arc<Self>, sh: &Shared) -> Result<(), String> {
        if self.is_warm() {
            return Ok(());
        }
        // Still cooling: whoever holds it must let go first.
        let holders = self.host.holders();
        if !holders.is_empty() {
            let mut msg = format!("VCL {} is waiting for:", self.name);
            for h in holders {
                msg.push_str(&format!("\n\t- {h}"));
            }
            return Err(msg);
        }
        if self.host.warm.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if let Err(e) = self.event(VclEvent::Warm, sh) {
            self.host.warm.store(false, Ordering::Release);
            return Err(e);
        }
        self.host.start_probes(sh.vsl.clone());
        Ok(())
    }

    /// Cools the VCL down (it went cold or is discarded): probes stop and
    /// its vmods hear `Cold`.
    pub fn cool_down(&self, sh: &Shared) {
        if !self.host.warm.swap(false, Ordering::AcqRel) {
            return;
        }
        self.host.stop_probes();
        // Nothing to undo if a vmod minds going cold.
        self.host.cold_event.store(true, Ordering::Release);
        let _ = self.event(VclEvent::Cold, sh);
        self.host.cold_event.store(false, Ordering::Release);
    }

    /// Tells this VCL's vmods about a lifecycle event.
    pub fn event(&self, ev: VclEvent, sh: &Shared) -> Result<(), String> {
        self.vmods.event(
            ev,
            &EventCx {
                sh,
                vcl: &self.name,
            },
        )
    }

    /// Every backend of this VCL now: the declared ones, then those vmods
    /// created at runtime and have not retired.
    pub fn all_backends(&self) -> Vec<Arc<BackendRt>> {
        let mut v = self.backends.clone();
        v.extend(self.host.dynamic_backends());
        v
    }

    /// What `backend.list` shows of this VCL, in varnishd's order: the
    /// declared backends, then what vmods created, oldest first.
    pub fn listed(&self) -> Vec<Listed> {
        let mut v: Vec<Listed> = self.backends.iter().cloned().map(Listed::Backend).collect();
        v.extend(self.host.extras().by_id.values().map(|e| match e {
            Extra::Dynamic(b) => Listed::Backend(b.clone()),
            Extra::Director(name, d) => Listed::Director {
                name: format!("{}.{name}", self.name),
                vcl_name: name.clone(),
                director: d.clone(),
            },
        }));
        v
    }

    pub fn is_warm(&self) -> bool {
        self.host.warm.load(Ordering::Acquire)
    }

    /// The temperature `vcl.list` shows: warm, cold, or cooling while a
    /// vmod still holds a VCL that was asked to cool.
    pub fn temperature(&self) -> &'static str {
        if self.is_warm() {
            "warm"
        } else if self.host.holders().is_empty() {
            "cold"
        } else {
            "cooling"
        }
    }

    pub fn is_initialized(&self) -> bool {
        self.host.initialized.load(Ordering::Acquire)
    }

    /// Records that `vcl_init` ran (successfully).
    pub fn set_initialized(&self) {
        self.host.initialized.store(true, Ordering::Release);
    }

    /// The name of the main source file (`<vcl.inline>` for inline VCL).
    pub fn source_name(&self) -> &str {
        self.sources
            .first()
            .map_or("<vcl.inline>", |(n, _)| n.as_str())
    }
}

/// What vmod event handlers see of the daemon.
struct EventCx<'a> {
    sh: &'a Shared,
    vcl: &'a str,
}

impl lacquer_vmods::EventCtx for EventCx<'_> {
    fn vcl_name(&self) -> &str {
        self.vcl
    }
    fn param(&self, name: &str) -> Option<String> {
        crate::runtime::params::lookup(name).map(|p| self.sh.params().get(p.name).to_string())
    }
    fn log_debug(&self, msg: &str) {
        self.log(LogKind::Debug, msg.as_bytes());
    }
    fn log(&self, kind: LogKind, msg: &[u8]) {
        self.sh.vsl.log_immediate(
            crate::runtime::task::log_kind_tag(kind),
            lacquer_vsl::Vxid::plain(0),
            format_args!("{}", String::from_utf8_lossy(msg)),
        );
    }
}

/// What a backend id stands for beyond the declared backends.
enum Extra {
    Director(String, Arc<dyn lacquer_vmods::Director>),
    Dynamic(Arc<BackendRt>),
}

/// An entry of `backend.list`.
pub enum Listed {
    Backend(Arc<BackendRt>),
    Director {
        /// `<vcl>.<name>`.
        name: String,
        /// The name in its VCL.
        vcl_name: String,
        director: Arc<dyn lacquer_vmods::Director>,
    },
}

impl Listed {
    /// `<vcl>.<name>`, as `backend.list` shows it.
    pub fn name(&self) -> &str {
        match self {
            Listed::Backend(b) => &b.name,
            Listed::Director { name, .. } => name,
        }
    }

    /// The name in its VCL.
    pub fn vcl_name(&self) -> &str {
        match self {
            Listed::Backend(b) => &b.vcl_name,
            Listed::Director { vcl_name, .. } => vcl_name,
        }
    }
}

/// What a backend value resolves to, one layer down.
enum Target {
    Backend(Arc<BackendRt>),
    Director(Arc<dyn lacquer_vmods::Director>),
}

/// Directors and runtime backends, by id. Ids are never reused, so a
/// handle to something gone resolves to nothing rather than to a newcomer.
struct Extras {
    next: u32,
    by_id: BTreeMap<u32, Extra>,
}

/// Probe tasks of a warm VCL, by backend id.
#[derive(Default)]
struct Probing {
    /// Set while warm: backends created meanwhile start probing at once.
    vsl: Option<Arc<lacquer_vsl::Vsl>>,
    tasks: BTreeMap<u32, JoinHandle<()>>,
}

/// What the vmods of one VCL see of the server: its backends, the
/// directors and backends they create, and the probes polling them.
pub struct VclHost {
    vcl: String,
    /// The daemon, attached when the VCL is initialised (weak: the daemon
    /// owns its VCLs).
    daemon: std::sync::OnceLock<std::sync::Weak<Shared>>,
    backends: Vec<Arc<BackendRt>>,
    probe_defs: Vec<ProbeDef>,
    extras: std::sync::RwLock<Extras>,
    probing: std::sync::Mutex<Probing>,
    /// Holds vmods keep on the VCL (`Host::hold`), by id, with who holds.
    holds: std::sync::Mutex<BTreeMap<u64, String>>,
    next_hold: std::sync::atomic::AtomicU64,
    /// Whether the VCL is warm (its temperature, with `holds`: cooling
    /// while held and not warm, cold when neither).
    warm: AtomicBool,
    /// Whether `vcl_init` has run: a VCL loaded while the cache is stopped
    /// is initialised at `start`, as varnishd's child loads it then.
    initialized: AtomicBool,
    /// While the vmods hear the cold event.
    cold_event: AtomicBool,
}

impl std::fmt::Debug for VclHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VclHost")
            .field("backends", &self.backends.len())
            .finish()
    }
}

/// Polls one backend forever, logging each verdict as `Backend_health`.
fn spawn_probe(b: Arc<BackendRt>, spec: ProbeSpec, vsl: Arc<lacquer_vsl::Vsl>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (verdict, flags, good) = b.health.initial_record(&spec);
        vsl.log_immediate(
            lacquer_vsl::Tag::Backend_health,
            lacquer_vsl::Vxid::plain(0),
            format_args!(
                "{} {verdict} {flags} {good} {} {} 0.000000 0.000000 \"\"",
                b.vcl_name, spec.threshold, spec.window
            ),
        );
        loop {
            let r = probe::poll(b.pool.address(), b.pool.tls(), &spec).await;
            let tr = b.health.record(&spec, &r);
            vsl.log_immediate(
                lacquer_vsl::Tag::Backend_health,
                lacquer_vsl::Vxid::plain(0),
                format_args!(
                    "{} {} {} {} {} {} {:.6} {:.6} \"{}\"",
                    b.vcl_name,
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
    })
}

impl VclHost {
    fn new(vcl: &str, backends: Vec<Arc<BackendRt>>, probe_defs: Vec<ProbeDef>) -> Self {
        VclHost {
            vcl: vcl.to_string(),
            daemon: std::sync::OnceLock::new(),
            extras: std::sync::RwLock::new(Extras {
                next: backends.len() as u32,
                by_id: BTreeMap::new(),
            }),
            backends,
            probe_defs,
            probing: Default::default(),
            holds: Default::default(),
            next_hold: Default::default(),
            warm: AtomicBool::new(false),
            initialized: AtomicBool::new(false),
            cold_event: AtomicBool::new(false),
        }
    }

    fn extras(&self) -> std::sync::RwLockReadGuard<'_, Extras> {
        self.extras.read().unwrap_or_else(|e| e.into_inner())
    }

    fn extras_mut(&self) -> std::sync::RwLockWriteGuard<'_, Extras> {
        self.extras.write().unwrap_or_else(|e| e.into_inner())
    }

    fn probing(&self) -> std::sync::MutexGuard<'_, Probing> {
        self.probing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What a backend id stands for, if it is still there.
    fn lookup(&self, id: u32) -> Option<Target> {
        if let Some(b) = self.backends.get(id as usize) {
            return Some(Target::Backend(b.clone()));
        }
        Some(match self.extras().by_id.get(&id)? {
            Extra::Director(_, d) => Target::Director(d.clone()),
            Extra::Dynamic(b) => Target::Backend(b.clone()),
        })
    }

    /// The backends vmods created and have not retired, oldest first.
    fn dynamic_backends(&self) -> Vec<Arc<BackendRt>> {
        self.extras()
            .by_id
            .values()
            .filter_map(|e| match e {
                Extra::Dynamic(b) => Some(b.clone()),
                Extra::Director(..) => None,
            })
            .collect()
    }

    /// Who holds the VCL back from going cold, if anyone.
    pub fn holders(&self) -> Vec<String> {
        self.holds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Gives the vmods of this VCL the daemon (`Host::log`, `Host::panic`).
    pub fn attach(&self, sh: &Arc<Shared>) {
        let _ = self.daemon.set(Arc::downgrade(sh));
    }

    fn start_probes(&self, vsl: Arc<lacquer_vsl::Vsl>) {
        let all: Vec<Arc<BackendRt>> = self
            .backends
            .iter()
            .cloned()
            .chain(self.dynamic_backends())
            .collect();
        let mut p = self.probing();
        for b in all {
            if let Some(spec) = b.probe.clone() {
                p.tasks
                    .entry(b.id)
                    .or_insert_with(|| spawn_probe(b.clone(), spec, vsl.clone()));
            }
        }
        p.vsl = Some(vsl);
    }

    fn stop_probes(&self) {
        let mut p = self.probing();
        p.vsl = None;
        for (_, h) in std::mem::take(&mut p.tasks) {
            h.abort();
        }
    }
}

impl Drop for VclHost {
    fn drop(&mut self) {
        self.stop_probes();
    }
}

impl lacquer_vmods::Host for VclHost {
    fn param(&self, name: &str) -> Option<String> {
        let sh = self.daemon.get().and_then(std::sync::Weak::upgrade)?;
        crate::runtime::params::lookup(name).map(|p| sh.params().get(p.name).to_string())
    }

    fn backend_healthy(&self, backend: &Backend) -> Result<bool, String> {
        match self.lookup(backend.id) {
            Some(Target::Backend(b)) => Ok(b.healthy()),
            Some(Target::Director(d)) => d.healthy(),
            None => Ok(false),
        }
    }

    fn add_director(&self, name: &str, director: Arc<dyn lacquer_vmods::Director>) -> Backend {
        let mut ex = self.extras_mut();
        let id = ex.next;
        ex.next += 1;
        ex.by_id
            .insert(id, Extra::Director(name.to_string(), director));
        Backend {
            id,
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
        self.extras().by_id.iter().find_map(|(id, e)| match e {
            Extra::Director(n, _) if n == name => Some(Backend {
                id: *id,
                name: Arc::from(name),
            }),
            _ => None,
        })
    }

    fn backend_changed(&self, backend: &Backend) -> f64 {
        match self.lookup(backend.id) {
            Some(Target::Backend(b)) => b.health.last_change(),
            _ => 0.0,
        }
    }

    fn remove_director(&self, backend: &Backend) {
        let mut ex = self.extras_mut();
        if matches!(ex.by_id.get(&backend.id), Some(Extra::Director(..))) {
            ex.by_id.remove(&backend.id);
        }
    }

    fn new_backend(&self, spec: DynamicBackend) -> Result<Backend, String> {
        // As varnishd: backends come to a VCL being initialised or warm;
        // one cooling gets none, and asking for one from the cold event of
        // a VCL gone cold is a bug in the vmod that panics the cache.
        // (Elsewhere, a task still running on a VCL that went cold under
        // it, or vcl_fini, gets none: varnishd keeps a busy VCL warm.)
        let warm = self.warm.load(Ordering::Acquire);
        let initializing = !self.initialized.load(Ordering::Acquire);
        if !warm && !initializing {
            let cooling = !self.holders().is_empty();
            let why = "Dynamic Backends can only be added to warm VCLs";
            if !cooling && self.cold_event.load(Ordering::Acquire) {
                if let Some(sh) = self.daemon.get().and_then(std::sync::Weak::upgrade) {
                    crate::runtime::panic::wrong_turn(&sh, "VclHost::new_backend()", why);
                }
                return Err(format!("backend {}: {why}", spec.name));
            }
            let temp = if cooling { "cooling" } else { "cold" };
            return Err(format!(
                "backend {}: VCL {} is {temp}: {why}",
                spec.name, self.vcl
            ));
        }
        let probe = match &spec.probe {
            None => None,
            Some(name) => Some(
                self.probe_defs
                    .iter()
                    .find(|p| &p.name == name)
                    .ok_or_else(|| format!("backend {}: no probe named {name}", spec.name))?,
            ),
        };
        let name: Arc<str> = Arc::from(spec.name.as_str());
        let b = {
            let mut ex = self.extras_mut();
            let id = ex.next;
            ex.next = ex
                .next
                .checked_add(1)
                .ok_or_else(|| format!("backend {}: out of backend ids", spec.name))?;
            let b = Arc::new(BackendRt::dynamic(&self.vcl, id, spec, probe));
            ex.by_id.insert(id, Extra::Dynamic(b.clone()));
            b
        };
        // A warm VCL probes the newcomer at once; a cold one when it warms.
        let mut p = self.probing();
        if let (Some(vsl), Some(spec)) = (p.vsl.clone(), b.probe.clone()) {
            p.tasks.insert(b.id, spawn_probe(b.clone(), spec, vsl));
        }
        Ok(Backend { id: b.id, name })
    }

    fn delete_backend(&self, backend: &Backend) {
        let removed = {
            let mut ex = self.extras_mut();
            match ex.by_id.get(&backend.id) {
                Some(Extra::Dynamic(_)) => ex.by_id.remove(&backend.id),
                _ => None,
            }
        };
        if removed.is_some()
            && let Some(h) = self.probing().tasks.remove(&backend.id)
        {
            h.abort();
        }
    }

    fn hold(&self, who: &str) -> u64 {
        let id = self.next_hold.fetch_add(1, Ordering::Relaxed);
        self.holds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, who.to_string());
        id
    }

    fn release(&self, id: u64) {
        self.holds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    fn panic(&self, why: &str) {
        if let Some(sh) = self.daemon.get().and_then(std::sync::Weak::upgrade) {
            crate::runtime::panic::panic(&sh, why);
        }
    }

    fn log(&self, kind: lacquer_vcl::exec::LogKind, msg: &str) {
        if let Some(sh) = self.daemon.get().and_then(std::sync::Weak::upgrade) {
            sh.vsl.log_immediate(
                crate::runtime::task::log_kind_tag(kind),
                lacquer_vsl::Vxid::plain(0),
                format_args!("{msg}"),
            );
        }
    }

    fn xkey_purge(&self, keys: &[&[u8]], soft: bool) -> i64 {
        let Some(sh) = self.daemon.get().and_then(std::sync::Weak::upgrade) else {
            return 0;
        };
        let n = sh.cache.xkey_purge(keys, lacquer_http::date::now(), soft);
        i64::try_from(n).unwrap_or(i64::MAX)
    }

    fn subscribe_objects(&self, f: lacquer_vmods::ObjectEventFn) -> Result<u64, String> {
        let sh = self
            .daemon
            .get()
            .and_then(std::sync::Weak::upgrade)
            .ok_or_else(|| format!("VCL {}: not loaded in the cache", self.vcl))?;
        Ok(sh.cache.subscribe_objects(Arc::new(move |ev, id| {
            let ev = match ev {
                lacquer_cache::ObjEvent::Insert => lacquer_vmods::ObjectEvent::Insert,
                lacquer_cache::ObjEvent::Expire => lacquer_vmods::ObjectEvent::Expire,
            };
            f(ev, id);
        })))
    }

    fn unsubscribe_objects(&self, id: u64) {
        if let Some(sh) = self.daemon.get().and_then(std::sync::Weak::upgrade) {
            sh.cache.unsubscribe_objects(id);
        }
    }

    fn new_counters(
        &self,
        kind: &str,
        ident: &str,
    ) -> Result<Box<dyn lacquer_vmods::Counters>, String> {
        let schema = lacquer_vsl::vsc::tables::schema_for_kind(kind)
            .ok_or_else(|| format!("no counter table named {kind}"))?;
        let name = match ident {
            "" => kind.to_string(),
            i => format!("{kind}.{i}"),
        };
        let sh = self
            .daemon
            .get()
            .and_then(std::sync::Weak::upgrade)
            .ok_or_else(|| format!("VCL {}: not loaded in the cache", self.vcl))?;
        let sections = sh
            .stats
            .get()
            .ok_or_else(|| format!("counters {name}: the daemon publishes no counters"))?;
        let sec = sections
            .add_section(schema, &name)
            .map_err(|e| format!("counters {name}: {e}"))?;
        Ok(Box::new(VmodCounters { sec, schema }))
    }
}

/// Counters a vmod published: a section of the counters segment.
struct VmodCounters {
    sec: lacquer_vsl::vsc::Section,
    schema: &'static lacquer_vsl::vsc::Schema,
}

impl lacquer_vmods::Counters for VmodCounters {
    fn add(&self, field: usize, n: u64) -> Result<(), String> {
        if field >= self.schema.fields.len() {
            return Err(format!("{} has no counter #{field}", self.schema.kind));
        }
        self.sec.add(field, n);
        Ok(())
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
    /// The test-only vmod (`debug`) may be imported: only when the
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
    let warnings: String = ir.warnings.iter().map(|w| w.render(&sm)).collect();
    let code = exec::code::Program::from_ir(&ir).map_err(|message| LoadError { message })?;
    let backends: Vec<Arc<BackendRt>> = ir
        .backends
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Arc::new(BackendRt::new(
                vcl_name,
                i as u32,
                d,
                &ir.probes,
                opts.prefer_ipv6,
            ))
        })
        .collect();
    let host = Arc::new(VclHost::new(vcl_name, backends.clone(), ir.probes.clone()));
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
        warnings,
    })
}

/// Reads and compiles a VCL file.
pub fn compile_path(
    vcl_name: &str,
    path: &Path,
    opts: &LoadOptions,
) -> Result<LoadedVcl, LoadError> {
    // vcc's words and reasons (`(No such file or directory)`, `(Success)`
    // for a directory), as the include loader gives them.
    use lacquer_vcl::include::SourceLoader as _;
    let cant = |e: std::io::Error| LoadError {
        message: format!(
            "Cannot read file '{}' ({})",
            path.display(),
            lacquer_vcl::include::io_reason(&e)
        ),
    };
    let bytes = lacquer_vcl::include::FsLoader
        .read(&path.display().to_string())
        .map_err(cant)?;
    let text = String::from_utf8(bytes).map_err(|e| LoadError {
        message: format!("Cannot read file '{}' ({e})", path.display()),
    })?;
    compile(vcl_name, &path.display().to_string(), &text, opts)
}

/// One entry of the registry.
#[derive(Debug)]
pub struct Entry {
    pub vcl: Arc<LoadedVcl>,
    pub temp: Temp,
    /// Since when an `auto` VCL has been warm with nothing using it (not
    /// active, no label); it goes cold `vcl_cooldown` seconds later.
    pub idle_since: Option<std::time::Instant>,
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
    /// Load order.
    pub order: Vec<String>,
    /// VCLs and labels in the order they were made: varnishd keeps both
    /// in one list, which `vcl.list` and `vcl.deps` print in this order.
    pub listing: Vec<String>,
    /// Discarded VCLs that requests still use; freed (and their
    /// `vcl_fini` run) once the last of those is gone.
    pub discarded: Vec<Arc<LoadedVcl>>,
}

impl VclRegistry {
    pub fn insert(&mut self, vcl: Arc<LoadedVcl>, temp: Temp) {
        let name = vcl.name.clone();
        self.order.retain(|n| n != &name);
        self.order.push(name.clone());
        self.listing.retain(|n| n != &name);
        self.listing.push(name.clone());
        self.vcls.insert(
            name,
            Entry {
                vcl,
                temp,
                idle_since: None,
            },
        );
    }

    /// The vmods the cache has loaded, in the order they were first
    /// imported, each with how many of its VCLs import it (varnishd's
    /// vmod references: `debug.vmod`, `MAIN.vmods`). A VCL holds its
    /// vmods from its initialisation until it is freed after a discard.
    pub fn vmods(&self) -> Vec<(String, usize)> {
        let loaded = self
            .order
            .iter()
            .filter_map(|n| self.vcls.get(n))
            .map(|e| &e.vcl)
            .chain(&self.discarded)
            .filter(|v| v.is_initialized());
        let mut out: Vec<(String, usize)> = Vec::new();
        for v in loaded {
            let mut seen: Vec<&str> = Vec::new();
            for m in &v.ir.vmods {
                if seen.contains(&m.name.as_str()) {
                    continue;
                }
                seen.push(&m.name);
                match out.iter_mut().find(|(n, _)| *n == m.name) {
                    Some((_, refs)) => *refs += 1,
                    None => out.push((m.name.clone(), 1)),
                }
            }
        }
        out
    }

    /// The labels a VCL's `return (vcl(...))` statements use.
    pub fn labels_used_by(&self, vcl: &str) -> &[String] {
        self.vcls
            .get(vcl)
            .map_or(&[], |e| e.vcl.ir.labels.as_slice())
    }

    /// Whether `from` (a VCL or label) leads to `target` through label
    /// targets and labels used; the path is written to `why`, one link a
    /// line, as varnishd explains a loop.
    pub fn leads_to(&self, from: &str, target: &str, why: &mut String) -> bool {
        if from == target {
            return true;
        }
        if let Some(to) = self.labels.get(from) {
            if self.leads_to(to, target, why) {
                why.push_str(&format!("Label {from} points to vcl {to}\n"));
                return true;
            }
            return false;
        }
        for l in self.labels_used_by(from) {
            if self.leads_to(l, target, why) {
                why.push_str(&format!("Vcl {from} uses Label {l}\n"));
                return true;
            }
        }
        false
    }

    /// The VCL a name or label refers to.
    pub fn resolve(&self, name: &str) -> Option<Arc<LoadedVcl>> {
        let target = self.labels.get(name).map(String::as_str).unwrap_or(name);
        self.vcls.get(target).map(|e| e.vcl.clone())
    }
}
