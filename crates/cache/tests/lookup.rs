//! Lookup decision table, waiting lists and streaming, driven as the server will.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use common::*;
use lacquer_cache::*;

#[test]
fn miss_then_hit_and_counters() {
    let c = cache();
    let d = digest("/a");
    let (busy, stale) = expect_miss(lookup(&c, &d, T0));
    assert!(stale.is_none());
    assert_eq!(get(&c.stats().n_objectcore), 1);
    assert_eq!(get(&c.stats().n_objecthead), 1);
    assert_eq!(get(&c.stats().n_object), 0);
    let s0 = c.store("s0").unwrap();
    let u = busy
        .unbusy(new_obj(meta(1001, T0, 120.0, 10.0, 0.0), b"hello"), &s0)
        .unwrap();
    assert!(u.body.is_none());
    assert_eq!(get(&c.stats().n_object), 1);
    let o = expect_hit(lookup(&c, &d, T0 + 1.0));
    assert_eq!(o.vxid(), 1001);
    assert_eq!(o.hits(), 1);
    assert_eq!(o.data().status, 200);
    assert_eq!(o.data().etag(), Some(&b"\"abc\""[..]));
    assert_eq!(o.data().header("content-type"), Some(&b"text/plain"[..]));
    assert_eq!(o.data().last_modified(), None);
    assert_eq!(o.store_name(), Some("s0"));
    assert!(o.same(&u.obj));
    assert_eq!(o.remaining_ttl(T0 + 20.0), 100.0);
    assert_eq!(o.age(T0 + 20.0), 20.0);
    assert!(!o.flags().busy() && !o.flags().dying());
    let o2 = expect_hit(lookup(&c, &d, T0 + 119.0));
    assert_eq!(o2.hits(), 2);
    // Storage accounting: the object and its body, as two allocations.
    let st = s0.stevedore().stats();
    assert!(st.g_bytes.load(Ordering::Relaxed) > 5);
    assert_eq!(st.g_alloc.load(Ordering::Relaxed), 2);
    // The body is shared, not copied.
    assert_eq!(
        &o.body().segments().unwrap()[0].read_blocking().unwrap()[..],
        b"hello"
    );
}

#[test]
fn grace_keep_and_expiry() {
    let c = cache();
    let d = digest("/g");
    insert(&c, &d, meta(1, T0, 10.0, 20.0, 30.0), b"x");
    // Fresh.
    expect_hit(lookup(&c, &d, T0 + 9.9));
    // Stale, in grace, nobody fetching: grace hit + background fetch.
    let bg = match lookup(&c, &d, T0 + 15.0) {
        Lookup::Grace {
            stale,
            bgfetch: Some(b),
        } => {
            assert_eq!(stale.vxid(), 1);
            b
        }
        other => panic!("expected Grace with bgfetch, got {other:?}"),
    };
    // A second request during the refresh: grace hit without another fetch.
    match lookup(&c, &d, T0 + 16.0) {
        Lookup::Grace { bgfetch: None, .. } => {}
        other => panic!("expected Grace without bgfetch, got {other:?}"),
    }
    // req.grace shorter than the stale time: must wait for the refresh.
    let mut r = LookupRequest::new(&d, b"/", &(), T0 + 16.0);
    r.req_grace = Some(2.0);
    let w = match c.lookup(&r).kind {
        Lookup::Busy(w) => w,
        other => panic!("expected Busy, got {other:?}"),
    };
    drop(w);
    drop(bg); // refresh abandoned
    // Past grace, within keep: miss with the stale object for revalidation.
    let (busy, stale) = expect_miss(lookup(&c, &d, T0 + 45.0));
    assert_eq!(stale.unwrap().vxid(), 1);
    busy.fail();
    // Past keep: gone.
    let (busy, stale) = expect_miss(lookup(&c, &d, T0 + 61.0));
    assert!(stale.is_none());
    assert_eq!(get(&c.stats().n_expired), 1);
    drop(busy);
    assert_eq!(get(&c.stats().n_object), 0);
    assert_eq!(get(&c.stats().n_objectcore), 0);
    assert_eq!(get(&c.stats().n_objecthead), 0);
}

