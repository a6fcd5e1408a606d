//! The [`Stevedore`] trait and the in-memory [`MallocStore`] (the `file`
//! store is in `crate::file`).
//!
//! A store does not hand out memory (bodies are `Bytes` owned by whoever produced
//! them); it accounts for it, so that `-s malloc,SIZE` limits the cache size and the
//! `SMA.<name>.*` counters mean what they mean in Varnish:
//!
//! | counter  | meaning                                              |
//! |----------|------------------------------------------------------|
//! | c_req    | allocation requests                                  |
//! | c_fail   | allocation requests that did not fit                 |
//! | c_bytes  | bytes allocated (total)                              |
//! | c_freed  | bytes freed (total)                                  |
//! | g_alloc  | allocations outstanding                              |
//! | g_bytes  | bytes outstanding                                    |
//! | g_space  | bytes left before the limit (0 for unlimited stores) |
//!
//! Allocation is a lock-free compare-and-swap on the outstanding byte count, so
//! concurrent fetches never serialise on a store.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// `SMA.*` counters of one store, as plain atomics for the statistics publisher.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Allocation requests.
    pub c_req: AtomicU64,
    /// Allocation requests that failed (did not fit).
    pub c_fail: AtomicU64,
    /// Bytes allocated, total.
    pub c_bytes: AtomicU64,
    /// Bytes freed, total.
    pub c_freed: AtomicU64,
    /// Allocations outstanding.
    pub g_alloc: AtomicU64,
    /// Bytes outstanding.
    pub g_bytes: AtomicU64,
    /// Bytes available (limit minus outstanding; 0 when unlimited).
    pub g_space: AtomicU64,
}

/// An allocation did not fit in the store: the caller may evict (nuke) objects of
/// this store and try again, or give up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("store {store:?} has no space for {wanted} bytes ({available} available)")]
pub struct NoSpace {
    /// Name of the store.
    pub store: &'static str,
    /// Bytes requested.
    pub wanted: u64,
    /// Bytes that were available at the time.
    pub available: u64,
}

/// What a store handed out for one allocation.
#[derive(Debug)]
pub struct Allocation {
    /// Bytes charged (the request rounded up to the store's unit).
    pub bytes: u64,
    /// Where the bytes go, for stores that keep them (`file`); `None` when
    /// the caller keeps them in memory (`malloc`).
    pub extent: Option<crate::file::Extent>,
}

/// A named store that accounts bytes for cached objects.
pub trait Stevedore: Send + Sync + fmt::Debug {
    /// The store's name (`s0`, `Transient`, or the `NAME=` given to `-s`).
    fn name(&self) -> &'static str;
    /// The store's kind as varnishd names it (`malloc`, `file`).
    fn kind(&self) -> &'static str;
    /// The size limit in bytes, `None` when unlimited.
    fn limit(&self) -> Option<u64>;
    /// The store's counters.
    fn stats(&self) -> &StoreStats;
    /// The `g_smf*` gauges of a file store (published as `SMF.<name>`
    /// instead of `SMA.<name>`).
    fn file_stats(&self) -> Option<&crate::file::FileStats> {
        None
    }
    /// Whether objects go here only when VCL names it (an `mse.conf`'s
    /// memory tier), never in the default rotation over stores.
    fn chosen_only(&self) -> bool {
        false
    }
    /// The persistent store behind this one (`mse`/`disk` kinds), whose
    /// objects the cache records and recovers.
    fn disk(&self) -> Option<&crate::disk::DiskStore> {
        None
    }
    /// Account one allocation of `bytes`; fails without side effects on the
    /// outstanding counts when it does not fit (it still counts `c_req`/`c_fail`).
    fn try_alloc(&self, bytes: u64) -> Result<Allocation, NoSpace>;
    /// Return `bytes` spread over `allocs` earlier allocations (the counts;
    /// a file store's space returns when its extents drop).
    fn free(&self, bytes: u64, allocs: u64);
    /// Bytes that could be allocated right now (`u64::MAX` when unlimited).
    fn available(&self) -> u64;
    /// How many bytes of a `wanted` allocation the store hands out in one
    /// piece; a writer with more to store asks again for the rest.
    fn grant(&self, wanted: u64) -> u64 {
        wanted
    }
    /// Change the size limit at run time (a memory tier under
    /// `memory_target`); false for stores whose size is fixed. Shrinking
    /// below what is held makes allocations fail until enough is freed
    /// (the cache nukes to get there).
    fn set_limit(&self, _bytes: u64) -> bool {
        false
    }
}

