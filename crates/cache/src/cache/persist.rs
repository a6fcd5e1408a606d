//! The cache's side of the persistent store (`lacquer_storage::disk`):
//! recording objects once they are complete, journaling bans and purges,
//! putting objects of a store's index back when first looked up
//! (materialising them), and replacing an object's headers and lifetime
//! without touching its body (a 304 revalidation).
//!
//! After a restart the objects on disk are only in their store's compact
//! index. A lookup (or purge) of a digest first takes every entry of that
//! digest out of the index and inserts the objects, so the lookup's
//! decision (Vary, bans, ttl/grace/keep) sees all variants as if they had
//! never left memory. A materialised object is inserted as it was: same
//! digest, Vary data, status, headers, ESI data, timing and body (spans of
//! the store file, read on delivery). Its ban reference is the newest
//! journaled ban not younger than the newest ban it had been checked
//! against when recorded, so every ban issued after it (and journaled
//! before the crash) is tested against it before it can be served;
//! journaled purges issued after it are applied before it is inserted.
//! While any object is still in an index, the ban lurker completes no ban
//! and the ban that was newest at startup stays referenced.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use bytes::Bytes;
use lacquer_storage::disk::format::{Crc, JournalEntry, ObjectRecord, VaryRecord, flags};
use lacquer_storage::{Body, Extent, Recovered};

use super::{Cache, DigestKey, Head, Inner, StorageError, lock};
use crate::headers::StoredHeaders;
use crate::lru::StoreRef;
use crate::object::{
    F_BUSY, F_DYING, F_FAILED, F_HFM, F_HFP, F_PRIVATE, F_RECOVERED, ObjCore, ObjMeta, ObjRef,
    ObjectData,
};
use crate::stats::CacheStats;
use crate::vary::VarySpec;

/// A recovered object to check: its store, the object, body length and
/// checksum from its record.
type Verify = (StoreRef, std::sync::Weak<ObjCore>, u64, u32);

/// Stripes of the lock that makes taking a digest's entries out of an
/// index and inserting its objects one step for concurrent lookups and
/// purges of that digest.
const STRIPES: usize = 64;

/// The state of materialisation: what objects still in an index need.
pub(super) struct Lazy {
    /// The journaled bans re-added at startup, oldest first: (time, id).
    bans: Mutex<Vec<(f64, u64)>>,
    /// The ban that was newest at startup, referenced until every object
    /// of the indexes is in (or gone).
    first_ban: Mutex<Option<u64>>,
    /// Lookups taking entries out of an index and not done inserting.
    busy: AtomicUsize,
    stripes: Box<[Mutex<()>]>,
    /// Where materialised objects go to have their bodies checked.
    verify: Mutex<Option<mpsc::Sender<Verify>>>,
}

impl Default for Lazy {
    fn default() -> Self {
        Lazy {
            bans: Mutex::new(Vec::new()),
            first_ban: Mutex::new(None),
            busy: AtomicUsize::new(0),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            verify: Mutex::new(None),
        }
    }
}

/// What [`Cache::update_in_place`] changes of a stored object.
#[derive(Debug, Clone)]
pub struct StoredUpdate {
    /// New timing (`t_origin`, ttl, grace, keep; the vxid of the
    /// revalidation).
    pub meta: ObjMeta,
    /// New status (a 304 refresh keeps the stored object's).
    pub status: u16,
    /// New reason phrase.
    pub reason: Bytes,
    /// The merged response headers.
    pub headers: Vec<(Bytes, Bytes)>,
}

impl Inner {
    /// An object of a persistent store left the cache: its record is erased
    /// once nothing holds it any more.
    pub(super) fn forget(&self, oc: &ObjCore) {
        if oc
            .store
            .get()
            .is_some_and(|s| s.stevedore().disk().is_some())
        {
            for x in lock(&oc.held).iter() {
                x.erase_when_dropped();
            }
        }
    }

