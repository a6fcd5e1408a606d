//! Runs the whole compiler (parser + semantic checks) over the VCL embedded in
//! the Varnish 7.1.1 test corpus and prints the figures: VCLs of tests that
//! real Varnish passes must compile, and `-errvcl {TEXT}` cases must fail with
//! a message containing TEXT. VCLs importing a vmod Lacquer does not
//! implement (`debug`, …) are counted separately.
//!
//! Extraction is shared with the parser's corpus test (`tests/common`).
//! Included files are served empty, inline C is rejected by design, and
//! stevedore names, VCL labels and `vcc_err_unref` are taken from the
//! test's command lines.

mod common;

use std::collections::{HashMap, HashSet};

use common::{EmptyIncludes, Expect, cli_failure_text, corpus_cases, corpus_root};
use lacquer_vcl::compile::{CompileOptions, compile_file};
use lacquer_vcl::parser::ParseOptions;
use lacquer_vcl::source::{FileKind, SourceMap};

fn imports(vcl: &str) -> Vec<String> {
    vcl.lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("import ")?;
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            Some(name)
        })
        .collect()
}

/// Per-test settings found on varnishtest command lines.
struct VtcSettings {
    storages: Vec<String>,
    labels: Vec<String>,
    /// Lines (1-based) where `vcc_err_unref` is switched, with the new value.
    err_unref: Vec<(usize, bool)>,
}

fn settings(text: &str, defaults: &CompileOptions) -> VtcSettings {
    let mut storages = defaults.storages.clone();
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
    let mut labels = Vec::new();
    for (k, _) in text.match_indices("vcl.label ") {
        if let Some(n) = text[k + 10..].split_whitespace().next() {
            labels.push(n.to_string());
        }
    }
    let mut err_unref = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.replace('=', " ");
        if let Some(k) = l.find("vcc_err_unref") {
            let v = l[k + "vcc_err_unref".len()..]
                .split_whitespace()
                .next()
                .map(|w| w.trim_matches(|c: char| !c.is_ascii_alphanumeric()));
            match v {
                Some("off" | "false") => err_unref.push((i + 1, false)),
                Some("on" | "true") => err_unref.push((i + 1, true)),
                _ => {}
            }
        }
    }
    VtcSettings {
        storages,
        labels,
        err_unref,
    }
}

