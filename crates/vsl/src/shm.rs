//! Shared-memory files viewed as arrays of 64-bit atomic words.
//!
//! Both the log (`_.vsl`) and the counters (`_.vsc`) live in plain files that
//! the daemon maps read-write and the tools (`lacquer log`, `lacquer stat`, the
//! vtc runner) map read-only. Every access to the mapped memory, in every
//! process, goes through 64-bit atomic operations, so concurrent readers and
//! writers never race in the Rust sense; the protocols on top (commit markers,
//! generation counters) decide which values are meaningful.
//!
//! This is the only module of the crate that uses `unsafe`: turning a mapping
//! into a slice of atomics, and mapping the file itself.

#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use memmap2::{Mmap, MmapMut};

/// A read-write shared mapping of a whole file, owned by the writing process.
#[derive(Debug)]
pub(crate) struct ShmWriter {
    map: MmapMut,
    words: usize,
}

impl ShmWriter {
    /// Creates `path` atomically: a zero-filled file of `bytes` bytes is built
    /// under a temporary name, `init` fills in its header, and only then is it
    /// renamed over `path`, so a reader never maps a half-initialised file.
    pub(crate) fn create(
        path: &Path,
        bytes: usize,
        init: impl FnOnce(&Words<'_>),
    ) -> io::Result<ShmWriter> {
        if bytes == 0 || !bytes.is_multiple_of(8) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("shared memory size {bytes} is not a positive multiple of 8"),
            ));
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = tmp_name(path);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        let result = (|| {
            file.set_len(bytes as u64)?;
            // SAFETY: the file was just created by us under a private
            // temporary name and sized to `bytes`; nobody else truncates it
            // (files are only ever replaced by rename, never shrunk), so the
            // mapping stays backed for its whole lifetime.
            let map = unsafe { MmapMut::map_mut(&file)? };
            let shm = ShmWriter {
                map,
                words: bytes / 8,
            };
            init(&shm.words());
            shm.map.flush_async()?;
            std::fs::rename(&tmp, path)?;
            Ok(shm)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Faults in the pages of bytes `at..at + len` (clamped to the
    /// mapping) for writing, as a first write would: a file just created is
    /// a hole, and the first write to each of its pages otherwise takes a
    /// page fault that allocates and zeroes a page (and, on a disk
    /// filesystem, a block) on the writer's path. Contents are unchanged, so
    /// this may run while others write. `Err` when the kernel cannot
    /// (before Linux 5.14, or out of memory): the pages then fault in on
    /// first use, as before.
    pub(crate) fn populate(&self, at: usize, len: usize) -> io::Result<()> {
        let at = at.min(self.map.len());
        let len = len.min(self.map.len() - at);
        if len == 0 {
            return Ok(());
        }
        self.map
            .advise_range(memmap2::Advice::PopulateWrite, at, len)
    }

    /// The mapping's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The mapping as atomic words.
    pub(crate) fn words(&self) -> Words<'_> {
        // SAFETY: the mapping is page aligned (so 8-byte aligned), holds
        // `self.words * 8` bytes, and `AtomicU64` has the size and alignment
        // of `u64`. The memory stays mapped while `self` is borrowed. Other
        // processes only touch it through atomic operations too.
        let slice = unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().cast::<AtomicU64>(), self.words)
        };
        Words { slice }
    }
}

/// A read-only shared mapping of a whole file, held by a reading process.
#[derive(Debug)]
pub(crate) struct ShmReader {
    map: Mmap,
    words: usize,
    file: File,
}

