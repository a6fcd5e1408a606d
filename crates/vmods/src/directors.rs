//! `vmod_directors`: load balancing directors (round_robin, fallback,
//! random, hash, shard with shard_param) and `directors.lookup()`.
//!
//! Directors that VCL can hand around as a BACKEND (round robin, fallback,
//! random, a lazily resolved shard) are registered with the server through
//! [`crate::Host::add_director`] and resolved by it at fetch time through
//! [`crate::Director`]. The hash director and a shard with `resolve=NOW`
//! pick a real backend immediately. The shard director builds the same
//! consistent-hashing ring as Varnish (SHA-256 of `<ident><n>`, last 32
//! bits), so the same keys map to the same backends.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use lacquer_vcl::exec::{Backend, Context, LogKind, Value};
use lacquer_vcl::subs::BuiltinSub;
use sha2::{Digest, Sha256};

mod shard_cfg;

use crate::args::{Args, lossy};
use crate::rnd::next_f64 as random_f64;
use crate::{
    AnyObj, ClassImpl, Director, DirectorList, Env, FuncImpl, Host, ListedMember, MemberReport,
    MethodImpl, ModuleImpl, Obj, this,
};

const DECL: &str = r#"
$Module directors
$Object round_robin()
$Method VOID .add_backend(BACKEND)
$Method VOID .remove_backend(BACKEND)
$Method BACKEND .backend()
$Object fallback(BOOL sticky=0)
$Method VOID .add_backend(BACKEND)
$Method VOID .remove_backend(BACKEND)
$Method BACKEND .backend()
$Object random()
$Method VOID .add_backend(BACKEND, REAL)
$Method VOID .remove_backend(BACKEND)
$Method BACKEND .backend()
$Object hash()
$Method VOID .add_backend(BACKEND, REAL weight=1.0)
$Method VOID .remove_backend(BACKEND)
$Method BACKEND .backend(STRANDS)
$Object shard()
$Method VOID .set_warmup(REAL probability=0.0)
$Method VOID .set_rampup(DURATION duration=0)
$Method VOID .associate(BLOB param=0)
$Method BOOL .add_backend(BACKEND backend, [STRING ident], [DURATION rampup], [REAL weight])
$Method BOOL .remove_backend([BACKEND backend=0], [STRING ident=0])
$Method BOOL .clear()
$Method BOOL .reconfigure(INT replicas=67)
$Method INT .key(STRANDS)
$Method BACKEND .backend([ENUM {HASH, URL, KEY, BLOB} by=HASH], [INT key], [BLOB key_blob], [INT alt=0], [REAL warmup=-1], [BOOL rampup=1], [ENUM {CHOSEN, IGNORE, ALL} healthy=CHOSEN], [BLOB param], [ENUM {NOW, LAZY} resolve])
$Method VOID .debug(INT)
$Object shard_param()
$Method VOID .clear()
$Method VOID .set([ENUM {HASH, URL, KEY, BLOB} by], [INT key], [BLOB key_blob], [INT alt], [REAL warmup], [BOOL rampup], [ENUM {CHOSEN, IGNORE, ALL} healthy])
$Method STRING .get_by()
$Method INT .get_key()
$Method INT .get_alt()
$Method REAL .get_warmup()
$Method BOOL .get_rampup()
$Method STRING .get_healthy()
$Method BLOB .use()
$Function BACKEND lookup(STRING)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[("lookup", lookup as FuncImpl)],
    classes: &[
        ClassImpl {
            name: "round_robin",
            ctor: new_rr,
            methods: &[
                ("add_backend", add_backend as MethodImpl),
                ("remove_backend", remove_backend),
                ("backend", lazy_backend),
            ],
        },
        ClassImpl {
            name: "fallback",
            ctor: new_fallback,
            methods: &[
                ("add_backend", add_backend as MethodImpl),
                ("remove_backend", remove_backend),
                ("backend", lazy_backend),
            ],
        },
        ClassImpl {
            name: "random",
            ctor: new_random,
            methods: &[
                ("add_backend", add_backend as MethodImpl),
                ("remove_backend", remove_backend),
                ("backend", lazy_backend),
            ],
        },
        ClassImpl {
            name: "hash",
            ctor: new_hash,
            methods: &[
                ("add_backend", add_backend as MethodImpl),
                ("remove_backend", remove_backend),
                ("backend", hash_backend),
            ],
        },
        ClassImpl {
            name: "shard",
            ctor: new_shard,
            methods: &[
                ("set_warmup", shard_set_warmup as MethodImpl),
                ("set_rampup", shard_set_rampup),
                ("associate", shard_associate),
                ("add_backend", shard_add_backend),
                ("remove_backend", shard_remove_backend),
                ("clear", shard_clear),
                ("reconfigure", shard_reconfigure),
                ("key", shard_key),
                ("backend", shard_backend),
                ("debug", shard_debug),
            ],
        },
        ClassImpl {
            name: "shard_param",
            ctor: new_param,
            methods: &[
                ("clear", param_clear as MethodImpl),
                ("set", param_set),
                ("get_by", param_get_by),
                ("get_key", param_get_key),
                ("get_alt", param_get_alt),
                ("get_warmup", param_get_warmup),
                ("get_rampup", param_get_rampup),
                ("get_healthy", param_get_healthy),
                ("use", param_use),
            ],
        },
    ],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

