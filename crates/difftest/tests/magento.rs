//! Runs the store-shaped scenario (`lacquer_difftest::magento`, issue 23)
//! against varnishd and lacquerd: every answer, what the origin received
//! and the counters must agree.

use lacquer_difftest::runner::{self, Pair};

#[test]
fn store_scenario_agrees_with_varnishd() {
    let sc = lacquer_difftest::magento::scenario();
    assert!(
        sc.steps.len() >= 100,
        "the client script has {} requests",
        sc.steps.len()
    );
    let root = std::env::temp_dir().join(format!("lacquer-difftest-mag-{}", std::process::id()));
    let progs = lacquer_difftest::daemon::Programs::build_and_find().expect("programs");
    let mut p = Pair::start_with(&root, progs).expect("varnishd and lacquerd start");
    let (v, l) = runner::both(&mut p, &sc).expect("scenario runs");
    drop(p);
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(v.first().map(String::as_str), Some("vcl accepted"), "{v:?}");
    if let Some(d) = runner::compare(&v, &l) {
        panic!(
            "{} differs\n  varnishd: {}\n  lacquerd: {}\n(run `lacquer-difftest magento` for both transcripts)",
            d.class, d.varnish, d.lacquer
        );
    }
}