/// The `malloc` stevedore: accounts bytes against an optional limit. As
/// varnishd's `debug` stevedore it is the same store under another kind
/// name, optionally granting one byte less than each allocation asks for
/// (`lessspace`), so that bodies are stored in more, smaller pieces.
#[derive(Debug)]
pub struct MallocStore {
    name: &'static str,
    /// The size limit (`u64::MAX`: unlimited), changeable for a limited
    /// store ([`Stevedore::set_limit`]).
    limit: AtomicU64,
    limited: bool,
    stats: StoreStats,
    kind: &'static str,
    less_space: bool,
    chosen_only: bool,
}

impl MallocStore {
    /// A store called `name` holding at most `limit` bytes (`None`: unlimited).
    ///
    /// The name is leaked once so that hot paths can hand out `&'static str`;
    /// stores are created once at startup.
    pub fn new(name: &str, limit: Option<u64>) -> Self {
        let stats = StoreStats::default();
        if let Some(l) = limit {
            stats.g_space.store(l, Relaxed);
        }
        MallocStore {
            name: Box::leak(name.to_owned().into_boxed_str()),
            limit: AtomicU64::new(limit.unwrap_or(u64::MAX)),
            limited: limit.is_some(),
            stats,
            kind: "malloc",
            less_space: false,
            chosen_only: false,
        }
    }

    /// The memory tier of an `mse.conf`: a malloc store that objects go to
    /// only when VCL chooses it (the default rotation skips it).
    pub fn tier(name: &str, limit: Option<u64>) -> Self {
        MallocStore {
            chosen_only: true,
            ..MallocStore::new(name, limit)
        }
    }

    /// Set `g_space` from the limit and what is held (a limit lowered
    /// below it shows 0).
    fn publish_space(&self) {
        if let Some(l) = self.limit() {
            let held = self.stats.g_bytes.load(Relaxed);
            self.stats.g_space.store(l.saturating_sub(held), Relaxed);
        }
    }

    /// varnishd's `debug` stevedore (`-s debug[,lessspace][,size]`): a
    /// malloc store that, with `less_space`, grants one byte less than
    /// each allocation asks for.
    pub fn debug(name: &str, limit: Option<u64>, less_space: bool) -> Self {
        MallocStore {
            kind: "debug",
            less_space,
            ..MallocStore::new(name, limit)
        }
    }
}

