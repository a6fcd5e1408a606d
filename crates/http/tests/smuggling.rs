//! Request-smuggling regression suite.
//!
//! Each case is a message that HTTP/1 implementations have been known to frame
//! differently (CL.TE, TE.CL, TE.TE obfuscations, chunk-size tricks, header
//! syntax tricks). Every case asserts either that the codec refuses the
//! message, with the status varnishd would answer, or the single
//! interpretation the codec takes and then serialises, so that nothing
//! ambiguous is ever forwarded.

use lacquer_http::{
    BodyKind, ChunkedDecoder, ChunkedLimits, Error, ErrorKind, Limits, RequestHead, Version,
    do_connection, parse_request, parse_response, write_request_head,
};

fn parse(raw: &str) -> Result<RequestHead, Error> {
    match parse_request(raw.as_bytes(), &Limits::request()) {
        Ok(Some((head, _))) => Ok(head),
        Ok(None) => panic!("incomplete head: {raw:?}"),
        Err(e) => Err(e),
    }
}

#[track_caller]
fn rejected(raw: &str) -> Error {
    match parse(raw) {
        Ok(h) => panic!("accepted {raw:?} as {h:?}"),
        Err(e) => {
            assert_eq!(e.status(), Some(400), "{raw:?}: {e}");
            e
        }
    }
}

#[track_caller]
fn framed(raw: &str) -> BodyKind {
    match parse(raw) {
        Ok(h) => h.body,
        Err(e) => panic!("rejected {raw:?}: {e}"),
    }
}

fn req(headers: &str) -> String {
    format!("POST / HTTP/1.1\r\nHost: a\r\n{headers}\r\n")
}

/// Decodes a whole chunked body; `Ok((data, consumed))` or the error.
fn dechunk(body: &[u8]) -> Result<(Vec<u8>, usize), Error> {
    let mut d = ChunkedDecoder::new(ChunkedLimits::default());
    let mut out = Vec::new();
    let (n, done) = d.decode_to(body, &mut out)?;
    assert!(
        done,
        "chunked body incomplete: {:?}",
        String::from_utf8_lossy(body)
    );
    Ok((out, n))
}

#[track_caller]
fn chunk_rejected(body: &[u8]) {
    let mut d = ChunkedDecoder::new(ChunkedLimits::default());
    let mut out = Vec::new();
    match d.decode_to(body, &mut out) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Chunked),
        Ok((n, done)) => panic!(
            "accepted {:?}: consumed {n}, done {done}",
            String::from_utf8_lossy(body)
        ),
    }
}

// ---- CL.TE and TE.CL --------------------------------------------------------

#[test]
fn cl_te() {
    let e = rejected(&req("Content-Length: 6\r\nTransfer-Encoding: chunked\r\n"));
    assert_eq!(e.kind(), ErrorKind::Framing);
}

#[test]
fn te_cl() {
    rejected(&req("Transfer-Encoding: chunked\r\nContent-Length: 6\r\n"));
}

#[test]
fn cl_zero_with_te() {
    rejected(&req("Content-Length: 0\r\nTransfer-Encoding: chunked\r\n"));
}

#[test]
fn te_cl_http10() {
    let raw = "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n";
    rejected(raw);
}

// ---- TE.TE obfuscations ---------------------------------------------------

#[test]
fn te_unknown_codings_rejected() {
    for te in [
        "xchunked",
        "chunked, identity",
        "identity, chunked",
        "gzip, chunked",
        "chunked,",
        ",chunked",
        "chunked;q=1",
        "\"chunked\"",
        "chunk",
        "chunked chunked",
        "identity",
        "",
        "chunked\u{b}",
        "ch\tunked",
    ] {
        rejected(&req(&format!("Transfer-Encoding: {te}\r\n")));
    }
}

#[test]
fn te_whitespace_variants_are_plain_chunked() {
    // Leading/trailing whitespace is optional whitespace around the value:
    // the only interpretation is "chunked", and that is what is forwarded.
    for te in [
        " chunked",
        "\tchunked",
        "chunked ",
        "chunked\t",
        "CHUNKED",
        "Chunked",
    ] {
        let raw = req(&format!("Transfer-Encoding:{te}\r\n"));
        assert_eq!(framed(&raw), BodyKind::Chunked, "{raw:?}");
    }
}

#[test]
fn te_duplicated() {
    // As varnishd: fields that all say `chunked` are one reading.
    assert_eq!(
        framed(&req(
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        )),
        BodyKind::Chunked
    );
    rejected(&req(
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
    ));
    rejected(&req(
        "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n",
    ));
    rejected(&req(
        "Transfer-Encoding: chunked\r\ntransfer-encoding: x\r\n",
    ));
}