impl ShmReader {
    /// Maps an existing file read-only.
    pub(crate) fn open(path: &Path) -> io::Result<ShmReader> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        if len == 0 || !len.is_multiple_of(8) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: size {len} is not a positive multiple of 8, not a Lacquer shared memory file",
                    path.display()
                ),
            ));
        }
        let words = usize::try_from(len / 8).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidData, "shared memory file too large")
        })?;
        // SAFETY: the writer never shrinks these files (it replaces them by
        // rename), so the mapping stays backed; concurrent modification by
        // the writer is expected and only ever observed through atomic loads.
        let map = unsafe { Mmap::map(&file)? };
        Ok(ShmReader { map, words, file })
    }

    /// The mapping as read-only atomic words.
    pub(crate) fn words(&self) -> RoWords<'_> {
        // SAFETY: as in `ShmWriter::words`; additionally `RoWords` only
        // exposes loads, which are valid on read-only memory for 64-bit
        // atomics on every platform with native 64-bit atomics.
        let slice = unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().cast::<AtomicU64>(), self.words)
        };
        RoWords { slice }
    }

    /// True if `path` no longer names the file this reader mapped (the
    /// writer restarted and created a new one).
    pub(crate) fn is_replaced(&self, path: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(mine) = self.file.metadata() else {
            return true;
        };
        match std::fs::metadata(path) {
            Ok(now) => now.ino() != mine.ino() || now.dev() != mine.dev(),
            Err(_) => true,
        }
    }
}

/// Read-write view of mapped words.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Words<'a> {
    slice: &'a [AtomicU64],
}

impl<'a> Words<'a> {
    /// Number of words.
    pub(crate) fn len(&self) -> usize {
        self.slice.len()
    }

    /// The word at `i` (panics on an out-of-range index: internal invariant).
    #[inline]
    pub(crate) fn at(&self, i: usize) -> &'a AtomicU64 {
        &self.slice[i]
    }

    /// The `len` words from `start` (panics when out of range: internal
    /// invariant), for copies that run without a bounds check per word.
    #[inline]
    pub(crate) fn run(&self, start: usize, len: usize) -> &'a [AtomicU64] {
        &self.slice[start..start + len]
    }
}

/// Read-only view of mapped words: loads only.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RoWords<'a> {
    slice: &'a [AtomicU64],
}

impl RoWords<'_> {
    /// Number of words.
    pub(crate) fn len(&self) -> usize {
        self.slice.len()
    }

    /// Loads the word at `i` (panics on an out-of-range index: callers check
    /// sizes read from the header against `len` first).
    #[inline]
    pub(crate) fn load(&self, i: usize, order: std::sync::atomic::Ordering) -> u64 {
        self.slice[i].load(order)
    }
}

fn tmp_name(path: &Path) -> PathBuf {
    // Unique per process and per call, so concurrent creations never share
    // a temporary file.
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp.{}.{n}", std::process::id()));
    path.with_file_name(name)
}

/// Packs bytes into little-endian words (the last one zero padded).
pub(crate) fn pack_bytes(bytes: &[u8], mut put: impl FnMut(usize, u64)) {
    for (i, chunk) in bytes.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        put(i, u64::from_le_bytes(w));
    }
}

/// Appends `len` bytes unpacked from little-endian words to `out`.
pub(crate) fn unpack_bytes(len: usize, mut get: impl FnMut(usize) -> u64, out: &mut Vec<u8>) {
    out.reserve(len);
    let mut left = len;
    let mut i = 0;
    while left > 0 {
        let w = get(i).to_le_bytes();
        let take = left.min(8);
        out.extend_from_slice(&w[..take]);
        left -= take;
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn create_then_read_back() {
        let dir = std::env::temp_dir().join(format!("lq-shm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("_.test");
        let w = ShmWriter::create(&path, 64, |w| w.at(0).store(42, Ordering::Relaxed)).unwrap();
        w.words().at(1).store(7, Ordering::Release);
        let r = ShmReader::open(&path).unwrap();
        assert_eq!(r.words().len(), 8);
        assert_eq!(r.words().load(0, Ordering::Acquire), 42);
        assert_eq!(r.words().load(1, Ordering::Acquire), 7);
        assert!(!r.is_replaced(&path));
        let _w2 = ShmWriter::create(&path, 64, |_| {}).unwrap();
        assert!(r.is_replaced(&path));
        assert!(ShmWriter::create(&path, 12, |_| {}).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pack_unpack_roundtrip() {
        for len in 0usize..20 {
            let bytes: Vec<u8> = (0..len as u8).collect();
            let mut words = vec![0u64; len.div_ceil(8)];
            pack_bytes(&bytes, |i, w| words[i] = w);
            let mut out = Vec::new();
            unpack_bytes(len, |i| words[i], &mut out);
            assert_eq!(out, bytes);
        }
    }
}
