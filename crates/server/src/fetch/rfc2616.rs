//! Freshness of backend responses: the TTL, grace and keep an object starts
//! with before `vcl_backend_response` runs, computed as varnishd does.
//!
//! Only some status codes are cacheable by default; for those, `s-maxage`
//! or `max-age` wins, then `Expires` (trusted against our clock when `Date`
//! is close to it, else taken relative to `Date`), then `default_ttl`.
//! `Age` moves the object's origin time back. `stale-while-revalidate`
//! gives the grace. 302 and 307 are cached only with explicit freshness.

use lacquer_http::date::parse_http_date;

/// The header values the computation reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct RespInfo<'a> {
    pub status: u16,
    pub cache_control: Option<&'a [u8]>,
    pub age: Option<&'a [u8]>,
    pub expires: Option<&'a [u8]>,
    pub date: Option<&'a [u8]>,
}

/// Defaults from parameters.
#[derive(Clone, Copy, Debug)]
pub struct Defaults {
    pub ttl: f64,
    pub grace: f64,
    pub keep: f64,
    pub clock_skew: f64,
}

/// The result, and the fields of the `TTL RFC …` log record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Freshness {
    pub t_origin: f64,
    pub ttl: f64,
    pub grace: f64,
    pub keep: f64,
    pub date: f64,
    pub expires: f64,
    pub max_age: u64,
}

impl Freshness {
    /// The payload of the `TTL` log record for this computation (only
    /// computed for cacheable fetches, so it always says `cacheable`).
    pub fn log_line(&self, now: f64) -> String {
        format!(
            "RFC {:.0} {:.0} {:.0} {:.0} {:.0} {:.0} {:.0} {} {}",
            self.ttl,
            self.grace,
            self.keep,
            now,
            self.t_origin,
            self.date,
            self.expires,
            self.max_age,
            "cacheable"
        )
    }
}

/// The value of directive `name` in a Cache-Control header, if present;
/// `Some(None)` for a directive without a value.
pub fn directive<'a>(cc: &'a [u8], name: &str) -> Option<Option<&'a [u8]>> {
    for part in cc.split(|b| *b == b',') {
        let part = part.trim_ascii();
        let (k, v) = match part.iter().position(|b| *b == b'=') {
            Some(i) => (part[..i].trim_ascii(), Some(part[i + 1..].trim_ascii())),
            None => (part, None),
        };
        // The value as written: varnishd's http_GetHdrField does not
        // unquote, so `max-age="30"` reads as 0 (difftest seed 8).
        if k.eq_ignore_ascii_case(name.as_bytes()) {
            return Some(v);
        }
    }
    None
}

/// A delta-seconds value as varnishd reads it: leading decimal digits
/// (capped at `u32::MAX`), optional spaces, then the end, `,` or `.`;
/// anything else (a sign, letters) reads as 0.
fn leading_uint(v: &[u8]) -> u64 {
    let v = v.trim_ascii();
    let digits = v.iter().take_while(|d| d.is_ascii_digit()).count();
    let rest = v[digits..].trim_ascii_start();
    if !matches!(rest.first(), None | Some(b',') | Some(b'.')) {
        return 0;
    }
    let mut n: u64 = 0;
    for d in &v[..digits] {
        n = n.saturating_mul(10).saturating_add(u64::from(d - b'0'));
    }
    n.min(u64::from(u32::MAX))
}

