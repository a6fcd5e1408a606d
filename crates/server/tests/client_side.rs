//! End-to-end tests of what happens on the client connection itself: the
//! PROXY protocol on `PROXY` listeners, `Expect: 100-continue`, request
//! bodies streamed or cached for the backend, client socket options set
//! from VCL, and the client workspace bounding what VCL adds to a request.

mod common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NO: Duration = Duration::ZERO;

/// Reads until the peer closes (or 5 s pass): what the client got.
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_listener_takes_the_client_from_the_header() {
    let be = backend(|_| (NO, ok("b", ""))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
        import std;
        sub vcl_recv { return (pass); }
        sub vcl_deliver {
            set resp.http.ci = client.ip;
            set resp.http.cp = std.port(client.ip);
            set resp.http.si = server.ip;
            set resp.http.ri = remote.ip;
            set resp.http.li = local.ip;
        }"#,
    );
    let l = lacquer_on(&vcl, &[], "127.0.0.1:0,PROXY").await;
    let a = l.first_addr().unwrap();

    // v1, with the request in the same packet.
    let r = raw(
        a,
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1234 80\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("ci"), Some("1.2.3.4"));
    assert_eq!(r.header("cp"), Some("1234"));
    assert_eq!(r.header("si"), Some("5.6.7.8"));
    assert_eq!(r.header("ri"), Some("127.0.0.1"));
    assert_eq!(r.header("li"), Some("127.0.0.1"));
    assert_eq!(be.last().header("x-forwarded-for"), Some("1.2.3.4"));

    // v2 with TLVs, sent in two pieces.
    let hdr = lacquer_http::proxy::encode_v2(
        "[2001:db8::1]:4000".parse().unwrap(),
        "[2001:db8::2]:443".parse().unwrap(),
        Some(b"example.com"),
    );
    let mut s = TcpStream::connect(a).await.unwrap();
    s.write_all(&hdr[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.write_all(&hdr[10..]).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 9.9.9.9\r\n\r\n")
        .await
        .unwrap();
    let r = read_resp(&mut s, false).await;
    assert_eq!(r.header("ci"), Some("2001:db8::1"));
    assert_eq!(r.header("si"), Some("2001:db8::2"));
    assert_eq!(
        be.last().header("x-forwarded-for"),
        Some("9.9.9.9, 2001:db8::1")
    );

    // Plain HTTP on a PROXY listener, and a refused header: closed unanswered.
    for junk in [
        &b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"[..],
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1234\r\nGET / HTTP/1.1\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(a).await.unwrap();
        s.write_all(junk).await.unwrap();
        assert_eq!(read_to_close(&mut s).await, b"");
    }
    assert_eq!(be.count(), 2, "dropped connections never reach the backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_header_times_out_with_timeout_idle() {
    let vcl = "vcl 4.1; backend b none;";
    let l = lacquer_on(vcl, &["timeout_idle=0.3"], "127.0.0.1:0,PROXY").await;
    let a = l.first_addr().unwrap();
    let mut s = TcpStream::connect(a).await.unwrap();
    let t0 = std::time::Instant::now();
    s.write_all(b"PROXY TCP4 1.2.3.4").await.unwrap();
    assert_eq!(read_to_close(&mut s).await, b"");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "closed after {took:?}"
    );
}

/// Fetches `url` on a fresh connection and returns the response with the
/// time it took to read it whole.
async fn timed_get(a: std::net::SocketAddr, url: &str) -> (Resp, Duration) {
    let t0 = std::time::Instant::now();
    let r = get(a, url, "").await;
    (r, t0.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_pace_limits_delivery_rate() {
    const SIZE: usize = 3 << 20;
    let body = "x".repeat(SIZE);
    let be = backend(move |_| (NO, ok(&body, "Cache-Control: max-age=60\r\n"))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
        import tcp;
        sub vcl_recv {
            if (req.url ~ "^/paced") {
                tcp.set_socket_pace(1000);
            }
        }"#,
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    let (r, fast) = timed_get(a, "/obj").await;
    assert_eq!(r.body.len(), SIZE);
    let (r, _) = timed_get(a, "/paced").await;
    assert_eq!(r.body.len(), SIZE);
    // A hit at 1000 KB/s: 3 MiB take about 3 s.
    let (r, paced) = timed_get(a, "/paced").await;
    assert_eq!(r.body.len(), SIZE);
    assert!(r.header("age").is_some(), "a hit");
    assert!(
        paced >= Duration::from_millis(2500) && paced < Duration::from_secs(6),
        "paced hit took {paced:?}"
    );
    let (_, unpaced) = timed_get(a, "/obj").await;
    assert!(
        unpaced < Duration::from_secs(1),
        "unpaced hit took {unpaced:?} (miss: {fast:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_socket_options_from_vcl() {
    let be = backend(|_| (NO, ok("b", ""))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
        import std;
        import tcp;
        sub vcl_recv { return (pass); }
        sub vcl_deliver {
            std.set_ip_tos(16);
            tcp.dump_info();
            set resp.http.rtt = tcp.get_estimated_rtt();
            set resp.http.reno = tcp.congestion_algorithm("reno");
            set resp.http.bogus = tcp.congestion_algorithm("no-such-algorithm");
        }"#,
    );
    let l = lacquer(&vcl, &[]).await;
    let r = get(l.first_addr().unwrap(), "/", "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("reno"), Some("0"));
    assert_eq!(r.header("bogus"), Some("-1"));
    let rtt: f64 = r.header("rtt").unwrap().parse().unwrap();
    assert!((0.0..1000.0).contains(&rtt), "rtt {rtt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_is_consumed_and_only_sent_when_wanted() {
    let be = backend(|_| (NO, ok("b", ""))).await;
    let vcl = vcl_with(be.addr, "sub vcl_recv { return (pass); }");
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    // The body came with the head: no interim response, straight the 200.
    let r = raw(
        a,
        b"POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello",
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = be.last();
    assert_eq!(seen.header("expect"), None);
    assert_eq!(seen.body, b"hello");
    // The client waits for it: 100 Continue first, then the answer.
    let mut s = TcpStream::connect(a).await.unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        .await
        .unwrap();
    let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
    let mut got = vec![0u8; interim.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
        .await
        .expect("no 100 Continue within 5 s")
        .unwrap();
    assert_eq!(&got[..], interim);
    s.write_all(b"hello").await.unwrap();
    let r = read_resp(&mut s, false).await;
    assert_eq!(r.status, 200);
    assert_eq!(be.last().header("expect"), None);
}

/// Sends a request head that expects 100-continue, without its body.
async fn expect_100_head(a: std::net::SocketAddr, url: &str, extra: &str) -> TcpStream {
    let mut s = TcpStream::connect(a).await.unwrap();
    let head = format!(
        "POST {url} HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n{extra}\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s
}

/// Reads the interim `100 Continue` (or fails after 5 s).
async fn read_100(s: &mut TcpStream) {
    let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
    let mut got = vec![0u8; interim.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
        .await
        .expect("no 100 Continue within 5 s")
        .unwrap();
    assert_eq!(&got[..], interim);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_100_continue_waits_for_the_body_to_be_read() {
    let be = backend(|_| (NO, ok("b", ""))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
        import std;
        sub vcl_recv {
            std.late_100_continue(true);
            if (req.url == "/err") {
                return (synth(405));
            }
            if (req.url == "/synthnocl") {
                return (synth(200));
            }
            if (req.url == "/cache") {
                set req.http.kept = std.cache_req_body(1KB);
            }
            return (pass);
        }
        sub vcl_synth {
            if (req.url == "/synthnocl") {
                unset resp.http.Connection;
            }
        }"#,
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();

    // std.cache_req_body() in vcl_recv sends the 100 and reads the body
    // at the call: it is kept, and forwarded with its length.
    let mut s = expect_100_head(a, "/cache", "").await;
    read_100(&mut s).await;
    s.write_all(b"hello").await.unwrap();
    let r = read_resp(&mut s, false).await;
    assert_eq!(r.status, 200);
    let seen = be.last();
    assert_eq!(seen.body, b"hello");
    assert_eq!(seen.header("kept"), Some("true"));
    assert_eq!(seen.header("expect"), None);

    // A pass sends it when the fetch pulls the body.
    let mut s = expect_100_head(a, "/pass", "").await;
    read_100(&mut s).await;
    s.write_all(b"world").await.unwrap();
    let r = read_resp(&mut s, false).await;
    assert_eq!(r.status, 200);
    assert_eq!(be.last().body, b"world");

    // A synth never reads the body: no 100, and the connection closes.
    let mut s = expect_100_head(a, "/err", "").await;
    let got = read_to_close(&mut s).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 405 "), "{text}");
    assert!(!text.contains("100 Continue"), "{text}");
    assert!(text.contains("Connection: close"), "{text}");

    // vcl_synth vetoes the close: the 100 goes out, the body is read and
    // thrown away, and the connection carries the next request.
    let mut s = expect_100_head(a, "/synthnocl", "").await;
    read_100(&mut s).await;
    s.write_all(b"12345").await.unwrap();
    let r = read_resp(&mut s, false).await;
    assert_eq!(r.status, 200);
    s.write_all(b"GET /pass HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_resp(&mut s, false).await.status, 200);

    // ... unless the client itself asked for the close.
    let mut s = expect_100_head(a, "/synthnocl", "Connection: close\r\n").await;
    let got = read_to_close(&mut s).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(!text.contains("100 Continue"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_request_body_goes_with_a_cache_miss() {
    let be = backend(|_| (NO, ok("b", "Cache-Control: no-cache\r\n"))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
        import std;
        sub vcl_recv {
            if (req.url != "/uncached") {
                std.cache_req_body(1KB);
            }
            return (hash);
        }
        sub vcl_backend_fetch {
            if (bereq.url == "/post") {
                set bereq.method = "POST";
            }
        }"#,
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    // As varnishd: the miss is a GET, and the kept body goes with it.
    let r = raw(
        a,
        b"POST /get HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhello body",
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = be.last();
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.header("content-length"), Some("10"));
    assert_eq!(seen.body, b"hello body");
    // Chunked from the client, sent with its length; VCL chose the method.
    let r = raw(
        a,
        b"POST /post HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = be.last();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.header("content-length"), Some("11"));
    assert_eq!(seen.header("transfer-encoding"), None);
    assert_eq!(seen.body, b"hello world");
    // A body not kept does not go with a miss.
    let r = raw(
        a,
        b"POST /uncached HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = be.last();
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.header("content-length"), None);
    assert!(seen.body.is_empty());
    assert_eq!(be.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_client_bounds_what_vcl_adds() {
    let be = backend(|_| (NO, ok("b", ""))).await;
    // Forty headers of a hundred bytes each: 4.4k of workspace.
    let mut sets = String::new();
    for i in 0..40 {
        sets.push_str(&format!("set resp.http.x{i} = req.http.filler;\n"));
    }
    let vcl = vcl_with(
        be.addr,
        &format!(
            "sub vcl_recv {{ set req.http.filler = \"{}\"; }}\nsub vcl_deliver {{\n{sets}}}",
            "f".repeat(100)
        ),
    );
    let roomy = lacquer(&vcl, &[]).await;
    let r = get(roomy.first_addr().unwrap(), "/", "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x39").map(str::len), Some(100));
    // 24k leaves about 3.9k once varnishd's structures and log buffer are
    // taken out: the headers do not fit, and the request fails at delivery
    // with varnishd's bare 500.
    let tight = lacquer(&vcl, &["workspace_client=24k"]).await;
    let mut s = TcpStream::connect(tight.first_addr().unwrap())
        .await
        .unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let out = String::from_utf8(read_to_close(&mut s).await).unwrap();
    assert_eq!(
        out,
        "HTTP/1.1 500 Internal Server Error\r\nServer: Varnish\r\nConnection: close\r\n\r\n"
    );
}
