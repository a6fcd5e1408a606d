//! `vmod_std`: Varnish's standard module (7.1 function set): string
//! helpers, type conversions, logging, request body caching, bans and
//! files.
//!
//! Conversions follow Varnish's rules: a failed conversion returns the
//! `fallback` argument when given, and fails the VCL otherwise; exactly one
//! source argument may be given to the multi-source conversions.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use bytes::Bytes;
use lacquer_vcl::exec::value::{INT_MAX, INT_MIN, parse_decimal};
use lacquer_vcl::exec::{Context, HttpWhich, LogKind, Value, WsKind};
use lacquer_vcl::subs::BuiltinSub;

use crate::args::{Args, lossy, string, ws_string};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module std
$Function REAL random(REAL lo, REAL hi)
$Function REAL round(REAL r)
$Function VOID collect(HEADER hdr, STRING sep=", ")
$Function STRING querysort(STRING)
$Function STRING toupper(STRANDS s)
$Function STRING tolower(STRANDS s)
$Function STRING strstr(STRING s1, STRING s2)
$Function BOOL fnmatch(STRING pattern, STRING subject, BOOL pathname=1, BOOL noescape=0, BOOL period=0)
$Function STRING fileread(STRING)
$Function BLOB blobread(STRING)
$Function BOOL file_exists(STRING path)
$Function BOOL healthy(BACKEND be)
$Function INT port(IP ip)
$Function DURATION duration([STRING s], [DURATION fallback], [REAL real], [INT integer])
$Function BYTES bytes([STRING s], [BYTES fallback], [REAL real], [INT integer])
$Function INT integer([STRING s], [INT fallback], [BOOL bool], [BYTES bytes], [DURATION duration], [REAL real], [TIME time])
$Function IP ip(STRING s, [IP fallback], BOOL resolve=1, [STRING p])
$Function REAL real([STRING s], [REAL fallback], [INT integer], [BOOL bool], [BYTES bytes], [DURATION duration], [TIME time])
$Function TIME time([STRING s], [TIME fallback], [REAL real], [INT integer])
$Function STRING strftime(TIME time, STRING format)
$Function VOID log(STRANDS s)
$Function VOID syslog(INT priority, STRANDS s)
$Function VOID timestamp(STRING s)
$Function BOOL syntax(REAL)
$Function STRING getenv(STRING name)
$Function BOOL cache_req_body(BYTES size)
$Function VOID late_100_continue(BOOL late)
$Function VOID set_ip_tos(INT tos)
$Function VOID rollback(HTTP h)
$Function BOOL ban(STRING)
$Function STRING ban_error()
$Function INT real2integer(REAL r, INT fallback)
$Function TIME real2time(REAL r, TIME fallback)
$Function INT time2integer(TIME t, INT fallback)
$Function REAL time2real(TIME t, REAL fallback)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("random", random as FuncImpl),
        ("round", round),
        ("collect", collect),
        ("querysort", querysort_fn),
        ("toupper", toupper),
        ("tolower", tolower),
        ("strstr", strstr),
        ("fnmatch", fnmatch_fn),
        ("fileread", fileread),
        ("blobread", blobread),
        ("file_exists", file_exists),
        ("healthy", healthy),
        ("port", port),
        ("duration", duration),
        ("bytes", bytes_fn),
        ("integer", integer),
        ("ip", ip),
        ("real", real),
        ("time", time),
        ("strftime", strftime_fn),
        ("log", log),
        ("syslog", syslog),
        ("timestamp", timestamp),
        ("syntax", syntax),
        ("getenv", getenv),
        ("cache_req_body", cache_req_body),
        ("late_100_continue", late_100_continue),
        ("set_ip_tos", set_ip_tos),
        ("rollback", rollback),
        ("ban", ban),
        ("ban_error", ban_error),
        ("real2integer", real2integer),
        ("real2time", real2time),
        ("time2integer", time2integer),
        ("time2real", time2real),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

// ---- numbers ----------------------------------------------------------

fn random(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let lo = a.real(0)?.unwrap_or(0.0);
    let hi = a.real(1)?.unwrap_or(0.0);
    Ok(Value::Real(lo + (hi - lo) * crate::rnd::next_f64()))
}

fn round(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    // f64::round rounds half away from zero, like round(3).
    Ok(Value::Real(a.real(0)?.unwrap_or(0.0).round()))
}

// ---- strings ----------------------------------------------------------

