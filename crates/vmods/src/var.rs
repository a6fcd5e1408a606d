//! `vmod_var` (varnish-modules): task-local typed variables and
//! process-global string variables.
//!
//! Task variables live in the task's private state ([`TaskPrivs`]) and
//! vanish with the request; global ones are shared by every task and VCL
//! for the life of the process. Reading a variable that is unset or holds
//! another type gives the type's zero (NULL for strings, IPs, backends).
//!
//! [`TaskPrivs`]: lacquer_vcl::exec::privs::TaskPrivs

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;
use lacquer_vcl::exec::{Context, Value};

use crate::args::Args;
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module var
$Function VOID set(STRING key, STRING value)
$Function STRING get(STRING)
$Function VOID global_set(STRING, STRING)
$Function STRING global_get(STRING)
$Function VOID set_int(STRING key, INT value)
$Function INT get_int(STRING key)
$Function VOID set_string(STRING key, STRING value)
$Function STRING get_string(STRING key)
$Function VOID set_real(STRING key, REAL value)
$Function REAL get_real(STRING key)
$Function VOID set_duration(STRING key, DURATION value)
$Function DURATION get_duration(STRING key)
$Function VOID set_ip(STRING key, IP value)
$Function IP get_ip(STRING key)
$Function VOID set_backend(STRING key, BACKEND value)
$Function BACKEND get_backend(STRING key)
$Function VOID clear()
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("set", set as FuncImpl),
        ("get", get_string),
        ("global_set", global_set),
        ("global_get", global_get),
        ("set_int", set),
        ("get_int", get_int),
        ("set_string", set),
        ("get_string", get_string),
        ("set_real", set),
        ("get_real", get_real),
        ("set_duration", set),
        ("get_duration", get_duration),
        ("set_ip", set),
        ("get_ip", get_ip),
        ("set_backend", set),
        ("get_backend", get_backend),
        ("clear", clear),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

/// The task's variables.
#[derive(Default)]
struct Vars(HashMap<Bytes, Value>);

fn key(a: &Args<'_>) -> Result<Bytes, String> {
    Ok(a.bytes(0)?.unwrap_or_default())
}

/// Every `set_*` stores the value as given (its type is the declared one).
fn set(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let k = key(a)?;
    let v = a.get(1).cloned().unwrap_or(Value::Null);
    ctx.privs()
        .get_or_insert_with(0, Vars::default)
        .0
        .insert(k, v);
    Ok(Value::Null)
}

fn lookup(ctx: &mut dyn Context, a: &Args<'_>) -> Result<Option<Value>, String> {
    let k = key(a)?;
    Ok(ctx
        .privs()
        .get::<Vars>(0)
        .and_then(|v| v.0.get(&k).cloned()))
}

fn get_string(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match lookup(ctx, a)? {
        Some(v @ Value::Str(_)) => v,
        _ => Value::Null,
    })
}

fn get_int(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match lookup(ctx, a)? {
        Some(v @ Value::Int(_)) => v,
        _ => Value::Int(0),
    })
}

fn get_real(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match lookup(ctx, a)? {
        Some(v @ Value::Real(_)) => v,
        _ => Value::Real(0.0),
    })
}

fn get_duration(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match lookup(ctx, a)? {
        Some(v @ Value::Duration(_)) => v,
        _ => Value::Duration(0.0),
    })
}

fn get_ip(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match lookup(ctx, a)? {
        Some(v @ Value::Ip(_)) => v,
        _ => Value::Null,
    })
}

fn get_backend(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(match lookup(ctx, a)? {
        Some(v @ Value::Backend(_)) => v,
        _ => Value::Null,
    })
}

fn clear(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    ctx.privs().remove::<Vars>(0);
    Ok(Value::Null)
}

fn globals() -> &'static Mutex<HashMap<Bytes, Bytes>> {
    static G: OnceLock<Mutex<HashMap<Bytes, Bytes>>> = OnceLock::new();
    G.get_or_init(Default::default)
}

fn global_set(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let k = key(a)?;
    let mut g = globals().lock().unwrap_or_else(|e| e.into_inner());
    match a.bytes(1)? {
        Some(v) => g.insert(k, v),
        None => g.remove(&k),
    };
    Ok(Value::Null)
}

fn global_get(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let k = key(a)?;
    let g = globals().lock().unwrap_or_else(|e| e.into_inner());
    Ok(g.get(&k).cloned().map_or(Value::Null, Value::Str))
}
