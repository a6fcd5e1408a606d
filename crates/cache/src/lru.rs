//! Per-store LRU lists, used to evict (nuke) objects when a store is full.
//!
//! Each store has one ordered map from a monotonically increasing stamp to the
//! object; the smallest stamp is the least recently used. An object is re-stamped
//! on use at most once per `lru_interval` (as Varnish does), so hits rarely touch
//! the LRU lock at all.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use lacquer_storage::Stevedore;

use crate::object::{F_BUSY, F_DYING, ObjCore};

#[derive(Debug, Default)]
pub(crate) struct Lru {
    pub(crate) map: BTreeMap<u64, Arc<ObjCore>>,
    next: u64,
}

impl Lru {
    pub(crate) fn insert(&mut self, oc: &Arc<ObjCore>) {
        self.next += 1;
        let k = self.next;
        oc.lru_key.store(k, Ordering::Relaxed);
        self.map.insert(k, Arc::clone(oc));
    }

    pub(crate) fn remove(&mut self, oc: &ObjCore) {
        let k = oc.lru_key.swap(0, Ordering::Relaxed);
        if k != 0 {
            self.map.remove(&k);
        }
    }

    /// Move to the most-recently-used end; false if not on the list.
    pub(crate) fn touch(&mut self, oc: &Arc<ObjCore>) -> bool {
        let k = oc.lru_key.load(Ordering::Relaxed);
        if k == 0 {
            return false;
        }
        if let Some(v) = self.map.remove(&k) {
            self.next += 1;
            oc.lru_key.store(self.next, Ordering::Relaxed);
            self.map.insert(self.next, v);
            true
        } else {
            false
        }
    }

    /// The least recently used object that nobody else is using (only the objhead
    /// and this list hold it), looking at most `scan` candidates.
    pub(crate) fn victim(&self, scan: usize) -> Option<Arc<ObjCore>> {
        self.map
            .values()
            .take(scan)
            .find(|oc| {
                oc.flags() & (F_BUSY | F_DYING) == 0 && Arc::strong_count(oc) <= INTERNAL_REFS
            })
            .cloned()
    }
}

/// References an inserted object holds internally: its objhead's list and its
/// store's LRU list. More means someone is delivering it.
pub(crate) const INTERNAL_REFS: usize = 2;

#[derive(Debug)]
pub(crate) struct StoreEntry {
    pub(crate) stevedore: Arc<dyn Stevedore>,
    pub(crate) lru: Mutex<Lru>,
}

/// A store known to the cache, with its LRU list. Cheap to clone; pass it to
/// `BusyObj::unbusy` to say where an object goes (`beresp.storage`).
#[derive(Debug, Clone)]
pub struct StoreRef(pub(crate) Arc<StoreEntry>);

impl StoreRef {
    pub(crate) fn new(stevedore: Arc<dyn Stevedore>) -> StoreRef {
        StoreRef(Arc::new(StoreEntry {
            stevedore,
            lru: Mutex::new(Lru::default()),
        }))
    }

    /// The store's name.
    pub fn name(&self) -> &'static str {
        self.0.stevedore.name()
    }

    /// The underlying stevedore (counters, limit).
    pub fn stevedore(&self) -> &Arc<dyn Stevedore> {
        &self.0.stevedore
    }

    /// Objects currently on this store's LRU list.
    pub fn lru_len(&self) -> usize {
        self.lru().map.len()
    }

    pub(crate) fn lru(&self) -> MutexGuard<'_, Lru> {
        self.0.lru.lock().unwrap_or_else(|p| p.into_inner())
    }
}
