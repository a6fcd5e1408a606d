//! End-to-end tests of the executor on hand-built programs (the form the
//! compiler lowers to): actions, headers, calls, returns from nested
//! blocks, runtime failures, ACL logging, hash/synthetic/ban effects.

use std::sync::Arc;

use lacquer_vcl::exec::acl::{Acl, AclEntry};
use lacquer_vcl::exec::code::*;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::regex::Regex;
use lacquer_vcl::exec::{Action, HttpWhich, LogKind, NoVmods, Scratch, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::types::{ArithOp, CmpOp};
use lacquer_vcl::vars::VarId;

const REQ: HttpWhich = HttpWhich::Req;

fn run(prog: &Program, m: BuiltinSub, ctx: &mut MockContext) -> Action {
    prog.run(m, ctx, &NoVmods, &mut Scratch::default())
}

fn program(recv: Vec<Stmt>) -> Program {
    let mut p = Program::default();
    let id = p.add_sub("vcl_recv", recv);
    p.set_method(BuiltinSub::Recv, id);
    p
}

fn ret(a: ReturnAction) -> Stmt {
    Stmt::Return(a)
}

fn if_(cond: Expr, then: Vec<Stmt>) -> Stmt {
    Stmt::If(vec![(cond, then.into())].into(), Box::new([]))
}

#[test]
fn regex_condition_picks_action() {
    let mut p = program(vec![]);
    let re = p.add_regex(Regex::new("^/static/").unwrap());
    let recv = p.add_sub(
        "vcl_recv",
        vec![
            if_(
                Expr::matches(Expr::StrVar(VarId::ReqUrl), re),
                vec![ret(ReturnAction::Pass(None))],
            ),
            ret(ReturnAction::Hash),
        ],
    );
    p.set_method(BuiltinSub::Recv, recv);
    let mut c = MockContext::new("GET", "/static/a.png");
    assert_eq!(
        run(&p, BuiltinSub::Recv, &mut c),
        Action::Pass { ttl: None }
    );
    let mut c = MockContext::new("GET", "/index.html");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Hash);
}

#[test]
fn set_unset_and_append_headers() {
    let p = program(vec![
        Stmt::Set(Target::header(REQ, "X-Foo"), Expr::str("y")),
        Stmt::Set(
            Target::header(REQ, "x-foo"),
            Expr::Concat(vec![Expr::header(REQ, "X-FOO"), Expr::str(",z")].into()),
        ),
        Stmt::Unset(Target::header(REQ, "Cookie")),
        Stmt::Set(
            Target::StrVar(VarId::ReqUrl),
            Expr::Concat(vec![Expr::StrVar(VarId::ReqUrl), Expr::str("?a=1")].into()),
        ),
        // A missing header is NULL: concatenated it contributes nothing.
        Stmt::Set(
            Target::header(REQ, "X-Empty"),
            Expr::Concat(vec![Expr::header(REQ, "missing")].into()),
        ),
        ret(ReturnAction::Hash),
    ]);
    let mut c = MockContext::new("GET", "/p").with_header(REQ, "Cookie", "a=b");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Hash);
    let h = c.http(REQ);
    assert_eq!(h.get("x-foo"), Some(&b"y,z"[..]));
    // As varnishd's VRT_SetHdr: the line set last is spelled as that `set`
    // spells it.
    assert_eq!(h.headers.iter().next().map(|(n, _)| n), Some(&b"x-foo"[..]));
    assert_eq!(h.get("cookie"), None);
    assert_eq!(h.get("x-empty"), Some(&b""[..]));
    assert_eq!(c.string(VarId::ReqUrl), Some("/p?a=1"));
}

#[test]
fn return_from_called_sub_inside_nested_blocks() {
    let mut p = Program::default();
    let inner = p.add_sub(
        "check",
        vec![if_(
            Expr::ToBool(Box::new(Expr::header(REQ, "x-block"))),
            vec![if_(
                Expr::Const(Value::Bool(true)),
                vec![ret(ReturnAction::Synth(
                    Expr::int(403),
                    Some(Expr::str("No")),
                ))],
            )],
        )],
    );
    let bare = p.add_sub(
        "mark",
        vec![
            Stmt::Set(Target::header(REQ, "x-mark"), Expr::str("1")),
            Stmt::ReturnSub,
            Stmt::Set(Target::header(REQ, "x-mark"), Expr::str("2")),
        ],
    );
    let recv = p.add_sub(
        "vcl_recv",
        vec![
            Stmt::Call(bare),
            Stmt::Call(inner),
            Stmt::Set(Target::header(REQ, "x-after"), Expr::str("yes")),
            ret(ReturnAction::Hash),
        ],
    );
    p.set_method(BuiltinSub::Recv, recv);

    let mut c = MockContext::new("GET", "/").with_header(REQ, "X-Block", "1");
    let a = run(&p, BuiltinSub::Recv, &mut c);
    assert_eq!(
        a,
        Action::Synth {
            status: 403,
            reason: Some("No".into())
        }
    );
    assert_eq!(c.http(REQ).get("x-after"), None);
    assert_eq!(c.http(REQ).get("x-mark"), Some(&b"1"[..]));

    let mut c = MockContext::new("GET", "/");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Hash);
    assert_eq!(c.http(REQ).get("x-after"), Some(&b"yes"[..]));
}

