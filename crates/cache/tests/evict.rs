//! Purges, bans (lookup-time and lurker), LRU nuking and storage accounting.

mod common;

use std::sync::atomic::Ordering;

use bytes::Bytes;
use common::*;
use lacquer_cache::*;

fn insert_with_headers(
    c: &Cache,
    d: &Digest,
    vxid: u32,
    status: u16,
    hdrs: &[(&'static str, &'static str)],
) -> ObjRef {
    let (busy, _) = expect_miss(lookup(c, d, T0));
    let s0 = c.store("s0").unwrap();
    let mut o = new_obj(meta(vxid, T0, 3600.0, 10.0, 0.0), b"body");
    o.status = status;
    for (k, v) in hdrs {
        o.headers.push((
            Bytes::from_static(k.as_bytes()),
            Bytes::from_static(v.as_bytes()),
        ));
    }
    busy.unbusy(o, &s0).unwrap().obj
}

fn lookup_url(c: &Cache, d: &Digest, url: &str, now: f64) -> LookupResult {
    c.lookup(&LookupRequest::new(d, url.as_bytes(), &(), now))
}

#[test]
fn hard_purge_removes_all_variants_but_not_busy() {
    let c = cache();
    let d = digest("/p");
    let s0 = c.store("s0").unwrap();
    let mut r = LookupRequest::new(&d, b"/", &(), T0);
    r.always_miss = true;
    for v in 1..=3 {
        let (busy, _) = expect_miss(c.lookup(&r).kind);
        busy.unbusy(new_obj(meta(v, T0, 60.0, 10.0, 0.0), b"x"), &s0)
            .unwrap();
    }
    let (busy, _) = expect_miss(c.lookup(&r).kind);
    let other = digest("/other");
    insert(&c, &other, meta(9, T0, 60.0, 0.0, 0.0), b"o");
    assert_eq!(c.purge(&d, T0 + 1.0, 0.0, 0.0, 0.0), 3);
    assert_eq!(get(&c.stats().n_purges), 1);
    assert_eq!(get(&c.stats().n_obj_purged), 3);
    assert_eq!(get(&c.stats().n_object), 1);
    // The busy one survives and is then inserted.
    busy.unbusy(new_obj(meta(4, T0, 60.0, 10.0, 0.0), b"x"), &s0)
        .unwrap();
    assert_eq!(expect_hit(lookup(&c, &d, T0 + 2.0)).vxid(), 4);
    expect_hit(lookup(&c, &other, T0 + 2.0));
    assert_eq!(c.purge(&digest("/none"), T0, 0.0, 0.0, 0.0), 0);
    assert_eq!(
        s0.stevedore().stats().g_alloc.load(Ordering::Relaxed),
        4,
        "purged objects' storage is returned (two objects left, each an \
         object and a body allocation)"
    );
}

#[test]
fn soft_purge_makes_stale_but_keeps_grace() {
    let c = cache();
    let d = digest("/soft");
    insert(&c, &d, meta(1, T0, 600.0, 100.0, 0.0), b"x");
    // purge.soft(ttl=0, grace=30s)
    assert_eq!(c.purge(&d, T0 + 10.0, 0.0, 30.0, 0.0), 1);
    assert_eq!(get(&c.stats().n_purges), 0);
    match lookup(&c, &d, T0 + 11.0) {
        Lookup::Grace { stale, bgfetch } => {
            assert_eq!(stale.remaining_ttl(T0 + 10.0), 0.0);
            assert_eq!(stale.grace(), 30.0);
            assert!(bgfetch.is_some());
        }
        other => panic!("expected Grace, got {other:?}"),
    }
    // Longer values never extend: grace stays 30.
    c.purge(&d, T0 + 12.0, 0.0, 60.0, 0.0);
    assert_eq!(c.expire_due(T0 + 39.0), 0);
    assert_eq!(c.expire_due(T0 + 40.5), 1);
}

#[test]
fn soft_purge_negative_grace_and_keep_leave_them_unchanged() {
    let c = cache();
    let d = digest("/soft-default");
    insert(&c, &d, meta(1, T0, 600.0, 10.0, 5.0), b"x");
    // purge.soft() with its defaults: ttl=0, grace=-1, keep=-1.
    assert_eq!(c.purge(&d, T0 + 1.0, 0.0, -1.0, -1.0), 1);
    match lookup(&c, &d, T0 + 2.0) {
        Lookup::Grace { stale, .. } => assert_eq!(stale.grace(), 10.0),
        other => panic!("expected Grace, got {other:?}"),
    }
    // Still there through grace and keep (1 + 10 + 5 seconds).
    assert_eq!(c.expire_due(T0 + 15.5), 0);
    assert_eq!(c.expire_due(T0 + 16.5), 1);
}

