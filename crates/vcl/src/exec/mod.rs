//! The VCL executor: runs a compiled program for one task (a client request
//! or a backend fetch) against a host [`Context`] and reports the action the
//! subroutine chose.
//!
//! Layout: [`value`] holds runtime values and Varnish's string conversions,
//! [`context`] the traits the server and the vmods implement, [`code`] the
//! executable program form, [`lower`] its construction from the compiler's
//! IR, [`interp`] the interpreter, [`regex`] and [`acl`] the matching
//! engines, [`mock`] a self-contained context for tests and benchmarks.
//!
//! The server compiles with [`crate::compile::compile_str`], converts the
//! result once with [`code::Program::from_ir`], and calls
//! [`code::Program::start`] for each method of each task (and
//! [`code::Program::resume`] after a vmod suspended it to wait for I/O,
//! see [`VclRuntime::suspend`]); [`code::Program::run`] is the form for
//! runs that cannot wait (`vcl_init`, `vcl_fini`).
//!
//! Running a method:
//!
//! ```
//! use lacquer_vcl::exec::{code::*, mock::MockContext, Action, NoVmods, Scratch};
//! use lacquer_vcl::subs::BuiltinSub;
//!
//! let mut prog = Program::default();
//! let recv = prog.add_sub("vcl_recv", vec![Stmt::Return(ReturnAction::Hash)]);
//! prog.set_method(BuiltinSub::Recv, recv);
//! let mut ctx = MockContext::new("GET", "/");
//! let action = prog.run(BuiltinSub::Recv, &mut ctx, &NoVmods, &mut Scratch::default());
//! assert_eq!(action, Action::Hash);
//! ```

use std::sync::Arc;

use bytes::Bytes;

pub mod acl;
pub mod code;
pub mod context;
pub mod interp;
pub mod lower;
pub mod mock;
pub mod privs;
pub mod regex;
pub mod value;

pub use context::{
    Context, FuncRef, HeaderName, HttpWhich, LogKind, LookupHook, LookupVerdict, NoVmods, Resume,
    TcpInfo, TcpOp, VclRuntime, VmodArg, Vmods, Wait, Workspace, WsKind, WsMark,
};
pub use interp::{ResumePoint, Run, Scratch, Suspended};
pub use value::{Backend, Strands, Value};

/// The outcome of running a built-in subroutine: the `return (...)` action
/// with its arguments evaluated.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Abandon,
    Deliver,
    /// `error(status, reason)` from a backend subroutine; status already
    /// checked as `VRT_synth` does (a bad one fails the subroutine instead),
    /// `None` reason = default phrase.
    Error {
        status: u16,
        reason: Option<Bytes>,
    },
    /// `return (fail)` or a runtime error (already logged as `VCL_Error`).
    Fail,
    Fetch,
    Hash,
    Lookup,
    /// `ok` (`vcl_init`/`vcl_fini`), also the result of falling off the end
    /// of a method without `return`.
    Ok,
    /// `pass`, with the hit-for-pass TTL of `pass(DURATION)`.
    Pass {
        ttl: Option<f64>,
    },
    Pipe,
    Purge,
    Restart,
    Retry,
    /// `synth(status, reason)`, status clamped like `VRT_synth`.
    Synth {
        status: u16,
        reason: Option<Bytes>,
    },
    /// `vcl(label)`: switch to the VCL behind this label.
    Vcl(Arc<str>),
}

impl Action {
    /// The action's keyword kind, for `VCL_return` logging and legality
    /// checks against [`crate::subs::BuiltinSub::actions`].
    pub fn kind(&self) -> crate::subs::Action {
        use crate::subs::Action as K;
        match self {
            Action::Abandon => K::Abandon,
            Action::Deliver => K::Deliver,
            Action::Error { .. } => K::Error,
            Action::Fail => K::Fail,
            Action::Fetch => K::Fetch,
            Action::Hash => K::Hash,
            Action::Lookup => K::Lookup,
            Action::Ok => K::Ok,
            Action::Pass { .. } => K::Pass,
            Action::Pipe => K::Pipe,
            Action::Purge => K::Purge,
            Action::Restart => K::Restart,
            Action::Retry => K::Retry,
            Action::Synth { .. } => K::Synth,
            Action::Vcl(_) => K::Vcl,
        }
    }
}
