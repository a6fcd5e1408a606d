//! Runtime values of every VCL type and Varnish's exact conversions between
//! them and strings.
//!
//! VCL strings are byte strings (header values need not be UTF-8), so
//! strings are [`Bytes`]: cloning one is a reference-count increment, never a
//! copy. The string forms follow Varnish 7.1's `VRT_*_string` functions:
//! INT in decimal (failing outside the RFC 8941 integer range), REAL and
//! DURATION with `%.3f` (failing outside the decimal range), TIME as an
//! RFC 1123 HTTP date, BOOL `true`/`false`, IP without its port, BACKEND and
//! STEVEDORE by name, BYTES as an integer number of bytes.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

use super::context::{HeaderName, HttpWhich};

/// Largest INT that converts to a string (RFC 8941 sf-integer).
pub const INT_MAX: i64 = 999_999_999_999_999;
/// Smallest INT that converts to a string.
pub const INT_MIN: i64 = -999_999_999_999_999;

/// Largest REAL that converts to a string (RFC 8941 sf-decimal,
/// 999999999999.999 rounded down to a double).
pub fn real_max() -> f64 {
    f64::from_bits(0x426d_1a94_a1ff_fff8)
}

/// A backend (or director) reference: the server's handle plus the VCL name
/// used when the backend is converted to a string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    /// Server-assigned identity.
    pub id: u32,
    /// Name as declared in VCL (`backend default { ... }` is `default`).
    pub name: Arc<str>,
}

/// A value of any VCL type.
///
/// `Null` is Varnish's NULL: an unset header, a NULL string returned by a
/// vmod, the `None` backend. It converts to the empty string where strings
/// are concatenated and is false in boolean context.
// An 8-byte tag keeps every payload 8-byte aligned, so moving values around
// compiles to aligned copies (with a 1-byte tag the compiler copied payloads
// at odd offsets and paid store-forwarding stalls on every comparison).
#[derive(Clone, Debug, PartialEq)]
#[repr(u64)]
pub enum Value {
    Null,
    Str(Bytes),
    Bool(bool),
    Int(i64),
    Real(f64),
    /// Seconds.
    Duration(f64),
    /// Seconds since the epoch.
    Time(f64),
    /// A byte count.
    Bytes(i64),
    Ip(SocketAddr),
    Backend(Backend),
    /// Index into the program's ACL table.
    Acl(u32),
    /// A REGEX (passed to or returned by a vmod): index into the
    /// program's compiled regexes.
    Regex(u32),
    /// A probe, by name.
    Probe(Arc<str>),
    Blob(Bytes),
    /// A reference to a header (`req.http.x` passed as HEADER to a vmod).
    Header(HttpWhich, Arc<HeaderName>),
    /// A whole HTTP object (`req` passed as HTTP to a vmod).
    Http(HttpWhich),
    /// A storage backend, by name.
    Stevedore(Arc<str>),
    /// A subroutine, by index in the program.
    Sub(u32),
    /// An ENUM argument's identifier.
    Enum(Arc<str>),
    /// A vmod object instance, by index.
    Instance(u32),
    /// A STRANDS argument given as several parts (`"g" + req.http.foo`):
    /// vmods see the joined string, and the parts where they matter
    /// (`blob.decode` quotes the first part in its error).
    Strands(Arc<Strands>),
}

/// The parts of a multi-part STRANDS argument and their concatenation.
#[derive(Clone, Debug, PartialEq)]
pub struct Strands {
    /// Each part; `None` for a NULL part (an unset header).
    pub parts: Box<[Option<Bytes>]>,
    /// The parts joined, NULL parts contributing nothing.
    pub joined: Bytes,
}

/// Why a value could not be converted; the message is what Varnish logs as
/// `VCL_Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvError(pub String);

impl Value {
    /// Builds a string value from anything byte-like.
    pub fn str(s: impl Into<Bytes>) -> Value {
        Value::Str(s.into())
    }

