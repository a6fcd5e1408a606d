//! Objects stored in a `-s file` store: bodies written to the file, read
//! back byte for byte (whole and by range), LRU nuking when the file is
//! full, and every byte of space returned when the objects go.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use common::*;
use lacquer_cache::*;
use lacquer_storage::{Advice, FileStore, Segment};

struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn file_cache(tag: &str) -> (Scratch, Cache, Arc<FileStore>) {
    let dir = std::env::temp_dir().join(format!("lacquer-smf-it-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = Arc::new(
        FileStore::open("s0", dir.to_str().unwrap(), Some("1m"), 1, Advice::Random).unwrap(),
    );
    let s0: Arc<dyn Stevedore> = store.clone();
    let c = Cache::new(
        CacheConfig {
            shards: 4,
            nuke_limit: 10,
            lru_interval: 0.0,
        },
        vec![s0],
        T0,
    );
    (Scratch(dir), c, store)
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

async fn read(r: BodyReader) -> Vec<u8> {
    let mut r = r;
    let mut out = Vec::new();
    while let Some(s) = r.next().await.unwrap() {
        out.extend_from_slice(&s);
    }
    out
}

/// Store `body` under `url` as a fetch does: streamed, length unknown,
/// in 128 KiB storage pieces, pushed in 10 000-byte reads.
fn store_streamed(c: &Cache, url: &str, body: &[u8]) -> ObjRef {
    let (busy, _) = expect_miss(lookup(c, &digest(url), T0));
    let s0 = c.store("s0").unwrap();
    let (obj, mut fb) = unbusy_streamed(busy, &s0);
    fb.plan(PiecePlan {
        estimate: None,
        chunk: 128 * 1024,
        max_chunk: u64::MAX,
    });
    for part in body.chunks(10_000) {
        fb.push(Bytes::copy_from_slice(part)).unwrap();
    }
    fb.finish();
    obj
}

#[tokio::test]
async fn bodies_live_in_the_file_and_read_back_identically() {
    let (_d, c, store) = file_cache("rw");
    let a = pattern(1, 300_001);
    let o = store_streamed(&c, "/a", &a);
    let segs = o.body().segments().unwrap();
    assert!(segs.iter().all(|s| matches!(s, Segment::File(_))));
    assert_eq!(read(o.body().reader()).await, a);
    assert_eq!(
        read(o.body().range_reader(5_000, Some(250_000))).await,
        &a[5_000..250_000]
    );
    assert_eq!(o.body().tail(4).unwrap(), &a[a.len() - 4..]);
    assert_eq!(&o.body().collect().await.unwrap()[..], &a[..]);

    // A body that arrives complete is written to the file too.
    let (busy, _) = expect_miss(lookup(&c, &digest("/small"), T0));
    let s0 = c.store("s0").unwrap();
    let small = busy
        .unbusy(new_obj(meta(2, T0, 60.0, 0.0, 0.0), b"hello, file"), &s0)
        .unwrap()
        .obj;
    assert!(matches!(
        small.body().segments().unwrap()[0],
        Segment::File(_)
    ));
    assert_eq!(read(small.body().reader()).await, b"hello, file");

    // Counted in whole granules: the object, three 128 KiB pieces of which
    // the last is trimmed as varnishd does (its bytes copied to a piece of
    // their size, the old one freed), the small object and its body.
    let st = store.stats();
    let g = store.granularity();
    assert_eq!(st.c_req.load(Relaxed), 7);
    assert_eq!(st.g_alloc.load(Relaxed), 6);
    assert_eq!(st.c_freed.load(Relaxed), 128 * 1024);
    let body_a = 300_001u64.div_ceil(g) * g;
    assert!(st.g_bytes.load(Relaxed) >= body_a + 2 * g);
    assert_eq!(
        st.g_space.load(Relaxed) + st.g_bytes.load(Relaxed),
        1 << 20,
        "space and bytes add up to the file"
    );
}

#[tokio::test]
async fn a_full_file_nukes_the_oldest_and_gives_back_all_space() {
    let (_d, c, store) = file_cache("nuke");
    let bodies: Vec<Vec<u8>> = (0..4).map(|i| pattern(i, 300_000)).collect();
    for (i, b) in bodies.iter().enumerate() {
        // Only objects nobody is delivering can be nuked: let go of each.
        drop(store_streamed(&c, &format!("/o{i}"), b));
    }
    // Four 300 kB bodies do not fit in 1 MiB: the oldest are nuked (two:
    // the first one's space is split by the new object's 128 KiB pieces and
    // its tail does not hold a whole one) and their space reused; the
    // others read back intact.
    let nuked = c.stats().n_lru_nuked.load(Relaxed) as usize;
    assert_eq!(nuked, 2);
    let mut objs = Vec::new();
    for (i, b) in bodies.iter().enumerate() {
        let l = lookup(&c, &digest(&format!("/o{i}")), T0);
        if i < nuked {
            drop(expect_miss(l));
            continue;
        }
        let o = expect_hit(l);
        assert_eq!(&read(o.body().reader()).await, b, "object {i}");
        objs.push(o);
    }
    // Everything goes: the whole file is free again, as one extent.
    for o in &objs {
        c.kill(o);
    }
    drop(objs);
    let st = store.stats();
    assert_eq!(st.g_bytes.load(Relaxed), 0);
    assert_eq!(st.g_alloc.load(Relaxed), 0);
    assert_eq!(st.c_bytes.load(Relaxed), st.c_freed.load(Relaxed));
    assert_eq!(store.available(), 1 << 20);
    assert_eq!(st.g_space.load(Relaxed), 1 << 20);
    let f = store.file_stats().unwrap();
    assert_eq!(f.g_smf.load(Relaxed), 1);
    assert_eq!(f.g_smf_large.load(Relaxed), 1);
}

#[tokio::test]
async fn a_body_larger_than_the_file_fails_cleanly() {
    let (_d, c, store) = file_cache("big");
    let (busy, _) = expect_miss(lookup(&c, &digest("/big"), T0));
    let s0 = c.store("s0").unwrap();
    let (_obj, mut fb) = unbusy_streamed(busy, &s0);
    fb.plan(PiecePlan {
        estimate: None,
        chunk: 128 * 1024,
        max_chunk: u64::MAX,
    });
    let e = fb.push(Bytes::from(vec![7u8; 2 << 20])).unwrap_err();
    assert_eq!(e.store, "s0");
    fb.fail();
    assert!(store.stats().c_fail.load(Relaxed) >= 1);
}

#[tokio::test]
async fn a_reader_streaming_across_the_trim_reads_every_byte() {
    let (_d, c, store) = file_cache("move");
    let body = pattern(9, 150_000);
    let (busy, _) = expect_miss(lookup(&c, &digest("/m"), T0));
    let s0 = c.store("s0").unwrap();
    let (obj, mut fb) = unbusy_streamed(busy, &s0);
    fb.plan(PiecePlan {
        estimate: None,
        chunk: 128 * 1024,
        max_chunk: u64::MAX,
    });
    let mut r = obj.body().reader();
    let (head, tail) = body.split_at(140_000);
    for part in head.chunks(10_000) {
        fb.push(Bytes::copy_from_slice(part)).unwrap();
    }
    // The reader is part-way into the second (last) piece when the body is
    // finished and that piece's bytes move to a right-sized extent.
    let mut got = Vec::new();
    while got.len() < 135_000 {
        got.extend_from_slice(&r.next().await.unwrap().unwrap());
    }
    for part in tail.chunks(10_000) {
        fb.push(Bytes::copy_from_slice(part)).unwrap();
    }
    fb.finish();
    while let Some(s) = r.next().await.unwrap() {
        got.extend_from_slice(&s);
    }
    assert_eq!(got, body);
    assert_eq!(read(obj.body().reader()).await, body);
    // object, two pieces, the trimmed copy of the second.
    assert_eq!(store.stats().c_req.load(Relaxed), 4);
    assert_eq!(store.stats().c_freed.load(Relaxed), 128 * 1024);
}
