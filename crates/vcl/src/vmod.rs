//! Declarations of native vmods, as seen by the compiler.
//!
//! A vmod is declared in a small text format close to Varnish's `.vcc`
//! files, parsed once at startup:
//!
//! ```text
//! $Module std
//! $Function STRING toupper(STRANDS s)
//! $Function DURATION duration([STRING s], [DURATION fallback])
//! $Function VOID collect(HEADER hdr, STRING sep=", ")
//! $Function BACKEND pick(ENUM { FIRST, LAST } which = FIRST, PRIV_TASK)
//! $Restrict vcl_recv backend
//! $Object round_robin()
//! $Method VOID .add_backend(BACKEND)
//! $Method BACKEND .backend()
//! ```
//!
//! Arguments in `[...]` are optional (the callee learns whether they were
//! given); `name=value` gives a default; `ENUM { A, B }` restricts an
//! argument to bare identifiers; `PRIV_*` arguments are hidden from VCL.
//! `$Restrict` limits the previous function or method to the listed
//! subroutines (names, or the groups `client`, `backend`, `housekeeping`).
//! The compiler only checks calls against these declarations; behaviour is
//! implemented elsewhere, indexed by the positions declared here.

use std::collections::HashMap;
use std::sync::Arc;

use crate::subs::{BuiltinSub, SubMask};
use crate::types::Type;

/// Kind of a hidden `PRIV_*` argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrivKind {
    Call,
    Vcl,
    Task,
    Top,
}

/// The type of a declared argument.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgType {
    /// A value of a VCL type.
    Value(Type),
    /// One of a fixed set of identifiers.
    Enum(Vec<String>),
    /// Hidden per-call/vcl/task/top private state.
    Priv(PrivKind),
}

/// A default value for an argument, already typed.
#[derive(Clone, Debug, PartialEq)]
pub enum DefaultValue {
    /// Absent / NULL (`BLOB b=0`, `STRING s=0`, ...).
    Null,
    Bool(bool),
    Int(i64),
    Real(f64),
    /// DURATION or TIME or BYTES as seconds / bytes.
    Number(f64),
    Str(String),
    Enum(String),
}

/// One declared argument.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgDecl {
    pub name: Option<String>,
    pub ty: ArgType,
    pub default: Option<DefaultValue>,
    /// Declared in `[...]`: may be left out, callee sees "not given".
    pub optional: bool,
}

/// A function, method or object constructor.
#[derive(Clone, Debug, PartialEq)]
pub struct FuncDecl {
    pub name: String,
    pub ret: Type,
    pub args: Vec<ArgDecl>,
    /// Subroutines it may be called from (`$Restrict`), `None` = anywhere.
    pub restrict: Option<SubMask>,
}

/// An object class (`$Object`).
#[derive(Clone, Debug, PartialEq)]
pub struct ObjDecl {
    pub name: String,
    /// Constructor arguments.
    pub ctor: FuncDecl,
    pub methods: Vec<FuncDecl>,
}

impl ObjDecl {
    /// Finds a method by name, with its index.
    pub fn method(&self, name: &str) -> Option<(usize, &FuncDecl)> {
        self.methods
            .iter()
            .enumerate()
            .find(|(_, m)| m.name.eq_ignore_ascii_case(name))
    }
}

/// A whole vmod.
#[derive(Clone, Debug, PartialEq)]
pub struct VmodDecl {
    pub name: String,
    pub functions: Vec<FuncDecl>,
    pub objects: Vec<ObjDecl>,
}

impl VmodDecl {
    /// Finds a function by name (ignoring case, as vcc's symbol table
    /// does), with its index.
    pub fn function(&self, name: &str) -> Option<(usize, &FuncDecl)> {
        self.functions
            .iter()
            .enumerate()
            .find(|(_, f)| f.name.eq_ignore_ascii_case(name))
    }

    /// Finds an object class by name, with its index.
    pub fn object(&self, name: &str) -> Option<(usize, &ObjDecl)> {
        self.objects
            .iter()
            .enumerate()
            .find(|(_, o)| o.name.eq_ignore_ascii_case(name))
    }

