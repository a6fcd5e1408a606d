//! HPACK header compression (RFC 7541), shared by lacquerd's HTTP/2
//! sessions and the vtc runner's HTTP/2 actors.
//!
//! The runner must be able to send exactly the representation a test asks
//! for (`-idxHdr`, `-litIdxHdr inc|not|never`, `-litHdr`, Huffman or
//! plain strings), so encoding is a set of primitives rather than an
//! automatic encoder. Decoding is strict: integer overflow, truncation,
//! bad indexes and bad Huffman strings are errors, and a header block is
//! decoded up to the first error so that a test can inspect what arrived.
//!
//! The dynamic [`Table`] keeps varnishtest's accounting (an entry costs its
//! name and value lengths plus 32, eviction from the oldest) and is
//! observable from tests as `tbl.dec.*` / `tbl.enc.*`.

pub mod huffman;

use std::collections::VecDeque;

/// One decoded or table header field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Field name, as bytes.
    pub name: Vec<u8>,
    /// Field value, as bytes.
    pub value: Vec<u8>,
}

/// RFC 7541 Appendix A: the static table, index 1 first.
pub const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// What went wrong while decoding a header block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The block ended inside a field.
    Truncated,
    /// An integer does not fit in 32 bits.
    Overflow,
    /// An index that is 0 or beyond the static and dynamic tables.
    BadIndex(u32),
    /// A Huffman string did not decode.
    Huffman(huffman::HuffError),
    /// A dynamic table size update above the size the decoder allows.
    TableSize(u32),
    /// The decoded fields add up to more than the allowed list size.
    ListSize(u64),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated => f.write_str("header block ends inside a field"),
            DecodeError::Overflow => f.write_str("integer larger than 32 bits"),
            DecodeError::BadIndex(i) => write!(f, "index {i} is not in the header tables"),
            DecodeError::Huffman(e) => write!(f, "{e}"),
            DecodeError::ListSize(n) => write!(f, "header list larger than {n} bytes"),
            DecodeError::TableSize(n) => {
                write!(
                    f,
                    "dynamic table size update to {n} is above the allowed size"
                )
            }
        }
    }
}

/// A dynamic table (with the static table in front for lookups).
#[derive(Debug, Clone)]
pub struct Table {
    /// Newest first, as HPACK numbers them.
    entries: VecDeque<Header>,
    size: u32,
    max: u32,
}

fn entry_size(name: usize, value: usize) -> u64 {
    name as u64 + value as u64 + 32
}

impl Table {
    /// An empty table of at most `max` bytes.
    pub fn new(max: u32) -> Self {
        Table {
            entries: VecDeque::new(),
            size: 0,
            max,
        }
    }

    /// Bytes used by the entries.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Maximum size in bytes.
    pub fn max_size(&self) -> u32 {
        self.max
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the dynamic table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Header at HPACK index `idx` (1..=61 static, 62.. dynamic).
    pub fn get(&self, idx: u32) -> Option<(&[u8], &[u8])> {
        match idx {
            0 => None,
            1..=61 => {
                let (n, v) = STATIC[idx as usize - 1];
                Some((n.as_bytes(), v.as_bytes()))
            }
            _ => self
                .entries
                .get((idx - 62) as usize)
                .map(|h| (&h.name[..], &h.value[..])),
        }
    }

    fn evict_one(&mut self) {
        if let Some(h) = self.entries.pop_back() {
            self.size -= entry_size(h.name.len(), h.value.len()) as u32;
        }
    }

    /// Change the maximum size, evicting the oldest entries that no longer
    /// fit.
    pub fn resize(&mut self, max: u32) {
        self.max = max;
        while self.size > self.max {
            self.evict_one();
        }
    }

    /// Add an entry, evicting the oldest ones to make room; an entry larger
    /// than the whole table empties it and is not added.
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        let len = entry_size(name.len(), value.len());
        while !self.entries.is_empty() && u64::from(self.max - self.size) < len {
            self.evict_one();
        }
        if u64::from(self.max - self.size) >= len {
            self.entries.push_front(Header {
                name: name.to_vec(),
                value: value.to_vec(),
            });
            self.size += len as u32;
        }
    }
}

