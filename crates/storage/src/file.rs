//! The `file` stevedore (`-s [name=]file,PATH[,SIZE[,GRANULARITY[,ADVICE]]]`):
//! object bodies kept in one file on disk instead of in memory.
//!
//! * [`Arena`] is the extent allocator over the file, as varnishd's: sizes
//!   are rounded up to the granularity; free extents sit in size classes of
//!   one granule each (32 of them, plus one for everything larger, searched
//!   first fit by offset), an allocation is split from the front of the
//!   extent it takes, and a freed extent merges with free neighbours. The
//!   metadata is one map entry per extent, so it is bounded by
//!   `SIZE / GRANULARITY` whatever the traffic.
//! * [`FileStore`] is the [`Stevedore`]: it counts `SMF.<name>.*` as
//!   varnishd does (`g_space` is the allocator's free space, `g_smf*` its
//!   extent counts) and hands out [`Extent`]s. An extent gives its space
//!   back to the allocator when the last holder (the object, or a reader
//!   still delivering it) drops it, so a delivery never reads space that
//!   was reused.
//! * [`FileSpan`] is a stretch of an extent holding body bytes; bodies
//!   (`crate::body`) keep spans instead of the bytes themselves.
//!
//! Writes are positional (`pwrite`) and happen on the fetch task, one body
//! segment (a read buffer of the backend connection) at a time: they land
//! in the page cache and are bounded by that segment size. Reads for
//! delivery are larger (up to [`FileSpan::MAX_READ`] coalesced) and driven
//! by clients: a span whose pages are all in the page cache is handed out
//! as bytes of a read-only mapping of the file ([`FileSpan::mapped`], see
//! `crate::mapped`: no copy, no thread hop), any other is read with `pread`
//! on tokio's blocking pool by [`crate::BodyReader`], so a slow disk stalls
//! that one delivery, never a runtime worker, and a slow client holds no
//! thread while its socket drains.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::mapped::FileMap;
use crate::store::{Allocation, NoSpace, Stevedore, StoreStats};

/// Free extents of `1..NBUCKET-1` granules have a class each; the last
/// class holds every larger extent.
const NBUCKET: usize = 33;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ext {
    len: u64,
    free: bool,
}

/// Extent counts of an [`Arena`], published as `g_smf`, `g_smf_frag` and
/// `g_smf_large`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ArenaCounts {
    /// Extents, used and free.
    pub extents: u64,
    /// Free extents smaller than the largest size class.
    pub small_free: u64,
    /// Free extents in the largest size class.
    pub large_free: u64,
    /// Free bytes.
    pub free_bytes: u64,
}

/// Extent allocator over `size` bytes in units of `granularity`.
#[derive(Debug)]
pub struct Arena {
    granularity: u64,
    /// Every extent by offset, so neighbours are found for merging.
    order: BTreeMap<u64, Ext>,
    /// Offsets of free extents by size class, lowest offset first.
    free: Vec<BTreeSet<u64>>,
    counts: ArenaCounts,
}

impl Arena {
    /// An allocator over `size` bytes (rounded down to the granularity),
    /// all free.
    pub fn new(size: u64, granularity: u64) -> Arena {
        let granularity = granularity.max(1);
        let size = size - size % granularity;
        let mut a = Arena {
            granularity,
            order: BTreeMap::new(),
            free: vec![BTreeSet::new(); NBUCKET],
            counts: ArenaCounts::default(),
        };
        if size > 0 {
            a.order.insert(
                0,
                Ext {
                    len: size,
                    free: true,
                },
            );
            a.counts.extents = 1;
            a.insert_free(0, size);
        }
        a
    }

    /// The allocation unit.
    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// Extent and free-space counts.
    pub fn counts(&self) -> ArenaCounts {
        self.counts
    }

    /// `bytes` rounded up to whole granules (`None` when that overflows).
    pub fn round_up(&self, bytes: u64) -> Option<u64> {
        let g = self.granularity;
        bytes.max(1).div_ceil(g).checked_mul(g)
    }

    fn bucket(&self, len: u64) -> usize {
        usize::try_from(len / self.granularity).map_or(NBUCKET - 1, |b| b.min(NBUCKET - 1))
    }

    fn insert_free(&mut self, off: u64, len: u64) {
        let b = self.bucket(len);
        if b == NBUCKET - 1 {
            self.counts.large_free += 1;
        } else {
            self.counts.small_free += 1;
        }
        self.counts.free_bytes += len;
        self.free[b].insert(off);
    }

    fn remove_free(&mut self, off: u64, len: u64) {
        let b = self.bucket(len);
        if self.free[b].remove(&off) {
            if b == NBUCKET - 1 {
                self.counts.large_free -= 1;
            } else {
                self.counts.small_free -= 1;
            }
            self.counts.free_bytes -= len;
        }
    }

