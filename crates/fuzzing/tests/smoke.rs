//! Stable smoke run of every fuzz target: its checked-in corpus
//! (`fuzz/corpus/<target>/`, which keeps every input that once crashed a
//! parser) and then a fixed number of seeded pseudo-random mutations of
//! it. Deterministic, bounded to a few seconds, and needs no nightly
//! toolchain, so the targets keep building and fixed crashes stay fixed.
//! Set `LACQUER_FUZZ_SMOKE_ITERS` (and `LACQUER_FUZZ_SMOKE_SECS`, the time
//! cap per target) to run more mutations per target.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Mutations per target unless `LACQUER_FUZZ_SMOKE_ITERS` says otherwise.
const ITERS: usize = 1000;
/// No target may take longer than this (seconds) for its mutations
/// unless `LACQUER_FUZZ_SMOKE_SECS` says otherwise.
const BUDGET_SECS: u64 = 2;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = root().join("corpus").join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}; every target needs a seed corpus", dir.display()))
        .map(|e| {
            let p = e.expect("corpus entry").path();
            let bytes = std::fs::read(&p).expect("corpus file");
            (p.display().to_string(), bytes)
        })
        .collect();
    out.sort();
    out
}

/// xorshift64*: a small seeded generator, so every run mutates alike.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Bytes parsers treat specially: delimiters, limits, signs, escapes.
const INTERESTING: &[&[u8]] = &[
    b"\r\n",
    b"\n",
    b"\0",
    b" ",
    b"\t",
    b":",
    b";",
    b"=",
    b"{",
    b"}",
    b"\"",
    b"<",
    b">",
    b"/",
    b"\\",
    b"0",
    b"-1",
    b"ffffffffffffffff",
    b"18446744073709551616",
    b"\xff",
    b"\x80",
    b"%",
    b"<esi:",
    b"-->",
    b"#",
    b"'",
];

fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, rng.next() as u8);
            }
            3 if !v.is_empty() => {
                let i = rng.below(v.len());
                let n = 1 + rng.below((v.len() - i).min(16));
                v.drain(i..i + n);
            }
            4 if !v.is_empty() => {
                let i = rng.below(v.len());
                let n = 1 + rng.below((v.len() - i).min(64));
                let piece = v[i..i + n].to_vec();
                let at = rng.below(v.len() + 1);
                v.splice(at..at, piece);
            }
            5 => {
                let s = INTERESTING[rng.below(INTERESTING.len())];
                let at = rng.below(v.len() + 1);
                v.splice(at..at, s.iter().copied());
            }
            _ if !other.is_empty() => {
                let cut = rng.below(v.len() + 1);
                let from = rng.below(other.len());
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            _ => {}
        }
    }
    v
}

#[test]
fn every_target_has_a_libfuzzer_binary() {
    for (name, _) in lacquer_fuzzing::TARGETS {
        let p = root().join("fuzz_targets").join(format!("{name}.rs"));
        let src = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(
            src.contains(&format!("lacquer_fuzzing::{name}(data)")),
            "{} does not call lacquer_fuzzing::{name}",
            p.display()
        );
    }
}

#[test]
fn corpora_and_mutations_run_clean() {
    let iters = env_num("LACQUER_FUZZ_SMOKE_ITERS", ITERS as u64) as usize;
    let budget = Duration::from_secs(env_num("LACQUER_FUZZ_SMOKE_SECS", BUDGET_SECS));
    let mut total = 0;
    for (ti, (name, run)) in lacquer_fuzzing::TARGETS.iter().enumerate() {
        let seeds = corpus(name);
        assert!(!seeds.is_empty(), "fuzz/corpus/{name}/ is empty");
        for (path, bytes) in &seeds {
            let r = std::panic::catch_unwind(|| run(bytes));
            assert!(r.is_ok(), "{name}: corpus file {path} fails");
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (ti as u64 + 1));
        let start = Instant::now();
        let mut done = 0;
        while done < iters {
            let a = &seeds[rng.below(seeds.len())].1;
            let b = &seeds[rng.below(seeds.len())].1;
            let input = mutate(&mut rng, a, b);
            let r = std::panic::catch_unwind(|| run(&input));
            assert!(r.is_ok(), "{name}: mutation {done} fails on {input:?}");
            done += 1;
            if start.elapsed() > budget {
                break;
            }
        }
        eprintln!(
            "{name}: {} corpus files, {done} mutations in {:?}",
            seeds.len(),
            start.elapsed()
        );
        total += done;
    }
    eprintln!("{total} mutations in all");
}
