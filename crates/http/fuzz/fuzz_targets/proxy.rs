//! Fuzz target `proxy`: arbitrary bytes through the PROXY protocol scanner
//! and parser, checking invariants rather than just "no panic":
//! - a complete header is never longer than the input or `MAX_HEADER`, and
//!   every prefix of it scans as incomplete (never junk, never another end);
//! - an accepted header's addresses survive re-encoding (v1 and v2);
//! - every TLV of an accepted v2 header is found by `find_tlv`.
#![no_main]

use lacquer_http::proxy::{Scan, encode_v1, encode_v2, find_tlv, parse, scan};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Scan::Complete(n) = scan(data) else {
        return;
    };
    assert!(n <= data.len() && n <= lacquer_http::proxy::MAX_HEADER);
    for cut in [n / 2, n.saturating_sub(1)] {
        if cut < n {
            assert!(
                matches!(scan(&data[..cut]), Scan::More),
                "prefix {cut} of a {n}-byte header does not scan as incomplete"
            );
        }
    }
    let parsed = parse(&data[..n]);
    let Ok(p) = parsed.result else {
        return;
    };
    if let Some(a) = &p.addrs {
        let again = parse(&encode_v2(a.client, a.server, None));
        let b = again.result.expect("re-encoded v2 header must parse");
        let b = b.addrs.expect("re-encoded v2 header has addresses");
        assert_eq!((b.client, b.server), (a.client, a.server));
        if a.client.is_ipv4() == a.server.is_ipv4() {
            let v1 = encode_v1(&a.client.ip().to_string(), &a.client_port, a.server);
            let b = parse(&v1).result.expect("re-encoded v1 header must parse");
            let b = b.addrs.expect("v1 header has addresses");
            assert_eq!((b.client, b.server), (a.client, a.server));
        }
    }
    let mut rest = &p.tlvs[..];
    while rest.len() >= 3 {
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        assert!(find_tlv(&p.tlvs, rest[0]).is_some());
        rest = &rest[3 + len..];
    }
    assert!(rest.is_empty(), "accepted TLVs must tile exactly");
});