#[test]
fn synth_status_is_checked_like_vrt_synth() {
    // As varnishd 7.1: a status above 65535, a negative one or one whose
    // last three digits are under 100 fails the subroutine, with the
    // reason in the log (tests/vtc/lacquer/synth_status_checks.vtc).
    for (status, error) in [
        (70000, "return(synth()) status code (70000) > 65535"),
        (-1, "return(synth()) status code (-1) is negative"),
        (1099, "illegal return(synth()) status code (1099) (..0##)"),
    ] {
        let p = program(vec![ret(ReturnAction::Synth(Expr::int(status), None))]);
        let mut c = MockContext::new("GET", "/");
        assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Fail);
        assert_eq!(c.logs_of(LogKind::Error), [error]);
    }
    let p = program(vec![ret(ReturnAction::Synth(
        Expr::int(750),
        Some(Expr::header(REQ, "missing")),
    ))]);
    let mut c = MockContext::new("GET", "/");
    assert_eq!(
        run(&p, BuiltinSub::Recv, &mut c),
        Action::Synth {
            status: 750,
            reason: None
        }
    );
}

#[test]
fn runtime_errors_fail_and_log() {
    // INT overflow when converting to a string (i00001.vtc).
    let big = Expr::Arith(
        ArithOp::Mul,
        Box::new(Expr::int(999_999_999_999)),
        Box::new(Expr::int(10_000)),
    );
    let p = program(vec![
        Stmt::Set(Target::header(REQ, "x"), Expr::Concat(vec![big].into())),
        ret(ReturnAction::Hash),
    ]);
    let mut c = MockContext::new("GET", "/");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Fail);
    let errs = c.logs_of(LogKind::Error);
    assert_eq!(errs.len(), 1);
    assert!(errs[0].starts_with("INT overflow converting to string"));
    assert_eq!(c.http(REQ).get("x"), None);

    let div = Expr::Arith(ArithOp::Div, Box::new(Expr::int(1)), Box::new(Expr::int(0)));
    let p = program(vec![Stmt::Set(Target::Var(VarId::ReqTtl), div)]);
    let mut c = MockContext::new("GET", "/");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Fail);
    assert_eq!(c.logs_of(LogKind::Error), ["INT division by zero"]);

    // A setter rejecting a value is a failure too.
    let p = program(vec![Stmt::Set(
        Target::Var(VarId::RespStatus),
        Expr::int(-200),
    )]);
    let mut c = MockContext::new("GET", "/");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Fail);

    // return (fail("reason")) logs the reason.
    let p = program(vec![ret(ReturnAction::Fail(Some(Expr::str(
        "Forced failure",
    ))))]);
    let mut c = MockContext::new("GET", "/");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Fail);
    assert_eq!(c.logs_of(LogKind::Error), ["Forced failure"]);
}

#[test]
fn string_comparisons_follow_null_rules() {
    let eq_missing = Expr::str_cmp(CmpOp::Eq, Expr::header(REQ, "a"), Expr::header(REQ, "b"));
    let ne_missing = Expr::str_cmp(CmpOp::Ne, Expr::header(REQ, "a"), Expr::header(REQ, "b"));
    let method_get = Expr::str_cmp(CmpOp::Eq, Expr::StrVar(VarId::ReqMethod), Expr::str("GET"));
    let p = program(vec![
        Stmt::Set(
            Target::header(REQ, "eq"),
            Expr::Concat(vec![eq_missing].into()),
        ),
        Stmt::Set(
            Target::header(REQ, "ne"),
            Expr::Concat(vec![ne_missing].into()),
        ),
        Stmt::Set(
            Target::header(REQ, "get"),
            Expr::Concat(vec![method_get].into()),
        ),
        ret(ReturnAction::Hash),
    ]);
    let mut c = MockContext::new("GET", "/");
    run(&p, BuiltinSub::Recv, &mut c);
    let h = c.http(REQ);
    assert_eq!(h.get("eq"), Some(&b"false"[..]));
    assert_eq!(h.get("ne"), Some(&b"true"[..]));
    assert_eq!(h.get("get"), Some(&b"true"[..]));
}

