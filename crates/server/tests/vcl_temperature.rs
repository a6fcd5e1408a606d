//! A VCL's life as its vmods see it. Backends created while a VCL goes
//! cold: a cooling VCL (one a vmod still holds) gets none, a cold one
//! panics the cache process, as in varnishd; the vmods the loaded VCLs
//! hold, as `debug.vmod` lists them; a VCL failing its `vcl_init` ends
//! its vmods' state as a discarded one does.

mod common;

use common::*;
use lacquer_server::mgt::daemon::Running;

fn cli(l: &Running, words: &[&str]) -> (u16, String) {
    let w: Vec<String> = words.iter().map(|s| s.to_string()).collect();
    let r = lacquer_server::mgt::commands::dispatch(&l.shared, &w);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_init_ends_the_vmods_state() {
    use lacquer_vsl::{ReadEvent, StartAt, Tag, VslReader, vsl_path};
    let be = backend(|_| (std::time::Duration::ZERO, ok("x", ""))).await;
    let l = lacquer(
        &vcl_with(be.addr, ""),
        &["debug=+vtc_mode", "vsl_mask=+Debug"],
    )
    .await;
    let mut r = VslReader::open(&vsl_path(&l.shared.workdir), StartAt::Oldest).unwrap();
    let failing = vcl_with(
        be.addr,
        "import debug;\nsub vcl_init { debug.register_obj_events(); return (fail); }\n",
    );
    let (st, body) = cli(&l, &["vcl.inline", "failing", &failing]);
    assert_ne!(st, 200);
    assert!(body.contains("Failed initialization"), "{body}");
    let mut debug = Vec::new();
    loop {
        match r.next_event() {
            ReadEvent::Record(rec) if rec.tag == Tag::Debug => {
                debug.push(String::from_utf8_lossy(&rec.data).into_owned());
            }
            ReadEvent::Record(_) | ReadEvent::Overrun { .. } => {}
            ReadEvent::Idle => break,
        }
    }
    let at = |m: &str| debug.iter().position(|d| d == m);
    let (sub, unsub) = (
        at("Subscribed to Object Events"),
        at("Unsubscribed from Object Events"),
    );
    assert!(sub.is_some() && unsub > sub, "{debug:?}");
    // Nothing listens any more: a fetched object is not reported.
    assert_eq!(get(l.first_addr().unwrap(), "/", "").await.status, 200);
    while let ReadEvent::Record(rec) = r.next_event() {
        let d = String::from_utf8_lossy(&rec.data).into_owned();
        assert!(!d.starts_with("Object Event"), "{d}");
    }
}
