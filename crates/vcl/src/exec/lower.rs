//! Lowers the compiler's typed IR ([`crate::ir::Program`]) to the executor's
//! program form ([`Program`]): header names become byte keys with their
//! HTTP object, string-typed variables are routed to the borrowed-bytes
//! accessors, constants become runtime [`Value`]s, regexes are recompiled in
//! byte mode, compound assignments become plain
//! sets, and string comparisons learn whether Varnish would compare them as
//! single strings or as string lists.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::acl::{Acl, AclEntry};
use super::code::{Expr, Program, ReturnAction, Stmt, SubId, Target};
use super::context::{FuncRef, HeaderName, HttpWhich};
use super::regex::Regex;
use super::value::{Backend, Value};
use crate::ir::{self, CallArg, ExprKind as IK, VarArg};
use crate::subs::{self, ALL_BUILTIN_SUBS};
use crate::types::{ArithOp, Type};

/// Converts a compiled program. Fails only if a regex the compiler accepted
/// does not compile in byte mode either (which would be an engine bug).
pub fn lower(p: &ir::Program) -> Result<Program, String> {
    let mut l = Lower {
        ir: p,
        out: Program::default(),
        regexes: HashMap::new(),
    };
    for acl in &p.acls {
        let entries = acl
            .entries
            .iter()
            .map(|e| AclEntry {
                addr: e.addr,
                mask: e.prefix,
                negated: e.negated,
                log_text: e.log_text.clone(),
            })
            .collect();
        l.out.add_acl(Acl::new(&acl.name, acl.log, entries));
    }
    let mut subs = Vec::with_capacity(p.subs.len());
    for s in &p.subs {
        subs.push((s.name.as_str(), l.block(&s.body)?, s.callable_from));
    }
    for (name, body, callable_from) in subs {
        l.out.add_sub_for(name, body, callable_from);
    }
    for m in ALL_BUILTIN_SUBS {
        l.out.set_method(m, p.methods[m.index()] as SubId);
    }
    Ok(l.out)
}

struct Lower<'a> {
    ir: &'a ir::Program,
    out: Program,
    /// Pattern -> index, so each distinct regex is compiled once.
    regexes: HashMap<String, u32>,
}

fn header(h: &ir::HeaderName) -> Arc<HeaderName> {
    Arc::new(HeaderName::new(&h.name))
}

fn str_value(s: &str) -> Value {
    Value::Str(Bytes::copy_from_slice(s.as_bytes()))
}

