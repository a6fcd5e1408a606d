//! Objects: the per-variant core ([`ObjCore`], internal) and what the server sees of
//! it ([`ObjRef`], [`ObjectData`], [`ObjFlags`], [`ObjMeta`]).
//!
//! An objcore is created busy by a lookup miss, filled in once by `unbusy`, and
//! from then on only its timing (purge/rearm), flags, hit counter, LRU stamp and
//! ban reference change; all of those are atomics so a cache hit reads an object
//! without taking any lock beyond the shard lookup. The stored response
//! ([`ObjectData`]) is set exactly once and is immutable afterwards.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use lacquer_storage::Body;

use crate::hash::Digest;
use crate::headers::StoredHeaders;
use crate::lru::StoreRef;
use crate::stats::CacheStats;
use crate::vary::{HeaderLookup, VarySpec};

pub(crate) const F_BUSY: u32 = 1;
pub(crate) const F_FAILED: u32 = 2;
pub(crate) const F_PRIVATE: u32 = 4;
pub(crate) const F_HFM: u32 = 8;
pub(crate) const F_HFP: u32 = 16;
pub(crate) const F_DYING: u32 = 32;
/// Put back by the recovery of a persistent store (it ranks behind objects
/// fetched since startup).
pub(crate) const F_RECOVERED: u32 = 64;
/// The client let go of a private object still being fetched: the fetch
/// stops reading its body (varnishd's `OC_F_ABANDON`).
pub(crate) const F_ABANDON: u32 = 128;

/// A snapshot of an objcore's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjFlags(pub(crate) u32);

impl ObjFlags {
    /// Being fetched; not yet usable.
    pub fn busy(self) -> bool {
        self.0 & F_BUSY != 0
    }
    /// The fetch failed.
    pub fn failed(self) -> bool {
        self.0 & F_FAILED != 0
    }
    /// Not in the cache (pass).
    pub fn private(self) -> bool {
        self.0 & F_PRIVATE != 0
    }
    /// Hit-for-miss marker.
    pub fn hit_for_miss(self) -> bool {
        self.0 & F_HFM != 0
    }
    /// Hit-for-pass marker.
    pub fn hit_for_pass(self) -> bool {
        self.0 & F_HFP != 0
    }
    /// Removed from the cache (expired, purged, banned, nuked or killed).
    pub fn dying(self) -> bool {
        self.0 & F_DYING != 0
    }
    /// Nobody delivers this private object any more ([`ObjRef::abandon`]).
    pub fn abandoned(self) -> bool {
        self.0 & F_ABANDON != 0
    }
    /// A private object, a hit-for-miss or a hit-for-pass: one only the
    /// request that fetched it delivers.
    pub fn transient(self) -> bool {
        self.0 & (F_PRIVATE | F_HFM | F_HFP) != 0
    }
}

/// What kind of object an `unbusy` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjKind {
    /// A cacheable response.
    Normal,
    /// `beresp.uncacheable`: later lookups miss without waiting (hit-for-miss).
    HitForMiss,
    /// `return (pass(DURATION))` from `vcl_backend_response`: later lookups pass.
    HitForPass,
}

/// Identity and timing of a new object.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObjMeta {
    /// The backend transaction's vxid (`obj.xid`, logged by `Hit`/`HitMiss`).
    pub vxid: u32,
    /// When the response was generated/validated (seconds since the epoch).
    pub t_origin: f64,
    /// Time to live from `t_origin`.
    pub ttl: f64,
    /// Grace after the ttl.
    pub grace: f64,
    /// Keep (for conditional revalidation) after the grace.
    pub keep: f64,
    /// Normal, hit-for-miss or hit-for-pass.
    pub kind: ObjKind,
}

/// The stored response of an object. Immutable once inserted.
#[derive(Debug)]
pub struct ObjectData {
    /// Response status.
    pub status: u16,
    /// Response reason phrase.
    pub reason: Bytes,
    /// Response headers in order, packed.
    pub headers: StoredHeaders,
    /// Whether the stored body is gzip-compressed by the cache.
    pub gzip: bool,
    /// ESI instructions (`obj.can_esi` when present), opaque to the cache.
    pub esi: Option<Bytes>,
    /// Whether the fetch gzipped or gunzipped the backend's body.
    pub gzip_changed: bool,
    /// The body (possibly still being fetched).
    pub body: Body,
}

impl ObjectData {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.header(name)
    }

    /// `Last-Modified`, if present (for `If-Modified-Since` revalidation).
    pub fn last_modified(&self) -> Option<&[u8]> {
        self.header("last-modified")
    }

    /// `ETag`, if present (for `If-None-Match` revalidation).
    pub fn etag(&self) -> Option<&[u8]> {
        self.header("etag")
    }

    /// What the object costs its store beyond its body, counted as
    /// varnishd's storage counts it so that `SM?.g_bytes`/`g_space` and LRU
    /// eviction match varnishd's for the same objects: its fixed object
    /// structure, plus the header block as varnishd sizes it (4 bytes of
    /// count and status, then protocol, status, reason and each
    /// `Name: value`, each NUL-terminated, and a final NUL, rounded up to 8).
    /// ESI data is a separate allocation, as in varnishd.
    pub(crate) fn charge_bytes(&self) -> usize {
        let fields: usize = "HTTP/1.1\0".len()
            + "200\0".len()
            + self.reason.len()
            + 1
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + ": ".len() + v.len() + 1)
                .sum::<usize>();
        let header_block = (4 + fields + 1).next_multiple_of(8);
        OBJECT_FIXED_BYTES + header_block
    }
}

