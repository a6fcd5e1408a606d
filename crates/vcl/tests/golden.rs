//! Golden diagnostics: every `tests/golden/*.vcl` is parsed and its
//! diagnostics, rendered in Varnish's layout and in compact form, must equal
//! the neighbouring `.out` file. Run with `BLESS=1` to (re)write the `.out`
//! files after an intended change, then review the diff.

use std::path::PathBuf;

use lacquer_vcl::parser::{ParseOptions, parse_source};
use lacquer_vcl::source::SourceMap;

fn render(name: &str, bytes: &[u8]) -> String {
    let mut sm = SourceMap::new();
    let (_, _, diags) = parse_source(&mut sm, name, bytes, &ParseOptions::default());
    format!(
        "== varnish ==\n{}== compact ==\n{}",
        diags.render(&sm),
        diags.render_compact(&sm)
    )
}

#[test]
fn golden_diagnostics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let bless = std::env::var_os("BLESS").is_some();
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/golden exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "vcl"))
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 10, "golden inputs missing");
    let mut mismatches = Vec::new();
    for input in &inputs {
        let name = input.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(input).expect("readable golden input");
        let got = render(&name, &bytes);
        let out = input.with_extension("out");
        if bless {
            std::fs::write(&out, &got).expect("write .out");
            continue;
        }
        let want = std::fs::read_to_string(&out)
            .unwrap_or_else(|_| panic!("{} missing: run with BLESS=1", out.display()));
        if got != want {
            mismatches.push(format!("{name}:\n--- expected\n{want}--- got\n{got}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "golden mismatches (BLESS=1 to accept):\n{}",
        mismatches.join("\n")
    );
}
