//! Recovery figures of the persistent store: how fast a restart has its
//! index back, what each object on disk costs in RAM (the index's bytes
//! and the resident-set growth), the first hit after that and what a
//! lookup that materialises an object costs. Its own test binary, so nothing
//! else allocates meanwhile. `LACQUER_PERSIST_OBJECTS` sets the count
//! (default 10 000; the figures are for 1 000 000 small and 10 000
//! large objects) and `LACQUER_PERSIST_BODY` the body size (default 1000
//! bytes). With `LACQUER_PERSIST_COLD=1` the store file's pages are dropped
//! from the page cache before the restart, so the scan reads from the disk
//! as after a reboot.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use lacquer_cache::*;
use lacquer_storage::{DiskConfig, DiskStore};

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc/self/statm");
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm has a resident field");
    pages * 4096
}

fn cache_over(path: &std::path::Path, size: u64) -> (Cache, Arc<DiskStore>) {
    let store = Arc::new(
        DiskStore::open(
            "s0",
            "disk",
            &DiskConfig {
                path: path.to_owned(),
                size: Some(size),
                journal_dir: None,
            },
        )
        .unwrap(),
    );
    let s0: Arc<dyn Stevedore> = store.clone();
    let c = Cache::new(
        CacheConfig {
            shards: 64,
            nuke_limit: 10,
            lru_interval: 2.0,
        },
        vec![s0],
        1_000_000.0,
    );
    while c.recovering() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    (c, store)
}

#[test]
fn recovery_rate_and_ram_per_object() {
    let n: usize = std::env::var("LACQUER_PERSIST_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = std::env::temp_dir().join(format!("lacquer-mse-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("store.dat");
    let body_len: usize = std::env::var("LACQUER_PERSIST_BODY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // A record and the body, rounded to granules, plus room.
    let size = (n as u64 * (body_len as u64 + 1536)).max(16 << 20);
    let headers = vec![
        (
            Bytes::from_static(b"Content-Type"),
            Bytes::from_static(b"text/html"),
        ),
        (
            Bytes::from_static(b"ETag"),
            Bytes::from_static(b"\"5f3-1a2b3c\""),
        ),
        (
            Bytes::from_static(b"Cache-Control"),
            Bytes::from_static(b"max-age=3600"),
        ),
    ];
    {
        let (c, s) = cache_over(&path, size);
        let s0 = c.store("s0").unwrap();
        for i in 0..n {
            let mut h = HashBuilder::new();
            h.hash_data(format!("/obj/{i}").as_bytes());
            let d = h.finish();
            let busy = match c
                .lookup(&LookupRequest::new(&d, b"/", &(), 1_000_000.0))
                .kind
            {
                Lookup::Miss { busy, .. } => busy,
                other => panic!("{other:?}"),
            };
            busy.unbusy(
                NewObject {
                    meta: ObjMeta {
                        vxid: i as u32,
                        t_origin: 1_000_000.0,
                        ttl: 3600.0,
                        grace: 10.0,
                        keep: 0.0,
                        kind: ObjKind::Normal,
                    },
                    status: 200,
                    reason: Bytes::from_static(b"OK"),
                    headers: headers.clone(),
                    gzip: false,
                    esi: None,
                    gzip_changed: false,
                    body_chunk: None,
                    vary_bytes: None,
                    body: NewBody::Complete(Body::from_segments(vec![Bytes::from(vec![
                        (i % 251)
                            as u8;
                        body_len
                    ])])),
                },
                &s0,
            )
            .unwrap();
        }
        s.flush();
        assert_eq!(
            s.disk_stats()
                .records
                .load(std::sync::atomic::Ordering::Relaxed),
            n as u64
        );
    }
    let cold = std::env::var_os("LACQUER_PERSIST_COLD").is_some_and(|v| v == "1");
    // The store file and its index snapshot's files.
    let files = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    };
    let drop_caches = || {
        if cold {
            for p in files() {
                let f = std::fs::File::open(&p).unwrap();
                f.sync_all().unwrap();
                rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
            }
        }
    };
    let restart = |what: &str| {
        drop_caches();
        let t = Instant::now();
        let (c, s) = cache_over(&path, size);
        let took = t.elapsed();
        let m = s.disk_stats();
        assert_eq!(
            m.recovered.load(std::sync::atomic::Ordering::Relaxed),
            n as u64,
            "{what}"
        );
        s.wait_settled();
        (c, s, took)
    };
    // As a kill -9 leaves it: the snapshot's base of the empty store and a
    // log of every record since.
    let (c, s, after_crash) = restart("after a crash");
    drop((c, s));
    // Without a snapshot: the whole store file scanned.
    for p in files() {
        if p != path && p.file_name().is_some_and(|n| n != "store.dat.journal") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let (c, s, scanned) = restart("scanning");
    assert!(
        s.disk_stats()
            .scanned_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    // A clean shutdown writes the snapshot.
    s.checkpoint().unwrap();
    drop((c, s));
    drop_caches();
    let before = rss_bytes();
    let t = Instant::now();
    let (c, s) = cache_over(&path, size);
    let took = t.elapsed();
    let grown = rss_bytes().saturating_sub(before);
    let m = s.disk_stats();
    let got = m.recovered.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(got, n as u64);
    assert_eq!(s.indexed(), n as u64);
    // Nothing is a cache object until it is looked up.
    assert_eq!(
        c.stats()
            .n_object
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    let index_bytes = m.index_bytes.load(std::sync::atomic::Ordering::Relaxed);
    // The first hit after the index is back, and a sample put back by
    // lookups, checked against what was stored.
    let lookup = |i: usize| {
        let mut h = HashBuilder::new();
        h.hash_data(format!("/obj/{i}").as_bytes());
        let d = h.finish();
        match c
            .lookup(&LookupRequest::new(&d, b"/", &(), 1_000_001.0))
            .kind
        {
            Lookup::Hit(o) => o,
            other => panic!("/obj/{i} after the restart: {other:?}"),
        }
    };
    let t1 = Instant::now();
    let first = lookup(n / 2);
    let first_hit = t1.elapsed();
    assert_eq!(first.vxid(), (n / 2) as u32);
    let sample = n.min(10_000);
    let t2 = Instant::now();
    for i in (0..n).step_by(n / sample).take(sample) {
        let o = lookup(i);
        assert_eq!(o.data().status, 200);
        assert_eq!(o.data().header("etag"), Some(&b"\"5f3-1a2b3c\""[..]));
        assert_eq!(o.body().final_len(), Some(body_len as u64));
    }
    let per_lookup = t2.elapsed() / sample as u32;
    assert!(index_bytes / n as u64 <= 64, "{index_bytes} index bytes");
    let per_million = |d: std::time::Duration| d.as_secs_f64() * 1e6 / n as f64;
    eprintln!(
        "index of {n} objects back{} in {took:?} after a clean shutdown ({:.0} objects/s, \
         {:.2} s per million; after a crash {:.2} s per million, scanning the store file {:.2}); \
         index {} bytes per object, RSS growth {} bytes per object; \
         first hit {first_hit:?} after that; a materialising lookup {per_lookup:?}",
        if cold { " from a cold page cache" } else { "" },
        n as f64 / took.as_secs_f64(),
        per_million(took),
        per_million(after_crash),
        per_million(scanned),
        index_bytes / n as u64,
        grown / n as u64
    );
    drop((c, s));
    let _ = std::fs::remove_dir_all(&dir);
}
