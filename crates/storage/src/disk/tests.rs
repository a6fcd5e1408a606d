//! Tests of the persistent store: layout, records, recovery and damage.

use super::*;
use crate::body::Body;

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!(
            "lacquer-disk-{tag}-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn cfg(d: &Dir) -> DiskConfig {
    DiskConfig {
        path: d.0.join("store.dat"),
        size: Some(8 << 20),
        journal_dir: None,
    }
}

/// Store an object the way the cache does: a charged slot, body extents
/// written in order, then `persist`. Returns what keeps it alive.
fn put(s: &DiskStore, digest: u8, t: f64, body: &[u8]) -> (Extent, Body) {
    let body_bytes = body;
    let slot = s.try_alloc(100).unwrap().extent.unwrap();
    let mut segs = Vec::new();
    for part in body.chunks(5000) {
        let x = s.try_alloc(part.len() as u64).unwrap().extent.unwrap();
        segs.push(Segment::File(x.write(0, part).unwrap()));
    }
    let body = Body::from_parts(segs);
    let rec = ObjectRecord {
        digest: [digest; 32],
        inserted_at: t,
        t_origin: t,
        ttl: 100.0,
        grace: 5.0,
        keep: 7.0,
        vxid: u32::from(digest),
        status: 200,
        reason: b"OK".to_vec(),
        headers: vec![(b"X-Obj".to_vec(), vec![digest])],
        ..ObjectRecord::default()
    };
    // Half the objects come with the checksum a fetch computes as it goes.
    let crc = digest.is_multiple_of(2).then(|| {
        let mut c = s.body_checksum();
        c.update(body_bytes);
        c
    });
    s.persist(rec, body.clone(), crc, Some(slot.clone()), Box::new(|_| {}));
    (slot, body)
}

/// Every object of the index (the tests' digests are `[n; 32]`), oldest
/// first.
fn take_all(s: &DiskStore) -> Vec<Recovered> {
    s.wait_scanned();
    let mut v: Vec<Recovered> = (0..=255u8).flat_map(|d| s.take_indexed(&[d; 32])).collect();
    v.sort_by(|a, b| a.record.inserted_at.total_cmp(&b.record.inserted_at));
    assert_eq!(s.indexed(), 0);
    v
}

async fn bytes_of(b: &Body) -> Vec<u8> {
    b.collect().await.unwrap().to_vec()
}

#[tokio::test]
async fn objects_survive_a_reopen() {
    let d = Dir::new("reopen");
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        s.wait_scanned();
        assert_eq!(s.indexed(), 0);
        let _a = put(&s, 1, 10.0, b"hello");
        let _b = put(&s, 2, 11.0, &big);
        assert!(s.journal(&JournalEntry::Ban {
            time: 12.0,
            text: "obj.http.x-obj == 1".into()
        }));
        s.flush();
        assert_eq!(s.disk_stats().records.load(Relaxed), 2);
        // Dropped without erasing: as a kill -9 leaves it. The handles
        // are leaked so that no record is erased.
        std::mem::forget(_a);
        std::mem::forget(_b);
    }
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    let r = take_all(&s);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].record.digest, [1; 32]);
    assert_eq!(r[0].record.headers[0].1, vec![1]);
    assert_eq!((r[0].record.ttl, r[0].record.keep), (100.0, 7.0));
    assert_eq!(bytes_of(&r[0].body).await, b"hello");
    assert_eq!(bytes_of(&r[1].body).await, big);
    assert_eq!(s.take_journal().len(), 1);
    // Checksums computed while writing and by reading back agree.
    for o in &r {
        assert!(s.verify_body(&o.body, o.record.body_len, o.record.body_crc));
    }
    assert_eq!(s.disk_stats().recovered.load(Relaxed), 2);
    // The adopted extents are taken: new allocations do not overlap them.
    let x = s.try_alloc(4096).unwrap().extent.unwrap();
    for o in &r {
        assert_ne!(o.record_extent.offset(), x.offset());
        for e in &o.record.extents {
            assert!(x.offset() + x.len() <= e.off || e.off + e.len <= x.offset());
        }
    }
}

