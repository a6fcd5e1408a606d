//! What varnishd's manager knows of its cache process: how often it was
//! started and how often it panicked (`MGT.*` counters), the last panic
//! (`panic.show`, `panic.clear`), and the panic itself.
//!
//! Lacquer runs the cache in the daemon's own process, so a panic is
//! emulated as varnishd's child dying with `auto_restart` off: the cache
//! stops serving and loses its objects, the panic is kept for
//! `panic.show`, and the daemon's exit status later says a panic happened
//! (`0x40`). It is reached only through the test vmods (`vtc.panic()`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::state::Shared;

/// The management side's state about the cache process.
#[derive(Debug, Default)]
pub struct MgtState {
    pub child_start: AtomicU64,
    pub child_panic: AtomicU64,
    /// The last panic: when (seconds since the epoch) and why.
    last: Mutex<Option<(f64, String)>>,
    /// Sticky: the daemon exits with `0x40` once a panic happened.
    ever_panicked: AtomicBool,
}

impl MgtState {
    /// The text `panic.show` prints, if a panic is on record.
    pub fn show(&self) -> Option<String> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref().map(|(t, why)| {
            format!(
                "Panic at: {}\n{why}\n",
                crate::rfc2616::format_http_date(*t)
            )
        })
    }

    /// Forgets the last panic (`panic.clear`); `zero` also resets the
    /// panic counter, and is fine without a panic on record. False when
    /// there was nothing to do.
    pub fn clear(&self, zero: bool) -> bool {
        let had = self
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .is_some();
        if zero {
            self.child_panic.store(0, Ordering::Relaxed);
        }
        had || zero
    }

    /// The exit status bits a panic leaves (`0x40`), else 0.
    pub fn exit_bits(&self) -> u8 {
        if self.ever_panicked.load(Ordering::Relaxed) {
            0x40
        } else {
            0
        }
    }
}

/// The cache process panics: it stops serving, its objects are gone, and
/// the panic is on record until cleared.
pub fn panic(sh: &Shared, why: &str) {
    let m = &sh.mgt;
    *m.last.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((crate::rfc2616::now(), format!("Panic from VCL:\n  {why}")));
    m.child_panic.fetch_add(1, Ordering::Relaxed);
    m.ever_panicked.store(true, Ordering::Relaxed);
    sh.running.store(false, Ordering::Release);
    sh.cache.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_and_clear() {
        let m = MgtState::default();
        assert!(m.show().is_none());
        assert!(!m.clear(false));
        assert!(m.clear(true));
        *m.last.lock().unwrap() = Some((0.0, "boom".into()));
        m.child_panic.store(1, Ordering::Relaxed);
        assert!(m.show().unwrap().contains("boom"));
        assert!(m.clear(true));
        assert_eq!(m.child_panic.load(Ordering::Relaxed), 0);
        assert!(m.show().is_none());
    }
}
