//! The shared-memory log ring (`<workdir>/_.vsm_child/_.vsl`): its file layout, the
//! writer side (`Vsl`) and the reader side (`VslReader`).
//!
//! # Layout
//! The file is an array of little-endian 64-bit words: a header, then a ring
//! of `nwords` data words. Writers reserve space with one atomic `fetch_add`
//! on a 64-bit *head* position that only ever grows; position `p` lives in
//! ring slot `p % nwords`. A record is
//!
//! * word 0: `COMMITTED | tag << 48 | len << 32 | (p as u32)`, stored last
//!   with release ordering, so a reader that sees it sees the whole record;
//! * bytes 8..12: the VXID with its client/backend marker bits (32 bits);
//! * from byte 12: the payload, zero-padded to a whole word
//!   ([`HEADER_BYTES`] + len bytes in all, rounded up to words). Starting
//!   the payload in the VXID's word rather than the next keeps the log
//!   (and the memory its pages take) a tenth smaller.
//!
//! Writers publish one batch at a time (a process-local lock covers the
//! reservation and the copy, so no writer can be lapped while copying and
//! scribble over newer records; a batch is a whole transaction's records,
//! so the lock is taken once per transaction, not per record). One process
//! writes a given log.
//!
//! Readers follow records by position. A reader at `p` knows its copy was not
//! overwritten if, after copying, the head has not passed `p + nwords` (a
//! seqlock-style check: writers fence between reserving and writing). If it
//! has, the reader reports an overrun and resynchronises on a *segment
//! start*: the ring is cut into `SEGMENTS` segments and writers record the
//! position of the first record starting in each segment, so a reader can
//! find a record boundary without scanning. The head itself is always a
//! record boundary, which is where "tail from now" readers start.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex};

use crate::record::{Record, Vxid};
use crate::shm::{self, ShmReader, ShmWriter, Words};
use crate::tags::{Tag, TagSet};

const MAGIC: u64 = u64::from_le_bytes(*b"LQVSL\0\0\x01");
/// 2: the payload starts right after a 32-bit VXID (1 had a VXID word).
const VERSION: u64 = 2;
const H_MAGIC: usize = 0;
const H_VERSION: usize = 1;
const H_NWORDS: usize = 2;
const H_SEGSIZE: usize = 3;
const H_EPOCH: usize = 4;
const H_HEAD: usize = 8;
const H_SEG: usize = 16;
/// Number of segments the ring is cut into for resynchronisation.
pub const SEGMENTS: usize = 8;
const DATA: usize = 32;

const COMMITTED: u64 = 1 << 63;
/// Hard upper bound of `vsl_reclen` (Varnish's limit too).
pub const MAX_RECLEN: usize = 4084;
/// Smallest accepted `vsl_space`.
pub const MIN_SPACE: usize = 64 * 1024;
/// Varnish's default `vsl_space` (80 MB).
pub const DEFAULT_SPACE: usize = 80 * 1024 * 1024;
/// Varnish's default `vsl_reclen`.
pub const DEFAULT_RECLEN: usize = 255;
/// Varnish's default `vsl_buffer`.
pub const DEFAULT_BUFFER: usize = 16 * 1024;

/// File name of the log inside the cache's shared-memory directory.
pub const VSL_FILE: &str = "_.vsl";

/// Path of the log file for a working directory: in the cache's directory
/// (`_.vsm_child/`), whose index lists it as the `Log` segment.
pub fn vsl_path(workdir: &Path) -> PathBuf {
    workdir.join(crate::vsm::CHILD_DIR).join(VSL_FILE)
}

