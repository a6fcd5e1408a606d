//! The check of a backend response against the range its request asked
//! for (varnishd's `VRG_CheckBo`), and the `Range`/`Content-Range` number
//! parsing it shares with the client side's range decisions
//! ([`crate::client::cond`]).

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
    if !rest.trim_ascii().is_empty() {
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
    if !rest.trim_ascii().is_empty() {
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
        Some(v) => match digits(v.trim_ascii()) {
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

/// A decimal number: `None` when there are no digits, an error when it
/// exceeds `i64::MAX`.
pub(crate) type Num = Result<Option<u64>, ()>;

/// The decimal number `s` starts with, and what follows it.
pub(crate) fn digits(s: &[u8]) -> (Num, &[u8]) {
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
    use super::*;

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
}