#[tokio::test]
async fn a_store_scanned_in_parts_finds_every_object_across_their_bounds() {
    // 8 MiB scanned by four readers (unit tests scan in parts from 1 MiB
    // up); 200 objects of 35 KB fill it, so bodies straddle every bound.
    assert_eq!((8u64 << 20) / SCAN_PART_MIN, 8);
    let d = Dir::new("parts");
    let body_of = |i: u8| -> Vec<u8> { (0..35_000u32).map(|k| (k % 241) as u8 ^ i).collect() };
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        s.wait_scanned();
        let kept: Vec<_> = (0..200u8)
            .map(|i| put(&s, i, 10.0 + f64::from(i), &body_of(i)))
            .collect();
        s.flush();
        assert_eq!(s.disk_stats().records.load(Relaxed), 200);
        assert!(s.available() < 2 << 20, "the objects fill the store");
        std::mem::forget(kept);
    }
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    let r = take_all(&s);
    assert_eq!(r.len(), 200);
    let st = s.disk_stats();
    assert_eq!(st.dropped_damaged.load(Relaxed), 0);
    assert_eq!(st.dropped_conflict.load(Relaxed), 0);
    for (i, o) in r.iter().enumerate() {
        assert_eq!(o.record.digest, [i as u8; 32]);
        assert_eq!(bytes_of(&o.body).await, body_of(i as u8));
    }
}

#[tokio::test]
async fn a_dropped_object_is_not_found_again() {
    let d = Dir::new("drop");
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        s.wait_scanned();
        let kept = put(&s, 1, 10.0, b"kept");
        let gone = put(&s, 2, 11.0, b"gone");
        s.flush();
        // The cache marks an object's record when it leaves the cache.
        gone.0.erase_when_dropped();
        drop(gone);
        std::mem::forget(kept);
    }
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    let r = take_all(&s);
    assert_eq!(r.len(), 1);
    assert_eq!(bytes_of(&r[0].body).await, b"kept");
}

#[test]
fn damaged_records_are_dropped_and_counted() {
    let d = Dir::new("damage");
    let rec_off;
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        s.wait_scanned();
        let a = put(&s, 1, 10.0, b"first");
        let b = put(&s, 2, 11.0, b"second");
        s.flush();
        rec_off = b.0.offset();
        std::mem::forget(a);
        std::mem::forget(b);
    }
    // Tear the second record: flip a byte of its payload.
    let f = OpenOptions::new()
        .write(true)
        .read(true)
        .open(d.0.join("store.dat"))
        .unwrap();
    let mut byte = [0u8; 1];
    f.read_exact_at(&mut byte, HEADER_SIZE + rec_off + 40)
        .unwrap();
    byte[0] ^= 0xff;
    f.write_all_at(&byte, HEADER_SIZE + rec_off + 40).unwrap();
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    let r = take_all(&s);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].record.digest, [1; 32]);
    assert_eq!(s.disk_stats().dropped_damaged.load(Relaxed), 1);
}

#[test]
fn a_truncated_file_keeps_what_is_intact() {
    let d = Dir::new("trunc");
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        s.wait_scanned();
        let a = put(&s, 1, 10.0, b"early");
        // Push the next object far into the file.
        let filler = s.try_alloc(4 << 20).unwrap();
        let b = put(&s, 2, 11.0, &[7u8; 9000]);
        s.flush();
        std::mem::forget((a, b, filler));
    }
    let path = d.0.join("store.dat");
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(HEADER_SIZE + (4 << 20) + 4096).unwrap();
    drop(f);
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    let r = take_all(&s);
    assert_eq!(
        r.len(),
        1,
        "{:?}",
        r.iter().map(|o| o.record.digest[0]).collect::<Vec<_>>()
    );
    assert_eq!(r[0].record.digest, [1; 32]);
    assert!(
        s.disk_stats().dropped_conflict.load(Relaxed)
            + s.disk_stats().dropped_damaged.load(Relaxed)
            >= 1
    );
    // The file is back to its full size.
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        HEADER_SIZE + (8 << 20)
    );
}

#[test]
fn startup_errors_say_what_to_do() {
    let d = Dir::new("errors");
    // No size for a new file.
    let e = DiskStore::open(
        "d0",
        "disk",
        &DiskConfig {
            size: None,
            ..cfg(&d)
        },
    )
    .unwrap_err();
    assert!(e.contains("no size was given"), "{e}");
    // A directory that does not exist.
    let e = DiskStore::open(
        "d0",
        "disk",
        &DiskConfig {
            path: d.0.join("nodir/store.dat"),
            ..cfg(&d)
        },
    )
    .unwrap_err();
    assert!(e.contains("check that its directory exists"), "{e}");
    // More than the disk holds.
    let e = DiskStore::open(
        "d0",
        "disk",
        &DiskConfig {
            path: d.0.join("huge.dat"),
            size: Some(1 << 60),
            ..cfg(&d)
        },
    )
    .unwrap_err();
    assert!(e.contains("free space"), "{e}");
    // A file that is not a store.
    std::fs::write(d.0.join("other.dat"), b"not a store at all").unwrap();
    let e = DiskStore::open(
        "d0",
        "disk",
        &DiskConfig {
            path: d.0.join("other.dat"),
            ..cfg(&d)
        },
    )
    .unwrap_err();
    assert!(e.contains("not a usable Lacquer store file"), "{e}");
    // A newer format.
    let path = d.0.join("newer.dat");
    let h = FileHeader {
        version: format::VERSION + 1,
        granularity: 4096,
        arena_size: 8 << 20,
        salt: 1,
        created: 0.0,
    };
    std::fs::write(&path, h.encode()).unwrap();
    let e = DiskStore::open("d0", "disk", &DiskConfig { path, ..cfg(&d) }).unwrap_err();
    assert!(e.contains("newer than this Lacquer reads"), "{e}");
}

