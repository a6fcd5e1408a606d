//! The HTTP objects VCL sees (`req`, `bereq`, `beresp`, `resp`, `obj`) as
//! the server keeps them: a start line whose every field VCL may change,
//! and the header list in wire order and case.
//!
//! Serialisation lives here too, because what goes on the wire is exactly
//! what VCL left in these objects (plus the framing headers Lacquer adds).

use bytes::Bytes;
use lacquer_http::{Headers, RequestHead, ResponseHead, WriteBuf};

/// A request: the client's `req`, or a fetch's `bereq`.
#[derive(Clone, Debug)]
pub struct ReqMsg {
    pub method: Bytes,
    pub url: Bytes,
    pub proto: Bytes,
    pub headers: Headers,
}

/// A response: `beresp`, `resp`, or a stored object's `obj`.
#[derive(Clone, Debug)]
pub struct RespMsg {
    pub proto: Bytes,
    pub status: u16,
    pub reason: Bytes,
    pub headers: Headers,
}

impl From<RequestHead> for ReqMsg {
    fn from(h: RequestHead) -> Self {
        ReqMsg {
            method: h.method,
            url: h.target,
            proto: Bytes::from_static(h.version.as_str().as_bytes()),
            headers: h.headers,
        }
    }
}

impl From<ResponseHead> for RespMsg {
    fn from(h: ResponseHead) -> Self {
        RespMsg {
            proto: Bytes::from_static(h.version.as_str().as_bytes()),
            status: h.status,
            reason: h.reason,
            headers: h.headers,
        }
    }
}

/// Bytes of a request head on the wire.
pub fn request_head_len(h: &RequestHead) -> usize {
    lacquer_http::request_head_len(h)
}

/// The reason phrase Varnish uses for a status.
pub fn reason(status: u16) -> &'static str {
    lacquer_http::reason_phrase(status)
}

impl RespMsg {
    /// A response with `status`, its default reason and no headers.
    pub fn new(status: u16) -> Self {
        RespMsg {
            proto: Bytes::from_static(b"HTTP/1.1"),
            status,
            reason: Bytes::from_static(reason(status).as_bytes()),
            headers: Headers::new(),
        }
    }

    /// Appends the status line and headers (and the final empty line).
    pub fn write_head(&self, out: &mut impl WriteBuf) {
        let status = self.status.min(999);
        out.reserve_bytes(self.proto.len() + self.reason.len() + self.headers.wire_len() + 16);
        out.put(&self.proto);
        out.put(b" ");
        let digits = [
            b'0' + (status / 100) as u8,
            b'0' + (status / 10 % 10) as u8,
            b'0' + (status % 10) as u8,
        ];
        out.put(&digits);
        out.put(b" ");
        out.put(&self.reason);
        out.put(b"\r\n");
        self.headers.write_to(out);
        out.put(b"\r\n");
    }
}

impl ReqMsg {
    /// Appends the request line and headers (and the final empty line).
    pub fn write_head(&self, out: &mut impl WriteBuf) {
        out.reserve_bytes(
            self.method.len() + self.url.len() + self.proto.len() + self.headers.wire_len() + 8,
        );
        out.put(&self.method);
        out.put(b" ");
        out.put(&self.url);
        out.put(b" ");
        out.put(&self.proto);
        out.put(b"\r\n");
        self.headers.write_to(out);
        out.put(b"\r\n");
    }

    /// True for HTTP/1.0 (and anything older).
    pub fn is_http10(&self) -> bool {
        &self.proto[..] == b"HTTP/1.0"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_serialise_in_order() {
        let mut r = RespMsg::new(404);
        r.headers.append("X-B", "2");
        r.headers.append("x-a", "1");
        let mut out = Vec::new();
        r.write_head(&mut out);
        assert_eq!(
            out,
            b"HTTP/1.1 404 Not Found\r\nX-B: 2\r\nx-a: 1\r\n\r\n".to_vec()
        );
        let q = ReqMsg {
            method: "GET".into(),
            url: "/x".into(),
            proto: "HTTP/1.1".into(),
            headers: Headers::new(),
        };
        let mut out = Vec::new();
        q.write_head(&mut out);
        assert_eq!(out, b"GET /x HTTP/1.1\r\n\r\n".to_vec());
    }
}
