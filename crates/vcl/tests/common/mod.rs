//! Extraction of VCL programs from the Varnish 7.1.1 varnishtest corpus.
//!
//! Shared by the corpus tests of this crate (syntax-level here, full
//! compilation in the semantic checker's tests): it locates the corpus,
//! tokenizes `.vtc` files the way varnishtest does (brace and double-quote
//! strings, `\` line continuation, `#` comments), expands the common macros
//! with plausible values and reproduces the exact VCL text varnishtest sends
//! for `varnish vN -vcl`, `-vcl+backend` and `-errvcl` (a `vcl X.Y;` line,
//! plus one backend per previously declared server for `-vcl+backend`).

#![allow(dead_code)]

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use lacquer_vcl::include::SourceLoader;

/// Include loader for corpus runs: the included files are written by shell
/// commands of the tests, which are not run, so every include reads as an
/// empty file and every glob matches exactly one file.
pub struct EmptyIncludes;

impl SourceLoader for EmptyIncludes {
    fn read(&self, _path: &str) -> io::Result<Vec<u8>> {
        Ok(Vec::new())
    }
    fn glob(&self, pattern: &str) -> io::Result<Vec<String>> {
        Ok(vec![pattern.to_string()])
    }
}

/// What varnishtest expects from loading a VCL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// `-vcl` / `-vcl+backend`: must compile.
    Ok,
    /// `-errvcl TEXT`: must fail with TEXT somewhere in the CLI response.
    Err(String),
}

/// One VCL load found in the corpus.
#[derive(Debug, Clone)]
pub struct VclCase {
    /// The `.vtc` file, relative to the corpus root (e.g. `tests/b00001.vtc`).
    pub vtc: String,
    /// 1-based line of the `varnish` command.
    pub line: usize,
    /// The VCL exactly as varnishtest would send it.
    pub vcl: String,
    pub expect: Expect,
    /// BASELINE status of the test file (`passed`, `failed`, `skipped`).
    pub status: String,
    /// The VCL contains `include` (included files come from shell
    /// commands in the test, which are not run here).
    pub uses_include: bool,
}

/// The corpus root: `LACQUER_VTC_CORPUS`, or `shared/vtc/varnish-7.1.1`
/// found by walking up from this crate. Panics with instructions if absent.
pub fn corpus_root() -> PathBuf {
    if let Ok(p) = std::env::var("LACQUER_VTC_CORPUS") {
        let p = PathBuf::from(p);
        assert!(
            p.join("tests").is_dir(),
            "LACQUER_VTC_CORPUS={} has no tests/ directory",
            p.display()
        );
        return p;
    }
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        let cand = dir.join("shared/vtc/varnish-7.1.1");
        if cand.join("tests").is_dir() {
            return cand;
        }
        if !dir.pop() {
            panic!(
                "Varnish 7.1.1 test corpus not found: set LACQUER_VTC_CORPUS to the \
                 directory holding tests/ and vmod-tests/ (searched upwards from {} \
                 for shared/vtc/varnish-7.1.1)",
                env!("CARGO_MANIFEST_DIR")
            );
        }
    }
}

/// BASELINE.txt as a map from `tests/x.vtc` to status.
pub fn baseline(root: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(root.join("BASELINE.txt")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let st = it.next()?;
            let f = it.next()?;
            Some((f.to_string(), st.to_string()))
        })
        .collect()
}

/// All VCL loads of the corpus, in file order.
pub fn corpus_cases() -> Vec<VclCase> {
    let root = corpus_root();
    let base = baseline(&root);
    let mut out = Vec::new();
    for sub in ["tests", "vmod-tests"] {
        let dir = root.join(sub);
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "vtc"))
            .collect();
        files.sort();
        for f in files {
            let rel = format!("{sub}/{}", f.file_name().unwrap().to_string_lossy());
            let text = match std::fs::read(&f) {
                Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                Err(_) => continue,
            };
            let status = base.get(&rel).cloned().unwrap_or_else(|| "unknown".into());
            extract(&rel, &text, &status, &mut out);
        }
    }
    out
}

/// One command line: its words and the line it started on.
struct Command {
    line: usize,
    words: Vec<String>,
}

