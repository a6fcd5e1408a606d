//! vmod `wasm` in a running lacquerd: a tenant's program forges the
//! response, a tenant that loops gets its request a 503 while others are
//! served, and the CLI's `wasm.update` swaps a program under load with
//! no failed request and no VCL reload (a bad module is refused).
//! A cacheable forge goes through the cache like a backend response: the
//! first request makes the object through the VM backend, later ones hit.

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

/// A tenant whose `on_recv` adds a header and forges a cacheable JSON
/// response with a TTL (`/forged`), or names the function `make`, called
/// with an argument in the fetch (`/called`).
const CACHED: &str = r#"(module
  (import "lacquer" "forge" (func $forge (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "lacquer" "header_append" (func $header_append (param i32 i32 i32) (result i32)))
  (import "lacquer" "set_ttl" (func $set_ttl (param f64) (result i32)))
  (import "lacquer" "arg" (func $arg (param i32 i32) (result i32)))
  (memory (export "memory") 1 4)
  (data (i32.const 0) "application/json")
  (data (i32.const 32) "{\"cached\":true}")
  (data (i32.const 64) "X-Tenant-Ran: yes")
  (func (export "on_recv")
    (drop (call $header_append (i32.const 0) (i32.const 64) (i32.const 17)))
    (drop (call $set_ttl (f64.const 60)))
    (drop (call $forge (i32.const 1) (i32.const 200) (i32.const 0) (i32.const 16) (i32.const 32) (i32.const 15))))
  (func (export "make")
    (local $n i32)
    (local.set $n (call $arg (i32.const 128) (i32.const 64)))
    (drop (call $forge (i32.const 1) (i32.const 201) (i32.const 0) (i32.const 16) (i32.const 128) (local.get $n)))))"#;

const CACHED_VCL: &str = r#"
import wasm;
sub vcl_init {
    wasm.embed_tenants({"{ "cached.com": { "filename": "DIR/cached.wat" } }"});
}
sub vcl_recv {
    if (wasm.fork(req.http.Host)) {
        wasm.run();
        if (req.url == "/called") {
            set req.backend_hint = wasm.vm_backend("make", "made in the fetch");
            return (hash);
        }
        if (wasm.want_result() == "backend") {
            set req.backend_hint = wasm.vm_backend();
            return (hash);
        }
    }
    return (synth(404));
}
sub vcl_backend_error {
    if (wasm.run() == 1) {
        set beresp.http.X-Run-In = "backend_error";
        return (deliver);
    }
}
sub vcl_deliver {
    set resp.http.X-Hits = obj.hits;
    set resp.http.X-Ttl = obj.ttl;
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cacheable_forges_are_stored_and_hit() {
    let d = std::env::temp_dir().join(format!("lacquer-wasm-cached-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("cached.wat"), CACHED).unwrap();
    let be = "127.0.0.1:9".parse().unwrap();
    let vcl = vcl_with(be, &CACHED_VCL.replace("DIR", d.to_str().unwrap()));
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    let req = |url: &str| format!("GET {url} HTTP/1.1\r\nHost: cached.com\r\n\r\n").into_bytes();

    let r = raw(a, &req("/forged"), false).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), r#"{"cached":true}"#);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_eq!(r.header("X-Run-In"), Some("backend_error"));
    assert_eq!(r.header("X-Hits"), Some("0"));
    // The tenant's set_ttl(60) in on_recv is the object's TTL.
    let ttl: f64 = r.header("X-Ttl").unwrap().parse().unwrap();
    assert!(ttl > 50.0 && ttl <= 60.0, "ttl {ttl}");
    for hits in 1..=3 {
        let r = raw(a, &req("/forged"), false).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), r#"{"cached":true}"#);
        assert_eq!(r.header("X-Hits"), Some(hits.to_string().as_str()));
    }

    // vm_backend(func, arg): the function runs in the fetch, on the miss.
    let r = raw(a, &req("/called"), false).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.text(), "made in the fetch");
    assert_eq!(r.header("X-Hits"), Some("0"));
    let r = raw(a, &req("/called"), false).await;
    assert_eq!(r.header("X-Hits"), Some("1"));
    assert_eq!(r.text(), "made in the fetch");
    let _ = std::fs::remove_dir_all(&d);
}

/// A second `vm_backend()` of one task withdraws the response the first
/// registered: a fetch for the first URL finds nothing (503), while the
/// second's is delivered.
const RECLAIM_VCL: &str = r#"
import wasm;
sub vcl_init {
    wasm.embed_tenants({"{ "cached.com": { "filename": "DIR/cached.wat" } }"});
}
sub vcl_recv {
    if (wasm.fork(req.http.Host)) {
        wasm.run();
        set req.backend_hint = wasm.vm_backend();
        if (req.url == "/first") {
            set req.url = "/second";
            set req.backend_hint = wasm.vm_backend();
            set req.url = "/first";
        }
        return (pass);
    }
    return (synth(404));
}
sub vcl_backend_error {
    if (wasm.run() == 1) {
        return (deliver);
    }
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_vm_backend_call_withdraws_the_first_claim() {
    let d = std::env::temp_dir().join(format!("lacquer-wasm-reclaim-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("cached.wat"), CACHED).unwrap();
    let be = "127.0.0.1:9".parse().unwrap();
    let vcl = vcl_with(be, &RECLAIM_VCL.replace("DIR", d.to_str().unwrap()));
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    let req = |url: &str| format!("GET {url} HTTP/1.1\r\nHost: cached.com\r\n\r\n").into_bytes();
    // One claim: delivered.
    let r = raw(a, &req("/plain"), false).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), r#"{"cached":true}"#);
    // Two claims, the fetch for the first: withdrawn, so nothing to
    // deliver.
    let r = raw(a, &req("/first"), false).await;
    assert_eq!(r.status, 503, "{}", r.text());
    let _ = std::fs::remove_dir_all(&d);
}