#[test]
fn te_name_tricks() {
    // Whitespace before the colon.
    rejected(&req("Transfer-Encoding : chunked\r\n"));
    rejected(&req("Transfer-Encoding\t: chunked\r\n"));
    // Control bytes or non-token bytes in the name.
    rejected(&req("Transfer-Encoding\x00: chunked\r\n"));
    rejected(&req("Transfer\x0bEncoding: chunked\r\n"));
    rejected(&req("Transfer-Encod\u{ed}ng: chunked\r\n"));
    rejected(&req("\"Transfer-Encoding\": chunked\r\n"));
    // A different (valid) name is just another header: no chunking.
    let h = parse(&req("Transfer_Encoding: chunked\r\n")).unwrap();
    assert_eq!(h.body, BodyKind::None);
    assert!(!h.headers.contains("transfer-encoding"));
}

#[test]
fn te_as_first_line_with_leading_space() {
    let raw = "POST / HTTP/1.1\r\n Transfer-Encoding: chunked\r\nHost: a\r\n\r\n";
    let e = rejected(raw);
    assert!(e.message().contains("1st header has white space"), "{e}");
}

#[test]
fn te_hidden_in_obs_fold() {
    // A folded continuation belongs to the previous field: it is unfolded into
    // that field's value, never read as a Transfer-Encoding of its own, and
    // serialised unfolded.
    let raw = req("X-Foo: bar\r\n Transfer-Encoding: chunked\r\n");
    let h = parse(&raw).unwrap();
    assert_eq!(h.body, BodyKind::None);
    assert!(!h.headers.contains("transfer-encoding"));
    assert_eq!(
        h.headers.get("x-foo"),
        Some(&b"bar   Transfer-Encoding: chunked"[..])
    );
    let mut out = Vec::new();
    write_request_head(&h, &mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("X-Foo: bar   Transfer-Encoding: chunked\r\n"));
    assert_eq!(text.matches("\r\n").count(), 4);
    // With folding refused, the message is refused.
    let strict = Limits {
        allow_obs_fold: false,
        ..Limits::request()
    };
    let e = parse_request(raw.as_bytes(), &strict).unwrap_err();
    assert_eq!(e.status(), Some(400));
}

#[test]
fn te_value_folded() {
    // "Transfer-Encoding: \r\n chunked" unfolds to "chunked" (whitespace
    // only), which is the one reading; it is forwarded on one line.
    let h = parse(&req("Transfer-Encoding:\r\n chunked\r\n")).unwrap();
    assert_eq!(h.body, BodyKind::Chunked);
    // "chunked\r\n , identity" unfolds to a list: refused.
    rejected(&req("Transfer-Encoding: chunked\r\n , identity\r\n"));
}

#[test]
fn bare_cr_and_nul() {
    // A head is judged once its empty line is there (before, more is
    // awaited, as varnishd's `HTTP1_Complete` does).
    rejected(&req("Transfer-Encoding: chunked\r\r\n"));
    rejected(&req("X: a\rTransfer-Encoding: chunked\r\n"));
    rejected(&req("Content-Length: 5\r\r\n\r\n"));
    rejected(&req("X: a\x00b\r\n"));
    rejected(&req("X: \x7f\r\n"));
    rejected("POST / HTTP/1.1\rHost: a\r\n\r\n");
}

#[test]
fn bare_lf_is_a_line_end() {
    // LF alone ends a line (RFC 9112 §2.2 allows it, varnishd does it), so a
    // field after it is a field: the one reading is chunked.
    let raw = "POST / HTTP/1.1\nHost: a\nTransfer-Encoding: chunked\n\n";
    assert_eq!(framed(raw), BodyKind::Chunked);
}

// ---- Content-Length tricks ------------------------------------------------

#[test]
fn cl_duplicates() {
    let e = rejected(&req("Content-Length: 5\r\nContent-Length: 5\r\n"));
    assert_eq!(e.message(), "Multiple Content-Length: headers");
    rejected(&req("Content-Length: 5\r\nContent-Length: 6\r\n"));
    rejected(&req("Content-Length: 5\r\ncontent-length: 5\r\n"));
    rejected(&req("Content-Length: 5, 5\r\n"));
    rejected(&req("Content-Length: 5,6\r\n"));
}

#[test]
fn cl_number_syntax() {
    for cl in [
        "+5",
        "-5",
        "-0",
        "0x5",
        "5.0",
        "5e0",
        "5 5",
        "5\u{b}",
        "",
        "five",
        "18446744073709551616",
        "9223372036854775808",
        "99999999999999999999999999999",
    ] {
        rejected(&req(&format!("Content-Length: {cl}\r\n")));
    }
    assert_eq!(framed(&req("Content-Length:  5 \r\n")), BodyKind::Length(5));
    assert_eq!(
        framed(&req("Content-Length: 0005\r\n")),
        BodyKind::Length(5)
    );
    assert_eq!(framed(&req("Content-Length: 0\r\n")), BodyKind::None);
}