#[test]
fn req_ban_checked_at_lookup_only_for_older_objects() {
    let c = cache();
    let da = digest("/news/a");
    let db = digest("/sport/b");
    insert(&c, &da, meta(1, T0, 3600.0, 0.0, 0.0), b"a");
    insert(&c, &db, meta(2, T0, 3600.0, 0.0, 0.0), b"b");
    c.ban_str("req.url ~ ^/news", T0 + 1.0).unwrap();
    assert_eq!(get(&c.stats().bans), 2);
    assert_eq!(get(&c.stats().bans_req), 1);
    // Object inserted after the ban is not affected by it.
    let dc = digest("/news/c");
    insert(&c, &dc, meta(3, T0 + 2.0, 3600.0, 0.0, 0.0), b"c");
    assert_eq!(get(&c.stats().bans_tested), 0);

    let r = lookup_url(&c, &db, "/sport/b", T0 + 3.0);
    expect_hit(r.kind);
    assert!(r.banned.is_empty());
    assert_eq!(get(&c.stats().bans_tested), 1);
    // Once checked, not tested again.
    expect_hit(lookup_url(&c, &db, "/sport/b", T0 + 3.0).kind);
    assert_eq!(get(&c.stats().bans_tested), 1);

    let r = lookup_url(&c, &da, "/news/a", T0 + 3.0);
    assert_eq!(r.banned, vec![1]);
    let (busy, stale) = expect_miss(r.kind);
    assert!(stale.is_none());
    drop(busy);
    assert_eq!(get(&c.stats().bans_obj_killed), 1);
    expect_hit(lookup_url(&c, &dc, "/news/c", T0 + 3.0).kind);

    let list = c.ban_list();
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines[0], "Present bans:");
    assert!(lines[1].ends_with(" -  req.url ~ ^/news"), "{list}");
    // Refcount column: /sport/b and /news/c now reference the ban.
    assert!(lines[1].contains("     2 -"), "{list}");
    assert_eq!(lines.len(), 3, "{list}");
    assert!(lines[2].ends_with(" C  "), "{list}");
}

#[test]
fn lurker_kills_obj_bans_completes_and_trims() {
    let c = cache();
    let mut kept = Vec::new();
    for i in 0..40u32 {
        let d = digest(&format!("/l{i}"));
        let tag = if i % 4 == 0 { "red" } else { "blue" };
        let hdrs: &[(&'static str, &'static str)] = if tag == "red" {
            &[("X-Tag", "red")]
        } else {
            &[("X-Tag", "blue")]
        };
        insert_with_headers(&c, &d, i, 200, hdrs);
        kept.push((d, tag));
    }
    c.ban_str("obj.http.x-tag == red", T0 + 1.0).unwrap();
    c.ban_str("obj.http.x-tag == red", T0 + 1.0).unwrap();
    assert_eq!(get(&c.stats().bans_dups), 1);
    assert_eq!(get(&c.stats().bans_completed), 2);
    // Too young for the lurker (ban_lurker_age 60s): nothing happens.
    let r = c.ban_lurker_step(T0 + 2.0, 60.0, 1000, 0);
    assert_eq!(r.killed, 0);
    assert_eq!(r.tested, 0);
    let r = c.ban_lurker_step(T0 + 100.0, 60.0, 1000, 0);
    assert_eq!(r.tested, 40);
    assert_eq!(r.killed, 10);
    assert_eq!(get(&c.stats().bans_lurker_obj_killed), 10);
    assert_eq!(get(&c.stats().n_object), 30);
    // All objects now past the ban: it completed.
    assert!(r.completed >= 1);
    // As in varnishd, the killed objects let go of the boot ban only after
    // the tail was cut: it stays until the lurker's next round.
    assert_eq!(r.deleted, 0, "{r:?}");
    for (d, tag) in kept {
        let l = lookup(&c, &d, T0 + 101.0);
        match (tag, l) {
            ("red", Lookup::Miss { .. }) | ("blue", Lookup::Hit(_)) => {}
            (t, other) => panic!("{t}: unexpected {other:?}"),
        }
    }
    // A round that tested objects comes back at the next step: then the
    // boot ban and the duplicate go, both behind every object now.
    let r = c.ban_lurker_step(T0 + 101.0, 60.0, 1000, 0);
    assert_eq!((r.killed, r.deleted), (0, 2), "{r:?}");
    assert_eq!(get(&c.stats().bans_deleted), 2);
    let list = c.ban_list();
    assert_eq!(list.lines().count(), 2, "{list}");
    assert!(list.contains("30 C  obj.http.x-tag == red"), "{list}");
    // A later lurker step on a quiet list changes nothing.
    let r = c.ban_lurker_step(T0 + 300.0, 60.0, 1000, 0);
    assert_eq!((r.killed, r.deleted), (0, 0));
}