/// Write integer `n` with an `prefix`-bit prefix, the high bits of the
/// first byte being `flags`.
pub fn encode_int(out: &mut Vec<u8>, flags: u8, prefix: u8, n: u32) {
    let max = (1u32 << prefix) - 1;
    if n < max {
        out.push(flags | n as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = n - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// Write a string literal, Huffman-coded or plain.
pub fn encode_str(out: &mut Vec<u8>, s: &[u8], huff: bool) {
    if huff {
        let e = huffman::encode(s);
        encode_int(out, 0x80, 7, e.len() as u32);
        out.extend_from_slice(&e);
    } else {
        encode_int(out, 0, 7, s.len() as u32);
        out.extend_from_slice(s);
    }
}

/// Indexed header field (RFC 7541 6.1).
pub fn encode_indexed(out: &mut Vec<u8>, idx: u32) {
    encode_int(out, 0x80, 7, idx);
}

/// How a literal field is to be indexed (RFC 7541 6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexing {
    /// With incremental indexing: the field joins the dynamic table.
    Inc,
    /// Without indexing.
    Not,
    /// Never indexed.
    Never,
}

/// The name of a literal field: an index or a string.
#[derive(Debug, Clone, Copy)]
pub enum Name<'a> {
    /// Name taken from the table entry at this index.
    Index(u32),
    /// Literal name, Huffman-coded when the flag is set.
    Literal(&'a [u8], bool),
}

/// Literal header field. With [`Indexing::Inc`] the field is added to
/// `table`; a name index must then exist in it.
pub fn encode_literal(
    out: &mut Vec<u8>,
    table: &mut Table,
    how: Indexing,
    name: Name<'_>,
    value: &[u8],
    huff: bool,
) -> Result<(), DecodeError> {
    let (flags, prefix) = match how {
        Indexing::Inc => (0x40, 6),
        Indexing::Not => (0x00, 4),
        Indexing::Never => (0x10, 4),
    };
    let name_bytes = match name {
        Name::Index(i) => {
            encode_int(out, flags, prefix, i);
            table.get(i).map(|(n, _)| n.to_vec())
        }
        Name::Literal(n, h) => {
            out.push(flags);
            encode_str(out, n, h);
            Some(n.to_vec())
        }
    };
    encode_str(out, value, huff);
    if how == Indexing::Inc && table.max_size() > 0 {
        let Some(n) = name_bytes else {
            let Name::Index(i) = name else {
                unreachable!("literal names are always known")
            };
            return Err(DecodeError::BadIndex(i));
        };
        table.push(&n, value);
    }
    Ok(())
}

/// A cursor over a header block.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self.buf.get(self.pos).ok_or(DecodeError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    fn int(&mut self, prefix: u8) -> Result<u32, DecodeError> {
        let max = (1u32 << prefix) - 1;
        let first = u32::from(self.byte()?) & max;
        if first < max {
            return Ok(first);
        }
        let mut n = u64::from(first);
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            if shift > 28 {
                return Err(DecodeError::Overflow);
            }
            n += u64::from(b & 0x7f) << shift;
            if n > u64::from(u32::MAX) {
                return Err(DecodeError::Overflow);
            }
            shift += 7;
            if b & 0x80 == 0 {
                return Ok(n as u32);
            }
        }
    }

    fn string(&mut self) -> Result<Vec<u8>, DecodeError> {
        let huff = *self.buf.get(self.pos).ok_or(DecodeError::Truncated)? & 0x80 != 0;
        let len = self.int(7)? as usize;
        if self.buf.len() - self.pos < len {
            return Err(DecodeError::Truncated);
        }
        let raw = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        if huff {
            huffman::decode(raw).map_err(DecodeError::Huffman)
        } else {
            Ok(raw.to_vec())
        }
    }
}

/// Decode a whole header block, updating `table`. Returns the fields
/// decoded, and the error that stopped decoding early, if any.
pub fn decode_block(table: &mut Table, block: &[u8]) -> (Vec<Header>, Option<DecodeError>) {
    decode_block_bounded(table, block, u32::MAX, u64::MAX)
}

