//! The sandbox's guarantees, on tenants written in WebAssembly text:
//! snapshots after `main`, the host API, isolation between requests and
//! tenants (including reuse of a pooled slot), budgets, memory limits,
//! traps, and live update.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lacquer_sandbox::{
    CallError, Decision, HOOKS, Limits, Message, PoolConfig, Sandbox, Tenant, TenantConfig, Which,
};

/// Imports of the host API every test module may use, plus a memory.
const PRELUDE: &str = r#"
  (import "lacquer" "header_get" (func $header_get (param i32 i32 i32 i32 i32) (result i32)))
  (import "lacquer" "header_set" (func $header_set (param i32 i32 i32 i32 i32) (result i32)))
  (import "lacquer" "header_append" (func $header_append (param i32 i32 i32) (result i32)))
  (import "lacquer" "header_unset" (func $header_unset (param i32 i32 i32) (result i32)))
  (import "lacquer" "field_get" (func $field_get (param i32 i32 i32 i32) (result i32)))
  (import "lacquer" "field_set" (func $field_set (param i32 i32 i32 i32) (result i32)))
  (import "lacquer" "status_get" (func $status_get (param i32) (result i32)))
  (import "lacquer" "status_set" (func $status_set (param i32 i32) (result i32)))
  (import "lacquer" "decide" (func $decide (param i32 i32 i32 i32) (result i32)))
  (import "lacquer" "forge" (func $forge (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "lacquer" "backend" (func $backend (param i32 i32) (result i32)))
  (import "lacquer" "hash_data" (func $hash_data (param i32 i32)))
  (import "lacquer" "set_ttl" (func $set_ttl (param f64) (result i32)))
  (import "lacquer" "set_uncacheable" (func $set_uncacheable (param i32)))
  (import "lacquer" "ban" (func $ban (param i32 i32)))
  (import "lacquer" "log" (func $log (param i32 i32)))
  (import "lacquer" "regex_compile" (func $regex_compile (param i32 i32) (result i32)))
  (import "lacquer" "regex_match" (func $regex_match (param i32 i32 i32) (result i32)))
  (import "lacquer" "regex_subst" (func $regex_subst (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "lacquer" "sha256" (func $sha256 (param i32 i32 i32)))
  (import "lacquer" "base64_encode" (func $base64_encode (param i32 i32 i32 i32) (result i32)))
  (import "lacquer" "base64_decode" (func $base64_decode (param i32 i32 i32 i32) (result i32)))
  (import "lacquer" "arg" (func $arg (param i32 i32) (result i32)))
  (import "lacquer" "result" (func $result (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1 100)
"#;

fn module(body: &str) -> String {
    format!("(module {PRELUDE} {body})")
}

fn sandbox(slots: u32) -> Sandbox {
    Sandbox::new(PoolConfig {
        slots,
        max_memory: 8 << 20,
        ..PoolConfig::default()
    })
    .unwrap()
}

fn req(url: &str, headers: &[(&str, &str)]) -> Message {
    Message {
        url: url.into(),
        method: b"GET".to_vec(),
        proto: b"HTTP/1.1".to_vec(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
        ..Message::default()
    }
}

fn hook(name: &str) -> usize {
    HOOKS.iter().position(|h| *h == name).unwrap()
}

/// The README's hello tenant, by hand: a header with the URL, then a
/// forged JSON response.
const HELLO: &str = r#"
  (data (i32.const 0) "X-Hello: url=")
  (data (i32.const 64) "application/json")
  (data (i32.const 96) "{\"message\":\"Hello from WebAssembly!\"}")
  (func (export "on_recv")
    (local $n i32)
    ;; URL after the prefix at 13
    (local.set $n (call $field_get (i32.const 0) (i32.const 0) (i32.const 13) (i32.const 1000)))
    (drop (call $header_append (i32.const 0) (i32.const 0) (i32.add (i32.const 13) (local.get $n))))
    (drop (call $forge (i32.const 1) (i32.const 200) (i32.const 64) (i32.const 16) (i32.const 96) (i32.const 37))))
"#;

#[test]
fn hello_appends_a_header_and_forges_json() {
    let sb = sandbox(4);
    let p = sb
        .load("hello", module(HELLO).as_bytes(), &Limits::default())
        .unwrap();
    let mut i = sb.instantiate(&p).unwrap();
    i.task_mut().set_msg(Which::Req, Some(req("/x?y", &[])));
    assert!(i.run_hook(hook("on_recv")).unwrap());
    let m = i.task().msg(Which::Req).unwrap();
    assert_eq!(m.header(b"x-hello"), Some(&b"url=/x?y"[..]));
    assert!(m.headers_changed);
    match &i.task().decision {
        Some(Decision::Forge(f)) => {
            assert_eq!(f.status, 200);
            assert!(f.cacheable);
            assert_eq!(f.content_type, b"application/json");
            assert_eq!(f.body, br#"{"message":"Hello from WebAssembly!"}"#);
        }
        d => panic!("decision {d:?}"),
    }
    // A hook the tenant does not export is not an error for run().
    assert!(!i.run_hook(hook("on_deliver")).unwrap());
    assert!(matches!(i.call("nope"), Err(CallError::NoHook(_))));
    assert!(matches!(i.call("main"), Err(CallError::NoHook(_))));
}

/// Functions are resolved at load and called without wasmtime's per-call
/// type check: one of another type than `() -> ()` must still be
/// refused, whether a hook or called by name, and calling the same or
/// another function again on one instance must reach the right one.
#[test]
fn calls_reach_the_named_function_and_refuse_other_types() {
    let sb = sandbox(2);
    let p = sb
        .load(
            "types",
            module(
                r#"
  (global $g (mut i32) (i32.const 0))
  (func (export "on_recv") (param i32))
  (func (export "on_deliver") (result i32) (i32.const 1))
  (func (export "one") (global.set $g (i32.add (global.get $g) (i32.const 1))))
  (func (export "ten") (global.set $g (i32.add (global.get $g) (i32.const 10))))
  (func (export "show")
    (i32.store (i32.const 0) (global.get $g))
    (drop (call $result (i32.const 0) (i32.const 0) (i32.const 4))))
  (export "g" (global $g))
"#,
            )
            .as_bytes(),
            &Limits::default(),
        )
        .unwrap();
    let mut i = sb.instantiate(&p).unwrap();
    for h in ["on_recv", "on_deliver"] {
        match i.run_hook(hook(h)) {
            Err(CallError::NoHook(m)) => assert!(m.contains("without arguments"), "{m}"),
            other => panic!("{h}: {other:?}"),
        }
    }
    assert!(matches!(i.call("on_recv"), Err(CallError::NoHook(_))));
    assert!(matches!(i.call("g"), Err(CallError::NoHook(_))));
    for f in ["one", "one", "ten", "one", "ten", "ten"] {
        i.call(f).unwrap();
    }
    i.call("show").unwrap();
    i.call("show").unwrap();
    assert_eq!(i.task().results[0], 33i32.to_le_bytes());
}

/// `main` changes memory and a mutable global; every request starts
/// from that state, whatever the previous request did.
const COUNTER: &str = r#"
  (global $g (mut i32) (i32.const 1))
  (data (i32.const 100) "\01")
  (func (export "main")
    (global.set $g (i32.const 42))
    (i32.store8 (i32.const 100) (i32.const 7)))
  (func (export "bump")
    (global.set $g (i32.add (global.get $g) (i32.const 1)))
    (i32.store8 (i32.const 100) (i32.add (i32.load8_u (i32.const 100)) (i32.const 1)))
    (drop (call $result (i32.const 0) (i32.const 100) (i32.const 1))))
  (func (export "global") (result i32) (global.get $g))
"#;

#[test]
fn every_request_starts_from_the_snapshot_after_main() {
    let sb = sandbox(2);
    let p = sb
        .load("counter", module(COUNTER).as_bytes(), &Limits::default())
        .unwrap();
    for _ in 0..5 {
        let mut i = sb.instantiate(&p).unwrap();
        assert_eq!(i.peek(100, 1), Some(vec![7]), "memory after main");
        i.call("bump").unwrap();
        i.call("bump").unwrap();
        assert_eq!(i.task().results[0], vec![9]);
    }
}

/// Writes the request's URL into memory, grows memory by a page and
/// writes it there too, so a later request could find it if a slot
/// were reused without being wiped.
const SCRIBBLER: &str = r#"
  (func (export "on_recv")
    (local $n i32) (local $page i32)
    (local.set $n (call $field_get (i32.const 0) (i32.const 0) (i32.const 4096) (i32.const 512)))
    (local.set $page (memory.grow (i32.const 1)))
    (drop (call $field_get (i32.const 0) (i32.const 0)
      (i32.mul (local.get $page) (i32.const 65536)) (i32.const 512))))
"#;

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn no_byte_of_a_previous_request_or_tenant_survives_in_a_reused_slot() {
    // One slot: every instance reuses the same memory slot (the class of
    // bug of CVE-2022-39393 is a slot handed on without its old bytes
    // wiped, or with a grown size kept).
    let sb = sandbox(1);
    let a = sb
        .load("a", module(SCRIBBLER).as_bytes(), &Limits::default())
        .unwrap();
    let b = sb
        .load("b", module(HELLO).as_bytes(), &Limits::default())
        .unwrap();
    let secret = "/secret-0123456789-of-tenant-a";
    let fresh = sb.instantiate(&a).unwrap().memory_size();
    for round in 0..3 {
        {
            let mut i = sb.instantiate(&a).unwrap();
            i.task_mut().set_msg(Which::Req, Some(req(secret, &[])));
            i.run_hook(hook("on_recv")).unwrap();
            let all = i.peek(0, i.memory_size()).unwrap();
            assert!(contains(&all, secret.as_bytes()), "the secret was written");
            assert!(i.memory_size() > fresh);
        }
        // The same tenant's next request.
        let i = sb.instantiate(&a).unwrap();
        assert_eq!(i.memory_size(), fresh, "round {round}: grown size kept");
        let all = i.peek(0, i.memory_size()).unwrap();
        assert!(
            !contains(&all, secret.as_bytes()),
            "round {round}: previous request visible"
        );
        assert!(
            all.iter().all(|&b| b == 0),
            "round {round}: memory not wiped"
        );
        drop(i);
        // Another tenant in the same slot.
        let j = sb.instantiate(&b).unwrap();
        let all = j.peek(0, j.memory_size()).unwrap();
        assert!(
            !contains(&all, secret.as_bytes()),
            "round {round}: other tenant visible"
        );
        assert!(contains(&all, b"X-Hello: url="), "b's own image is there");
    }
    // Both slots taken: the pool says so instead of sharing one.
    let _held = sb.instantiate(&a).unwrap();
    let e = sb.instantiate(&b).unwrap_err();
    assert!(e.contains("no sandbox"), "{e}");
}

/// A tenant with 20 pages of memory and an image far from the start:
/// `few` writes the URL over the image and into two zero pages, `many`
/// over the image and into every 4 KiB page of memory (more than a slot keeps resident, so
/// part of it is reset in place and the rest returned to the kernel).
const DIRTY: &str = r#"(module
  (import "lacquer" "field_get" (func $field_get (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 20 20)
  (data (i32.const 1100000) "IMAGE-BYTES-OF-THE-SNAPSHOT")
  (func $url (param $at i32) (drop (call $field_get (i32.const 0) (i32.const 0) (local.get $at) (i32.const 64))))
  (func (export "few")
    (call $url (i32.const 1100000))
    (call $url (i32.const 100))
    (call $url (i32.const 300000)))
  (func (export "many")
    (local $at i32)
    (call $url (i32.const 1100000))
    (loop $l
      (call $url (local.get $at))
      (local.set $at (i32.add (local.get $at) (i32.const 4096)))
      (br_if $l (i32.lt_u (local.get $at) (i32.const 1310720)))))
)"#;

#[test]
fn a_reused_slot_is_back_to_the_snapshot_however_many_pages_were_written() {
    let sb = sandbox(1);
    let p = sb
        .load("dirty", DIRTY.as_bytes(), &Limits::default())
        .unwrap();
    let pristine = {
        let i = sb.instantiate(&p).unwrap();
        i.peek(0, i.memory_size()).unwrap()
    };
    assert!(contains(&pristine, b"IMAGE-BYTES-OF-THE-SNAPSHOT"));
    let secret = "/secret-of-the-previous-request";
    for (round, hook) in ["few", "many", "few", "many"].into_iter().enumerate() {
        {
            let mut i = sb.instantiate(&p).unwrap();
            i.task_mut().set_msg(Which::Req, Some(req(secret, &[])));
            i.call(hook).unwrap();
            let all = i.peek(0, i.memory_size()).unwrap();
            assert!(!contains(&all, b"IMAGE-BYTES"), "{hook}: image overwritten");
            assert!(contains(&all, secret.as_bytes()));
        }
        let i = sb.instantiate(&p).unwrap();
        let all = i.peek(0, i.memory_size()).unwrap();
        assert!(
            !contains(&all, secret.as_bytes()),
            "round {round} ({hook}): previous request visible"
        );
        assert!(
            all == pristine,
            "round {round} ({hook}): memory differs from the snapshot"
        );
    }
}

const SPIN: &str = r#"
  (func (export "on_recv") (loop $l (br $l)))
  (func (export "ok") (drop (call $result (i32.const 0) (i32.const 0) (i32.const 0))))
"#;

#[test]
fn a_loop_is_stopped_by_fuel_or_time_and_the_program_still_serves() {
    let sb = sandbox(4);
    let fuel = Limits {
        max_instructions: Some(1_000_000),
        ..Limits::default()
    };
    let p = sb.load("spin", module(SPIN).as_bytes(), &fuel).unwrap();
    let mut i = sb.instantiate(&p).unwrap();
    match i.run_hook(hook("on_recv")) {
        Err(CallError::Budget(m)) => assert!(m.contains("max_instructions"), "{m}"),
        r => panic!("{r:?}"),
    }
    // The same instance and new ones go on working.
    i.call("ok").unwrap();
    sb.instantiate(&p).unwrap().call("ok").unwrap();

    let time = Limits {
        max_instructions: None,
        max_time: Some(Duration::from_millis(30)),
        ..Limits::default()
    };
    let p = sb
        .load("spin-time", module(SPIN).as_bytes(), &time)
        .unwrap();
    let mut i = sb.instantiate(&p).unwrap();
    let t = Instant::now();
    match i.run_hook(hook("on_recv")) {
        Err(CallError::Budget(m)) => assert!(m.contains("max_time"), "{m}"),
        r => panic!("{r:?}"),
    }
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(25) && took < Duration::from_secs(30),
        "{took:?}"
    );
}

#[test]
fn a_loop_in_main_rejects_the_module() {
    let sb = sandbox(2);
    let l = Limits {
        max_boot_instructions: 100_000,
        ..Limits::default()
    };
    let e = sb
        .load(
            "boot",
            module(r#"(func (export "main") (loop $l (br $l)))"#).as_bytes(),
            &l,
        )
        .unwrap_err();
    assert!(e.contains("main failed") && e.contains("budget"), "{e}");
}

const GREEDY: &str = r#"
  (func $grow (export "grow") (result i32) (memory.grow (i32.const 16)))
  (func (export "on_recv") (loop $l (drop (call $grow)) (br $l)))
  (func (export "oob") (drop (i32.load (i32.const 0xfffffff0))))
  (func (export "bad_ptr") (drop (call $header_get (i32.const 0) (i32.const 0xfffffff0) (i32.const 100) (i32.const 0) (i32.const 0))))
  (func (export "unreachable") unreachable)
"#;

#[test]
fn memory_beyond_max_memory_traps_as_do_out_of_bounds_accesses() {
    let sb = sandbox(4);
    let l = Limits {
        max_memory: 2 << 20,
        ..Limits::default()
    };
    let p = sb.load("greedy", module(GREEDY).as_bytes(), &l).unwrap();
    let mut i = sb.instantiate(&p).unwrap();
    match i.run_hook(hook("on_recv")) {
        Err(CallError::Trap(m)) => assert!(m.contains("on_recv"), "{m}"),
        r => panic!("{r:?}"),
    }
    assert!(i.memory_size() <= 2 << 20, "{}", i.memory_size());
    for f in ["oob", "bad_ptr", "unreachable"] {
        let mut i = sb.instantiate(&p).unwrap();
        match i.call(f) {
            Err(CallError::Trap(m)) => assert!(m.contains(f), "{m}"),
            r => panic!("{f}: {r:?}"),
        }
    }
}

#[test]
fn bad_modules_are_rejected_with_the_reason() {
    let sb = sandbox(2);
    let l = Limits::default();
    assert!(
        sb.load("x", b"\0asm\x01\0\0\0garbage", &l)
            .unwrap_err()
            .contains("tenant 'x'")
    );
    assert!(
        sb.load("x", b"(module (func", &l)
            .unwrap_err()
            .contains("not a WebAssembly module")
    );
    let e = sb
        .load(
            "x",
            b"(module (import \"env\" \"f\" (func)) (func (export \"on_recv\")))",
            &l,
        )
        .unwrap_err();
    assert!(e.contains("instantiation failed"), "{e}");
    let e = sb
        .load(
            "x",
            module(r#"(func (export "main") unreachable)"#).as_bytes(),
            &l,
        )
        .unwrap_err();
    assert!(e.contains("main failed"), "{e}");
}

#[test]
fn live_update_swaps_for_new_requests_and_keeps_the_old_on_failure() {
    let sb = sandbox(8);
    let v = |n: u8| {
        module(&format!(
            r#"(data (i32.const 0) "{}") (func (export "on_recv") (drop (call $result (i32.const 0) (i32.const 0) (i32.const 1))))"#,
            n as char
        ))
    };
    let cfg = TenantConfig {
        name: "t".into(),
        filename: "t.wat".into(),
        group: None,
        limits: Limits::default(),
    };
    let t = Tenant::new(
        cfg,
        sb.load("t", v(b'1').as_bytes(), &Limits::default())
            .unwrap(),
    );
    let mut in_flight = sb.instantiate(&t.program()).unwrap();
    t.update(&sb, v(b'2').as_bytes()).unwrap();
    let mut new = sb.instantiate(&t.program()).unwrap();
    in_flight.run_hook(hook("on_recv")).unwrap();
    new.run_hook(hook("on_recv")).unwrap();
    assert_eq!(
        in_flight.task().results[0],
        b"1",
        "in flight finishes on the old program"
    );
    assert_eq!(new.task().results[0], b"2");
    let e = t.update(&sb, b"(module (func").unwrap_err();
    assert!(e.contains("tenant 't'"), "{e}");
    let mut after = sb.instantiate(&t.program()).unwrap();
    after.run_hook(hook("on_recv")).unwrap();
    assert_eq!(
        after.task().results[0],
        b"2",
        "a bad module leaves the old one"
    );
}

const TOOLS: &str = r#"
  (global $re (mut i32) (i32.const -1))
  (data (i32.const 0) "^/api/(v[0-9]+)/")
  (data (i32.const 32) "/api/v2/users")
  (data (i32.const 64) "/$1/")
  (data (i32.const 80) "abc")
  (data (i32.const 96) "api")
  (data (i32.const 112) "obj.http.x ~ y")
  (data (i32.const 128) "hello log")
  (func (export "main")
    (global.set $re (call $regex_compile (i32.const 0) (i32.const 16))))
  (func (export "tools")
    (local $n i32)
    ;; result 0: regex match (1)
    (i32.store8 (i32.const 1000) (i32.add (i32.const 48) (call $regex_match (global.get $re) (i32.const 32) (i32.const 13))))
    (drop (call $result (i32.const 0) (i32.const 1000) (i32.const 1)))
    ;; result 1: substitution
    (local.set $n (call $regex_subst (global.get $re) (i32.const 32) (i32.const 13) (i32.const 64) (i32.const 4) (i32.const 0) (i32.const 1100) (i32.const 100)))
    (drop (call $result (i32.const 1) (i32.const 1100) (local.get $n)))
    ;; result 2: sha256 of "abc"
    (call $sha256 (i32.const 80) (i32.const 3) (i32.const 1200))
    (drop (call $result (i32.const 2) (i32.const 1200) (i32.const 32)))
    ;; result 3: base64 of "abc", result 4: decoded back
    (local.set $n (call $base64_encode (i32.const 80) (i32.const 3) (i32.const 1300) (i32.const 100)))
    (drop (call $result (i32.const 3) (i32.const 1300) (local.get $n)))
    (local.set $n (call $base64_decode (i32.const 1300) (local.get $n) (i32.const 1400) (i32.const 100)))
    (drop (call $result (i32.const 4) (i32.const 1400) (local.get $n)))
    ;; result 5: the call's argument
    (local.set $n (call $arg (i32.const 1500) (i32.const 100)))
    (drop (call $result (i32.const 5) (i32.const 1500) (local.get $n)))
    ;; effects
    (drop (call $backend (i32.const 96) (i32.const 3)))
    (call $hash_data (i32.const 80) (i32.const 3))
    (drop (call $set_ttl (f64.const 120)))
    (call $set_uncacheable (i32.const 1))
    (call $ban (i32.const 112) (i32.const 14))
    (call $log (i32.const 128) (i32.const 9))
    (drop (call $decide (i32.const 2) (i32.const 0) (i32.const 0) (i32.const 0))))
  (func (export "match_only")
    (i32.store8 (i32.const 1000) (i32.add (i32.const 48) (call $regex_match (global.get $re) (i32.const 32) (i32.const 13))))
    (drop (call $result (i32.const 0) (i32.const 1000) (i32.const 1))))
  (func (export "late_regex") (drop (call $regex_compile (i32.const 0) (i32.const 16))))
"#;

#[test]
fn host_calls_regex_digest_base64_arg_and_effects() {
    let sb = sandbox(4);
    let l = Limits {
        max_backends: 1,
        ..Limits::default()
    };
    let p = sb.load("tools", module(TOOLS).as_bytes(), &l).unwrap();
    let mut i = sb.instantiate(&p).unwrap();
    i.task_mut().arg = b"the-arg".to_vec();
    i.call("tools").unwrap();
    let t = i.task();
    assert_eq!(t.results[0], b"1");
    assert_eq!(t.results[1], b"/v2/users");
    assert_eq!(
        t.results[2],
        [
            0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae,
            0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61,
            0xf2, 0x00, 0x15, 0xad
        ]
    );
    assert_eq!(t.results[3], b"YWJj");
    assert_eq!(t.results[4], b"abc");
    assert_eq!(t.results[5], b"the-arg");
    assert_eq!(t.effects.backend.as_deref(), Some("api"));
    assert_eq!(t.effects.hash_data, vec![b"abc".to_vec()]);
    assert_eq!(t.effects.ttl, Some(120.0));
    assert_eq!(t.effects.uncacheable, Some(true));
    assert_eq!(t.effects.bans, vec![b"obj.http.x ~ y".to_vec()]);
    assert_eq!(t.effects.logs, vec![b"hello log".to_vec()]);
    assert_eq!(t.decision, Some(Decision::Pass));
    // Patterns are compiled at load only.
    match i.call("late_regex") {
        Err(CallError::Trap(m)) => assert!(m.contains("outside main"), "{m}"),
        r => panic!("{r:?}"),
    }
    // max_regex 0: compile refused (-1 id then fails the match: -1).
    let none = Limits {
        max_regex: 0,
        ..Limits::default()
    };
    let p0 = sb.load("tools0", module(TOOLS).as_bytes(), &none).unwrap();
    let mut i = sb.instantiate(&p0).unwrap();
    i.call("match_only").unwrap();
    assert_eq!(
        i.task().results[0],
        b"/",
        "regex_match of a refused pattern is -1"
    );
}

const HEADERS: &str = r#"
  (data (i32.const 0) "Cookie")
  (data (i32.const 16) "X-New")
  (data (i32.const 32) "v1")
  (data (i32.const 48) "bad\0d\0a")
  (data (i32.const 64) "/rewritten")
  (data (i32.const 96) "Bad Name")
  (func (export "edit")
    (local $n i32)
    ;; Cookie's value into result 0 (absent: -1 → nothing)
    (local.set $n (call $header_get (i32.const 0) (i32.const 0) (i32.const 6) (i32.const 1000) (i32.const 4)))
    (i32.store (i32.const 2000) (local.get $n))
    (drop (call $result (i32.const 0) (i32.const 2000) (i32.const 4)))
    (drop (call $result (i32.const 1) (i32.const 1000) (i32.const 4)))
    (drop (call $header_unset (i32.const 0) (i32.const 0) (i32.const 6)))
    (i32.store (i32.const 2004) (call $header_set (i32.const 0) (i32.const 16) (i32.const 5) (i32.const 32) (i32.const 2)))
    (i32.store (i32.const 2008) (call $header_set (i32.const 0) (i32.const 16) (i32.const 5) (i32.const 48) (i32.const 5)))
    (i32.store (i32.const 2012) (call $header_set (i32.const 0) (i32.const 96) (i32.const 8) (i32.const 32) (i32.const 2)))
    (i32.store (i32.const 2016) (call $field_set (i32.const 0) (i32.const 0) (i32.const 64) (i32.const 10)))
    (i32.store (i32.const 2020) (call $status_set (i32.const 3) (i32.const 404)))
    (i32.store (i32.const 2024) (call $status_get (i32.const 3)))
    (drop (call $result (i32.const 2) (i32.const 2004) (i32.const 24))))
"#;

fn ints(b: &[u8]) -> Vec<i32> {
    b.chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn header_and_field_calls_check_their_input() {
    let sb = sandbox(4);
    let p = sb
        .load("h", module(HEADERS).as_bytes(), &Limits::default())
        .unwrap();
    let mut i = sb.instantiate(&p).unwrap();
    i.task_mut()
        .set_msg(Which::Req, Some(req("/orig", &[("cookie", "a=123456")])));
    i.call("edit").unwrap();
    let t = i.task();
    // Full length returned, only what fits copied.
    assert_eq!(ints(&t.results[0]), vec![8]);
    assert_eq!(t.results[1], b"a=12");
    // set ok, CR/LF refused (-2), bad name refused (-2), url set, no
    // resp in this call (-1 twice).
    assert_eq!(ints(&t.results[2]), vec![0, -2, -2, 0, -1, -1]);
    let m = t.msg(Which::Req).unwrap();
    assert_eq!(m.header(b"cookie"), None);
    assert_eq!(m.header(b"x-new"), Some(&b"v1"[..]));
    assert_eq!(m.url, b"/rewritten");
    assert!(m.fields_changed && m.headers_changed);
}

#[test]
fn many_tenants_each_start_from_their_own_image() {
    let sb = sandbox(4);
    let n = 50;
    let progs: Vec<Arc<lacquer_sandbox::Program>> = (0..n)
        .map(|k| {
            let m = module(&format!(
                r#"(data (i32.const 0) "tenant-{k:03}") (func (export "on_recv") (drop (call $result (i32.const 0) (i32.const 0) (i32.const 10))))"#
            ));
            sb.load(&format!("t{k}"), m.as_bytes(), &Limits::default()).unwrap()
        })
        .collect();
    // Each program is its own: forking any of them (no scan over the
    // others) gives that tenant's image. Speed is measured by the bench
    // and the idle_tenants example, not here.
    for (k, p) in progs.iter().enumerate() {
        let mut i = sb.instantiate(p).unwrap();
        i.run_hook(hook("on_recv")).unwrap();
        assert_eq!(i.task().results[0], format!("tenant-{k:03}").into_bytes());
    }
    assert_eq!(progs.len(), n);
}

#[test]
fn live_update_under_load_fails_no_request() {
    let sb = Arc::new(sandbox(16));
    let v = |n: u8| {
        module(&format!(
            r#"(data (i32.const 0) "{}") (func (export "on_recv") (drop (call $result (i32.const 0) (i32.const 0) (i32.const 1))))"#,
            n as char
        ))
    };
    let cfg = TenantConfig {
        name: "t".into(),
        filename: "t.wat".into(),
        group: None,
        limits: Limits::default(),
    };
    let t = Arc::new(Tenant::new(
        cfg,
        sb.load("t", v(b'1').as_bytes(), &Limits::default())
            .unwrap(),
    ));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (sb, t, stop) = (sb.clone(), t.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut served = 0u32;
                let mut seen = std::collections::HashSet::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || served < 50 {
                    let mut i = sb.instantiate(&t.program()).expect("instantiate");
                    i.run_hook(hook("on_recv")).expect("request failed");
                    seen.insert(i.task().results[0].clone());
                    served += 1;
                }
                (served, seen)
            })
        })
        .collect();
    for round in 0..10u8 {
        t.update(&sb, v(b'a' + round).as_bytes()).unwrap();
        assert!(t.update(&sb, b"(module (func").is_err());
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut versions = std::collections::HashSet::new();
    for w in workers {
        let (served, seen) = w.join().expect("a worker failed a request");
        assert!(served >= 50);
        versions.extend(seen);
    }
    assert!(
        versions.len() >= 2,
        "requests saw the updates: {versions:?}"
    );
}

#[test]
fn precompiled_modules_come_back_from_our_cache_and_damaged_ones_are_recompiled() {
    let dir = std::env::temp_dir().join(format!("lacquer-wasm-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let with_cache = || {
        Sandbox::new(PoolConfig {
            slots: 4,
            max_memory: 8 << 20,
            cache_dir: Some(dir.clone()),
        })
        .unwrap()
    };
    let text = module(HELLO);
    let run = |sb: &Sandbox| {
        let p = sb
            .load("hello", text.as_bytes(), &Limits::default())
            .unwrap();
        let mut i = sb.instantiate(&p).unwrap();
        i.task_mut()
            .set_msg(Which::Req, Some(req("/cached", &[("Host", "a")])));
        assert!(i.run_hook(hook("on_recv")).unwrap());
        assert_eq!(
            i.task().msg(Which::Req).unwrap().header(b"X-Hello"),
            Some(&b"url=/cached"[..])
        );
    };
    // First load: both modules (boot and snapshot) compiled and written.
    let sb = with_cache();
    run(&sb);
    assert_eq!(sb.cache_stats(), Some((0, 2)));
    drop(sb);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&dir).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700);
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    // A new engine (as after a restart) loads both from the cache.
    let sb = with_cache();
    run(&sb);
    assert_eq!(sb.cache_stats(), Some((2, 0)));
    drop(sb);
    // A damaged file is never deserialized: it is compiled again.
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 0xff;
    std::fs::write(&files[0], &bytes).unwrap();
    std::fs::write(&files[1], b"not a module").unwrap();
    let sb = with_cache();
    run(&sb);
    assert_eq!(sb.cache_stats(), Some((0, 2)));
    drop(sb);
    let sb = with_cache();
    run(&sb);
    assert_eq!(sb.cache_stats(), Some((2, 0)), "rewritten after the damage");
    drop(sb);
    // A directory other users may write to is refused.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let e = Sandbox::new(PoolConfig {
        slots: 4,
        max_memory: 8 << 20,
        cache_dir: Some(dir.clone()),
    })
    .unwrap_err();
    assert!(e.contains("chmod 700"), "{e}");
    assert!(sandbox(2).cache_stats().is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
