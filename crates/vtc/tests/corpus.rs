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

/// Self-tests of the runner from the corpus that use no daemon, tunnels
/// or outside tools.
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
    "a02000.vtc",
    "a02001.vtc",
    "a02002.vtc",
    "a02003.vtc",
    "a02004.vtc",
    "a02005.vtc",
    "a02006.vtc",
    "a02007.vtc",
    "a02008.vtc",
    "a02009.vtc",
    "a02010.vtc",
    "a02011.vtc",
    "a02012.vtc",
    "a02013.vtc",
    "a02014.vtc",
    "a02015.vtc",
    "a02016.vtc",
    "a02017.vtc",
    "a02018.vtc",
    "a02019.vtc",
    "a02020.vtc",
    "a02021.vtc",
    "a02023.vtc",
    "a02024.vtc",
    "a02025.vtc",
    "a02026.vtc",
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

#[test]
fn h2_malformed_frame_is_a_clear_failure() {
    // A PING frame one byte short, then a frame for stream 1 with a bad
    // HPACK index: both must fail the test with a message, not panic.
    let p = write(
        "h2bad.vtc",
        "varnishtest \"x\"\nserver s1 {\n rxpri\n stream 0 {\n  sendhex \"00 00 07 06 00 00 00 00 00 31 32 33 34 35 36 37\"\n } -run\n} -start\n\
         client c1 -connect ${s1_sock} {\n txpri\n stream 0 {\n  rxping\n } -run\n} -run\n",
    );
    let r = run_test(&p, cfg());
    assert_eq!(r.status, Status::Failed);
    let f = r.failure.unwrap();
    assert_eq!(f.actor, "c1.0");
    assert!(f.msg.contains("PING frame: size should be 8"), "{}", f.msg);

    let p = write(
        "h2hpack.vtc",
        "varnishtest \"x\"\nserver s1 {\n stream 1 {\n  rxreq\n  txresp -idxHdr 99\n } -run\n} -start\n\
         client c1 -connect ${s1_sock} {\n stream 1 {\n  txreq\n  rxresp\n } -run\n} -run\n",
    );
    let r = run_test(&p, cfg());
    assert_eq!(r.status, Status::Failed);
    let f = r.failure.unwrap();
    assert!(f.msg.contains("Header decoding failed"), "{}", f.msg);
    assert!(f.msg.contains("index 99"), "{}", f.msg);
}

#[test]
fn process_screen() {
    let p = write(
        "term.vtc",
        "varnishtest \"x\"\nprocess p1 {printf 'ab\\033[3;5Hxy'} -run\n\
         process p1 -expect-text 3 5 xy -expect-text 0 0 ab -expect-cursor 3 7\n\
         process p1 -match-text 1 1 \"^ab +\\n\"\n\
         process p2 {stty size; echo $TERM} -winsz 30 100 -run -expect-text 0 1 \"30 100\" -expect-text 2 1 xterm\n\
         process p3 {exit 3} -expect-exit 3 -run\n",
    );
    let r = run_test(&p, cfg());
    assert_eq!(
        r.status,
        Status::Passed,
        "{:?}\n{}",
        r.failure,
        r.log.join("\n")
    );
    let p = write(
        "termfail.vtc",
        "varnishtest \"x\"\nprocess p1 {printf abc} -run\nprocess p1 -expect-cursor 2 1\n",
    );
    let r = run_test(&p, cfg());
    let f = r.failure.unwrap();
    assert!(f.msg.contains("Cursor on line 1 (expected 2)"), "{}", f.msg);
}
