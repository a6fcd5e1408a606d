//! `vmod_purge`: hard and soft purges of the current object's variants
//! from `vcl_hit` / `vcl_miss`, through the server
//! ([`lacquer_vcl::exec::Context::purge`]).

use lacquer_vcl::exec::{Context, Value};

use crate::args::Args;
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module purge
$Function INT hard()
$Restrict vcl_hit vcl_miss
$Function INT soft(DURATION ttl=0, DURATION grace=-1, DURATION keep=-1)
$Restrict vcl_hit vcl_miss
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[("hard", hard as FuncImpl), ("soft", soft)],
    classes: &[],
    event: None,
    filters: &[],
};

fn hard(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> Result<Value, String> {
    Ok(Value::Int(ctx.purge(0.0, 0.0, 0.0)?))
}

fn soft(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> Result<Value, String> {
    let ttl = a.duration(0)?.unwrap_or(0.0).max(0.0);
    let grace = a.duration(1)?.unwrap_or(-1.0);
    let keep = a.duration(2)?.unwrap_or(-1.0);
    Ok(Value::Int(ctx.purge(ttl, grace, keep)?))
}