/// [`decode_block`] for a decoder that announced `max_table` as its
/// SETTINGS_HEADER_TABLE_SIZE: a dynamic table size update above it is an
/// error (RFC 7541 section 4.2). Decoding stops once the fields add up to
/// more than `max_list` (RFC 7541 sizes: name, value and 32 per field), so
/// that a small block of indexed fields cannot expand without bound.
pub fn decode_block_bounded(
    table: &mut Table,
    block: &[u8],
    max_table: u32,
    max_list: u64,
) -> (Vec<Header>, Option<DecodeError>) {
    let mut c = Cursor { buf: block, pos: 0 };
    let mut out = Vec::new();
    let mut size = 0u64;
    while c.pos < block.len() {
        match decode_field(table, &mut c, max_table) {
            Ok(Some(h)) => {
                size += h.name.len() as u64 + h.value.len() as u64 + 32;
                if size > max_list {
                    return (out, Some(DecodeError::ListSize(max_list)));
                }
                out.push(h);
            }
            Ok(None) => {}
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

fn decode_field(
    table: &mut Table,
    c: &mut Cursor<'_>,
    max_table: u32,
) -> Result<Option<Header>, DecodeError> {
    let first = c.buf[c.pos];
    let lookup = |table: &Table, i: u32| {
        table
            .get(i)
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .ok_or(DecodeError::BadIndex(i))
    };
    if first & 0x80 != 0 {
        let i = c.int(7)?;
        let (name, value) = lookup(table, i)?;
        return Ok(Some(Header { name, value }));
    }
    if first & 0xe0 == 0x20 {
        let max = c.int(5)?;
        if max > max_table {
            return Err(DecodeError::TableSize(max));
        }
        table.resize(max);
        return Ok(None);
    }
    let (inc, prefix) = if first & 0x40 != 0 {
        (true, 6)
    } else {
        (false, 4)
    };
    let i = c.int(prefix)?;
    let name = if i == 0 {
        c.string()?
    } else {
        lookup(table, i)?.0
    };
    let value = c.string()?;
    if inc {
        table.push(&name, &value);
    }
    Ok(Some(Header { name, value }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let d: Vec<u8> = s
            .bytes()
            .filter(u8::is_ascii_hexdigit)
            .map(|c| (c as char).to_digit(16).unwrap() as u8)
            .collect();
        d.chunks(2).map(|p| p[0] * 16 + p[1]).collect()
    }

    fn fields(h: &[Header]) -> Vec<(String, String)> {
        h.iter()
            .map(|h| {
                (
                    String::from_utf8_lossy(&h.name).into_owned(),
                    String::from_utf8_lossy(&h.value).into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn c1_integers() {
        let mut v = Vec::new();
        encode_int(&mut v, 0, 5, 10);
        assert_eq!(v, [0x0a]);
        v.clear();
        encode_int(&mut v, 0, 5, 1337);
        assert_eq!(v, [0x1f, 0x9a, 0x0a]);
        v.clear();
        encode_int(&mut v, 0, 8, 42);
        assert_eq!(v, [0x2a]);
        let mut c = Cursor {
            buf: &[0x1f, 0x9a, 0x0a],
            pos: 0,
        };
        assert_eq!(c.int(5).unwrap(), 1337);
        let mut c = Cursor {
            buf: &[0x1f, 0xff, 0xff, 0xff, 0xff, 0x7f],
            pos: 0,
        };
        assert_eq!(c.int(5), Err(DecodeError::Overflow));
        let mut c = Cursor {
            buf: &[0x1f, 0x9a],
            pos: 0,
        };
        assert_eq!(c.int(5), Err(DecodeError::Truncated));
    }

    #[test]
    fn c2_literals() {
        // C.2.1 literal with indexing.
        let mut t = Table::new(4096);
        let b = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
        let (h, e) = decode_block(&mut t, &b);
        assert!(e.is_none());
        assert_eq!(fields(&h), [("custom-key".into(), "custom-header".into())]);
        assert_eq!(t.size(), 55);
        let mut out = Vec::new();
        let mut t2 = Table::new(4096);
        encode_literal(
            &mut out,
            &mut t2,
            Indexing::Inc,
            Name::Literal(b"custom-key", false),
            b"custom-header",
            false,
        )
        .unwrap();
        assert_eq!(out, b);
        assert_eq!(t2.size(), 55);
        // C.2.2 without indexing, C.2.3 never indexed, C.2.4 indexed.
        let mut t = Table::new(4096);
        let (h, _) = decode_block(&mut t, &hex("040c 2f73 616d 706c 652f 7061 7468"));
        assert_eq!(fields(&h), [(":path".into(), "/sample/path".into())]);
        assert_eq!(t.len(), 0);
        let (h, _) = decode_block(&mut t, &hex("1008 7061 7373 776f 7264 0673 6563 7265 74"));
        assert_eq!(fields(&h), [("password".into(), "secret".into())]);
        let (h, _) = decode_block(&mut t, &hex("82"));
        assert_eq!(fields(&h), [(":method".into(), "GET".into())]);
        let mut out = Vec::new();
        encode_literal(
            &mut out,
            &mut t,
            Indexing::Never,
            Name::Literal(b"password", false),
            b"secret",
            false,
        )
        .unwrap();
        assert_eq!(out, hex("1008 7061 7373 776f 7264 0673 6563 7265 74"));
    }

    /// C.4: requests with Huffman coding, sharing one table.
    #[test]
    fn c4_requests_huffman() {
        let mut dec = Table::new(4096);
        let mut enc = Table::new(4096);
        let r1 = hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff");
        let (h, e) = decode_block(&mut dec, &r1);
        assert!(e.is_none());
        assert_eq!(
            fields(&h),
            [
                (":method".into(), "GET".into()),
                (":scheme".into(), "http".into()),
                (":path".into(), "/".into()),
                (":authority".into(), "www.example.com".into()),
            ]
        );
        assert_eq!(dec.size(), 57);
        let mut out = Vec::new();
        encode_indexed(&mut out, 2);
        encode_indexed(&mut out, 6);
        encode_indexed(&mut out, 4);
        encode_literal(
            &mut out,
            &mut enc,
            Indexing::Inc,
            Name::Index(1),
            b"www.example.com",
            true,
        )
        .unwrap();
        assert_eq!(out, r1);
        let r2 = hex("8286 84be 5886 a8eb 1064 9cbf");
        let (h, _) = decode_block(&mut dec, &r2);
        assert_eq!(h[3].value, b"www.example.com");
        assert_eq!(h[4].name, b"cache-control");
        assert_eq!(dec.size(), 110);
        let r3 = hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
        let (h, _) = decode_block(&mut dec, &r3);
        assert_eq!(
            fields(&h[4..]),
            [("custom-key".into(), "custom-value".into())]
        );
        assert_eq!(dec.size(), 164);
        assert_eq!(dec.get(62).unwrap().0, b"custom-key");
        assert_eq!(dec.get(64).unwrap().0, b":authority");
        assert!(dec.get(65).is_none());
    }

    /// C.5: responses without Huffman, table of 256 bytes with evictions.
    #[test]
    fn c5_responses_eviction() {
        let mut dec = Table::new(256);
        let r1 = hex(
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
             6c65 2e63 6f6d",
        );
        let (h, e) = decode_block(&mut dec, &r1);
        assert!(e.is_none());
        assert_eq!(h.len(), 4);
        assert_eq!(dec.size(), 222);
        let (h, _) = decode_block(&mut dec, &hex("4803 3330 37c1 c0bf"));
        assert_eq!(h[0].value, b"307");
        assert_eq!(dec.size(), 222);
        assert_eq!(dec.len(), 4);
        let r3 = hex(
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
             3d31",
        );
        let (h, e) = decode_block(&mut dec, &r3);
        assert!(e.is_none());
        assert_eq!(h.len(), 6);
        assert_eq!(dec.size(), 215);
        assert_eq!(dec.len(), 3);
    }

    #[test]
    fn errors_keep_earlier_fields() {
        let mut t = Table::new(4096);
        // :method GET, then index 100 (absent), then a literal.
        let (h, e) = decode_block(&mut t, &hex("82 e4 4003 666f 6f03 6261 72"));
        assert_eq!(h.len(), 1);
        assert_eq!(e, Some(DecodeError::BadIndex(100)));
        assert!(t.is_empty());
        let (_, e) = decode_block(&mut t, &hex("4005 666f"));
        assert_eq!(e, Some(DecodeError::Truncated));
        let (_, e) = decode_block(&mut t, &hex("80"));
        assert_eq!(e, Some(DecodeError::BadIndex(0)));
        // Empty value at the end of the block is fine.
        let (h, e) = decode_block(&mut t, &hex("0003 666f 6f00"));
        assert!(e.is_none());
        assert_eq!(h[0].value, b"");
    }

    #[test]
    fn resize_and_oversized_entry() {
        let mut t = Table::new(100);
        t.push(b"a", b"b");
        assert_eq!(t.size(), 34);
        t.push(&[b'x'; 100], b"");
        assert!(t.is_empty());
        t.push(b"a", b"b");
        t.resize(0);
        assert_eq!((t.size(), t.len()), (0, 0));
        // Table size update inside a block.
        let mut t = Table::new(4096);
        let (_, e) = decode_block(&mut t, &hex("3f e1 1f"));
        assert!(e.is_none());
        assert_eq!(t.max_size(), 4096);
    }
}