    /// Parses a declaration text (see the module documentation).
    pub fn parse(text: &str) -> Result<VmodDecl, String> {
        let mut name = None;
        let mut functions: Vec<FuncDecl> = Vec::new();
        let mut objects: Vec<ObjDecl> = Vec::new();
        // Which declaration a `$Restrict` applies to.
        #[derive(Clone, Copy)]
        enum Last {
            None,
            Func,
            Obj,
            Method,
        }
        let mut last = Last::None;
        for (lineno, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |msg: &str| format!("vmod declaration line {}: {msg}: {line}", lineno + 1);
            let (kw, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let rest = rest.trim();
            match kw {
                "$Module" => {
                    if rest.is_empty() || rest.contains(char::is_whitespace) {
                        return Err(err("expected a single module name"));
                    }
                    name = Some(rest.to_string());
                }
                "$Function" => {
                    functions.push(parse_signature(rest, true).map_err(|e| err(&e))?);
                    last = Last::Func;
                }
                "$Object" => {
                    let mut ctor = parse_signature(rest, false).map_err(|e| err(&e))?;
                    ctor.ret = Type::Instance;
                    objects.push(ObjDecl {
                        name: ctor.name.clone(),
                        ctor,
                        methods: Vec::new(),
                    });
                    last = Last::Obj;
                }
                "$Method" => {
                    let obj = objects
                        .last_mut()
                        .ok_or_else(|| err("$Method before any $Object"))?;
                    let m = parse_signature(rest, true).map_err(|e| err(&e))?;
                    obj.methods.push(m);
                    last = Last::Method;
                }
                "$Restrict" => {
                    let mask = parse_restrict(rest).map_err(|e| err(&e))?;
                    let target = match last {
                        Last::Func => functions.last_mut(),
                        Last::Obj => objects.last_mut().map(|o| &mut o.ctor),
                        Last::Method => objects.last_mut().and_then(|o| o.methods.last_mut()),
                        Last::None => None,
                    };
                    target
                        .ok_or_else(|| err("$Restrict without a preceding declaration"))?
                        .restrict = Some(mask);
                }
                _ => return Err(err("unknown directive")),
            }
        }
        let name = name.ok_or("vmod declaration has no $Module line")?;
        Ok(VmodDecl {
            name,
            functions,
            objects,
        })
    }
}

fn parse_restrict(text: &str) -> Result<SubMask, String> {
    let mut mask = SubMask::NONE;
    for w in text.split_whitespace() {
        mask = mask.union(match w {
            "client" => SubMask::CLIENT,
            "backend" => SubMask::BACKEND,
            "housekeeping" => SubMask::HOUSEKEEPING,
            "both" => SubMask::BOTH,
            "all" => SubMask::ALL,
            _ => SubMask::of(&[
                BuiltinSub::from_name(w).ok_or_else(|| format!("unknown subroutine '{w}'"))?
            ]),
        });
    }
    if mask.is_empty() {
        return Err("empty $Restrict".into());
    }
    Ok(mask)
}

/// Parses `RET name(args)` (or `name(args)` for constructors); methods may
/// spell their name `.name`.
fn parse_signature(text: &str, has_ret: bool) -> Result<FuncDecl, String> {
    let open = text.find('(').ok_or("missing '('")?;
    let close = text.rfind(')').ok_or("missing ')'")?;
    if close < open || !text[close + 1..].trim().is_empty() {
        return Err("malformed argument list".into());
    }
    let head = text[..open].trim();
    let (ret, name) = if has_ret {
        let (r, n) = head
            .split_once(char::is_whitespace)
            .ok_or("expected 'TYPE name'")?;
        let ret = Type::from_name(r.trim()).ok_or_else(|| format!("unknown type '{r}'"))?;
        (ret, n.trim())
    } else {
        (Type::Void, head)
    };
    let name = name.strip_prefix('.').unwrap_or(name);
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!("bad name '{name}'"));
    }
    let mut args = Vec::new();
    for piece in split_args(&text[open + 1..close])? {
        args.push(parse_arg(&piece)?);
    }
    Ok(FuncDecl {
        name: name.to_string(),
        ret,
        args,
        restrict: None,
    })
}

