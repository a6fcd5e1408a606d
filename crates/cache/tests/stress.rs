//! Randomised concurrent use of every cache operation on a few hot keys with a
//! small store (so nuking happens), then checks that nothing leaked: objects,
//! objcores, objheads, store bytes, LRU entries and ban references all return to
//! zero, and no waiter hung.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use lacquer_cache::*;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const KEYS: u64 = 8;

async fn fetch(c: &Cache, busy: BusyObj, key: u64, now: f64, rng: &mut Rng) {
    let s0 = c.store("s0").unwrap();
    let hdr = format!("k{key}");
    let kind = match rng.below(10) {
        0 => ObjKind::HitForMiss,
        1 => ObjKind::HitForPass,
        _ => ObjKind::Normal,
    };
    let obj = NewObject {
        meta: ObjMeta {
            vxid: rng.below(1 << 30) as u32,
            t_origin: now,
            ttl: rng.below(5) as f64 * 0.5,
            grace: rng.below(3) as f64 * 0.5,
            keep: rng.below(2) as f64,
            kind,
        },
        status: 200,
        reason: Bytes::from_static(b"OK"),
        headers: vec![(Bytes::from_static(b"X-Key"), Bytes::from(hdr))],
        gzip: false,
        esi: None,
        gzip_changed: false,
        body_chunk: None,
        vary_bytes: None,
        body: if kind == ObjKind::Normal {
            NewBody::Streamed
        } else {
            NewBody::Empty
        },
    };
    if rng.below(20) == 0 {
        drop(busy); // abandoned fetch
        return;
    }
    let store = if kind == ObjKind::Normal {
        s0
    } else {
        c.transient()
    };
    let Ok(mut u) = busy.unbusy(obj, &store) else {
        return;
    };
    if let Some(mut fb) = u.body.take() {
        for _ in 0..rng.below(4) {
            if fb.push(Bytes::from(vec![b'x'; 700])).is_err() {
                fb.fail();
                return;
            }
            tokio::task::yield_now().await;
        }
        match rng.below(15) {
            0 => fb.fail(),
            1 => drop(fb),
            _ => fb.finish(),
        }
    }
}

async fn worker(c: Cache, seed: u64) {
    let mut rng = Rng(seed);
    for i in 0..1500u32 {
        let now = T0 + f64::from(i) * 0.01;
        let key = rng.below(KEYS);
        let d = digest(&format!("/s{key}"));
        let url = format!("/s{key}");
        match rng.below(40) {
            0 => {
                c.purge(&d, now, 0.0, 0.0, 0.0);
                continue;
            }
            1 => {
                c.purge(&d, now, 0.0, 1.0, 0.0);
                continue;
            }
            2 => {
                c.ban_str(&format!("obj.http.x-key == k{key}"), now)
                    .unwrap();
                continue;
            }
            3 => {
                c.ban_str(&format!("req.url == {url}"), now).unwrap();
                continue;
            }
            4 => {
                c.expire_due(now);
                continue;
            }
            5 => {
                c.ban_lurker_step(now, 0.0, 50, 0);
                continue;
            }
            _ => {}
        }
        let mut req = LookupRequest::new(&d, url.as_bytes(), &(), now);
        req.always_miss = rng.below(50) == 0;
        loop {
            match c.lookup(&req).kind {
                Lookup::Hit(o) => {
                    if rng.below(3) == 0 {
                        let mut r = o.body().reader();
                        // Streaming or finished, failed bodies end in an error.
                        while let Ok(Some(_)) = r.next().await {}
                    }
                    break;
                }
                Lookup::Grace { stale, bgfetch } => {
                    let _ = stale.body().len_so_far();
                    if let Some(b) = bgfetch {
                        fetch(&c, b, key, now, &mut rng).await;
                    }
                    break;
                }
                Lookup::Miss { busy, .. } | Lookup::HitMiss { busy, .. } => {
                    fetch(&c, busy, key, now, &mut rng).await;
                    break;
                }
                Lookup::HitPass { .. } => break,
                Lookup::Busy(w) => {
                    if rng.below(10) == 0 {
                        drop(w); // client went away
                        break;
                    }
                    w.wait().await;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_concurrent_use_leaks_nothing() {
    for round in 0..4u64 {
        run_round(round).await;
    }
}

async fn run_round(round: u64) {
    let c = cache_with(Some(16 * 1024), 5);
    let tasks: Vec<_> = (0..6u64)
        .map(|t| {
            let seed = 0x9E37_79B9_7F4A_7C15 ^ (round * 104_729 + t * 7919 + 1);
            tokio::spawn(worker(c.clone(), seed))
        })
        .collect();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("a worker hung (lost wake-up?)")
            .unwrap();
    }
    let s = c.stats();
    assert!(
        get(&s.n_lru_nuked) > 0 || get(&s.n_lru_limited) > 0,
        "store pressure exercised"
    );
    assert!(get(&s.bans_added) > 1);
    // Everything expires eventually.
    let far = T0 + 1e6;
    c.expire_due(far);
    // Objects nobody looked up again may still hold old ban references: the
    // lurker (obj bans) and trimming clean those once they are gone.
    c.ban_lurker_step(far, 0.0, usize::MAX, 0);
    assert_eq!(get(&s.n_object), 0, "objects leaked");
    assert_eq!(get(&s.n_objectcore), 0, "objcores leaked");
    assert_eq!(get(&s.n_objecthead), 0, "objheads leaked");
    for st in c.stores() {
        assert_eq!(st.lru_len(), 0, "LRU entries leaked in {}", st.name());
        let ss = st.stevedore().stats();
        assert_eq!(
            ss.g_bytes.load(Ordering::Relaxed),
            0,
            "bytes leaked in {}",
            st.name()
        );
        assert_eq!(
            ss.g_alloc.load(Ordering::Relaxed),
            0,
            "allocs leaked in {}",
            st.name()
        );
    }
    assert_eq!(get(&s.bans), 1, "{}", c.ban_list());
    let info = c.ban_info();
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].refs, 0);
    assert_eq!(get(&s.bans_added) - get(&s.bans_deleted), 1);
}
