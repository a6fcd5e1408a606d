//! End-to-end: VCL importing the vmods, compiled against the crate's
//! registry, lowered for the executor and run with a [`Runtime`].

mod common;

use std::sync::Arc;

use common::*;
use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::exec::code::Program;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Action, Backend, HttpWhich, LogKind, Scratch, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;
use lacquer_vmods::{Runtime, registry};

const REQ: HttpWhich = HttpWhich::Req;
const RESP: HttpWhich = HttpWhich::Resp;

struct Loaded {
    prog: Program,
    rt: Runtime,
    host: Arc<TestHost>,
}

fn load(vcl: &str) -> Loaded {
    let text = format!(
        "vcl 4.1;\nbackend s1 {{ .host = \"127.0.0.1\"; }}\nbackend s2 {{ .host = \"127.0.0.2\"; }}\n{vcl}"
    );
    let opts = CompileOptions {
        err_unref: false,
        ..CompileOptions::default()
    };
    let (sm, r) = compile_str("test.vcl", &text, &opts, &registry());
    let ir = r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
    let host = Arc::new(TestHost::default());
    let rt = Runtime::for_program(&ir, host.clone()).unwrap();
    let prog = Program::from_ir(&ir).unwrap();
    let l = Loaded { prog, rt, host };
    let mut c = MockContext::new("GET", "/");
    c.vmod.sub = Some(BuiltinSub::Init);
    assert_eq!(l.run(BuiltinSub::Init, &mut c), Action::Ok, "{:?}", c.logs);
    l
}

impl Loaded {
    fn run(&self, m: BuiltinSub, c: &mut MockContext) -> Action {
        c.vmod.sub = Some(m);
        self.prog.run(m, c, &self.rt, &mut Scratch::default())
    }
}

fn client(url: &str) -> MockContext {
    let mut c = MockContext::new("GET", url).with_header(REQ, "Host", "example.com");
    c.vars.insert(VarId::ReqEsiLevel, Value::Int(0));
    c
}

fn get(c: &MockContext, w: HttpWhich, name: &str) -> Option<String> {
    c.http(w)
        .get(name)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

#[test]
fn std_functions_from_vcl() {
    let l = load(
        r#"
import std;
sub vcl_recv {
    set req.url = std.querysort(req.url);
    set req.http.up = std.toupper(req.http.host + "!");
    set req.http.n = std.integer(req.http.num, 0) + 1;
    set req.http.d = std.duration("1m", 0s) + 1s;
    set req.http.m = std.fnmatch("/a/*", req.url, pathname = false);
    std.collect(req.http.accept, "|");
    std.log("recv " + req.url);
    if (!std.healthy(req.backend_hint)) {
        return (synth(503));
    }
    return (synth(200));
}
"#,
    );
    let mut c = client("/a/b?z=1&a=2")
        .with_header(REQ, "Num", "41")
        .with_header(REQ, "Accept", "x")
        .with_header(REQ, "Accept", "y");
    c.vars.insert(
        VarId::ReqBackendHint,
        Value::Backend(Backend {
            id: 0,
            name: "s1".into(),
        }),
    );
    assert_eq!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Synth {
            status: 200,
            reason: None
        },
        "{:?}",
        c.logs
    );
    assert_eq!(c.string(VarId::ReqUrl), Some("/a/b?a=2&z=1"));
    assert_eq!(get(&c, REQ, "up").as_deref(), Some("EXAMPLE.COM!"));
    assert_eq!(get(&c, REQ, "n").as_deref(), Some("42"));
    assert_eq!(get(&c, REQ, "d").as_deref(), Some("61.000"));
    assert_eq!(get(&c, REQ, "m").as_deref(), Some("true"));
    assert_eq!(get(&c, REQ, "accept").as_deref(), Some("x|y"));
    assert_eq!(c.logs_of(LogKind::Log), ["recv /a/b?a=2&z=1"]);
}

