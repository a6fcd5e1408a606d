//! Replays every saved differential case under `tests/diff/cases/`
//! against varnishd and lacquerd: each was once a difference (found by the
//! generator or written for a branch it reached) and must now agree.

use lacquer_difftest::runner::{self, Pair};
use lacquer_difftest::scenario::Scenario;
use std::path::Path;

#[test]
fn saved_cases_agree_with_varnishd() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/diff/cases");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no cases in {}", dir.display());
    let root = std::env::temp_dir().join(format!("lacquer-difftest-reg-{}", std::process::id()));
    let progs = lacquer_difftest::daemon::Programs::build_and_find().expect("programs");
    let mut p = Pair::start_with(&root, progs).expect("varnishd and lacquerd start");
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("case readable");
        let sc = Scenario::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let (v, l) = runner::both(&mut p, &sc).expect("scenario runs");
        if let Some(d) = runner::compare(&v, &l) {
            bad.push(format!(
                "{}: {}\n  varnishd: {}\n  lacquerd: {}",
                f.display(),
                d.class,
                d.varnish,
                d.lacquer
            ));
        }
    }
    drop(p);
    let _ = std::fs::remove_dir_all(&root);
    assert!(bad.is_empty(), "cases that differ:\n{}", bad.join("\n"));
}