fn collect(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let (which, name) = a.header(0)?;
    if which == HttpWhich::Obj {
        return Err("std.collect(): cannot be used on obj.http".into());
    }
    let sep = a.str_or_empty(1)?;
    let joined = {
        let vals: Vec<&[u8]> = ctx
            .headers(which)
            .into_iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(&name.lower))
            .map(|(_, v)| v)
            .collect();
        if vals.len() < 2 {
            return Ok(Value::Null);
        }
        vals.join(sep)
    };
    ctx.set_header(which, name, &joined)?;
    Ok(Value::Null)
}

/// Sorts the query string parameters of a URL, dropping empty ones
/// (`std.querysort`). As varnishd's comparison, two parameters are ordered
/// by their common prefix only, so `a=` and `a=1` compare equal and keep
/// their order.
pub(crate) fn querysort(url: &[u8]) -> Vec<u8> {
    let Some(q) = url.iter().position(|&b| b == b'?') else {
        return url.to_vec();
    };
    let mut params: Vec<&[u8]> = url[q + 1..]
        .split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .collect();
    params.sort_by(|a, b| {
        let n = a.len().min(b.len());
        a[..n].cmp(&b[..n])
    });
    let mut out = url[..=q].to_vec();
    out.extend_from_slice(&params.join(&b'&'));
    out
}

fn querysort_fn(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match a.str(0)? {
        None => Value::Null,
        Some(u) => {
            let sorted = querysort(u);
            ws_string(ctx, sorted)
        }
    })
}

fn toupper(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let s = a.str_or_empty(0)?.to_ascii_uppercase();
    Ok(ws_string(ctx, s))
}

fn tolower(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let s = a.str_or_empty(0)?.to_ascii_lowercase();
    Ok(ws_string(ctx, s))
}

fn strstr(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let (Some(s1), Some(s2)) = (a.bytes(0)?, a.str(1)?) else {
        return Ok(Value::Null);
    };
    if s2.is_empty() {
        return Ok(Value::Str(s1));
    }
    Ok(match s1.windows(s2.len()).position(|w| w == s2) {
        Some(i) => Value::Str(s1.slice(i..)),
        None => Value::Null,
    })
}

/// Flags of [`fnmatch`], as `fnmatch(3)` defines them.
#[derive(Clone, Copy)]
pub(crate) struct FnFlags {
    pub pathname: bool,
    pub noescape: bool,
    pub period: bool,
}

/// Shell-style pattern matching like `fnmatch(3)` (POSIX semantics,
/// byte-wise, no locale collation).
pub(crate) fn fnmatch(pat: &[u8], s: &[u8], f: FnFlags) -> bool {
    fn leading_period(s: &[u8], i: usize, f: FnFlags) -> bool {
        f.period && s.get(i) == Some(&b'.') && (i == 0 || (f.pathname && s[i - 1] == b'/'))
    }
    /// Matches a bracket expression at `p` (just after `[`) against `c`;
    /// returns (matched, index after `]`) or `None` if the bracket is not
    /// closed (then `[` is literal).
    fn bracket(pat: &[u8], mut p: usize, c: u8, f: FnFlags) -> Option<(bool, usize)> {
        let negate = matches!(pat.get(p), Some(b'!') | Some(b'^'));
        if negate {
            p += 1;
        }
        let mut matched = false;
        let mut first = true;
        loop {
            let mut lo = *pat.get(p)?;
            if lo == b']' && !first {
                return Some((matched != negate, p + 1));
            }
            first = false;
            // A character class (`[:alpha:]`), as glibc's in the C locale.
            if lo == b'[' && pat.get(p + 1) == Some(&b':') {
                let name_end = pat[p + 2..]
                    .windows(2)
                    .position(|w| w == b":]")
                    .map(|e| p + 2 + e);
                if let Some(e) = name_end {
                    matched |= match &pat[p + 2..e] {
                        b"alpha" => c.is_ascii_alphabetic(),
                        b"digit" => c.is_ascii_digit(),
                        b"alnum" => c.is_ascii_alphanumeric(),
                        b"upper" => c.is_ascii_uppercase(),
                        b"lower" => c.is_ascii_lowercase(),
                        b"space" => c.is_ascii_whitespace() || c == 0x0b,
                        b"blank" => c == b' ' || c == b'\t',
                        b"punct" => c.is_ascii_punctuation(),
                        b"print" => (0x20..0x7f).contains(&c),
                        b"graph" => c.is_ascii_graphic(),
                        b"cntrl" => c.is_ascii_control(),
                        b"xdigit" => c.is_ascii_hexdigit(),
                        // An unknown class name makes the pattern invalid.
                        _ => return None,
                    };
                    p = e + 2;
                    continue;
                }
            }
            if lo == b'\\' && !f.noescape {
                p += 1;
                lo = *pat.get(p)?;
            }
            p += 1;
            let mut hi = lo;
            if pat.get(p) == Some(&b'-') && pat.get(p + 1).is_some_and(|&b| b != b']') {
                hi = pat[p + 1];
                p += 2;
                if hi == b'\\' && !f.noescape {
                    hi = *pat.get(p)?;
                    p += 1;
                }
            }
            if lo <= c && c <= hi {
                matched = true;
            }
        }
    }
    fn go(pat: &[u8], mut p: usize, s: &[u8], mut i: usize, f: FnFlags) -> bool {
        while p < pat.len() {
            match pat[p] {
                b'?' => {
                    let Some(&c) = s.get(i) else { return false };
                    if (f.pathname && c == b'/') || leading_period(s, i, f) {
                        return false;
                    }
                    p += 1;
                    i += 1;
                }
                b'*' => {
                    while pat.get(p) == Some(&b'*') {
                        p += 1;
                    }
                    if leading_period(s, i, f) {
                        return false;
                    }
                    if p == pat.len() {
                        return !f.pathname || !s[i..].contains(&b'/');
                    }
                    let mut j = i;
                    loop {
                        if go(pat, p, s, j, f) {
                            return true;
                        }
                        if j >= s.len() || (f.pathname && s[j] == b'/') {
                            return false;
                        }
                        j += 1;
                    }
                }
                b'[' => {
                    let Some(&c) = s.get(i) else { return false };
                    match bracket(pat, p + 1, c, f) {
                        Some((ok, next)) => {
                            if !ok || (f.pathname && c == b'/') || leading_period(s, i, f) {
                                return false;
                            }
                            p = next;
                            i += 1;
                        }
                        None => {
                            if c != b'[' {
                                return false;
                            }
                            p += 1;
                            i += 1;
                        }
                    }
                }
                b'\\' if !f.noescape && p + 1 < pat.len() => {
                    if s.get(i) != Some(&pat[p + 1]) {
                        return false;
                    }
                    p += 2;
                    i += 1;
                }
                c => {
                    if s.get(i) != Some(&c) {
                        return false;
                    }
                    p += 1;
                    i += 1;
                }
            }
        }
        i == s.len()
    }
    go(pat, 0, s, 0, f)
}

