//! Ban expressions: parsing (with varnishd's error messages), rendering for
//! `ban.list`, and evaluation against an object (and, for `req.*` tests, the
//! request that looks it up).
//!
//! Grammar: `FIELD OP ARG [&& FIELD OP ARG]…` where FIELD is `req.url`,
//! `req.http.NAME`, `obj.status`, `obj.http.NAME`, `obj.ttl`, `obj.age`,
//! `obj.grace` or `obj.keep`. String fields take `==`, `!=`, `~`, `!~` (regular
//! expressions); duration fields take `==`, `!=`, `>`, `>=`, `<`, `<=` with a
//! duration argument such as `1d` or `123ms`.
//!
//! The ban list itself (ordering, object references, the lurker) lives in the
//! cache; this module is the pure expression language.

use std::fmt::Write as _;

use regex::bytes::Regex;

use crate::vary::HeaderLookup;

/// The variable a ban test looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BanField {
    /// `req.url`
    ReqUrl,
    /// `req.http.NAME`
    ReqHttp(String),
    /// `obj.status`
    ObjStatus,
    /// `obj.http.NAME`
    ObjHttp(String),
    /// `obj.ttl` (remaining time to live)
    ObjTtl,
    /// `obj.age`
    ObjAge,
    /// `obj.grace`
    ObjGrace,
    /// `obj.keep`
    ObjKeep,
}

impl BanField {
    fn is_duration(&self) -> bool {
        matches!(
            self,
            BanField::ObjTtl | BanField::ObjAge | BanField::ObjGrace | BanField::ObjKeep
        )
    }

    fn is_req(&self) -> bool {
        matches!(self, BanField::ReqUrl | BanField::ReqHttp(_))
    }

    fn render(&self, out: &mut String) {
        match self {
            BanField::ReqUrl => out.push_str("req.url"),
            BanField::ReqHttp(h) => {
                out.push_str("req.http.");
                out.push_str(h);
            }
            BanField::ObjStatus => out.push_str("obj.status"),
            BanField::ObjHttp(h) => {
                out.push_str("obj.http.");
                out.push_str(h);
            }
            BanField::ObjTtl => out.push_str("obj.ttl"),
            BanField::ObjAge => out.push_str("obj.age"),
            BanField::ObjGrace => out.push_str("obj.grace"),
            BanField::ObjKeep => out.push_str("obj.keep"),
        }
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BanOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `~`
    Match,
    /// `!~`
    NoMatch,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

impl BanOp {
    fn parse(s: &str) -> Option<BanOp> {
        Some(match s {
            "==" => BanOp::Eq,
            "!=" => BanOp::Ne,
            "~" => BanOp::Match,
            "!~" => BanOp::NoMatch,
            ">" => BanOp::Gt,
            ">=" => BanOp::Ge,
            "<" => BanOp::Lt,
            "<=" => BanOp::Le,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            BanOp::Eq => "==",
            BanOp::Ne => "!=",
            BanOp::Match => "~",
            BanOp::NoMatch => "!~",
            BanOp::Gt => ">",
            BanOp::Ge => ">=",
            BanOp::Lt => "<",
            BanOp::Le => "<=",
        }
    }
}

#[derive(Debug, Clone)]
enum BanArg {
    Str(Vec<u8>, String),
    Regex(Regex, String),
    Duration(f64),
}

/// One `FIELD OP ARG` test.
#[derive(Debug, Clone)]
pub struct BanTest {
    field: BanField,
    op: BanOp,
    arg: BanArg,
}

/// A parsed ban expression: tests joined by `&&`.
#[derive(Debug, Clone)]
pub struct BanSpec {
    tests: Vec<BanTest>,
}

/// A refused ban expression; the message is varnishd's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BanError(pub String);

/// The object side of a ban evaluation.
#[derive(Clone, Copy)]
pub struct BanObject<'a> {
    /// Response status.
    pub status: u16,
    /// Stored response headers.
    pub headers: &'a dyn HeaderLookup,
    /// When the object was (re)validated (seconds since the epoch).
    pub t_origin: f64,
    /// Time to live from `t_origin`.
    pub ttl: f64,
    /// Grace.
    pub grace: f64,
    /// Keep.
    pub keep: f64,
}

impl std::fmt::Debug for BanObject<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BanObject")
            .field("status", &self.status)
            .field("t_origin", &self.t_origin)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// The request side of a ban evaluation (only `req.*` tests use it).
#[derive(Clone, Copy)]
pub struct BanRequest<'a> {
    /// `req.url`
    pub url: &'a [u8],
    /// Request headers.
    pub headers: &'a dyn HeaderLookup,
}

impl std::fmt::Debug for BanRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BanRequest")
            .field("url", &String::from_utf8_lossy(self.url))
            .finish_non_exhaustive()
    }
}

