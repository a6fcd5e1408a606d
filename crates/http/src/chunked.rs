//! Incremental chunked transfer-coding: a decoder state machine and encoders.
//!
//! The decoder is fed whatever bytes arrived and hands back ranges of those
//! bytes that are body data, so the body is never copied by the codec. Its
//! grammar is varnishd 7.1's (`v1f_chunked_hdr`, `v1f_chunk_end` in
//! `cache_http1_vfp.c`), on both sides: a chunk-size line is hex digits,
//! optional spaces or tabs, then the line end; chunk extensions (`;name`)
//! and trailer fields are errors, the last chunk must be followed by the
//! empty line at once. It is stricter than varnishd where leniency enables
//! smuggling: every line must end in CRLF (no bare LF, no bare CR), chunk
//! data must be followed by exactly CRLF, the size has no leading
//! whitespace and may not exceed 2^63-1, and the size line is bounded in
//! length (tests/diff/DEVIATIONS.md). Error messages are varnishd's
//! `FetchError` texts.

use std::ops::Range;

use crate::error::{Error, ErrorKind};
use crate::write::WriteBuf;

/// Limits for one chunked body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkedLimits {
    /// Longest chunk-size line, CRLF excluded.
    pub max_size_line: usize,
}

impl Default for ChunkedLimits {
    fn default() -> Self {
        ChunkedLimits {
            max_size_line: 1024,
        }
    }
}

/// What one [`ChunkedDecoder::decode`] call produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// These bytes of the input are body data.
    Data(Range<usize>),
    /// All input was consumed; feed more.
    NeedMore,
    /// The body is complete; bytes after the consumed count belong to the
    /// next message.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a chunk-size line.
    SizeStart,
    /// Reading hex digits.
    Size,
    /// After the digits: optional whitespace, then CR.
    SizeWs,
    /// Saw the CR ending the size line.
    SizeLf,
    /// Reading chunk data.
    Data,
    /// Expect the CR after chunk data.
    DataCr,
    /// Expect the LF after chunk data.
    DataLf,
    /// After the last chunk's size line: expect the CR of the empty line.
    FinalCr,
    /// Saw the CR of the final empty line.
    FinalLf,
    /// Complete.
    Done,
}

/// Incremental decoder for one chunked body.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    /// Value of the chunk being read (while reading the size), then bytes of
    /// data left in the current chunk.
    size: u64,
    line_len: usize,
    limits: ChunkedLimits,
    status: u16,
}

const MAX_CHUNK: u64 = i64::MAX as u64;

impl ChunkedDecoder {
    /// A decoder for a request body (errors carry status 400).
    pub fn new(limits: ChunkedLimits) -> Self {
        ChunkedDecoder {
            state: State::SizeStart,
            size: 0,
            line_len: 0,
            limits,
            status: 400,
        }
    }

    /// A decoder for a backend response body (errors carry status 503).
    pub fn for_response(limits: ChunkedLimits) -> Self {
        ChunkedDecoder {
            status: 503,
            ..Self::new(limits)
        }
    }

    /// True once the last chunk and the final empty line have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// True while the decoder is inside a chunk's data.
    pub fn in_data(&self) -> bool {
        self.state == State::Data
    }

    fn err(&self, msg: impl Into<String>) -> Error {
        Error::new(ErrorKind::Chunked, Some(self.status), msg)
    }

