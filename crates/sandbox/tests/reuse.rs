//! Reuse of a request's instance by the next request of the same program
//! on the same thread: what one request wrote (memory, globals) is gone
//! when the next one starts, a trapped, over-budget or grown instance is
//! never reused, nor one of a program a live update replaced, and a
//! program that can change its tables is never reused at all; the host
//! buffers a reused instance's messages are refilled in hold nothing of
//! the request before.

use lacquer_sandbox::{
    HOOKS, Limits, Message, PoolConfig, Sandbox, SlotReset, Tenant, TenantConfig, Which,
};

fn sandbox(slots: u32) -> Sandbox {
    Sandbox::new(PoolConfig {
        slots,
        max_memory: 8 << 20,
        ..PoolConfig::default()
    })
    .unwrap()
}

fn req(url: &str) -> Message {
    Message {
        url: url.into(),
        method: b"GET".to_vec(),
        ..Message::default()
    }
}

fn hook(name: &str) -> usize {
    HOOKS.iter().position(|h| *h == name).unwrap()
}

/// Reuse needs `PAGEMAP_SCAN`; without it every instance is fresh (and
/// the tests that expect reuse have nothing to check).
fn reuse_available() -> bool {
    SlotReset::for_host().pagemap == wasmtime::Enabled::Yes
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A tenant with two pages of memory, an image, a mutable global and a
/// table. `main` changes memory and the global (the snapshot holds
/// that); `on_recv` writes the request's URL over the image, into a
/// zero part of page 0 and into page 1, sets the global and stores a
/// value 4 bytes from the end of memory; `scan` publishes the global and
/// what the table's two entries return.
const SECRETS: &str = r#"(module
  (import "lacquer" "field_get" (func $field_get (param i32 i32 i32 i32) (result i32)))
  (import "lacquer" "result" (func $result (param i32 i32 i32) (result i32)))
  (memory (export "memory") 2 4)
  (global $g (mut i32) (i32.const 0))
  (global $h (mut i64) (i64.const 0))
  (table 2 funcref)
  (elem (i32.const 0) $one $two)
  (type $ret (func (result i32)))
  (func $one (result i32) (i32.const 1))
  (func $two (result i32) (i32.const 2))
  (data (i32.const 1000) "IMAGE-OF-THE-SNAPSHOT")
  (func (export "main")
    (global.set $g (i32.const 7))
    (global.set $h (i64.const 8))
    (i32.store (i32.const 2000) (i32.const 0x11223344)))
  (func $url (param $at i32)
    (drop (call $field_get (i32.const 0) (i32.const 0) (local.get $at) (i32.const 64))))
  (func (export "on_recv")
    (call $url (i32.const 1000))
    (call $url (i32.const 30000))
    (call $url (i32.const 70000))
    (i32.store (i32.const 131068) (i32.const -1))
    (global.set $g (i32.const 0x5ec2e7))
    (global.set $h (i64.const -1)))
  (func (export "scan")
    (i32.store (i32.const 60000) (global.get $g))
    (i32.store (i32.const 60004) (call_indirect (type $ret) (i32.const 0)))
    (i32.store (i32.const 60008) (call_indirect (type $ret) (i32.const 1)))
    (i64.store (i32.const 60012) (global.get $h))
    (drop (call $result (i32.const 0) (i32.const 60000) (i32.const 20))))
  (func (export "trap") (call $url (i32.const 40000)) unreachable)
  (func (export "spin") (call $url (i32.const 40000)) (loop $l (br $l)))
  (func (export "grow") (call $url (i32.const 40000)) (drop (memory.grow (i32.const 1))))
)"#;

/// What `scan` publishes on the snapshot: g = 7, the table's 1 and 2,
/// h = 8.
fn pristine_scan() -> Vec<u8> {
    let mut v = Vec::new();
    for x in [7i32, 1, 2] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.extend_from_slice(&8i64.to_le_bytes());
    v
}

fn scan(i: &mut lacquer_sandbox::Instance) -> Vec<u8> {
    i.call("scan").unwrap();
    i.task().results[0].clone()
}