/// Errors opening or creating the log.
#[derive(Debug, thiserror::Error)]
pub enum VslError {
    /// File system or mapping failure.
    #[error("{path}: {source}")]
    Io {
        /// File concerned.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not a log of this format.
    #[error("{path}: {what}; is the daemon running with this working directory (-n)?")]
    Format {
        /// File concerned.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A configuration value out of range.
    #[error("{0}")]
    Config(String),
}

/// Log configuration (the `vsl_*` parameters).
#[derive(Clone, Debug)]
pub struct VslConfig {
    /// Ring size in bytes (`vsl_space`), at least [`MIN_SPACE`].
    pub space: usize,
    /// Longest record payload (`vsl_reclen`), at most [`MAX_RECLEN`].
    pub reclen: usize,
    /// Bytes a [`crate::VslBuf`] collects before flushing (`vsl_buffer`).
    pub buffer: usize,
    /// Tags not logged (`vsl_mask`).
    pub mask: TagSet,
}

impl Default for VslConfig {
    fn default() -> Self {
        VslConfig {
            space: DEFAULT_SPACE,
            reclen: DEFAULT_RECLEN,
            buffer: DEFAULT_BUFFER,
            mask: TagSet::default_mask(),
        }
    }
}

/// A record's header: its first word and the 32-bit VXID.
pub(crate) const HEADER_BYTES: usize = 12;

#[inline]
fn words_for(len: usize) -> usize {
    (HEADER_BYTES + len).div_ceil(8)
}

/// Encodes a record's first word without position or commit bit.
#[inline]
pub(crate) fn header_template(tag: Tag, len: usize) -> u64 {
    (u64::from(tag as u8) << 48) | ((len as u64) << 32)
}

/// Length of the record whose template or header word is `w0`, in words.
#[inline]
pub(crate) fn record_words(w0: u64) -> usize {
    words_for(((w0 >> 32) & 0xffff) as usize)
}

/// The writer side of the log: owned by the daemon, shared by all threads.
pub struct Vsl {
    shm: ShmWriter,
    path: PathBuf,
    nwords: u64,
    segsize: u64,
    mask: [AtomicU64; 2],
    reclen: AtomicUsize,
    buffer: AtomicUsize,
    /// Every record is published as it is logged (`debug=+syncvsl`).
    sync: AtomicBool,
    /// Serialises reservation and copy: a writer preempted between the two
    /// could otherwise be lapped and scribble over newer records.
    write_lock: Mutex<()>,
    records: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    /// The thread that faults the ring in ahead of the writers on their
    /// first lap (see [`Vsl::populate_ahead`]), woken as they move on.
    ahead: std::sync::OnceLock<std::thread::Thread>,
}

/// How far ahead of the writers' first lap the ring is faulted in.
const AHEAD_BYTES: usize = 8 << 20;
/// Faulted in per call, and the writers' head wakes the thread each time
/// it crosses a multiple of this.
const AHEAD_STEP: usize = 2 << 20;

/// Writer activity, for the `MAIN.shm_*` counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VslStats {
    /// Records written (`shm_records`).
    pub records: u64,
    /// Batches written (`shm_writes`).
    pub writes: u64,
    /// Buffers flushed early because they were full (`shm_flushes`).
    pub flushes: u64,
    /// Times the ring wrapped (`shm_cycles`).
    pub cycles: u64,
}

impl fmt::Debug for Vsl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vsl")
            .field("path", &self.path)
            .field("nwords", &self.nwords)
            .finish_non_exhaustive()
    }
}