#[test]
fn lurker_sleeps_between_rounds() {
    let c = cache();
    let d = digest("/a");
    insert_with_headers(&c, &d, 1, 200, &[]);
    // The boot ban is referenced by /a; a req ban does not wake the lurker.
    c.ban_str("req.url ~ nothing", T0 + 1.0).unwrap();
    let r = c.ban_lurker_step(T0 + 2.0, 60.0, 1000, 0);
    assert_eq!(r.deleted, 0);
    // /a passes the req ban at lookup and moves up: the boot ban is left
    // unreferenced and the lookup wakes the lurker, which cuts it.
    expect_hit(lookup(&c, &d, T0 + 3.0));
    let r = c.ban_lurker_step(T0 + 3.1, 60.0, 1000, 0);
    assert_eq!(r.deleted, 1, "{r:?}");
    // Nothing more to do: the next round is 49.62 s away.
    c.ban_str("req.url ~ other", T0 + 4.0).unwrap();
    let r = c.ban_lurker_step(T0 + 5.0, 60.0, 1000, 0);
    assert_eq!((r.killed, r.deleted, r.tested), (0, 0, 0));
}

#[test]
fn lurker_cannot_pass_req_bans_but_lookup_can() {
    let c = cache();
    let d = digest("/mixed");
    insert_with_headers(&c, &d, 1, 200, &[]);
    c.ban_str("req.url ~ nothing", T0 + 1.0).unwrap();
    c.ban_str("obj.status == 404", T0 + 1.0).unwrap();
    let r = c.ban_lurker_step(T0 + 100.0, 0.0, 1000, 0);
    assert_eq!(r.killed, 0);
    assert_eq!(get(&c.stats().bans), 3);
    // The lurker tested the object against the obj ban beyond the req ban
    // (as varnishd) and completed it, but could not move the object past
    // the req ban.
    assert_eq!(get(&c.stats().bans_lurker_tested), 1);
    assert!(
        c.ban_list().contains(" C  obj.status == 404"),
        "{}",
        c.ban_list()
    );
    // The lookup tests only the req ban (one object check, one test) and
    // moves the object to the newest ban.
    expect_hit(lookup_url(&c, &d, "/mixed", T0 + 101.0).kind);
    assert_eq!(get(&c.stats().bans_tested), 1);
    assert_eq!(get(&c.stats().bans_tests_tested), 1);
    let r = c.ban_lurker_step(T0 + 102.0, 0.0, 1000, 0);
    assert!(r.deleted >= 2, "{r:?}");
    assert_eq!(get(&c.stats().bans), 1);
    assert_eq!(
        get(&c.stats().bans_added) - get(&c.stats().bans_deleted),
        get(&c.stats().bans)
    );
}

#[test]
fn ban_cutoff_drops_objects_on_old_bans_untested() {
    let c = cache();
    let d = digest("/old");
    insert_with_headers(&c, &d, 1, 200, &[]);
    for i in 0..5 {
        c.ban_str(&format!("obj.http.nomatch == {i}"), T0 + 1.0)
            .unwrap();
    }
    // Six bans (boot + 5), cutoff 4: the object hangs on the boot ban,
    // past the cutoff, and goes without being tested.
    let r = c.ban_lurker_step(T0 + 100.0, 0.0, 1000, 4);
    assert_eq!(r.killed, 1);
    assert_eq!(get(&c.stats().bans_lurker_obj_killed_cutoff), 1);
    assert_eq!(get(&c.stats().bans_lurker_tested), 0);
    assert_eq!(get(&c.stats().n_object), 0);
}

