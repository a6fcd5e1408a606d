//! Typed access to the arguments the executor passes to a vmod.
//!
//! The compiler checked every call against the declaration, so arguments
//! arrive in declaration order with the declared types (defaults filled
//! in); an optional `[...]` argument that was left out is `None`. These
//! accessors turn a type mismatch (which would be a compiler bug, or a
//! declaration out of step with its implementation) into an error message
//! instead of a panic.

use std::cell::{Ref, RefCell, RefMut};
use std::net::SocketAddr;

use bytes::Bytes;
use lacquer_vcl::exec::regex::Regex;
use lacquer_vcl::exec::{
    Backend, Context, HeaderName, HttpWhich, Value, VclRuntime, VmodArg, WsKind,
};
use std::sync::Arc;

/// The compiler passes the `=0` (NULL) default of a non-string argument
/// as an empty string constant; such a value reads as NULL.
fn null_default(v: &Value) -> bool {
    matches!(v, Value::Str(s) if s.is_empty())
}

/// The arguments of one call, and the VCL program that made it (for the
/// ACL and SUB values among them).
pub(crate) struct Args<'a>(pub &'a [VmodArg], RefCell<&'a mut dyn VclRuntime>);

fn mismatch(i: usize, want: &str, got: &Value) -> String {
    format!(
        "vmod argument {} should be {want}, got {}",
        i + 1,
        got.type_name()
    )
}

