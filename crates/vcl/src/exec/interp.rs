//! The tree-walking interpreter over [`super::code`].
//!
//! Strings are produced by appending into reusable byte buffers (a small
//! pool kept in [`Scratch`] across requests), and string operands that are
//! plain reads (a header, `req.url`, a literal) are used in place, so the
//! common statements allocate nothing once the pool is warm. A runtime error
//! is logged as `VCL_Error` and ends the method with [`Action::Fail`], like
//! `VRT_fail`.
//!
//! Speed: evaluation functions return `Result<_, Failed>` where [`Failed`]
//! carries nothing (the message waits in `Exec::failure`), so results are
//! one register wide; rare statements live in functions of their own so
//! that the hot ones keep small frames.

use std::cmp::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::Action;
use super::acl::AclResult;
use super::code::{Expr, Program, ReturnAction, Stmt, SubId, Target};
use super::context::{Context, LogKind, Resume, VclRuntime, VmodArg, Vmods, Wait, WsKind};
use super::value::{Strands, Value};
use crate::subs::BuiltinSub;
use crate::types::{ArithOp, CmpOp};

/// What a BLOB's descriptor takes in varnishd's workspace (type, length,
/// pointer).
const BLOB_STRUCT: u64 = 24;

/// Deepest `call` nesting accepted before the task fails (the compiler
/// rejects recursion, so only a malformed program reaches it).
const MAX_CALL_DEPTH: usize = 64;

/// Reusable working memory for running subroutines. Keep one per worker or
/// session and pass it to every [`Program::run`]; it starts empty and keeps
/// the buffers it grew.
#[derive(Debug, Default)]
pub struct Scratch {
    bufs: Vec<Vec<u8>>,
    /// Subroutines currently being executed, innermost last.
    stack: Vec<SubId>,
    /// The suspension a run is unwinding (empty between runs: a run that
    /// suspends hands it out), kept here so that a run neither
    /// initialises nor drops it.
    unwinding: Option<Box<Unwinding>>,
}

/// Evaluation stopped on a runtime error; the message is in
/// `Exec::failure`.
struct Failed;

/// Bytes a new scratch buffer holds before it grows.
const SCRATCH_FIRST: usize = 512;

/// The result of evaluating something.
type Res<T> = Result<T, Failed>;

/// How a statement ended. Kept one byte wide (the chosen action waits in
/// `Exec::action`) so unwinding through nested blocks copies nothing big.
#[derive(Clone, Copy)]
enum Flow {
    Next,
    /// `return (action)`: the action is in `Exec::action`.
    Return,
    ReturnSub,
}

thread_local! {
    /// Address of a local in the outermost [`Program::run_sub`] running on
    /// this thread (0: no VCL running), the reference for [`stack_depth`].
    static STACK_BASE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks where VCL execution starts on this thread's stack, for as long as
/// the outermost run lasts.
struct StackBase {
    outermost: bool,
}

impl StackBase {
    fn enter(addr: usize) -> StackBase {
        let outermost = STACK_BASE.with(|b| b.get() == 0);
        if outermost {
            STACK_BASE.with(|b| b.set(addr));
        }
        StackBase { outermost }
    }
}

impl Drop for StackBase {
    fn drop(&mut self) {
        if self.outermost {
            STACK_BASE.with(|b| b.set(0));
        }
    }
}

/// How many bytes of stack the running VCL uses at the caller's frame,
/// measured from where the outermost VCL run began on this thread (for
/// vmod `debug`'s `stk()`, as varnishd measures from its worker's frame);
/// `None` when no VCL is running on this thread.
#[inline(never)]
pub fn stack_depth() -> Option<u64> {
    let marker = 0u8;
    let here = std::ptr::addr_of!(marker) as usize;
    let base = STACK_BASE.with(std::cell::Cell::get);
    (base != 0).then(|| base.abs_diff(here) as u64)
}

/// A task context as a trait object, whether it is one already (a
/// subroutine run for a vmod) or a concrete server context.
trait AsDynContext {
    fn as_dyn(&mut self) -> &mut dyn Context;
}

impl<T: Context> AsDynContext for T {
    fn as_dyn(&mut self) -> &mut dyn Context {
        self
    }
}

impl AsDynContext for dyn Context + '_ {
    fn as_dyn(&mut self) -> &mut dyn Context {
        self
    }
}

struct Exec<'a, C: Context + AsDynContext + ?Sized> {
    prog: &'a Program,
    ctx: &'a mut C,
    vmods: &'a dyn Vmods,
    bufs: &'a mut Vec<Vec<u8>>,
    stack: &'a mut Vec<SubId>,
    /// The action of the `return` being unwound.
    action: Option<Action>,
    /// The message of the runtime error being unwound.
    failure: Option<Box<str>>,
    /// Whether a vmod may suspend this run ([`Program::start`]).
    can_suspend: bool,
    /// The suspension being unwound (an `Err(Failed)` with this set is a
    /// suspension, not an error); boxed so that a run that never suspends
    /// carries one empty word.
    unwinding: &'a mut Option<Box<Unwinding>>,
}

/// Where a suspended run stopped: the statement it stopped in, named by
/// its address in each enclosing block from the method's body inward
/// (stored innermost first). Addresses stay valid because a program is
/// immutable and shared while tasks run it; a point resumed against
/// another program finds no statement there and fails the task.
#[derive(Debug)]
pub struct ResumePoint {
    /// The method's subroutine.
    sub: SubId,
    path: Vec<usize>,
    resume: Resume,
}

/// A run that stopped at a vmod call waiting for I/O.
pub struct Suspended {
    /// What to await before [`Program::resume`].
    pub wait: Wait,
    /// Where to resume.
    pub point: ResumePoint,
}

impl std::fmt::Debug for Suspended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Suspended")
            .field("point", &self.point)
            .finish_non_exhaustive()
    }
}

/// How a resumable run ([`Program::start`], [`Program::resume`]) ended.
#[derive(Debug)]
pub enum Run {
    /// The method returned this action.
    Done(Action),
    /// A vmod suspended it: await `wait`, then resume at `point`. (Boxed:
    /// a run that does not suspend returns and matches a small value.)
    Suspended(Box<Suspended>),
}

/// A suspension on its way out of the interpreter.
struct Unwinding {
    wait: Wait,
    resume: Resume,
    /// The address of the statement it left in each block, innermost
    /// first (see [`ResumePoint`]).
    path: Vec<usize>,
}

impl std::fmt::Debug for Unwinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinding")
            .field("resume", &self.resume)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The index of the statement at address `addr` in `stmts`, if it is one
/// of them.
fn index_of(stmts: &[Stmt], addr: usize) -> Option<usize> {
    let off = addr.checked_sub(stmts.as_ptr() as usize)?;
    let size = std::mem::size_of::<Stmt>();
    let i = off / size;
    (off % size == 0 && i < stmts.len()).then_some(i)
}

impl Program {
    /// Runs the code of a built-in method (`vcl_recv` = user code followed by
    /// the built-in code) for one task and returns the action it chose.
    /// A method without code, or code that ends without `return`, yields
    /// [`Action::Ok`] (only `vcl_init`/`vcl_fini` do that once builtin.vcl is
    /// appended).
    ///
    /// A vmod that asks to wait for I/O here gets an error (the call
    /// fails the task): hosts that can wait use [`Program::start`].
    pub fn run<C: Context>(
        &self,
        method: BuiltinSub,
        ctx: &mut C,
        vmods: &dyn Vmods,
        scratch: &mut Scratch,
    ) -> Action {
        let Some(sub) = self.methods[method.index()] else {
            return Action::Ok;
        };
        self.run_sub(sub, ctx, vmods, scratch)
    }

