//! The cache proper: objheads in sharded hash tables, Varnish's lookup decision
//! table, waiting lists, unbusy/fail, purges, expiry, LRU nuking and bans.
//!
//! Locking: the digest picks one of N shard mutexes; a shard's mutex protects its
//! objheads (variant lists and waiting lists). It is held only for the in-memory
//! scan of one objhead, never across an await, and never while taking another
//! shard's lock. Lock order is shard → ban list (read) and shard-free → LRU; the
//! ban list's write lock and the LRU locks are never held while taking a shard.
//!
//! Removal protocol: whoever sets `DYING` on an objcore (always under its shard
//! lock) removes it from the objhead in the same critical section and afterwards,
//! outside the lock, from its LRU list and drops its ban reference. The memory
//! (and the store's byte accounting) goes when the last [`ObjRef`] is dropped.

use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{
    Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak,
};

use bytes::Bytes;
use lacquer_storage::{Allocation, Body, BodyWriter, Extent, MallocStore, Segment, Stevedore};
use tokio::sync::oneshot;

use crate::ban::{BanError, BanObject, BanRequest, BanSpec};
use crate::banlist::{BanInfo, BanList};
use crate::hash::Digest;
use crate::headers::StoredHeaders;
use crate::hooks::{HookVerdict, LookupHook, ObjEvent, ObjEventFn, Subscribers};
use crate::lru::StoreRef;
use crate::object::{
    F_BUSY, F_DYING, F_FAILED, F_HFM, F_HFP, F_PRIVATE, OBJECT_FIXED_BYTES, ObjCore, ObjFlags,
    ObjKind, ObjMeta, ObjRef, ObjectData,
};
use crate::stats::CacheStats;
use crate::vary::{HeaderLookup, VarySpec};

mod persist;
pub use persist::StoredUpdate;

/// Tunables (varnishd parameters of the same names where they exist).
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Number of hash-table shards (rounded up to a power of two).
    pub shards: usize,
    /// `nuke_limit`: objects evicted at most for one allocation.
    pub nuke_limit: u32,
    /// `lru_interval`: minimum seconds between LRU moves of one object.
    pub lru_interval: f64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            shards: 256,
            nuke_limit: 50,
            lru_interval: 2.0,
        }
    }
}

/// How varnishd's fetch allocates a body's storage: the backend's length
/// at once when it was known (even when filters change the body), then
/// pieces of `fetch_chunksize`, none larger than `fetch_maxchunksize`; the
/// last piece is trimmed at the end. A piece that does not fit is asked
/// for again at half the size, down to `fetch_chunksize`, before objects
/// are nuked to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PiecePlan {
    /// The backend's body length, when known.
    pub estimate: Option<u64>,
    /// `fetch_chunksize`.
    pub chunk: u64,
    /// `fetch_maxchunksize`.
    pub max_chunk: u64,
}

impl PiecePlan {
    /// The size of the next piece when `estimate` bytes are still expected;
    /// `None` without an estimate and without a chunk size.
    fn next(&self, estimate: Option<u64>) -> Option<u64> {
        let size = match estimate {
            Some(left) if left > 0 => left,
            _ if self.chunk > 0 => self.chunk,
            _ => return None,
        };
        Some(size.min(self.max_chunk.max(1)))
    }
}

/// Storage charged for something that is not a cached object (a synthetic
/// response's object and body), given back with [`Cache::release_charge`].
#[derive(Debug)]
#[must_use = "a charge is given back with Cache::release_charge"]
pub struct Charge {
    store: StoreRef,
    bytes: u64,
    allocs: u64,
}

/// The attribute space varnishd's `cnt_synth` asks `STV_NewObject` for
/// beyond the object structure: an empty synthetic response costs
/// `Transient` 1144 bytes in one allocation on varnishd 7.1.
const SYNTH_OBJECT_SPACE: u64 = 1024;

/// What varnishd's `vrb_pull` object for a request body costs its store
/// before the body (an object without attribute space), measured on
/// varnishd 7.1.1: a 4-byte `POST` body costs Transient 132 bytes in two
/// allocations.
const REQ_BODY_OBJECT_BYTES: u64 = 128;

/// A store could not make room for an allocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Could not get storage: {wanted} bytes in store {store:?} (evicted {nuked} objects)")]
pub struct StorageError {
    /// The store.
    pub store: &'static str,
    /// Bytes requested.
    pub wanted: u64,
    /// Objects nuked trying to make room.
    pub nuked: u32,
    /// Body bytes that had room before the failure: what varnishd, which
    /// stores a body as it reads it, had read of it then.
    pub stored: u64,
}

/// What a lookup needs from the request.
#[derive(Clone, Copy)]
pub struct LookupRequest<'a> {
    /// The objhead digest from `vcl_hash`.
    pub digest: &'a Digest,
    /// `req.url` (for `req.url` bans).
    pub url: &'a [u8],
    /// Request headers (Vary matching, `req.http.*` bans).
    pub headers: &'a dyn HeaderLookup,
    /// `req.t_req`, seconds since the epoch.
    pub now: f64,
    /// `req.ttl` when set (shortens freshness).
    pub req_ttl: Option<f64>,
    /// `req.grace` when set (shortens grace).
    pub req_grace: Option<f64>,
    /// `req.hash_ignore_busy`
    pub ignore_busy: bool,
    /// `req.hash_always_miss`
    pub always_miss: bool,
    /// `req.hash_ignore_vary`
    pub ignore_vary: bool,
}

impl std::fmt::Debug for LookupRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LookupRequest")
            .field("digest", &crate::hash::digest_hex(self.digest))
            .field("url", &String::from_utf8_lossy(self.url))
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

impl<'a> LookupRequest<'a> {
    /// A plain lookup: no req.ttl/req.grace, no hash_* flags.
    pub fn new(digest: &'a Digest, url: &'a [u8], headers: &'a dyn HeaderLookup, now: f64) -> Self {
        LookupRequest {
            digest,
            url,
            headers,
            now,
            req_ttl: None,
            req_grace: None,
            ignore_busy: false,
            always_miss: false,
            ignore_vary: false,
        }
    }
}

/// The lookup decision (Varnish's `HSH_Lookup` results).
#[derive(Debug)]
pub enum Lookup {
    /// Fresh object (`HSH_HIT`).
    Hit(ObjRef),
    /// Stale object within grace (`HSH_GRACE`). `bgfetch` is the busy objcore for
    /// a background refresh when no other fetch is in progress; drop it to not
    /// refresh. The stale object can be a hit-for-pass marker still in grace
    /// (`stale.flags().hit_for_pass()`); varnishd gives those no grace.
    Grace {
        /// The stale object to deliver.
        stale: ObjRef,
        /// Busy objcore for a background fetch, if this request should start one.
        bgfetch: Option<BusyObj>,
    },
    /// Fetch needed (`HSH_MISS`): `busy` is the new busy objcore others will wait
    /// on; `stale` is an expired object still within keep, for a conditional
    /// (IMS/INM) fetch. After a successful refetch the server kills the stale
    /// object ([`Cache::kill`]), as varnishd's fetch does.
    Miss {
        /// Busy objcore this request must fetch into (or fail).
        busy: BusyObj,
        /// Stale object for revalidation.
        stale: Option<ObjRef>,
    },
    /// Hit-for-miss (`HSH_HITMISS`): fetch into `busy` without others waiting.
    /// A successful fetch replaces the marker: the server kills `marker`
    /// ([`Cache::kill`]), as varnishd does, so markers do not pile up.
    HitMiss {
        /// Busy objcore to fetch into.
        busy: BusyObj,
        /// The hit-for-miss object found.
        marker: ObjRef,
        /// vxid of the hit-for-miss object (for the `HitMiss` log record).
        vxid: u32,
        /// Its remaining ttl.
        dttl: f64,
    },
    /// Hit-for-pass (`HSH_HITPASS`): pass this request.
    HitPass {
        /// vxid of the hit-for-pass object (for the `HitPass` log record).
        vxid: u32,
        /// Its remaining ttl.
        dttl: f64,
    },
    /// A matching object is being fetched (`HSH_BUSY`): await the waiter, then
    /// look up again.
    Busy(Waiter),
}

/// A lookup's decision plus the objects bans killed on the way (`ExpBan` log
/// records: vxids).
#[derive(Debug)]
pub struct LookupResult {
    /// The decision.
    pub kind: Lookup,
    /// vxids of objects killed by bans during this lookup.
    pub banned: Vec<u32>,
    /// Variants skipped because their Vary did not match (Varnish logs a
    /// `Notice` when this reaches `vary_notice`).
    pub vary_skipped: u32,
}

/// A request parked on an objhead's waiting list. Dropping it is fine (the
/// slot is discarded at the next wake-up).
#[derive(Debug)]
pub struct Waiter {
    rx: oneshot::Receiver<()>,
}

impl Waiter {
    /// Wait until the busy object is unbusied, fails or is abandoned; then look
    /// up again.
    pub async fn wait(self) {
        // Either a wake-up or the objhead going away: both mean "look again".
        let _ = self.rx.await;
    }
}

/// How the body of a new object is provided.
#[derive(Debug)]
pub enum NewBody {
    /// No body (hit-for-miss/pass markers, HEAD-only responses).
    Empty,
    /// The body will be streamed in through the returned [`FetchBody`].
    Streamed,
    /// A body that already exists (a revalidated stale object's, a synthetic
    /// one); it is shared, not copied.
    Complete(Body),
}

/// Everything `unbusy` needs to turn a busy objcore into an object.
#[derive(Debug)]
pub struct NewObject {
    /// Identity and timing.
    pub meta: ObjMeta,
    /// Response status.
    pub status: u16,
    /// Reason phrase.
    pub reason: Bytes,
    /// Response headers to store.
    pub headers: Vec<(Bytes, Bytes)>,
    /// Whether the stored body is gzip-compressed.
    pub gzip: bool,
    /// ESI instructions for delivering the body (opaque to the cache; the
    /// server writes and reads them), when the body has ESI markup.
    pub esi: Option<Bytes>,
    /// Whether the fetch gzipped or gunzipped the backend's body (a 304
    /// refreshing the object must then weaken its new ETag).
    pub gzip_changed: bool,
    /// Body source.
    pub body: NewBody,
    /// How a complete body is charged to its store: in the pieces a fetch
    /// would have allocated, or in one piece of its length (`None`:
    /// synthetic bodies, copies).
    pub body_chunk: Option<PiecePlan>,
    /// Bytes of the Vary data varnishd keeps with a shared object, when
    /// they differ from what the object's matching spec says: varnishd
    /// also keeps `Accept-Encoding`, which Lacquer does not split variants
    /// on under `http_gzip_support`. `None`: the spec's size.
    pub vary_bytes: Option<u64>,
}