impl Vsl {
    /// Creates (or replaces) the log file at `path` and returns the writer.
    pub fn create(path: &Path, cfg: &VslConfig) -> Result<Arc<Vsl>, VslError> {
        if cfg.space < MIN_SPACE {
            return Err(VslError::Config(format!(
                "vsl_space {} is below the minimum of {MIN_SPACE} bytes",
                cfg.space
            )));
        }
        if cfg.space > (1usize << 32) {
            return Err(VslError::Config(format!(
                "vsl_space {} is above the maximum of 4G",
                cfg.space
            )));
        }
        check_reclen(cfg.reclen)?;
        let nwords = (cfg.space / 8) as u64;
        let segsize = nwords / SEGMENTS as u64;
        let epoch = epoch_now();
        let bytes = (DATA + nwords as usize) * 8;
        let shm = ShmWriter::create(path, bytes, |w| {
            w.at(H_VERSION).store(VERSION, Ordering::Relaxed);
            w.at(H_NWORDS).store(nwords, Ordering::Relaxed);
            w.at(H_SEGSIZE).store(segsize, Ordering::Relaxed);
            w.at(H_EPOCH).store(epoch, Ordering::Relaxed);
            for k in 0..SEGMENTS {
                w.at(H_SEG + k).store(0, Ordering::Relaxed);
            }
            w.at(H_MAGIC).store(MAGIC, Ordering::Release);
        })
        .map_err(|source| VslError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bits = cfg.mask.to_bits();
        let vsl = Arc::new(Vsl {
            shm,
            path: path.to_path_buf(),
            nwords,
            segsize,
            mask: [AtomicU64::new(bits[0]), AtomicU64::new(bits[1])],
            reclen: AtomicUsize::new(cfg.reclen),
            buffer: AtomicUsize::new(cfg.buffer.max(64)),
            sync: AtomicBool::new(false),
            write_lock: Mutex::new(()),
            records: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            ahead: std::sync::OnceLock::new(),
        });
        Vsl::populate_ahead(&vsl);
        Ok(vsl)
    }

    /// Faults the ring's pages in on a thread of its own, [`AHEAD_BYTES`]
    /// ahead of the writers, until their first lap is done. The file is
    /// created as a hole, so without this each 4 KiB page's first write
    /// takes a page fault that allocates and zeroes it (and, with the work
    /// directory on a disk filesystem, reads and allocates a block) on the
    /// request path: 5 % of a disk hit's CPU in lacquerd's first seconds
    /// under load (issue 18, `perf`). Staying just ahead, not faulting the
    /// whole ring in at once, keeps the daemon's resident memory growing
    /// with the log as before. The contents do not change, so writers run
    /// meanwhile; a log dropped early stops it. Where the kernel cannot
    /// (before Linux 5.14) or no thread starts, pages fault in on first
    /// write as before.
    fn populate_ahead(vsl: &Arc<Vsl>) {
        let weak = Arc::downgrade(vsl);
        let spawned = std::thread::Builder::new()
            .name("vsl-populate".into())
            .spawn(move || {
                let mut done = 0;
                while let Some(vsl) = weak.upgrade() {
                    let len = vsl.shm.len();
                    let head = vsl.head().min(vsl.nwords) as usize;
                    let want = ((DATA + head) * 8).saturating_add(AHEAD_BYTES).min(len);
                    while done < want {
                        if vsl.shm.populate(done, AHEAD_STEP).is_err() {
                            return;
                        }
                        done += AHEAD_STEP;
                    }
                    if done >= len {
                        return;
                    }
                    drop(vsl);
                    // Woken by a writer moving on (`commit`); the timeout
                    // only notices a log that was dropped.
                    std::thread::park_timeout(std::time::Duration::from_secs(1));
                }
            });
        if let Ok(t) = spawned {
            let _ = vsl.ahead.set(t.thread().clone());
        }
    }

    /// The file this log writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True if records with `tag` are currently masked off (`vsl_mask`).
    #[inline]
    pub fn is_masked(&self, tag: Tag) -> bool {
        let n = tag as usize;
        self.mask[n / 64].load(Ordering::Relaxed) & (1 << (n % 64)) != 0
    }

    /// Replaces the mask (runtime `param.set vsl_mask`).
    pub fn set_mask(&self, mask: TagSet) {
        let bits = mask.to_bits();
        self.mask[0].store(bits[0], Ordering::Relaxed);
        self.mask[1].store(bits[1], Ordering::Relaxed);
    }

    /// The current mask.
    pub fn mask(&self) -> TagSet {
        TagSet::from_bits([
            self.mask[0].load(Ordering::Relaxed),
            self.mask[1].load(Ordering::Relaxed),
        ])
    }

    /// Changes `vsl_reclen` at runtime.
    pub fn set_reclen(&self, reclen: usize) -> Result<(), VslError> {
        check_reclen(reclen)?;
        self.reclen.store(reclen, Ordering::Relaxed);
        Ok(())
    }

    /// Current `vsl_reclen`.
    #[inline]
    pub fn reclen(&self) -> usize {
        self.reclen.load(Ordering::Relaxed)
    }

    /// Longest payload stored for `tag`: `vsl_reclen` counts the terminating
    /// NUL Varnish stores after text, so text payloads keep `vsl_reclen - 1`
    /// bytes (what varnishlog shows); binary ones keep `vsl_reclen`.
    #[inline]
    pub fn max_payload(&self, tag: Tag) -> usize {
        let r = self.reclen();
        if tag.flags() & crate::tags::F_BINARY != 0 {
            r
        } else {
            r - 1
        }
    }

    /// Changes `vsl_buffer` at runtime (takes effect for new buffers).
    pub fn set_buffer(&self, bytes: usize) {
        self.buffer.store(bytes.max(64), Ordering::Relaxed);
    }

    /// Makes every [`crate::VslBuf`] publish each record at once instead of
    /// when its transaction ends (varnishd's `debug=+syncvsl`), so readers
    /// see a transaction that is still running.
    pub fn set_sync(&self, sync: bool) {
        self.sync.store(sync, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn is_sync(&self) -> bool {
        self.sync.load(Ordering::Relaxed)
    }

    /// Words a [`crate::VslBuf`] may hold before it must flush: `vsl_buffer`,
    /// but never more than a quarter of the ring.
    pub(crate) fn buffer_words(&self) -> usize {
        (self.buffer.load(Ordering::Relaxed) / 8).min(self.nwords as usize / 4)
    }

    /// Total words ever reserved (grows forever; `/ ring words` = laps).
    pub fn head(&self) -> u64 {
        self.shm.words().at(H_HEAD).load(Ordering::Relaxed)
    }

    /// How many times the ring has wrapped (Varnish's `shm_cycles`).
    pub fn cycles(&self) -> u64 {
        self.head() / self.nwords
    }

    /// Writer activity so far.
    pub fn stats(&self) -> VslStats {
        VslStats {
            records: self.records.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            cycles: self.cycles(),
        }
    }

    /// Counts a buffer flushed because it was full.
    pub(crate) fn note_overflow_flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes one record right away, outside any transaction buffer. For
    /// session-less records such as `CLI` or `Backend_health`.
    pub fn log_immediate(&self, tag: Tag, vxid: Vxid, args: fmt::Arguments<'_>) {
        if self.is_masked(tag) {
            return;
        }
        match args.as_str() {
            Some(s) => self.log_immediate_bytes(tag, vxid, s.as_bytes()),
            None => {
                let mut s = Vec::new();
                crate::buf::format_truncated(&mut s, self.max_payload(tag), args);
                self.log_immediate_bytes(tag, vxid, &s);
            }
        }
    }

    /// [`Vsl::log_immediate`] with a byte payload.
    pub fn log_immediate_bytes(&self, tag: Tag, vxid: Vxid, data: &[u8]) {
        if self.is_masked(tag) {
            return;
        }
        let data = &data[..data.len().min(self.max_payload(tag))];
        let mut bytes = Vec::with_capacity(words_for(data.len()) * 8);
        encode_record(&mut bytes, tag, vxid, data);
        self.commit(&bytes);
    }

    /// Publishes a batch of encoded records (see `encode_record`): a byte
    /// buffer holding little-endian words.
    pub(crate) fn commit(&self, batch: &[u8]) {
        debug_assert!(batch.len().is_multiple_of(8));
        if batch.is_empty() {
            return;
        }
        let nw = batch.len() / 8;
        // Poisoning only means another writer panicked mid-copy; the ring
        // protocol still holds (readers see that record as not committed).
        let _guard = self.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        let w = self.shm.words();
        let n = nw as u64;
        let q = w.at(H_HEAD).fetch_add(n, Ordering::Relaxed);
        // Readers that see any word stored below also see the reservation
        // above (pairs with the acquire fence in `VslReader::next_event`).
        fence(Ordering::Release);
        let end = q + n;
        let step = (AHEAD_STEP / 8) as u64;
        if q < self.nwords
            && q / step != end / step
            && let Some(t) = self.ahead.get()
        {
            t.unpark();
        }
        let ring = self.nwords as usize;
        // A batch is at most a buffer (a quarter of the ring at most, see
        // `buffer_words`) plus one record, so it never laps itself.
        assert!(nw <= ring, "log batch of {nw} words exceeds the ring");
        let at0 = (q % self.nwords) as usize;
        // 1. The whole batch, in at most two runs (the ring may wrap). Record
        //    headers go in without the COMMITTED bit, so readers treat these
        //    records as not yet written.
        let first_run = nw.min(ring - at0);
        store_run(w.run(DATA + at0, first_run), &batch[..first_run * 8]);
        store_run(w.run(DATA, nw - first_run), &batch[first_run * 8..]);
        // 2. Publish each header with release ordering: a reader that sees a
        //    committed header sees its record's body, stored above.
        let mut next_seg = q.div_ceil(self.segsize);
        // Where segment `next_seg` starts.
        let mut next_bound = next_seg * self.segsize;
        let mut i = 0;
        let mut nrec = 0;
        let mut at = at0;
        while i < nw {
            nrec += 1;
            let p = q + i as u64;
            let w0 = word_at(batch, i);
            w.at(DATA + at)
                .store(w0 | COMMITTED | (p & 0xffff_ffff), Ordering::Release);
            let rw = record_words(w0);
            at += rw;
            if at >= ring {
                at -= ring;
            }
            while next_bound <= p {
                self.mark_segment(&w, next_seg, p);
                next_seg += 1;
                next_bound += self.segsize;
            }
            i += rw;
        }
        while next_bound <= end {
            self.mark_segment(&w, next_seg, end);
            next_seg += 1;
            next_bound += self.segsize;
        }
        self.records.fetch_add(nrec, Ordering::Relaxed);
        self.writes.fetch_add(1, Ordering::Relaxed);
    }

    fn mark_segment(&self, w: &Words<'_>, seg: u64, start: u64) {
        w.at(H_SEG + (seg % SEGMENTS as u64) as usize)
            .fetch_max(start, Ordering::Release);
    }
}

/// Word `i` of an encoded batch.
#[inline]
fn word_at(batch: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&batch[i * 8..i * 8 + 8]);
    u64::from_le_bytes(b)
}

/// Stores the little-endian words of `src` into `dst` (equal lengths).
#[inline]
fn store_run(dst: &[AtomicU64], src: &[u8]) {
    debug_assert_eq!(dst.len() * 8, src.len());
    for (d, s) in dst.iter().zip(src.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(s);
        d.store(u64::from_le_bytes(b), Ordering::Relaxed);
    }
}

fn check_reclen(reclen: usize) -> Result<(), VslError> {
    if !(16..=MAX_RECLEN).contains(&reclen) {
        return Err(VslError::Config(format!(
            "vsl_reclen {reclen} out of range: must be between 16 and {MAX_RECLEN} bytes"
        )));
    }
    Ok(())
}

fn epoch_now() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ u64::from(std::process::id()) << 48
}

/// Appends one encoded record to a byte batch: header template word, VXID,
/// payload zero-padded to whole words (all little-endian).
pub(crate) fn encode_record(out: &mut Vec<u8>, tag: Tag, vxid: Vxid, data: &[u8]) {
    out.extend_from_slice(&header_template(tag, data.len()).to_le_bytes());
    out.extend_from_slice(&vxid.raw().to_le_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(8), 0);
}

/// Where a new reader starts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StartAt {
    /// At the oldest record still in the ring (varnishlog `-d`).
    Oldest,
    /// At the current end: only records written from now on.
    Now,
}