#[test]
fn a_reused_instance_sees_nothing_of_the_request_before() {
    let sb = sandbox(4);
    let p = sb
        .load("secrets", SECRETS.as_bytes(), &Limits::default())
        .unwrap();
    let pristine = {
        let mut i = sb.instantiate(&p).unwrap();
        let m = i.peek(0, i.memory_size()).unwrap();
        assert_eq!(scan(&mut i), pristine_scan());
        m
    };
    assert!(contains(&pristine, b"IMAGE-OF-THE-SNAPSHOT"));
    assert_eq!(pristine[2000..2004], 0x11223344u32.to_le_bytes());
    let secret = "/secret-0123456789-of-the-request-before";
    for round in 0..4 {
        {
            let mut i = sb.instantiate(&p).unwrap();
            i.task_mut().set_msg(Which::Req, Some(req(secret)));
            i.run_hook(hook("on_recv")).unwrap();
            let all = i.peek(0, i.memory_size()).unwrap();
            assert!(contains(&all, secret.as_bytes()), "the secret was written");
            assert_ne!(scan(&mut i), pristine_scan(), "the globals changed");
        }
        let mut i = sb.instantiate(&p).unwrap();
        if reuse_available() {
            assert!(i.reused(), "round {round}: the instance was reused");
        }
        assert!(i.task().msg(Which::Req).is_none(), "no message left over");
        assert!(i.task().results.is_empty(), "no result left over");
        assert!(i.task().decision.is_none());
        let all = i.peek(0, i.memory_size()).unwrap();
        assert!(
            !contains(&all, secret.as_bytes()),
            "round {round}: the request before is visible"
        );
        assert!(all == pristine, "round {round}: memory is not the snapshot");
        assert_eq!(
            scan(&mut i),
            pristine_scan(),
            "round {round}: globals or table are not the snapshot's"
        );
    }
}

#[test]
fn a_trapped_over_budget_or_grown_instance_is_not_reused() {
    let sb = sandbox(4);
    let limits = Limits {
        max_instructions: Some(100_000),
        ..Limits::default()
    };
    let p = sb.load("secrets", SECRETS.as_bytes(), &limits).unwrap();
    let pristine = {
        let i = sb.instantiate(&p).unwrap();
        i.peek(0, i.memory_size()).unwrap()
    };
    let secret = "/secret-left-by-a-failed-request";
    for (what, fails) in [("trap", true), ("spin", true), ("grow", false)] {
        // Prime the thread's cache with a clean instance, then take it.
        drop(sb.instantiate(&p).unwrap());
        {
            let mut i = sb.instantiate(&p).unwrap();
            i.task_mut().set_msg(Which::Req, Some(req(secret)));
            assert_eq!(i.call(what).is_err(), fails, "{what}");
        }
        let i = sb.instantiate(&p).unwrap();
        assert!(!i.reused(), "{what}: the instance was reused");
        let all = i.peek(0, i.memory_size()).unwrap();
        assert!(all == pristine, "{what}: memory is not the snapshot");
    }
}

#[test]
fn a_program_that_can_change_its_table_is_never_reused() {
    let sb = sandbox(4);
    let p = sb
        .load(
            "tables",
            br#"(module
              (memory (export "memory") 1)
              (table $t 1 funcref)
              (func $f)
              (func (export "on_recv") (table.set $t (i32.const 0) (ref.func $f)))
              (elem declare func $f))"#,
            &Limits::default(),
        )
        .unwrap();
    for _ in 0..3 {
        let mut i = sb.instantiate(&p).unwrap();
        assert!(!i.reused());
        i.run_hook(hook("on_recv")).unwrap();
    }
}

#[test]
fn an_instance_of_a_replaced_program_never_serves_again() {
    let sb = sandbox(4);
    let v = |c: char| {
        format!(
            r#"(module
              (import "lacquer" "result" (func $result (param i32 i32 i32) (result i32)))
              (memory (export "memory") 1)
              (data (i32.const 0) "{c}")
              (func (export "on_recv") (drop (call $result (i32.const 0) (i32.const 0) (i32.const 1)))))"#
        )
    };
    let t = Tenant::new(
        TenantConfig {
            name: "t".into(),
            filename: "t.wat".into(),
            group: None,
            limits: Limits::default(),
        },
        sb.load("t", v('1').as_bytes(), &Limits::default()).unwrap(),
    );
    let old = t.program();
    drop(sb.instantiate(&old).unwrap());
    let in_flight = sb.instantiate(&old).unwrap();
    if reuse_available() {
        assert!(in_flight.reused());
    }
    drop(sb.instantiate(&old).unwrap()); // another cached old instance
    t.update(&sb, v('2').as_bytes()).unwrap();
    // A request that starts after the update.
    let mut i = sb.instantiate(&t.program()).unwrap();
    assert!(!i.reused(), "an old instance served a new request");
    i.run_hook(hook("on_recv")).unwrap();
    assert_eq!(i.task().results[0], b"2");
    // The old program's instances are not kept once they finish.
    drop(in_flight);
    assert!(!sb.instantiate(&old).unwrap().reused());
}

