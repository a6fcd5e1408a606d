//! `vmod_purge`: hard and soft purges of the current object's variants
//! from `vcl_hit` / `vcl_miss`, through the server
//! ([`lacquer_vcl::exec::Context::purge`]).
//!
//! As in varnishd 7.1, the functions compile in any subroutine and fail
//! the VCL at run time outside `vcl_hit` and `vcl_miss` (VRT_purge).

use lacquer_vcl::exec::{Context, Value};
use lacquer_vcl::subs::BuiltinSub;

use crate::args::Args;
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module purge
$Function INT hard()
$Function INT soft(DURATION ttl=0, DURATION grace=-1, DURATION keep=-1)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[("hard", hard as FuncImpl), ("soft", soft)],
    classes: &[],
    event: None,
    filters: &[],
};

/// VRT_purge's check: a purge needs the object head of a lookup.
fn in_hit_or_miss(ctx: &dyn Context) -> Result<(), String> {
    match ctx.sub() {
        BuiltinSub::Hit | BuiltinSub::Miss => Ok(()),
        _ => Err("purge can only happen in vcl_hit{} or vcl_miss{}".into()),
    }
}

fn hard(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> Result<Value, String> {
    in_hit_or_miss(ctx)?;
    Ok(Value::Int(ctx.purge(0.0, 0.0, 0.0)?))
}

fn soft(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> Result<Value, String> {
    in_hit_or_miss(ctx)?;
    let ttl = a.duration(0)?.unwrap_or(0.0).max(0.0);
    let grace = a.duration(1)?.unwrap_or(-1.0);
    let keep = a.duration(2)?.unwrap_or(-1.0);
    Ok(Value::Int(ctx.purge(ttl, grace, keep)?))
}
