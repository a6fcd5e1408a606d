//! Per-task memory budgets, as varnishd's workspaces.
//!
//! varnishd gives every client request (`workspace_client`), backend
//! fetch (`workspace_backend`), connection (`workspace_session`) and
//! worker (`workspace_thread`) a fixed arena, and everything a task adds
//! to its messages — the received head, headers varnishd or VCL set,
//! strings VCL builds (regsub results, printed numbers), vmod scratch —
//! is carved from it. When something does not fit the workspace is marked
//! overflowed and the task fails in a defined way (`LostHeader`, a
//! `VCL_Error`, a 500 at delivery, a failed fetch), counted in
//! `MAIN.ws_*_overflow`. Users size these parameters to bound per-request
//! memory and rely on those failures.
//!
//! Lacquer allocates per object instead of from arenas, so a [`Workspace`]
//! is an account: a budget fixed from the parameter when the task starts,
//! charged where varnishd would allocate, with varnishd 7.1's sizes (the
//! [`size`] table, measured on a 64-bit host with `vtc.workspace_free()`
//! and `-p debug=+workspace`). The charges that VCL drives are for bytes
//! Lacquer does keep for the task (headers it stores, strings it builds),
//! so the budget bounds what VCL can make a request grow, and the free
//! space VCL and vmods read is the one varnishd would report.

use lacquer_vcl::exec::{Workspace as WsOps, WsMark};
use lacquer_vsl::{Tag, VslBuf};

use crate::pid;
use crate::runtime::params::ParamSet;

/// varnishd 7.1's sizes (64-bit), in bytes: what comes out of each
/// workspace before VCL runs and what delivery and fetching add. Every
/// allocation is rounded up to 8.
pub mod size {
    /// `workspace_client` holds `struct req` and its three HTTP objects'
    /// fixed parts besides the workspace proper…
    pub const REQ_FIXED: u64 = 992;
    /// …and `workspace_backend` the `struct busyobj` and its three.
    pub const BO_FIXED: u64 = 712;
    /// Each HTTP object has `http_max_hdr` header slots of this size
    /// (a text pointer pair and a flag byte)…
    pub const HDR_SLOT: u64 = 17;
    /// …and a task has this many HTTP objects (req, req0, resp; bereq0,
    /// bereq, beresp).
    pub const HTTP_OBJECTS: u64 = 3;
    /// The header slots of an HTTP object that its start line takes.
    pub const START_LINE_SLOTS: usize = 5;
    /// A fetch's backend connection state (`struct http_conn`).
    pub const HTC: u64 = 104;
    /// The entry of the processor that reads a response body.
    pub const VFP_ENTRY: u64 = 64;
    /// The entry of each processor stacked on a response (`VDP_Push`:
    /// `gunzip`, `range`, the HTTP/1 writer, an include's ESI stage).
    pub const VDP_ENTRY: u64 = 56;
    /// The worker keeps this much of `workspace_thread` for itself.
    pub const THREAD_RESERVED: u64 = 8;
    /// What a connection uses of `workspace_session` before any PROXY
    /// header.
    pub const SESS_BASE: u64 = 280;
    /// A socket address (`struct suckaddr`).
    pub const SUCKADDR: u64 = 32;
    /// The header of the kept PROXY TLV copy.
    pub const TLV_HEAD: u64 = 8;
    /// A pointer-sized session attribute (the HTTP/1 protocol's private
    /// pointer, the TLV pointer).
    pub const POINTER: u64 = 8;
}

/// A header line as varnishd stores it: `name: value` and a NUL.
pub fn header_len(name: &[u8], value: &[u8]) -> u64 {
    (name.len() + 2 + value.len() + 1) as u64
}

/// One workspace's account.
#[derive(Clone, Debug)]
pub struct Workspace {
    /// varnishd's name for it in `Error` and debug records (`req`, `bo`,
    /// `ses`, `wrk`).
    id: &'static str,
    size: u64,
    used: u64,
    overflowed: bool,
    /// Header lines each HTTP object of the task holds (`http_max_hdr`
    /// less the slots of the start line).
    header_slots: usize,
    /// With `-p debug=+workspace`: the records of each operation, waiting
    /// to be written to the task's log ([`Workspace::flush_trace`]).
    trace: Option<Vec<String>>,
}

