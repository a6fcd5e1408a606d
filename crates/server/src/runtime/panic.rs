//! What varnishd's manager knows of its cache process: how often it was
//! started and how often it panicked (`MGT.*` counters), the last panic
//! (`panic.show`, `panic.clear`), and the panic itself.
//!
//! Lacquer runs the cache in the daemon's own process, so a panic is
//! emulated as varnishd's child dying with `auto_restart` off: the cache
//! stops serving and loses its objects, the panic is kept for
//! `panic.show`, and the daemon's exit status later says a panic happened
//! (`0x40`). It is reached only through the test vmods (`vtc.panic()`,
//! and vmod misuse varnishd asserts against, such as a backend created
//! for a cold VCL) and the test-only CLI command `debug.panic.worker`.
//!
//! As varnishd's manager, it publishes two segments in its shared-memory
//! directory (`_.vsm_mgt`) while the cache runs, and withdraws them when
//! it stops: `Params`, the parameters the cache started with (`name
//! value` lines, as `param.show` gives them), and `Panic`, empty until a
//! panic writes its text there.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use lacquer_vsl::vsm::{SegmentId, VsmDir};

use crate::runtime::state::Shared;

/// The management side's state about the cache process.
#[derive(Debug, Default)]
pub struct MgtState {
    pub child_start: AtomicU64,
    pub child_panic: AtomicU64,
    /// The last panic: when (seconds since the epoch) and why.
    last: Mutex<Option<(f64, String)>>,
    /// Sticky: the daemon exits with `0x40` once a panic happened.
    ever_panicked: AtomicBool,
    /// The manager's shared-memory directory and, while the cache runs,
    /// its `Params` and `Panic` segments.
    vsm: Mutex<Option<MgtVsm>>,
}

/// Size of the `Panic` segment, varnishd's panic buffer.
const PANIC_SPACE: usize = 64 * 1024;

#[derive(Debug)]
struct MgtVsm {
    dir: VsmDir,
    /// `Params` and `Panic`, while the cache runs.
    child: Option<(SegmentId, SegmentId)>,
}

impl MgtState {
    /// The text `panic.show` prints, if a panic is on record.
    pub fn show(&self) -> Option<String> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref().map(|(t, why)| {
            format!(
                "Panic at: {}\n{why}\n",
                lacquer_http::date::format_http_date(*t)
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

    /// Hands over the manager's shared-memory directory.
    pub fn set_vsm(&self, dir: VsmDir) {
        *self.vsm.lock().unwrap_or_else(|e| e.into_inner()) = Some(MgtVsm { dir, child: None });
    }

    /// The cache starts: publishes its `Params` (`params`, the parameters
    /// it runs with) and an empty `Panic` segment.
    pub fn child_started(&self, params: &str) -> Result<(), String> {
        let mut vsm = self.vsm.lock().unwrap_or_else(|e| e.into_inner());
        let Some(v) = vsm.as_mut() else {
            return Ok(());
        };
        if v.child.is_some() {
            return Ok(());
        }
        let path = v.dir.path().display().to_string();
        let failed =
            |e: std::io::Error| format!("Cannot publish the cache's segments in {path}: {e}");
        let p = v
            .dir
            .publish("Params", "", params.as_bytes())
            .map_err(failed)?;
        let panic = v
            .dir
            .publish("Panic", "", &[0; PANIC_SPACE])
            .map_err(failed)?;
        v.child = Some((p, panic));
        Ok(())
    }

    /// The cache writes its panic into the `Panic` segment, as varnishd's
    /// child does before it dies.
    fn write_panic(&self, text: &str) -> Result<(), String> {
        let vsm = self.vsm.lock().unwrap_or_else(|e| e.into_inner());
        let Some((v, (_, panic))) = vsm.as_ref().and_then(|v| Some((v, v.child.as_ref()?))) else {
            return Ok(());
        };
        v.dir
            .write(panic, text.as_bytes())
            .map_err(|e| format!("Cannot write the panic to {}: {e}", v.dir.path().display()))
    }

    /// The cache stopped: its `Params` and `Panic` segments are withdrawn.
    pub fn child_stopped(&self) -> Result<(), String> {
        let mut vsm = self.vsm.lock().unwrap_or_else(|e| e.into_inner());
        let Some(v) = vsm.as_mut() else {
            return Ok(());
        };
        if let Some((p, panic)) = v.child.take() {
            for id in [p, panic] {
                v.dir.withdraw(&id).map_err(|e| {
                    format!(
                        "Cannot withdraw a segment from {}: {e}",
                        v.dir.path().display()
                    )
                })?;
            }
        }
        Ok(())
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

/// The cache process panics from VCL (`vtc.panic()`): it stops serving,
/// its objects are gone, and the panic is on record until cleared.
pub fn panic(sh: &Shared, why: &str) {
    die(sh, format!("Panic from VCL:\n  {why}"));
}

/// The cache process panics because the CLI asked (`debug.panic.worker`),
/// with the assertion text varnishd's child dies with.
pub fn asked_for(sh: &Shared) {
    die(
        sh,
        "Assert error in ccf_panic(), cache/cache_panic.c line 0:\n  \
         Condition((strcmp(\"\", \"You asked for it\")) == 0) not true."
            .to_string(),
    );
}

/// The cache process panics on a broken rule (varnishd's `WRONG()`): a
/// vmod asked for something the cache must never do, `why`, in `place`.
pub fn wrong_turn(sh: &Shared, place: &str, why: &str) {
    die(sh, format!("Wrong turn in {place}:\n{why}"));
}

/// The cache process dies with `text` as its panic message.
fn die(sh: &Shared, text: String) {
    let m = &sh.mgt;
    if let Err(e) = m.write_panic(&text) {
        eprintln!("Error: {e}");
    }
    *m.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((lacquer_http::date::now(), text));
    m.child_panic.fetch_add(1, Ordering::Relaxed);
    m.ever_panicked.store(true, Ordering::Relaxed);
    sh.set_running(false);
    sh.cache.clear();
    if let Err(e) = m.child_stopped() {
        eprintln!("Error: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_segments_come_and_go_with_the_cache() {
        use lacquer_vsl::vsm::{INDEX, live_segment, read_segment};
        let dir = std::env::temp_dir().join(format!("lq-mgt-vsm-{}", std::process::id()));
        let m = MgtState::default();
        // Without a directory there is nothing to publish.
        m.child_started("x 1\n").unwrap();
        m.set_vsm(VsmDir::create(&dir).unwrap());
        m.child_started("x 1\n").unwrap();
        m.child_started("x 2\n").unwrap();
        assert_eq!(
            read_segment(&dir, "Params", "").as_deref(),
            Some(&b"x 1\n"[..])
        );
        m.write_panic("boom").unwrap();
        let panic = read_segment(&dir, "Panic", "").unwrap();
        assert_eq!(panic.len(), PANIC_SPACE);
        assert!(panic.starts_with(b"boom\0"));
        m.child_stopped().unwrap();
        m.child_stopped().unwrap();
        let index = std::fs::read_to_string(dir.join(INDEX)).unwrap();
        assert_eq!(index.lines().filter(|l| l.starts_with('-')).count(), 2);
        assert!(live_segment(&index, "Params", "").is_none());
        assert!(live_segment(&index, "Panic", "").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
