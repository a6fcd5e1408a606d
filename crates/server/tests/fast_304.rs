//! `utils.fast_304()` (Varnish Enterprise) on a scripted origin: a 304
//! revalidation refreshes the stored object in place, its stored headers
//! as they were, which the StorageGRID guide's range handling relies on
//! (it unsets its 206 marker in vcl_backend_response before looking at
//! the status, so a revalidated fragment would otherwise come back 200);
//! without it the object is remade from the merged headers.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

const NO: Duration = Duration::ZERO;

/// The guide's fragment logic, with or without `utils.fast_304()`.
fn vcl(addr: std::net::SocketAddr, fast: bool) -> String {
    vcl_with(
        addr,
        &format!(
            r#"
import kvstore;
import urlplus;
import utils;
sub vcl_init {{ new hits = kvstore.init(); }}
sub vcl_recv {{
    if (req.http.Range) {{
        set req.http.x-range = req.http.Range;
        unset req.http.Range;
    }}
    return (hash);
}}
sub vcl_hash {{
    if (req.http.x-range) {{ hash_data(req.http.x-range); }}
    hash_data(urlplus.url_get());
    return (lookup);
}}
sub vcl_hit {{ return (pass); }}
sub vcl_backend_fetch {{
    if (bereq.http.x-range) {{
        set bereq.http.Range = bereq.http.x-range;
        unset bereq.http.x-range;
    }}
}}
sub vcl_backend_response {{
    if (beresp.was_304) {{
        hits.counter(urlplus.url_get(), 1);
    }} else {{
        hits.delete(urlplus.url_get());
    }}
    unset beresp.http.X-206;
    if (beresp.status == 206) {{
        set beresp.http.X-206 = "true";
        set beresp.status = 200;
        set beresp.http.x-content-range = beresp.http.Content-Range;
        unset beresp.http.Content-Range;
    }}
    set beresp.ttl = 0.000001s;
    set beresp.grace = 0s;
    set beresp.keep = 10y;
    {}
    set beresp.http.x-fast = utils.is_fast_304();
}}
sub vcl_deliver {{
    if (resp.http.X-206 == "true") {{
        set resp.status = 206;
        unset resp.http.X-206;
    }}
    if (resp.http.x-content-range) {{
        set resp.http.Content-Range = resp.http.x-content-range;
        unset resp.http.x-content-range;
    }}
    set resp.http.x-hits = hits.counter(urlplus.url_get(), 0);
}}
"#,
            if fast { "utils.fast_304();" } else { "" }
        ),
    )
}

/// An origin with one object: 206 for a Range, 304 for a matching
/// If-None-Match; counts the bodies it sent.
async fn origin() -> (Backend, Arc<AtomicUsize>, Arc<Mutex<Vec<Option<String>>>>) {
    let bodies = Arc::new(AtomicUsize::new(0));
    let conds = Arc::new(Mutex::new(Vec::new()));
    let (b2, c2) = (bodies.clone(), conds.clone());
    let be = backend(move |r| {
        let inm = r.header("if-none-match").map(str::to_string);
        c2.lock().unwrap().push(inm.clone());
        if inm.as_deref() == Some("\"v1\"") {
            return (
                NO,
                b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nX-Origin: fresh\r\n\r\n".to_vec(),
            );
        }
        b2.fetch_add(1, Ordering::SeqCst);
        let resp = match r.header("range") {
            Some("bytes=2-5") => b"HTTP/1.1 206 Partial Content\r\nETag: \"v1\"\r\n\
                 Content-Range: bytes 2-5/10\r\nContent-Length: 4\r\n\r\n2345"
                .to_vec(),
            _ => ok("0123456789", "ETag: \"v1\"\r\n"),
        };
        (NO, resp)
    })
    .await;
    (be, bodies, conds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_304_keeps_the_stored_fragment() {
    let (be, bodies, conds) = origin().await;
    let l = lacquer(&vcl(be.addr, true), &["http_gzip_support=off"]).await;
    let a = l.first_addr().unwrap();
    for n in 0..4 {
        let r = get(a, "/bucket/key?X-Amz-Signature=abc", "Range: bytes=2-5\r\n").await;
        assert_eq!(r.status, 206, "request {n}: {:?}", r.headers);
        assert_eq!(r.text(), "2345", "request {n}");
        assert_eq!(
            r.header("content-range"),
            Some("bytes 2-5/10"),
            "request {n}"
        );
        assert_eq!(
            r.header("x-hits"),
            Some(n.to_string().as_str()),
            "request {n}"
        );
        // The stored headers, not the 304's or VCL's second pass.
        assert_eq!(r.header("x-origin"), None, "request {n}");
        assert_eq!(r.header("x-fast"), Some("false"), "request {n}");
    }
    // One body from the origin; every later GET a conditional one.
    assert_eq!(bodies.load(Ordering::SeqCst), 1);
    let c = conds.lock().unwrap().clone();
    assert_eq!(c.len(), 4);
    assert!(
        c[0].is_none() && c[1..].iter().all(|v| v.as_deref() == Some("\"v1\"")),
        "{c:?}"
    );
    // The whole object is another object of the same URL: the hit
    // counter (per URL) starts over with its full fetch.
    let r = get(a, "/bucket/key", "").await;
    assert_eq!((r.status, r.text().as_str()), (200, "0123456789"));
    assert_eq!(r.header("x-hits"), Some("0"));
    let r = get(a, "/bucket/key", "").await;
    assert_eq!((r.status, r.header("x-hits")), (200, Some("1")));
    assert_eq!(bodies.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fast_304_the_fragment_is_remade() {
    let (be, bodies, _) = origin().await;
    let l = lacquer(&vcl(be.addr, false), &["http_gzip_support=off"]).await;
    let a = l.first_addr().unwrap();
    let r = get(a, "/k", "Range: bytes=2-5\r\n").await;
    assert_eq!((r.status, r.text().as_str()), (206, "2345"));
    // The 304 merges the stored headers under the new ones and VCL runs
    // on them: the marker is unset and the status is 200, so the
    // fragment comes back as a 200 (as the issue describes).
    let r = get(a, "/k", "Range: bytes=2-5\r\n").await;
    assert_eq!((r.status, r.text().as_str()), (200, "2345"));
    assert_eq!(r.header("x-origin"), Some("fresh"));
    assert_eq!(r.header("x-hits"), Some("1"));
    assert_eq!(bodies.load(Ordering::SeqCst), 1);
}
