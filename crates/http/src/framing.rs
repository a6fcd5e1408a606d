//! Body framing: how many bytes of body follow a head, decided strictly.
//!
//! This is where request smuggling is stopped. The rules are varnishd's
//! (`http1_body_status`, `cnt_recv`, `V1F_FetchRespHdr`) made stricter where
//! Varnish picks one of several readings: every message that two HTTP/1
//! implementations could frame differently is refused, never forwarded.
//!
//! Requests (refused with 400):
//! - more than one `Content-Length` field, even with equal values (Varnish);
//! - a `Content-Length` that is not plain decimal digits (no sign, no list,
//!   no spaces inside) or exceeds 2^63-1;
//! - `Transfer-Encoding` with any value but `chunked` (case-insensitive), in
//!   any of its fields (several fields all saying `chunked` are accepted, as
//!   varnishd, which reads the first), or together with `Content-Length`;
//! - an HTTP/1.0 POST or PUT with neither (its body would run to EOF);
//! - a HEAD request with a body.
//!
//! Responses (the fetch fails, 503): the same Content-Length and
//! Transfer-Encoding rules, except that equal duplicate Content-Length values
//! are accepted (RFC 9110 §8.6); a 204 with a non-zero length or any
//! Transfer-Encoding. Responses to HEAD, 1xx and 304 have no body whatever
//! their headers say; a response with neither length nor chunking runs to EOF
//! unless it says `Connection: keep-alive` (then varnishd assumes no body).

use crate::error::{Error, ErrorKind, excerpt};
use crate::headers::{Headers, trim};
use crate::parse::{ResponseHead, Version};

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body.
    None,
    /// Exactly this many bytes (never 0: a zero length is `None`).
    Length(u64),
    /// Chunked transfer coding; decode with [`crate::ChunkedDecoder`].
    Chunked,
    /// Until the connection closes (responses only).
    Eof,
}

/// Largest accepted Content-Length (Varnish uses `ssize_t`).
const MAX_LENGTH: u64 = i64::MAX as u64;

/// Parses a Content-Length value: decimal digits only (the parser has already
/// trimmed surrounding whitespace), at most 2^63-1.
pub fn parse_content_length(v: &[u8]) -> Option<u64> {
    let v = trim(v);
    if v.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    (n <= MAX_LENGTH).then_some(n)
}

/// What the Content-Length and Transfer-Encoding fields say, before any
/// method or status rule.
fn header_framing(
    headers: &Headers,
    allow_equal_duplicates: bool,
    err: fn(ErrorKind, String) -> Error,
) -> Result<Option<BodyKind>, Error> {
    let mut length = None;
    for v in headers.get_all(b"content-length") {
        let Some(n) = parse_content_length(v) else {
            return Err(err(
                ErrorKind::Framing,
                format!("Content-Length is not a valid length: {}", excerpt(v)),
            ));
        };
        match length {
            None => length = Some(n),
            Some(prev) if prev == n && allow_equal_duplicates => {}
            Some(_) => {
                return Err(err(
                    ErrorKind::Framing,
                    "Multiple Content-Length: headers".to_string(),
                ));
            }
        }
    }
    let mut te = headers.get_all(b"transfer-encoding").peekable();
    if te.peek().is_some() {
        // varnishd reads the first field only; several all saying
        // `chunked` mean the same to both readings, any other is refused.
        if let Some(v) = te.find(|v| !trim(v).eq_ignore_ascii_case(b"chunked")) {
            return Err(err(
                ErrorKind::Framing,
                format!("Unsupported Transfer-Encoding: {}", excerpt(v)),
            ));
        }
        if length.is_some() {
            return Err(err(
                ErrorKind::Framing,
                "Both Content-Length and Transfer-Encoding".to_string(),
            ));
        }
        return Ok(Some(BodyKind::Chunked));
    }
    Ok(length.map(|n| {
        if n == 0 {
            BodyKind::None
        } else {
            BodyKind::Length(n)
        }
    }))
}

