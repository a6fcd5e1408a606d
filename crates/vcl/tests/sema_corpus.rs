//! Runs the whole compiler (parser + semantic checks) over the VCL embedded in
//! the Varnish 7.1.1 test corpus and prints the figures: VCLs of tests that
//! real Varnish passes must compile, and `-errvcl {TEXT}` cases must fail with
//! a message containing TEXT. Only VCLs importing vmods declared below (test
//! declarations of `std` and `directors`) are counted.
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
use lacquer_vcl::vmod::VmodRegistry;

const STD: &str = r#"
$Module std
$Function STRING toupper(STRANDS s)
$Function STRING tolower(STRANDS s)
$Function VOID set_ip_tos(INT tos)
$Function REAL random(REAL lo, REAL hi)
$Function VOID log(STRANDS s)
$Function VOID syslog(INT priority, STRANDS s)
$Function BOOL file_exists(STRING path)
$Function STRING fileread(PRIV_CALL, STRING)
$Function BLOB blobread(PRIV_CALL, STRING)
$Function VOID collect(HEADER hdr, STRING sep=", ")
$Function DURATION duration([STRING s], [DURATION fallback], [REAL real], [INT integer])
$Function BYTES bytes([STRING s], [BYTES fallback], [REAL real], [INT integer])
$Function INT integer([STRING s], [INT fallback], [BOOL bool], [BYTES bytes], [DURATION duration], [REAL real], [TIME time])
$Function IP ip(STRING s, [IP fallback], BOOL resolve=1, [STRING p])
$Function REAL real([STRING s], [REAL fallback], [INT integer], [BOOL bool], [BYTES bytes], [DURATION duration], [TIME time])
$Function TIME time([STRING s], [TIME fallback], [REAL real], [INT integer])
$Function INT real2integer(REAL r, INT fallback)
$Function TIME real2time(REAL r, TIME fallback)
$Function INT time2integer(TIME t, INT fallback)
$Function REAL time2real(TIME t, REAL fallback)
$Function BOOL healthy(BACKEND be)
$Function INT port(IP ip)
$Function VOID rollback(HTTP h)
$Function VOID timestamp(STRING s)
$Function STRING querysort(STRING)
$Function BOOL cache_req_body(BYTES size)
$Function STRING strstr(STRING s1, STRING s2)
$Function STRING getenv(STRING name)
$Function VOID late_100_continue(BOOL late)
$Function BOOL syntax(REAL)
$Function BOOL fnmatch(STRING pattern, STRING subject, BOOL pathname=1, BOOL period=0, BOOL noescape=0)
$Function BOOL ban(STRING)
$Function STRING ban_error()
"#;

const DIRECTORS: &str = r#"
$Module directors
$Object round_robin()
$Method VOID .add_backend(BACKEND)
$Method VOID .remove_backend(BACKEND)
$Method BACKEND .backend()
$Object fallback(BOOL sticky=0)
$Method VOID .add_backend(BACKEND)
$Method VOID .remove_backend(BACKEND)
$Method BACKEND .backend()
$Object random()
$Method VOID .add_backend(BACKEND, REAL)
$Method VOID .remove_backend(BACKEND)
$Method BACKEND .backend()
$Object hash()
$Method VOID .add_backend(BACKEND, REAL weight=1.0)
$Method VOID .remove_backend(BACKEND)
$Method BACKEND .backend(STRANDS)
$Object shard()
$Method VOID .set_warmup(REAL probability=0.0)
$Method VOID .set_rampup(DURATION duration=0)
$Method VOID .associate(BLOB param=0)
$Method BOOL .add_backend(BACKEND backend, [STRING ident], [DURATION rampup], [REAL weight])
$Method BOOL .remove_backend([BACKEND backend], [STRING ident])
$Method BOOL .clear()
$Method BOOL .reconfigure(INT replicas=67)
$Method INT .key(STRANDS)
$Method BACKEND .backend(ENUM {HASH, URL, KEY, BLOB} by=HASH, INT key=0, BLOB key_blob=0, INT alt=0, REAL warmup=-1, BOOL rampup=1, ENUM {CHOSEN, IGNORE, ALL} healthy=CHOSEN, BLOB param=0, [ENUM {NOW, LAZY} resolve])
$Method VOID .debug(INT)
$Object shard_param()
$Method VOID .clear()
$Method BLOB .use()
$Function BACKEND lookup(STRING)
"#;

const VTC: &str = r#"
$Module vtc
$Function VOID barrier_sync(STRING addr, DURATION timeout=0)
$Function BACKEND no_backend()
$Function STEVEDORE no_stevedore()
$Function IP no_ip()
$Function VOID panic(STRANDS)
$Function VOID sleep(DURATION)
$Function VOID workspace_alloc(ENUM { client, backend, session, thread } where, INT size)
$Function INT workspace_free(ENUM { client, backend, session, thread } where)
$Function VOID workspace_snapshot(ENUM { client, backend, session, thread } where)
$Function VOID workspace_reset(ENUM { client, backend, session, thread } where)
$Function BOOL workspace_overflowed(ENUM { client, backend, session, thread } where)
$Function VOID workspace_overflow(ENUM { client, backend, session, thread } where)
$Function BLOB workspace_dump(ENUM { client, backend, session, thread } where, ENUM { f, r, l } what, BYTES off=0, BYTES len=64)
$Function INT workspace_reserve(ENUM { client, backend, session, thread } where, INT size)
$Function INT typesize(STRING)
$Function BLOB proxy_header(ENUM { v1, v2 } version, IP client, IP server, STRING authority=0)
"#;

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
    let mut reg = VmodRegistry::new();
    reg.add_text(STD).expect("std declarations");
    reg.add_text(DIRECTORS).expect("directors declarations");
    reg.add_text(VTC).expect("vtc declarations");
    let known: HashSet<&str> = ["std", "directors", "vtc"].into_iter().collect();
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
                ok_total += 1;
                failures.push(format!(
                    "{}:{}: should compile:\n{}",
                    c.vtc,
                    c.line,
                    d.render(&sm)
                ));
            }
            (Expect::Err(want), Ok(_)) => {
                err_total += 1;
                failures.push(format!(
                    "{}:{}: should fail with {want:?} but compiled",
                    c.vtc, c.line
                ));
            }
            (Expect::Err(want), Err(d)) => {
                err_total += 1;
                let got = cli_failure_text(&d.render(&sm));
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
         the expected text; {skipped_vmods} loads skipped (vmods not declared here); {elapsed:?}"
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
