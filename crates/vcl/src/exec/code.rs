//! The executable form of a VCL program: a tree of resolved statements and
//! expressions that the interpreter walks. Everything that can be done once
//! is done when the program is built: variables are [`VarId`]s, header names
//! are pre-lowercased, regexes are compiled, subroutines, ACLs and vmod
//! functions are indexes. Types are already checked, so the interpreter
//! only switches on the runtime [`Value`] variant where an operator is
//! defined for several types.

use std::sync::Arc;

use super::acl::Acl;
use super::context::{FuncRef, HeaderName, HttpWhich};
use super::regex::Regex;
use super::value::Value;
use crate::subs::{ALL_BUILTIN_SUBS, BuiltinSub, SubMask};
use crate::types::{ArithOp, CmpOp};
use crate::vars::VarId;

/// Index of a subroutine in [`Program::subs`].
pub type SubId = u32;

/// A sequence of statements.
pub type Block = Box<[Stmt]>;

/// An expression.
#[derive(Clone, Debug)]
pub enum Expr {
    /// A literal, including string literals and the names of backends,
    /// probes and storage backends.
    Const(Value),
    /// A STRING variable read through [`super::Context::get_str`].
    StrVar(VarId),
    /// Any other variable, through [`super::Context::get`].
    Var(VarId),
    /// A header read (`req.http.host`); NULL when absent.
    Header(HttpWhich, Arc<HeaderName>),
    /// A `storage.<name>.*` variable.
    Storage(VarId, Box<str>),
    /// String concatenation: every part converted to its string form, NULL
    /// parts contribute nothing. The result is never NULL.
    Concat(Box<[Expr]>),
    /// A concatenation passed as a vmod's STRANDS argument: evaluates to
    /// [`Value::Strands`], which keeps the parts apart.
    Strands(Box<[Expr]>),
    /// `!e` (operand is BOOL).
    Not(Box<Expr>),
    /// `a && b && ...`, short-circuit.
    And(Box<[Expr]>),
    /// `a || b || ...`, short-circuit.
    Or(Box<[Expr]>),
    /// Implicit conversion to BOOL (`if (req.http.x)`, `if (int)`).
    ToBool(Box<Expr>),
    /// Unary minus.
    Neg(Box<Expr>),
    /// `a OP b` on numbers, durations, times, bytes.
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    /// `a OP b` on non-string values of the same type (INT, REAL, TIME,
    /// DURATION, BYTES, BOOL, BACKEND, IP, ...). Only `==`..`>=`.
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    /// `a == b` / `a != b` on IP values (varnishd's `VRT_ipcmp`): a NULL
    /// side fails the VCL with `VRT_ipcmp: Illegal IP`.
    IpCmp(CmpOp, Box<Expr>, Box<Expr>),
    /// String comparison. `strands` is false when both sides are a single
    /// string (Varnish's `VRT_strcmp`: a NULL side makes `==` false and
    /// `!=` true); true when either side is a concatenation (NULL reads as
    /// empty).
    StrCmp {
        op: CmpOp,
        left: Box<Expr>,
        right: Box<Expr>,
        strands: bool,
    },
    /// `subject ~ regex` (`negate` for `!~`); NULL matches as "".
    Match {
        subject: Box<Expr>,
        regex: u32,
        negate: bool,
    },
    /// `ip ~ acl`.
    AclMatch {
        ip: Box<Expr>,
        acl: u32,
        negate: bool,
    },
    /// `ip ~ acl` where the ACL is a value computed at run time (a vmod's
    /// [`Value::Acl`], or NULL).
    AclMatchDyn {
        ip: Box<Expr>,
        acl: Box<Expr>,
        negate: bool,
    },
    /// `subject ~ regex` where the regex is a REGEX value computed at run
    /// time (see [`Value::Regex`]).
    MatchDyn {
        subject: Box<Expr>,
        regex: Box<Expr>,
        negate: bool,
    },
    /// `regsub()` / `regsuball()` with a REGEX value.
    RegsubDyn {
        all: bool,
        subject: Box<Expr>,
        regex: Box<Expr>,
        sub: Box<Expr>,
    },
    /// `regsub()` / `regsuball()`.
    Regsub {
        all: bool,
        subject: Box<Expr>,
        regex: u32,
        sub: Box<Expr>,
    },
    /// An IP value converted to a string (varnishd's `VRT_IP_string`): a
    /// NULL IP (a vmod that returned none) fails the VCL with
    /// `VRT_IP_string: Illegal IP` instead of reading as empty.
    IpStr(Box<Expr>),
    /// `s.upper()` / `s.lower()` (ASCII case mapping; NULL stays NULL).
    Case { upper: bool, inner: Box<Expr> },
    /// `backend.resolve()`: the backend a director picks now.
    Resolve(Box<Expr>),
    /// A vmod function call.
    Call(FuncRef, Box<[Option<Expr>]>),
    /// A method call on a vmod object instance.
    Method {
        instance: u32,
        method: u32,
        args: Box<[Option<Expr>]>,
    },
}

/// Where `set`/`unset` writes.
#[derive(Clone, Debug)]
pub enum Target {
    /// A STRING variable (`req.url`).
    StrVar(VarId),
    /// Any other variable (`resp.status`, `beresp.ttl`, `req.body`).
    Var(VarId),
    /// A header.
    Header(HttpWhich, Arc<HeaderName>),
}