    /// Hand a complete, cacheable object of a persistent store to its
    /// writer. Anything else (other stores, private objects, markers,
    /// unfinished bodies) is left alone.
    pub(super) fn persist(self: &Arc<Self>, oc: &Arc<ObjCore>, checksum: Option<Crc>) {
        let Some(store) = oc.store.get() else { return };
        let Some(disk) = store.stevedore().disk() else {
            return;
        };
        if oc.flags() & (F_PRIVATE | F_HFM | F_HFP | F_FAILED | F_DYING) != 0 {
            return;
        }
        let Some(data) = oc.data.get() else { return };
        if !data.body.is_finished() {
            return;
        }
        let ban_time = {
            let bans = self.bans_read();
            let id = oc.ban_id.load(Ordering::Acquire);
            bans.get(id).map_or_else(|| bans.newest().time, |b| b.time)
        };
        let record = ObjectRecord {
            digest: oc.digest,
            inserted_at: ban_time,
            t_origin: oc.t_origin.get(),
            ttl: oc.ttl.get(),
            grace: oc.grace.get(),
            keep: oc.keep.get(),
            vxid: oc.vxid.load(Ordering::Relaxed),
            status: data.status,
            flags: u8::from(data.gzip) * flags::GZIP
                + u8::from(data.gzip_changed) * flags::GZIP_CHANGED,
            reason: data.reason.to_vec(),
            headers: data
                .headers
                .iter()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect(),
            vary: oc.vary.get().map(|v| VaryRecord {
                never: v.never(),
                entries: v
                    .entries()
                    .map(|(n, v)| (n.to_owned(), v.map(<[u8]>::to_vec)))
                    .collect(),
            }),
            esi: data.esi.as_ref().map(|e| e.to_vec()),
            ..ObjectRecord::default()
        };
        let slot = lock(&oc.held).first().cloned();
        let weak = Arc::downgrade(oc);
        let st = store.clone();
        disk.persist(
            record,
            data.body.clone(),
            checksum,
            slot,
            Box::new(move |x: Extent| match weak.upgrade() {
                Some(oc) => {
                    oc.charged.fetch_add(x.len(), Ordering::Relaxed);
                    oc.allocs.fetch_add(1, Ordering::Relaxed);
                    let mut held = lock(&oc.held);
                    // Removal marks what is held under this lock, after
                    // setting DYING: one of the two marks it.
                    if oc.flags() & F_DYING != 0 {
                        x.erase_when_dropped();
                    }
                    held.push(x);
                }
                None => {
                    x.erase_when_dropped();
                    st.stevedore().free(x.len(), 1);
                }
            }),
        );
    }

    /// Append a ban or purge to every persistent store's journal.
    pub(super) fn journal(&self, entry: impl FnOnce() -> JournalEntry) {
        let mut entry = Some(entry);
        let mut built = None;
        // While a store is still scanning, the objects it will index must
        // see purges issued meanwhile (after that a purge materialises the
        // digest's objects first).
        if self.recovering.load(Ordering::Acquire)
            && let Some(list) = lock(&self.recovery_purges).as_mut()
        {
            let e = entry.take().map(|f| f());
            if let Some(e @ JournalEntry::Purge { .. }) = &e {
                list.push(e.clone());
            }
            built = e;
        }
        for s in &self.stores {
            if let Some(d) = s.stevedore().disk() {
                if built.is_none() {
                    built = entry.take().map(|f| f());
                }
                if let Some(e) = &built {
                    d.journal(e);
                }
            }
        }
    }

