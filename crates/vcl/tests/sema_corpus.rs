//! Runs the whole compiler (parser + semantic checks) over the VCL embedded in
//! the Varnish 7.1.1 test corpus and prints the figures: VCLs of tests that
//! real Varnish passes must compile, and `-errvcl {TEXT}` cases must fail with
//! a message containing TEXT. Only VCLs importing vmods declared below (test
//! declarations of `std` and `directors`) are counted.
//!
//! The corpus lives outside the repository; when it is missing the test
//! reports that and checks nothing else.

use std::collections::HashSet;
use std::path::Path;

use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::vmod::VmodRegistry;

const CORPUS: &str = "/work/shared/vtc/varnish-7.1.1";

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

/// One VCL found in a vtc file.
struct Case {
    file: String,
    vcl: String,
    /// `Some(text)` for `-errvcl {text}`.
    expect_err: Option<String>,
}

/// Reads a `{...}` (brace counting like varnishtest) or `"..."` argument
/// starting at `i`; returns it and the index after it.
fn vtc_arg(b: &[u8], mut i: usize) -> Option<(String, usize)> {
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t' || b[i] == b'\\' || b[i] == b'\n') {
        i += 1;
    }
    if i >= b.len() {
        return None;
    }
    if b[i] == b'{' {
        let mut depth = 0;
        let start = i + 1;
        while i < b.len() {
            match b[i] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some((String::from_utf8_lossy(&b[start..i]).into_owned(), i + 1));
                    }
                }
                _ => {}
            }
            i += 1;
        }
        return None;
    }
    if b[i] == b'"' {
        let start = i + 1;
        i += 1;
        while i < b.len() && b[i] != b'"' {
            if b[i] == b'\\' {
                i += 1;
            }
            i += 1;
        }
        return Some((
            String::from_utf8_lossy(&b[start..i.min(b.len())]).into_owned(),
            i + 1,
        ));
    }
    let start = i;
    while i < b.len() && !b[i].is_ascii_whitespace() {
        i += 1;
    }
    Some((String::from_utf8_lossy(&b[start..i]).into_owned(), i))
}

fn expand_macros(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(p) = rest.find("${") {
        out.push_str(&rest[..p]);
        let Some(e) = rest[p..].find('}') else {
            out.push_str(&rest[p..]);
            return out;
        };
        let name = &rest[p + 2..p + e];
        let v = if name.ends_with("_addr") || name == "localhost" {
            "127.0.0.1".to_string()
        } else if name.ends_with("_port") {
            "9".to_string()
        } else if name.ends_with("_sock") {
            "127.0.0.1 9".to_string()
        } else if name == "bad_backend" {
            "127.0.0.1 9".to_string()
        } else if name == "bad_ip" {
            "192.0.2.255".to_string()
        } else if name.ends_with("_name") {
            "v1".to_string()
        } else {
            "/tmp/lacquer-vtc".to_string()
        };
        out.push_str(&v);
        rest = &rest[p + e + 1..];
    }
    out.push_str(rest);
    out
}

fn extract(file: &str, text: &str) -> Vec<Case> {
    let b = text.as_bytes();
    let mut cases = Vec::new();
    let servers: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("server")).then(|| w.next().map(str::to_string))?
        })
        .filter(|n| n.starts_with('s'))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let mut syntax = "4.1".to_string();
    let mut i = 0;
    while i < b.len() {
        // Only look at arguments of `varnish` commands.
        if !(i == 0 || b[i - 1] == b'\n') {
            i += 1;
            continue;
        }
        let line_end = text[i..].find('\n').map_or(b.len(), |e| i + e);
        let line = text[i..line_end].trim_start();
        if !line.starts_with("varnish ") {
            i = line_end + 1;
            continue;
        }
        let mut j = i + (text[i..].len() - text[i..].trim_start().len()) + "varnish ".len();
        // Walk the arguments of this command.
        loop {
            let Some((arg, next)) = vtc_arg(b, j) else {
                break;
            };
            if arg.is_empty() && next >= b.len() {
                break;
            }
            let at_newline = text[j..next].contains('\n') && !text[j..next].contains('\\');
            if at_newline && !arg.starts_with('-') {
                break;
            }
            j = next;
            match arg.as_str() {
                "-syntax" => {
                    if let Some((v, n)) = vtc_arg(b, j) {
                        syntax = v;
                        j = n;
                    }
                }
                "-vcl" | "-vcl+backend" | "-errvcl" => {
                    let mut expect_err = None;
                    if arg == "-errvcl" {
                        let Some((t, n)) = vtc_arg(b, j) else { break };
                        expect_err = Some(t);
                        j = n;
                    }
                    let Some((body, n)) = vtc_arg(b, j) else {
                        break;
                    };
                    j = n;
                    let mut vcl = format!("vcl {syntax};\n");
                    if arg == "-vcl+backend" {
                        for s in &servers {
                            vcl.push_str(&format!(
                                "backend {s} {{ .host = \"127.0.0.1\"; .port = \"9\"; }}\n"
                            ));
                        }
                    }
                    vcl.push_str(&expand_macros(&body));
                    cases.push(Case {
                        file: file.to_string(),
                        vcl,
                        expect_err,
                    });
                }
                _ => {
                    if arg.starts_with('-') {
                        continue;
                    }
                    if text[i..j].ends_with('\n') {
                        break;
                    }
                }
            }
            if j >= b.len() || b[j] == b'\n' {
                break;
            }
        }
        i = j.max(line_end) + 1;
    }
    cases
}