    /// VCL's implicit truth value: BOOL itself, INT non-zero, DURATION
    /// positive, strings and other references when not NULL.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Int(i) | Value::Bytes(i) => *i != 0,
            Value::Duration(d) => *d > 0.0,
            Value::Real(r) => *r != 0.0,
            _ => true,
        }
    }

    /// Appends the string form of the value to `out`. Returns `Ok(false)`
    /// if the value is NULL (nothing appended), `Ok(true)` otherwise.
    pub fn append_to(&self, out: &mut Vec<u8>, acl_names: &[Arc<str>]) -> Result<bool, ConvError> {
        match self {
            Value::Null => return Ok(false),
            Value::Str(s) => out.extend_from_slice(s),
            Value::Strands(s) => out.extend_from_slice(&s.joined),
            // VRT_BLOB_string: `:<base64>:`.
            Value::Blob(b) => {
                out.push(b':');
                append_base64(out, b);
                out.push(b':');
            }
            Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            // BYTES print like INT in Varnish 7.1 (i00001.vtc expects
            // "INT overflow" for an oversized BYTES value).
            Value::Int(i) | Value::Bytes(i) => {
                if !(INT_MIN..=INT_MAX).contains(i) {
                    // The text varnishd 7.1.1 logs: upper-case hex, no `0x`.
                    return Err(ConvError(format!(
                        "INT overflow converting to string ({:X})",
                        i
                    )));
                }
                append_int(out, *i);
            }
            Value::Real(r) | Value::Duration(r) => append_real(out, *r)?,
            Value::Time(t) => append_http_date(out, *t)?,
            Value::Ip(sa) => append_ip(out, sa.ip()),
            Value::Backend(b) => out.extend_from_slice(b.name.as_bytes()),
            Value::Acl(i) => match acl_names.get(*i as usize) {
                Some(n) => out.extend_from_slice(n.as_bytes()),
                None => return Err(ConvError(format!("unknown ACL #{i}"))),
            },
            Value::Probe(n) | Value::Enum(n) => out.extend_from_slice(n.as_bytes()),
            // As varnishd: a store reads as its VCL name, `storage.<name>`.
            Value::Stevedore(n) => {
                out.extend_from_slice(b"storage.");
                out.extend_from_slice(n.as_bytes());
            }
            Value::Header(_, h) => out.extend_from_slice(h.name.as_bytes()),
            Value::Http(w) => out.extend_from_slice(w.name().as_bytes()),
            Value::Sub(_) | Value::Instance(_) | Value::Regex(_) => {
                return Err(ConvError("Cannot convert this value to STRING".into()));
            }
        }
        Ok(true)
    }

    /// The string form as an owned value (`Null` stays `Null`).
    pub fn to_str_value(&self, acl_names: &[Arc<str>]) -> Result<Value, ConvError> {
        match self {
            Value::Null | Value::Str(_) => Ok(self.clone()),
            _ => {
                let mut v = Vec::new();
                self.append_to(&mut v, acl_names)?;
                Ok(Value::Str(Bytes::from(v)))
            }
        }
    }

    /// The VCL type name of the value, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Str(_) => "STRING",
            Value::Strands(_) => "STRANDS",
            Value::Bool(_) => "BOOL",
            Value::Int(_) => "INT",
            Value::Real(_) => "REAL",
            Value::Duration(_) => "DURATION",
            Value::Time(_) => "TIME",
            Value::Bytes(_) => "BYTES",
            Value::Ip(_) => "IP",
            Value::Backend(_) => "BACKEND",
            Value::Acl(_) => "ACL",
            Value::Regex(_) => "REGEX",
            Value::Probe(_) => "PROBE",
            Value::Blob(_) => "BLOB",
            Value::Header(..) => "HEADER",
            Value::Http(_) => "HTTP",
            Value::Stevedore(_) => "STEVEDORE",
            Value::Sub(_) => "SUB",
            Value::Enum(_) => "ENUM",
            Value::Instance(_) => "INSTANCE",
        }
    }
}