fn lookup(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    if !matches!(ctx.sub(), BuiltinSub::Init | BuiltinSub::Fini) {
        return Err("lookup() may only be called from vcl_init / vcl_fini".into());
    }
    let name = a.str_or_empty(0)?;
    Ok(env
        .host
        .lookup_backend(&lossy(name))
        .map_or(Value::Null, Value::Backend))
}

// ---- the simple directors --------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    RoundRobin,
    Fallback { sticky: bool },
    Random,
    Hash,
}

/// Backends and weights of a simple director, and its pick logic.
struct Simple {
    kind: Kind,
    host: Arc<dyn Host>,
    members: RwLock<Vec<(Backend, f64)>>,
    /// Round robin: next index; fallback (sticky): current index.
    cursor: AtomicUsize,
}

/// An instance of one of the simple directors.
struct SimpleObj {
    dir: Arc<Simple>,
    /// The handle VCL uses for the director (hash directors have none:
    /// they always resolve immediately).
    be: Option<Backend>,
}

impl Simple {
    fn healthy_members(&self) -> Vec<(Backend, f64, bool)> {
        let m = self.members.read().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .map(|(b, w)| (b.clone(), *w, self.host.usable(b)))
            .collect()
    }

    /// Picks by weight among healthy members: `w` in [0, 1).
    fn pick_weighted(&self, w: f64) -> Option<Backend> {
        let m = self.healthy_members();
        let total: f64 = m.iter().filter(|x| x.2).map(|x| x.1).sum();
        if total <= 0.0 {
            return None;
        }
        let target = w * total;
        let mut acc = 0.0;
        let mut last = None;
        for (b, weight, healthy) in m {
            if !healthy {
                continue;
            }
            acc += weight;
            if target < acc {
                return Some(b);
            }
            last = Some(b);
        }
        last
    }

    fn pick(&self) -> Option<Backend> {
        match self.kind {
            Kind::RoundRobin => {
                let m = self.members.read().unwrap_or_else(|e| e.into_inner());
                let n = m.len();
                for _ in 0..n {
                    let i = self.cursor.fetch_add(1, Ordering::Relaxed) % n;
                    if self.host.usable(&m[i].0) {
                        return Some(m[i].0.clone());
                    }
                }
                None
            }
            Kind::Fallback { sticky } => {
                let m = self.members.read().unwrap_or_else(|e| e.into_inner());
                let n = m.len();
                let start = if sticky {
                    self.cursor.load(Ordering::Relaxed)
                } else {
                    0
                };
                for k in 0..n {
                    let i = (start + k) % n;
                    if self.host.usable(&m[i].0) {
                        self.cursor.store(i, Ordering::Relaxed);
                        return Some(m[i].0.clone());
                    }
                }
                None
            }
            Kind::Random => self.pick_weighted(crate::rnd::next_unit()),
            Kind::Hash => None,
        }
    }
}

impl Director for Simple {
    fn resolve(&self, _: &mut dyn Context) -> Option<Backend> {
        self.pick()
    }
    fn healthy(&self) -> Result<bool, String> {
        let m = self.members.read().unwrap_or_else(|e| e.into_inner());
        Ok(m.iter().any(|(b, _)| self.host.usable(b)))
    }
    fn list(&self) -> Option<DirectorList> {
        let m = self.healthy_members();
        let (kind, head) = match self.kind {
            Kind::RoundRobin => ("round-robin", "Weight"),
            Kind::Fallback { .. } => ("fallback", "Current"),
            Kind::Random => ("random", "Weight"),
            // varnishd's hash director has no member report.
            Kind::Hash => {
                return Some(DirectorList {
                    kind: "hash",
                    report: None,
                });
            }
        };
        // The random director weighs the healthy members only.
        let total: f64 = m.iter().filter(|x| x.2).map(|x| x.1).sum();
        let current = self.cursor.load(Ordering::Relaxed);
        let members = m
            .iter()
            .enumerate()
            .map(|(i, (b, weight, healthy))| {
                let cell = match self.kind {
                    Kind::Fallback { .. } if i == current => "*".to_string(),
                    Kind::Fallback { .. } => String::new(),
                    Kind::Random => {
                        let share = if *healthy && total > 0.0 {
                            100.0 * weight / total
                        } else {
                            0.0
                        };
                        format!("{share:6.2}%")
                    }
                    _ => "-".to_string(),
                };
                ListedMember {
                    name: b.name.to_string(),
                    healthy: *healthy,
                    cells: vec![cell, health_word(*healthy).to_string()],
                }
            })
            .collect();
        Some(DirectorList {
            kind,
            report: Some(MemberReport {
                heads: vec![head, "Health"],
                members,
            }),
        })
    }
}

fn health_word(healthy: bool) -> &'static str {
    if healthy { "healthy" } else { "sick" }
}

fn new_simple(env: &Env, name: &str, kind: Kind) -> Result<Obj, String> {
    let dir = Arc::new(Simple {
        kind,
        host: env.host.clone(),
        members: RwLock::new(Vec::new()),
        cursor: AtomicUsize::new(0),
    });
    // Every director is registered (so `backend.list` shows it), but a
    // hash director has no handle of its own for VCL: `.backend(key)`
    // picks a member at once.
    let registered = env.add_director(name, dir.clone());
    let be = (kind != Kind::Hash).then_some(registered);
    Ok(Arc::new(SimpleObj { dir, be }))
}

