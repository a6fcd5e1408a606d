//! Parsing request and response heads from bytes, with Varnish's size limits.
//!
//! The grammar work is done by `httparse` (SIMD scanning, no allocation); this
//! module adds what a cache in front of other servers needs on top: the
//! `http_req_hdr_len` / `http_req_size` / `http_max_hdr` limits, obsolete line
//! folding turned into spaces the way varnishd does, absolute-form targets
//! rewritten to origin-form plus `Host`, the Host rules, and body framing (see
//! [`crate::framing`]). A parsed head shares one buffer with all its fields.
//!
//! Two entry points exist for each side: [`parse_request`] reads from any slice
//! and copies the head once into a shared buffer; [`parse_request_buf`] splits
//! the head off a `BytesMut` receive buffer without copying, leaving the body
//! bytes (or a pipelined next request) in place.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};

use crate::error::{Error, ErrorKind, excerpt};
use crate::framing::{self, BodyKind};
use crate::headers::{Headers, is_tchar};

/// HTTP/1 minor version of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// `HTTP/1.0`
    Http10,
    /// `HTTP/1.1`
    Http11,
}

impl Version {
    /// The protocol string, `HTTP/1.0` or `HTTP/1.1`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }

    /// Parses `HTTP/1.0` or `HTTP/1.1` (exact spelling, as on the wire).
    pub fn from_bytes(b: &[u8]) -> Option<Version> {
        match b {
            b"HTTP/1.0" => Some(Version::Http10),
            b"HTTP/1.1" => Some(Version::Http11),
            _ => None,
        }
    }
}

/// Size limits and policy switches for parsing one side's message heads.
///
/// Defaults mirror varnishd 7.1's parameters. `max_headers` counts header
/// fields only: Varnish's `http_max_hdr` (64) also counts five slots for the
/// first line, so its default allows 59 fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Longest header line, name to end of value, folds included
    /// (`http_req_hdr_len` / `http_resp_hdr_len`, 8k). Longer: 400 / 503.
    pub max_line: usize,
    /// Largest whole head, first line to final empty line included
    /// (`http_req_size` / `http_resp_size`, 32k). Larger: requests are closed
    /// without answer, responses fail with 503.
    pub max_head: usize,
    /// Most header fields (`http_max_hdr` minus 5). More: 400 / 503.
    pub max_headers: usize,
    /// Answer 400 to an HTTP/1.1 request without `Host` (RFC 9112 §3.2).
    pub require_host: bool,
    /// Also rewrite `https://host/path` targets (Varnish feature `https_scheme`,
    /// off by default).
    pub https_scheme: bool,
    /// Accept obsolete line folding, replacing each fold by spaces as varnishd
    /// does (RFC 9112 §5.2 allows this). When false, a fold is a 400.
    pub allow_obs_fold: bool,
}

/// Header slots kept on the stack; more than this uses a heap buffer.
const STACK_HEADERS: usize = 128;

impl Limits {
    /// Varnish's request defaults: 8192-byte lines, 32768-byte heads, 59 fields.
    pub fn request() -> Limits {
        Limits {
            max_line: 8192,
            max_head: 32768,
            max_headers: 59,
            require_host: true,
            https_scheme: false,
            allow_obs_fold: true,
        }
    }

    /// Varnish's response defaults: 8192-byte lines, 32768-byte heads, 59 fields.
    pub fn response() -> Limits {
        Limits::request()
    }

    /// Limits from Varnish parameter values (`http_req_hdr_len`,
    /// `http_req_size`, `http_max_hdr`, or the `http_resp_*` ones).
    pub fn from_varnish_params(hdr_len: usize, size: usize, max_hdr: usize) -> Limits {
        Limits {
            max_line: hdr_len,
            max_head: size,
            max_headers: max_hdr.saturating_sub(5),
            ..Limits::request()
        }
    }

    fn head_cap(&self) -> usize {
        // Offsets are stored as u32.
        self.max_head.min(u32::MAX as usize - 1)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::request()
    }
}

/// A parsed (or built) request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Method token, e.g. `GET` (valid UTF-8 when parsed).
    pub method: Bytes,
    /// Request target as received, absolute-form rewritten to its path
    /// (valid UTF-8 when parsed).
    pub target: Bytes,
    /// Protocol version.
    pub version: Version,
    /// Header fields in wire order.
    pub headers: Headers,
    /// How the request body is framed, as decided when the head was parsed.
    pub body: BodyKind,
}

impl RequestHead {
    /// A request with no headers and no body.
    pub fn new(method: impl Into<Bytes>, target: impl Into<Bytes>, version: Version) -> Self {
        RequestHead {
            method: method.into(),
            target: target.into(),
            version,
            headers: Headers::new(),
            body: BodyKind::None,
        }
    }

    /// The method as text (`None` only if someone stored invalid UTF-8).
    pub fn method_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.method).ok()
    }

    /// The target as text (`None` only if someone stored invalid UTF-8).
    pub fn target_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.target).ok()
    }

    /// True for a `HEAD` request (method names are case-sensitive).
    pub fn is_head(&self) -> bool {
        &self.method[..] == b"HEAD"
    }
}

/// A parsed (or built) response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// Protocol version.
    pub version: Version,
    /// Status code, 100..=999.
    pub status: u16,
    /// Reason phrase; an empty received reason is replaced by the default one.
    pub reason: Bytes,
    /// Header fields in wire order.
    pub headers: Headers,
}

impl ResponseHead {
    /// An HTTP/1.1 response with the default reason for `status`, no headers.
    pub fn new(status: u16) -> Self {
        ResponseHead {
            version: Version::Http11,
            status,
            reason: Bytes::from_static(crate::status::reason_phrase(status).as_bytes()),
            headers: Headers::new(),
        }
    }

    /// How this response's body is framed, given whether it answers a HEAD
    /// request; see [`crate::framing::response_body_kind`].
    pub fn body_kind(&self, head_request: bool) -> Result<BodyKind, Error> {
        framing::response_body_kind(self, head_request)
    }
}

/// What the grammar pass found.
enum Raw<T> {
    /// More bytes are needed.
    Partial,
    /// A complete head of `len` bytes.
    Done(T, usize),
    /// The head ends at this offset and uses obsolete line folding: unfold
    /// `buf[..end]` and parse again.
    Fold(usize),
    /// A response whose protocol varnishd's `http_Proto` reads but the
    /// grammar does not: a later version (`HTTP/2.0`, `HTTP/1.2`), which
    /// `HTTP1_DissectResponse` replaces by the request's `HTTP/1.1`, or
    /// `HTTP` in other letter case (`http/1.1`). Rewrite the version with
    /// [`normalise_version`] and parse again.
    Newer,
}