/// Parse a duration as ban arguments take it: a number and a unit among
/// `ms`, `s`, `m`, `h`, `d`, `w`, `y`.
pub fn parse_duration(s: &str) -> Option<f64> {
    let split = s
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || (*i == 0 && (*c == '-' || *c == '+'))))
        .map(|(i, _)| i)?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let mult = match unit {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        "w" => 7.0 * 86400.0,
        "y" => 365.0 * 86400.0,
        _ => return None,
    };
    let d = v * mult;
    d.is_finite().then_some(d)
}

/// Render a duration with the largest unit that represents it exactly
/// (`86400` → `1d`, `5400` → `90m`, `0.456` → `456ms`, `6.789` → `6.789s`).
pub fn render_duration(d: f64) -> String {
    if d == 0.0 {
        return "0s".into();
    }
    let integral = |q: f64| (q - q.round()).abs() <= 1e-9 * q.abs().max(1.0);
    const UNITS: [(&str, f64); 6] = [
        ("y", 365.0 * 86400.0),
        ("w", 7.0 * 86400.0),
        ("d", 86400.0),
        ("h", 3600.0),
        ("m", 60.0),
        ("s", 1.0),
    ];
    for (u, secs) in UNITS {
        let q = d / secs;
        if q.abs() >= 1.0 && integral(q) {
            return format!("{}{u}", q.round() as i64);
        }
    }
    if d.abs() < 1.0 && integral(d * 1000.0) {
        return format!("{}ms", (d * 1000.0).round() as i64);
    }
    let mut s = format!("{d:.3}");
    while s.ends_with('0') {
        s.pop();
    }
    if s.ends_with('.') {
        s.pop();
    }
    s.push('s');
    s
}

/// Split a ban string into words as varnishd's argument parser does: white space
/// separates, `"…"` groups (the quotes are removed; `\"` inside is kept as `"`).
pub fn split_words(s: &str) -> Result<Vec<String>, BanError> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&c) = chars.peek() else { break };
        let mut w = String::new();
        if c == '"' {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            if n != '"' && n != '\\' {
                                w.push('\\');
                            }
                            w.push(n);
                        }
                    }
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => w.push(c),
                }
            }
            if !closed {
                return Err(BanError("Missing '\"'".into()));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                w.push(c);
                chars.next();
            }
        }
        out.push(w);
    }
    Ok(out)
}

fn parse_field(a1: &str) -> Result<BanField, BanError> {
    // varnishd 7.1 takes an empty header name (`req.http.`): a test of a
    // header no object or request has.
    let http = |prefix: &str, make: fn(String) -> BanField| -> Option<Result<BanField, BanError>> {
        let name = a1.strip_prefix(prefix)?;
        Some(Ok(make(name.to_owned())))
    };
    if let Some(r) = http("req.http.", BanField::ReqHttp) {
        return r;
    }
    if let Some(r) = http("obj.http.", BanField::ObjHttp) {
        return r;
    }
    Ok(match a1 {
        "req.url" => BanField::ReqUrl,
        "obj.status" => BanField::ObjStatus,
        "obj.ttl" => BanField::ObjTtl,
        "obj.age" => BanField::ObjAge,
        "obj.grace" => BanField::ObjGrace,
        "obj.keep" => BanField::ObjKeep,
        _ => return Err(BanError(format!("Unknown or unsupported field \"{a1}\""))),
    })
}

fn parse_test(a1: &str, a2: &str, a3: &str) -> Result<BanTest, BanError> {
    let field = parse_field(a1)?;
    let op = BanOp::parse(a2);
    let arg = if field.is_duration() {
        let op = op.filter(|o| !matches!(o, BanOp::Match | BanOp::NoMatch));
        let Some(op) = op else {
            return Err(BanError(format!(
                "expected conditional (==, !=, >, >=, < or <=) got \"{a2}\""
            )));
        };
        let Some(d) = parse_duration(a3) else {
            return Err(BanError(format!(
                "expected duration <n.nn>[ms|s|m|h|d|w|y] got \"{a3}\""
            )));
        };
        return Ok(BanTest {
            field,
            op,
            arg: BanArg::Duration(d),
        });
    } else {
        match op {
            // The error in PCRE's words, as varnishd's ban() gives it.
            Some(BanOp::Match | BanOp::NoMatch) => match lacquer_vsl::re::compile(a3, false) {
                Ok(re) => BanArg::Regex(re, a3.to_owned()),
                Err(e) => return Err(BanError(format!("Regex compile error: {}", e.msg))),
            },
            Some(BanOp::Eq | BanOp::Ne) => BanArg::Str(a3.as_bytes().to_vec(), a3.to_owned()),
            _ => {
                return Err(BanError(format!(
                    "expected conditional (==, !=, ~ or !~) got \"{a2}\""
                )));
            }
        }
    };
    Ok(BanTest {
        field,
        op: op.unwrap_or(BanOp::Eq),
        arg,
    })
}

