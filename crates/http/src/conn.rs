//! Connection semantics: persistence, hop-by-hop fields, `Expect`.
//!
//! [`do_connection`] is varnishd's `http_DoConnection`: it merges the
//! `Connection` fields, decides whether the connection stays open, and marks
//! every field the `Connection` header names so it is not forwarded, refusing
//! (400) a `Connection` header that would strip a well-known end-to-end field
//! such as `Content-Length` or `Host` (a classic way to desynchronise a proxy
//! and its backend). [`header_flags`] is Varnish's table of well-known headers
//! with the copy operations that drop them (`http_headers.h`).

use crate::error::{Error, ErrorKind, excerpt};
use crate::headers::{Headers, tokens, trim};
use crate::parse::Version;

/// Dropped when copying a request to the backend in pass/pipe mode
/// (Varnish `HTTPH_R_PASS`).
pub const FILTER_PASS: u8 = 1 << 0;
/// Dropped when copying a request to the backend for a cache fetch
/// (Varnish `HTTPH_R_FETCH`).
pub const FILTER_FETCH: u8 = 1 << 1;
/// Dropped when inserting a backend response into the cache
/// (Varnish `HTTPH_A_INS`).
pub const FILTER_INSERT: u8 = 1 << 2;
/// Dropped when a backend response becomes an uncacheable object (pass,
/// hit-for-miss/pass; Varnish `HTTPH_A_PASS`).
pub const FILTER_PASS_OBJ: u8 = 1 << 3;

const P: u8 = FILTER_PASS;
const F: u8 = FILTER_FETCH;
const I: u8 = FILTER_INSERT;
const A: u8 = FILTER_PASS_OBJ;

/// The well-known headers and their filter flags, as varnishd 7.1.1 applies
/// them (observed: a backend's `Keep-Alive` never reaches the client, and a
/// pass object loses the backend's `Age`, which delivery then recomputes).
const WELL_KNOWN: &[(&str, u8)] = &[
    ("Keep-Alive", P | F | I | A),
    ("Accept", 0),
    ("Accept-Charset", 0),
    ("Accept-Encoding", 0),
    ("Accept-Language", 0),
    ("Accept-Ranges", F | I),
    ("Age", I | A),
    ("Allow", 0),
    ("Authorization", 0),
    ("Cache-Control", F),
    ("Connection", P | F | I | A),
    ("Content-Encoding", 0),
    ("Content-Language", 0),
    // Kept for a cache fetch too: varnishd 7.1 sends a miss the client's
    // body unless VCL unsets bereq.body (which then drops the length).
    ("Content-Length", 0),
    ("Content-Location", 0),
    ("Content-MD5", 0),
    ("Content-Range", F | I),
    ("Content-Type", 0),
    ("Cookie", 0),
    ("Date", 0),
    ("ETag", 0),
    ("Expect", 0),
    ("Expires", 0),
    ("From", 0),
    ("Host", 0),
    ("HTTP2-Settings", P | F | I | A),
    ("If-Match", F),
    ("If-Modified-Since", F),
    ("If-None-Match", F),
    ("If-Range", F),
    ("If-Unmodified-Since", F),
    ("Last-Modified", 0),
    ("Location", 0),
    ("Max-Forwards", 0),
    ("Pragma", 0),
    ("Proxy-Authenticate", F | I),
    ("Proxy-Authorization", F | I),
    ("Range", F | I),
    ("Referer", 0),
    ("Retry-After", 0),
    ("Server", 0),
    ("Set-Cookie", 0),
    ("TE", P | F | I | A),
    ("Trailer", P | F | I | A),
    ("Transfer-Encoding", P | F | I | A),
    ("Upgrade", P | F | I | A),
    ("User-Agent", 0),
    ("Vary", 0),
    ("Via", 0),
    ("Warning", 0),
    ("WWW-Authenticate", 0),
    ("X-Forwarded-For", 0),
];

fn well_known(name: &[u8]) -> Option<u8> {
    WELL_KNOWN
        .iter()
        .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
        .map(|&(_, f)| f)
}

/// Filter flags of a header name (`FILTER_*` bits; 0 for unknown names).
pub fn header_flags(name: &[u8]) -> u8 {
    // Cheap pre-check: most fields are not in the table at all.
    match name.first().map(u8::to_ascii_lowercase) {
        Some(b'k' | b'a' | b'c' | b'h' | b'i' | b'p' | b'r' | b't' | b'u') => {
            well_known(name).unwrap_or(0)
        }
        _ => 0,
    }
}