    /// Take `bytes` (rounded up to the granularity) from the lowest free
    /// extent of the smallest class that fits; `None` when nothing fits.
    /// Returns the offset and the rounded length.
    pub fn alloc(&mut self, bytes: u64) -> Option<(u64, u64)> {
        let want = self.round_up(bytes)?;
        let first = self.bucket(want);
        let mut found = None;
        for b in first..NBUCKET - 1 {
            if let Some(&off) = self.free[b].first() {
                found = Some(off);
                break;
            }
        }
        if found.is_none() {
            found = self.free[NBUCKET - 1]
                .iter()
                .copied()
                .find(|off| self.order.get(off).is_some_and(|e| e.len >= want));
        }
        let off = found?;
        let len = self.order.get(&off)?.len;
        self.remove_free(off, len);
        self.order.insert(
            off,
            Ext {
                len: want,
                free: false,
            },
        );
        if len > want {
            self.order.insert(
                off + want,
                Ext {
                    len: len - want,
                    free: true,
                },
            );
            self.counts.extents += 1;
            self.insert_free(off + want, len - want);
        }
        Some((off, want))
    }

    /// Mark `off..off+len` used (recovery of a persistent store: the extent
    /// a record names). `len` must be whole granules and the range must lie
    /// inside one free extent; returns false (changing nothing) otherwise.
    pub fn reserve(&mut self, off: u64, len: u64) -> bool {
        let g = self.granularity;
        if len == 0 || !off.is_multiple_of(g) || !len.is_multiple_of(g) {
            return false;
        }
        let Some((&foff, &fe)) = self.order.range(..=off).next_back() else {
            return false;
        };
        if !fe.free || off.checked_add(len).is_none_or(|end| end > foff + fe.len) {
            return false;
        }
        self.remove_free(foff, fe.len);
        if off > foff {
            self.order.insert(
                foff,
                Ext {
                    len: off - foff,
                    free: true,
                },
            );
            self.insert_free(foff, off - foff);
            self.counts.extents += 1;
        }
        self.order.insert(off, Ext { len, free: false });
        let tail = foff + fe.len - (off + len);
        if tail > 0 {
            self.order.insert(
                off + len,
                Ext {
                    len: tail,
                    free: true,
                },
            );
            self.insert_free(off + len, tail);
            self.counts.extents += 1;
        }
        true
    }

    /// [`reserve`](Self::reserve), then merge the range with used
    /// neighbours that touch it, so that space recovered for many objects
    /// costs one map entry per run of used space, not one per extent (the
    /// persistent store's recovery; such space is given back with
    /// [`free_range`](Self::free_range)).
    pub fn reserve_merged(&mut self, off: u64, len: u64) -> bool {
        if !self.reserve(off, len) {
            return false;
        }
        let mut start = off;
        let mut total = len;
        if let Some((&poff, &prev)) = self.order.range(..off).next_back()
            && !prev.free
            && poff + prev.len == off
        {
            self.order.remove(&off);
            self.counts.extents -= 1;
            start = poff;
            total += prev.len;
        }
        if let Some(next) = self.order.get(&(off + len)).copied().filter(|n| !n.free) {
            self.order.remove(&(off + len));
            self.counts.extents -= 1;
            total += next.len;
        }
        self.order.insert(
            start,
            Ext {
                len: total,
                free: false,
            },
        );
        true
    }

    /// Give back `off..off+len`, which lies inside one used extent (the
    /// whole of it, or a part of a run merged by
    /// [`reserve_merged`](Self::reserve_merged)): the used parts before and
    /// after it stay used. Returns the bytes freed (0, changing nothing,
    /// when the range is not inside a used extent).
    pub fn free_range(&mut self, off: u64, len: u64) -> u64 {
        let Some((&uoff, &ue)) = self.order.range(..=off).next_back() else {
            return 0;
        };
        let end = off.saturating_add(len);
        if ue.free || len == 0 || end > uoff + ue.len {
            return 0;
        }
        if off > uoff {
            self.order.insert(
                uoff,
                Ext {
                    len: off - uoff,
                    free: false,
                },
            );
            self.counts.extents += 1;
        }
        if end < uoff + ue.len {
            self.order.insert(
                end,
                Ext {
                    len: uoff + ue.len - end,
                    free: false,
                },
            );
            self.counts.extents += 1;
        }
        self.order.insert(off, Ext { len, free: false });
        self.release(off, len);
        len
    }

    /// Give back the used extent at `off`, merging it with free neighbours.
    /// Returns its length (0 if `off` is not a used extent).
    pub fn free(&mut self, off: u64) -> u64 {
        let Some(e) = self.order.get(&off).copied().filter(|e| !e.free) else {
            return 0;
        };
        self.release(off, e.len);
        e.len
    }

    /// Shrink the used extent at `off` to `keep` bytes (rounded up to the
    /// granularity, at least one granule), freeing the tail. Returns the
    /// bytes given back.
    pub fn shrink(&mut self, off: u64, keep: u64) -> u64 {
        let Some(e) = self.order.get(&off).copied().filter(|e| !e.free) else {
            return 0;
        };
        let Some(keep) = self.round_up(keep).filter(|k| *k < e.len) else {
            return 0;
        };
        self.order.insert(
            off,
            Ext {
                len: keep,
                free: false,
            },
        );
        self.order.insert(
            off + keep,
            Ext {
                len: e.len - keep,
                free: false,
            },
        );
        self.counts.extents += 1;
        self.release(off + keep, e.len - keep);
        e.len - keep
    }