#[test]
fn acl_match_logs_when_asked() {
    let mut p = program(vec![]);
    let acl = p.add_acl(Acl::new(
        "purgers",
        true,
        vec![
            AclEntry {
                addr: "10.0.0.0".parse().unwrap(),
                mask: 8,
                negated: false,
                log_text: "\"10.0.0.0\"/8".into(),
            },
            AclEntry {
                addr: "10.9.0.0".parse().unwrap(),
                mask: 16,
                negated: true,
                log_text: "\"10.9.0.0\"/16".into(),
            },
        ],
    ));
    let recv = p.add_sub(
        "vcl_recv",
        vec![
            if_(
                Expr::AclMatch {
                    ip: Box::new(Expr::Var(VarId::ClientIp)),
                    acl,
                    negate: false,
                },
                vec![ret(ReturnAction::Purge)],
            ),
            Stmt::Set(
                Target::header(REQ, "acl"),
                Expr::Concat(vec![Expr::Const(Value::Acl(acl))].into()),
            ),
            ret(ReturnAction::Hash),
        ],
    );
    p.set_method(BuiltinSub::Recv, recv);
    let client = |ip: &str| {
        let mut c = MockContext::new("PURGE", "/");
        c.vars.insert(
            VarId::ClientIp,
            Value::Ip(format!("{ip}:1234").parse().unwrap()),
        );
        c
    };
    let mut c = client("10.1.2.3");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Purge);
    assert_eq!(c.logs_of(LogKind::Acl), ["MATCH purgers \"10.0.0.0\"/8"]);
    let mut c = client("10.9.2.3");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Hash);
    assert_eq!(
        c.logs_of(LogKind::Acl),
        ["NEG_MATCH purgers \"10.9.0.0\"/16"]
    );
    assert_eq!(c.http(REQ).get("acl"), Some(&b"purgers"[..]));
    let mut c = client("192.168.0.1");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Hash);
    assert_eq!(c.logs_of(LogKind::Acl), ["NO_MATCH purgers"]);
    // No client address at all (varnishd's NULL IP): the task fails.
    let mut c = MockContext::new("PURGE", "/");
    c.vars.insert(VarId::ClientIp, Value::Null);
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Fail);
    assert_eq!(
        c.logs_of(LogKind::Error),
        ["Cannot match a null IP address"]
    );
}

#[test]
fn hash_synthetic_ban_effects() {
    let mut p = Program::default();
    let hash = p.add_sub(
        "vcl_hash",
        vec![
            Stmt::HashData(Expr::StrVar(VarId::ReqUrl)),
            Stmt::HashData(Expr::header(REQ, "host")),
            ret(ReturnAction::Lookup),
        ],
    );
    p.set_method(BuiltinSub::Hash, hash);
    let synth = p.add_sub(
        "vcl_synth",
        vec![
            Stmt::Synthetic(Expr::Concat(
                vec![Expr::str("Error "), Expr::Var(VarId::RespStatus)].into(),
            )),
            Stmt::Ban(Expr::str("req.url ~ /x")),
            ret(ReturnAction::Deliver),
        ],
    );
    p.set_method(BuiltinSub::Synth, synth);
    let mut c = MockContext::new("GET", "/a");
    assert_eq!(run(&p, BuiltinSub::Hash, &mut c), Action::Lookup);
    assert_eq!(c.hash, [Some(b"/a".to_vec()), None]);
    c.vars.insert(VarId::RespStatus, Value::Int(404));
    assert_eq!(run(&p, BuiltinSub::Synth, &mut c), Action::Deliver);
    assert_eq!(c.synthetic, b"Error 404");
    assert_eq!(c.bans, [b"req.url ~ /x".to_vec()]);
    c.ban_error = Some("Expected comparison operator.".into());
    assert_eq!(run(&p, BuiltinSub::Synth, &mut c), Action::Deliver);
    assert_eq!(
        c.logs_of(LogKind::Error),
        ["ban(): Expected comparison operator."]
    );
    // A method without code falls through to ok.
    assert_eq!(run(&p, BuiltinSub::Init, &mut c), Action::Ok);
}