impl Stevedore for MallocStore {
    fn name(&self) -> &'static str {
        self.name
    }

    fn kind(&self) -> &'static str {
        self.kind
    }

    fn limit(&self) -> Option<u64> {
        self.limited.then(|| self.limit.load(Relaxed))
    }

    fn stats(&self) -> &StoreStats {
        &self.stats
    }

    fn set_limit(&self, bytes: u64) -> bool {
        if !self.limited {
            return false;
        }
        self.limit.store(bytes, Relaxed);
        self.publish_space();
        true
    }

    fn try_alloc(&self, bytes: u64) -> Result<Allocation, NoSpace> {
        let s = &self.stats;
        s.c_req.fetch_add(1, Relaxed);
        if let Some(limit) = self.limit() {
            let mut cur = s.g_bytes.load(Relaxed);
            loop {
                let Some(new) = cur.checked_add(bytes).filter(|n| *n <= limit) else {
                    s.c_fail.fetch_add(1, Relaxed);
                    return Err(NoSpace {
                        store: self.name,
                        wanted: bytes,
                        available: limit.saturating_sub(cur),
                    });
                };
                match s.g_bytes.compare_exchange_weak(cur, new, Relaxed, Relaxed) {
                    Ok(_) => break,
                    Err(actual) => cur = actual,
                }
            }
            self.publish_space();
        } else {
            s.g_bytes.fetch_add(bytes, Relaxed);
        }
        s.g_alloc.fetch_add(1, Relaxed);
        s.c_bytes.fetch_add(bytes, Relaxed);
        Ok(Allocation {
            bytes,
            extent: None,
        })
    }

    fn free(&self, bytes: u64, allocs: u64) {
        let s = &self.stats;
        s.g_bytes.fetch_sub(bytes, Relaxed);
        s.g_alloc.fetch_sub(allocs, Relaxed);
        s.c_freed.fetch_add(bytes, Relaxed);
        self.publish_space();
    }

    fn available(&self) -> u64 {
        match self.limit() {
            Some(l) => l.saturating_sub(self.stats.g_bytes.load(Relaxed)),
            None => u64::MAX,
        }
    }

    fn chosen_only(&self) -> bool {
        self.chosen_only
    }

    fn grant(&self, wanted: u64) -> u64 {
        if self.less_space && wanted > 1 {
            wanted - 1
        } else {
            wanted
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limited_store_accounts_and_refuses() {
        let s = MallocStore::new("s0", Some(100));
        assert_eq!(s.name(), "s0");
        assert_eq!(s.kind(), "malloc");
        s.try_alloc(60).unwrap();
        let e = s.try_alloc(50).unwrap_err();
        assert_eq!(e.available, 40);
        assert_eq!(
            e.to_string(),
            "store \"s0\" has no space for 50 bytes (40 available)"
        );
        s.try_alloc(40).unwrap();
        let st = s.stats();
        assert_eq!(st.c_req.load(Relaxed), 3);
        assert_eq!(st.c_fail.load(Relaxed), 1);
        assert_eq!(st.c_bytes.load(Relaxed), 100);
        assert_eq!(st.g_alloc.load(Relaxed), 2);
        assert_eq!(st.g_bytes.load(Relaxed), 100);
        assert_eq!(st.g_space.load(Relaxed), 0);
        s.free(60, 1);
        assert_eq!(st.c_freed.load(Relaxed), 60);
        assert_eq!(st.g_space.load(Relaxed), 60);
        assert_eq!(st.g_alloc.load(Relaxed), 1);
        assert_eq!(s.available(), 60);
    }

    #[test]
    fn debug_store_grants_less() {
        let s = MallocStore::debug("Transient", None, true);
        assert_eq!(s.kind(), "debug");
        assert_eq!(s.grant(10), 9);
        assert_eq!(s.grant(1), 1);
        let plain = MallocStore::debug("d", None, false);
        assert_eq!(plain.grant(10), 10);
        assert_eq!(MallocStore::new("s0", None).grant(10), 10);
    }

    #[test]
    fn unlimited_store_never_refuses() {
        let s = MallocStore::new("Transient", None);
        s.try_alloc(u64::MAX / 2).unwrap();
        s.try_alloc(u64::MAX / 4).unwrap();
        assert_eq!(s.stats().g_space.load(Relaxed), 0);
        assert_eq!(s.available(), u64::MAX);
        assert_eq!(s.limit(), None);
    }

    #[test]
    fn concurrent_allocations_never_exceed_limit() {
        let s = std::sync::Arc::new(MallocStore::new("s0", Some(1000)));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || (0..1000).filter(|_| s.try_alloc(7).is_ok()).count())
            })
            .collect();
        let ok: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(ok, 1000 / 7);
        assert_eq!(s.stats().g_bytes.load(Relaxed), 7 * (1000 / 7) as u64);
    }
}
