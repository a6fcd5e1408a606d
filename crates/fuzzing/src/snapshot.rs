//! The persistent store's index snapshot as recovery reads it back: the
//! base file (header, object entries, trailer) and its logs (adds, frees,
//! commits), and the merge of the two. A damaged, truncated or forged
//! snapshot must be refused or cut at its torn tail, never panic, and what
//! it accepts must encode back to the same bytes.

use lacquer_storage::disk::format::{BodyExtent, Crc};
use lacquer_storage::disk::snapshot::{
    Found, Identity, LOG_HEAD, LogOp, SNAP_HEAD, SnapWriter, decode_log, decode_snapshot, log_add,
    log_commit, log_free, log_header, merge, snap_header,
};

/// The store the fuzzed snapshots claim to describe: small, so that
/// entries within it are easy to hit.
const ID: Identity = Identity {
    salt: 0x5eed_f00d_dead_beef,
    arena_size: 1 << 20,
    granularity: 512,
    created: 1_700_000_000.0,
};

/// `entries` between a correct base header and trailer (count `count`), so
/// the fuzzer's bytes reach the entry decoder.
fn wrapped_base(entries: &[u8], count: u64) -> Vec<u8> {
    let mut b = snap_header(&ID, 5).to_vec();
    b.extend_from_slice(entries);
    let mut c = Crc::salted(ID.salt);
    c.update(entries);
    b.extend_from_slice(b"LQSE");
    b.extend_from_slice(&c.value().to_le_bytes());
    b.extend_from_slice(&count.to_le_bytes());
    b
}

/// The bytes of a base listing `f`'s records.
fn encode_base(f: &Found, generation: u64) -> Vec<u8> {
    let mut w = SnapWriter::new(Vec::new(), &ID, generation).expect("writing to a Vec");
    for r in &f.records {
        w.push(r, f.extents_of(r)).expect("writing to a Vec");
    }
    w.finish().expect("writing to a Vec")
}

/// Log entries of kind `data[0] % 3` built from the rest, each with a
/// correct checksum, so the fuzzer's bytes reach the payload decoders.
fn wrapped_log(data: &[u8]) -> Vec<u8> {
    let mut b = log_header(5, ID.salt).to_vec();
    for chunk in data.chunks(61) {
        let Some((&k, rest)) = chunk.split_first() else {
            continue;
        };
        let word = |at: usize| {
            let mut w = [0u8; 8];
            for (i, x) in rest.iter().skip(at).take(8).enumerate() {
                w[i] = *x;
            }
            u64::from_le_bytes(w)
        };
        match k % 3 {
            0 => {
                let r = lacquer_storage::disk::snapshot::FoundRecord {
                    off: word(0) % ID.arena_size / 512 * 512,
                    slot: 512,
                    tag: word(8) | 1,
                    inserted_at: (word(16) % 1000) as f64,
                    expires: 10.0,
                    body_len: word(24) % 1024,
                    ext_at: 0,
                    ext_n: 1,
                };
                let x = BodyExtent {
                    off: word(32) % ID.arena_size / 512 * 512 % (ID.arena_size - 1024),
                    len: 1024,
                    used: 1024,
                };
                log_add(&mut b, ID.salt, &r, &[x]);
            }
            1 => log_free(&mut b, ID.salt, word(0) % ID.arena_size / 512 * 512),
            _ => log_commit(&mut b, ID.salt, word(0)),
        }
    }
    b
}

/// Check a decoded log and merge it over an empty base.
fn check_log(bytes: &[u8], data: &[u8]) {
    let Ok(log) = decode_log(bytes, &ID) else {
        return;
    };
    let adds = log
        .ops
        .iter()
        .filter(|o| matches!(o, LogOp::Add(_)))
        .count();
    assert_eq!(adds, log.found.records.len());
    for op in &log.ops {
        if let LogOp::Add(i) = op {
            let r = &log.found.records[*i as usize];
            assert!(r.off + r.slot <= ID.arena_size);
            for x in log.found.extents_of(r) {
                assert!(x.off + x.len <= ID.arena_size);
            }
        }
    }
    let mut k = 0usize;
    let merged = merge(&Found::default(), std::slice::from_ref(&log), |_, _| {
        k += 1;
        data.get(k).is_some_and(|b| b & 1 == 1)
    });
    // One survivor per offset at most, each one of the log's adds.
    let mut offs: Vec<u64> = merged.records.iter().map(|r| r.off).collect();
    offs.sort_unstable();
    let n = offs.len();
    offs.dedup();
    assert_eq!(offs.len(), n, "two survivors at one offset");
    for r in &merged.records {
        assert!(
            log.found
                .records
                .iter()
                .any(|a| a.off == r.off && a.tag == r.tag)
        );
    }
}

/// The index snapshot: `data[0] % 4` picks raw base bytes, fuzzed entries
/// in a correct base frame, raw log bytes, or fuzzed entries in a correct
/// log frame.
pub fn disk_snapshot(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => {
            if let Ok((generation, f)) = decode_snapshot(rest, &ID) {
                assert!(rest.len() >= SNAP_HEAD);
                assert_eq!(encode_base(&f, generation), rest);
            }
        }
        1 => {
            let count = u64::from(rest.first().copied().unwrap_or(0) % 4);
            let b = wrapped_base(rest.get(1..).unwrap_or_default(), count);
            if let Ok((generation, f)) = decode_snapshot(&b, &ID) {
                assert_eq!(generation, 5);
                assert_eq!(f.records.len() as u64, count);
                assert_eq!(encode_base(&f, generation), b);
            }
        }
        2 => {
            if rest.len() >= LOG_HEAD {
                check_log(rest, rest);
            } else {
                assert!(decode_log(rest, &ID).is_err());
            }
        }
        _ => {
            let b = wrapped_log(rest);
            let log = decode_log(&b, &ID).expect("a log of well-formed entries");
            assert!(!log.torn);
            check_log(&b, rest);
            // Any cut decodes to a prefix of it.
            let cut = rest.first().map_or(0, |c| usize::from(*c)) % (b.len() + 1);
            if let Ok(short) = decode_log(&b[..cut], &ID) {
                assert!(short.ops.len() <= log.ops.len());
                assert_eq!(short.ops[..], log.ops[..short.ops.len()]);
            }
        }
    }
}
