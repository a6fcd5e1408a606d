//! `vmod_str` (varnish-modules): small string predicates and slicing.
//!
//! Lengths and offsets count bytes, as the C module does.

use lacquer_vcl::exec::{Context, Value};

use crate::args::{Args, string};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module str
$Function INT count(STRING s)
$Function BOOL startswith(STRING s1, STRING s2)
$Function BOOL endswith(STRING s1, STRING s2)
$Function BOOL contains(STRING s1, STRING s2)
$Function STRING take(STRING s, INT n, INT offset=0)
$Function STRING reverse(STRING s)
$Function STRING split(STRING S, INT n, STRING sep=" 	")
$Function BOOL token_intersect(STRING str1, STRING str2, [STRING separators])
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("count", count as FuncImpl),
        ("startswith", startswith),
        ("endswith", endswith),
        ("contains", contains),
        ("take", take),
        ("reverse", reverse),
        ("split", split),
        ("token_intersect", token_intersect),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

fn count(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Int(a.str(0)?.map_or(-1, |s| s.len() as i64)))
}

/// Both string arguments, or `None` if either is NULL.
type Pair<'a> = Option<(&'a [u8], &'a [u8])>;

fn two<'a>(a: &'a Args<'_>) -> Result<Pair<'a>, String> {
    Ok(match (a.str(0)?, a.str(1)?) {
        (Some(x), Some(y)) => Some((x, y)),
        _ => None,
    })
}

fn startswith(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Bool(two(a)?.is_some_and(|(s, p)| s.starts_with(p))))
}

fn endswith(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Bool(two(a)?.is_some_and(|(s, p)| s.ends_with(p))))
}

fn contains(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Bool(two(a)?.is_some_and(|(s, p)| {
        p.is_empty() || s.windows(p.len()).any(|w| w == p)
    })))
}

/// `take(s, n, offset)`: a negative offset counts from the end, a negative
/// `n` takes the bytes left of the offset; the range is clamped to `s`.
pub(crate) fn take_range(len: usize, n: i64, offset: i64) -> (usize, usize) {
    let len = len as i64;
    // A negative `n` at the default offset takes the end of the string, as
    // varnish-modules does (`take("hello", -2)` is `lo`).
    let start = if offset < 0 || (n < 0 && offset == 0) {
        len + offset
    } else {
        offset
    };
    let (a, b) = if n < 0 {
        (start + n, start)
    } else {
        (start, start + n)
    };
    let clamp = |x: i64| x.clamp(0, len) as usize;
    (clamp(a), clamp(b))
}

fn take(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let Some(s) = a.bytes(0)? else {
        return Ok(Value::Null);
    };
    let (x, y) = take_range(s.len(), a.int(1)?.unwrap_or(0), a.int(2)?.unwrap_or(0));
    Ok(Value::Str(s.slice(x..y.max(x))))
}

fn reverse(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match a.str(0)? {
        None => Value::Null,
        Some(s) => string(s.iter().rev().copied().collect::<Vec<u8>>()),
    })
}

fn tokens<'a>(s: &'a [u8], seps: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
    s.split(move |b| seps.contains(b)).filter(|t| !t.is_empty())
}

fn split(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let Some(s) = a.bytes(0)? else {
        return Ok(Value::Null);
    };
    let n = a.int(1)?.unwrap_or(0);
    let seps = a.str(2)?.unwrap_or(b" \t");
    let toks: Vec<&[u8]> = tokens(&s, seps).collect();
    // Tokens count from 1; negative n counts from the end (-1 is the last).
    let idx = if n > 0 {
        Some(n as usize - 1)
    } else if n < 0 {
        toks.len().checked_sub(n.unsigned_abs() as usize)
    } else {
        None
    };
    Ok(match idx.and_then(|i| toks.get(i)) {
        Some(t) => Value::Str(s.slice_ref(t)),
        None => Value::Null,
    })
}

fn token_intersect(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let (Some(x), Some(y)) = (a.str(0)?, a.str(1)?) else {
        return Ok(Value::Bool(false));
    };
    let seps = a.str(2)?.unwrap_or(b" ,");
    let ys: Vec<&[u8]> = tokens(y, seps).collect();
    Ok(Value::Bool(tokens(x, seps).any(|t| ys.contains(&t))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_ranges() {
        assert_eq!(take_range(6, 3, 0), (0, 3));
        assert_eq!(take_range(6, 3, 4), (4, 6));
        assert_eq!(take_range(6, 2, -3), (3, 5));
        assert_eq!(take_range(6, -2, -1), (3, 5));
        assert_eq!(take_range(6, -10, 2), (0, 2));
        assert_eq!(take_range(6, 10, 10), (6, 6));
        assert_eq!(take_range(5, -2, 0), (3, 5));
        assert_eq!(take_range(5, -10, 0), (0, 5));
    }
}
