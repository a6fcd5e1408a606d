//! End-to-end: VCL source compiled by the compiler (with builtin.vcl
//! appended), lowered for the executor and run against the mock context.

use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::exec::code::Program;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Action, HttpWhich, LogKind, NoVmods, Scratch, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;
use lacquer_vcl::vmod::VmodRegistry;

const REQ: HttpWhich = HttpWhich::Req;
const RESP: HttpWhich = HttpWhich::Resp;

fn build(vcl: &str) -> Program {
    let text = format!("vcl 4.1;\nbackend default {{ .host = \"127.0.0.1\"; }}\n{vcl}");
    let opts = CompileOptions {
        err_unref: false,
        ..CompileOptions::default()
    };
    let (sm, r) = compile_str("test.vcl", &text, &opts, &VmodRegistry::new());
    let ir = r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
    Program::from_ir(&ir).unwrap()
}

fn run(p: &Program, m: BuiltinSub, c: &mut MockContext) -> Action {
    p.run(m, c, &NoVmods, &mut Scratch::default())
}

fn get(c: &MockContext, w: HttpWhich, name: &str) -> Option<String> {
    c.http(w)
        .get(name)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

fn client(method: &str, url: &str) -> MockContext {
    let mut c = MockContext::new(method, url).with_header(REQ, "Host", "Example.COM");
    c.vars.insert(VarId::ReqEsiLevel, Value::Int(0));
    c
}

#[test]
fn builtin_only() {
    let p = build("");
    let mut c = client("GET", "/");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Hash);
    // vcl_req_host lowercases the host.
    assert_eq!(get(&c, REQ, "host").as_deref(), Some("example.com"));
    assert_eq!(run(&p, BuiltinSub::Hash, &mut c), Action::Lookup);
    assert_eq!(c.hash, [Some(b"/".to_vec()), Some(b"example.com".to_vec())]);

    let mut c = client("POST", "/");
    assert_eq!(
        run(&p, BuiltinSub::Recv, &mut c),
        Action::Pass { ttl: None }
    );
    let mut c = client("BREW", "/");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Pipe);
    let mut c = client("GET", "/").with_header(REQ, "Cookie", "a=1");
    assert_eq!(
        run(&p, BuiltinSub::Recv, &mut c),
        Action::Pass { ttl: None }
    );

    // HTTP/1.1 without Host: synth(400).
    let mut c = MockContext::new("GET", "/");
    c.vars.insert(VarId::ReqEsiLevel, Value::Int(0));
    assert_eq!(
        run(&p, BuiltinSub::Recv, &mut c),
        Action::Synth {
            status: 400,
            reason: None
        }
    );
}

#[test]
fn user_code_runs_before_builtin() {
    let p = build(
        r#"
        acl purgers { "127.0.0.1"; "10.0.0.0"/8; }
        sub normalize {
            set req.url = regsub(req.url, "\?$", "");
            if (req.url ~ "^/static/") {
                unset req.http.cookie;
                return;
            }
        }
        sub vcl_recv {
            call normalize;
            if (req.method == "PURGE") {
                if (client.ip !~ purgers) {
                    return (synth(405, "Not allowed " + client.ip));
                }
                return (purge);
            }
            set req.http.X-Count = 1 + 2 * 3;
            set req.http.X-Url = req.url;
            set req.http.X-Url += "!";
        }
        sub vcl_deliver {
            set resp.http.X-Age = obj.hits > 0;
            if (resp.status >= 500) {
                return (restart);
            }
        }
        "#,
    );
    let mut c = client("GET", "/static/a.css?").with_header(REQ, "Cookie", "x=1");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Hash);
    assert_eq!(c.string(VarId::ReqUrl), Some("/static/a.css"));
    assert_eq!(get(&c, REQ, "cookie"), None);
    assert_eq!(get(&c, REQ, "x-count").as_deref(), Some("7"));
    assert_eq!(get(&c, REQ, "x-url").as_deref(), Some("/static/a.css!"));

    let mut c = client("PURGE", "/");
    c.vars.insert(
        VarId::ClientIp,
        Value::Ip("192.0.2.1:5555".parse().unwrap()),
    );
    assert_eq!(
        run(&p, BuiltinSub::Recv, &mut c),
        Action::Synth {
            status: 405,
            reason: Some("Not allowed 192.0.2.1".into())
        }
    );
    let mut c = client("PURGE", "/");
    c.vars
        .insert(VarId::ClientIp, Value::Ip("10.1.1.1:5555".parse().unwrap()));
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Purge);

    let mut c = client("GET", "/");
    c.vars.insert(VarId::ObjHits, Value::Int(3));
    c.vars.insert(VarId::RespStatus, Value::Int(503));
    assert_eq!(run(&p, BuiltinSub::Deliver, &mut c), Action::Restart);
    assert_eq!(get(&c, RESP, "x-age").as_deref(), Some("true"));
    c.vars.insert(VarId::RespStatus, Value::Int(200));
    assert_eq!(run(&p, BuiltinSub::Deliver, &mut c), Action::Deliver);
}

