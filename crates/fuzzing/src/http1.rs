//! HTTP/1 heads, chunked bodies and the PROXY protocol header (with the
//! TLS facts its TLVs carry): the bytes a client or backend controls
//! before any VCL runs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::BytesMut;
use lacquer_http::parse::{Limits, RequestHead, ResponseHead};
use lacquer_http::proxy::{self, Scan};
use lacquer_http::{
    ChunkedDecoder, ChunkedLimits, encode_chunk, encode_last_chunk, parse_request,
    parse_request_buf, parse_response, parse_response_buf, write_request_head, write_response_head,
};
use lacquer_tls::info::TlsInfo;

fn fields(h: &lacquer_http::Headers) -> Vec<(Vec<u8>, Vec<u8>)> {
    h.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect()
}

fn same_request(a: &RequestHead, b: &RequestHead) -> bool {
    a.method == b.method
        && a.target == b.target
        && a.version == b.version
        && a.body == b.body
        && fields(&a.headers) == fields(&b.headers)
}

fn same_response(a: &ResponseHead, b: &ResponseHead) -> bool {
    a.version == b.version
        && a.status == b.status
        && a.reason == b.reason
        && fields(&a.headers) == fields(&b.headers)
}

/// Limits small enough for the fuzzer to reach every limit's edge.
fn small_limits() -> Limits {
    Limits {
        max_line: 256,
        max_head: 2048,
        max_headers: 16,
        ..Limits::request()
    }
}

/// Limits for reading back what was written: writing normalises
/// `name:value` to `name: value`, so a head at the edge of a small limit
/// may grow past it; what is checked is that it reads back the same.
fn reread_limits() -> Limits {
    Limits {
        max_line: 1 << 20,
        max_head: 1 << 20,
        max_headers: 1 << 12,
        ..Limits::request()
    }
}

/// A client's request head, with the default and with small limits: both
/// parsers agree, the head lies within the input, and the head written
/// back out parses to the same head.
pub fn http_request(data: &[u8]) {
    check_request(data, &Limits::request());
    check_request(data, &small_limits());
}

fn check_request(data: &[u8], limits: &Limits) {
    let copied = parse_request(data, limits);
    let mut buf = BytesMut::from(data);
    let in_place = parse_request_buf(&mut buf, limits);
    match (&copied, &in_place) {
        (Ok(Some((a, len))), Ok(Some(b))) => {
            assert!(
                *len <= data.len(),
                "head of {len} bytes from {}",
                data.len()
            );
            assert_eq!(
                buf.len(),
                data.len() - len,
                "parse_request_buf kept the rest"
            );
            assert!(same_request(a, b), "parsers disagree: {a:?} / {b:?}");
            let mut out = Vec::new();
            write_request_head(a, &mut out);
            assert_eq!(out.len(), lacquer_http::write::request_head_len(a));
            let (again, n) = parse_request(&out, &reread_limits())
                .unwrap_or_else(|e| panic!("written head refused: {e:?}: {out:?}"))
                .unwrap_or_else(|| panic!("written head incomplete: {out:?}"));
            assert_eq!(n, out.len());
            assert!(same_request(a, &again), "round trip: {a:?} / {again:?}");
        }
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
        _ => panic!("parsers disagree: {copied:?} / {in_place:?}"),
    }
}

/// A backend's response head, as [`http_request`]; also asks for its body
/// framing both for a GET and a HEAD.
pub fn http_response(data: &[u8]) {
    check_response(data, &Limits::response());
    check_response(data, &small_limits());
}

fn check_response(data: &[u8], limits: &Limits) {
    let copied = parse_response(data, limits);
    let mut buf = BytesMut::from(data);
    let in_place = parse_response_buf(&mut buf, limits);
    match (&copied, &in_place) {
        (Ok(Some((a, len))), Ok(Some(b))) => {
            assert!(*len <= data.len());
            assert_eq!(buf.len(), data.len() - len);
            assert!(same_response(a, b), "parsers disagree: {a:?} / {b:?}");
            let _ = a.body_kind(false);
            let _ = a.body_kind(true);
            let mut out = Vec::new();
            write_response_head(a, &mut out);
            assert_eq!(out.len(), lacquer_http::write::response_head_len(a));
            let (again, n) = parse_response(&out, &reread_limits())
                .unwrap_or_else(|e| panic!("written head refused: {e:?}: {out:?}"))
                .unwrap_or_else(|| panic!("written head incomplete: {out:?}"));
            assert_eq!(n, out.len());
            assert!(same_response(a, &again), "round trip: {a:?} / {again:?}");
        }
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
        _ => panic!("parsers disagree: {copied:?} / {in_place:?}"),
    }
}