impl BanSpec {
    /// Parse a ban given as a string (`std.ban()`, VCL `ban()`): words are split
    /// as varnishd does, then checked as by [`BanSpec::parse_words`].
    pub fn parse(s: &str) -> Result<BanSpec, BanError> {
        let words = split_words(s)?;
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        Self::parse_words(&refs)
    }

    /// Parse the CLI `ban` command's arguments (`ban FIELD OP ARG [&& …]`), with
    /// the CLI's own messages for a wrong argument count or a missing `&&`
    /// (the CLI answers these with status 106).
    pub fn parse_cli(av: &[&str]) -> Result<BanSpec, BanError> {
        if av.len() % 4 != 3 {
            return Err(BanError("Wrong number of arguments".into()));
        }
        if let Some(bad) = av.iter().skip(3).step_by(4).find(|a| **a != "&&") {
            return Err(BanError(format!("Found \"{bad}\" expected &&")));
        }
        let tests = av
            .chunks(4)
            .map(|c| parse_test(c[0], c[1], c[2]))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BanSpec { tests })
    }

    /// Parse a ban already split into words, with `std.ban()`'s messages.
    pub fn parse_words(w: &[&str]) -> Result<BanSpec, BanError> {
        if w.is_empty() {
            return Err(BanError("No ban conditions found.".into()));
        }
        let mut tests = Vec::new();
        let mut i = 0;
        loop {
            let a1 = w[i];
            let Some(a2) = w.get(i + 1) else {
                return Err(BanError("Expected comparison operator.".into()));
            };
            let Some(a3) = w.get(i + 2) else {
                return Err(BanError("Expected second operand.".into()));
            };
            tests.push(parse_test(a1, a2, a3)?);
            match w.get(i + 3) {
                None => break,
                Some(&"&&") => {
                    i += 4;
                    if i >= w.len() {
                        return Err(BanError("Expected comparison operator.".into()));
                    }
                }
                Some(other) => {
                    return Err(BanError(format!(
                        "Expected && between conditions, found \"{other}\""
                    )));
                }
            }
        }
        Ok(BanSpec { tests })
    }

    /// Whether any test needs the request (`req.*`): the lurker cannot test it.
    pub fn uses_req(&self) -> bool {
        self.tests.iter().any(|t| t.field.is_req())
    }

    /// Whether any test looks at the object (`obj.*`).
    pub fn uses_obj(&self) -> bool {
        self.tests.iter().any(|t| !t.field.is_req())
    }

    /// Time-relative tests (`obj.ttl`, `obj.age`) make identical bans differ, so
    /// they are never deduplicated.
    pub fn no_dedup(&self) -> bool {
        self.tests
            .iter()
            .any(|t| matches!(t.field, BanField::ObjTtl | BanField::ObjAge))
    }

    /// The expression as `ban.list` shows it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (i, t) in self.tests.iter().enumerate() {
            if i > 0 {
                out.push_str(" && ");
            }
            t.field.render(&mut out);
            let _ = write!(out, " {} ", t.op.as_str());
            match &t.arg {
                BanArg::Str(_, s) | BanArg::Regex(_, s) => out.push_str(s),
                BanArg::Duration(d) => out.push_str(&render_duration(*d)),
            }
        }
        out
    }

    /// Evaluate against an object; `req` is needed for `req.*` tests (without it
    /// such a ban does not match). `now` is used for `obj.ttl` and `obj.age`.
    pub fn matches(&self, obj: &BanObject<'_>, req: Option<&BanRequest<'_>>, now: f64) -> bool {
        self.eval(obj, req, now).0
    }

    /// Like [`matches`](Self::matches), also returning how many tests were
    /// evaluated (evaluation stops at the first test that does not match).
    pub fn eval(
        &self,
        obj: &BanObject<'_>,
        req: Option<&BanRequest<'_>>,
        now: f64,
    ) -> (bool, usize) {
        let mut n = 0;
        for t in &self.tests {
            n += 1;
            if !t.matches(obj, req, now) {
                return (false, n);
            }
        }
        (true, n)
    }

    /// Number of tests (for `bans_tests_tested`-style accounting).
    pub fn len(&self) -> usize {
        self.tests.len()
    }

    /// Always false: a parsed spec has at least one test.
    pub fn is_empty(&self) -> bool {
        self.tests.is_empty()
    }
}