#[test]
fn req_ttl_shortens_freshness() {
    let c = cache();
    let d = digest("/rt");
    insert(&c, &d, meta(1, T0, 100.0, 100.0, 0.0), b"x");
    let mut r = LookupRequest::new(&d, b"/", &(), T0 + 50.0);
    r.req_ttl = Some(10.0);
    // Stale for this request only: the object is not an expired candidate
    // (Varnish records only objects stale by their own ttl), so a plain miss.
    let (busy, stale) = expect_miss(c.lookup(&r).kind);
    assert!(stale.is_none());
    drop(busy);
    // Without req.ttl it is still a hit.
    expect_hit(lookup(&c, &d, T0 + 50.0));
}

#[test]
fn expire_due_sweeps() {
    let c = cache();
    for i in 0..10 {
        let d = digest(&format!("/e{i}"));
        insert(&c, &d, meta(i, T0, f64::from(i), 0.0, 0.0), b"x");
    }
    assert_eq!(c.next_expiry(), Some(T0));
    // ttl 0 objects are never hits but stay until expiry.
    assert_eq!(c.expire_due(T0 + 4.5), 5);
    assert_eq!(get(&c.stats().n_expired), 5);
    assert_eq!(get(&c.stats().n_object), 5);
    assert_eq!(get(&c.stats().n_objecthead), 5);
    expect_hit(lookup(&c, &digest("/e9"), T0 + 5.0));
    assert_eq!(c.expire_due(T0 + 100.0), 5);
    assert_eq!(get(&c.stats().n_object), 0);
    assert_eq!(c.next_expiry(), None);
    let s0 = c.store("s0").unwrap();
    assert_eq!(s0.stevedore().stats().g_bytes.load(Ordering::Relaxed), 0);
    assert_eq!(s0.lru_len(), 0);
}

#[test]
fn clear_empties_the_cache() {
    let c = cache();
    for i in 0..3 {
        let d = digest(&format!("/c{i}"));
        insert(&c, &d, meta(i, T0, 100.0, 0.0, 0.0), b"x");
    }
    expect_hit(lookup(&c, &digest("/c1"), T0 + 1.0));
    assert_eq!(c.clear(), 3);
    assert_eq!(get(&c.stats().n_object), 0);
    let (busy, _) = expect_miss(lookup(&c, &digest("/c1"), T0 + 1.0));
    drop(busy);
    assert_eq!(c.next_expiry(), None);
}

#[test]
fn hit_for_pass_and_hit_for_miss() {
    let c = cache();
    let t = c.transient();
    let d = digest("/hfp");
    let (busy, _) = expect_miss(lookup(&c, &d, T0));
    let mut m = meta(7, T0, 60.0, 0.0, 0.0);
    m.kind = ObjKind::HitForPass;
    let mut o = new_obj(m, b"");
    o.body = NewBody::Empty;
    busy.unbusy(o, &t).unwrap();
    match lookup(&c, &d, T0 + 1.0) {
        Lookup::HitPass { vxid, dttl } => {
            assert_eq!(vxid, 7);
            assert_eq!(dttl, 59.0);
        }
        other => panic!("expected HitPass, got {other:?}"),
    }

    let d = digest("/hfm");
    let (busy, _) = expect_miss(lookup(&c, &d, T0));
    let mut m = meta(8, T0, 60.0, 10.0, 0.0);
    m.kind = ObjKind::HitForMiss;
    let mut o = new_obj(m, b"");
    o.body = NewBody::Empty;
    busy.unbusy(o, &t).unwrap();
    // Two concurrent HFM lookups both get their own busy objcore: no waiting.
    let a = lookup(&c, &d, T0 + 1.0);
    let b = lookup(&c, &d, T0 + 1.0);
    for l in [a, b] {
        match l {
            Lookup::HitMiss {
                vxid, dttl, busy, ..
            } => {
                assert_eq!(vxid, 8);
                assert_eq!(dttl, 59.0);
                drop(busy);
            }
            other => panic!("expected HitMiss, got {other:?}"),
        }
    }
    // Expired HFM still around (grace): still a hit-for-miss.
    match lookup(&c, &d, T0 + 61.0) {
        Lookup::HitMiss { vxid: 8, .. } => {}
        other => panic!("expected HitMiss, got {other:?}"),
    }
    // Fully expired: a plain miss.
    let (busy, stale) = expect_miss(lookup(&c, &d, T0 + 71.0));
    assert!(stale.is_none());
    drop(busy);
}

