//! vmod `wasm` in a running lacquerd: a tenant's program forges the
//! response, a tenant that loops gets its request a 503 while others are
//! served, and the CLI's `wasm.update` swaps a program under load with
//! no failed request and no VCL reload (a bad module is refused).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A tenant answering with JSON naming its version `v`.
fn hello(v: u32) -> String {
    let body = format!("{{\"message\":\"Hello from WebAssembly!\",\"v\":{v}}}");
    format!(
        r#"(module
  (import "lacquer" "forge" (func $forge (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1 4)
  (data (i32.const 0) "application/json")
  (data (i32.const 32) "{}")
  (func (export "on_recv")
    (drop (call $forge (i32.const 0) (i32.const 200) (i32.const 0) (i32.const 16) (i32.const 32) (i32.const {})))))"#,
        body.replace('"', "\\\""),
        body.len()
    )
}

const SPIN: &str =
    r#"(module (memory (export "memory") 1) (func (export "on_recv") (loop $l (br $l))))"#;

const VCL: &str = r#"
import wasm;
sub vcl_init {
    wasm.load_tenants("DIR/tenants.json");
}
sub vcl_recv {
    if (wasm.fork(req.http.Host)) {
        wasm.run();
        if (wasm.want_result() == "synth") {
            return (synth(wasm.want_status()));
        }
    }
    return (synth(404));
}
sub vcl_synth {
    if (wasm.active()) {
        wasm.run();
        return (deliver);
    }
}
"#;

fn setup() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("lacquer-wasm-srv-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("hello1.wat"), hello(1)).unwrap();
    std::fs::write(d.join("hello2.wat"), hello(2)).unwrap();
    std::fs::write(d.join("spin.wat"), SPIN).unwrap();
    std::fs::write(d.join("bad.wat"), "(module (func").unwrap();
    std::fs::write(
        d.join("tenants.json"),
        r#"{ "hello.com": { "filename": "hello1.wat" },
             "spin.com": { "filename": "spin.wat", "max_instructions": 200000 } }"#,
    )
    .unwrap();
    d
}

fn get(host: &str) -> Vec<u8> {
    format!("GET /x HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
}

fn cli(l: &lacquer_server::mgt::daemon::Running, words: &[&str]) -> (u16, String) {
    let w: Vec<String> = words.iter().map(|s| s.to_string()).collect();
    let r = lacquer_server::mgt::commands::dispatch(&l.shared, &w);
    (r.status, r.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_forge_fail_alone_and_update_under_load() {
    let d = setup();
    let be = "127.0.0.1:9".parse().unwrap();
    let l = Arc::new(lacquer(&vcl_with(be, &VCL.replace("DIR", d.to_str().unwrap())), &[]).await);
    let a = l.first_addr().unwrap();

    let r = raw(a, &get("hello.com"), false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_eq!(r.text(), r#"{"message":"Hello from WebAssembly!","v":1}"#);

    // The looping tenant's request fails alone.
    let r = raw(a, &get("spin.com"), false).await;
    assert_eq!(r.status, 503);
    assert_eq!(raw(a, &get("hello.com"), false).await.status, 200);
    assert_eq!(raw(a, &get("other.com"), false).await.status, 404);

    // Load on keep-alive connections while the program changes.
    let stop = Arc::new(AtomicBool::new(false));
    let v2_seen = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..2 {
        let (stop, v2_seen) = (stop.clone(), v2_seen.clone());
        clients.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(a).await.unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 20_000 {
                s.write_all(&get("hello.com")).await.unwrap();
                let r = read_resp(&mut s, false).await;
                assert_eq!(r.status, 200, "request {n} failed: {}", r.text());
                if r.text().contains("\"v\":2") {
                    v2_seen.fetch_add(1, Ordering::Relaxed);
                } else {
                    assert!(r.text().contains("\"v\":1"), "{}", r.text());
                }
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (st, body) = cli(
        &l,
        &[
            "wasm.update",
            "hello.com",
            d.join("bad.wat").to_str().unwrap(),
        ],
    );
    assert_ne!(st, 200, "a bad module is refused: {body}");
    assert!(body.contains("hello.com"), "{body}");
    let (st, body) = cli(
        &l,
        &[
            "wasm.update",
            "hello.com",
            d.join("hello2.wat").to_str().unwrap(),
        ],
    );
    assert_eq!(st, 200, "{body}");
    // Requests after the update get the new program.
    let r = raw(a, &get("hello.com"), false).await;
    assert!(r.text().contains("\"v\":2"), "{}", r.text());
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for c in clients {
        total += c.await.expect("a client saw a failure");
    }
    assert!(total > 10, "{total} requests");
    assert!(v2_seen.load(Ordering::Relaxed) > 0);
    let (st, _) = cli(
        &l,
        &[
            "wasm.update",
            "nobody.com",
            d.join("hello2.wat").to_str().unwrap(),
        ],
    );
    assert_ne!(st, 200);
}