/// Whether a connection stays open after the current exchange, as decided
/// from one message's `Connection` header and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Keep the connection open.
    KeepAlive,
    /// `Connection: close` was sent (Varnish `SC_REQ_CLOSE` / `SC_RESP_CLOSE`).
    Close,
    /// HTTP/1.0 without `Connection: keep-alive` (Varnish `SC_REQ_HTTP10`).
    Http10,
}

impl Persistence {
    /// True for [`Persistence::KeepAlive`].
    pub fn keep_alive(self) -> bool {
        self == Persistence::KeepAlive
    }
}

/// Varnish `http_DoConnection`: merges all `Connection` fields into one,
/// decides persistence (the last of `close` / `keep-alive` wins; HTTP/1.0
/// defaults to close), and marks every field named by a token as filtered
/// (see [`Headers::copy_filtered`]). Refuses a token naming a well-known
/// header that would otherwise be forwarded in pass mode: the error carries
/// 400 (a client request); on a backend response varnishd fails the fetch
/// instead (503).
pub fn do_connection(headers: &mut Headers, version: Version) -> Result<Persistence, Error> {
    let mut persist = match version {
        Version::Http10 => Persistence::Http10,
        Version::Http11 => Persistence::KeepAlive,
    };
    headers.collect("connection");
    let Some(value) = headers.get("connection").map(<[u8]>::to_vec) else {
        return Ok(persist);
    };
    for token in tokens(&value) {
        if token.eq_ignore_ascii_case(b"close") {
            persist = Persistence::Close;
        }
        if token.eq_ignore_ascii_case(b"keep-alive") {
            persist = Persistence::KeepAlive;
        }
        if let Some(flags) = well_known(token)
            && flags & FILTER_PASS == 0
        {
            return Err(Error::req(
                ErrorKind::Connection,
                format!(
                    "Connection header names end-to-end header {}",
                    excerpt(token)
                ),
            ));
        }
        headers.mark_filtered(token);
    }
    Ok(persist)
}

/// Persistence of one message without changing its headers.
pub fn persistence(headers: &Headers, version: Version) -> Persistence {
    let mut persist = match version {
        Version::Http10 => Persistence::Http10,
        Version::Http11 => Persistence::KeepAlive,
    };
    for v in headers.get_all(b"connection") {
        for token in tokens(v) {
            if token.eq_ignore_ascii_case(b"close") {
                persist = Persistence::Close;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                persist = Persistence::KeepAlive;
            }
        }
    }
    persist
}

/// RFC 9112 §9.3 for a request/response pair: the connection stays open only
/// if both messages allow it.
pub fn keep_alive(
    req_version: Version,
    req_headers: &Headers,
    resp_version: Version,
    resp_headers: &Headers,
) -> bool {
    persistence(req_headers, req_version).keep_alive()
        && persistence(resp_headers, resp_version).keep_alive()
}

/// The hop-by-hop fields of RFC 9110 §7.6.1, plus `Proxy-Connection`.
const HOP_BY_HOP: &[&str] = &[
    "Connection",
    "Keep-Alive",
    "Proxy-Connection",
    "TE",
    "Trailer",
    "Transfer-Encoding",
    "Upgrade",
];

/// Removes the fields named by `Connection` and the standard hop-by-hop
/// fields, for building a message to forward.
pub fn strip_hop_by_hop(headers: &mut Headers) {
    let listed: Vec<Vec<u8>> = headers
        .get_all(b"connection")
        .flat_map(tokens)
        .map(<[u8]>::to_vec)
        .collect();
    headers.retain(|name, _| {
        !HOP_BY_HOP
            .iter()
            .any(|h| h.as_bytes().eq_ignore_ascii_case(name))
            && !listed.iter().any(|l| l.eq_ignore_ascii_case(name))
    });
}

/// What a request's `Expect` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// No `Expect` header.
    None,
    /// `Expect: 100-continue` (case-insensitive).
    Continue,
    /// Anything else: varnishd answers 417 and closes.
    Unsupported,
}

