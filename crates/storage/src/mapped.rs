//! A read-only shared mapping of a file store's file, so that a hit on a
//! body whose pages are in the page cache is served straight from them: no
//! copy into a fresh buffer, no hop to the blocking pool and back (issue
//! 18: those were most of a disk hit's cost, measured with `perf`).
//!
//! [`FileMap::resident`] asks the kernel (`mincore`) whether every page of
//! a stretch is in memory; only then does a delivery use the mapping
//! (`crate::file::FileSpan::mapped`), so a page fault that would wait for
//! the disk never happens on an async worker. A stretch that is not
//! resident is read with `pread` on the blocking pool as before.
//!
//! The bytes seen through the mapping are the file's bytes, exactly as
//! `pread` would return them: writes (`pwrite`) and the mapping share the
//! page cache. What keeps a delivery from seeing space reused by another
//! object is unchanged: the mapped bytes are handed out together with the
//! [`crate::file::Extent`] holding them, and an extent's space returns to
//! the allocator only when its last holder is gone.
//!
//! Bytes leave by copy, never by reference: delivery writes the mapped
//! bytes with `writev`, which copies them into the socket's buffers before
//! it returns, so once it has returned the extent may go and its space be
//! written again. `sendfile(2)` or `splice(2)` from the store file would
//! save that copy (about a quarter of a disk hit's CPU, `perf`, issue 18)
//! but hand the socket references to page-cache pages instead: they are
//! read when the data is transmitted or retransmitted, and over loopback
//! they wait in the receiving socket's queue until the peer reads them,
//! for as long as it likes. This store reuses file space in place (unlike
//! nginx's cache, which writes each object to a new file), so such a
//! socket could send bytes a later fetch wrote there: a wrong byte, which
//! the persistent store's invariants forbid (ARCHITECTURE.md). Knowing
//! when the kernel is done with the pages needs a completion signal
//! `sendfile` does not give (`MSG_ZEROCOPY` gives one, and copies over
//! loopback anyway).
//!
//! This is the only module of the crate that uses `unsafe`: mapping the
//! file and asking for page residency.

#![allow(unsafe_code)]

use std::fs::File;
use std::sync::OnceLock;

use memmap2::{Mmap, MmapOptions};

/// Pages asked about per `mincore` call (a MiB of 4 KiB pages: the most a
/// delivery reads at once).
const PAGES_PER_CALL: usize = 256;

/// The mapping of the first `len` bytes of a store's file.
#[derive(Debug)]
pub(crate) struct FileMap {
    map: Mmap,
}

fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf only reads a system parameter; no pointers.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
    })
}

impl FileMap {
    /// Map the first `len` bytes of `file` read-only; `None` when the
    /// mapping fails (the store then reads everything with `pread`).
    pub(crate) fn new(file: &File, len: u64) -> Option<FileMap> {
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        // SAFETY: the mapping is read-only and shared, so the only way its
        // bytes change is through writes to the file, which the store makes
        // itself (`pwrite` into extents it owns) and which land in the same
        // page cache; the bytes are only handed out for an extent the reader
        // holds, which nothing writes while it is held (the file store's
        // invariant, see `crate::file`). The file is the store's own (created
        // 0600, sized and its blocks reserved before this call), so it is at
        // least `len` bytes long; cutting it shorter while the daemon runs
        // would make an access fault (SIGBUS), which is outside what the
        // store supports (ARCHITECTURE.md "Persistent store", known limits).
        let map = unsafe { MmapOptions::new().len(len).map(file) }.ok()?;
        // Hits read scattered objects: no read-ahead around a fault.
        let _ = map.advise(memmap2::Advice::Random);
        Some(FileMap { map })
    }

    /// Bytes `off..off+len` of the file, when the mapping covers them.
    pub(crate) fn slice(&self, off: u64, len: u64) -> Option<&[u8]> {
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.map.get(start..end)
    }

    /// Whether every page of `off..off+len` is in the page cache now, so
    /// reading it through the mapping does not wait for the disk (a page
    /// could be evicted right after; reading it would then fault it in,
    /// once, as a `pread` would have waited for it).
    pub(crate) fn resident(&self, off: u64, len: u64) -> bool {
        let Some(bytes) = self.slice(off, len) else {
            return false;
        };
        if bytes.is_empty() {
            return true;
        }
        let page = page_size();
        // The mapping starts on a page boundary, so rounding down stays in it.
        let mut at = bytes.as_ptr() as usize & !(page - 1);
        let end = bytes.as_ptr() as usize + bytes.len();
        let mut vec = [0u8; PAGES_PER_CALL];
        while at < end {
            let pages = (end - at).div_ceil(page).min(PAGES_PER_CALL);
            // SAFETY: `at` is page-aligned and `at..at + pages * page` lies
            // within the mapping (the mapping starts page-aligned and its
            // last page is whole in the address space even when its length
            // is not a multiple of the page size); `vec` has room for
            // `pages` entries. mincore only writes into `vec`.
            let rc =
                unsafe { libc::mincore(at as *mut libc::c_void, pages * page, vec.as_mut_ptr()) };
            if rc != 0 || vec[..pages].iter().any(|&v| v & 1 == 0) {
                return false;
            }
            at += pages * page;
        }
        true
    }
}
