//! End-to-end tests of HTTP/2 on client connections: a prior-knowledge
//! session answering a GET in HEADERS and DATA frames, a malformed header
//! block refused with RST_STREAM while the connection goes on, the send
//! window holding the body back until WINDOW_UPDATE, and the preface
//! refused when `feature=+http2` is off.

mod common;

use std::time::Duration;

use common::*;
use lacquer_http::h2::frame::{self, Head, flags, types};
use lacquer_http::hpack::{self, Indexing, Name, Table};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NO: Duration = Duration::ZERO;

/// One frame read off the connection.
struct Frame {
    head: Head,
    payload: Vec<u8>,
}

async fn read_frame(s: &mut TcpStream) -> Option<Frame> {
    let mut h = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut h))
        .await
        .ok()?
        .ok()?;
    let head = Head::parse(&h);
    let mut payload = vec![0u8; head.len as usize];
    s.read_exact(&mut payload).await.ok()?;
    Some(Frame { head, payload })
}

/// Reads frames until one of type `typ` on `sid`.
async fn wait_for(s: &mut TcpStream, typ: u8, sid: u32) -> Frame {
    loop {
        let f = read_frame(s).await.expect("a frame before the timeout");
        if f.head.typ == typ && f.head.stream == sid {
            return f;
        }
    }
}

async fn send(s: &mut TcpStream, typ: u8, fl: u8, sid: u32, payload: &[u8]) {
    s.write_all(&frame::encode(typ, fl, sid, payload).unwrap())
        .await
        .unwrap();
}

/// Opens a session: preface, empty SETTINGS (or `settings`), and the
/// server's SETTINGS acknowledged.
async fn open(addr: std::net::SocketAddr, settings: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(frame::PREFACE).await.unwrap();
    send(&mut s, types::SETTINGS, 0, 0, settings).await;
    let f = wait_for(&mut s, types::SETTINGS, 0).await;
    assert_eq!(f.head.flags & flags::ACK, 0, "the server's SETTINGS first");
    send(&mut s, types::SETTINGS, flags::ACK, 0, &[]).await;
    s
}

/// A GET header block with `extra` fields.
fn get_block(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut t = Table::new(4096);
    let mut b = Vec::new();
    hpack::encode_indexed(&mut b, 2); // :method GET
    hpack::encode_indexed(&mut b, 6); // :scheme http
    hpack::encode_literal(
        &mut b,
        &mut t,
        Indexing::Not,
        Name::Index(4),
        path.as_bytes(),
        false,
    )
    .unwrap();
    hpack::encode_literal(
        &mut b,
        &mut t,
        Indexing::Not,
        Name::Index(1),
        b"example",
        false,
    )
    .unwrap();
    for (n, v) in extra {
        hpack::encode_literal(
            &mut b,
            &mut t,
            Indexing::Not,
            Name::Literal(n.as_bytes(), false),
            v.as_bytes(),
            false,
        )
        .unwrap();
    }
    b
}

fn status_of(block: &[u8]) -> String {
    let (fields, err) = hpack::decode_block(&mut Table::new(4096), block);
    assert_eq!(err, None);
    let f = fields
        .iter()
        .find(|h| h.name == b":status")
        .expect(":status");
    String::from_utf8_lossy(&f.value).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prior_knowledge_get_is_answered_in_frames() {
    let be = backend(|_| (NO, ok("hello h2", ""))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &["feature=+http2"]).await;
    let mut s = open(l.first_addr().unwrap(), &[]).await;
    let block = get_block("/a", &[]);
    send(
        &mut s,
        types::HEADERS,
        flags::END_HEADERS | flags::END_STREAM,
        1,
        &block,
    )
    .await;
    let h = wait_for(&mut s, types::HEADERS, 1).await;
    assert_eq!(status_of(&h.payload), "200");
    let mut body = Vec::new();
    loop {
        let d = wait_for(&mut s, types::DATA, 1).await;
        body.extend_from_slice(&d.payload);
        if d.head.flags & flags::END_STREAM != 0 {
            break;
        }
    }
    assert_eq!(body, b"hello h2");
    // The request reached the backend as HTTP/1.1, `:authority` as Host.
    assert_eq!(be.last().header("host"), Some("example"));
    assert_eq!(be.last().url, "/a");
}

/// As varnishd 7.1.1: a connection-specific field passes (the backend
/// request's filter drops it); a field refused while its block is decoded
/// resets its stream, and varnishd then still holds that half-built
/// request, so the next frame, whatever it is, ends the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_field_resets_its_stream_and_the_next_frame_ends_the_session() {
    let be = backend(|_| (NO, ok("fine", ""))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &["feature=+http2"]).await;
    let mut s = open(l.first_addr().unwrap(), &[]).await;
    let fl = flags::END_HEADERS | flags::END_STREAM;
    send(
        &mut s,
        types::HEADERS,
        fl,
        1,
        &get_block("/", &[("connection", "close")]),
    )
    .await;
    let h = wait_for(&mut s, types::HEADERS, 1).await;
    assert_eq!(status_of(&h.payload), "200");
    assert_eq!(be.last().header("connection"), None);
    send(
        &mut s,
        types::HEADERS,
        fl,
        3,
        &get_block("/", &[("Upper", "x")]),
    )
    .await;
    let r = wait_for(&mut s, types::RST_STREAM, 3).await;
    assert_eq!(r.payload, 1u32.to_be_bytes(), "PROTOCOL_ERROR");
    send(&mut s, types::PING, 0, 0, b"12345678").await;
    let g = wait_for(&mut s, types::GOAWAY, 0).await;
    assert_eq!(
        &g.payload[..8],
        &[0, 0, 0, 3, 0, 0, 0, 1],
        "last stream 3, PROTOCOL_ERROR"
    );
    assert_eq!(be.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_window_holds_the_body_until_window_update() {
    let be = backend(|_| (NO, ok(&"x".repeat(100), ""))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &["feature=+http2"]).await;
    // SETTINGS_INITIAL_WINDOW_SIZE = 10.
    let mut s = open(l.first_addr().unwrap(), &[0, 4, 0, 0, 0, 10]).await;
    let block = get_block("/", &[]);
    send(
        &mut s,
        types::HEADERS,
        flags::END_HEADERS | flags::END_STREAM,
        1,
        &block,
    )
    .await;
    wait_for(&mut s, types::HEADERS, 1).await;
    let d = wait_for(&mut s, types::DATA, 1).await;
    assert_eq!(d.payload.len(), 10);
    // Nothing more until the window opens.
    let more = tokio::time::timeout(Duration::from_millis(300), read_frame(&mut s)).await;
    assert!(more.is_err(), "no frame while the window is closed");
    send(&mut s, types::WINDOW_UPDATE, 0, 1, &1000u32.to_be_bytes()).await;
    let mut got = 10;
    loop {
        let d = wait_for(&mut s, types::DATA, 1).await;
        got += d.payload.len();
        if d.head.flags & flags::END_STREAM != 0 {
            break;
        }
    }
    assert_eq!(got, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preface_closes_the_session_when_http2_is_off() {
    let be = backend(|_| (NO, ok("b", ""))).await;
    let l = lacquer(&vcl_with(be.addr, ""), &[]).await;
    let mut s = TcpStream::connect(l.first_addr().unwrap()).await.unwrap();
    s.write_all(frame::PREFACE).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    assert!(out.is_empty(), "no answer, just the close");
}