#[test]
fn regsub_time_and_durations() {
    let mut p = program(vec![]);
    let re = p.add_regex(Regex::new("^www\\.").unwrap());
    let recv = p.add_sub(
        "vcl_recv",
        vec![
            Stmt::Set(
                Target::header(REQ, "host"),
                Expr::Regsub {
                    all: false,
                    subject: Box::new(Expr::header(REQ, "host")),
                    regex: re,
                    sub: Box::new(Expr::str("")),
                },
            ),
            Stmt::Set(
                Target::header(REQ, "x-expires"),
                Expr::Concat(
                    vec![Expr::Arith(
                        ArithOp::Add,
                        Box::new(Expr::Var(VarId::Now)),
                        Box::new(Expr::Const(Value::Duration(3600.0))),
                    )]
                    .into(),
                ),
            ),
            Stmt::Set(
                Target::header(REQ, "x-ttl"),
                Expr::Concat(
                    vec![Expr::Arith(
                        ArithOp::Mul,
                        Box::new(Expr::Const(Value::Duration(1.5))),
                        Box::new(Expr::int(2)),
                    )]
                    .into(),
                ),
            ),
            Stmt::Set(
                Target::header(REQ, "x-up"),
                Expr::Case {
                    upper: true,
                    inner: Box::new(Expr::header(REQ, "host")),
                },
            ),
            ret(ReturnAction::Hash),
        ],
    );
    p.set_method(BuiltinSub::Recv, recv);
    let mut c = MockContext::new("GET", "/").with_header(REQ, "Host", "www.example.com");
    c.now = 784_111_777.0;
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Hash);
    let h = c.http(REQ);
    assert_eq!(h.get("host"), Some(&b"example.com"[..]));
    assert_eq!(
        h.get("x-expires"),
        Some(&b"Sun, 06 Nov 1994 09:49:37 GMT"[..])
    );
    assert_eq!(h.get("x-ttl"), Some(&b"3.000"[..]));
    assert_eq!(h.get("x-up"), Some(&b"EXAMPLE.COM"[..]));
}

#[test]
fn vcl_label_and_pass_ttl() {
    let mut p = Program::default();
    let br = p.add_sub(
        "vcl_backend_response",
        vec![ret(ReturnAction::Pass(Some(Expr::Const(Value::Duration(
            120.0,
        )))))],
    );
    p.set_method(BuiltinSub::BackendResponse, br);
    let recv = p.add_sub("vcl_recv", vec![ret(ReturnAction::Vcl(Arc::from("other")))]);
    p.set_method(BuiltinSub::Recv, recv);
    let mut c = MockContext::new("GET", "/");
    assert_eq!(
        run(&p, BuiltinSub::BackendResponse, &mut c),
        Action::Pass { ttl: Some(120.0) }
    );
    let a = run(&p, BuiltinSub::Recv, &mut c);
    assert_eq!(a, Action::Vcl(Arc::from("other")));
    assert_eq!(a.kind().name(), "vcl");
}

#[test]
fn dynamic_call_recursion_fails() {
    let mut p = Program::default();
    // sub 0 calls the SUB value 0 (itself) dynamically.
    let me = p.add_sub(
        "recursive",
        vec![Stmt::CallDynamic(Expr::Const(Value::Sub(0)))],
    );
    let other = p.add_sub(
        "other",
        vec![Stmt::Set(Target::header(REQ, "x-other"), Expr::str("1"))],
    );
    let recv = p.add_sub(
        "vcl_recv",
        vec![
            Stmt::CallDynamic(Expr::Const(Value::Sub(other))),
            Stmt::Call(me),
            ret(ReturnAction::Hash),
        ],
    );
    p.set_method(BuiltinSub::Recv, recv);
    let mut c = MockContext::new("GET", "/");
    assert_eq!(run(&p, BuiltinSub::Recv, &mut c), Action::Fail);
    assert_eq!(c.http(REQ).get("x-other"), Some(&b"1"[..]));
    assert_eq!(
        c.logs_of(LogKind::Error),
        ["Recursive call to \"sub recursive{}\""]
    );
}

#[test]
fn program_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    let mut p = program(vec![ret(ReturnAction::Hash)]);
    p.add_regex(Regex::new("^/(?!admin)").unwrap());
    assert_send_sync(&p);
    let p = Arc::new(p);
    let handle = {
        let p = Arc::clone(&p);
        std::thread::spawn(move || {
            let mut c = MockContext::new("GET", "/");
            run(&p, BuiltinSub::Recv, &mut c)
        })
    };
    assert_eq!(handle.join().unwrap(), Action::Hash);
}