    /// Consumes a prefix of `input`. Returns how many bytes were consumed and
    /// what they were: for `Data(r)`, `input[r]` is body data and `r.end` is
    /// the consumed count; call again with the rest. Never looks past what
    /// it consumed, so bytes after `Done` are the next message.
    pub fn decode(&mut self, input: &[u8]) -> Result<(usize, Decoded), Error> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                State::Data => {
                    let take = (input.len() - i).min(self.size.min(usize::MAX as u64) as usize);
                    self.size -= take as u64;
                    if self.size == 0 {
                        self.state = State::DataCr;
                    }
                    return Ok((i + take, Decoded::Data(i..i + take)));
                }
                State::SizeStart => {
                    let Some(d) = hex(b) else {
                        return Err(self.err("chunked header non-hex"));
                    };
                    self.size = u64::from(d);
                    self.line_len = 1;
                    self.state = State::Size;
                }
                State::Size => {
                    self.bump_line(b)?;
                    if let Some(d) = hex(b) {
                        self.size = self
                            .size
                            .checked_mul(16)
                            .map(|s| s | u64::from(d))
                            .filter(|&s| s <= MAX_CHUNK)
                            .ok_or_else(|| self.err("bogusly large chunk size"))?;
                    } else {
                        self.after_size(b)?;
                    }
                }
                State::SizeWs => {
                    self.bump_line(b)?;
                    self.after_size(b)?;
                    if self.state == State::Size {
                        // A digit after whitespace: "1 2" is not a size.
                        return Err(self.err("chunked header no NL"));
                    }
                }
                State::SizeLf => {
                    if b != b'\n' {
                        return Err(self.err("chunked header no NL"));
                    }
                    self.state = if self.size == 0 {
                        State::FinalCr
                    } else {
                        State::Data
                    };
                }
                State::DataCr | State::FinalCr => {
                    if b != b'\r' {
                        return Err(self.err("chunked tail no NL"));
                    }
                    self.state = if self.state == State::DataCr {
                        State::DataLf
                    } else {
                        State::FinalLf
                    };
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(self.err("chunked tail no NL"));
                    }
                    self.state = State::SizeStart;
                }
                State::FinalLf => {
                    if b != b'\n' {
                        return Err(self.err("chunked tail no NL"));
                    }
                    self.state = State::Done;
                    return Ok((i + 1, Decoded::Done));
                }
                State::Done => return Ok((i, Decoded::Done)),
            }
            i += 1;
        }
        if self.state == State::Done {
            return Ok((i, Decoded::Done));
        }
        Ok((i, Decoded::NeedMore))
    }

    /// Handles the byte after the size digits (whitespace or CR); anything
    /// else, a chunk extension's `;` too, is varnishd's `no NL`.
    fn after_size(&mut self, b: u8) -> Result<(), Error> {
        match b {
            b' ' | b'\t' => self.state = State::SizeWs,
            b'\r' => self.state = State::SizeLf,
            _ if hex(b).is_some() => self.state = State::Size,
            _ => return Err(self.err("chunked header no NL")),
        }
        Ok(())
    }

    /// Counts `b` towards the size line's length (its CR does not count).
    fn bump_line(&mut self, b: u8) -> Result<(), Error> {
        if b == b'\r' {
            return Ok(());
        }
        self.line_len += 1;
        if self.line_len > self.limits.max_size_line {
            return Err(self.err("chunked header too long"));
        }
        Ok(())
    }

    /// Decodes as much of `input` as possible, appending body data to `out`.
    /// Returns the bytes consumed and whether the body is complete.
    pub fn decode_to(
        &mut self,
        input: &[u8],
        out: &mut impl WriteBuf,
    ) -> Result<(usize, bool), Error> {
        let mut pos = 0;
        loop {
            let (n, what) = self.decode(&input[pos..])?;
            match what {
                Decoded::Data(r) => out.put(&input[pos + r.start..pos + r.end]),
                Decoded::NeedMore => return Ok((pos + n, false)),
                Decoded::Done => return Ok((pos + n, true)),
            }
            pos += n;
        }
    }
}

