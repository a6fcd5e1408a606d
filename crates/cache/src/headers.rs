//! Compact storage of an object's response headers.
//!
//! A cached object lives long and is read often, so its headers are packed into
//! one buffer (names and values back to back) plus a small offset index: 12 bytes
//! of index per header instead of 64 for a `(Bytes, Bytes)` pair, and one
//! allocation instead of one per header. Reading hands out borrowed slices, or
//! zero-copy `Bytes` slices of the shared buffer.

use bytes::{Bytes, BytesMut};

use crate::vary::HeaderLookup;

/// Packed response headers, in their original order.
#[derive(Debug, Clone, Default)]
pub struct StoredHeaders {
    buf: Bytes,
    /// (name start, value start, value end) into `buf`; a name ends where its
    /// value starts.
    idx: Box<[(u32, u32, u32)]>,
}

impl StoredHeaders {
    /// Pack headers given as (name, value) pairs.
    pub fn new<K: AsRef<[u8]>, V: AsRef<[u8]>>(headers: &[(K, V)]) -> StoredHeaders {
        let total: usize = headers
            .iter()
            .map(|(k, v)| k.as_ref().len() + v.as_ref().len())
            .sum();
        // Offsets are u32: header blocks are bounded far below 4 GiB by any HTTP
        // parser; anything beyond is truncated rather than mis-indexed.
        let mut buf = BytesMut::with_capacity(total.min(u32::MAX as usize));
        let mut idx = Vec::with_capacity(headers.len());
        for (k, v) in headers {
            let (k, v) = (k.as_ref(), v.as_ref());
            if buf.len() + k.len() + v.len() > u32::MAX as usize {
                break;
            }
            let n = buf.len() as u32;
            buf.extend_from_slice(k);
            let vs = buf.len() as u32;
            buf.extend_from_slice(v);
            idx.push((n, vs, buf.len() as u32));
        }
        StoredHeaders {
            buf: buf.freeze(),
            idx: idx.into_boxed_slice(),
        }
    }

    /// Number of headers.
    pub fn len(&self) -> usize {
        self.idx.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.idx.is_empty()
    }

    /// The `i`th header.
    pub fn get_index(&self, i: usize) -> Option<(&[u8], &[u8])> {
        self.idx.get(i).map(|&(n, vs, ve)| {
            (
                &self.buf[n as usize..vs as usize],
                &self.buf[vs as usize..ve as usize],
            )
        })
    }

    /// All headers in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        (0..self.idx.len()).filter_map(|i| self.get_index(i))
    }

    /// The packed buffer and each header's `(name start, value start, value
    /// end)` in it (a name ends where its value starts): lets a caller build
    /// a header list that shares the buffer with one reference count instead
    /// of one per field.
    pub fn shared(&self) -> (&Bytes, &[(u32, u32, u32)]) {
        (&self.buf, &self.idx)
    }

    /// All headers as zero-copy `Bytes` slices of the shared buffer.
    pub fn to_pairs(&self) -> Vec<(Bytes, Bytes)> {
        self.idx
            .iter()
            .map(|&(n, vs, ve)| {
                (
                    self.buf.slice(n as usize..vs as usize),
                    self.buf.slice(vs as usize..ve as usize),
                )
            })
            .collect()
    }
}

impl HeaderLookup for StoredHeaders {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_and_read() {
        let h = StoredHeaders::new(&[
            ("Content-Type", "text/html"),
            ("X-Empty", ""),
            ("ETag", "\"x\""),
        ]);
        assert_eq!(h.len(), 3);
        assert_eq!(h.header("content-type"), Some(&b"text/html"[..]));
        assert_eq!(h.header("x-empty"), Some(&b""[..]));
        assert_eq!(h.header("etag"), Some(&b"\"x\""[..]));
        assert_eq!(h.header("missing"), None);
        let all: Vec<_> = h.iter().collect();
        assert_eq!(all[1], (&b"X-Empty"[..], &b""[..]));
        let pairs = h.to_pairs();
        assert_eq!(&pairs[2].0[..], b"ETag");
        assert!(StoredHeaders::new::<&str, &str>(&[]).is_empty());
        assert_eq!(h.get_index(3), None);
    }
}
