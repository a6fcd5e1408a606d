//! The persistent store's bytes and configuration: its file header, object
//! records and ban journal as recovery reads them back from disk, its
//! in-memory index, `mse.conf`, and the `-s` arguments.

use lacquer_storage::disk::conf::MseConf;
use lacquer_storage::disk::format::{
    Crc, FileHeader, JOURNAL_HEAD, JournalEntry, ObjectRecord, RECORD_MAGIC, crc32c,
    decode_journal, journal_header,
};
use lacquer_storage::disk::index::{Entry, Index};
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
///   header; the entries read back encode to the valid prefix.
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
    let _ = decode_journal(rest);
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

/// `-s` arguments, one per line (never `mse,FILE`, which reads a file).
pub fn storage_args(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let args: Vec<&str> = text.lines().filter(|a| !a.contains("mse")).collect();
    if let Ok(specs) = parse_storage_args(&args) {
        assert!(!specs.is_empty());
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
    }
}