fn new_rr(env: &Env, _: &mut dyn Context, name: &str, _: &Args<'_>) -> Result<Obj, String> {
    new_simple(env, name, Kind::RoundRobin)
}

fn new_fallback(env: &Env, _: &mut dyn Context, name: &str, a: &Args<'_>) -> Result<Obj, String> {
    let sticky = a.bool(0)?.unwrap_or(false);
    new_simple(env, name, Kind::Fallback { sticky })
}

fn new_random(env: &Env, _: &mut dyn Context, name: &str, _: &Args<'_>) -> Result<Obj, String> {
    new_simple(env, name, Kind::Random)
}

fn new_hash(env: &Env, _: &mut dyn Context, name: &str, _: &Args<'_>) -> Result<Obj, String> {
    new_simple(env, name, Kind::Hash)
}

fn add_backend(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let d = this::<SimpleObj>(o);
    let Some(be) = a.backend(0)? else {
        ctx.log(
            LogKind::Error,
            b"add_backend(): NULL backend cannot be added",
        );
        return Ok(Value::Null);
    };
    let weight = match d.dir.kind {
        Kind::Random | Kind::Hash => a.real(1)?.unwrap_or(1.0),
        _ => 1.0,
    };
    if !(weight.is_finite() && weight >= 0.0) {
        return Err(format!("add_backend(): bad weight {weight}"));
    }
    d.dir
        .members
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .push((be.clone(), weight));
    Ok(Value::Null)
}

fn remove_backend(_: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    let d = this::<SimpleObj>(o);
    if let Some(be) = a.backend(0)? {
        let mut m = d.dir.members.write().unwrap_or_else(|e| e.into_inner());
        // Keep the fallback's current backend (or the round robin's next
        // one) pointing at the same member after the removal.
        let cur = d.dir.cursor.load(Ordering::Relaxed);
        let before = m.iter().take(cur).filter(|(b, _)| b == be).count();
        m.retain(|(b, _)| b != be);
        let cur = cur - before;
        d.dir
            .cursor
            .store(if cur >= m.len() { 0 } else { cur }, Ordering::Relaxed);
    }
    Ok(Value::Null)
}

fn lazy_backend(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    let d = this::<SimpleObj>(o);
    Ok(d.be.clone().map_or(Value::Null, Value::Backend))
}

fn hash_backend(_: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    let d = this::<SimpleObj>(o);
    let w = hash32(&[a.str_or_empty(0)?]) as f64 / 4_294_967_296.0;
    Ok(d.dir.pick_weighted(w).map_or(Value::Null, Value::Backend))
}

// ---- shard -----------------------------------------------------------

/// `VRT_HashStrands32`: the last four bytes of the SHA-256 of the
/// concatenated parts, read little-endian (the byte order that reproduces
/// Varnish's picks in directors_b00003/c00003/c00005.vtc).
fn hash32(parts: &[&[u8]]) -> u32 {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    let d = h.finalize();
    u32::from_le_bytes([d[28], d[29], d[30], d[31]])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum By {
    Hash,
    Url,
    Key,
    Blob,
}

impl By {
    fn name(self) -> &'static str {
        match self {
            By::Hash => "HASH",
            By::Url => "URL",
            By::Key => "KEY",
            By::Blob => "BLOB",
        }
    }
    fn parse(s: &str) -> Result<By, String> {
        Ok(match s {
            "HASH" => By::Hash,
            "URL" => By::Url,
            "KEY" => By::Key,
            "BLOB" => By::Blob,
            _ => return Err(format!("shard: unknown by={s}")),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Healthy {
    Chosen,
    Ignore,
    All,
}

impl Healthy {
    fn name(self) -> &'static str {
        match self {
            Healthy::Chosen => "CHOSEN",
            Healthy::Ignore => "IGNORE",
            Healthy::All => "ALL",
        }
    }
    fn parse(s: &str) -> Result<Healthy, String> {
        Ok(match s {
            "CHOSEN" => Healthy::Chosen,
            "IGNORE" => Healthy::Ignore,
            "ALL" => Healthy::All,
            _ => return Err(format!("shard: unknown healthy={s}")),
        })
    }
}

/// A shard parameter set (the arguments of `.backend()`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Params {
    by: By,
    key: u32,
    alt: i64,
    warmup: f64,
    rampup: bool,
    healthy: Healthy,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            by: By::Hash,
            key: 0,
            alt: 0,
            warmup: -1.0,
            rampup: true,
            healthy: Healthy::Chosen,
        }
    }
}

