//! The persistent store's bytes and configuration: its file header, object
//! records and ban journal as recovery reads them back from disk, its
//! in-memory index, `mse.conf`, the `-s` arguments, and the extent
//! allocator of the file stores.

use std::collections::BTreeMap;

use lacquer_storage::disk::conf::MseConf;
use lacquer_storage::disk::format::{
    Crc, FileHeader, JOURNAL_HEAD, JournalEntry, ObjectRecord, RECORD_MAGIC, crc32c,
    decode_journal, journal_header,
};
use lacquer_storage::disk::index::{Entry, Index};
use lacquer_storage::file::Arena;
use lacquer_storage::parse_storage_args;

/// The salt the fuzzed records are checksummed with.
const SALT: u64 = 0x5eed_f00d_dead_beef;

/// Wraps `payload` in a record head with a correct salted checksum, so the
/// fuzzer's bytes reach the field decoders.
fn record(payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("fuzz inputs are small");
    let mut crc = Crc::salted(SALT);
    crc.update(&len.to_le_bytes());
    crc.update(payload);
    let mut b = RECORD_MAGIC.to_vec();
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&crc.value().to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(payload);
    b
}

/// Wraps `payload` in a journal entry head of `kind` with a correct
/// checksum.
fn entry(kind: u8, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("fuzz inputs are small");
    let mut crc = Crc::salted(SALT);
    crc.update(&[kind]);
    crc.update(&len.to_le_bytes());
    crc.update(payload);
    let mut b = b"LJ".to_vec();
    b.extend_from_slice(&[kind, 0]);
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&crc.value().to_le_bytes());
    b.extend_from_slice(payload);
    b
}

/// The on-disk format. The first byte picks what the rest is:
/// - 0: a file header (its checksum fixed when the second byte is odd);
///   an accepted header encodes back to the same 60 bytes;
/// - 1: an object record's payload, framed with a valid checksum; the full
///   decoder and the recovery scan's summary accept the same records and
///   agree on them, and an accepted record encodes back to its bytes;
/// - 2: raw bytes for both record decoders (checksums as they come);
/// - 3: journal entries (`kind`, `len`, payload…) after a valid journal
///   header; the entries read back encode to the valid prefix; the same
///   bytes as a whole journal are read or refused, within their length.
pub fn disk_format(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => file_header(rest),
        1 => {
            let b = record(rest);
            check_record(&b);
            // Bytes after a record (the next one in the arena) change nothing.
            let mut longer = b.clone();
            longer.extend_from_slice(&b[..b.len().min(32)]);
            let x = ObjectRecord::decode(&b, SALT).ok();
            let y = ObjectRecord::decode(&longer, SALT).ok();
            assert_eq!(x.is_some(), y.is_some(), "trailing arena bytes matter");
        }
        2 => {
            let _ = ObjectRecord::peek_len(rest);
            check_record(rest);
        }
        _ => journal(rest),
    }
}