#[test]
fn vary_variants() {
    let c = cache();
    let d = digest("/v");
    let s0 = c.store("s0").unwrap();
    let gz: Vec<(&str, &str)> = vec![("Accept-Encoding", "gzip")];
    let br: Vec<(&str, &str)> = vec![("Accept-Encoding", "br")];
    let l = |h: &Vec<(&str, &str)>| c.lookup(&LookupRequest::new(&d, b"/v", h, T0 + 1.0)).kind;

    let (busy, _) = expect_miss(l(&gz));
    busy.set_vary(VarySpec::capture([&b"Accept-Encoding"[..]], &gz).unwrap());
    // A request with another encoding does not wait on this fetch.
    let (busy_br, _) = expect_miss(l(&br));
    // One with the same encoding does.
    assert!(matches!(l(&gz), Lookup::Busy(_)));
    let mut o = new_obj(meta(1, T0, 60.0, 0.0, 0.0), b"gzip body");
    o.headers.push((
        Bytes::from_static(b"Vary"),
        Bytes::from_static(b"Accept-Encoding"),
    ));
    busy.unbusy(o, &s0).unwrap();
    busy_br.set_vary(VarySpec::capture([&b"Accept-Encoding"[..]], &br).unwrap());
    busy_br
        .unbusy(new_obj(meta(2, T0, 60.0, 0.0, 0.0), b"br body"), &s0)
        .unwrap();
    assert_eq!(expect_hit(l(&gz)).vxid(), 1);
    assert_eq!(expect_hit(l(&br)).vxid(), 2);
    // The br variant was unbusied last, so it is first: a gzip request skips it.
    let r = c.lookup(&LookupRequest::new(&d, b"/v", &gz, T0 + 1.0));
    assert_eq!(r.vary_skipped, 1);
    assert!(r.banned.is_empty());
    let none: Vec<(&str, &str)> = vec![];
    let (busy, _) = expect_miss(l(&none));
    drop(busy);
    // hash_ignore_vary takes the newest variant.
    let mut r = LookupRequest::new(&d, b"/v", &none, T0 + 1.0);
    r.ignore_vary = true;
    assert_eq!(expect_hit(c.lookup(&r).kind).vxid(), 2);
    assert_eq!(get(&c.stats().n_objecthead), 1);
    assert_eq!(get(&c.stats().n_object), 2);
}

#[test]
fn predictive_vary_on_busy_objects() {
    let c = cache();
    let d = digest("/pv");
    let s0 = c.store("s0").unwrap();
    let h = |v: &'static str| -> Vec<(&str, &str)> { vec![("Foo", v)] };
    let l = |h: &Vec<(&str, &str)>| c.lookup(&LookupRequest::new(&d, b"/pv", h, T0 + 1.0)).kind;
    let (busy, _) = expect_miss(l(&h("1")));
    busy.set_vary(VarySpec::capture([&b"Foo"[..]], &h("1")).unwrap());
    busy.unbusy(new_obj(meta(1, T0, 60.0, 0.0, 0.0), b"one"), &s0)
        .unwrap();
    // A miss past a variant with Vary: Foo is expected to vary the same
    // way before its response is known...
    let (busy2, _) = expect_miss(l(&h("2")));
    // ...so a third variant does not wait for it, the same one does.
    let (busy3, _) = expect_miss(l(&h("3")));
    assert!(matches!(l(&h("2")), Lookup::Busy(_)));
    // Without a variant to predict from, everyone waits.
    let d2 = digest("/pv2");
    let (first, _) = expect_miss(
        c.lookup(&LookupRequest::new(&d2, b"/pv2", &h("1"), T0))
            .kind,
    );
    assert!(matches!(
        c.lookup(&LookupRequest::new(&d2, b"/pv2", &h("2"), T0))
            .kind,
        Lookup::Busy(_)
    ));
    drop((busy2, busy3, first));
}

