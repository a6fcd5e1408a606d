//! `-I`: the CLI command file run before the cache starts. A command that
//! fails stops the start with varnishd's message, unless its line starts
//! with `-`; a file that cannot be read is refused.

mod common;

use lacquer_server::mgt::daemon::{self, Config};

fn config(tag: &str, cli_file: std::path::PathBuf) -> Config {
    Config {
        cli_file: Some(cli_file),
        ..common::bare_config(&format!("cli-file-{tag}"))
    }
}

fn file(tag: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("lacquer-cli-file-{tag}-{}.cli", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[tokio::test]
async fn commands_run_and_a_failure_stops_the_start() {
    let ok = file("ok", "ping\n-vcl.load\nparam.set default_ttl 42\n");
    let r = daemon::start(config("ok", ok.clone()))
        .await
        .expect("starts");
    assert_eq!(r.shared.params().duration("default_ttl"), 42.0);
    let bad = file("bad", "vcl.list\n-foobar\nvcl.load\n");
    let e = daemon::start(config("bad", bad.clone()))
        .await
        .expect_err("refused");
    assert!(e.starts_with("-I file CLI command failed (104)\n"), "{e}");
    let e = daemon::start(config("none", "/nonexistent/file".into()))
        .await
        .expect_err("refused");
    assert!(e.starts_with("Can't open /nonexistent/file: "), "{e}");
    for p in [ok, bad] {
        let _ = std::fs::remove_file(p);
    }
}