    /// Mark `off..off+len` (an extent in `order`) free and merge it.
    fn release(&mut self, mut off: u64, mut len: u64) {
        if let Some(next) = self.order.get(&(off + len)).copied().filter(|n| n.free) {
            self.remove_free(off + len, next.len);
            self.order.remove(&(off + len));
            self.counts.extents -= 1;
            len += next.len;
        }
        if let Some((&poff, &prev)) = self.order.range(..off).next_back()
            && prev.free
            && poff + prev.len == off
        {
            self.remove_free(poff, prev.len);
            self.order.remove(&off);
            self.counts.extents -= 1;
            off = poff;
            len += prev.len;
        }
        self.order.insert(off, Ext { len, free: true });
        self.insert_free(off, len);
    }
}

/// `g_smf*` gauges of a file store.
#[derive(Debug, Default)]
pub struct FileStats {
    /// Extents (used and free).
    pub g_smf: AtomicU64,
    /// Small free extents.
    pub g_smf_frag: AtomicU64,
    /// Large free extents.
    pub g_smf_large: AtomicU64,
}

/// What [`FileStore::on_erase`] calls.
struct EraseHook(Box<dyn Fn(u64) + Send + Sync>);

impl std::fmt::Debug for EraseHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EraseHook")
    }
}

#[derive(Debug)]
struct Shared {
    name: &'static str,
    file: File,
    /// File offset of arena offset 0 (a persistent store keeps its header
    /// before it).
    base: u64,
    /// The file mapped read-only (`None` when mapping failed: every read
    /// is a `pread`).
    map: Option<Arc<FileMap>>,
    arena: Mutex<Arena>,
    stats: StoreStats,
    smf: FileStats,
    /// Told the arena offset of each record erased (a persistent store logs
    /// it for its index snapshot, `crate::disk::snapshot`).
    on_erase: std::sync::OnceLock<EraseHook>,
}

impl Shared {
    fn arena(&self) -> std::sync::MutexGuard<'_, Arena> {
        // The arena is consistent after every method; a panic elsewhere
        // while holding the lock leaves nothing half done.
        self.arena.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Copy the arena's counts to the gauges (under the arena lock).
    fn publish(&self, a: &Arena) {
        let c = a.counts();
        self.stats.g_space.store(c.free_bytes, Relaxed);
        self.smf.g_smf.store(c.extents, Relaxed);
        self.smf.g_smf_frag.store(c.small_free, Relaxed);
        self.smf.g_smf_large.store(c.large_free, Relaxed);
    }
}

/// How the kernel is told the file will be read (the fifth `-s file`
/// argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `normal`
    Normal,
    /// `random` (the default)
    Random,
    /// `sequential`
    Sequential,
}

impl Advice {
    /// The advice named `s` as varnishd spells it.
    pub fn parse(s: &str) -> Option<Advice> {
        match s {
            "normal" => Some(Advice::Normal),
            "random" => Some(Advice::Random),
            "sequential" => Some(Advice::Sequential),
            _ => None,
        }
    }
}

/// The `file` stevedore. Clones are handles on the same store.
#[derive(Debug, Clone)]
pub struct FileStore {
    shared: Arc<Shared>,
    size: u64,
    path: String,
}

/// A used extent of a file store; its space returns to the store's
/// allocator when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct Extent(Arc<ExtentInner>);

#[derive(Debug)]
struct ExtentInner {
    store: Arc<Shared>,
    off: u64,
    len: AtomicU64,
    /// It holds the record of a persistent store's object that left the
    /// cache: its first bytes are zeroed before the space goes back to the
    /// allocator, so the record is never found again (see `crate::disk`).
    record: std::sync::atomic::AtomicBool,
}

impl Drop for ExtentInner {
    fn drop(&mut self) {
        if *self.record.get_mut() {
            // One small write to the page cache; a failure leaves a record
            // that recovery rejects when the bytes it covers were reused
            // (its checksum no longer matches).
            let _ = self
                .store
                .file
                .write_all_at(&[0u8; 8], self.store.base + self.off);
            // Logged before the space can be reused.
            if let Some(f) = self.store.on_erase.get() {
                (f.0)(self.off);
            }
        }
        let mut a = self.store.arena();
        // The extent itself, or its part of a run recovery merged.
        a.free_range(self.off, *self.len.get_mut());
        self.store.publish(&a);
    }
}

impl Extent {
    /// Its length in bytes (a multiple of the granularity).
    pub fn len(&self) -> u64 {
        self.0.len.load(Relaxed)
    }

