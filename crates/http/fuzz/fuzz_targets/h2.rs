//! Fuzz target `h2`: arbitrary bytes as an HTTP/2 byte stream through the
//! frame scanner, the per-type payload parser and, for header blocks, the
//! bounded HPACK decoder and the request-head checks, asserting
//! invariants rather than just "no panic":
//! - a scanned frame is exactly its 9-byte header plus the length it
//!   announces, and never longer than the input;
//! - a DATA or HEADERS payload parsed with padding is shorter than the
//!   frame; a parsed SETTINGS frame has whole six-byte pairs;
//! - a decoded header block never grows the dynamic table past its limit,
//!   and an accepted request head has a method and a path and only
//!   lower-case field names.
#![no_main]

use lacquer_http::h2::frame::{Meta, parse, types};
use lacquer_http::h2::{request_head, rules, scan};
use lacquer_http::hpack::{Table, decode_block_bounded};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut table = Table::new(4096);
    let mut rest = data;
    while let Some((head, total)) = scan(rest) {
        assert_eq!(total, 9 + head.len as usize);
        assert!(total <= rest.len());
        let payload = &rest[9..total];
        rest = &rest[total..];
        let Some(r) = rules(head.typ) else {
            continue;
        };
        let fl = head.flags & r.flags;
        let Ok(meta) = parse(head.typ, fl, payload) else {
            continue;
        };
        match meta {
            Meta::Data { body, .. } => assert!(body.len() <= payload.len()),
            Meta::Settings { pairs, .. } => assert_eq!(pairs.len() * 6, payload.len()),
            Meta::Headers { block, .. } if head.typ == types::HEADERS => {
                assert!(block.len() <= payload.len());
                let (fields, err) = decode_block_bounded(&mut table, &block, 4096, 1 << 16);
                assert!(table.size() <= table.max_size() && table.max_size() <= 4096);
                if err.is_none()
                    && let Ok(req) = request_head(fields, 1 << 16)
                {
                    assert!(!req.method.is_empty() && !req.path.is_empty());
                    assert!(
                        req.headers
                            .iter()
                            .all(|(n, _)| !n.iter().any(u8::is_ascii_uppercase))
                    );
                }
            }
            _ => {}
        }
    }
});
