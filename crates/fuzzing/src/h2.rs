//! HTTP/2 frames and HPACK header blocks, as a prior-knowledge or upgraded
//! client sends them.

use lacquer_http::h2::{self, Settings, frame};
use lacquer_http::hpack::{self as hp, Indexing, Name, Table};

/// A stream of frames: each complete frame's header round-trips, its
/// payload is parsed with the per-type rules, SETTINGS are applied, and
/// HEADERS fragments go through [`hpack`]'s decoder with one table for the
/// connection. Also reads the input as an `HTTP2-Settings` upgrade value.
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
                if err.is_none() {
                    let _ = h2::request_head(fields, 65536);
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

/// One HPACK header block: decoding is bounded, the request-head rules do
/// not panic, and the fields decoded, encoded again as literals (plain or
/// Huffman, by the first byte), decode to the same fields.
pub fn hpack(data: &[u8]) {
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
        let _ = h2::request_head(fields, 65536);
    }
}
