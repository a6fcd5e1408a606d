//! Streaming gzip and gunzip for fetch and delivery, and the request-side
//! `Accept-Encoding` rules of `http_gzip_support`.
//!
//! Bodies move as segments; each filter takes one input segment and yields
//! the output produced so far, so a streamed object reaches clients while it
//! is still being fetched. As varnishd's, the gzip filter does not flush
//! before the end (no empty sync blocks: small bodies stay small).
//! Invalid gzip from a backend is an error the fetch reports (`FetchError
//! Invalid Gzip data`), never a panic.
//!
//! The fetch filters (`gzip`, `gunzip`, `testgunzip`) are chosen as
//! varnishd chooses them, or named by VCL in `beresp.filters`, and change
//! the response headers as varnishd's do (encoding, length, weak ETag,
//! `Vary: Accept-Encoding`). Raw-deflate ranges of stored ESI objects are
//! inflated here too ([`inflate_range`]).

use std::io;

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
    /// A vmod's body filter failed (its own message).
    #[error("{0}")]
    Filter(String),
}

/// Whether a request's `Accept-Encoding` accepts gzip (a `gzip` or
/// `x-gzip` token whose `q` is above zero).
pub fn accepts_gzip(accept_encoding: &[u8]) -> bool {
    accepts_coding(accept_encoding, b"x-gzip") || accepts_coding(accept_encoding, b"gzip")
}

/// Whether `coding` is listed with a `q` above zero (or none).
fn accepts_coding(accept_encoding: &[u8], coding_wanted: &[u8]) -> bool {
    for item in accept_encoding.split(|b| *b == b',') {
        let mut parts = item.split(|b| *b == b';');
        let coding = parts.next().unwrap_or_default().trim_ascii();
        if !coding.eq_ignore_ascii_case(coding_wanted) {
            continue;
        }
        let q = parts
            .filter_map(|p| {
                let p = p.trim_ascii();
                let v = p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q="))?;
                std::str::from_utf8(v).ok()?.trim().parse::<f64>().ok()
            })
            .next();
        return q.is_none_or(|q| q > 0.0);
    }
    false
}

/// Whether a `Content-Encoding` value says gzip.
pub fn is_gzip_encoding(content_encoding: &[u8]) -> bool {
    let v = content_encoding.trim_ascii();
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

/// Incremental gzip encoder.
pub struct Gzip {
    z: Compress,
    header: [u8; 10],
    header_written: bool,
    crc: flate2::Crc,
}

impl std::fmt::Debug for Gzip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gzip").finish()
    }
}

/// The 10-byte gzip header zlib writes for a stream compressed at
/// `level` (no name, no mtime, OS Unix), as varnishd's fetch-side gzip
/// has it: the XFL byte says 2 ("slowest") at level 9 and 4 ("fastest")
/// below level 2, else 0.
pub fn gzip_header(level: u32) -> [u8; 10] {
    let xfl = match level.min(9) {
        9 => 2,
        0 | 1 => 4,
        _ => 0,
    };
    [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 3]
}

impl Gzip {
    /// `level` 0–9 (`gzip_level`).
    pub fn new(level: u32) -> Self {
        Gzip {
            // Raw deflate; the gzip wrapper is written here so that the
            // CRC can be kept incrementally.
            z: Compress::new(Compression::new(level.min(9)), false),
            header: gzip_header(level),
            header_written: false,
            crc: flate2::Crc::new(),
        }
    }

    /// Compresses `input`, appending the gzip bytes zlib has ready to
    /// `out`. As varnishd, nothing is flushed before the end.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.header(out);
        self.crc.update(input);
        self.run(input, out, FlushCompress::None);
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
            out.extend_from_slice(&self.header);
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

/// A fetch body filter, as varnishd's VFPs of the same names.
pub enum FetchFilter {
    /// Compresses a plain body.
    Gzip(Gzip),
    /// Decompresses a gzip body.
    Gunzip(Gunzip),
    /// Passes a gzip body through unchanged while checking that it
    /// decodes, so that a broken one fails the fetch instead of reaching
    /// clients.
    TestGunzip(Gunzip, Vec<u8>),
    /// A filter an imported vmod registered.
    Vmod(&'static str, Box<dyn lacquer_vmods::FilterStage>),
}

impl std::fmt::Debug for FetchFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FetchFilter {
    /// The filter's name in `beresp.filters`.
    pub fn name(&self) -> &'static str {
        match self {
            FetchFilter::Gzip(_) => "gzip",
            FetchFilter::Gunzip(_) => "gunzip",
            FetchFilter::TestGunzip(..) => "testgunzip",
            FetchFilter::Vmod(name, _) => name,
        }
    }

    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), GzipError> {
        match self {
            FetchFilter::Gzip(z) => {
                z.feed(input, out);
                Ok(())
            }
            FetchFilter::Gunzip(g) => g.feed(input, out),
            FetchFilter::TestGunzip(g, sink) => {
                sink.clear();
                g.feed(input, sink)?;
                out.extend_from_slice(input);
                Ok(())
            }
            FetchFilter::Vmod(_, f) => f.feed(input, out).map_err(GzipError::Filter),
        }
    }