#[test]
fn ban_duration_fields() {
    let c = cache();
    let d1 = digest("/short");
    let d2 = digest("/long");
    insert(&c, &d1, meta(1, T0, 60.0, 0.0, 0.0), b"x");
    insert(&c, &d2, meta(2, T0, 86400.0 * 2.0, 0.0, 0.0), b"x");
    c.ban_str("obj.ttl > 1d", T0 + 1.0).unwrap();
    let r = c.ban_lurker_step(T0 + 2.0, 0.0, 100, 0);
    assert_eq!(r.killed, 1);
    expect_hit(lookup(&c, &d1, T0 + 3.0));
    expect_miss(lookup(&c, &d2, T0 + 3.0));
    assert!(c.ban_list().contains("obj.ttl > 1d"));
    assert!(c.ban_str("obj.age == 4", T0).is_err());
    assert_eq!(
        c.ban_str("obj.http.foo > 4d", T0).unwrap_err().to_string(),
        "expected conditional (==, !=, ~ or !~) got \">\""
    );
}

#[test]
fn lru_nukes_oldest_idle_objects() {
    // Room for four objects of 1000 body bytes plus overhead, not five.
    let c = cache_with(Some(5000), 50);
    let s0 = c.store("s0").unwrap();
    static BODY: [u8; 1000] = [b'z'; 1000];
    let mut ds = Vec::new();
    for i in 0..4u32 {
        let d = digest(&format!("/n{i}"));
        insert(&c, &d, meta(i, T0 + f64::from(i), 3600.0, 0.0, 0.0), &BODY);
        ds.push(d);
    }
    assert_eq!(get(&c.stats().n_lru_nuked), 0);
    // Use /n0 recently (beyond lru_interval) so /n1 is the oldest; hold a
    // reference to /n2 so it cannot be nuked either.
    expect_hit(lookup(&c, &ds[0], T0 + 10.0));
    let held = expect_hit(lookup(&c, &ds[2], T0 + 10.0));
    assert_eq!(get(&c.stats().n_lru_moved), 2);
    let d = digest("/n-new");
    insert(&c, &d, meta(9, T0 + 11.0, 3600.0, 0.0, 0.0), &BODY);
    let nuked = get(&c.stats().n_lru_nuked);
    assert!(nuked >= 1);
    expect_miss(lookup(&c, &ds[1], T0 + 12.0));
    expect_hit(lookup(&c, &ds[2], T0 + 12.0));
    drop(held);
    let st = s0.stevedore().stats();
    assert!(st.g_bytes.load(Ordering::Relaxed) <= 5000);
    assert!(st.c_fail.load(Ordering::Relaxed) >= 1);
}

#[test]
fn nuke_limit_and_oversized_objects_fail_cleanly() {
    let c = cache_with(Some(3000), 0);
    static BODY: [u8; 1000] = [b'z'; 1000];
    insert(&c, &digest("/a"), meta(1, T0, 3600.0, 0.0, 0.0), &BODY);
    insert(&c, &digest("/b"), meta(2, T0, 3600.0, 0.0, 0.0), &BODY);
    let d = digest("/c");
    let (busy, _) = expect_miss(lookup(&c, &d, T0));
    let s0 = c.store("s0").unwrap();
    let e = busy
        .unbusy(new_obj(meta(3, T0, 3600.0, 0.0, 0.0), &BODY), &s0)
        .unwrap_err();
    assert_eq!(e.store, "s0");
    assert_eq!(e.nuked, 0);
    assert!(e.to_string().starts_with("Could not get storage"));
    assert_eq!(get(&c.stats().n_lru_limited), 1);
    // The failed busy object is gone; the next request may try again.
    let (busy, _) = expect_miss(lookup(&c, &d, T0));

    // Streamed body hitting the limit mid-way: push fails, fail() cleans up.
    let c2 = cache_with(Some(4000), 50);
    let s0 = c2.store("s0").unwrap();
    let d = digest("/big");
    let (b2, _) = expect_miss(lookup(&c2, &d, T0));
    let (obj, mut fb) = unbusy_streamed(b2, &s0);
    fb.push(Bytes::from(vec![0u8; 2000])).unwrap();
    let err = fb.push(Bytes::from(vec![0u8; 5000])).unwrap_err();
    assert_eq!(err.wanted, 5000);
    fb.fail();
    assert!(obj.flags().failed());
    drop(obj);
    drop(busy);
    assert_eq!(s0.stevedore().stats().g_bytes.load(Ordering::Relaxed), 0);
}

