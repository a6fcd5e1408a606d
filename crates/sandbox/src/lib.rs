//! Per-tenant edge programs in WebAssembly sandboxes (wasmtime).
//!
//! A CDN gives each customer (tenant) their own program. This crate runs
//! those programs so that one tenant can neither see another's data nor
//! take the cache down, at about a microsecond per request:
//!
//! - [`Sandbox`] owns the wasmtime engine: pooling instance allocator
//!   (memories, tables and instances come from pre-reserved slots),
//!   copy-on-write memory images, fuel and epoch interruption, and the
//!   host API ([`host`]) every tenant links against.
//! - [`Sandbox::load`] turns a `.wasm` or `.wat` module into a
//!   [`Program`]: compiled once, its exported `main` run once, and its
//!   memory and globals after `main` baked into a new module
//!   ([`snapshot`]) that is pre-linked (`InstancePre`).
//! - [`Tenant`] holds a tenant's current program; [`Tenant::update`]
//!   swaps it atomically (requests that forked before keep the old one).
//! - [`Instance`] is one request's sandbox: instantiated from the
//!   program's image in a pooled slot, called for each hook, dropped at
//!   the end of the request (its slot is wiped before reuse). A clean
//!   instance is reset to the snapshot by our own code and kept for the
//!   next request of the same program on the same thread (`reuse`),
//!   which skips wasmtime's per-store cost.
//!
//! Limits per tenant ([`Limits`]): fuel or a wall-time budget per call, a
//! cap on linear memory (growth beyond it traps), backends and regexes.
//! A trap, an exhausted budget or a bad pointer ends the call with a
//! [`CallError`]; the host never panics on guest behaviour.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use wasmtime::{
    Config, Engine, ExternType, InstanceAllocationStrategy, InstancePre, Linker, Module,
    ModuleExport, PoolingAllocationConfig, Store, StoreLimitsBuilder, Val, ValRaw,
};

mod cache;
pub mod config;
mod host;
mod request;
mod reuse;
mod snapshot;

pub use config::{Limits, TenantConfig};
pub use request::{Decision, Effects, Forged, Message, RESULTS, Task, Which};

/// How often the epoch advances while a call with a time budget runs:
/// the granularity of `max_time`.
pub const EPOCH_TICK: Duration = Duration::from_millis(1);

/// The thread that advances the engine's epoch, every [`EPOCH_TICK`]
/// while at least one call with a time budget (`max_time`) runs, and
/// parked otherwise. Ticking all the time cost a thread wake-up and two
/// context switches per millisecond: about a tenth of lacquerd's CPU
/// samples at 100 connections on two cores, for tenants on fuel budgets
/// (the default) that never look at the epoch. A parked epoch does not
/// weaken a time budget: a deadline counts ticks from the epoch when its
/// call starts, and the call wakes the thread.
struct Ticker {
    /// Calls with a time budget running now.
    timed: AtomicUsize,
    stop: AtomicBool,
    thread: OnceLock<std::thread::Thread>,
}

impl Ticker {
    fn run(&self, engine: &Engine) {
        while !self.stop.load(Ordering::Acquire) {
            if self.timed.load(Ordering::Acquire) == 0 {
                // An `unpark` between the load and here makes this
                // return at once.
                std::thread::park();
                continue;
            }
            std::thread::sleep(EPOCH_TICK);
            engine.increment_epoch();
        }
    }

    fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Marks a timed call as running until the guard drops.
    fn timed_call(&self) -> TimedCall<'_> {
        if self.timed.fetch_add(1, Ordering::AcqRel) == 0 {
            self.wake();
        }
        TimedCall(self)
    }
}

struct TimedCall<'a>(&'a Ticker);

