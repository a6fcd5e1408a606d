//! Syntax-level check against the Varnish 7.1.1 test corpus.
//!
//! Every VCL that a passing test (per BASELINE.txt) loads successfully must
//! parse without errors. For every `-errvcl` case the test reports how many
//! are already rejected by the parser with Varnish's expected text (the rest
//! need semantic checks). Included files are created by shell commands in
//! the tests, which are not run: includes resolve to empty files here.

mod common;

use common::{EmptyIncludes, Expect, cli_failure_text, corpus_cases};
use lacquer_vcl::parser::{ParseOptions, parse_with};
use lacquer_vcl::source::{FileKind, SourceMap};

/// errvcl cases where vcc reports a type error before the syntax error the
/// parser finds (the expected type or operand types are only known after
/// symbol resolution), or where the message comes from the built-in VCL,
/// which is not parsed here. Semantic analysis produces these messages.
const NEEDS_TYPES: &[&str] = &[
    // "Unknown token '--' when looking for INT": the type of resp.status.
    "tests/v00019.vtc:79",
    // "Symbol cannot be used here": found in the built-in VCL's tokens.
    "tests/v00020.vtc:23",
    // "INT * BLOB not possible.": reported before the stray ')'.
    "tests/v00020.vtc:397",
    // "Expected BYTES unit": the BYTES type of the comparison.
    "tests/v00033.vtc:40",
];

#[test]
fn corpus_syntax() {
    let cases = corpus_cases();
    assert!(
        cases.len() > 500,
        "suspiciously few VCL cases: {}",
        cases.len()
    );
    let loader = EmptyIncludes;
    let opts = ParseOptions {
        loader: &loader,
        ..ParseOptions::default()
    };
    let mut ok_total = 0;
    let mut ok_failed = Vec::new();
    let mut inline_c = 0;
    let mut err_total = 0;
    let mut err_matched = 0;
    let mut err_other_text = Vec::new();
    let mut err_left = 0;
    // Every extracted VCL, whatever its test's status, must parse without
    // panicking; LACQUER_DUMP_SEEDS=dir writes them out as fuzzing seeds.
    let dump = std::env::var_os("LACQUER_DUMP_SEEDS");
    for (i, c) in cases.iter().enumerate() {
        if let Some(dir) = &dump {
            let p = std::path::Path::new(dir).join(format!("corpus_{i:04}.vcl"));
            std::fs::write(p, &c.vcl).expect("write seed");
        }
        if c.status != "passed" {
            let mut sm = SourceMap::new();
            let f = sm.add("<vcl.inline>", c.vcl.as_str(), FileKind::Main);
            let (_, diags) = parse_with(&mut sm, f, &opts);
            let _ = diags.render(&sm);
            continue;
        }
        let mut sm = SourceMap::new();
        let f = sm.add("<vcl.inline>", c.vcl.as_str(), FileKind::Main);
        let (_, diags) = parse_with(&mut sm, f, &opts);
        match &c.expect {
            Expect::Ok => {
                ok_total += 1;
                let only_inline_c = diags.iter().all(|d| d.message == "Inline-C not allowed");
                if diags.has_errors() && only_inline_c {
                    // Tests that turn on vcc_allow_inline_c; Lacquer
                    // rejects inline C by design.
                    inline_c += 1;
                } else if diags.has_errors() {
                    ok_failed.push(format!("{}:{}\n{}", c.vtc, c.line, diags.render(&sm)));
                }
            }
            Expect::Err(text) => {
                err_total += 1;
                if !diags.has_errors() {
                    err_left += 1;
                    if std::env::var("SHOW_LEFT").is_ok() {
                        println!("LEFT {}:{} {:?}", c.vtc, c.line, text);
                    }
                } else if cli_failure_text(&diags.render(&sm)).contains(text.as_str()) {
                    err_matched += 1;
                } else if NEEDS_TYPES.contains(&format!("{}:{}", c.vtc, c.line).as_str()) {
                    err_left += 1;
                } else {
                    err_other_text.push(format!(
                        "{}:{} expected {:?}\n{}",
                        c.vtc,
                        c.line,
                        text,
                        diags.render(&sm)
                    ));
                }
            }
        }
    }
    println!("corpus: {} VCL loads extracted", cases.len());
    println!(
        "must-compile VCLs (passing tests): {ok_total}, parse errors: {}, inline C (rejected by design): {inline_c}",
        ok_failed.len()
    );
    println!(
        "errvcl cases (passing tests): {err_total}; rejected by the parser with the expected \
         text: {err_matched}; rejected with other text: {}; left for semantic analysis: {err_left} \
         (of which {} are rejected here first with another message)",
        err_other_text.len(),
        NEEDS_TYPES.len()
    );
    for e in &err_other_text {
        println!("--- errvcl with different text: {e}");
    }
    for e in &ok_failed {
        println!("--- unexpected parse error: {e}");
    }
    assert!(
        ok_failed.is_empty(),
        "{} valid VCLs failed to parse",
        ok_failed.len()
    );
    assert!(
        err_other_text.is_empty(),
        "{} errvcl cases were rejected with a message other than Varnish's",
        err_other_text.len()
    );
}