/// Computes the initial freshness of a backend response received at `now`.
pub fn freshness(resp: &RespInfo<'_>, now: f64, d: &Defaults) -> Freshness {
    let mut f = Freshness {
        t_origin: now,
        ttl: d.ttl,
        grace: d.grace,
        keep: d.keep,
        date: 0.0,
        expires: 0.0,
        max_age: 0,
    };
    if let Some(age) = resp.age {
        f.t_origin -= leading_uint(age) as f64;
    }
    if let Some(e) = resp.expires {
        // As varnishd: an unparseable Expires counts as absent.
        f.expires = parse_http_date(e).unwrap_or(0.0);
    }
    if let Some(dt) = resp.date {
        f.date = parse_http_date(dt).unwrap_or(0.0);
    }
    let cc = resp.cache_control.unwrap_or(b"");
    match resp.status {
        200 | 203 | 204 | 300 | 301 | 302 | 304 | 307 | 404 | 410 | 414 => {
            if matches!(resp.status, 302 | 307) {
                f.ttl = -1.0;
            }
            let max_age = directive(cc, "s-maxage")
                .or_else(|| directive(cc, "max-age"))
                .flatten();
            if let Some(v) = max_age {
                f.max_age = leading_uint(v);
                // varnishd keeps TTLs in a float: u32::MAX reads back as
                // 4294967296 (difftest seed 2060).
                f.ttl = f.max_age as f32 as f64;
            } else if f.expires != 0.0 {
                if f.expires < f.date {
                    f.ttl = 0.0;
                } else if f.date == 0.0 || (f.date - now).abs() < d.clock_skew {
                    f.ttl = if f.expires < now {
                        0.0
                    } else {
                        f.expires - now
                    };
                } else {
                    f.ttl = (f.expires - f.date).trunc();
                }
            }
        }
        _ => f.ttl = -1.0,
    }
    if f.ttl >= 0.0
        && let Some(Some(v)) = directive(cc, "stale-while-revalidate")
    {
        f.grace = leading_uint(v) as f32 as f64;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use lacquer_http::date::format_http_date;

    const D: Defaults = Defaults {
        ttl: 120.0,
        grace: 10.0,
        keep: 0.0,
        clock_skew: 10.0,
    };
    const NOW: f64 = 1_700_000_000.0;

    fn info(status: u16) -> RespInfo<'static> {
        RespInfo {
            status,
            ..Default::default()
        }
    }

    #[test]
    fn defaults_and_uncacheable_statuses() {
        assert_eq!(freshness(&info(200), NOW, &D).ttl, 120.0);
        assert_eq!(freshness(&info(500), NOW, &D).ttl, -1.0);
        assert_eq!(freshness(&info(302), NOW, &D).ttl, -1.0);
        assert_eq!(freshness(&info(206), NOW, &D).ttl, -1.0);
    }

    #[test]
    fn max_age_and_age() {
        let r = RespInfo {
            cache_control: Some(b"public, max-age=60, s-maxage=30"),
            age: Some(b"20"),
            ..info(200)
        };
        let f = freshness(&r, NOW, &D);
        assert_eq!(f.ttl, 30.0);
        assert_eq!(f.t_origin, NOW - 20.0);
        let r = RespInfo {
            cache_control: Some(b"max-age=-5"),
            ..info(307)
        };
        assert_eq!(freshness(&r, NOW, &D).ttl, 0.0);
        let r = RespInfo {
            cache_control: Some(b"max-age=100, stale-while-revalidate=30"),
            ..info(200)
        };
        let f = freshness(&r, NOW, &D);
        assert_eq!((f.ttl, f.grace), (100.0, 30.0));
    }

    #[test]
    fn expires() {
        let exp = format_http_date(NOW + 50.0);
        let r = RespInfo {
            expires: Some(exp.as_bytes()),
            ..info(200)
        };
        assert_eq!(freshness(&r, NOW, &D).ttl, 50.0);
        // Backend clock far off: relative to its Date.
        let date = format_http_date(NOW - 1000.0);
        let exp = format_http_date(NOW - 1000.0 + 40.0);
        let r = RespInfo {
            expires: Some(exp.as_bytes()),
            date: Some(date.as_bytes()),
            ..info(200)
        };
        assert_eq!(freshness(&r, NOW, &D).ttl, 40.0);
        // Expires before Date: already stale.
        let r = RespInfo {
            expires: Some(date.as_bytes()),
            date: Some(exp.as_bytes()),
            ..info(200)
        };
        assert_eq!(freshness(&r, NOW, &D).ttl, 0.0);
        // Garbage Expires counts as absent, as in varnishd.
        let r = RespInfo {
            expires: Some(b"0"),
            ..info(200)
        };
        assert_eq!(freshness(&r, NOW, &D).ttl, 120.0);
    }

    #[test]
    fn log_line_and_directives() {
        let f = freshness(&info(200), NOW, &D);
        assert_eq!(
            f.log_line(NOW),
            "RFC 120 10 0 1700000000 1700000000 0 0 0 cacheable"
        );
        let s = format_http_date(NOW);
        assert_eq!(s, "Tue, 14 Nov 2023 22:13:20 GMT");
        assert_eq!(parse_http_date(s.as_bytes()), Some(NOW));
        assert_eq!(directive(b"a, B=\"7\"", "b"), Some(Some(&b"\"7\""[..])));
        let quoted = RespInfo {
            cache_control: Some(b"max-age=\"30\""),
            ..info(200)
        };
        assert_eq!(freshness(&quoted, NOW, &D).ttl, 0.0);
        let huge = RespInfo {
            cache_control: Some(b"max-age=99999999999999999999"),
            ..info(200)
        };
        assert_eq!(freshness(&huge, NOW, &D).ttl, 4294967296.0);
        assert_eq!(directive(b"no-cache", "no-cache"), Some(None));
    }
}
