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
    let popts = ParseOptions {
        vcl_path: parse_opts.vcl_path.clone(),
        unsafe_path: parse_opts.unsafe_path,
        builtin: Some(builtin),
        loader: parse_opts.loader,
        set_type: Some(&set_type),
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