fn push_fmt(out: &mut Vec<u8>, args: std::fmt::Arguments<'_>) {
    struct W<'a>(&'a mut Vec<u8>);
    impl std::fmt::Write for W<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.extend_from_slice(s.as_bytes());
            Ok(())
        }
    }
    // Writing into a Vec cannot fail.
    let _ = W(out).write_fmt(args);
}

/// Standard base64 with padding.
fn append_base64(out: &mut Vec<u8>, data: &[u8]) {
    use lacquer_http::base64;
    base64::encode_into(out, data, base64::STANDARD, Some(b'='));
}

/// An address as `inet_ntop` prints it; IPv4 without going through `fmt`
/// (client addresses are converted on most requests).
fn append_ip(out: &mut Vec<u8>, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                if o >= 100 {
                    out.push(b'0' + o / 100);
                }
                if o >= 10 {
                    out.push(b'0' + o / 10 % 10);
                }
                out.push(b'0' + o % 10);
            }
        }
        std::net::IpAddr::V6(v6) => push_fmt(out, format_args!("{v6}")),
    }
}

/// Decimal digits of an integer, without going through `fmt`.
fn append_int(out: &mut Vec<u8>, i: i64) {
    if i < 0 {
        out.push(b'-');
    }
    let mut v = i.unsigned_abs();
    let mut digits = [0u8; 20];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend(digits[..n].iter().rev());
}

/// REAL / DURATION as `%.3f`, failing like `VRT_REAL_string` outside the
/// RFC 8941 decimal range or for NaN.
pub fn append_real(out: &mut Vec<u8>, r: f64) -> Result<(), ConvError> {
    let max = real_max();
    if r.is_nan() || r > max || r < -max {
        return Err(ConvError(format!(
            "REAL overflow converting to string ({})",
            c_exp(r)
        )));
    }
    // TTLs and the like (non-negative, below 1e9) without `fmt` unless the
    // value lies too near a rounding boundary for the product by 1000 to
    // be trusted (its error is below 1e-4 in this range). Negative zero
    // takes `fmt`, which writes `-0.000` as printf does.
    if r.is_sign_positive() && r < 1e9 {
        let scaled = r * 1000.0;
        let whole = scaled.trunc();
        let frac = scaled - whole;
        if (frac - 0.5).abs() > 1e-3 {
            let n = whole as u64 + u64::from(frac > 0.5);
            append_int(out, (n / 1000) as i64);
            let ms = n % 1000;
            out.extend_from_slice(&[
                b'.',
                b'0' + (ms / 100) as u8,
                b'0' + (ms / 10 % 10) as u8,
                b'0' + (ms % 10) as u8,
            ]);
            return Ok(());
        }
    }
    push_fmt(out, format_args!("{r:.3}"));
    Ok(())
}

