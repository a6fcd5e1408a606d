//! Vmod dispatch end to end: a VCL importing a declared vmod is compiled,
//! lowered and run with a test `Vmods` implementation that records what it
//! was given (positions, absent optional arguments, ENUMs, HEADER
//! references) and answers from the context.

use std::cell::RefCell;

use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::exec::code::Program;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{
    Action, Context, FuncRef, HttpWhich, LogKind, Scratch, Value, VclRuntime, VmodArg, Vmods,
};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vmod::VmodRegistry;

const DECL: &str = "\
$Module t
$Function STRING upper(STRING s)
$Function VOID log(STRING s)
$Function STRING pick(ENUM { FIRST, LAST } which = FIRST, [STRING fallback], PRIV_TASK)
$Function STRING hdr(HEADER h)
$Object counter(INT start = 0)
$Method INT .next()
";

#[derive(Default)]
struct TestVmods {
    calls: RefCell<Vec<String>>,
}

fn show(args: &[VmodArg]) -> String {
    args.iter()
        .map(|a| match a {
            None => "absent".to_string(),
            Some(Value::Str(s)) => String::from_utf8_lossy(s).into_owned(),
            Some(Value::Enum(e)) => format!("enum:{e}"),
            Some(Value::Header(w, h)) => format!("header:{}.{}", w.name(), h.name),
            Some(v) => format!("{v:?}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl Vmods for TestVmods {
    fn call(
        &self,
        ctx: &mut dyn Context,
        _: &mut dyn VclRuntime,
        f: FuncRef,
        args: &[VmodArg],
    ) -> Result<Value, String> {
        self.calls
            .borrow_mut()
            .push(format!("{}.{}({})", f.vmod, f.func, show(args)));
        match f.func {
            0 => match &args[0] {
                Some(Value::Str(s)) => Ok(Value::str(s.to_ascii_uppercase())),
                _ => Ok(Value::Null),
            },
            1 => {
                if let Some(Value::Str(s)) = &args[0] {
                    ctx.log(LogKind::Log, s);
                }
                Ok(Value::Null)
            }
            2 => Ok(Value::str("picked")),
            3 => match &args[0] {
                Some(Value::Header(w, h)) => Ok(ctx
                    .header(*w, h)
                    .map_or(Value::Null, |v| Value::str(v.to_vec()))),
                _ => Err("hdr() needs a HEADER".into()),
            },
            _ => Err(format!("no function {}", f.func)),
        }
    }

    fn construct(
        &self,
        _: &mut dyn Context,
        _: &mut dyn VclRuntime,
        class: FuncRef,
        instance: u32,
        name: &str,
        args: &[VmodArg],
    ) -> Result<(), String> {
        self.calls.borrow_mut().push(format!(
            "new {name}#{instance}={}.{}({})",
            class.vmod,
            class.func,
            show(args)
        ));
        Ok(())
    }

    fn method(
        &self,
        _: &mut dyn Context,
        _: &mut dyn VclRuntime,
        instance: u32,
        method: u32,
        _: &[VmodArg],
    ) -> Result<Value, String> {
        Ok(Value::Int(i64::from(instance * 100 + method + 7)))
    }
}

fn build(vcl: &str) -> Program {
    let mut reg = VmodRegistry::new();
    reg.add_text(DECL).unwrap();
    let text = format!("vcl 4.1;\nimport t;\nbackend default {{ .host = \"127.0.0.1\"; }}\n{vcl}");
    let opts = CompileOptions {
        err_unref: false,
        ..CompileOptions::default()
    };
    let (sm, r) = compile_str("vmod.vcl", &text, &opts, &reg);
    let ir = r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
    Program::from_ir(&ir).unwrap()
}

#[test]
fn functions_objects_and_arguments() {
    let p = build(
        r#"
        sub vcl_init {
            new c = t.counter(5);
        }
        sub vcl_recv {
            set req.http.up = t.upper(req.url + "!");
            t.log("hello " + req.http.up);
            set req.http.p1 = t.pick();
            set req.http.p2 = t.pick(LAST, "fb");
            set req.http.h = t.hdr(req.http.Host);
            set req.http.n = c.next();
            return (hash);
        }
        "#,
    );
    let vmods = TestVmods::default();
    let mut s = Scratch::default();
    let mut c = MockContext::new("GET", "/x").with_header(HttpWhich::Req, "Host", "h.example");
    assert_eq!(p.run(BuiltinSub::Init, &mut c, &vmods, &mut s), Action::Ok);
    assert_eq!(
        p.run(BuiltinSub::Recv, &mut c, &vmods, &mut s),
        Action::Hash
    );
    let req = c.http(HttpWhich::Req);
    assert_eq!(req.get("up"), Some(&b"/X!"[..]));
    assert_eq!(req.get("p1"), Some(&b"picked"[..]));
    assert_eq!(req.get("h"), Some(&b"h.example"[..]));
    assert_eq!(req.get("n"), Some(&b"7"[..]));
    assert_eq!(c.logs_of(LogKind::Log), ["hello /X!"]);
    let calls = vmods.calls.borrow();
    assert_eq!(
        *calls,
        [
            "new c#0=0.0(Int(5))",
            "0.0(/x!)",
            "0.1(hello /X!)",
            "0.2(enum:FIRST,absent)",
            "0.2(enum:LAST,fb)",
            "0.3(header:req.Host)",
        ]
    );
}

#[test]
fn vmod_error_fails_the_task() {
    let p = build(
        r#"
        sub vcl_recv {
            set req.http.x = t.hdr(req.http.missing) + "";
            return (hash);
        }
        "#,
    );
    struct Failing;
    impl Vmods for Failing {
        fn call(
            &self,
            _: &mut dyn Context,
            _: &mut dyn VclRuntime,
            _: FuncRef,
            _: &[VmodArg],
        ) -> Result<Value, String> {
            Err("t.hdr(): boom".into())
        }
        fn construct(
            &self,
            _: &mut dyn Context,
            _: &mut dyn VclRuntime,
            _: FuncRef,
            _: u32,
            _: &str,
            _: &[VmodArg],
        ) -> Result<(), String> {
            Ok(())
        }
        fn method(
            &self,
            _: &mut dyn Context,
            _: &mut dyn VclRuntime,
            _: u32,
            _: u32,
            _: &[VmodArg],
        ) -> Result<Value, String> {
            Ok(Value::Null)
        }
    }
    let mut c = MockContext::new("GET", "/");
    let a = p.run(BuiltinSub::Recv, &mut c, &Failing, &mut Scratch::default());
    assert_eq!(a, Action::Fail);
    assert_eq!(c.logs_of(LogKind::Error), ["t.hdr(): boom"]);
}