impl Workspace {
    fn new(id: &'static str, size: u64, params: Option<&ParamSet>) -> Workspace {
        let trace = params
            .is_some_and(|p| p.bit(pid!("debug"), "workspace"))
            .then(Vec::new);
        let header_slots = params.map_or(0, |p| {
            (p.uint(pid!("http_max_hdr")) as usize).saturating_sub(size::START_LINE_SLOTS)
        });
        Workspace {
            id,
            size: size / 8 * 8,
            used: 0,
            overflowed: false,
            header_slots,
            trace,
        }
    }

    /// How many header lines an HTTP object of this task holds.
    pub fn header_slots(&self) -> usize {
        self.header_slots
    }

    /// The workspace of a client request, sized as varnishd sizes it from
    /// `workspace_client`, `vsl_buffer` and `http_max_hdr`.
    pub fn client(params: &ParamSet) -> Workspace {
        let total = params.bytes(pid!("workspace_client"));
        Workspace::new("req", carve(params, total, size::REQ_FIXED), Some(params))
    }

    /// The workspace of a backend fetch (`workspace_backend`).
    pub fn backend(params: &ParamSet) -> Workspace {
        let total = params.bytes(pid!("workspace_backend"));
        Workspace::new("bo", carve(params, total, size::BO_FIXED), Some(params))
    }

    /// A worker's scratch workspace (`workspace_thread`).
    pub fn thread(params: &ParamSet) -> Workspace {
        let total = params.bytes(pid!("workspace_thread"));
        Workspace::new(
            "wrk",
            total.saturating_sub(size::THREAD_RESERVED),
            Some(params),
        )
    }

    /// A connection's workspace (`workspace_session`), with what the
    /// session itself takes.
    pub fn session(total: u64) -> Workspace {
        let mut ws = Workspace::new("ses", total, None);
        ws.used = size::SESS_BASE.min(ws.size);
        ws
    }

    /// varnishd's name for the workspace (`req`, `bo`, `ses`, `wrk`).
    pub fn id(&self) -> &'static str {
        self.id
    }

    /// Takes `n` bytes, or marks the workspace overflowed.
    pub fn take(&mut self, n: u64) -> bool {
        let n = n.div_ceil(8) * 8;
        let ok = n <= self.size - self.used;
        if ok {
            self.used += n;
        } else {
            self.overflowed = true;
        }
        self.trace(|w| {
            if ok {
                format!("WS_Alloc({}, {n}) = {}", w.id, w.used - n)
            } else {
                format!("WS_Alloc({}, {n}) = overflowed", w.id)
            }
        });
        ok
    }

    /// Clears the overflow mark and goes back to `mark` (varnishd's
    /// `WS_Rollback`); `true` if the workspace had overflowed, for the
    /// `ws_*_overflow` counters.
    pub fn rollback(&mut self, mark: WsMark) -> bool {
        let was = self.overflowed;
        self.overflowed = false;
        if let WsMark(Some(at)) = mark {
            self.used = at.min(self.used);
        }
        self.trace(|w| format!("WS_Rollback({}, {})", w.id, w.used));
        was
    }

    /// Writes the pending `-p debug=+workspace` records to `vsl`.
    pub fn flush_trace(&mut self, vsl: &mut VslBuf) {
        if let Some(t) = self.trace.as_mut() {
            for line in t.drain(..) {
                vsl.log_str(Tag::Debug, &line);
            }
        }
    }

    fn trace(&mut self, line: impl FnOnce(&Workspace) -> String) {
        if self.trace.is_some() {
            let l = line(self);
            if let Some(t) = self.trace.as_mut() {
                t.push(l);
            }
        }
    }
}

/// What is left of a task's workspace parameter (`total`) once its fixed
/// structures, header slots and log buffer are carved out, as varnishd
/// lays it out. varnishd fails an assertion when `vsl_buffer` does not fit
/// beside the rest; Lacquer's log buffer is separate memory, so then only
/// the other parts are taken out.
fn carve(params: &ParamSet, total: u64, fixed: u64) -> u64 {
    let slots = params.uint(pid!("http_max_hdr"));
    let structs = fixed + size::HTTP_OBJECTS * size::HDR_SLOT * slots;
    let vsl = params.bytes(pid!("vsl_buffer"));
    total
        .checked_sub(structs + vsl)
        .filter(|&n| n > 0)
        .unwrap_or_else(|| total.saturating_sub(structs))
}