impl Drop for TimedCall<'_> {
    fn drop(&mut self) {
        self.0.timed.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Sizes of the instance pool.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Instances that may exist at once (requests in a tenant program at
    /// the same time, plus loads in progress).
    pub slots: u32,
    /// The most linear memory any tenant may have (tenant limits are
    /// capped by it).
    pub max_memory: u64,
    /// A directory of precompiled modules of our own ([`cache`]): loads
    /// of a module compiled before (by this or an earlier process) skip
    /// Cranelift. Created with mode 0700; refused when other users may
    /// write in it.
    pub cache_dir: Option<std::path::PathBuf>,
}

impl Default for PoolConfig {
    fn default() -> PoolConfig {
        PoolConfig {
            slots: 1000,
            max_memory: 64 << 20,
            cache_dir: None,
        }
    }
}

/// How a pooled slot's memory and table are put back to their starting
/// state when a request's instance is dropped.
///
/// Every way resets all of the slot that was accessible to the guest:
/// bytes of the image back to the image, all others to zero, before
/// the slot is handed to anyone else (`tests/sandbox.rs` checks it).
/// They differ in what that costs per request:
///
/// - With Linux's `PAGEMAP_SCAN` ioctl (6.7 and later) wasmtime asks the
///   kernel which pages the request wrote and copies the image (or
///   zeros) back over those pages only, up to
///   [`SlotReset::memory_keep_resident`] bytes of them; the rest, if a
///   request wrote more, goes back to the kernel with `madvise`. A small
///   tenant's request then costs no system call, no page fault on the
///   next request in that slot and no TLB shootdown across cores
///   (`madvise(MADV_DONTNEED)` on every drop and the page faults after
///   it were about a quarter of lacquerd's CPU samples with 100
///   connections on the bench's hello tenant). The price is that
///   an unused slot keeps up to that many bytes resident: at most
///   `slots × memory_keep_resident` in all.
/// - Without it, the first [`SlotReset::memory_keep_resident`] bytes are
///   reset with `memset` whether written or not and the rest returned
///   with `madvise`, so it stays small.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotReset {
    /// Whether written pages are found with `PAGEMAP_SCAN`.
    pub pagemap: wasmtime::Enabled,
    /// Bytes of linear memory reset in place instead of by `madvise`.
    pub memory_keep_resident: usize,
    /// Bytes of table reset in place instead of by `madvise`.
    pub table_keep_resident: usize,
}

impl SlotReset {
    /// The reset this host supports best.
    pub fn for_host() -> SlotReset {
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            SlotReset {
                pagemap: wasmtime::Enabled::Yes,
                memory_keep_resident: 256 << 10,
                table_keep_resident: 16 << 10,
            }
        } else {
            SlotReset {
                pagemap: wasmtime::Enabled::No,
                memory_keep_resident: 64 << 10,
                table_keep_resident: 4096,
            }
        }
    }
}

/// The engine and linker shared by every tenant.
pub struct Sandbox {
    engine: Engine,
    linker: Linker<Task>,
    max_memory: u64,
    cache: Option<cache::ModuleCache>,
    ticker: Arc<Ticker>,
    ticker_thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("max_memory", &self.max_memory)
            .finish()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.ticker.stop.store(true, Ordering::Release);
        self.ticker.wake();
        if let Some(t) = self.ticker_thread.take() {
            let _ = t.join();
        }
    }
}

/// Why a hook call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The tenant has no export of that name (or not a `() -> ()`
    /// function).
    NoHook(String),
    /// The call used up its fuel or time budget.
    Budget(String),
    /// The guest trapped (out-of-bounds access, memory beyond its limit,
    /// unreachable, a host call given bad pointers, ...).
    Trap(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::NoHook(m) | CallError::Budget(m) | CallError::Trap(m) => f.write_str(m),
        }
    }
}

/// The export the guest SDK (`lacquer-guest`) runs its own set-up in,
/// called once at load before the tenant's `main` (never per request:
/// names starting with `__lacquer_` are refused by [`Instance::call`]).
pub const SDK_INIT: &str = "__lacquer_init";

/// The hooks `run()` calls, by VCL subroutine, resolved at load.
pub const HOOKS: &[&str] = &[
    "on_recv",
    "on_pipe",
    "on_pass",
    "on_hash",
    "on_purge",
    "on_miss",
    "on_hit",
    "on_deliver",
    "on_synth",
    "on_backend_fetch",
    "on_backend_response",
    "on_backend_error",
];

