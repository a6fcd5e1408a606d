//! Runs the regex operations of one typical.vcl cache hit through
//! Lacquer's regex layer alone, without the rest of VCL: the Rust twin of
//! `bench/bounds/pcre2_typical.c`, which runs the same operations with
//! PCRE2's JIT (the engine varnishd uses). Together they bound the VCL-time
//! target of issue 3 from below: no executor can spend less on this VCL
//! than its regex work.
//!
//! ```text
//! cargo run --release -p lacquer-vcl --example regex_profile [requests] [-v]
//! ```
//!
//! The operations (`bench/bounds/typical_hit_regex.tsv`) are the ones the
//! executor benchmark's `typical_hit` flow performs, in order, with the
//! subjects they see. `-v` prints each result once, in the C program's
//! format, so the two can be diffed.

use std::hint::black_box;
use std::time::Instant;

use lacquer_vcl::exec::regex::Regex;

/// Kind, pattern, subject, substitution: one line each.
const OPS: &str = include_str!("../../../bench/bounds/typical_hit_regex.tsv");

/// One operation: `M` is `~`, `S` regsub(), `A` regsuball().
struct Op {
    kind: u8,
    re: Regex,
    subject: Vec<u8>,
    sub: Vec<u8>,
}

fn load() -> Vec<Op> {
    OPS.lines()
        .enumerate()
        .map(|(i, line)| {
            let f: Vec<&str> = line.split('\t').collect();
            let kind = f.first().map_or(0, |k| k.as_bytes()[0]);
            assert!(
                f.len() >= 3 && b"MSA".contains(&kind),
                "typical_hit_regex.tsv:{}: want KIND\\tPATTERN\\tSUBJECT[\\tSUB]",
                i + 1
            );
            let re = Regex::new(f[1]).unwrap_or_else(|e| {
                panic!("typical_hit_regex.tsv:{}: {e}", i + 1);
            });
            Op {
                kind,
                re,
                subject: f[2].as_bytes().to_vec(),
                sub: f.get(3).unwrap_or(&"").as_bytes().to_vec(),
            }
        })
        .collect()
}

/// Runs one operation, leaving a substitution's result in `out`; returns
/// whether a `~` matched, or for a substitution whether it failed.
#[inline(never)]
fn run(op: &Op, out: &mut Vec<u8>) -> bool {
    out.clear();
    match op.kind {
        b'M' => op.re.is_match(&op.subject).unwrap_or(false),
        all => {
            let r = op.re.substitute(&op.subject, &op.sub, all == b'A', out);
            r.is_err()
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().map_or(200_000, |s| {
        s.parse()
            .unwrap_or_else(|_| panic!("count {s:?} is not a number"))
    });
    let ops = load();
    let mut out = Vec::with_capacity(8192);
    if args.next().as_deref() == Some("-v") {
        for op in &ops {
            let m = run(op, &mut out);
            match op.kind {
                b'M' => println!("M {m}"),
                k => println!("{} {}", k as char, String::from_utf8_lossy(&out)),
            }
        }
        return;
    }
    let mut sink = 0usize;
    for _ in 0..n / 10 {
        for op in &ops {
            sink += usize::from(run(op, &mut out)) + out.len();
        }
    }
    let start = Instant::now();
    for _ in 0..n {
        for op in &ops {
            sink += usize::from(run(black_box(op), &mut out)) + out.len();
        }
    }
    let per = start.elapsed().as_nanos() as f64 / f64::from(n.max(1));
    println!(
        "lacquer regex: {} regex ops, {n} requests, {per:.0} ns per request (wall) [{}]",
        ops.len(),
        sink % 7
    );
}
