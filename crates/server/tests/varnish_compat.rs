//! End-to-end checks of behaviours taken from Varnish's own test suite
//! (b00001, b00002, b00003, b00012, b00023, b00038): what VCL sees, which
//! counters move, and how retries end.

mod common;

use std::time::Duration;

use common::*;
use lacquer_server::runtime::counters::Main;
use tokio::io::AsyncWriteExt;

const NO: Duration = Duration::ZERO;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vcl_pipe_sees_the_client_request() {
    let be = backend(|_| (NO, ok("piped", ""))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
sub vcl_recv { return (pipe); }
sub vcl_pipe {
    set bereq.http.x-url = req.url;
    set bereq.http.x-conn = req.http.connection;
}
"#,
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    let r = raw(
        a,
        b"GET /u1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(r.text(), "piped");
    let seen = be.last();
    assert_eq!(seen.header("x-url"), Some("/u1"));
    assert_eq!(seen.header("x-conn"), Some("keep-alive"));
    assert_eq!(seen.header("connection"), Some("close"));
    assert_eq!(l.shared.counters.get(Main::s_pipe), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_ttl_reads_zero_and_fetches_are_counted() {
    let be = backend(|_| (NO, ok("x", "Cache-Control: max-age=120\r\n"))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
sub vcl_recv { if (req.url == "/pass") { return (pass); } }
sub vcl_backend_response { set beresp.http.x-ttl = beresp.ttl; }
"#,
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    let r = get(a, "/pass", "").await;
    assert_eq!(r.header("x-ttl"), Some("0.000"), "a pass has no ttl");
    let r = get(a, "/cached", "").await;
    assert_eq!(r.header("x-ttl"), Some("120.000"));
    get(a, "/cached", "").await;
    let c = &l.shared.counters;
    assert_eq!(
        c.get(Main::s_fetch),
        2,
        "a miss and a pass fetch, a hit not"
    );
    assert_eq!(c.get(Main::fetch_length), 2);
    assert_eq!(c.get(Main::beresp_uncacheable), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_count_as_readahead() {
    let be = backend(|r| (NO, ok(&r.url, "Cache-Control: max-age=60\r\n"))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &[]).await;
    let a = l.first_addr().unwrap();
    let mut s = tokio::net::TcpStream::connect(a).await.unwrap();
    s.write_all(b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\nGET /2 HTTP/1.1\r\nHost: t\r\n\r\nGET /3 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    for u in ["/1", "/2", "/3"] {
        assert_eq!(read_resp(&mut s, false).await.text(), u);
    }
    assert_eq!(l.shared.counters.get(Main::sess_readahead), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_from_backend_response_end_in_backend_error() {
    let be = backend(|_| (NO, ok("x", ""))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
sub vcl_backend_response { return (retry); }
sub vcl_backend_error {
    set beresp.http.x-retries = bereq.retries;
    return (deliver);
}
"#,
    );
    let l = lacquer(&vcl, &["max_retries=2"]).await;
    let a = l.first_addr().unwrap();
    let r = get(a, "/", "").await;
    assert_eq!(r.status, 503);
    assert_eq!(
        r.header("x-retries"),
        Some("3"),
        "the failed attempt counts"
    );
    let c = &l.shared.counters;
    assert_eq!(
        c.get(Main::backend_retry),
        0,
        "only connection retries count"
    );
    assert_eq!(
        c.get(Main::fetch_failed),
        1,
        "vcl_backend_error counts once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_count_up_before_the_limit_is_checked() {
    let be = backend(|_| (NO, ok("x", ""))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
sub vcl_recv { return (restart); }
sub vcl_synth { set resp.http.x-restarts = req.restarts; }
"#,
    );
    let l = lacquer(&vcl, &["max_restarts=2"]).await;
    let r = get(l.first_addr().unwrap(), "/", "").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-restarts"), Some("3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_body_without_streaming_is_a_503() {
    let be = backend(|_| {
        (
            NO,
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc".to_vec(),
        )
    })
    .await;
    let vcl = vcl_with(
        be.addr,
        "sub vcl_backend_response { set beresp.do_stream = false; }",
    );
    let l = lacquer(&vcl, &["between_bytes_timeout=0.3"]).await;
    let r = get(l.first_addr().unwrap(), "/", "").await;
    assert_eq!(r.status, 503);
    assert_eq!(l.shared.counters.get(Main::fetch_failed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_objects_are_revalidated_with_a_conditional_fetch() {
    let be = backend(|r| {
        if r.header("if-modified-since").is_some() {
            (NO, b"HTTP/1.1 304 Not Modified\r\n\r\n".to_vec())
        } else {
            (
                NO,
                ok("body", "Last-Modified: Wed, 11 Sep 2013 13:36:55 GMT\r\n"),
            )
        }
    })
    .await;
    let vcl = vcl_with(
        be.addr,
        r#"
sub vcl_backend_response {
    set beresp.ttl = 0.1s;
    set beresp.grace = 0s;
    set beresp.keep = 60s;
    set beresp.http.was-304 = beresp.was_304;
}
"#,
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    let r = get(a, "/", "").await;
    assert_eq!(r.header("was-304"), Some("false"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = get(a, "/", "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "body", "the stale body is reused");
    assert_eq!(r.header("was-304"), Some("true"));
    assert_eq!(
        be.last().header("if-modified-since"),
        Some("Wed, 11 Sep 2013 13:36:55 GMT")
    );
    assert_eq!(l.shared.counters.get(Main::fetch_304), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synth_that_always_restarts_ends() {
    let be = backend(|_| (NO, ok("x", ""))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
sub vcl_recv { return (synth(503)); }
sub vcl_synth {
    set resp.http.restarts = req.restarts;
    return (restart);
}
"#,
    );
    let l = lacquer(&vcl, &[]).await;
    let r = get(l.first_addr().unwrap(), "/", "").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("restarts"), Some("5"), "default max_restarts is 4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_request_head_is_closed_without_answer() {
    use tokio::io::AsyncReadExt;
    let be = backend(|_| (NO, ok("x", ""))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &["http_req_size=256"]).await;
    let mut s = tokio::net::TcpStream::connect(l.first_addr().unwrap())
        .await
        .unwrap();
    let big = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(400)
    );
    s.write_all(big.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // As varnishd's (which leaves the rest of the request unread), the
    // close is a reset.
    let r = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .expect("closed within 5s");
    assert_eq!(
        r.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionReset)
    );
    assert!(out.is_empty(), "got {:?}", String::from_utf8_lossy(&out));
    assert_eq!(be.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_in_deliver_starts_the_response_over() {
    let be = backend(|_| (NO, ok("hello", "X-Obj: 1\r\nCache-Control: max-age=60\r\n"))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
import std;
sub vcl_recv { set req.http.x-added = "1"; }
sub vcl_deliver {
    set resp.http.x-gone = "1";
    unset resp.http.X-Obj;
    set resp.status = 404;
    std.rollback(req);
    set resp.http.x-req-added = req.http.x-added;
}
"#,
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    for round in ["miss", "hit"] {
        let r = get(a, "/", "").await;
        assert_eq!(r.status, 200, "{round}: the object's status again");
        assert_eq!(r.header("x-obj"), Some("1"), "{round}: unset undone");
        assert_eq!(r.header("x-gone"), None, "{round}: set undone");
        assert_eq!(
            r.header("x-req-added"),
            Some(""),
            "{round}: req rolled back"
        );
        assert!(r.header("via").is_some() && r.header("age").is_some());
        assert_eq!(r.text(), "hello");
    }
    let r = get(a, "/", "").await;
    let xv = r.header("x-varnish").unwrap_or_default();
    assert_eq!(xv.split(' ').count(), 2, "a hit keeps both vxids: {xv}");
}
