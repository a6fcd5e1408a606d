//! Client conditional and partial requests, decided as varnishd does at
//! delivery time.
//!
//! A 200 response becomes a 304 when `If-None-Match` matches its `ETag`
//! (weak comparison), or when there is no `If-None-Match` and
//! `If-Modified-Since` is not older than its `Last-Modified`. A single
//! `bytes=` range of a 200 response becomes a 206; a range varnishd cannot
//! satisfy or parse becomes a 416 with `Content-Range: bytes */LEN`.

use crate::fetch::range::{digits, trim};
use crate::fetch::rfc2616::parse_http_date;

/// Whether a 200 response may be answered with 304 Not Modified.
///
/// `t_req` is when the request arrived: an `If-Modified-Since` in the
/// future is ignored. With `strong` (the request has a `Range`), a weak
/// ETag never matches.
pub fn not_modified(
    strong: bool,
    if_none_match: Option<&[u8]>,
    if_modified_since: Option<&[u8]>,
    etag: Option<&[u8]>,
    last_modified: Option<&[u8]>,
    t_req: f64,
) -> bool {
    if let Some(inm) = if_none_match {
        return etag.is_some_and(|e| {
            if strong {
                etag_list_matches_strongly(inm, e)
            } else {
                etag_list_matches(inm, e)
            }
        });
    }
    if let Some(ims) = if_modified_since {
        let Some(ims) = parse_http_date(ims) else {
            return false;
        };
        if ims > t_req {
            return false;
        }
        return last_modified
            .and_then(parse_http_date)
            .is_some_and(|lm| lm <= ims);
    }
    false
}

fn strip_weak(e: &[u8]) -> &[u8] {
    let e = trim(e);
    e.strip_prefix(b"W/").unwrap_or(e)
}

/// Weak comparison of an `If-None-Match` list (or `*`) with an `ETag`.
pub fn etag_list_matches(list: &[u8], etag: &[u8]) -> bool {
    if trim(list) == b"*" {
        return true;
    }
    let etag = strip_weak(etag);
    list.split(|b| *b == b',').any(|e| strip_weak(e) == etag)
}

/// Strong comparison (RFC 7232 2.3.2), as varnishd uses when the request
/// also has a `Range`: weak tags never match.
pub fn etag_list_matches_strongly(list: &[u8], etag: &[u8]) -> bool {
    let etag = trim(etag);
    if etag.starts_with(b"W/") {
        return false;
    }
    trim(list) == b"*" || list.split(|b| *b == b',').any(|e| trim(e) == etag)
}

/// Whether an `If-Range` lets the `Range` apply (RFC 7233 3.2, as
/// varnishd checks it): none, a strong ETag equal to the response's, or a
/// date equal to its `Last-Modified` that is at least a second older than
/// its `Date`. Otherwise the whole response is sent.
pub fn if_range_allows(
    if_range: Option<&[u8]>,
    etag: Option<&[u8]>,
    last_modified: Option<&[u8]>,
    date: Option<&[u8]>,
) -> bool {
    let Some(ir) = if_range.map(trim) else {
        return true;
    };
    if ir.starts_with(b"\"") {
        return etag.is_some_and(|e| !e.starts_with(b"W/") && trim(e) == ir);
    }
    let (Some(ims), Some(lm), Some(d)) = (
        parse_http_date(ir),
        last_modified.and_then(parse_http_date),
        date.and_then(parse_http_date),
    ) else {
        return false;
    };
    lm == ims && lm + 1.0 <= d
}

/// The outcome of applying a `Range` header to a response body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Deliver the whole body with 200.
    Full,
    /// Deliver bytes `start..=end` with 206 and
    /// `Content-Range: bytes start-end/len` (`len` `*` when unknown).
    Partial { start: u64, end: u64 },
    /// Deliver 416 (`reason` goes to the debug log).
    Unsatisfiable { reason: &'static str },
}

/// Applies `range` to a body of `len` bytes (`None` while the length is
/// not known yet, e.g. a streaming object without Content-Length).
pub fn apply_range(range: &[u8], len: Option<u64>) -> RangeOutcome {
    use RangeOutcome::*;
    let Some(r) = range
        .get(..6)
        .filter(|p| p.eq_ignore_ascii_case(b"bytes="))
        .map(|_| &range[6..])
    else {
        return Unsatisfiable {
            reason: "Not Bytes",
        };
    };
    let (low, rest) = digits(r);
    let Some(rest) = rest.strip_prefix(b"-") else {
        return Unsatisfiable {
            reason: "Missing hyphen",
        };
    };
    let (high, rest) = digits(rest);
    if !rest.is_empty() {
        return Unsatisfiable {
            reason: "Trailing stuff",
        };
    }
    let (low, high) = match (low, high) {
        (Err(()), _) | (_, Err(())) => {
            return Unsatisfiable {
                reason: "Number too big",
            };
        }
        (Ok(l), Ok(h)) => (l, h),
    };
    let (start, end) = match (low, high, len) {
        (None, None, _) => {
            return Unsatisfiable {
                reason: "Neither high nor low",
            };
        }
        (None, Some(_), None) => return Full,
        (None, Some(0), Some(_)) => {
            return Unsatisfiable {
                reason: "No low, high is zero",
            };
        }
        (None, Some(h), Some(len)) => {
            let h = h.min(len);
            (len - h, len.saturating_sub(1))
        }
        (Some(l), h, Some(len)) => {
            let end = match h {
                Some(h) if h < len => h,
                _ => len.saturating_sub(1),
            };
            (l, end)
        }
        // As varnishd 7.1: no length, no range (a 200 with everything).
        (Some(_), _, None) => return Full,
    };
    if end < start {
        return Unsatisfiable {
            reason: "high smaller than low",
        };
    }
    if let Some(len) = len
        && start >= len
    {
        return Unsatisfiable {
            reason: "low range beyond object",
        };
    }
    Partial { start, end }
}