#[test]
fn runtime_failure_from_vcl() {
    let p = build(
        r#"
        sub vcl_deliver {
            set resp.http.foo = obj.ttl * 10000000000;
        }
        "#,
    );
    let mut c = client("GET", "/");
    c.vars.insert(VarId::ObjTtl, Value::Duration(120.0));
    assert_eq!(run(&p, BuiltinSub::Deliver, &mut c), Action::Fail);
    let errs = c.logs_of(LogKind::Error);
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with("REAL overflow converting to string"),
        "{errs:?}"
    );
}

#[test]
fn backend_response_and_ttl_math() {
    let p = build(
        r#"
        sub vcl_backend_response {
            if (beresp.http.cache-control ~ "private") {
                set beresp.uncacheable = true;
                set beresp.ttl = 120s;
                return (pass(10s));
            }
            set beresp.ttl = 1h;
            set beresp.ttl += 30m;
            set beresp.grace = beresp.ttl / 2;
            set beresp.http.X-TTL = beresp.ttl;
        }
        "#,
    );
    let mut c =
        MockContext::new("GET", "/").with_header(HttpWhich::Beresp, "Cache-Control", "max-age=60");
    let a = run(&p, BuiltinSub::BackendResponse, &mut c);
    assert_eq!(a, Action::Deliver);
    assert_eq!(
        c.vars.get(&VarId::BerespTtl),
        Some(&Value::Duration(5400.0))
    );
    assert_eq!(
        c.vars.get(&VarId::BerespGrace),
        Some(&Value::Duration(2700.0))
    );
    assert_eq!(
        get(&c, HttpWhich::Beresp, "x-ttl").as_deref(),
        Some("5400.000")
    );
    let mut c =
        MockContext::new("GET", "/").with_header(HttpWhich::Beresp, "Cache-Control", "private");
    assert_eq!(
        run(&p, BuiltinSub::BackendResponse, &mut c),
        Action::Pass { ttl: Some(10.0) }
    );
}

#[test]
fn pcre_quoting_is_translated() {
    let p = build(
        r#"
        sub vcl_recv {
            if (req.url ~ "^\Q/a.b?\E$") {
                return (synth(200, "quoted"));
            }
            return (hash);
        }
        "#,
    );
    let mut c = client("GET", "/a.b?");
    assert_eq!(
        run(&p, BuiltinSub::Recv, &mut c),
        Action::Synth {
            status: 200,
            reason: Some("quoted".into())
        }
    );
    let mut c = client("GET", "/aXb?");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Hash);
}

/// What the executor charges to the task's workspace, as varnishd 7.1
/// allocates: a printed number (with its NUL, rounded to 8) and a regsub
/// result; an unchanged regsub subject and plain strings take nothing. A
/// printed number that does not fit is NULL; a regsub result that does not
/// fit fails the task.
#[test]
fn strings_built_are_charged_to_the_workspace() {
    use lacquer_vcl::exec::Workspace as _;
    use lacquer_vcl::exec::mock::MockWs;
    let p = build(
        r#"sub vcl_deliver {
            set resp.http.n = resp.status;
            set resp.http.same = regsub(req.url, "nomatch", "x");
            set resp.http.s = "plain" + req.url;
            set resp.http.r = regsub(req.url, "^/", "/abc");
        }"#,
    );
    let mut c = client("GET", "/u");
    c.vars.insert(VarId::RespStatus, Value::Int(12345679));
    c.ws = Some(MockWs::new(1000));
    assert_eq!(run(&p, BuiltinSub::Deliver, &mut c), Action::Deliver);
    // "12345679" + NUL -> 16; "/abcu" + NUL -> 8.
    let ws = c.ws.unwrap();
    assert_eq!(ws.used, 24);
    assert!(!ws.overflowed());
    assert_eq!(get(&c, RESP, "r").as_deref(), Some("/abcu"));

    let mut c = client("GET", "/u");
    c.vars.insert(VarId::RespStatus, Value::Int(12345679));
    c.ws = Some(MockWs::new(4));
    assert_eq!(run(&p, BuiltinSub::Deliver, &mut c), Action::Fail);
    assert_eq!(get(&c, RESP, "n").as_deref(), Some(""), "NULL number");
    assert!(c.ws.unwrap().overflowed());
    assert_eq!(
        c.logs_of(LogKind::Error),
        ["regsub: Out of workspace".to_string()]
    );
}
