//! Fuzz target `hitch_conf`: arbitrary text through the hitch.conf parser,
//! checking invariants rather than just "no panic":
//! - an error names a line that exists in the text (or line 1 of an empty
//!   one);
//! - an accepted file's frontends all have a port, and every frontend's
//!   effective options offer at least one protocol version;
//! - a warning names the file and a line of it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines = text.split('\n').count();
    match lacquer_tls::conf::parse("f", &text) {
        Err(e) => {
            assert!(e.line >= 1 && e.line <= lines.max(1), "{e} ({lines} lines)");
            assert_eq!(e.file, "f");
        }
        Ok(c) => {
            for fe in &c.frontends {
                assert!(!fe.port.is_empty());
                assert!(!c.effective(fe).tls_protos.is_empty());
            }
            for w in &c.warnings {
                let rest = w.strip_prefix("f:").expect("a warning names the file");
                let n: usize = rest
                    .split(':')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("and the line");
                assert!(n >= 1 && n <= lines, "{w}");
            }
        }
    }
});