/// Reads the shard arguments at `base..` (by, key, key_blob, alt, warmup,
/// rampup, healthy) over `p`; only given arguments change it.
fn apply_args(
    p: &mut Params,
    a: &Args<'_>,
    base: usize,
    ctx: &mut dyn Context,
    who: &str,
) -> Result<(), String> {
    let fail = |m: String| Err(format!("{who} {m}"));
    // Arguments are validated against the `by` of this call (HASH when
    // not given); only the arguments given change the parameter set.
    let given_by = a.enum_(base)?.map(By::parse).transpose()?;
    let by = given_by.unwrap_or(By::Hash);
    let key = a.int(base + 1)?;
    let key_blob = a.blob(base + 2)?;
    match by {
        By::Key => match key {
            None => return fail("missing key argument with by=KEY".into()),
            Some(k) if !(0..=u32::MAX as i64).contains(&k) => {
                return fail(format!("invalid key argument {k} with by=KEY"));
            }
            Some(k) => p.key = k as u32,
        },
        By::Blob => match key_blob {
            None if !a.given(base + 2) => {
                return fail("missing key_blob argument with by=BLOB".into());
            }
            Some(b) if !b.is_empty() => {
                let mut k = [0u8; 4];
                let n = b.len().min(4);
                k[4 - n..].copy_from_slice(&b[..n]);
                p.key = u32::from_be_bytes(k);
            }
            _ => {
                let m = format!("{who} by=BLOB but no or empty key_blob - using key 0");
                ctx.log(LogKind::Problem, m.as_bytes());
                p.key = 0;
            }
        },
        By::Hash | By::Url => {
            if a.given(base + 1) || a.given(base + 2) {
                return fail(format!(
                    "key and key_blob arguments are invalid with by={}",
                    by.name()
                ));
            }
        }
    }
    if let Some(by) = given_by {
        p.by = by;
    }
    if let Some(alt) = a.int(base + 3)? {
        if alt < 0 {
            return fail(format!("invalid alt argument {alt}"));
        }
        p.alt = alt;
    }
    if let Some(w) = a.real(base + 4)? {
        if !(w == -1.0 || (0.0..=1.0).contains(&w)) {
            return fail(format!("invalid warmup argument {w:.6}"));
        }
        p.warmup = w;
    }
    if let Some(r) = a.bool(base + 5)? {
        p.rampup = r;
    }
    if let Some(h) = a.enum_(base + 6)? {
        p.healthy = Healthy::parse(h)?;
    }
    Ok(())
}

/// Whether any `.backend()` argument other than `resolve` was given. The
/// compiler fills in declared defaults, so a default value counts as not
/// given.
fn any_given(a: &Args<'_>) -> Result<bool, String> {
    Ok(a.enum_(0)?.is_some_and(|b| b != "HASH")
        || a.given(1)
        || a.given(2)
        || a.int(3)?.is_some_and(|x| x != 0)
        || a.real(4)?.is_some_and(|x| x != -1.0)
        || a.bool(5)? == Some(false)
        || a.enum_(6)?.is_some_and(|h| h != "CHOSEN")
        || a.given(7))
}

/// `directors.shard_param()`: VCL-wide defaults, overridable per backend
/// task.
struct ParamObj {
    id: u64,
    name: String,
    defaults: Mutex<Params>,
}

/// Per-task override of a parameter set (keyed by the set's id).
struct TaskParams(Params);

/// Task-scope override of a shard director's `.backend(resolve=LAZY, ...)`
/// arguments, keyed by the director's id.
struct LazyArgs {
    params: Params,
    param_set: Option<Arc<ParamObj>>,
}

fn backend_side(ctx: &dyn Context) -> bool {
    matches!(
        ctx.sub(),
        BuiltinSub::BackendFetch
            | BuiltinSub::BackendResponse
            | BuiltinSub::BackendError
            | BuiltinSub::Pipe
    )
}

impl ParamObj {
    fn current(&self, ctx: &mut dyn Context) -> Params {
        if backend_side(ctx)
            && let Some(t) = ctx.privs().get::<TaskParams>(self.id)
        {
            return t.0;
        }
        *self.defaults.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Parameter sets by id, for `.use()` blobs.
fn param_sets() -> &'static Mutex<Vec<std::sync::Weak<ParamObj>>> {
    static SETS: Mutex<Vec<std::sync::Weak<ParamObj>>> = Mutex::new(Vec::new());
    &SETS
}

const PARAM_MAGIC: &[u8] = b"lacquer-shard-param:";

/// The parameter set behind a `shard_param.use()` blob.
fn param_from_blob(b: &Bytes) -> Option<Arc<ParamObj>> {
    let id = b
        .strip_prefix(PARAM_MAGIC)
        .and_then(|r| <[u8; 8]>::try_from(r).ok())
        .map(u64::from_be_bytes)?;
    let sets = param_sets().lock().unwrap_or_else(|e| e.into_inner());
    sets.get(id as usize).and_then(|w| w.upgrade())
}

#[derive(Clone, Debug, Default)]
struct Ring {
    backends: Vec<Backend>,
    rampups: Vec<Option<f64>>,
    /// (point, backend index), sorted.
    points: Vec<(u32, usize)>,
}

/// Debug flags (`.debug()`): log ring lookups, and the ring when built.
const DBG_LOOKUP: i64 = 1;
const DBG_CIRCLE: i64 = 2;

struct Shard {
    id: u64,
    name: String,
    host: Arc<dyn Host>,
    /// The backend list in effect (changes apply at `reconfigure`).
    members: Mutex<Vec<shard_cfg::Member>>,
    ring: RwLock<Ring>,
    warmup: Mutex<f64>,
    rampup: Mutex<f64>,
    param: Mutex<Option<Arc<ParamObj>>>,
    debug: std::sync::atomic::AtomicI64,
}

/// The changes one task asked of one shard director; applied by
/// `.reconfigure()`, or with the default replicas when the task ends.
struct Pending {
    shard: Arc<Shard>,
    changes: Vec<shard_cfg::Change>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.changes.is_empty() {
            return;
        }
        let changes = std::mem::take(&mut self.changes);
        let host = self.shard.host.clone();
        let name = self.shard.name.clone();
        let mut log = |kind: LogKind, msg: String| {
            host.log(kind, &format!("vmod_directors: shard {name}: {msg}"));
        };
        self.shard.reconfigure(&changes, 67, &mut log);
    }
}

