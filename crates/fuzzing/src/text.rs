//! Operator-written text: `hitch.conf` for `-A`, VCL and its regular
//! expressions, and the log query language of `lacquer log -q`.

use std::io;

use lacquer_tls::conf;
use lacquer_vcl::compile::{CompileOptions, compile_file};
use lacquer_vcl::exec::regex::Regex;
use lacquer_vcl::include::SourceLoader;
use lacquer_vcl::parser::{ParseOptions, parse_source};
use lacquer_vcl::source::{FileKind, SourceMap};
use lacquer_vcl::vmod::VmodRegistry;
use lacquer_vsl::query::Query;

/// A `hitch.conf`: parsing never panics, an error names the file and a
/// line of it, an accepted file's frontends all have a port and offer at
/// least one protocol version, and a warning names the file and a line.
pub fn hitch_conf(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines = text.split('\n').count();
    match conf::parse("fuzz.conf", &text) {
        Ok(c) => {
            for fe in &c.frontends {
                assert!(!fe.port.is_empty(), "frontend without a port: {fe:?}");
                assert!(!c.effective(fe).tls_protos.is_empty(), "no protocol");
            }
            for w in &c.warnings {
                let line = w
                    .strip_prefix("fuzz.conf:")
                    .and_then(|r| r.split(':').next())
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or_else(|| panic!("warning without file and line: {w}"));
                assert!(line >= 1 && line <= lines, "{w} ({lines} lines)");
            }
        }
        Err(e) => {
            assert_eq!(e.file, "fuzz.conf");
            assert!(
                e.line >= 1 && e.line <= lines,
                "error on line {} of {lines}",
                e.line
            );
            assert!(!e.msg.is_empty());
            let _ = e.to_string();
        }
    }
}

/// A TLS client's first bytes as `tls_ja3` reads them: whatever the
/// bytes, an answer and never a panic; a fingerprint has JA3's five fields
/// of decimal numbers, and reading more bytes never takes one back.
pub fn tls_ja3(data: &[u8]) {
    use lacquer_tls::ja3::{Ja3, fingerprint};
    let whole = fingerprint(data);
    if let Ja3::Fingerprint(s) = &whole {
        let fields: Vec<&str> = s.split(',').collect();
        assert_eq!(fields.len(), 5, "{s}");
        assert!(
            s.bytes()
                .all(|b| b.is_ascii_digit() || b == b',' || b == b'-'),
            "{s}"
        );
    }
    let cut = crate::split_point(data);
    if let Ja3::Fingerprint(s) = fingerprint(&data[..cut]) {
        assert_eq!(
            whole,
            Ja3::Fingerprint(s),
            "a prefix fingerprinted otherwise"
        );
    }
}

/// Serves `include "inc.vcl";` from memory and nothing else, so a fuzzed
/// VCL never reads the file system.
struct MemLoader;

const INC: &str = "sub vcl_recv { if (req.url ~ \"^/inc\") { return (pass); } }\n";

impl SourceLoader for MemLoader {
    fn read(&self, path: &str) -> io::Result<Vec<u8>> {
        if path == "inc.vcl" {
            Ok(INC.as_bytes().to_vec())
        } else {
            Err(io::Error::new(io::ErrorKind::NotFound, "fuzzing: no files"))
        }
    }

    fn glob(&self, pattern: &str) -> io::Result<Vec<String>> {
        Ok(if pattern == "inc.vcl" {
            vec!["inc.vcl".to_string()]
        } else {
            Vec::new()
        })
    }
}

/// Serves every include and glob with a small VCL, so that a fuzzed
/// include of any name reaches the included file's parse.
struct AnyFile;

impl SourceLoader for AnyFile {
    fn read(&self, _path: &str) -> io::Result<Vec<u8>> {
        Ok(b"sub x { }".to_vec())
    }

    fn glob(&self, pattern: &str) -> io::Result<Vec<String>> {
        Ok(vec![pattern.to_string()])
    }
}