    fn finish(self, out: &mut Vec<u8>) -> Result<(), GzipError> {
        match self {
            FetchFilter::Gzip(z) => {
                z.finish(out);
                Ok(())
            }
            FetchFilter::Gunzip(g) | FetchFilter::TestGunzip(g, _) => g.finish().map(drop),
            FetchFilter::Vmod(_, mut f) => f.finish(out).map_err(GzipError::Filter),
        }
    }
}

/// What a fetch's filters did to the object (`gzip`: the stored body is
/// known to be gzip, so clients that do not accept it get it gunzipped).
#[derive(Debug, Default)]
pub struct FetchChain {
    filters: Vec<FetchFilter>,
    /// The stored body is gzip.
    pub gzip: bool,
    /// A filter changed the encoding (gzip or gunzip ran).
    pub changed: bool,
}

impl FetchChain {
    /// No filters, over a body stored as it was (`gzip`, `changed` as the
    /// object it comes from says).
    pub fn unfiltered(gzip: bool, changed: bool) -> FetchChain {
        FetchChain {
            filters: Vec::new(),
            gzip,
            changed,
        }
    }

    /// The filters in data order (first sees the backend's bytes).
    pub fn filters(&self) -> &[FetchFilter] {
        &self.filters
    }

    /// Passes one body segment through every filter.
    pub fn feed(&mut self, seg: bytes::Bytes) -> Result<bytes::Bytes, GzipError> {
        if self.filters.is_empty() {
            return Ok(seg);
        }
        let mut data = seg.to_vec();
        let mut out = Vec::new();
        for f in &mut self.filters {
            out.clear();
            f.feed(&data, &mut out)?;
            std::mem::swap(&mut data, &mut out);
        }
        Ok(bytes::Bytes::from(data))
    }

    /// Ends every filter; returns what they still had to say.
    pub fn finish(&mut self) -> Result<bytes::Bytes, GzipError> {
        let mut pending: Vec<u8> = Vec::new();
        for mut f in std::mem::take(&mut self.filters) {
            let mut out = Vec::new();
            if !pending.is_empty() {
                f.feed(&pending, &mut out)?;
            }
            f.finish(&mut out)?;
            pending = out;
        }
        Ok(bytes::Bytes::from(pending))
    }
}

/// The list varnishd puts in `beresp.filters` when VCL did not set it
/// (each name after a space): `gunzip` for a gzip body with `do_gunzip`
/// or ESI, the ESI parser (`esi`, or `esi_gzip` when the stored body is to
/// be gzip), else `gzip` on a plain body with `do_gzip` or a `testgunzip`
/// of a gzip one. `do_gzip`/`do_gunzip` only count with
/// `http_gzip_support`; an empty body gets none.
pub fn default_fetch_filters(
    headers: &lacquer_http::Headers,
    has_body: bool,
    do_gzip: bool,
    do_gunzip: bool,
    do_esi: bool,
    gzip_support: bool,
) -> &'static str {
    if !has_body {
        return "";
    }
    let ce = headers.get("content-encoding");
    let is_gzip = ce.is_some_and(|v| v.eq_ignore_ascii_case(b"gzip"));
    let is_plain = ce.is_none();
    let do_gunzip = do_gunzip && gzip_support && is_gzip;
    let do_gzip = do_gzip && gzip_support && is_plain;
    let gunzip = do_gunzip || (is_gzip && do_esi);
    match (gunzip, do_esi) {
        (true, true) if !do_gunzip => " gunzip esi_gzip",
        (true, true) => " gunzip esi",
        (false, true) if do_gzip => " esi_gzip",
        (false, true) => " esi",
        (true, false) => " gunzip",
        (false, false) if do_gzip => " gzip",
        (false, false) if is_gzip => " testgunzip",
        (false, false) => "",
    }
}

