//! HTTP dates and the calendar arithmetic under them, shared by the server
//! (`Date`, `Expires`, `Last-Modified`, conditional requests), the VCL
//! executor (TIME to STRING), vmod `std` (`std.time()`, `std.strftime()`),
//! the log tools and the vtc runner, so all of them read and write a date
//! the same way, as varnishd's `VTIM_parse` and `VTIM_format` do.
//!
//! Times are seconds since the Unix epoch as `f64`, the type VCL's TIME is.

use std::time::{SystemTime, UNIX_EPOCH};

/// Abbreviated weekday names, indexed by days since the epoch modulo 7
/// (1970-01-01 was a Thursday).
pub const WDAY: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
/// Full weekday names, indexed like [`WDAY`].
pub const WDAY_LONG: [&str; 7] = [
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
];
/// Abbreviated month names.
pub const MONTH: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
/// Full month names.
pub const MONTH_LONG: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// The current time in seconds since the epoch (0 if the clock is set
/// before 1970).
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Days since 1970-01-01 to (year, month 1-12, day 1-31), proleptic
/// Gregorian calendar.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Days since the epoch of a civil date (inverse of [`civil_from_days`]).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days in month `m` (1-12) of year `y`.
pub fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A time that has no HTTP date: not finite, or outside the years 0 to
/// 9999 that four digits can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unformattable;

/// Appends `t` as an RFC 1123 date (`Sun, 06 Nov 1994 08:49:37 GMT`),
/// fractional seconds truncated as `VTIM_format` does.
pub fn append_http_date(out: &mut Vec<u8>, t: f64) -> Result<(), Unformattable> {
    if !t.is_finite() || !(-62_167_219_200.0..253_402_300_800.0).contains(&t) {
        return Err(Unformattable);
    }
    let secs = t.trunc() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let two = |out: &mut Vec<u8>, v: i64| {
        out.push(b'0' + (v / 10) as u8);
        out.push(b'0' + (v % 10) as u8);
    };
    out.extend_from_slice(WDAY[days.rem_euclid(7) as usize].as_bytes());
    out.extend_from_slice(b", ");
    two(out, i64::from(d));
    out.push(b' ');
    out.extend_from_slice(MONTH[(m - 1) as usize].as_bytes());
    out.push(b' ');
    two(out, y / 100);
    two(out, y % 100);
    out.push(b' ');
    two(out, rem / 3600);
    out.push(b':');
    two(out, rem / 60 % 60);
    out.push(b':');
    two(out, rem % 60);
    out.extend_from_slice(b" GMT");
    Ok(())
}

/// `t` as an RFC 1123 date string (see [`append_http_date`]).
pub fn http_date(t: f64) -> Result<String, Unformattable> {
    let mut v = Vec::with_capacity(29);
    append_http_date(&mut v, t)?;
    Ok(String::from_utf8_lossy(&v).into_owned())
}

/// `t` as an RFC 1123 date string, or an empty string when it has none,
/// as `VTIM_format` writes (the server's `Date` headers and logs, where a
/// clock reading always has one).
pub fn format_http_date(t: f64) -> String {
    http_date(t).unwrap_or_default()
}

/// A cursor over a date being parsed; every step fails with `None`.
struct Scan<'a>(&'a [u8]);

impl Scan<'_> {
    fn byte(&mut self, c: u8) -> Option<()> {
        let (&first, rest) = self.0.split_first()?;
        (first == c).then(|| self.0 = rest)
    }

    /// Exactly `n` decimal digits.
    fn digits(&mut self, n: usize) -> Option<u32> {
        let d = self.0.get(..n)?;
        if !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.0 = &self.0[n..];
        Some(d.iter().fold(0, |v, c| v * 10 + u32::from(c - b'0')))
    }

    /// One of `names`, matched on its first three letters (as varnishd
    /// matches weekday and month names); its index.
    fn name(&mut self, names: &[&str]) -> Option<usize> {
        let w = self.0.get(..3)?;
        let i = names.iter().position(|n| n.as_bytes()[..3] == *w)?;
        self.0 = &self.0[3..];
        Some(i)
    }

    fn literal(&mut self, s: &str) -> Option<()> {
        self.0 = self.0.strip_prefix(s.as_bytes())?;
        Some(())
    }

    /// `hh:mm:ss`.
    fn clock(&mut self) -> Option<(u32, u32, u32)> {
        let h = self.digits(2)?;
        self.byte(b':')?;
        let m = self.digits(2)?;
        self.byte(b':')?;
        let s = self.digits(2)?;
        Some((h, m, s))
    }
}