impl Shard {
    fn err(&self, ctx: &mut dyn Context, msg: &str) {
        let m = format!("vmod_directors: shard {}: {msg}", self.name);
        ctx.log(LogKind::Problem, m.as_bytes());
    }

    /// Records a change for this task.
    fn change(self: &Arc<Self>, ctx: &mut dyn Context, c: shard_cfg::Change) {
        let me = self.clone();
        ctx.privs()
            .get_or_insert_with(self.id, || Pending {
                shard: me,
                changes: Vec::new(),
            })
            .changes
            .push(c);
    }

    /// Applies `changes` and rebuilds the ring; false (and an error) when
    /// no backend is left. `log` gets the notices and errors.
    fn reconfigure(
        &self,
        changes: &[shard_cfg::Change],
        replicas: u32,
        log: &mut dyn FnMut(LogKind, String),
    ) -> bool {
        let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        *members = shard_cfg::apply(&members, changes, replicas, &mut |n| {
            log(LogKind::Notice, n)
        });
        if members.is_empty() {
            *self.ring.write().unwrap_or_else(|e| e.into_inner()) = Ring::default();
            log(LogKind::Problem, ".reconfigure() no backends".into());
            return false;
        }
        let rmax = (u32::MAX - 1) / members.len() as u32;
        let mut ring = Ring::default();
        for (i, m) in members.iter().enumerate() {
            for j in 0..m.replicas.min(rmax) {
                ring.points
                    .push((hash32(&[m.key(), j.to_string().as_bytes()]), i));
            }
            ring.backends.push(m.be.clone());
            ring.rampups.push(m.rampup);
        }
        drop(members);
        // Ties keep insertion order, as a stable sort of Varnish's points.
        ring.points.sort_by_key(|(p, _)| *p);
        if self.debug.load(Ordering::Relaxed) & DBG_CIRCLE != 0 {
            for (i, (p, h)) in ring.points.iter().enumerate() {
                self.host.log(
                    LogKind::Debug,
                    &format!(
                        "vmod_directors: shard: hashcircle[{i:5}] = {{point = {p:8x}, host = {h:2}}}"
                    ),
                );
            }
        }
        *self.ring.write().unwrap_or_else(|e| e.into_inner()) = ring;
        true
    }

    /// Varnish's ring walk (`sharddir_pick_be`), with warmup and rampup.
    fn pick(&self, ctx: &mut dyn Context, p: &Params) -> Option<Backend> {
        let key = key_for(ctx, p);
        let ring = self.ring.read().unwrap_or_else(|e| e.into_inner());
        let n = ring.backends.len();
        if n == 0 || ring.points.is_empty() {
            drop(ring);
            self.err(ctx, "no backends");
            return None;
        }
        let alt = p.alt.clamp(0, n as i64 - 1);
        let mut idx = lookup_point(&ring.points, key);
        if self.debug.load(Ordering::Relaxed) & DBG_LOOKUP != 0 {
            self.host.log(
                LogKind::Debug,
                &format!(
                    "vmod_directors: shard: lookup key {key:x} idx {idx} host {}",
                    ring.points[idx].1
                ),
            );
        }
        let mut picked = vec![false; n];
        let mut pickcount = 0;
        let mut previous: Option<usize> = None;
        let mut last: Option<usize> = None;
        // One step of `shard_next`: the next not-yet-seen backend on the
        // ring that qualifies, skipping `skip` of them.
        let mut next = |skip: i64,
                        healthy_only: bool,
                        previous: &mut Option<usize>,
                        last: &mut Option<usize>| {
            let mut skip = skip;
            while pickcount < n && skip >= 0 {
                let c = ring.points[idx].1;
                if !picked[c] {
                    picked[c] = true;
                    pickcount += 1;
                    let healthy = self.host.usable(&ring.backends[c]);
                    let mut chosen = false;
                    let mut to_last = false;
                    let mut to_prev = false;
                    if healthy {
                        if skip == 0 {
                            chosen = true;
                            to_last = true;
                        } else {
                            to_prev = true;
                        }
                        skip -= 1;
                    } else if !healthy_only {
                        if skip == 0 {
                            chosen = true;
                            to_last = true;
                        }
                        skip -= 1;
                    }
                    if to_last && last.is_some() {
                        *previous = *last;
                    }
                    if to_last {
                        *last = Some(c);
                    } else if to_prev {
                        *previous = Some(c);
                    }
                    if chosen {
                        return Some(c);
                    }
                }
                idx += 1;
                if idx == ring.points.len() {
                    idx = 0;
                }
            }
            None
        };
        if alt > 0 && next(alt - 1, p.healthy == Healthy::All, &mut previous, &mut last).is_none() {
            return previous.map(|i| ring.backends[i].clone());
        }
        let Some(c) = next(0, p.healthy != Healthy::Ignore, &mut previous, &mut last) else {
            return previous.map(|i| ring.backends[i].clone());
        };
        let chosen = ring.backends[c].clone();
        let warmup = if p.warmup == -1.0 {
            *self.warmup.lock().unwrap_or_else(|e| e.into_inner())
        } else {
            p.warmup
        };
        if alt > 0 || p.healthy == Healthy::Ignore || (!p.rampup && warmup == 0.0) {
            return Some(chosen);
        }
        let Some(alt_c) = next(0, true, &mut previous, &mut last) else {
            return Some(chosen);
        };
        let default_rampup = *self.rampup.lock().unwrap_or_else(|e| e.into_inner());
        let rampup_of = |i: usize| ring.rampups[i].unwrap_or(default_rampup);
        let now = ctx.now();
        let since_chosen = now - self.host.backend_changed(&chosen);
        let since_alt = now - self.host.backend_changed(&ring.backends[alt_c]);
        let (chosen_r, alt_r) = (rampup_of(c), rampup_of(alt_c));
        let keep = if since_chosen < chosen_r {
            // The chosen backend is ramping up: it gets a share of the
            // requests growing with the time since it became healthy.
            !p.rampup || since_alt < alt_r || random_f64() * chosen_r < since_chosen
        } else {
            warmup == 0.0 || random_f64() > warmup
        };
        Some(if keep {
            chosen
        } else {
            ring.backends[alt_c].clone()
        })
    }