/// Decodes `data` fed in the given pieces: the body, the bytes consumed,
/// and whether the last chunk was seen; `None` on an error.
fn dechunk(pieces: &[&[u8]], limits: &ChunkedLimits) -> Option<(Vec<u8>, usize, bool)> {
    let mut d = ChunkedDecoder::new(limits.clone());
    let mut body = Vec::new();
    let mut used = 0;
    for p in pieces {
        let (n, done) = d.decode_to(p, &mut body).ok()?;
        assert!(n <= p.len(), "consumed {n} of {}", p.len());
        used += n;
        if done {
            assert!(d.is_done());
            return Some((body, used, true));
        }
        assert_eq!(n, p.len(), "stopped early without finishing");
    }
    Some((body, used, false))
}

/// A chunked body, with the default and with small limits: one piece or
/// two give the same body, the body is never longer than the input, and
/// the body chunked again decodes to itself. Also the input itself,
/// chunked in pieces of 37 bytes, decodes back to the input.
pub fn chunked(data: &[u8]) {
    check_chunked(data, ChunkedLimits::default());
    check_chunked(data, ChunkedLimits { max_size_line: 64 });
    let mut enc = Vec::new();
    for piece in data.chunks(37) {
        encode_chunk(piece, &mut enc);
    }
    encode_last_chunk(&mut enc);
    let got = dechunk(&[&enc], &ChunkedLimits::default());
    assert_eq!(
        got,
        Some((data.to_vec(), enc.len(), true)),
        "chunked encoding round trip"
    );
}

fn check_chunked(data: &[u8], limits: ChunkedLimits) {
    let whole = dechunk(&[data], &limits);
    let at = crate::split_point(data);
    let split = dechunk(&[&data[..at], &data[at..]], &limits);
    match (&whole, &split) {
        (Some(a), Some(b)) => assert_eq!(a, b, "split at {at}"),
        // An error in the second piece may be past the end of the body the
        // first call finished; otherwise both see it.
        (None, None) => {}
        _ => panic!("split at {at} changes the outcome: {whole:?} / {split:?}"),
    }
    if let Some((body, used, done)) = whole {
        assert!(body.len() <= used && used <= data.len());
        if done {
            let mut again = Vec::new();
            if !body.is_empty() {
                encode_chunk(&body, &mut again);
            }
            encode_last_chunk(&mut again);
            let (b2, u2, d2) = dechunk(&[&again], &limits).expect("re-chunked body refused");
            assert!(d2 && u2 == again.len() && b2 == body);
        }
    }
}

/// A PROXY header (v1 or v2, with TLVs). The first byte chooses: odd, the
/// rest is what a connection sent; even, the rest is the TLV area of a v2
/// header built around it (so the fuzzer reaches the TLV walker without
/// guessing the signature), with a correct CRC32C when it holds a CRC TLV,
/// and also the TLVs `TlsInfo` reads (see [`tls_tlvs`]). A complete header
/// lies within the input, every shorter prefix of it scans as incomplete,
/// an accepted header's addresses survive re-encoding as v2 and v1, and
/// its TLVs tile the TLV area, each found by `find_tlv`. Also checks that
/// what [`proxy::encode_v2`] writes parses back.
pub fn proxy(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 1 {
        proxy_bytes(rest);
    } else {
        let mut h = proxy::V2_SIG.to_vec();
        h.push(0x21); // version 2, PROXY
        h.push(if mode & 2 == 0 { 0x11 } else { 0x21 }); // TCP over IPv4 / IPv6
        let addrs: &[u8] = if mode & 2 == 0 {
            &[127, 0, 0, 1, 127, 0, 0, 2, 0x1f, 0x90, 0, 80]
        } else {
            &[0; 36]
        };
        let len = addrs.len() + rest.len();
        let Ok(len16) = u16::try_from(len) else {
            return;
        };
        h.extend_from_slice(&len16.to_be_bytes());
        h.extend_from_slice(addrs);
        let tlv_start = h.len();
        h.extend_from_slice(rest);
        fix_crc(&mut h, tlv_start);
        proxy_bytes(&h);
        tls_tlvs(rest);
    }
    let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 1234);
    let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 443);
    let authority = (rest.len() <= 255).then_some(rest);
    let enc = proxy::encode_v2(v4, v6, authority);
    let p = proxy::parse(&enc);
    let got = p.result.expect("encode_v2's header refused");
    if let Some(a) = authority.filter(|a| !a.is_empty()) {
        assert_eq!(
            proxy::find_tlv(&got.tlvs, proxy::PP2_TYPE_AUTHORITY),
            Some(a)
        );
    }
}