#[test]
fn cached_instances_give_their_slots_back_when_the_pool_runs_out() {
    let sb = sandbox(2);
    let a = sb
        .load("a", SECRETS.as_bytes(), &Limits::default())
        .unwrap();
    let b = sb
        .load("b", SECRETS.as_bytes(), &Limits::default())
        .unwrap();
    // Two cached instances of `a` hold both slots.
    let (x, y) = (sb.instantiate(&a).unwrap(), sb.instantiate(&a).unwrap());
    drop((x, y));
    let _held = sb.instantiate(&b).unwrap();
    let _also = sb.instantiate(&b).unwrap();
    let e = sb.instantiate(&a).unwrap_err();
    assert!(e.contains("no sandbox"), "{e}");
}

/// Reads the request's `X-Secret` and its URL into memory and publishes
/// what `header_get` returned (the value's length, or -1 when absent).
const READER: &str = r#"(module
  (import "lacquer" "header_get" (func $header_get (param i32 i32 i32 i32 i32) (result i32)))
  (import "lacquer" "field_get" (func $field_get (param i32 i32 i32 i32) (result i32)))
  (import "lacquer" "result" (func $result (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "X-Secret")
  (func (export "on_recv")
    (i32.store (i32.const 0)
      (call $header_get (i32.const 0) (i32.const 16) (i32.const 8) (i32.const 1024) (i32.const 256)))
    (drop (call $field_get (i32.const 0) (i32.const 0) (i32.const 2048) (i32.const 256)))
    (drop (call $result (i32.const 0) (i32.const 0) (i32.const 4))))
)"#;

/// One request as vmod `wasm` makes it: the task's earlier messages
/// released, a spare message refilled with the request, the hook run,
/// the message recycled. What `header_get` returned.
fn read_secret(i: &mut lacquer_sandbox::Instance, headers: &[(&[u8], &[u8])], url: &[u8]) -> i32 {
    let t = i.task_mut();
    t.release_msgs();
    let mut m = t.spare_msg();
    m.refill(headers.iter().copied(), [url, b"GET", b"HTTP/1.1", b""], 0);
    t.set_msg(Which::Req, Some(m));
    i.run_hook(hook("on_recv")).unwrap();
    let code = i32::from_le_bytes(i.task().results[0][..4].try_into().unwrap());
    let t = i.task_mut();
    if let Some(m) = t.msgs[Which::Req as usize].take() {
        t.recycle(m);
    }
    code
}

#[test]
fn recycled_message_buffers_carry_nothing_to_the_next_request() {
    let sb = sandbox(4);
    let p = sb
        .load("reader", READER.as_bytes(), &Limits::default())
        .unwrap();
    let secret = b"cookie-of-the-request-before-0123456789";
    let url = b"/account/of/the/request/before";
    for round in 0..3 {
        {
            let mut i = sb.instantiate(&p).unwrap();
            let n = read_secret(
                &mut i,
                &[(b"Host", b"a"), (b"X-Secret", secret), (b"X-More", b"1")],
                url,
            );
            assert_eq!(n, secret.len() as i32, "round {round}: the secret was read");
            // A second call of the same request recycles and refills too.
            assert_eq!(
                read_secret(&mut i, &[(b"X-Secret", secret)], url),
                secret.len() as i32
            );
        }
        let mut i = sb.instantiate(&p).unwrap();
        if reuse_available() {
            assert!(i.reused(), "round {round}: the instance was reused");
        }
        let n = read_secret(&mut i, &[(b"Host", b"b")], b"/");
        assert_eq!(n, -1, "round {round}: the next request sees no X-Secret");
        let m = i.task().msg(Which::Req).is_none();
        assert!(m, "the message was recycled");
        let all = i.peek(0, i.memory_size()).unwrap();
        assert!(
            !contains(&all, secret),
            "round {round}: the secret is in memory"
        );
        assert!(
            !contains(&all, url),
            "round {round}: the old URL is in memory"
        );
    }
}