/// How many least-recently-used objects a nuke looks at to find one that is not
/// in use (Varnish walks the whole list; this bounds the time under the lock).
const NUKE_SCAN: usize = 1024;

/// Something the server may want to log (`ExpKill`/`ExpBan` records).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CacheEvent {
    /// An object was (re)scheduled to expire at `when` (`EXP_When`).
    ExpiryArmed {
        /// The object's vxid.
        vxid: u32,
        /// ttl+grace+keep end, seconds since the epoch.
        when: f64,
        /// The object's identity (stable while it lives; varnishd prints
        /// its address).
        id: usize,
        /// The object's state flags.
        flags: u32,
    },
    /// The expiry sweep, woken by a newly scheduled object or a due time,
    /// looked at the object that expires first (`EXP_expire`).
    ExpiryCheck {
        /// The object's identity, as in [`CacheEvent::ExpiryArmed`].
        id: usize,
        /// Seconds until it expires (negative when overdue).
        left: f64,
        /// The object's state flags.
        flags: u32,
    },
    /// Removed because ttl+grace+keep passed (`EXP_Expired x=VXID t=TTL`).
    Expired {
        /// The object's vxid.
        vxid: u32,
        /// Remaining ttl (negative) when removed.
        ttl_left: f64,
    },
    /// Evicted to make room (`LRU x=VXID`).
    Nuked {
        /// The object's vxid.
        vxid: u32,
    },
    /// Killed by the ban lurker (`ExpBan VXID killed for lurker`).
    LurkerBanned {
        /// The object's vxid.
        vxid: u32,
    },
}

/// Receiver of [`CacheEvent`]s; called outside all cache locks.
pub type EventSink = Arc<dyn Fn(CacheEvent) + Send + Sync>;

/// Result of `unbusy`/`insert_private`.
#[derive(Debug)]
pub struct Unbusied {
    /// The inserted object.
    pub obj: ObjRef,
    /// Writer for a [`NewBody::Streamed`] body.
    pub body: Option<FetchBody>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct DigestKey(Digest);

impl Hash for DigestKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The digest is already uniformly distributed; bytes 8..16 are not used
        // for shard selection, so they spread keys within a shard.
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[8..16]);
        state.write_u64(u64::from_le_bytes(b));
    }
}

#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

#[derive(Default)]
struct Head {
    /// Variants, newest first; busy ones are appended at the end.
    cores: Vec<Arc<ObjCore>>,
    waiters: Vec<oneshot::Sender<()>>,
}

type HeadMap = HashMap<DigestKey, Head, BuildHasherDefault<DigestHasher>>;

struct ExpEntry {
    when: f64,
    oc: Weak<ObjCore>,
}

impl PartialEq for ExpEntry {
    fn eq(&self, o: &Self) -> bool {
        self.when.total_cmp(&o.when).is_eq()
    }
}
impl Eq for ExpEntry {}
impl PartialOrd for ExpEntry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for ExpEntry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // BinaryHeap is a max-heap: reverse for earliest-first.
        o.when.total_cmp(&self.when)
    }
}

pub(crate) struct Inner {
    shards: Box<[Mutex<HeadMap>]>,
    shard_mask: usize,
    stats: Arc<CacheStats>,
    cfg: CacheConfig,
    stores: Vec<StoreRef>,
    exp: Mutex<BinaryHeap<ExpEntry>>,
    bans: RwLock<BanList>,
    newest_ban: AtomicU64,
    lurker_cursor: AtomicUsize,
    /// A lookup left the oldest ban unreferenced: the lurker has work
    /// (varnishd's `ban_kick_lurker`).
    lurker_kick: AtomicBool,
    /// When the idle lurker next wakes by itself (seconds, as f64 bits):
    /// 49.62 s after its last round.
    lurker_wake: AtomicU64,
    /// Round-robin position among the non-Transient stores.
    next_store: AtomicUsize,
    events: OnceLock<EventSink>,
    /// An object was scheduled since the last expiry sweep: the next one
    /// reports what expires first, as varnishd's expiry thread does when
    /// its inbox wakes it.
    exp_mail: AtomicBool,
    /// Who hears of objects entering and leaving the cache.
    subscribers: Subscribers,
    /// Objects by the surrogate keys of their `xkey` headers.
    xkeys: crate::xkey::XkeyIndex,
    /// Persistent stores' objects are still being put back.
    recovering: AtomicBool,
    /// While they are: the journaled bans and purges, and purges issued
    /// since, for the objects still to come (see `persist`).
    recovery_purges: Mutex<Option<Vec<lacquer_storage::disk::format::JournalEntry>>>,
    /// Objects of persistent stores' indexes, put back on first lookup.
    lazy: persist::Lazy,
}

/// The longest the ban lurker sleeps with nothing to do (varnishd's
/// "random, non-magic" 49.62 s).
const LURKER_IDLE: f64 = 49.62;

/// The object cache. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("shards", &self.inner.shards.len())
            .field("stores", &self.inner.stores)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Poisoning means a panic elsewhere; the protected data stays consistent
    // because every critical section here completes its invariants before any
    // operation that could panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts of one ban lurker step.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LurkerReport {
    /// Objects tested against at least one ban.
    pub tested: u64,
    /// Objects killed.
    pub killed: u64,
    /// Bans marked completed.
    pub completed: u64,
    /// Bans deleted from the list's tail.
    pub deleted: u64,
}

impl Cache {
    /// A cache over `stores` (a `Transient` store is added if none is named so).
    /// `now` stamps the boot-time ban.
    pub fn new(cfg: CacheConfig, stores: Vec<Arc<dyn Stevedore>>, now: f64) -> Cache {
        let n = cfg.shards.max(1).next_power_of_two();
        let stats = Arc::new(CacheStats::default());
        let mut stores: Vec<StoreRef> = stores.into_iter().map(StoreRef::new).collect();
        if !stores.iter().any(|s| s.name() == "Transient") {
            stores.push(StoreRef::new(Arc::new(MallocStore::new("Transient", None))));
        }
        let bans = BanList::new(now, &stats);
        let cache = Cache {
            inner: Arc::new(Inner {
                shards: (0..n).map(|_| Mutex::new(HeadMap::default())).collect(),
                shard_mask: n - 1,
                cfg,
                stores,
                exp: Mutex::new(BinaryHeap::new()),
                newest_ban: AtomicU64::new(bans.newest().id),
                bans: RwLock::new(bans),
                lurker_cursor: AtomicUsize::new(0),
                lurker_kick: AtomicBool::new(false),
                lurker_wake: AtomicU64::new(0),
                next_store: AtomicUsize::new(0),
                events: OnceLock::new(),
                exp_mail: AtomicBool::new(false),
                subscribers: Subscribers::default(),
                xkeys: crate::xkey::XkeyIndex::default(),
                recovering: AtomicBool::new(false),
                recovery_purges: Mutex::new(None),
                lazy: persist::Lazy::default(),
                stats,
            }),
        };
        // Objects of persistent stores come back in the background; bans
        // journaled before a restart are in force from the start.
        cache.inner.recover();
        cache
    }

    /// Whether objects of persistent stores are still being put back
    /// after startup (new objects meanwhile go to memory).
    pub fn recovering(&self) -> bool {
        self.inner.recovering.load(Ordering::Acquire)
    }

    /// Subscribes `f` to objects entering the cache (once a fetch makes
    /// them visible) and leaving it (however they go): varnishd's
    /// `ObjSubscribeEvents`. Returns the subscription's id for
    /// [`Cache::unsubscribe_objects`].
    pub fn subscribe_objects(&self, f: ObjEventFn) -> u64 {
        self.inner.subscribers.subscribe(f)
    }

    /// Ends a subscription; false if there was no such one.
    pub fn unsubscribe_objects(&self, id: u64) -> bool {
        self.inner.subscribers.unsubscribe(id)
    }

    /// Install the receiver of [`CacheEvent`]s (once; later calls are
    /// refused and return false).
    pub fn set_event_sink(&self, sink: EventSink) -> bool {
        self.inner.events.set(sink).is_ok()
    }

    /// The counters.
    pub fn stats(&self) -> &CacheStats {
        &self.inner.stats
    }

    /// A shared handle on the counters (for a publisher task).
    pub fn stats_handle(&self) -> Arc<CacheStats> {
        Arc::clone(&self.inner.stats)
    }

    /// A store by name.
    pub fn store(&self, name: &str) -> Option<StoreRef> {
        self.inner.stores.iter().find(|s| s.name() == name).cloned()
    }

    /// Charges a buffer that is not an object (an HTTP/2 request body
    /// buffer) to the store named `name`, making room as an object's
    /// allocation would (LRU nuking); `nuked` hears the vxid of every
    /// object evicted for it. The space is the caller's until it gives the
    /// allocation back with [`Cache::release_buffer`].
    pub fn charge_buffer(
        &self,
        name: &str,
        bytes: u64,
        nuked: &mut dyn FnMut(u32),
    ) -> Result<Allocation, StorageError> {
        let Some(store) = self.store(name) else {
            return Err(StorageError {
                store: "(none)",
                wanted: bytes,
                nuked: 0,
                stored: 0,
            });
        };
        self.inner.allocate_piece(&store, bytes, bytes, nuked)
    }

    /// Gives back a buffer charged with [`Cache::charge_buffer`].
    pub fn release_buffer(&self, name: &str, space: Allocation) {
        if let Some(store) = self.store(name) {
            store.stevedore().free(space.bytes, 1);
        }
    }

    /// Charges a synthetic response to `Transient` as varnishd's
    /// `cnt_synth` stores it: the object first (its fixed part and the
    /// 1024 bytes of attribute space `STV_NewObject` is given, 1144 bytes
    /// on varnishd 7.1), then the `body` bytes in pieces as `ObjGetSpace`
    /// asks for them (what is left, at most `plan.max_chunk`, halved down
    /// to `plan.chunk` before an LRU object is nuked). When a piece cannot
    /// be had, what was charged is given back and the error says what did
    /// not fit: varnishd then sends nothing ("Could not get storage"). The
    /// charge is the caller's until it gives it back with
    /// [`Cache::release_charge`].
    pub fn charge_synth(&self, body: u64, plan: PiecePlan) -> Result<Charge, StorageError> {
        let object = OBJECT_FIXED_BYTES as u64 + SYNTH_OBJECT_SPACE;
        self.charge_object(&self.transient(), object, body, plan)
    }