fn imports(vcl: &str) -> Vec<String> {
    vcl.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix("import ")?;
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            Some(name)
        })
        .collect()
}

#[test]
fn corpus_figures() {
    let dir = Path::new(CORPUS);
    if !dir.join("tests").is_dir() {
        eprintln!("corpus not found at {CORPUS}; nothing checked");
        return;
    }
    let baseline = std::fs::read_to_string(dir.join("BASELINE.txt")).unwrap_or_default();
    let passed: HashSet<String> = baseline
        .lines()
        .filter_map(|l| l.strip_prefix("passed "))
        .map(|s| s.trim().to_string())
        .collect();
    let mut reg = VmodRegistry::new();
    reg.add_text(STD).expect("std declarations");
    reg.add_text(DIRECTORS).expect("directors declarations");
    let known: HashSet<&str> = ["std", "directors"].into_iter().collect();

    let mut files: Vec<_> = std::fs::read_dir(dir.join("tests"))
        .expect("read corpus")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "vtc"))
        .collect();
    files.sort();
    let (mut ok_total, mut ok_pass) = (0, 0);
    let (mut err_total, mut err_pass) = (0, 0);
    let mut failures = Vec::new();
    let opts = CompileOptions::default();
    let start = std::time::Instant::now();
    for f in &files {
        let name = format!("tests/{}", f.file_name().unwrap().to_string_lossy());
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for case in extract(&name, &text) {
            if imports(&case.vcl)
                .iter()
                .any(|i| !known.contains(i.as_str()))
            {
                continue;
            }
            let (sm, r) = compile_str("<vcl.inline>", &case.vcl, &opts, &reg);
            match (&case.expect_err, r) {
                (None, r) => {
                    if !passed.contains(&case.file) {
                        continue;
                    }
                    ok_total += 1;
                    match r {
                        Ok(_) => ok_pass += 1,
                        Err(d) => failures.push(format!(
                            "{}: should compile:\n{}",
                            case.file,
                            d.render(&sm)
                        )),
                    }
                }
                (Some(want), r) => {
                    err_total += 1;
                    match r {
                        Ok(_) => failures.push(format!(
                            "{}: should fail with {want:?} but compiled",
                            case.file
                        )),
                        Err(d) => {
                            let got = d.render(&sm);
                            let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
                            if flat(&got).contains(&flat(want)) {
                                err_pass += 1;
                            } else {
                                failures.push(format!("{}: want {want:?}, got:\n{got}", case.file));
                            }
                        }
                    }
                }
            }
        }
    }
    let elapsed = start.elapsed();
    if std::env::var_os("LACQUER_CORPUS_VERBOSE").is_some() {
        for f in &failures {
            eprintln!("---- {f}");
        }
    }
    eprintln!(
        "corpus: {ok_pass}/{ok_total} valid VCLs compile; {err_pass}/{err_total} -errvcl cases \
         fail with the expected text ({} failures, {elapsed:?})",
        failures.len()
    );
    assert!(
        ok_total > 0 && err_total > 0,
        "corpus extraction found nothing"
    );
    // Regression floors (raise as the compiler improves).
    assert!(
        ok_pass * 100 >= ok_total * 90,
        "valid VCLs: {ok_pass}/{ok_total}"
    );
    assert!(
        err_pass * 100 >= err_total * 70,
        "errvcl: {err_pass}/{err_total}"
    );
}