fn fnmatch_fn(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let pat = a.str(0)?.ok_or("std.fnmatch(): pattern is NULL")?;
    let subject = a.str(1)?.ok_or("std.fnmatch(): subject is NULL")?;
    let f = FnFlags {
        pathname: a.bool(2)?.unwrap_or(true),
        noescape: a.bool(3)?.unwrap_or(false),
        period: a.bool(4)?.unwrap_or(false),
    };
    Ok(Value::Bool(fnmatch(pat, subject, f)))
}

// ---- files and environment -------------------------------------------

/// A file's contents, read once per VCL; `None` if unreadable.
fn cached_file(env: &Env, path: &[u8]) -> Option<Bytes> {
    let mut cache = env.files.lock().unwrap_or_else(|e| e.into_inner());
    let entry = cache.entry(path.to_vec()).or_insert_with(|| {
        std::fs::read(&*lossy(path))
            .map(Bytes::from)
            .map_err(|e| e.to_string())
    });
    entry.as_ref().ok().cloned()
}

fn fileread(env: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    // An unreadable file reads as NULL, like Varnish.
    Ok(a.str(0)?
        .and_then(|p| cached_file(env, p))
        .map_or(Value::Null, Value::Str))
}

fn blobread(env: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(a.str(0)?
        .and_then(|p| cached_file(env, p))
        .map_or(Value::Null, Value::Blob))
}

fn file_exists(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let p = a.str_or_empty(0)?;
    Ok(Value::Bool(
        !p.is_empty() && std::path::Path::new(&*lossy(p)).exists(),
    ))
}

fn getenv(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let Some(name) = a.str(0)? else {
        return Ok(Value::Null);
    };
    Ok(match std::env::var_os(&*lossy(name)) {
        Some(v) => string(v.into_encoded_bytes()),
        None => Value::Null,
    })
}

// ---- inspection -------------------------------------------------------

fn healthy(env: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Bool(match a.backend(0)? {
        Some(b) => env.host.backend_healthy(b)?,
        None => false,
    }))
}

fn port(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Int(a.ip(0)?.map_or(0, |ip| ip.port() as i64)))
}

fn syntax(env: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let want = (a.real(0)?.unwrap_or(0.0) * 10.0).round();
    Ok(Value::Bool(want <= (env.syntax * 10.0).round()))
}

// ---- conversions ------------------------------------------------------

