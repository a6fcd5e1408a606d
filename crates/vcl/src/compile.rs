//! The compiler's entry point: source text in, [`Program`] out.
//!
//! Parses the user's VCL together with the built-in VCL (`builtin.vcl`,
//! appended after it so that same-name subroutines concatenate), checks it
//! and lowers it. Both parse and semantic errors come back as
//! [`Diagnostics`], rendered against the returned [`SourceMap`].

use std::sync::Arc;

use crate::check;
pub use crate::check::CompileOptions;
use crate::diag::Diagnostics;
use crate::ir::Program;
use crate::parser::{self, ParseOptions};
use crate::source::{FileId, FileKind, SourceMap};
use crate::vmod::VmodRegistry;

/// The text of the built-in VCL.
pub const BUILTIN_VCL: &str = include_str!("builtin.vcl");

/// Name under which the built-in VCL appears in messages.
pub const BUILTIN_NAME: &str = "<builtin>";

/// Compiles the VCL file `main` already added to `sm`. Includes are read
/// from the file system through `parse_opts` (its `builtin` field is
/// ignored: the built-in VCL is always appended).
pub fn compile_file(
    sm: &mut SourceMap,
    main: FileId,
    parse_opts: &ParseOptions<'_>,
    opts: &CompileOptions,
    vmods: &VmodRegistry,
) -> Result<Arc<Program>, Diagnostics> {
    let builtin = sm.add(BUILTIN_NAME, BUILTIN_VCL, FileKind::Builtin);
    let storages = opts.storages.clone();
    let set_type = move |target: &str| set_target_type(target, &storages);
    let arg_type =
        |callee: &str, pos: usize, name: Option<&str>| vmod_arg_type(vmods, callee, pos, name);
    let popts = ParseOptions {
        vcl_path: parse_opts.vcl_path.clone(),
        unsafe_path: parse_opts.unsafe_path,
        builtin: Some(builtin),
        loader: parse_opts.loader,
        set_type: Some(&set_type),
        arg_type: Some(&arg_type),
    };
    let (vcl, diags) = parser::parse_with(sm, main, &popts);
    if diags.has_errors() {
        return Err(diags);
    }
    check::check(&vcl, sm, opts, vmods).map(Arc::new)
}

/// The type vcc expects on the right of `set TARGET = ...`, for the
/// parser's "Unknown token 'x' when looking for TYPE" message.
fn set_target_type(target: &str, storages: &[String]) -> Option<&'static str> {
    use crate::types::Type;
    use crate::vars::{VarLookup, VclVersion, lookup};
    let def = [VclVersion::V41, VclVersion::V40]
        .into_iter()
        .find_map(|v| match lookup(target, v, storages) {
            VarLookup::Plain(d) | VarLookup::Header(d, _) | VarLookup::Storage(d, _) => Some(d),
            _ => None,
        })?;
    Some(match def.ty {
        Type::Header => "STRING",
        t => t.name(),
    })
}

/// The type vcc parses a vmod call's argument as (see
/// [`parser::ArgTypeFn`]): the declared argument by name, else the
/// `pos`-th one VCL writes (private arguments are not written). A STRANDS
/// argument is read as a STRING expression, an ENUM one is `"ENUM"` (a
/// bare word, not an expression). `None` when the registry has no such
/// callee.
fn vmod_arg_type(
    vmods: &VmodRegistry,
    callee: &str,
    pos: usize,
    name: Option<&str>,
) -> Option<Option<&'static str>> {
    use crate::types::Type;
    use crate::vmod::ArgType;
    let mut parts = callee.split('.');
    let module = vmods.get(parts.next()?)?;
    let (second, third) = (parts.next()?, parts.next());
    let func = match third {
        None => match module.function(second) {
            Some((_, f)) => f,
            None => &module.object(second)?.1.ctor,
        },
        Some(method) => module.object(second)?.1.method(method)?.1,
    };
    let mut written = func
        .args
        .iter()
        .filter(|a| !matches!(a.ty, ArgType::Priv(_)));
    let arg = match name {
        Some(n) => written.find(|a| a.name.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(n))),
        None => written.nth(pos),
    };
    Some(arg.and_then(|a| match &a.ty {
        ArgType::Value(Type::Strands) => Some("STRING"),
        ArgType::Value(t) => Some(t.name()),
        ArgType::Enum(_) => Some("ENUM"),
        ArgType::Priv(_) => None,
    }))
}