/// Classifies the first `Expect` header, as varnishd does. varnishd then
/// removes the field; it sends the interim `100 Continue` only for an
/// HTTP/1.1 request with no pipelined bytes already received: right after
/// `vcl_recv`, or when the body is first read if VCL asked for
/// `std.late_100_continue(true)`.
pub fn expect(headers: &Headers) -> Expect {
    match headers.get("expect") {
        None => Expect::None,
        Some(v) if trim(v).eq_ignore_ascii_case(b"100-continue") => Expect::Continue,
        Some(_) => Expect::Unsupported,
    }
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

    #[test]
    fn flags_table() {
        assert_eq!(header_flags(b"transfer-encoding"), P | F | I | A);
        assert_eq!(header_flags(b"Content-Length"), 0);
        assert_eq!(header_flags(b"HOST"), 0);
        assert_eq!(header_flags(b"X-Foo"), 0);
        assert_eq!(header_flags(b""), 0);
        assert_eq!(header_flags(b"Proxy-Authenticate"), F | I);
        assert_eq!(header_flags(b"Proxy-Authenticat"), 0);
        assert_eq!(header_flags(b"Keep-Alive"), P | F | I | A);
        assert_eq!(header_flags(b"Age"), I | A);
        // Every table entry is reachable through the pre-check.
        for (n, f) in WELL_KNOWN {
            assert_eq!(header_flags(n.as_bytes()), *f, "{n}");
        }
    }

    #[test]
    fn do_connection_varnish_c00016() {
        let mut h = hdrs(&[("Foo", "bar2"), ("Connection", "FromVCL, foo, close")]);
        assert_eq!(
            do_connection(&mut h, Version::Http11).unwrap(),
            Persistence::Close
        );
        assert!(h.is_filtered("foo"));
        assert!(h.contains("foo"));
        let mut out = Headers::new();
        h.copy_filtered(FILTER_FETCH, &mut out);
        assert!(!out.contains("foo"));
        assert!(!out.contains("connection"));
        // Names a header that would pass: refused.
        let mut h = hdrs(&[("Age", "200"), ("Connection", "Age")]);
        let e = do_connection(&mut h, Version::Http11).unwrap_err();
        assert_eq!((e.kind(), e.status()), (ErrorKind::Connection, Some(400)));
        for name in ["Content-Length", "host", "Cookie", "X-Forwarded-For"] {
            let mut h = hdrs(&[("Connection", "x")]);
            h.append("Connection", name);
            assert!(do_connection(&mut h, Version::Http11).is_err(), "{name}");
        }
        // Hop-by-hop ones may be named.
        let mut h = hdrs(&[
            ("Connection", "Upgrade, Keep-Alive, TE"),
            ("Upgrade", "h2c"),
        ]);
        assert!(do_connection(&mut h, Version::Http11).is_ok());
        assert!(h.is_filtered("upgrade"));
    }

    #[test]
    fn do_connection_merges_and_persistence() {
        let mut h = hdrs(&[
            ("Connection", "close"),
            ("X", "1"),
            ("connection", "keep-alive"),
        ]);
        assert_eq!(
            do_connection(&mut h, Version::Http11).unwrap(),
            Persistence::KeepAlive
        );
        assert_eq!(h.count("connection"), 1);
        assert_eq!(h.get("connection"), Some(&b"close, keep-alive"[..]));
        let mut h = Headers::new();
        assert_eq!(
            do_connection(&mut h, Version::Http10).unwrap(),
            Persistence::Http10
        );
        let mut h = hdrs(&[("Connection", "Keep-Alive")]);
        assert_eq!(
            do_connection(&mut h, Version::Http10).unwrap(),
            Persistence::KeepAlive
        );
    }

    #[test]
    fn keep_alive_pairs() {
        let none = Headers::new();
        let close = hdrs(&[("Connection", "close")]);
        let ka = hdrs(&[("Connection", "keep-alive")]);
        use Version::{Http10, Http11};
        assert!(keep_alive(Http11, &none, Http11, &none));
        assert!(!keep_alive(Http11, &close, Http11, &none));
        assert!(!keep_alive(Http11, &none, Http11, &close));
        assert!(!keep_alive(Http10, &none, Http11, &none));
        assert!(keep_alive(Http10, &ka, Http11, &none));
        assert!(!keep_alive(Http11, &none, Http10, &none));
        assert!(keep_alive(Http11, &none, Http10, &ka));
        assert_eq!(persistence(&close, Http11), Persistence::Close);
    }

    #[test]
    fn hop_by_hop_removed() {
        let mut h = hdrs(&[
            ("Host", "a"),
            ("Connection", "X-Secret, close"),
            ("X-Secret", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Connection", "keep-alive"),
            ("Transfer-Encoding", "chunked"),
            ("TE", "trailers"),
            ("Upgrade", "websocket"),
            ("Trailer", "X"),
            ("X-Kept", "y"),
        ]);
        strip_hop_by_hop(&mut h);
        let names: Vec<_> = h.iter().map(|(n, _)| n.to_vec()).collect();
        assert_eq!(names, vec![b"Host".to_vec(), b"X-Kept".to_vec()]);
    }

    #[test]
    fn expect_header() {
        assert_eq!(expect(&Headers::new()), Expect::None);
        assert_eq!(
            expect(&hdrs(&[("Expect", "100-Continue")])),
            Expect::Continue
        );
        assert_eq!(expect(&hdrs(&[("Expect", "200-ok")])), Expect::Unsupported);
    }
}