#[test]
fn corpus_figures() {
    let root = corpus_root();
    let cases = corpus_cases();
    // Every vmod Lacquer implements, with its real declarations.
    let reg = lacquer_vmods::registry();
    // The test-only `vtc` vmod is implemented only in part (no workspace
    // or log functions), so VCLs importing it are counted separately too.
    let known: HashSet<&str> = reg.names().filter(|n| *n != "vtc").collect();
    let defaults = CompileOptions::default();
    let mut per_file: HashMap<String, VtcSettings> = HashMap::new();
    let loader = EmptyIncludes;
    let popts = ParseOptions {
        loader: &loader,
        ..ParseOptions::default()
    };

    let (mut ok_total, mut ok_pass, mut inline_c) = (0, 0, 0);
    let (mut err_total, mut err_pass) = (0, 0);
    let mut skipped_vmods = 0;
    // Loads whose includes are files the test writes at run time (the
    // harness serves includes empty) and that fail because of it.
    let mut include_failures = 0;
    // -errvcl cases whose error a vmod raises in vcl_init.
    let mut load_time = 0;
    let mut failures = Vec::new();
    // Case ids (`file:line`) that pass today, for the committed ratchet.
    let mut passing: Vec<String> = Vec::new();
    let start = std::time::Instant::now();
    for c in &cases {
        if c.status != "passed" {
            continue;
        }
        if imports(&c.vcl).iter().any(|i| !known.contains(i.as_str())) {
            skipped_vmods += 1;
            continue;
        }
        let st = per_file.entry(c.vtc.clone()).or_insert_with(|| {
            let text = std::fs::read_to_string(root.join(&c.vtc)).unwrap_or_default();
            settings(&text, &defaults)
        });
        let err_unref = st
            .err_unref
            .iter()
            .rev()
            .find(|(l, _)| *l <= c.line)
            .is_none_or(|(_, v)| *v);
        let opts = CompileOptions {
            err_unref,
            storages: st.storages.clone(),
            labels: st.labels.clone(),
        };
        let mut sm = SourceMap::new();
        let main = sm.add("<vcl.inline>", c.vcl.as_str(), FileKind::Main);
        let r = compile_file(&mut sm, main, &popts, &opts, &reg);
        match (&c.expect, r) {
            (Expect::Ok, Ok(_)) => {
                ok_total += 1;
                ok_pass += 1;
                passing.push(format!("{}:{}", c.vtc, c.line));
            }
            (Expect::Ok, Err(d)) => {
                if d.iter().all(|x| x.message == "Inline-C not allowed") {
                    inline_c += 1;
                    continue;
                }
                if c.uses_include {
                    include_failures += 1;
                    continue;
                }
                ok_total += 1;
                failures.push(format!(
                    "{}:{}: should compile:\n{}",
                    c.vtc,
                    c.line,
                    d.render(&sm)
                ));
            }
            (Expect::Err(want), Ok(_)) => {
                if c.uses_include {
                    include_failures += 1;
                    continue;
                }
                // Errors vmods raise while the VCL loads (`vcl_init`) are
                // checked by crates/vmods/tests/corpus.rs, which runs it.
                if !imports(&c.vcl).is_empty() && c.vcl.contains("vcl_init") {
                    load_time += 1;
                    continue;
                }
                err_total += 1;
                failures.push(format!(
                    "{}:{}: should fail with {want:?} but compiled",
                    c.vtc, c.line
                ));
            }
            (Expect::Err(want), Err(d)) => {
                let got = cli_failure_text(&d.render(&sm));
                if c.uses_include && !got.contains(want.as_str()) {
                    include_failures += 1;
                    continue;
                }
                err_total += 1;
                if got.contains(want.as_str()) {
                    err_pass += 1;
                    passing.push(format!("{}:{}", c.vtc, c.line));
                } else {
                    failures.push(format!("{}:{}: want {want:?}, got:\n{got}", c.vtc, c.line));
                }
            }
        }
    }
    let elapsed = start.elapsed();
    if std::env::var_os("LACQUER_CORPUS_VERBOSE").is_some() {
        for f in &failures {
            println!("---- {f}");
        }
    }
    println!(
        "sema corpus: {ok_pass}/{ok_total} valid VCLs of passing tests compile \
         ({inline_c} inline-C VCLs excluded); {err_pass}/{err_total} -errvcl cases fail with \
         the expected text; counted separately: {skipped_vmods} loads importing vmods Lacquer \
         does not implement (debug, vtc), {include_failures} loads that include files the test \
         writes at run time, {load_time} -errvcl cases whose error comes from vcl_init at \
         load time (checked by the vmods corpus test); {elapsed:?}"
    );
    assert!(
        ok_total > 300 && err_total > 150,
        "corpus extraction found too little"
    );
    // The ratchet: every case listed in corpus-passing.txt must still pass.
    // LACQUER_BLESS=1 rewrites the list with today's passes.
    let list = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus-passing.txt");
    let listed: Vec<String> = std::fs::read_to_string(&list)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    let now: HashSet<&str> = passing.iter().map(String::as_str).collect();
    let lost: Vec<&String> = listed
        .iter()
        .filter(|l| !now.contains(l.as_str()))
        .collect();
    let known_list: HashSet<&str> = listed.iter().map(String::as_str).collect();
    let new: Vec<&String> = passing
        .iter()
        .filter(|p| !known_list.contains(p.as_str()))
        .collect();
    if !new.is_empty() {
        println!(
            "{} corpus cases pass that are not in {} (LACQUER_BLESS=1 adds them)",
            new.len(),
            list.display()
        );
    }
    if std::env::var_os("LACQUER_BLESS").is_some() {
        let mut all: Vec<String> = passing.clone();
        all.sort();
        all.dedup();
        let mut text = String::from(
            "# VCLs from Varnish's test corpus that compile (or fail as expected); CI keeps them passing.\n",
        );
        for a in all {
            text.push_str(&a);
            text.push('\n');
        }
        std::fs::write(&list, text).expect("write corpus-passing.txt");
    } else {
        assert!(
            lost.is_empty(),
            "corpus cases that passed before fail now: {lost:?}"
        );
    }
    // Regression floors (raise as the compiler improves).
    assert!(
        ok_pass * 100 >= ok_total * 95,
        "valid VCLs: {ok_pass}/{ok_total}"
    );
    assert!(
        err_pass * 100 >= err_total * 95,
        "errvcl: {err_pass}/{err_total}"
    );
}
