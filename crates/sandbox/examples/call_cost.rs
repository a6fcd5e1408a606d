//! Runs one sandbox operation N times in a loop, for instruction counts
//! under callgrind (which survive a loaded machine, unlike wall time):
//!
//! ```text
//! cargo build --release -p lacquer-sandbox --example call_cost
//! valgrind --tool=callgrind --toggle-collect='*call_cost*measured*' \
//!     target/release/examples/call_cost <op> [N] [tenant.wasm]
//! ```
//!
//! Ops: `inst` (instantiate + drop), `recv` (instantiate + `on_recv` +
//! drop), `empty` (call an empty export on one instance), `hook` (call
//! `on_recv` on one instance). Without a tenant file, the hello tenant
//! written in WebAssembly text below; the collected instructions divided
//! by N are the cost of one operation.

use lacquer_sandbox::{HOOKS, Limits, Message, PoolConfig, Sandbox, Which};

/// The bench's hello tenant in WAT.
const HELLO: &str = include_str!("../benches/hello.wat");

fn request() -> Message {
    Message {
        url: b"/hello".to_vec(),
        method: b"GET".to_vec(),
        proto: b"HTTP/1.1".to_vec(),
        headers: vec![(b"Host".to_vec(), b"customer1.com".to_vec())],
        ..Message::default()
    }
}

#[inline(never)]
fn measured(n: u64, f: &mut dyn FnMut()) {
    for _ in 0..n {
        f();
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_else(|| "recv".into());
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let wasm = match args.next() {
        Some(f) => std::fs::read(&f).unwrap_or_else(|e| panic!("reading {f}: {e}")),
        None => HELLO.as_bytes().to_vec(),
    };
    // Few slots: valgrind cannot reserve the address space of many.
    let sb = Sandbox::new(PoolConfig {
        slots: 2,
        max_memory: 16 << 20,
        ..PoolConfig::default()
    })
    .expect("sandbox");
    let p = sb.load("t", &wasm, &Limits::default()).expect("load");
    let on_recv = HOOKS.iter().position(|h| *h == "on_recv").expect("on_recv");
    let req = request();
    // Warm the slot (first use maps the image).
    drop(sb.instantiate(&p).expect("instantiate"));
    let mut one = sb.instantiate(&p).expect("instantiate");
    eprintln!(
        "linear memory {} KiB, image {} bytes",
        one.memory_size() >> 10,
        p.image_bytes
    );
    one.task_mut().set_msg(Which::Req, Some(req.clone()));
    match op.as_str() {
        "inst" => measured(n, &mut || drop(sb.instantiate(&p).expect("instantiate"))),
        "recv" => measured(n, &mut || {
            let mut i = sb.instantiate(&p).expect("instantiate");
            i.task_mut().set_msg(Which::Req, Some(req.clone()));
            i.run_hook(on_recv).expect("on_recv");
        }),
        "empty" => measured(n, &mut || one.call("empty").expect("empty")),
        "hook" => measured(n, &mut || {
            one.run_hook(on_recv).expect("on_recv");
        }),
        other => panic!("unknown op {other}: inst, recv, empty or hook"),
    }
}