/// An exported function `run`, `vcall` or `call` may call, resolved
/// once at load so that a call needs neither a lookup by name nor
/// wasmtime's per-call type check (about 1,600 instructions together,
/// more than the call itself).
struct Entry {
    export: ModuleExport,
    /// Whether the module declares its type `() -> ()`, the only type
    /// a hook may have.
    unit: bool,
}

/// A tenant program ready to instantiate: the snapshot module after
/// `main`, pre-linked.
pub struct Program {
    pub name: String,
    pre: InstancePre<Task>,
    memory: Option<ModuleExport>,
    /// The exported functions.
    functions: Vec<Entry>,
    /// Index in `functions` of each of [`HOOKS`] the program exports.
    hooks: Vec<Option<usize>>,
    /// Index in `functions` by name, for `vcall` and `call`.
    by_name: HashMap<String, usize>,
    pub(crate) regexes: Vec<regex::bytes::Regex>,
    pub limits: Limits,
    /// Bytes of the snapshot's data segments (the copy-on-write image).
    pub image_bytes: usize,
    /// Backends the tenant has chosen so far (bounded by `max_backends`).
    backends: Mutex<HashSet<String>>,
    /// The sandbox's epoch ticker, woken by calls with a time budget.
    ticker: Arc<Ticker>,
    /// What a reused instance is reset to; `None` when instances of this
    /// program are never reused (see `reuse`).
    reuse: Option<reuse::Image>,
    /// Set when a live update replaced this program: its instances are
    /// no longer cached for reuse.
    retired: AtomicBool,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("name", &self.name)
            .field("image_bytes", &self.image_bytes)
            .field("reusable", &self.reuse.is_some())
            .finish()
    }
}

impl Program {
    /// Whether the tenant may route to backend `name`: a name chosen
    /// before, or a new one within `max_backends`.
    pub(crate) fn allow_backend(&self, name: &str) -> bool {
        let mut b = self.backends.lock().unwrap_or_else(|e| e.into_inner());
        if b.contains(name) {
            return true;
        }
        if b.len() >= self.limits.max_backends {
            return false;
        }
        b.insert(name.to_string());
        true
    }

    /// Whether a live update replaced this program ([`Tenant::update`]):
    /// a caller that kept it to skip [`Tenant::program`] (vmod `wasm`'s
    /// per-thread fork cache) asks the tenant again.
    pub fn retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Whether the program exports the hook `run()` calls for `HOOKS[i]`.
    pub fn has_hook(&self, i: usize) -> bool {
        self.hooks.get(i).is_some_and(Option::is_some)
    }
}

fn trap_text(e: &wasmtime::Error) -> String {
    format!("{e:#}")
}

fn classify(e: wasmtime::Error, who: &str) -> CallError {
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => CallError::Budget(format!(
            "{who}: instruction budget (max_instructions) exhausted"
        )),
        Some(wasmtime::Trap::Interrupt) => {
            CallError::Budget(format!("{who}: time budget (max_time) exhausted"))
        }
        _ => CallError::Trap(format!("{who}: {}", trap_text(&e))),
    }
}