    /// Runs one subroutine by id (as [`Program::run`]).
    pub fn run_sub<C: Context>(
        &self,
        sub: SubId,
        ctx: &mut C,
        vmods: &dyn Vmods,
        scratch: &mut Scratch,
    ) -> Action {
        // The synchronous path on its own (not through `exec`): no resume
        // point to pass, no `Run` to wrap and unwrap.
        let marker = 0u8;
        let _base = StackBase::enter(std::ptr::addr_of!(marker) as usize);
        scratch.stack.clear();
        let mut ex = Exec {
            prog: self,
            ctx,
            vmods,
            bufs: &mut scratch.bufs,
            stack: &mut scratch.stack,
            action: None,
            failure: None,
            can_suspend: false,
            unwinding: &mut scratch.unwinding,
        };
        let r = ex.call(sub);
        ex.outcome(r)
    }

    /// Runs the code of a built-in method as [`Program::run`] does, except
    /// that a vmod may suspend it to wait for I/O: then the host awaits
    /// [`Suspended::wait`] and calls [`Program::resume`] with the same
    /// context, vmods and a scratch (any, it holds nothing across).
    pub fn start<C: Context>(
        &self,
        method: BuiltinSub,
        ctx: &mut C,
        vmods: &dyn Vmods,
        scratch: &mut Scratch,
    ) -> Run {
        let Some(sub) = self.methods[method.index()] else {
            return Run::Done(Action::Ok);
        };
        self.exec(sub, ctx, vmods, scratch, |ex| ex.call(sub))
    }

    /// Goes on with a suspended run once its wait is over: the call stack
    /// is rebuilt and execution continues after (or at, see [`Resume`])
    /// the statement that suspended. It may suspend again.
    pub fn resume<C: Context>(
        &self,
        point: ResumePoint,
        ctx: &mut C,
        vmods: &dyn Vmods,
        scratch: &mut Scratch,
    ) -> Run {
        let sub = point.sub;
        self.exec(sub, ctx, vmods, scratch, move |ex| {
            let mut path = point.path;
            ex.resume_call(sub, &mut path, point.resume)
        })
    }

    /// A run that may suspend: `body` starts or resumes method `sub`.
    fn exec<C: Context>(
        &self,
        sub: SubId,
        ctx: &mut C,
        vmods: &dyn Vmods,
        scratch: &mut Scratch,
        body: impl FnOnce(&mut Exec<'_, C>) -> Res<Flow>,
    ) -> Run {
        let marker = 0u8;
        let _base = StackBase::enter(std::ptr::addr_of!(marker) as usize);
        scratch.stack.clear();
        let mut ex = Exec {
            prog: self,
            ctx,
            vmods,
            bufs: &mut scratch.bufs,
            stack: &mut scratch.stack,
            action: None,
            failure: None,
            can_suspend: true,
            unwinding: &mut scratch.unwinding,
        };
        let r = body(&mut ex);
        if r.is_err()
            && let Some(u) = ex.unwinding.take()
        {
            return Run::Suspended(Box::new(Suspended {
                wait: u.wait,
                point: ResumePoint {
                    sub,
                    path: u.path,
                    resume: u.resume,
                },
            }));
        }
        Run::Done(ex.outcome(r))
    }
}

impl<C: Context + AsDynContext + ?Sized> Exec<'_, C> {
    /// The action a run that ended (not suspended) with `r` chose.
    #[inline(always)]
    fn outcome(&mut self, r: Res<Flow>) -> Action {
        match r {
            Ok(Flow::Return) => self.action.take().unwrap_or(Action::Ok),
            Ok(Flow::Next | Flow::ReturnSub) => Action::Ok,
            // A subroutine a vmod ran chose an action: the task unwinds
            // as from that `return`.
            Err(Failed) if self.failure.is_none() && self.action.is_some() => {
                self.action.take().unwrap_or(Action::Ok)
            }
            Err(Failed) => {
                let msg = self.failure.take().unwrap_or_default();
                self.ctx.log(LogKind::Error, msg.as_bytes());
                Action::Fail
            }
        }
    }
}

/// Whether `ip` matches ACL `acl` of `prog`, logged as `VCL_acl` when the
/// ACL has the `-log` flag.
fn match_acl(
    prog: &Program,
    ctx: &mut dyn Context,
    acl: u32,
    ip: std::net::SocketAddr,
) -> Result<bool, String> {
    let Some(acl) = prog.acls.get(acl as usize) else {
        return Err(format!("unknown ACL #{acl}"));
    };
    let r = acl.lookup(ip.ip());
    if acl.log {
        let line = acl.log_line(r);
        ctx.log(LogKind::Acl, line.as_bytes());
    }
    Ok(matches!(r, AclResult::Match(_)))
}

/// The [`VclRuntime`] a vmod call gets: the running program and call stack
/// (the task context stays with the vmod, which hands it back), and the
/// outcome of a subroutine it ran, for the caller to act on.
struct VmodVcl<'r> {
    prog: &'r Program,
    vmods: &'r dyn Vmods,
    bufs: &'r mut Vec<Vec<u8>>,
    stack: &'r mut Vec<SubId>,
    /// The action a subroutine run for the vmod returned.
    action: Option<Action>,
    /// Why a subroutine run for the vmod failed.
    failure: Option<Box<str>>,
    /// Whether the vmod may suspend the run.
    can_suspend: bool,
    /// The wait the vmod asked for.
    suspended: Option<(Wait, Resume)>,
}

impl VclRuntime for VmodVcl<'_> {
    fn suspend(&mut self, wait: Wait, resume: Resume) -> Result<(), String> {
        if !self.can_suspend {
            return Err(
                "VCL cannot wait for I/O here (a subroutine a vmod runs cannot, nor \
                 vcl_init or vcl_fini where the host cannot block on the wait)"
                    .into(),
            );
        }
        if self.suspended.is_some() {
            return Err("a vmod call may wait for I/O only once".into());
        }
        self.suspended = Some((wait, resume));
        Ok(())
    }

    fn acl_match(
        &mut self,
        ctx: &mut dyn Context,
        acl: u32,
        ip: std::net::SocketAddr,
    ) -> Result<bool, String> {
        match_acl(self.prog, ctx, acl, ip)
    }

    fn regex(&self, i: u32) -> Option<&super::regex::Regex> {
        self.prog.regexes.get(i as usize)
    }

    fn check_call(&self, ctx: &dyn Context, sub: u32) -> Option<String> {
        let Some(code) = self.prog.subs.get(sub as usize) else {
            return Some(format!("call to unknown subroutine #{sub}"));
        };
        if !code.callable_from.contains(ctx.sub()) {
            return Some(format!(
                "Dynamic call to \"sub {}{{}}\" not allowed from here",
                code.name
            ));
        }
        if self.stack.contains(&sub) {
            return Some(format!(
                "Recursive dynamic call to \"sub {}{{}}\"",
                code.name
            ));
        }
        None
    }

    fn call(&mut self, ctx: &mut dyn Context, sub: u32) -> bool {
        if self.action.is_some() || self.failure.is_some() {
            // The task is already stopping: run nothing more.
            return false;
        }
        // What a vmod runs cannot be resumed in the middle.
        let mut never = None;
        let mut ex: Exec<'_, dyn Context> = Exec {
            prog: self.prog,
            ctx,
            vmods: self.vmods,
            bufs: &mut *self.bufs,
            stack: &mut *self.stack,
            action: None,
            failure: None,
            can_suspend: false,
            unwinding: &mut never,
        };
        let r = ex.call_dynamic(sub);
        let (action, failure) = (ex.action.take(), ex.failure.take());
        match r {
            Ok(Flow::Next | Flow::ReturnSub) => true,
            Ok(Flow::Return) | Err(Failed) => {
                self.action = action;
                self.failure = failure;
                false
            }
        }
    }
}

fn cmp_result(op: CmpOp, ord: Option<Ordering>) -> bool {
    let Some(ord) = ord else {
        // NaN compares false except for `!=`.
        return op == CmpOp::Ne;
    };
    match op {
        CmpOp::Eq => ord == Ordering::Equal,
        CmpOp::Ne => ord != Ordering::Equal,
        CmpOp::Lt => ord == Ordering::Less,
        CmpOp::Le => ord != Ordering::Greater,
        CmpOp::Gt => ord == Ordering::Greater,
        CmpOp::Ge => ord != Ordering::Less,
        CmpOp::Match | CmpOp::NoMatch => false,
    }
}