#[test]
fn an_unwritable_directory_is_a_clear_error() {
    let d = Dir::new("ro");
    let ro = d.0.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let mut perm = std::fs::metadata(&ro).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o500);
    std::fs::set_permissions(&ro, perm).unwrap();
    let r = DiskStore::open(
        "d0",
        "disk",
        &DiskConfig {
            path: ro.join("store.dat"),
            ..cfg(&d)
        },
    );
    // root ignores directory permissions; everyone else gets the error.
    let probe = std::fs::write(ro.join("probe"), b"x").is_ok();
    if probe {
        assert!(r.is_ok());
    } else {
        assert!(r.unwrap_err().contains("cannot open or create"));
    }
}

#[test]
fn the_store_grows_online_and_keeps_its_objects() {
    let d = Dir::new("grow");
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        s.wait_scanned();
        let a = put(&s, 1, 10.0, b"abc");
        s.flush();
        std::mem::forget(a);
    }
    let bigger = DiskConfig {
        size: Some(16 << 20),
        ..cfg(&d)
    };
    let s = DiskStore::open("d0", "disk", &bigger).unwrap();
    assert_eq!(take_all(&s).len(), 1);
    assert_eq!(s.limit(), Some(16 << 20));
}

#[tokio::test]
async fn a_large_recovered_body_is_delivered_in_read_sized_pieces() {
    let d = Dir::new("large");
    let big: Vec<u8> = (0..3_500_000u32).map(|i| (i % 253) as u8).collect();
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        s.wait_scanned();
        let slot = s.try_alloc(100).unwrap().extent.unwrap();
        let x = s.try_alloc(big.len() as u64).unwrap().extent.unwrap();
        let body = Body::from_parts(vec![Segment::File(x.write(0, &big).unwrap())]);
        let rec = ObjectRecord {
            digest: [9; 32],
            ttl: 100.0,
            ..ObjectRecord::default()
        };
        s.persist(
            rec,
            body.clone(),
            None,
            Some(slot.clone()),
            Box::new(|_| {}),
        );
        s.flush();
        std::mem::forget((slot, body, x));
    }
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    let r = take_all(&s);
    let segs = r[0].body.segments().unwrap();
    assert_eq!(segs.len(), 4);
    assert!(segs.iter().all(|s| s.len() <= FileSpan::MAX_READ));
    assert_eq!(bytes_of(&r[0].body).await, big);
}

#[test]
fn the_index_gives_up_objects_for_room_and_they_stay_gone() {
    let d = Dir::new("evict");
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        s.wait_scanned();
        for i in 1..=20u8 {
            std::mem::forget(put(&s, i, f64::from(i), &[i; 3000]));
        }
        s.flush();
    }
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    s.wait_scanned();
    assert_eq!(s.indexed(), 20);
    // 20 objects of a record and one body extent each, in one run of used
    // space: the arena keeps one extent for all of them.
    assert!(s.file_stats().unwrap().g_smf.load(Relaxed) <= 2);
    let used = s.stats().g_bytes.load(Relaxed);
    assert!(s.evict_indexed());
    assert_eq!(s.indexed(), 19);
    assert_eq!(s.disk_stats().index_evicted.load(Relaxed), 1);
    // Its record and body went back to the allocator.
    assert_eq!(used - s.stats().g_bytes.load(Relaxed), 512 + 3072);
    // A lookup of an object that is still there takes it out once.
    let got = s.take_indexed(&[7; 32]);
    let gone = usize::from(got.is_empty());
    assert!(s.take_indexed(&[7; 32]).is_empty());
    while s.evict_indexed() {}
    assert_eq!(s.indexed(), 0);
    assert_eq!(
        s.stats().g_bytes.load(Relaxed),
        (512 + 3072) * (1 - gone as u64)
    );
    drop(got);
    assert_eq!(s.available(), 8 << 20);
    drop(s);
    // What was given up is not found again; the object taken out (and
    // dropped without being removed, as a process ends) is.
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    s.wait_scanned();
    assert_eq!(s.indexed(), 1 - gone as u64);
}