/// Checks that exactly one of the source arguments `idx` was given, as
/// varnishd's `onearg()` (its texts).
fn one_of(a: &Args<'_>, name: &str, idx: &[usize]) -> Result<usize, String> {
    let given: Vec<usize> = idx.iter().copied().filter(|&i| a.given(i)).collect();
    match given.as_slice() {
        [one] => Ok(*one),
        [] => Err(format!("std.{name}: not enough arguments")),
        _ => Err(format!("std.{name}: too many arguments")),
    }
}

/// The fallback when given, else a VCL failure with `msg`.
fn fallback_or(a: &Args<'_>, i: usize, msg: String) -> R {
    match a.get(i) {
        Some(v) => Ok(v.clone()),
        None => Err(msg),
    }
}

/// Why varnishd's structured-field number reader (`vnum.c`) refused a text.
const INVALID_NUMBER: &str = "Invalid number";
const TOO_MANY_DIGITS: &str = "Too many digits";

/// A number read from the front of a text as varnishd 7.1's
/// `SF_Parse_Number` (`max_int` 15) or `SF_Parse_Decimal` (`max_int` 12)
/// reads it: blanks, an optional `-` (no `+`), at most `max_int` digits,
/// blanks, then optionally a point, digits of which three count and
/// blanks; a
/// number with a fraction may not pass 999999999999. `strict` refuses a
/// point without digits and a fourth fraction digit, where the lenient
/// reader skips the extra digits. The value (with its sign, so `-0` is
/// negative zero) and the unread rest, or the reason.
fn sf_number(s: &[u8], max_int: usize, strict: bool) -> Result<(f64, &[u8]), &'static str> {
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let mut i = s.iter().take_while(|b| blank(b)).count();
    let neg = s.get(i) == Some(&b'-');
    i += usize::from(neg);
    let digits = s[i..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits > max_int {
        return Err(TOO_MANY_DIGITS);
    }
    // No digits before a point is allowed (`.5`), not no digits at all.
    if digits == 0 && (s.get(i) != Some(&b'.') || !s.get(i + 1).is_some_and(u8::is_ascii_digit)) {
        return Err(INVALID_NUMBER);
    }
    let mut v = s[i..i + digits]
        .iter()
        .fold(0.0, |acc, d| acc * 10.0 + f64::from(d - b'0'));
    i += digits;
    i += s[i..].iter().take_while(|b| blank(b)).count();
    if s.get(i) == Some(&b'.') {
        if v > 999_999_999_999.0 {
            return Err(TOO_MANY_DIGITS);
        }
        i += 1;
        let frac = s[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        if strict && frac == 0 {
            return Err(INVALID_NUMBER);
        }
        if strict && frac > 3 {
            return Err(TOO_MANY_DIGITS);
        }
        // The kept digits as one exact fraction (0.010, not 0.1 * 0.1).
        let kept = &s[i..i + frac.min(3)];
        let num = kept
            .iter()
            .fold(0.0, |acc, d| acc * 10.0 + f64::from(d - b'0'));
        v += num / 10f64.powi(kept.len() as i32);
        i += frac;
        i += s[i..].iter().take_while(|b| blank(b)).count();
    }
    Ok((if neg { -v } else { v }, &s[i..]))
}

/// A whole text as a number (`SF_Parse_Number`, lenient), or why not: the
/// reason when the reader refused it, `None` when text is left over.
fn sf_whole(s: &[u8], max_int: usize) -> Result<f64, Option<&'static str>> {
    match sf_number(s, max_int, false) {
        Ok((v, [])) => Ok(v),
        Ok(_) => Err(None),
        Err(e) => Err(Some(e)),
    }
}

/// `VNUM_duration`: a lenient number, then a unit (`ms s m h d w y`),
/// blanks around it.
fn vnum_duration(s: &[u8]) -> Option<f64> {
    let (v, rest) = sf_number(s, 15, false).ok()?;
    let unit = std::str::from_utf8(rest).ok()?.trim_matches([' ', '\t']);
    Some(v * lacquer_vcl::exec::value::duration_unit(unit)?)
}

/// `VNUM_2bytes`: a strict number, not negative, then an optional unit
/// (`k m g t p`, any case, an optional `b` after it, or `b` alone), blanks
/// around it; a fraction of a byte (no unit, or `b`) is refused.
fn vnum_bytes(s: &[u8]) -> Option<i64> {
    if s.is_empty() {
        return None;
    }
    let (v, rest) = sf_number(s, 15, true).ok()?;
    if v < 0.0 {
        return None;
    }
    let unit = std::str::from_utf8(rest).ok()?.trim_matches([' ', '\t']);
    let mut chars = unit.chars();
    let shift = match chars.next().map(|c| c.to_ascii_lowercase()) {
        None | Some('b') => {
            if v.fract() != 0.0 || chars.next().is_some() {
                return None;
            }
            0
        }
        Some('k') => 10,
        Some('m') => 20,
        Some('g') => 30,
        Some('t') => 40,
        Some('p') => 50,
        Some(_) => return None,
    };
    if shift > 0 && !matches!(chars.as_str(), "" | "b" | "B") {
        return None;
    }
    let r = (v * (1u64 << shift) as f64).round();
    (r < i64::MAX as f64).then_some(r as i64)
}

