//! `vmod_utils` (Varnish Enterprise): small functions without a vmod of
//! their own.
//!
//! - `fast_304()` in `vcl_backend_response`: when the backend answered a
//!   revalidation with 304, the stale object is refreshed in place (new
//!   TTL, grace and keep; its stored headers and body untouched) instead
//!   of a new object being made from the merged headers with a copy of
//!   the body. The fetch does it (`Context::fast_304`) through the cache's
//!   in-place refresh. `is_fast_304()` says whether it applies.
//! - `time_format(format, local_time = false[, time])`: `strftime(3)` of
//!   `time` (default: now), in UTC or in the host's local time zone (read
//!   from `TZ` or `/etc/localtime`, a TZif file, once).
//! - `newline()`: `"\n"`.

use std::sync::OnceLock;

use lacquer_vcl::exec::value::strftime;
use lacquer_vcl::exec::{Context, Value};

use crate::args::{Args, ws_string};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module utils
$Function VOID fast_304()
$Restrict vcl_backend_response
$Function BOOL is_fast_304()
$Function STRING time_format(STRING format, BOOL local_time = 0, [TIME time])
$Function STRING newline()
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("fast_304", fast_304 as FuncImpl),
        ("is_fast_304", is_fast_304),
        ("time_format", time_format),
        ("newline", newline),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

fn fast_304(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    ctx.fast_304()?;
    Ok(Value::Null)
}

fn is_fast_304(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Bool(ctx.is_fast_304()))
}

fn newline(_: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Str(bytes::Bytes::from_static(b"\n")))
}

fn time_format(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let fmt = a.str_or_empty(0)?.to_vec();
    let local = a.bool(1)?.unwrap_or(false);
    let t = a.time(2)?.unwrap_or_else(|| ctx.now());
    let out = if local {
        format_local(t, &fmt, local_zone())
    } else {
        strftime(t, &fmt)
    };
    Ok(ws_string(ctx, out))
}

/// `strftime` in a zone: the fields of `t` shifted by the zone's offset,
/// with `%z`, `%Z` and `%s` (which the UTC formatter would print for UTC)
/// given by the zone and the unshifted time.
fn format_local(t: f64, fmt: &[u8], zone: &Zone) -> Vec<u8> {
    let secs = t.floor() as i64;
    let (offset, abbr) = zone.at(secs);
    let mut pre = Vec::with_capacity(fmt.len() + 8);
    let mut it = fmt.iter().copied();
    while let Some(c) = it.next() {
        if c != b'%' {
            pre.push(c);
            continue;
        }
        match it.next() {
            Some(b'z') => {
                let sign = if offset < 0 { '-' } else { '+' };
                let o = offset.unsigned_abs();
                pre.extend_from_slice(
                    format!("{sign}{:02}{:02}", o / 3600, o / 60 % 60).as_bytes(),
                );
            }
            Some(b'Z') => pre.extend(abbr.bytes().flat_map(|b| {
                // A literal '%' in an abbreviation must not become a conversion.
                if b == b'%' { vec![b'%', b'%'] } else { vec![b] }
            })),
            Some(b's') => pre.extend_from_slice(secs.to_string().as_bytes()),
            Some(k) => pre.extend_from_slice(&[b'%', k]),
            None => pre.push(b'%'),
        }
    }
    strftime(t + offset as f64, &pre)
}

/// A time zone: UTC offsets and abbreviations from given instants on.
#[derive(Debug, Clone, PartialEq)]
struct Zone {
    /// (transition time, offset in seconds, abbreviation), by time.
    transitions: Vec<(i64, i32, String)>,
    /// Before the first transition (or without any).
    initial: (i32, String),
}

impl Zone {
    fn utc() -> Zone {
        Zone {
            transitions: Vec::new(),
            initial: (0, "UTC".into()),
        }
    }

    /// Offset and abbreviation in force at `t`.
    fn at(&self, t: i64) -> (i32, &str) {
        let i = self.transitions.partition_point(|(at, _, _)| *at <= t);
        match i {
            0 => (self.initial.0, &self.initial.1),
            _ => {
                let (_, o, a) = &self.transitions[i - 1];
                (*o, a)
            }
        }
    }