impl<'a> Args<'a> {
    pub fn new(args: &'a [VmodArg], vcl: &'a mut dyn VclRuntime) -> Args<'a> {
        Args(args, RefCell::new(vcl))
    }

    /// The VCL program that made the call: matches its ACLs, runs its
    /// subroutines.
    pub fn vcl(&self) -> RefMut<'_, &'a mut dyn VclRuntime> {
        self.1.borrow_mut()
    }

    /// Whether argument `i` was given (optional arguments may be left out).
    pub fn given(&self, i: usize) -> bool {
        matches!(self.0.get(i), Some(Some(_)))
    }

    /// The raw value of argument `i`, `None` if left out.
    pub fn get(&self, i: usize) -> Option<&Value> {
        self.0.get(i).and_then(|a| a.as_ref())
    }

    /// A STRING/STRANDS argument (a multi-part STRANDS joined); `None`
    /// for NULL or left out.
    pub fn str(&self, i: usize) -> Result<Option<&[u8]>, String> {
        match self.get(i) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s)),
            Some(Value::Strands(s)) => Ok(Some(&s.joined)),
            Some(v) => Err(mismatch(i, "STRING", v)),
        }
    }

    /// The first part of a STRANDS argument (all of it when it was given
    /// as one string); `None` when that part is NULL or the argument was
    /// left out.
    pub fn first_strand(&self, i: usize) -> Result<Option<&[u8]>, String> {
        match self.get(i) {
            Some(Value::Strands(s)) => Ok(s.parts.first().and_then(|p| p.as_deref())),
            _ => self.str(i),
        }
    }

    /// A STRING argument as shared bytes; `None` for NULL or left out.
    pub fn bytes(&self, i: usize) -> Result<Option<Bytes>, String> {
        match self.get(i) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s.clone())),
            Some(Value::Strands(s)) => Ok(Some(s.joined.clone())),
            Some(v) => Err(mismatch(i, "STRING", v)),
        }
    }

    /// A STRING argument where NULL reads as the empty string.
    pub fn str_or_empty(&self, i: usize) -> Result<&[u8], String> {
        Ok(self.str(i)?.unwrap_or(b""))
    }

    pub fn int(&self, i: usize) -> Result<Option<i64>, String> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Int(v)) => Ok(Some(*v)),
            Some(v) => Err(mismatch(i, "INT", v)),
        }
    }

    pub fn real(&self, i: usize) -> Result<Option<f64>, String> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Real(v)) => Ok(Some(*v)),
            Some(Value::Int(v)) => Ok(Some(*v as f64)),
            Some(v) => Err(mismatch(i, "REAL", v)),
        }
    }

    pub fn duration(&self, i: usize) -> Result<Option<f64>, String> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Duration(v)) => Ok(Some(*v)),
            Some(v) => Err(mismatch(i, "DURATION", v)),
        }
    }

    pub fn time(&self, i: usize) -> Result<Option<f64>, String> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Time(v)) => Ok(Some(*v)),
            Some(v) => Err(mismatch(i, "TIME", v)),
        }
    }

    pub fn bytes_val(&self, i: usize) -> Result<Option<i64>, String> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Bytes(v)) => Ok(Some(*v)),
            Some(v) => Err(mismatch(i, "BYTES", v)),
        }
    }

    pub fn bool(&self, i: usize) -> Result<Option<bool>, String> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Bool(v)) => Ok(Some(*v)),
            Some(v) => Err(mismatch(i, "BOOL", v)),
        }
    }

    /// An IP argument; `None` for NULL or left out.
    pub fn ip(&self, i: usize) -> Result<Option<SocketAddr>, String> {
        match self.get(i) {
            None | Some(Value::Null) => Ok(None),
            Some(v) if null_default(v) => Ok(None),
            Some(Value::Ip(v)) => Ok(Some(*v)),
            Some(v) => Err(mismatch(i, "IP", v)),
        }
    }

    /// A BACKEND argument; `None` for the NULL backend or left out.
    pub fn backend(&self, i: usize) -> Result<Option<&Backend>, String> {
        match self.get(i) {
            None | Some(Value::Null) => Ok(None),
            Some(v) if null_default(v) => Ok(None),
            Some(Value::Backend(b)) => Ok(Some(b)),
            Some(v) => Err(mismatch(i, "BACKEND", v)),
        }
    }

    /// A BLOB argument; `None` for NULL or left out.
    pub fn blob(&self, i: usize) -> Result<Option<&Bytes>, String> {
        match self.get(i) {
            None | Some(Value::Null) => Ok(None),
            Some(v) if null_default(v) => Ok(None),
            Some(Value::Blob(b)) => Ok(Some(b)),
            Some(v) => Err(mismatch(i, "BLOB", v)),
        }
    }

    /// An ENUM argument (always present: ENUMs have defaults or are
    /// required, except optional ones which read as `None`).
    pub fn enum_(&self, i: usize) -> Result<Option<&str>, String> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Enum(e)) => Ok(Some(e)),
            Some(v) => Err(mismatch(i, "ENUM", v)),
        }
    }

    /// A HEADER argument.
    pub fn header(&self, i: usize) -> Result<(HttpWhich, &Arc<HeaderName>), String> {
        match self.get(i) {
            Some(Value::Header(w, h)) => Ok((*w, h)),
            Some(v) => Err(mismatch(i, "HEADER", v)),
            None => Err(format!("vmod argument {} (HEADER) is missing", i + 1)),
        }
    }

    /// A REGEX argument: the expression compiled with the VCL (a bad one
    /// is a compile error there, as in varnishd).
    pub fn regex(&self, i: usize) -> Result<Ref<'_, Regex>, String> {
        let idx = match self.get(i) {
            Some(Value::Regex(idx)) => *idx,
            Some(v) => return Err(mismatch(i, "REGEX", v)),
            None => return Err(format!("vmod argument {} (REGEX) is missing", i + 1)),
        };
        Ref::filter_map(self.1.borrow(), |vcl| vcl.regex(idx))
            .map_err(|_| format!("vmod argument {}: the VCL has no regex #{idx}", i + 1))
    }

    /// An HTTP argument (`req`, `bereq`, ...).
    pub fn http(&self, i: usize) -> Result<HttpWhich, String> {
        match self.get(i) {
            Some(Value::Http(w)) => Ok(*w),
            Some(v) => Err(mismatch(i, "HTTP", v)),
            None => Err(format!("vmod argument {} (HTTP) is missing", i + 1)),
        }
    }
}

/// A string value built from owned bytes.
pub(crate) fn string(v: impl Into<Bytes>) -> Value {
    Value::Str(v.into())
}

/// A string a vmod built, as scratch of the task's workspace (with its
/// NUL, as varnishd stores it): NULL, and the workspace marked
/// overflowed, when it does not fit (varnishd's `VRT_StrandsWS`).
pub(crate) fn ws_string(ctx: &mut dyn Context, v: impl Into<Bytes>) -> Value {
    let b: Bytes = v.into();
    let fits = ctx
        .workspace(WsKind::Task)
        .is_none_or(|ws| ws.alloc(b.len() as u64 + 1));
    if fits { Value::Str(b) } else { Value::Null }
}

/// Lossy UTF-8 view of a VCL string, for messages and parsing.
pub(crate) fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}
