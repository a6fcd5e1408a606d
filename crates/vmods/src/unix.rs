//! `vmod_unix`: credentials of a client connected over a Unix domain
//! socket (uid, gid and their names from `/etc/passwd` / `/etc/group`).
//!
//! On a TCP connection the functions log an error and return NULL (names)
//! or -1 (ids), like Varnish.

use lacquer_vcl::exec::{Context, LogKind, Value};

use crate::args::{Args, string};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module unix
$Function STRING user()
$Restrict client backend
$Function STRING group()
$Restrict client backend
$Function INT uid()
$Restrict client backend
$Function INT gid()
$Restrict client backend
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
};

type R = Result<Value, String>;

fn cred(ctx: &mut dyn Context, what: &str) -> Option<(u32, u32)> {
    let c = ctx.peer_cred();
    if c.is_none() {
        let msg = format!("vmod unix: {what}(): not listening on a Unix domain socket");
        ctx.log(LogKind::Error, msg.as_bytes());
    }
    c
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
    Ok(cred(ctx, "user")
        .and_then(|(u, _)| name_for_id("/etc/passwd", u))
        .map_or(Value::Null, string))
}

fn group(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(cred(ctx, "group")
        .and_then(|(_, g)| name_for_id("/etc/group", g))
        .map_or(Value::Null, string))
}

fn uid(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Int(cred(ctx, "uid").map_or(-1, |(u, _)| u as i64)))
}

fn gid(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Int(cred(ctx, "gid").map_or(-1, |(_, g)| g as i64)))
}
