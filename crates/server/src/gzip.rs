//! Streaming gzip and gunzip for fetch and delivery, and the request-side
//! `Accept-Encoding` rules of `http_gzip_support`.
//!
//! Bodies move as segments; each filter takes one input segment and yields
//! the output produced so far, so a streamed object reaches clients while it
//! is still being fetched. The gzip filter flushes at each segment boundary
//! for the same reason. Invalid gzip from a backend is an error the fetch
//! reports (`FetchError Invalid Gzip data`), never a panic.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// Why a gzip stream could not be processed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GzipError {
    #[error("Invalid Gzip data: {0}")]
    Invalid(String),
    #[error("Junk after gzip data")]
    Junk,
    #[error("Gunzip error: truncated gzip data")]
    Truncated,
}

/// Whether a request's `Accept-Encoding` accepts gzip (a `gzip` token whose
/// `q` is not zero).
pub fn accepts_gzip(accept_encoding: &[u8]) -> bool {
    for item in accept_encoding.split(|b| *b == b',') {
        let mut parts = item.split(|b| *b == b';');
        let coding = trim(parts.next().unwrap_or_default());
        if !coding.eq_ignore_ascii_case(b"gzip") {
            continue;
        }
        let q = parts
            .filter_map(|p| {
                let p = trim(p);
                let v = p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q="))?;
                std::str::from_utf8(v).ok()?.trim().parse::<f64>().ok()
            })
            .next();
        return q.is_none_or(|q| q > 0.0);
    }
    false
}

fn trim(b: &[u8]) -> &[u8] {
    let s = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let e = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(s, |e| e + 1);
    &b[s..e]
}

/// Whether a `Content-Encoding` value says gzip.
pub fn is_gzip_encoding(content_encoding: &[u8]) -> bool {
    let v = trim(content_encoding);
    v.eq_ignore_ascii_case(b"gzip") || v.eq_ignore_ascii_case(b"x-gzip")
}

/// Incremental gzip decoder (RFC 1952 header and trailer handled by zlib).
pub struct Gunzip {
    z: Decompress,
    done: bool,
    out_total: u64,
}

impl std::fmt::Debug for Gunzip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gunzip").field("done", &self.done).finish()
    }
}

impl Default for Gunzip {
    fn default() -> Self {
        Self::new()
    }
}

impl Gunzip {
    pub fn new() -> Self {
        Gunzip {
            // Window bits 15 with the gzip wrapper.
            z: Decompress::new_gzip(15),
            done: false,
            out_total: 0,
        }
    }

    /// Decodes `input`, appending plain bytes to `out`.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), GzipError> {
        while !input.is_empty() {
            if self.done {
                return Err(GzipError::Junk);
            }
            out.reserve((input.len() * 4).clamp(4096, 1 << 20));
            let before_in = self.z.total_in();
            let before_out = self.z.total_out();
            let status = self
                .z
                .decompress_vec(input, out, FlushDecompress::None)
                .map_err(|e| GzipError::Invalid(e.to_string()))?;
            let used = (self.z.total_in() - before_in) as usize;
            let produced = self.z.total_out() - before_out;
            self.out_total += produced;
            input = &input[used..];
            match status {
                Status::StreamEnd => self.done = true,
                Status::Ok | Status::BufError => {
                    if used == 0 && produced == 0 {
                        // zlib made no progress with room in `out`: the
                        // input cannot be decoded.
                        return Err(GzipError::Invalid("no progress".into()));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks that the stream ended properly.
    pub fn finish(&self) -> Result<u64, GzipError> {
        if self.done {
            Ok(self.out_total)
        } else {
            Err(GzipError::Truncated)
        }
    }
}

/// Incremental gzip encoder that flushes at each segment boundary.
pub struct Gzip {
    z: Compress,
    header_written: bool,
    crc: flate2::Crc,
}

impl std::fmt::Debug for Gzip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gzip").finish()
    }
}

/// The fixed 10-byte gzip header Lacquer writes (no name, no mtime, Unix).
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];

impl Gzip {
    /// `level` 0–9 (`gzip_level`).
    pub fn new(level: u32) -> Self {
        Gzip {
            // Raw deflate; the gzip wrapper is written here so that the
            // CRC can be kept incrementally.
            z: Compress::new(Compression::new(level.min(9)), false),
            header_written: false,
            crc: flate2::Crc::new(),
        }
    }