impl Sandbox {
    /// Builds the engine with a pool of `pool.slots` instances and starts
    /// the epoch ticker.
    pub fn new(pool: PoolConfig) -> Result<Sandbox, String> {
        let mut p = PoolingAllocationConfig::default();
        p.total_core_instances(pool.slots)
            .total_memories(pool.slots)
            .total_tables(pool.slots)
            .max_memory_size(pool.max_memory as usize);
        let reset = SlotReset::for_host();
        p.pagemap_scan(reset.pagemap)
            .linear_memory_keep_resident(reset.memory_keep_resident)
            .table_keep_resident(reset.table_keep_resident);
        let mut c = Config::new();
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(p))
            .consume_fuel(true)
            .epoch_interruption(true)
            .memory_init_cow(true)
            .max_wasm_stack(512 << 10);
        let engine = Engine::new(&c).map_err(|e| format!("wasm engine: {e:#}"))?;
        let cache = match &pool.cache_dir {
            Some(d) => Some(cache::ModuleCache::open(&engine, d)?),
            None => None,
        };
        let mut linker = Linker::new(&engine);
        host::link(&mut linker).map_err(|e| format!("wasm host API: {e:#}"))?;
        let ticker = Arc::new(Ticker {
            timed: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            thread: OnceLock::new(),
        });
        let ticker_thread = {
            let engine = engine.clone();
            let ticker = ticker.clone();
            std::thread::Builder::new()
                .name("wasm-epoch".into())
                .spawn(move || ticker.run(&engine))
                .map_err(|e| format!("wasm epoch thread: {e}"))?
        };
        // Set before any call can need a wake-up: calls need a program,
        // and programs come from this sandbox once `new` returns.
        let _ = ticker.thread.set(ticker_thread.thread().clone());
        Ok(Sandbox {
            engine,
            linker,
            max_memory: pool.max_memory,
            cache,
            ticker,
            ticker_thread: Some(ticker_thread),
        })
    }

    /// Compiles `wasm`, or loads its earlier compilation from the cache.
    fn compile(&self, wasm: &[u8]) -> Result<Module, String> {
        match &self.cache {
            Some(c) => c.module(&self.engine, wasm),
            None => Module::new(&self.engine, wasm).map_err(|e| format!("{e:#}")),
        }
    }

    /// Modules the cache gave back and modules it had to compile since
    /// this sandbox started; `None` without a cache directory.
    pub fn cache_stats(&self) -> Option<(u64, u64)> {
        self.cache.as_ref().map(|c| {
            (
                c.hits.load(Ordering::Relaxed),
                c.misses.load(Ordering::Relaxed),
            )
        })
    }

    fn store(&self, limits: &Limits, program: Option<Arc<Program>>) -> Store<Task> {
        let max = limits.max_memory.min(self.max_memory) as usize;
        let limiter = StoreLimitsBuilder::new()
            .memory_size(max)
            .instances(1)
            .trap_on_grow_failure(true)
            .build();
        let mut s = Store::new(&self.engine, Task::new(limiter, program));
        s.limiter(|t| &mut t.limiter);
        s.epoch_deadline_trap();
        s
    }

    /// Compiles a tenant module (binary `.wasm` or `.wat` text), runs its
    /// `main` (or `_initialize`) once within `max_boot_instructions`, and
    /// snapshots the result.
    pub fn load(&self, name: &str, bytes: &[u8], limits: &Limits) -> Result<Arc<Program>, String> {
        let fail = |what: &str, e: String| format!("tenant '{name}': {what}: {e}");
        let bin = if bytes.starts_with(b"\0asm") {
            bytes.to_vec()
        } else {
            wat::parse_bytes(bytes)
                .map_err(|e| fail("not a WebAssembly module", e.to_string()))?
                .into_owned()
        };
        let shape = snapshot::shape(&bin).map_err(|e| fail("cannot load", e))?;
        let instrumented =
            snapshot::instrument(&bin, &shape).map_err(|e| fail("cannot load", e))?;
        let boot = self
            .compile(&instrumented)
            .map_err(|e| fail("compile failed", e))?;
        let mut store = self.store(limits, None);
        store.data_mut().booting = true;
        store.data_mut().max_regex = limits.max_regex;
        store
            .set_fuel(limits.max_boot_instructions)
            .map_err(|e| fail("fuel", format!("{e:#}")))?;
        store.set_epoch_deadline(u64::MAX / 2);
        let inst = self
            .linker
            .instantiate(&mut store, &boot)
            .map_err(|e| fail("instantiation failed", format!("{e:#}")))?;
        let memory = inst.get_memory(&mut store, snapshot::MEMORY_EXPORT);
        store.data_mut().memory = memory;
        // The guest SDK's own set-up first (its allocator's heap, see
        // `lacquer-guest`), then the tenant's.
        let sdk = inst.get_func(&mut store, SDK_INIT);
        let tenant = ["main", "_initialize"]
            .into_iter()
            .find_map(|init| Some((init, inst.get_func(&mut store, init)?)));
        for (init, f) in sdk.map(|f| (SDK_INIT, f)).into_iter().chain(tenant) {
            let mut out = vec![Val::I32(0); f.ty(&store).results().len()];
            f.call(&mut store, &[], &mut out)
                .map_err(|e| fail(&format!("{init} failed"), classify(e, init).to_string()))?;
        }
        let mut snap = snapshot::Snapshot::default();
        for &g in &shape.mutable_globals {
            let v = inst
                .get_global(&mut store, &snapshot::global_export(g))
                .ok_or_else(|| fail("snapshot", format!("global {g} is not readable")))?
                .get(&mut store);
            snap.globals.push(match v {
                Val::I32(x) => snapshot::GlobalValue::I32(x),
                Val::I64(x) => snapshot::GlobalValue::I64(x),
                Val::F32(b) => snapshot::GlobalValue::F32(b),
                Val::F64(b) => snapshot::GlobalValue::F64(b),
                other => {
                    return Err(fail("snapshot", format!("global {g} holds {other:?}")));
                }
            });
        }
        if let Some(m) = memory {
            let data = m.data(&store);
            snap.pages = (data.len() / 65536) as u64;
            snap.segments = snapshot::segments(data);
        }
        let regexes = std::mem::take(&mut store.data_mut().boot_regexes);
        drop(store);
        let image_bytes = snap.segments.iter().map(|(_, b)| b.len()).sum();
        let reusable = SlotReset::for_host().pagemap == wasmtime::Enabled::Yes
            && snapshot::reuse_blocker(&bin)
                .map_err(|e| fail("cannot load", e))?
                .is_none();
        let snapped =
            snapshot::rewrite(&instrumented, &shape, &snap).map_err(|e| fail("snapshot", e))?;
        let module = self
            .compile(&snapped)
            .map_err(|e| fail("compiling the snapshot failed", e))?;
        let pre = self
            .linker
            .instantiate_pre(&module)
            .map_err(|e| fail("linking failed", format!("{e:#}")))?;
        let mut functions = Vec::new();
        let mut by_name = HashMap::new();
        for e in module.exports() {
            let (ExternType::Func(ty), Some(export)) = (e.ty(), module.get_export_index(e.name()))
            else {
                continue;
            };
            by_name.insert(e.name().to_string(), functions.len());
            functions.push(Entry {
                export,
                unit: ty.params().len() == 0 && ty.results().len() == 0,
            });
        }
        let hooks = HOOKS.iter().map(|h| by_name.get(*h).copied()).collect();
        let memory = module.get_export_index(snapshot::MEMORY_EXPORT);
        let reuse = if reusable {
            let mut globals = Vec::with_capacity(snap.globals.len());
            for (&g, v) in shape.mutable_globals.iter().zip(&snap.globals) {
                let export = module
                    .get_export_index(&snapshot::global_export(g))
                    .ok_or_else(|| fail("snapshot", format!("global {g} is not exported")))?;
                globals.push((export, v.to_val()));
            }
            Some(reuse::Image {
                memory_bytes: (snap.pages * 65536) as usize,
                segments: std::mem::take(&mut snap.segments)
                    .into_iter()
                    .map(|(at, b)| (at as usize, b))
                    .collect(),
                globals,
            })
        } else {
            None
        };
        Ok(Arc::new(Program {
            name: name.to_string(),
            pre,
            memory,
            functions,
            hooks,
            by_name,
            regexes,
            limits: limits.clone(),
            image_bytes,
            backends: Mutex::new(HashSet::new()),
            ticker: self.ticker.clone(),
            reuse,
            retired: AtomicBool::new(false),
        }))
    }

    /// Loads a tenant's program from its file.
    pub fn load_file(&self, cfg: &TenantConfig) -> Result<Arc<Program>, String> {
        let bytes = std::fs::read(&cfg.filename).map_err(|e| {
            format!(
                "tenant '{}': cannot read {}: {e}",
                cfg.name,
                cfg.filename.display()
            )
        })?;
        self.load(&cfg.name, &bytes, &cfg.limits)
    }

    /// A fresh instance of `program` for one request.
    pub fn instantiate(&self, program: &Arc<Program>) -> Result<Instance, String> {
        Instance::new(self, program)
    }
}