    /// Charges a request body's object as varnishd's `vrb_pull` makes it
    /// (`STV_NewObject` with no attribute space, 128 bytes on varnishd
    /// 7.1) and the `body` bytes of storage it asks for, in pieces of at
    /// most `plan.max_chunk` (see [`Cache::charge_synth`]), to `store`.
    pub fn charge_req_body(
        &self,
        store: &StoreRef,
        body: u64,
        plan: PiecePlan,
    ) -> Result<Charge, StorageError> {
        self.charge_object(store, REQ_BODY_OBJECT_BYTES, body, plan)
    }

    /// An object of `object` bytes and `body` bytes in pieces, each asked
    /// for at what is left (at most `plan.max_chunk`), halved down to
    /// `plan.chunk` when it does not fit before an LRU object is nuked.
    fn charge_object(
        &self,
        store: &StoreRef,
        object: u64,
        body: u64,
        plan: PiecePlan,
    ) -> Result<Charge, StorageError> {
        let sv = store.stevedore();
        let mut charge = Charge {
            store: store.clone(),
            bytes: 0,
            allocs: 0,
        };
        let mut pieces = std::iter::once((object, object));
        let mut left = body;
        loop {
            let (want, floor) = match pieces.next() {
                Some(p) => p,
                None if left > 0 => {
                    let size = left.min(plan.max_chunk.max(1));
                    (sv.grant(size).clamp(1, size), plan.chunk.max(1))
                }
                None => break,
            };
            match self.inner.allocate_piece(store, want, floor, &mut |_| {}) {
                Ok(a) => {
                    if charge.allocs > 0 {
                        left = left.saturating_sub(a.bytes);
                    }
                    charge.bytes += a.bytes;
                    charge.allocs += 1;
                }
                Err(e) => {
                    self.release_charge(charge);
                    return Err(e);
                }
            }
        }
        Ok(charge)
    }

    /// Gives back a charge of [`Cache::charge_synth`] or
    /// [`Cache::charge_req_body`].
    pub fn release_charge(&self, charge: Charge) {
        if charge.allocs > 0 {
            charge.store.stevedore().free(charge.bytes, charge.allocs);
        }
    }

    /// All stores, in configuration order (`Transient` included).
    pub fn stores(&self) -> &[StoreRef] {
        &self.inner.stores
    }

    /// The store the next cacheable object goes to when VCL names none:
    /// the non-Transient stores in turn (varnishd's `STV_next`), Transient
    /// when there is no other.
    pub fn next_store(&self) -> StoreRef {
        let stores: Vec<&StoreRef> = self
            .inner
            .stores
            .iter()
            .filter(|s| s.name() != "Transient" && !s.stevedore().chosen_only())
            .collect();
        if stores.is_empty() {
            return self.transient();
        }
        let i = self.inner.next_store.fetch_add(1, Ordering::Relaxed);
        stores[i % stores.len()].clone()
    }

    /// The `Transient` store.
    pub fn transient(&self) -> StoreRef {
        // Invariant: `new` always adds a Transient store.
        self.store("Transient")
            .expect("Transient store always exists")
    }

    /// Look up an object: Varnish's `HSH_Lookup` decision table. Never waits; a
    /// [`Lookup::Busy`] result carries the [`Waiter`] to await before retrying.
    pub fn lookup(&self, req: &LookupRequest<'_>) -> LookupResult {
        self.lookup_inner(req, None)
    }

    /// [`Cache::lookup`] with a [`LookupHook`] deciding about the
    /// candidates (varnishd's `VCF`, which vmods install for one lookup).
    /// `req.always_miss` leaves the hook unasked, as there is no scan.
    pub fn lookup_hooked(
        &self,
        req: &LookupRequest<'_>,
        hook: &mut dyn LookupHook,
    ) -> LookupResult {
        self.lookup_inner(req, Some(hook))
    }

    fn lookup_inner(
        &self,
        req: &LookupRequest<'_>,
        mut hook: Option<&mut dyn LookupHook>,
    ) -> LookupResult {
        let inner = &self.inner;
        let now = req.now;
        let mut removed: Vec<Arc<ObjCore>> = Vec::new();
        let mut expired = 0usize;
        let mut banned = Vec::new();
        let mut touch = None;
        let mut vary_skipped = 0u32;
        // Variants still only in a persistent store's index come in first.
        inner.materialize(req.digest, now);
        let kind = {
            let mut shard = inner.shard(req.digest);
            // Counted as varnishd's critbit table counts its lookups: each
            // one, then those that had to insert the objhead.
            CacheStats::inc(&inner.stats.hcb_nolock);
            let head = shard.entry(DigestKey(*req.digest)).or_insert_with(|| {
                CacheStats::inc(&inner.stats.hcb_lock);
                CacheStats::inc(&inner.stats.hcb_insert);
                CacheStats::inc(&inner.stats.n_objecthead);
                Head::default()
            });
            if req.always_miss {
                Lookup::Miss {
                    busy: inner.new_busy(head, req.digest),
                    stale: None,
                }
            } else {
                let mut busy_found = false;
                let mut found = None;
                let mut exp: Option<usize> = None;
                let mut exp_t_origin = 0.0;
                let mut predicted: Option<VarySpec> = None;
                // Where the hook's candidates are in `head.cores`.
                let mut candidates: Vec<usize> = Vec::new();
                for (i, oc) in head.cores.iter().enumerate() {
                    let f = oc.flags();
                    if f & (F_DYING | F_FAILED) != 0 {
                        continue;
                    }
                    if f & F_BUSY != 0 {
                        if req.ignore_busy {
                            continue;
                        }
                        let vary = oc.vary.get().or_else(|| oc.predicted_vary.get());
                        if !req.ignore_vary && vary.is_some_and(|v| !v.matches(req.headers)) {
                            vary_skipped += 1;
                            continue;
                        }
                        busy_found = true;
                        continue;
                    }
                    if oc.ttl.get() <= 0.0 {
                        continue;
                    }
                    if oc.exp_when.get() <= now {
                        // Past ttl+grace+keep: expire it now rather than wait
                        // for the sweeper.
                        oc.flags.fetch_or(F_DYING, Ordering::AcqRel);
                        CacheStats::inc(&inner.stats.n_expired);
                        // Expired ones are kept first in `removed`.
                        removed.insert(expired, Arc::clone(oc));
                        expired += 1;
                        continue;
                    }
                    if inner.ban_check(oc, req) {
                        oc.flags.fetch_or(F_DYING, Ordering::AcqRel);
                        banned.push(oc.vxid.load(Ordering::Relaxed));
                        removed.push(Arc::clone(oc));
                        continue;
                    }
                    if !req.ignore_vary
                        && let Some(v) = oc.vary.get()
                        && !v.matches(req.headers)
                    {
                        vary_skipped += 1;
                        if predicted.is_none() {
                            predicted = Some(v.for_request(req.headers));
                        }
                        continue;
                    }
                    if let Some(h) = hook.as_deref_mut() {
                        let verdict = h.candidate(candidates.len());
                        candidates.push(i);
                        match verdict {
                            HookVerdict::Default => {}
                            HookVerdict::Continue => continue,
                            HookVerdict::Hit => {
                                found = Some(i);
                                break;
                            }
                            HookVerdict::Miss => break,
                        }
                    }
                    if oc.ttl_end(req.req_ttl) > now {
                        found = Some(i);
                        break;
                    }
                    let t_origin = oc.t_origin.get();
                    if oc.ttl_end(None) <= now && t_origin > exp_t_origin {
                        exp = Some(i);
                        exp_t_origin = t_origin;
                    }
                }
                if let Some(pick) = hook.and_then(|h| h.finish())
                    && let Some(&i) = candidates.get(pick)
                {
                    found = Some(i);
                }
                let found = found.map(|i| Arc::clone(&head.cores[i]));
                let exp = exp.map(|i| Arc::clone(&head.cores[i]));
                if !removed.is_empty() {
                    head.cores.retain(|oc| oc.flags() & F_DYING == 0);
                }
                let kind = inner.decide(head, req, found, exp, busy_found, &mut touch);
                if let (Lookup::Miss { busy, .. }, Some(p)) = (&kind, predicted) {
                    let _ = busy.oc.predicted_vary.set(p);
                }
                kind
            }
        };
        for oc in &removed {
            inner.finish_removal(oc);
        }
        for oc in &removed[..expired] {
            inner.emit(|| CacheEvent::Expired {
                vxid: oc.vxid.load(Ordering::Relaxed),
                ttl_left: oc.ttl_end(None) - now,
            });
        }
        if let Some(oc) = touch {
            inner.touch(&oc, now);
        }
        LookupResult {
            kind,
            banned,
            vary_skipped,
        }
    }

    /// Change the size of store `name` at run time (a memory tier under
    /// `memory_target`) and, when it now holds more than that, nuke its
    /// least recently used objects until it fits or nothing idle is left.
    /// The number nuked; `None` when there is no such store or its size
    /// is fixed.
    pub fn resize_store(&self, name: &str, bytes: u64) -> Option<usize> {
        let store = self.store(name)?;
        if !store.stevedore().set_limit(bytes) {
            return None;
        }
        let mut nuked = 0;
        while store.stevedore().stats().g_bytes.load(Ordering::Relaxed) > bytes
            && self.inner.nuke_one(&store).is_some()
        {
            nuked += 1;
        }
        Some(nuked)
    }