#[cfg(test)]
mod tests {
    use super::RangeOutcome::*;
    use super::*;
    use crate::fetch::rfc2616::format_http_date;

    #[test]
    fn etags() {
        assert!(not_modified(
            false,
            Some(b"\"a\""),
            None,
            Some(b"\"a\""),
            None,
            0.0
        ));
        assert!(not_modified(
            false,
            Some(b"W/\"a\""),
            None,
            Some(b"\"a\""),
            None,
            0.0
        ));
        assert!(not_modified(
            false,
            Some(b"\"x\", \"a\""),
            None,
            Some(b"W/\"a\""),
            None,
            0.0
        ));
        assert!(not_modified(
            false,
            Some(b"*"),
            None,
            Some(b"\"q\""),
            None,
            0.0
        ));
        assert!(!not_modified(
            false,
            Some(b"\"b\""),
            None,
            Some(b"\"a\""),
            None,
            0.0
        ));
        assert!(!not_modified(false, Some(b"*"), None, None, None, 0.0));
        // With a Range, only strong tags match.
        assert!(not_modified(
            true,
            Some(b"\"a\""),
            None,
            Some(b"\"a\""),
            None,
            0.0
        ));
        assert!(!not_modified(
            true,
            Some(b"W/\"a\""),
            None,
            Some(b"\"a\""),
            None,
            0.0
        ));
        assert!(!not_modified(
            true,
            Some(b"\"a\""),
            None,
            Some(b"W/\"a\""),
            None,
            0.0
        ));
        // If-None-Match takes precedence over If-Modified-Since.
        let lm = format_http_date(1000.0);
        assert!(!not_modified(
            false,
            Some(b"\"b\""),
            Some(lm.as_bytes()),
            Some(b"\"a\""),
            Some(lm.as_bytes()),
            2000.0
        ));
    }

    #[test]
    fn modified_since() {
        let lm = format_http_date(1000.0);
        let later = format_http_date(1500.0);
        let earlier = format_http_date(500.0);
        let ims = |v: &String, lm: &String| {
            not_modified(
                false,
                None,
                Some(v.as_bytes()),
                None,
                Some(lm.as_bytes()),
                2000.0,
            )
        };
        assert!(ims(&lm, &lm));
        assert!(ims(&later, &lm));
        assert!(!ims(&earlier, &lm));
        // A date in the future (after the request) is ignored.
        assert!(!not_modified(
            false,
            None,
            Some(format_http_date(3000.0).as_bytes()),
            None,
            Some(lm.as_bytes()),
            2000.0
        ));
        assert!(!not_modified(
            false,
            None,
            Some(b"junk"),
            None,
            Some(lm.as_bytes()),
            2000.0
        ));
        assert!(!not_modified(
            false,
            None,
            Some(lm.as_bytes()),
            None,
            None,
            2000.0
        ));
    }

    #[test]
    fn ranges() {
        let r = |s: &str, len| apply_range(s.as_bytes(), len);
        assert_eq!(r("bytes=0-9", Some(100)), Partial { start: 0, end: 9 });
        assert_eq!(r("bytes=90-", Some(100)), Partial { start: 90, end: 99 });
        assert_eq!(r("bytes=-10", Some(100)), Partial { start: 90, end: 99 });
        assert_eq!(r("bytes=-1000", Some(100)), Partial { start: 0, end: 99 });
        assert_eq!(
            r("bytes=50-1000", Some(100)),
            Partial { start: 50, end: 99 }
        );
        assert_eq!(r("BYTES=1-1", Some(3)), Partial { start: 1, end: 1 });
        assert!(matches!(r("bytes=100-", Some(100)), Unsatisfiable { .. }));
        assert!(matches!(r("bytes=5-2", Some(100)), Unsatisfiable { .. }));
        assert!(matches!(r("bytes=-0", Some(100)), Unsatisfiable { .. }));
        assert!(matches!(r("bytes=-", Some(100)), Unsatisfiable { .. }));
        assert!(matches!(
            r("bytes=0-1,3-4", Some(100)),
            Unsatisfiable { .. }
        ));
        assert!(matches!(r("items=0-1", Some(100)), Unsatisfiable { .. }));
        assert!(matches!(
            r("bytes=99999999999999999999-", Some(100)),
            Unsatisfiable { .. }
        ));
        // Unknown length (still streaming).
        assert_eq!(r("bytes=-10", None), Full);
        assert_eq!(r("bytes=10-", None), Full);
        assert_eq!(r("bytes=10-20", None), Full);
    }

    #[test]
    fn if_range() {
        let lm = format_http_date(1000.0);
        let d = format_http_date(2000.0);
        let ok = |ir: &str, etag: Option<&str>| {
            if_range_allows(
                Some(ir.as_bytes()),
                etag.map(str::as_bytes),
                Some(lm.as_bytes()),
                Some(d.as_bytes()),
            )
        };
        assert!(if_range_allows(None, None, None, None));
        assert!(ok("\"foo\"", Some("\"foo\"")));
        assert!(!ok("\"fooled\"", Some("\"foo\"")));
        assert!(!ok("\"foo\"", Some("W/\"foo\"")));
        assert!(ok(&lm, None));
        assert!(!ok(&format_http_date(999.0), None));
        assert!(!ok("not a date", None));
        // Last-Modified too close to Date: not a strong validator.
        assert!(!if_range_allows(
            Some(lm.as_bytes()),
            None,
            Some(lm.as_bytes()),
            Some(lm.as_bytes())
        ));
    }
}
