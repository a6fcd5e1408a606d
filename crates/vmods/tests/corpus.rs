//! Compiles every VCL of the Varnish 7.1.1 test corpus that imports only
//! vmods this crate implements, against the crate's registry: what real
//! Varnish accepts must compile (a check that the declarations have
//! Varnish's signatures), and `-errvcl` cases must be rejected.
//!
//! VCLs that compile then have `vcl_init` run with the vmods: it must
//! succeed for accepted VCLs, and fail with varnishd's message for the
//! `-errvcl` cases whose error comes from a vmod at load time.
//!
//! VCL extraction is the compiler's corpus harness
//! (`crates/vcl/tests/common`).

mod common;

#[path = "../../vcl/tests/common/mod.rs"]
mod vtc;

use std::collections::HashSet;
use std::io;
use std::sync::Arc;

use common::TestHost;
use lacquer_vcl::exec::code::Program;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Action, Backend, Context as _, LogKind, Scratch};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vmods::Runtime;

use lacquer_vcl::compile::{CompileOptions, compile_file};
use lacquer_vcl::include::SourceLoader;
use lacquer_vcl::parser::ParseOptions;
use lacquer_vcl::source::{FileKind, SourceMap};
use vtc::{Expect, corpus_cases};

/// Serves every include as an empty file.
struct EmptyIncludes;

impl SourceLoader for EmptyIncludes {
    fn read(&self, _path: &str) -> io::Result<Vec<u8>> {
        Ok(Vec::new())
    }
    fn glob(&self, pattern: &str) -> io::Result<Vec<String>> {
        Ok(vec![pattern.to_string()])
    }
}

/// Storage names (`-s name=...`) and VCL labels (`vcl.label name`) a test
/// file declares on varnishd's command line, which its VCLs may use.
fn settings(vtc: &str) -> (Vec<String>, Vec<String>) {
    let root = vtc::corpus_root();
    let text = std::fs::read_to_string(root.join(vtc)).unwrap_or_default();
    let mut storages = CompileOptions::default().storages;
    for (k, _) in text.match_indices("-s") {
        let rest = text[k + 2..].trim_start();
        let n: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .collect();
        if !n.is_empty() && rest[n.len()..].starts_with('=') {
            storages.push(n);
        }
    }
    let labels = text
        .match_indices("vcl.label ")
        .filter_map(|(k, _)| text[k + 10..].split_whitespace().next())
        .map(str::to_string)
        .collect();
    (storages, labels)
}

/// Runs `vcl_init` of a compiled program with the vmods; the error
/// messages logged when it fails.
fn run_init(ir: &lacquer_vcl::ir::Program) -> Result<(), Vec<String>> {
    let host = Arc::new(TestHost::default());
    for (i, b) in ir.backends.iter().enumerate() {
        host.backends.lock().unwrap().push(Backend {
            id: i as u32,
            name: b.name.as_str().into(),
        });
    }
    let rt = Runtime::for_program(ir, host).map_err(|e| vec![e])?;
    let prog = Program::from_ir(ir).map_err(|e| vec![e])?;
    let mut c = MockContext::new("GET", "/");
    c.vmod.sub = Some(BuiltinSub::Init);
    let action = prog.run(BuiltinSub::Init, &mut c, &rt, &mut Scratch::default());
    // The end of the init task may fail it too, as in the daemon.
    let mut privs = std::mem::take(c.privs());
    let at_end = privs.finish(&mut |kind, msg| c.log(kind, msg));
    match action {
        Action::Ok if at_end.is_empty() => Ok(()),
        Action::Ok => Err(at_end),
        other => {
            let mut e: Vec<String> = c
                .logs_of(LogKind::Error)
                .iter()
                .map(|s| s.to_string())
                .collect();
            e.push(format!("vcl_init returned {other:?}"));
            Err(e)
        }
    }
}

/// Corpus tests that fail for reasons outside the vmods: the compiler
/// rejects `req.hash` (a BLOB) assigned to a header (b00051), and the
/// regex engines lack PCRE's `\R` (std_b00000).
const COMPILER_GAPS: &[&str] = &["tests/b00051.vtc", "vmod-tests/std_b00000.vtc"];