/// Splits a `.vtc` text into commands (varnishtest's tokenizer rules).
fn commands(text: &str) -> Vec<Command> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut line = 1;
    let mut out = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    let mut cur_line = 1;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            if !cur.is_empty() {
                out.push(Command {
                    line: cur_line,
                    words: std::mem::take(&mut cur),
                });
            }
            line += 1;
            i += 1;
            continue;
        }
        if c == b' ' || c == b'\t' || c == b'\r' {
            i += 1;
            continue;
        }
        if c == b'\\' && b.get(i + 1) == Some(&b'\n') {
            line += 1;
            i += 2;
            continue;
        }
        if cur.is_empty() {
            cur_line = line;
        }
        if c == b'#' && cur.is_empty() {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'{' {
            let mut depth = 0usize;
            let start = i + 1;
            while i < b.len() {
                match b[i] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b'\n' => line += 1,
                    _ => {}
                }
                i += 1;
            }
            cur.push(text[start..i.min(b.len())].to_string());
            i += 1;
            continue;
        }
        if c == b'"' {
            let mut s = Vec::new();
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                    match b[i] {
                        b'n' => s.push(b'\n'),
                        b'r' => s.push(b'\r'),
                        b't' => s.push(b'\t'),
                        b'\n' => line += 1,
                        x => s.push(x),
                    }
                } else {
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    s.push(b[i]);
                }
                i += 1;
            }
            cur.push(String::from_utf8_lossy(&s).into_owned());
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        cur.push(text[start..i].to_string());
    }
    if !cur.is_empty() {
        out.push(Command {
            line: cur_line,
            words: cur,
        });
    }
    out
}

/// Expands `${name}` macros with plausible values.
fn expand_macros(s: &str, servers: &[(String, Option<String>)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(j) = after.find('}') else {
            out.push_str(&rest[i..]);
            return out;
        };
        let name = &after[..j];
        out.push_str(&macro_value(name, servers));
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    out
}

/// `${tmpdir}`: like varnishtest's, a directory that exists (checks such as
/// a backend `.path` naming a directory, "Not a socket:", depend on it).
fn tmpdir() -> String {
    static DIR: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join("lacquer-vcl-corpus");
        std::fs::create_dir_all(&d)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", d.display()));
        d.to_string_lossy().into_owned()
    })
    .clone()
}

fn macro_value(name: &str, servers: &[(String, Option<String>)]) -> String {
    let port_of = |n: &str| -> u32 {
        let digits: String = n.chars().filter(|c| c.is_ascii_digit()).collect();
        9000 + digits.parse::<u32>().unwrap_or(0)
    };
    match name {
        "localhost" => return "127.0.0.1".into(),
        "bad_ip" => return "192.0.2.255".into(),
        "bad_backend" => return "192.0.2.255 9090".into(),
        "tmpdir" => return tmpdir(),
        "topbuild" | "topsrc" | "testdir" | "pwd" => return format!("{}/build", tmpdir()),
        _ => {}
    }
    if let Some((obj, attr)) = name.rsplit_once('_') {
        if let Some((_, Some(path))) = servers.iter().find(|(n, _)| n == obj)
            && (attr == "sock" || attr == "addr")
        {
            return path.clone();
        }
        let port = port_of(obj).to_string();
        match attr {
            "addr" => return "127.0.0.1".into(),
            "port" => return port,
            "sock" => return format!("127.0.0.1 {port}"),
            "name" => return format!("{}/{obj}", tmpdir()),
            _ => {}
        }
    }
    "X".into()
}

/// varnishtest's backend declarations for `-vcl+backend`.
fn server_backends(servers: &[(String, Option<String>)]) -> String {
    let mut s = String::new();
    for (name, listen) in servers {
        match listen {
            Some(path) => s.push_str(&format!("backend {name} {{ .path = \"{path}\"; }}\n")),
            None => {
                let port = 9000
                    + name
                        .chars()
                        .filter(|c| c.is_ascii_digit())
                        .collect::<String>()
                        .parse::<u32>()
                        .unwrap_or(0);
                s.push_str(&format!(
                    "backend {name} {{ .host = \"127.0.0.1\"; .port = \"{port}\"; }}\n"
                ));
            }
        }
    }
    s
}