    /// Purge all variants of `digest` (`HSH_Purge`): with `ttl`, `grace` and
    /// `keep` all 0 the objects are removed (hard purge, counted in
    /// `n_purges`/`n_obj_purged`, and each one in `n_expired` as varnishd's
    /// expiry thread does); otherwise their ttl/grace/keep are reduced to
    /// the given values if that shortens them (soft purge; a negative value
    /// leaves that one unchanged). Busy objects are
    /// skipped. Returns the number of objects affected.
    pub fn purge(&self, digest: &Digest, now: f64, ttl: f64, grace: f64, keep: f64) -> usize {
        let inner = &self.inner;
        let is_purge = ttl == 0.0 && grace == 0.0 && keep == 0.0;
        inner.journal(|| lacquer_storage::disk::format::JournalEntry::Purge {
            time: now,
            digest: *digest,
            ttl,
            grace,
            keep,
        });
        // Variants still only in an index are purged as the others.
        inner.materialize(digest, now);
        let mut removed = Vec::new();
        let mut rearmed = Vec::new();
        let mut total = 0;
        {
            let mut shard = inner.shard(digest);
            let key = DigestKey(*digest);
            if let Some(head) = shard.get_mut(&key) {
                for oc in &head.cores {
                    if oc.flags() & (F_BUSY | F_DYING) != 0 {
                        continue;
                    }
                    total += 1;
                    if !is_purge {
                        reduce(oc, now, ttl, grace, keep);
                        if oc.exp_when.get() > now {
                            rearmed.push(Arc::clone(oc));
                            continue;
                        }
                    }
                    oc.flags.fetch_or(F_DYING, Ordering::AcqRel);
                    removed.push(Arc::clone(oc));
                }
                if !removed.is_empty() {
                    head.cores.retain(|oc| oc.flags() & F_DYING == 0);
                }
                remove_head_if_unused(&mut shard, &key, &inner.stats);
            }
        }
        for oc in &removed {
            inner.finish_removal(oc);
            // varnishd 7.1 purges by re-arming the object to expire now
            // (`EXP_Rearm` mails it to the expiry thread: `exp_mailed`), so
            // its expiry thread logs and counts each one as expired, a hair
            // past its end (`EXP_Expired x=VXID t=-0`).
            CacheStats::inc(&inner.stats.exp_mailed);
            CacheStats::inc(&inner.stats.n_expired);
            inner.emit(|| CacheEvent::Expired {
                vxid: oc.vxid.load(Ordering::Relaxed),
                ttl_left: -0.0,
            });
        }
        for oc in &rearmed {
            inner.exp_push(oc);
        }
        if is_purge {
            CacheStats::inc(&inner.stats.n_purges);
            CacheStats::add(&inner.stats.n_obj_purged, total as u64);
        }
        total
    }

    /// vmod xkey's purge: every object tagged with one of `keys` by its
    /// `xkey`/`X-HashTwo` headers, key by key as the vmod walks them. A
    /// hard purge re-arms each one to expire at once (removed, `exp_mailed`
    /// and `n_expired` counted as a purge counts them) and counts it under
    /// every key that lists it, as the vmod does (its expiry thread has not
    /// taken the object out of the other keys' lists yet). A soft one sets
    /// the ttl to end `now`, keeping grace and keep, and leaves out objects
    /// whose ttl has already run out. Busy objects are skipped. Returns the
    /// count.
    pub fn xkey_purge(&self, keys: &[&[u8]], now: f64, soft: bool) -> usize {
        let inner = &self.inner;
        let mut n = 0;
        let mut purged: Vec<Arc<ObjCore>> = Vec::new();
        for list in inner.xkeys.find(keys) {
            for oc in list {
                if oc.flags() & F_BUSY != 0 {
                    continue;
                }
                if purged.iter().any(|p| Arc::ptr_eq(p, &oc)) {
                    // Already re-armed by an earlier key of this call: a
                    // soft purge finds its ttl spent, a hard one re-arms
                    // it again.
                    n += usize::from(!soft);
                    continue;
                }
                if oc.flags() & F_DYING != 0 {
                    continue;
                }
                if soft {
                    if oc.t_origin.get() + oc.ttl.get() <= now {
                        continue;
                    }
                    reduce(&oc, now, 0.0, -1.0, -1.0);
                    n += 1;
                    purged.push(Arc::clone(&oc));
                    if oc.exp_when.get() > now {
                        inner.exp_push(&oc);
                        continue;
                    }
                } else {
                    n += 1;
                    purged.push(Arc::clone(&oc));
                }
                if inner.kill(&oc) {
                    CacheStats::inc(&inner.stats.exp_mailed);
                    CacheStats::inc(&inner.stats.n_expired);
                    inner.emit(|| CacheEvent::Expired {
                        vxid: oc.vxid.load(Ordering::Relaxed),
                        ttl_left: -0.0,
                    });
                }
            }
        }
        n
    }

    /// Remove an object from the cache now (`HSH_Kill`, e.g. a stale object
    /// replaced by a refetch). False if it was already gone.
    pub fn kill(&self, obj: &ObjRef) -> bool {
        self.inner.kill_mailed(&obj.0)
    }

    /// Remove every object whose ttl+grace+keep has passed at `now`; returns how
    /// many were removed (`n_expired`). Call it periodically (e.g. every second).
    pub fn expire_due(&self, now: f64) -> usize {
        let inner = &self.inner;
        let mut due = Vec::new();
        let mut first = None;
        {
            let mut heap = lock(&inner.exp);
            let mail = inner.exp_mail.swap(false, Ordering::AcqRel);
            // Entries of objects gone or rescheduled are dropped, so that
            // the first one left is the next real expiry.
            while let Some(e) = heap.peek() {
                match e.oc.upgrade() {
                    Some(oc)
                        if oc.flags() & F_DYING == 0
                            && oc.exp_when.get().to_bits() == e.when.to_bits() =>
                    {
                        if mail || e.when <= now {
                            first = Some((oc, e.when));
                        }
                        break;
                    }
                    _ => {
                        heap.pop();
                    }
                }
            }
            while heap.peek().is_some_and(|e| e.when <= now) {
                if let Some(e) = heap.pop() {
                    due.push(e);
                }
            }
        }
        if let Some((oc, when)) = first {
            inner.emit(|| CacheEvent::ExpiryCheck {
                id: Arc::as_ptr(&oc) as usize,
                left: when - now,
                flags: oc.flags(),
            });
        }
        let mut n = 0;
        let mut requeue = Vec::new();
        for e in due {
            let Some(oc) = e.oc.upgrade() else { continue };
            let f = oc.flags();
            if f & F_DYING != 0 || oc.exp_when.get().to_bits() != e.when.to_bits() {
                continue;
            }
            if f & F_BUSY != 0 {
                requeue.push(e);
                continue;
            }
            if inner.kill(&oc) {
                CacheStats::inc(&inner.stats.n_expired);
                inner.emit(|| CacheEvent::Expired {
                    vxid: oc.vxid.load(Ordering::Relaxed),
                    ttl_left: oc.ttl_end(None) - now,
                });
                n += 1;
            }
        }
        if !requeue.is_empty() {
            lock(&inner.exp).extend(requeue);
        }
        n
    }

    /// Removes every object that is not being fetched, as a restart of
    /// varnishd's child (whose memory storage does not survive it) would;
    /// objects of persistent stores stay, as their records do. Returns how
    /// many went.
    pub fn clear(&self) -> usize {
        let inner = &self.inner;
        let entries: Vec<_> = lock(&inner.exp).drain().collect();
        let mut keep = Vec::new();
        let mut n = 0;
        for e in entries {
            let Some(oc) = e.oc.upgrade() else { continue };
            // Objects of persistent stores outlive the child, as their
            // records do.
            let persistent = oc
                .store
                .get()
                .is_some_and(|s| s.stevedore().disk().is_some());
            if oc.flags() & F_BUSY != 0 || persistent {
                keep.push(e);
            } else if inner.kill(&oc) {
                n += 1;
            }
        }
        lock(&inner.exp).extend(keep);
        n
    }

    /// When the next object expires (for scheduling the sweeper), if any.
    pub fn next_expiry(&self) -> Option<f64> {
        lock(&self.inner.exp).peek().map(|e| e.when)
    }

    /// Insert an object that is not in the hash table (`HSH_Private`: pass,
    /// hit-for-pass fetches). Its bytes are charged to `store` until the last
    /// reference is dropped; nobody else can find it.
    pub fn insert_private(
        &self,
        obj: NewObject,
        store: &StoreRef,
    ) -> Result<Unbusied, StorageError> {
        self.inner.fill_private(obj, store, true)
    }

    /// Add a ban (`ban` CLI command, VCL `ban()`); `now` is its timestamp.
    pub fn ban(&self, spec: BanSpec, now: f64) {
        let inner = &self.inner;
        // Journaled first: a ban in effect is never lost in a crash.
        inner.journal(|| lacquer_storage::disk::format::JournalEntry::Ban {
            time: now,
            text: spec.render(),
        });
        let req = spec.uses_req();
        let mut list = inner.bans_write();
        let id = list.add(spec, now, &inner.stats);
        inner.newest_ban.store(id, Ordering::Release);
        // As varnishd's BAN_Commit: only a ban the lurker can test wakes
        // it, and the woken lurker cuts the list's unreferenced tail at
        // once (it tests objects when the ban comes of `ban_lurker_age`).
        if !req {
            list.trim(&inner.stats);
        }
    }

    /// Parse and add a ban given as one string (`std.ban()`).
    pub fn ban_str(&self, s: &str, now: f64) -> Result<(), BanError> {
        self.ban(BanSpec::parse(s)?, now);
        Ok(())
    }

    /// `ban.list` output.
    pub fn ban_list(&self) -> String {
        self.inner.bans_read().render()
    }

    /// The ban list as data, newest first (for `ban.list -j`).
    pub fn ban_info(&self) -> Vec<BanInfo> {
        self.inner.bans_read().info()
    }

