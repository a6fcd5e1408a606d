//! Cache counters (the `MAIN.*` ones this crate owns), as plain atomics so the
//! statistics publisher can read them without locks. Names and meanings follow
//! varnishd 7.1; `g`-style gauges go up and down, the rest only count up.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters maintained by the cache core.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Gauge: object structs (stored responses, including hit-for-miss/pass).
    pub n_object: AtomicU64,
    /// Gauge: objcores (objects plus busy ones being fetched).
    pub n_objectcore: AtomicU64,
    /// Gauge: objheads (distinct digests).
    pub n_objecthead: AtomicU64,
    /// Lookups, each first tried without the table's lock (varnishd's
    /// critbit `hcb_nolock`).
    pub hcb_nolock: AtomicU64,
    /// Lookups that found no objhead and went on under the lock.
    pub hcb_lock: AtomicU64,
    /// Objheads inserted.
    pub hcb_insert: AtomicU64,
    /// Objects handed to the expiry heap, inserted or re-armed (varnishd's
    /// `exp_mailed`; its `exp_received` is the same count here, the heap
    /// taking them at once). Removals by kills are not counted.
    pub exp_mailed: AtomicU64,
    /// Objects removed because ttl+grace+keep passed.
    pub n_expired: AtomicU64,
    /// Objects evicted to make room (LRU nuking).
    pub n_lru_nuked: AtomicU64,
    /// Objects moved to the LRU list's fresh end on use.
    pub n_lru_moved: AtomicU64,
    /// Allocations that gave up after `nuke_limit` evictions.
    pub n_lru_limited: AtomicU64,
    /// Purge operations.
    pub n_purges: AtomicU64,
    /// Objects removed by purges.
    pub n_obj_purged: AtomicU64,
    /// Requests put on a waiting list.
    pub busy_sleep: AtomicU64,
    /// Requests woken from a waiting list.
    pub busy_wakeup: AtomicU64,
    /// Gauge: bans in the ban list.
    pub bans: AtomicU64,
    /// Gauge: bans marked completed.
    pub bans_completed: AtomicU64,
    /// Gauge: bans using `obj.*`.
    pub bans_obj: AtomicU64,
    /// Gauge: bans using `req.*`.
    pub bans_req: AtomicU64,
    /// Bans added.
    pub bans_added: AtomicU64,
    /// Bans deleted from the list's tail.
    pub bans_deleted: AtomicU64,
    /// Object checks against the ban list at lookup.
    pub bans_tested: AtomicU64,
    /// Objects killed by bans at lookup.
    pub bans_obj_killed: AtomicU64,
    /// Bans tested against objects by the lurker.
    pub bans_lurker_tested: AtomicU64,
    /// Individual ban tests run at lookup.
    pub bans_tests_tested: AtomicU64,
    /// Individual ban tests run by the lurker.
    pub bans_lurker_tests_tested: AtomicU64,
    /// Objects killed by the ban lurker.
    pub bans_lurker_obj_killed: AtomicU64,
    /// Objects the lurker removed untested because their ban was past
    /// `ban_cutoff`.
    pub bans_lurker_obj_killed_cutoff: AtomicU64,
    /// Bans marked completed because a newer identical ban was added.
    pub bans_dups: AtomicU64,
}

impl CacheStats {
    pub(crate) fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn dec(c: &AtomicU64) {
        c.fetch_sub(1, Ordering::Relaxed);
    }

    /// Read one counter (convenience for tests and the CLI).
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}
