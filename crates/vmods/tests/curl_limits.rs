//! vmod `curl`'s process-wide limits (the `curl_timeout` and
//! `curl_max_inflight` parameters), in a test binary of their own since
//! they change state every call in the process shares.

mod common;

use std::time::{Duration, Instant};

use common::curl_vcl::*;
use lacquer_vcl::exec::LogKind;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::subs::BuiltinSub;

/// The process-wide limits (the `curl_timeout` and `curl_max_inflight`
/// parameters); one test, as they are global to the process.
#[tokio::test]
async fn process_limits_default_timeout_and_cap_on_calls_in_flight() {
    let port = silent_endpoint().await;
    let l = load(&format!(
        r#"
sub vcl_recv {{
    curl.get("http://127.0.0.1:{port}/");
    set req.http.e = curl.status() + " " + curl.error();
    return (hash);
}}"#
    ));
    lacquer_vmods::curl_set_defaults(None, 0);
    let mut c = MockContext::new("GET", "/");
    let (_, waits) = l.run(BuiltinSub::Recv, &mut c).await;
    assert_eq!(waits, 0);
    let e = hdr(&c, "e").unwrap();
    assert!(e.starts_with("0 Too many curl calls in flight"), "{e}");
    assert!(c.logs_of(LogKind::Error)[0].contains("curl_max_inflight"));

    lacquer_vmods::curl_set_defaults(Some(Duration::from_millis(100)), 10);
    let mut c = MockContext::new("GET", "/");
    let t0 = Instant::now();
    l.run(BuiltinSub::Recv, &mut c).await;
    let took = t0.elapsed();
    lacquer_vmods::curl_set_defaults(None, u64::MAX);
    assert!(hdr(&c, "e").unwrap().starts_with("0 Timeout was reached"));
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_millis(300),
        "{took:?}"
    );
}