fn duration(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let r = match one_of(a, "duration", &[0, 2, 3])? {
        0 => a.str(0)?.and_then(vnum_duration),
        2 => a.real(2)?,
        _ => a.int(3)?.map(|i| i as f64),
    };
    match r {
        Some(d) if d.is_finite() => Ok(Value::Duration(d)),
        _ => fallback_or(a, 1, "std.duration: conversion failed".into()),
    }
}

fn bytes_fn(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let r = match one_of(a, "bytes", &[0, 2, 3])? {
        0 => a.str(0)?.and_then(vnum_bytes),
        2 => a
            .real(2)?
            .filter(|r| r.is_finite() && *r >= 0.0 && *r < 9.2e18)
            .map(|r| r.floor() as i64),
        _ => a.int(3)?.filter(|i| *i >= 0),
    };
    match r {
        Some(b) => Ok(Value::Bytes(b)),
        None => fallback_or(a, 1, "std.bytes: conversion failed".into()),
    }
}

/// A REAL within Varnish's INT range, truncated toward zero (`trunc()`).
fn real_to_int(r: f64) -> Option<i64> {
    let f = r.trunc();
    (f.is_finite() && f >= INT_MIN as f64 && f <= INT_MAX as f64).then_some(f as i64)
}

/// The failure of a string conversion: with the number reader's reason
/// when it gave one, as varnishd words it.
fn conversion_failed(name: &str, why: Option<&str>) -> String {
    match why {
        Some(why) => format!("std.{name}: conversion failed: {why}"),
        None => format!("std.{name}: conversion failed"),
    }
}

fn integer(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let mut why = None;
    let r = match one_of(a, "integer", &[0, 2, 3, 4, 5, 6])? {
        0 => match a.str(0)?.map(|s| sf_whole(s, 15)) {
            Some(Ok(v)) if v.fract() == 0.0 => real_to_int(v),
            Some(Err(e)) => {
                why = e;
                None
            }
            _ => None,
        },
        2 => Some(i64::from(a.bool(2)? == Some(true))),
        3 => a.bytes_val(3)?,
        4 => a.duration(4)?.and_then(real_to_int),
        5 => a.real(5)?.and_then(real_to_int),
        _ => a.time(6)?.and_then(real_to_int),
    };
    match r {
        Some(i) => Ok(Value::Int(i)),
        None => fallback_or(a, 1, conversion_failed("integer", why)),
    }
}

fn real(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let mut why = None;
    let r = match one_of(a, "real", &[0, 2, 3, 4, 5, 6])? {
        0 => match a.str(0)?.map(|s| sf_whole(s, 12)) {
            Some(Ok(v)) => Some(v),
            Some(Err(e)) => {
                why = e;
                None
            }
            None => None,
        },
        2 => a.int(2)?.map(|i| i as f64),
        3 => Some(if a.bool(3)? == Some(true) { 1.0 } else { 0.0 }),
        4 => a.bytes_val(4)?.map(|b| b as f64),
        5 => a.duration(5)?,
        _ => a.time(6)?,
    };
    match r {
        Some(r) if r.is_finite() => Ok(Value::Real(r)),
        _ => fallback_or(a, 1, conversion_failed("real", why)),
    }
}

fn time(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let r = match one_of(a, "time", &[0, 2, 3])? {
        0 => a.str(0)?.and_then(parse_time),
        2 => a.real(2)?,
        _ => a.int(3)?.map(|i| i as f64),
    };
    match r {
        Some(t) => Ok(Value::Time(t)),
        None => fallback_or(a, 1, "std.time: conversion failed".into()),
    }
}

fn ip(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    // As varnishd: a fallback given as NULL (`vtc.no_ip()`) fails the
    // call before the text is looked at, even when the text converts.
    let fallback = a.ip(1)?;
    if a.given(1) && fallback.is_none() {
        return Err("std.ip: invalid fallback".to_string());
    }
    let s = a.str_or_empty(0)?;
    let resolve = a.bool(2)?.unwrap_or(true);
    let default_port = a.str(3)?.map(|p| lossy(p).into_owned());
    // getaddrinfo(3) takes no leading blank; an IPv4-mapped IPv6 address
    // is the IPv4 address, as varnishd's suckaddr stores it.
    let parsed = if s.first().is_some_and(u8::is_ascii_whitespace) {
        None
    } else {
        parse_ip(&lossy(s), default_port.as_deref().unwrap_or("80"), resolve)
    };
    let parsed = parsed.map(|sa| match sa.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), sa.port()),
            None => sa,
        },
        IpAddr::V4(_) => sa,
    });
    match parsed {
        Some(sa) => Ok(Value::Ip(sa)),
        None => match fallback {
            Some(fb) => Ok(Value::Ip(fb)),
            None => Err("std.ip: conversion failed".to_string()),
        },
    }
}

