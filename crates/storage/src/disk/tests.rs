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

/// The index snapshot's files (base and logs) of the store in `d`.
fn snapshot_files(d: &Dir) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(&d.0)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("store.dat.snap"))
        })
        .collect();
    v.sort();
    v
}

fn remove_snapshot(d: &Dir) {
    for p in snapshot_files(d) {
        // The store's snapshot writer may have replaced it meanwhile.
        match std::fs::remove_file(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            r => r.unwrap(),
        }
    }
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
    // Without its index snapshot the store is scanned.
    remove_snapshot(&d);
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    let r = take_all(&s);
    assert_eq!(r.len(), 200);
    let st = s.disk_stats();
    assert!(st.scanned_bytes.load(Relaxed) > 0);
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

/// Objects 1..=n written and left as a crash leaves them; 1..=k of them
/// removed first.
/// The body of the numbered test object `i`.
fn numbered_body(i: u8) -> Vec<u8> {
    vec![i; 700 + usize::from(i) * 13]
}

/// Writes the numbered objects `ids` and keeps them (as a crash would
/// leave them), then flushes.
fn put_kept(s: &DiskStore, ids: std::ops::RangeInclusive<u8>) {
    for i in ids {
        std::mem::forget(put(s, i, f64::from(i), &numbered_body(i)));
    }
    s.flush();
}

fn fill(s: &DiskStore, n: u8, removed: u8) {
    s.wait_scanned();
    for i in 1..=n {
        let (slot, body) = put(s, i, f64::from(i), &numbered_body(i));
        s.flush();
        if i <= removed {
            slot.erase_when_dropped();
            drop((slot, body));
        } else {
            std::mem::forget((slot, body));
        }
    }
    s.flush();
}

async fn check_found(s: &DiskStore, n: u8, removed: u8) {
    let r = take_all(s);
    let got: Vec<u8> = r.iter().map(|o| o.record.digest[0]).collect();
    assert_eq!(got, (removed + 1..=n).collect::<Vec<u8>>());
    for o in &r {
        let i = o.record.digest[0];
        assert_eq!(bytes_of(&o.body).await, numbered_body(i));
        assert!(s.verify_body(&o.body, o.record.body_len, o.record.body_crc));
    }
}

#[tokio::test]
async fn a_checkpoint_is_loaded_instead_of_scanning() {
    let d = Dir::new("ckpt");
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        fill(&s, 30, 5);
        assert_eq!(s.checkpoint(), Ok(25));
    }
    // The base and the log opened after it, nothing older.
    assert_eq!(snapshot_files(&d).len(), 2, "{:?}", snapshot_files(&d));
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    s.wait_scanned();
    assert_eq!(s.disk_stats().scanned_bytes.load(Relaxed), 0);
    assert_eq!(s.disk_stats().recovered.load(Relaxed), 25);
    check_found(&s, 30, 5).await;
}

#[tokio::test]
async fn after_a_crash_the_log_finds_what_came_after_the_snapshot() {
    let d = Dir::new("ckpt-crash");
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        fill(&s, 10, 0);
        assert_eq!(s.checkpoint(), Ok(10));
        // After the snapshot: more objects, and two of the snapshot's
        // removed (their space reused), then a crash.
        put_kept(&s, 11..=40);
    }
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    s.wait_scanned();
    assert_eq!(s.disk_stats().scanned_bytes.load(Relaxed), 0);
    check_found(&s, 40, 0).await;
    s.wait_settled();
    drop(s);
    // Removals after the snapshot stay removed.
    let d2 = Dir::new("ckpt-crash-rm");
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d2)).unwrap();
        fill(&s, 10, 0);
        assert_eq!(s.checkpoint(), Ok(10));
    }
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d2)).unwrap();
        s.wait_scanned();
        // Objects 1..=4 looked up and removed; their space goes to new ones.
        for i in 1..=4u8 {
            let got = s.take_indexed(&[i; 32]);
            assert_eq!(got.len(), 1);
            got[0].record_extent.erase_when_dropped();
        }
        put_kept(&s, 11..=20);
    }
    let s = DiskStore::open("d0", "disk", &cfg(&d2)).unwrap();
    s.wait_scanned();
    assert_eq!(s.disk_stats().scanned_bytes.load(Relaxed), 0);
    let r = take_all(&s);
    let got: Vec<u8> = r.iter().map(|o| o.record.digest[0]).collect();
    assert_eq!(got, (5..=20).collect::<Vec<u8>>());
    for o in &r {
        let i = o.record.digest[0];
        assert_eq!(bytes_of(&o.body).await, numbered_body(i));
    }
    assert_eq!(s.disk_stats().dropped_damaged.load(Relaxed), 0);
}