/// String comparison with Varnish's NULL rules (see [`Expr::StrCmp`]).
fn str_cmp(op: CmpOp, a: Option<&[u8]>, b: Option<&[u8]>, strands: bool) -> bool {
    let ord = match (a, b) {
        (Some(a), Some(b)) => a.cmp(b),
        _ if strands => a.unwrap_or(b"").cmp(b.unwrap_or(b"")),
        // VRT_strcmp returns 1 when either side is NULL.
        _ => Ordering::Greater,
    };
    cmp_result(op, Some(ord))
}

fn value_cmp(op: CmpOp, a: &Value, b: &Value) -> Result<bool, String> {
    use Value as V;
    let ord = match (a, b) {
        (V::Int(x), V::Int(y)) | (V::Bytes(x), V::Bytes(y)) => Some(x.cmp(y)),
        (V::Real(x), V::Real(y)) | (V::Duration(x), V::Duration(y)) | (V::Time(x), V::Time(y)) => {
            x.partial_cmp(y)
        }
        (V::Int(x), V::Real(y)) => (*x as f64).partial_cmp(y),
        (V::Real(x), V::Int(y)) => x.partial_cmp(&(*y as f64)),
        (V::Duration(x), V::Int(y)) => x.partial_cmp(&(*y as f64)),
        (V::Bool(x), V::Bool(y)) => Some(x.cmp(y)),
        (V::Ip(x), V::Ip(y)) => Some(x.ip().cmp(&y.ip())),
        (V::Backend(x), V::Backend(y)) => Some(x.id.cmp(&y.id)),
        (V::Null, V::Null) => Some(Ordering::Equal),
        (V::Null, _) | (_, V::Null) => Some(Ordering::Less),
        (V::Stevedore(x), V::Stevedore(y)) | (V::Probe(x), V::Probe(y)) => Some(x.cmp(y)),
        (V::Acl(x), V::Acl(y)) | (V::Sub(x), V::Sub(y)) | (V::Instance(x), V::Instance(y)) => {
            Some(x.cmp(y))
        }
        _ => {
            return Err(format!(
                "cannot compare {} with {}",
                a.type_name(),
                b.type_name()
            ));
        }
    };
    Ok(cmp_result(op, ord))
}

fn real_op(op: ArithOp, a: f64, b: f64) -> f64 {
    match op {
        ArithOp::Add => a + b,
        ArithOp::Sub => a - b,
        ArithOp::Mul => a * b,
        ArithOp::Div => a / b,
        ArithOp::Mod => a % b,
    }
}

fn int_op(op: ArithOp, a: i64, b: i64) -> Result<i64, String> {
    Ok(match op {
        ArithOp::Add => a.wrapping_add(b),
        ArithOp::Sub => a.wrapping_sub(b),
        ArithOp::Mul => a.wrapping_mul(b),
        ArithOp::Div | ArithOp::Mod if b == 0 => {
            return Err("INT division by zero".into());
        }
        ArithOp::Div => a.wrapping_div(b),
        ArithOp::Mod => a.wrapping_rem(b),
    })
}

/// Arithmetic with the result types of Varnish's operator table.
fn arith(op: ArithOp, a: Value, b: Value) -> Result<Value, String> {
    use Value as V;
    Ok(match (a, b) {
        (V::Int(x), V::Int(y)) => V::Int(int_op(op, x, y)?),
        (V::Bytes(x), V::Bytes(y) | V::Int(y)) => V::Bytes(int_op(op, x, y)?),
        (V::Bytes(x), V::Real(y)) => V::Bytes(real_op(op, x as f64, y) as i64),
        (V::Real(x), V::Real(y)) => V::Real(real_op(op, x, y)),
        (V::Int(x), V::Real(y)) => V::Real(real_op(op, x as f64, y)),
        (V::Real(x), V::Int(y)) => V::Real(real_op(op, x, y as f64)),
        (V::Duration(x), V::Duration(y) | V::Real(y)) => V::Duration(real_op(op, x, y)),
        (V::Duration(x), V::Int(y)) => V::Duration(real_op(op, x, y as f64)),
        (V::Time(x), V::Duration(y)) => V::Time(real_op(op, x, y)),
        (V::Time(x), V::Time(y)) if op == ArithOp::Sub => V::Duration(x - y),
        (a, b) => {
            return Err(format!(
                "{} {} {} not possible",
                a.type_name(),
                op.symbol(),
                b.type_name()
            ));
        }
    })
}

/// Whether turning `v` into text takes workspace in varnishd (numbers,
/// times and addresses are printed there; strings, BOOLs and names are
/// used in place).
fn printed(v: &Value) -> bool {
    matches!(
        v,
        Value::Int(_)
            | Value::Real(_)
            | Value::Duration(_)
            | Value::Time(_)
            | Value::Bytes(_)
            | Value::Ip(_)
    )
}

impl<'a, C: Context + AsDynContext + ?Sized> Exec<'a, C> {
    /// Records a runtime error; the caller returns the `Failed` it gets.
    #[cold]
    #[inline(never)]
    fn fail(&mut self, msg: impl Into<String>) -> Failed {
        self.failure = Some(msg.into().into_boxed_str());
        Failed
    }