/// Splits an argument list on top-level commas (not inside `{}`, `[]` or
/// string literals).
fn split_args(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut in_str = false;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '"' => in_str = !in_str,
            '{' | '[' if !in_str => depth += 1,
            '}' | ']' if !in_str => depth -= 1,
            ',' if !in_str && depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if in_str || depth != 0 {
        return Err("unbalanced argument list".into());
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    let out: Vec<String> = out.into_iter().map(|a| a.trim().to_string()).collect();
    if out.iter().any(|a| a.is_empty()) {
        return Err("empty argument".into());
    }
    Ok(out)
}

fn parse_arg(text: &str) -> Result<ArgDecl, String> {
    let mut t = text.trim();
    let optional = t.starts_with('[');
    if optional {
        t = t
            .strip_prefix('[')
            .and_then(|x| x.strip_suffix(']'))
            .ok_or_else(|| format!("unbalanced '[' in '{text}'"))?
            .trim();
    }
    let (ty, rest) = if let Some(r) = t.strip_prefix("ENUM") {
        let r = r.trim_start();
        let r = r.strip_prefix('{').ok_or("expected '{' after ENUM")?;
        let end = r.find('}').ok_or("missing '}' in ENUM")?;
        let values: Vec<String> = r[..end]
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        if values.is_empty() {
            return Err("empty ENUM".into());
        }
        (ArgType::Enum(values), r[end + 1..].trim())
    } else {
        let (tn, r) = t.split_once(char::is_whitespace).unwrap_or((t, ""));
        let ty = match tn {
            "PRIV_CALL" => ArgType::Priv(PrivKind::Call),
            "PRIV_VCL" => ArgType::Priv(PrivKind::Vcl),
            "PRIV_TASK" => ArgType::Priv(PrivKind::Task),
            "PRIV_TOP" => ArgType::Priv(PrivKind::Top),
            _ => ArgType::Value(Type::from_name(tn).ok_or_else(|| format!("unknown type '{tn}'"))?),
        };
        (ty, r.trim())
    };
    let (name, default) = match rest.split_once('=') {
        Some((n, d)) => (n.trim(), Some(d.trim())),
        None => (rest, None),
    };
    let name = (!name.is_empty()).then(|| name.to_string());
    let default = match default {
        Some(d) => Some(parse_default(&ty, d)?),
        None => None,
    };
    if default.is_some() && name.is_none() {
        return Err(format!("argument with a default needs a name: '{text}'"));
    }
    Ok(ArgDecl {
        name,
        ty,
        default,
        optional,
    })
}

fn parse_default(ty: &ArgType, d: &str) -> Result<DefaultValue, String> {
    let bad = || format!("bad default value '{d}'");
    Ok(match ty {
        ArgType::Priv(_) => return Err("PRIV arguments take no default".into()),
        ArgType::Enum(values) => {
            if !values.iter().any(|v| v == d) {
                return Err(format!("default '{d}' is not one of the ENUM values"));
            }
            DefaultValue::Enum(d.to_string())
        }
        ArgType::Value(t) => {
            if let Some(s) = d.strip_prefix('"') {
                DefaultValue::Str(s.strip_suffix('"').ok_or_else(bad)?.to_string())
            } else {
                match t {
                    Type::Bool => match d {
                        "0" | "false" => DefaultValue::Bool(false),
                        "1" | "true" => DefaultValue::Bool(true),
                        _ => return Err(bad()),
                    },
                    Type::Int => DefaultValue::Int(d.parse().map_err(|_| bad())?),
                    Type::Real => DefaultValue::Real(d.parse().map_err(|_| bad())?),
                    Type::Duration | Type::Bytes | Type::Time => {
                        DefaultValue::Number(d.parse().map_err(|_| bad())?)
                    }
                    _ if d == "0" || d == "NULL" => DefaultValue::Null,
                    _ => return Err(bad()),
                }
            }
        }
    })
}

/// The set of vmods a compiler may import.
#[derive(Clone, Debug, Default)]
pub struct VmodRegistry {
    vmods: HashMap<String, Arc<VmodDecl>>,
}

impl VmodRegistry {
    /// An empty registry.
    pub fn new() -> VmodRegistry {
        VmodRegistry::default()
    }

    /// Adds (or replaces) a vmod declaration.
    pub fn add(&mut self, decl: VmodDecl) {
        self.vmods.insert(decl.name.clone(), Arc::new(decl));
    }

    /// Parses a declaration text and adds it.
    pub fn add_text(&mut self, text: &str) -> Result<(), String> {
        self.add(VmodDecl::parse(text)?);
        Ok(())
    }

    /// Looks a vmod up by name.
    pub fn get(&self, name: &str) -> Option<&Arc<VmodDecl>> {
        self.vmods.get(name)
    }

    /// Names of all registered vmods.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.vmods.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMO: &str = r#"
# a test module
$Module demo
$Function STRING toupper(STRANDS s)
$Function DURATION duration([STRING s], [DURATION fallback])
$Function VOID collect(HEADER hdr, STRING sep=", ")
$Function BACKEND pick(ENUM { FIRST, LAST } which = FIRST, PRIV_TASK)
$Restrict vcl_recv backend
$Object rr(BOOL shuffle=0)
$Method VOID .add_backend(BACKEND)
$Method BACKEND .backend()
$Restrict client
"#;

    #[test]
    fn parses_declarations() {
        let d = VmodDecl::parse(DEMO).unwrap();
        assert_eq!(d.name, "demo");
        let (i, f) = d.function("duration").unwrap();
        assert_eq!(i, 1);
        assert_eq!(f.ret, Type::Duration);
        assert!(f.args.iter().all(|a| a.optional));
        let (_, c) = d.function("collect").unwrap();
        assert_eq!(c.args[1].default, Some(DefaultValue::Str(", ".into())));
        let (_, p) = d.function("pick").unwrap();
        assert_eq!(
            p.args[0].ty,
            ArgType::Enum(vec!["FIRST".into(), "LAST".into()])
        );
        assert_eq!(p.args[0].default, Some(DefaultValue::Enum("FIRST".into())));
        assert_eq!(p.args[1].ty, ArgType::Priv(PrivKind::Task));
        let r = p.restrict.unwrap();
        assert!(r.contains(BuiltinSub::Recv) && r.contains(BuiltinSub::BackendFetch));
        assert!(!r.contains(BuiltinSub::Deliver));
        let (_, o) = d.object("rr").unwrap();
        assert_eq!(o.ctor.args[0].default, Some(DefaultValue::Bool(false)));
        assert_eq!(o.methods.len(), 2);
        assert_eq!(o.method("backend").unwrap().1.ret, Type::Backend);
        assert_eq!(o.methods[1].restrict, Some(SubMask::CLIENT));
        assert_eq!(o.methods[0].args[0].name, None);
    }

    #[test]
    fn rejects_bad_declarations() {
        for bad in [
            "$Function STRING f(STRING s)",
            "$Module m\n$Function FOO f()",
            "$Module m\n$Function STRING f(ENUM {A} e = B)",
            "$Module m\n$Method VOID .x()",
            "$Module m\n$Restrict vcl_recv",
            "$Module m\n$Function VOID f(INT n=x)",
            "$Module m\n$Bogus",
        ] {
            assert!(VmodDecl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn registry() {
        let mut r = VmodRegistry::new();
        r.add_text(DEMO).unwrap();
        assert!(r.get("demo").is_some());
        assert!(r.get("std").is_none());
        assert_eq!(r.names().collect::<Vec<_>>(), ["demo"]);
    }
}