fn service_port(p: &str) -> Option<u16> {
    p.parse().ok().or(match p {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })
}

/// Parses `addr`, `addr:port`, `addr port`, `[v6]:port`, `[v6] port` or a
/// bare IPv6 address; host names are looked up when `resolve` is set.
pub(crate) fn parse_ip(s: &str, default_port: &str, resolve: bool) -> Option<SocketAddr> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']')?;
        let after = rest[end + 1..].trim_start_matches(':').trim();
        (
            &rest[..end],
            if after.is_empty() {
                default_port
            } else {
                after
            },
        )
    } else if s.parse::<IpAddr>().is_ok() {
        (s, default_port)
    } else if let Some((h, p)) = s.split_once(' ') {
        (h, p.trim())
    } else if let Some((h, p)) = s.rsplit_once(':') {
        if h.contains(':') {
            return None;
        }
        (h, p)
    } else {
        (s, default_port)
    };
    let port = if resolve {
        service_port(port)?
    } else {
        port.parse().ok()?
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, port));
    }
    if !resolve {
        return None;
    }
    (host, port).to_socket_addrs().ok()?.next()
}

// ---- time -------------------------------------------------------------

use lacquer_vcl::exec::value::strftime;

/// Parses the time formats `std.time()` accepts: an HTTP date as
/// varnishd's `VTIM_parse` reads it (RFC 1123, also with a one-digit day;
/// RFC 850; asctime; ISO 8601 `1994-11-06T08:49:37`), or seconds since the
/// epoch.
/// `std.time()`'s reading of a string, as varnishd's: a date
/// (`VTIM_parse`), else a number of seconds. As there, a date parsed as
/// 0 (the epoch) counts as no date, and a number must be above 0, so both
/// give the fallback.
pub(crate) fn parse_time(s: &[u8]) -> Option<f64> {
    lacquer_http::date::parse_http_date(s)
        .filter(|t| *t != 0.0)
        .or_else(|| {
            let s = std::str::from_utf8(s).ok()?.trim();
            if !s.bytes().next()?.is_ascii_digit() {
                return None;
            }
            parse_decimal(s).filter(|t| *t > 0.0)
        })
}

fn strftime_fn(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let t = a.time(0)?.unwrap_or(0.0);
    let Some(fmt) = a.str(1)? else {
        return Ok(string(""));
    };
    if !t.is_finite() {
        return Ok(string(""));
    }
    Ok(string(strftime(t, fmt)))
}

fn real2integer(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let r = a.real(0)?.unwrap_or(f64::NAN).round();
    Ok(match real_to_int(r) {
        Some(i) => Value::Int(i),
        None => Value::Int(a.int(1)?.unwrap_or(0)),
    })
}

fn real2time(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    // Not rounded, as varnishd's.
    let r = a.real(0)?.unwrap_or(f64::NAN);
    Ok(if r.is_finite() {
        Value::Time(r)
    } else {
        Value::Time(a.time(1)?.unwrap_or(0.0))
    })
}

fn time2integer(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match a.time(0)?.map(f64::round).and_then(real_to_int) {
        Some(i) => Value::Int(i),
        None => Value::Int(a.int(1)?.unwrap_or(0)),
    })
}

fn time2real(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match a.time(0)?.filter(|t| t.is_finite()) {
        Some(t) => Value::Real(t),
        None => Value::Real(a.real(1)?.unwrap_or(0.0)),
    })
}

// ---- logging ----------------------------------------------------------

fn log(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    ctx.log(LogKind::Log, a.str_or_empty(0)?);
    Ok(Value::Null)
}

fn syslog(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let pri = a.int(0)?.unwrap_or(0);
    let msg = a.str_or_empty(1)?;
    // As varnishd: the message is put together in the workspace, given
    // back once sent; a message that does not fit is not sent.
    if let Some(ws) = ctx.workspace(WsKind::Task) {
        let mark = ws.snapshot();
        let fits = ws.alloc(msg.len() as u64 + 1);
        ws.reset(mark);
        if !fits {
            return Ok(Value::Null);
        }
    }
    let mut line = format!("<{pri}>varnishd[{}]: ", std::process::id()).into_bytes();
    line.extend_from_slice(msg);
    // Best effort, like syslog(3): a missing syslog daemon is not an error.
    if let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() {
        let _ = sock.send_to(&line, "/dev/log");
    }
    Ok(Value::Null)
}

