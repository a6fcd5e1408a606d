//! Fuzz target `parse`: arbitrary bytes through request and response parsing
//! and chunked decoding, checking the codec's invariants, not just "no panic":
//! - whatever parses re-serialises to bytes that parse to the same head;
//! - the slice and `BytesMut` entry points agree;
//! - chunked decoding gives the same result whole and split in two;
//! - encoding arbitrary data as chunks decodes back to it.
#![no_main]

use bytes::BytesMut;
use lacquer_http::{
    ChunkedDecoder, ChunkedLimits, Limits, encode_chunk, encode_last_chunk, parse_request,
    parse_request_buf, parse_response, parse_response_buf, write_request_head, write_response_head,
};
use libfuzzer_sys::fuzz_target;

fn small_limits() -> Limits {
    Limits {
        max_line: 256,
        max_head: 2048,
        max_headers: 16,
        ..Limits::request()
    }
}

/// Limits for re-reading what the codec wrote: serialising normalises
/// `name:value` to `name: value` and may add `Host`, so a head at the edge of
/// a limit can grow by a few bytes; the property checked is that it reads back
/// as the same head.
fn reread_limits() -> Limits {
    Limits {
        max_line: 1 << 20,
        max_head: 1 << 20,
        max_headers: 1 << 12,
        ..Limits::request()
    }
}

fn check_request(data: &[u8], limits: &Limits) {
    let parsed = parse_request(data, limits);
    let mut buf = BytesMut::from(data);
    let parsed_buf = parse_request_buf(&mut buf, limits);
    match (&parsed, &parsed_buf) {
        (Ok(Some((a, len))), Ok(Some(b))) => {
            assert_eq!(a, b, "slice and BytesMut parses differ");
            assert_eq!(buf.len(), data.len() - len);
            let mut out = Vec::new();
            write_request_head(a, &mut out);
            let (again, n) = parse_request(&out, &reread_limits())
                .expect("serialised request must parse")
                .expect("serialised request must be complete");
            assert_eq!(n, out.len());
            assert_eq!(&again, a, "request changed through serialisation");
        }
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
        _ => panic!("entry points disagree: {parsed:?} vs {parsed_buf:?}"),
    }
}

fn check_response(data: &[u8], limits: &Limits) {
    let parsed = parse_response(data, limits);
    let mut buf = BytesMut::from(data);
    let parsed_buf = parse_response_buf(&mut buf, limits);
    match (&parsed, &parsed_buf) {
        (Ok(Some((a, _))), Ok(Some(b))) => {
            assert_eq!(a, b, "slice and BytesMut parses differ");
            let _ = a.body_kind(false);
            let _ = a.body_kind(true);
            let mut out = Vec::new();
            write_response_head(a, &mut out);
            let (again, _) = parse_response(&out, &reread_limits())
                .expect("serialised response must parse")
                .expect("serialised response must be complete");
            assert_eq!(&again, a, "response changed through serialisation");
        }
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
        _ => panic!("entry points disagree: {parsed:?} vs {parsed_buf:?}"),
    }
}

fn dechunk(parts: &[&[u8]]) -> Result<(Vec<u8>, usize, bool), ()> {
    let limits = ChunkedLimits {
        max_size_line: 64,
        max_trailers: 256,
    };
    let mut d = ChunkedDecoder::new(limits);
    let mut out = Vec::new();
    let mut consumed = 0;
    for p in parts {
        let (n, done) = d.decode_to(p, &mut out).map_err(|_| ())?;
        consumed += n;
        if done {
            return Ok((out, consumed, true));
        }
        assert_eq!(n, p.len(), "decoder stopped early without finishing");
    }
    Ok((out, consumed, false))
}

fuzz_target!(|data: &[u8]| {
    check_request(data, &Limits::request());
    check_request(data, &small_limits());
    check_response(data, &Limits::response());
    check_response(data, &small_limits());

    // Chunked: whole vs split at a data-chosen point.
    let whole = dechunk(&[data]);
    let cut = data.first().map_or(0, |&b| b as usize).min(data.len());
    let split = dechunk(&[&data[..cut], &data[cut..]]);
    match (&whole, &split) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "split decoding differs"),
        (Err(()), Err(())) => {}
        _ => panic!("split decoding disagrees on validity: {whole:?} vs {split:?}"),
    }

    // Encoding round trip.
    let mut enc = Vec::new();
    for piece in data.chunks(37) {
        encode_chunk(piece, &mut enc);
    }
    encode_last_chunk(&mut enc);
    let (decoded, n, done) = dechunk(&[&enc]).expect("encoded body must decode");
    assert!(done);
    assert_eq!(n, enc.len());
    assert_eq!(decoded, data);
});