    /// One step of the ban lurker: test up to about `budget` objects against
    /// `obj.*`-only bans older than `lurker_age` seconds (oldest first, req
    /// bans and younger ones skipped), kill matches, move survivors' ban
    /// references forward up to the first ban they were not tested against,
    /// mark the tested bans completed once a whole pass is done and drop
    /// unreferenced bans from the list's tail. With `cutoff` (`ban_cutoff`,
    /// 0 for none), objects hanging on a ban older than the `cutoff`-th
    /// newest are removed untested. Call it periodically
    /// (`ban_lurker_sleep`); it walks the shards round-robin.
    pub fn ban_lurker_step(
        &self,
        now: f64,
        lurker_age: f64,
        budget: usize,
        cutoff: usize,
    ) -> LurkerReport {
        let inner = &self.inner;
        let stats = &inner.stats;
        let mut report = LurkerReport::default();
        // As varnishd's lurker thread, which sleeps between its rounds: it
        // works when a ban comes of `lurker_age`, when kicked, or every
        // 49.62 s; until then even the list's unreferenced tail stays
        // (`bans`, `bans_deleted` show it).
        let kicked = inner.lurker_kick.swap(false, Ordering::AcqRel);
        let due = now >= f64::from_bits(inner.lurker_wake.load(Ordering::Acquire));
        // While persistent stores' objects are still being put back, a pass
        // has not seen every object: it completes no ban.
        let partial = inner.lazy_pending();
        // As varnishd's lurker: every obj ban old enough is lurkable; req
        // bans and younger ones are left to lookups, and objects cannot
        // move past them.
        let (lurkable, newest_lurkable, stops, cutoff_id) = {
            let list = inner.bans_read();
            // Objects hanging on a ban older than this one are dropped.
            let cutoff_id = (cutoff > 0 && list.list.len() > cutoff)
                .then(|| list.list[list.list.len() - cutoff].id);
            let mut lurkable = Vec::new();
            let mut stops = Vec::new();
            for b in &list.list {
                if b.is_completed() {
                    continue;
                }
                if !b.req && b.spec.is_some() && b.time <= now - lurker_age {
                    lurkable.push(Arc::clone(b));
                } else {
                    stops.push(b.id);
                }
            }
            let newest = lurkable.last().map_or(0, |b| b.id);
            (lurkable, newest, stops, cutoff_id)
        };
        // Asleep: nothing of age to test, nothing woke it.
        if lurkable.is_empty() && cutoff_id.is_none() && !kicked && !due {
            return report;
        }
        // Objects on bans older than this are looked at.
        let horizon = newest_lurkable.max(cutoff_id.unwrap_or(0));
        let nshards = inner.shards.len();
        let mut examined = 0usize;
        let mut visited = 0usize;
        // Objects to kill, with whether the cutoff (not a ban) condemned
        // them; killed after the tail is cut, as varnishd's lurker only
        // re-arms them and they let go of their ban when the expiry thread
        // frees them.
        let mut doomed: Vec<(Arc<ObjCore>, bool)> = Vec::new();
        while horizon > 0 && examined < budget && visited < nshards {
            let si = inner.lurker_cursor.fetch_add(1, Ordering::Relaxed) & inner.shard_mask;
            visited += 1;
            let cands: Vec<Arc<ObjCore>> = {
                let shard = lock(&inner.shards[si]);
                shard
                    .values()
                    .flat_map(|h| h.cores.iter())
                    .filter(|oc| {
                        let b = oc.ban_id.load(Ordering::Acquire);
                        oc.flags() & (F_BUSY | F_DYING | F_FAILED) == 0 && b != 0 && b < horizon
                    })
                    .cloned()
                    .collect()
            };
            for oc in cands {
                examined += 1;
                let cur = oc.ban_id.load(Ordering::Acquire);
                let Some(data) = oc.data.get() else { continue };
                if cur == 0 || cur >= horizon {
                    continue;
                }
                if cutoff_id.is_some_and(|c| cur < c) {
                    doomed.push((oc, true));
                    continue;
                }
                let obj = ban_object(&oc, data);
                let mut hit = false;
                let mut tested = false;
                // Oldest first, as varnishd tests them.
                for b in lurkable.iter().filter(|b| b.id > cur) {
                    if b.is_completed() {
                        continue;
                    }
                    let Some(spec) = &b.spec else { continue };
                    let (m, n) = spec.eval(&obj, None, now);
                    tested = true;
                    CacheStats::add(&stats.bans_lurker_tests_tested, n as u64);
                    CacheStats::inc(&stats.bans_lurker_tested);
                    if m {
                        hit = true;
                        break;
                    }
                }
                if tested {
                    report.tested += 1;
                }
                if hit {
                    doomed.push((oc, false));
                } else {
                    // Checked against every lurkable ban newer than its own:
                    // it moves up to just before the first ban it still has
                    // to be checked against at lookup.
                    let dest = {
                        let list = inner.bans_read();
                        let stop = stops.iter().copied().find(|id| *id > cur);
                        list.list
                            .iter()
                            .map(|b| b.id)
                            .filter(|id| *id > cur && stop.is_none_or(|s| *id < s))
                            .max()
                    };
                    if let Some(dest) = dest {
                        inner.move_ban(&oc, cur, dest);
                    }
                }
            }
        }
        // A full pass tested every object hanging on an older ban against
        // every lurkable ban: those are complete.
        if !partial && !lurkable.is_empty() && visited == nshards && examined < budget {
            for b in &lurkable {
                if !b.is_completed() && b.mark_completed(stats) {
                    report.completed += 1;
                }
            }
        }
        if !partial {
            report.completed += inner.bans_read().complete_moot(stats, now - lurker_age);
        }
        report.deleted = inner.bans_write().trim(stats);
        for (oc, cut) in doomed {
            if inner.kill_mailed(&oc) {
                if cut {
                    CacheStats::inc(&stats.bans_lurker_obj_killed_cutoff);
                } else {
                    CacheStats::inc(&stats.bans_lurker_obj_killed);
                    inner.emit(|| CacheEvent::LurkerBanned {
                        vxid: oc.vxid.load(Ordering::Relaxed),
                    });
                }
                report.killed += 1;
            }
        }
        // A round that had bans to test comes back after `ban_lurker_sleep`
        // (the next step), as varnishd's does: a pass cut short goes on,
        // and the tail the killed objects let go of is cut then. Else the
        // lurker sleeps until a ban comes of age or 49.62 s pass.
        if horizon > 0 {
            inner.lurker_kick.store(true, Ordering::Release);
        }
        inner
            .lurker_wake
            .store((now + LURKER_IDLE).to_bits(), Ordering::Release);
        report
    }
}

/// `EXP_Reduce`: only ever shorten ttl/grace/keep, then re-arm.
fn reduce(oc: &ObjCore, now: f64, ttl: f64, grace: f64, keep: f64) {
    let t_origin = oc.t_origin.get();
    if ttl >= 0.0 && now + ttl - t_origin < oc.ttl.get() {
        oc.ttl.set(now + ttl - t_origin);
    }
    if grace >= 0.0 && grace < oc.grace.get() {
        oc.grace.set(grace);
    }
    if keep >= 0.0 && keep < oc.keep.get() {
        oc.keep.set(keep);
    }
    oc.exp_when.set(oc.compute_exp_when());
}

fn remove_head_if_unused(shard: &mut HeadMap, key: &DigestKey, stats: &CacheStats) {
    if shard
        .get(key)
        .is_some_and(|h| h.cores.is_empty() && h.waiters.is_empty())
    {
        shard.remove(key);
        CacheStats::dec(&stats.n_objecthead);
    }
}

fn ban_object<'a>(oc: &ObjCore, data: &'a ObjectData) -> BanObject<'a> {
    BanObject {
        status: data.status,
        headers: &data.headers,
        t_origin: oc.t_origin.get(),
        ttl: oc.ttl.get(),
        grace: oc.grace.get(),
        keep: oc.keep.get(),
    }
}

fn wake(waiters: Vec<oneshot::Sender<()>>, stats: &CacheStats) {
    let mut n = 0;
    for w in waiters {
        if w.send(()).is_ok() {
            n += 1;
        }
    }
    CacheStats::add(&stats.busy_wakeup, n);
}

impl Inner {
    /// The `Transient` store (`Cache::new` always has one).
    fn transient_store(&self) -> StoreRef {
        self.stores
            .iter()
            .find(|s| s.name() == "Transient")
            .cloned()
            .unwrap_or_else(|| self.stores[self.stores.len() - 1].clone())
    }