fn file_header(rest: &[u8]) {
    let mut b = rest.get(1..).unwrap_or_default().to_vec();
    if rest.first().is_some_and(|m| m & 1 == 1) && b.len() >= 60 {
        let crc = crc32c(&b[..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(h) = FileHeader::decode(&b) {
        let enc = h.encode();
        assert_eq!(&enc[..60], &b[..60], "file header round trip");
    }
}

fn check_record(b: &[u8]) {
    let full = ObjectRecord::decode(b, SALT);
    let mut extents = Vec::new();
    let summary = ObjectRecord::summary(b, SALT, &mut extents);
    match (&full, &summary) {
        (Ok(rec), Ok(s)) => {
            assert_eq!(rec.digest, s.digest);
            assert_eq!(rec.inserted_at.to_bits(), s.inserted_at.to_bits());
            assert_eq!(rec.body_len, s.body_len);
            assert_eq!(rec.slot_len, s.slot_len);
            assert_eq!(rec.extents, extents);
            let total = ObjectRecord::peek_len(b).expect("decoded record has a length");
            assert!(total <= b.len());
            assert!(rec.encode(SALT) == b[..total], "record round trip: {rec:?}");
        }
        (Err(_), Err(_)) => assert!(extents.is_empty(), "a refused record left extents"),
        _ => panic!("decode and summary disagree: {full:?} / {summary:?}"),
    }
}

fn journal(rest: &[u8]) {
    let mut b = journal_header(SALT);
    let mut r = rest;
    while let [kind, len, tail @ ..] = r {
        let n = usize::from(*len).min(tail.len());
        b.extend_from_slice(&entry(*kind, &tail[..n]));
        r = &tail[n..];
    }
    // A torn tail: whatever bytes are left.
    b.extend_from_slice(r);
    let (salt, entries, valid) = decode_journal(&b).expect("valid journal header");
    assert_eq!(salt, SALT);
    assert!(JOURNAL_HEAD <= valid && valid <= b.len());
    let mut again = Vec::new();
    for e in &entries {
        again.extend_from_slice(&e.encode(SALT));
        let _ = e.time();
    }
    assert!(
        again == b[JOURNAL_HEAD..valid],
        "journal round trip: {entries:?}"
    );
    let _ = JournalEntry::decode(rest, SALT);
    if let Ok((_, entries, valid)) = decode_journal(rest) {
        assert!(valid <= rest.len() && entries.len() <= rest.len());
    }
}

/// The recovery index, driven by operations read from the input (insert,
/// take, evict) and checked against a plain list of the same entries.
pub fn disk_index(data: &[u8]) {
    let Some((&cap, mut ops)) = data.split_first() else {
        return;
    };
    let mut idx = Index::with_capacity(usize::from(cap % 64));
    let mut model: Vec<Entry> = Vec::new();
    while let [op, a, b, rest @ ..] = ops {
        ops = rest;
        // Few distinct tags so that takes hit and probe chains collide.
        let tag = u64::from(*a % 16) << (56 + (*b as u32 % 8)) | u64::from(*a % 5);
        match op % 3 {
            0 => {
                let e = Entry {
                    tag,
                    off: u64::from(*b),
                    slot: u32::from(*a),
                    expires: u32::from(*b % 8),
                };
                if idx.insert(e) {
                    model.push(e);
                } else {
                    assert!(tag == 0 || model.len() + 1 >= idx_slots(cap));
                }
            }
            1 => {
                let mut got = idx.take(tag);
                let mut want: Vec<Entry> = model.iter().filter(|e| e.tag == tag).copied().collect();
                model.retain(|e| e.tag != tag);
                got.sort_by_key(|e| (e.off, e.slot, e.expires));
                want.sort_by_key(|e| (e.off, e.slot, e.expires));
                assert_eq!(got, want, "take({tag:#x})");
                assert!(!idx.contains(tag));
            }
            _ => match idx.evict(u32::from(*b % 8)) {
                Some(e) => {
                    let i = model
                        .iter()
                        .position(|m| *m == e)
                        .unwrap_or_else(|| panic!("evicted {e:?}, never inserted"));
                    model.swap_remove(i);
                }
                None => assert!(model.is_empty(), "evict found nothing in {model:?}"),
            },
        }
        assert_eq!(idx.len(), model.len());
        for e in &model {
            assert!(idx.contains(e.tag), "{e:?} unreachable");
        }
    }
    let mut all = idx.entries();
    all.sort_by_key(|e| (e.tag, e.off, e.slot, e.expires));
    model.sort_by_key(|e| (e.tag, e.off, e.slot, e.expires));
    assert_eq!(all, model);
}

/// The slots [`Index::with_capacity`] makes for a capacity byte.
fn idx_slots(cap: u8) -> usize {
    let n = usize::from(cap % 64);
    if n == 0 { 0 } else { (n + n / 2).max(8) }
}

/// An `mse.conf`: parsing never panics, and what it accepts has at least
/// one store with a name.
pub fn mse_conf(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = MseConf::parse(&text) {
        for s in &c.stores {
            assert!(!s.id.is_empty(), "store without an id in {c:?}");
        }
    }
}

/// `-s` arguments, one per line (never `mse,FILE`, which reads a file),
/// and each line as a byte count (`parse_size`, `vnum_bytes`): parsed or
/// refused, never a panic; an
/// accepted set has unique names and always a `Transient` store.
pub fn storage_args(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let args: Vec<&str> = text.lines().filter(|a| !a.contains("mse")).collect();
    if let Ok(specs) = parse_storage_args(&args) {
        assert!(
            specs.iter().any(|s| s.name == "Transient"),
            "no Transient in {specs:?}"
        );
        for (i, s) in specs.iter().enumerate() {
            assert!(
                specs[..i].iter().all(|o| o.name != s.name),
                "two stores named {}",
                s.name
            );
        }
    }
    for a in &args {
        let _ = lacquer_storage::parse_size(a);
        let _ = lacquer_storage::spec::vnum_bytes(a);
    }
}

/// Granules in the [`arena`] target's allocator.
const ARENA_GRANULES: u64 = 512;

/// The file store's extent allocator (`-s file` and the persistent
/// store), driven by operations read from the input: allocate, free,
/// shrink, reserve and reserve-merged (recovery), and free part of a run.
/// Each call is checked against a plain map of the used extents: what it
/// returns, that used extents never overlap, that the free space and the
/// extent counts match the map (free extents are always merged, so an
/// allocation fails only when no free run is long enough), and that
/// freeing everything leaves one free extent.
pub fn arena(data: &[u8]) {
    let Some((&g, mut ops)) = data.split_first() else {
        return;
    };
    let g = u64::from(g % 16) + 1;
    let size = ARENA_GRANULES * g;
    let mut a = Arena::new(size, g);
    // Used extents by offset, as the arena should hold them.
    let mut used: BTreeMap<u64, u64> = BTreeMap::new();
    while let [op, x, y, z, rest @ ..] = ops {
        ops = rest;
        let word = u64::from(*y) << 8 | u64::from(*z);
        // An offset: mostly that of a used extent, sometimes any granule.
        let pick = |used: &BTreeMap<u64, u64>| match used
            .keys()
            .nth(usize::from(*x) % used.len().max(1))
        {
            Some(&o) if *z & 1 == 0 => o,
            _ => u64::from(*x) % ARENA_GRANULES * g,
        };
        match op % 6 {
            0 => {
                let want = a.round_up(word).expect("small sizes round up");
                match a.alloc(word) {
                    Some((off, len)) => {
                        assert_eq!(len, want, "alloc({word}) rounding");
                        assert!(range_free(&used, size, off, len), "alloc gave used space");
                        used.insert(off, len);
                    }
                    None => assert!(
                        free_runs(&used, size).iter().all(|&(_, l)| l < want),
                        "alloc({word}) failed with a free run of {want} bytes: {used:?}"
                    ),
                }
            }
            1 => {
                let off = pick(&used);
                let want = used.remove(&off).unwrap_or(0);
                assert_eq!(a.free(off), want, "free({off})");
            }
            2 => {
                let off = pick(&used);
                let keep = a.round_up(word).expect("small sizes round up");
                let freed = a.shrink(off, word);
                match used.get_mut(&off) {
                    Some(len) if keep < *len => {
                        assert_eq!(freed, *len - keep, "shrink({off}, {word})");
                        *len = keep;
                    }
                    _ => assert_eq!(freed, 0, "shrink({off}, {word}) of no used extent"),
                }
            }
            3 | 4 => {
                let off = u64::from(*x) % ARENA_GRANULES * g + u64::from(*z % 4 == 3);
                let len = u64::from(*y % 32) * g;
                let fits = len > 0 && off.is_multiple_of(g) && range_free(&used, size, off, len);
                if op % 6 == 3 {
                    assert_eq!(a.reserve(off, len), fits, "reserve({off}, {len})");
                    if fits {
                        used.insert(off, len);
                    }
                } else {
                    assert_eq!(
                        a.reserve_merged(off, len),
                        fits,
                        "reserve_merged({off}, {len})"
                    );
                    if fits {
                        let (mut start, mut total) = (off, len);
                        if let Some((&p, &l)) = used.range(..off).next_back()
                            && p + l == off
                        {
                            used.remove(&p);
                            (start, total) = (p, total + l);
                        }
                        if let Some(l) = used.remove(&(off + len)) {
                            total += l;
                        }
                        used.insert(start, total);
                    }
                }
            }
            _ => {
                let Some((&o, &l)) = used.iter().nth(usize::from(*x) % used.len().max(1)) else {
                    continue;
                };
                let at = o + u64::from(*y) % (l / g) * g;
                let len = (u64::from(*z) % ((o + l - at) / g) + 1) * g;
                assert_eq!(a.free_range(at, len), len, "free_range({at}, {len})");
                used.remove(&o);
                if at > o {
                    used.insert(o, at - o);
                }
                if at + len < o + l {
                    used.insert(at + len, o + l - at - len);
                }
            }
        }
        let c = a.counts();
        let in_use: u64 = used.values().sum();
        assert_eq!(c.free_bytes + in_use, size, "free bytes");
        let runs = free_runs(&used, size).len() as u64;
        assert_eq!(c.small_free + c.large_free, runs, "free extents: {used:?}");
        assert_eq!(c.extents, used.len() as u64 + runs, "extents: {used:?}");
    }
    for (off, len) in used {
        assert_eq!(a.free(off), len);
    }
    assert_eq!(a.counts().extents, 1);
    assert_eq!(a.counts().free_bytes, size);
}

/// Whether `off..off+len` lies inside the arena and touches no used
/// extent.
fn range_free(used: &BTreeMap<u64, u64>, size: u64, off: u64, len: u64) -> bool {
    off + len <= size
        && used
            .range(..off + len)
            .next_back()
            .is_none_or(|(&o, &l)| o + l <= off)
}

/// The maximal free runs between the used extents, as (offset, length).
fn free_runs(used: &BTreeMap<u64, u64>, size: u64) -> Vec<(u64, u64)> {
    let mut runs = Vec::new();
    let mut at = 0;
    for (&o, &l) in used {
        if o > at {
            runs.push((at, o - at));
        }
        at = o + l;
    }
    if at < size {
        runs.push((at, size - at));
    }
    runs
}
