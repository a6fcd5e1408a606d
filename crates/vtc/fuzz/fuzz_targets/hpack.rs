//! Fuzz target `hpack`: arbitrary header blocks through the runner's HPACK
//! decoder, checking properties, not just "no panic":
//! - the dynamic table never exceeds its maximum size;
//! - whatever decodes re-encodes (literal, Huffman or plain as the input's
//!   first byte says) to a block that decodes to the same fields;
//! - Huffman decoding of the raw input, when it succeeds, re-encodes to a
//!   string that decodes to the same bytes.
#![no_main]

use lacquer_vtc::hpack::{self, Indexing, Name, Table, huffman};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, block)) = data.split_first() else {
        return;
    };
    let max = u32::from(first) * 16;
    let mut t = Table::new(max);
    let (fields, _err) = hpack::decode_block(&mut t, block);
    assert!(t.size() <= t.max_size());
    let huff = first & 1 == 1;
    let mut out = Vec::new();
    let mut enc = Table::new(0);
    for f in &fields {
        hpack::encode_literal(
            &mut out,
            &mut enc,
            Indexing::Not,
            Name::Literal(&f.name, huff),
            &f.value,
            huff,
        )
        .expect("literal names never fail");
    }
    let mut dec = Table::new(0);
    let (again, err) = hpack::decode_block(&mut dec, &out);
    assert!(err.is_none(), "re-encoded block failed: {err:?}");
    assert_eq!(again, fields);
    if let Ok(s) = huffman::decode(block) {
        assert_eq!(huffman::decode(&huffman::encode(&s)).unwrap(), s);
        assert_eq!(huffman::encoded_len(&s), huffman::encode(&s).len());
    }
});
