//! The `VMOD_CURL` counters: calls from VCL through vmods curl and http
//! are counted in a section of their own (calls, calls without a
//! response, timeouts, refusals at `curl_max_inflight`), not in `MAIN`.
//! (A test binary of its own: the set is
//! process-wide, published in the counters of the daemon whose VCL
//! imported curl first.)

mod common;

use std::time::Duration;

use common::*;

fn counters(l: &lacquer_server::mgt::daemon::Running) -> Vec<lacquer_vsl::vsc::CounterValue> {
    let path = lacquer_vsl::vsc::vsc_path(&l.shared.workdir);
    lacquer_vsl::vsc::VscReader::open(&path)
        .unwrap()
        .snapshot()
        .unwrap()
}

fn counter(snap: &[lacquer_vsl::vsc::CounterValue], name: &str) -> Option<u64> {
    lacquer_vsl::vsc::lookup(snap, name).map(|c| c.value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_calls_are_counted_in_their_own_section() {
    let svc = backend(|r| {
        let wait = if r.url == "/slow" {
            Duration::from_millis(400)
        } else {
            Duration::ZERO
        };
        (wait, ok("", "X-Ok: 1\r\n"))
    })
    .await;
    let dead = {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    let vcl = vcl_with(
        svc.addr,
        &format!(
            r#"
import curl;
import http;
sub vcl_recv {{
    if (req.url == "/timeout") {{
        curl.set_timeout(100);
        curl.get("http://{svc}/slow");
    }} else if (req.url == "/refused") {{
        curl.get("http://{dead}/");
    }} else if (req.url == "/bad") {{
        curl.get("gopher://{svc}/");
    }} else if (req.url == "/http") {{
        http.init(1);
        http.req_set_url(1, "http://{svc}/h");
        http.req_send(1);
        http.resp_wait(1);
        return (synth(200 + http.resp_get_status(1) - 200));
    }} else {{
        curl.get("http://{svc}/ok");
    }}
    return (synth(200 + curl.status() - 200));
}}
"#,
            svc = svc.addr
        ),
    );
    let l = lacquer(&vcl, &["curl_max_inflight=1"]).await;
    let a = l.first_addr().unwrap();
    let before = counters(&l);
    assert_eq!(counter(&before, "VMOD_CURL.calls"), Some(0));

    assert_eq!(get(a, "/", "").await.status, 200);
    assert_eq!(get(a, "/http", "").await.status, 200);
    // No response: the timeout, the refused connection, the bad URL.
    // (A status of 0 makes synth(0) a 503.)
    assert_ne!(get(a, "/timeout", "").await.status, 200);
    assert_ne!(get(a, "/refused", "").await.status, 200);
    assert_ne!(get(a, "/bad", "").await.status, 200);
    // Over the cap (one call in flight): the second of two slow calls is
    // refused at once.
    let first = tokio::spawn(async move { get(a, "/timeout", "").await.status });
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_ne!(get(a, "/", "").await.status, 200);
    first.await.unwrap();

    let after = counters(&l);
    let c = |n: &str| counter(&after, &format!("VMOD_CURL.{n}")).unwrap();
    assert_eq!(c("calls"), 7);
    assert_eq!(c("failed"), 5);
    assert_eq!(c("timeouts"), 2);
    assert_eq!(c("inflight_cap"), 1);
}