#[inline]
fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The last chunk and the end of an (empty) trailer section.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Appends the size line of a chunk of `len` bytes (`len` must be non-zero;
/// a zero size would end the body). Follow it with the data and
/// [`CHUNK_END`]. Useful for vectored writes. The size is written as
/// varnishd writes it (`"00%zx"`): two leading zeros, which counts in the
/// bytes a response or request body costs on the wire.
pub fn encode_chunk_header(len: usize, out: &mut impl WriteBuf) {
    debug_assert!(len > 0, "a zero-length chunk would end the body");
    let mut tmp = [b'0'; 20];
    let mut i = tmp.len();
    tmp[i - 2..].copy_from_slice(b"\r\n");
    i -= 2;
    let mut n = len;
    loop {
        i -= 1;
        tmp[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.put(&tmp[i - 2..]);
}

/// The CRLF that ends each chunk's data.
pub const CHUNK_END: &[u8] = b"\r\n";

/// Appends `data` as one chunk. Empty data writes nothing (an empty chunk
/// would be the last chunk).
pub fn encode_chunk(data: &[u8], out: &mut impl WriteBuf) {
    if data.is_empty() {
        return;
    }
    out.reserve_bytes(data.len() + 20);
    encode_chunk_header(data.len(), out);
    out.put(data);
    out.put(CHUNK_END);
}

/// Appends the last chunk and an empty trailer section.
pub fn encode_last_chunk(out: &mut impl WriteBuf) {
    out.put(LAST_CHUNK);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> Result<(Vec<u8>, usize), Error> {
        let mut d = ChunkedDecoder::new(ChunkedLimits::default());
        let mut out = Vec::new();
        let (n, done) = d.decode_to(input, &mut out)?;
        assert!(done, "incomplete");
        Ok((out, n))
    }

    /// Feeds one byte at a time.
    fn decode_bytewise(input: &[u8]) -> Result<(Vec<u8>, bool), Error> {
        let mut d = ChunkedDecoder::new(ChunkedLimits::default());
        let mut out = Vec::new();
        for b in input {
            let (n, done) = d.decode_to(std::slice::from_ref(b), &mut out)?;
            assert_eq!(n, 1);
            if done {
                return Ok((out, true));
            }
        }
        Ok((out, false))
    }

    #[test]
    fn basic() {
        let body = b"4\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n\r\nNEXT";
        let (out, n) = decode_all(body).unwrap();
        assert_eq!(out, b"Wikipedia in\r\n\r\nchunks.");
        assert_eq!(&body[n..], b"NEXT");
        let (out2, done) = decode_bytewise(&body[..n]).unwrap();
        assert!(done);
        assert_eq!(out2, out);
    }

    #[test]
    fn data_ranges_point_into_input() {
        let mut d = ChunkedDecoder::new(ChunkedLimits::default());
        let input = b"3\r\nabc\r\n0\r\n\r\n";
        let (n, what) = d.decode(input).unwrap();
        assert_eq!(what, Decoded::Data(3..6));
        assert_eq!(n, 6);
        let (m, what) = d.decode(&input[n..]).unwrap();
        assert_eq!(what, Decoded::Done);
        assert_eq!(n + m, input.len());
        assert!(d.is_done());
        // Further input after done is not consumed.
        assert_eq!(d.decode(b"xyz").unwrap(), (0, Decoded::Done));
    }

    #[test]
    fn leading_zeros_whitespace_and_case() {
        assert_eq!(decode_all(b"00000001\r\nz\r\n0\r\n\r\n").unwrap().0, b"z");
        assert_eq!(decode_all(b"1 \t\r\nz\r\n0 \r\n\r\n").unwrap().0, b"z");
        assert_eq!(
            decode_all(b"a\r\n0123456789\r\n0\r\n\r\n").unwrap().0,
            b"0123456789"
        );
    }

    #[test]
    fn extensions_and_trailers_fail_as_in_varnishd() {
        for (bad, msg) in [
            (&b"3;a=b\r\nabc\r\n0\r\n\r\n"[..], "chunked header no NL"),
            (b"3\r\nabc\r\n0;x\r\n\r\n", "chunked header no NL"),
            (b"3\r\nabc\r\n0\r\nX: y\r\n\r\n", "chunked tail no NL"),
        ] {
            let mut d = ChunkedDecoder::for_response(ChunkedLimits::default());
            let e = d.decode_to(bad, &mut Vec::new()).unwrap_err();
            assert_eq!(e.message(), msg, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn malformed() {
        for bad in [
            &b"\r\n"[..],
            b" 1\r\na\r\n0\r\n\r\n",
            b"+1\r\na\r\n0\r\n\r\n",
            b"-1\r\na\r\n0\r\n\r\n",
            b"0x1\r\na\r\n0\r\n\r\n",
            b"1 1\r\na\r\n0\r\n\r\n",
            b"1\na\r\n0\r\n\r\n",
            b"1\r\na\n0\r\n\r\n",
            b"1\r\naX\r\n0\r\n\r\n",
            b"1\r\na\r\r\n0\r\n\r\n",
            b"1\r\na\r\n0\r\n\n",
            b"1\r\na\r\n0\n\r\n",
            b"1;\x00\r\na\r\n0\r\n\r\n",
            b"1\r\na\r\n0\r\nT: a\r\n\r\n",
            b"10000000000000000\r\n",
            b"8000000000000000\r\n",
            b"FFFFFFFFFFFFFFED\r\n0\r\n\r\n",
            b"g\r\n",
        ] {
            let mut d = ChunkedDecoder::new(ChunkedLimits::default());
            let mut out = Vec::new();
            let r = d.decode_to(bad, &mut out);
            assert!(r.is_err(), "{:?} accepted", String::from_utf8_lossy(bad));
            assert_eq!(r.unwrap_err().status(), Some(400));
        }
        let mut d = ChunkedDecoder::for_response(ChunkedLimits::default());
        assert_eq!(d.decode(b"x").unwrap_err().status(), Some(503));
    }

    #[test]
    fn largest_chunk_size_is_accepted() {
        let mut d = ChunkedDecoder::new(ChunkedLimits::default());
        let (n, what) = d.decode(b"7fffffffffffffff\r\nab").unwrap();
        assert_eq!((n, what), (20, Decoded::Data(18..20)));
    }

    #[test]
    fn limits() {
        let limits = ChunkedLimits { max_size_line: 8 };
        let mut d = ChunkedDecoder::new(limits.clone());
        assert!(d.decode(b"00000001\r\n").is_ok());
        let mut d = ChunkedDecoder::new(limits);
        let e = d.decode(b"000000001\r\n").unwrap_err();
        assert_eq!(e.message(), "chunked header too long");
    }

    #[test]
    fn encoding_roundtrip() {
        let mut out = Vec::new();
        encode_chunk(b"hello", &mut out);
        encode_chunk(b"", &mut out);
        encode_chunk(&[b'x'; 300], &mut out);
        encode_last_chunk(&mut out);
        assert!(out.starts_with(b"005\r\nhello\r\n0012c\r\n"));
        assert!(out.ends_with(b"x\r\n0\r\n\r\n"));
        let (decoded, n) = decode_all(&out).unwrap();
        assert_eq!(n, out.len());
        assert_eq!(decoded.len(), 305);
        let mut h = Vec::new();
        encode_chunk_header(usize::MAX, &mut h);
        assert_eq!(h, b"00ffffffffffffffff\r\n");
        let mut h = bytes::BytesMut::new();
        encode_chunk_header(1, &mut h);
        assert_eq!(&h[..], b"001\r\n");
    }
}
