//! Reuse of a request's instance by the next request of the same program
//! on the same thread, with our own reset in between.
//!
//! Why: wasmtime's fixed cost of a new `Store` plus instantiation and
//! drop is about 13,800 instructions, ten times the hook a typical
//! tenant runs. Keeping the store and instance and putting back only
//! what a request can change costs a `PAGEMAP_SCAN` system call plus a
//! copy of the pages the request wrote.
//!
//! What a request can change, and how each is put back before the
//! instance serves anyone else ([`Reusable::reset`]):
//!
//! - **Linear memory.** Its size must still be the snapshot's (a
//!   request that grew memory cannot be shrunk back: the instance is
//!   dropped instead). The kernel says which pages of the memory hold
//!   private anonymous data ([`dirty_pages`]: present or swapped pages
//!   backed by neither the zero page nor the image file, which is every
//!   page ever written, whoever wrote it); each such page is zeroed and
//!   the snapshot's bytes are copied back over it. Pages the kernel does
//!   not report are still the image file's or the zero page, so the
//!   memory is byte for byte the snapshot. More than [`MAX_DIRTY`]
//!   bytes of such pages, a scan that fails or stops early, or a kernel
//!   without `PAGEMAP_SCAN`: the instance is dropped, and wasmtime's
//!   own slot reset applies as before.
//! - **Mutable globals** are set back to their snapshot values (they
//!   are exported under reserved names by `snapshot::instrument`).
//! - **Tables and segments.** A program whose code can change a table
//!   (`table.set`, `table.grow`, `table.fill`, `table.copy`,
//!   `table.init`) or drop a segment (`elem.drop`, `data.drop`) is never
//!   reused (`snapshot::reuse_blocker`), nor one with more than one
//!   memory.
//! - **Host-side state** (messages, effects, decision, argument,
//!   results) is cleared in the store's `Task`.
//! - Fuel and the epoch deadline are set before every call anyway.
//!
//! An instance whose call trapped or ran out of budget is never reused
//! (`Instance::clean`), nor one of a program that a live update retired
//! (`Program::retired`): a request that starts after the update forks
//! the new program, and cached instances are found by program identity,
//! so an old program's instance cannot serve it.
//!
//! Cached instances live in a small per-thread list (no lock shared
//! between threads); each holds one slot of the pool, so the list is
//! short ([`PER_THREAD`]) and emptied when the pool runs out of slots.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use wasmtime::{Global, Store, Val};

use crate::Program;
use crate::request::Task;

/// The most bytes of written pages an instance may have and still be
/// reset for reuse (as wasmtime's `linear_memory_keep_resident`).
pub(crate) const MAX_DIRTY: usize = 256 << 10;

/// Instances cached per thread.
pub(crate) const PER_THREAD: usize = 8;

/// What a program's instances are reset to.
pub(crate) struct Image {
    /// Memory 0's size in bytes after `main`.
    pub memory_bytes: usize,
    /// Its non-zero runs (offset, bytes), ascending and disjoint.
    pub segments: Vec<(usize, Vec<u8>)>,
    /// The reserved exports of the mutable globals and their values.
    pub globals: Vec<(wasmtime::ModuleExport, Val)>,
}

/// A store and instance that may serve another request of its program.
pub(crate) struct Reusable {
    pub store: Store<Task>,
    pub instance: wasmtime::Instance,
    pub program: Arc<Program>,
    pub last: Option<(usize, wasmtime::Func)>,
    /// The mutable globals, in `Image::globals` order.
    pub globals: Vec<Global>,
}

