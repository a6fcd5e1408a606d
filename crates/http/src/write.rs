//! Serialising message heads into an output buffer.
//!
//! Heads are written as `method SP target SP version CRLF` or
//! `version SP status SP reason CRLF`, then each field as `name: value CRLF`
//! in list order with the name spelled as stored, then the empty line. The
//! space needed is computed first and reserved once, so a head costs at most
//! one buffer growth.

use bytes::BytesMut;

use crate::parse::{RequestHead, ResponseHead};

/// An output buffer the codec can append to (`Vec<u8>` or `BytesMut`).
pub trait WriteBuf {
    /// Makes room for at least `n` more bytes.
    fn reserve_bytes(&mut self, n: usize);
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
}

impl WriteBuf for Vec<u8> {
    #[inline]
    fn reserve_bytes(&mut self, n: usize) {
        self.reserve(n);
    }
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl WriteBuf for BytesMut {
    #[inline]
    fn reserve_bytes(&mut self, n: usize) {
        self.reserve(n);
    }
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Bytes [`write_request_head`] produces for `head`.
pub fn request_head_len(head: &RequestHead) -> usize {
    head.method.len() + head.target.len() + 8 + 4 + head.headers.wire_len() + 2
}

/// Bytes [`write_response_head`] produces for `head`.
pub fn response_head_len(head: &ResponseHead) -> usize {
    8 + 1
        + status_digits(head.status).len()
        + 1
        + head.reason.len()
        + 2
        + head.headers.wire_len()
        + 2
}

/// Appends the request line, the fields and the empty line.
pub fn write_request_head(head: &RequestHead, out: &mut impl WriteBuf) {
    out.reserve_bytes(request_head_len(head));
    out.put(&head.method);
    out.put(b" ");
    out.put(&head.target);
    out.put(b" ");
    out.put(head.version.as_str().as_bytes());
    out.put(b"\r\n");
    head.headers.write_to(out);
    out.put(b"\r\n");
}

/// Appends the status line (`HTTP/1.1 200 OK`), the fields and the empty line.
pub fn write_response_head(head: &ResponseHead, out: &mut impl WriteBuf) {
    out.reserve_bytes(response_head_len(head));
    out.put(head.version.as_str().as_bytes());
    out.put(b" ");
    out.put(&status_digits(head.status));
    out.put(b" ");
    out.put(&head.reason);
    out.put(b"\r\n");
    head.headers.write_to(out);
    out.put(b"\r\n");
}

/// Appends varnishd's minimal answer, `HTTP/1.1 <status> <reason>` and an
/// empty line with no fields, as sent for a 400 on a bad request, a 417 on an
/// unsupported `Expect`, or the interim `100 Continue`.
pub fn write_minimal_response(status: u16, out: &mut impl WriteBuf) {
    let reason = crate::status::reason_phrase(status).as_bytes();
    out.reserve_bytes(16 + reason.len());
    out.put(b"HTTP/1.1 ");
    out.put(&status_digits(status));
    out.put(b" ");
    out.put(reason);
    out.put(b"\r\n\r\n");
}

/// The status as at least three decimal digits (Varnish prints `%03d`).
fn status_digits(status: u16) -> StatusDigits {
    let mut buf = [b'0'; 5];
    let mut n = status;
    let mut i = buf.len();
    while n > 0 {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    StatusDigits {
        buf,
        start: i.min(2),
    }
}

struct StatusDigits {
    buf: [u8; 5],
    start: usize,
}

impl std::ops::Deref for StatusDigits {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// Appends `n` in decimal (for Content-Length values and the like).
pub fn write_decimal(n: u64, out: &mut impl WriteBuf) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.put(&buf[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{Limits, Version, parse_request, parse_response};

    #[test]
    fn request_roundtrip() {
        let wire =
            b"GET /a?b HTTP/1.1\r\nHost: x\r\nX-Mixed-CASE: v\r\nx-dup: 1\r\nX-Dup: 2\r\n\r\n";
        let (h, _) = parse_request(wire, &Limits::request()).unwrap().unwrap();
        let mut out = Vec::new();
        write_request_head(&h, &mut out);
        assert_eq!(out, wire);
        assert_eq!(out.len(), request_head_len(&h));
    }

    #[test]
    fn response_lines() {
        let mut r = ResponseHead::new(200);
        r.headers.append("Content-Length", "5");
        r.headers.append("X-a", "b");
        let mut out = BytesMut::new();
        write_response_head(&r, &mut out);
        assert_eq!(
            &out[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-a: b\r\n\r\n"
        );
        assert_eq!(out.len(), response_head_len(&r));
        let mut r = ResponseHead::new(7);
        r.version = Version::Http10;
        let mut out = Vec::new();
        write_response_head(&r, &mut out);
        assert_eq!(out, b"HTTP/1.0 007 Unknown HTTP Status\r\n\r\n");
        assert_eq!(out.len(), response_head_len(&r));
        let r = ResponseHead::new(65535);
        let mut out = Vec::new();
        write_response_head(&r, &mut out);
        assert!(out.starts_with(b"HTTP/1.1 65535 "));
        assert_eq!(out.len(), response_head_len(&r));
    }

    #[test]
    fn response_roundtrip_keeps_reason() {
        let wire = b"HTTP/1.1 404 Nope Nope\r\nA: 1\r\n\r\n";
        let (r, _) = parse_response(wire, &Limits::response()).unwrap().unwrap();
        let mut out = Vec::new();
        write_response_head(&r, &mut out);
        assert_eq!(out, wire);
    }

    #[test]
    fn minimal_responses() {
        let mut out = Vec::new();
        write_minimal_response(400, &mut out);
        assert_eq!(out, b"HTTP/1.1 400 Bad Request\r\n\r\n");
        let mut out = BytesMut::new();
        write_minimal_response(100, &mut out);
        assert_eq!(&out[..], b"HTTP/1.1 100 Continue\r\n\r\n");
    }

    #[test]
    fn decimal() {
        for n in [0u64, 7, 10, 12345, u64::MAX] {
            let mut out = Vec::new();
            write_decimal(n, &mut out);
            assert_eq!(out, n.to_string().as_bytes());
        }
    }
}