    /// Whether it is empty (never, for a live extent).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The store holding it.
    pub fn store_name(&self) -> &'static str {
        self.0.store.name
    }

    /// Write `data` at `at` bytes into the extent and return the span
    /// holding it. Fails without writing when it does not fit.
    pub fn write(&self, at: u64, data: &[u8]) -> io::Result<FileSpan> {
        let len = data.len() as u64;
        if at.checked_add(len).is_none_or(|end| end > self.len()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{len} bytes at {at} do not fit an extent of {} bytes",
                    self.len()
                ),
            ));
        }
        self.0
            .store
            .file
            .write_all_at(data, self.0.store.base + self.0.off + at)?;
        Ok(FileSpan {
            ext: self.clone(),
            at,
            len,
        })
    }

    /// Its offset in the store's arena.
    pub fn offset(&self) -> u64 {
        self.0.off
    }

    /// Have its first bytes zeroed when it is dropped: it holds the record
    /// of an object that left the cache (or may), which must not be found
    /// again. Extents not so marked keep their bytes when dropped (a process
    /// shutting down leaves every record in place).
    pub fn erase_when_dropped(&self) {
        self.0.record.store(true, Relaxed);
    }

    /// The span of bytes `at..at+len` of it; `None` when that runs past
    /// its end.
    pub fn span(&self, at: u64, len: u64) -> Option<FileSpan> {
        (at.checked_add(len)? <= self.len()).then(|| FileSpan {
            ext: self.clone(),
            at,
            len,
        })
    }

    /// Whether `self` and `other` are the same extent.
    pub fn same(&self, other: &Extent) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Copy the first `len` bytes to the start of `dst` (blocking reads
    /// and writes of at most [`FileSpan::MAX_READ`] bytes each).
    pub fn copy_to(&self, dst: &Extent, len: u64) -> io::Result<()> {
        if len > self.len() || len > dst.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cannot copy {len} bytes from an extent of {} to one of {}",
                    self.len(),
                    dst.len()
                ),
            ));
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(FileSpan::MAX_READ);
            let part = FileSpan {
                ext: self.clone(),
                at: done,
                len: n,
            }
            .read()?;
            dst.write(done, &part)?;
            done += n;
        }
        Ok(())
    }

    /// Keep only the first `used` bytes (rounded up to the granularity);
    /// returns the bytes given back to the store.
    pub fn trim(&self, used: u64) -> u64 {
        let mut a = self.0.store.arena();
        let freed = a.shrink(self.0.off, used);
        self.0.len.fetch_sub(freed, Relaxed);
        self.0.store.publish(&a);
        freed
    }
}

/// Body bytes stored in an extent.
#[derive(Debug, Clone)]
pub struct FileSpan {
    ext: Extent,
    at: u64,
    len: u64,
}

impl FileSpan {
    /// The most one delivery read takes (spans that follow each other in an
    /// extent are read together up to this size).
    pub const MAX_READ: u64 = 1 << 20;

    /// Its length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes `skip..skip+take` of this span (clamped to it).
    pub fn slice(&self, skip: u64, take: u64) -> FileSpan {
        let skip = skip.min(self.len);
        FileSpan {
            ext: self.ext.clone(),
            at: self.at + skip,
            len: take.min(self.len - skip),
        }
    }

    /// `next` appended to this span when it follows it in the same extent
    /// and the whole stays within [`MAX_READ`](Self::MAX_READ).
    pub fn join(&self, next: &FileSpan) -> Option<FileSpan> {
        (Arc::ptr_eq(&self.ext.0, &next.ext.0)
            && self.at + self.len == next.at
            && self.len + next.len <= Self::MAX_READ)
            .then(|| FileSpan {
                ext: self.ext.clone(),
                at: self.at,
                len: self.len + next.len,
            })
    }

    /// The same bytes at the same place in `ext` (after a copy).
    pub fn moved_to(&self, ext: &Extent) -> FileSpan {
        FileSpan {
            ext: ext.clone(),
            at: self.at,
            len: self.len,
        }
    }

    /// The extent holding it.
    pub fn extent(&self) -> &Extent {
        &self.ext
    }

    /// Where it starts in its extent.
    pub fn at(&self) -> u64 {
        self.at
    }

    /// Whether it lies in `ext`.
    pub fn is_in(&self, ext: &Extent) -> bool {
        self.ext.same(ext)
    }

    /// The bytes without reading them, when every page holding them is in
    /// the page cache: a view of the store's mapping that keeps the extent
    /// (so its space is not reused while the bytes are out). `None` when
    /// some page is not in memory (or the file is not mapped): then
    /// [`read`](Self::read) them on a thread that may block.
    pub fn mapped(&self) -> Option<Bytes> {
        let map = self.ext.0.store.map.as_ref()?;
        let off = self.ext.0.store.base + self.ext.0.off + self.at;
        map.slice(off, self.len)?;
        if !map.resident(off, self.len) {
            return None;
        }
        Some(Bytes::from_owner(MappedSpan {
            map: Arc::clone(map),
            _ext: self.ext.clone(),
            off,
            len: self.len,
        }))
    }

    /// Read the bytes back (a blocking `pread`).
    pub fn read(&self) -> io::Result<Bytes> {
        let n = usize::try_from(self.len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "span too large"))?;
        let mut buf = vec![0u8; n];
        self.ext
            .0
            .store
            .file
            .read_exact_at(&mut buf, self.ext.0.store.base + self.ext.0.off + self.at)?;
        Ok(Bytes::from(buf))
    }
}

/// Bytes of a store's mapping handed out for delivery, with the extent
/// holding them (see [`FileSpan::mapped`]).
struct MappedSpan {
    map: Arc<FileMap>,
    _ext: Extent,
    off: u64,
    len: u64,
}

impl AsRef<[u8]> for MappedSpan {
    fn as_ref(&self) -> &[u8] {
        // Checked to lie in the mapping when made; the mapping never shrinks.
        self.map.slice(self.off, self.len).unwrap_or_default()
    }
}

impl FileStore {
    /// A store called `name` over `file`, `size` bytes long (already
    /// sized), allocating in units of `granularity`.
    pub fn new(name: &str, file: File, path: String, size: u64, granularity: u64) -> FileStore {
        FileStore::with_base(name, file, path, 0, size, granularity)
    }