/// Sets a CRC32C TLV at the top level of the TLV area to the header's
/// checksum, as a sender would.
fn fix_crc(h: &mut [u8], mut at: usize) {
    while at + 3 <= h.len() {
        let len = usize::from(u16::from_be_bytes([h[at + 1], h[at + 2]]));
        if h[at] == proxy::PP2_TYPE_CRC32C && len == 4 && at + 7 <= h.len() {
            h[at + 3..at + 7].fill(0);
            let crc = proxy::crc32c(h);
            h[at + 3..at + 7].copy_from_slice(&crc.to_be_bytes());
            return;
        }
        at += 3 + len;
    }
}

fn proxy_bytes(data: &[u8]) {
    let Scan::Complete(n) = proxy::scan(data) else {
        return;
    };
    assert!(n <= data.len() && n <= proxy::MAX_HEADER);
    for cut in [n / 2, n.saturating_sub(1)] {
        if cut < n {
            assert!(
                matches!(proxy::scan(&data[..cut]), Scan::More),
                "prefix {cut} of a {n}-byte header does not scan as incomplete"
            );
        }
    }
    let Ok(got) = proxy::parse(&data[..n]).result else {
        return;
    };
    assert!(got.tlvs.len() <= n);
    if let Some(a) = &got.addrs {
        let v2 = proxy::parse(&proxy::encode_v2(a.client, a.server, None));
        let b = v2.result.expect("re-encoded v2 header refused");
        let b = b.addrs.expect("re-encoded v2 header has no addresses");
        assert_eq!((b.client, b.server), (a.client, a.server), "v2 round trip");
        if a.client.is_ipv4() == a.server.is_ipv4() {
            let v1 = proxy::encode_v1(&a.client.ip().to_string(), &a.client_port, a.server);
            let b = proxy::parse(&v1)
                .result
                .expect("re-encoded v1 header refused");
            let b = b.addrs.expect("re-encoded v1 header has no addresses");
            assert_eq!((b.client, b.server), (a.client, a.server), "v1 round trip");
        }
    }
    let mut rest = &got.tlvs[..];
    while let [kind, hi, lo, tail @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        assert!(len <= tail.len(), "accepted TLV runs past the area");
        assert!(proxy::find_tlv(&got.tlvs, *kind).is_some());
        rest = &tail[len..];
    }
    assert!(rest.is_empty(), "accepted TLVs must tile the area exactly");
    for kind in 0..=u8::MAX {
        if let Some(v) = proxy::find_tlv(&got.tlvs, kind) {
            assert!(v.len() <= got.tlvs.len());
        }
    }
    if let Some(ssl) = proxy::find_tlv(&got.tlvs, proxy::PP2_TYPE_SSL) {
        // The SSL TLV's own sub-TLVs follow its 5-byte head.
        if let Some(sub) = ssl.get(5..) {
            for kind in 0x21..=0x25 {
                let _ = proxy::find_tlv(sub, kind);
            }
        }
    }
}

/// TLVs as a PROXY v2 header carries them (type, 16-bit length, value),
/// through `TlsInfo::from_proxy_tlvs`: what it reads as TLS survives
/// re-encoding with `to_proxy_tlvs` (the path native TLS takes to VCL)
/// unchanged.
fn tls_tlvs(area: &[u8]) {
    let mut tlvs = Vec::new();
    let mut rest = area;
    while let [kind, hi, lo, tail @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        let Some(v) = tail.get(..len) else {
            break;
        };
        tlvs.push((*kind, v));
        rest = &tail[len..];
    }
    let Some(info) = TlsInfo::from_proxy_tlvs(tlvs.iter().copied()) else {
        return;
    };
    let again = info.to_proxy_tlvs();
    let back = TlsInfo::from_proxy_tlvs(again.iter().map(|(t, v)| (*t, v.as_slice())))
        .expect("re-encoded TLS info is TLS");
    assert_eq!(back, info, "TLS info through PROXY TLVs");
}