impl WsOps for Workspace {
    fn free(&self) -> u64 {
        self.size - self.used
    }

    fn alloc(&mut self, n: u64) -> bool {
        self.take(n)
    }

    fn snapshot(&mut self) -> WsMark {
        let mark = WsMark((!self.overflowed).then_some(self.used));
        self.trace(|w| match mark.0 {
            Some(at) => format!("WS_Snapshot({}) = {at}", w.id),
            None => format!("WS_Snapshot({}) = overflowed", w.id),
        });
        mark
    }

    fn reset(&mut self, mark: WsMark) {
        if let WsMark(Some(at)) = mark {
            self.used = at.min(self.used);
        }
        self.trace(|w| match mark.0 {
            Some(at) => format!("WS_Reset({}, {at})", w.id),
            None => format!("WS_Reset({}, overflowed)", w.id),
        });
    }

    fn mark_overflow(&mut self) {
        self.overflowed = true;
    }

    fn overflowed(&self) -> bool {
        self.overflowed
    }
}

#[cfg(test)]
mod tests {
    use super::{Workspace, size};
    use crate::runtime::params::ParamSet;
    use lacquer_vcl::exec::{Workspace as _, WsMark};

    /// The figures varnishd 7.1 reports through vtc.workspace_free() with
    /// default parameters, before the request head is charged.
    #[test]
    fn sizes_as_varnishd() {
        let p = ParamSet::default();
        assert_eq!(Workspace::client(&p).free(), 77664);
        assert_eq!(Workspace::backend(&p).free(), 77944);
        assert_eq!(Workspace::thread(&p).free(), 2040);
        let mut s = ParamSet::default();
        s.set("vsl_buffer", "4k").unwrap();
        s.set("http_max_hdr", "32").unwrap();
        assert_eq!(Workspace::client(&s).free(), 77664 + 12288 + 1632);
        // Too small for varnishd's log buffer: only the structures go.
        let mut small = ParamSet::default();
        small.set("workspace_client", "12000").unwrap();
        assert_eq!(Workspace::client(&small).free(), 12000 - 992 - 3264);
    }

    /// The figures varnishd 7.1 reports through vtc.workspace_free(session)
    /// with workspace_session 768: a plain connection, a PROXY v1 one and a
    /// PROXY v2 one carrying 89 bytes of TLVs.
    #[test]
    fn session_workspace_as_varnishd() {
        use size::{POINTER, SUCKADDR, TLV_HEAD};
        let mut plain = Workspace::session(768);
        assert!(plain.take(POINTER));
        assert_eq!(plain.free(), 480);
        let mut v1 = Workspace::session(768);
        for n in [SUCKADDR, SUCKADDR, 8, 5, POINTER] {
            assert!(v1.take(n));
        }
        assert_eq!(v1.free(), 400);
        let mut v2 = Workspace::session(768);
        for n in [SUCKADDR, SUCKADDR, 14, 6, TLV_HEAD + 89, POINTER, POINTER] {
            assert!(v2.take(n));
        }
        assert_eq!(v2.free(), 280);
        // o00006: 480 bytes hold that header but not the protocol's pointer.
        let mut tight = Workspace::session(480);
        for n in [SUCKADDR, SUCKADDR, 14, 6, TLV_HEAD + 89, POINTER] {
            assert!(tight.take(n));
        }
        assert!(!tight.take(POINTER));
        assert!(tight.overflowed());
    }

    #[test]
    fn overflow_snapshot_and_rollback() {
        let mut ws = Workspace::session(1024);
        let start = ws.snapshot();
        assert!(ws.take(100));
        assert_eq!(ws.free(), 1024 - 280 - 104);
        assert!(!ws.take(10_000));
        assert!(ws.overflowed());
        // Still usable, still marked.
        assert!(ws.take(8));
        assert_eq!(ws.snapshot(), WsMark(None));
        ws.reset(WsMark(None));
        assert!(ws.overflowed());
        assert!(ws.rollback(start));
        assert!(!ws.overflowed());
        assert_eq!(ws.free(), 1024 - 280);
    }
}