    /// A store over the `size` bytes of `file` that start at offset `base`
    /// (a persistent store keeps its header in front of them).
    pub fn with_base(
        name: &str,
        file: File,
        path: String,
        base: u64,
        size: u64,
        granularity: u64,
    ) -> FileStore {
        let map = FileMap::new(&file, base + size).map(Arc::new);
        let shared = Shared {
            name: Box::leak(name.to_owned().into_boxed_str()),
            file,
            base,
            map,
            arena: Mutex::new(Arena::new(size, granularity)),
            stats: StoreStats::default(),
            smf: FileStats::default(),
            on_erase: std::sync::OnceLock::new(),
        };
        shared.publish(&shared.arena());
        FileStore {
            size,
            shared: Arc::new(shared),
            path,
        }
    }

    /// Open (or create) the backing file as varnishd's `-s file` does and
    /// build the store. `size` is the SIZE argument (`None`: the existing
    /// file's size), `granularity` the allocation unit asked for (raised to
    /// the file system's block size). Errors carry varnishd's messages.
    pub fn open(
        name: &str,
        path: &str,
        size: Option<&str>,
        granularity: u64,
        advice: Advice,
    ) -> Result<FileStore, String> {
        let (file, path) = open_backing(path)?;
        let vfs = rustix::fs::fstatvfs(&file)
            .map_err(|e| format!("(-sfile) \"{path}\": cannot read file system size ({e})"))?;
        let granularity = granularity.max(vfs.f_frsize).max(1);
        let existing = file
            .metadata()
            .map_err(|e| format!("(-sfile) \"{path}\": cannot stat ({e})"))?
            .len();
        let size = match size {
            None if existing != 0 => existing,
            None => return Err("(-sfile) no size specified".into()),
            Some(s) => {
                let l = crate::spec::vnum_bytes(s)
                    .map_err(|e| format!("(-sfile) size \"{s}\": {e}"))?;
                if l < 1024 * 1024 {
                    return Err(format!(
                        "(-sfile) size \"{s}\": too small, did you forget to specify M or G?"
                    ));
                }
                if l > vfs.f_bavail.saturating_mul(vfs.f_frsize) {
                    return Err(format!("(-sfile) size \"{s}\": larger than file system"));
                }
                l
            }
        };
        let size = size - size % granularity;
        file.set_len(size)
            .map_err(|e| format!("(-sfile) allocation error: {e}"))?;
        let adv = match advice {
            Advice::Normal => rustix::fs::Advice::Normal,
            Advice::Random => rustix::fs::Advice::Random,
            Advice::Sequential => rustix::fs::Advice::Sequential,
        };
        // Only a hint: a file system that ignores it changes nothing.
        let _ = rustix::fs::fadvise(&file, 0, None, adv);
        Ok(FileStore::new(name, file, path, size, granularity))
    }

    /// The backing file's name (a directory given to `-s` gets an unlinked
    /// `varnish.XXXXXX` in it).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The allocation unit.
    pub fn granularity(&self) -> u64 {
        self.shared.arena().granularity()
    }

    /// The backing file.
    pub fn file(&self) -> &File {
        &self.shared.file
    }

    /// Whether `ext` is an extent of this store.
    pub fn owns(&self, ext: &Extent) -> bool {
        Arc::ptr_eq(&ext.0.store, &self.shared)
    }

    /// Count space recovery took over as one allocation of `len` bytes.
    fn count_adopted(&self, len: u64) {
        let s = &self.shared.stats;
        s.c_req.fetch_add(1, Relaxed);
        s.g_alloc.fetch_add(1, Relaxed);
        s.c_bytes.fetch_add(len, Relaxed);
        s.g_bytes.fetch_add(len, Relaxed);
    }

    /// Take `off..off+len` of the arena as a used extent, counted as an
    /// allocation (recovery of a persistent store); `None` when that space
    /// is not free or not whole granules.
    pub fn adopt(&self, off: u64, len: u64) -> Option<Extent> {
        let mut a = self.shared.arena();
        if !a.reserve(off, len) {
            return None;
        }
        self.count_adopted(len);
        self.shared.publish(&a);
        drop(a);
        Some(Extent(Arc::new(ExtentInner {
            store: Arc::clone(&self.shared),
            off,
            len: AtomicU64::new(len),
            record: std::sync::atomic::AtomicBool::new(false),
        })))
    }

    /// Mark `off..off+len` used without making an [`Extent`] for it
    /// (recovery of a persistent store fills its compact index this way),
    /// counted as one allocation; false when the space is not free or not
    /// whole granules.
    pub fn reserve(&self, off: u64, len: u64) -> bool {
        let mut a = self.shared.arena();
        if !a.reserve_merged(off, len) {
            return false;
        }
        self.count_adopted(len);
        self.shared.publish(&a);
        true
    }

