//! Calls into vmods are checked against their declarations: argument
//! matching (positional, named, defaults, optional, ENUM, PRIV), return
//! types, `$Restrict`, objects and methods. Messages follow Varnish 7.1
//! (checked with `varnishd -C` using vmod_std where it has an equivalent).

use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::ir::{CallArg, ExprKind, Program, Stmt, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vmod::{PrivKind, VmodRegistry};

const DEMO: &str = r#"
$Module demo
$Function STRING up(STRANDS s)
$Function VOID log(STRANDS s)
$Function VOID collect(HEADER hdr, STRING sep=", ")
$Function INT pick(ENUM { FIRST, LAST } which = FIRST, INT n, PRIV_TASK)
$Function DURATION dur([STRING s], [DURATION fallback])
$Function INT r2i(REAL r, INT fallback)
$Function VOID only_recv()
$Restrict vcl_recv
$Object pool(BOOL sticky=0)
$Method VOID .add(BACKEND)
$Method BACKEND .get()
"#;

fn registry() -> VmodRegistry {
    let mut r = VmodRegistry::new();
    r.add_text(DEMO).expect("demo declaration parses");
    r
}

fn compile(body: &str) -> Result<std::sync::Arc<Program>, String> {
    let text = format!("vcl 4.1;\nimport demo;\nbackend b {{ .host = \"127.0.0.1\"; }}\n{body}\n");
    let (sm, r) = compile_str("t.vcl", &text, &CompileOptions::default(), &registry());
    r.map_err(|d| d.render(&sm))
}

fn err_of(body: &str) -> String {
    match compile(body) {
        Ok(_) => panic!("should not compile: {body}"),
        Err(e) => e,
    }
}

#[test]
fn unknown_vmod_is_named() {
    let text = "vcl 4.1;\nimport nosuch;\nbackend b { .host = \"127.0.0.1\"; }\n";
    let (sm, r) = compile_str("t.vcl", text, &CompileOptions::default(), &registry());
    let e = r.expect_err("unknown vmod").render(&sm);
    assert!(e.contains("Could not find VMOD nosuch"), "{e}");
}

#[test]
fn argument_errors_use_varnish_messages() {
    for (body, want) in [
        (
            r#"sub vcl_recv { demo.log(1, 2); }"#,
            "Expected ')' got '2'",
        ),
        (
            r#"sub vcl_recv { demo.collect(req.url); }"#,
            "Expression has type STRING, expected HEADER",
        ),
        (
            r#"sub vcl_recv { set req.http.x = demo.dur(foo="1"); }"#,
            "Unknown argument 'foo'",
        ),
        (
            r#"sub vcl_recv { set req.http.x = demo.dur(s="1", s="2"); }"#,
            "Argument 's' already used",
        ),
        (
            r#"sub vcl_recv { set req.http.x = demo.r2i(1.5); }"#,
            "Argument 'fallback' missing",
        ),
        (r#"sub vcl_recv { demo.log(); }"#, "Argument 's' missing"),
        (
            r#"sub vcl_recv { set req.http.x = demo.log("a"); }"#,
            "Function returns VOID",
        ),
        (
            r#"sub vcl_recv { set req.http.x = demo.pick(MIDDLE, 1); }"#,
            "Wrong enum value.  Expected one of:",
        ),
        (
            r#"sub vcl_recv { set req.http.x = demo.nope(); }"#,
            "Symbol not found: 'demo.nope'",
        ),
        (
            r#"sub vcl_recv { set req.http.x = demo; }"#,
            "Symbol 'demo' type (vmod) can not be used in expression.",
        ),
        (
            r#"sub vcl_deliver { demo.only_recv(); }"#,
            "Not available in subroutine 'vcl_deliver'.",
        ),
        (
            r#"sub vcl_recv { new p = demo.pool(); }"#,
            "Not a valid action in subroutine 'vcl_recv'.",
        ),
        (
            r#"sub vcl_init { new p = demo.nopool(); }"#,
            "Symbol not found: 'demo.nopool'",
        ),
    ] {
        let e = err_of(body);
        assert!(e.contains(want), "{body}\nwant {want:?}\ngot {e}");
    }
}

fn recv(p: &Program) -> &[Stmt] {
    &p.method(BuiltinSub::Recv).body
}

#[test]
fn arguments_are_matched_to_declarations() {
    let p = compile(
        r#"sub vcl_recv {
            set req.http.a = demo.pick(n = 3);
            set req.http.b = demo.dur(fallback = 1s);
            demo.collect(req.http.X-Foo);
        }"#,
    )
    .unwrap();
    let body = recv(p.as_ref());
    let Stmt::Set { value, .. } = &body[0] else {
        panic!("{:?}", body[0])
    };
    // INT result converted to the header's string.
    let ExprKind::ToString(inner) = &value.kind else {
        panic!("{value:?}")
    };
    let ExprKind::VmodCall { vmod, func, args } = &inner.kind else {
        panic!("{inner:?}")
    };
    assert_eq!(p.vmods[*vmod].name, "demo");
    assert_eq!(p.vmods[*vmod].decl.functions[*func].name, "pick");
    assert!(matches!(&args[0], CallArg::Enum(e) if &**e == "FIRST"));
    assert!(
        matches!(&args[1], CallArg::Value(v) if matches!(v.kind, ExprKind::Const(Value::Int(3))))
    );
    assert!(matches!(&args[2], CallArg::Priv(PrivKind::Task)));

    let Stmt::Set { value, .. } = &body[1] else {
        panic!()
    };
    let ExprKind::ToString(inner) = &value.kind else {
        panic!("{value:?}")
    };
    let ExprKind::VmodCall { args, .. } = &inner.kind else {
        panic!()
    };
    assert!(matches!(args[0], CallArg::Absent));
    assert!(
        matches!(&args[1], CallArg::Value(v) if matches!(v.kind, ExprKind::Const(Value::Duration(d)) if d == 1.0))
    );

    let Stmt::Eval(call) = &body[2] else { panic!() };
    let ExprKind::VmodCall { args, .. } = &call.kind else {
        panic!()
    };
    // HEADER argument stays a variable reference; the default separator
    // is filled in.
    assert!(matches!(&args[0], CallArg::Value(v) if matches!(v.kind, ExprKind::Var(_))));
    assert!(
        matches!(&args[1], CallArg::Value(v) if matches!(&v.kind, ExprKind::Const(Value::Str(s)) if &**s == ", "))
    );
}

#[test]
fn objects_and_methods() {
    let p = compile(
        r#"sub vcl_init { new p = demo.pool(sticky = true); p.add(b); }
           sub vcl_recv { set req.backend_hint = p.get(); }"#,
    )
    .unwrap();
    assert_eq!(p.instances.len(), 1);
    assert_eq!(p.instances[0].name, "p");
    let init = &p.method(BuiltinSub::Init).body;
    assert!(matches!(&init[0], Stmt::New { instance: 0, args } if args.len() == 1));
    assert!(
        matches!(&init[1], Stmt::Eval(e) if matches!(e.kind, ExprKind::MethodCall { instance: 0, method: 0, .. }))
    );
    let recv = recv(p.as_ref());
    assert!(
        matches!(&recv[0], Stmt::Set { value, .. } if matches!(value.kind, ExprKind::MethodCall { method: 1, .. }))
    );
    // Objects have no string form (unlike ACLs and probes).
    let e = err_of("sub vcl_init { new p = demo.pool(); } sub vcl_recv { set req.http.x = p; }");
    assert!(e.contains("Cannot convert demo.pool to STRING."), "{e}");
    let e =
        err_of("sub vcl_init { new p = demo.pool(); } sub vcl_recv { set req.backend_hint = p; }");
    assert!(
        e.contains("Expression has type demo.pool, expected BACKEND"),
        "{e}"
    );
    let e = err_of("sub vcl_init { new p = demo.pool(); new p = demo.pool(); }");
    assert!(e.contains("Instance 'p' redefined."), "{e}");
    let e = err_of("sub vcl_init { new p = demo.pool(); p.nope(); }");
    assert!(
        e.contains("Unknown property 'nope' for type demo.pool"),
        "{e}"
    );
}

/// vcc reads the file once: a vmod is known from its `import` on, and its
/// names (like every symbol) are found without regard to case.
#[test]
fn imports_are_known_from_where_they_stand_and_names_ignore_case() {
    for body in [
        "sub vcl_recv { demo.log(\"a\"); }\nimport demo;",
        "sub vcl_init { new p = demo.pool(); }\nimport demo;",
    ] {
        let text = format!("vcl 4.1;\nbackend b {{ .host = \"127.0.0.1\"; }}\n{body}\n");
        let (sm, r) = compile_str("t.vcl", &text, &CompileOptions::default(), &registry());
        let e = r.expect_err(body).render(&sm);
        assert!(e.contains("Symbol not found: 'demo."), "{body}: {e}");
    }
    compile("sub vcl_init { new P = DEMO.POOL(); } sub vcl_recv { DEMO.Log(\"a\"); p.ADD(b); }")
        .unwrap_or_else(|e| panic!("{e}"));
}

/// vcc types an object by its class, which has no comparison operators.
#[test]
fn objects_cannot_be_compared() {
    let e = err_of("sub vcl_init { new p = demo.pool(); } sub vcl_recv { if (p == p) { } }");
    assert!(e.contains("Operator == not possible on demo.pool"), "{e}");
}
