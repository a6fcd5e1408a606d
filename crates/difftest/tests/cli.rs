//! Management-CLI replies against varnishd: every script of
//! `tests/diff/cli/` (parameter errors and bounds, bans, VCL and backend
//! commands) is sent to both daemons and each reply's status and text
//! must agree (`lacquer_difftest::cli` says what is normalised).

use lacquer_difftest::runner::Pair;
use std::path::Path;

#[test]
fn cli_replies_agree_with_varnishd() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/diff/cli");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/diff/cli exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cli"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scripts in {}", dir.display());
    let root = std::env::temp_dir().join(format!("lacquer-difftest-cli-{}", std::process::id()));
    let progs = lacquer_difftest::daemon::Programs::build_and_find().expect("programs");
    let mut p = Pair::start_with(&root, progs).expect("varnishd and lacquerd start");
    let mut report = String::new();
    for f in &files {
        let cmds = lacquer_difftest::cli::commands(&std::fs::read_to_string(f).unwrap());
        let v = lacquer_difftest::cli::replies(&mut p.v, &cmds).expect("varnishd replies");
        let l = lacquer_difftest::cli::replies(&mut p.l, &cmds).expect("lacquerd replies");
        for (c, a, b) in lacquer_difftest::cli::differences(&cmds, &v, &l) {
            report.push_str(&format!(
                "=== {}: {c}\n--- varnishd\n{a}\n--- lacquerd\n{b}\n",
                f.display()
            ));
        }
    }
    drop(p);
    let _ = std::fs::remove_dir_all(&root);
    assert!(
        report.is_empty(),
        "{report}(run `lacquer-difftest cli tests/diff/cli` to see them)"
    );
}