/// A tenant: its name and current program.
#[derive(Debug)]
pub struct Tenant {
    pub config: TenantConfig,
    current: RwLock<Arc<Program>>,
}

impl Tenant {
    pub fn new(config: TenantConfig, program: Arc<Program>) -> Tenant {
        Tenant {
            config,
            current: RwLock::new(program),
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The program new requests get.
    pub fn program(&self) -> Arc<Program> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Loads `bytes` as the tenant's new program; on success requests
    /// that start afterwards use it (those in flight finish on the old
    /// one), on failure the old one stays and the error says why.
    pub fn update(&self, sandbox: &Sandbox, bytes: &[u8]) -> Result<(), String> {
        let p = sandbox.load(&self.config.name, bytes, &self.config.limits)?;
        let old = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(|e| e.into_inner()),
            p,
        );
        // Requests in flight finish on `old`; none of its instances is
        // kept for another request (`reuse`).
        old.retired.store(true, Ordering::Release);
        Ok(())
    }
}

/// One request's sandbox: a fresh instance from the pool, or one that
/// served an earlier request of the same program on this thread and was
/// reset to the snapshot since (`reuse`).
pub struct Instance {
    /// Always `Some` until the instance drops.
    live: Option<reuse::Reusable>,
    /// No call trapped or ran out of budget: the instance may be reset
    /// and reused when it drops.
    clean: bool,
    reused: bool,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("program", &self.program().name)
            .field("reused", &self.reused)
            .finish()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(live) = self.live.take()
            && self.clean
            && live.program.reuse.is_some()
        {
            reuse::put(live);
        }
    }
}