fn timestamp(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    // As varnishd: no record for an empty or unset label.
    match a.str(0)? {
        Some(label) if !label.is_empty() => ctx.timestamp(label),
        _ => {}
    }
    Ok(Value::Null)
}

// ---- request control --------------------------------------------------

fn cache_req_body(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let max = a.bytes_val(0)?.unwrap_or(0).max(0) as u64;
    // As varnishd: past vcl_recv the body may already be on its way to
    // the backend, so caching it is refused (logged, not fatal).
    if ctx.sub() != BuiltinSub::Recv {
        ctx.log(LogKind::Error, b"req.body can only be cached in vcl_recv{}");
        return Ok(Value::Bool(false));
    }
    Ok(Value::Bool(ctx.cache_req_body(max)?))
}

fn late_100_continue(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    // As varnishd: outside vcl_recv it is logged and ignored.
    if ctx.sub() != BuiltinSub::Recv {
        ctx.log(
            LogKind::Error,
            b"std.late_100_continue() only valid in vcl_recv{}",
        );
        return Ok(Value::Null);
    }
    ctx.late_100_continue(a.bool(0)?.unwrap_or(false));
    Ok(Value::Null)
}

fn set_ip_tos(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let tos = a.int(0)?.unwrap_or(0);
    ctx.set_ip_tos(tos)?;
    Ok(Value::Null)
}

fn rollback(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    ctx.rollback(a.http(0)?)?;
    Ok(Value::Null)
}

/// The last `std.ban()` error of the task.
struct BanError(Bytes);

fn ban(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let result = match a.str(0)? {
        None => Err("Null argument".to_string()),
        Some(spec) => ctx.ban(spec),
    };
    let ok = result.is_ok();
    if let Err(e) = &result {
        // Logged without failing the task, as varnishd's VRT_ban_string.
        ctx.log(LogKind::Error, format!("ban(): {e}").as_bytes());
    }
    let msg = result.err().map(Bytes::from).unwrap_or_default();
    ctx.privs().insert(0, BanError(msg));
    Ok(Value::Bool(ok))
}

