//! `vmod_header` (varnish-modules): work on every occurrence of a
//! repeated header (`Set-Cookie` and friends) instead of only the first.
//!
//! Regex arguments match the header's value (leading blanks skipped);
//! `regsub` works on whole `Name: value` lines. Their regexes are REGEX
//! arguments, as in varnish-modules for 7.1: literals compiled with the
//! VCL, so a bad one is a compile error.

use std::sync::Arc;

use lacquer_vcl::exec::{Context, HeaderName, Value};

use crate::args::{Args, lossy};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module header
$Function VOID append(HEADER, STRANDS)
$Function VOID copy(HEADER, HEADER)
$Function STRING get(HEADER header, REGEX regex)
$Function VOID remove(HEADER header, REGEX regex)
$Function VOID regsub(HTTP, REGEX regex, STRING sub, BOOL all=0)
$Function HEADER dyn(HTTP, STRING)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("append", append as FuncImpl),
        ("copy", copy),
        ("get", get),
        ("remove", remove),
        ("regsub", regsub),
        ("dyn", dyn_header),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

fn is(name: &[u8], h: &HeaderName) -> bool {
    name.eq_ignore_ascii_case(&h.lower)
}

fn trim_start(v: &[u8]) -> &[u8] {
    let n = v.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
    &v[n..]
}

fn append(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let (which, name) = a.header(0)?;
    let value = a.str_or_empty(1)?;
    ctx.add_header(which, name, value)?;
    Ok(Value::Null)
}

fn copy(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let (sw, src) = a.header(0)?;
    let (dw, dst) = a.header(1)?;
    let values: Vec<Vec<u8>> = ctx
        .headers(sw)
        .into_iter()
        .filter(|(n, _)| is(n, src))
        .map(|(_, v)| v.to_vec())
        .collect();
    for v in values {
        ctx.add_header(dw, dst, &v)?;
    }
    Ok(Value::Null)
}

fn get(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let (which, name) = a.header(0)?;
    let re = a.regex(1)?;
    Ok(ctx
        .headers(which)
        .into_iter()
        .filter(|(n, _)| is(n, name))
        .map(|(_, v)| trim_start(v))
        .find(|v| !v.is_empty() && re.is_match(v).unwrap_or(false))
        .map_or(Value::Null, |v| Value::str(v.to_vec())))
}

fn remove(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let (which, name) = a.header(0)?;
    let re = a.regex(1)?;
    let lines: Vec<(Vec<u8>, Vec<u8>)> = ctx
        .headers(which)
        .into_iter()
        .filter(|(n, v)| {
            let v = trim_start(v);
            !(is(n, name) && !v.is_empty() && re.is_match(v).unwrap_or(false))
        })
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
    ctx.replace_headers(which, lines)?;
    Ok(Value::Null)
}

fn regsub(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let which = a.http(0)?;
    let re = a.regex(1)?;
    let tmpl = a.str_or_empty(2)?;
    let all = a.bool(3)?.unwrap_or(false);
    let mut changed = false;
    let mut lines = Vec::new();
    for (n, v) in ctx.headers(which) {
        let mut line = n.to_vec();
        line.extend_from_slice(b": ");
        line.extend_from_slice(v);
        if !re.is_match(&line)? {
            lines.push((n.to_vec(), v.to_vec()));
            continue;
        }
        changed = true;
        let mut out = Vec::with_capacity(line.len());
        re.substitute(&line, tmpl, all, &mut out)?;
        lines.push(match out.iter().position(|b| *b == b':') {
            Some(i) => {
                let value = &out[i + 1..];
                let skip = value.iter().take_while(|b| **b == b' ').count();
                (out[..i].to_vec(), value[skip..].to_vec())
            }
            None => (out, Vec::new()),
        });
    }
    if changed {
        ctx.replace_headers(which, lines)?;
    }
    Ok(Value::Null)
}

fn dyn_header(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let which = a.http(0)?;
    let name = a.str_or_empty(1)?;
    if name.is_empty() {
        return Err("header.dyn(): empty header name".into());
    }
    Ok(Value::Header(
        which,
        Arc::new(HeaderName::new(&lossy(name))),
    ))
}
