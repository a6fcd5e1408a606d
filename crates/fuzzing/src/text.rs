//! Operator-written text: `hitch.conf` for `-A`, VCL, and the log query
//! language of `lacquer log -q`.

use std::io;

use lacquer_tls::conf;
use lacquer_vcl::compile::{CompileOptions, compile_file};
use lacquer_vcl::include::SourceLoader;
use lacquer_vcl::parser::ParseOptions;
use lacquer_vcl::source::{FileKind, SourceMap};
use lacquer_vcl::vmod::VmodRegistry;
use lacquer_vsl::query::Query;

/// A `hitch.conf`: parsing never panics, an error names a line of the
/// file, and every frontend's effective options can be computed.
pub fn hitch_conf(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines = text.lines().count() + 1;
    match conf::parse("fuzz.conf", &text) {
        Ok(c) => {
            for fe in &c.frontends {
                let _ = c.effective(fe);
            }
        }
        Err(e) => {
            assert!(e.line <= lines, "error on line {} of {lines}", e.line);
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

/// A VCL program through the parser and the type checker (no vmods, no
/// execution); diagnostics must render against the source map.
pub fn vcl(data: &[u8]) {
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

/// A log query: parsing never panics, the case-insensitive parse accepts
/// exactly what the plain one does, errors render, and a parsed query
/// evaluates against an empty group.
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
        }
        Err(e) => {
            let _ = e.varnish_report(&text);
        }
    }
}