/// The fixed part of an object's charge: varnishd's object structure with
/// its fixed-size attributes (VXID, flags, gzip bits, Last-Modified). Measured
/// on varnishd 7.1 (malloc store, `SMA.*.g_bytes`): a body-less object whose
/// only header is `Content-Length: 0` costs 160 bytes, 40 of them its header
/// block.
pub(crate) const OBJECT_FIXED_BYTES: usize = 120;

/// An f64 stored in an `AtomicU64`.
#[derive(Debug, Default)]
pub(crate) struct AtomicF64(AtomicU64);

impl AtomicF64 {
    pub(crate) fn new(v: f64) -> Self {
        AtomicF64(AtomicU64::new(v.to_bits()))
    }
    pub(crate) fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
    pub(crate) fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed)
    }
}

/// One variant of an objhead. See the module documentation.
#[derive(Debug)]
pub(crate) struct ObjCore {
    pub(crate) digest: Digest,
    pub(crate) flags: AtomicU32,
    pub(crate) vxid: AtomicU32,
    pub(crate) t_origin: AtomicF64,
    pub(crate) ttl: AtomicF64,
    pub(crate) grace: AtomicF64,
    pub(crate) keep: AtomicF64,
    /// `t_origin + ttl + grace + keep`: when the expiry removes it.
    pub(crate) exp_when: AtomicF64,
    pub(crate) hits: AtomicU64,
    pub(crate) last_lru: AtomicF64,
    /// Key in the store's LRU map; 0 when not on an LRU list.
    pub(crate) lru_key: AtomicU64,
    /// Id of the newest ban this object was checked against; 0 = no reference.
    pub(crate) ban_id: AtomicU64,
    pub(crate) vary: OnceLock<VarySpec>,
    /// While busy and before its response is known: the variant it is
    /// expected to be, from the Vary of the variants the request that
    /// created it did not match. Requests of other variants need not wait.
    pub(crate) predicted_vary: OnceLock<VarySpec>,
    pub(crate) data: OnceLock<ObjectData>,
    pub(crate) store: OnceLock<StoreRef>,
    /// Bytes and allocations charged to `store`, returned on drop.
    pub(crate) charged: AtomicU64,
    pub(crate) allocs: AtomicU64,
    /// File store extents charged for the object itself and its ESI data
    /// (its body's are held by the body); given back on drop.
    pub(crate) held: std::sync::Mutex<Vec<lacquer_storage::Extent>>,
    /// A private object's filled memory body pieces not yet given back:
    /// (body offset where the piece ends, bytes charged), in body order.
    /// [`ObjRef::release_delivered`] frees those its one delivery passed.
    pub(crate) pieces: std::sync::Mutex<std::collections::VecDeque<(u64, u64)>>,
    stats: Arc<CacheStats>,
}

impl ObjCore {
    pub(crate) fn new_busy(digest: Digest, ban_id: u64, stats: &Arc<CacheStats>) -> ObjCore {
        CacheStats::inc(&stats.n_objectcore);
        ObjCore {
            digest,
            flags: AtomicU32::new(F_BUSY),
            vxid: AtomicU32::new(0),
            t_origin: AtomicF64::new(0.0),
            ttl: AtomicF64::new(0.0),
            grace: AtomicF64::new(0.0),
            keep: AtomicF64::new(0.0),
            exp_when: AtomicF64::new(0.0),
            hits: AtomicU64::new(0),
            last_lru: AtomicF64::new(0.0),
            lru_key: AtomicU64::new(0),
            ban_id: AtomicU64::new(ban_id),
            vary: OnceLock::new(),
            predicted_vary: OnceLock::new(),
            data: OnceLock::new(),
            store: OnceLock::new(),
            charged: AtomicU64::new(0),
            allocs: AtomicU64::new(0),
            held: std::sync::Mutex::new(Vec::new()),
            pieces: std::sync::Mutex::new(std::collections::VecDeque::new()),
            stats: Arc::clone(stats),
        }
    }

    pub(crate) fn flags(&self) -> u32 {
        self.flags.load(Ordering::Acquire)
    }

    /// `EXP_Ttl`: end of freshness, honouring a shorter `req.ttl`.
    pub(crate) fn ttl_end(&self, req_ttl: Option<f64>) -> f64 {
        let mut r = self.ttl.get();
        if let Some(t) = req_ttl
            && t > 0.0
            && t < r
        {
            r = t;
        }
        self.t_origin.get() + r
    }

