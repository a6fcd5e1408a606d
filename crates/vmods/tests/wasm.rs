//! vmod `wasm` from VCL: tenants loaded in `vcl_init`, forked per task,
//! hooks run per subroutine with their effects on the request, failures
//! seen by VCL, and live updates from VCL and the CLI entry point.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::exec::code::Program;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Action, Backend, Context as _, HttpWhich, LogKind, Scratch, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;
use lacquer_vmods::{Runtime, registry, wasm_cli_update};

const REQ: HttpWhich = HttpWhich::Req;
const RESP: HttpWhich = HttpWhich::Resp;

/// The host API imports the test tenants use.
const PRELUDE: &str = r#"
  (import "lacquer" "field_get" (func $field_get (param i32 i32 i32 i32) (result i32)))
  (import "lacquer" "header_append" (func $header_append (param i32 i32 i32) (result i32)))
  (import "lacquer" "header_set" (func $header_set (param i32 i32 i32 i32 i32) (result i32)))
  (import "lacquer" "forge" (func $forge (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "lacquer" "decide" (func $decide (param i32 i32 i32 i32) (result i32)))
  (import "lacquer" "backend" (func $backend (param i32 i32) (result i32)))
  (import "lacquer" "hash_data" (func $hash_data (param i32 i32)))
  (import "lacquer" "set_ttl" (func $set_ttl (param f64) (result i32)))
  (import "lacquer" "ban" (func $ban (param i32 i32)))
  (import "lacquer" "log" (func $log (param i32 i32)))
  (import "lacquer" "arg" (func $arg (param i32 i32) (result i32)))
  (import "lacquer" "result" (func $result (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1 64)
"#;

const HELLO: &str = r#"
  (data (i32.const 0) "X-Hello: url=")
  (data (i32.const 64) "application/json")
  (data (i32.const 96) "{\"message\":\"Hello from WebAssembly!\"}")
  (func (export "on_recv")
    (local $n i32)
    (local.set $n (call $field_get (i32.const 0) (i32.const 0) (i32.const 13) (i32.const 1000)))
    (drop (call $header_append (i32.const 0) (i32.const 0) (i32.add (i32.const 13) (local.get $n))))
    (drop (call $forge (i32.const 0) (i32.const 200) (i32.const 64) (i32.const 16) (i32.const 96) (i32.const 37))))
"#;

const ROUTER: &str = r#"
  (data (i32.const 0) "api")
  (data (i32.const 16) "tenant-key")
  (data (i32.const 32) "routed")
  (data (i32.const 48) "X-Seen: deliver")
  (data (i32.const 64) "obj.http.x-tenant == t1")
  (func (export "on_recv")
    (drop (call $backend (i32.const 0) (i32.const 3)))
    (call $hash_data (i32.const 16) (i32.const 10))
    (call $log (i32.const 32) (i32.const 6))
    (drop (call $decide (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 0))))
  (func (export "on_deliver")
    (drop (call $header_append (i32.const 3) (i32.const 48) (i32.const 15))))
  (func (export "on_backend_response")
    (drop (call $set_ttl (f64.const 42))))
  (func (export "invalidate")
    (call $ban (i32.const 64) (i32.const 23)))
  (func (export "echo")
    (local $n i32)
    (local.set $n (call $arg (i32.const 1000) (i32.const 100)))
    (drop (call $result (i32.const 0) (i32.const 1000) (local.get $n)))
    (i32.store (i32.const 2000) (i32.const 0x00003234)) ;; "42"
    (drop (call $result (i32.const 1) (i32.const 2000) (i32.const 2))))
"#;

const SPIN: &str = r#"
  (data (i32.const 0) "X-Before: spin")
  (func (export "on_recv")
    (drop (call $header_append (i32.const 0) (i32.const 0) (i32.const 14)))
    (loop $l (br $l)))
"#;

fn module(body: &str) -> String {
    format!("(module {PRELUDE} {body})")
}

/// A fresh directory with the test tenants and a configuration file.
fn tenant_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lacquer-wasm-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("hello.wat"), module(HELLO)).unwrap();
    std::fs::write(d.join("router.wat"), module(ROUTER)).unwrap();
    std::fs::write(d.join("spin.wat"), module(SPIN)).unwrap();
    std::fs::write(
        d.join("tenants.json"),
        r#"{ "tight": { "max_instructions": 100000 },
             "router.com": { "filename": "router.wat" },
             "spin.com": { "filename": "spin.wat", "group": "tight" } }"#,
    )
    .unwrap();
    d
}

struct Loaded {
    prog: Program,
    rt: Runtime,
}

impl Loaded {
    fn run(&self, m: BuiltinSub, c: &mut MockContext) -> Action {
        c.vmod.sub = Some(m);
        self.prog.run(m, c, &self.rt, &mut Scratch::default())
    }
}

fn load(dir: &std::path::Path, vcl: &str) -> Loaded {
    let text = format!(
        "vcl 4.1;\nimport wasm;\nbackend s1 {{ .host = \"127.0.0.1\"; }}\nsub vcl_init {{\n  wasm.embed_tenants(\"\"\"{{ \"hello.com\": {{ \"filename\": \"{d}/hello.wat\" }} }}\"\"\");\n  wasm.load_tenants(\"{d}/tenants.json\");\n}}\n{vcl}",
        d = dir.display()
    );
    let opts = CompileOptions {
        err_unref: false,
        ..CompileOptions::default()
    };
    let (sm, r) = compile_str("test.vcl", &text, &opts, &registry());
    let ir = r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
    let host = Arc::new(TestHost::default());
    host.backends.lock().unwrap().push(Backend {
        id: 7,
        name: "api".into(),
    });
    let rt = Runtime::for_program(&ir, host.clone()).unwrap();
    let prog = Program::from_ir(&ir).unwrap();
    let l = Loaded { prog, rt };
    let mut c = MockContext::new("GET", "/");
    assert_eq!(l.run(BuiltinSub::Init, &mut c), Action::Ok, "{:?}", c.logs);
    l
}

fn client(url: &str, host: &str) -> MockContext {
    let mut c = MockContext::new("GET", url).with_header(REQ, "Host", host);
    c.vars.insert(VarId::ReqEsiLevel, Value::Int(0));
    c
}

fn get(c: &MockContext, w: HttpWhich, name: &str) -> Option<String> {
    c.http(w)
        .get(name)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

const VCL: &str = r#"
sub vcl_recv {
    if (wasm.fork(req.http.Host)) {
        set req.http.X-Tenant = wasm.current_name();
        wasm.run();
        if (wasm.want_result() == "synth") {
            return (synth(wasm.want_status()));
        }
        if (wasm.want_result() == "hash") {
            set req.http.X-Call = wasm.call("echo", "ping");
            set req.http.X-R1 = wasm.result_value(1) + 1;
            set req.http.X-R0 = wasm.result_as_string(0);
            set req.http.X-Backend = wasm.vm_backend();
            return (hash);
        }
    }
    set req.http.X-Active = wasm.active();
}
sub vcl_hash {
    wasm.apply_hash();
}
sub vcl_deliver {
    if (wasm.active()) {
        wasm.run();
    }
}
sub vcl_synth {
    if (wasm.active()) {
        wasm.run();
        return (deliver);
    }
}
"#;

#[test]
fn hello_tenant_forges_a_json_response_through_synth() {
    let d = tenant_dir("hello");
    let l = load(&d, VCL);
    let mut c = client("/greet", "hello.com");
    assert_eq!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Synth {
            status: 200,
            reason: None
        },
        "{:?}",
        c.logs
    );
    assert_eq!(get(&c, REQ, "X-Hello").as_deref(), Some("url=/greet"));
    assert_eq!(get(&c, REQ, "X-Tenant").as_deref(), Some("hello.com"));
    c.vars.insert(VarId::RespStatus, Value::Int(200));
    assert_eq!(l.run(BuiltinSub::Synth, &mut c), Action::Deliver);
    assert_eq!(c.vars.get(&VarId::RespStatus), Some(&Value::Int(200)));
    assert_eq!(
        get(&c, RESP, "Content-Type").as_deref(),
        Some("application/json")
    );
    assert_eq!(c.synthetic, br#"{"message":"Hello from WebAssembly!"}"#);
}

#[test]
fn header_edits_are_written_back_in_order_whether_appended_or_replaced() {
    // Appending only adds lines after the request's own; replacing a
    // header the request has rewrites the set. Both end in the order
    // the tenant made.
    let d = tenant_dir("edits");
    std::fs::write(
        d.join("edit.wat"),
        module(
            r#"
  (data (i32.const 0) "X-Add: one")
  (data (i32.const 16) "Accept")
  (data (i32.const 32) "text/plain")
  (func (export "append")
    (drop (call $header_append (i32.const 0) (i32.const 0) (i32.const 10))))
  (func (export "replace")
    (drop (call $header_set (i32.const 0) (i32.const 16) (i32.const 6) (i32.const 32) (i32.const 10)))
    (drop (call $header_append (i32.const 0) (i32.const 0) (i32.const 10))))
"#,
        ),
    )
    .unwrap();
    std::fs::write(
        d.join("tenants.json"),
        r#"{ "edit.com": { "filename": "edit.wat" } }"#,
    )
    .unwrap();
    let l = load(
        &d,
        "sub vcl_recv {\n  wasm.fork(\"edit.com\");\n  wasm.vcall(req.http.X-Hook);\n  return (synth(200));\n}\n",
    );
    let lines = |c: &MockContext| -> Vec<(String, String)> {
        c.headers(REQ)
            .into_iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect()
    };
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    };
    for (hook, want) in [
        (
            "append",
            pairs(&[
                ("Host", "edit.com"),
                ("Accept", "*/*"),
                ("X-Hook", "append"),
                ("X-Add", "one"),
            ]),
        ),
        (
            "replace",
            pairs(&[
                ("Host", "edit.com"),
                ("X-Hook", "replace"),
                ("Accept", "text/plain"),
                ("X-Add", "one"),
            ]),
        ),
    ] {
        let mut c = client("/e", "edit.com")
            .with_header(REQ, "Accept", "*/*")
            .with_header(REQ, "X-Hook", hook);
        assert!(
            matches!(
                l.run(BuiltinSub::Recv, &mut c),
                Action::Synth { status: 200, .. }
            ),
            "{:?}",
            c.logs
        );
        assert_eq!(lines(&c), want, "{hook}");
    }
}

#[test]
fn unknown_tenants_do_not_fork() {
    let d = tenant_dir("unknown");
    let l = load(&d, VCL);
    let mut c = client("/", "nobody.com");
    assert_eq!(l.run(BuiltinSub::Recv, &mut c), Action::Hash);
    assert_eq!(get(&c, REQ, "X-Active").as_deref(), Some("false"));
}

#[test]
fn router_tenant_effects_reach_the_request() {
    let d = tenant_dir("router");
    let l = load(&d, VCL);
    let mut c = client("/x", "router.com");
    assert_eq!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Hash,
        "{:?}",
        c.logs
    );
    assert_eq!(
        c.vars.get(&VarId::ReqBackendHint),
        Some(&Value::Backend(Backend {
            id: 7,
            name: "api".into()
        }))
    );
    assert_eq!(get(&c, REQ, "X-Backend").as_deref(), Some("api"));
    assert_eq!(get(&c, REQ, "X-Call").as_deref(), Some("ping"));
    assert_eq!(get(&c, REQ, "X-R0").as_deref(), Some("ping"));
    assert_eq!(get(&c, REQ, "X-R1").as_deref(), Some("43"));
    assert!(
        c.logs_of(LogKind::Log).iter().any(|m| m.contains("routed")),
        "{:?}",
        c.logs
    );
    // Hash data from vcl_recv lands in vcl_hash through apply_hash().
    l.run(BuiltinSub::Hash, &mut c);
    assert!(
        c.hash.contains(&Some(b"tenant-key".to_vec())),
        "{:?}",
        c.hash
    );
    // The same instance serves vcl_deliver.
    assert_eq!(l.run(BuiltinSub::Deliver, &mut c), Action::Deliver);
    assert_eq!(get(&c, RESP, "X-Seen").as_deref(), Some("deliver"));
}