/// Whether `vcl` imports `debug` under another name or calls a `debug`
/// function or object this crate does not declare.
fn uses_missing_debug(vcl: &str, reg: &lacquer_vcl::vmod::VmodRegistry) -> bool {
    let d = reg.get("debug").expect("debug is in the test registry");
    let declared =
        |n: &str| d.functions.iter().any(|f| f.name == n) || d.objects.iter().any(|o| o.name == n);
    vcl.contains("import debug as")
        || vcl.match_indices("debug.").any(|(k, _)| {
            let n: String = vcl[k + 6..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            !declared(&n)
        })
}

/// `-errvcl` cases whose message comes from varnishd, not a vmod:
/// m00000's "Failed initialization" is its report of `return (fail)` in
/// `vcl_init`; m00022's is vmod debug's load event reading the
/// `nuke_limit` parameter, which only the daemon's load event passes.
const DAEMON_ERRVCL: &[&str] = &["tests/m00000.vtc:143", "tests/m00022.vtc:41"];

fn imports(vcl: &str) -> Vec<String> {
    vcl.lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("import ")?;
            Some(
                rest.trim_start()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn corpus_vcls_using_these_vmods_compile() {
    // Corpus VCLs run under varnishtest, which offers the test vmods.
    let reg = lacquer_vmods::registry_with_test_vmods();
    let known: HashSet<String> = reg.names().map(str::to_string).collect();
    let loader = EmptyIncludes;
    let popts = ParseOptions {
        loader: &loader,
        ..ParseOptions::default()
    };
    let opts = CompileOptions {
        err_unref: false,
        ..CompileOptions::default()
    };
    let (mut ok, mut err_ok, mut total_err, mut init_ok) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    for c in corpus_cases() {
        let imp = imports(&c.vcl);
        if c.status != "passed" || c.uses_include || imp.is_empty() {
            continue;
        }
        if imp.iter().any(|i| !known.contains(i)) || COMPILER_GAPS.contains(&c.vtc.as_str()) {
            continue;
        }
        // vmod vtc's workspace and VSL functions are deliberately absent.
        if c.vcl.contains("vtc.workspace_") || c.vcl.contains("vtc.vsl") {
            continue;
        }
        // debug.dyn_uds() wants the socket varnishtest's server listens on.
        if c.vcl.contains("debug.dyn_uds(\"/") {
            continue;
        }
        // vmod debug is partial: skip VCLs using what it leaves out.
        if imp.iter().any(|i| i == "debug") && uses_missing_debug(&c.vcl, &reg) {
            continue;
        }
        if DAEMON_ERRVCL.contains(&format!("{}:{}", c.vtc, c.line).as_str()) {
            continue;
        }
        let (storages, labels) = settings(&c.vtc);
        let opts = CompileOptions {
            storages,
            labels,
            ..opts.clone()
        };
        let mut sm = SourceMap::new();
        let main = sm.add("<vcl.inline>", c.vcl.as_str(), FileKind::Main);
        let r = compile_file(&mut sm, main, &popts, &opts, &reg);
        match (&c.expect, r) {
            (Expect::Ok, Ok(ir)) => {
                ok += 1;
                match run_init(&ir) {
                    Ok(()) => init_ok += 1,
                    Err(e) => failures.push(format!(
                        "{}:{}: vcl_init failed: {}",
                        c.vtc,
                        c.line,
                        e.join(" / ")
                    )),
                }
            }
            (Expect::Ok, Err(d)) => {
                if d.iter().all(|x| x.message == "Inline-C not allowed") {
                    continue;
                }
                failures.push(format!("{}:{}:\n{}", c.vtc, c.line, d.render(&sm)));
            }
            (Expect::Err(want), r) => {
                total_err += 1;
                match r {
                    Err(_) => err_ok += 1,
                    Ok(ir) => match run_init(&ir) {
                        Err(e) if e.iter().any(|m| m.contains(want.as_str())) => err_ok += 1,
                        other => failures.push(format!(
                            "{}:{}: should fail loading with {want:?}, got {other:?}",
                            c.vtc, c.line
                        )),
                    },
                }
            }
        }
    }
    eprintln!(
        "corpus VCLs importing only these vmods: {ok} compile ({init_ok} run vcl_init); -errvcl rejected {err_ok}/{total_err}; {} failures",
        failures.len()
    );
    assert!(ok > 100, "too few corpus VCLs found ({ok})");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
