//! `vmod_xkey` (varnish-modules): purge every object tagged with a
//! surrogate key. Objects are tagged by their `xkey` response headers; the
//! index lives in the server ([`crate::Host::xkey_purge`]).

use lacquer_vcl::exec::{Context, Value};

use crate::args::Args;
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module xkey
$Function INT purge(STRING keys)
$Function INT softpurge(STRING keys)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[("purge", purge as FuncImpl), ("softpurge", softpurge)],
    classes: &[],
    event: None,
    filters: &[],
};

/// Splits a key list on whitespace and commas, like the xkey header.
pub(crate) fn split_keys(s: &[u8]) -> Vec<&[u8]> {
    s.split(|b| b.is_ascii_whitespace() || *b == b',')
        .filter(|k| !k.is_empty())
        .collect()
}

fn run(env: &Env, a: &Args<'_>, soft: bool) -> Result<Value, String> {
    let keys = split_keys(a.str_or_empty(0)?);
    if keys.is_empty() {
        return Ok(Value::Int(0));
    }
    Ok(Value::Int(env.host.xkey_purge(&keys, soft)))
}

fn purge(env: &Env, _: &mut dyn Context, a: &Args<'_>) -> Result<Value, String> {
    run(env, a, false)
}

fn softpurge(env: &Env, _: &mut dyn Context, a: &Args<'_>) -> Result<Value, String> {
    run(env, a, true)
}
