//! Object digests: SHA-256 over the `hash_data()` strings of `vcl_hash`.
//!
//! Varnish feeds every string of one `hash_data(a, b, …)` call into the SHA-256
//! context, then a single zero byte as a field separator (so that
//! `hash_data("ab")` and `hash_data("a"); hash_data("b")` differ). A missing
//! (NULL) string contributes one zero byte as well. [`HashBuilder`] reproduces
//! that byte stream exactly, so digests match varnishd's.

use sha2::{Digest as _, Sha256};

/// A 32-byte object digest (the objhead key).
pub type Digest = [u8; 32];

/// Accumulates `hash_data()` calls into a [`Digest`].
#[derive(Debug, Clone, Default)]
pub struct HashBuilder {
    ctx: Sha256,
}

impl HashBuilder {
    /// An empty hash context (as at the start of `vcl_hash`).
    pub fn new() -> Self {
        HashBuilder { ctx: Sha256::new() }
    }

    /// One `hash_data()` call with several strands (`None` = an unset value).
    pub fn hash_data_strands(&mut self, strands: &[Option<&[u8]>]) {
        for s in strands {
            match s {
                Some(b) => self.ctx.update(b),
                None => self.ctx.update([0u8]),
            }
        }
        self.ctx.update([0u8]);
    }

    /// One `hash_data(s)` call with a single string.
    pub fn hash_data(&mut self, s: &[u8]) {
        self.ctx.update(s);
        self.ctx.update([0u8]);
    }

    /// The final digest.
    pub fn finish(self) -> Digest {
        self.ctx.finalize().into()
    }
}

/// Lower-case hexadecimal rendering of a digest (for logs and debugging).
pub fn digest_hex(d: &Digest) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(64);
    for b in d {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separator_is_a_zero_byte_per_call() {
        let mut h = HashBuilder::new();
        h.hash_data(b"/foo");
        h.hash_data(b"example.com");
        let d = h.finish();
        let mut raw = Sha256::new();
        raw.update(b"/foo\0example.com\0");
        let expect: Digest = raw.finalize().into();
        assert_eq!(d, expect);

        let mut a = HashBuilder::new();
        a.hash_data(b"ab");
        let mut b = HashBuilder::new();
        b.hash_data(b"a");
        b.hash_data(b"b");
        assert_ne!(a.finish(), b.finish());

        let mut s = HashBuilder::new();
        s.hash_data_strands(&[Some(b"a"), Some(b"b")]);
        let mut one = HashBuilder::new();
        one.hash_data(b"ab");
        assert_eq!(s.finish(), one.finish());

        let mut n = HashBuilder::new();
        n.hash_data_strands(&[None]);
        let mut raw = Sha256::new();
        raw.update([0u8, 0u8]);
        let expect: Digest = raw.finalize().into();
        assert_eq!(n.finish(), expect);
    }

    #[test]
    fn hex() {
        let mut d = [0u8; 32];
        d[0] = 0xab;
        d[31] = 0x01;
        let h = digest_hex(&d);
        assert!(h.starts_with("ab00"));
        assert!(h.ends_with("01"));
        assert_eq!(h.len(), 64);
    }
}