/// Whether a response starts with `HTTP/x.y ` (`HTTP` in any letter case,
/// one digit each side of the dot, as varnishd's `http_Proto` reads it)
/// that the grammar refuses: a version above 1.1, or a lower-case letter.
fn version_to_normalise(buf: &[u8]) -> bool {
    match buf {
        [h, t1, t2, p, b'/', major, b'.', minor, b' ', ..]
            if [*h, *t1, *t2, *p].eq_ignore_ascii_case(b"HTTP")
                && major.is_ascii_digit()
                && minor.is_ascii_digit() =>
        {
            &buf[..4] != b"HTTP" || (major - b'0', minor - b'0') > (1, 1)
        }
        _ => false,
    }
}

/// A request never gets [`Raw::Newer`] (its grammar pass reports a bad
/// version as such); should it, it is the same 400.
fn newer_request() -> Error {
    Error::req(
        ErrorKind::Malformed,
        "Unsupported or malformed protocol version",
    )
}

/// Rewrites the version of a response [`version_to_normalise`] accepted:
/// `HTTP` in upper case, and a version above 1.1 as `1.1`.
fn normalise_version(buf: &mut [u8]) {
    buf[..4].copy_from_slice(b"HTTP");
    if (buf[5] - b'0', buf[7] - b'0') > (1, 1) {
        buf[5..8].copy_from_slice(b"1.1");
    }
}

struct RawReq {
    method: (u32, u32),
    target: (u32, u32),
    version: Version,
    headers: Headers,
    seen: Seen,
}

impl RawReq {
    /// A parsed request line and its header lines; `method` and `target`
    /// are slices of `buf`.
    fn new(
        buf: &[u8],
        method: &[u8],
        target: &[u8],
        version: Version,
        headers: Headers,
        seen: Seen,
    ) -> Self {
        RawReq {
            method: span(buf, method),
            target: span(buf, target),
            version,
            headers,
            seen,
        }
    }
}

struct RawResp {
    version: Version,
    status: u16,
    reason: (u32, u32),
    headers: Headers,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Request,
    Response,
}

impl Side {
    fn err(self, kind: ErrorKind, msg: impl Into<String>) -> Error {
        match self {
            Side::Request => Error::req(kind, msg),
            Side::Response => Error::resp(kind, msg),
        }
    }

    fn too_large(self, limits: &Limits) -> Error {
        let msg = format!(
            "message head is larger than the {}-byte limit (http_{}_size)",
            limits.max_head,
            if self == Side::Request { "req" } else { "resp" }
        );
        match self {
            Side::Request => Error::new(ErrorKind::HeadTooLarge, None, msg),
            Side::Response => Error::resp(ErrorKind::HeadTooLarge, msg),
        }
    }
}

#[inline]
fn off(buf: &[u8], part: &[u8]) -> u32 {
    (part.as_ptr() as usize - buf.as_ptr() as usize) as u32
}

#[inline]
fn span(buf: &[u8], part: &[u8]) -> (u32, u32) {
    let s = off(buf, part);
    (s, s + part.len() as u32)
}

fn parser_config() -> httparse::ParserConfig {
    let mut c = httparse::ParserConfig::default();
    c.allow_multiple_spaces_in_request_line_delimiters(true)
        .allow_multiple_spaces_in_response_status_delimiters(true);
    c
}

/// Runs `f` with `n` uninitialised header slots, on the stack when small.
fn with_slots<'b, R>(n: usize, f: impl FnOnce(&mut [MaybeUninit<httparse::Header<'b>>]) -> R) -> R {
    if n <= STACK_HEADERS {
        let mut slots = [MaybeUninit::uninit(); STACK_HEADERS];
        f(&mut slots[..n])
    } else {
        let mut slots = vec![MaybeUninit::uninit(); n];
        f(&mut slots)
    }
}

/// Collects header ranges and enforces the per-line limit. `len` is the head
/// length; each line runs from its name to the start of the next line.
/// What the single pass over the fields noticed, so the common case (no body
/// framing fields, one Host) needs no further scans.
#[derive(Default, Clone, Copy)]
struct Seen {
    hosts: usize,
    framing: bool,
}