impl Lower<'_> {
    fn regex(&mut self, re: &ir::VclRegex) -> Result<u32, String> {
        // PCRE-only syntax (`\Q..\E`, `\h`, ...) already rewritten.
        let pat = re.translated_pattern();
        if let Some(i) = self.regexes.get(pat) {
            return Ok(*i);
        }
        let compiled = Regex::new(pat).map_err(|e| format!("regex {pat:?}: {e}"))?;
        let i = self.out.add_regex(compiled);
        self.regexes.insert(pat.to_string(), i);
        Ok(i)
    }

    fn block(&mut self, stmts: &[ir::Stmt]) -> Result<Vec<Stmt>, String> {
        stmts.iter().map(|s| self.stmt(s)).collect()
    }

    fn target(&self, v: &ir::VarRef) -> Result<Target, String> {
        Ok(match &v.arg {
            VarArg::Header(h) => {
                let which = HttpWhich::of_var(v.id)
                    .ok_or_else(|| format!("{:?} is not a header family", v.id))?;
                Target::Header(which, header(h))
            }
            VarArg::Storage(_) => return Err(format!("{:?} cannot be assigned", v.id)),
            VarArg::None => {
                let def = crate::vars::def_of(v.id, self.ir.version);
                if def.is_some_and(|d| matches!(d.ty, Type::String | Type::Body)) {
                    Target::StrVar(v.id)
                } else {
                    Target::Var(v.id)
                }
            }
        })
    }

    /// A read of the variable a `set` writes (for compound assignments).
    fn read_target(t: &Target) -> Expr {
        match t {
            Target::Header(w, h) => Expr::Header(*w, h.clone()),
            Target::StrVar(id) => Expr::StrVar(*id),
            Target::Var(id) => Expr::Var(*id),
        }
    }

    fn stmt(&mut self, s: &ir::Stmt) -> Result<Stmt, String> {
        Ok(match s {
            ir::Stmt::Set { var, op, value } => {
                let t = self.target(var)?;
                let v = self.expr(value)?;
                let v = match (op, &t) {
                    (None, _) => v,
                    (Some(ArithOp::Add), Target::Header(..) | Target::StrVar(_)) => {
                        Expr::Concat(vec![Self::read_target(&t), v].into())
                    }
                    (Some(op), _) => Expr::Arith(*op, Box::new(Self::read_target(&t)), Box::new(v)),
                };
                Stmt::Set(t, v)
            }
            ir::Stmt::Unset(var) => Stmt::Unset(self.target(var)?),
            ir::Stmt::Call(i) => Stmt::Call(*i as SubId),
            ir::Stmt::CallDynamic(e) => Stmt::CallDynamic(self.expr(e)?),
            ir::Stmt::If { arms, otherwise } => {
                let mut out = Vec::with_capacity(arms.len());
                for (c, body) in arms {
                    out.push((self.expr(c)?, self.block(body)?.into()));
                }
                Stmt::If(out.into(), self.block(otherwise)?.into())
            }
            ir::Stmt::Return(r) => match r {
                ir::Return::FromSub => Stmt::ReturnSub,
                ir::Return::Vcl(i) => {
                    let label = self
                        .ir
                        .labels
                        .get(*i)
                        .ok_or_else(|| format!("unknown VCL label #{i}"))?;
                    Stmt::Return(ReturnAction::Vcl(Arc::from(label.as_str())))
                }
                ir::Return::Action { action, args } => {
                    let bare = args.is_empty();
                    let mut args = args.iter();
                    let mut next = |l: &mut Self| args.next().map(|e| l.expr(e)).transpose();
                    use subs::Action as A;
                    Stmt::Return(match action {
                        A::Abandon => ReturnAction::Abandon,
                        A::Deliver => ReturnAction::Deliver,
                        A::Fail => ReturnAction::Fail(next(self)?),
                        A::Fetch => ReturnAction::Fetch,
                        A::Hash => ReturnAction::Hash,
                        A::Lookup => ReturnAction::Lookup,
                        A::Ok => ReturnAction::Ok,
                        A::Pass => ReturnAction::Pass(next(self)?),
                        A::Pipe => ReturnAction::Pipe,
                        A::Purge => ReturnAction::Purge,
                        A::Restart => ReturnAction::Restart,
                        A::Retry => ReturnAction::Retry,
                        // A bare `return (error)` sets no status: varnishd's
                        // vbf_stp_error keeps its own `503 Backend fetch failed`.
                        A::Error if bare => ReturnAction::Error(
                            Expr::Const(Value::Int(503)),
                            Some(Expr::Const(Value::Str(Bytes::from_static(
                                b"Backend fetch failed",
                            )))),
                        ),
                        A::Synth | A::Error => {
                            let status = next(self)?.ok_or("synth/error without a status")?;
                            let reason = next(self)?;
                            if *action == A::Synth {
                                ReturnAction::Synth(status, reason)
                            } else {
                                ReturnAction::Error(status, reason)
                            }
                        }
                        A::Vcl => return Err("vcl action without a label".into()),
                    })
                }
            },
            ir::Stmt::Synthetic(e) => Stmt::Synthetic(self.expr(e)?),
            ir::Stmt::Ban(e) => Stmt::Ban(self.expr(e)?),
            ir::Stmt::HashData(e) => Stmt::HashData(self.expr(e)?),
            ir::Stmt::Eval(e) => Stmt::Eval(self.expr(e)?),
            ir::Stmt::New { instance, args } => {
                let inst = self
                    .ir
                    .instances
                    .get(*instance)
                    .ok_or_else(|| format!("unknown object instance #{instance}"))?;
                Stmt::New {
                    class: FuncRef {
                        vmod: inst.vmod as u32,
                        func: inst.class as u32,
                    },
                    instance: *instance as u32,
                    name: inst.name.as_str().into(),
                    args: self.args(args)?,
                }
            }
        })
    }

    fn args(&mut self, args: &[CallArg]) -> Result<Box<[Option<Expr>]>, String> {
        let mut out = Vec::with_capacity(args.len());
        for a in args {
            match a {
                CallArg::Value(e) => out.push(Some(self.expr(e)?)),
                CallArg::Absent => out.push(None),
                CallArg::Enum(s) => out.push(Some(Expr::Const(Value::Enum(s.clone())))),
                // The vmod supplies its own private state.
                CallArg::Priv(_) => {}
            }
        }
        Ok(out.into())
    }

    fn boxed(&mut self, e: &ir::Expr) -> Result<Box<Expr>, String> {
        Ok(Box::new(self.expr(e)?))
    }

    fn list(&mut self, es: &[ir::Expr]) -> Result<Box<[Expr]>, String> {
        es.iter().map(|e| self.expr(e)).collect()
    }

    fn expr(&mut self, e: &ir::Expr) -> Result<Expr, String> {
        let p = self.ir;
        Ok(match &e.kind {
            IK::Const(v) => Expr::Const(match v {
                ir::Value::Str(s) => str_value(s),
                ir::Value::Bool(b) => Value::Bool(*b),
                ir::Value::Int(i) => Value::Int(*i),
                ir::Value::Real(r) => Value::Real(*r),
                ir::Value::Duration(d) => Value::Duration(*d),
                ir::Value::Bytes(b) => Value::Bytes(*b as i64),
                ir::Value::Ip(a) => Value::Ip(*a),
                ir::Value::Blob(b) => Value::Blob(Bytes::copy_from_slice(b)),
            }),
            IK::Var(v) => match &v.arg {
                VarArg::Header(h) => {
                    let which = HttpWhich::of_var(v.id)
                        .ok_or_else(|| format!("{:?} is not a header family", v.id))?;
                    if e.ty == Type::Header {
                        // A HEADER argument: the vmod gets the reference.
                        Expr::Const(Value::Header(which, header(h)))
                    } else {
                        Expr::Header(which, header(h))
                    }
                }
                VarArg::Storage(name) => Expr::Storage(v.id, name.as_ref().into()),
                VarArg::None if e.ty == Type::Http => Expr::Const(Value::Http(
                    HttpWhich::of_var(v.id)
                        .ok_or_else(|| format!("{:?} is not an HTTP object", v.id))?,
                )),
                VarArg::None if e.ty == Type::String => Expr::StrVar(v.id),
                VarArg::None => Expr::Var(v.id),
            },
            IK::Backend(i) => {
                let b = p
                    .backends
                    .get(*i)
                    .ok_or_else(|| format!("unknown backend #{i}"))?;
                // `backend x none;` is the NULL backend, as in Varnish.
                if b.none {
                    Expr::Const(Value::Null)
                } else {
                    Expr::Const(Value::Backend(Backend {
                        id: *i as u32,
                        name: b.name.as_str().into(),
                    }))
                }
            }
            IK::DefaultBackend => match p
                .default_backend
                .and_then(|i| p.backends.get(i).map(|b| (i, b)))
            {
                Some((i, b)) => Expr::Const(Value::Backend(Backend {
                    id: i as u32,
                    name: b.name.as_str().into(),
                })),
                None => Expr::Const(Value::Null),
            },
            IK::Probe(i) => {
                let pr = p
                    .probes
                    .get(*i)
                    .ok_or_else(|| format!("unknown probe #{i}"))?;
                Expr::Const(Value::Probe(pr.name.as_str().into()))
            }
            IK::Acl(i) => Expr::Const(Value::Acl(*i as u32)),
            IK::Sub(i) => Expr::Const(Value::Sub(*i as u32)),
            IK::Stevedore(n) => Expr::Const(Value::Stevedore(n.clone())),
            IK::Instance(i) => Expr::Const(Value::Instance(*i as u32)),
            IK::ToString(inner) => {
                let x = self.expr(inner)?;
                if inner.ty.is_stringish() || inner.ty == Type::Header {
                    x
                } else if inner.ty == Type::Ip {
                    Expr::Concat(vec![Expr::IpStr(Box::new(x))].into())
                } else {
                    Expr::Concat(vec![x].into())
                }
            }
            IK::ToBool(inner) => Expr::ToBool(self.boxed(inner)?),
            IK::Concat(parts) if e.ty == Type::Strands => Expr::Strands(self.list(parts)?),
            IK::Concat(parts) => Expr::Concat(self.list(parts)?),
            IK::Not(inner) => Expr::Not(self.boxed(inner)?),
            IK::And(parts) => Expr::And(self.list(parts)?),
            IK::Or(parts) => Expr::Or(self.list(parts)?),
            IK::Neg(inner) => Expr::Neg(self.boxed(inner)?),
            IK::Arith { op, lhs, rhs } => Expr::Arith(*op, self.boxed(lhs)?, self.boxed(rhs)?),
            IK::Cmp { op, lhs, rhs } => {
                if lhs.ty.is_stringish() || lhs.ty == Type::Header {
                    let strands =
                        matches!(lhs.kind, IK::Concat(_)) || matches!(rhs.kind, IK::Concat(_));
                    Expr::StrCmp {
                        op: *op,
                        left: self.boxed(lhs)?,
                        right: self.boxed(rhs)?,
                        strands,
                    }
                } else if lhs.ty == Type::Ip {
                    Expr::IpCmp(*op, self.boxed(lhs)?, self.boxed(rhs)?)
                } else {
                    Expr::Cmp(*op, self.boxed(lhs)?, self.boxed(rhs)?)
                }
            }
            IK::RegexMatch {
                subject,
                regex,
                negate,
            } => Expr::Match {
                subject: self.boxed(subject)?,
                regex: self.regex(regex)?,
                negate: *negate,
            },
            IK::Regex(re) => Expr::Const(Value::Regex(self.regex(re)?)),
            IK::RegexMatchDyn {
                subject,
                regex,
                negate,
            } => Expr::MatchDyn {
                subject: self.boxed(subject)?,
                regex: self.boxed(regex)?,
                negate: *negate,
            },
            IK::RegsubDyn {
                all,
                subject,
                regex,
                replacement,
            } => Expr::RegsubDyn {
                all: *all,
                subject: self.boxed(subject)?,
                regex: self.boxed(regex)?,
                sub: self.boxed(replacement)?,
            },
            IK::AclMatchDyn { ip, acl, negate } => Expr::AclMatchDyn {
                ip: self.boxed(ip)?,
                acl: self.boxed(acl)?,
                negate: *negate,
            },
            IK::AclMatch { ip, acl, negate } => Expr::AclMatch {
                ip: self.boxed(ip)?,
                acl: *acl as u32,
                negate: *negate,
            },
            IK::Regsub {
                all,
                subject,
                regex,
                replacement,
                ..
            } => Expr::Regsub {
                all: *all,
                subject: self.boxed(subject)?,
                regex: self.regex(regex)?,
                sub: self.boxed(replacement)?,
            },
            IK::VmodCall { vmod, func, args } => Expr::Call(
                FuncRef {
                    vmod: *vmod as u32,
                    func: *func as u32,
                },
                self.args(args)?,
            ),
            IK::MethodCall {
                instance,
                method,
                args,
            } => Expr::Method {
                instance: *instance as u32,
                method: *method as u32,
                args: self.args(args)?,
            },
            IK::TypeMethod { method, operand } => match method {
                ir::TypeMethod::Upper | ir::TypeMethod::Lower => Expr::Case {
                    upper: *method == ir::TypeMethod::Upper,
                    inner: self.boxed(operand)?,
                },
                ir::TypeMethod::Resolve => Expr::Resolve(self.boxed(operand)?),
            },
        })
    }
}