    /// The [`Extent`] for `off..off+len`, space [`reserve`](Self::reserve)d
    /// earlier: its counts stay as they are (the holder frees them as for
    /// any allocation), and its space returns when it drops.
    pub fn reserved_extent(&self, off: u64, len: u64) -> Extent {
        Extent(Arc::new(ExtentInner {
            store: Arc::clone(&self.shared),
            off,
            len: AtomicU64::new(len),
            record: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Have `hook` told the arena offset of every record an extent marked
    /// with [`Extent::erase_when_dropped`] erases, after the erasure and
    /// before the space is free (once; a second hook is refused).
    pub fn on_erase(&self, hook: impl Fn(u64) + Send + Sync + 'static) -> bool {
        self.shared.on_erase.set(EraseHook(Box::new(hook))).is_ok()
    }

    /// Give back `off..off+len`, space [`reserve`](Self::reserve)d earlier
    /// that no [`Extent`] holds, with its counts (one allocation).
    pub fn release(&self, off: u64, len: u64) {
        let mut a = self.shared.arena();
        let freed = a.free_range(off, len);
        self.shared.publish(&a);
        drop(a);
        if freed > 0 {
            self.free(freed, 1);
        }
    }
}

/// varnishd's `STV_GetFile`: create `path`, or open it if it is a file, or
/// make an anonymous (unlinked) file in it if it is a directory.
fn open_backing(path: &str) -> Result<(File, String), String> {
    let create = |p: &Path| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(p)
    };
    if let Ok(f) = create(Path::new(path)) {
        return Ok((f, path.to_owned()));
    }
    let meta = std::fs::metadata(path)
        .map_err(|_| format!("(-sfile) \"{path}\" does not exist and could not be created"))?;
    let (file, name) = if meta.is_dir() {
        let mut last = None;
        let mut made = None;
        for attempt in 0..64u32 {
            let name = format!("{path}/varnish.{}", temp_suffix(attempt));
            match create(Path::new(&name)) {
                Ok(f) => {
                    made = Some((f, name));
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => {
                    last = Some(e);
                    break;
                }
            }
        }
        let Some((f, name)) = made else {
            let e = last.map_or_else(|| "no free name".to_owned(), |e| e.to_string());
            return Err(format!(
                "(-sfile) \"{path}\" mkstemp({path}/varnish.XXXXXX) failed ({e})"
            ));
        };
        std::fs::remove_file(&name)
            .map_err(|e| format!("(-sfile) \"{path}\": cannot unlink {name} ({e})"))?;
        (f, name)
    } else if meta.is_file() {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| format!("(-sfile) \"{path}\" could not open ({e})"))?;
        (f, path.to_owned())
    } else {
        return Err(format!("(-sfile) \"{path}\" is neither file nor directory"));
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(format!("(-sfile) \"{path}\" was not a file after opening"));
    }
    Ok((file, name))
}

/// Six characters for a temporary name, different per process, call and
/// attempt.
fn temp_suffix(attempt: u32) -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut x = u64::from(std::process::id())
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(u64::from(nanos))
        .wrapping_add(
            CALLS
                .fetch_add(1, Relaxed)
                .wrapping_mul(0x2545_f491_4f6c_dd1d),
        )
        .wrapping_add(u64::from(attempt) << 32);
    (0..6)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize];
            x /= ALPHABET.len() as u64;
            x ^= x << 13;
            c as char
        })
        .collect()
}