    fn shard(&self, d: &Digest) -> MutexGuard<'_, HeadMap> {
        let i = (usize::from(d[0]) | usize::from(d[1]) << 8) & self.shard_mask;
        lock(&self.shards[i])
    }

    fn bans_read(&self) -> RwLockReadGuard<'_, BanList> {
        self.bans.read().unwrap_or_else(|p| p.into_inner())
    }

    fn bans_write(&self) -> RwLockWriteGuard<'_, BanList> {
        self.bans.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Create a busy objcore on `head` referencing the newest ban.
    fn new_busy(self: &Arc<Self>, head: &mut Head, digest: &Digest) -> BusyObj {
        let ban_id = {
            let list = self.bans_read();
            let b = list.newest();
            b.add_ref();
            b.id
        };
        let oc = Arc::new(ObjCore::new_busy(*digest, ban_id, &self.stats));
        head.cores.push(Arc::clone(&oc));
        BusyObj {
            oc,
            cache: Arc::clone(self),
            done: false,
        }
    }

    /// The tail of the decision table, once the variant scan is done.
    fn decide(
        self: &Arc<Self>,
        head: &mut Head,
        req: &LookupRequest<'_>,
        found: Option<Arc<ObjCore>>,
        exp: Option<Arc<ObjCore>>,
        busy_found: bool,
        touch: &mut Option<Arc<ObjCore>>,
    ) -> Lookup {
        let now = req.now;
        if let Some(oc) = found {
            let f = oc.flags();
            let vxid = oc.vxid.load(Ordering::Relaxed);
            let dttl = oc.ttl_end(req.req_ttl) - now;
            if f & F_HFP != 0 {
                return Lookup::HitPass { vxid, dttl };
            }
            if f & F_HFM != 0 {
                return Lookup::HitMiss {
                    busy: self.new_busy(head, req.digest),
                    marker: ObjRef(Arc::clone(&oc)),
                    vxid,
                    dttl,
                };
            }
            oc.hits.fetch_add(1, Ordering::Relaxed);
            *touch = Some(Arc::clone(&oc));
            return Lookup::Hit(ObjRef(oc));
        }
        if let Some(e) = exp.as_ref().filter(|e| e.flags() & F_HFM != 0) {
            return Lookup::HitMiss {
                vxid: e.vxid.load(Ordering::Relaxed),
                dttl: e.ttl_end(req.req_ttl) - now,
                busy: self.new_busy(head, req.digest),
                marker: ObjRef(Arc::clone(e)),
            };
        }
        let in_grace = |e: &Arc<ObjCore>| e.grace_end(req.req_ttl, req.req_grace) >= now;
        if !busy_found {
            let busy = self.new_busy(head, req.digest);
            return match exp {
                Some(e) if in_grace(&e) => {
                    e.hits.fetch_add(1, Ordering::Relaxed);
                    *touch = Some(Arc::clone(&e));
                    Lookup::Grace {
                        stale: ObjRef(e),
                        bgfetch: Some(busy),
                    }
                }
                stale => Lookup::Miss {
                    busy,
                    stale: stale.map(ObjRef),
                },
            };
        }
        if let Some(e) = exp.filter(in_grace) {
            e.hits.fetch_add(1, Ordering::Relaxed);
            *touch = Some(Arc::clone(&e));
            return Lookup::Grace {
                stale: ObjRef(e),
                bgfetch: None,
            };
        }
        let (tx, rx) = oneshot::channel();
        if head.waiters.len() >= 8 && head.waiters.len().is_power_of_two() {
            head.waiters.retain(|w| !w.is_closed());
        }
        head.waiters.push(tx);
        CacheStats::inc(&self.stats.busy_sleep);
        Lookup::Busy(Waiter { rx })
    }

    /// Test an object against bans newer than the one it last passed; true if
    /// one matches (the caller kills it). Called under the shard lock. As
    /// varnishd's `BAN_CheckObject`, the lurker is woken when the oldest ban
    /// is left unreferenced.
    fn ban_check(&self, oc: &ObjCore, req: &LookupRequest<'_>) -> bool {
        let Some(banned) = self.ban_check_inner(oc, req) else {
            return false;
        };
        // A banned object is killed right after (its ban goes with it).
        if banned
            || self
                .bans_read()
                .list
                .front()
                .is_some_and(|b| b.refs.load(Ordering::Acquire) == 0)
        {
            self.lurker_kick.store(true, Ordering::Release);
        }
        banned
    }

    /// `None` when the object had nothing to be tested against; else
    /// whether a ban matched.
    fn ban_check_inner(&self, oc: &ObjCore, req: &LookupRequest<'_>) -> Option<bool> {
        let cur = oc.ban_id.load(Ordering::Acquire);
        if cur == self.newest_ban.load(Ordering::Acquire) {
            return None;
        }
        let list = self.bans_read();
        let newest = list.newest();
        if cur == newest.id || cur == 0 {
            return None;
        }
        let data = oc.data.get()?;
        let obj = ban_object(oc, data);
        let breq = BanRequest {
            url: req.url,
            headers: req.headers,
        };
        // Counted once per object check, as varnishd does.
        CacheStats::inc(&self.stats.bans_tested);
        for b in list.newer_than(cur) {
            if b.is_completed() {
                continue;
            }
            let Some(spec) = &b.spec else { continue };
            let (m, n) = spec.eval(&obj, Some(&breq), req.now);
            CacheStats::add(&self.stats.bans_tests_tested, n as u64);
            if m {
                CacheStats::inc(&self.stats.bans_obj_killed);
                return Some(true);
            }
        }
        if oc
            .ban_id
            .compare_exchange(cur, newest.id, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            if let Some(old) = list.get(cur) {
                old.drop_ref();
            }
            newest.add_ref();
        }
        Some(false)
    }

    fn move_ban(&self, oc: &ObjCore, cur: u64, target: u64) {
        let list = self.bans_read();
        let (Some(old), Some(new)) = (list.get(cur), list.get(target)) else {
            return;
        };
        if oc
            .ban_id
            .compare_exchange(cur, target, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            old.drop_ref();
            new.add_ref();
        }
    }

    /// Move an object to the fresh end of its LRU list (at most once per
    /// `lru_interval`).
    fn touch(&self, oc: &Arc<ObjCore>, now: f64) {
        if now - oc.last_lru.get() < self.cfg.lru_interval {
            return;
        }
        let Some(store) = oc.store.get() else { return };
        oc.last_lru.set(now);
        if store.lru().touch(oc) {
            CacheStats::inc(&self.stats.n_lru_moved);
        }
    }

    /// The removal owner's second half: LRU list and ban reference.
    fn finish_removal(&self, oc: &ObjCore) {
        self.forget(oc);
        self.xkeys.remove(oc);
        if let Some(store) = oc.store.get() {
            store.lru().remove(oc);
        }
        // A busy objcore whose fetch failed was never in the cache.
        if oc.flags() & F_BUSY == 0 {
            self.subscribers
                .send(ObjEvent::Expire, std::ptr::from_ref(oc) as usize);
        }
        let b = oc.ban_id.swap(0, Ordering::AcqRel);
        if b != 0
            && let Some(ban) = self.bans_read().get(b)
        {
            ban.drop_ref();
        }
    }

    /// Remove an object from its objhead (if not already dying). Returns whether
    /// this call removed it.
    fn kill(&self, oc: &Arc<ObjCore>) -> bool {
        let key = DigestKey(oc.digest);
        let killed = {
            let mut shard = self.shard(&oc.digest);
            let killed = match shard.get_mut(&key) {
                Some(head) if oc.flags.fetch_or(F_DYING, Ordering::AcqRel) & F_DYING == 0 => {
                    head.cores.retain(|c| !Arc::ptr_eq(c, oc));
                    true
                }
                _ => false,
            };
            remove_head_if_unused(&mut shard, &key, &self.stats);
            killed
        };
        if killed {
            self.finish_removal(oc);
        } else if oc.flags() & F_PRIVATE != 0 {
            oc.flags.fetch_or(F_DYING, Ordering::AcqRel);
        }
        killed
    }

    /// [`Inner::kill`] as varnishd's `EXP_Remove` does it for an object
    /// replaced, banned or nuked: the removal is mailed to the expiry
    /// thread (`exp_mailed`, `exp_received`).
    fn kill_mailed(&self, oc: &Arc<ObjCore>) -> bool {
        let killed = self.kill(oc);
        if killed {
            CacheStats::inc(&self.stats.exp_mailed);
        }
        killed
    }

    fn exp_push(&self, oc: &Arc<ObjCore>) {
        CacheStats::inc(&self.stats.exp_mailed);
        let when = oc.exp_when.get();
        lock(&self.exp).push(ExpEntry {
            when,
            oc: Arc::downgrade(oc),
        });
        self.exp_mail.store(true, Ordering::Release);
        self.emit(|| CacheEvent::ExpiryArmed {
            vxid: oc.vxid.load(Ordering::Relaxed),
            when,
            id: Arc::as_ptr(oc) as usize,
            flags: oc.flags(),
        });
    }

    fn emit(&self, ev: impl FnOnce() -> CacheEvent) {
        if let Some(sink) = self.events.get() {
            sink(ev());
        }
    }

    /// Charge `bytes` to `store`, nuking up to `nuke_limit` LRU objects of that
    /// store to make room.
    fn allocate(&self, store: &StoreRef, bytes: u64) -> Result<Allocation, StorageError> {
        self.allocate_piece(store, bytes, bytes, &mut |_| {})
    }

    /// Charge a body piece of `bytes` to `store` as varnishd's fetch asks
    /// for one: when it does not fit, ask again at half the size until a
    /// size of `floor` or less was tried, and only then nuke an LRU object
    /// (up to `nuke_limit`, telling `on_nuke` each one's vxid) and start
    /// over.
    fn allocate_piece(
        &self,
        store: &StoreRef,
        bytes: u64,
        floor: u64,
        on_nuke: &mut dyn FnMut(u32),
    ) -> Result<Allocation, StorageError> {
        self.allocate_piece_sized(store, bytes, floor, on_nuke)
            .map(|(_, a)| a)
    }

    /// [`Inner::allocate_piece`], also saying the size that was granted
    /// (what the caller may fill; the allocation's `bytes` may be rounded
    /// up to the store's unit).
    fn allocate_piece_sized(
        &self,
        store: &StoreRef,
        bytes: u64,
        floor: u64,
        on_nuke: &mut dyn FnMut(u32),
    ) -> Result<(u64, Allocation), StorageError> {
        let sv = store.stevedore();
        let err = |nuked| StorageError {
            store: sv.name(),
            wanted: bytes,
            nuked,
            stored: 0,
        };
        let mut nuked = 0u32;
        loop {
            let mut size = bytes.max(1);
            loop {
                if let Ok(a) = sv.try_alloc(size) {
                    return Ok((size, a));
                }
                if size <= floor || size == 1 {
                    break;
                }
                size /= 2;
            }
            if sv.limit().is_some_and(|l| size > l) {
                return Err(err(nuked));
            }
            // Objects of the index, never looked up since the restart, go
            // before any object in the cache.
            if sv.disk().is_some_and(|d| d.evict_indexed()) {
                continue;
            }
            if nuked >= self.cfg.nuke_limit {
                CacheStats::inc(&self.stats.n_lru_limited);
                return Err(err(nuked));
            }
            let Some(vxid) = self.nuke_one(store) else {
                return Err(err(nuked));
            };
            on_nuke(vxid);
            nuked += 1;
        }
    }

    /// Evict the least recently used idle object of `store`; its vxid.
    fn nuke_one(&self, store: &StoreRef) -> Option<u32> {
        loop {
            let oc = store.lru().victim(NUKE_SCAN)?;
            if self.kill_mailed(&oc) {
                CacheStats::inc(&self.stats.n_lru_nuked);
                let vxid = oc.vxid.load(Ordering::Relaxed);
                self.emit(|| CacheEvent::Nuked { vxid });
                return Some(vxid);
            }
            // Already being removed by someone else: take it off the list so
            // the scan moves on.
            store.lru().remove(&oc);
        }
    }

    /// A private objcore (`HSH_Private`) filled with `obj`; `head` says
    /// whether its headers are charged (see [`BusyObj::unbusy`] for one
    /// whose headers another objcore already holds).
    fn fill_private(
        self: &Arc<Self>,
        obj: NewObject,
        store: &StoreRef,
        head: bool,
    ) -> Result<Unbusied, StorageError> {
        let oc = Arc::new(ObjCore::new_busy([0; 32], 0, &self.stats));
        oc.flags.fetch_or(F_PRIVATE, Ordering::AcqRel);
        let out = self.fill(&oc, obj, store, head)?;
        oc.flags.fetch_and(!F_BUSY, Ordering::AcqRel);
        Ok(out)
    }

    /// Fill a busy objcore: charge its store (its headers too when `head`),
    /// attach data and timing, put it on the LRU list and the expiry heap.
    /// Does not clear BUSY.
    fn fill(
        self: &Arc<Self>,
        oc: &Arc<ObjCore>,
        obj: NewObject,
        store: &StoreRef,
        head: bool,
    ) -> Result<Unbusied, StorageError> {
        // A persistent store still scanning its file allocates nothing: the
        // object lives in memory instead.
        let transient;
        let store = if store.stevedore().disk().is_some_and(|d| d.recovering()) {
            transient = self.transient_store();
            &transient
        } else {
            store
        };
        let NewObject {
            meta,
            status,
            reason,
            headers,
            gzip,
            esi,
            gzip_changed,
            body,
            body_chunk,
            vary_bytes,
        } = obj;
        let (body, writer): (Body, Option<BodyWriter>) = match body {
            NewBody::Empty => (Body::empty(), None),
            NewBody::Complete(b) => (b, None),
            NewBody::Streamed => {
                let (w, b) = Body::new();
                (b, Some(w))
            }
        };
        let data = ObjectData {
            status,
            reason,
            headers: StoredHeaders::new(&headers),
            gzip,
            esi,
            gzip_changed,
            body,
        };
        // Charged as varnishd's storage allocates: the object with its
        // headers, then a complete body (in pieces when it was produced
        // without a known length, the last one trimmed as `trim_last`
        // says), then ESI data.
        // A private (pass) object has no Vary data.
        let vary = match vary_bytes {
            _ if oc.flags() & F_PRIVATE != 0 => 0,
            Some(n) => n,
            None => oc.vary.get().map_or(0, VarySpec::storage_size) as u64,
        };
        // A body already in this persistent store (kept by a 304 refresh)
        // is shared, not copied: its extents stay where they are.
        let shared = store
            .stevedore()
            .disk()
            .is_some_and(|d| d.holds(&data.body));
        let body_len = if shared { 0 } else { data.body.len_so_far() };
        let plan = body_chunk.unwrap_or(PiecePlan {
            estimate: Some(body_len),
            chunk: body_len,
            max_chunk: body_len,
        });
        // Each allocation is made as varnishd's fetch asks for it: the
        // object (with its headers) at its size; a body piece of what is
        // left (the plan's size), halved down to `fetch_chunksize` when it
        // does not fit before anything is nuked (`sml_stv_alloc` with
        // LESS_MEM_ALLOCED_IS_OK), the next piece asked for what is still
        // left; ESI data at its size. A piece that cannot be had fails the
        // whole object: what was charged is given back.
        let sv = store.stevedore();
        let mut allocs: u64 = 0;
        let mut charged = 0;
        let mut held: Vec<Extent> = Vec::new();
        let mut body_exts: Vec<(Extent, u64)> = Vec::new();
        let fail = |charged: u64, allocs: u64, e: StorageError| {
            if allocs > 0 {
                sv.free(charged, allocs);
            }
            Err(e)
        };
        if head {
            match self.allocate(store, data.charge_bytes() as u64 + vary) {
                Ok(a) => {
                    charged += a.bytes;
                    allocs += 1;
                    held.extend(a.extent);
                }
                Err(e) => return fail(charged, allocs, e),
            }
        }
        let mut estimate = plan.estimate;
        let mut piece = 0;
        let mut trimmed = 0;
        let mut last_piece = 0;
        let mut left = body_len;
        while left > 0 {
            let want = plan.next(estimate).unwrap_or(left);
            let floor = match body_chunk {
                Some(p) if p.chunk > 0 => p.chunk,
                _ => want,
            };
            let (size, a) = match self.allocate_piece_sized(store, want, floor, &mut |_| {}) {
                Ok(got) => got,
                Err(e) => {
                    let stored = body_len - left;
                    return fail(charged, allocs, StorageError { stored, ..e });
                }
            };
            charged += a.bytes;
            allocs += 1;
            last_piece = a.bytes;
            piece = size;
            trimmed = size.saturating_sub(left);
            if let Some(x) = a.extent {
                body_exts.push((x, size));
            }
            left = left.saturating_sub(size);
            estimate = estimate.map(|e| e.saturating_sub(size));
        }
        if let Some(e) = data.esi.as_ref().filter(|e| !e.is_empty()) {
            match self.allocate(store, e.len() as u64) {
                Ok(a) => {
                    charged += a.bytes;
                    allocs += 1;
                    held.extend(a.extent);
                }
                Err(e) => return fail(charged, allocs, e),
            }
        }
        if trimmed > 0 {
            let used = piece - trimmed;
            if let Some(a) = trim_last(sv.as_ref(), last_piece, used) {
                sv.free(last_piece, 1);
                charged = charged - last_piece + a.bytes;
                if let (Some(x), Some(last)) = (a.extent, body_exts.last_mut()) {
                    *last = (x, used);
                }
            }
        }
        let mut data = data;
        if !body_exts.is_empty() {
            match write_body(&data.body, &body_exts) {
                Ok(b) => data.body = b,
                Err(_) => {
                    sv.free(charged, allocs);
                    return Err(StorageError {
                        store: store.stevedore().name(),
                        wanted: body_len,
                        nuked: 0,
                        stored: 0,
                    });
                }
            }
        }
        *lock(&oc.held) = held;
        oc.charged.store(charged, Ordering::Relaxed);
        oc.allocs.store(allocs, Ordering::Relaxed);
        // Set once: `fill` runs once per objcore (BusyObj is consumed).
        let _ = oc.store.set(store.clone());
        let _ = oc.data.set(data);
        CacheStats::inc(&self.stats.n_object);
        let ObjMeta {
            vxid,
            t_origin,
            ttl,
            grace,
            keep,
            kind,
        } = meta;
        oc.vxid.store(vxid, Ordering::Relaxed);
        oc.t_origin.set(t_origin);
        oc.ttl.set(ttl);
        oc.grace.set(grace);
        oc.keep.set(keep);
        oc.exp_when.set(oc.compute_exp_when());
        oc.last_lru.set(t_origin);
        match kind {
            ObjKind::Normal => {}
            ObjKind::HitForMiss => {
                oc.flags.fetch_or(F_HFM, Ordering::AcqRel);
            }
            ObjKind::HitForPass => {
                oc.flags.fetch_or(F_HFP, Ordering::AcqRel);
            }
        }
        let body = writer.map(|w| FetchBody {
            writer: Some(w),
            ext: None,
            oc: Arc::clone(oc),
            store: store.clone(),
            cache: Arc::clone(self),
            expected: None,
            plan: PiecePlan {
                estimate: None,
                chunk: 0,
                max_chunk: u64::MAX,
            },
            spare: 0,
            piece: 0,
            crc: store.stevedore().disk().map(|d| d.body_checksum()),
        });
        Ok(Unbusied {
            obj: ObjRef(Arc::clone(oc)),
            body,
        })
    }

    /// A busy objcore's fetch failed or was abandoned: remove it and wake the
    /// waiting list so another request can try.
    fn fail_busy(&self, oc: &Arc<ObjCore>) {
        let key = DigestKey(oc.digest);
        let waiters = {
            let mut shard = self.shard(&oc.digest);
            oc.flags.fetch_or(F_FAILED | F_DYING, Ordering::AcqRel);
            let w = match shard.get_mut(&key) {
                Some(head) => {
                    head.cores.retain(|c| !Arc::ptr_eq(c, oc));
                    std::mem::take(&mut head.waiters)
                }
                None => Vec::new(),
            };
            remove_head_if_unused(&mut shard, &key, &self.stats);
            w
        };
        wake(waiters, &self.stats);
        self.finish_removal(oc);
    }
}

