//! What a request costs in the sandbox: instantiate, call a hook, drop,
//! as requests of one tenant on one worker thread do (after the first,
//! each gets the instance the previous one left, reset to the snapshot:
//! `reuse`), and what one host call
//! costs (a header read, timed over a loop of 1000 inside the guest).
//! The hook is the hello tenant twice: written by hand in WebAssembly
//! text, and the example tenant built from Rust with the guest SDK
//! (`examples/tenants/hello`, what `bench/run --only wasm` runs; its
//! allocator and stack touch more pages).
//!
//! `cargo bench -p lacquer-sandbox --bench sandbox`

#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use lacquer_sandbox::{HOOKS, Limits, Message, PoolConfig, Sandbox, SlotReset, Which};

/// The hello tenant in WAT (shared with `examples/call_cost.rs`).
const HELLO: &str = include_str!("hello.wat");

fn request() -> Message {
    Message {
        url: b"/hello".to_vec(),
        method: b"GET".to_vec(),
        proto: b"HTTP/1.1".to_vec(),
        headers: vec![
            (b"Host".to_vec(), b"customer1.com".to_vec()),
            (b"User-Agent".to_vec(), b"wrk".to_vec()),
            (b"Accept".to_vec(), b"*/*".to_vec()),
        ],
        ..Message::default()
    }
}

fn bench(c: &mut Criterion) {
    eprintln!("slot reset: {:?}", SlotReset::for_host());
    let sb = Sandbox::new(PoolConfig {
        slots: 16,
        max_memory: 16 << 20,
        ..PoolConfig::default()
    })
    .unwrap();
    let p = sb
        .load("hello", HELLO.as_bytes(), &Limits::default())
        .unwrap();
    let on_recv = HOOKS.iter().position(|h| *h == "on_recv").unwrap();
    let req = request();

    c.bench_function("instantiate+drop", |b| {
        b.iter(|| drop(sb.instantiate(&p).unwrap()))
    });
    c.bench_function("instantiate+on_recv(hello)+drop", |b| {
        b.iter(|| {
            let mut i = sb.instantiate(&p).unwrap();
            i.task_mut().set_msg(Which::Req, Some(req.clone()));
            i.run_hook(on_recv).unwrap();
            drop(i)
        })
    });
    let rust = sb
        .load("rust-hello", &support::tenant("hello"), &Limits::default())
        .unwrap();
    c.bench_function("instantiate+on_recv(Rust hello tenant)+drop", |b| {
        b.iter(|| {
            let mut i = sb.instantiate(&rust).unwrap();
            i.task_mut().set_msg(Which::Req, Some(req.clone()));
            i.run_hook(on_recv).unwrap();
            drop(i)
        })
    });
    let mut i = sb.instantiate(&p).unwrap();
    i.task_mut().set_msg(Which::Req, Some(req.clone()));
    c.bench_function("call empty export", |b| b.iter(|| i.call("empty").unwrap()));
    c.bench_function("1000 header_get host calls", |b| {
        b.iter(|| i.call("read1000").unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