impl Reusable {
    /// Puts everything a request can change back to the snapshot;
    /// false when that cannot be done (the caller drops the instance).
    fn reset(&mut self) -> bool {
        let Some(image) = &self.program.reuse else {
            return false;
        };
        if self.globals.len() != image.globals.len() {
            return false;
        }
        if let Some(m) = self.store.data().memory {
            if m.data_size(&self.store) != image.memory_bytes {
                return false;
            }
            let base = m.data_ptr(&self.store) as usize;
            let Some(dirty) = dirty_pages(base, image.memory_bytes) else {
                return false;
            };
            let data = m.data_mut(&mut self.store);
            for &(start, end) in dirty.runs() {
                restore(data, start, end, &image.segments);
            }
        }
        for (g, (_, v)) in self.globals.iter().zip(&image.globals) {
            if g.set(&mut self.store, *v).is_err() {
                return false;
            }
        }
        self.store.data_mut().clear_request();
        true
    }
}

/// Sets `data[start..end]` to the image: the segments' bytes that fall
/// inside, zeros everywhere else (each byte written once: the segments
/// are not first zeroed and then copied over).
fn restore(data: &mut [u8], start: usize, end: usize, segments: &[(usize, Vec<u8>)]) {
    let end = end.min(data.len());
    if start >= end {
        return;
    }
    let first = segments.partition_point(|(at, b)| at + b.len() <= start);
    let mut at = start;
    for (seg, bytes) in &segments[first..] {
        if *seg >= end {
            break;
        }
        let from = start.max(*seg);
        let to = end.min(seg + bytes.len());
        data[at..from].fill(0);
        data[from..to].copy_from_slice(&bytes[from - seg..to - seg]);
        at = to;
    }
    data[at..end].fill(0);
}

thread_local! {
    static CACHE: RefCell<Vec<Reusable>> = const { RefCell::new(Vec::new()) };
}

/// A cached instance of `program` made on this thread, if any (none of
/// a retired program: those are dropped here).
pub(crate) fn take(program: &Arc<Program>) -> Option<Reusable> {
    let found = CACHE
        .try_with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            let i = c.iter().position(|r| Arc::ptr_eq(&r.program, program))?;
            Some(c.swap_remove(i))
        })
        .ok()
        .flatten()?;
    // Dropped outside the borrow when retired.
    (!found.program.retired.load(Ordering::Acquire)).then_some(found)
}

/// Resets `r` and caches it for the next request of its program on this
/// thread, or drops it when it cannot be reset or its program was
/// retired.
pub(crate) fn put(mut r: Reusable) {
    if r.program.retired.load(Ordering::Acquire) || !r.reset() {
        return;
    }
    // Dropped outside the borrow: whatever was evicted.
    let _evicted = CACHE.try_with(|c| {
        let Ok(mut c) = c.try_borrow_mut() else {
            return Vec::new();
        };
        let mut out: Vec<Reusable> = Vec::new();
        let mut i = 0;
        while i < c.len() {
            if c[i].program.retired.load(Ordering::Acquire) {
                out.push(c.swap_remove(i));
            } else {
                i += 1;
            }
        }
        if c.len() >= PER_THREAD {
            // The oldest goes.
            out.push(c.remove(0));
        }
        c.push(r);
        out
    });
}

/// Drops every instance cached on this thread (their slots go back to
/// the pool).
pub(crate) fn flush() {
    let _gone = CACHE.try_with(|c| c.try_borrow_mut().map(|mut c| std::mem::take(&mut *c)));
}

/// The most runs of written pages a reset handles (more: no reuse).
const MAX_RUNS: usize = 32;

/// Runs of written pages, as offsets from the memory's base, in a fixed
/// array (a reset allocates nothing).
pub(crate) struct Dirty {
    runs: [(usize, usize); MAX_RUNS],
    n: usize,
}

impl Dirty {
    fn runs(&self) -> &[(usize, usize)] {
        &self.runs[..self.n]
    }
}

/// The pages of `[base, base + len)` that hold private anonymous data
/// (written since the slot's memory was last returned to the kernel), as
/// offsets from `base`; `None` when the kernel cannot say or there are
/// more than [`MAX_DIRTY`] bytes of them.
#[cfg(target_os = "linux")]
fn dirty_pages(base: usize, len: usize) -> Option<Dirty> {
    pagemap::scan(base, len, MAX_DIRTY)
}