impl BanTest {
    fn matches(&self, obj: &BanObject<'_>, req: Option<&BanRequest<'_>>, now: f64) -> bool {
        let mut status_buf = [0u8; 8];
        let value: Option<&[u8]> = match &self.field {
            BanField::ReqUrl => match req {
                Some(r) => Some(r.url),
                None => return false,
            },
            BanField::ReqHttp(h) => match req {
                Some(r) => r.headers.header(h),
                None => return false,
            },
            BanField::ObjHttp(h) => obj.headers.header(h),
            BanField::ObjStatus => {
                let mut n = obj.status;
                let mut i = status_buf.len();
                loop {
                    i -= 1;
                    status_buf[i] = b'0' + (n % 10) as u8;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                Some(&status_buf[i..])
            }
            f => {
                let v = match f {
                    BanField::ObjTtl => obj.t_origin + obj.ttl - now,
                    BanField::ObjAge => now - obj.t_origin,
                    BanField::ObjGrace => obj.grace,
                    _ => obj.keep,
                };
                let BanArg::Duration(d) = self.arg else {
                    return false;
                };
                return match self.op {
                    BanOp::Eq => v == d,
                    BanOp::Ne => v != d,
                    BanOp::Gt => v > d,
                    BanOp::Ge => v >= d,
                    BanOp::Lt => v < d,
                    BanOp::Le => v <= d,
                    BanOp::Match | BanOp::NoMatch => false,
                };
            }
        };
        match (&self.arg, self.op) {
            (BanArg::Str(s, _), BanOp::Eq) => value == Some(&s[..]),
            (BanArg::Str(s, _), BanOp::Ne) => value != Some(&s[..]),
            (BanArg::Regex(re, _), BanOp::Match) => value.is_some_and(|v| re.is_match(v)),
            (BanArg::Regex(re, _), BanOp::NoMatch) => !value.is_some_and(|v| re.is_match(v)),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> String {
        BanSpec::parse(s).unwrap_err().0
    }

    #[test]
    fn varnish_error_messages() {
        assert_eq!(err(""), "No ban conditions found.");
        assert_eq!(err("req.url"), "Expected comparison operator.");
        assert_eq!(err("req.url //"), "Expected second operand.");
        assert_eq!(
            err("req.url // bar"),
            "expected conditional (==, !=, ~ or !~) got \"//\""
        );
        assert_eq!(
            err("req.url == bar //"),
            "Expected && between conditions, found \"//\""
        );
        assert_eq!(err("foo == bar //"), "Unknown or unsupported field \"foo\"");
        assert_eq!(
            err("obj.age == 4"),
            "expected duration <n.nn>[ms|s|m|h|d|w|y] got \"4\""
        );
        assert_eq!(
            err("obj.age // 4d"),
            "expected conditional (==, !=, >, >=, < or <=) got \"//\""
        );
        assert_eq!(
            err("obj.http.foo > 4d"),
            "expected conditional (==, !=, ~ or !~) got \">\""
        );
        assert!(err("req.url ~ [[[").starts_with("Regex compile error: "));
        assert_eq!(
            err("xobj.http.foo == 1"),
            "Unknown or unsupported field \"xobj.http.foo\""
        );
        assert!(BanSpec::parse("req.http. == 1").is_ok());
        assert_eq!(err("req.url == a &&"), "Expected comparison operator.");
        assert_eq!(err("req.url == \"a"), "Missing '\"'");
        assert!(BanSpec::parse("req.url ~ ^/$").is_ok());
    }

    #[test]
    fn cli_messages() {
        let cli = |s: &str| {
            let w: Vec<&str> = s.split_whitespace().collect();
            BanSpec::parse_cli(&w).map(|b| b.render()).map_err(|e| e.0)
        };
        assert_eq!(cli("foo").unwrap_err(), "Wrong number of arguments");
        assert_eq!(cli("a b c && a").unwrap_err(), "Wrong number of arguments");
        assert_eq!(
            cli("a b c || a b c").unwrap_err(),
            "Found \"||\" expected &&"
        );
        assert_eq!(
            cli("a b c && a b c").unwrap_err(),
            "Unknown or unsupported field \"a\""
        );
        assert!(
            cli("req.url ~ [[[")
                .unwrap_err()
                .starts_with("Regex compile error")
        );
        assert_eq!(
            cli("req.url ~ x && obj.status != 200").unwrap(),
            "req.url ~ x && obj.status != 200"
        );
    }

    #[test]
    fn rendering() {
        let r = |s: &str| BanSpec::parse(s).unwrap().render();
        assert_eq!(r("obj.http.Host ~ \"Foo\""), "obj.http.Host ~ Foo");
        assert_eq!(
            r("req.url == /a && obj.status != 200"),
            "req.url == /a && obj.status != 200"
        );
        for (i, o) in [
            ("0s", "0s"),
            ("123ms", "123ms"),
            ("0.456s", "456ms"),
            ("6.789s", "6.789s"),
            ("42y", "42y"),
            ("365d", "1y"),
            ("9w", "9w"),
            ("7d", "1w"),
            ("3d", "3d"),
            ("24h", "1d"),
            ("18h", "18h"),
            ("1.5h", "90m"),
            ("10m", "10m"),
            ("0.5m", "30s"),
        ] {
            assert_eq!(
                r(&format!("obj.keep == {i}")),
                format!("obj.keep == {o}"),
                "{i}"
            );
        }
    }

    #[test]
    fn flags() {
        let s = BanSpec::parse("req.url ~ x && obj.status == 200").unwrap();
        assert!(s.uses_req() && s.uses_obj() && !s.no_dedup());
        assert!(BanSpec::parse("obj.ttl > 1d").unwrap().no_dedup());
        assert!(BanSpec::parse("obj.age > 1d").unwrap().no_dedup());
        assert!(!BanSpec::parse("obj.grace > 1d").unwrap().no_dedup());
        assert_eq!(BanSpec::parse("obj.grace > 1d").unwrap().len(), 1);
        assert!(!BanSpec::parse("obj.grace > 1d").unwrap().uses_req());
    }

    #[test]
    fn evaluation() {
        let hdrs: Vec<(&str, &str)> = vec![("X-Tag", "blue"), ("Content-Type", "text/html")];
        let obj = BanObject {
            status: 200,
            headers: &hdrs,
            t_origin: 1000.0,
            ttl: 120.0,
            grace: 10.0,
            keep: 0.0,
        };
        let rh: Vec<(&str, &str)> = vec![("Host", "example.com")];
        let req = BanRequest {
            url: b"/foo/bar",
            headers: &rh,
        };
        let now = 1060.0;
        let m = |s: &str| BanSpec::parse(s).unwrap().matches(&obj, Some(&req), now);
        assert!(m("req.url ~ ^/foo"));
        assert!(!m("req.url ~ ^/bar"));
        assert!(m("req.url !~ ^/bar"));
        assert!(m("req.url == /foo/bar"));
        assert!(m("req.http.host == example.com"));
        assert!(!m("req.http.x-missing == a"));
        assert!(m("req.http.x-missing != a"));
        assert!(m("req.http.x-missing !~ a"));
        assert!(!m("req.http.x-missing ~ ."));
        assert!(m("obj.status == 200"));
        assert!(m("obj.status ~ ^2"));
        assert!(!m("obj.status == 201"));
        assert!(m("obj.http.x-tag == blue && obj.http.content-type ~ html"));
        assert!(!m("obj.http.x-tag == blue && obj.http.content-type ~ json"));
        assert!(m("obj.ttl == 60s"));
        assert!(m("obj.ttl > 59s"));
        assert!(m("obj.ttl <= 1m"));
        assert!(m("obj.age == 1m"));
        assert!(m("obj.age < 61s"));
        assert!(m("obj.grace == 10s"));
        assert!(m("obj.grace >= 10s"));
        assert!(!m("obj.grace != 10s"));
        assert!(m("obj.keep == 0s"));
        // req tests without a request never match.
        let s = BanSpec::parse("req.url ~ .").unwrap();
        assert!(!s.matches(&obj, None, now));
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("1.5h"), Some(5400.0));
        assert_eq!(parse_duration("-1s"), Some(-1.0));
        assert_eq!(parse_duration("4"), None);
        assert_eq!(parse_duration("4x"), None);
        assert_eq!(parse_duration("ms"), None);
    }
}