/// The lifetime [`BusyObj::refresh_in_place`] gives a revalidated object.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lifetime {
    /// When the response was validated (seconds since the epoch).
    pub t_origin: f64,
    pub ttl: f64,
    pub grace: f64,
    pub keep: f64,
}

/// A busy objcore: the right (and duty) to fetch an object others may be
/// waiting for. Finish it with [`unbusy`](Self::unbusy); dropping it or calling
/// [`fail`](Self::fail) marks the fetch failed and wakes the waiting list.
pub struct BusyObj {
    oc: Arc<ObjCore>,
    cache: Arc<Inner>,
    done: bool,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheInner")
    }
}

impl std::fmt::Debug for BusyObj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusyObj")
            .field("digest", &crate::hash::digest_hex(&self.oc.digest))
            .field("flags", &ObjFlags(self.oc.flags()))
            .finish()
    }
}

impl BusyObj {
    /// The objhead digest.
    pub fn digest(&self) -> &Digest {
        &self.oc.digest
    }

    /// Whether requests wait on this objhead's waiting list (varnishd's
    /// `oc->objhead->waitinglist` not empty).
    pub fn has_waiters(&self) -> bool {
        let shard = self.cache.shard(&self.oc.digest);
        shard
            .get(&DigestKey(self.oc.digest))
            .is_some_and(|head| !head.waiters.is_empty())
    }

    /// Record the Vary spec as soon as the backend response headers are known,
    /// so requests with other header values stop waiting on this fetch. Only the
    /// first call counts; returns whether it was recorded.
    pub fn set_vary(&self, spec: VarySpec) -> bool {
        self.oc.vary.set(spec).is_ok()
    }

    /// Insert the fetched object into the cache and wake the waiting list
    /// (`HSH_Unbusy`). On a storage failure the busy objcore is failed (waiters
    /// woken) and the error returned (the server answers 503).
    ///
    /// A hit-for-miss or hit-for-pass object keeps no body in the cache:
    /// varnishd delivers it to the request that fetched it and then slims
    /// it to its headers (`HSH_Cancel`, `ObjSlim`). Here the body goes to a
    /// private objcore that only the fetch and that request hold, charged
    /// for the body alone, so its storage is freed when they let go of it;
    /// the marker in the cache is charged for the headers, as varnishd's
    /// slimmed object is. The returned [`Unbusied`] is the body's.
    pub fn unbusy(mut self, obj: NewObject, store: &StoreRef) -> Result<Unbusied, StorageError> {
        self.done = true;
        let inner = Arc::clone(&self.cache);
        let (marker, body) = match obj.meta.kind {
            ObjKind::HitForMiss | ObjKind::HitForPass if !matches!(obj.body, NewBody::Empty) => {
                let marker = NewObject {
                    meta: obj.meta,
                    status: obj.status,
                    reason: obj.reason.clone(),
                    headers: obj.headers.clone(),
                    gzip: obj.gzip,
                    esi: None,
                    gzip_changed: obj.gzip_changed,
                    body: NewBody::Empty,
                    body_chunk: None,
                    vary_bytes: obj.vary_bytes,
                };
                match inner.fill_private(obj, store, false) {
                    Ok(b) => (marker, Some(b)),
                    Err(e) => {
                        inner.fail_busy(&self.oc);
                        return Err(e);
                    }
                }
            }
            _ => (obj, None),
        };
        let out = match inner.fill(&self.oc, marker, store, true) {
            Ok(out) => out,
            Err(e) => {
                inner.fail_busy(&self.oc);
                return Err(e);
            }
        };
        // As varnishd's EXP_Insert: subscribers hear of the object before
        // anything can find it, expire it or purge it (so never an expire
        // before its insert).
        inner
            .subscribers
            .send(ObjEvent::Insert, Arc::as_ptr(&self.oc) as usize);
        inner.xkeys.insert(&self.oc);
        if let Some(store) = self.oc.store.get() {
            store.lru().insert(&self.oc);
        }
        inner.exp_push(&self.oc);
        let key = DigestKey(self.oc.digest);
        let waiters = {
            let mut shard = inner.shard(&self.oc.digest);
            self.oc.flags.fetch_and(!F_BUSY, Ordering::AcqRel);
            match shard.get_mut(&key) {
                Some(head) => {
                    if let Some(pos) = head.cores.iter().position(|c| Arc::ptr_eq(c, &self.oc)) {
                        let oc = head.cores.remove(pos);
                        head.cores.insert(0, oc);
                    }
                    std::mem::take(&mut head.waiters)
                }
                None => Vec::new(),
            }
        };
        wake(waiters, &inner.stats);
        if out.body.is_none() {
            inner.persist(&self.oc, None);
        }
        Ok(body.unwrap_or(out))
    }