impl Instance {
    fn new(sandbox: &Sandbox, program: &Arc<Program>) -> Result<Instance, String> {
        if program.reuse.is_some()
            && let Some(live) = reuse::take(program)
        {
            return Ok(Instance {
                live: Some(live),
                clean: true,
                reused: true,
            });
        }
        let live = match Instance::fresh(sandbox, program) {
            Ok(l) => l,
            Err(_) => {
                // Perhaps this thread's cached instances hold the slots.
                reuse::flush();
                Instance::fresh(sandbox, program).map_err(|e| {
                    format!(
                        "tenant '{}': no sandbox for this request: {e:#}",
                        program.name
                    )
                })?
            }
        };
        Ok(Instance {
            live: Some(live),
            clean: true,
            reused: false,
        })
    }

    fn fresh(sandbox: &Sandbox, program: &Arc<Program>) -> wasmtime::Result<reuse::Reusable> {
        let mut store = sandbox.store(&program.limits, Some(program.clone()));
        let instance = program.pre.instantiate(&mut store)?;
        let memory = match &program.memory {
            Some(m) => instance
                .get_module_export(&mut store, m)
                .and_then(|e| e.into_memory()),
            None => None,
        };
        store.data_mut().memory = memory;
        let globals = match &program.reuse {
            Some(image) => image
                .globals
                .iter()
                .filter_map(|(e, _)| {
                    instance
                        .get_module_export(&mut store, e)
                        .and_then(wasmtime::Extern::into_global)
                })
                .collect(),
            None => Vec::new(),
        };
        Ok(reuse::Reusable {
            store,
            instance,
            program: program.clone(),
            last: None,
            globals,
        })
    }

    fn live(&self) -> &reuse::Reusable {
        self.live
            .as_ref()
            .expect("an instance is live until it drops")
    }

    fn live_mut(&mut self) -> &mut reuse::Reusable {
        self.live
            .as_mut()
            .expect("an instance is live until it drops")
    }

    /// Whether this instance served an earlier request (and was reset to
    /// the snapshot since).
    pub fn reused(&self) -> bool {
        self.reused
    }

    /// The program this instance runs.
    pub fn program(&self) -> &Arc<Program> {
        &self.live().program
    }

    /// The store data: messages, effects, decision, results.
    pub fn task(&self) -> &Task {
        self.live().store.data()
    }

    pub fn task_mut(&mut self) -> &mut Task {
        self.live_mut().store.data_mut()
    }

