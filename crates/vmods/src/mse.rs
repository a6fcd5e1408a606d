//! `vmod_mse`: the part of Varnish Enterprise's MSE vmod that VCL written
//! for MSE calls to choose where an object is stored, so such VCL runs on
//! Lacquer's persistent store (`-s mse,/path/mse.conf`) unchanged.
//!
//! `mse.set_stores(STRING)` takes store ids (as the `mse.conf` names them)
//! separated by commas or blanks and sets `beresp.storage` to the one of
//! them with the most free space, as MSE spreads objects over the stores
//! it is given; `"none"` keeps the object in memory only (the `Transient`
//! store), as MSE's memory-only objects are never written to disk. A name
//! that is not a store fails the task with a message naming it.

use std::sync::Arc;

use lacquer_vcl::exec::{Context, Value};
use lacquer_vcl::vars::VarId;

use crate::args::Args;
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module mse
$Function VOID set_stores(STRING stores)
$Restrict vcl_backend_response
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[("set_stores", set_stores as FuncImpl)],
    classes: &[],
    event: None,
    filters: &[],
};

fn set_stores(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> Result<Value, String> {
    let text = String::from_utf8_lossy(a.str(0)?.unwrap_or_default()).into_owned();
    let names: Vec<&str> = text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return Err(
            "mse.set_stores(): no store given; name store ids from mse.conf, or \"none\" for memory only"
                .into(),
        );
    }
    if names.iter().any(|n| n.eq_ignore_ascii_case("none")) {
        if names.len() > 1 {
            return Err(format!(
                "mse.set_stores(\"{text}\"): \"none\" (memory only) cannot be combined with stores"
            ));
        }
        ctx.set(
            VarId::BerespStorage,
            Value::Stevedore(Arc::from("Transient")),
        )?;
        return Ok(Value::Null);
    }
    let mut best: Option<(&str, i64)> = None;
    for n in names {
        let free = match ctx.storage_var(VarId::StorageFreeSpace, n) {
            Ok(Value::Bytes(f)) => f,
            Ok(_) => 0,
            Err(_) => {
                return Err(format!(
                    "mse.set_stores(): no store named \"{n}\" (check the ids in mse.conf)"
                ));
            }
        };
        if best.is_none_or(|(_, b)| free > b) {
            best = Some((n, free));
        }
    }
    if let Some((n, _)) = best {
        ctx.set(VarId::BerespStorage, Value::Stevedore(Arc::from(n)))?;
    }
    Ok(Value::Null)
}