/// Compiles VCL source text named `name` (e.g. `<vcl.inline>` or a path).
/// Returns the source map with the result so diagnostics can be rendered
/// (`diags.render(&sm)`).
pub fn compile_str(
    name: &str,
    text: &str,
    opts: &CompileOptions,
    vmods: &VmodRegistry,
) -> (SourceMap, Result<Arc<Program>, Diagnostics>) {
    let mut sm = SourceMap::new();
    let main = sm.add(name, text, FileKind::Main);
    let r = compile_file(&mut sm, main, &ParseOptions::default(), opts, vmods);
    (sm, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_targets_name_their_type() {
        let st = CompileOptions::default().storages;
        assert_eq!(set_target_type("req.http.x", &st), Some("STRING"));
        assert_eq!(set_target_type("resp.status", &st), Some("INT"));
        assert_eq!(set_target_type("resp.body", &st), Some("BODY"));
        assert_eq!(set_target_type("req.esi", &st), Some("BOOL"));
        assert_eq!(set_target_type("nope", &st), None);
        let (sm, r) = compile_str(
            "t.vcl",
            "vcl 4.1; backend b { .host = \"127.0.0.1\"; } sub vcl_deliver { set resp.status = --200; }",
            &CompileOptions::default(),
            &VmodRegistry::new(),
        );
        let e = r.expect_err("bad token").render(&sm);
        assert!(e.contains("Unknown token '--' when looking for INT"), "{e}");
        // Inside parentheses and right of `+`/`-` vcc looks for the type it
        // looked for before, or the left operand's (checked against
        // varnishd 7.1.1, tests/diff/vcl-probes/lexical.vcls).
        for (body, want) in [
            (
                "set req.http.x = ();",
                "Unknown token ')' when looking for STRING",
            ),
            (
                "set req.ttl = (;",
                "Unknown token ';' when looking for DURATION",
            ),
            (
                "set req.http.x = 1 + + 1;",
                "Unknown token '+' when looking for INT",
            ),
            (
                "set req.http.x = 1.5 - ;",
                "Unknown token ';' when looking for REAL",
            ),
            (
                "set req.ttl = 1s + ;",
                "Unknown token ';' when looking for DURATION",
            ),
            (
                "set req.http.x = (1 + );",
                "Unknown token ')' when looking for INT",
            ),
        ] {
            let text = format!(
                "vcl 4.1; backend b {{ .host = \"127.0.0.1\"; }} sub vcl_recv {{ {body} }}"
            );
            let (sm, r) = compile_str(
                "t.vcl",
                &text,
                &CompileOptions::default(),
                &VmodRegistry::new(),
            );
            let e = r.expect_err(body).render(&sm);
            assert!(e.contains(want), "{body}: {e}");
        }
    }

    /// Messages vcc words from what it is parsing, each checked against
    /// varnishd 7.1.1 (found by tests/diff/vclmutate.py).
    #[test]
    fn messages_follow_the_context_vcc_is_in() {
        let mut vmods = VmodRegistry::new();
        vmods
            .add_text(
                "$Module m\n$Function VOID log(STRANDS s)\n$Function VOID tos(INT n)\n\
                 $Object rr()\n$Method VOID .add(BACKEND be, REAL w = 1)\n",
            )
            .expect("declaration");
        for (body, want) in [
            // Arguments are read as the declared type (STRANDS as STRING),
            // through an import alias and an object's class too.
            (
                "m.log(  + \"x\");",
                "Unknown token '+' when looking for STRING",
            ),
            ("mm.tos(;", "Unknown token ';' when looking for INT"),
            ("m.tos(n = );", "Unknown token ')' when looking for INT"),
            (
                "new o = m.rr(); o.add( , 1);",
                "Unknown token ',' when looking for BACKEND",
            ),
            (
                "new o = m.rr(); o.add(b, w = );",
                "Unknown token ')' when looking for REAL",
            ),
            // After `&&` and `||`, the type looked for at the start.
            (
                "if (req.restarts == 0 && ) { }",
                "Unknown token ')' when looking for BOOL",
            ),
            (
                "if (req.url || ) { }",
                "Unknown token ')' when looking for BOOL",
            ),
            (
                "return (synth(700 && ));",
                "Unknown token ')' when looking for INT",
            ),
            // A statement that starts with a variable.
            ("beresp.ttl (req.url) { }", "Symbol cannot be used here."),
            ("obj.http.x(\"y\");", "Symbol cannot be used here."),
            ("req.http.x = \"y\";", "Symbol cannot be used here."),
            // A function or method wants its '(' ; a variable is a value.
            ("set req.http.x = m.tos;", "Expected '(' got ';'"),
            (
                "new o = m.rr(); set req.backend_hint = o.add;",
                "Expected '(' got ';'",
            ),
            (
                "set req.http.x = req.hash_always_miss(\"\");",
                "Expected ';' got '('",
            ),
            // Actions and reserved words are symbols too.
            (
                "set req.http.x = req.url +\n set req.url = \"/\";",
                "Symbol 'set' type (action) can not be used in expression.",
            ),
            (
                "set req.http.x = \"a\" + Probe;",
                "Symbol 'Probe' type (reserved) can not be used in expression.",
            ),
        ] {
            let text = format!(
                "vcl 4.1; import m; import m as mm; backend b {{ .host = \"127.0.0.1\"; }} \
                 sub vcl_init {{ {body} }}"
            );
            let (sm, r) = compile_str("t.vcl", &text, &CompileOptions::default(), &vmods);
            let e = r.expect_err(body).render(&sm);
            assert!(e.contains(want), "{body}: {e}");
        }
    }

    /// vcc resolves `.host` and `.port` with getaddrinfo: an empty host
    /// with a port of its own is the wildcard (both families), an empty
    /// port is port 0, and the message quotes the host as written.
    #[test]
    fn backend_hosts_resolve_as_getaddrinfo() {
        let compile = |backend: &str| {
            let text = format!("vcl 4.1; backend b {{ {backend} }}");
            compile_str(
                "t.vcl",
                &text,
                &CompileOptions::default(),
                &VmodRegistry::new(),
            )
        };
        for ok in [
            ".host = \"\"; .port = \"80\";",
            ".host = \"127.0.0.1\"; .port = \"\";",
        ] {
            let (sm, r) = compile(ok);
            r.unwrap_or_else(|d| panic!("{ok}: {}", d.render(&sm)));
        }
        let (sm, r) = compile(".host = \"\";");
        let e = r.expect_err("no port").render(&sm);
        assert!(
            e.contains("Backend host '\"\"' could not be resolved"),
            "{e}"
        );
        let (sm, r) = compile(".host = {\"no such host.invalid\"}; .port = \"80\";");
        let e = r.expect_err("bad host").render(&sm);
        assert!(
            e.contains("Backend host '{\"no such host.invalid\"}'"),
            "{e}"
        );
    }

    #[test]
    fn builtin_alone_compiles() {
        let (sm, r) = compile_str(
            "t.vcl",
            "vcl 4.1; backend b { .host = \"127.0.0.1\"; }",
            &CompileOptions::default(),
            &VmodRegistry::new(),
        );
        let p = r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
        assert_eq!(p.backends.len(), 1);
        assert_eq!(p.default_backend, Some(0));
        assert!(p.subs.iter().any(|s| s.name == "vcl_builtin_recv"));
        assert_eq!(p.method(crate::subs::BuiltinSub::Recv).name, "vcl_recv");
    }
}
