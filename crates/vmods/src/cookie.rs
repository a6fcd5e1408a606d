//! `vmod_cookie`: parse, edit and rebuild the `Cookie` request header.
//!
//! The parsed cookie jar is task state: `cookie.parse(req.http.cookie)`
//! fills it, the other functions edit or query it, and
//! `cookie.get_string()` renders it back as `a=1; b=2;`. Cookies with an
//! empty name or value are dropped, as Varnish does.

use bytes::Bytes;
use lacquer_vcl::exec::value::http_date;
use lacquer_vcl::exec::{Context, LogKind, Value};

use crate::args::{Args, string};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module cookie
$Function VOID clean()
$Function VOID delete(STRING cookiename)
$Function VOID filter(STRING filterstring)
$Function VOID filter_re(REGEX expression)
$Function VOID keep(STRING filterstring)
$Function VOID keep_re(REGEX expression)
$Function STRING format_date(TIME now, DURATION timedelta)
$Function STRING format_rfc1123(TIME now, DURATION timedelta)
$Function STRING get(STRING cookiename)
$Function STRING get_re(REGEX expression)
$Function STRING get_string()
$Function BOOL isset(STRING cookiename)
$Function VOID parse(STRING cookieheader)
$Function VOID set(STRING cookiename, STRING value)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("clean", clean as FuncImpl),
        ("delete", delete),
        ("filter", filter),
        ("filter_re", filter_re),
        ("keep", keep),
        ("keep_re", keep_re),
        // 7.1's name, and the older one it keeps as an alias.
        ("format_date", format_rfc1123),
        ("format_rfc1123", format_rfc1123),
        ("get", get),
        ("get_re", get_re),
        ("get_string", get_string),
        ("isset", isset),
        ("parse", parse),
        ("set", set),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

/// The task's cookies, in order.
#[derive(Default)]
struct Jar(Vec<(Bytes, Bytes)>);

impl Jar {
    fn set(&mut self, name: Bytes, value: Bytes) {
        if name.is_empty() || value.is_empty() {
            return;
        }
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(c) => c.1 = value,
            None => self.0.push((name, value)),
        }
    }
}

fn jar(ctx: &mut dyn Context) -> &mut Jar {
    ctx.privs().get_or_insert_with(0, Jar::default)
}

/// Parses a `Cookie` header value into (name, value) pairs.
pub(crate) fn parse_cookies(h: &Bytes) -> Vec<(Bytes, Bytes)> {
    let mut out = Vec::new();
    let mut pos = 0;
    for part in h.split(|b| *b == b';') {
        let start = pos;
        pos += part.len() + 1;
        let Some(eq) = part.iter().position(|b| *b == b'=') else {
            continue;
        };
        let lead = part.iter().take_while(|b| b.is_ascii_whitespace()).count();
        if lead >= eq {
            continue;
        }
        let name = h.slice(start + lead..start + eq);
        let value = h.slice(start + eq + 1..start + part.len());
        out.push((name, value));
    }
    out
}

/// Comma-separated cookie names, spaces trimmed, empties dropped.
fn names(list: &[u8]) -> Vec<&[u8]> {
    list.split(|b| *b == b',')
        .map(|n| n.trim_ascii())
        .filter(|n| !n.is_empty())
        .collect()
}

fn clean(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    jar(ctx).0.clear();
    Ok(Value::Null)
}

fn delete(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    if let Some(n) = a.str(0)? {
        jar(ctx).0.retain(|(k, _)| k != n);
    }
    Ok(Value::Null)
}

fn filter(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    if let Some(list) = a.str(0)? {
        let drop = names(list);
        jar(ctx).0.retain(|(k, _)| !drop.contains(&&k[..]));
    }
    Ok(Value::Null)
}

fn keep(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let list = a.str(0)?.unwrap_or(b"");
    let keep = names(list);
    jar(ctx).0.retain(|(k, _)| keep.contains(&&k[..]));
    Ok(Value::Null)
}

fn filter_re(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let re = a.regex(0)?;
    jar(ctx).0.retain(|(k, _)| !re.is_match(k).unwrap_or(false));
    Ok(Value::Null)
}

fn keep_re(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let re = a.regex(0)?;
    jar(ctx).0.retain(|(k, _)| re.is_match(k).unwrap_or(false));
    Ok(Value::Null)
}

fn format_rfc1123(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let t = a.time(0)?.unwrap_or(0.0) + a.duration(1)?.unwrap_or(0.0);
    http_date(t).map(string).map_err(|e| e.0)
}

fn get(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let Some(n) = a.str(0)? else {
        return Ok(Value::Null);
    };
    Ok(jar(ctx)
        .0
        .iter()
        .find(|(k, _)| k == n)
        .map_or(Value::Null, |(_, v)| Value::Str(v.clone())))
}

fn get_re(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let re = a.regex(0)?;
    Ok(jar(ctx)
        .0
        .iter()
        .find(|(k, _)| re.is_match(k).unwrap_or(false))
        .map_or(Value::Null, |(_, v)| Value::Str(v.clone())))
}

fn get_string(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let mut out = Vec::new();
    for (k, v) in &jar(ctx).0 {
        if !out.is_empty() {
            out.push(b' ');
        }
        out.extend_from_slice(k);
        out.push(b'=');
        out.extend_from_slice(v);
        out.push(b';');
    }
    Ok(string(out))
}

fn isset(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let n = a.str_or_empty(0)?;
    Ok(Value::Bool(
        !n.is_empty() && jar(ctx).0.iter().any(|(k, _)| k == n),
    ))
}

fn parse(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let h = a.bytes(0)?.unwrap_or_default();
    if h.is_empty() {
        ctx.log(LogKind::Debug, b"cookie: nothing to parse");
    }
    let j = jar(ctx);
    j.0.clear();
    for (k, v) in parse_cookies(&h) {
        j.set(k, v);
    }
    Ok(Value::Null)
}

fn set(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let (Some(n), Some(v)) = (a.bytes(0)?, a.bytes(1)?) else {
        return Ok(Value::Null);
    };
    jar(ctx).set(n, v);
    Ok(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::lossy;

    #[test]
    fn cookie_header_parsing() {
        let p = |s: &'static str| {
            parse_cookies(&Bytes::from_static(s.as_bytes()))
                .into_iter()
                .map(|(k, v)| format!("{}={}", lossy(&k), lossy(&v)))
                .collect::<Vec<_>>()
        };
        assert_eq!(p("a=1; b=2"), ["a=1", "b=2"]);
        assert_eq!(p("a=1;=;b"), ["a=1"]);
        assert_eq!(p(" x=a=b ;"), ["x=a=b "]);
        assert!(p("").is_empty());
    }
}