#[test]
fn streamed_bodies_are_charged_in_pieces_and_trimmed() {
    let c = cache_with(Some(100_000), 50);
    let s0 = c.store("s0").unwrap();
    let g_bytes = || s0.stevedore().stats().g_bytes.load(Ordering::Relaxed);
    let stream = |path: &str, vxid: u32| {
        let (busy, _) = expect_miss(lookup(&c, &digest(path), T0));
        let u = busy
            .unbusy(
                NewObject {
                    body: NewBody::Streamed,
                    ..new_obj(meta(vxid, T0, 60.0, 0.0, 0.0), b"")
                },
                &s0,
            )
            .unwrap();
        (u, g_bytes())
    };
    // Unknown length: a whole fetch_chunksize piece while the body comes
    // in, the unused tail given back at the end.
    let (mut u, head) = stream("/chunked", 1);
    let mut fb = u.body.take().unwrap();
    fb.plan(PiecePlan {
        estimate: None,
        chunk: 16384,
        max_chunk: u64::MAX,
    });
    fb.push(Bytes::from(vec![0u8; 4096])).unwrap();
    assert_eq!(g_bytes(), head + 16384);
    fb.push(Bytes::from(vec![0u8; 20000])).unwrap();
    // 12288 left over, the 7712 missing come in a second whole piece.
    assert_eq!(g_bytes(), head + 2 * 16384);
    fb.finish();
    assert_eq!(g_bytes(), head + 24096);
    assert_eq!(u.obj.charged_bytes(), head + 24096);
    // Known length: all of it at the first segment.
    let before = g_bytes();
    let (mut u2, head2) = stream("/length", 2);
    let mut fb = u2.body.take().unwrap();
    fb.plan(PiecePlan {
        estimate: Some(3000),
        chunk: 16384,
        max_chunk: u64::MAX,
    });
    fb.push(Bytes::from(vec![0u8; 1000])).unwrap();
    assert_eq!(g_bytes(), head2 + 3000);
    fb.push(Bytes::from(vec![0u8; 2000])).unwrap();
    assert_eq!(g_bytes(), head2 + 3000);
    fb.finish();
    assert_eq!(g_bytes() - before, head2 - before + 3000);
}

#[test]
fn events_for_logging() {
    // Room for two objects of ~1.3 KB (1000 body bytes plus overhead).
    let c = cache_with(Some(3500), 50);
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let l2 = log.clone();
    assert!(c.set_event_sink(std::sync::Arc::new(move |e| l2.lock().unwrap().push(e))));
    assert!(!c.set_event_sink(std::sync::Arc::new(|_| {})));
    static BODY: [u8; 1000] = [b'z'; 1000];
    insert(&c, &digest("/1"), meta(1, T0, 10.0, 0.0, 0.0), &BODY);
    insert(&c, &digest("/2"), meta(2, T0, 100.0, 0.0, 0.0), &BODY);
    // No room for a third: /1 is nuked.
    insert(&c, &digest("/3"), meta(3, T0, 100.0, 0.0, 0.0), &BODY);
    c.expire_due(T0 + 200.0);
    let ev = log.lock().unwrap().clone();
    let armed: Vec<(u32, f64)> = ev
        .iter()
        .filter_map(|e| match *e {
            CacheEvent::ExpiryArmed { vxid, when, .. } => Some((vxid, when)),
            _ => None,
        })
        .collect();
    assert_eq!(armed, [(1, T0 + 10.0), (2, T0 + 100.0), (3, T0 + 100.0)]);
    assert!(matches!(ev[2], CacheEvent::Nuked { vxid: 1 }), "{ev:?}");
    // The sweep, woken by the new objects, looked at the first to expire
    // (now overdue) before removing it.
    let checks: Vec<f64> = ev
        .iter()
        .filter_map(|e| match *e {
            CacheEvent::ExpiryCheck { left, .. } => Some(left),
            _ => None,
        })
        .collect();
    assert_eq!(checks, [-100.0]);
    // Nothing new and nothing due: the next sweep stays quiet.
    c.expire_due(T0 + 201.0);
    assert_eq!(log.lock().unwrap().len(), ev.len());
    assert!(ev.contains(&CacheEvent::Expired {
        vxid: 2,
        ttl_left: -100.0
    }));
    assert!(ev.contains(&CacheEvent::Expired {
        vxid: 3,
        ttl_left: -100.0
    }));
    // An object armed since the last sweep: the next sweep reports the
    // first to expire, once; then it stays quiet.
    let n = log.lock().unwrap().len();
    insert(&c, &digest("/4"), meta(4, T0, 1000.0, 0.0, 0.0), &BODY);
    c.expire_due(T0 + 300.0);
    let checks: Vec<f64> = log.lock().unwrap()[n..]
        .iter()
        .filter_map(|e| match *e {
            CacheEvent::ExpiryCheck { left, .. } => Some(left),
            _ => None,
        })
        .collect();
    assert_eq!(checks, [700.0]);
    c.expire_due(T0 + 301.0);
    assert_eq!(log.lock().unwrap().len(), n + 2);
}

