//! HTTP/2 frames and HPACK header blocks, as a prior-knowledge or upgraded
//! client sends them (and as `lacquer vtc`'s h2 client and server read
//! them: they use the same parsers).

use lacquer_http::h2::frame::{Meta, flags, types};
use lacquer_http::h2::{self, Settings, frame};
use lacquer_http::hpack::{self as hp, Indexing, Name, Table, huffman};

/// A stream of frames: each complete frame's header round-trips, its
/// payload is parsed with the per-type rules (as the server masks the
/// flags, and raw, as the vtc runner does), a parsed payload accounts for
/// every byte and fixed-size frames parse only at their size, SETTINGS are
/// applied, and HEADERS fragments go through [`hpack`]'s decoder with one
/// table for the connection; a request head it accepts has a method, a
/// path and only lower-case names. Also reads the input as an
/// `HTTP2-Settings` upgrade value.
pub fn h2_frames(data: &[u8]) {
    let _ = h2::preface_state(data);
    let _ = h2::decode_upgrade_settings(data);
    let mut rest = data.strip_prefix(h2::PREFACE.as_slice()).unwrap_or(data);
    let mut settings = Settings::PROTOCOL;
    let mut table = Table::new(4096);
    while let Some((head, total)) = h2::scan(rest) {
        assert!(total <= rest.len() && total == 9 + head.len as usize);
        let raw: &[u8; 9] = rest[..9].try_into().expect("nine bytes");
        assert_eq!(&head.encode(), raw, "frame header round trip");
        let payload = &rest[9..total];
        let wire = frame::encode(head.typ, head.flags, head.stream, payload)
            .expect("a scanned frame fits its length field");
        assert!(wire == rest[..total], "frame round trip");
        if let Ok(meta) = frame::parse(head.typ, head.flags, payload) {
            payload_accounted(head.typ, head.flags, payload.len(), &meta);
        }
        let flags = h2::rules(head.typ).map_or(head.flags, |r| head.flags & r.flags);
        match frame::parse(head.typ, flags, payload) {
            Ok(frame::Meta::Settings { pairs, .. }) => {
                for (id, v) in pairs {
                    if settings.apply(id, v).is_err() {
                        break;
                    }
                }
                let _ = settings.encode_changes();
            }
            Ok(frame::Meta::Headers { block, .. }) => {
                let (fields, err) = hp::decode_block_bounded(&mut table, &block, 4096, 65536);
                assert!(table.size() <= table.max_size() && table.max_size() <= 4096);
                if err.is_none()
                    && let Ok(req) = h2::request_head(fields, 65536, 64)
                {
                    assert!(!req.method.is_empty() && !req.path.is_empty());
                    assert!(
                        req.headers
                            .iter()
                            .all(|(n, _)| !n.iter().any(u8::is_ascii_uppercase)),
                        "upper-case field name accepted"
                    );
                }
            }
            Ok(frame::Meta::Data { body, padded }) => {
                assert!(body.len() + usize::from(padded) <= payload.len());
            }
            Ok(_) | Err(_) => {}
        }
        rest = &rest[total..];
    }
}

/// A parsed payload of `len` bytes accounts for every byte (pad-length
/// byte, padding, priority or promised stream, content), and frames of a
/// fixed size parse only at that size.
fn payload_accounted(typ: u8, fl: u8, len: usize, meta: &Meta) {
    let padded = fl & flags::PADDED != 0;
    let pad = |p: u8| if padded { 1 + usize::from(p) } else { 0 };
    let used = match meta {
        Meta::Data { padded: p, body } => body.len() + pad(*p),
        Meta::Headers {
            padded: p,
            prio,
            promised,
            block,
        } => {
            let p = if typ == types::CONTINUATION {
                0
            } else {
                pad(*p)
            };
            block.len() + p + 5 * usize::from(prio.is_some()) + 4 * usize::from(promised.is_some())
        }
        Meta::Priority(_) => 5,
        Meta::Rst(_) | Meta::WinUp(_) => 4,
        Meta::Ping { .. } => 8,
        Meta::Settings { pairs, .. } => pairs.len() * 6,
        Meta::Goaway { debug, .. } => 8 + debug.as_ref().map_or(0, Vec::len),
    };
    assert_eq!(used, len, "type {typ} flags {fl:#x}: {meta:?}");
}

/// One HPACK header block: decoding is bounded, the request-head rules do
/// not panic, and the fields decoded, encoded again as literals (plain or
/// Huffman, by the first byte), decode to the same fields. The block is
/// decoded again into a table of a size the first byte picks (down to
/// none), which never grows past it, and the input, when it is a valid
/// Huffman string, encodes back to a string of the announced length that
/// decodes to the same bytes.
pub fn hpack(data: &[u8]) {
    if let Some((&first, block)) = data.split_first() {
        let mut t = Table::new(u32::from(first) * 16);
        let _ = hp::decode_block(&mut t, block);
        assert!(t.size() <= t.max_size(), "table past its size");
    }
    if let Ok(s) = huffman::decode(data) {
        let enc = huffman::encode(&s);
        assert_eq!(huffman::encoded_len(&s), enc.len());
        assert_eq!(
            huffman::decode(&enc).as_deref(),
            Ok(&s[..]),
            "Huffman round trip"
        );
    }
    let mut table = Table::new(4096);
    let (fields, err) = hp::decode_block_bounded(&mut table, data, 4096, 65536);
    assert!(table.size() <= table.max_size());
    // A second block against the same table (as the next request's).
    let (_, _) = hp::decode_block_bounded(&mut table, data, 4096, 65536);
    let total: u64 = fields
        .iter()
        .map(|h| h.name.len() as u64 + h.value.len() as u64 + 32)
        .sum();
    assert!(total <= 65536, "decoded {total} bytes past the limit");
    let huff = data.first().is_some_and(|b| b & 1 == 1);
    let mut out = Vec::new();
    let mut enc_table = Table::new(4096);
    for h in &fields {
        hp::encode_literal(
            &mut out,
            &mut enc_table,
            Indexing::Not,
            Name::Literal(&h.name, huff),
            &h.value,
            huff,
        )
        .expect("a literal without indexing needs no table");
    }
    let (again, err2) = hp::decode_block(&mut Table::new(4096), &out);
    assert_eq!(err2, None, "re-encoded block refused");
    assert_eq!(again, fields, "HPACK round trip");
    if err.is_none() {
        let _ = h2::request_head(fields, 65536, 64);
    }
}