    /// Converts the result of a context or vmod call.
    #[inline]
    fn check<T>(&mut self, r: Result<T, String>) -> Res<T> {
        match r {
            Ok(v) => Ok(v),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Charges a string of `len` bytes (and its terminating NUL, as
    /// varnishd stores it) to the task's workspace: `false` when it does
    /// not fit (the workspace is then marked overflowed). A task without a
    /// workspace takes anything.
    fn ws_charge(&mut self, len: usize) -> bool {
        self.ws_take(len as u64 + 1)
    }

    /// Charges `n` bytes to the task's workspace (see [`Self::ws_charge`]).
    fn ws_take(&mut self, n: u64) -> bool {
        match self.ctx.workspace(WsKind::Task) {
            Some(ws) => ws.alloc(n),
            None => true,
        }
    }

    /// A scratch buffer for a string being built: one given back earlier
    /// in the run, or a new one with room for a typical string at once (a
    /// `Scratch` lives for one request, so a buffer grown from nothing
    /// reallocated six times or more for builtin vcl_synth's page).
    fn take_buf(&mut self) -> Vec<u8> {
        self.bufs
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(SCRATCH_FIRST))
    }

    fn give_buf(&mut self, mut b: Vec<u8>) {
        b.clear();
        self.bufs.push(b);
    }

    fn call(&mut self, sub: SubId) -> Res<Flow> {
        let prog = self.prog;
        let Some(code) = prog.subs.get(sub as usize) else {
            return Err(self.fail(format!("call to unknown subroutine #{sub}")));
        };
        if self.stack.len() >= MAX_CALL_DEPTH {
            return Err(self.fail(format!(
                "Recursive call to \"sub {}{{}}\" (call depth {MAX_CALL_DEPTH})",
                code.name
            )));
        }
        self.stack.push(sub);
        let r = self.block(&code.body);
        self.stack.pop();
        r
    }

    /// A call of a SUB value (`call <expr>`, or a vmod's `VRT_call`): the
    /// subroutine must be callable from the running built-in method and
    /// not be running already.
    fn call_dynamic(&mut self, sub: SubId) -> Res<Flow> {
        let prog = self.prog;
        let Some(code) = prog.subs.get(sub as usize) else {
            return Err(self.fail(format!("call to unknown subroutine #{sub}")));
        };
        // As varnishd's VRT_call (VRT_check_call, above, says "Dynamic").
        if !code.callable_from.contains(self.ctx.sub()) {
            return Err(self.fail(format!(
                "call to \"sub {}{{}}\" not allowed from here",
                code.name
            )));
        }
        if self.stack.contains(&sub) {
            return Err(self.fail(format!("Recursive call to \"sub {}{{}}\"", code.name)));
        }
        match self.call(sub)? {
            Flow::ReturnSub => Ok(Flow::Next),
            other => Ok(other),
        }
    }

    /// Runs a vmod function, method or constructor `f`, handing it the
    /// task context and the [`VclRuntime`] of this run. When a subroutine
    /// it ran failed or chose an action, the task fails or unwinds as from
    /// that `return`.
    fn vmod_call<T>(
        &mut self,
        f: impl FnOnce(&dyn Vmods, &mut dyn Context, &mut dyn VclRuntime) -> Result<T, String>,
    ) -> Res<T> {
        let mut vcl = VmodVcl {
            prog: self.prog,
            vmods: self.vmods,
            bufs: &mut *self.bufs,
            stack: &mut *self.stack,
            action: None,
            failure: None,
            can_suspend: self.can_suspend,
            suspended: None,
        };
        let r = f(self.vmods, self.ctx.as_dyn(), &mut vcl);
        let VmodVcl {
            action,
            failure,
            suspended,
            ..
        } = vcl;
        if let Some(msg) = failure {
            self.failure = Some(msg);
            return Err(Failed);
        }
        if action.is_some() {
            self.action = action;
            return Err(Failed);
        }
        let v = self.check(r)?;
        if let Some((wait, resume)) = suspended {
            *self.unwinding = Some(Box::new(Unwinding {
                wait,
                resume,
                path: Vec::new(),
            }));
            return Err(Failed);
        }
        Ok(v)
    }

    fn block(&mut self, stmts: &[Stmt]) -> Res<Flow> {
        for s in stmts {
            match self.stmt(s) {
                Ok(Flow::Next) => {}
                Ok(other) => return Ok(other),
                Err(f) => return Err(self.unwinding(s, f)),
            }
        }
        Ok(Flow::Next)
    }

    /// A statement of a block ended in `Err`: when that is a suspension,
    /// records the statement on the way out.
    #[cold]
    #[inline(never)]
    fn unwinding(&mut self, s: &Stmt, f: Failed) -> Failed {
        if let Some(u) = self.unwinding.as_mut() {
            u.path.push(s as *const Stmt as usize);
        }
        f
    }

    /// Resumes subroutine `sub` at `path` (outermost statement last).
    #[cold]
    #[inline(never)]
    fn resume_call(&mut self, sub: SubId, path: &mut Vec<usize>, how: Resume) -> Res<Flow> {
        let prog = self.prog;
        let Some(code) = prog.subs.get(sub as usize) else {
            return Err(self.fail(format!("resume in unknown subroutine #{sub}")));
        };
        self.stack.push(sub);
        let r = self.resume_block(&code.body, path, how);
        self.stack.pop();
        r
    }

    /// Resumes a block at the statement `path` ends with, then runs the
    /// statements after it.
    fn resume_block(&mut self, stmts: &[Stmt], path: &mut Vec<usize>, how: Resume) -> Res<Flow> {
        let Some(i) = path.pop().and_then(|a| index_of(stmts, a)) else {
            return Err(self.fail("VCL resumed at a point that is not in its program"));
        };
        let s = &stmts[i];
        let r = if path.is_empty() {
            match how {
                Resume::After => Ok(Flow::Next),
                Resume::Again => self.stmt(s),
            }
        } else {
            self.resume_stmt(s, path, how)
        };
        match r {
            Ok(Flow::Next) => self.block(&stmts[i + 1..]),
            Ok(other) => Ok(other),
            Err(f) => Err(self.unwinding(s, f)),
        }
    }

    /// Resumes inside statement `s`: the branch of an `if`, or the
    /// subroutine of a `call`, that holds the next statement of `path`.
    fn resume_stmt(&mut self, s: &Stmt, path: &mut Vec<usize>, how: Resume) -> Res<Flow> {
        let next = path.last().copied().unwrap_or(0);
        let flow = match s {
            Stmt::If(branches, otherwise) => {
                let body = branches
                    .iter()
                    .map(|(_, b)| b)
                    .chain(std::iter::once(otherwise))
                    .find(|b| index_of(b, next).is_some());
                return match body {
                    Some(b) => self.resume_block(b, path, how),
                    None => Err(self.fail("VCL resumed in an if without that statement")),
                };
            }
            Stmt::Call(sub) => self.resume_call(*sub, path, how)?,
            Stmt::CallDynamic(_) => {
                let prog = self.prog;
                let Some(sub) = prog
                    .subs
                    .iter()
                    .position(|c| index_of(&c.body, next).is_some())
                else {
                    return Err(self.fail("VCL resumed in a call without that statement"));
                };
                self.resume_call(sub as SubId, path, how)?
            }
            _ => return Err(self.fail("VCL resumed inside a statement without a body")),
        };
        Ok(match flow {
            Flow::ReturnSub => Flow::Next,
            other => other,
        })
    }

    fn stmt(&mut self, s: &Stmt) -> Res<Flow> {
        match s {
            Stmt::Set(target, e) => self.set(target, e)?,
            Stmt::Unset(Target::Header(w, h)) => self.ctx.unset_header(*w, h),
            Stmt::If(branches, otherwise) => {
                for (cond, body) in branches.iter() {
                    if self.eval_bool(cond)? {
                        return self.block(body);
                    }
                }
                return self.block(otherwise);
            }
            Stmt::Call(sub) => {
                return match self.call(*sub)? {
                    Flow::ReturnSub => Ok(Flow::Next),
                    other => Ok(other),
                };
            }
            Stmt::Return(a) => {
                let action = self.action(a)?;
                self.action = Some(action);
                return Ok(Flow::Return);
            }
            Stmt::ReturnSub => return Ok(Flow::ReturnSub),
            _ => return self.stmt_rare(s),
        }
        Ok(Flow::Next)
    }

    /// The statements a request runs a few of at most.
    #[inline(never)]
    fn stmt_rare(&mut self, s: &Stmt) -> Res<Flow> {
        match s {
            Stmt::Unset(Target::StrVar(id) | Target::Var(id)) => {
                let r = self.ctx.unset(*id);
                self.check(r)?;
            }
            Stmt::CallDynamic(e) => {
                let sub = match self.eval(e)? {
                    Value::Sub(s) => s,
                    Value::Null => return Err(self.fail("Tried to call a NULL SUB")),
                    other => {
                        return Err(self.fail(format!("cannot call a {}", other.type_name())));
                    }
                };
                return self.call_dynamic(sub);
            }
            Stmt::HashData(e) => {
                let mut buf = self.take_buf();
                let r = self.append_str(e, &mut buf);
                if let Ok(nonnull) = r {
                    self.ctx.hash_data(nonnull.then_some(&buf[..]));
                }
                self.give_buf(buf);
                r?;
            }
            Stmt::Synthetic(e) => {
                let mut buf = self.take_buf();
                let r = self.append_str(e, &mut buf);
                if let Ok(nonnull) = r {
                    self.ctx
                        .synthetic(if nonnull { &buf[..] } else { b"(null)" });
                }
                self.give_buf(buf);
                r?;
            }
            Stmt::Ban(e) => {
                let mut buf = self.take_buf();
                let r = self.append_str(e, &mut buf);
                // A failed ban is logged; the task goes on.
                let failed = match r {
                    Ok(false) => Some("Null argument".to_string()),
                    Ok(true) => self.ctx.ban(&buf).err(),
                    Err(_) => None,
                };
                if let Some(reason) = failed {
                    let msg = format!("ban(): {reason}");
                    self.ctx.log(LogKind::Error, msg.as_bytes());
                }
                self.give_buf(buf);
                r?;
            }
            Stmt::Eval(e) => {
                self.eval(e)?;
            }
            Stmt::New {
                class,
                instance,
                name,
                args,
            } => {
                let args = self.eval_args(args)?;
                self.vmod_call(|vmods, ctx, vcl| {
                    vmods.construct(ctx, vcl, *class, *instance, name, &args)
                })?;
            }
            // Handled by `stmt`.
            Stmt::Set(..)
            | Stmt::Unset(Target::Header(..))
            | Stmt::If(..)
            | Stmt::Call(_)
            | Stmt::Return(_)
            | Stmt::ReturnSub => return self.stmt(s),
        }
        Ok(Flow::Next)
    }

    fn set(&mut self, target: &Target, e: &Expr) -> Res<()> {
        match target {
            Target::Header(w, h) => {
                if let Expr::Const(Value::Str(v)) = e {
                    let r = self.ctx.set_header(*w, h, v);
                    return self.check(r);
                }
                let mut buf = self.take_buf();
                let r = match self.append_str(e, &mut buf) {
                    Ok(_) => {
                        let r = self.ctx.set_header(*w, h, &buf);
                        self.check(r)
                    }
                    Err(f) => Err(f),
                };
                self.give_buf(buf);
                r?;
            }
            Target::StrVar(id) => {
                let mut buf = self.take_buf();
                let r = match self.append_str(e, &mut buf) {
                    Ok(_) => {
                        let r = self.ctx.set_str(*id, &buf);
                        self.check(r)
                    }
                    Err(f) => Err(f),
                };
                self.give_buf(buf);
                r?;
            }
            Target::Var(id) => {
                let v = self.eval(e)?;
                let r = self.ctx.set(*id, v);
                self.check(r)?;
            }
        }
        Ok(())
    }

    fn action(&mut self, a: &ReturnAction) -> Res<Action> {
        Ok(match a {
            ReturnAction::Abandon => Action::Abandon,
            ReturnAction::Deliver => Action::Deliver,
            ReturnAction::Fetch => Action::Fetch,
            ReturnAction::Hash => Action::Hash,
            ReturnAction::Lookup => Action::Lookup,
            ReturnAction::Ok => Action::Ok,
            ReturnAction::Pipe => Action::Pipe,
            ReturnAction::Purge => Action::Purge,
            ReturnAction::Restart => Action::Restart,
            ReturnAction::Retry => Action::Retry,
            ReturnAction::Pass(None) => Action::Pass { ttl: None },
            _ => return self.action_with_args(a),
        })
    }

    /// The actions with arguments to evaluate.
    #[inline(never)]
    fn action_with_args(&mut self, a: &ReturnAction) -> Res<Action> {
        Ok(match a {
            ReturnAction::Fail(reason) => {
                if let Some(e) = reason {
                    let mut buf = self.take_buf();
                    let r = self.append_str(e, &mut buf);
                    if r.is_ok() {
                        self.ctx.log(LogKind::Error, &buf);
                    }
                    self.give_buf(buf);
                    r?;
                } else {
                    // As varnishd's compiled `return (fail)`.
                    self.ctx.log(LogKind::Error, b"Failed from VCL");
                }
                Action::Fail
            }
            ReturnAction::Pass(ttl) => Action::Pass {
                ttl: match ttl {
                    None => None,
                    Some(e) => match self.eval(e)? {
                        Value::Duration(d) | Value::Real(d) => Some(d),
                        Value::Int(i) => Some(i as f64),
                        other => {
                            return Err(self.fail(format!(
                                "pass() needs a DURATION, got {}",
                                other.type_name()
                            )));
                        }
                    },
                },
            },
            ReturnAction::Synth(status, reason) => {
                let (status, reason) = self.status_reason(status, reason.as_ref())?;
                Action::Synth { status, reason }
            }
            ReturnAction::Error(status, reason) => {
                let (status, reason) = self.status_reason(status, reason.as_ref())?;
                Action::Error { status, reason }
            }
            ReturnAction::Vcl(label) => Action::Vcl(label.clone()),
            ReturnAction::Abandon
            | ReturnAction::Deliver
            | ReturnAction::Fetch
            | ReturnAction::Hash
            | ReturnAction::Lookup
            | ReturnAction::Ok
            | ReturnAction::Pipe
            | ReturnAction::Purge
            | ReturnAction::Restart
            | ReturnAction::Retry => return self.action(a),
        })
    }

    /// `synth(status, reason)` arguments as `VRT_synth` takes them: a
    /// negative status, one above 65535 or one whose last three digits are
    /// below 100 fails the subroutine with varnishd's message (so the client
    /// gets a 503 "VCL failed"); a NULL or absent reason is `None` (the
    /// server uses the standard reason phrase of `status % 1000`).
    fn status_reason(&mut self, status: &Expr, reason: Option<&Expr>) -> Res<(u16, Option<Bytes>)> {
        let status = match self.eval(status)? {
            Value::Int(i) => i,
            other => {
                return Err(self.fail(format!("status must be an INT, got {}", other.type_name())));
            }
        };
        let status = if status < 0 {
            return Err(self.fail(format!(
                "return(synth()) status code ({status}) is negative"
            )));
        } else if status > 65535 {
            return Err(self.fail(format!("return(synth()) status code ({status}) > 65535")));
        } else if status % 1000 < 100 {
            return Err(self.fail(format!(
                "illegal return(synth()) status code ({status}) (..0##)"
            )));
        } else {
            status as u16
        };
        let reason = match reason {
            None => None,
            Some(e) => {
                let mut buf = self.take_buf();
                let r = self.append_str(e, &mut buf);
                let out = match r {
                    Ok(true) => Some(Bytes::copy_from_slice(&buf)),
                    _ => None,
                };
                self.give_buf(buf);
                r?;
                out
            }
        };
        Ok((status, reason))
    }

    fn eval_args(&mut self, args: &[Option<Expr>]) -> Res<Vec<VmodArg>> {
        let mut out = Vec::with_capacity(args.len());
        for a in args {
            out.push(match a {
                None => None,
                Some(e) => Some(self.eval(e)?),
            });
        }
        Ok(out)
    }

    /// Appends the string form of `e` to `out`; `Ok(false)` when the value
    /// is NULL (nothing appended).
    fn append_str(&mut self, e: &Expr, out: &mut Vec<u8>) -> Res<bool> {
        match e {
            Expr::Const(Value::Str(s)) => {
                out.extend_from_slice(s);
                Ok(true)
            }
            Expr::Header(w, h) => match self.ctx.header(*w, h) {
                Some(v) => {
                    out.extend_from_slice(v);
                    Ok(true)
                }
                None => Ok(false),
            },
            Expr::StrVar(id) => match self.ctx.get_str(*id) {
                Ok(Some(v)) => {
                    out.extend_from_slice(v);
                    Ok(true)
                }
                Ok(None) => Ok(false),
                Err(e) => Err(self.fail(e)),
            },
            Expr::Concat(parts) | Expr::Strands(parts) => {
                for p in parts.iter() {
                    self.append_str(p, out)?;
                }
                Ok(true)
            }
            Expr::Regsub {
                all,
                subject,
                regex,
                sub,
            } => {
                let re = self.regex(*regex)?;
                self.regsub_into(re, *all, subject, sub, out)
            }
            _ => self.append_str_rare(e, out),
        }
    }

    /// `regsub()`/`regsuball()` of `subject` with `re`, appended to `out`.
    fn regsub_into(
        &mut self,
        re: &'a super::regex::Regex,
        all: bool,
        subject: &Expr,
        sub: &Expr,
        out: &mut Vec<u8>,
    ) -> Res<bool> {
        let at = out.len();
        // Each branch says whether the result differs from the
        // subject.
        let r = if let Expr::Const(Value::Str(with)) = sub {
            // The usual shape: a literal replacement, and a subject
            // read in place (no copies).
            self.with_str(subject, |s| {
                let s = s.unwrap_or_default();
                re.substitute(s, with, all, out).map(|()| out[at..] != *s)
            })?
        } else {
            let mut subj = self.take_buf();
            let mut with = self.take_buf();
            let r = self
                .append_str(subject, &mut subj)
                .and_then(|_| self.append_str(sub, &mut with))
                .map(|_| {
                    re.substitute(&subj, &with, all, out)
                        .map(|()| out[at..] != subj[..])
                });
            self.give_buf(subj);
            self.give_buf(with);
            r?
        };
        let changed = self.check(r)?;
        // As varnishd: a substitution's result is a new string in
        // the workspace (an unchanged subject is used in place).
        if changed && !self.ws_charge(out.len() - at) {
            return Err(self.fail("regsub: Out of workspace"));
        }
        Ok(true)
    }

    /// The compiled regex a REGEX-typed expression evaluates to.
    fn regex_value(&mut self, e: &Expr) -> Res<&'a super::regex::Regex> {
        match self.eval(e)? {
            Value::Regex(i) => self.regex(i),
            other => Err(self.fail(format!("Expected a REGEX, got {}", other.type_name()))),
        }
    }

    /// `append_str` of values that are not strings already.
    #[inline(never)]
    fn append_str_rare(&mut self, e: &Expr, out: &mut Vec<u8>) -> Res<bool> {
        match e {
            Expr::RegsubDyn {
                all,
                subject,
                regex,
                sub,
            } => {
                let re = self.regex_value(regex)?;
                self.regsub_into(re, *all, subject, sub, out)
            }
            Expr::IpStr(inner) => match self.eval(inner)? {
                Value::Null => Err(self.fail("VRT_IP_string: Illegal IP")),
                v => self.append_value(v, out),
            },
            Expr::Case { upper, inner } => {
                let at = out.len();
                let nonnull = self.append_str(inner, out)?;
                if *upper {
                    out[at..].make_ascii_uppercase();
                } else {
                    out[at..].make_ascii_lowercase();
                }
                Ok(nonnull)
            }
            _ => {
                let v = self.eval(e)?;
                self.append_value(v, out)
            }
        }
    }

    /// Appends the string form of an evaluated value, charging printed
    /// forms to the workspace.
    fn append_value(&mut self, v: Value, out: &mut Vec<u8>) -> Res<bool> {
        let prog = self.prog;
        let at = out.len();
        let nonnull = match v.append_to(out, &prog.acl_names) {
            Ok(nonnull) => nonnull,
            Err(e) => return Err(self.fail(e.0)),
        };
        // As varnishd: a printed value that does not fit in the
        // workspace is NULL (and the workspace overflowed).
        if nonnull && printed(&v) && !self.ws_charge(out.len() - at) {
            out.truncate(at);
            return Ok(false);
        }
        Ok(nonnull)
    }

    fn regex(&mut self, i: u32) -> Res<&'a super::regex::Regex> {
        let prog = self.prog;
        match prog.regexes.get(i as usize) {
            Some(r) => Ok(r),
            None => Err(self.fail(format!("unknown regex #{i}"))),
        }
    }