/// What `return (...)` returns.
#[derive(Clone, Debug)]
pub enum ReturnAction {
    Abandon,
    Deliver,
    /// `fail`, optionally with a reason logged as `VCL_Error`.
    Fail(Option<Expr>),
    Fetch,
    Hash,
    Lookup,
    Ok,
    Pipe,
    Purge,
    Restart,
    Retry,
    /// `pass`, or `pass(DURATION)` (hit-for-pass TTL) in
    /// `vcl_backend_response`.
    Pass(Option<Expr>),
    /// `synth(status [, reason])`.
    Synth(Expr, Option<Expr>),
    /// `error(status [, reason])`.
    Error(Expr, Option<Expr>),
    /// `vcl(label)`.
    Vcl(Arc<str>),
}

/// A statement.
#[derive(Clone, Debug)]
pub enum Stmt {
    /// `set target = value` (compound assignments like `+=` are lowered to
    /// a plain set of the computed value).
    Set(Target, Expr),
    /// `unset target`.
    Unset(Target),
    /// `if (c1) {..} elseif (c2) {..} else {..}`.
    If(Box<[(Expr, Block)]>, Block),
    /// `call sub`.
    Call(SubId),
    /// `call` of a SUB value computed at run time; recursion is a runtime
    /// error here, as in Varnish.
    CallDynamic(Expr),
    /// `return (action)`: ends the built-in subroutine being run.
    Return(ReturnAction),
    /// `return;` without an action in a custom subroutine: back to the
    /// caller.
    ReturnSub,
    /// `hash_data(e)`.
    HashData(Expr),
    /// `synthetic(e)`.
    Synthetic(Expr),
    /// `ban(e)`.
    Ban(Expr),
    /// An expression evaluated for its effect (a VOID vmod call).
    Eval(Expr),
    /// `new name = vmod.class(args)` in `vcl_init`.
    New {
        class: FuncRef,
        instance: u32,
        name: Box<str>,
        args: Box<[Option<Expr>]>,
    },
}

/// One subroutine.
#[derive(Clone, Debug)]
pub struct SubCode {
    pub name: Box<str>,
    pub body: Block,
    /// The built-in methods a dynamic call (a vmod's `VRT_call`, `call` of
    /// a SUB value) may run it from.
    pub callable_from: SubMask,
}

/// A whole executable program.
#[derive(Clone, Debug, Default)]
pub struct Program {
    /// Every subroutine: custom ones and the (user + built-in) bodies of the
    /// built-in methods.
    pub subs: Vec<SubCode>,
    /// The subroutine run for each built-in method, indexed by
    /// [`BuiltinSub::index`].
    pub methods: [Option<SubId>; ALL_BUILTIN_SUBS.len()],
    pub regexes: Vec<Regex>,
    pub acls: Vec<Acl>,
    /// ACL names by index (for ACL values converted to strings).
    pub acl_names: Vec<Arc<str>>,
}

impl Program {
    /// Converts the compiler's output (see [`super::lower`]).
    pub fn from_ir(ir: &crate::ir::Program) -> Result<Program, String> {
        super::lower::lower(ir)
    }

    /// Adds a subroutine callable from any method and returns its id.
    pub fn add_sub(&mut self, name: &str, body: Vec<Stmt>) -> SubId {
        self.add_sub_for(name, body, SubMask::ALL)
    }

    /// Adds a subroutine that dynamic calls may run only from the methods
    /// in `callable_from`, and returns its id.
    pub fn add_sub_for(&mut self, name: &str, body: Vec<Stmt>, callable_from: SubMask) -> SubId {
        self.subs.push(SubCode {
            name: name.into(),
            body: body.into(),
            callable_from,
        });
        (self.subs.len() - 1) as SubId
    }

    /// Makes `sub` the code run for a built-in method.
    pub fn set_method(&mut self, method: BuiltinSub, sub: SubId) {
        self.methods[method.index()] = Some(sub);
    }

    /// Adds a compiled regex and returns its index.
    pub fn add_regex(&mut self, re: Regex) -> u32 {
        self.regexes.push(re);
        (self.regexes.len() - 1) as u32
    }

    /// Adds an ACL and returns its index.
    pub fn add_acl(&mut self, acl: Acl) -> u32 {
        self.acl_names.push(Arc::from(&*acl.name));
        self.acls.push(acl);
        (self.acls.len() - 1) as u32
    }
}

/// Shorthands for building expressions by hand (tests, benchmarks, the
/// lowering from the compiler's IR).
impl Expr {
    /// A string literal.
    pub fn str(s: &str) -> Expr {
        Expr::Const(Value::str(s.as_bytes().to_vec()))
    }

    /// An INT literal.
    pub fn int(i: i64) -> Expr {
        Expr::Const(Value::Int(i))
    }

    /// A header read.
    pub fn header(which: HttpWhich, name: &str) -> Expr {
        Expr::Header(which, Arc::new(HeaderName::new(name)))
    }

    /// `subject ~ regex`.
    pub fn matches(subject: Expr, regex: u32) -> Expr {
        Expr::Match {
            subject: Box::new(subject),
            regex,
            negate: false,
        }
    }

    /// Single-string comparison `a OP b`.
    pub fn str_cmp(op: CmpOp, a: Expr, b: Expr) -> Expr {
        Expr::StrCmp {
            op,
            left: Box::new(a),
            right: Box::new(b),
            strands: false,
        }
    }
}

impl Target {
    /// A header target.
    pub fn header(which: HttpWhich, name: &str) -> Target {
        Target::Header(which, Arc::new(HeaderName::new(name)))
    }
}
