//! `vmod_unix`: credentials of a client connected over a Unix domain
//! socket (uid, gid and their names from `/etc/passwd` / `/etc/group`).
//!
//! On a TCP connection the functions log an error and return NULL (names)
//! or -1 (ids), like Varnish.

use lacquer_vcl::exec::{Context, LogKind, Value};
use lacquer_vcl::subs::BuiltinSub;

use crate::args::{Args, string};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module unix
$Function STRING user()
$Function STRING group()
$Function INT uid()
$Function INT gid()
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("user", user as FuncImpl),
        ("group", group),
        ("uid", uid),
        ("gid", gid),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

/// The peer's credentials. There is no connection in vcl_init/vcl_fini:
/// calling there fails the VCL (a runtime check, as Varnish 7.1 does it).
fn cred(ctx: &mut dyn Context) -> Result<Option<(u32, u32)>, String> {
    if matches!(ctx.sub(), BuiltinSub::Init | BuiltinSub::Fini) {
        return Err("vmod unix failure: may not be called in vcl_init or vcl_fini".into());
    }
    let c = ctx.peer_cred();
    if c.is_none() {
        ctx.log(
            LogKind::Error,
            b"vmod unix error: not listening on a Unix domain socket",
        );
    }
    Ok(c)
}

/// Name of the entry with this id in a passwd/group style file (third
/// colon-separated field is the id).
pub(crate) fn name_for_id(file: &str, id: u32) -> Option<String> {
    std::fs::read_to_string(file).ok()?.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        f.next()?;
        (f.next()?.parse::<u32>().ok()? == id).then(|| name.to_string())
    })
}

fn user(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(cred(ctx)?
        .and_then(|(u, _)| name_for_id("/etc/passwd", u))
        .map_or(Value::Null, string))
}

fn group(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(cred(ctx)?
        .and_then(|(_, g)| name_for_id("/etc/group", g))
        .map_or(Value::Null, string))
}

fn uid(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Int(cred(ctx)?.map_or(-1, |(u, _)| u as i64)))
}

fn gid(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Int(cred(ctx)?.map_or(-1, |(_, g)| g as i64)))
}