    /// `EXP_Ttl_grace`: end of grace, honouring a shorter `req.grace`.
    pub(crate) fn grace_end(&self, req_ttl: Option<f64>, req_grace: Option<f64>) -> f64 {
        let mut g = self.grace.get();
        if let Some(rg) = req_grace
            && rg >= 0.0
            && rg < g
        {
            g = rg;
        }
        self.ttl_end(req_ttl) + g
    }

    pub(crate) fn compute_exp_when(&self) -> f64 {
        self.t_origin.get() + self.ttl.get() + self.grace.get() + self.keep.get()
    }
}

impl Drop for ObjCore {
    fn drop(&mut self) {
        if let Some(store) = self.store.get() {
            let bytes = *self.charged.get_mut();
            let allocs = *self.allocs.get_mut();
            if allocs > 0 {
                store.stevedore().free(bytes, allocs);
            }
        }
        CacheStats::dec(&self.stats.n_objectcore);
        if self.data.get().is_some() {
            CacheStats::dec(&self.stats.n_object);
        }
    }
}

impl std::fmt::Debug for ObjRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjRef")
            .field("vxid", &self.vxid())
            .field("flags", &self.flags())
            .field("t_origin", &self.t_origin())
            .field("ttl", &self.ttl())
            .finish_non_exhaustive()
    }
}

/// A counted reference to an inserted (no longer busy) object. Holding it keeps
/// the object's memory alive even after it leaves the cache, like Varnish's
/// objcore references.
#[derive(Clone)]
pub struct ObjRef(pub(crate) Arc<ObjCore>);

impl ObjRef {
    /// A private (pass) object's delivery has sent its body up to byte
    /// `offset`: the body pieces wholly before it go back to their store
    /// now, as varnishd frees a private object's delivered storage while
    /// it streams, instead of when the object is dropped. Only the memory
    /// pieces the fetch finished are given back; nothing for a cached
    /// object (it records none).
    pub fn release_delivered(&self, offset: u64) {
        let oc = &self.0;
        let Some(store) = oc.store.get() else {
            return;
        };
        let mut pieces = oc.pieces.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(&(end, bytes)) = pieces.front()
            && end <= offset
        {
            pieces.pop_front();
            // Moved off the object's charge, so its drop does not free it
            // again.
            oc.charged.fetch_sub(bytes, Ordering::Relaxed);
            oc.allocs.fetch_sub(1, Ordering::Relaxed);
            store.stevedore().free(bytes, 1);
        }
    }

    /// The stored response.
    pub fn data(&self) -> &ObjectData {
        // Invariant: an ObjRef is only made for objects that went through unbusy.
        self.0
            .data
            .get()
            .expect("ObjRef made for an object without data")
    }

    /// The body (shortcut for `data().body`).
    pub fn body(&self) -> &Body {
        &self.data().body
    }

    /// The vxid of the fetch that made it.
    pub fn vxid(&self) -> u32 {
        self.0.vxid.load(Ordering::Relaxed)
    }

    /// The objhead digest.
    pub fn digest(&self) -> &Digest {
        &self.0.digest
    }

    /// Current flags.
    pub fn flags(&self) -> ObjFlags {
        ObjFlags(self.0.flags())
    }

    /// The request delivering this object is done with it before its
    /// fetch finished (varnishd's `HSH_Abandon` from `HSH_Cancel`): the
    /// fetch stops reading the body and closes its backend connection.
    pub fn abandon(&self) {
        self.0.flags.fetch_or(F_ABANDON, Ordering::AcqRel);
    }

    /// `obj.hits`
    pub fn hits(&self) -> u64 {
        self.0.hits.load(Ordering::Relaxed)
    }

    /// When it was generated/validated.
    pub fn t_origin(&self) -> f64 {
        self.0.t_origin.get()
    }

    /// `obj.ttl` as stored (relative to `t_origin`).
    pub fn ttl(&self) -> f64 {
        self.0.ttl.get()
    }

    /// `obj.grace`
    pub fn grace(&self) -> f64 {
        self.0.grace.get()
    }

    /// `obj.keep`
    pub fn keep(&self) -> f64 {
        self.0.keep.get()
    }

    /// `obj.age` at `now`.
    pub fn age(&self, now: f64) -> f64 {
        now - self.t_origin()
    }

    /// Remaining time to live at `now` (negative once stale), as VCL's `obj.ttl`.
    pub fn remaining_ttl(&self, now: f64) -> f64 {
        self.t_origin() + self.ttl() - now
    }

    /// The Vary spec the variant was stored with.
    pub fn vary(&self) -> Option<&VarySpec> {
        self.0.vary.get()
    }

    /// Name of the store holding it (`obj.storage`).
    pub fn store_name(&self) -> Option<&'static str> {
        self.0.store.get().map(|s| s.name())
    }

    /// Bytes charged to its store for it.
    pub fn charged_bytes(&self) -> u64 {
        self.0.charged.load(Ordering::Relaxed)
    }

    /// Whether two references denote the same objcore.
    pub fn same(&self, other: &ObjRef) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