#[test]
fn a_tenant_over_its_budget_fails_the_task_and_leaves_the_request_alone() {
    let d = tenant_dir("spin");
    let l = load(&d, VCL);
    let mut c = client("/", "spin.com");
    assert_eq!(l.run(BuiltinSub::Recv, &mut c), Action::Fail);
    assert_eq!(
        get(&c, REQ, "X-Before"),
        None,
        "a failed call changes nothing"
    );
    let errs = c.logs_of(LogKind::Error).join("\n");
    assert!(errs.contains("max_instructions"), "{errs}");
    // Other tenants go on.
    let mut c = client("/ok", "hello.com");
    assert!(matches!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Synth { status: 200, .. }
    ));
}

#[test]
fn vcall_and_backend_hooks() {
    let d = tenant_dir("vcall");
    let l = load(
        &d,
        r#"
sub vcl_recv {
    wasm.fork("router.com");
    wasm.vcall("invalidate");
    return (synth(200));
}
sub vcl_backend_response {
    wasm.fork("router.com");
    wasm.run();
}
"#,
    );
    let mut c = client("/", "x");
    assert!(matches!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Synth { .. }
    ));
    assert_eq!(c.bans, vec![b"obj.http.x-tenant == t1".to_vec()]);
    let mut b = MockContext::new("GET", "/");
    l.run(BuiltinSub::BackendResponse, &mut b);
    assert_eq!(b.vars.get(&VarId::BerespTtl), Some(&Value::Duration(42.0)));
}