impl Stevedore for FileStore {
    fn name(&self) -> &'static str {
        self.shared.name
    }

    fn kind(&self) -> &'static str {
        "file"
    }

    fn limit(&self) -> Option<u64> {
        Some(self.size)
    }

    fn stats(&self) -> &StoreStats {
        &self.shared.stats
    }

    fn file_stats(&self) -> Option<&FileStats> {
        Some(&self.shared.smf)
    }

    fn try_alloc(&self, bytes: u64) -> Result<Allocation, NoSpace> {
        let s = &self.shared.stats;
        let mut a = self.shared.arena();
        s.c_req.fetch_add(1, Relaxed);
        let Some((off, len)) = a.alloc(bytes) else {
            s.c_fail.fetch_add(1, Relaxed);
            return Err(NoSpace {
                store: self.shared.name,
                wanted: bytes,
                available: a.counts().free_bytes,
            });
        };
        s.g_alloc.fetch_add(1, Relaxed);
        s.c_bytes.fetch_add(len, Relaxed);
        s.g_bytes.fetch_add(len, Relaxed);
        self.shared.publish(&a);
        drop(a);
        Ok(Allocation {
            bytes: len,
            extent: Some(Extent(Arc::new(ExtentInner {
                store: Arc::clone(&self.shared),
                off,
                len: AtomicU64::new(len),
                record: std::sync::atomic::AtomicBool::new(false),
            }))),
        })
    }

    fn free(&self, bytes: u64, allocs: u64) {
        // The space itself returns when the extents drop (see `Extent`).
        let s = &self.shared.stats;
        s.g_bytes.fetch_sub(bytes, Relaxed);
        s.g_alloc.fetch_sub(allocs, Relaxed);
        s.c_freed.fetch_add(bytes, Relaxed);
    }

    fn available(&self) -> u64 {
        self.shared.arena().counts().free_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 4096;

    #[test]
    fn allocates_rounded_and_splits_from_the_front() {
        let mut a = Arena::new(100 * G + 17, G);
        assert_eq!(a.counts().free_bytes, 100 * G);
        assert_eq!(a.alloc(1), Some((0, G)));
        assert_eq!(a.alloc(G + 1), Some((G, 2 * G)));
        assert_eq!(a.alloc(0), Some((3 * G, G)));
        let c = a.counts();
        assert_eq!((c.extents, c.small_free, c.large_free), (4, 0, 1));
        assert_eq!(c.free_bytes, 96 * G);
    }

    #[test]
    fn frees_coalesce_both_ways() {
        let mut a = Arena::new(10 * G, G);
        let x: Vec<u64> = (0..10).map(|_| a.alloc(G).unwrap().0).collect();
        assert_eq!(a.alloc(1), None);
        assert_eq!(a.counts().extents, 10);
        // Free 1, 3, then 2: 1..4 becomes one extent.
        assert_eq!(a.free(x[1]), G);
        assert_eq!(a.free(x[3]), G);
        assert_eq!(a.counts().small_free, 2);
        a.free(x[2]);
        let c = a.counts();
        assert_eq!((c.extents, c.small_free, c.free_bytes), (8, 1, 3 * G));
        assert_eq!(a.alloc(3 * G), Some((G, 3 * G)));
        // Free everything: one free extent again.
        for (i, off) in x.iter().enumerate() {
            if !(1..4).contains(&i) {
                a.free(*off);
            }
        }
        a.free(G);
        let c = a.counts();
        assert_eq!((c.extents, c.small_free, c.large_free), (1, 1, 0));
        assert_eq!(c.free_bytes, 10 * G);
        assert_eq!(a.alloc(10 * G), Some((0, 10 * G)));
    }

    #[test]
    fn fragmentation_refuses_what_only_fits_in_total() {
        let mut a = Arena::new(8 * G, G);
        let x: Vec<u64> = (0..8).map(|_| a.alloc(G).unwrap().0).collect();
        for off in x.iter().step_by(2) {
            a.free(*off);
        }
        let c = a.counts();
        assert_eq!((c.free_bytes, c.small_free), (4 * G, 4));
        assert_eq!(a.alloc(2 * G), None, "4 free granules, none adjacent");
        assert_eq!(a.alloc(G), Some((0, G)));
    }

    #[test]
    fn size_classes_take_exact_fits_before_splitting_large() {
        let mut a = Arena::new(200 * G, G);
        let small = a.alloc(2 * G).unwrap();
        let _pin = a.alloc(G).unwrap();
        a.free(small.0);
        // A 2-granule request takes the freed hole, not the big tail.
        assert_eq!(a.alloc(2 * G), Some(small));
        // Large requests first-fit in the last class.
        let big = a.alloc(40 * G).unwrap();
        assert_eq!(big.0, 3 * G);
    }

    #[test]
    fn shrink_frees_the_tail_and_merges_it() {
        let mut a = Arena::new(64 * G, G);
        let (off, len) = a.alloc(40 * G).unwrap();
        assert_eq!(len, 40 * G);
        assert_eq!(a.shrink(off, 5 * G + 1), 34 * G);
        let c = a.counts();
        assert_eq!((c.extents, c.free_bytes), (2, 58 * G));
        assert_eq!(a.shrink(off, 6 * G), 0, "cannot grow");
        assert_eq!(a.shrink(off, 0), 5 * G, "keeps one granule");
        assert_eq!(a.free(off), G);
        assert_eq!(a.counts().extents, 1);
    }

    #[test]
    fn hostile_sizes_and_offsets_are_refused() {
        let mut a = Arena::new(4 * G, G);
        assert_eq!(a.alloc(u64::MAX), None);
        assert_eq!(a.alloc(u64::MAX - G), None);
        assert_eq!(a.alloc(5 * G), None);
        assert_eq!(a.free(12345), 0);
        assert_eq!(a.shrink(12345, 1), 0);
        let (off, _) = a.alloc(G).unwrap();
        assert_eq!(a.free(off), G);
        assert_eq!(a.free(off), 0, "double free is a no-op");
        let mut empty = Arena::new(G - 1, G);
        assert_eq!(empty.alloc(1), None);
        let mut odd = Arena::new(1000, 3);
        assert_eq!(odd.alloc(4), Some((0, 6)));
    }

    #[test]
    fn metadata_stays_bounded_under_churn() {
        let mut a = Arena::new(256 * G, G);
        let mut live: Vec<u64> = Vec::new();
        let mut x: u64 = 12345;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(3) && !live.is_empty() {
                let i = (x as usize / 3) % live.len();
                a.free(live.swap_remove(i));
            } else if let Some((off, _)) = a.alloc(x % (40 * G) + 1) {
                live.push(off);
            }
            assert!(a.order.len() <= 256);
            let c = a.counts();
            assert_eq!(c.extents as usize, a.order.len());
        }
        for off in live {
            a.free(off);
        }
        assert_eq!(a.counts().extents, 1);
        assert_eq!(a.counts().free_bytes, 256 * G);
    }

    fn store(size: u64) -> (tempdir::Dir, FileStore) {
        let d = tempdir::Dir::new();
        let s = FileStore::open("f", d.path(), Some(&size.to_string()), 1, Advice::Random).unwrap();
        (d, s)
    }

    /// A scratch directory removed on drop.
    mod tempdir {
        pub struct Dir(String);
        impl Dir {
            pub fn new() -> Dir {
                let p = std::env::temp_dir().join(format!(
                    "lacquer-smf-{}-{}",
                    std::process::id(),
                    super::temp_suffix(0)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p.to_string_lossy().into_owned())
            }
            pub fn path(&self) -> &str {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn store_writes_reads_and_returns_space() {
        let (d, s) = store(1 << 20);
        assert!(s.path().starts_with(&format!("{}/varnish.", d.path())));
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            0,
            "the file in a directory is anonymous"
        );
        let g = s.granularity();
        let st = s.stats();
        assert_eq!(st.g_space.load(Relaxed), 1 << 20);
        let a = s.try_alloc(10).unwrap();
        assert_eq!(a.bytes, g);
        let ext = a.extent.unwrap();
        let span = ext.write(3, b"hello").unwrap();
        assert!(ext.write(g - 2, b"abc").is_err());
        assert_eq!(&span.read().unwrap()[..], b"hello");
        assert_eq!(&span.slice(1, 3).read().unwrap()[..], b"ell");
        assert_eq!(st.c_bytes.load(Relaxed), g);
        assert_eq!(st.g_space.load(Relaxed), (1 << 20) - g);
        s.free(g, 1);
        assert_eq!(st.g_bytes.load(Relaxed), 0);
        // Space comes back only when the last holder lets go.
        assert_eq!(s.available(), (1 << 20) - g);
        drop(ext);
        assert_eq!(s.available(), (1 << 20) - g, "the span still holds it");
        drop(span);
        assert_eq!(s.available(), 1 << 20);
        assert_eq!(s.file_stats().unwrap().g_smf.load(Relaxed), 1);
        let e = s.try_alloc(2 << 20).unwrap_err();
        assert_eq!(e.available, 1 << 20);
        assert_eq!(st.c_fail.load(Relaxed), 1);
    }

    #[test]
    fn resident_spans_are_served_from_the_mapping_and_hold_their_space() {
        let (_d, s) = store(1 << 20);
        let ext = s.try_alloc(300_000).unwrap().extent.unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let span = ext.write(0, &data).unwrap();
        // Just written: in the page cache, so the mapping serves it, with
        // the same bytes a pread gives, at any offset.
        let mapped = span.mapped().expect("written pages are resident");
        assert_eq!(&mapped[..], &data[..]);
        assert_eq!(&mapped[..], &span.read().unwrap()[..]);
        let part = span.slice(4097, 70_000).mapped().unwrap();
        assert_eq!(&part[..], &data[4097..74_097]);
        // The mapped bytes keep the extent: its space is not reused while
        // they are out, even once the object and the span are gone.
        let before = s.available();
        drop((ext, span));
        assert_eq!(s.available(), before);
        drop(mapped);
        assert_eq!(s.available(), before);
        drop(part);
        assert_eq!(s.available(), 1 << 20);
        // Pages dropped from the page cache are not served from the mapping
        // (a fault there could wait for the disk on an async worker). A
        // fresh store, so no page of it is mapped yet (mapped pages stay).
        let (_d2, s) = store(1 << 20);
        let ext = s.try_alloc(1 << 16).unwrap().extent.unwrap();
        let span = ext.write(0, &data[..1 << 16]).unwrap();
        s.file().sync_all().unwrap();
        let at = s.shared.base + ext.0.off;
        let len = std::num::NonZeroU64::new(1 << 16);
        rustix::fs::fadvise(s.file(), at, len, rustix::fs::Advice::DontNeed).unwrap();
        // On a file system that keeps every page in memory (tmpfs) they
        // stay resident and the mapping may serve them.
        if span.mapped().is_none() {
            assert_eq!(&span.read().unwrap()[..], &data[..1 << 16]);
        }
        let back = span.mapped().expect("the pread brought the pages back");
        assert_eq!(&back[..], &data[..1 << 16]);
    }

    #[test]
    fn open_follows_varnishd_rules() {
        let d = tempdir::Dir::new();
        let f = format!("{}/backing", d.path());
        let e = FileStore::open("s0", &f, None, 1, Advice::Random).unwrap_err();
        assert_eq!(e, "(-sfile) no size specified");
        let e = FileStore::open("s0", &f, Some("10k"), 1, Advice::Random).unwrap_err();
        assert_eq!(
            e,
            "(-sfile) size \"10k\": too small, did you forget to specify M or G?"
        );
        let e = FileStore::open("s0", &f, Some("banana"), 1, Advice::Random).unwrap_err();
        assert_eq!(e, "(-sfile) size \"banana\": Invalid number");
        let e = FileStore::open("s0", &f, Some("999999999T"), 1, Advice::Random).unwrap_err();
        assert_eq!(e, "(-sfile) size \"999999999T\": larger than file system");
        let s = FileStore::open("s0", &f, Some("2m"), 1, Advice::Sequential).unwrap();
        assert_eq!(std::fs::metadata(&f).unwrap().len(), 2 << 20);
        drop(s);
        // An existing file keeps its size when none is given.
        let s = FileStore::open("s0", &f, None, 1, Advice::Normal).unwrap();
        assert_eq!(s.limit(), Some(2 << 20));
        let e =
            FileStore::open("s0", "/nonexistent-dir/x", Some("1m"), 1, Advice::Random).unwrap_err();
        assert_eq!(
            e,
            "(-sfile) \"/nonexistent-dir/x\" does not exist and could not be created"
        );
        let e = FileStore::open("s0", "/dev/null", Some("1m"), 1, Advice::Random).unwrap_err();
        assert_eq!(e, "(-sfile) \"/dev/null\" is neither file nor directory");
    }
}
