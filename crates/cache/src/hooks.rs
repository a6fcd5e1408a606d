//! Extension points of the cache for code outside it (vmods, through the
//! server): a hook into one lookup's choice of object (varnishd's `VCF`,
//! the "catflap"), and subscriptions to objects entering and leaving the
//! cache (varnishd's `ObjSubscribeEvents`).
//!
//! Both run synchronously: a lookup hook under the objhead's shard lock
//! (it must only decide, never call back into the cache), event callbacks
//! outside every cache lock, on whatever thread inserted or removed the
//! object.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// What a [`LookupHook`] makes of one candidate object (varnishd's
/// `vcf_return`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookVerdict {
    /// Judge the candidate as usual (fresh: hit; stale: remembered for
    /// grace or revalidation).
    Default,
    /// Skip the candidate and look at the next one.
    Continue,
    /// Take this candidate as a hit, whatever its freshness.
    Hit,
    /// Stop the scan here and fetch a new object, as if nothing fresh
    /// was found.
    Miss,
}

/// A hook into one lookup: it sees the candidates (variants that are
/// neither busy, failed, dying, banned nor of another Vary) newest first,
/// before their freshness is judged, and may pick one after the scan.
pub trait LookupHook {
    /// The candidate at position `index` among this lookup's candidates
    /// (0 is the newest).
    fn candidate(&mut self, index: usize) -> HookVerdict;
    /// The scan is over: the position of a candidate to use as a hit
    /// instead of what the scan found, or `None` to keep its result.
    fn finish(&mut self) -> Option<usize>;
}

/// Something that happened to an object in the cache (varnishd's
/// `OEV_INSERT` and `OEV_EXPIRE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjEvent {
    /// A fetched object became visible to lookups.
    Insert,
    /// An object left the cache: expired, purged, banned, nuked or
    /// replaced.
    Expire,
}

/// A subscriber's callback: the event and the object's identity (stable
/// while the object lives; varnishd passes its address).
pub type ObjEventFn = Arc<dyn Fn(ObjEvent, usize) + Send + Sync>;

/// The subscribers to object events.
#[derive(Default)]
pub(crate) struct Subscribers {
    /// Whether there is any: the insert and removal paths look at only
    /// this when nobody listens.
    any: AtomicBool,
    next: AtomicU64,
    list: RwLock<Vec<(u64, ObjEventFn)>>,
}

impl Subscribers {
    pub(crate) fn subscribe(&self, f: ObjEventFn) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
        list.push((id, f));
        self.any.store(true, Ordering::Release);
        id
    }

    pub(crate) fn unsubscribe(&self, id: u64) -> bool {
        let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
        let before = list.len();
        list.retain(|(i, _)| *i != id);
        self.any.store(!list.is_empty(), Ordering::Release);
        list.len() != before
    }

    /// Tells every subscriber. The list is copied first, so a callback
    /// may subscribe or unsubscribe.
    pub(crate) fn send(&self, ev: ObjEvent, id: usize) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let list: Vec<ObjEventFn> = self
            .list
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, f)| Arc::clone(f))
            .collect();
        for f in list {
            f(ev, id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn subscribers_come_and_go() {
        let s = Subscribers::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        s.send(ObjEvent::Insert, 1);
        let id = s.subscribe({
            let seen = seen.clone();
            Arc::new(move |ev, id| seen.lock().unwrap().push((ev, id)))
        });
        s.send(ObjEvent::Insert, 2);
        s.send(ObjEvent::Expire, 2);
        assert!(s.unsubscribe(id));
        assert!(!s.unsubscribe(id));
        s.send(ObjEvent::Expire, 3);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![(ObjEvent::Insert, 2), (ObjEvent::Expire, 2)]
        );
    }
}