/// Parses an HTTP date as varnishd's `VTIM_parse` does: RFC 1123
/// (`Sun, 06 Nov 1994 08:49:37 GMT`, also with a one-digit day), RFC 850
/// (`Sunday, 06-Nov-94 08:49:37 GMT`), asctime (`Sun Nov  6 08:49:37
/// 1994`) or ISO 8601 (`1994-11-06T08:49:37`), with spaces around it.
/// Fields out of range, a day the month does not have, a weekday that is
/// not the date's or a year before 1899 give `None`; a leap second 60
/// counts as 59.
pub fn parse_http_date(s: &[u8]) -> Option<f64> {
    let start = s.iter().position(|&c| c != b' ')?;
    let end = s.iter().rposition(|&c| c != b' ')? + 1;
    let mut p = Scan(&s[start..end]);
    let (y, mo, d, (h, mi, se), wday);
    if p.0[0].is_ascii_digit() {
        y = i64::from(p.digits(4)?);
        p.byte(b'-')?;
        mo = p.digits(2)?;
        p.byte(b'-')?;
        d = p.digits(2)?;
        p.byte(b'T')?;
        (h, mi, se) = p.clock()?;
        wday = None;
    } else {
        // WDAY is indexed from Thursday; the names are matched on three
        // letters, then the long form of RFC 850 is checked below.
        let w = p.name(&WDAY)?;
        wday = Some(w);
        if p.byte(b',').is_some() {
            p.byte(b' ')?;
            let one_digit = p.0.get(1) == Some(&b' ');
            d = p.digits(if one_digit { 1 } else { 2 })?;
            p.byte(b' ')?;
            mo = p.name(&MONTH)? as u32 + 1;
            p.byte(b' ')?;
            y = i64::from(p.digits(4)?);
            p.byte(b' ')?;
            (h, mi, se) = p.clock()?;
            p.literal(" GMT")?;
        } else if p.byte(b' ').is_some() {
            mo = p.name(&MONTH)? as u32 + 1;
            p.byte(b' ')?;
            d = if p.byte(b' ').is_some() {
                p.digits(1)?
            } else {
                p.digits(2)?
            };
            p.byte(b' ')?;
            (h, mi, se) = p.clock()?;
            p.byte(b' ')?;
            y = i64::from(p.digits(4)?);
        } else {
            p.literal(&WDAY_LONG[w][3..])?;
            p.literal(", ")?;
            d = p.digits(2)?;
            p.byte(b'-')?;
            mo = p.name(&MONTH)? as u32 + 1;
            p.byte(b'-')?;
            let yy = i64::from(p.digits(2)?) + 1900;
            y = if yy < 1969 { yy + 100 } else { yy };
            p.byte(b' ')?;
            (h, mi, se) = p.clock()?;
            p.literal(" GMT")?;
        }
    }
    if !p.0.is_empty()
        || se > 60
        || mi > 59
        || h > 23
        || !(1..=12).contains(&mo)
        || d < 1
        || d > days_in_month(y, mo)
        || y < 1899
    {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    if wday.is_some_and(|w| days.rem_euclid(7) as usize != w) {
        return None;
    }
    Some((days * 86_400 + i64::from(h * 3600 + mi * 60 + se.min(59))) as f64)
}

/// `strftime(3)` for UTC with the common conversions (`std.strftime()`,
/// varnishncsa's `%{...}t`); unknown conversions are copied as written.
pub fn strftime(t: f64, fmt: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let secs = t.floor() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (rem / 3600, rem / 60 % 60, rem % 60);
    let wd = days.rem_euclid(7) as usize; // 0 = Thursday
    let wday_sun0 = (wd + 4) % 7; // 0 = Sunday
    let yday = days - days_from_civil(y, 1, 1);
    let mut out = Vec::with_capacity(fmt.len() + 16);
    let mut it = fmt.iter().copied();
    while let Some(c) = it.next() {
        if c != b'%' {
            out.push(c);
            continue;
        }
        let Some(k) = it.next() else {
            out.push(b'%');
            break;
        };
        let _ = match k {
            b'Y' => write!(out, "{y}"),
            b'C' => write!(out, "{:02}", y.div_euclid(100)),
            b'y' => write!(out, "{:02}", y.rem_euclid(100)),
            b'm' => write!(out, "{m:02}"),
            b'd' => write!(out, "{d:02}"),
            b'e' => write!(out, "{d:2}"),
            b'H' => write!(out, "{hh:02}"),
            b'I' => write!(out, "{:02}", if hh % 12 == 0 { 12 } else { hh % 12 }),
            b'M' => write!(out, "{mm:02}"),
            b'S' => write!(out, "{ss:02}"),
            b'p' => write!(out, "{}", if hh < 12 { "AM" } else { "PM" }),
            b'j' => write!(out, "{:03}", yday + 1),
            b'a' => write!(out, "{}", WDAY[wd]),
            b'A' => write!(out, "{}", WDAY_LONG[wd]),
            b'b' | b'h' => write!(out, "{}", MONTH[(m - 1) as usize]),
            b'B' => write!(out, "{}", MONTH_LONG[(m - 1) as usize]),
            b'u' => write!(out, "{}", if wday_sun0 == 0 { 7 } else { wday_sun0 }),
            b'w' => write!(out, "{wday_sun0}"),
            b's' => write!(out, "{secs}"),
            b'F' => write!(out, "{y}-{m:02}-{d:02}"),
            b'T' => write!(out, "{hh:02}:{mm:02}:{ss:02}"),
            b'R' => write!(out, "{hh:02}:{mm:02}"),
            b'D' => write!(out, "{m:02}/{d:02}/{:02}", y.rem_euclid(100)),
            b'c' => write!(
                out,
                "{} {} {d:2} {hh:02}:{mm:02}:{ss:02} {y}",
                WDAY[wd],
                MONTH[(m - 1) as usize]
            ),
            b'Z' => write!(out, "GMT"),
            b'z' => write!(out, "+0000"),
            b'n' => writeln!(out),
            b't' => write!(out, "\t"),
            b'%' => write!(out, "%"),
            other => write!(out, "%{}", other as char),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_vtim_format() {
        assert_eq!(
            http_date(784_111_777.0).unwrap(),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(http_date(0.9).unwrap(), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            http_date(951_782_400.0).unwrap(),
            "Tue, 29 Feb 2000 00:00:00 GMT"
        );
        assert_eq!(http_date(f64::NAN), Err(Unformattable));
        assert_eq!(http_date(253_402_300_800.0), Err(Unformattable));
        assert_eq!(format_http_date(f64::INFINITY), "");
    }

    #[test]
    fn parses_the_four_forms_of_vtim_parse() {
        let t = Some(784_111_777.0);
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), t);
        assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), t);
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), t);
        assert_eq!(parse_http_date(b"1994-11-06T08:49:37"), t);
        assert_eq!(parse_http_date(b"  Sun, 06 Nov 1994 08:49:37 GMT  "), t);
        assert_eq!(
            parse_http_date(b"Fri, 2 Mar 2018 14:26:02 GMT"),
            parse_http_date(b"Fri, 02 Mar 2018 14:26:02 GMT")
        );
        for t in [0.0, 784_111_777.0, 1_700_000_000.0, 4_102_444_800.0] {
            assert_eq!(parse_http_date(http_date(t).unwrap().as_bytes()), Some(t));
        }
        // RFC 850's two-digit years: 69 and later are the 1900s.
        assert_eq!(
            parse_http_date(b"Friday, 20-Dec-30 00:00:00 GMT"),
            Some(1_923_955_200.0)
        );
        assert_eq!(
            parse_http_date(b"Mon, 20 Dec 2010 00:00:60 GMT"),
            Some(1_292_803_259.0)
        );
    }

    #[test]
    fn refuses_what_vtim_parse_refuses() {
        for bad in [
            &b""[..],
            b"nonsense",
            b"yesterday",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Mon, 06 Nov 1994 08:49:37 GMT",
            b"Monday, 20-Dec-30 00:00:00 GMT",
            b"Monday, 30-Feb-15 00:00:00 GMT",
            b"Mon, 20 Dec 2010 00:00:61 GMT",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 06 Nov 1994 08:49:37 GMT x",
            b"Sun Nov 6 08:49:37 1994",
            b"1800-01-01T00:00:00",
            b"Sun, 06 N\xc3\xb6v 1994 08:49:37 GMT",
        ] {
            assert_eq!(
                parse_http_date(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn strftime_conversions() {
        assert_eq!(
            strftime(1_292_803_200.0, b"%Y%m%dT%H%M%SZ"),
            b"20101220T000000Z"
        );
        assert_eq!(strftime(784_111_777.0, b"%a %q %%"), b"Sun %q %");
    }
}
