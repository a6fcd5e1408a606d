//! Transaction ids (vxids) for sessions, requests and backend fetches.
//!
//! One counter serves all three kinds, as in varnishd with its default
//! cache size of one, so that ids in logs and `X-Varnish` headers follow
//! the order in which transactions begin (a session 1, its first request
//! 2, that request's fetch 3, …; varnishtest moves the start to 1000 with
//! `debug.xid`). Ids wrap below 2^30, the
//! range the log format reserves for them, and never take the value 0.

use std::sync::atomic::{AtomicU32, Ordering};

const LIMIT: u32 = 1 << 30;

/// The vxid allocator.
#[derive(Debug)]
pub struct VxidAlloc {
    next: AtomicU32,
}

impl Default for VxidAlloc {
    fn default() -> Self {
        VxidAlloc {
            next: AtomicU32::new(1),
        }
    }
}

impl VxidAlloc {
    /// A fresh id.
    pub fn next(&self) -> u32 {
        loop {
            let v = self.next.fetch_add(1, Ordering::Relaxed) % LIMIT;
            if v != 0 {
                return v;
            }
        }
    }

    /// The id the next call will return (`debug.xid`).
    pub fn peek(&self) -> u32 {
        self.next.load(Ordering::Relaxed) % LIMIT
    }

    /// Sets the next id (`debug.xid N`).
    pub fn set(&self, v: u32) {
        self.next.store(v % LIMIT, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_and_wrap() {
        let a = VxidAlloc::default();
        assert_eq!(a.next(), 1);
        assert_eq!(a.next(), 2);
        a.set(LIMIT - 1);
        assert_eq!(a.next(), LIMIT - 1);
        assert_eq!(a.next(), 1, "0 is skipped after the wrap");
        assert_eq!(a.peek(), 2);
    }
}
