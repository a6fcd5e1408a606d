//! Runs the corpus's own runner self-tests (`tests/a*.vtc` that need no
//! daemon) and checks they pass, plus a few synthetic scripts checking
//! failure reporting. The corpus is found by walking up from the crate
//! looking for `shared/vtc/varnish-7.1.1` (override: `LACQUER_VTC_CORPUS`).

use lacquer_vtc::{Config, Status, run_test};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn corpus() -> PathBuf {
    if let Ok(p) = std::env::var("LACQUER_VTC_CORPUS") {
        return PathBuf::from(p);
    }
    let mut d = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        let c = d.join("shared/vtc/varnish-7.1.1");
        if c.is_dir() {
            return c;
        }
        if !d.pop() {
            panic!(
                "vtc corpus not found: no shared/vtc/varnish-7.1.1 above {}; set LACQUER_VTC_CORPUS",
                env!("CARGO_MANIFEST_DIR")
            );
        }
    }
}

fn cfg() -> Arc<Config> {
    let mut c = Config::new(Path::new("/nonexistent/daemon"));
    c.timeout = Duration::from_secs(30);
    Arc::new(c)
}

/// Self-tests of the runner from the corpus that use no daemon, HTTP/2,
/// tunnels or terminal emulation.
const SELF_TESTS: &[&str] = &[
    "a00002.vtc",
    "a00003.vtc",
    "a00004.vtc",
    "a00005.vtc",
    "a00006.vtc",
    "a00007.vtc",
    "a00010.vtc",
    "a00011.vtc",
    "a00012.vtc",
    "a00015.vtc",
    "a00018.vtc",
    "a00019.vtc",
    "a00020.vtc",
    "a00021.vtc",
    "a00022.vtc",
];

#[test]
fn corpus_self_tests_pass() {
    let dir = corpus().join("tests");
    let mut bad = Vec::new();
    for t in SELF_TESTS {
        let r = run_test(&dir.join(t), cfg());
        if r.status != Status::Passed {
            bad.push(format!(
                "{t}: {:?} {:?}\n{}",
                r.status,
                r.failure,
                r.log.join("\n")
            ));
        }
    }
    assert!(bad.is_empty(), "failing self-tests:\n{}", bad.join("\n\n"));
}

fn write(name: &str, body: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lacquer-vtc-it-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn failure_names_line_and_actor() {
    let p = write(
        "fail.vtc",
        "varnishtest \"x\"\nserver s1 {\n rxreq\n txresp -status 404\n} -start\n\
         client c1 -connect ${s1_sock} {\n txreq\n rxresp\n expect resp.status == 200\n} -run\n",
    );
    let r = run_test(&p, cfg());
    assert_eq!(r.status, Status::Failed);
    let f = r.failure.unwrap();
    assert_eq!(f.actor, "c1");
    assert_eq!(f.line, 9);
    assert!(f.msg.contains("EXPECT resp.status (404)"), "{}", f.msg);
}

#[test]
fn skip_and_timeout() {
    let p = write(
        "skip.vtc",
        "varnishtest \"x\"\nfeature persistent_storage\ndelay 100\n",
    );
    assert_eq!(run_test(&p, cfg()).status, Status::Skipped);
    let p = write("slow.vtc", "varnishtest \"x\"\nshell {sleep 30}\n");
    let mut c = Config::new(Path::new("/nonexistent"));
    c.timeout = Duration::from_millis(500);
    let r = run_test(&p, Arc::new(c));
    assert_eq!(r.status, Status::Failed);
    assert!(r.duration < 10.0);
    assert!(r.failure.unwrap().msg.contains("TIMED OUT"));
}

#[test]
fn unknown_macro_is_an_error() {
    let p = write("macro.vtc", "varnishtest \"x\"\n\nshell \"echo ${nope}\"\n");
    let r = run_test(&p, cfg());
    let f = r.failure.unwrap();
    assert_eq!(f.line, 3);
    assert!(f.msg.contains("Macro ${nope} not found"));
}