#[test]
fn kill_removes_now() {
    let c = cache();
    let d = digest("/k");
    let o = insert(&c, &d, meta(1, T0, 60.0, 0.0, 0.0), b"x");
    assert!(c.kill(&o));
    assert!(!c.kill(&o));
    assert!(o.flags().dying());
    // The holder can still read it.
    assert_eq!(
        &o.body().segments().unwrap()[0].read_blocking().unwrap()[..],
        b"x"
    );
    let (busy, _) = expect_miss(lookup(&c, &d, T0));
    drop(busy);
}

#[test]
fn a_store_granting_less_gets_more_pieces() {
    // varnishd's `debug,lessspace` store grants one byte less than asked.
    let s0: std::sync::Arc<dyn lacquer_storage::Stevedore> =
        std::sync::Arc::new(lacquer_storage::MallocStore::debug("s0", None, true));
    let c = Cache::new(CacheConfig::default(), vec![s0], T0);
    let s0 = c.store("s0").unwrap();
    let (busy, _) = expect_miss(lookup(&c, &digest("/less"), T0));
    let (obj, mut fb) = unbusy_streamed(busy, &s0);
    fb.push(Bytes::from_static(b"0123456789")).unwrap();
    fb.finish();
    // 10 bytes in pieces of 9 and 1, in order.
    let segs = obj.body().segments().unwrap();
    assert_eq!(segs.len(), 2);
    assert_eq!(&segs[0].read_blocking().unwrap()[..], b"012345678");
    assert_eq!(&segs[1].read_blocking().unwrap()[..], b"9");
    let stats = s0.stevedore().stats();
    // The object's own allocation plus the two pieces.
    assert_eq!(stats.c_req.load(Ordering::Relaxed), 3);
}

#[test]
fn objects_cost_what_varnishd_charges() {
    // Figures read from varnishd 7.1's SMA.s0.g_bytes for the same
    // responses (Date removed in VCL so only these headers are stored).
    let c = cache_with(Some(1 << 20), 50);
    let s0 = c.store("s0").unwrap();
    let g_bytes = || s0.stevedore().stats().g_bytes.load(Ordering::Relaxed);
    let cost = |path: &str,
                reason: &'static [u8],
                hdrs: &[(&'static str, &'static str)],
                body: &'static [u8]| {
        let before = g_bytes();
        let (busy, _) = expect_miss(lookup(&c, &digest(path), T0));
        let mut o = new_obj(meta(1, T0, 3600.0, 10.0, 0.0), body);
        o.reason = Bytes::from_static(reason);
        o.headers = hdrs
            .iter()
            .map(|(k, v)| {
                (
                    Bytes::from_static(k.as_bytes()),
                    Bytes::from_static(v.as_bytes()),
                )
            })
            .collect();
        let obj = busy.unbusy(o, &s0).unwrap().obj;
        let cost = g_bytes() - before;
        (obj, cost)
    };
    let (_a, a) = cost("/a", b"OK", &[("Content-Length", "0")], b"");
    assert_eq!(a, 160);
    let (_b, b) = cost("/b", b"OK", &[("Content-Length", "1000")], &[b'x'; 1000]);
    assert_eq!(b, 1168);
    let (_c, c3) = cost(
        "/c",
        b"Fine Thing",
        &[("X-Foo", "abcdefghijk"), ("Content-Length", "10")],
        b"0123456789",
    );
    assert_eq!(c3, 202);
}

/// Counters of `c`'s store `s0`: (c_req, c_bytes, c_freed, g_alloc, g_bytes).
fn sma(c: &Cache) -> (u64, u64, u64, u64, u64) {
    let s0 = c.store("s0").unwrap();
    let st = s0.stevedore().stats();
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    (
        g(&st.c_req),
        g(&st.c_bytes),
        g(&st.c_freed),
        g(&st.g_alloc),
        g(&st.g_bytes),
    )
}

