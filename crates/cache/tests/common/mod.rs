//! Shared helpers for the cache integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use bytes::Bytes;
use lacquer_cache::*;

pub const T0: f64 = 1_000_000.0;

pub fn digest(url: &str) -> Digest {
    let mut h = HashBuilder::new();
    h.hash_data(url.as_bytes());
    h.hash_data(b"example.com");
    h.finish()
}

pub fn cache_with(limit: Option<u64>, nuke_limit: u32) -> Cache {
    let s0: Arc<dyn Stevedore> = Arc::new(MallocStore::new("s0", limit));
    Cache::new(
        CacheConfig {
            shards: 16,
            nuke_limit,
            lru_interval: 2.0,
        },
        vec![s0],
        T0,
    )
}

pub fn cache() -> Cache {
    cache_with(None, 50)
}

pub fn meta(vxid: u32, t_origin: f64, ttl: f64, grace: f64, keep: f64) -> ObjMeta {
    ObjMeta {
        vxid,
        t_origin,
        ttl,
        grace,
        keep,
        kind: ObjKind::Normal,
    }
}

pub fn new_obj(meta: ObjMeta, body: &'static [u8]) -> NewObject {
    NewObject {
        meta,
        status: 200,
        reason: Bytes::from_static(b"OK"),
        headers: vec![
            (
                Bytes::from_static(b"Content-Type"),
                Bytes::from_static(b"text/plain"),
            ),
            (Bytes::from_static(b"ETag"), Bytes::from_static(b"\"abc\"")),
        ],
        gzip: false,
        esi: None,
        gzip_changed: false,
        body_chunk: None,
        vary_bytes: None,
        body: NewBody::Complete(Body::from_segments(vec![Bytes::from_static(body)])),
    }
}

pub fn lookup(c: &Cache, d: &Digest, now: f64) -> Lookup {
    c.lookup(&LookupRequest::new(d, b"/", &(), now)).kind
}

pub fn expect_miss(l: Lookup) -> (BusyObj, Option<ObjRef>) {
    match l {
        Lookup::Miss { busy, stale } => (busy, stale),
        other => panic!("expected Miss, got {other:?}"),
    }
}

pub fn expect_hit(l: Lookup) -> ObjRef {
    match l {
        Lookup::Hit(o) => o,
        other => panic!("expected Hit, got {other:?}"),
    }
}

/// Turns a miss's busy object into a streamed object (vxid 1, ttl 60 s) in
/// `store`: the object, and the writer of its body.
pub fn unbusy_streamed(busy: BusyObj, store: &StoreRef) -> (ObjRef, FetchBody) {
    let mut u = busy
        .unbusy(
            NewObject {
                body: NewBody::Streamed,
                ..new_obj(meta(1, T0, 60.0, 0.0, 0.0), b"")
            },
            store,
        )
        .unwrap();
    let fb = u.body.take().unwrap();
    (u.obj, fb)
}

/// Insert a simple object for `d` through a miss.
pub fn insert(c: &Cache, d: &Digest, m: ObjMeta, body: &'static [u8]) -> ObjRef {
    let (busy, _) = expect_miss(lookup(c, d, m.t_origin));
    let s0 = c.store("s0").unwrap();
    busy.unbusy(new_obj(m, body), &s0).unwrap().obj
}

pub fn get(c: &std::sync::atomic::AtomicU64) -> u64 {
    CacheStats::get(c)
}