    /// Revalidates `stale` in place instead of inserting a new object
    /// (Varnish Enterprise's fast 304, `utils.fast_304()`): `stale` takes
    /// the lifetime `life` (its origin time, ttl, grace and keep; its
    /// vxid and kind stay) and keeps its stored headers, body and store
    /// charges, so nothing is copied or charged again; it moves to the
    /// front of its objhead and of its LRU list and is re-armed for
    /// expiry. This busy objcore is withdrawn (not failed) and its
    /// waiters are woken to find `stale`.
    ///
    /// A persistent store writes the new lifetime to the object's record
    /// (as for a soft purge), naming the same body extents. Hands the busy objcore back, untouched, when `stale` cannot be
    /// refreshed: it left the cache meanwhile (purged, expired, killed),
    /// it is of another objhead, or it is private.
    pub fn refresh_in_place(mut self, stale: &ObjRef, life: Lifetime) -> Result<(), BusyObj> {
        let oc = &stale.0;
        if oc.digest != self.oc.digest || oc.flags() & (F_PRIVATE | F_BUSY) != 0 {
            return Err(self);
        }
        let inner = Arc::clone(&self.cache);
        let key = DigestKey(self.oc.digest);
        let waiters = {
            let mut shard = inner.shard(&self.oc.digest);
            let Some(head) = shard.get_mut(&key) else {
                return Err(self);
            };
            // Under the objhead's lock, so a concurrent kill or expiry
            // either happened before (and the object is not there) or
            // waits for the new lifetime.
            let Some(pos) = head.cores.iter().position(|c| Arc::ptr_eq(c, oc)) else {
                return Err(self);
            };
            if oc.flags() & F_DYING != 0 {
                return Err(self);
            }
            oc.t_origin.set(life.t_origin);
            oc.ttl.set(life.ttl);
            oc.grace.set(life.grace);
            oc.keep.set(life.keep);
            oc.exp_when.set(oc.compute_exp_when());
            let refreshed = head.cores.remove(pos);
            head.cores.insert(0, refreshed);
            self.oc.flags.fetch_or(F_DYING, Ordering::AcqRel);
            head.cores.retain(|c| !Arc::ptr_eq(c, &self.oc));
            std::mem::take(&mut head.waiters)
        };
        self.done = true;
        inner.exp_push(oc);
        // A persistent store records the new lifetime (a record naming the
        // same body); nothing is written for the others.
        inner.persist(oc, None);
        inner.touch(oc, life.t_origin);
        wake(waiters, &inner.stats);
        inner.finish_removal(&self.oc);
        Ok(())
    }

    /// The fetch failed (`HSH_Fail`).
    pub fn fail(mut self) {
        self.done = true;
        self.cache.fail_busy(&self.oc);
    }
}

impl Drop for BusyObj {
    fn drop(&mut self) {
        if !self.done {
            self.cache.fail_busy(&self.oc);
        }
    }
}

/// Unused bytes below which varnishd leaves the last piece of a body as it
/// is (`sml_trimstore`).
const TRIM_MIN_SLACK: u64 = 512;

/// varnishd's trim of a body's last piece of `space` bytes holding `used`:
/// with at least [`TRIM_MIN_SLACK`] unused it takes a piece of `used`
/// bytes (without nuking; on failure the old piece stays). The caller
/// moves the bytes and frees the old piece. Returns the new piece, `None`
/// when the old one stays.
fn trim_last(sv: &dyn Stevedore, space: u64, used: u64) -> Option<Allocation> {
    if used == 0 || space.saturating_sub(used) < TRIM_MIN_SLACK {
        return None;
    }
    sv.try_alloc(used).ok()
}

/// Copy a complete body into file store extents, each filled up to its
/// capacity (the size it was allocated for), and return the body made of
/// them. The writes are blocking: bodies that arrive complete (synthetic
/// ones, those kept by a 304 revalidation, ESI and gzip results) are
/// written in one go by the fetch that stores them.
fn write_body(body: &Body, exts: &[(Extent, u64)]) -> std::io::Result<Body> {
    let mut out = Vec::new();
    let mut exts = exts.iter();
    let mut cur: Option<(&Extent, u64, u64)> = None;
    for seg in body.segments().unwrap_or(&[]) {
        let mut bytes = seg
            .read_blocking()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        while !bytes.is_empty() {
            if cur.is_none_or(|(_, cap, used)| used >= cap) {
                let (x, cap) = exts
                    .next()
                    .ok_or_else(|| std::io::Error::other("body longer than its storage"))?;
                cur = Some((x, *cap, 0));
            }
            let Some((x, cap, used)) = cur.as_mut() else {
                break;
            };
            let take = (*cap - *used).min(bytes.len() as u64);
            let part = bytes.split_to(take as usize);
            out.push(Segment::File(x.write(*used, &part)?));
            *used += take;
        }
    }
    Ok(Body::from_parts(out))
}

/// The writer of a streamed object body. Storage is charged to the object's
/// store (evicting LRU objects when full) the way varnishd allocates it: the
/// rest of a known length at once, or `fetch_chunksize` pieces while the
/// length is unknown, the unused tail given back when the body is complete.
/// Dropping it unfinished, or [`fail`](Self::fail), fails the body and
/// removes the object from the cache.
#[derive(Debug)]
pub struct FetchBody {
    writer: Option<BodyWriter>,
    /// The file store extent being filled and the bytes written to it.
    ext: Option<(Extent, u64)>,
    oc: Arc<ObjCore>,
    store: StoreRef,
    cache: Arc<Inner>,
    /// Body bytes still expected, when the length is known.
    expected: Option<u64>,
    /// Piece sizes; unplanned (chunk 0), each segment gets its own piece.
    plan: PiecePlan,
    /// Bytes charged but not filled yet.
    spare: u64,
    /// Size of the piece being filled.
    piece: u64,
    /// For a persistent store: the body's checksum so far.
    crc: Option<lacquer_storage::disk::format::Crc>,
}

impl FetchBody {
    /// How storage is allocated from now on (see [`PiecePlan`]), as
    /// varnishd's fetch asks for it.
    pub fn plan(&mut self, plan: PiecePlan) {
        self.expected = plan.estimate;
        self.plan = plan;
    }

    /// Append a segment. Storage is allocated as planned, in the pieces the
    /// store grants; a segment that runs past an allocation is split at its
    /// end. On a storage failure the rest is not appended (the caller should
    /// then [`fail`](Self::fail)).
    pub fn push(&mut self, mut seg: Bytes) -> Result<(), StorageError> {
        let sv = self.store.stevedore();
        while !seg.is_empty() {
            let need = seg.len() as u64;
            if self.spare == 0 {
                // The piece just filled, for a private body's delivery to
                // give back once it has sent it.
                self.record_piece(self.piece);
                let planned = self.plan.next(self.expected).unwrap_or(need);
                let want = sv.grant(planned).clamp(1, planned);
                let floor = match self.plan.chunk {
                    0 => want,
                    chunk => chunk,
                };
                let got = self
                    .cache
                    .allocate_piece(&self.store, want, floor, &mut |_| {})?;
                self.oc.charged.fetch_add(got.bytes, Ordering::Relaxed);
                self.oc.allocs.fetch_add(1, Ordering::Relaxed);
                self.spare = got.bytes;
                self.piece = got.bytes;
                self.ext = got.extent.map(|x| (x, 0));
            }
            let take = need.min(self.spare);
            let piece = seg.split_to(take as usize);
            self.spare -= take;
            if let Some(left) = self.expected.as_mut() {
                *left = left.saturating_sub(take);
            }
            if let Some(w) = self.writer.as_mut() {
                match self.ext.as_mut() {
                    Some((x, used)) => {
                        let span = x.write(*used, &piece).map_err(|_| StorageError {
                            store: sv.name(),
                            wanted: take,
                            nuked: 0,
                            stored: 0,
                        })?;
                        *used += take;
                        if let Some(c) = self.crc.as_mut() {
                            c.update(&piece);
                        }
                        w.push_segment(Segment::File(span));
                    }
                    None => w.push(piece),
                }
            }
        }
        Ok(())
    }

    /// Records a filled memory piece of `bytes` ending at the body's
    /// current length, when the object is private
    /// ([`ObjRef::release_delivered`]); a file store's extents stay with
    /// the object, as bytes read from them may still be on their way out.
    fn record_piece(&self, bytes: u64) {
        if bytes == 0 || self.ext.is_some() || self.oc.flags() & F_PRIVATE == 0 {
            return;
        }
        let end = self.len();
        lock(&self.oc.pieces).push_back((end, bytes));
    }

    /// Trims the last piece once the body is complete, as varnishd does:
    /// its bytes move to a piece of their size when enough is unused.
    /// Returns the size the last piece is charged at.
    fn trim(&mut self) -> u64 {
        let ext = self.ext.take();
        if self.spare == 0 {
            return self.piece;
        }
        let sv = self.store.stevedore();
        let used = self.piece - self.spare;
        self.spare = 0;
        let Some(a) = trim_last(sv.as_ref(), self.piece, used) else {
            return self.piece;
        };
        // A file store's bytes are copied to the new extent and the body's
        // spans pointed at it; readers still on the old one keep it alive.
        if let (Some((old, _)), Some(new), Some(w)) = (ext, &a.extent, self.writer.as_mut())
            && (old.copy_to(new, used).is_err() || !w.relocate(&old, new))
        {
            // Could not move: keep the old piece, give the new one back.
            sv.free(a.bytes, 1);
            return self.piece;
        }
        sv.free(self.piece, 1);
        let charged = &self.oc.charged;
        charged.fetch_add(a.bytes, Ordering::Relaxed);
        charged.fetch_sub(self.piece, Ordering::Relaxed);
        a.bytes
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.writer.as_ref().map_or(0, BodyWriter::len)
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body complete.
    pub fn finish(mut self) {
        let in_file = self.ext.is_some();
        let last = self.trim();
        if !in_file {
            self.record_piece(last);
        }
        if let Some(w) = self.writer.take() {
            w.finish();
            let crc = self.crc.take();
            self.cache.persist(&self.oc, crc);
        }
    }

    /// The fetch failed mid-body: readers get an error, the object leaves the
    /// cache.
    pub fn fail(mut self) {
        self.fail_inner();
    }

    fn fail_inner(&mut self) {
        if let Some(w) = self.writer.take() {
            w.fail();
            self.oc.flags.fetch_or(F_FAILED, Ordering::AcqRel);
            self.cache.kill(&self.oc);
        }
    }
}

impl Drop for FetchBody {
    fn drop(&mut self) {
        self.fail_inner();
    }
}