#[test]
fn live_update_from_vcl_and_cli_without_a_reload() {
    let d = tenant_dir("live");
    let l = load(
        &d,
        r#"
sub vcl_recv {
    if (req.url == "/update") {
        set req.http.X-Ok = wasm.live_update_file("hello.com", req.http.X-File);
        return (synth(204));
    }
    wasm.fork("hello.com");
    wasm.run();
    return (synth(wasm.want_status()));
}
"#,
    );
    // (Tasks that forked before an update keep their instance of the
    // old program: the sandbox's own tests show that.)
    let v2 = d.join("hello2.wat");
    std::fs::write(
        &v2,
        module(&HELLO.replace("i32.const 200", "i32.const 201")),
    )
    .unwrap();
    // A fork on this thread before the update: the thread's fork cache
    // keeps the program, and must let it go after the update.
    let mut c = client("/a", "hello.com");
    assert!(matches!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Synth { status: 200, .. }
    ));
    let mut u = client("/update", "x").with_header(REQ, "X-File", v2.to_str().unwrap());
    l.run(BuiltinSub::Recv, &mut u);
    assert_eq!(
        get(&u, REQ, "X-Ok").as_deref(),
        Some("true"),
        "{:?}",
        u.logs
    );
    let mut c = client("/b", "hello.com");
    assert!(matches!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Synth { status: 201, .. }
    ));

    // A bad module is refused and the current one stays.
    let bad = d.join("bad.wat");
    std::fs::write(&bad, "(module (func").unwrap();
    let mut u = client("/update", "x").with_header(REQ, "X-File", bad.to_str().unwrap());
    l.run(BuiltinSub::Recv, &mut u);
    assert_eq!(get(&u, REQ, "X-Ok").as_deref(), Some("false"));
    assert!(!u.logs_of(LogKind::Error).is_empty());
    let mut c = client("/c", "hello.com");
    assert!(matches!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Synth { status: 201, .. }
    ));

    // The CLI's entry point: every VCL with the tenant, no reload.
    let v3 = d.join("hello3.wat");
    std::fs::write(
        &v3,
        module(&HELLO.replace("i32.const 200", "i32.const 202")),
    )
    .unwrap();
    let msg = wasm_cli_update("hello.com", v3.to_str().unwrap()).unwrap();
    assert!(msg.contains("updated"), "{msg}");
    let mut c = client("/d", "hello.com");
    assert!(matches!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Synth { status: 202, .. }
    ));
    let e = wasm_cli_update("nobody.example", v3.to_str().unwrap()).unwrap_err();
    assert!(e.contains("no loaded VCL"), "{e}");
    let e = wasm_cli_update("hello.com", bad.to_str().unwrap()).unwrap_err();
    assert!(e.contains("hello.com"), "{e}");
    assert!(
        wasm_cli_update("hello.com", "/nonexistent/x.wasm")
            .unwrap_err()
            .contains("cannot read")
    );
}

