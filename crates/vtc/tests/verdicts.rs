//! Verdicts of the runner on tiny scripts, each checked against what
//! varnishtest 7.1.1 reports for the same script: an expectation that does
//! not hold, a misused command or a shell check that misses must fail the
//! test (a runner that ignored them would pass it), and the forms
//! varnishtest accepts must pass. No daemon is needed.

use lacquer_vtc::{Config, Status, run_test};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn cfg() -> Arc<Config> {
    let mut c = Config::new(Path::new("/nonexistent/daemon"));
    c.timeout = Duration::from_secs(20);
    Arc::new(c)
}

fn write(name: &str, body: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lacquer-vtc-verdicts-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    std::fs::write(&p, format!("varnishtest \"{name}\"\n{body}\n")).unwrap();
    p
}

/// A server answering one request with `X-A: abc` and a 5-byte body, and
/// a client checking `checks` on the response.
fn client_checks(checks: &str) -> String {
    format!(
        "server s1 {{\n rxreq\n txresp -hdr \"X-A: abc\" -body hello\n}} -start\n\
         client c1 -connect ${{s1_sock}} {{\n txreq\n rxresp\n{checks}\n}} -run\n"
    )
}

/// Run `body`; assert the status and, on failure, that the message holds
/// `msg`.
fn verdict(name: &str, body: &str, want: Status, msg: &str) {
    let r = run_test(&write(name, body), cfg());
    assert_eq!(
        r.status,
        want,
        "{name}: {:?}\n{}",
        r.failure,
        r.log.join("\n")
    );
    if want == Status::Failed {
        let f = r.failure.expect("a failed test names its failure");
        assert!(f.msg.contains(msg), "{name}: {}", f.msg);
    }
}

#[test]
fn failing_expectations_fail_the_test() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "status",
            "expect resp.status == 201",
            "EXPECT resp.status (200) == \"201\" failed",
        ),
        ("ne", "expect resp.status != 200", "(200) != \"200\""),
        ("re", "expect resp.http.x-a ~ ^b", "(abc) ~ \"^b\""),
        ("nre", "expect resp.http.x-a !~ ^a", "(abc) !~ \"^a\""),
        (
            "undef_ne",
            "expect resp.http.x-b != <undef>",
            "(<undef>) != \"<undef>\"",
        ),
        (
            "undef_eq",
            "expect resp.http.x-a == <undef>",
            "(abc) == \"<undef>\"",
        ),
        ("lt", "expect resp.bodylen < 5", "(5) < \"5\""),
        ("gt", "expect resp.bodylen > 5", "(5) > \"5\""),
        ("ge", "expect resp.bodylen >= 6", "(5) >= \"6\""),
        ("le", "expect resp.bodylen <= 4", "(5) <= \"4\""),
        ("gt_word", "expect resp.status -gt 200", "(200) -gt \"200\""),
        (
            "body",
            "expect resp.body == hellox",
            "(hello) == \"hellox\"",
        ),
        ("reason", "expect resp.reason == Not", "(OK) == \"Not\""),
        (
            "proto",
            "expect resp.proto == HTTP/1.0",
            "(HTTP/1.1) == \"HTTP/1.0\"",
        ),
        // Order operators compare numbers; text is never in order.
        ("str_lt", "expect resp.http.x-a < abd", "(abc) < \"abd\""),
        ("str_gt", "expect resp.http.x-a > abb", "(abc) > \"abb\""),
        ("str_num", "expect resp.http.x-a < 10", "(abc) < \"10\""),
        ("float", "expect resp.bodylen == 5.0", "(5) == \"5.0\""),
        (
            "bad_op",
            "expect resp.status === 200",
            "test not implemented",
        ),
    ];
    for (name, check, msg) in cases {
        verdict(name, &client_checks(check), Status::Failed, msg);
    }
}

#[test]
fn passing_expectation_forms() {
    // An unknown field is its own text; literals may stand on the left.
    verdict(
        "forms",
        &client_checks(
            "expect resp.nosuch == resp.nosuch\n expect 200 == resp.status\n \
             expect resp.http.X-A == abc\n expect resp.status -eq 200\n \
             expect resp.bodylen < 10.5",
        ),
        Status::Passed,
        "",
    );
}

#[test]
fn server_side_expectation_fails_the_test() {
    verdict(
        "server",
        "server s1 {\n rxreq\n expect req.url == /x\n txresp\n} -start\n\
         client c1 -connect ${s1_sock} {\n txreq -url /y\n rxresp\n} -run\nserver s1 -wait",
        Status::Failed,
        "EXPECT req.url (/y) == \"/x\" failed",
    );
}

#[test]
fn shell_checks() {
    let fails: &[(&str, &str, &str)] = &[
        ("exit", "shell -exit 1 {exit 0}", "got 0x0000 wanted 0x0001"),
        ("status", "shell {exit 2}", "got 0x0002 wanted 0x0000"),
        (
            "err",
            "shell -err {exit 0}",
            "shell did not fail as expected",
        ),
        (
            "expect",
            "shell -expect foo {echo bar}",
            "shell_expect not found",
        ),
        (
            "match",
            "shell -match ^foo {echo bar}",
            "shell_match failed",
        ),
        (
            "both",
            "shell -expect a -match b {echo ab}",
            "Cannot use -match with -expect",
        ),
    ];
    for (name, body, msg) in fails {
        verdict(name, body, Status::Failed, msg);
    }
    // As varnishtest compares WEXITSTATUS: a shell killed by a signal has
    // exit status 0, and `-err` takes it as a failure. Arguments after the
    // script are ignored (the second shell on a line never runs).
    verdict(
        "signal",
        "shell {kill -9 $$}\nshell -err {kill -9 $$}\nshell -exit 7 {exit 7}\n\
         shell {true} ; shell {exit 1}\nshell {true} # a comment",
        Status::Passed,
        "",
    );
}