fn ban_error(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Str(
        ctx.privs()
            .get::<BanError>(0)
            .map(|e| e.0.clone())
            .unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEF: FnFlags = FnFlags {
        pathname: true,
        noescape: false,
        period: false,
    };

    #[test]
    fn fnmatch_cases() {
        let nop = FnFlags {
            pathname: false,
            ..DEF
        };
        let noesc = FnFlags {
            noescape: true,
            ..DEF
        };
        let per = FnFlags {
            period: true,
            ..DEF
        };
        assert!(fnmatch(b"/foo/", b"/foo/", DEF));
        assert!(!fnmatch(b"/foo/", b"/bar/", DEF));
        assert!(fnmatch(b"/foo/*", b"/foo/bar", DEF));
        assert!(!fnmatch(b"/foo/bar/*", b"/foo/bar", DEF));
        assert!(fnmatch(b"/foo/?", b"/foo/b", DEF));
        assert!(!fnmatch(b"/foo/?", b"/foo/bar", DEF));
        assert!(fnmatch(b"/foo/[a-z]", b"/foo/b", DEF));
        assert!(!fnmatch(b"/foo/[a-z]", b"/foo/B", DEF));
        assert!(fnmatch(b"/foo/[!a-z]", b"/foo/B", DEF));
        assert!(!fnmatch(b"/foo/*/quux", b"/foo/bar/baz/quux", DEF));
        assert!(fnmatch(b"/foo/*/quux", b"/foo/bar/baz/quux", nop));
        assert!(!fnmatch(b"/foo/?/bar", b"/foo///bar", DEF));
        assert!(fnmatch(b"/foo/?/bar", b"/foo///bar", nop));
        assert!(!fnmatch(b"/foo/[a/b]/bar", b"/foo///bar", DEF));
        assert!(fnmatch(b"/foo/[a/b]/bar", b"/foo///bar", nop));
        assert!(fnmatch(br"\\foo", br"\foo", DEF));
        assert!(!fnmatch(br"\\foo", br"\foo", noesc));
        assert!(fnmatch(b"*foo", b".foo", DEF));
        assert!(!fnmatch(b"*foo", b".foo", per));
        assert!(fnmatch(b"[]]", b"]", DEF));
        assert!(fnmatch(b"[", b"[", DEF));
        assert!(fnmatch(b"a*b*c", b"axxbyyc", DEF));
        assert!(!fnmatch(b"a*b*c", b"axxbyy", DEF));
    }

    #[test]
    fn querysort_cases() {
        let q = |s: &str| String::from_utf8(querysort(s.as_bytes())).unwrap();
        assert_eq!(q("/foo/bar?t=0&b=0&p=0&c=5"), "/foo/bar?b=0&c=5&p=0&t=0");
        assert_eq!(q("/foo/bar?coa=0&co=0"), "/foo/bar?co=0&coa=0");
        assert_eq!(q("/foo/bar?a=0&&&&&"), "/foo/bar?a=0");
        assert_eq!(q("/foo/bar?&a=0&&&&&z&w&x&"), "/foo/bar?a=0&w&x&z");
        assert_eq!(q("/foo/bar?&"), "/foo/bar?");
        assert_eq!(q("/foo/bar"), "/foo/bar");
    }

    #[test]
    fn time_parsing() {
        assert_eq!(
            parse_time(b"Mon, 20 Dec 2010 00:00:00 GMT"),
            Some(1_292_803_200.0)
        );
        assert_eq!(parse_time(b"Monday, 20-Dec-30 00:00:00 GMT"), None);
        assert_eq!(
            parse_time(b"Thu, 4 Jan 2018 06:26:29 GMT"),
            parse_time(b"Thu, 04 Jan 2018 06:26:29 GMT")
        );
        assert!(parse_time(b"Thu, 04 Jan 2018 06:26:29 GMT").is_some());
        assert_eq!(
            parse_time(b"Friday, 20-Dec-30 00:00:00 GMT"),
            Some(1_923_955_200.0)
        );
        assert_eq!(parse_time(b"Monday, 30-Feb-15 00:00:00 GMT"), None);
        assert_eq!(
            parse_time(b"Mon Dec 20 00:00:00 2010"),
            Some(1_292_803_200.0)
        );
        assert_eq!(parse_time(b"2030-12-20T00:00:00"), Some(1_923_955_200.0));
        // The epoch and 0 are no time at all, as in varnishd.
        assert_eq!(parse_time(b"Thu, 01 Jan 1970 00:00:00 GMT"), None);
        assert_eq!(parse_time(b"0"), None);
        assert_eq!(parse_time(b"0.5"), Some(0.5));
        assert_eq!(parse_time(b"1055455200.00"), Some(1_055_455_200.0));
        assert_eq!(
            parse_time(b"Mon, 20 Dec 2010 00:00:60 GMT"),
            Some(1_292_803_259.0)
        );
        assert_eq!(parse_time(b"Mon, 20 Dec 2010 00:00:61 GMT"), None);
        assert_eq!(parse_time(b"Sun Nov  6 08:49:37 1994"), Some(784_111_777.0));
        assert_eq!(parse_time(b"garbage"), None);
    }

    #[test]
    fn strftime_formats() {
        assert_eq!(
            strftime(1_292_803_200.0, b"%Y%m%dT%H%M%SZ"),
            b"20101220T000000Z"
        );
        assert_eq!(
            strftime(784_111_777.0, b"%a, %d %b %Y %T %Z %j %% %q"),
            b"Sun, 06 Nov 1994 08:49:37 GMT 310 % %q"
        );
        assert_eq!(
            strftime(784_111_777.0, b"%A %B %e %I%p %u %w %s"),
            b"Sunday November  6 08AM 7 0 784111777"
        );
    }

    #[test]
    fn ip_parsing() {
        let p = |s: &str, r| parse_ip(s, "80", r).map(|a| a.to_string());
        assert_eq!(p("1.2.3.5", false).unwrap(), "1.2.3.5:80");
        assert_eq!(p("1.2.3.5:8080", false).unwrap(), "1.2.3.5:8080");
        assert_eq!(p("1.2.3.5 8080", false).unwrap(), "1.2.3.5:8080");
        assert_eq!(p("2001:db8::", false).unwrap(), "[2001:db8::]:80");
        assert_eq!(p("[::1]:http", true).unwrap(), "[::1]:80");
        assert_eq!(p("[::1] 81", false).unwrap(), "[::1]:81");
        assert_eq!(p("2001::db8::", false), None);
        assert_eq!(p("localhost", false), None);
        assert_eq!(p("8.8.8.*", false), None);
        assert_eq!(p("", true), None);
        assert_eq!(parse_ip("1.2.3.4", "8080", false).unwrap().port(), 8080);
    }

    #[test]
    fn random_in_range() {
        for _ in 0..1000 {
            let r = crate::rnd::next_f64();
            assert!((0.0..1.0).contains(&r));
        }
    }
}