#[tokio::test]
async fn logs_are_folded_into_a_new_base_as_they_grow() {
    let d = Dir::new("ckpt-fold");
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        // More log entries than a log keeps before it is folded.
        fill(&s, 120, 30);
        // Let a background fold finish.
        assert_eq!(s.checkpoint(), Ok(90));
        put_kept(&s, 121..=130);
    }
    let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
    s.wait_scanned();
    assert_eq!(s.disk_stats().scanned_bytes.load(Relaxed), 0);
    check_found(&s, 130, 30).await;
}

#[tokio::test]
async fn a_damaged_stale_or_foreign_snapshot_is_ignored_and_the_store_scanned() {
    // Each case damages the snapshot of a store of objects 1..=20 (1..=3
    // removed), reopens, and must find exactly the others by scanning.
    type Damage = fn(&Dir, &Path);
    let cases: Vec<(&str, Damage)> = vec![
        ("empty base", |_, b| std::fs::write(b, b"").unwrap()),
        ("garbage base", |_, b| {
            std::fs::write(b, (0..5000u32).map(|i| (i * 7) as u8).collect::<Vec<_>>()).unwrap()
        }),
        ("truncated base", |_, b| {
            let v = std::fs::read(b).unwrap();
            std::fs::write(b, &v[..v.len() / 2]).unwrap();
        }),
        ("flipped byte", |_, b| {
            let mut v = std::fs::read(b).unwrap();
            let at = v.len() - 40;
            v[at] ^= 1;
            std::fs::write(b, v).unwrap();
        }),
        ("base missing", |_, b| std::fs::remove_file(b).unwrap()),
        ("log missing", |d, b| {
            for p in snapshot_files(d) {
                if p != b {
                    std::fs::remove_file(p).unwrap();
                }
            }
        }),
        ("a log missing between two", |_, b| {
            // Logs G and G+2 exist, G+1 does not.
            let g = snapshot::peek_snapshot(&std::fs::read(b).unwrap())
                .unwrap()
                .1;
            std::fs::copy(snapshot::log_path(b, g), snapshot::log_path(b, g + 2)).unwrap();
        }),
        ("garbage log", |d, b| {
            for p in snapshot_files(d) {
                if p != b {
                    std::fs::write(p, b"LACQUER-SLOG\0\0\0\0 not a log").unwrap();
                }
            }
        }),
        ("another store's", |d, b| {
            let other = Dir::new("ckpt-other");
            {
                let s = DiskStore::open("d0", "disk", &cfg(&other)).unwrap();
                s.wait_scanned();
                s.checkpoint().unwrap();
            }
            let _ = d;
            let theirs = other.0.join("store.dat.snap");
            std::fs::copy(theirs, b).unwrap();
        }),
    ];
    for (what, damage) in cases {
        let d = Dir::new("ckpt-damage");
        {
            let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
            fill(&s, 20, 3);
            assert_eq!(s.checkpoint(), Ok(17), "{what}");
        }
        let base = d.0.join("store.dat.snap");
        damage(&d, &base);
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        s.wait_scanned();
        assert!(s.disk_stats().scanned_bytes.load(Relaxed) > 0, "{what}");
        check_found(&s, 20, 3).await;
        s.wait_settled();
        drop(s);
        // The scan's result is the new snapshot: the next start loads it.
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        s.wait_scanned();
        assert_eq!(s.disk_stats().scanned_bytes.load(Relaxed), 0, "{what}");
        check_found(&s, 20, 3).await;
    }
}

#[tokio::test]
async fn a_grown_or_truncated_store_is_scanned_not_loaded() {
    let d = Dir::new("ckpt-grow");
    {
        let s = DiskStore::open("d0", "disk", &cfg(&d)).unwrap();
        fill(&s, 10, 0);
        s.checkpoint().unwrap();
    }
    let grown = DiskConfig {
        size: Some(9 << 20),
        ..cfg(&d)
    };
    let s = DiskStore::open("d0", "disk", &grown).unwrap();
    s.wait_scanned();
    assert!(s.disk_stats().scanned_bytes.load(Relaxed) > 0);
    check_found(&s, 10, 0).await;
}