/// The Unix socket path given to `-a` in a `varnish vN -arg "..."`
/// command, if any (macros expanded, listen options after `,` dropped).
fn uds_listen_arg(words: &[String]) -> Option<String> {
    let i = words.iter().position(|x| x == "-arg")?;
    let args: Vec<&str> = words.get(i + 1)?.split_whitespace().collect();
    let a = args.iter().position(|x| *x == "-a")?;
    let addr = args.get(a + 1)?.split(',').next()?;
    (addr.starts_with('/') || addr.starts_with("${tmpdir}")).then(|| expand_macros(addr, &[]))
}

fn extract(rel: &str, text: &str, status: &str, out: &mut Vec<VclCase>) {
    let mut servers: Vec<(String, Option<String>)> = Vec::new();
    let mut listeners: Vec<(String, Option<String>)> = Vec::new();
    for cmd in commands(text) {
        let w = &cmd.words;
        match w[0].as_str() {
            "server" if w.len() > 1 => {
                // A `-dispatch` server is still a server (varnishtest
                // declares its backend like any other).
                let listen = w
                    .iter()
                    .position(|x| x == "-listen")
                    .and_then(|i| w.get(i + 1))
                    .filter(|l| l.starts_with('/') || l.starts_with("${tmpdir}"))
                    .map(|l| expand_macros(l, &[]));
                if let Some(s) = servers.iter_mut().find(|(n, _)| *n == w[1]) {
                    if listen.is_some() {
                        s.1 = listen;
                    }
                } else {
                    servers.push((w[1].clone(), listen));
                }
            }
            "varnish" if w.len() > 1 => {
                // `-arg "-a /path.sock"` makes `${vN_sock}` / `${vN_addr}`
                // that path, as varnishtest does for a UDS listen address.
                if let Some(path) = uds_listen_arg(w) {
                    match listeners.iter_mut().find(|(n, _)| *n == w[1]) {
                        Some(l) => l.1 = Some(path),
                        None => listeners.push((w[1].clone(), Some(path))),
                    }
                }
                let macros: Vec<(String, Option<String>)> =
                    servers.iter().chain(&listeners).cloned().collect();
                let mut syntax = "4.1".to_string();
                let mut i = 2;
                while i < w.len() {
                    let arg = w[i].as_str();
                    let mut push = |vcl_body: &str, backends: bool, expect: Expect| {
                        let body = expand_macros(vcl_body, &macros);
                        let vcl = if backends {
                            format!("vcl {syntax};\n{}\n{body}\n", server_backends(&servers))
                        } else {
                            format!("vcl {syntax};\n{body}\n")
                        };
                        out.push(VclCase {
                            vtc: rel.to_string(),
                            line: cmd.line,
                            uses_include: vcl.contains("include"),
                            vcl,
                            expect,
                            status: status.to_string(),
                        });
                    };
                    match arg {
                        "-vcl" if i + 1 < w.len() => {
                            push(&w[i + 1], false, Expect::Ok);
                            i += 2;
                        }
                        "-vcl+backend" if i + 1 < w.len() => {
                            push(&w[i + 1], true, Expect::Ok);
                            i += 2;
                        }
                        "-errvcl" if i + 2 < w.len() => {
                            let t = expand_macros(&w[i + 1], &macros);
                            push(&w[i + 2], false, Expect::Err(t));
                            i += 3;
                        }
                        "-syntax" if i + 1 < w.len() => {
                            syntax = w[i + 1].clone();
                            i += 2;
                        }
                        "-clierr" | "-cliexpect" => i += 3,
                        "-expect" => {
                            i += if w.get(i + 1).is_some_and(|x| x.starts_with('!')) {
                                2
                            } else {
                                4
                            };
                        }
                        "-arg" | "-cli" | "-cliok" | "-clijson" | "-expectexit" | "-jail"
                        | "-proto" | "-vsc" => i += 2,
                        _ => i += 1,
                    }
                }
            }
            _ => {}
        }
    }
}

/// The CLI response text a failed `vcl.inline` produces around the
/// compiler's messages (what `-errvcl` searches).
pub fn cli_failure_text(compiler_output: &str) -> String {
    format!(
        "Message from VCC-compiler:\n{compiler_output}Running VCC-compiler failed, exited with 2\nVCL compilation failed"
    )
}