/// C's `%e` formatting (used in Varnish's overflow messages).
fn c_exp(r: f64) -> String {
    if r.is_nan() {
        return "nan".into();
    }
    if r.is_infinite() {
        return if r > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let s = format!("{r:.6e}");
    // Rust prints `1.000000e12`; C prints `1.000000e+12`.
    match s.split_once('e') {
        Some((m, e)) => {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', e),
            };
            format!("{m}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

pub use lacquer_http::date::{MONTH, WDAY, WDAY_LONG, days_from_civil, strftime};

/// TIME as an RFC 1123 date (`Sun, 06 Nov 1994 08:49:37 GMT`), truncating
/// fractional seconds like `VTIM_format`; a time with no such date is the
/// error VCL logs.
pub fn append_http_date(out: &mut Vec<u8>, t: f64) -> Result<(), ConvError> {
    lacquer_http::date::append_http_date(out, t)
        .map_err(|_| ConvError("Unformattable VCL_TIME".into()))
}

/// Formats a TIME as an HTTP date string.
pub fn http_date(t: f64) -> Result<String, ConvError> {
    let mut v = Vec::with_capacity(29);
    append_http_date(&mut v, t)?;
    Ok(String::from_utf8_lossy(&v).into_owned())
}

/// Seconds in one of VCL's duration units (`ms s m h d w y`), as
/// `VNUM_duration` knows them.
pub fn duration_unit(unit: &str) -> Option<f64> {
    Some(match unit {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "w" => 604_800.0,
        "y" => 31_536_000.0,
        _ => return None,
    })
}

/// Parses a VCL duration string like `VNUM_duration`: a decimal number
/// followed by a unit (`ms`, `s`, `m`, `h`, `d`, `w`, `y`), spaces allowed
/// between them. A missing unit is an error.
pub fn parse_duration(s: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(s).ok()?.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = parse_decimal(num)?;
    Some(n * duration_unit(unit.trim_start())?)
}

/// Parses a byte size like `VNUM_2bytes`: a number with an optional
/// `B`, `KB`, `MB`, `GB`, `TB`, `PB` suffix (the `B` may be left out; case
/// insensitive; powers of 1024).
pub fn parse_bytes(s: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(s).ok()?.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = parse_decimal(num)?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit.strip_suffix('b').unwrap_or(&unit);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return None,
    };
    let v = n * (1u64 << shift) as f64;
    (v.is_finite() && v < i64::MAX as f64).then_some(v.round() as i64)
}

/// Strict decimal number: optional sign, digits, optional fraction. No
/// exponent, no hex, no `inf`/`nan` (which `str::parse::<f64>` accepts).
pub fn parse_decimal(s: &str) -> Option<f64> {
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let ok = !(int.is_empty() && frac.is_empty())
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit());
    if !ok {
        return None;
    }
    s.parse().ok()
}

/// Parses an integer like `std.integer()`: optional sign and decimal digits,
/// within the INT range.
pub fn parse_int(s: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(s).ok()?.trim();
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: i64 = s.parse().ok()?;
    (INT_MIN..=INT_MAX).contains(&v).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &Value) -> String {
        let mut out = Vec::new();
        v.append_to(&mut out, &[]).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn string_forms() {
        assert_eq!(s(&Value::Int(-42)), "-42");
        assert_eq!(s(&Value::Int(0)), "0");
        assert_eq!(s(&Value::Int(INT_MIN)), "-999999999999999");
        assert!(
            Value::Bytes(INT_MAX * 10)
                .append_to(&mut Vec::new(), &[])
                .is_err()
        );
        assert_eq!(s(&Value::Real(1.5)), "1.500");
        assert_eq!(s(&Value::Duration(120.0)), "120.000");
        assert_eq!(s(&Value::Real(-0.0004)), "-0.000");
        assert_eq!(s(&Value::Bool(true)), "true");
        assert_eq!(s(&Value::Bool(false)), "false");
        assert_eq!(s(&Value::Bytes(1024)), "1024");
        assert_eq!(s(&Value::Blob(Bytes::from_static(b"foobar"))), ":Zm9vYmFy:");
        assert_eq!(s(&Value::Blob(Bytes::from_static(b"fo"))), ":Zm8=:");
        assert_eq!(s(&Value::Blob(Bytes::from_static(b"f"))), ":Zg==:");
        assert_eq!(s(&Value::Blob(Bytes::new())), "::");
        assert_eq!(s(&Value::Ip("127.0.0.1:80".parse().unwrap())), "127.0.0.1");
        assert_eq!(s(&Value::Ip("[::1]:80".parse().unwrap())), "::1");
        // The fast REAL path prints what `%.3f` prints.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for i in 0..20_000u32 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let r = match i % 4 {
                0 => (seed % 2_000_000) as f64 / 1000.0,
                1 => (seed % 1_000_000_000) as f64 / 997.0,
                2 => f64::from_bits(seed) % 1e9,
                _ => (seed % 100_000) as f64 * 0.0005,
            };
            if r.is_finite() {
                assert_eq!(s(&Value::Real(r)), format!("{r:.3}"), "{r:e}");
            }
        }
        for r in [
            0.0,
            0.0005,
            0.0015,
            2.5e-4,
            999_999_999.999_5,
            1e9,
            300.0,
            604_800.0,
        ] {
            assert_eq!(s(&Value::Duration(r)), format!("{r:.3}"), "{r:e}");
        }
        // Every octet value prints as std (and inet_ntop) print it.
        for o in 0..=255u8 {
            let ip = std::net::Ipv4Addr::new(o, 0, 255, o);
            let sa = std::net::SocketAddr::from((ip, 1));
            assert_eq!(s(&Value::Ip(sa)), ip.to_string());
        }
        let b = Backend {
            id: 3,
            name: "default".into(),
        };
        assert_eq!(s(&Value::Backend(b)), "default");
        assert_eq!(s(&Value::Stevedore("s0".into())), "storage.s0");
        let mut out = Vec::new();
        assert!(!Value::Null.append_to(&mut out, &[]).unwrap());
        assert!(out.is_empty());
    }

    #[test]
    fn acl_names() {
        let mut out = Vec::new();
        Value::Acl(1)
            .append_to(&mut out, &["a".into(), "local".into()])
            .unwrap();
        assert_eq!(out, b"local");
        assert!(Value::Acl(5).append_to(&mut out, &[]).is_err());
    }

    #[test]
    fn overflow_errors() {
        let mut out = Vec::new();
        let e = Value::Int(INT_MAX + 1)
            .append_to(&mut out, &[])
            .unwrap_err();
        assert_eq!(e.0, "INT overflow converting to string (38D7EA4C68000)");
        assert!(Value::Int(INT_MAX).append_to(&mut out, &[]).is_ok());
        let e = Value::Real(1e13).append_to(&mut out, &[]).unwrap_err();
        assert_eq!(e.0, "REAL overflow converting to string (1.000000e+13)");
        assert!(Value::Real(f64::NAN).append_to(&mut out, &[]).is_err());
        assert!(
            Value::Real(999_999_999_999.999)
                .append_to(&mut out, &[])
                .is_ok()
        );
        assert!(
            Value::Duration(f64::INFINITY)
                .append_to(&mut out, &[])
                .is_err()
        );
    }

    #[test]
    fn http_dates() {
        assert_eq!(
            http_date(784_111_777.0).unwrap(),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(
            http_date(f64::NAN),
            Err(ConvError("Unformattable VCL_TIME".into()))
        );
    }

    #[test]
    fn number_parsing() {
        assert_eq!(parse_duration(b"1.5s"), Some(1.5));
        assert_eq!(parse_duration(b"10 m"), Some(600.0));
        assert_eq!(parse_duration(b"100ms"), Some(0.1));
        assert_eq!(parse_duration(b"2w"), Some(1_209_600.0));
        assert_eq!(parse_duration(b"4"), None);
        assert_eq!(parse_duration(b"s"), None);
        assert_eq!(parse_duration(b"infs"), None);
        assert_eq!(parse_bytes(b"1k"), Some(1024));
        assert_eq!(parse_bytes(b"1.5 MB"), Some(1_572_864));
        assert_eq!(parse_bytes(b"100"), Some(100));
        assert_eq!(parse_bytes(b"1x"), None);
        assert_eq!(parse_int(b" -12 "), Some(-12));
        assert_eq!(parse_int(b"1e3"), None);
        assert_eq!(parse_int(b"9999999999999999"), None);
        assert_eq!(parse_decimal("nan"), None);
        assert_eq!(parse_decimal("-.5"), Some(-0.5));
    }

    #[test]
    fn truthiness() {
        assert!(!Value::Null.truthy());
        assert!(Value::str("").truthy());
        assert!(!Value::Int(0).truthy());
        assert!(Value::Int(-1).truthy());
        assert!(!Value::Duration(0.0).truthy());
        assert!(!Value::Duration(-1.0).truthy());
        assert!(Value::Duration(0.5).truthy());
    }
}