#[test]
fn always_miss_and_ignore_busy() {
    let c = cache();
    let d = digest("/am");
    insert(&c, &d, meta(1, T0, 60.0, 0.0, 0.0), b"x");
    let mut r = LookupRequest::new(&d, b"/", &(), T0 + 1.0);
    r.always_miss = true;
    let (busy, stale) = expect_miss(c.lookup(&r).kind);
    assert!(stale.is_none());
    // A normal lookup still hits the existing object despite the busy one.
    expect_hit(lookup(&c, &d, T0 + 1.0));
    let s0 = c.store("s0").unwrap();
    busy.unbusy(new_obj(meta(2, T0 + 1.0, 60.0, 0.0, 0.0), b"y"), &s0)
        .unwrap();
    // Newest first.
    assert_eq!(expect_hit(lookup(&c, &d, T0 + 2.0)).vxid(), 2);

    let d = digest("/ib");
    let (busy, _) = expect_miss(lookup(&c, &d, T0));
    let mut r = LookupRequest::new(&d, b"/", &(), T0);
    r.ignore_busy = true;
    let (busy2, _) = expect_miss(c.lookup(&r).kind);
    drop(busy);
    drop(busy2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_object_one_miss_others_wait_then_hit() {
    let c = cache();
    let d = digest("/cold");
    let misses = Arc::new(AtomicUsize::new(0));
    let waits = Arc::new(AtomicUsize::new(0));
    let n = 50;
    let mut tasks = Vec::new();
    for _ in 0..n {
        let c = c.clone();
        let misses = misses.clone();
        let waits = waits.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                match c.lookup(&LookupRequest::new(&d, b"/cold", &(), T0)).kind {
                    Lookup::Hit(o) => return o.body().collect().await.unwrap(),
                    Lookup::Busy(w) => {
                        waits.fetch_add(1, Ordering::SeqCst);
                        w.wait().await;
                    }
                    Lookup::Miss { busy, .. } => {
                        misses.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                        let s0 = c.store("s0").unwrap();
                        let (obj, mut fb) = unbusy_streamed(busy, &s0);
                        for i in 0..10u8 {
                            fb.push(Bytes::from(vec![i; 100])).unwrap();
                            tokio::task::yield_now().await;
                        }
                        fb.finish();
                        return obj.body().collect().await.unwrap();
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }));
    }
    let mut bodies = Vec::new();
    for t in tasks {
        bodies.push(t.await.unwrap());
    }
    assert_eq!(misses.load(Ordering::SeqCst), 1);
    assert_eq!(waits.load(Ordering::SeqCst), n - 1);
    let expect: Vec<u8> = (0..10u8).flat_map(|i| vec![i; 100]).collect();
    for b in bodies {
        assert_eq!(&b[..], &expect[..]);
    }
    assert_eq!(get(&c.stats().busy_sleep), (n - 1) as u64);
    assert_eq!(get(&c.stats().busy_wakeup), (n - 1) as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hit_for_miss_wakes_everyone_in_parallel() {
    let c = cache();
    let d = digest("/hfm-rush");
    let (busy, _) = expect_miss(lookup(&c, &d, T0));
    let n = 20;
    let mut tasks = Vec::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(n);
    for _ in 0..n {
        let c = c.clone();
        let ready = ready_tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut waited = false;
            loop {
                match c.lookup(&LookupRequest::new(&d, b"/", &(), T0 + 1.0)).kind {
                    Lookup::Busy(w) => {
                        assert!(!waited, "woken request had to wait again");
                        waited = true;
                        ready.send(()).await.unwrap();
                        w.wait().await;
                    }
                    Lookup::HitMiss { busy, .. } => {
                        // Hold the private fetch while others proceed.
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        drop(busy);
                        return waited;
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }));
    }
    for _ in 0..n {
        ready_rx.recv().await.unwrap();
    }
    let mut m = meta(9, T0, 60.0, 0.0, 0.0);
    m.kind = ObjKind::HitForMiss;
    let mut o = new_obj(m, b"");
    o.body = NewBody::Empty;
    let start = std::time::Instant::now();
    busy.unbusy(o, &c.transient()).unwrap();
    for t in tasks {
        assert!(t.await.unwrap());
    }
    // 20 × 20 ms serialised would take 400 ms.
    assert!(start.elapsed() < std::time::Duration::from_millis(300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_fetch_wakes_waiters_and_one_retries() {
    let c = cache();
    let d = digest("/fail");
    let (busy, _) = expect_miss(lookup(&c, &d, T0));
    let mut waiters = Vec::new();
    for _ in 0..5 {
        match lookup(&c, &d, T0) {
            Lookup::Busy(w) => waiters.push(w),
            other => panic!("expected Busy, got {other:?}"),
        }
    }
    // One waiter gives up (client gone): nothing leaks.
    drop(waiters.pop());
    busy.fail();
    let mut misses = 0;
    let mut busies = 0;
    let mut keep = Vec::new();
    for w in waiters {
        w.wait().await;
        match lookup(&c, &d, T0) {
            Lookup::Miss { busy, .. } => {
                misses += 1;
                keep.push(busy);
            }
            Lookup::Busy(_) => busies += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((misses, busies), (1, 3));
    assert_eq!(get(&c.stats().busy_wakeup), 4);
    drop(keep);
    assert_eq!(get(&c.stats().n_objectcore), 0);
    assert_eq!(get(&c.stats().n_objecthead), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_readers_receive_identical_bytes() {
    let c = cache();
    let d = digest("/stream");
    let (busy, _) = expect_miss(lookup(&c, &d, T0));
    let s0 = c.store("s0").unwrap();
    let (obj, mut fb) = unbusy_streamed(busy, &s0);
    let mut readers = Vec::new();
    for i in 0..16 {
        let o = expect_hit(lookup(&c, &d, T0 + 1.0));
        readers.push(tokio::spawn(async move {
            let mut r = if i % 4 == 3 {
                o.body().range_reader(5000, Some(9000))
            } else {
                o.body().reader()
            };
            let mut v = Vec::new();
            while let Some(s) = r.next().await.unwrap() {
                v.extend_from_slice(&s);
            }
            (i, v)
        }));
    }
    let mut expect = Vec::new();
    for k in 0..100u32 {
        let seg: Vec<u8> = (0..123).map(|j| (k * 31 + j) as u8).collect();
        expect.extend_from_slice(&seg);
        fb.push(Bytes::from(seg)).unwrap();
        if k % 7 == 0 {
            tokio::task::yield_now().await;
        }
    }
    assert_eq!(fb.len(), 12300);
    fb.finish();
    for r in readers {
        let (i, v) = r.await.unwrap();
        if i % 4 == 3 {
            assert_eq!(v, &expect[5000..9000]);
        } else {
            assert_eq!(v, expect);
        }
    }
    // Body bytes charged to the store on top of the object overhead.
    assert!(obj.charged_bytes() >= 12300);
}

#[tokio::test]
async fn failed_stream_errors_readers_and_removes_object() {
    let c = cache();
    let d = digest("/sf");
    let (busy, _) = expect_miss(lookup(&c, &d, T0));
    let s0 = c.store("s0").unwrap();
    let (_obj, mut fb) = unbusy_streamed(busy, &s0);
    fb.push(Bytes::from_static(b"partial")).unwrap();
    let o = expect_hit(lookup(&c, &d, T0));
    let mut r = o.body().reader();
    assert_eq!(&r.next().await.unwrap().unwrap()[..], b"partial");
    drop(fb); // fetch task died
    assert_eq!(r.next().await, Err(BodyError::FetchFailed));
    assert!(o.flags().failed() && o.flags().dying());
    let (busy, stale) = expect_miss(lookup(&c, &d, T0));
    assert!(stale.is_none());
    drop(busy);
}

#[test]
fn private_objects_are_charged_but_not_found() {
    let c = cache();
    let t = c.transient();
    let mut u = c
        .insert_private(
            NewObject {
                body: NewBody::Streamed,
                ..new_obj(meta(5, T0, 0.0, 0.0, 0.0), b"")
            },
            &t,
        )
        .unwrap();
    assert!(u.obj.flags().private());
    let mut fb = u.body.take().unwrap();
    fb.push(Bytes::from_static(b"pass body")).unwrap();
    fb.finish();
    let st = t.stevedore().stats();
    assert!(st.g_bytes.load(Ordering::Relaxed) >= 9);
    assert_eq!(get(&c.stats().n_objecthead), 0);
    drop(u);
    assert_eq!(st.g_bytes.load(Ordering::Relaxed), 0);
    assert_eq!(get(&c.stats().n_object), 0);
}