#[test]
fn two_vcls_with_a_tenant_of_the_same_name_each_fork_their_own() {
    // One thread forks in both VCLs in turn: the per-thread fork cache
    // must not hand one VCL's tenant to the other. (Its own tenant name:
    // the CLI update of another test changes `hello.com` in every VCL.)
    let vcl = "sub vcl_recv {\n  wasm.fork(\"twin.com\");\n  wasm.run();\n  return (synth(wasm.want_status()));\n}\n";
    let dir = |tag: &str, status: u32| {
        let d = tenant_dir(tag);
        std::fs::write(
            d.join("twin.wat"),
            module(&HELLO.replace("i32.const 200", &format!("i32.const {status}"))),
        )
        .unwrap();
        std::fs::write(
            d.join("tenants.json"),
            r#"{ "twin.com": { "filename": "twin.wat" } }"#,
        )
        .unwrap();
        d
    };
    let (a, b) = (dir("twin-a", 200), dir("twin-b", 203));
    let la = load(&a, vcl);
    let lb = load(&b, vcl);
    for round in 0..3 {
        for (l, want) in [(&la, 200), (&lb, 203)] {
            let mut c = client("/x", "twin.com");
            match l.run(BuiltinSub::Recv, &mut c) {
                Action::Synth { status, .. } => assert_eq!(status, want, "round {round}"),
                other => panic!("round {round}: {other:?} {:?}", c.logs),
            }
        }
    }
}

#[test]
fn bad_configurations_fail_vcl_init_with_the_reason() {
    let d = tenant_dir("badcfg");
    std::fs::write(
        d.join("tenants.json"),
        r#"{"x.com": {"filename": "missing.wasm"}}"#,
    )
    .unwrap();
    let text = format!(
        "vcl 4.1;\nimport wasm;\nbackend s1 {{ .host = \"127.0.0.1\"; }}\nsub vcl_init {{ wasm.load_tenants(\"{}/tenants.json\"); }}",
        d.display()
    );
    let (sm, r) = compile_str("t.vcl", &text, &CompileOptions::default(), &registry());
    let ir = r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
    let rt = Runtime::for_program(&ir, Arc::new(TestHost::default())).unwrap();
    let prog = Program::from_ir(&ir).unwrap();
    let mut c = MockContext::new("GET", "/");
    c.vmod.sub = Some(BuiltinSub::Init);
    assert_eq!(
        prog.run(BuiltinSub::Init, &mut c, &rt, &mut Scratch::default()),
        Action::Fail
    );
    let errs = c.logs_of(LogKind::Error).join("\n");
    assert!(errs.contains("missing.wasm"), "{errs}");
}
