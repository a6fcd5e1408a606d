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

    /// Makes this message a copy of another one given as parts, reusing
    /// this one's buffers (a reused instance's messages then cost no
    /// allocation per request): every field is overwritten, so nothing
    /// of what the message held before remains.
    pub fn refill<'a>(
        &mut self,
        headers: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        fields: [&[u8]; 4],
        status: u16,
    ) {
        let mut n = 0;
        for (name, value) in headers {
            match self.headers.get_mut(n) {
                Some((nb, vb)) => {
                    nb.clear();
                    nb.extend_from_slice(name);
                    vb.clear();
                    vb.extend_from_slice(value);
                }
                None => self.headers.push((name.to_vec(), value.to_vec())),
            }
            n += 1;
        }
        self.headers.truncate(n);
        for (f, v) in [
            &mut self.url,
            &mut self.method,
            &mut self.proto,
            &mut self.reason,
        ]
        .into_iter()
        .zip(fields)
        {
            f.clear();
            f.extend_from_slice(v);
        }
        self.status = status;
        self.headers_changed = false;
        self.fields_changed = false;
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
    /// Buffers of messages of earlier calls, for [`Task::spare_msg`]:
    /// host memory the guest never sees, every byte overwritten before
    /// a message is handed to a call again.
    spare: Vec<Message>,
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
            spare: Vec::new(),
        }
    }

    /// Forgets everything one request left (messages, effects,
    /// decision, argument, results), for the next request of a reused
    /// instance (`reuse`).
    pub(crate) fn clear_request(&mut self) {
        self.release_msgs();
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

    /// A message whose buffers an earlier call used (or a new one), to
    /// [`Message::refill`] and give to [`Task::set_msg`]: a reused
    /// instance's messages then cost no allocation per request.
    pub fn spare_msg(&mut self) -> Message {
        self.spare.pop().unwrap_or_default()
    }

    /// Keeps `m`'s buffers for [`Task::spare_msg`].
    pub fn recycle(&mut self, m: Message) {
        if self.spare.len() < Which::ALL.len() {
            self.spare.push(m);
        }
    }

    /// Clears every message, keeping their buffers for [`Task::spare_msg`].
    pub fn release_msgs(&mut self) {
        for i in 0..self.msgs.len() {
            if let Some(m) = self.msgs[i].take() {
                self.recycle(m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refilled_message_holds_nothing_of_the_one_its_buffers_held() {
        // An earlier request's message, longer in every part, changed by
        // its tenant.
        let mut m = Message::default();
        m.refill(
            [
                (&b"Cookie"[..], &b"secret=1234567890"[..]),
                (b"Authorization", b"Bearer abcdefghijklmnop"),
                (b"X-Other", b"tenant-a"),
            ],
            [b"/private/account", b"DELETE", b"HTTP/1.1", b"Forbidden!!"],
            403,
        );
        m.headers.push((b"X-Tenant-A".to_vec(), b"added".to_vec()));
        m.headers_changed = true;
        m.fields_changed = true;
        // Recycled through a task, then filled for the next request.
        let mut t = Task::new(StoreLimits::default(), None);
        t.set_msg(Which::Req, Some(m));
        t.release_msgs();
        assert!(t.msg(Which::Req).is_none());
        let mut next = t.spare_msg();
        next.refill([(&b"Host"[..], &b"b"[..])], [b"/", b"GET", b"", b""], 0);
        let fresh = {
            let mut f = Message::default();
            f.refill([(&b"Host"[..], &b"b"[..])], [b"/", b"GET", b"", b""], 0);
            f
        };
        // Every field, the change flags included.
        assert_eq!(next, fresh);
        // With more lines than before, and with none.
        next.refill(
            [
                (&b"A"[..], &b"1"[..]),
                (b"B", b"2"),
                (b"C", b"3"),
                (b"D", b"4"),
                (b"E", b"5"),
            ],
            [b"/x", b"PUT", b"HTTP/1.0", b""],
            0,
        );
        assert_eq!(next.headers.len(), 5);
        assert_eq!(next.headers[4], (b"E".to_vec(), b"5".to_vec()));
        next.refill([], [b"", b"", b"", b""], 200);
        assert_eq!(
            next,
            Message {
                status: 200,
                ..Message::default()
            }
        );
    }
}
