//! What a tenant sees and changes during one hook call, held in the
//! instance's store: copies of the HTTP messages of the current VCL
//! subroutine (the caller fills them before the call and writes back the
//! changed ones after it) and the effects that are not message edits
//! (decision, backend, hash data, TTL, bans, log lines, results).
//!
//! Host calls work on these copies only, so the sandbox needs no access
//! to the server's task while guest code runs, and a call that traps
//! leaves the server's request untouched.

use std::sync::Arc;

use wasmtime::{Memory, StoreLimits};

use crate::Program;

/// Which HTTP message a host call addresses (the `which` argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Req = 0,
    Bereq = 1,
    Beresp = 2,
    Resp = 3,
}

impl Which {
    pub const ALL: [Which; 4] = [Which::Req, Which::Bereq, Which::Beresp, Which::Resp];

    pub(crate) fn from_i32(v: i32) -> Option<Which> {
        Which::ALL.get(usize::try_from(v).ok()?).copied()
    }
}

/// One HTTP message as the tenant sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Message {
    /// Headers in order, names as written.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// URL (requests) — `field 0`.
    pub url: Vec<u8>,
    /// Method (requests) — `field 1`.
    pub method: Vec<u8>,
    /// Protocol — `field 2`.
    pub proto: Vec<u8>,
    /// Reason phrase (responses) — `field 3`.
    pub reason: Vec<u8>,
    /// Status (responses).
    pub status: u16,
    /// Whether headers changed during the call.
    pub headers_changed: bool,
    /// Whether url, method, proto, reason or status changed.
    pub fields_changed: bool,
}

impl Message {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    pub(crate) fn field_mut(&mut self, field: i32) -> Option<&mut Vec<u8>> {
        Some(match field {
            0 => &mut self.url,
            1 => &mut self.method,
            2 => &mut self.proto,
            3 => &mut self.reason,
            _ => return None,
        })
    }
}

/// A response built in the sandbox.
#[derive(Clone, Debug, PartialEq)]
pub struct Forged {
    pub cacheable: bool,
    pub status: u16,
    pub content_type: Vec<u8>,
    pub body: Vec<u8>,
}

/// What the tenant asked VCL to do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Synth { status: u16, reason: Vec<u8> },
    Pass,
    Hash,
    Pipe,
    Purge,
    Restart,
    Forge(Forged),
}

impl Decision {
    /// The name `want_result()` returns: VCL's return action; a forged
    /// response is delivered through `synth`, a cacheable one through the
    /// VM backend (`"backend"`, as libvmod-riscv's `forge(Cached, ...)`).
    pub fn name(&self) -> &'static str {
        match self {
            Decision::Forge(f) if f.cacheable => "backend",
            Decision::Synth { .. } | Decision::Forge(_) => "synth",
            Decision::Pass => "pass",
            Decision::Hash => "hash",
            Decision::Pipe => "pipe",
            Decision::Purge => "purge",
            Decision::Restart => "restart",
        }
    }

    /// The status `want_status()` returns.
    pub fn status(&self) -> u16 {
        match self {
            Decision::Synth { status, .. } => *status,
            Decision::Forge(f) => f.status,
            _ => 0,
        }
    }
}

/// Effects of hook calls other than message edits, for the caller to
/// apply (and clear) after each call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effects {
    pub backend: Option<String>,
    pub hash_data: Vec<Vec<u8>>,
    pub ttl: Option<f64>,
    pub uncacheable: Option<bool>,
    pub bans: Vec<Vec<u8>>,
    pub logs: Vec<Vec<u8>>,
}

/// The store data of one instance.
pub struct Task {
    pub(crate) memory: Option<Memory>,
    pub(crate) limiter: StoreLimits,
    pub(crate) program: Option<Arc<Program>>,
    /// Patterns compiled while `main` runs (moved into the program).
    pub(crate) boot_regexes: Vec<regex::bytes::Regex>,
    pub(crate) booting: bool,
    pub(crate) max_regex: usize,
    /// The messages of the current subroutine; `None` where it has none.
    pub msgs: [Option<Message>; 4],
    pub effects: Effects,
    /// The decision of the last hook that made one (kept across calls).
    pub decision: Option<Decision>,
    /// The argument of `call(function, arg)`.
    pub arg: Vec<u8>,
    /// Values the tenant published with `result(i, ...)`.
    pub results: Vec<Vec<u8>>,
}

/// How many result slots a tenant may fill.
pub const RESULTS: usize = 8;

impl Task {
    pub(crate) fn new(limiter: StoreLimits, program: Option<Arc<Program>>) -> Task {
        Task {
            memory: None,
            limiter,
            program,
            boot_regexes: Vec::new(),
            booting: false,
            max_regex: 0,
            msgs: Default::default(),
            effects: Effects::default(),
            decision: None,
            arg: Vec::new(),
            results: Vec::new(),
        }
    }

    /// Forgets everything one request left (messages, effects,
    /// decision, argument, results), for the next request of a reused
    /// instance (`reuse`).
    pub(crate) fn clear_request(&mut self) {
        self.msgs = Default::default();
        self.effects = Effects::default();
        self.decision = None;
        self.arg.clear();
        self.results.clear();
    }

    /// The message `w`, if the current subroutine has it.
    pub fn msg(&self, w: Which) -> Option<&Message> {
        self.msgs[w as usize].as_ref()
    }

    /// Sets (or clears) the copy of message `w` for the next call.
    pub fn set_msg(&mut self, w: Which, m: Option<Message>) {
        self.msgs[w as usize] = m;
    }
}
