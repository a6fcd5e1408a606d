//! The daemon's `MAIN.*` counters. They live in the shared-memory counter
//! segment (`lacquer_vsl::vsc`), so other processes (`lacquer stat`, the
//! vtc runner) read them directly; each update on the hot path is one
//! relaxed atomic add on the mapped counter.

pub use lacquer_vsl::vsc::tables::Main;
use std::sync::atomic::{AtomicUsize, Ordering};

use lacquer_vsl::vsc::{Section, Vsc, VscError};

/// The `MAIN` section.
#[derive(Debug)]
pub struct Counters {
    main: Section,
}

impl Counters {
    /// Adds the `MAIN` section to a counters file.
    pub fn new(vsc: &Vsc) -> Result<Counters, VscError> {
        Ok(Counters {
            main: vsc.add_section(&lacquer_vsl::vsc::tables::MAIN, "MAIN")?,
        })
    }

    #[inline]
    pub fn inc(&self, c: Main) {
        self.main.inc(c);
    }

    #[inline]
    pub fn add(&self, c: Main, n: u64) {
        self.main.add(c, n);
    }

    /// Decrements a gauge.
    #[inline]
    pub fn sub(&self, c: Main, n: u64) {
        self.main.sub(c, n);
    }

    #[inline]
    pub fn set(&self, c: Main, v: u64) {
        self.main.set(c, v);
    }

    pub fn get(&self, c: Main) -> u64 {
        self.main.get(c)
    }
}

/// Live client sessions, for graceful shutdown and `MEMPOOL.sess*.live`.
pub(crate) static SESSIONS: AtomicUsize = AtomicUsize::new(0);

/// Client sessions open now.
pub(crate) fn live_sessions() -> u64 {
    SESSIONS.load(Ordering::Relaxed) as u64
}

/// Counts one client session in [`SESSIONS`] while it lives.
pub(crate) struct SessGuard;

impl SessGuard {
    pub(crate) fn new() -> Self {
        SESSIONS.fetch_add(1, Ordering::AcqRel);
        SessGuard
    }
}

impl Drop for SessGuard {
    fn drop(&mut self) {
        SESSIONS.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_lands_in_shared_memory() {
        let dir = std::env::temp_dir().join(format!("lacquer-ctr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let vsc = Vsc::create(&lacquer_vsl::vsc::vsc_path(&dir), &Default::default()).unwrap();
        let c = Counters::new(&vsc).unwrap();
        c.inc(Main::cache_hit);
        c.add(Main::s_resp_bodybytes, 10);
        assert_eq!(c.get(Main::cache_hit), 1);
        let snap = vsc.snapshot().unwrap();
        assert!(
            snap.iter()
                .any(|v| v.name == "MAIN.s_resp_bodybytes" && v.value == 10)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
