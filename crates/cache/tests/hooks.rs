//! Lookup hooks (varnishd's VCF) and object event subscriptions, driven as
//! the server does for vmods.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use lacquer_cache::*;

/// Inserts an object for `d` through a hooked lookup that forces a miss
/// (so that older variants stay), as `debug.catflap(miss)` does.
fn insert_beside(c: &Cache, d: &Digest, vxid: u32, t: f64) -> ObjRef {
    let req = LookupRequest::new(d, b"/", &(), t);
    let mut hook = Fixed(HookVerdict::Miss, None);
    let (busy, stale) = expect_miss(c.lookup_hooked(&req, &mut hook).kind);
    assert!(stale.is_none());
    let s0 = c.store("s0").unwrap();
    busy.unbusy(new_obj(meta(vxid, t, 10.0, 60.0, 0.0), b"x"), &s0)
        .unwrap()
        .obj
}

/// A hook answering every candidate alike, and picking a fixed one at the
/// end; it records the candidates it saw.
struct Fixed(HookVerdict, Option<usize>);

impl LookupHook for Fixed {
    fn candidate(&mut self, _: usize) -> HookVerdict {
        self.0
    }
    fn finish(&mut self) -> Option<usize> {
        self.1
    }
}

/// Remembers the last candidate and picks it (`debug.catflap(last)`).
#[derive(Default)]
struct Last(Option<usize>, usize);

impl LookupHook for Last {
    fn candidate(&mut self, index: usize) -> HookVerdict {
        self.0 = Some(index);
        self.1 += 1;
        HookVerdict::Continue
    }
    fn finish(&mut self) -> Option<usize> {
        self.0
    }
}

#[test]
fn hooks_pick_among_variants() {
    let c = cache();
    let d = digest("/flap");
    insert(&c, &d, meta(1, T0, 10.0, 60.0, 0.0), b"1");
    insert_beside(&c, &d, 2, T0 + 1.0);
    insert_beside(&c, &d, 3, T0 + 2.0);
    let req = LookupRequest::new(&d, b"/", &(), T0 + 3.0);
    // Unhooked, and hooked with Default answers: the newest fresh one.
    assert_eq!(expect_hit(c.lookup(&req).kind).vxid(), 3);
    let mut dflt = Fixed(HookVerdict::Default, None);
    assert_eq!(expect_hit(c.lookup_hooked(&req, &mut dflt).kind).vxid(), 3);
    // The first candidate is the newest.
    let mut first = Fixed(HookVerdict::Hit, None);
    assert_eq!(expect_hit(c.lookup_hooked(&req, &mut first).kind).vxid(), 3);
    // Skipping them all and picking the last: the oldest.
    let mut last = Last::default();
    assert_eq!(expect_hit(c.lookup_hooked(&req, &mut last).kind).vxid(), 1);
    assert_eq!(last.1, 3);
    // A pick out of range keeps the scan's result (nothing: a miss).
    let mut none = Fixed(HookVerdict::Continue, Some(7));
    let (busy, _) = expect_miss(c.lookup_hooked(&req, &mut none).kind);
    busy.fail();
    // A hit on a candidate long past its ttl (in grace) is a plain hit.
    let late = LookupRequest::new(&d, b"/", &(), T0 + 30.0);
    let mut first = Fixed(HookVerdict::Hit, None);
    assert_eq!(
        expect_hit(c.lookup_hooked(&late, &mut first).kind).vxid(),
        3
    );
    // always_miss never asks the hook.
    let mut miss = LookupRequest::new(&d, b"/", &(), T0 + 3.0);
    miss.always_miss = true;
    let mut last = Last::default();
    let (busy, _) = expect_miss(c.lookup_hooked(&miss, &mut last).kind);
    assert_eq!(last.1, 0);
    busy.fail();
}

#[test]
fn object_events_reach_subscribers() {
    let c = cache();
    let seen: Arc<Mutex<Vec<(ObjEvent, usize)>>> = Arc::default();
    let id = c.subscribe_objects({
        let seen = seen.clone();
        Arc::new(move |ev, id| seen.lock().unwrap().push((ev, id)))
    });
    let d = digest("/ev");
    // A fetch that fails was never in the cache: no event.
    let (busy, _) = expect_miss(lookup(&c, &d, T0));
    busy.fail();
    assert!(seen.lock().unwrap().is_empty());
    let o = insert(&c, &d, meta(1, T0, 10.0, 0.0, 0.0), b"x");
    assert_eq!(c.purge(&d, T0, 0.0, 0.0, 0.0), 1);
    let o2 = insert(&c, &d, meta(2, T0, 10.0, 0.0, 0.0), b"y");
    assert_eq!(c.expire_due(T0 + 11.0), 1);
    let ids: Vec<(ObjEvent, usize)> = seen.lock().unwrap().clone();
    assert_eq!(ids.len(), 4);
    assert_eq!(ids[0].0, ObjEvent::Insert);
    assert_eq!(ids[1], (ObjEvent::Expire, ids[0].1));
    assert_eq!(ids[2].0, ObjEvent::Insert);
    assert_eq!(ids[3], (ObjEvent::Expire, ids[2].1));
    assert_ne!(ids[0].1, ids[2].1);
    drop((o, o2));
    assert!(c.unsubscribe_objects(id));
    insert(&c, &d, meta(3, T0, 10.0, 0.0, 0.0), b"z");
    assert_eq!(seen.lock().unwrap().len(), 4);
}