    /// Put a complete object in the cache without a fetch: newest among its
    /// objhead's variants, on its store's LRU list and the expiry heap.
    #[allow(clippy::too_many_arguments)]
    fn insert_ready(
        self: &Arc<Self>,
        digest: [u8; 32],
        vary: Option<VarySpec>,
        data: ObjectData,
        meta: ObjMeta,
        store: &StoreRef,
        held: Vec<Extent>,
        charged: u64,
        allocs: u64,
        ban_id: u64,
        recovered: bool,
    ) -> Arc<ObjCore> {
        if let Some(b) = self.bans_read().get(ban_id) {
            b.add_ref();
        }
        let oc = Arc::new(ObjCore::new_busy(digest, ban_id, &self.stats));
        if let Some(v) = vary {
            let _ = oc.vary.set(v);
        }
        *lock(&oc.held) = held;
        oc.charged.store(charged, Ordering::Relaxed);
        oc.allocs.store(allocs, Ordering::Relaxed);
        let _ = oc.store.set(store.clone());
        let _ = oc.data.set(data);
        CacheStats::inc(&self.stats.n_object);
        oc.vxid.store(meta.vxid, Ordering::Relaxed);
        oc.t_origin.set(meta.t_origin);
        oc.ttl.set(meta.ttl);
        oc.grace.set(meta.grace);
        oc.keep.set(meta.keep);
        oc.exp_when.set(oc.compute_exp_when());
        oc.last_lru.set(meta.t_origin);
        self.subscribers
            .send(crate::hooks::ObjEvent::Insert, Arc::as_ptr(&oc) as usize);
        store.lru().insert(&oc);
        self.exp_push(&oc);
        {
            let mut shard = self.shard(&digest);
            let head = shard.entry(DigestKey(digest)).or_insert_with(|| {
                CacheStats::inc(&self.stats.n_objecthead);
                Head::default()
            });
            if recovered {
                // Behind what was fetched since startup, ahead of what was
                // recovered before it (recovery goes oldest first).
                oc.flags.fetch_or(F_RECOVERED, Ordering::AcqRel);
                let at = head
                    .cores
                    .iter()
                    .position(|c| c.flags() & (F_RECOVERED | F_BUSY) != 0)
                    .unwrap_or(head.cores.len());
                oc.flags.fetch_and(!F_BUSY, Ordering::AcqRel);
                head.cores.insert(at, Arc::clone(&oc));
            } else {
                oc.flags.fetch_and(!F_BUSY, Ordering::AcqRel);
                head.cores.insert(0, Arc::clone(&oc));
            }
        }
        oc
    }

    /// Start recovery at startup: the journaled bans go back on the list now;
    /// the stores' objects are indexed in the background.
    pub(super) fn recover(self: &Arc<Self>) {
        let stores: Vec<StoreRef> = self
            .stores
            .iter()
            .filter(|s| s.stevedore().disk().is_some())
            .cloned()
            .collect();
        if stores.is_empty() {
            return;
        }
        let mut entries: Vec<JournalEntry> = Vec::new();
        for s in &stores {
            if let Some(d) = s.stevedore().disk() {
                for e in d.take_journal() {
                    if !entries.contains(&e) {
                        entries.push(e);
                    }
                }
            }
        }
        entries.sort_by(|a, b| a.time().total_cmp(&b.time()));
        // The journaled bans go back on the list now, oldest first, before
        // anything is served: (time, id).
        let mut bans: Vec<(f64, u64)> = Vec::new();
        // Held until every recovered object is in: an unreferenced ban at
        // the old end of the list is trimmed, and a ban no older object
        // references is completed (no longer tested), which the objects
        // still to come must not miss.
        let first_id = {
            let list = self.bans_read();
            let b = list.newest();
            b.add_ref();
            b.id
        };
        for e in &entries {
            if let JournalEntry::Ban { time, text } = e
                && let Ok(spec) = crate::ban::BanSpec::parse(text)
            {
                let id = self.bans_write().add(spec, *time, &self.stats);
                self.newest_ban.store(id, Ordering::Release);
                bans.push((*time, id));
            }
        }
        // Objects are indexed as each store's scan finishes.
        *lock(&self.recovery_purges) = Some(entries);
        *lock(&self.lazy.bans) = bans;
        *lock(&self.lazy.first_ban) = Some(first_id);
        self.recovering.store(true, Ordering::Release);
        self.start_verifier();
        let cache = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("cache-recover".into())
            .spawn(move || {
                for store in stores {
                    if let Some(disk) = store.stevedore().disk() {
                        disk.wait_scanned();
                    }
                }
                if let Some(inner) = cache.upgrade() {
                    inner.recovering.store(false, Ordering::Release);
                    inner.lazy_pending();
                }
            });
        if spawned.is_err() {
            // Without the thread the indexes are consulted as they fill;
            // serving goes on.
            self.recovering.store(false, Ordering::Release);
        }
    }

