//! Objects of a persistent (`-s disk`) store: found again, byte for byte
//! and with their headers, timing and Vary, by a new cache over the same
//! file (as after a restart or `kill -9`); bans and purges issued before
//! stay in force; a 304 refresh in place shares the body.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use common::*;
use lacquer_cache::*;
use lacquer_storage::{DiskConfig, DiskStore};

struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(tag: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("lacquer-mse-it-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// A cache over a disk store in `dir`, once it has recovered what it holds.
fn open(dir: &Scratch, now: f64) -> (Cache, Arc<DiskStore>) {
    let (c, store) = open_recovering(dir, now);
    // Recovery runs in the background: wait for it.
    while c.recovering() {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    (c, store)
}

/// A cache over a disk store in `dir`, its objects possibly still being
/// put back.
fn open_recovering(dir: &Scratch, now: f64) -> (Cache, Arc<DiskStore>) {
    let store = Arc::new(
        DiskStore::open(
            "s0",
            "disk",
            &DiskConfig {
                path: dir.0.join("store.dat"),
                size: Some(16 << 20),
                journal_dir: None,
            },
        )
        .unwrap(),
    );
    let s0: Arc<dyn Stevedore> = store.clone();
    let c = Cache::new(
        CacheConfig {
            shards: 4,
            nuke_limit: 10,
            lru_interval: 0.0,
        },
        vec![s0],
        now,
    );
    (c, store)
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

/// Store `body` under `url` streamed in 10 000-byte reads, with a Vary
/// on `Accept-Language: lang`.
fn store(c: &Cache, url: &str, lang: &str, body: &[u8], ttl: f64) -> ObjRef {
    let d = digest(url);
    let req: Vec<(&str, &str)> = vec![("Accept-Language", lang)];
    let (busy, _) = match c
        .lookup(&LookupRequest::new(&d, url.as_bytes(), &req, T0))
        .kind
    {
        Lookup::Miss { busy, stale } => (busy, stale),
        other => panic!("expected a miss, got {other:?}"),
    };
    busy.set_vary(VarySpec::capture([&b"Accept-Language"[..]], &req).unwrap());
    let s0 = c.store("s0").unwrap();
    let mut u = busy
        .unbusy(
            NewObject {
                headers: vec![
                    (
                        Bytes::from_static(b"Vary"),
                        Bytes::from_static(b"Accept-Language"),
                    ),
                    (Bytes::from_static(b"X-Url"), Bytes::from(url.to_owned())),
                ],
                body: NewBody::Streamed,
                ..new_obj(meta(7, T0, ttl, 5.0, 30.0), b"")
            },
            &s0,
        )
        .unwrap();
    let mut fb = u.body.take().unwrap();
    for part in body.chunks(10_000) {
        fb.push(Bytes::copy_from_slice(part)).unwrap();
    }
    fb.finish();
    u.obj
}

fn find(c: &Cache, url: &str, lang: &str, now: f64) -> Option<ObjRef> {
    let d = digest(url);
    let req: Vec<(&str, &str)> = vec![("Accept-Language", lang)];
    match c
        .lookup(&LookupRequest::new(&d, url.as_bytes(), &req, now))
        .kind
    {
        Lookup::Hit(o) => Some(o),
        _ => None,
    }
}

#[tokio::test]
async fn objects_come_back_exactly_after_a_restart() {
    let dir = scratch("restart");
    let big = pattern(3, 300_000);
    {
        let (c, s) = open(&dir, T0);
        store(&c, "/small", "fr", b"bonjour", 100.0);
        store(&c, "/small", "en", b"hello", 100.0);
        store(&c, "/big", "en", &big, 100.0);
        s.flush();
        // The process goes away with its objects still cached.
    }
    let (c, s) = open(&dir, T0 + 1.0);
    assert_eq!(s.disk_stats().recovered.load(Relaxed), 3);
    let fr = find(&c, "/small", "fr", T0 + 1.0).expect("the fr variant");
    let en = find(&c, "/small", "en", T0 + 1.0).expect("the en variant");
    assert!(find(&c, "/small", "de", T0 + 1.0).is_none());
    assert_eq!(&fr.body().collect().await.unwrap()[..], b"bonjour");
    assert_eq!(&en.body().collect().await.unwrap()[..], b"hello");
    assert_eq!(fr.data().header("x-url"), Some(&b"/small"[..]));
    assert_eq!(
        (fr.t_origin(), fr.ttl(), fr.grace(), fr.keep(), fr.vxid()),
        (T0, 100.0, 5.0, 30.0, 7)
    );
    let b = find(&c, "/big", "en", T0 + 1.0).unwrap();
    assert_eq!(b.body().collect().await.unwrap().to_vec(), big);
    // The checksums computed while fetching match the bytes read back.
    let t = std::time::Instant::now();
    while s.disk_stats().verified.load(Relaxed) < 3 && t.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(s.disk_stats().verified.load(Relaxed), 3);
    assert_eq!(s.disk_stats().verify_failures.load(Relaxed), 0);
    // Expired by the time of a later restart: dropped, not served.
    drop((c, s, fr, en, b));
    let (c, s) = open(&dir, T0 + 1000.0);
    // In the index until looked up; dropped then.
    assert_eq!(s.indexed(), 3);
    assert!(find(&c, "/big", "en", T0 + 1000.0).is_none());
    assert!(find(&c, "/small", "en", T0 + 1000.0).is_none());
    assert_eq!(s.disk_stats().dropped_stale.load(Relaxed), 3);
    assert_eq!(s.indexed(), 0);
}

#[tokio::test]
async fn bans_and_purges_survive_a_restart() {
    let dir = scratch("bans");
    {
        let (c, s) = open(&dir, T0);
        store(&c, "/banned", "en", b"a", 100.0);
        store(&c, "/kept", "en", b"b", 100.0);
        store(&c, "/purged", "en", b"c", 100.0);
        s.flush();
        // A ban the lurker has not acted on yet, and a purge.
        c.ban_str("obj.http.x-url == /banned", T0 + 0.5).unwrap();
        c.purge(&digest("/purged"), T0 + 0.5, 0.0, 0.0, 0.0);
        // An object stored after the ban is not hit by it.
        store(&c, "/banned2", "en", b"d", 100.0);
        s.flush();
    }
    let (c, _s) = open(&dir, T0 + 1.0);
    assert!(find(&c, "/banned", "en", T0 + 1.0).is_none());
    assert!(find(&c, "/purged", "en", T0 + 1.0).is_none());
    assert!(find(&c, "/kept", "en", T0 + 1.0).is_some());
    assert!(find(&c, "/banned2", "en", T0 + 1.0).is_some());
    // The ban is back on the list.
    assert!(
        c.ban_list().contains("obj.http.x-url == /banned"),
        "{}",
        c.ban_list()
    );
}

#[tokio::test]
async fn a_child_restart_keeps_persistent_objects() {
    let dir = scratch("clear");
    let (c, _s) = open(&dir, T0);
    store(&c, "/p", "en", b"persistent", 100.0);
    // A complete body (as a synthetic response has) in the same store.
    let q = insert(&c, &digest("/q"), meta(1, T0, 100.0, 0.0, 0.0), b"complete");
    assert_eq!(q.store_name(), Some("s0"));
    assert_eq!(c.clear(), 0);
    assert!(find(&c, "/p", "en", T0 + 1.0).is_some());
    assert!(!q.flags().dying());
}

#[tokio::test]
async fn the_lurker_during_recovery_does_not_retire_bans_objects_still_need() {
    let dir = scratch("lurker");
    {
        let (c, s) = open(&dir, T0);
        for i in 0..200 {
            store(&c, &format!("/o/{i}"), "en", b"x", 100.0);
        }
        s.flush();
        c.ban_str("obj.http.x-url ~ ^/o/1", T0 + 0.5).unwrap();
        s.flush();
    }
    let (c, _s) = open_recovering(&dir, T0 + 1.0);
    // A ban issued before the objects are back, and the lurker running
    // meanwhile, as the daemon's does.
    c.ban_str("obj.http.x-url ~ ^/o/2", T0 + 1.0).unwrap();
    loop {
        c.ban_lurker_step(T0 + 1.0, 0.0, 10_000, 0);
        if !c.recovering() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    c.ban_lurker_step(T0 + 1.0, 0.0, 10_000, 0);
    for i in 0..200 {
        let u = format!("/o/{i}");
        let banned = u.starts_with("/o/1") || u.starts_with("/o/2");
        assert_eq!(
            find(&c, &u, "en", T0 + 1.0).is_none(),
            banned,
            "{u} after a restart"
        );
    }
}

#[tokio::test]
async fn a_removed_object_stays_removed() {
    let dir = scratch("removed");
    {
        let (c, s) = open(&dir, T0);
        let o = store(&c, "/gone", "en", b"x", 100.0);
        s.flush();
        assert!(c.kill(&o));
        drop(o);
        s.flush();
    }
    let (c, s) = open(&dir, T0 + 1.0);
    assert!(find(&c, "/gone", "en", T0 + 1.0).is_none());
    assert_eq!(s.disk_stats().recovered.load(Relaxed), 0);
}

#[tokio::test]
async fn update_in_place_shares_the_body_and_persists() {
    let dir = scratch("fast304");
    let body = pattern(9, 50_000);
    {
        let (c, s) = open(&dir, T0);
        let o = store(&c, "/r", "en", &body, 10.0);
        s.flush();
        let before = s.stats().g_bytes.load(Relaxed);
        let n = c
            .update_in_place(
                &o,
                StoredUpdate {
                    meta: meta(9, T0 + 20.0, 300.0, 5.0, 30.0),
                    status: 200,
                    reason: Bytes::from_static(b"OK"),
                    headers: vec![(Bytes::from_static(b"X-Url"), Bytes::from_static(b"/r2"))],
                },
            )
            .unwrap();
        assert!(o.flags().dying());
        assert!(n.body().same(o.body()));
        // Only the new object's headers were charged: the body was not copied.
        assert!(s.stats().g_bytes.load(Relaxed) - before < 10_000);
        drop(o);
        s.flush();
    }
    let (c, _s) = open(&dir, T0 + 25.0);
    let o = find(&c, "/r", "en", T0 + 25.0).expect("refreshed object");
    assert_eq!(o.data().header("x-url"), Some(&b"/r2"[..]));
    assert_eq!((o.t_origin(), o.ttl(), o.vxid()), (T0 + 20.0, 300.0, 9));
    assert_eq!(o.body().collect().await.unwrap().to_vec(), body);
}

#[tokio::test]
async fn a_body_changed_on_disk_is_found_out_and_removed() {
    use std::os::unix::fs::FileExt;
    let dir = scratch("verify");
    let body = pattern(4, 30_000);
    let at;
    {
        let (c, s) = open(&dir, T0);
        let o = store(&c, "/v", "en", &body, 100.0);
        store(&c, "/w", "en", b"untouched", 100.0);
        s.flush();
        let Some([lacquer_storage::Segment::File(span), ..]) = o.body().segments() else {
            panic!("body not in the store file");
        };
        at = span.extent().offset();
    }
    // Bytes of the body change while the daemon is stopped (as space reused
    // after a power loss would): the record still checks out.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.0.join("store.dat"))
        .unwrap();
    f.write_all_at(
        b"XXXX",
        lacquer_storage::disk::format::HEADER_SIZE + at + 100,
    )
    .unwrap();
    drop(f);
    let (c, s) = open(&dir, T0 + 1.0);
    // The first lookup puts the objects back and queues their bodies for
    // the check, which removes the damaged one.
    find(&c, "/v", "en", T0 + 1.0);
    find(&c, "/w", "en", T0 + 1.0);
    let t = std::time::Instant::now();
    while s.disk_stats().verify_failures.load(Relaxed) == 0 && t.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(s.disk_stats().verify_failures.load(Relaxed), 1);
    assert!(find(&c, "/v", "en", T0 + 1.0).is_none());
    let w = find(&c, "/w", "en", T0 + 1.0).expect("the intact object");
    assert_eq!(&w.body().collect().await.unwrap()[..], b"untouched");
}

#[test]
fn a_memory_tier_is_used_only_when_named() {
    let tier: Arc<dyn Stevedore> = Arc::new(MallocStore::tier("mse", Some(1 << 20)));
    let s1: Arc<dyn Stevedore> = Arc::new(MallocStore::new("s1", None));
    let c = Cache::new(CacheConfig::default(), vec![tier, s1], T0);
    for _ in 0..4 {
        assert_eq!(c.next_store().name(), "s1");
    }
    assert!(c.store("mse").is_some());
}

#[tokio::test]
async fn refresh_in_place_records_the_new_lifetime() {
    let dir = scratch("refresh");
    let body = pattern(11, 40_000);
    {
        let (c, s) = open(&dir, T0);
        let o = store(&c, "/f", "en", &body, 10.0);
        s.flush();
        let before = s.stats().g_bytes.load(Relaxed);
        // Past ttl and grace, within keep: a revalidating miss.
        let d = digest("/f");
        let req: Vec<(&str, &str)> = vec![("Accept-Language", "en")];
        let (busy, stale) = match c
            .lookup(&LookupRequest::new(&d, b"/f", &req, T0 + 20.0))
            .kind
        {
            Lookup::Miss { busy, stale } => (busy, stale.expect("the stale object")),
            other => panic!("expected a miss, got {other:?}"),
        };
        assert!(stale.same(&o));
        let life = Lifetime {
            t_origin: T0 + 20.0,
            ttl: 0.000001,
            grace: 0.0,
            keep: 600.0,
        };
        busy.refresh_in_place(&stale, life).unwrap();
        // Nothing new was allocated: same object, same body.
        assert_eq!(s.stats().g_bytes.load(Relaxed), before);
        assert!(!o.flags().dying());
        drop((o, stale));
        s.flush();
    }
    // After a restart the object has the refreshed lifetime (it would
    // have expired with the old one: 10 + 5 + 30 s from T0).
    let (c, _s) = open(&dir, T0 + 100.0);
    let d = digest("/f");
    let req: Vec<(&str, &str)> = vec![("Accept-Language", "en")];
    let o = match c
        .lookup(&LookupRequest::new(&d, b"/f", &req, T0 + 100.0))
        .kind
    {
        Lookup::Miss { stale, .. } => stale.expect("the refreshed object, kept"),
        other => panic!("expected a revalidating miss, got {other:?}"),
    };
    assert_eq!(
        (o.t_origin(), o.ttl(), o.keep()),
        (T0 + 20.0, 0.000001, 600.0)
    );
    assert_eq!(o.data().header("x-url"), Some(&b"/f"[..]));
    assert_eq!(o.body().collect().await.unwrap().to_vec(), body);
}

#[tokio::test]
async fn objects_of_the_index_obey_bans_and_purges_issued_after_the_restart() {
    let dir = scratch("lazy-inval");
    {
        let (c, s) = open(&dir, T0);
        for u in ["/a", "/b", "/c", "/d"] {
            store(&c, u, "en", u.as_bytes(), 100.0);
        }
        s.flush();
    }
    {
        let (c, s) = open(&dir, T0 + 1.0);
        assert_eq!(s.indexed(), 4);
        assert_eq!(c.stats().n_object.load(Relaxed), 0);
        // Issued while the objects are only in the index.
        c.ban_str("obj.http.x-url == /a", T0 + 2.0).unwrap();
        assert_eq!(c.purge(&digest("/b"), T0 + 2.0, 0.0, 0.0, 0.0), 1);
        assert_eq!(s.indexed(), 3);
        // The lurker passes: it sees only what is in memory, so it
        // completes no ban while objects are still in the index.
        for _ in 0..3 {
            assert_eq!(c.ban_lurker_step(T0 + 3.0, 0.0, 10_000, 0).completed, 0);
        }
        assert!(find(&c, "/a", "en", T0 + 3.0).is_none());
        assert!(find(&c, "/b", "en", T0 + 3.0).is_none());
        let o = find(&c, "/c", "en", T0 + 3.0).expect("/c");
        assert_eq!(&o.body().collect().await.unwrap()[..], b"/c");
        s.flush();
    }
    // And after another restart the purge and the ban still hold.
    let (c, s) = open(&dir, T0 + 4.0);
    assert!(find(&c, "/a", "en", T0 + 4.0).is_none());
    assert!(find(&c, "/b", "en", T0 + 4.0).is_none());
    assert!(find(&c, "/c", "en", T0 + 4.0).is_some());
    assert!(find(&c, "/d", "en", T0 + 4.0).is_some());
    assert_eq!(s.indexed(), 0);
}

#[tokio::test]
async fn new_objects_push_out_objects_of_the_index_before_cached_ones() {
    let dir = scratch("lazy-room");
    let body = pattern(5, 400_000);
    {
        let (c, s) = open(&dir, T0);
        // 16 MiB store: 30 objects of 400 kB fill most of it.
        for i in 0..30 {
            store(&c, &format!("/old/{i}"), "en", &body, 1000.0);
        }
        s.flush();
    }
    let (c, s) = open(&dir, T0 + 1.0);
    assert_eq!(s.indexed(), 30);
    let hot = find(&c, "/old/0", "en", T0 + 1.0).expect("/old/0");
    drop(hot);
    for i in 0..20 {
        store(&c, &format!("/new/{i}"), "en", &body, 1000.0);
    }
    let evicted = s.disk_stats().index_evicted.load(Relaxed);
    assert!(evicted >= 5, "{evicted} evicted, {} indexed", s.indexed());
    assert_eq!(c.stats().n_lru_nuked.load(Relaxed), 0);
    // The object looked up since the restart stayed.
    let o = find(&c, "/old/0", "en", T0 + 2.0).expect("/old/0 kept");
    assert_eq!(o.body().collect().await.unwrap().to_vec(), body);
}

#[tokio::test]
async fn a_memory_tier_is_resized_at_run_time() {
    let tier: Arc<dyn Stevedore> = Arc::new(MallocStore::tier("mem", Some(1 << 20)));
    let c = Cache::new(CacheConfig::default(), vec![tier], T0);
    let mem = c.store("mem").unwrap();
    for i in 0..8 {
        let d = digest(&format!("/m/{i}"));
        let busy = match c.lookup(&LookupRequest::new(&d, b"/", &(), T0)).kind {
            Lookup::Miss { busy, .. } => busy,
            other => panic!("{other:?}"),
        };
        static BODY: [u8; 100_000] = [b'x'; 100_000];
        busy.unbusy(new_obj(meta(i, T0, 100.0, 0.0, 0.0), &BODY), &mem)
            .unwrap();
    }
    let held = mem.stevedore().stats().g_bytes.load(Relaxed);
    assert!(held > 800_000, "{held}");
    // Down to 300 kB: the oldest objects go until it fits.
    let nuked = c.resize_store("mem", 300_000).unwrap();
    assert!(nuked >= 5, "{nuked}");
    assert!(mem.stevedore().stats().g_bytes.load(Relaxed) <= 300_000);
    assert_eq!(mem.stevedore().limit(), Some(300_000));
    assert!(mem.stevedore().stats().g_space.load(Relaxed) <= 300_000);
    // Up again: room for more.
    assert_eq!(c.resize_store("mem", 2 << 20), Some(0));
    assert!(mem.stevedore().available() >= (2 << 20) - 300_000);
    // Transient's size is not a limit to change.
    assert_eq!(c.resize_store("Transient", 1), None);
}