#[cfg(not(target_os = "linux"))]
fn dirty_pages(_: usize, _: usize) -> Option<Dirty> {
    None
}

#[cfg(target_os = "linux")]
mod pagemap {
    //! Linux's `PAGEMAP_SCAN` ioctl on `/proc/self/pagemap` (6.7 and
    //! later), as wasmtime's own slot reset uses it. The ioctl and the
    //! fork hook are the only `unsafe` code of `reuse`.
    #![allow(unsafe_code)]

    use std::fs::File;
    use std::os::fd::AsRawFd;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// `struct pm_scan_arg` of `linux/fs.h`.
    #[repr(C)]
    #[derive(Default)]
    struct ScanArg {
        size: u64,
        flags: u64,
        start: u64,
        end: u64,
        walk_end: u64,
        vec: u64,
        vec_len: u64,
        max_pages: u64,
        category_inverted: u64,
        category_mask: u64,
        category_anyof_mask: u64,
        return_mask: u64,
    }

    /// `struct page_region`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Region {
        start: u64,
        end: u64,
        categories: u64,
    }

    /// `_IOWR('f', 16, struct pm_scan_arg)`.
    const PAGEMAP_SCAN: u64 =
        (3 << 30) | ((std::mem::size_of::<ScanArg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;
    const PAGE_IS_FILE: u64 = 1 << 2;
    const PAGE_IS_PRESENT: u64 = 1 << 3;
    const PAGE_IS_SWAPPED: u64 = 1 << 4;
    const PAGE_IS_PFNZERO: u64 = 1 << 5;

    const MAX_REGIONS: usize = super::MAX_RUNS;

    /// `/proc/self/pagemap`, opened on first use.
    static FILE: OnceLock<Option<File>> = OnceLock::new();
    /// Set in the child of a `fork`, where `FILE` still describes the
    /// parent's memory: from then on the child reuses no instance.
    static FORKED: AtomicBool = AtomicBool::new(false);

    /// Run by libc in the child after a `fork`.
    ///
    /// # Safety
    ///
    /// Called only by `pthread_atfork`'s machinery; it does nothing but
    /// an atomic store, so it is sound in a forked child.
    unsafe extern "C" fn after_fork_in_child() {
        FORKED.store(true, Ordering::Relaxed);
    }

    fn fd() -> Option<std::os::fd::RawFd> {
        let f = FILE.get_or_init(|| {
            // SAFETY: registers a handler that only stores to an atomic,
            // which is async-signal-safe as a child handler must be.
            let rc = unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
            if rc != 0 {
                return None;
            }
            File::open("/proc/self/pagemap").ok()
        });
        if FORKED.load(Ordering::Relaxed) {
            return None;
        }
        f.as_ref().map(AsRawFd::as_raw_fd)
    }

    pub(super) fn scan(base: usize, len: usize, max_bytes: usize) -> Option<super::Dirty> {
        let mut out = super::Dirty {
            runs: [(0, 0); MAX_REGIONS],
            n: 0,
        };
        if len == 0 {
            return Some(out);
        }
        let fd = fd()?;
        let page = 4096usize;
        let mut regions = [Region::default(); MAX_REGIONS];
        let mut arg = ScanArg {
            size: std::mem::size_of::<ScanArg>() as u64,
            start: base as u64,
            end: (base + len) as u64,
            vec: regions.as_mut_ptr() as u64,
            vec_len: MAX_REGIONS as u64,
            // One page more than allowed, to tell "exactly at the limit"
            // from "beyond it".
            max_pages: (max_bytes / page + 1) as u64,
            // Pages backed by the zero page or the image file hold what
            // the snapshot says; everything else that is mapped (present
            // or swapped out) is private data someone wrote.
            category_inverted: PAGE_IS_PFNZERO | PAGE_IS_FILE,
            category_mask: PAGE_IS_PFNZERO | PAGE_IS_FILE,
            category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            ..ScanArg::default()
        };
        // SAFETY: `arg` is a valid `pm_scan_arg` whose `vec` points to
        // `MAX_REGIONS` writable `page_region`s that outlive the call;
        // the ioctl only reads the page tables of `[start, end)` (it does
        // not write-protect anything: no flags) and writes `arg` and
        // `regions`. `fd` is this process's pagemap, kept open.
        let n = unsafe { libc::ioctl(fd, PAGEMAP_SCAN as _, &mut arg as *mut ScanArg) };
        if n < 0 || arg.walk_end != arg.end {
            // Failed, more regions than `MAX_REGIONS` or more pages than
            // allowed: the caller drops the instance.
            return None;
        }
        let mut bytes = 0;
        for r in regions.iter().take(n as usize) {
            let (s, e) = (r.start as usize, r.end as usize);
            if s < base || e > base + len || s >= e {
                return None;
            }
            bytes += e - s;
            out.runs[out.n] = (s - base, e - base);
            out.n += 1;
        }
        (bytes <= max_bytes).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_writes_zeros_and_the_segments_within_the_range_only() {
        let segments = vec![(2, vec![1, 2, 3]), (10, vec![9; 6])];
        let mut data = vec![7u8; 20];
        restore(&mut data, 3, 12, &segments);
        assert_eq!(
            data,
            [7, 7, 7, 2, 3, 0, 0, 0, 0, 0, 9, 9, 7, 7, 7, 7, 7, 7, 7, 7]
        );
        let mut all = vec![5u8; 20];
        restore(&mut all, 0, 99, &segments);
        assert_eq!(
            all,
            [0, 0, 1, 2, 3, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 0, 0, 0, 0]
        );
    }

    #[test]
    fn restore_matches_zeroing_then_copying_for_every_range() {
        // Segments touching, apart, at the edges; every range of a
        // 24-byte memory, from garbage: the result is the image's bytes
        // in the range and the garbage outside it.
        let segments = vec![
            (0, vec![1, 2]),
            (2, vec![3]),
            (7, vec![4; 5]),
            (20, vec![6; 4]),
        ];
        let mut image = [0u8; 24];
        for (at, b) in &segments {
            image[*at..at + b.len()].copy_from_slice(b);
        }
        for start in 0..=24 {
            for end in start..=26 {
                let mut data = [0xAAu8; 24];
                restore(&mut data, start, end, &segments);
                for (i, &b) in data.iter().enumerate() {
                    let want = if i >= start && i < end {
                        image[i]
                    } else {
                        0xAA
                    };
                    assert_eq!(b, want, "byte {i} after restore({start}, {end})");
                }
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_scan_reports_written_pages_and_not_untouched_ones() {
        if !wasmtime::PoolingAllocationConfig::is_pagemap_scan_available() {
            return;
        }
        // Fresh zero pages from the kernel, written at two of them.
        let mut v = vec![0u8; 65 << 12];
        let base = v.as_mut_ptr() as usize;
        let aligned = (base + 4095) & !4095;
        let off = aligned - base;
        v[off + 5 * 4096 + 10] = 1;
        v[off + 9 * 4096] = 1;
        let d = pagemap::scan(aligned, 16 << 12, MAX_DIRTY).unwrap();
        let pages: Vec<usize> = d
            .runs()
            .iter()
            .flat_map(|&(s, e)| (s / 4096..e / 4096).collect::<Vec<_>>())
            .collect();
        assert!(pages.contains(&5) && pages.contains(&9), "{pages:?}");
        // A limit below what was written: no answer rather than a
        // partial one.
        assert!(pagemap::scan(aligned, 16 << 12, 0).is_none());
    }
}