    /// Whether objects of persistent stores are still not all in the
    /// cache (a store scanning, objects in an index, or being inserted);
    /// when they are, the startup ban reference and purge list go.
    pub(super) fn lazy_pending(&self) -> bool {
        if self.recovering.load(Ordering::SeqCst) {
            return true;
        }
        // The index counts first: a lookup counts itself busy before it
        // takes entries out.
        let indexed = self
            .stores
            .iter()
            .any(|s| s.stevedore().disk().is_some_and(|d| d.indexed() > 0));
        if indexed || self.lazy.busy.load(Ordering::SeqCst) > 0 {
            return true;
        }
        if let Some(id) = lock(&self.lazy.first_ban).take() {
            *lock(&self.recovery_purges) = None;
            lock(&self.lazy.bans).clear();
            self.release_ban(id);
        }
        false
    }

    /// Put the objects of `digest` still in a persistent store's index in
    /// the cache (a lookup or purge of it is about to look).
    pub(super) fn materialize(self: &Arc<Self>, digest: &[u8; 32], now: f64) {
        for store in &self.stores {
            let Some(disk) = store.stevedore().disk() else {
                continue;
            };
            if disk.indexed() == 0 {
                continue;
            }
            let _one = lock(&self.lazy.stripes[usize::from(digest[31]) % STRIPES]);
            self.lazy.busy.fetch_add(1, Ordering::SeqCst);
            let objects = disk.take_indexed(digest);
            if !objects.is_empty() {
                let bans = lock(&self.lazy.bans).clone();
                let first_id = lock(&self.lazy.first_ban).unwrap_or(0);
                for r in objects {
                    let (len, crc) = (r.record.body_len, r.record.body_crc);
                    match self.recover_one(store, r, &bans, first_id, now) {
                        Some(oc) => {
                            self.verify_later((store.clone(), Arc::downgrade(&oc), len, crc))
                        }
                        None => {
                            disk.disk_stats()
                                .dropped_stale
                                .fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            self.lazy.busy.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Drop the reference recovery held on ban `id`.
    fn release_ban(&self, id: u64) {
        if let Some(b) = self.bans_read().get(id) {
            b.drop_ref();
        }
    }

    /// Start the thread that reads materialised bodies back and removes
    /// the objects whose bytes do not match their record any more (space
    /// reused after a power loss; the checksum is what the record vouched
    /// for). Serving does not wait for it.
    fn start_verifier(self: &Arc<Self>) {
        let (tx, rx) = mpsc::channel::<Verify>();
        let cache = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("store-verify".into())
            .spawn(move || {
                for (store, oc, len, crc) in rx {
                    let (Some(inner), Some(oc)) = (cache.upgrade(), oc.upgrade()) else {
                        continue;
                    };
                    let (Some(disk), Some(data)) = (store.stevedore().disk(), oc.data.get()) else {
                        continue;
                    };
                    if oc.flags() & F_DYING == 0 && !disk.verify_body(&data.body, len, crc) {
                        inner.kill(&oc);
                    }
                }
            });
        // Without the thread the bodies are served as recovered, which a
        // process crash (as opposed to a power loss) never makes wrong.
        if spawned.is_ok() {
            *lock(&self.lazy.verify) = Some(tx);
        }
    }

    /// Queue a materialised object for the verifier.
    fn verify_later(&self, v: Verify) {
        if let Some(tx) = lock(&self.lazy.verify).as_ref() {
            let _ = tx.send(v);
        }
    }

    /// Insert one recovered object unless it expired or was purged after it
    /// was recorded; false when it was dropped.
    fn recover_one(
        self: &Arc<Self>,
        store: &StoreRef,
        r: Recovered,
        bans: &[(f64, u64)],
        first_id: u64,
        now: f64,
    ) -> Option<Arc<ObjCore>> {
        let Recovered {
            record: rec,
            record_extent,
            body,
            charged,
            allocs,
        } = r;
        let drop_it = |x: Extent, b: Body| {
            drop(b);
            x.erase_when_dropped();
            drop(x);
            store.stevedore().free(charged, allocs);
            None
        };
        let (mut ttl, mut grace, mut keep) = (rec.ttl, rec.grace, rec.keep);
        // Held until the object is in: a purge issued meanwhile is either
        // in the list (applied here) or finds the object in the cache.
        let purges = lock(&self.recovery_purges);
        let entries: &[JournalEntry] = purges.as_deref().unwrap_or(&[]);
        for e in entries {
            if let JournalEntry::Purge {
                time,
                digest,
                ttl: pt,
                grace: pg,
                keep: pk,
            } = e
                && *digest == rec.digest
                && *time > rec.inserted_at
            {
                if *pt == 0.0 && *pg == 0.0 && *pk == 0.0 {
                    return drop_it(record_extent, body);
                }
                // As a soft purge: shorten, relative to when it was issued.
                if *pt >= 0.0 && time + pt - rec.t_origin < ttl {
                    ttl = time + pt - rec.t_origin;
                }
                if *pg >= 0.0 && *pg < grace {
                    grace = *pg;
                }
                if *pk >= 0.0 && *pk < keep {
                    keep = *pk;
                }
            }
        }
        if rec.t_origin + ttl + grace + keep <= now {
            return drop_it(record_extent, body);
        }
        let ban_id = bans
            .iter()
            .rev()
            .find(|(t, _)| *t <= rec.inserted_at)
            .map_or(first_id, |(_, id)| *id);
        let data = ObjectData {
            status: rec.status,
            reason: Bytes::from(rec.reason),
            headers: StoredHeaders::new(&rec.headers),
            gzip: rec.flags & flags::GZIP != 0,
            esi: rec.esi.map(Bytes::from),
            gzip_changed: rec.flags & flags::GZIP_CHANGED != 0,
            body,
        };
        let meta = ObjMeta {
            vxid: rec.vxid,
            t_origin: rec.t_origin,
            ttl,
            grace,
            keep,
            kind: crate::object::ObjKind::Normal,
        };
        let vary = rec.vary.map(|v| VarySpec::from_parts(v.never, v.entries));
        let changed = (ttl, grace, keep) != (rec.ttl, rec.grace, rec.keep);
        let oc = self.insert_ready(
            rec.digest,
            vary,
            data,
            meta,
            store,
            vec![record_extent],
            charged,
            allocs,
            ban_id,
            true,
        );
        drop(purges);
        if changed {
            // A soft purge shortened it: record the new lifetime.
            self.persist(&oc, None);
        }
        Some(oc)
    }
}

impl Cache {
    /// Replace `obj` by an object with `update`'s headers and timing that
    /// shares its body (varnishd's in-place 304 refresh, what vmod utils'
    /// `fast_304()` asks for). No fetch, no busy object and no body copy: in
    /// a persistent store only a new record is written, naming the same
    /// body extents; in memory the body is shared. The old object leaves
    /// the cache; readers still delivering it keep it. Fails when `obj` is
    /// not a complete object in the cache, or when its store cannot hold
    /// the new object's headers.
    pub fn update_in_place(
        &self,
        obj: &ObjRef,
        update: StoredUpdate,
    ) -> Result<ObjRef, StorageError> {
        let inner = &self.inner;
        let old = &obj.0;
        let fail = |store: &'static str| StorageError {
            store,
            wanted: 0,
            nuked: 0,
            stored: 0,
        };
        let (Some(store), Some(data)) = (old.store.get(), old.data.get()) else {
            return Err(fail("(none)"));
        };
        if old.flags() & (F_BUSY | F_DYING | F_PRIVATE | F_HFM | F_HFP | F_FAILED) != 0
            || !data.body.is_finished()
        {
            return Err(fail(store.name()));
        }
        let new = ObjectData {
            status: update.status,
            reason: update.reason,
            headers: StoredHeaders::new(&update.headers),
            gzip: data.gzip,
            esi: data.esi.clone(),
            gzip_changed: data.gzip_changed,
            body: data.body.clone(),
        };
        let charge =
            new.charge_bytes() as u64 + old.vary.get().map_or(0, VarySpec::storage_size) as u64;
        let a = inner.allocate(store, charge)?;
        let ban_id = inner.bans_read().newest().id;
        let oc = inner.insert_ready(
            old.digest,
            old.vary.get().cloned(),
            new,
            update.meta,
            store,
            a.extent.into_iter().collect(),
            a.bytes,
            1,
            ban_id,
            false,
        );
        inner.kill(old);
        inner.persist(&oc, None);
        Ok(ObjRef(oc))
    }
}