/// What [`VslReader::next_event`] found.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ReadEvent {
    /// The next record.
    Record(Record),
    /// The writer overtook this reader: records were lost. The reader has
    /// resynchronised and continues after the gap.
    Overrun {
        /// Number of 8-byte log words skipped.
        skipped_words: u64,
    },
    /// Nothing new yet; call again later.
    Idle,
}

/// A reader of the log, usually in another process.
pub struct VslReader {
    shm: ShmReader,
    path: PathBuf,
    nwords: u64,
    segsize: u64,
    epoch: u64,
    pos: u64,
}

impl fmt::Debug for VslReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VslReader")
            .field("path", &self.path)
            .field("pos", &self.pos)
            .finish_non_exhaustive()
    }
}

impl VslReader {
    /// Opens the log file at `path` (see [`vsl_path`]).
    pub fn open(path: &Path, start: StartAt) -> Result<VslReader, VslError> {
        let shm = ShmReader::open(path).map_err(|source| VslError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |what: &str| VslError::Format {
            path: path.to_path_buf(),
            what: what.to_string(),
        };
        let w = shm.words();
        if w.len() < DATA {
            return Err(bad("file too small for a log header"));
        }
        if w.load(H_MAGIC, Ordering::Acquire) != MAGIC {
            return Err(bad("not a Lacquer log file (bad magic)"));
        }
        if w.load(H_VERSION, Ordering::Relaxed) != VERSION {
            return Err(bad("log format version not supported by this tool"));
        }
        let nwords = w.load(H_NWORDS, Ordering::Relaxed);
        let segsize = w.load(H_SEGSIZE, Ordering::Relaxed);
        if nwords < (MIN_SPACE / 8) as u64
            || nwords.checked_add(DATA as u64) != Some(w.len() as u64)
            || segsize != nwords / SEGMENTS as u64
        {
            return Err(bad("inconsistent log header sizes"));
        }
        let epoch = w.load(H_EPOCH, Ordering::Relaxed);
        let mut r = VslReader {
            shm,
            path: path.to_path_buf(),
            nwords,
            segsize,
            epoch,
            pos: 0,
        };
        r.pos = match start {
            StartAt::Now => r.head(),
            StartAt::Oldest => r.oldest_start(0),
        };
        Ok(r)
    }

    /// Identifies the writer's incarnation (changes when the daemon
    /// recreates the log).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// True if the daemon replaced the log file since this reader opened it;
    /// reopen to follow the new one.
    pub fn is_replaced(&self) -> bool {
        self.shm.is_replaced(&self.path)
    }

    /// The current writer head position (in words).
    pub fn head(&self) -> u64 {
        self.shm.words().load(H_HEAD, Ordering::Acquire)
    }

    /// This reader's position (in words).
    pub fn position(&self) -> u64 {
        self.pos
    }

    #[inline]
    fn slot(&self, p: u64) -> usize {
        DATA + (p % self.nwords) as usize
    }

    /// The oldest segment start that is still entirely in the ring, skipping
    /// `margin` segments (to keep clear of the writer after an overrun).
    fn oldest_start(&self, margin: u64) -> u64 {
        let w = self.shm.words();
        let h = self.head();
        if h <= self.nwords && margin == 0 {
            return 0;
        }
        let low = h.saturating_sub(self.nwords);
        let first = low.div_ceil(self.segsize) + margin;
        for k in first..=h / self.segsize {
            let b = k * self.segsize;
            let s = w.load(H_SEG + (k % SEGMENTS as u64) as usize, Ordering::Acquire);
            if s >= b && s < b.saturating_add(self.segsize) && s >= low && s <= h {
                return s;
            }
        }
        h
    }

    /// Reads the next record. Never blocks: returns [`ReadEvent::Idle`] when
    /// the writer has nothing new (or is still writing the next record).
    pub fn next_event(&mut self) -> ReadEvent {
        let w = self.shm.words();
        let h = w.load(H_HEAD, Ordering::Acquire);
        if self.pos >= h {
            return ReadEvent::Idle;
        }
        if h - self.pos > self.nwords {
            return self.overrun();
        }
        let p = self.pos;
        let w0 = w.load(self.slot(p), Ordering::Acquire);
        if w0 & COMMITTED == 0 || (w0 & 0xffff_ffff) != (p & 0xffff_ffff) {
            // Reserved but not yet committed by its writer.
            return ReadEvent::Idle;
        }
        let len = ((w0 >> 32) & 0xffff) as usize;
        let tag = Tag::from_u8(((w0 >> 48) & 0x7f) as u8);
        let rw = words_for(len) as u64;
        let w1 = w.load(self.slot(p.wrapping_add(1)), Ordering::Relaxed);
        let vxid = w1 as u32;
        // The payload's first bytes share the VXID's word.
        let mut data = Vec::with_capacity(len);
        let w1 = w1.to_le_bytes();
        let first = &w1[HEADER_BYTES - 8..];
        let head = len.min(first.len());
        data.extend_from_slice(&first[..head]);
        shm::unpack_bytes(
            len - head,
            |i| w.load(self.slot(p.wrapping_add(2 + i as u64)), Ordering::Relaxed),
            &mut data,
        );
        // Pairs with the release fence in `Vsl::commit`: if any word we
        // copied came from a newer lap, its reservation is visible now.
        fence(Ordering::Acquire);
        if w.load(H_HEAD, Ordering::Relaxed) > p.saturating_add(self.nwords) {
            return self.overrun();
        }
        self.pos = p.saturating_add(rw);
        match tag {
            Some(tag) if len <= MAX_RECLEN => ReadEvent::Record(Record {
                tag,
                vxid: Vxid::from_raw(vxid),
                data,
            }),
            // A committed record we cannot decode: the file is corrupt (or
            // from a newer writer). Resynchronise rather than guess.
            _ => self.overrun(),
        }
    }

    fn overrun(&mut self) -> ReadEvent {
        let old = self.pos;
        let new = self.oldest_start(1).max(old);
        self.pos = new;
        ReadEvent::Overrun {
            skipped_words: new - old,
        }
    }

    /// Reads everything currently available (stops at the first
    /// [`ReadEvent::Idle`]), for `-d` style dumps and tests.
    pub fn drain(&mut self) -> Vec<ReadEvent> {
        let mut out = Vec::new();
        loop {
            match self.next_event() {
                ReadEvent::Idle => return out,
                ev => out.push(ev),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Side;

    pub(crate) fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lq-vsl-{}-{}", name, std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn small() -> VslConfig {
        VslConfig {
            space: MIN_SPACE,
            ..VslConfig::default()
        }
    }

    fn records(evs: Vec<ReadEvent>) -> Vec<Record> {
        evs.into_iter()
            .filter_map(|e| match e {
                ReadEvent::Record(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_ring_is_faulted_in_ahead_of_the_writers() {
        use std::os::unix::fs::MetadataExt;
        let d = tmpdir("populate");
        let path = vsl_path(&d);
        let cfg = VslConfig {
            space: 32 << 20,
            ..VslConfig::default()
        };
        let vsl = Vsl::create(&path, &cfg).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        let held = || std::fs::metadata(&path).unwrap().blocks() * 512;
        let wait_for = |bytes: u64| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while held() < bytes {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{} of the {bytes} bytes wanted allocated after 20 s",
                    held()
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        };
        // Created as a hole; the first stretch is faulted in without a
        // write, and no more than it.
        wait_for(AHEAD_BYTES as u64);
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            held() < len / 2,
            "{} of {len} bytes allocated at once",
            held()
        );
        let mut r = VslReader::open(&path, StartAt::Oldest).unwrap();
        assert!(records(r.drain()).is_empty(), "faulting in wrote nothing");
        // Writers move 12 MiB on: the thread stays ahead of them.
        let payload = "x".repeat(240);
        for _ in 0..100_000 {
            if vsl.head() * 8 >= 12 << 20 {
                break;
            }
            vsl.log_immediate(Tag::ReqURL, Vxid::client(1), format_args!("{payload}"));
        }
        assert!(vsl.head() * 8 >= 12 << 20, "the writes moved the head");
        wait_for((vsl.head() * 8 + AHEAD_BYTES as u64).min(len));
        drop(vsl);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn write_and_read_back() {
        let d = tmpdir("rw");
        let path = vsl_path(&d);
        let vsl = Vsl::create(&path, &small()).unwrap();
        vsl.log_immediate(Tag::CLI, Vxid::NONE, format_args!("Rd {}", "ping"));
        vsl.log_immediate_bytes(Tag::ReqURL, Vxid::client(1001), b"/foo");
        let mut r = VslReader::open(&path, StartAt::Oldest).unwrap();
        let recs = records(r.drain());
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].tag, Tag::CLI);
        assert_eq!(recs[0].data, b"Rd ping");
        assert_eq!(recs[1].vxid.side(), Side::Client);
        assert_eq!(recs[1].vxid.id(), 1001);
        assert_eq!(r.next_event(), ReadEvent::Idle);
        assert_eq!(
            vsl.stats(),
            VslStats {
                records: 2,
                writes: 2,
                flushes: 0,
                cycles: 0
            }
        );
        // Tail reader sees only new records.
        let mut t = VslReader::open(&path, StartAt::Now).unwrap();
        assert_eq!(t.next_event(), ReadEvent::Idle);
        vsl.log_immediate_bytes(Tag::Error, Vxid::NONE, b"x");
        assert_eq!(records(t.drain()).len(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn every_payload_length_reads_back_across_the_wrap() {
        // The payload starts inside the VXID's word: every length, in
        // batches and alone, and more than a ring's worth so records wrap.
        let d = tmpdir("lengths");
        let path = vsl_path(&d);
        let vsl = Vsl::create(&path, &small()).unwrap();
        let mut r = VslReader::open(&path, StartAt::Oldest).unwrap();
        let ring_bytes = MIN_SPACE;
        let (mut written, mut round) = (0, 0u32);
        while written < 2 * ring_bytes {
            let mut batch = crate::VslBuf::new(vsl.clone(), Vxid::backend(round));
            for len in 0..=40usize {
                let data: Vec<u8> = (0..len).map(|i| b'a' + ((i + len) % 26) as u8).collect();
                batch.log_bytes(Tag::BerespHeader, &data);
                vsl.log_immediate_bytes(Tag::Error, Vxid::client(round + 1), &data);
                written += 2 * words_for(len) * 8;
            }
            batch.flush();
            let recs = records(r.drain());
            assert_eq!(recs.len(), 2 * 41, "round {round}");
            for len in 0..=40usize {
                let want: Vec<u8> = (0..len).map(|i| b'a' + ((i + len) % 26) as u8).collect();
                let alone = &recs[len];
                assert_eq!(
                    (alone.tag, alone.vxid, &alone.data),
                    (Tag::Error, Vxid::client(round + 1), &want)
                );
                let batched = &recs[41 + len];
                assert_eq!(
                    (batched.tag, batched.vxid, &batched.data),
                    (Tag::BerespHeader, Vxid::backend(round), &want)
                );
            }
            round += 1;
        }
        assert!(vsl.cycles() >= 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn masked_and_truncated() {
        let d = tmpdir("mask");
        let path = vsl_path(&d);
        let vsl = Vsl::create(&path, &small()).unwrap();
        vsl.log_immediate_bytes(Tag::Debug, Vxid::NONE, b"masked by default");
        vsl.set_reclen(16).unwrap();
        vsl.log_immediate_bytes(Tag::Error, Vxid::NONE, &[b'a'; 100]);
        let mut r = VslReader::open(&path, StartAt::Oldest).unwrap();
        let recs = records(r.drain());
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].data.len(), 15);
        assert!(vsl.set_reclen(5000).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn overrun_is_reported_and_reader_resyncs() {
        let d = tmpdir("overrun");
        let path = vsl_path(&d);
        let vsl = Vsl::create(&path, &small()).unwrap();
        let mut r = VslReader::open(&path, StartAt::Oldest).unwrap();
        vsl.log_immediate_bytes(Tag::Error, Vxid::NONE, b"first");
        assert_eq!(records(r.drain()).len(), 1);
        // Write three ring's worth while the reader sleeps.
        let payload = [b'z'; 200];
        for i in 0..(3 * MIN_SPACE / 216) {
            vsl.log_immediate(
                Tag::VCL_Log,
                Vxid::client(i as u32),
                format_args!("{i} {}", std::str::from_utf8(&payload).unwrap()),
            );
        }
        let evs = r.drain();
        assert!(matches!(evs[0], ReadEvent::Overrun { .. }), "{:?}", evs[0]);
        let recs = records(evs);
        assert!(!recs.is_empty());
        // After the resync, records are consecutive and intact.
        let ids: Vec<u32> = recs.iter().map(|r| r.vxid.id()).collect();
        for pair in ids.windows(2) {
            assert_eq!(pair[1], pair[0] + 1);
        }
        for rec in &recs {
            let text = rec.text();
            let (n, rest) = text.split_once(' ').unwrap();
            assert_eq!(n.parse::<u32>().unwrap(), rec.vxid.id());
            assert_eq!(rest, std::str::from_utf8(&payload).unwrap());
        }
        // Oldest-start readers also find a boundary after wrapping.
        let mut o = VslReader::open(&path, StartAt::Oldest).unwrap();
        let recs = records(o.drain());
        assert!(!recs.is_empty());
        assert_eq!(
            recs.last().unwrap().vxid.id() as usize,
            3 * MIN_SPACE / 216 - 1
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn hostile_file_contents_never_panic() {
        use std::os::unix::fs::FileExt;
        let d = tmpdir("hostile");
        let path = vsl_path(&d);
        let vsl = Vsl::create(&path, &small()).unwrap();
        vsl.log_immediate_bytes(Tag::Error, Vxid::NONE, b"ok");
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..200 {
            // Scribble over data words, segment starts and the head.
            for _ in 0..64 {
                let word = DATA as u64 + rnd() % (MIN_SPACE as u64 / 8);
                f.write_at(&rnd().to_le_bytes(), word * 8).unwrap();
            }
            let seg = (H_SEG as u64 + rnd() % SEGMENTS as u64) * 8;
            f.write_at(&rnd().to_le_bytes(), seg).unwrap();
            let head = match round % 4 {
                0 => u64::MAX - rnd() % 100,
                1 => rnd(),
                _ => rnd() % (4 * MIN_SPACE as u64 / 8),
            };
            f.write_at(&head.to_le_bytes(), (H_HEAD * 8) as u64)
                .unwrap();
            let mut r = VslReader::open(&path, StartAt::Oldest).unwrap();
            for _ in 0..1000 {
                if r.next_event() == ReadEvent::Idle {
                    break;
                }
            }
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn open_errors_are_clear() {
        let d = tmpdir("bad");
        let path = d.join("nothing");
        let e = VslReader::open(&path, StartAt::Now).unwrap_err();
        assert!(e.to_string().contains("nothing"));
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        let e = VslReader::open(&path, StartAt::Now).unwrap_err();
        assert!(e.to_string().contains("bad magic"), "{e}");
        let cfg = VslConfig {
            space: 1000,
            ..VslConfig::default()
        };
        assert!(Vsl::create(&vsl_path(&d), &cfg).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