/// A streamed body planned as `plan` and made of `len` bytes in 1000-byte
/// segments; returns the object's own charge and the counters.
fn streamed_with(plan: (Option<u64>, u64), len: usize) -> (u64, (u64, u64, u64, u64, u64)) {
    let c = cache();
    let (busy, _) = expect_miss(lookup(&c, &digest("/p"), T0));
    let s0 = c.store("s0").unwrap();
    let (obj, mut fb) = unbusy_streamed(busy, &s0);
    let own = sma(&c).1;
    fb.plan(PiecePlan {
        estimate: plan.0,
        chunk: plan.1,
        max_chunk: u64::MAX,
    });
    let body = vec![b'q'; len];
    for part in body.chunks(1000) {
        fb.push(Bytes::copy_from_slice(part)).unwrap();
    }
    fb.finish();
    assert_eq!(obj.body().len_so_far(), len as u64);
    (own, sma(&c))
}

#[test]
fn the_last_piece_is_trimmed_as_varnishd_does() {
    // Enough left over: the bytes move to a piece of their size and the
    // old piece is freed (g00002's extra storage request).
    let (own, got) = streamed_with((None, 4096), 273);
    assert_eq!(got, (3, own + 4096 + 273, 4096, 2, own + 273));
    // Less than 512 bytes unused: the piece stays as it is.
    let (own, got) = streamed_with((None, 4096), 3700);
    assert_eq!(got, (2, own + 4096, 0, 2, own + 4096));
    // The backend's length first, even when a filter shrank the body.
    let (own, got) = streamed_with((Some(10_000), 4096), 383);
    assert_eq!(got, (3, own + 10_000 + 383, 10_000, 2, own + 383));
    // A body outgrowing the estimate continues in fetch_chunksize pieces.
    let (own, got) = streamed_with((Some(1000), 4096), 3000);
    assert_eq!(got, (4, own + 1000 + 4096 + 2000, 4096, 3, own + 3000));
    // An exact estimate leaves nothing to trim.
    let (own, got) = streamed_with((Some(3000), 4096), 3000);
    assert_eq!(got, (2, own + 3000, 0, 2, own + 3000));
}

#[test]
fn complete_bodies_are_charged_as_their_fetch_would_have_been() {
    static BODY: [u8; 383] = [b'g'; 383];
    let c = cache();
    let (busy, _) = expect_miss(lookup(&c, &digest("/z"), T0));
    let s0 = c.store("s0").unwrap();
    let obj = busy
        .unbusy(
            NewObject {
                body_chunk: Some(PiecePlan {
                    estimate: Some(10_000),
                    chunk: 4096,
                    max_chunk: u64::MAX,
                }),
                ..new_obj(meta(1, T0, 60.0, 0.0, 0.0), &BODY)
            },
            &s0,
        )
        .unwrap()
        .obj;
    let (c_req, c_bytes, c_freed, g_alloc, g_bytes) = sma(&c);
    let own = g_bytes - 383;
    assert_eq!(
        (c_req, c_bytes, c_freed, g_alloc),
        (3, own + 10_000 + 383, 10_000, 2)
    );
    assert_eq!(obj.charged_bytes(), g_bytes);
}

#[test]
fn stored_vary_data_is_charged_to_shared_objects_only() {
    static BODY: [u8; 10] = [b'v'; 10];
    let c = cache();
    let s0 = c.store("s0").unwrap();
    let plain = insert(&c, &digest("/plain"), meta(1, T0, 60.0, 0.0, 0.0), &BODY);
    let (busy, _) = expect_miss(lookup(&c, &digest("/vary"), T0));
    let varied = busy
        .unbusy(
            NewObject {
                vary_bytes: Some(32),
                ..new_obj(meta(2, T0, 60.0, 0.0, 0.0), &BODY)
            },
            &s0,
        )
        .unwrap()
        .obj;
    assert_eq!(varied.charged_bytes(), plain.charged_bytes() + 32);
    let private = c
        .insert_private(
            NewObject {
                vary_bytes: Some(32),
                ..new_obj(meta(3, T0, 60.0, 0.0, 0.0), &BODY)
            },
            &s0,
        )
        .unwrap()
        .obj;
    assert_eq!(private.charged_bytes(), plain.charged_bytes());
}

