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

use crate::rfc2616::parse_http_date;

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

/// A `Range: bytes=lo-hi` of a backend request as varnishd reads it
/// (`None` for absent ends), or why it is malformed.
fn bereq_range(v: &[u8]) -> Result<(Option<u64>, Option<u64>), &'static str> {
    let Some(eq) = v.iter().position(|&c| c == b'=') else {
        return Err("Missing '='");
    };
    if !v[..eq].eq_ignore_ascii_case(b"bytes") {
        return Err("Not Bytes");
    }
    let (lo, rest) = digits(&v[eq + 1..]);
    let lo = lo.map_err(|()| "Low number too big")?;
    let Some(rest) = rest.strip_prefix(b"-") else {
        return Err("Missing hyphen");
    };
    let (hi, rest) = digits(rest);
    let hi = hi.map_err(|()| "High number too big")?;
    match (lo, hi) {
        (None, None) => return Err("Neither high nor low"),
        (None, Some(0)) => return Err("No low, high is zero"),
        (Some(l), Some(h)) if h < l => return Err("high smaller than low"),
        _ => {}
    }
    if !trim(rest).is_empty() {
        return Err("Trailing stuff");
    }
    Ok((lo, hi))
}

/// A backend's `Content-Range: bytes lo-hi/len` (`*` parts as `None`):
/// `Ok(None)` when absent or in another unit, `Err` when malformed.
#[allow(clippy::type_complexity)]
fn content_range(v: Option<&[u8]>) -> Result<Option<(Option<(u64, u64)>, Option<u64>)>, ()> {
    let Some(v) = v else { return Ok(None) };
    let Some(sp) = v.iter().position(|&c| c == b' ') else {
        return Err(());
    };
    if !v[..sp].eq_ignore_ascii_case(b"bytes") {
        return Ok(None);
    }
    let mut b = &v[sp + 1..];
    let span = if let Some(r) = b.strip_prefix(b"*") {
        b = r;
        None
    } else {
        let (lo, r) = digits(b);
        let lo = lo?.ok_or(())?;
        let r = r.strip_prefix(b"-").ok_or(())?;
        let (hi, r) = digits(r);
        let hi = hi?.ok_or(())?;
        b = r;
        Some((lo, hi))
    };
    let b = b.strip_prefix(b"/").ok_or(())?;
    let (len, rest) = match b.strip_prefix(b"*") {
        Some(r) => (None, r),
        None => {
            let (l, r) = digits(b);
            (Some(l?.filter(|l| *l > 0).ok_or(())?), r)
        }
    };
    if !trim(rest).is_empty() {
        return Err(());
    }
    match (span, len) {
        (None, None) => return Err(()),
        (Some((lo, hi)), _) if lo > hi => return Err(()),
        (Some((_, hi)), Some(len)) if hi >= len => return Err(()),
        _ => {}
    }
    Ok(Some((span, len)))
}

/// varnishd's check of a backend response against the range the backend
/// request asked for (`VRG_CheckBo`): a malformed Range, Content-Range or
/// Content-Length, a Content-Range nobody asked for, or one that does not
/// match the body length or the requested range fails the fetch, with
/// the message to log as `Error`.
pub fn check_backend_range(
    range: Option<&[u8]>,
    status: u16,
    content_length: Option<&[u8]>,
    content_range_hdr: Option<&[u8]>,
) -> Result<(), String> {
    let (rlo, rhi) = match range.map(bereq_range) {
        None => (None, None),
        Some(Ok(r)) => r,
        Some(Err(e)) => return Err(format!("Invalid range header ({e})")),
    };
    let Ok(cr) = content_range(content_range_hdr) else {
        return Err("Invalid content-range header".into());
    };
    let clen = match content_length {
        None => None,
        Some(v) => match digits(trim(v)) {
            (Ok(Some(n)), []) => Some(n),
            _ => return Err("Invalid content-length header".into()),
        },
    };
    let Some((span, len)) = cr else {
        return Ok(());
    };
    if rlo.is_none() && rhi.is_none() {
        return Err("Unexpected content-range header".into());
    }
    let (crlo, crhi) = match span {
        Some(s) => s,
        None if status == 416 => return Ok(()),
        // `bytes */len`: the whole of it.
        None => (0, len.expect("a length where the span is *") - 1),
    };
    let crlen = crhi - crlo + 1;
    if let Some(cl) = clen
        && cl != crlen
    {
        return Err(format!("Expected content length {crlen}, got {cl}"));
    }
    let Some(rlo) = rlo else {
        return Ok(());
    };
    if rlo != crlo {
        return Err(format!("Expected low range {crlo}, got {rlo}"));
    }
    if let Some(rhi) = rhi
        && rhi < crhi
    {
        return Err(format!("Expected minimum high range {crhi}, got {rhi}"));
    }
    Ok(())
}

type Num = Result<Option<u64>, ()>;

fn digits(s: &[u8]) -> (Num, &[u8]) {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 {
        return (Ok(None), s);
    }
    let mut v: u64 = 0;
    for d in &s[..n] {
        match v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
        {
            Some(x) if x <= i64::MAX as u64 => v = x,
            _ => return (Err(()), &s[n..]),
        }
    }
    (Ok(Some(v)), &s[n..])
}

#[cfg(test)]
mod tests {
    use super::RangeOutcome::*;
    use super::*;
    use crate::rfc2616::format_http_date;

    #[test]
    fn backend_ranges_checked_as_varnishd() {
        let c = |r: Option<&str>, st, cl: Option<&str>, cr: Option<&str>| {
            check_backend_range(
                r.map(str::as_bytes),
                st,
                cl.map(str::as_bytes),
                cr.map(str::as_bytes),
            )
        };
        let r = Some("bytes=10-19");
        assert!(c(r, 206, Some("40"), Some("bytes 0-49/100")).is_err());
        assert!(c(r, 206, Some("40"), Some("bytes 10-19/100")).is_err());
        assert!(c(r, 206, Some("10"), Some("bytes 10-19/100")).is_ok());
        assert!(c(r, 206, Some("10"), Some("bytes 11-20/100")).is_err());
        let r = Some("bytes=90-119");
        assert!(c(r, 416, Some("100"), Some("bytes */100")).is_ok());
        assert!(c(None, 200, Some("40"), Some("bytes 0-49/100")).is_err());
        assert!(c(None, 200, Some("100"), Some("bytes */100")).is_err());
        assert!(c(None, 200, Some("100"), Some("bytes=0-99/100")).is_err());
        assert!(c(Some("bytes=0-0"), 200, Some("100"), Some("bytes */*")).is_err());
        assert!(c(None, 200, Some("100"), None).is_ok());
        assert!(c(Some("bytes=a"), 200, None, None).is_err());
        assert!(c(None, 200, Some("x"), None).is_err());
        assert!(c(Some("bytes=5-"), 206, Some("95"), Some("bytes 5-99/100")).is_ok());
        assert!(c(None, 200, None, Some("items 0-1/2")).is_ok());
    }

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