    /// Runs `f` on the string form of `e` without copying when `e` is a
    /// plain read.
    fn with_str<R>(&mut self, e: &Expr, f: impl FnOnce(Option<&[u8]>) -> R) -> Res<R> {
        match e {
            Expr::Const(Value::Str(s)) => Ok(f(Some(s))),
            Expr::Const(Value::Null) => Ok(f(None)),
            Expr::Header(w, h) => Ok(f(self.ctx.header(*w, h))),
            Expr::StrVar(id) => match self.ctx.get_str(*id) {
                Ok(v) => Ok(f(v)),
                Err(e) => Err(self.fail(e)),
            },
            _ => {
                let mut buf = self.take_buf();
                let r = self.append_str(e, &mut buf);
                let out = match r {
                    Ok(nonnull) => Ok(f(nonnull.then_some(&buf[..]))),
                    Err(f) => Err(f),
                };
                self.give_buf(buf);
                out
            }
        }
    }

    fn eval_bool(&mut self, e: &Expr) -> Res<bool> {
        match e {
            Expr::Not(inner) => Ok(!self.eval_bool(inner)?),
            Expr::And(parts) => {
                for p in parts.iter() {
                    if !self.eval_bool(p)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            Expr::Or(parts) => {
                for p in parts.iter() {
                    if self.eval_bool(p)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            Expr::ToBool(inner) => match &**inner {
                Expr::Header(w, h) => Ok(self.ctx.header(*w, h).is_some()),
                Expr::StrVar(id) => match self.ctx.get_str(*id) {
                    Ok(v) => Ok(v.is_some()),
                    Err(e) => Err(self.fail(e)),
                },
                other => Ok(self.eval(other)?.truthy()),
            },
            Expr::Match {
                subject,
                regex,
                negate,
            } => {
                let re = self.regex(*regex)?;
                self.regex_match(re, subject, *negate)
            }
            Expr::StrCmp {
                op,
                left,
                right,
                strands,
            } if matches!(**right, Expr::Const(_)) => {
                let (op, strands) = (*op, *strands);
                let c = match &**right {
                    Expr::Const(Value::Str(s)) => Some(&s[..]),
                    _ => None,
                };
                self.with_str(left, |l| str_cmp(op, l, c, strands))
            }
            Expr::Cmp(op, a, b) => {
                let a = self.operand(a)?;
                let b = self.operand(b)?;
                let r = value_cmp(*op, &a, &b);
                self.check(r)
            }
            _ => self.eval_bool_rare(e),
        }
    }

    /// `subject ~ re` (or `!~` when `negate`).
    fn regex_match(&mut self, re: &super::regex::Regex, subject: &Expr, negate: bool) -> Res<bool> {
        match self.with_str(subject, |s| re.is_match(s.unwrap_or_default()))? {
            Ok(m) => Ok(m != negate),
            Err(msg) => {
                // Varnish logs matching failures and reads them as "no
                // match".
                self.ctx.log(LogKind::Error, msg.as_bytes());
                Ok(negate)
            }
        }
    }

    /// Whether `ip` matches ACL `acl` of the program (see [`match_acl`]).
    fn acl_match(&mut self, acl: u32, ip: std::net::SocketAddr) -> Res<bool> {
        let r = match_acl(self.prog, self.ctx.as_dyn(), acl, ip);
        self.check(r)
    }

    /// The conditions a request evaluates a few of at most.
    #[inline(never)]
    fn eval_bool_rare(&mut self, e: &Expr) -> Res<bool> {
        match e {
            Expr::MatchDyn {
                subject,
                regex,
                negate,
            } => {
                let re = self.regex_value(regex)?;
                self.regex_match(re, subject, *negate)
            }
            Expr::Const(Value::Bool(b)) => Ok(*b),
            Expr::IpCmp(op, a, b) => {
                let a = self.operand(a)?;
                let b = self.operand(b)?;
                if matches!(a, Value::Null) || matches!(b, Value::Null) {
                    return Err(self.fail("VRT_ipcmp: Illegal IP"));
                }
                let r = value_cmp(*op, &a, &b);
                self.check(r)
            }
            Expr::AclMatch { ip, acl, negate } => {
                let Value::Ip(sa) = self.eval(ip)? else {
                    return Err(self.fail("Cannot match a null IP address"));
                };
                Ok(self.acl_match(*acl, sa)? != *negate)
            }
            Expr::AclMatchDyn { ip, acl, negate } => {
                let acl = match self.eval(acl)? {
                    Value::Acl(i) => i,
                    Value::Null => return Err(self.fail("Cannot match a null ACL")),
                    other => {
                        return Err(
                            self.fail(format!("Expected an ACL, got {}", other.type_name()))
                        );
                    }
                };
                let Value::Ip(sa) = self.eval(ip)? else {
                    return Err(self.fail("Cannot match a null IP address"));
                };
                Ok(self.acl_match(acl, sa)? != *negate)
            }
            Expr::StrCmp {
                op,
                left,
                right,
                strands,
            } => {
                let (op, strands) = (*op, *strands);
                let mut lb = self.take_buf();
                let out = match self.append_str(left, &mut lb) {
                    Ok(lnn) => {
                        let lv = lnn.then_some(&lb[..]);
                        self.with_str(right, |rv| str_cmp(op, lv, rv, strands))
                    }
                    Err(f) => Err(f),
                };
                self.give_buf(lb);
                out
            }
            other => Ok(self.eval(other)?.truthy()),
        }
    }

    /// `eval` for the operands of comparisons and arithmetic, which are
    /// nearly always a literal or a variable: those are handled here
    /// without entering the large `eval` frame.
    #[inline]
    fn operand(&mut self, e: &Expr) -> Res<Value> {
        match e {
            Expr::Const(v) => Ok(v.clone()),
            Expr::Var(id) => {
                let r = self.ctx.get(*id);
                self.check(r)
            }
            _ => self.eval(e),
        }
    }

    fn eval(&mut self, e: &Expr) -> Res<Value> {
        Ok(match e {
            Expr::Const(v) => v.clone(),
            Expr::StrVar(id) => match self.ctx.get_str(*id) {
                Ok(Some(v)) => Value::Str(Bytes::copy_from_slice(v)),
                Ok(None) => Value::Null,
                Err(e) => return Err(self.fail(e)),
            },
            Expr::Var(id) => {
                let r = self.ctx.get(*id);
                match self.check(r)? {
                    // As varnishd: reading a BLOB variable (req.hash) makes
                    // a BLOB descriptor in the workspace.
                    Value::Blob(_) if !self.ws_take(BLOB_STRUCT) => {
                        let name = crate::vars::VARIABLES
                            .iter()
                            .find(|d| d.id == *id)
                            .map_or("BLOB", |d| d.name);
                        return Err(self.fail(format!("Workspace overflow ({name})")));
                    }
                    v => v,
                }
            }
            Expr::Header(w, h) => match self.ctx.header(*w, h) {
                Some(v) => Value::Str(Bytes::copy_from_slice(v)),
                None => Value::Null,
            },
            Expr::Storage(id, name) => {
                let r = self.ctx.storage_var(*id, name);
                self.check(r)?
            }
            Expr::Concat(_) | Expr::IpStr(_) | Expr::Regsub { .. } | Expr::RegsubDyn { .. } => {
                let mut buf = self.take_buf();
                let r = self.append_str(e, &mut buf);
                let v = Value::Str(Bytes::copy_from_slice(&buf));
                self.give_buf(buf);
                r?;
                v
            }
            Expr::Strands(parts) => {
                let mut buf = self.take_buf();
                let mut ranges = Vec::with_capacity(parts.len());
                let mut r = Ok(());
                for p in parts.iter() {
                    let at = buf.len();
                    match self.append_str(p, &mut buf) {
                        Ok(set) => ranges.push(set.then_some(at..buf.len())),
                        Err(e) => {
                            r = Err(e);
                            break;
                        }
                    }
                }
                let joined = Bytes::copy_from_slice(&buf);
                self.give_buf(buf);
                r?;
                let parts = ranges
                    .into_iter()
                    .map(|r| r.map(|r| joined.slice(r)))
                    .collect();
                Value::Strands(Arc::new(Strands { parts, joined }))
            }
            Expr::Not(_)
            | Expr::And(_)
            | Expr::Or(_)
            | Expr::ToBool(_)
            | Expr::Match { .. }
            | Expr::MatchDyn { .. }
            | Expr::AclMatch { .. }
            | Expr::AclMatchDyn { .. }
            | Expr::StrCmp { .. }
            | Expr::IpCmp(..)
            | Expr::Cmp(..) => Value::Bool(self.eval_bool(e)?),
            Expr::Neg(inner) => match self.eval(inner)? {
                Value::Int(i) => Value::Int(i.wrapping_neg()),
                Value::Real(r) => Value::Real(-r),
                Value::Duration(d) => Value::Duration(-d),
                Value::Bytes(b) => Value::Bytes(b.wrapping_neg()),
                other => {
                    return Err(self.fail(format!("cannot negate {}", other.type_name())));
                }
            },
            Expr::Arith(op, a, b) => {
                let a = self.operand(a)?;
                let b = self.operand(b)?;
                let r = arith(*op, a, b);
                self.check(r)?
            }
            Expr::Case { upper, inner } => match self.eval(inner)? {
                Value::Null => Value::Null,
                v => {
                    let mut buf = self.take_buf();
                    let prog = self.prog;
                    let r = v.append_to(&mut buf, &prog.acl_names);
                    if *upper {
                        buf.make_ascii_uppercase();
                    } else {
                        buf.make_ascii_lowercase();
                    }
                    let out = Value::Str(Bytes::copy_from_slice(&buf));
                    self.give_buf(buf);
                    if let Err(e) = r {
                        return Err(self.fail(e.0));
                    }
                    out
                }
            },
            Expr::Resolve(inner) => {
                let b = self.eval(inner)?;
                let r = self.ctx.resolve_backend(&b);
                self.check(r)?
            }
            Expr::Call(f, args) => {
                let args = self.eval_args(args)?;
                self.vmod_call(|vmods, ctx, vcl| vmods.call(ctx, vcl, *f, &args))?
            }
            Expr::Method {
                instance,
                method,
                args,
            } => {
                let args = self.eval_args(args)?;
                self.vmod_call(|vmods, ctx, vcl| vmods.method(ctx, vcl, *instance, *method, &args))?
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn deeper(n: u32) -> u64 {
        let pad = [n as u8; 256];
        std::hint::black_box(&pad);
        let d = if n == 0 {
            stack_depth().unwrap()
        } else {
            deeper(n - 1)
        };
        std::hint::black_box(&pad);
        d
    }

    #[test]
    fn stack_depth_is_measured_from_the_outermost_run() {
        assert_eq!(stack_depth(), None);
        {
            let marker = 0u8;
            let _base = StackBase::enter(std::ptr::addr_of!(marker) as usize);
            let shallow = stack_depth().unwrap();
            // A nested run keeps the outer base.
            let inner = StackBase::enter(1);
            assert!(deeper(8) > shallow);
            drop(inner);
            assert!(stack_depth().is_some());
        }
        assert_eq!(stack_depth(), None);
    }

    #[test]
    fn string_compare_null_rules() {
        assert!(!str_cmp(CmpOp::Eq, None, None, false));
        assert!(str_cmp(CmpOp::Ne, None, Some(b"a"), false));
        assert!(str_cmp(CmpOp::Eq, None, Some(b""), true));
        assert!(str_cmp(CmpOp::Lt, Some(b"a"), Some(b"b"), false));
        assert!(str_cmp(CmpOp::Ge, Some(b"b"), Some(b"b"), false));
    }

    #[test]
    fn arithmetic_rules() {
        let v = |r: Result<Value, String>| r.unwrap();
        assert_eq!(
            v(arith(ArithOp::Div, Value::Int(7), Value::Int(2))),
            Value::Int(3)
        );
        assert_eq!(
            v(arith(ArithOp::Mod, Value::Int(-7), Value::Int(2))),
            Value::Int(-1)
        );
        assert!(arith(ArithOp::Div, Value::Int(1), Value::Int(0)).is_err());
        assert!(arith(ArithOp::Mod, Value::Int(1), Value::Int(0)).is_err());
        assert_eq!(
            v(arith(ArithOp::Add, Value::Int(i64::MAX), Value::Int(1))),
            Value::Int(i64::MIN)
        );
        assert_eq!(
            v(arith(ArithOp::Sub, Value::Time(100.0), Value::Time(40.0))),
            Value::Duration(60.0)
        );
        assert_eq!(
            v(arith(
                ArithOp::Add,
                Value::Time(100.0),
                Value::Duration(5.0)
            )),
            Value::Time(105.0)
        );
        assert_eq!(
            v(arith(ArithOp::Mul, Value::Duration(2.0), Value::Real(1.5))),
            Value::Duration(3.0)
        );
        assert_eq!(
            v(arith(ArithOp::Div, Value::Real(1.0), Value::Real(0.0))),
            Value::Real(f64::INFINITY)
        );
        assert_eq!(
            v(arith(ArithOp::Mul, Value::Bytes(1024), Value::Int(2))),
            Value::Bytes(2048)
        );
        assert!(arith(ArithOp::Add, Value::Time(1.0), Value::Time(1.0)).is_err());
    }

    #[test]
    fn value_comparisons() {
        let t = |op, a: Value, b: Value| value_cmp(op, &a, &b).ok().unwrap();
        assert!(t(CmpOp::Lt, Value::Int(1), Value::Int(2)));
        assert!(t(CmpOp::Ne, Value::Real(f64::NAN), Value::Real(1.0)));
        assert!(!t(CmpOp::Eq, Value::Real(f64::NAN), Value::Real(f64::NAN)));
        let a: std::net::SocketAddr = "1.2.3.4:1".parse().unwrap();
        let b: std::net::SocketAddr = "1.2.3.4:2".parse().unwrap();
        assert!(t(CmpOp::Eq, Value::Ip(a), Value::Ip(b)));
        assert!(value_cmp(CmpOp::Eq, &Value::Int(1), &Value::str("1")).is_err());
    }
}

#[cfg(test)]
mod suspend_tests {
    //! Suspension and resumption of runs, against hand-built programs and a
    //! vmod whose I/O is a future that is ready at once.
    use super::*;
    use crate::exec::code::Block;
    use crate::exec::context::FuncRef;
    use crate::exec::mock::MockContext;
    use std::sync::Mutex;

    const WAIT: FuncRef = FuncRef { vmod: 0, func: 0 };
    const GET: FuncRef = FuncRef { vmod: 0, func: 1 };
    const RUN_SUB: FuncRef = FuncRef { vmod: 0, func: 2 };

    /// `WAIT` suspends (resume after it); `GET` suspends once and, run
    /// again, returns "got"; `RUN_SUB` runs the SUB it is given.
    #[derive(Default)]
    struct Waiting {
        get_calls: Mutex<u32>,
    }

    impl Vmods for Waiting {
        fn call(
            &self,
            ctx: &mut dyn Context,
            vcl: &mut dyn VclRuntime,
            f: FuncRef,
            args: &[VmodArg],
        ) -> Result<Value, String> {
            match f.func {
                0 => vcl.suspend(Box::pin(async {}), Resume::After)?,
                1 => {
                    let mut n = self.get_calls.lock().unwrap();
                    *n += 1;
                    if *n == 1 {
                        vcl.suspend(Box::pin(async {}), Resume::Again)?;
                        return Ok(Value::Null);
                    }
                    return Ok(Value::str(b"got".to_vec()));
                }
                _ => {
                    let Some(Some(Value::Sub(s))) = args.first() else {
                        return Err("no sub".into());
                    };
                    vcl.call(ctx, *s);
                }
            }
            Ok(Value::Null)
        }
        fn construct(
            &self,
            _: &mut dyn Context,
            _: &mut dyn VclRuntime,
            _: FuncRef,
            _: u32,
            _: &str,
            _: &[VmodArg],
        ) -> Result<(), String> {
            Err("no objects".into())
        }
        fn method(
            &self,
            _: &mut dyn Context,
            _: &mut dyn VclRuntime,
            _: u32,
            _: u32,
            _: &[VmodArg],
        ) -> Result<Value, String> {
            Err("no objects".into())
        }
    }

    fn mark(s: &str) -> Stmt {
        Stmt::Synthetic(Expr::str(s))
    }

    fn wait() -> Stmt {
        Stmt::Eval(Expr::Call(WAIT, Box::new([])))
    }

    /// Runs `method` to the end, awaiting each wait; returns the action
    /// and how many times the run was suspended.
    fn drive(
        prog: &Program,
        ctx: &mut MockContext,
        vmods: &Waiting,
        method: BuiltinSub,
    ) -> (Action, u32) {
        let mut scratch = Scratch::default();
        let mut suspensions = 0;
        let mut run = prog.start(method, ctx, vmods, &mut scratch);
        loop {
            match run {
                Run::Done(a) => return (a, suspensions),
                Run::Suspended(s) => {
                    suspensions += 1;
                    let mut wait = s.wait;
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    assert!(wait.as_mut().poll(&mut cx).is_ready());
                    // Each resume may use another scratch.
                    let mut other = Scratch::default();
                    run = prog.resume(s.point, ctx, vmods, &mut other);
                }
            }
        }
    }

    fn program() -> Program {
        let mut prog = Program::default();
        let helper = prog.add_sub("helper", vec![mark("h1,"), wait(), mark("h2,")]);
        let recv = prog.add_sub(
            "vcl_recv",
            vec![
                mark("1,"),
                Stmt::If(
                    Box::new([
                        (
                            Expr::Const(Value::Bool(false)),
                            Box::new([mark("x,")]) as Block,
                        ),
                        (
                            Expr::Const(Value::Bool(true)),
                            Box::new([
                                mark("2,"),
                                Stmt::Call(helper),
                                mark("3,"),
                                wait(),
                                mark("4,"),
                                Stmt::CallDynamic(Expr::Const(Value::Sub(helper))),
                            ]),
                        ),
                    ]),
                    Box::new([mark("y,")]),
                ),
                Stmt::Set(
                    Target::header(crate::exec::HttpWhich::Req, "x"),
                    Expr::Call(GET, Box::new([])),
                ),
                mark("5"),
                Stmt::Return(ReturnAction::Hash),
            ],
        );
        prog.set_method(BuiltinSub::Recv, recv);
        prog
    }

    #[test]
    fn a_run_resumes_after_each_wait_in_nested_blocks_and_calls() {
        let prog = program();
        let vmods = Waiting::default();
        let mut ctx = MockContext::new("GET", "/");
        let (action, n) = drive(&prog, &mut ctx, &vmods, BuiltinSub::Recv);
        assert_eq!(action, Action::Hash);
        // helper's wait, the branch's wait, helper's again (dynamic call),
        // and GET once.
        assert_eq!(n, 4);
        assert_eq!(
            String::from_utf8_lossy(&ctx.synthetic),
            "1,2,h1,h2,3,4,h1,h2,5"
        );
        assert_eq!(ctx.http[0].get("x"), Some(&b"got"[..]));
        assert_eq!(*vmods.get_calls.lock().unwrap(), 2);
    }

    #[test]
    fn a_run_that_cannot_wait_fails_the_call() {
        let prog = program();
        let vmods = Waiting::default();
        let mut ctx = MockContext::new("GET", "/");
        let action = prog.run(BuiltinSub::Recv, &mut ctx, &vmods, &mut Scratch::default());
        assert_eq!(action, Action::Fail);
        assert_eq!(String::from_utf8_lossy(&ctx.synthetic), "1,2,h1,");
        let errors = ctx.logs_of(LogKind::Error);
        assert!(errors[0].contains("cannot wait for I/O here"), "{errors:?}");
    }

    #[test]
    fn a_subroutine_a_vmod_runs_cannot_wait() {
        let mut prog = Program::default();
        let waits = prog.add_sub("waits", vec![mark("a,"), wait(), mark("b,")]);
        let recv = prog.add_sub(
            "vcl_recv",
            vec![
                Stmt::Eval(Expr::Call(
                    RUN_SUB,
                    Box::new([Some(Expr::Const(Value::Sub(waits)))]),
                )),
                mark("after"),
            ],
        );
        prog.set_method(BuiltinSub::Recv, recv);
        let vmods = Waiting::default();
        let mut ctx = MockContext::new("GET", "/");
        let (action, n) = drive(&prog, &mut ctx, &vmods, BuiltinSub::Recv);
        assert_eq!((action, n), (Action::Fail, 0));
        assert_eq!(String::from_utf8_lossy(&ctx.synthetic), "a,");
    }

    #[test]
    fn a_point_resumed_against_another_program_fails_the_task() {
        let prog = program();
        let vmods = Waiting::default();
        let mut ctx = MockContext::new("GET", "/");
        let Run::Suspended(s) =
            prog.start(BuiltinSub::Recv, &mut ctx, &vmods, &mut Scratch::default())
        else {
            panic!("did not suspend");
        };
        let other = program();
        let run = other.resume(s.point, &mut ctx, &vmods, &mut Scratch::default());
        assert!(matches!(run, Run::Done(Action::Fail)), "{run:?}");
        assert!(ctx.logs_of(LogKind::Error)[0].contains("not in its program"));
    }
}
