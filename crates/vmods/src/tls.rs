//! `vmod_tls`: what the client connection's TLS negotiated, with Varnish
//! Enterprise's function names.
//!
//! It reads the same PROXY v2 TLVs as `vmod_proxy`: those a TLS terminator
//! in front sent (Hitch, HAProxy), or those Lacquer's own TLS listeners
//! fill in after their handshake. So a VCL gets the same answers whether
//! Lacquer terminates TLS itself or sits behind Hitch. `ja3()` is the one
//! exception: only Lacquer's own listeners read the ClientHello (with
//! `tls_ja3` on) and pass its JA3 string in a TLV of the custom range.

use lacquer_vcl::exec::{Context, Value};

use crate::args::Args;
use crate::proxy::{
    PP2_CLIENT_SSL, PP2_SUBTYPE_SSL_CIPHER, PP2_SUBTYPE_SSL_KEY_ALG, PP2_SUBTYPE_SSL_SIG_ALG,
    PP2_SUBTYPE_SSL_VERSION, client_flag, ssl_sub, tlv_str,
};
use crate::{Env, FuncImpl, ModuleImpl};
use lacquer_http::proxy::{PP2_TYPE_ALPN, PP2_TYPE_AUTHORITY, PP2_TYPE_LACQUER_JA3};

const DECL: &str = r#"
$Module tls
$Function BOOL is_tls()
$Function STRING version()
$Function STRING cipher()
$Function STRING authority()
$Function STRING alpn()
$Function STRING cert_sign()
$Function STRING cert_key()
$Function STRING ja3()
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("is_tls", is_tls as FuncImpl),
        ("version", version),
        ("cipher", cipher),
        ("authority", authority),
        ("alpn", alpn),
        ("cert_sign", cert_sign),
        ("cert_key", cert_key),
        ("ja3", ja3),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

fn is_tls(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(client_flag(ctx, PP2_CLIENT_SSL))
}

fn version(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(ssl_sub(ctx, PP2_SUBTYPE_SSL_VERSION))
}

fn cipher(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(ssl_sub(ctx, PP2_SUBTYPE_SSL_CIPHER))
}

fn authority(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(tlv_str(ctx, PP2_TYPE_AUTHORITY))
}

fn alpn(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(tlv_str(ctx, PP2_TYPE_ALPN))
}

fn cert_sign(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(ssl_sub(ctx, PP2_SUBTYPE_SSL_SIG_ALG))
}

fn cert_key(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(ssl_sub(ctx, PP2_SUBTYPE_SSL_KEY_ALG))
}

/// The client's JA3 string, when Lacquer's own TLS listener read it
/// (`tls_ja3` on); NULL otherwise, and behind a terminator that does not
/// send it.
fn ja3(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(tlv_str(ctx, PP2_TYPE_LACQUER_JA3))
}