#[test]
fn conversion_failure_fails_the_vcl() {
    let l = load(
        r#"
import std;
sub vcl_deliver {
    set resp.http.d = std.duration(req.http.d);
}
"#,
    );
    let mut c = client("/").with_header(REQ, "d", "100");
    assert_eq!(l.run(BuiltinSub::Deliver, &mut c), Action::Fail);
    assert_eq!(c.logs_of(LogKind::Error).len(), 1, "{:?}", c.logs);
}

#[test]
fn directors_in_vcl_init_and_recv() {
    let l = load(
        r#"
import directors;
sub vcl_init {
    new rr = directors.round_robin();
    rr.add_backend(s1);
    rr.add_backend(s2);
    new h = directors.hash();
    h.add_backend(s1);
    h.add_backend(s2, 1);
    new sh = directors.shard();
    sh.add_backend(s1);
    sh.add_backend(s2);
    sh.reconfigure();
}
sub vcl_recv {
    if (req.url ~ "^/hash") {
        set req.backend_hint = h.backend(req.url);
    } else if (req.url ~ "^/shard") {
        set req.backend_hint = sh.backend(by = KEY, key = sh.key(req.url));
    } else {
        set req.backend_hint = rr.backend();
    }
    set req.http.be = req.backend_hint;
    return (pass);
}
"#,
    );
    let mut c = client("/");
    l.run(BuiltinSub::Recv, &mut c);
    assert_eq!(get(&c, REQ, "be").as_deref(), Some("rr"));
    let Value::Backend(rr) = c.vars.get(&VarId::ReqBackendHint).cloned().unwrap() else {
        panic!("no backend hint");
    };
    let picks: Vec<Backend> = (0..3)
        .map(|_| l.host.resolve(&mut c, &rr).unwrap())
        .collect();
    assert_eq!(
        picks.iter().map(|b| b.name.to_string()).collect::<Vec<_>>(),
        ["s1", "s2", "s1"]
    );
    let mut c = client("/hash/1");
    l.run(BuiltinSub::Recv, &mut c);
    let first = get(&c, REQ, "be").unwrap();
    assert!(first == "s1" || first == "s2");
    let mut c = client("/shard/x");
    l.run(BuiltinSub::Recv, &mut c);
    let a = get(&c, REQ, "be").unwrap();
    let mut c = client("/shard/x");
    l.run(BuiltinSub::Recv, &mut c);
    assert_eq!(get(&c, REQ, "be").unwrap(), a);
}

#[test]
fn var_cookie_header_and_blob_from_vcl() {
    let l = load(
        r#"
import var;
import cookie;
import header;
import blob;
import str;
sub vcl_recv {
    var.set("foo", "bar");
    var.set_int("ten", 10);
    cookie.parse(req.http.cookie);
    cookie.keep("a,c");
    set req.http.cookie = cookie.get_string();
    set req.http.x = var.get("foo") + var.get_int("ten");
    set req.http.b64 = blob.encode(BASE64, blob = blob.decode(encoded = "hello"));
    set req.http.first = str.split(req.url, 1, "/");
    return (synth(200));
}
sub vcl_synth {
    header.append(resp.http.Set-Cookie, "a=1");
    header.append(resp.http.Set-Cookie, "b=2");
    header.remove(resp.http.Set-Cookie, "^b=");
    set resp.http.v = var.get("foo");
}
"#,
    );
    let mut c = client("/one/two").with_header(REQ, "Cookie", "a=1; b=2; c=3");
    l.run(BuiltinSub::Recv, &mut c);
    assert_eq!(get(&c, REQ, "cookie").as_deref(), Some("a=1; c=3;"));
    assert_eq!(get(&c, REQ, "x").as_deref(), Some("bar10"));
    assert_eq!(get(&c, REQ, "b64").as_deref(), Some("aGVsbG8="));
    assert_eq!(get(&c, REQ, "first").as_deref(), Some("one"));
    // Same task: the task variables are still there in vcl_synth.
    l.run(BuiltinSub::Synth, &mut c);
    let cookies: Vec<&[u8]> = c
        .http(RESP)
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"set-cookie"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(cookies, [&b"a=1"[..]], "{:?} {:?}", c.logs, c.http(RESP));
    assert_eq!(get(&c, RESP, "v").as_deref(), Some("bar"));
}

