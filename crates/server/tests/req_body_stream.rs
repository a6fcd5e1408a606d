//! Request bodies streamed through a pass: a large upload goes to the
//! backend with bounded memory, a slow client's bytes reach the backend as
//! they come, a body cut short fails the fetch, and a streamed body is
//! never retried. Its own test binary, so the memory measured is this
//! upload's alone.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use common::*;
use lacquer_http::{BodyKind, ChunkedDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A backend that reads each request body (any framing) without keeping
/// it, and answers with `<requests> <body bytes> <framing>`.
struct Sink {
    addr: SocketAddr,
    /// Body bytes received so far, across requests.
    received: Arc<AtomicU64>,
    requests: Arc<AtomicUsize>,
}

async fn sink() -> Sink {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let received = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let (r2, q2) = (received.clone(), requests.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (received, requests) = (r2.clone(), q2.clone());
            tokio::spawn(async move {
                let mut buf = BytesMut::with_capacity(64 << 10);
                loop {
                    let Some(head) = read_head(&mut s, &mut buf).await else {
                        return;
                    };
                    let n = requests.fetch_add(1, Ordering::SeqCst) + 1;
                    let mut got = 0u64;
                    let framing = match head.body {
                        BodyKind::Length(len) => {
                            while got < len {
                                if buf.is_empty() && s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                                    return;
                                }
                                let take = (buf.len() as u64).min(len - got) as usize;
                                let _ = buf.split_to(take);
                                got += take as u64;
                                received.fetch_add(take as u64, Ordering::SeqCst);
                            }
                            "length"
                        }
                        BodyKind::Chunked => {
                            let mut dec = ChunkedDecoder::new(Default::default());
                            let mut out = Vec::new();
                            loop {
                                out.clear();
                                let (used, done) = dec.decode_to(&buf, &mut out).unwrap();
                                let _ = buf.split_to(used);
                                got += out.len() as u64;
                                received.fetch_add(out.len() as u64, Ordering::SeqCst);
                                if done {
                                    break;
                                }
                                if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                                    return;
                                }
                            }
                            "chunked"
                        }
                        _ => "none",
                    };
                    let body = format!("{n} {got} {framing}");
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Sink {
        addr,
        received,
        requests,
    }
}

fn kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

const PASS: &str = "sub vcl_recv { return (pass); }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_upload_streams_with_bounded_memory() {
    const SIZE: u64 = 200 << 20;
    let be = sink().await;
    let l = lacquer(&vcl_with(be.addr, PASS), &[]).await;
    let a = l.first_addr().unwrap();
    let before = kib("VmRSS:");
    let mut s = TcpStream::connect(a).await.unwrap();
    let head = format!("POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {SIZE}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b'u'; 64 << 10];
    let mut sent = 0u64;
    while sent < SIZE {
        s.write_all(&chunk).await.unwrap();
        sent += chunk.len() as u64;
    }
    let r = read_resp(&mut s, false).await;
    assert_eq!(r.text(), format!("1 {SIZE} length"));
    let peak = kib("VmHWM:");
    let grew = peak.saturating_sub(before);
    eprintln!("200 MiB upload through a pass: RSS {before} kB before, peak {peak} kB");
    assert!(
        grew < 48 << 10,
        "RSS grew by {grew} kB for a 200 MiB upload (peak {peak} kB)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_body_reaches_the_backend_as_it_comes() {
    let be = sink().await;
    let l = lacquer(&vcl_with(be.addr, PASS), &[]).await;
    let a = l.first_addr().unwrap();
    for (framing, head, first, rest) in [
        (
            "length",
            "Content-Length: 2000\r\n",
            vec![b'a'; 1000],
            vec![b'b'; 1000],
        ),
        (
            "chunked",
            "Transfer-Encoding: chunked\r\n",
            b"3e8\r\n"
                .iter()
                .chain(&[b'a'; 1000])
                .chain(b"\r\n")
                .copied()
                .collect(),
            b"3e8\r\n"
                .iter()
                .chain(&[b'b'; 1000])
                .chain(b"\r\n0\r\n\r\n")
                .copied()
                .collect(),
        ),
    ] {
        let start = be.received.load(Ordering::SeqCst);
        let mut s = TcpStream::connect(a).await.unwrap();
        let h = format!("POST /{framing} HTTP/1.1\r\nHost: t\r\n{head}\r\n");
        s.write_all(h.as_bytes()).await.unwrap();
        for piece in first.chunks(100) {
            s.write_all(piece).await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The first half is at the backend before the client sends more:
        // nothing waits for the whole body.
        let t0 = std::time::Instant::now();
        while be.received.load(Ordering::SeqCst) - start < 1000 {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "{framing}: the first half never reached the backend"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        s.write_all(&rest).await.unwrap();
        let r = read_resp(&mut s, false).await;
        assert!(
            r.text().ends_with(&format!(" 2000 {framing}")),
            "{}",
            r.text()
        );
        // The connection carries the next request.
        s.write_all(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_resp(&mut s, false).await.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_cut_short_fails_the_fetch() {
    let be = sink().await;
    let l = lacquer(&vcl_with(be.addr, PASS), &["timeout_idle=1"]).await;
    let a = l.first_addr().unwrap();
    // The client announces 10000 bytes, sends 500 and stops sending.
    let mut s = TcpStream::connect(a).await.unwrap();
    s.write_all(b"POST /short HTTP/1.1\r\nHost: t\r\nContent-Length: 10000\r\n\r\n")
        .await
        .unwrap();
    s.write_all(&[b'x'; 500]).await.unwrap();
    s.shutdown().await.unwrap();
    let r = read_resp(&mut s, false).await;
    assert_eq!(r.status, 503);
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    assert!(rest.is_empty(), "the connection closes after the 503");
    // Same with a client that stays connected but goes silent.
    let mut s = TcpStream::connect(a).await.unwrap();
    s.write_all(b"POST /silent HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
        .await
        .unwrap();
    let r = read_resp(&mut s, false).await;
    assert_eq!(r.status, 503);
    assert!(be.requests.load(Ordering::SeqCst) <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_body_is_not_retried_cached_one_is() {
    let be = sink().await;
    let retry = "sub vcl_backend_response { if (bereq.retries == 0) { return (retry); } }";
    let l = lacquer(&vcl_with(be.addr, &format!("{PASS}\n{retry}")), &[]).await;
    let a = l.first_addr().unwrap();
    let req = b"POST /r HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello";
    let r = raw(a, req, false).await;
    assert_eq!(r.status, 503, "a streamed body cannot be sent twice");
    assert_eq!(be.requests.load(Ordering::SeqCst), 1);

    let cached = format!(
        "import std;\nsub vcl_recv {{ if (!std.cache_req_body(1KB)) {{ return (synth(413)); }} return (pass); }}\n{retry}"
    );
    let l = lacquer(&vcl_with(be.addr, &cached), &[]).await;
    let r = raw(l.first_addr().unwrap(), req, false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "3 5 length", "sent again on the retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_after_a_streamed_body_fails_the_second_fetch() {
    let be = sink().await;
    let vcl = "sub vcl_recv { return (pass); }
        sub vcl_deliver { if (req.restarts == 0) { return (restart); } }";
    let l = lacquer(&vcl_with(be.addr, vcl), &["first_byte_timeout=0.5"]).await;
    let r = raw(
        l.first_addr().unwrap(),
        b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
        false,
    )
    .await;
    // As varnishd 7.1: the second head goes out without the body, which
    // the backend waits for until first_byte_timeout fails the fetch.
    assert_eq!(r.status, 503, "the body cannot be sent a second time");
    assert_eq!(be.requests.load(Ordering::SeqCst), 2);
    assert_eq!(be.received.load(Ordering::SeqCst), 5, "the body went once");
}