#[test]
fn misused_top_level_commands_fail() {
    verdict(
        "delay",
        "delay x1",
        Status::Failed,
        "Syntax error in number (x1)",
    );
    verdict(
        "setenv",
        "setenv A B C",
        Status::Failed,
        "CMD setenv: Unexpected argument 'C'",
    );
    verdict(
        "unknown",
        "unknowncommand foo",
        Status::Failed,
        "Unknown command: \"unknowncommand\"",
    );
    verdict(
        "feature",
        "feature no_such_feature",
        Status::Failed,
        "unknown feature: no_such_feature",
    );
    verdict(
        "procexit",
        "process p1 {exit 3} -expect-exit 2 -run",
        Status::Failed,
        "Bad exit status",
    );
}

#[test]
fn feature_skips() {
    for (name, body) in [
        ("cmd", "feature cmd false\nshell {exit 1}"),
        ("not_cmd", "feature !cmd true\nshell {exit 1}"),
        ("not_64bit", "feature !64bit\nshell {exit 1}"),
        ("persistent", "feature persistent_storage\nshell {exit 1}"),
    ] {
        verdict(name, body, Status::Skipped, "");
    }
    verdict(
        "present",
        "feature !cmd false cmd true 64bit ipv4 !topbuild !sanitizer\nfeature !ignore_unknown_macro\n\
         shell -expect {${nope}} {echo '${nope}'}",
        Status::Passed,
        "",
    );
}

/// `lacquerd` beside this test program or in the workspace's
/// `target/debug` (as `crates/difftest` finds it).
fn lacquerd() -> PathBuf {
    let here = std::env::current_exe().ok();
    let beside = here
        .as_deref()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .map(|d| d.join("lacquerd"));
    let fallback = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/lacquerd");
    match beside.filter(|p| p.is_file()) {
        Some(p) => p,
        None if fallback.is_file() => fallback,
        None => panic!(
            "lacquerd not found beside the test or in target/debug: run `cargo build -p lacquerd`"
        ),
    }
}

#[test]
fn daemon_expectations_fail_the_test() {
    let mut c = Config::new(&lacquerd());
    c.timeout = Duration::from_secs(30);
    let cfg = Arc::new(c);
    let v1 = "varnish v1 -vcl { backend b none; sub vcl_recv { return (synth(200)); } } -start\n";
    let cases: &[(&str, &str, &str)] = &[
        (
            "counter",
            "varnish v1 -expect MAIN.client_req == 5",
            "Not true: MAIN.client_req (0) == 5 (5)",
        ),
        (
            "counter_ne",
            "varnish v1 -expect MAIN.client_req != 0",
            "Not true: MAIN.client_req (0) != 0 (0)",
        ),
        (
            "no_counter",
            "varnish v1 -expect MAIN.nosuch_counter == 0",
            "MAIN.nosuch_counter",
        ),
        (
            "cliok",
            "varnish v1 -cliok \"param.set nosuch 1\"",
            "FAIL CLI response 106 expected 200",
        ),
        (
            "clierr",
            "varnish v1 -clierr 106 \"param.show default_ttl\"",
            "FAIL CLI response 200 expected 106",
        ),
        (
            "errvcl",
            "varnish v1 -errvcl {nothing} {backend b none;}",
            "VCL compilation succeeded expected failure",
        ),
        (
            "vcl",
            "varnish v1 -vcl {backend b none; sub vcl_recv { set req.http.x = nosuch; } }",
            "VCL compilation failed expected success",
        ),
        (
            "cliexpect",
            "varnish v1 -cliexpect \"^nothing here\" \"param.show default_ttl\"",
            "Expect failed (no match)",
        ),
        (
            "client",
            "client c1 {\n txreq\n rxresp\n expect resp.status == 201\n} -run",
            "EXPECT resp.status (200) == \"201\" failed",
        ),
        (
            "logexpect_fail",
            "logexpect l1 -v v1 -g raw {\n fail add * ReqURL /bad\n expect * * ReqURL /good\n fail clear\n} -start\n\
             client c1 {\n txreq -url /bad\n rxresp\n txreq -url /good\n rxresp\n} -run\nlogexpect l1 -wait",
            "expectation failed",
        ),
    ];
    for (name, body, msg) in cases {
        let r = run_test(
            &write(&format!("d_{name}"), &format!("{v1}{body}")),
            cfg.clone(),
        );
        assert_eq!(r.status, Status::Failed, "{name}: {:?}", r.failure);
        let f = r.failure.expect("a failed test names its failure");
        assert!(f.msg.contains(msg), "{name}: {}", f.msg);
        // As varnishtest logs them: on the instance that failed.
        let actor = if *name == "client" {
            "c1"
        } else if name.starts_with("logexpect") {
            "l1"
        } else {
            "v1"
        };
        assert_eq!(f.actor, actor, "{name}");
    }
    // The same instance passes when the expectations hold.
    let r = run_test(
        &write(
            "d_pass",
            &format!(
                "{v1}client c1 {{\n txreq\n rxresp\n expect resp.status == 200\n}} -run\n\
                 varnish v1 -expect MAIN.client_req == 1\nvarnish v1 -clierr 106 \"param.set nosuch 1\""
            ),
        ),
        cfg,
    );
    assert_eq!(
        r.status,
        Status::Passed,
        "{:?}\n{}",
        r.failure,
        r.log.join("\n")
    );
}
