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

/// Parses a `Cookie` header value into (name, value) pairs as varnishd's
/// `vmod_parse` reads it: blanks skipped before a name, the name up to the
/// next `=` (so `a=1;;b=2` has a cookie named `;b`), the value up to the
/// next `;`; reading stops at a piece without `=`. Pairs with an empty
/// name or value are listed (they count as parsed) but never stored.
pub(crate) fn parse_cookies(h: &Bytes) -> Vec<(Bytes, Bytes)> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < h.len() {
        p += h[p..]
            .iter()
            .take_while(|b| b.is_ascii_whitespace() || **b == 0x0b)
            .count();
        let Some(eq) = h[p..].iter().position(|b| *b == b'=').map(|e| p + e) else {
            break;
        };
        let end = h[eq + 1..]
            .iter()
            .position(|b| *b == b';')
            .map_or(h.len(), |e| eq + 1 + e);
        out.push((h.slice(p..eq), h.slice(eq + 1..end)));
        p = end + 1;
    }
    out
}

/// Comma-separated cookie names as varnishd's filters read them: blanks
/// before a name skipped (not after it), empty names dropped.
fn names(list: &[u8]) -> Vec<&[u8]> {
    list.split(|b| *b == b',')
        .map(|n| &n[n.iter().take_while(|b| b.is_ascii_whitespace()).count()..])
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

/// Keeps the cookies whose name matches `re` (or does not, with
/// `keep == false`), logging each removed one as varnishd does.
fn retain_re(ctx: &mut dyn Context, a: &Args<'_>, keep: bool) -> R {
    let re = a.regex(0)?;
    let mut removed = Vec::new();
    jar(ctx).0.retain(|(k, v)| {
        let stays = re.is_match(k).unwrap_or(false) == keep;
        if !stays {
            removed.push((k.clone(), v.clone()));
        }
        stays
    });
    drop(re);
    let what: &[u8] = if keep {
        b"Removing cookie "
    } else {
        b"Removing matching cookie "
    };
    for (k, v) in removed {
        let line = [what, &k, b" (value: ", &v, b")"].concat();
        ctx.log(LogKind::Debug, &line);
    }
    Ok(Value::Null)
}

fn filter_re(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    retain_re(ctx, a, false)
}

fn keep_re(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    retain_re(ctx, a, true)
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
    // Each name tried is logged, as varnishd's get_re does.
    let mut checked = Vec::new();
    let found = jar(ctx)
        .0
        .iter()
        .find(|(k, _)| {
            checked.push(k.clone());
            re.is_match(k).unwrap_or(false)
        })
        .map_or(Value::Null, |(_, v)| Value::Str(v.clone()));
    drop(re);
    for k in checked {
        ctx.log(LogKind::Debug, &[&b"cookie: checking "[..], &k].concat());
    }
    Ok(found)
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
        // As varnishd: the jar is left as it was.
        ctx.log(LogKind::Debug, b"cookie: nothing to parse");
        return Ok(Value::Null);
    }
    let cookies = parse_cookies(&h);
    let n = cookies.len();
    let j = jar(ctx);
    j.0.clear();
    for (k, v) in cookies {
        j.set(k, v);
    }
    ctx.log(
        LogKind::Debug,
        format!("cookie: parsed {n} cookies.").as_bytes(),
    );
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
        assert_eq!(p("a=1;=;b"), ["a=1", "="]);
        assert_eq!(p("a=1;;b=2"), ["a=1", ";b=2"]);
        assert_eq!(p(" x=a=b ;"), ["x=a=b "]);
        assert!(p("").is_empty());
    }
}