#[test]
fn restricted_functions_are_rejected_by_the_compiler() {
    let text = "vcl 4.1;\nbackend s1 { .host = \"127.0.0.1\"; }\nimport utils;\nsub vcl_recv { utils.fast_304(); }\n";
    let (_, r) = compile_str("t.vcl", text, &CompileOptions::default(), &registry());
    assert!(r.is_err());
    let text = "vcl 4.1;\nbackend s1 { .host = \"127.0.0.1\"; }\nimport purge;\nsub vcl_hit { set req.http.n = purge.soft(ttl = 1s); }\n";
    let (sm, r) = compile_str("t.vcl", text, &CompileOptions::default(), &registry());
    r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
}

/// varnishd 7.1 compiles vmod_purge calls anywhere; VRT_purge fails the
/// VCL when one runs outside vcl_hit and vcl_miss.
#[test]
fn purge_outside_hit_and_miss_compiles_and_fails_at_run_time() {
    let l = load(
        "import purge;\nsub vcl_recv { set req.http.n = purge.hard(); }\nsub vcl_deliver { set resp.http.n = purge.soft(); }\n",
    );
    for sub in [BuiltinSub::Recv, BuiltinSub::Deliver] {
        let mut c = client("/");
        assert_eq!(l.run(sub, &mut c), Action::Fail, "{sub:?}");
        let errs = c.logs_of(LogKind::Error);
        assert!(
            errs.iter()
                .any(|e| e.contains("purge can only happen in vcl_hit{} or vcl_miss{}")),
            "{:?}",
            c.logs
        );
    }
}

#[test]
fn test_vmods_load_only_from_the_test_registry() {
    let text = "vcl 4.1;\nbackend s1 { .host = \"127.0.0.1\"; }\nimport debug;\n";
    let (_, r) = compile_str("t.vcl", text, &CompileOptions::default(), &registry());
    assert!(r.is_err(), "debug must not be importable by production VCL");
    // vtc and accept are, as with varnishd.
    let text = "vcl 4.1;\nbackend s1 { .host = \"127.0.0.1\"; }\nimport vtc;\nimport accept;\nsub vcl_init { new r = accept.rule(\"x\"); }\nsub vcl_recv { vtc.sleep(0s); set req.http.a = r.filter(req.http.a); }\n";
    let (sm, r) = compile_str("t.vcl", text, &CompileOptions::default(), &registry());
    r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
    let l = load_with_test_vmods(
        r#"import debug;
sub vcl_recv {
    debug.test_priv_task("a");
    set req.http.x0 = debug.test_priv_task("b");
    set req.http.opt = debug.priv_task_with_option("ignored");
    set req.http.arg = debug.argtest("1", four = 6);
    debug.sethdr(req.http.hdr, req.url + "!");
    if (req.url == "/fail") {
        debug.fail();
    }
    return (hash);
}
"#,
    );
    let mut c = client("/");
    assert_eq!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Hash,
        "{:?}",
        c.logs
    );
    assert_eq!(get(&c, REQ, "x0").as_deref(), Some("a b"));
    assert_eq!(get(&c, REQ, "opt").as_deref(), Some("a b"));
    assert_eq!(get(&c, REQ, "arg").as_deref(), Some("1 2 3 , 6 0 <undef>"));
    assert_eq!(get(&c, REQ, "hdr").as_deref(), Some("/!"));
    let mut c = client("/fail");
    assert_eq!(l.run(BuiltinSub::Recv, &mut c), Action::Fail);
    assert_eq!(c.logs_of(LogKind::Error), ["Forced failure"]);
}