/// A VCL program, as bytes through the front end (lexer, include
/// expansion, parser; any bytes, UTF-8 or not, with every include found),
/// then, when it is UTF-8, through the parser and the type checker (no
/// vmods, no execution, only `inc.vcl` included); diagnostics must render
/// against the source map.
pub fn vcl(data: &[u8]) {
    let mut sm = SourceMap::new();
    let popts = ParseOptions {
        loader: &AnyFile,
        ..ParseOptions::default()
    };
    let (_, _, diags) = parse_source(&mut sm, "fuzz.vcl", data, &popts);
    let _ = diags.render(&sm);
    let _ = diags.render_compact(&sm);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut sm = SourceMap::new();
    let main = sm.add("fuzz.vcl", text, FileKind::Main);
    let popts = ParseOptions {
        loader: &MemLoader,
        ..ParseOptions::default()
    };
    let r = compile_file(
        &mut sm,
        main,
        &popts,
        &CompileOptions::default(),
        &VmodRegistry::new(),
    );
    if let Err(d) = r {
        let _ = d.render(&sm);
        let _ = d.render_compact(&sm);
    }
}

/// A VCL regular expression against the `regex` crate: the first byte is
/// the pattern's length, the rest the pattern then the subject. Where the
/// `regex` crate (bytes, no Unicode) accepts the pattern, VCL's matcher
/// (literal and DFA fast paths, groups read off the match) must answer `~`
/// and the first `regsub` exactly as it does, and `regsuball` with `\0`
/// must give the subject back. Other patterns must compile or be refused
/// and match without a panic.
pub fn regex(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (pattern, subject) = rest.split_at(usize::from(n).min(rest.len()));
    let Ok(pattern) = std::str::from_utf8(pattern) else {
        return;
    };
    let reference = regex::bytes::RegexBuilder::new(pattern)
        .unicode(false)
        .size_limit(1 << 20)
        .build();
    let re = match (Regex::new(pattern), reference) {
        (Ok(re), Ok(reference)) => (re, reference),
        (Ok(re), Err(_)) => {
            let _ = re.is_match(subject);
            let mut out = Vec::new();
            let _ = re.substitute(subject, b"<\\0|\\1>", true, &mut out);
            return;
        }
        (Err(e), Ok(_)) => panic!("{pattern:?} refused: {e}"),
        (Err(_), Err(_)) => return,
    };
    let (re, reference) = re;
    let failed = "no backtracking engine for a pattern the regex crate takes";
    assert_eq!(
        re.is_match(subject).expect(failed),
        reference.is_match(subject),
        "{pattern:?} ~ {subject:?}"
    );
    let mut first = Vec::new();
    re.substitute(subject, b"<\\0|\\1>", false, &mut first)
        .expect(failed);
    let want = match reference.captures(subject) {
        None => subject.to_vec(),
        Some(c) => {
            let m = c.get(0).expect("group 0");
            let g1 = c.get(1).map_or(&b""[..], |g| g.as_bytes());
            [
                &subject[..m.start()],
                b"<",
                m.as_bytes(),
                b"|",
                g1,
                b">",
                &subject[m.end()..],
            ]
            .concat()
        }
    };
    assert_eq!(first, want, "regsub({subject:?}, {pattern:?})");
    let mut all = Vec::new();
    re.substitute(subject, b"\\0", true, &mut all)
        .expect(failed);
    assert_eq!(all, subject, "regsuball({subject:?}, {pattern:?}, \"\\0\")");
}

/// A log query: parsing never panics, the case-insensitive parse accepts
/// exactly what the plain one does, errors render, and a parsed query
/// evaluates against an empty group and a sample request with its fetch.
pub fn vsl_query(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let plain = Query::parse(&text);
    let caseless = Query::parse_with(&text, true);
    assert_eq!(
        plain.is_ok(),
        caseless.is_ok(),
        "-C changes whether {text:?} parses"
    );
    match plain {
        Ok(q) => {
            assert_eq!(q.text(), text);
            let _ = q.matches(&[]);
            let group = crate::logs::sample_group();
            let _ = q.matches(&group);
            if let Ok(c) = caseless {
                let _ = c.matches(&group);
            }
        }
        Err(e) => {
            let _ = e.varnish_report(&text);
        }
    }
}
