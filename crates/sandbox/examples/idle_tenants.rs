//! Measures what idle tenants cost: loads N distinct tenant programs
//! (default 10,000), prints the resident memory they added per tenant,
//! and the median time to fork (instantiate + call + drop) the first
//! and the last one loaded.
//!
//! `cargo run --release -p lacquer-sandbox --example idle_tenants [N]`

use std::time::{Duration, Instant};

use lacquer_sandbox::{HOOKS, Limits, PoolConfig, Sandbox};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn median_fork(sb: &Sandbox, p: &std::sync::Arc<lacquer_sandbox::Program>) -> Duration {
    let on_recv = HOOKS.iter().position(|h| *h == "on_recv").unwrap_or(0);
    let mut t: Vec<Duration> = (0..2001)
        .map(|_| {
            let s = Instant::now();
            let mut i = sb.instantiate(p).expect("instantiate");
            i.run_hook(on_recv).expect("on_recv");
            drop(i);
            s.elapsed()
        })
        .collect();
    t.sort();
    t[t.len() / 2]
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let sb = Sandbox::new(PoolConfig::default()).expect("sandbox");
    let before = rss_kib();
    let start = Instant::now();
    let progs: Vec<_> = (0..n)
        .map(|k| {
            let wat = format!(
                r#"(module
                  (import "lacquer" "header_append" (func $a (param i32 i32 i32) (result i32)))
                  (memory (export "memory") 1 16)
                  (data (i32.const 0) "X-Tenant: tenant-{k}")
                  (func (export "on_recv") (drop (call $a (i32.const 0) (i32.const 0) (i32.const {len})))))"#,
                len = format!("X-Tenant: tenant-{k}").len()
            );
            sb.load(&format!("tenant-{k}"), wat.as_bytes(), &Limits::default())
                .expect("load")
        })
        .collect();
    let loaded = start.elapsed();
    let after = rss_kib();
    let per = (after.saturating_sub(before) as f64 * 1024.0) / n as f64;
    println!("tenants: {n}");
    println!(
        "load time: {:.2?} ({:.2?} per tenant)",
        loaded,
        loaded / n as u32
    );
    println!(
        "resident memory: {before} KiB before, {after} KiB after: {per:.0} bytes per idle tenant"
    );
    println!(
        "median fork+call+drop, first tenant: {:?}",
        median_fork(&sb, &progs[0])
    );
    println!(
        "median fork+call+drop, last tenant:  {:?}",
        median_fork(&sb, &progs[n - 1])
    );
}
