//! `vmod_proxy`: the TLS and ALPN information a PROXY protocol v2 header
//! carried (TLVs), as sent by a TLS terminator in front of the cache.

use lacquer_vcl::exec::{Context, Value};

use crate::args::{Args, string};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module proxy
$Function STRING alpn()
$Function STRING authority()
$Function BOOL is_ssl()
$Function BOOL client_has_cert_sess()
$Function BOOL client_has_cert_conn()
$Function INT ssl_verify_result()
$Function STRING ssl_version()
$Function STRING client_cert_cn()
$Function STRING ssl_cipher()
$Function STRING cert_sign()
$Function STRING cert_key()
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("alpn", alpn as FuncImpl),
        ("authority", authority),
        ("is_ssl", is_ssl),
        ("client_has_cert_sess", client_has_cert_sess),
        ("client_has_cert_conn", client_has_cert_conn),
        ("ssl_verify_result", ssl_verify_result),
        ("ssl_version", ssl_version),
        ("client_cert_cn", client_cert_cn),
        ("ssl_cipher", ssl_cipher),
        ("cert_sign", cert_sign),
        ("cert_key", cert_key),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

use lacquer_http::proxy::{PP2_TYPE_ALPN, PP2_TYPE_AUTHORITY, PP2_TYPE_SSL};
pub(crate) const PP2_SUBTYPE_SSL_VERSION: u8 = 0x21;
const PP2_SUBTYPE_SSL_CN: u8 = 0x22;
pub(crate) const PP2_SUBTYPE_SSL_CIPHER: u8 = 0x23;
pub(crate) const PP2_SUBTYPE_SSL_SIG_ALG: u8 = 0x24;
pub(crate) const PP2_SUBTYPE_SSL_KEY_ALG: u8 = 0x25;
pub(crate) const PP2_CLIENT_SSL: u8 = 0x01;
const PP2_CLIENT_CERT_CONN: u8 = 0x02;
const PP2_CLIENT_CERT_SESS: u8 = 0x04;

pub(crate) fn tlv_str(ctx: &dyn Context, kind: u8) -> Value {
    ctx.proxy_tlv(kind)
        .map_or(Value::Null, |v| string(v.to_vec()))
}

/// The SSL TLV: client flags byte, 32-bit verify result, then sub-TLVs.
fn ssl(ctx: &dyn Context) -> Option<(u8, u32, &[u8])> {
    let v = ctx.proxy_tlv(PP2_TYPE_SSL)?;
    if v.len() < 5 {
        return None;
    }
    Some((v[0], u32::from_be_bytes([v[1], v[2], v[3], v[4]]), &v[5..]))
}

pub(crate) fn ssl_sub(ctx: &dyn Context, kind: u8) -> Value {
    ssl(ctx)
        .and_then(|(_, _, subs)| lacquer_http::proxy::find_tlv(subs, kind))
        .map_or(Value::Null, |v| string(v.to_vec()))
}

pub(crate) fn client_flag(ctx: &dyn Context, flag: u8) -> Value {
    Value::Bool(ssl(ctx).is_some_and(|(c, _, _)| c & flag != 0))
}

fn alpn(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(tlv_str(ctx, PP2_TYPE_ALPN))
}

fn authority(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(tlv_str(ctx, PP2_TYPE_AUTHORITY))
}

fn is_ssl(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(client_flag(ctx, PP2_CLIENT_SSL))
}

fn client_has_cert_sess(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(client_flag(ctx, PP2_CLIENT_CERT_SESS))
}

fn client_has_cert_conn(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(client_flag(ctx, PP2_CLIENT_CERT_CONN))
}

fn ssl_verify_result(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Int(ssl(ctx).map_or(0, |(_, v, _)| v as i64)))
}

fn ssl_version(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(ssl_sub(ctx, PP2_SUBTYPE_SSL_VERSION))
}

fn client_cert_cn(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(ssl_sub(ctx, PP2_SUBTYPE_SSL_CN))
}

fn ssl_cipher(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(ssl_sub(ctx, PP2_SUBTYPE_SSL_CIPHER))
}

fn cert_sign(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(ssl_sub(ctx, PP2_SUBTYPE_SSL_SIG_ALG))
}

fn cert_key(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(ssl_sub(ctx, PP2_SUBTYPE_SSL_KEY_ALG))
}