    fn params(&self, ctx: &mut dyn Context) -> Params {
        if let Some(l) = ctx.privs().get::<LazyArgs>(self.id) {
            let (p, set) = (l.params, l.param_set.clone());
            return match set {
                Some(s) => merge(s.current(ctx), p),
                None => p,
            };
        }
        let set = self.param.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match set {
            Some(s) => s.current(ctx),
            None => Params::default(),
        }
    }
}

/// Arguments given explicitly override those of the parameter set; since
/// we only keep resolved values, a value differing from the default counts
/// as given.
fn merge(set: Params, explicit: Params) -> Params {
    let d = Params::default();
    Params {
        by: if explicit.by != d.by {
            explicit.by
        } else {
            set.by
        },
        key: if explicit.key != d.key {
            explicit.key
        } else {
            set.key
        },
        alt: if explicit.alt != d.alt {
            explicit.alt
        } else {
            set.alt
        },
        warmup: if explicit.warmup != d.warmup {
            explicit.warmup
        } else {
            set.warmup
        },
        rampup: if explicit.rampup != d.rampup {
            explicit.rampup
        } else {
            set.rampup
        },
        healthy: if explicit.healthy != d.healthy {
            explicit.healthy
        } else {
            set.healthy
        },
    }
}

/// The ring key for a parameter set: the given key, else on the backend
/// side the first four bytes of the object's hash for `by=HASH`, else the
/// hash of the URL.
fn key_for(ctx: &mut dyn Context, p: &Params) -> u32 {
    match p.by {
        By::Key | By::Blob => p.key,
        By::Hash if backend_side(ctx) => match ctx.digest() {
            Some(d) => u32::from_be_bytes([d[0], d[1], d[2], d[3]]),
            None => url_key(ctx),
        },
        By::Hash | By::Url => url_key(ctx),
    }
}

fn url_key(ctx: &mut dyn Context) -> u32 {
    use lacquer_vcl::vars::VarId;
    let var = if backend_side(ctx) && ctx.sub() != BuiltinSub::Pipe {
        VarId::BereqUrl
    } else {
        VarId::ReqUrl
    };
    let url = ctx.get_str(var).ok().flatten().unwrap_or(b"");
    hash32(&[url])
}

/// Varnish's `shard_lookup`: the first point at or after `key` (the last
/// point when `key` is beyond all of them).
fn lookup_point(points: &[(u32, usize)], key: u32) -> usize {
    let i = points.partition_point(|(p, _)| *p < key);
    i.min(points.len() - 1)
}

struct ShardObj {
    dir: Arc<Shard>,
    be: Backend,
}

