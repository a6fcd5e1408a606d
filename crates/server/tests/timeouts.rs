//! The session and fetch timeouts, end to end: `timeout_idle`,
//! `send_timeout` / `idle_send_timeout` against a client that stops
//! reading, and `first_byte_timeout` / `between_bytes_timeout` against a
//! backend that stalls.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lacquer_server::runtime::counters::Main;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NO: Duration = Duration::ZERO;

/// Polls a counter until it reaches `want` (sessions close asynchronously).
async fn wait_counter(
    l: &lacquer_server::mgt::daemon::Running,
    c: Main,
    want: u64,
    within: Duration,
) {
    let t0 = Instant::now();
    while l.shared.counters.get(c) < want {
        assert!(
            t0.elapsed() < within,
            "{c:?} stayed at {} (wanted {want})",
            l.shared.counters.get(c)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_is_closed_after_timeout_idle() {
    let be = backend(|_| (NO, ok("x", ""))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &["timeout_idle=0.3"]).await;
    let a = l.first_addr().unwrap();
    let mut s = TcpStream::connect(a).await.unwrap();
    closed_silently_after(&mut s, Duration::from_millis(250)).await;
    // As varnishd: idle without a byte of a request is not an error.
    wait_counter(&l, Main::sc_rx_close_idle, 1, Duration::from_secs(2)).await;
    assert_eq!(l.shared.counters.get(Main::sc_rx_timeout), 0);
    assert_eq!(l.shared.counters.get(Main::sess_closed_err), 0);
    // Half a request left waiting is.
    let mut s = TcpStream::connect(a).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    closed_silently_after(&mut s, Duration::from_millis(250)).await;
    wait_counter(&l, Main::sc_rx_timeout, 1, Duration::from_secs(2)).await;
    wait_counter(&l, Main::sess_closed_err, 1, Duration::from_secs(2)).await;
}

/// After `timeout_linger` without a new request the session lets go of
/// its buffers and waits for the client with nothing but the socket
/// (counted in `sess_herd`, as varnishd's trips to its waiter): the client
/// is still served on the same connection, a request split across the
/// linger is never lost, back-to-back requests never linger out, and
/// `timeout_idle` still closes a session that stays silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_idle_past_timeout_linger_keeps_its_connection_and_timeout() {
    let be = backend(|_| (NO, ok("x", "Cache-Control: max-age=60\r\n"))).await;
    let l = lacquer(
        &vcl_with(be.addr, ""),
        &["timeout_linger=0.05", "timeout_idle=0.6"],
    )
    .await;
    let a = l.first_addr().unwrap();
    let herd = |l: &lacquer_server::mgt::daemon::Running| l.shared.counters.get(Main::sess_herd);
    let req = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    let mut s = TcpStream::connect(a).await.unwrap();
    // Back to back: the session never lingers out.
    for _ in 0..3 {
        s.write_all(req).await.unwrap();
        assert_eq!(read_resp(&mut s, false).await.status, 200);
    }
    assert_eq!(herd(&l), 0);
    // Quiet past the linger, then a request: served on the same connection.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(herd(&l), 1);
    s.write_all(req).await.unwrap();
    assert_eq!(read_resp(&mut s, false).await.status, 200);
    // Half a head, a pause past the linger, the rest: the partial head is
    // kept (no trip to the waiter while a request is under way).
    s.write_all(&req[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    s.write_all(&req[10..]).await.unwrap();
    assert_eq!(read_resp(&mut s, false).await.status, 200);
    assert_eq!(herd(&l), 1);
    // Silent from here: closed once timeout_idle passes, not at the linger.
    closed_silently_after(&mut s, Duration::from_millis(500)).await;
    wait_counter(&l, Main::sc_rx_close_idle, 1, Duration::from_secs(2)).await;
    assert_eq!(herd(&l), 2);
    assert_eq!(l.shared.counters.get(Main::sess_readahead), 0);
}

/// The same trip past `timeout_linger` on a Unix-socket listener, whose
/// stream waits for readability its own way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_session_idle_past_timeout_linger_is_served_again() {
    let be = backend(|_| (NO, ok("x", "Cache-Control: max-age=60\r\n"))).await;
    let path = std::env::temp_dir().join(format!("lacquer-linger-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let l = lacquer_on(
        &vcl_with(be.addr, ""),
        &["timeout_linger=0.05"],
        path.to_str().unwrap(),
    )
    .await;
    let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
    for round in 1..=2u64 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), read_resp(&mut s, false))
            .await
            .expect("a response within 5s");
        assert_eq!((r.status, r.text()), (200, "x".to_string()));
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(l.shared.counters.get(Main::sess_herd), round);
    }
    let _ = std::fs::remove_file(&path);
}

/// A client that asks for a large body and does not read it (with a tiny
/// receive buffer when `small`).
async fn stalled_reader(a: std::net::SocketAddr, small: bool) -> TcpStream {
    let s = TcpStream::connect(a).await.unwrap();
    if small {
        socket2::SockRef::from(&s)
            .set_recv_buffer_size(1024)
            .unwrap();
    }
    let mut s = s;
    s.write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    s
}

const BIG: usize = 8 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_hits_send_timeout() {
    let body = "z".repeat(BIG);
    let be = backend(move |_| (NO, ok(&body, ""))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
import debug;
sub vcl_deliver { debug.sndbuf(4k); }
"#,
    );
    let l = lacquer(
        &vcl,
        &[
            "send_timeout=0.5",
            "idle_send_timeout=0.1",
            "debug=+vtc_mode",
        ],
    )
    .await;
    let a = l.first_addr().unwrap();
    let t0 = Instant::now();
    let mut s = stalled_reader(a, true).await;
    wait_counter(&l, Main::sc_tx_error, 1, Duration::from_secs(10)).await;
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(450), "gave up after {took:?}");
    // The connection is closed: reading drains what was sent, then EOF.
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got += n,
            Err(_) => panic!("still open after the send timeout"),
        }
    }
    assert!(
        got < BIG,
        "the whole body cannot have been sent ({got} bytes)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_send_timeout_alone_retries_while_the_total_allows() {
    // sess.idle_send_timeout from VCL; send_timeout long: the delivery
    // keeps retrying and completes once the client reads again.
    const SIZE: usize = 4 << 20;
    let body = "y".repeat(SIZE);
    let be = backend(move |_| (NO, ok(&body, ""))).await;
    let vcl = vcl_with(
        be.addr,
        r#"
import debug;
sub vcl_recv { set sess.idle_send_timeout = 0.05s; }
sub vcl_deliver { debug.sndbuf(4k); }
"#,
    );
    let l = lacquer(&vcl, &["send_timeout=30", "debug=+vtc_mode"]).await;
    let a = l.first_addr().unwrap();
    let mut s = stalled_reader(a, false).await;
    // Stall for several idle periods, then read everything.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = tokio::time::timeout(Duration::from_secs(20), read_resp(&mut s, false))
        .await
        .expect("response completes");
    assert_eq!(r.body.len(), SIZE);
    assert_eq!(l.shared.counters.get(Main::sc_tx_error), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_byte_timeout_gives_a_503() {
    let be = backend(|_| (Duration::from_millis(800), ok("late", ""))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &["first_byte_timeout=0.2"]).await;
    let a = l.first_addr().unwrap();
    let t0 = Instant::now();
    let r = get(a, "/slow", "").await;
    assert_eq!(r.status, 503);
    assert!(t0.elapsed() < Duration::from_millis(700));
    // bereq.first_byte_timeout from VCL overrides the parameter.
    let vcl = vcl_with(
        be.addr,
        "sub vcl_backend_fetch { set bereq.first_byte_timeout = 2s; }",
    );
    let l2 = lacquer(&vcl, &["first_byte_timeout=0.2"]).await;
    let r = get(l2.first_addr().unwrap(), "/slow", "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "late");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn between_bytes_timeout_fails_a_stalled_body() {
    // Head and half the body at once, the rest never: with do_stream off
    // the fetch fails before delivery and the client gets a 503.
    let be = backend(|_| {
        (
            NO,
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234".to_vec(),
        )
    })
    .await;
    let vcl = vcl_with(
        be.addr,
        "sub vcl_backend_response { set beresp.do_stream = false; }",
    );
    let l = lacquer(&vcl, &["between_bytes_timeout=0.2"]).await;
    let a = l.first_addr().unwrap();
    let t0 = Instant::now();
    let r = get(a, "/stall", "").await;
    assert_eq!(r.status, 503);
    assert!(t0.elapsed() < Duration::from_secs(3));
    wait_counter(&l, Main::fetch_failed, 1, Duration::from_secs(2)).await;
}

/// The server closes `s` without sending anything, no sooner than
/// `at_least` from now (and within 5 s).
async fn closed_silently_after(s: &mut TcpStream, at_least: Duration) {
    let t0 = Instant::now();
    let mut b = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
        .await
        .expect("closed within 5s")
        .unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    let took = t0.elapsed();
    assert!(took >= at_least, "closed after {took:?}");
}