fn req_err(kind: ErrorKind, msg: String) -> Error {
    Error::req(kind, msg)
}

fn resp_err(kind: ErrorKind, msg: String) -> Error {
    Error::resp(kind, msg)
}

/// The body framing of a request (see the module docs for what is refused).
/// Requests never run to EOF: where varnishd would, it assumes no body.
pub fn request_body_kind(
    method: &[u8],
    version: Version,
    headers: &Headers,
) -> Result<BodyKind, Error> {
    let kind = match header_framing(headers, false, req_err)? {
        Some(k) => k,
        None if version == Version::Http11 => BodyKind::None,
        None if headers.value_is("connection", "keep-alive") => BodyKind::None,
        None => {
            // HTTP/1.0 would read to EOF (RFC 1945 §8.3, D.1.1): refuse the
            // methods that carry a body, assume none for the others.
            if method == b"POST" || method == b"PUT" {
                return Err(Error::req(
                    ErrorKind::Framing,
                    "HTTP/1.0 POST/PUT without Content-Length",
                ));
            }
            BodyKind::None
        }
    };
    if kind != BodyKind::None && method == b"HEAD" {
        return Err(Error::req(ErrorKind::Framing, "HEAD request with a body"));
    }
    Ok(kind)
}

/// The body framing of a response, given whether it answers a HEAD request
/// (see the module docs).
pub fn response_body_kind(resp: &ResponseHead, head_request: bool) -> Result<BodyKind, Error> {
    if head_request || resp.status < 200 || resp.status == 304 {
        return Ok(BodyKind::None);
    }
    let h = &resp.headers;
    if resp.status == 204 {
        let bad_len = h.get("content-length").is_some_and(|v| trim(v) != b"0");
        if bad_len || h.contains("transfer-encoding") {
            return Err(Error::resp(
                ErrorKind::Framing,
                "204 response with a body length or Transfer-Encoding",
            ));
        }
        return Ok(BodyKind::None);
    }
    Ok(match header_framing(h, true, resp_err)? {
        Some(k) => k,
        None if h.value_is("connection", "keep-alive") => BodyKind::None,
        None => BodyKind::Eof,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdrs(pairs: &[(&'static str, &'static str)]) -> Headers {
        let mut h = Headers::new();
        for &(n, v) in pairs {
            h.append(n, v);
        }
        h
    }

    fn rq(
        method: &str,
        v: Version,
        pairs: &[(&'static str, &'static str)],
    ) -> Result<BodyKind, Error> {
        request_body_kind(method.as_bytes(), v, &hdrs(pairs))
    }

    fn rs(status: u16, pairs: &[(&'static str, &'static str)]) -> Result<BodyKind, Error> {
        let mut r = ResponseHead::new(status);
        r.headers = hdrs(pairs);
        response_body_kind(&r, false)
    }

    use Version::{Http10, Http11};

    #[test]
    fn content_length_syntax() {
        assert_eq!(parse_content_length(b"0"), Some(0));
        assert_eq!(parse_content_length(b" 42 "), Some(42));
        assert_eq!(parse_content_length(b"007"), Some(7));
        assert_eq!(
            parse_content_length(b"9223372036854775807"),
            Some(i64::MAX as u64)
        );
        for bad in [
            &b""[..],
            b"+1",
            b"-1",
            b"1 2",
            b"1,1",
            b"0x10",
            b"1e3",
            b"9223372036854775808",
            b"99999999999999999999999",
        ] {
            assert_eq!(parse_content_length(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn requests() {
        assert_eq!(rq("GET", Http11, &[]).unwrap(), BodyKind::None);
        assert_eq!(
            rq("POST", Http11, &[("Content-Length", "10")]).unwrap(),
            BodyKind::Length(10)
        );
        assert_eq!(
            rq("POST", Http11, &[("Content-Length", "0")]).unwrap(),
            BodyKind::None
        );
        assert_eq!(
            rq("POST", Http11, &[("Transfer-Encoding", "Chunked")]).unwrap(),
            BodyKind::Chunked
        );
        assert_eq!(
            rq("POST", Http10, &[("Transfer-Encoding", "chunked")]).unwrap(),
            BodyKind::Chunked
        );
        assert_eq!(rq("GET", Http10, &[]).unwrap(), BodyKind::None);
        assert_eq!(
            rq("POST", Http10, &[("Connection", "keep-alive")]).unwrap(),
            BodyKind::None
        );
        assert!(rq("POST", Http10, &[]).is_err());
        assert!(rq("PUT", Http10, &[]).is_err());
        assert!(rq("HEAD", Http11, &[("Content-Length", "1")]).is_err());
        assert_eq!(
            rq("HEAD", Http11, &[("Content-Length", "0")]).unwrap(),
            BodyKind::None
        );
        assert!(
            rq(
                "GET",
                Http11,
                &[("Content-Length", "1"), ("Content-Length", "1")]
            )
            .is_err()
        );
        assert!(
            rq(
                "GET",
                Http11,
                &[("Content-Length", "1"), ("Transfer-Encoding", "chunked")]
            )
            .is_err()
        );
        assert!(rq("GET", Http11, &[("Transfer-Encoding", "gzip, chunked")]).is_err());
        let te2 = [
            ("Transfer-Encoding", "chunked"),
            ("Transfer-Encoding", "Chunked"),
        ];
        assert_eq!(rq("POST", Http11, &te2).unwrap(), BodyKind::Chunked);
        let te2 = [
            ("Transfer-Encoding", "chunked"),
            ("Transfer-Encoding", "gzip"),
        ];
        assert!(rq("POST", Http11, &te2).is_err());
        let e = rq("GET", Http11, &[("Content-Length", "x")]).unwrap_err();
        assert_eq!((e.kind(), e.status()), (ErrorKind::Framing, Some(400)));
    }

    #[test]
    fn responses() {
        assert_eq!(rs(200, &[]).unwrap(), BodyKind::Eof);
        assert_eq!(
            rs(200, &[("Connection", "keep-alive")]).unwrap(),
            BodyKind::None
        );
        assert_eq!(
            rs(200, &[("Connection", "keep-alive, x")]).unwrap(),
            BodyKind::Eof
        );
        assert_eq!(
            rs(200, &[("Content-Length", "5")]).unwrap(),
            BodyKind::Length(5)
        );
        assert_eq!(
            rs(200, &[("Content-Length", "5"), ("Content-Length", "5")]).unwrap(),
            BodyKind::Length(5)
        );
        assert!(rs(200, &[("Content-Length", "5"), ("Content-Length", "6")]).is_err());
        assert_eq!(
            rs(200, &[("Transfer-Encoding", "chunked")]).unwrap(),
            BodyKind::Chunked
        );
        assert!(
            rs(
                200,
                &[("Transfer-Encoding", "chunked"), ("Content-Length", "3")]
            )
            .is_err()
        );
        assert!(rs(200, &[("Transfer-Encoding", "identity")]).is_err());
        assert_eq!(
            rs(304, &[("Content-Length", "100")]).unwrap(),
            BodyKind::None
        );
        assert_eq!(rs(100, &[]).unwrap(), BodyKind::None);
        assert_eq!(rs(204, &[("Content-Length", "0")]).unwrap(), BodyKind::None);
        assert_eq!(rs(204, &[]).unwrap(), BodyKind::None);
        assert!(rs(204, &[("Content-Length", "1")]).is_err());
        let e = rs(204, &[("Transfer-Encoding", "chunked")]).unwrap_err();
        assert_eq!(e.status(), Some(503));
        let mut r = ResponseHead::new(200);
        r.headers = hdrs(&[("Transfer-Encoding", "bogus")]);
        assert_eq!(response_body_kind(&r, true).unwrap(), BodyKind::None);
    }
}