impl Director for Shard {
    fn resolve(&self, ctx: &mut dyn Context) -> Option<Backend> {
        let p = self.params(ctx);
        self.pick(ctx, &p)
    }
    fn healthy(&self) -> Result<bool, String> {
        let ring = self.ring.read().unwrap_or_else(|e| e.into_inner());
        Ok(ring.backends.iter().any(|b| self.host.usable(b)))
    }
    fn list(&self) -> Option<DirectorList> {
        let default_rampup = *self.rampup.lock().unwrap_or_else(|e| e.into_inner());
        let now = crate::wall_clock();
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let members = members
            .iter()
            .map(|m| {
                let healthy = self.host.usable(&m.be);
                // How far the backend is into its rampup since it became
                // healthy, and how long is left.
                let rampup = m.rampup.unwrap_or(default_rampup);
                let since = now - self.host.backend_changed(&m.be);
                let (share, left) = if !healthy {
                    (0.0, 0.0)
                } else if since < rampup {
                    (100.0 * since / rampup, rampup - since)
                } else {
                    (100.0, 0.0)
                };
                ListedMember {
                    name: m.be.name.to_string(),
                    healthy,
                    cells: vec![
                        String::from_utf8_lossy(m.key()).into_owned(),
                        health_word(healthy).to_string(),
                        format!("{share:6.2}% {left:8.3}s"),
                    ],
                }
            })
            .collect();
        Some(DirectorList {
            kind: "shard",
            report: Some(MemberReport {
                heads: vec!["Ident", "Health", "Rampup  Remaining"],
                members,
            }),
        })
    }
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn new_shard(env: &Env, _: &mut dyn Context, name: &str, _: &Args<'_>) -> Result<Obj, String> {
    let dir = Arc::new(Shard {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        name: name.to_string(),
        host: env.host.clone(),
        members: Mutex::new(Vec::new()),
        ring: RwLock::new(Ring::default()),
        warmup: Mutex::new(0.0),
        rampup: Mutex::new(0.0),
        param: Mutex::new(None),
        debug: std::sync::atomic::AtomicI64::new(0),
    });
    let be = env.add_director(name, dir.clone());
    Ok(Arc::new(ShardObj { dir, be }))
}

fn shard_set_warmup(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let s = &this::<ShardObj>(o).dir;
    let p = a.real(0)?.unwrap_or(0.0);
    // A probability of 1 would never pick the chosen backend.
    if !(0.0..1.0).contains(&p) {
        let m = format!(
            "vmod_directors: shard {}: .set_warmup({p:.6}) ignored",
            s.name
        );
        ctx.log(LogKind::Notice, m.as_bytes());
        return Ok(Value::Null);
    }
    *s.warmup.lock().unwrap_or_else(|e| e.into_inner()) = p;
    Ok(Value::Null)
}

fn shard_set_rampup(_: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    let s = &this::<ShardObj>(o).dir;
    *s.rampup.lock().unwrap_or_else(|e| e.into_inner()) = a.duration(0)?.unwrap_or(0.0).max(0.0);
    Ok(Value::Null)
}

fn shard_associate(_: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    let s = &this::<ShardObj>(o).dir;
    let p = match a.blob(0)? {
        Some(b) => Some(param_from_blob(b).ok_or_else(|| {
            format!(
                "vmod_directors: shard {}: shard .associate param invalid",
                s.name
            )
        })?),
        None => None,
    };
    *s.param.lock().unwrap_or_else(|e| e.into_inner()) = p;
    Ok(Value::Null)
}

fn shard_add_backend(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let s = &this::<ShardObj>(o).dir;
    let Some(be) = a.backend(0)? else {
        return Err(format!(
            "vmod_directors: shard {}: None backend cannot be added",
            s.name
        ));
    };
    let ident = a.bytes(1)?.filter(|i| !i.is_empty());
    let mut weight = 1.0;
    if let Some(w) = a.real(3)? {
        if w >= 1.0 {
            weight = w;
        } else {
            let m = format!(
                "vmod_directors: shard {}: .add_backend(weight={w:.6}) ignored",
                s.name
            );
            ctx.log(LogKind::Notice, m.as_bytes());
        }
    }
    let c = shard_cfg::Change::Add {
        be: be.clone(),
        ident,
        rampup: a.duration(2)?,
        weight,
    };
    s.change(ctx, c);
    Ok(Value::Bool(true))
}

fn shard_remove_backend(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let s = &this::<ShardObj>(o).dir;
    let be = a.backend(0)?.cloned();
    let ident = a.bytes(1)?.filter(|i| !i.is_empty());
    if be.is_none() && ident.is_none() {
        return Err(format!(
            "vmod_directors: shard {}: .remove_backend(): either backend or ident are required",
            s.name
        ));
    }
    s.change(ctx, shard_cfg::Change::Remove { be, ident });
    Ok(Value::Bool(true))
}

fn shard_clear(_: &Env, o: &AnyObj, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let s = &this::<ShardObj>(o).dir;
    s.change(ctx, shard_cfg::Change::Clear);
    Ok(Value::Bool(true))
}

fn shard_reconfigure(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let s = &this::<ShardObj>(o).dir;
    let r = a.int(0)?.unwrap_or(67);
    if r <= 0 || r > u32::MAX as i64 {
        s.err(
            ctx,
            &format!(".reconfigure() invalid replicas argument {r}"),
        );
        return Ok(Value::Bool(false));
    }
    let Some(mut pending) = ctx.privs().remove::<Pending>(s.id) else {
        return Ok(Value::Bool(true));
    };
    let changes = std::mem::take(&mut pending.changes);
    if changes.is_empty() {
        return Ok(Value::Bool(true));
    }
    let name = s.name.clone();
    let mut log = |kind: LogKind, msg: String| {
        ctx.log(
            kind,
            format!("vmod_directors: shard {name}: {msg}").as_bytes(),
        );
    };
    Ok(Value::Bool(s.reconfigure(&changes, r as u32, &mut log)))
}

fn shard_key(_: &Env, _: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Int(hash32(&[a.str_or_empty(0)?]) as i64))
}