fn collect_headers(
    buf: &[u8],
    len: usize,
    parsed: &[httparse::Header<'_>],
    limits: &Limits,
    side: Side,
) -> Result<(Headers, Seen), Error> {
    let mut seen = Seen::default();
    let blank_start = if len >= 2 && buf[len - 2] == b'\r' {
        len - 2
    } else {
        len - 1
    };
    // Room for the lines VCL usually adds (X-Forwarded-For, a device or
    // cache marker...) without moving the list.
    let mut headers = Headers::with_capacity(parsed.len() + 8);
    for (i, h) in parsed.iter().enumerate() {
        let (ns, ne) = span(buf, h.name.as_bytes());
        let (vs, ve) = if h.value.is_empty() {
            (ne, ne)
        } else {
            span(buf, h.value)
        };
        let next = match parsed.get(i + 1) {
            Some(n) => off(buf, n.name.as_bytes()) as usize,
            None => blank_start,
        };
        let eol = if next >= 2 && buf[next - 2] == b'\r' {
            2
        } else {
            1
        };
        let line_len = next - eol - ns as usize;
        if line_len > limits.max_line {
            // varnishd's BogoHeader text (the limit is `max_line`).
            return Err(side
                .err(
                    ErrorKind::HeaderTooLong,
                    format!("Header too long: {}", excerpt(&buf[ns as usize..])),
                )
                .header_fault());
        }
        let name = h.name.as_bytes();
        match name.len() {
            4 if name.eq_ignore_ascii_case(b"host") => seen.hosts += 1,
            14 if name.eq_ignore_ascii_case(b"content-length") => seen.framing = true,
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => seen.framing = true,
            _ => {}
        }
        headers.push_range((ns, ne), (vs, ve), name);
    }
    Ok((headers, seen))
}

/// Offset just past the empty line ending the head (Varnish `HTTP1_Complete`),
/// after skipping leading empty lines; `None` when not all there yet.
fn find_head_end(buf: &[u8]) -> Option<usize> {
    let mut p = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    loop {
        let nl = p + buf[p..].iter().position(|&b| b == b'\n')?;
        let mut q = nl + 1;
        match buf.get(q) {
            None => return None,
            Some(b'\n') => return Some(q + 1),
            Some(b'\r') => {
                q += 1;
                match buf.get(q) {
                    None => return None,
                    Some(b'\n') => return Some(q + 1),
                    Some(_) => {}
                }
            }
            Some(_) => {}
        }
        p = nl + 1;
    }
}

/// Offsets of the `\n` of every folded line end in `head`: a line end after a
/// header line (not after the first line) followed by a space or tab.
fn fold_points(head: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let start = head
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(head.len());
    let first_nl = head[start..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(head.len(), |p| start + p);
    (first_nl + 1..head.len().saturating_sub(1))
        .filter(move |&i| head[i] == b'\n' && matches!(head[i + 1], b' ' | b'\t'))
}

/// Replaces each fold (line end plus leading whitespace) by spaces, in place,
/// like varnishd's header dissector.
fn unfold(head: &mut [u8]) {
    let points: Vec<usize> = fold_points(head).collect();
    for &nl in &points {
        head[nl] = b' ';
        if nl > 0 && head[nl - 1] == b'\r' {
            head[nl - 1] = b' ';
        }
        let mut q = nl + 1;
        while q < head.len() && matches!(head[q], b' ' | b'\t') {
            head[q] = b' ';
            q += 1;
        }
    }
}

/// After `httparse` rejected `buf`: is it a fold we can undo (or might once
/// more bytes arrive)? Otherwise, a precise error.
fn after_grammar_error<T>(
    buf: &[u8],
    limits: &Limits,
    side: Side,
    err: httparse::Error,
) -> Result<Raw<T>, Error> {
    if matches!(
        err,
        httparse::Error::HeaderName | httparse::Error::HeaderValue
    ) {
        let end = find_head_end(buf);
        let head = &buf[..end.unwrap_or(buf.len())];
        if fold_points(head).next().is_some() {
            if !limits.allow_obs_fold {
                return Err(side.err(
                    ErrorKind::Malformed,
                    "obsolete line folding in header is not accepted",
                ));
            }
            return match end {
                Some(end) if end > limits.head_cap() => Err(side.too_large(limits)),
                Some(end) => Ok(Raw::Fold(end)),
                None if buf.len() > limits.head_cap() => Err(side.too_large(limits)),
                None => Ok(Raw::Partial),
            };
        }
    }
    // As varnishd's `HTTP1_Complete`: a head is judged once its empty line
    // has arrived; until then (and within the size limit) more is awaited,
    // so a half-sent line is never refused for what it lacks so far.
    if find_head_end(buf).is_none() && buf.len() <= limits.head_cap() {
        return Ok(Raw::Partial);
    }
    Err(diagnose(buf, limits, side, err))
}

/// The header lines of a head (after its first line, before the empty
/// line), line ends removed.
fn header_lines(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    buf[start..]
        .split(|&b| b == b'\n')
        .skip(1)
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take_while(|l| !l.is_empty())
}

/// Describes why `httparse` rejected `buf`, in Varnish's words where it has them.
fn diagnose(buf: &[u8], limits: &Limits, side: Side, err: httparse::Error) -> Error {
    use httparse::Error as H;
    let kind = ErrorKind::Malformed;
    match err {
        H::TooManyHeaders => {
            // varnishd's BogoHeader names the first line without a slot.
            let line = header_lines(buf)
                .nth(limits.max_headers)
                .unwrap_or_default();
            return side
                .err(
                    ErrorKind::TooManyHeaders,
                    format!("Too many headers: {}", excerpt(line)),
                )
                .header_fault();
        }
        H::Version => return side.err(kind, "Unsupported or malformed protocol version"),
        H::Status => return side.err(kind, "Malformed status code"),
        H::Token => return side.err(kind, "Malformed request line (method or target)"),
        _ => {}
    }
    // Look at the header lines for the first offending byte.
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let Some(first_nl) = buf[start..].iter().position(|&b| b == b'\n') else {
        return side.err(kind, "Malformed first line");
    };
    let first_line = &buf[start..start + first_nl];
    if let Some(&c) = first_line
        .iter()
        .find(|&&c| c != b'\r' && c != b'\t' && (c < 0x20 || c == 0x7f))
    {
        return side.err(kind, format!("First line has ctrl char 0x{c:02x}"));
    }
    if first_line.last() == Some(&b'\r') && first_line[..first_line.len() - 1].contains(&b'\r') {
        return side.err(kind, "First line has ctrl char 0x0d");
    }
    let mut p = start + first_nl + 1;
    let mut first = true;
    while p < buf.len() {
        let line_end = buf[p..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(buf.len(), |q| p + q);
        let mut line = &buf[p..line_end];
        if line_end < buf.len() && line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        if line.is_empty() {
            break;
        }
        if let Some(&c) = line
            .iter()
            .find(|&&c| c != b'\t' && (c < 0x20 || c == 0x7f))
        {
            return side
                .err(kind, format!("Header has ctrl char 0x{c:02x}"))
                .header_fault();
        }
        if line.len() > limits.max_line {
            return side
                .err(
                    ErrorKind::HeaderTooLong,
                    format!("Header too long: {}", excerpt(line)),
                )
                .header_fault();
        }
        if first && matches!(line[0], b' ' | b'\t') {
            return side
                .err(
                    kind,
                    format!("1st header has white space: {}", excerpt(line)),
                )
                .header_fault();
        }
        if matches!(line[0], b' ' | b'\t') {
            return side
                .err(kind, "obsolete line folding in header is not accepted")
                .header_fault();
        }
        if line[0] == b':' {
            return side
                .err(kind, format!("Missing header name: {}", excerpt(line)))
                .header_fault();
        }
        match line.iter().position(|&c| c == b':') {
            None => {
                return side
                    .err(kind, format!("Header without ':' {}", excerpt(line)))
                    .header_fault();
            }
            Some(colon) => {
                if let Some(&c) = line[..colon].iter().find(|&&c| !is_tchar(c)) {
                    return side
                        .err(kind, format!("Illegal char 0x{c:02x} in header name"))
                        .header_fault();
                }
            }
        }
        first = false;
        p = line_end + 1;
    }
    side.err(kind, format!("Malformed header block ({err})"))
}

fn raw_request(buf: &[u8], limits: &Limits) -> Result<Raw<RawReq>, Error> {
    let side = Side::Request;
    with_slots(limits.max_headers, |slots| {
        let mut req = httparse::Request::new(&mut []);
        match parser_config().parse_request_with_uninit_headers(&mut req, buf, slots) {
            Ok(httparse::Status::Partial) => {
                if buf.len() > limits.head_cap() {
                    Err(side.too_large(limits))
                } else {
                    Ok(Raw::Partial)
                }
            }
            Ok(httparse::Status::Complete(len)) => {
                if len > limits.head_cap() {
                    return Err(side.too_large(limits));
                }
                let (headers, seen) = collect_headers(buf, len, req.headers, limits, side)?;
                let version = if req.version == Some(0) {
                    Version::Http10
                } else {
                    Version::Http11
                };
                let method = req.method.unwrap_or_default().as_bytes();
                let target = req.path.unwrap_or_default().as_bytes();
                Ok(Raw::Done(
                    RawReq::new(buf, method, target, version, headers, seen),
                    len,
                ))
            }
            Err(e @ (httparse::Error::Token | httparse::Error::Version)) => {
                match lenient_request(buf, limits)? {
                    Some(raw) => Ok(raw),
                    None => after_grammar_error(buf, limits, side, e),
                }
            }
            Err(e) => after_grammar_error(buf, limits, side, e),
        }
    })
}

/// A request line `httparse` refuses but varnishd's `http1_splitline`
/// takes: a method or URL with bytes outside HTTP's token and URI sets
/// (anything but white space and control characters: `G@T`, a raw UTF-8
/// URL), and the protocol in any case (`http/1.1`, as `http1_proto_ver`'s
/// `strcasecmp`). The header lines are then parsed by `httparse` as
/// usual. `None` when the line is wrong in a way varnishd refuses too, or
/// is not complete yet (the caller then reports `httparse`'s error or
/// waits for more).
fn lenient_request(buf: &[u8], limits: &Limits) -> Result<Option<Raw<RawReq>>, Error> {
    let ctl = |b: u8| b < 0x20 || b == 0x7f;
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let (Some(method), Some(target), Some(proto), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Ok(None);
    };
    if method.iter().chain(target).chain(proto).any(|&b| ctl(b)) {
        return Ok(None);
    }
    let version = if proto.eq_ignore_ascii_case(b"HTTP/1.1") {
        Version::Http11
    } else if proto.eq_ignore_ascii_case(b"HTTP/1.0") {
        Version::Http10
    } else {
        return Ok(None);
    };
    let rest = &buf[nl + 1..];
    let mut slots = vec![httparse::EMPTY_HEADER; limits.max_headers];
    match httparse::parse_headers(rest, &mut slots) {
        Ok(httparse::Status::Complete((used, parsed))) => {
            let len = nl + 1 + used;
            if len > limits.head_cap() {
                return Err(Side::Request.too_large(limits));
            }
            let (headers, seen) = collect_headers(buf, len, parsed, limits, Side::Request)?;
            Ok(Some(Raw::Done(
                RawReq::new(buf, method, target, version, headers, seen),
                len,
            )))
        }
        Ok(httparse::Status::Partial) if buf.len() <= limits.head_cap() => Ok(Some(Raw::Partial)),
        _ => Ok(None),
    }
}

fn raw_response(buf: &[u8], limits: &Limits) -> Result<Raw<RawResp>, Error> {
    let side = Side::Response;
    with_slots(limits.max_headers, |slots| {
        let mut resp = httparse::Response::new(&mut []);
        match parser_config().parse_response_with_uninit_headers(&mut resp, buf, slots) {
            Ok(httparse::Status::Partial) => {
                if buf.len() > limits.head_cap() {
                    Err(side.too_large(limits))
                } else {
                    Ok(Raw::Partial)
                }
            }
            Ok(httparse::Status::Complete(len)) => {
                if len > limits.head_cap() {
                    return Err(side.too_large(limits));
                }
                let status = resp.code.unwrap_or(0);
                if status < 100 {
                    return Err(side.err(
                        ErrorKind::Malformed,
                        format!("Malformed status code {status:03}"),
                    ));
                }
                let (headers, _) = collect_headers(buf, len, resp.headers, limits, side)?;
                let version = if resp.version == Some(0) {
                    Version::Http10
                } else {
                    Version::Http11
                };
                let reason = match resp.reason {
                    Some(r) if !r.is_empty() => span(buf, r.as_bytes()),
                    _ => (0, 0),
                };
                Ok(Raw::Done(
                    RawResp {
                        version,
                        status,
                        reason,
                        headers,
                    },
                    len,
                ))
            }
            Err(httparse::Error::Version) if version_to_normalise(buf) => Ok(Raw::Newer),
            Err(e) => after_grammar_error(buf, limits, side, e),
        }
    })
}

#[inline]
fn slice(b: &Bytes, r: (u32, u32)) -> Bytes {
    b.slice(r.0 as usize..r.1 as usize)
}

/// Turns offsets into a head sharing `buf`, then applies the request rules.
fn finish_request(raw: RawReq, buf: Bytes, limits: &Limits) -> Result<RequestHead, Error> {
    let mut headers = raw.headers;
    headers.set_buf(buf.clone());
    let mut head = RequestHead {
        method: slice(&buf, raw.method),
        target: slice(&buf, raw.target),
        version: raw.version,
        headers,
        body: BodyKind::None,
    };
    let hosts = if absolute_form(&mut head, &buf, raw.target, limits) {
        if head.headers.len() > limits.max_headers {
            // The added Host field made one too many.
            return Err(Error::req(ErrorKind::TooManyHeaders, "Too many headers"));
        }
        1
    } else {
        raw.seen.hosts
    };
    if hosts > 1 {
        return Err(Error::req(ErrorKind::Host, "Multiple Host: headers"));
    }
    if hosts == 0 && limits.require_host && head.version == Version::Http11 {
        return Err(Error::req(
            ErrorKind::Host,
            "Missing Host: header in HTTP/1.1 request",
        ));
    }
    // Without framing fields an HTTP/1.1 request has no body; the general
    // rules are only needed otherwise.
    if raw.seen.framing || head.version != Version::Http11 {
        head.body = framing::request_body_kind(&head.method, head.version, &head.headers)?;
    }
    Ok(head)
}

/// Varnish (RFC 2616 §5.2): `GET http://host/path` becomes `GET /path` with
/// `Host: host` replacing any Host field. Without a `/` after the authority
/// the target is left alone, as varnishd does. Returns whether it rewrote.
fn absolute_form(head: &mut RequestHead, buf: &Bytes, target: (u32, u32), limits: &Limits) -> bool {
    let t = &head.target;
    let skip = if t.len() >= 7 && t[..7].eq_ignore_ascii_case(b"http://") {
        7
    } else if limits.https_scheme && t.len() >= 8 && t[..8].eq_ignore_ascii_case(b"https://") {
        8
    } else {
        return false;
    };
    let Some(slash) = t[skip..].iter().position(|&b| b == b'/') else {
        return false;
    };
    let host_end = target.0 + (skip + slash) as u32;
    let host = buf.slice(target.0 as usize + skip..host_end as usize);
    head.headers.remove("host");
    head.headers.append(Bytes::from_static(b"Host"), host);
    head.target = buf.slice(host_end as usize..target.1 as usize);
    true
}

fn finish_response(raw: RawResp, buf: Bytes) -> ResponseHead {
    let mut headers = raw.headers;
    headers.set_buf(buf.clone());
    let reason = if raw.reason.1 > raw.reason.0 {
        slice(&buf, raw.reason)
    } else {
        Bytes::from_static(crate::status::reason_phrase(raw.status).as_bytes())
    };
    ResponseHead {
        version: raw.version,
        status: raw.status,
        reason,
        headers,
    }
}

/// What varnishd's `HttpGarbage` record shows of a refused head (request
/// or response): its receive buffer as a C string, which `http1_splitline`
/// cut with a NUL after the first field (method or protocol) once a space
/// or tab ended it; a head refused before that (a control byte in that
/// field) shows whole.
pub fn garbage(head: &[u8]) -> &[u8] {
    let start = head
        .iter()
        .position(|&b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .unwrap_or(head.len());
    for (i, &b) in head[start..].iter().enumerate() {
        if b == b' ' || b == b'\t' {
            return &head[..start + i];
        }
        if b < 0x20 || b == 0x7f {
            break;
        }
    }
    head
}

/// Whether bytes just read could have completed a head that was incomplete
/// before: a head ends with a line feed, so a read without one cannot. A
/// caller that re-parses only when this is true (or when its buffer has
/// grown past [`Limits::max_head`]) bounds the cost of a head trickled in
/// byte by byte to a few parses per line instead of one per byte.
pub fn may_complete_head(new_bytes: &[u8]) -> bool {
    new_bytes.contains(&b'\n')
}

/// Parses a request head at the start of `buf`.
///
/// `Ok(None)`: incomplete, read more and call again with the longer buffer
/// (parsing is stateless and starts over; see [`may_complete_head`]).
/// `Ok(Some((head, len)))`: the head took `len` bytes; the body (framed as
/// `head.body` says) or the next request starts at `buf[len..]`.
/// The head is copied once into a buffer shared by all its fields; use
/// [`parse_request_buf`] to avoid that copy.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Option<(RequestHead, usize)>, Error> {
    match raw_request(buf, limits)? {
        Raw::Partial => Ok(None),
        Raw::Done(raw, len) => {
            let owned = Bytes::copy_from_slice(&buf[..len]);
            // Offsets are relative to the start of `buf`, which the copy shares.
            let head = finish_request(raw, owned, limits)?;
            Ok(Some((head, len)))
        }
        Raw::Fold(end) => {
            let mut copy = buf[..end].to_vec();
            unfold(&mut copy);
            let copy = Bytes::from(copy);
            match raw_request(&copy, limits)? {
                Raw::Done(raw, len) => Ok(Some((finish_request(raw, copy, limits)?, len))),
                _ => Err(Error::req(ErrorKind::Malformed, "Malformed folded header")),
            }
        }
        Raw::Newer => Err(newer_request()),
    }
}

/// Like [`parse_request`], but takes the head off the front of `buf` without
/// copying it; what follows the head stays in `buf`. Folded headers are
/// unfolded in place. On `Ok(None)` and on error `buf` is left as it was
/// (except for unfolding).
pub fn parse_request_buf(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<RequestHead>, Error> {
    let (raw, len) = match raw_request(buf, limits)? {
        Raw::Partial => return Ok(None),
        Raw::Done(raw, len) => (raw, len),
        Raw::Fold(end) => {
            unfold(&mut buf[..end]);
            match raw_request(buf, limits)? {
                Raw::Done(raw, len) => (raw, len),
                _ => return Err(Error::req(ErrorKind::Malformed, "Malformed folded header")),
            }
        }
        Raw::Newer => return Err(newer_request()),
    };
    let head = buf.split_to(len).freeze();
    let result = finish_request(raw, head.clone(), limits);
    if result.is_err() {
        // Give the bytes back so the caller can log them (Varnish HttpGarbage).
        let rest = std::mem::take(buf);
        buf.extend_from_slice(&head);
        buf.extend_from_slice(&rest);
    }
    result.map(Some)
}

/// Parses a response head at the start of `buf`; see [`parse_request`].
/// The body framing depends on the request, see [`ResponseHead::body_kind`].
pub fn parse_response(buf: &[u8], limits: &Limits) -> Result<Option<(ResponseHead, usize)>, Error> {
    match raw_response(buf, limits)? {
        Raw::Partial => Ok(None),
        Raw::Done(raw, len) => {
            let owned = Bytes::copy_from_slice(&buf[..len]);
            Ok(Some((finish_response(raw, owned), len)))
        }
        Raw::Fold(end) => {
            let mut copy = buf[..end].to_vec();
            unfold(&mut copy);
            let copy = Bytes::from(copy);
            match raw_response(&copy, limits)? {
                Raw::Done(raw, len) => Ok(Some((finish_response(raw, copy), len))),
                _ => Err(Error::resp(ErrorKind::Malformed, "Malformed folded header")),
            }
        }
        Raw::Newer => {
            let mut copy = buf.to_vec();
            normalise_version(&mut copy);
            parse_response(&copy, limits)
        }
    }
}

/// Like [`parse_response`], taking the head off the front of `buf` without
/// copying; see [`parse_request_buf`].
pub fn parse_response_buf(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<ResponseHead>, Error> {
    let (raw, len) = match raw_response(buf, limits)? {
        Raw::Partial => return Ok(None),
        Raw::Done(raw, len) => (raw, len),
        Raw::Fold(end) => {
            unfold(&mut buf[..end]);
            match raw_response(buf, limits)? {
                Raw::Done(raw, len) => (raw, len),
                _ => return Err(Error::resp(ErrorKind::Malformed, "Malformed folded header")),
            }
        }
        Raw::Newer => {
            normalise_version(buf);
            return parse_response_buf(buf, limits);
        }
    };
    let head = buf.split_to(len).freeze();
    Ok(Some(finish_response(raw, head)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(s: &str) -> Result<Option<(RequestHead, usize)>, Error> {
        parse_request(s.as_bytes(), &Limits::request())
    }

    fn ok_req(s: &str) -> RequestHead {
        req(s).expect("parses").expect("complete").0
    }

    fn req_err(s: &str) -> Error {
        req(s).expect_err("must be rejected")
    }

    fn resp(s: &str) -> Result<Option<(ResponseHead, usize)>, Error> {
        parse_response(s.as_bytes(), &Limits::response())
    }

    #[test]
    fn simple_request() {
        let s = "GET /index.html?x=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\nrest";
        let (h, len) = req(s).unwrap().unwrap();
        assert_eq!(len, s.len() - 4);
        assert_eq!(&h.method[..], b"GET");
        assert_eq!(h.method_str(), Some("GET"));
        assert_eq!(h.target_str(), Some("/index.html?x=1"));
        assert_eq!(h.version, Version::Http11);
        assert_eq!(h.headers.len(), 2);
        assert_eq!(h.headers.get("host"), Some(&b"example.com"[..]));
        assert_eq!(h.body, BodyKind::None);
        assert!(!h.is_head());
    }

    #[test]
    fn partial_request_needs_more() {
        let full = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        for i in 0..full.len() {
            assert!(req(&full[..i]).unwrap().is_none(), "prefix {i}");
        }
        assert!(req(full).unwrap().is_some());
    }

    #[test]
    fn lf_only_line_ends_accepted() {
        let h = ok_req("GET / HTTP/1.0\nHost: a\nX: y\n\n");
        assert_eq!(h.version, Version::Http10);
        assert_eq!(h.headers.get("x"), Some(&b"y"[..]));
    }

    #[test]
    fn leading_empty_lines_skipped() {
        let h = ok_req("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(&h.target[..], b"/");
    }

    #[test]
    fn preserves_case_and_order() {
        let h = ok_req("GET / HTTP/1.1\r\nhOsT: a\r\nX-B: 1\r\nx-a: 2\r\nX-B: 3\r\n\r\n");
        let names: Vec<_> = h.headers.iter().map(|(n, _)| n.to_vec()).collect();
        assert_eq!(
            names,
            vec![
                b"hOsT".to_vec(),
                b"X-B".to_vec(),
                b"x-a".to_vec(),
                b"X-B".to_vec()
            ]
        );
    }

    #[test]
    fn values_trimmed() {
        let h = ok_req("GET / HTTP/1.1\r\nHost:   a b  \t\r\nEmpty:\r\nE2:   \r\n\r\n");
        assert_eq!(h.headers.get("host"), Some(&b"a b"[..]));
        assert_eq!(h.headers.get("empty"), Some(&b""[..]));
        assert_eq!(h.headers.get("e2"), Some(&b""[..]));
    }

    #[test]
    fn received_empty_values_are_written_without_a_space() {
        let mut h = ok_req("GET / HTTP/1.1\r\nHost: h\r\nEmpty:\r\nE2:   \r\n\r\n").headers;
        h.append("Set", "");
        let mut out = Vec::new();
        h.write_to(&mut out);
        assert_eq!(out, b"Host: h\r\nEmpty:\r\nE2:\r\nSet: \r\n");
        assert_eq!(out.len(), h.wire_len());
    }

    #[test]
    fn bad_versions() {
        assert_eq!(
            req_err("GET / HTTP/2.0\r\nHost: a\r\n\r\n").status(),
            Some(400)
        );
        assert_eq!(req_err("GET / HTTP/0.9\r\n\r\n").status(), Some(400));
        assert_eq!(req_err("GET /\r\n\r\n").status(), Some(400));
    }

    #[test]
    fn request_line_as_varnishds_splitline() {
        // The protocol in any case, any method without white space or
        // control characters, 8-bit URL bytes.
        let h = ok_req("GET / http/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(h.version, Version::Http11);
        let h = ok_req("G@T /caf\u{e9} HTTP/1.0\r\nX: y\r\n\r\n");
        assert_eq!(&h.method[..], b"G@T");
        assert_eq!(&h.target[..], "/caf\u{e9}".as_bytes());
        assert_eq!(h.version, Version::Http10);
        assert_eq!(h.headers.get("x"), Some(&b"y"[..]));
        // Still refused: a control character, a fourth field, another
        // protocol, an incomplete head waits for more.
        assert_eq!(req_err("G\x01T / HTTP/1.1\r\n\r\n").status(), Some(400));
        assert_eq!(req_err("G@T / HTTP/1.1 x\r\n\r\n").status(), Some(400));
        assert_eq!(req_err("G@T / HTTP/2.0\r\n\r\n").status(), Some(400));
        assert!(req("G@T / HTTP/1.1\r\nHost: a\r\n").unwrap().is_none());
    }

    #[test]
    fn varnish_b00040_malformed_headers() {
        let e = req_err("GET /1 HTTP/1.1\r\n Host: foo\r\n\r\n");
        assert!(e.message().starts_with("1st header has white space"), "{e}");
        let e = req_err("GET /3 HTTP/1.1\r\n\rHost: foo\r\n\r\n");
        assert_eq!(e.status(), Some(400));
        let e = req_err("GET /5 HTTP/1.1\r\nHost: foo\r\nBogo: Header\x01More\r\n\r\n");
        assert_eq!(e.message(), "Header has ctrl char 0x01");
        let e = req_err("GET /6 HTTP/1.1\r\nHost: foo\r\nBogo: Header\r\r\n\r\n");
        assert_eq!(e.message(), "Header has ctrl char 0x0d");
        let e = req_err("GET /7 HTTP/1.1\r\nHost: foo\r\nBogo: Header\rMore\r\n\r\n");
        assert_eq!(e.message(), "Header has ctrl char 0x0d");
        let e = req_err("GET /8 HTTP/1.1\r\nHost: foo\r\n: Header\r\n\r\n");
        assert!(e.message().starts_with("Missing header name"), "{e}");
        let e = req_err("GET / HTTP/1.1\r\nHost: foo\r\nBad Name: x\r\n\r\n");
        assert_eq!(e.message(), "Illegal char 0x20 in header name");
        let e = req_err("GET / HTTP/1.1\r\nHost: foo\r\nNoColon\r\n\r\n");
        assert!(e.message().starts_with("Header without ':'"), "{e}");
        assert!(e.is_header_fault());
        // A bad first line is not a header line's fault.
        let e = req_err("GET /\x01 HTTP/1.1\r\nHost: foo\r\n\r\n");
        assert!(!e.is_header_fault(), "{e}");
    }

    #[test]
    fn varnish_b00047_b00049() {
        for bad in [
            "GET /\r\n\r\n",
            "GET / HTTP/0.5\r\n\r\n",
            "GET / HTTP/1.2\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
        ] {
            assert_eq!(req_err(bad).status(), Some(400), "{bad:?}");
        }
        let e = req_err("GET / HTTP/1.1\r\nHost: foo\r\nAccept-Encoding : gzip\r\n\r\n");
        assert_eq!(e.message(), "Illegal char 0x20 in header name");
        let e = req_err("GET / HTTP/1.1\r\nHost: foo\r\nAccept/Encoding: gzip\r\n\r\n");
        assert_eq!(e.message(), "Illegal char 0x2f in header name");
    }

    #[test]
    fn varnish_c00039_limits() {
        let limits = Limits {
            max_line: 40,
            max_head: 256,
            ..Limits::request()
        };
        let ok = "GET /1 HTTP/1.1\r\nhost: 127.0.0.1\r\n1...5: ..0....5....0....5....0....5....0\r\n\r\n";
        assert!(parse_request(ok.as_bytes(), &limits).unwrap().is_some());
        let long = "GET /1 HTTP/1.1\r\nhost: 127.0.0.1\r\n1...5....0....5....0....5....0....5....0.\r\n\r\n";
        let e = parse_request(long.as_bytes(), &limits).unwrap_err();
        assert_eq!(
            (e.kind(), e.status()),
            (ErrorKind::HeaderTooLong, Some(400))
        );
        // Folded header: the fold counts towards the line length.
        let fold = "GET /2 HTTP/1.1\r\nhost: 127.0.0.1\r\n1...5: ..0....5\n ..0....5....0....5....0\r\n\r\n";
        let (h, _) = parse_request(fold.as_bytes(), &limits).unwrap().unwrap();
        assert_eq!(
            h.headers.get("1...5"),
            Some(&b"..0....5  ..0....5....0....5....0"[..])
        );
        let fold_long = "GET /2 HTTP/1.1\r\nhost: 127.0.0.1\r\n1...5....0....5\n ..0....5....0....5....0.\r\n\r\n";
        let e = parse_request(fold_long.as_bytes(), &limits).unwrap_err();
        assert_eq!(e.status(), Some(400));
        // 256 bytes exactly: fine; 257: closed without answer.
        let mut exact = String::from("GET /..... HTTP/1.1\r\nHost: foo\r\n");
        for _ in 0..6 {
            exact.push_str("1...5: ..0....5....0....5....0\r\n");
        }
        let mut over = exact.clone();
        exact.push_str("1...5: ..0....5....0....5...\r\n\r\n");
        over.push_str("1...5: ..0....5....0....5....\r\n\r\n");
        assert_eq!(exact.len(), 256);
        assert!(parse_request(exact.as_bytes(), &limits).unwrap().is_some());
        let e = parse_request(over.as_bytes(), &limits).unwrap_err();
        assert_eq!((e.kind(), e.status()), (ErrorKind::HeadTooLarge, None));
        // Incomplete but already over the limit.
        let incomplete = format!("{}XY", &over[..over.len() - 2]);
        assert_eq!(incomplete.len(), 257);
        assert!(
            parse_request(&incomplete.as_bytes()[..256], &limits)
                .unwrap()
                .is_none()
        );
        let e = parse_request(incomplete.as_bytes(), &limits).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::HeadTooLarge);
    }

    #[test]
    fn too_many_headers() {
        let limits = Limits {
            max_headers: 3,
            ..Limits::request()
        };
        let ok = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n";
        assert!(parse_request(ok.as_bytes(), &limits).unwrap().is_some());
        let bad = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        let e = parse_request(bad.as_bytes(), &limits).unwrap_err();
        assert_eq!(
            (e.kind(), e.status()),
            (ErrorKind::TooManyHeaders, Some(400))
        );
        // Varnish parameters: 64 slots, 5 of them for the first line.
        assert_eq!(Limits::from_varnish_params(8192, 32768, 64).max_headers, 59);
        // More slots than fit on the stack.
        let big = Limits {
            max_headers: 300,
            ..Limits::request()
        };
        let mut s = String::from("GET / HTTP/1.1\r\nHost: a\r\n");
        for i in 0..250 {
            s.push_str(&format!("X-{i}: {i}\r\n"));
        }
        s.push_str("\r\n");
        let (h, _) = parse_request(s.as_bytes(), &big).unwrap().unwrap();
        assert_eq!(h.headers.len(), 251);
    }

    #[test]
    fn host_rules() {
        let e = req_err("GET / HTTP/1.1\r\n\r\n");
        assert_eq!((e.kind(), e.status()), (ErrorKind::Host, Some(400)));
        let e = req_err("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n");
        assert_eq!(e.message(), "Multiple Host: headers");
        // HTTP/1.0 may omit Host.
        assert!(!ok_req("GET / HTTP/1.0\r\n\r\n").headers.contains("host"));
        let lax = Limits {
            require_host: false,
            ..Limits::request()
        };
        assert!(
            parse_request(b"GET / HTTP/1.1\r\n\r\n", &lax)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn absolute_form_rewritten() {
        let h = ok_req("GET http://Example.com:8080/a/b?c HTTP/1.1\r\nHost: other\r\nX: 1\r\n\r\n");
        assert_eq!(&h.target[..], b"/a/b?c");
        assert_eq!(h.headers.get("host"), Some(&b"Example.com:8080"[..]));
        assert_eq!(h.headers.count("host"), 1);
        // Host is re-added at the end, as varnishd does.
        assert_eq!(h.headers.iter().last().unwrap().0, b"Host");
        // Absolute form replaces even duplicated Host fields.
        let h = ok_req("GET HTTP://a/ HTTP/1.1\r\nHost: b\r\nHost: c\r\n\r\n");
        assert_eq!(h.headers.get("host"), Some(&b"a"[..]));
        assert_eq!(&h.target[..], b"/");
        // No path: left alone (and Host is then required as usual).
        let h = ok_req("GET http://a HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(&h.target[..], b"http://a");
        // https only with the feature.
        let h = ok_req("GET https://a/x HTTP/1.1\r\nHost: b\r\n\r\n");
        assert_eq!(&h.target[..], b"https://a/x");
        let l = Limits {
            https_scheme: true,
            ..Limits::request()
        };
        let (h, _) = parse_request(b"GET https://a/x HTTP/1.1\r\nHost: b\r\n\r\n", &l)
            .unwrap()
            .unwrap();
        assert_eq!(
            (&h.target[..], h.headers.get("host")),
            (&b"/x"[..], Some(&b"a"[..]))
        );
        // HTTP/1.1 without Host but absolute-form: Host comes from the target.
        let h = ok_req("GET http://a/ HTTP/1.1\r\n\r\n");
        assert_eq!(h.headers.get("host"), Some(&b"a"[..]));
        // The added Host still counts towards the field limit.
        let two = Limits {
            max_headers: 2,
            ..Limits::request()
        };
        let full = b"GET http://a/ HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n";
        let e = parse_request(full, &two).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TooManyHeaders);
        let replaced = b"GET http://a/ HTTP/1.1\r\nA: 1\r\nHost: b\r\n\r\n";
        assert!(parse_request(replaced, &two).unwrap().is_some());
    }

    #[test]
    fn obs_fold_can_be_refused() {
        let l = Limits {
            allow_obs_fold: false,
            ..Limits::request()
        };
        let e = parse_request(b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n", &l).unwrap_err();
        assert_eq!(e.status(), Some(400));
        let e = parse_response(b"HTTP/1.1 200 OK\r\nX: 1\r\n\t2\r\n\r\n", &l).unwrap_err();
        assert_eq!(e.status(), Some(503));
    }

    #[test]
    fn fold_incomplete_waits() {
        let s = b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n";
        assert!(parse_request(s, &Limits::request()).unwrap().is_none());
    }

    #[test]
    fn buf_variant_splits_without_copy() {
        let mut b =
            BytesMut::from(&b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET"[..]);
        let h = parse_request_buf(&mut b, &Limits::request())
            .unwrap()
            .unwrap();
        assert_eq!(h.body, BodyKind::Length(3));
        assert_eq!(&b[..], b"abcGET");
        let mut partial = BytesMut::from(&b"GET / HTTP/1.1\r\nHo"[..]);
        assert!(
            parse_request_buf(&mut partial, &Limits::request())
                .unwrap()
                .is_none()
        );
        assert_eq!(partial.len(), 18);
        let mut bad = BytesMut::from(&b"GET / HTTP/1.1\r\n\r\nnext"[..]);
        assert!(parse_request_buf(&mut bad, &Limits::request()).is_err());
        assert_eq!(&bad[..], b"GET / HTTP/1.1\r\n\r\nnext");
        let mut fold = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n  2\r\n\r\nz"[..]);
        let h = parse_request_buf(&mut fold, &Limits::request())
            .unwrap()
            .unwrap();
        assert_eq!(h.headers.get("x"), Some(&b"1    2"[..]));
        assert_eq!(&fold[..], b"z");
    }

    #[test]
    fn responses() {
        let (r, len) = resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            .unwrap()
            .unwrap();
        assert_eq!(len, 38);
        assert_eq!(
            (r.version, r.status, &r.reason[..]),
            (Version::Http11, 200, &b"OK"[..])
        );
        assert_eq!(r.body_kind(false).unwrap(), BodyKind::Length(5));
        assert_eq!(r.body_kind(true).unwrap(), BodyKind::None);
        let (r, _) = resp("HTTP/1.0 404\r\n\r\n").unwrap().unwrap();
        assert_eq!(
            (r.version, &r.reason[..]),
            (Version::Http10, &b"Not Found"[..])
        );
        let (r, _) = resp("HTTP/1.1 200 Very  Fine Thanks\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(&r.reason[..], b"Very  Fine Thanks");
        assert!(resp("HTTP/1.1 200 OK\r\n").unwrap().is_none());
        for bad in [
            "HTTP/1.1 20 OK\r\n\r\n",
            "HTTP/1.1 099 Low\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "HTTP/0.9 200 OK\r\n\r\n",
            "HTTP/2 200 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n",
            "ICY 200 OK\r\n\r\n",
        ] {
            let e = resp(bad).expect_err(bad);
            assert_eq!(e.status(), Some(503), "{bad}");
        }
    }

    #[test]
    fn garbage_is_the_first_field_once_split() {
        assert_eq!(garbage(b"GET /\x01 HTTP/1.1\r\n\r\n"), b"GET");
        assert_eq!(garbage(b"\r\nPOST\t/ HTTP/1.1\r\n\r\n"), b"\r\nPOST");
        assert_eq!(garbage(b"HTTP/1.1 2x0 OK\r\n\r\n"), b"HTTP/1.1");
        let whole = b"G\x7fT / HTTP/1.1\r\n\r\n";
        assert_eq!(garbage(whole), whole);
    }

    #[test]
    fn response_version_letter_case_is_read_as_varnishd_does() {
        for (v, want) in [
            ("http/1.1", Version::Http11),
            ("hTtP/1.0", Version::Http10),
            ("http/2.0", Version::Http11),
        ] {
            let wire = format!("{v} 200 OK\r\nContent-Length: 2\r\n\r\nok");
            let (r, _) = resp(&wire).unwrap().unwrap();
            assert_eq!((r.version, r.status), (want, 200), "{v}");
        }
        assert!(resp("http/0.9 200 OK\r\n\r\n").is_err());
        assert!(resp("htp/1.1 200 OK\r\n\r\n").is_err());
    }

    #[test]
    fn later_response_versions_read_as_http11() {
        for v in ["HTTP/2.0", "HTTP/1.2", "HTTP/9.9"] {
            let wire = format!("{v} 200 OK\r\nContent-Length: 2\r\n\r\nok");
            let (r, len) = resp(&wire).unwrap().unwrap();
            assert_eq!(
                (r.version, r.status, len),
                (Version::Http11, 200, wire.len() - 2)
            );
            let mut buf = BytesMut::from(wire.as_bytes());
            let r = parse_response_buf(&mut buf, &Limits::response())
                .unwrap()
                .unwrap();
            assert_eq!((r.version, &buf[..]), (Version::Http11, &b"ok"[..]));
        }
    }

    #[test]
    fn response_fold_c00040() {
        let l = Limits {
            max_line: 40,
            max_head: 256,
            ..Limits::response()
        };
        let ok = "HTTP/1.1 200 OK\r\n1...5: ..0....5....0\n ..5....0....5....0\r\n\r\n";
        let (r, _) = parse_response(ok.as_bytes(), &l).unwrap().unwrap();
        assert_eq!(r.headers.len(), 1);
        let bad = "HTTP/1.1 200 OK\r\n1...5: ..0....5....0\n ..5....0....5....0.\r\n\r\n";
        assert_eq!(
            parse_response(bad.as_bytes(), &l).unwrap_err().status(),
            Some(503)
        );
        let mut big = BytesMut::from(&b"HTTP/1.1 200 OK\r\n"[..]);
        big.extend_from_slice(&[b'x'; 300]);
        let e = parse_response_buf(&mut big, &l).unwrap_err();
        assert_eq!((e.kind(), e.status()), (ErrorKind::HeadTooLarge, Some(503)));
        let mut ok_buf = BytesMut::from(&b"HTTP/1.1 204 No Content\r\n\r\nHTTP"[..]);
        let r = parse_response_buf(&mut ok_buf, &l).unwrap().unwrap();
        assert_eq!(r.status, 204);
        assert_eq!(&ok_buf[..], b"HTTP");
    }

    #[test]
    fn version_helpers() {
        assert_eq!(Version::from_bytes(b"HTTP/1.1"), Some(Version::Http11));
        assert_eq!(Version::from_bytes(b"HTTP/1.2"), None);
        assert_eq!(Version::Http10.as_str(), "HTTP/1.0");
        let r = ResponseHead::new(503);
        assert_eq!(&r.reason[..], b"Service Unavailable");
        let q = RequestHead::new("HEAD", "/", Version::Http11);
        assert!(q.is_head());
    }

    #[test]
    fn parsed_headers_can_be_edited() {
        let mut h = ok_req("GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nCookie: c\r\nx-a: 2\r\n\r\n");
        h.headers.set("X-A", "3");
        h.headers.append("Via", "1.1 lacquer");
        assert_eq!(h.headers.remove("cookie"), 1);
        h.target = Bytes::from_static(b"/new");
        let mut out = Vec::new();
        crate::write_request_head(&h, &mut out);
        assert_eq!(
            out,
            b"GET /new HTTP/1.1\r\nHost: a\r\nX-A: 3\r\nVia: 1.1 lacquer\r\n\r\n"
        );
        // Copies share the parsed buffer and stay valid after the original goes.
        let mut copy = Headers::new();
        h.headers.copy_filtered(0, &mut copy);
        drop(h);
        assert_eq!(copy.get("host"), Some(&b"a"[..]));
        assert_eq!(copy.len(), 3);
    }

    #[test]
    fn may_complete_needs_a_line_feed() {
        assert!(!may_complete_head(b"GET / HTTP/1.1\r"));
        assert!(may_complete_head(b"\n"));
    }

    #[test]
    fn find_head_end_cases() {
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\n"), Some(18));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
        assert_eq!(find_head_end(b"\r\nGET / HTTP/1.1\r\n\r\n"), Some(20));
        assert_eq!(find_head_end(b""), None);
    }
}