#[test]
fn regex_values_pass_through_vmods_into_matches_and_regsub() {
    let l = load_with_test_vmods(
        r#"import debug;
sub vcl_recv {
    if (req.url ~ (debug.just_return_regex(debug.just_return_regex("^/he" + "llo")))) {
        set req.http.m = "yes";
    }
    if (req.url !~ debug.just_return_regex("x")) {
        set req.http.n = "no x";
    }
    set req.http.s = regsuball(req.url, debug.just_return_regex("l"), "L");
    return (hash);
}
"#,
    );
    let mut c = client("/hello");
    assert_eq!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Hash,
        "{:?}",
        c.logs
    );
    assert_eq!(get(&c, REQ, "m").as_deref(), Some("yes"));
    assert_eq!(get(&c, REQ, "n").as_deref(), Some("no x"));
    assert_eq!(get(&c, REQ, "s").as_deref(), Some("/heLLo"));
    let mut c = client("/other");
    assert_eq!(l.run(BuiltinSub::Recv, &mut c), Action::Hash);
    assert_eq!(get(&c, REQ, "m"), None);

    // A string where a REGEX is wanted is a type error, as in vcc.
    let bad = "vcl 4.1;\nbackend s1 { .host = \"127.0.0.1\"; }\nsub vcl_recv { if (req.url ~ req.http.x) { return (pass); } }\n";
    let reg = lacquer_vmods::registry_with_test_vmods();
    let (sm, r) = compile_str("bad.vcl", bad, &CompileOptions::default(), &reg);
    let msg = r.map(|_| ()).unwrap_err().render(&sm);
    assert!(
        msg.contains("Expression has type STRING, expected REGEX"),
        "{msg}"
    );
}

/// Compiles `vcl` (after the version and two backends) with the test
/// vmods, and runs its `vcl_init`.
fn load_with_test_vmods(vcl: &str) -> Loaded {
    let text = format!("vcl 4.1;\nbackend s1 {{ .host = \"127.0.0.1\"; }}\n{vcl}");
    let opts = CompileOptions {
        err_unref: false,
        ..CompileOptions::default()
    };
    let reg = lacquer_vmods::registry_with_test_vmods();
    let (sm, r) = compile_str("t.vcl", &text, &opts, &reg);
    let ir = r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
    let host = Arc::new(TestHost::default());
    let rt = Runtime::for_program(&ir, host.clone()).unwrap();
    let l = Loaded {
        prog: Program::from_ir(&ir).unwrap(),
        rt,
        host,
    };
    let mut c = MockContext::new("GET", "/");
    assert_eq!(l.run(BuiltinSub::Init, &mut c), Action::Ok, "{:?}", c.logs);
    l
}

#[test]
fn acl_values_from_vmods_match_and_a_null_acl_fails() {
    let l = load_with_test_vmods(
        r#"import debug;
acl local +log { "127.0.0.0"/8; }
sub vcl_init {
    if (!debug.match_acl(local, "127.0.0.2")) { debug.fail(); }
    if (debug.match_acl(ip = "10.0.0.1", acl = local)) { debug.fail(); }
    new o = debug.aclobj(debug.acl(local));
    new n = debug.aclobj(debug.null_acl());
}
sub vcl_recv {
    if (req.url == "/null") { if (client.ip ~ debug.null_acl()) { return (synth(200)); } }
    if (req.url == "/nullobj") { if (client.ip ~ n.get()) { return (synth(200)); } }
    if (req.url == "/nullfn") { if (debug.match_acl(n.get(), client.ip)) { return (synth(200)); } }
    if (client.ip ~ o.get() && client.ip ~ debug.acl(local)) { return (synth(201)); }
    return (synth(202));
}
"#,
    );
    let mut c = client("/");
    c.vars.insert(
        VarId::ClientIp,
        Value::Ip("127.0.0.9:1234".parse().unwrap()),
    );
    let act = l.run(BuiltinSub::Recv, &mut c);
    assert!(
        matches!(act, Action::Synth { status: 201, .. }),
        "{act:?} {:?}",
        c.logs
    );
    // `+log` lines are written for matches made through values too.
    assert_eq!(c.logs_of(LogKind::Acl).len(), 2, "{:?}", c.logs);
    for url in ["/null", "/nullobj", "/nullfn"] {
        let mut c = client(url);
        c.vars.insert(
            VarId::ClientIp,
            Value::Ip("127.0.0.9:1234".parse().unwrap()),
        );
        assert_eq!(l.run(BuiltinSub::Recv, &mut c), Action::Fail, "{url}");
        assert_eq!(
            c.logs_of(LogKind::Error),
            ["Cannot match a null ACL"],
            "{url}"
        );
    }
    let mut c = client("/");
    c.vars
        .insert(VarId::ClientIp, Value::Ip("10.1.1.1:1234".parse().unwrap()));
    assert!(matches!(
        l.run(BuiltinSub::Recv, &mut c),
        Action::Synth { status: 202, .. }
    ));
}