fn shard_backend(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let obj = this::<ShardObj>(o);
    let s = &obj.dir;
    let lazy = match a.enum_(8)? {
        Some("LAZY") => true,
        Some(_) => false,
        None => ctx.sub() == BuiltinSub::Init,
    };
    let who = format!("vmod_directors: shard {}", s.name);
    let housekeeping = matches!(ctx.sub(), BuiltinSub::Init | BuiltinSub::Fini);
    if lazy && !backend_side(ctx) && any_given(a)? {
        return Err(format!(
            "{who}: .backend(resolve=LAZY) with other parameters can only be used in backend/pipe context"
        ));
    }
    if !lazy && housekeeping {
        return Err(format!(
            "{who}: .backend(resolve=NOW) can not be used in vcl_init{{}}/vcl_fini{{}}"
        ));
    }
    let set = match a.blob(7)? {
        Some(b) => Some(
            param_from_blob(b).ok_or_else(|| format!("{who}: .backend(key_blob) param invalid"))?,
        ),
        None => s.param.lock().unwrap_or_else(|e| e.into_inner()).clone(),
    };
    let mut explicit = Params::default();
    apply_args(&mut explicit, a, 0, ctx, &format!("{who}: shard.backend()"))?;
    if lazy {
        if backend_side(ctx) {
            ctx.privs().insert(
                s.id,
                LazyArgs {
                    params: explicit,
                    param_set: set,
                },
            );
        }
        return Ok(Value::Backend(obj.be.clone()));
    }
    // Resolving now starts from what a lazy .backend() earlier in this
    // backend task stored (else the associated parameter set), unless a
    // parameter set is passed here; the arguments given override it.
    let base = match a.blob(7)? {
        Some(_) => set.map(|set| set.current(ctx)),
        None => Some(s.params(ctx)),
    };
    let p = match base {
        Some(base) => merge(base, explicit),
        None => explicit,
    };
    Ok(s.pick(ctx, &p).map_or(Value::Null, Value::Backend))
}

/// Selects extra `Debug` output: 1 ring lookups, 2 the ring when built.
fn shard_debug(_: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    let s = &this::<ShardObj>(o).dir;
    s.debug.store(a.int(0)?.unwrap_or(0), Ordering::Relaxed);
    Ok(Value::Null)
}

fn new_param(_: &Env, _: &mut dyn Context, name: &str, _: &Args<'_>) -> Result<Obj, String> {
    let mut sets = param_sets().lock().unwrap_or_else(|e| e.into_inner());
    let p = Arc::new(ParamObj {
        id: sets.len() as u64,
        name: name.to_string(),
        defaults: Mutex::new(Params::default()),
    });
    sets.push(Arc::downgrade(&p));
    Ok(p)
}

/// Parameter sets may change in `vcl_init` (VCL defaults) and on the
/// backend side or in `vcl_pipe` (per task), nowhere else.
fn param_writable(p: &ParamObj, ctx: &dyn Context, method: &str) -> Result<(), String> {
    if ctx.sub() == BuiltinSub::Init || backend_side(ctx) {
        return Ok(());
    }
    Err(format!(
        "vmod_directors: shard {}: shard_param.{method}() may only be used in vcl_init and in backend/pipe context",
        p.name
    ))
}

fn param_write(o: &AnyObj, ctx: &mut dyn Context, f: impl FnOnce(&mut Params)) {
    let p = this::<ParamObj>(o);
    if ctx.sub() == BuiltinSub::Init {
        f(&mut p.defaults.lock().unwrap_or_else(|e| e.into_inner()));
    } else {
        let mut cur = p.current(ctx);
        f(&mut cur);
        ctx.privs().insert(p.id, TaskParams(cur));
    }
}

fn param_clear(_: &Env, o: &AnyObj, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let p = this::<ParamObj>(o);
    param_writable(p, ctx, "clear")?;
    if ctx.sub() == BuiltinSub::Init {
        *p.defaults.lock().unwrap_or_else(|e| e.into_inner()) = Params::default();
    } else {
        ctx.privs().remove::<TaskParams>(p.id);
    }
    Ok(Value::Null)
}

fn param_set(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let po = this::<ParamObj>(o);
    param_writable(po, ctx, "set")?;
    let who = format!("vmod_directors: shard {}: shard_param.set()", po.name);
    let mut p = po.current(ctx);
    apply_args(&mut p, a, 0, ctx, &who)?;
    param_write(o, ctx, |cur| *cur = p);
    Ok(Value::Null)
}

fn param_get(o: &AnyObj, ctx: &mut dyn Context) -> Params {
    this::<ParamObj>(o).current(ctx)
}

fn param_get_by(_: &Env, o: &AnyObj, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::str(param_get(o, ctx).by.name()))
}

fn param_get_key(_: &Env, o: &AnyObj, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let p = param_get(o, ctx);
    Ok(Value::Int(key_for(ctx, &p) as i64))
}

fn param_get_alt(_: &Env, o: &AnyObj, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Int(param_get(o, ctx).alt))
}

fn param_get_warmup(_: &Env, o: &AnyObj, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Real(param_get(o, ctx).warmup))
}

fn param_get_rampup(_: &Env, o: &AnyObj, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Bool(param_get(o, ctx).rampup))
}

fn param_get_healthy(_: &Env, o: &AnyObj, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::str(param_get(o, ctx).healthy.name()))
}

fn param_use(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    // Reading a parameter set is allowed anywhere, as in varnishd (only
    // changing one is restricted).
    let p = this::<ParamObj>(o);
    let mut b = PARAM_MAGIC.to_vec();
    b.extend_from_slice(&p.id.to_be_bytes());
    Ok(Value::Blob(b.into()))
}
