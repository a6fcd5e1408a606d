//! Client conditional and partial requests, decided as varnishd does at
//! delivery time.
//!
//! A 200 response becomes a 304 when `If-None-Match` matches its `ETag`,
//! or when there is no `If-None-Match` and `If-Modified-Since` is not
//! older than its `Last-Modified`. As varnishd 7.1, `If-None-Match` is
//! compared with the ETag as one string (weakly: a `W/` in front of
//! either is ignored; strongly when the request has a `Range`): `*` and
//! lists of tags are not taken apart, so they match only a tag spelled the
//! same. A single `bytes=` range of a 200 response becomes a 206; a range
//! varnishd cannot satisfy or parse becomes a 416 with
//! `Content-Range: bytes */LEN`.

use crate::fetch::range::digits;
use lacquer_http::date::parse_http_date;

/// Whether a 200 response may be answered with 304 Not Modified.
///
/// `t_req` is when the request arrived: an `If-Modified-Since` in the
/// future is ignored. With `strong` (the request has a `Range`), a weak
/// ETag never matches. `stored_lm` is the object's own modification time,
/// as varnishd keeps it at fetch (its `Last-Modified` then, else when it
/// was fetched): it answers `If-Modified-Since` when the response has no
/// `Last-Modified` (vcl_deliver removed it, or there never was one).
pub fn not_modified(
    strong: bool,
    if_none_match: Option<&[u8]>,
    if_modified_since: Option<&[u8]>,
    etag: Option<&[u8]>,
    last_modified: Option<&[u8]>,
    stored_lm: f64,
    t_req: f64,
) -> bool {
    if let Some(inm) = if_none_match {
        return etag.is_some_and(|e| {
            if strong {
                etag_matches_strongly(inm, e)
            } else {
                etag_matches(inm, e)
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
        return match last_modified {
            Some(lm) => parse_http_date(lm).is_some_and(|lm| lm <= ims),
            None => stored_lm <= ims,
        };
    }
    false
}

/// The modification time varnishd stores with an object at fetch: its
/// `Last-Modified` (0 when that does not parse), else the whole second
/// it was fetched in.
pub fn stored_last_modified(last_modified: Option<&[u8]>, t_origin: f64) -> f64 {
    match last_modified {
        Some(v) => parse_http_date(v).unwrap_or(0.0),
        None => t_origin.floor(),
    }
}

/// Weak comparison of an `If-None-Match` value with an `ETag`, as
/// varnishd 7.1's: equal once a leading `W/` is dropped from each.
pub fn etag_matches(inm: &[u8], etag: &[u8]) -> bool {
    let unweak = |v: &[u8]| -> usize { if v.starts_with(b"W/") { 2 } else { 0 } };
    inm[unweak(inm)..] == etag[unweak(etag)..]
}

/// Strong comparison, as varnishd uses when the request also has a
/// `Range`: neither may be weak, and they are equal.
pub fn etag_matches_strongly(inm: &[u8], etag: &[u8]) -> bool {
    !inm.starts_with(b"W/") && !etag.starts_with(b"W/") && inm == etag
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
    let Some(ir) = if_range.map(<[u8]>::trim_ascii) else {
        return true;
    };
    if ir.starts_with(b"\"") {
        return etag.is_some_and(|e| !e.starts_with(b"W/") && e.trim_ascii() == ir);
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
///
/// As varnishd 7.1: the header is first checked on its own
/// (`http_GetRange`: a bad unit or number, no hyphen, `-0`, a high end
/// below the low one, trailing bytes other than white space are 416
/// whatever the length), then fitted to the length (`vrg_dorange`): with
/// the length unknown every valid range gets the whole body with 200.
pub fn apply_range(range: &[u8], len: Option<u64>) -> RangeOutcome {
    use RangeOutcome::*;
    let bad = |reason| Unsatisfiable { reason };
    let Some(eq) = range.iter().position(|&b| b == b'=') else {
        return bad("Missing '='");
    };
    if !range[..eq].eq_ignore_ascii_case(b"bytes") {
        return bad("Not Bytes");
    }
    let (low, rest) = digits(&range[eq + 1..]);
    let Ok(low) = low else {
        return bad("Low number too big");
    };
    let Some(rest) = rest.strip_prefix(b"-") else {
        return bad("Missing hyphen");
    };
    let (high, rest) = digits(rest);
    let Ok(high) = high else {
        return bad("High number too big");
    };
    match (low, high) {
        (None, None) => return bad("Neither high nor low"),
        (None, Some(0)) => return bad("No low, high is zero"),
        (Some(l), Some(h)) if h < l => return bad("high smaller than low"),
        _ => {}
    }
    if !rest
        .iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
    {
        return bad("Trailing stuff");
    }
    let Some(len) = len else {
        return Full;
    };
    let (start, end) = match (low, high) {
        (None, Some(h)) => (len - h.min(len), len.saturating_sub(1)),
        (Some(l), Some(h)) if h < len => (l, h),
        (Some(l), _) => (l, len.saturating_sub(1)),
        (None, None) => return bad("Neither high nor low"),
    };
    if start >= len {
        return bad("low range beyond object");
    }
    Partial { start, end }
}

#[cfg(test)]
mod tests {
    use super::RangeOutcome::*;
    use super::*;
    use lacquer_http::date::format_http_date;

    #[test]
    fn etags() {
        let inm = |inm: &str, etag: Option<&str>| {
            not_modified(
                false,
                Some(inm.as_bytes()),
                None,
                etag.map(str::as_bytes),
                None,
                0.0,
                0.0,
            )
        };
        assert!(inm("\"a\"", Some("\"a\"")));
        assert!(inm("W/\"a\"", Some("\"a\"")));
        assert!(inm("\"a\"", Some("W/\"a\"")));
        assert!(!inm("\"b\"", Some("\"a\"")));
        // As varnishd 7.1: one string, no list and no `*`.
        assert!(!inm("\"x\", \"a\"", Some("W/\"a\"")));
        assert!(!inm("*", Some("\"q\"")));
        assert!(inm("*", Some("*")));
        assert!(!inm("*", None));
        // With a Range, only strong tags match.
        let strong = |inm: &str, etag: &str| {
            not_modified(
                true,
                Some(inm.as_bytes()),
                None,
                Some(etag.as_bytes()),
                None,
                0.0,
                0.0,
            )
        };
        assert!(strong("\"a\"", "\"a\""));
        assert!(!strong("W/\"a\"", "\"a\""));
        assert!(!strong("\"a\"", "W/\"a\""));
        // If-None-Match takes precedence over If-Modified-Since.
        let lm = format_http_date(1000.0);
        assert!(!not_modified(
            false,
            Some(b"\"b\""),
            Some(lm.as_bytes()),
            Some(b"\"a\""),
            Some(lm.as_bytes()),
            1000.0,
            2000.0
        ));
    }

    #[test]
    fn modified_since() {
        let lm = format_http_date(1000.0);
        let later = format_http_date(1500.0);
        let earlier = format_http_date(500.0);
        let ims = |v: &str, lm: Option<&str>, stored: f64| {
            not_modified(
                false,
                None,
                Some(v.as_bytes()),
                None,
                lm.map(str::as_bytes),
                stored,
                2000.0,
            )
        };
        assert!(ims(&lm, Some(&lm), 1000.0));
        assert!(ims(&later, Some(&lm), 1000.0));
        assert!(!ims(&earlier, Some(&lm), 1000.0));
        // A date in the future (after the request) is ignored, as is junk.
        assert!(!ims(&format_http_date(3000.0), Some(&lm), 1000.0));
        assert!(!ims("junk", Some(&lm), 1000.0));
        assert!(!ims(&lm, Some("junk"), 1000.0));
        // Without Last-Modified, the stored time decides.
        assert!(ims(&lm, None, 1000.0));
        assert!(!ims(&earlier, None, 1000.0));
        assert_eq!(stored_last_modified(Some(lm.as_bytes()), 1900.5), 1000.0);
        assert_eq!(stored_last_modified(Some(b"junk"), 1900.5), 0.0);
        assert_eq!(stored_last_modified(None, 1900.5), 1900.0);
    }

    #[test]
    fn ranges() {
        let r = |s: &str, len| apply_range(s.as_bytes(), len);
        let bad = |reason| Unsatisfiable { reason };
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
        // Unknown length (still streaming): a valid range gets everything,
        // a malformed one is refused all the same.
        assert_eq!(r("bytes=-10", None), Full);
        assert_eq!(r("bytes=10-", None), Full);
        assert_eq!(r("bytes=10-20", None), Full);
        assert_eq!(r("bytes=10-2", None), bad("high smaller than low"));
        assert_eq!(r("bytes=-0", None), bad("No low, high is zero"));
        assert_eq!(r("bytes=1-2x", None), bad("Trailing stuff"));
        // White space may follow the range.
        assert_eq!(r("bytes=1-2 ", Some(10)), Partial { start: 1, end: 2 });
        assert_eq!(r("bytes 1-2", Some(10)), bad("Missing '='"));
        assert_eq!(r("bytes=1-", Some(0)), bad("low range beyond object"));
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
