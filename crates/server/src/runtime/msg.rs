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

impl ReqMsg {
    /// A request with nothing in it (no allocation): a placeholder until
    /// the real one is known.
    pub fn empty() -> ReqMsg {
        ReqMsg {
            method: Bytes::new(),
            url: Bytes::new(),
            proto: Bytes::new(),
            headers: Headers::new(),
        }
    }
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
        // Statuses above 999 carry VCL signals in their top digits; the
        // wire gets the last three, as varnishd.
        let status = self.status % 1000;
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

/// Request headers seen through the cache's lookup interface.
pub struct HeaderView<'a>(pub &'a lacquer_http::Headers);

impl lacquer_cache::HeaderLookup for HeaderView<'_> {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0.get(name)
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

/// Well-known headers a `Connection` header may not name (varnishd's
/// table minus the hop-by-hop ones): a request that tries is refused.
const END_TO_END: &[&str] = &[
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "cookie",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "set-cookie",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "x-forwarded-for",
];

/// The header names listed in `Connection` (hop-by-hop for this message).
/// `Err` names a well-known end-to-end header, which varnishd refuses.
pub fn connection_tokens(h: &Headers) -> Result<Vec<Bytes>, Bytes> {
    let mut out = Vec::new();
    for (k, v) in h.iter() {
        if !k.eq_ignore_ascii_case(b"connection") {
            continue;
        }
        for t in v.split(|b| *b == b',') {
            let t = t.trim_ascii();
            if t.is_empty()
                || t.eq_ignore_ascii_case(b"close")
                || t.eq_ignore_ascii_case(b"keep-alive")
            {
                continue;
            }
            if END_TO_END
                .iter()
                .any(|n| t.eq_ignore_ascii_case(n.as_bytes()))
            {
                return Err(Bytes::copy_from_slice(t));
            }
            out.push(Bytes::copy_from_slice(t));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod connection_tests {
    use super::*;

    #[test]
    fn connection_names_hop_by_hop_headers() {
        let mut h = Headers::new();
        h.append("Connection", "FromVCL, foo, close");
        h.append("Foo", "1");
        let t = connection_tokens(&h).unwrap();
        assert_eq!(t, vec![Bytes::from("FromVCL"), Bytes::from("foo")]);
        let mut bad = Headers::new();
        bad.append("Connection", "Age");
        assert_eq!(connection_tokens(&bad), Err(Bytes::from("Age")));
    }
}
