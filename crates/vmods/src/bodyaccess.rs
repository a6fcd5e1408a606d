//! `vmod_bodyaccess` (varnish-modules): read the request body that
//! `std.cache_req_body()` kept: its length, a regex match on it, logging
//! it, and adding it to the cache hash.

use lacquer_vcl::exec::{Context, LogKind, Value};
use lacquer_vcl::subs::BuiltinSub;

use crate::args::Args;
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module bodyaccess
$Function INT rematch_req_body(REGEX re)
$Function VOID hash_req_body()
$Function INT len_req_body()
$Function VOID log_req_body(STRING prefix="", INT length=200)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("rematch_req_body", rematch_req_body as FuncImpl),
        ("hash_req_body", hash_req_body),
        ("len_req_body", len_req_body),
        ("log_req_body", log_req_body),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

/// As varnish-modules' bodyaccess: a body std.cache_req_body() did not
/// keep is logged so, whichever function asked.
fn not_cached(ctx: &mut dyn Context) {
    ctx.log(LogKind::Error, b"Unbuffered req.body");
}

fn rematch_req_body(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let re = a.regex(0)?;
    let Some(body) = ctx.cached_req_body() else {
        not_cached(ctx);
        return Ok(Value::Int(-1));
    };
    Ok(Value::Int(match re.is_match(body) {
        Ok(m) => i64::from(m),
        Err(_) => -1,
    }))
}

fn hash_req_body(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    // As varnish-modules: whether the body is cached first, then where.
    let Some(body) = ctx.cached_req_body().map(<[u8]>::to_vec) else {
        not_cached(ctx);
        return Ok(Value::Null);
    };
    if ctx.sub() != BuiltinSub::Hash {
        ctx.log(
            LogKind::Error,
            b"hash_req_body can only be used in vcl_hash{}",
        );
        return Ok(Value::Null);
    }
    ctx.hash_data(Some(&body));
    Ok(Value::Null)
}

fn len_req_body(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let Some(n) = ctx.cached_req_body().map(|b| b.len() as i64) else {
        not_cached(ctx);
        return Ok(Value::Int(-1));
    };
    if ctx.sub() != BuiltinSub::Recv {
        ctx.log(
            LogKind::Error,
            b"len_req_body can only be used in vcl_recv{}",
        );
        return Ok(Value::Int(-1));
    }
    Ok(Value::Int(n))
}

fn log_req_body(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let prefix = a.str_or_empty(0)?.to_vec();
    let len = a.int(1)?.unwrap_or(200);
    if len <= 0 {
        return Err(format!("bodyaccess.log_req_body(): invalid length {len}"));
    }
    let Some(body) = ctx.cached_req_body().map(<[u8]>::to_vec) else {
        not_cached(ctx);
        return Ok(Value::Null);
    };
    for chunk in body.chunks(len as usize) {
        let mut line = prefix.clone();
        line.extend_from_slice(chunk);
        // A Debug record, as varnish-modules writes it (bytes as they are).
        ctx.log(LogKind::Debug, &line);
    }
    Ok(Value::Null)
}