    /// Compresses `input`, appending gzip bytes to `out`, and flushes so
    /// that everything given so far can be decoded by the client.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.header(out);
        self.crc.update(input);
        self.run(input, out, FlushCompress::Sync);
    }

    /// Ends the stream (final block and trailer).
    pub fn finish(mut self, out: &mut Vec<u8>) {
        self.header(out);
        self.run(&[], out, FlushCompress::Finish);
        out.extend_from_slice(&self.crc.sum().to_le_bytes());
        out.extend_from_slice(&self.crc.amount().to_le_bytes());
    }

    fn header(&mut self, out: &mut Vec<u8>) {
        if !self.header_written {
            out.extend_from_slice(&GZIP_HEADER);
            self.header_written = true;
        }
    }

    fn run(&mut self, mut input: &[u8], out: &mut Vec<u8>, flush: FlushCompress) {
        loop {
            out.reserve(input.len() / 2 + 64);
            let before_in = self.z.total_in();
            let status = self
                .z
                .compress_vec(input, out, flush)
                .expect("deflate with a valid stream state cannot fail");
            input = &input[(self.z.total_in() - before_in) as usize..];
            let full = out.len() == out.capacity();
            match status {
                Status::StreamEnd => return,
                _ if input.is_empty() && !full => return,
                _ => {}
            }
        }
    }
}

/// Gzips a whole buffer (used for synthetic and small bodies).
pub fn gzip_all(data: &[u8], level: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() / 2 + 32);
    let mut g = Gzip::new(level);
    g.feed(data, &mut out);
    g.finish(&mut out);
    out
}

/// Gunzips a whole buffer.
pub fn gunzip_all(data: &[u8]) -> Result<Vec<u8>, GzipError> {
    let mut out = Vec::with_capacity(data.len() * 3);
    let mut g = Gunzip::new();
    g.feed(data, &mut out)?;
    g.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn accept_encoding_rules() {
        assert!(accepts_gzip(b"gzip"));
        assert!(accepts_gzip(b"br, gzip;q=0.5, deflate"));
        assert!(accepts_gzip(b" GZIP "));
        assert!(!accepts_gzip(b"gzip;q=0"));
        assert!(!accepts_gzip(b"gzip; q=0.0"));
        assert!(!accepts_gzip(b"deflate, br"));
        assert!(!accepts_gzip(b"xgzip"));
        assert!(is_gzip_encoding(b"x-gzip"));
        assert!(!is_gzip_encoding(b"br"));
    }

    #[test]
    fn round_trip_in_segments() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut z = Vec::new();
        let mut g = Gzip::new(6);
        for chunk in data.chunks(7_777) {
            let before = z.len();
            g.feed(chunk, &mut z);
            assert!(z.len() > before, "each segment is flushed");
        }
        g.finish(&mut z);
        // A standard decoder agrees.
        let mut check = Vec::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_end(&mut check)
            .unwrap();
        assert_eq!(check, data);
        // And so does ours, fed in odd pieces.
        let mut out = Vec::new();
        let mut u = Gunzip::new();
        for chunk in z.chunks(333) {
            u.feed(chunk, &mut out).unwrap();
        }
        assert_eq!(u.finish().unwrap(), data.len() as u64);
        assert_eq!(out, data);
        assert_eq!(gunzip_all(&gzip_all(b"", 9)).unwrap(), b"");
    }

    #[test]
    fn broken_input_is_an_error() {
        let z = gzip_all(b"hello world, hello world", 6);
        assert!(matches!(
            gunzip_all(b"not gzip at all"),
            Err(GzipError::Invalid(_))
        ));
        assert_eq!(gunzip_all(&z[..z.len() - 4]), Err(GzipError::Truncated));
        let mut junk = z.clone();
        junk.extend_from_slice(b"trailing");
        assert_eq!(gunzip_all(&junk), Err(GzipError::Junk));
        let mut corrupt = z.clone();
        let mid = corrupt.len() / 2;
        corrupt[mid] ^= 0xff;
        corrupt[mid + 1] ^= 0xff;
        assert!(gunzip_all(&corrupt).is_err());
    }
}