    /// Parses a TZif file (RFC 8536), version 1 data or, when present,
    /// the 64-bit data of versions 2 and later. `None` when it is not one.
    fn from_tzif(b: &[u8]) -> Option<Zone> {
        let head = |at: usize| -> Option<[usize; 6]> {
            let h = b.get(at..at + 44)?;
            if &h[..4] != b"TZif" {
                return None;
            }
            let n = |i: usize| u32::from_be_bytes(h[20 + 4 * i..24 + 4 * i].try_into().unwrap());
            Some([0, 1, 2, 3, 4, 5].map(|i| n(i) as usize))
        };
        let [isut, isstd, leap, timecnt, typecnt, charcnt] = head(0)?;
        let v1_len = timecnt * 5 + typecnt * 6 + charcnt + leap * 8 + isstd + isut;
        let (at, wide) = match b.get(4) {
            Some(b'2'..=b'9') => (44 + v1_len, true),
            _ => (0, false),
        };
        let [_, _, _, timecnt, typecnt, charcnt] = head(at)?;
        let tsize = if wide { 8 } else { 4 };
        let times_at = at + 44;
        let idx_at = times_at + timecnt * tsize;
        let types_at = idx_at + timecnt;
        let chars_at = types_at + typecnt * 6;
        let chars = b.get(chars_at..chars_at + charcnt)?;
        if typecnt == 0 {
            return None;
        }
        let ty = |i: usize| -> Option<(i32, String)> {
            let t = b.get(types_at + i * 6..types_at + i * 6 + 6)?;
            let off = i32::from_be_bytes(t[..4].try_into().ok()?);
            let ai = t[5] as usize;
            let tail = chars.get(ai..)?;
            let end = tail.iter().position(|&c| c == 0).unwrap_or(tail.len());
            Some((off, String::from_utf8_lossy(&tail[..end]).into_owned()))
        };
        let mut transitions = Vec::with_capacity(timecnt);
        for i in 0..timecnt {
            let raw = b.get(times_at + i * tsize..times_at + (i + 1) * tsize)?;
            let when = if wide {
                i64::from_be_bytes(raw.try_into().ok()?)
            } else {
                i64::from(i32::from_be_bytes(raw.try_into().ok()?))
            };
            let ti = *b.get(idx_at + i)? as usize;
            if ti >= typecnt {
                return None;
            }
            let (o, a) = ty(ti)?;
            transitions.push((when, o, a));
        }
        Some(Zone {
            transitions,
            initial: ty(0)?,
        })
    }
}

/// The host's zone: `TZ` naming a zone file (`:Europe/Oslo`, a path, or a
/// name under /usr/share/zoneinfo), else /etc/localtime, else UTC.
fn local_zone() -> &'static Zone {
    static ZONE: OnceLock<Zone> = OnceLock::new();
    ZONE.get_or_init(|| {
        let path = match std::env::var("TZ") {
            Ok(tz) if !tz.is_empty() => {
                let name = tz.trim_start_matches(':');
                if name.starts_with('/') {
                    name.to_string()
                } else {
                    format!("/usr/share/zoneinfo/{name}")
                }
            }
            _ => "/etc/localtime".to_string(),
        };
        std::fs::read(path)
            .ok()
            .and_then(|b| Zone::from_tzif(&b))
            .unwrap_or_else(Zone::utc)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version 2 TZif file with one transition: +01:00 "CET" until
    /// `at`, +02:00 "CEST" from then on.
    fn tzif(at: i64) -> Vec<u8> {
        let header = |timecnt: u32, wide: bool| {
            let mut h = b"TZif2".to_vec();
            h.extend([0u8; 15]);
            for n in [0u32, 0, 0, timecnt, 2, 10] {
                h.extend(n.to_be_bytes());
            }
            let mut body = Vec::new();
            if wide {
                body.extend(at.to_be_bytes());
            } else {
                body.extend((at as i32).to_be_bytes());
            }
            body.push(1);
            body.extend(3600i32.to_be_bytes());
            body.extend([0, 0]);
            body.extend(7200i32.to_be_bytes());
            body.extend([1, 4]);
            body.extend(b"CET\0CEST\0\0");
            h.extend(body);
            h
        };
        let mut f = header(1, false);
        f.extend(header(1, true));
        f
    }

    #[test]
    fn tzif_zones() {
        let z = Zone::from_tzif(&tzif(1_000_000)).unwrap();
        assert_eq!(z.at(0), (3600, "CET"));
        assert_eq!(z.at(999_999), (3600, "CET"));
        assert_eq!(z.at(1_000_000), (7200, "CEST"));
        assert!(Zone::from_tzif(b"not a zone file").is_none());
        assert!(Zone::from_tzif(&tzif(5)[..60]).is_none());
        assert_eq!(Zone::utc().at(12345), (0, "UTC"));
    }

    #[test]
    fn formats_in_a_zone() {
        let z = Zone::from_tzif(&tzif(1_000_000)).unwrap();
        // 1970-01-01T00:00:00Z is 01:00 in CET.
        assert_eq!(
            format_local(0.0, b"%Y-%m-%d %H:%M:%S %z %Z %s %%z", &z),
            b"1970-01-01 01:00:00 +0100 CET 0 %z".to_vec()
        );
        assert_eq!(
            format_local(1_000_000.5, b"%H:%M %Z", &z),
            b"15:46 CEST".to_vec()
        );
        assert_eq!(format_local(0.0, b"%", &Zone::utc()), b"%".to_vec());
        // UTC formatting is std.strftime's.
        assert_eq!(strftime(0.0, b"%F %T"), b"1970-01-01 00:00:00".to_vec());
    }
}