/// Whether a `beresp.filters` list runs the ESI parser: `Some(true)` when
/// it stores the result gzip'ed (`esi_gzip`), `Some(false)` plain (`esi`).
pub fn esi_in_list(list: &str) -> Option<bool> {
    filter_names(list).iter().rev().find_map(|(_, n)| match *n {
        "esi" => Some(false),
        "esi_gzip" => Some(true),
        _ => None,
    })
}

/// Builds the filters the list `list` (VCL's `beresp.filters`) names, in
/// data order, applying what each does to the response headers as it is
/// set up: `gzip` is skipped for a body that already has a
/// `Content-Encoding`, `gunzip` and `testgunzip` for one that is not gzip;
/// gzip and gunzip drop `Content-Length` and weaken the ETag; gzip and
/// testgunzip add `Vary: Accept-Encoding`. With `partial` (a 206) the
/// gzip filters stand aside, headers untouched, as varnishd's do when
/// they open on a part of a body. Other names are looked up with
/// `vmod` (filters of the VCL's imported vmods); an unknown one is an
/// error quoting the list from there, as varnishd's.
pub fn build_fetch_filters(
    list: &str,
    vmod: &dyn Fn(&str) -> Option<&'static lacquer_vmods::BodyFilter>,
    headers: &mut lacquer_http::Headers,
    partial: bool,
    level: u32,
) -> Result<FetchChain, String> {
    // As varnishd, only a filter marks the object gzip (gzip, testgunzip):
    // a body stored unfiltered is delivered as it is, whatever its
    // Content-Encoding says.
    let mut chain = FetchChain::default();
    for (at, name) in filter_names(list) {
        let is_gzip = headers
            .get("content-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case(b"gzip"));
        let filter = match name {
            // Without beresp.do_esi (see fetch) the ESI parsers keep no
            // instructions: `esi` leaves the body as it is, `esi_gzip`
            // compresses it as `gzip` does.
            "esi" => continue,
            "gzip" | "esi_gzip" | "gunzip" | "testgunzip" if partial => continue,
            "gzip" | "esi_gzip" if headers.contains("content-encoding") => continue,
            "gzip" | "esi_gzip" => FetchFilter::Gzip(Gzip::new(level)),
            "gunzip" | "testgunzip" if !is_gzip => continue,
            "gunzip" => FetchFilter::Gunzip(Gunzip::new()),
            "testgunzip" => FetchFilter::TestGunzip(Gunzip::new(), Vec::new()),
            other => match vmod(other) {
                Some(f) => FetchFilter::Vmod(f.name, (f.new)()),
                None => return Err(filter_not_found(list, at)),
            },
        };
        match filter {
            FetchFilter::Gzip(_) | FetchFilter::Gunzip(_) => {
                headers.remove("content-encoding");
                headers.remove("content-length");
                weaken_etag(headers);
                chain.changed = true;
            }
            // A vmod's filter may change the length, not the encoding.
            FetchFilter::Vmod(..) => {
                headers.remove("content-length");
            }
            FetchFilter::TestGunzip(..) => {}
        }
        match filter {
            FetchFilter::Gzip(_) => {
                headers.set("Content-Encoding", "gzip");
                chain.gzip = true;
            }
            FetchFilter::Gunzip(_) => chain.gzip = false,
            FetchFilter::TestGunzip(..) => chain.gzip = true,
            FetchFilter::Vmod(..) => {}
        }
        // As varnishd's vfp_gzip_init (RFC2616_Vary_AE), whatever
        // http_gzip_support says.
        if matches!(filter, FetchFilter::Gzip(_) | FetchFilter::TestGunzip(..)) {
            add_vary_accept_encoding(headers);
        }
        chain.filters.push(filter);
    }
    Ok(chain)
}

/// The names of a VCL filter list (`beresp.filters`, `resp.filters`),
/// each with its offset in the list.
pub fn filter_names(list: &str) -> Vec<(usize, &str)> {
    let mut names = Vec::new();
    let mut start = None;
    for (i, c) in list
        .char_indices()
        .chain(std::iter::once((list.len(), ' ')))
    {
        match (c.is_ascii_whitespace(), start) {
            (true, Some(s)) => {
                names.push((s, &list[s..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    names
}

/// varnishd's error for a filter list naming an unknown filter at `at`:
/// the list is quoted from there on.
pub fn filter_not_found(list: &str, at: usize) -> String {
    format!("Filter '...{}' not found", &list[at..])
}

/// Makes a strong `ETag` weak (`W/"x"`): a re-encoded body is not
/// byte-identical to what the origin tagged.
pub fn weaken_etag(headers: &mut lacquer_http::Headers) {
    // As varnishd, the weak tag replaces the strong one at the end of
    // the list.
    if let Some(v) = headers.get("etag")
        && !v.starts_with(b"W/")
    {
        let mut w = b"W/".to_vec();
        w.extend_from_slice(v);
        headers.remove("etag");
        headers.append("ETag", w);
    }
}

/// Adds `Accept-Encoding` to `Vary` unless it is there already.
pub fn add_vary_accept_encoding(headers: &mut lacquer_http::Headers) {
    if headers.has_token("vary", "accept-encoding") {
        return;
    }
    // As varnishd's RFC2616_Vary_AE, an empty Vary is extended too:
    // `Vary: , Accept-Encoding` (difftest seeds 5542, 5662).
    match headers.get("vary").map(<[u8]>::to_vec) {
        Some(mut v) => {
            v.extend_from_slice(b", Accept-Encoding");
            headers.set("Vary", v);
        }
        None => headers.set("Vary", "Accept-Encoding"),
    }
}

/// The uncompressed length of a complete, valid gzip body, from its
/// trailer (ISIZE, the length modulo 2^32), when that cannot be ambiguous:
/// deflate expands at most ~1032:1, so bodies under 4 MiB are certain.
/// `total` is the gzip body's length, `tail` its last four bytes.
pub fn gzip_plain_len(total: u64, tail: &[u8]) -> Option<u64> {
    if !(18..4 << 20).contains(&total) {
        return None;
    }
    let tail: [u8; 4] = tail.try_into().ok()?;
    Some(u64::from(u32::from_le_bytes(tail)))
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

/// Inflates one verbatim range of a gzip'ed ESI object (independent deflate
/// blocks), piece by piece.
pub fn inflate(d: &mut Decompress, mut input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    while !input.is_empty() {
        out.reserve((input.len() * 4).clamp(1024, 1 << 20));
        let before_in = d.total_in();
        let before_out = d.total_out();
        let status = d
            .decompress_vec(input, out, FlushDecompress::Sync)
            .map_err(|e| io::Error::other(format!("ESI object: invalid gzip data: {e}")))?;
        let used = (d.total_in() - before_in) as usize;
        input = &input[used..];
        if status == Status::StreamEnd
            || (used == 0 && d.total_out() == before_out && out.len() < out.capacity())
        {
            if input.is_empty() {
                break;
            }
            return Err(io::Error::other(
                "ESI object: verbatim range is not deflate data",
            ));
        }
    }
    Ok(())
}

/// Inflates one verbatim range of a gzip'ed ESI object on its own.
pub fn inflate_range(data: &[u8]) -> io::Result<Vec<u8>> {
    let mut d = Decompress::new(false);
    let mut out = Vec::new();
    inflate(&mut d, data, &mut out)?;
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
        assert!(accepts_gzip(b"gzip;q=0, x-gzip"));
        assert!(accepts_gzip(b"x-gzip;q=0.4, gzip"));
        assert!(!accepts_gzip(b"gzip;q=-1"));
        assert!(accepts_gzip(b"gzip;q=0.0000001"));
        assert!(is_gzip_encoding(b"x-gzip"));
        assert!(!is_gzip_encoding(b"br"));
    }

    #[test]
    fn round_trip_in_segments() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut z = Vec::new();
        let mut g = Gzip::new(6);
        for chunk in data.chunks(7_777) {
            g.feed(chunk, &mut z);
        }
        g.finish(&mut z);
        assert_eq!(
            gzip_plain_len(z.len() as u64, &z[z.len() - 4..]),
            Some(200_000)
        );
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
    fn small_bodies_compress_as_varnishd() {
        // varnishd's gzip of "baz" is 23 bytes: header, one final fixed
        // block, trailer.
        assert_eq!(gzip_all(b"baz", 6).len(), 23);
    }

    #[test]
    fn header_extra_flags_follow_the_level_as_zlib() {
        assert_eq!(gzip_all(b"baz", 6)[8..10], [0, 3]);
        assert_eq!(gzip_all(b"baz", 9)[8..10], [2, 3]);
        assert_eq!(gzip_all(b"baz", 1)[8..10], [4, 3]);
        assert_eq!(gzip_all(b"baz", 0)[8..10], [4, 3]);
    }

    #[test]
    fn fetch_filter_choice_and_header_effects() {
        let none = |_: &str| None;
        let mut h = lacquer_http::Headers::new();
        h.append("ETag", "\"x\"");
        h.append("Content-Length", "3");
        assert_eq!(
            default_fetch_filters(&h, true, true, true, false, true),
            " gzip"
        );
        assert_eq!(
            default_fetch_filters(&h, false, true, false, false, true),
            ""
        );
        assert_eq!(
            default_fetch_filters(&h, true, true, false, false, false),
            ""
        );
        assert_eq!(
            default_fetch_filters(&h, true, true, false, true, true),
            " esi_gzip"
        );
        assert_eq!(
            default_fetch_filters(&h, true, false, false, true, true),
            " esi"
        );
        assert_eq!(esi_in_list(" gunzip esi_gzip"), Some(true));
        assert_eq!(esi_in_list("esi"), Some(false));
        assert_eq!(esi_in_list(" gzip"), None);
        let mut chain = build_fetch_filters("gzip", &none, &mut h, false, 6).unwrap();
        assert!(chain.gzip && chain.changed);
        assert_eq!(h.get("content-encoding"), Some(&b"gzip"[..]));
        assert_eq!(h.get("etag"), Some(&b"W/\"x\""[..]));
        assert_eq!(h.get("vary"), Some(&b"Accept-Encoding"[..]));
        assert!(!h.contains("content-length"));
        let mut z = chain
            .feed(bytes::Bytes::from_static(b"baz"))
            .unwrap()
            .to_vec();
        z.extend_from_slice(&chain.finish().unwrap());
        assert_eq!(gunzip_all(&z).unwrap(), b"baz");
        // Now gzip: the default is to test it; gunzip takes it back.
        assert_eq!(
            default_fetch_filters(&h, true, false, false, false, true),
            " testgunzip"
        );
        assert_eq!(
            default_fetch_filters(&h, true, false, true, false, true),
            " gunzip"
        );
        assert_eq!(
            default_fetch_filters(&h, true, false, false, true, true),
            " gunzip esi_gzip"
        );
        assert_eq!(
            default_fetch_filters(&h, true, false, true, true, true),
            " gunzip esi"
        );
        // A chain: gzip is skipped while encoded, gunzip while plain.
        let mut h2 = h.clone();
        let chain = build_fetch_filters(" gzip  gunzip gunzip", &none, &mut h2, false, 6).unwrap();
        assert_eq!(chain.filters().len(), 1);
        assert!(!chain.gzip && !h2.contains("content-encoding"));
        assert_eq!(
            build_fetch_filters("gunzip rot13  gzip", &none, &mut h2, false, 6).unwrap_err(),
            "Filter '...rot13  gzip' not found"
        );
        // testgunzip passes bytes through and rejects broken ones.
        let mut t = build_fetch_filters("testgunzip", &none, &mut h, false, 6).unwrap();
        assert_eq!(&t.feed(bytes::Bytes::from(z.clone())).unwrap()[..], &z[..]);
        assert!(t.finish().unwrap().is_empty());
        let mut t = build_fetch_filters("testgunzip", &none, &mut h, false, 6).unwrap();
        t.feed(bytes::Bytes::copy_from_slice(&z[..z.len() - 3]))
            .unwrap();
        assert_eq!(t.finish(), Err(GzipError::Truncated));
        // On a 206 the gzip filters stand aside and leave the headers.
        let mut p = lacquer_http::Headers::new();
        p.set("ETag", "\"p\"");
        let c = build_fetch_filters(" gzip testgunzip", &none, &mut p, true, 6).unwrap();
        assert!(c.filters().is_empty() && !c.gzip && !c.changed);
        assert_eq!(p.get("etag"), Some(&b"\"p\""[..]));
        assert!(!p.contains("vary") && !p.contains("content-encoding"));
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