    /// Calls `Program::functions[i]`; a trap or an exhausted budget
    /// keeps the instance from being reused.
    fn call_entry(&mut self, i: usize, who: &str) -> Result<(), CallError> {
        let r = self.live_mut().call_entry(i, who);
        if matches!(r, Err(CallError::Budget(_) | CallError::Trap(_))) {
            self.clean = false;
        }
        r
    }

    /// Calls the hook `HOOKS[i]`; `Ok(false)` when the program has none.
    pub fn run_hook(&mut self, i: usize) -> Result<bool, CallError> {
        let Some(&Some(f)) = self.program().hooks.get(i) else {
            return Ok(false);
        };
        self.call_entry(f, HOOKS[i])?;
        Ok(true)
    }

    /// Calls the exported function `name` (`vcall`, `call`).
    pub fn call(&mut self, name: &str) -> Result<(), CallError> {
        let program = self.program();
        if name.starts_with("__lacquer_") || name == "main" || name == "_initialize" {
            return Err(CallError::NoHook(format!(
                "tenant '{}': '{name}' may not be called per request",
                program.name
            )));
        }
        let f = *program.by_name.get(name).ok_or_else(|| {
            CallError::NoHook(format!(
                "tenant '{}' exports no function '{name}'",
                program.name
            ))
        })?;
        self.call_entry(f, name)
    }

    /// Linear memory in bytes right now (tests look for leaks with it).
    pub fn memory_size(&self) -> usize {
        let l = self.live();
        l.store.data().memory.map_or(0, |m| m.data_size(&l.store))
    }

    /// Reads `len` bytes of the instance's memory at `at` (tests and
    /// diagnostics); `None` outside memory.
    pub fn peek(&self, at: usize, len: usize) -> Option<Vec<u8>> {
        let l = self.live();
        let m = l.store.data().memory?;
        m.data(&l.store)
            .get(at..at.checked_add(len)?)
            .map(<[u8]>::to_vec)
    }
}

impl reuse::Reusable {
    fn budget(&mut self) -> Result<(), CallError> {
        let l = &self.program.limits;
        self.store
            .set_fuel(l.max_instructions.unwrap_or(u64::MAX))
            .map_err(|e| CallError::Trap(trap_text(&e)))?;
        let ticks = match l.max_time {
            Some(t) => (t.as_nanos() / EPOCH_TICK.as_nanos()).max(1) as u64 + 1,
            None => u64::MAX / 2,
        };
        self.store.set_epoch_deadline(ticks);
        Ok(())
    }

    /// Calls `Program::functions[i]`.
    // The one `unsafe` here: `Func::call_unchecked`, see below.
    #[allow(unsafe_code)]
    fn call_entry(&mut self, i: usize, who: &str) -> Result<(), CallError> {
        let f = match self.last {
            Some((j, f)) if j == i => f,
            _ => {
                let entry = &self.program.functions[i];
                if !entry.unit {
                    return Err(CallError::NoHook(format!(
                        "tenant '{}': {who} is not a function without arguments and results",
                        self.program.name
                    )));
                }
                let f = self
                    .instance
                    .get_module_export(&mut self.store, &entry.export)
                    .and_then(wasmtime::Extern::into_func)
                    .ok_or_else(|| {
                        CallError::NoHook(format!(
                            "tenant '{}': {who} is not a function",
                            self.program.name
                        ))
                    })?;
                self.last = Some((i, f));
                f
            }
        };
        self.budget()?;
        let mut none: [ValRaw; 0] = [];
        let _timed = self
            .program
            .limits
            .max_time
            .map(|_| self.program.ticker.timed_call());
        // SAFETY: `f` belongs to this instance's store, and its module
        // declares its type `() -> ()` (`Entry::unit`, checked at load
        // from the module's export types): the call reads no parameters
        // and writes no results, so an empty buffer is large enough, and
        // there are no references to keep valid. The call is not made
        // from within an async call (the engine is synchronous).
        let r = unsafe { f.call_unchecked(&mut self.store, &mut none as *mut [ValRaw]) };
        r.map_err(|e| classify(e, &format!("tenant '{}' {who}", self.program.name)))
    }
}