#[test]
fn a_piece_that_does_not_fit_is_halved_before_nuking() {
    let c = cache_with(Some(100_000), 50);
    static OLD: [u8; 10] = [b'o'; 10];
    insert(&c, &digest("/old"), meta(1, T0, 60.0, 0.0, 0.0), &OLD);
    let (busy, _) = expect_miss(lookup(&c, &digest("/h"), T0));
    let s0 = c.store("s0").unwrap();
    let (_obj, mut fb) = unbusy_streamed(busy, &s0);
    fb.plan(PiecePlan {
        estimate: Some(1_000_000),
        chunk: 4096,
        max_chunk: 400_000,
    });
    let before = sma(&c);
    fb.push(Bytes::from(vec![b'h'; 5000])).unwrap();
    let after = sma(&c);
    // Capped at 400 000, then 200 000 and 100 000 fail; 50 000 fits
    // without nuking the old object.
    assert_eq!(after.0 - before.0, 4);
    assert_eq!(after.1 - before.1, 50_000);
    assert_eq!(get(&c.stats().n_lru_nuked), 0);
    let s = s0.stevedore().stats();
    assert_eq!(s.c_fail.load(Ordering::Relaxed), 3);
    fb.finish();
    expect_hit(lookup(&c, &digest("/old"), T0));
}

#[test]
fn refresh_in_place_revalidates_without_a_copy() {
    let c = cache();
    let d = digest("/s3/object");
    let (busy, _) = expect_miss(lookup(&c, &d, T0));
    let mut o = new_obj(meta(7, T0, 3600.0, 10.0, 3600.0), b"body");
    o.headers
        .push((Bytes::from_static(b"X-206"), Bytes::from_static(b"true")));
    let old = busy.unbusy(o, &c.store("s0").unwrap()).unwrap().obj;
    let charged = sma(&c);
    let objects = get(&c.stats().n_object);
    // Past its ttl and grace, within keep: a miss that may revalidate.
    let life = |t: f64| Lifetime {
        t_origin: t,
        ttl: 0.000001,
        grace: 0.0,
        keep: 3600.0,
    };
    let (busy, stale) = expect_miss(lookup(&c, &d, T0 + 3611.0));
    let stale = stale.unwrap();
    assert!(stale.same(&old));
    // A request arriving meanwhile waits on the busy objcore.
    let waiter = match lookup(&c, &d, T0 + 3611.0) {
        Lookup::Busy(w) => w,
        other => panic!("expected Busy, got {other:?}"),
    };
    busy.refresh_in_place(&stale, life(T0 + 3612.0)).unwrap();
    // The waiter was woken (its channel answered, not dropped unanswered).
    futures_lite_block_on(waiter);
    // Same object, same headers and body, new lifetime; nothing new
    // allocated or charged, no object added.
    assert_eq!(old.t_origin(), T0 + 3612.0);
    assert_eq!(old.ttl(), 0.000001);
    assert_eq!(old.keep(), 3600.0);
    assert_eq!(old.data().header("x-206"), Some(&b"true"[..]));
    assert_eq!(sma(&c), charged);
    assert_eq!(get(&c.stats().n_object), objects);
    assert_eq!(get(&c.stats().n_objectcore), 1);
    // Its expiry moved with it: kept an hour from the refresh.
    assert_eq!(c.expire_due(T0 + 3700.0), 0);
    let (busy, stale) = expect_miss(lookup(&c, &d, T0 + 3700.0));
    assert!(stale.unwrap().same(&old));
    // A stale object that left the cache meanwhile is not refreshed:
    // the busy objcore comes back for an ordinary insert.
    assert!(c.kill(&old));
    let busy = busy.refresh_in_place(&old, life(T0 + 3701.0)).unwrap_err();
    assert_eq!(old.t_origin(), T0 + 3612.0);
    let s0 = c.store("s0").unwrap();
    let new = busy
        .unbusy(new_obj(meta(8, T0 + 3701.0, 60.0, 0.0, 0.0), b"new"), &s0)
        .unwrap()
        .obj;
    assert!(expect_hit(lookup(&c, &d, T0 + 3702.0)).same(&new));
    // Nor is an object of another objhead.
    let other = insert(&c, &digest("/other"), meta(9, T0, 1.0, 0.0, 60.0), b"o");
    let (busy, _) = expect_miss(lookup(&c, &d, T0 + 4000.0));
    let busy = busy
        .refresh_in_place(&other, life(T0 + 4000.0))
        .unwrap_err();
    drop(busy);
}

/// Waits for a waiter without a runtime of its own (it only awaits a
/// oneshot channel).
fn futures_lite_block_on(w: Waiter) {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(w.wait());
}