#[test]
fn vmods_call_subs_with_the_dynamic_call_rules() {
    let l = load_with_test_vmods(
        r#"import debug;
sub foo { set req.http.foo = "called"; }
sub back { set bereq.http.x = "1"; }
sub chooser { return (synth(204)); }
sub again { set req.http.n = req.http.n + "x"; debug.call(again); }
sub vcl_init { new c = debug.caller(foo); }
sub vcl_recv {
    if (req.url == "/fn") { debug.call(foo); }
    if (req.url == "/obj") { c.call(); }
    if (req.url == "/xsub") { call c.xsub(); }
    if (req.url == "/check") { set req.http.why = debug.check_call(back); }
    if (req.url == "/checkok") { set req.http.why = debug.check_call(foo) + "-"; }
    if (req.url == "/wrong") { debug.call(back); }
    if (req.url == "/return") { debug.call(chooser); set req.http.after = "ran"; }
    if (req.url == "/recursive") { debug.call(again); }
    return (hash);
}
"#,
    );
    for url in ["/fn", "/obj", "/xsub"] {
        let mut c = client(url);
        assert_eq!(
            l.run(BuiltinSub::Recv, &mut c),
            Action::Hash,
            "{url} {:?}",
            c.logs
        );
        assert_eq!(get(&c, REQ, "foo").as_deref(), Some("called"), "{url}");
    }
    let mut c = client("/check");
    assert_eq!(l.run(BuiltinSub::Recv, &mut c), Action::Hash);
    assert_eq!(
        get(&c, REQ, "why").as_deref(),
        Some(r#"Dynamic call to "sub back{}" not allowed from here"#)
    );
    let mut c = client("/checkok");
    assert_eq!(l.run(BuiltinSub::Recv, &mut c), Action::Hash);
    assert_eq!(get(&c, REQ, "why").as_deref(), Some("-"));

    let mut c = client("/wrong");
    assert_eq!(l.run(BuiltinSub::Recv, &mut c), Action::Fail);
    assert_eq!(
        c.logs_of(LogKind::Error),
        [r#"call to "sub back{}" not allowed from here"#]
    );
    // A `return` in the called sub ends the method with its action.
    let mut c = client("/return");
    let act = l.run(BuiltinSub::Recv, &mut c);
    assert!(matches!(act, Action::Synth { status: 204, .. }), "{act:?}");
    assert_eq!(get(&c, REQ, "after"), None);
    // Recursion is found at run time.
    let mut c = client("/recursive");
    assert_eq!(l.run(BuiltinSub::Recv, &mut c), Action::Fail);
    assert_eq!(get(&c, REQ, "n").as_deref(), Some("x"));
    assert_eq!(
        c.logs_of(LogKind::Error),
        [r#"Recursive call to "sub again{}""#]
    );

    // A sub only reached through a SUB value must still fit some method.
    let bad = "vcl 4.1;\nimport debug;\nbackend s1 { .host = \"127.0.0.1\"; }\nsub impossible { set req.http.x = beresp.reason; }\nsub vcl_recv { debug.call(impossible); }\n";
    let reg = lacquer_vmods::registry_with_test_vmods();
    let (sm, r) = compile_str("bad.vcl", bad, &CompileOptions::default(), &reg);
    let msg = r.map(|_| ()).unwrap_err().render(&sm);
    assert!(
        msg.starts_with("Impossible Subroutine('bad.vcl' Line 4 Pos 5)"),
        "{msg}"
    );
}

#[test]
fn a_sub_kept_past_its_vcl_panics_when_another_vcl_recalls_it() {
    let first = load_with_test_vmods(
        "import debug;\nsub foo { set req.http.foo = \"1\"; }\nsub vcl_init { debug.bad_memory(foo); }\nsub vcl_recv { call debug.total_recall(); return (hash); }\n",
    );
    // In the VCL that made it the SUB is fine.
    let mut c = client("/");
    assert_eq!(
        first.run(BuiltinSub::Recv, &mut c),
        Action::Hash,
        "{:?}",
        c.logs
    );
    assert_eq!(get(&c, REQ, "foo").as_deref(), Some("1"));
    let second =
        load_with_test_vmods("import debug;\nsub vcl_recv { call debug.total_recall(); }\n");
    let mut c = client("/");
    assert_eq!(second.run(BuiltinSub::Recv, &mut c), Action::Fail);
    let logged = second.host.logged.lock().unwrap();
    assert!(
        logged
            .iter()
            .any(|(_, m)| m.contains("Assert error in VPI_Call_Check")),
        "{logged:?}"
    );
}

/// varnish-modules' `header` and 7.1's `cookie` and `bodyaccess` take
/// REGEX arguments: literals compiled with the VCL, so a bad pattern or
/// a non-literal is refused with varnishd's texts.
#[test]
fn regex_arguments_are_compiled_with_the_vcl() {
    let refused = |call: &str| {
        let text = format!(
            "vcl 4.1;\nbackend s1 {{ .host = \"127.0.0.1\"; }}\nimport cookie;\nimport header;\nimport bodyaccess;\nsub vcl_recv {{ {call} }}\n"
        );
        let (sm, r) = compile_str("t.vcl", &text, &CompileOptions::default(), &registry());
        match r {
            Ok(_) => panic!("{call} compiled"),
            Err(d) => d.render(&sm),
        }
    };
    for call in [
        "cookie.filter_re(\"(\");",
        "cookie.keep_re(\"a\" + \"(\");",
        "set req.http.x = cookie.get_re(\"[\");",
        "set req.http.x = header.get(req.http.y, \"(\");",
        "header.remove(req.http.y, \"(\");",
        "header.regsub(req, \"(\", \"x\");",
        "if (bodyaccess.rematch_req_body(\"(\") == 1) { }",
    ] {
        let m = refused(call);
        assert!(m.contains("Regexp compilation error:"), "{call}: {m}");
    }
    let m = refused("cookie.filter_re(req.http.x);");
    assert!(
        m.contains("Expression has type STRING, expected REGEX"),
        "{m}"
    );
    let m = refused("header.remove(req.http.y, 1);");
    assert!(m.contains("Expression has type INT, expected REGEX"), "{m}");
    // Literals joined with `+` are one literal, as in vcc.
    let l = load(
        "import cookie;\nimport header;\nsub vcl_recv { cookie.parse(req.http.cookie); cookie.keep_re(\"^\" + \"b\"); set req.http.cookie = cookie.get_string(); set req.http.g = header.get(req.http.v, \"^tw\"); header.remove(req.http.v, \"^o\"); return (synth(200)); }\n",
    );
    let mut c = client("/")
        .with_header(REQ, "Cookie", "a=1; b=2; bb=3")
        .with_header(REQ, "v", "one")
        .with_header(REQ, "v", "two");
    l.run(BuiltinSub::Recv, &mut c);
    assert_eq!(get(&c, REQ, "cookie").as_deref(), Some("b=2; bb=3;"));
    assert_eq!(get(&c, REQ, "g").as_deref(), Some("two"));
    assert_eq!(get(&c, REQ, "v").as_deref(), Some("two"));
}
