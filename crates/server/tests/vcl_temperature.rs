//! Backends created while a VCL goes cold: a cooling VCL (one a vmod
//! still holds) gets none, a cold one panics the cache process, as in
//! varnishd; the vmods the loaded VCLs hold, as `debug.vmod` lists them.

mod common;

use common::*;
use lacquer_server::daemon::Running;

fn cli(l: &Running, words: &[&str]) -> (u16, String) {
    let w: Vec<String> = words.iter().map(|s| s.to_string()).collect();
    let r = lacquer_server::mgt::dispatch(&l.shared, &w);
    (r.status, r.body)
}

/// A VCL whose vmod debug creates a backend from its cold event.
fn doomed_vcl(be: std::net::SocketAddr, call: &str) -> String {
    vcl_with(
        be,
        &format!("import debug;\nsub vcl_init {{ debug.{call}(); }}\n"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_made_while_going_cold() {
    let be = backend(|_| (std::time::Duration::ZERO, ok("x", ""))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &["debug=+vtc_mode"]).await;
    let (st, _) = cli(
        &l,
        &[
            "vcl.inline",
            "cooling",
            &doomed_vcl(be.addr, "cooling_backend"),
        ],
    );
    assert_eq!(st, 200);
    assert_eq!(
        cli(&l, &["debug.vmod"]),
        (200, "    1 debug (built in)\n".into())
    );
    // Held while warm, the VCL cools first: the backend is refused and
    // the hold goes, leaving it cold.
    assert_eq!(cli(&l, &["vcl.state", "cooling", "cold"]).0, 200);
    assert!(l.shared.is_running());
    let (_, list) = cli(&l, &["vcl.list"]);
    assert!(
        list.lines()
            .any(|r| r.contains("cooling") && r.split_whitespace().nth(2) == Some("cold")),
        "{list}"
    );
    assert_eq!(cli(&l, &["panic.show"]).0, 300);
    let (st, _) = cli(
        &l,
        &["vcl.inline", "doomed", &doomed_vcl(be.addr, "cold_backend")],
    );
    assert_eq!(st, 200);
    assert_eq!(
        cli(&l, &["debug.vmod"]),
        (200, "    2 debug (built in)\n".into())
    );
    // Nothing holds this one: it is cold at once, and a backend for a
    // cold VCL kills the cache process in the middle of the command.
    let (st, body) = cli(&l, &["vcl.state", "doomed", "cold"]);
    assert_eq!((st, body.as_str()), (400, "CLI communication error (hdr)"));
    assert!(!l.shared.is_running());
    let (st, panic) = cli(&l, &["panic.show"]);
    assert_eq!(st, 200);
    assert!(
        panic.contains("Dynamic Backends can only be added to warm VCLs"),
        "{panic}"
    );
}
