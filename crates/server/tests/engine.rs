//! End-to-end tests of the request path: a real lacquerd on loopback in
//! front of scripted backends.

mod common;

use std::time::Duration;

use common::*;

const NO: Duration = Duration::ZERO;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn miss_then_hit() {
    let be = backend(|_| (NO, ok("hello", "Cache-Control: max-age=60\r\n"))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &[]).await;
    let a = l.first_addr().unwrap();
    let r1 = get(a, "/x", "").await;
    assert_eq!(r1.status, 200);
    assert_eq!(r1.text(), "hello");
    let r2 = get(a, "/x", "").await;
    assert_eq!(r2.text(), "hello");
    assert_eq!(be.count(), 1, "the second request is a hit");
    let xv: Vec<&str> = r2.header("x-varnish").unwrap().split(' ').collect();
    assert_eq!(xv.len(), 2, "a hit carries both vxids");
    assert!(r2.header("age").is_some());
    assert!(r2.header("via").is_some());
    // The backend saw a GET with X-Varnish and gzip asked for.
    let seen = be.last();
    assert_eq!(seen.method, "GET");
    assert!(seen.header("x-varnish").is_some());
    assert_eq!(seen.header("accept-encoding"), Some("gzip"));
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
}

/// Backend connections go back to the pool after a complete body and are
/// reused, counted as varnishd counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_backend_connection_is_recycled_and_reused() {
    use lacquer_server::runtime::counters::Main;
    let be = backend(|_| (NO, ok("pooled", "Cache-Control: max-age=60\r\n"))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &[]).await;
    let a = l.first_addr().unwrap();
    assert_eq!(get(a, "/a", "").await.text(), "pooled");
    assert_eq!(get(a, "/b", "").await.text(), "pooled");
    assert_eq!(be.count(), 2, "two misses");
    let c = &l.shared.counters;
    assert_eq!(c.get(Main::backend_conn), 1, "one connection opened");
    assert_eq!(c.get(Main::backend_reuse), 1, "the second fetch reused it");
    assert_eq!(c.get(Main::backend_recycle), 2, "both fetches gave it back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_with_cookie_and_post_body() {
    let be = backend(|r| (NO, ok(&format!("{} {}", r.method, r.body.len()), ""))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &[]).await;
    let a = l.first_addr().unwrap();
    for _ in 0..2 {
        let r = get(a, "/c", "Cookie: a=b\r\n").await;
        assert_eq!(r.text(), "GET 0");
    }
    assert_eq!(be.count(), 2, "requests with cookies pass");
    let r = raw(
        a,
        b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nabcde",
        false,
    )
    .await;
    assert_eq!(r.text(), "POST 5");
    assert_eq!(be.last().body, b"abcde");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synth_restart_and_fail() {
    let be = backend(|_| (NO, ok("b", ""))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
sub vcl_recv {
    if (req.url == "/synth") { return (synth(404, "Nope")); }
    if (req.url == "/restart" && req.restarts < 2) { return (restart); }
    if (req.url == "/restart") { return (synth(200, "restarts " + req.restarts)); }
    if (req.url == "/loop") { return (restart); }
    if (req.url == "/fail") { return (fail); }
}
sub vcl_synth {
    set resp.http.X-Reason = resp.reason;
}
"#,
    );
    let l = lacquer(&vcl, &["max_restarts=3"]).await;
    let a = l.first_addr().unwrap();
    let r = get(a, "/synth", "").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-reason"), Some("Nope"));
    assert!(
        r.text().contains("404"),
        "builtin synthetic body: {}",
        r.text()
    );
    let r = get(a, "/restart", "").await;
    assert_eq!(r.header("x-reason"), Some("restarts 2"));
    let r = get(a, "/loop", "").await;
    assert_eq!(r.status, 503, "past max_restarts");
    let r = get(a, "/fail", "").await;
    assert_eq!(r.status, 503);
    assert_eq!(be.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_and_dead_backend() {
    let be = backend(|r| {
        if r.header("x-varnish").is_some() && r.url == "/flaky" {
            (
                NO,
                b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n".to_vec(),
            )
        } else {
            (NO, ok("fine", ""))
        }
    })
    .await;
    let vcl = vcl_with(
        be.addr,
        r#"
sub vcl_backend_response {
    if (beresp.status == 500 && bereq.retries < 2) { return (retry); }
    set beresp.http.X-Retries = bereq.retries;
}
"#,
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    let r = get(a, "/flaky", "").await;
    assert_eq!(r.status, 500);
    assert_eq!(r.header("x-retries"), Some("2"));
    assert_eq!(be.count(), 3);

    // A backend that is not there: 503 from vcl_backend_error.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let l2 = lacquer(&vcl_with(dead, ""), &[]).await;
    let r = get(l2.first_addr().unwrap(), "/", "").await;
    assert_eq!(r.status, 503);
    assert!(r.text().contains("Backend fetch failed"), "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalescing_one_fetch_for_many_clients() {
    let be = backend(|_| {
        (
            Duration::from_millis(300),
            ok("slow", "Cache-Control: max-age=60\r\n"),
        )
    })
    .await;
    let l = lacquer(&vcl_with(be.addr, ""), &[]).await;
    let a = l.first_addr().unwrap();
    let mut tasks = Vec::new();
    for _ in 0..20 {
        tasks.push(tokio::spawn(async move { get(a, "/cold", "").await }));
    }
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.text(), "slow");
    }
    assert_eq!(be.count(), 1, "exactly one backend fetch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_backend_and_conditionals() {
    let be = backend(|_| {
        (
            NO,
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: \"v1\"\r\nCache-Control: max-age=60\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
                .to_vec(),
        )
    })
    .await;
    let l = lacquer(&vcl_with(be.addr, ""), &[]).await;
    let a = l.first_addr().unwrap();
    let r = get(a, "/c", "").await;
    assert_eq!(r.text(), "hello world");
    let r = get(a, "/c", "If-None-Match: \"v1\"\r\n").await;
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    let r = get(a, "/c", "Range: bytes=6-10\r\n").await;
    assert_eq!(r.status, 206);
    assert_eq!(r.text(), "world");
    assert_eq!(r.header("content-range"), Some("bytes 6-10/11"));
    let r = get(a, "/c", "Range: bytes=50-\r\n").await;
    assert_eq!(r.status, 416);
    let r = raw(a, b"HEAD /c HTTP/1.1\r\nHost: test\r\n\r\n", true).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("11"));
    assert_eq!(be.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_stored_once_gunzipped_for_plain_clients() {
    let gz = lacquer_server::fetch::gzip::gzip_all(b"compressible compressible compressible", 6);
    let be = backend(move |_| {
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\nCache-Control: max-age=60\r\n\r\n",
            gz.len()
        )
        .into_bytes();
        out.extend_from_slice(&gz);
        (NO, out)
    })
    .await;
    let l = lacquer(&vcl_with(be.addr, ""), &[]).await;
    let a = l.first_addr().unwrap();
    let plain = get(a, "/z", "").await;
    assert_eq!(plain.text(), "compressible compressible compressible");
    assert_eq!(plain.header("content-encoding"), None);
    let zipped = get(a, "/z", "Accept-Encoding: gzip\r\n").await;
    assert_eq!(zipped.header("content-encoding"), Some("gzip"));
    assert_eq!(
        lacquer_server::fetch::gzip::gunzip_all(&zipped.body).unwrap(),
        b"compressible compressible compressible"
    );
    assert_eq!(be.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_attempts_are_refused() {
    let be = backend(|_| (NO, ok("x", ""))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &[]).await;
    let a = l.first_addr().unwrap();
    for req in [
        &b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\nX: a\rb\r\n\r\n",
    ] {
        let r = raw(a, req, false).await;
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(req));
    }
    assert_eq!(be.count(), 0, "nothing ambiguous reaches the backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipe_and_purge() {
    let be = backend(|r| {
        (
            NO,
            ok(&format!("m={}", r.method), "Cache-Control: max-age=60\r\n"),
        )
    })
    .await;
    let vcl = vcl_with(
        be.addr,
        r#"
sub vcl_recv {
    if (req.method == "PURGE") { return (purge); }
}
"#,
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    let r = raw(a, b"FOO /p HTTP/1.1\r\nHost: t\r\n\r\n", false).await;
    assert_eq!(r.text(), "m=FOO", "unknown methods are piped");
    assert_eq!(be.last().header("connection"), Some("close"));
    get(a, "/obj", "").await;
    get(a, "/obj", "").await;
    let n = be.count();
    let r = raw(a, b"PURGE /obj HTTP/1.1\r\nHost: test\r\n\r\n", false).await;
    assert_eq!(r.status, 200);
    get(a, "/obj", "").await;
    assert_eq!(be.count(), n + 1, "purged object is fetched again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_pipelining_and_http10() {
    let be = backend(|r| (NO, ok(&r.url, "Cache-Control: max-age=60\r\n"))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &[]).await;
    let a = l.first_addr().unwrap();
    let mut s = tokio::net::TcpStream::connect(a).await.unwrap();
    use tokio::io::AsyncWriteExt;
    s.write_all(b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\nGET /2 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_resp(&mut s, false).await.text(), "/1");
    assert_eq!(read_resp(&mut s, false).await.text(), "/2");
    let r = raw(a, b"GET /3 HTTP/1.0\r\n\r\n", false).await;
    assert_eq!(r.text(), "/3");
    assert_eq!(r.header("connection"), Some("close"));
}

/// A miss is delivered while it is fetched and keeps the backend's
/// Content-Length (varnishd does too): the client sees the length before
/// the backend has sent the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_miss_keeps_the_backend_content_length() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let oaddr = origin.local_addr().unwrap();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut s, _) = origin.accept().await.unwrap();
        let mut req = Vec::new();
        let mut b = [0u8; 1024];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut b).await.unwrap();
            assert!(n > 0);
            req.extend_from_slice(&b[..n]);
        }
        let body = vec![b'x'; 200_000];
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n")
            .await
            .unwrap();
        s.write_all(&body[..1000]).await.unwrap();
        // The rest only once the client has the response head.
        go_rx.await.unwrap();
        s.write_all(&body[1000..]).await.unwrap();
        // Hold the connection until the cache is done with it.
        let _ = s.read(&mut b).await;
    });
    let l = lacquer(&vcl_with(oaddr, ""), &[]).await;
    let mut c = tokio::net::TcpStream::connect(l.first_addr().unwrap())
        .await
        .unwrap();
    c.write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut b))
            .await
            .expect("head while the body is still being fetched")
            .unwrap();
        assert!(n > 0);
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    assert!(head.contains("content-length: 200000\r\n"), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");
    go_tx.send(()).unwrap();
    let mut body = vec![0u8; 200_000];
    tokio::time::timeout(Duration::from_secs(10), c.read_exact(&mut body))
        .await
        .expect("body")
        .unwrap();
    assert!(body.iter().all(|&x| x == b'x'));
}

/// What `lacquerd --demo` prints to try behaves as printed: a miss, a hit
/// with Age and two ids in X-Varnish, a pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_origin_and_vcl_show_miss_hit_and_pass() {
    use lacquer_server::mgt::demo;
    let origin = demo::start_origin().await.unwrap();
    let l = lacquer(&demo::demo_vcl(origin.port()), &[]).await;
    let a = l.first_addr().unwrap();
    let miss = get(a, "/hello", "").await;
    assert_eq!(miss.status, 200);
    assert_eq!(miss.header("x-cache"), Some("MISS"));
    let hit = get(a, "/hello", "").await;
    assert_eq!(hit.header("x-cache"), Some("HIT"));
    assert_eq!(hit.header("x-varnish").unwrap().split(' ').count(), 2);
    assert!(hit.header("age").is_some());
    assert_eq!(hit.text(), miss.text(), "the hit is the cached page");
    for _ in 0..2 {
        let pass = get(a, "/private/page", "").await;
        assert_eq!(pass.header("x-cache"), Some("PASS"));
        assert_eq!(pass.header("x-varnish").unwrap().split(' ').count(), 1);
    }
    let err = get(a, "/status/503", "").await;
    assert_eq!(err.status, 503);
}

/// The `VBE` byte counters add up what each fetch exchanged with the
/// backend, as its `BereqAcct` record says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_byte_counters() {
    let be = backend(|_| (NO, ok("0123456789", ""))).await;
    let l = lacquer(&vcl_with(be.addr, "sub vcl_recv { return (pass); }"), &[]).await;
    let a = l.first_addr().unwrap();
    assert_eq!(get(a, "/a", "").await.status, 200);
    let r = raw(
        a,
        b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde",
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    let counter = |name: &str| {
        let path = lacquer_vsl::vsc::vsc_path(&l.shared.workdir);
        let snap = lacquer_vsl::vsc::VscReader::open(&path)
            .unwrap()
            .snapshot()
            .unwrap();
        lacquer_vsl::vsc::lookup(&snap, &format!("VBE.boot.b1.{name}")).map_or(0, |c| c.value)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while counter("beresp_bodybytes") < 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "VBE counters never counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(counter("beresp_bodybytes"), 20);
    assert_eq!(counter("bereq_bodybytes"), 5);
    // Each response head is the status line, Content-Length and the blank line.
    let head = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n".len() as u64;
    assert_eq!(counter("beresp_hdrbytes"), 2 * head);
    assert!(counter("bereq_hdrbytes") > 2 * "GET /a HTTP/1.1\r\n\r\n".len() as u64);
}
