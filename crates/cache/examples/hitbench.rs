//! Cache-hit throughput: T threads doing lookups of hot objects for a few
//! seconds. `cargo run --release -p lacquer-cache --example hitbench [threads] [objects] [secs]`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lacquer_cache::*;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let threads = args.first().copied().unwrap_or(2);
    let objects = args.get(1).copied().unwrap_or(1000);
    let secs = args.get(2).copied().unwrap_or(3);
    let s0: Arc<dyn Stevedore> = Arc::new(MallocStore::new("s0", None));
    let c = Cache::new(CacheConfig::default(), vec![s0], 1000.0);
    let store = c.store("s0").expect("s0 exists");
    let digests: Vec<Digest> = (0..objects)
        .map(|i| {
            let mut h = HashBuilder::new();
            h.hash_data(format!("/obj/{i}").as_bytes());
            h.finish()
        })
        .collect();
    for (i, d) in digests.iter().enumerate() {
        let Lookup::Miss { busy, .. } = c.lookup(&LookupRequest::new(d, b"/", &(), 1000.0)).kind
        else {
            unreachable!("cold cache misses")
        };
        let obj = NewObject {
            meta: ObjMeta {
                vxid: i as u32,
                t_origin: 1000.0,
                ttl: 1e9,
                grace: 10.0,
                keep: 0.0,
                kind: ObjKind::Normal,
            },
            status: 200,
            reason: Bytes::from_static(b"OK"),
            headers: vec![(
                Bytes::from_static(b"Content-Type"),
                Bytes::from_static(b"text/plain"),
            )],
            gzip: false,
            esi: None,
            gzip_changed: false,
            body_chunk: None,
            vary_bytes: None,
            body: NewBody::Complete(Body::from_segments(vec![Bytes::from(vec![b'x'; 1024])])),
        };
        busy.unbusy(obj, &store).expect("unlimited store");
    }
    let digests = Arc::new(digests);
    let total = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let c = c.clone();
            let digests = Arc::clone(&digests);
            let total = Arc::clone(&total);
            std::thread::spawn(move || {
                let mut n = 0u64;
                let mut i = t as usize;
                let hdrs: Vec<(&str, &str)> = vec![("Host", "example.com"), ("Accept", "*/*")];
                while Instant::now() < deadline {
                    for _ in 0..1000 {
                        let d = &digests[i % digests.len()];
                        i = i.wrapping_add(7);
                        let r = c.lookup(&LookupRequest::new(d, b"/", &hdrs, 1001.0));
                        let Lookup::Hit(o) = r.kind else {
                            unreachable!("all objects are fresh")
                        };
                        n += o.body().segments().map_or(0, |s| s.len()) as u64;
                    }
                }
                total.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    for h in hs {
        h.join().expect("bench thread");
    }
    let n = total.load(Ordering::Relaxed);
    println!(
        "{threads} threads, {objects} objects: {:.0} hits/s",
        n as f64 / secs as f64
    );
}