#[test]
fn cl_folded() {
    rejected(&req("Content-Length: 1\r\n 0\r\n"));
}

#[test]
fn cl_name_tricks() {
    rejected(&req("Content-Length : 5\r\n"));
    rejected(&req(" Content-Length: 5\r\n").replacen("Host: a\r\n", "", 1));
    let h = parse(&req("Content_Length: 5\r\n")).unwrap();
    assert_eq!(h.body, BodyKind::None);
}

#[test]
fn head_and_http10_bodies() {
    rejected("HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n");
    rejected("HEAD / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
    rejected("POST / HTTP/1.0\r\n\r\n");
    rejected("PUT / HTTP/1.0\r\n\r\n");
    assert_eq!(framed("GET / HTTP/1.0\r\n\r\n"), BodyKind::None);
    // A GET may carry a framed body.
    assert_eq!(
        framed("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n"),
        BodyKind::Length(2)
    );
}

// ---- Request line and Host ------------------------------------------------

#[test]
fn request_line_tricks() {
    rejected("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n");
    rejected("GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n");
    rejected("GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n");
    rejected("GET / HTTP/1.1 x\r\nHost: a\r\n\r\n");
    rejected("GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n");
    rejected("GET / HTTP/1.1\rHost: a\r\n\r\n");
    rejected("GET  HTTP/1.1\r\nHost: a\r\n\r\n");
    rejected("GET / HTTP/1.10\r\nHost: a\r\n\r\n");
    rejected("GET / HTTP/1.1\x00\r\nHost: a\r\n\r\n");
    // As varnishd's http1_splitline: a method is anything without white
    // space or control characters; it cannot change the framing.
    let (h, _) = parse_request(b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", &Limits::request())
        .expect("a method with a non-token byte is taken")
        .expect("complete");
    assert_eq!(&h.method[..], b"G(T");
    assert_eq!(h.body, BodyKind::None);
}

#[test]
fn host_confusion() {
    rejected("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
    rejected("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n");
    rejected("GET / HTTP/1.1\r\n\r\n");
    // Absolute form wins over Host, and only one Host is forwarded.
    let h = parse("GET http://good/x HTTP/1.1\r\nHost: evil\r\n\r\n").unwrap();
    assert_eq!(
        (&h.target[..], h.headers.get("host")),
        (&b"/x"[..], Some(&b"good"[..]))
    );
    let mut out = Vec::new();
    write_request_head(&h, &mut out);
    assert_eq!(out, b"GET /x HTTP/1.1\r\nHost: good\r\n\r\n");
}

#[test]
fn connection_cannot_strip_framing_or_host() {
    for name in ["Content-Length", "Host", "content-length"] {
        let raw = format!(
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nConnection: {name}\r\n\r\n"
        );
        let mut h = parse(&raw).unwrap();
        let e = do_connection(&mut h.headers, h.version).unwrap_err();
        assert_eq!(e.status(), Some(400));
    }
}

// ---- Pipelining boundaries ------------------------------------------------

#[test]
fn pipelined_request_is_not_swallowed() {
    let raw = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /admin HTTP/1.1\r\nHost: a\r\n\r\n";
    let (h, len) = parse_request(raw, &Limits::request()).unwrap().unwrap();
    assert_eq!(h.body, BodyKind::None);
    assert_eq!(&raw[len..len + 10], b"GET /admin");
}

#[test]
fn chunked_body_then_next_request() {
    let raw = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
                3\r\nabc\r\n0\r\n\r\nGET /next HTTP/1.1\r\nHost: a\r\n\r\n";
    let (h, len) = parse_request(raw, &Limits::request()).unwrap().unwrap();
    assert_eq!(h.body, BodyKind::Chunked);
    let (data, n) = dechunk(&raw[len..]).unwrap();
    assert_eq!(data, b"abc");
    let (next, _) = parse_request(&raw[len + n..], &Limits::request())
        .unwrap()
        .unwrap();
    assert_eq!(&next.target[..], b"/next");
    assert_eq!(next.version, Version::Http11);
}

// ---- Chunked body tricks --------------------------------------------------

#[test]
fn chunk_size_overflow() {
    chunk_rejected(b"FFFFFFFFFFFFFFED\r\n");
    chunk_rejected(b"FFFFFFFFFFFFFFFFF\r\n");
    chunk_rejected(b"10000000000000000000000000000001\r\nx\r\n0\r\n\r\n");
    chunk_rejected(b"8000000000000000\r\n");
}

#[test]
fn chunk_size_syntax() {
    for bad in [
        &b" 5\r\nhello\r\n0\r\n\r\n"[..],
        b"+5\r\nhello\r\n0\r\n\r\n",
        b"-5\r\nhello\r\n0\r\n\r\n",
        b"0x5\r\nhello\r\n0\r\n\r\n",
        b"5 5\r\nhello\r\n0\r\n\r\n",
        b"\r\nhello\r\n0\r\n\r\n",
        b"5\x00\r\nhello\r\n0\r\n\r\n",
        b"g\r\n0\r\n\r\n",
    ] {
        chunk_rejected(bad);
    }
    assert_eq!(dechunk(b"0005\r\nhello\r\n0\r\n\r\n").unwrap().0, b"hello");
    assert_eq!(dechunk(b"5 \r\nhello\r\n0\r\n\r\n").unwrap().0, b"hello");
}

#[test]
fn chunk_extensions() {
    // As varnishd 7.1 (`chunked header non-hex`): no extension is taken,
    // so none can be read two ways.
    chunk_rejected(b"5;foo=bar\r\nhello\r\n0;x\r\n\r\n");
    chunk_rejected(b"5 ; foo=\"a;b\"\r\nhello\r\n0\r\n\r\n");
    // A line end hidden in an extension is refused.
    chunk_rejected(b"5;foo\nbar\r\nhello\r\n0\r\n\r\n");
    chunk_rejected(b"5;foo\rbar\r\nhello\r\n0\r\n\r\n");
    chunk_rejected(b"5;foo\x00\r\nhello\r\n0\r\n\r\n");
    // Oversized extension lines are refused.
    let mut long = b"5;".to_vec();
    long.extend(std::iter::repeat_n(b'a', 5000));
    long.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
    chunk_rejected(&long);
}

#[test]
fn chunk_line_ends() {
    chunk_rejected(b"5\nhello\r\n0\r\n\r\n");
    chunk_rejected(b"5\r\nhello\n0\r\n\r\n");
    chunk_rejected(b"5\r\nhelloXX0\r\n\r\n");
    chunk_rejected(b"5\r\nhello\r0\r\n\r\n");
    chunk_rejected(b"5\r\nhello\r\n0\n\n");
    chunk_rejected(b"5\r\nhello\r\n0\r\n\n");
    chunk_rejected(b"5\r\nhello\r\n0\r\n\r\r");
    // Data longer than the declared size runs into the CRLF check.
    chunk_rejected(b"3\r\nhello\r\n0\r\n\r\n");
}

#[test]
fn smuggled_request_as_trailer() {
    // Everything after the last chunk until the empty line is trailer: a
    // request line there is not a valid field and is refused.
    chunk_rejected(b"0\r\nGET /admin HTTP/1.1\r\nHost: a\r\n\r\n");
    chunk_rejected(b"0\r\n X: folded\r\n\r\n");
    // As varnishd 7.1 (`chunked tail no NL`), even a proper trailer field
    // fails the body; the empty line alone ends it, what follows is left.
    chunk_rejected(b"0\r\nX-Checksum: 1\r\n\r\nNEXT");
    let (data, n) = dechunk(b"0\r\n\r\nNEXT").unwrap();
    assert!(data.is_empty());
    assert_eq!(n, 5);
}

// ---- Backend responses ------------------------------------------------------

fn resp_kind(raw: &str, head_request: bool) -> Result<BodyKind, Error> {
    let (r, _) =
        parse_response(raw.as_bytes(), &Limits::response())?.expect("complete response head");
    r.body_kind(head_request)
}

#[test]
fn response_framing() {
    let bad = |raw: &str| {
        let e = resp_kind(raw, false).unwrap_err();
        assert_eq!(e.status(), Some(503), "{raw:?}");
    };
    bad("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
    bad("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n");
    bad("HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n");
    bad("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
    bad("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n");
    bad("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n");
    bad("HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n");
    assert_eq!(
        resp_kind(
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
            false
        )
        .unwrap(),
        BodyKind::Length(3)
    );
    assert_eq!(
        resp_kind("HTTP/1.1 200 OK\r\n\r\n", false).unwrap(),
        BodyKind::Eof
    );
    assert_eq!(
        resp_kind("HTTP/1.1 200 OK\r\nTransfer-Encoding: bogus\r\n\r\n", true).unwrap(),
        BodyKind::None
    );
    assert_eq!(
        resp_kind(
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
            false
        )
        .unwrap(),
        BodyKind::None
    );
    let e = parse_response(b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", &Limits::response()).unwrap_err();
    assert_eq!(e.status(), Some(503));
    let e = parse_response(b"HTTP/1.1 200 OK\r\nX : a\r\n\r\n", &Limits::response()).unwrap_err();
    assert_eq!(e.status(), Some(503));
}
