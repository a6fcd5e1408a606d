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
    let popts = ParseOptions {
        vcl_path: parse_opts.vcl_path.clone(),
        unsafe_path: parse_opts.unsafe_path,
        builtin: Some(builtin),
        loader: parse_opts.loader,
    };
    let (vcl, diags) = parser::parse_with(sm, main, &popts);
    if diags.has_errors() {
        return Err(diags);
    }
    check::check(&vcl, sm, opts, vmods).map(Arc::new)
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
