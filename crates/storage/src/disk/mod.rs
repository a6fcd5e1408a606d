//! The persistent store (`-s mse,CONF` or `-s disk,PATH,SIZE`): object
//! bodies and records in a store file that survives restarts and crashes,
//! bans and purges in a journal next to it.
//!
//! The store file is laid out on first start: a versioned header
//! ([`format::FileHeader`]) then an arena managed by the `file` store's
//! extent allocator ([`crate::FileStore`], so eviction, accounting and
//! streaming from disk are the `file` store's). A fetch writes its body into
//! extents as it arrives; once the body is complete the cache hands the
//! object to [`DiskStore::persist`], and the store's writer thread (never an
//! async worker) reads the body back to checksum it, makes the bodies
//! durable (`fdatasync`) and only then writes the object's record (digest,
//! timing, status, headers, Vary, ESI data, body length, checksum and
//! extents). The record is the commit point: an object is found again after
//! a restart only if its record is complete and checks out, and it names
//! only bytes that were durable before it was written.
//!
//! When an object leaves the cache (expiry, purge, ban, eviction) the cache
//! marks its record extent ([`Extent::erase_when_dropped`]) and the record's
//! magic is overwritten before the space returns to the allocator, so a
//! record found at startup is always of an object that was alive. Objects
//! still cached when the process ends keep their records. Bans and purges are appended to the
//! journal ([`format::JournalEntry`]) when issued and replayed on recovery
//! against the objects inserted before them.
//!
//! Recovery starts in [`DiskStore::open`] and runs on a thread of its own,
//! so serving starts at once: it scans the arena for records at granule
//! boundaries, drops and counts damaged ones (torn, truncated, of another
//! store, naming space past the end of a truncated file or space another
//! newer record owns), marks the space of the others used and files each
//! in the compact [`index`] (24 bytes per entry, no headers, no per-object
//! allocation). The cache takes an object's entries out when a lookup
//! misses in memory ([`DiskStore::take_indexed`]: its records are read and
//! decoded then) and the store gives entries up when space is short
//! ([`DiskStore::evict_indexed`]). Until the scan is done the store
//! allocates nothing ([`DiskStore::recovering`]), so nothing new can land
//! on a record not found yet; the cache keeps new objects in memory
//! meanwhile. The journal's entries are read at once
//! ([`DiskStore::take_journal`]) so bans are in force from the start.

pub mod conf;
pub mod format;
pub mod index;
pub mod snapshot;

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::body::{Body, Segment};
use crate::file::{Extent, FileSpan, FileStats, FileStore};
use crate::store::{Allocation, NoSpace, Stevedore, StoreStats};
use format::{
    BodyExtent, Crc, FileHeader, FormatError, HEADER_SIZE, JournalEntry, ObjectRecord, RECORD_HEAD,
    RECORD_MAGIC,
};
use index::{Entry, Index};
use snapshot::{Checkpoints, Found, FoundRecord, Identity, SnapError};

/// How long the writer gathers records before making them durable: at most
/// about this much of the newest writes is lost in a crash.
const COMMIT_INTERVAL: Duration = Duration::from_millis(200);
/// The allocation unit of a new store file: small enough that a small
/// object costs about 1 KiB on disk (record and body), large enough to keep
/// the extent allocator's maps short. Existing files keep theirs.
const GRANULARITY: u64 = 512;
/// Bytes read at once by the recovery scan (when it reads on through free
/// space) and the body checksum.
const SCAN_CHUNK: usize = 4 << 20;
/// Readers the recovery scan uses at most, each over its own part of the
/// arena.
const SCAN_THREADS: u64 = 4;
/// The least arena a scan reader is given (smaller stores are scanned by
/// fewer readers). Unit tests use small stores: there it is small, so
/// that every recovery test goes through a scan in parts, with objects
/// across the parts' boundaries.
const SCAN_PART_MIN: u64 = if cfg!(test) { 1 << 20 } else { 64 << 20 };
/// A jump over a body shorter than this counts as small: the scan keeps
/// reading in large blocks instead of probing for the next record.
const SCAN_SMALL: usize = 64 << 10;
/// The first read after a jump over a large body: one record's worth
/// (a longer record is read whole on its own), so that a store of large
/// objects is scanned by reading little more than its records.
const SCAN_PROBE: usize = 4 << 10;

/// Counters of a persistent store beyond the `SMF.*` ones (published in its
/// section and by `lacquer stat`).
#[derive(Debug, Default)]
pub struct DiskStats {
    /// Objects found again at startup.
    pub recovered: AtomicU64,
    /// Body bytes of the objects found again.
    pub recovered_bytes: AtomicU64,
    /// Records dropped at startup: torn, truncated or failing their checksum.
    pub dropped_damaged: AtomicU64,
    /// Records dropped at startup because they name space past the end of
    /// the file (truncated while stopped) or space a newer record owns.
    pub dropped_conflict: AtomicU64,
    /// Records found but rejected by the cache (expired, purged, banned).
    pub dropped_stale: AtomicU64,
    /// Microseconds the startup scan took.
    pub recovery_us: AtomicU64,
    /// Bytes the startup scan read.
    pub scanned_bytes: AtomicU64,
    /// Object records written.
    pub records: AtomicU64,
    /// Objects not made persistent (no space for the record, a body not in
    /// this store, or a write error).
    pub record_failures: AtomicU64,
    /// Ban and purge entries in the journal.
    pub journal_entries: AtomicU64,
    /// Journal appends that failed.
    pub journal_failures: AtomicU64,
    /// `fdatasync` calls of the writer.
    pub syncs: AtomicU64,
    /// Recovered bodies checked against their record's checksum.
    pub verified: AtomicU64,
    /// Recovered bodies whose bytes no longer matched (removed, refetched).
    pub verify_failures: AtomicU64,
    /// Objects of the index put back in the cache by a lookup.
    pub materialized: AtomicU64,
    /// Objects of the index given up to make room, never looked up.
    pub index_evicted: AtomicU64,
    /// Objects in the index (found at startup, not looked up or evicted
    /// yet).
    pub indexed: AtomicU64,
    /// Bytes of RAM the index takes.
    pub index_bytes: AtomicU64,
}

/// What a `-s` argument or an `mse.conf` store asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskConfig {
    /// The store file.
    pub path: PathBuf,
    /// Its arena size (`None`: keep the existing file's).
    pub size: Option<u64>,
    /// Where the ban/purge journal goes (`None`: next to the store file).
    pub journal_dir: Option<PathBuf>,
}

/// An object of the index, its record read back and its extents held.
#[derive(Debug)]
pub struct Recovered {
    /// Its record.
    pub record: ObjectRecord,
    /// The extent holding the record (the cache marks it to be erased when
    /// the object goes).
    pub record_extent: Extent,
    /// The body, as spans of the store file.
    pub body: Body,
    /// Bytes of all its extents (record and body).
    pub charged: u64,
    /// Number of its extents.
    pub allocs: u64,
}

/// An object to make persistent: its record without the body fields, which
/// the writer fills in from the body.
struct Job {
    record: ObjectRecord,
    body: Body,
    /// The body's checksum ([`DiskStore::body_checksum`] fed every byte) when
    /// the fetch computed it; otherwise the writer reads the body back.
    checksum: Option<Crc>,
    /// The extent the cache charged for the object, used for the record
    /// when it is large enough.
    slot: Option<Extent>,
    /// Told the extent the record went to, when it is not `slot`.
    on_placed: Box<dyn FnOnce(Extent) + Send>,
}

enum Msg {
    Persist(Box<Job>),
    Flush(mpsc::Sender<()>),
    /// Fold the index snapshot's logs into a new base (clean shutdown).
    Checkpoint(mpsc::Sender<Result<u64, String>>),
}

/// The persistent stevedore.
pub struct DiskStore {
    files: FileStore,
    kind: &'static str,
    salt: u64,
    journal: Arc<Mutex<File>>,
    journal_path: PathBuf,
    tx: Mutex<mpsc::Sender<Msg>>,
    /// The journal's entries as read at startup (taken once).
    journal_entries: Mutex<Option<Vec<JournalEntry>>>,
    state: Arc<RecoveryState>,
    stats: Arc<DiskStats>,
    snaps: Arc<Checkpoints>,
}

/// Where the recovery thread leaves its result.
struct RecoveryState {
    /// The scan is not done: allocate nothing.
    recovering: AtomicBool,
    /// The objects found and not taken yet.
    index: Mutex<Index>,
    /// The scan is done (waited on with `done`).
    scanned: Mutex<bool>,
    /// The recovery thread is done, its index snapshot written (waited on
    /// with `done`).
    settled: Mutex<bool>,
    done: Condvar,
}

/// What the recovery thread works on.
struct RecoveryJob {
    name: String,
    shown: String,
    files: FileStore,
    salt: u64,
    arena_size: u64,
    truncated_at: Option<u64>,
    /// The file was laid out just now: there is nothing to scan.
    fresh: bool,
    stats: Arc<DiskStats>,
    journal: Arc<Mutex<File>>,
    journal_path: PathBuf,
    state: Arc<RecoveryState>,
    started: Instant,
    snaps: Arc<Checkpoints>,
}

impl RecoveryJob {
    fn run(self) {
        let s = &self.stats;
        let snap_path = self.snaps.path().to_owned();
        let mut how = "scanned";
        // Loaded from a base whose logs are empty: it is written already.
        let mut unchanged = false;
        let found = if self.fresh {
            how = "laid out";
            Found::default()
        } else {
            let loaded = if self.truncated_at.is_some() {
                Err(SnapError::Mismatch("the store file is shorter than it was"))
            } else {
                snapshot::read(&snap_path, self.snaps.identity()).map(|(_, base, logs)| {
                    if logs.iter().all(|l| l.ops.is_empty()) {
                        (base, true)
                    } else {
                        let merged = snapshot::merge(&base, &logs, |r, x| {
                            record_matches(&self.files, self.salt, r, x)
                        });
                        (merged, false)
                    }
                })
            };
            match loaded {
                Ok((f, same)) => {
                    unchanged = same;
                    how = "loaded from the index snapshot";
                    f
                }
                Err(e) => {
                    eprintln!(
                        "Storage {}: index snapshot {} not used ({e}); scanning the store file",
                        self.name,
                        snap_path.display()
                    );
                    match scan(&self.files, self.salt, self.arena_size, s) {
                        Ok(f) => f,
                        Err(e) => {
                            eprintln!(
                                "Storage {}: {}: reading the store file failed ({e}); starting without what it held",
                                self.name, self.shown
                            );
                            Found::default()
                        }
                    }
                }
            }
        };
        let from_snapshot = how.starts_with("loaded");
        // A record dropped as conflicting is erased when the scan read it
        // there; one a snapshot names may not be there (its space may hold
        // a newer object's bytes), so it is logged as gone instead.
        let dropped = |off: u64| {
            if from_snapshot {
                self.snaps.free(off);
            } else {
                let _ = self.files.file().write_all_at(&[0u8; 8], HEADER_SIZE + off);
            }
        };
        let (index, oldest, kept) = fill_index(
            &self.files,
            &found,
            self.truncated_at,
            s,
            from_snapshot,
            dropped,
        );
        // The base on disk says it all when nothing was dropped: the logs
        // just go on (a clean restart writes nothing).
        let rewrite = !(unchanged && kept.len() == found.records.len());
        let (found, kept) = if rewrite {
            (found, kept)
        } else {
            (Found::default(), Vec::new())
        };
        // The next log opens before anything can change. A scan's result
        // replaces every snapshot file: the base goes first, so its logs
        // never count without it.
        let generation = snapshot::next_generation(&snap_path);
        // No fold of the logs runs until this start's base is written.
        let folding = self.snaps.hold();
        if !from_snapshot {
            snapshot::remove(&snap_path, true, u64::MAX);
        }
        let logging = match self.snaps.open_log(generation) {
            Ok(()) => true,
            Err(e) => {
                eprintln!(
                    "Storage {}: cannot start the index snapshot log next to {} ({e}); \
                     the next start scans the store file",
                    self.name,
                    snap_path.display()
                );
                false
            }
        };
        s.indexed.store(index.len() as u64, Relaxed);
        s.index_bytes.store(index.bytes() as u64, Relaxed);
        *self.state.index.lock().unwrap_or_else(|p| p.into_inner()) = index;
        // Space is known: allocations may start.
        self.state.recovering.store(false, Relaxed);
        // Journal entries older than every object can no longer matter.
        if let Err(e) = self.compact_journal(oldest) {
            eprintln!(
                "Storage {}: cannot compact journal {} ({e}); it keeps every entry",
                self.name,
                self.journal_path.display()
            );
        }
        s.recovery_us
            .store(self.started.elapsed().as_micros() as u64, Relaxed);
        eprintln!(
            "Storage {}: {}: {} objects ({} body bytes) recovered in {:.3} s \
             ({how}, {} bytes scanned); {} damaged and {} conflicting records dropped; {} journal entries",
            self.name,
            self.shown,
            s.recovered.load(Relaxed),
            s.recovered_bytes.load(Relaxed),
            self.started.elapsed().as_secs_f64(),
            s.scanned_bytes.load(Relaxed),
            s.dropped_damaged.load(Relaxed),
            s.dropped_conflict.load(Relaxed),
            s.journal_entries.load(Relaxed),
        );
        *self.state.scanned.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.state.done.notify_all();
        // What was recovered becomes the base of the log just opened
        // (serving goes on meanwhile; until the rename the old base and
        // its logs, this one's included, still say the same).
        if rewrite && logging && !self.snaps.failed() {
            // The log this base starts is durable before the base names it.
            self.snaps.sync();
            let written = snapshot::write_base(
                &snap_path,
                self.snaps.identity(),
                generation,
                &found,
                Some(&kept),
            );
            match written {
                Ok(()) => snapshot::remove(&snap_path, false, generation),
                Err(e) => eprintln!(
                    "Storage {}: cannot write the index snapshot {} ({e}); \
                     the next start reads the older one or scans",
                    self.name,
                    snap_path.display()
                ),
            }
        }
        drop(folding);
        *self.state.settled.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.state.done.notify_all();
    }

    /// Rewrite the journal without entries older than `oldest`, holding its
    /// lock so that no append is lost.
    fn compact_journal(&self, oldest: f64) -> io::Result<()> {
        let mut j = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        let bytes = std::fs::read(&self.journal_path)?;
        let entries = match format::decode_journal(&bytes) {
            Ok((salt, entries, _)) if salt == self.salt => entries,
            _ => return Ok(()),
        };
        let keep: Vec<JournalEntry> = entries.into_iter().filter(|e| e.time() >= oldest).collect();
        *j = rewrite_journal(&self.journal_path, self.salt, &keep)?;
        self.stats.journal_entries.store(keep.len() as u64, Relaxed);
        Ok(())
    }
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("name", &self.files.name())
            .field("path", &self.files.path())
            .finish_non_exhaustive()
    }
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A salt different for every store laid out.
fn new_salt(path: &Path) -> u64 {
    let mut c = Crc::default();
    c.update(path.as_os_str().as_encoded_bytes());
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let a = u64::from(c.value()) << 32 | u64::from(std::process::id());
    (a ^ (t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).rotate_left(17) ^ (t >> 64) as u64
}

impl DiskStore {
    /// Open the store `name` of `kind` (`mse` or `disk`), laying the file
    /// out when it is new, and recover what it holds. Errors name the file,
    /// what failed and what to do.
    pub fn open(name: &str, kind: &'static str, cfg: &DiskConfig) -> Result<DiskStore, String> {
        let started = Instant::now();
        let path = &cfg.path;
        let shown = path.display();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| {
                format!(
                    "-s {kind}: cannot open or create the store file {shown} ({e}); \
                     check that its directory exists and is writable"
                )
            })?;
        let existing = file
            .metadata()
            .map_err(|e| format!("-s {kind}: cannot stat {shown} ({e})"))?
            .len();
        let mut head = vec![0u8; HEADER_SIZE as usize];
        let got = read_upto(&file, &mut head, 0)
            .map_err(|e| format!("-s {kind}: cannot read {shown} ({e})"))?;
        let header = match FileHeader::decode(&head[..got]) {
            Ok(h) => Some(h),
            Err(FormatError::NoMagic | FormatError::Truncated) if head.iter().all(|&b| b == 0) => {
                None
            }
            Err(e) => {
                return Err(format!(
                    "-s {kind}: {shown} is not a usable Lacquer store file ({e}); \
                     move it away (or delete it) to start with an empty store"
                ));
            }
        };
        let vfs = rustix::fs::fstatvfs(&file)
            .map_err(|e| format!("-s {kind}: cannot read the file system of {shown} ({e})"))?;
        let (salt, granularity, arena_size, truncated_at) = match header {
            Some(h) => {
                let size = cfg.size.unwrap_or(h.arena_size);
                // A file cut short while stopped: records naming space past
                // the cut are dropped.
                let end = existing.saturating_sub(HEADER_SIZE);
                let truncated = (end < h.arena_size).then_some(end);
                (h.salt, h.granularity, size, truncated)
            }
            None => {
                let Some(size) = cfg.size else {
                    return Err(format!(
                        "-s {kind}: {shown} is new and no size was given; give one, e.g. -s {kind},{shown},10G"
                    ));
                };
                (new_salt(path), GRANULARITY, size, None)
            }
        };
        let arena_size = arena_size - arena_size % granularity;
        if arena_size < 16 * granularity {
            return Err(format!(
                "-s {kind}: {shown}: size {arena_size} is too small; give at least 1M"
            ));
        }
        let total = HEADER_SIZE + arena_size;
        if total > existing {
            let grow = total - existing;
            if grow > vfs.f_bavail.saturating_mul(vfs.f_frsize) {
                return Err(format!(
                    "-s {kind}: {shown}: growing it to {total} bytes needs {grow} more than the file system has free; \
                     give a smaller size or free space"
                ));
            }
        }
        file.set_len(total)
            .map_err(|e| format!("-s {kind}: cannot size {shown} to {total} bytes ({e})"))?;
        // Reserve the blocks now, so that a full disk is an error here and
        // never a failed write later (file systems without fallocate keep a
        // sparse file).
        if let Err(rustix::io::Errno::NOSPC) =
            rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, total)
        {
            return Err(format!(
                "-s {kind}: {shown}: the file system has no room for {total} bytes; \
                 give a smaller size or free space"
            ));
        }
        let hdr = FileHeader {
            version: format::VERSION,
            granularity,
            arena_size,
            salt,
            created: header.map_or_else(now, |h| h.created),
        };
        file.write_all_at(&hdr.encode(), 0)
            .and_then(|()| file.sync_data())
            .map_err(|e| format!("-s {kind}: cannot write the header of {shown} ({e})"))?;
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random);
        let writer_file = file
            .try_clone()
            .map_err(|e| format!("-s {kind}: cannot duplicate the descriptor of {shown} ({e})"))?;
        let files = FileStore::with_base(
            name,
            file,
            path.display().to_string(),
            HEADER_SIZE,
            arena_size,
            granularity,
        );
        let stats = Arc::new(DiskStats::default());

        // The journal.
        let journal_path = match &cfg.journal_dir {
            Some(d) => d.join(format!("{name}.journal")),
            None => {
                let mut p = path.clone().into_os_string();
                p.push(".journal");
                PathBuf::from(p)
            }
        };
        let journal_entries = load_journal(&journal_path, salt)
            .map_err(|e| format!("-s {kind}: journal {}: {e}", journal_path.display()))?;

        // Cut a torn tail now; entries appended from here on go after it.
        let jfile = rewrite_journal(&journal_path, salt, &journal_entries).map_err(|e| {
            format!(
                "-s {kind}: cannot write journal {} ({e})",
                journal_path.display()
            )
        })?;
        stats
            .journal_entries
            .store(journal_entries.len() as u64, Relaxed);
        let journal = Arc::new(Mutex::new(jfile));

        // The index snapshot, next to the journal.
        let snap_path = match &cfg.journal_dir {
            Some(d) => d.join(format!("{name}.snap")),
            None => {
                let mut p = path.clone().into_os_string();
                p.push(".snap");
                PathBuf::from(p)
            }
        };
        let snaps = Arc::new(Checkpoints::new(
            snap_path,
            Identity {
                salt,
                arena_size,
                granularity,
                created: hdr.created,
            },
        ));
        {
            let snaps = Arc::clone(&snaps);
            files.on_erase(move |off| snaps.free(off));
        }

        let (tx, rx) = mpsc::channel();
        let wstats = Arc::clone(&stats);
        let granule = granularity;
        let alloc_files = files.clone();
        let wjournal = Arc::clone(&journal);
        let wsnaps = Arc::clone(&snaps);
        std::thread::Builder::new()
            .name(format!("store-{name}"))
            .spawn(move || {
                writer(
                    rx,
                    writer_file,
                    wjournal,
                    salt,
                    granule,
                    alloc_files,
                    wstats,
                    wsnaps,
                )
            })
            .map_err(|e| format!("-s {kind}: cannot start the writer thread ({e})"))?;

        // The scan runs on a thread of its own: serving starts now. Until
        // it is done the store allocates nothing (so nothing can land on a
        // record not found yet) and the cache stores new objects in memory.
        let state = Arc::new(RecoveryState {
            recovering: AtomicBool::new(true),
            index: Mutex::new(Index::default()),
            scanned: Mutex::new(false),
            settled: Mutex::new(false),
            done: Condvar::new(),
        });
        let job = RecoveryJob {
            name: name.to_owned(),
            shown: shown.to_string(),
            files: files.clone(),
            salt,
            arena_size,
            truncated_at,
            fresh: header.is_none(),
            stats: Arc::clone(&stats),
            journal: Arc::clone(&journal),
            journal_path: journal_path.clone(),
            state: Arc::clone(&state),
            started,
            snaps: Arc::clone(&snaps),
        };
        std::thread::Builder::new()
            .name(format!("store-recover-{name}"))
            .spawn(move || job.run())
            .map_err(|e| format!("-s {kind}: cannot start the recovery thread ({e})"))?;
        Ok(DiskStore {
            files,
            kind,
            salt,
            journal,
            journal_path,
            tx: Mutex::new(tx),
            journal_entries: Mutex::new(Some(journal_entries)),
            state,
            stats,
            snaps,
        })
    }

    /// The bans and purges of the journal as read at startup, oldest first
    /// (once; later calls get nothing).
    pub fn take_journal(&self) -> Vec<JournalEntry> {
        self.journal_entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default()
    }

    /// Whether the startup scan is still running (the store allocates
    /// nothing until it is done).
    pub fn recovering(&self) -> bool {
        self.state.recovering.load(Relaxed)
    }

    /// Wait until the startup scan has filled the index (blocking: for a
    /// thread, not an async worker).
    pub fn wait_scanned(&self) {
        let mut g = self.state.scanned.lock().unwrap_or_else(|p| p.into_inner());
        while !*g {
            g = self.state.done.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Wait until the recovery thread is done, the index snapshot of what
    /// it recovered written (blocking: for a thread, not an async worker).
    pub fn wait_settled(&self) {
        let mut g = self.state.settled.lock().unwrap_or_else(|p| p.into_inner());
        while !*g {
            g = self.state.done.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Objects in the index (not looked up or evicted since startup).
    pub fn indexed(&self) -> u64 {
        self.stats.indexed.load(Relaxed)
    }

    /// Publish the index's count after a change; an emptied table gives
    /// its RAM back.
    fn counted(&self, ix: &mut Index) {
        self.stats.indexed.store(ix.len() as u64, Relaxed);
        if ix.is_empty() && ix.bytes() > 0 {
            *ix = Index::default();
            self.stats.index_bytes.store(0, Relaxed);
        }
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.state.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take the objects of `digest` out of the index: their records are
    /// read back (blocking reads of a few KiB; [`blocking`] keeps an async
    /// worker's other tasks moving) and their extents handed over, oldest
    /// first. A record that no longer decodes is dropped and counted; one
    /// of another digest filed under the same tag goes back.
    pub fn take_indexed(&self, digest: &[u8; 32]) -> Vec<Recovered> {
        if self.indexed() == 0 {
            return Vec::new();
        }
        let tag = Entry::tag_of(digest);
        let taken = {
            let mut ix = self.index();
            if !ix.contains(tag) {
                return Vec::new();
            }
            let t = ix.take(tag);
            self.counted(&mut ix);
            t
        };
        let mut out = Vec::with_capacity(taken.len());
        let mut back = Vec::new();
        blocking(|| {
            for e in taken {
                match self.read_record(&e) {
                    Ok(rec) if rec.digest == *digest => out.push(self.held(&e, rec)),
                    Ok(_) => back.push(e),
                    Err(_) => {
                        self.stats.dropped_damaged.fetch_add(1, Relaxed);
                        self.drop_entry(&e, None);
                    }
                }
            }
        });
        if !back.is_empty() {
            let mut ix = self.index();
            if ix.is_empty() {
                // Emptied (and its table given back) meanwhile.
                *ix = Index::with_capacity(back.len());
                self.stats.index_bytes.store(ix.bytes() as u64, Relaxed);
            }
            for e in back {
                ix.insert(e);
            }
            self.counted(&mut ix);
        }
        self.stats.materialized.fetch_add(out.len() as u64, Relaxed);
        out.sort_by(|a, b| a.record.inserted_at.total_cmp(&b.record.inserted_at));
        out
    }

    /// Give up one object of the index to make room: its record is erased
    /// and its space freed. False when the index is empty. Blocking (one
    /// record read).
    pub fn evict_indexed(&self) -> bool {
        if self.indexed() == 0 {
            return false;
        }
        let Some(e) = ({
            let mut ix = self.index();
            let e = ix.evict(Entry::seconds(now()));
            self.counted(&mut ix);
            e
        }) else {
            return false;
        };
        blocking(|| {
            let rec = self.read_record(&e).ok();
            self.drop_entry(&e, rec.as_ref());
        });
        self.stats.index_evicted.fetch_add(1, Relaxed);
        true
    }

    /// Read and decode the record an entry points at.
    fn read_record(&self, e: &Entry) -> Result<ObjectRecord, FormatError> {
        let mut buf = vec![0u8; e.slot as usize];
        let got = read_upto(self.files.file(), &mut buf, HEADER_SIZE + e.off)
            .map_err(|_| FormatError::Truncated)?;
        let rec = ObjectRecord::decode(&buf[..got], self.salt)?;
        if rec.slot_len != u64::from(e.slot) {
            return Err(FormatError::Malformed("slot length"));
        }
        Ok(rec)
    }

    /// Erase an entry's record and free its space (and its body's, when
    /// the record could be read).
    fn drop_entry(&self, e: &Entry, rec: Option<&ObjectRecord>) {
        // Erased before the space can be reused (see the module doc).
        let _ = self
            .files
            .file()
            .write_all_at(&[0u8; 8], HEADER_SIZE + e.off);
        self.snaps.free(e.off);
        self.files.release(e.off, u64::from(e.slot));
        if let Some(r) = rec {
            for x in &r.extents {
                self.files.release(x.off, x.len);
            }
        }
    }

    /// The object of an entry whose record was read: extents for the space
    /// the scan reserved.
    fn held(&self, e: &Entry, record: ObjectRecord) -> Recovered {
        let record_extent = self.files.reserved_extent(e.off, u64::from(e.slot));
        let mut charged = u64::from(e.slot);
        let mut spans = Vec::with_capacity(record.extents.len());
        for x in &record.extents {
            let ext = self.files.reserved_extent(x.off, x.len);
            charged += x.len;
            // In pieces a delivery reads at once, never a whole large body.
            let mut at = 0;
            while at < x.used {
                let n = (x.used - at).min(FileSpan::MAX_READ);
                if let Some(s) = ext.span(at, n) {
                    spans.push(Segment::File(s));
                }
                at += n;
            }
        }
        let allocs = record.extents.len() as u64 + 1;
        Recovered {
            record,
            record_extent,
            body: Body::from_parts(spans),
            charged,
            allocs,
        }
    }

    /// This store's counters beyond `SMF.*`.
    pub fn disk_stats(&self) -> &DiskStats {
        &self.stats
    }

    /// The store file.
    pub fn path(&self) -> &str {
        self.files.path()
    }

    /// The journal file.
    pub fn journal_path(&self) -> &Path {
        &self.journal_path
    }

    /// Make an object persistent: `record` describes it (its body fields
    /// are filled in here), `body` is its complete body, all of it in this
    /// store's extents. `slot` is an extent already charged for the object;
    /// the record goes there when it fits, otherwise to a new extent handed
    /// to `on_placed` (the object must hold it, and mark it to be erased
    /// when the object leaves the cache). The work happens on the store's writer thread.
    pub fn persist(
        &self,
        record: ObjectRecord,
        body: Body,
        checksum: Option<Crc>,
        slot: Option<Extent>,
        on_placed: Box<dyn FnOnce(Extent) + Send>,
    ) {
        let job = Box::new(Job {
            record,
            body,
            checksum,
            slot,
            on_placed,
        });
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(Msg::Persist(job));
        if sent.is_err() {
            self.stats.record_failures.fetch_add(1, Relaxed);
        }
    }

    /// A checksum for a body of this store, to feed every body byte as a
    /// fetch writes it (so the writer need not read the body back).
    pub fn body_checksum(&self) -> Crc {
        Crc::salted(self.salt)
    }

    /// Append a ban or purge to the journal (a write to the page cache;
    /// the writer makes it durable with the next records). Returns whether
    /// it was written.
    pub fn journal(&self, entry: &JournalEntry) -> bool {
        let bytes = entry.encode(self.salt);
        let ok = self
            .journal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_all(&bytes)
            .is_ok();
        if ok {
            self.stats.journal_entries.fetch_add(1, Relaxed);
        } else {
            self.stats.journal_failures.fetch_add(1, Relaxed);
        }
        ok
    }

    /// Wait until everything handed to [`persist`](Self::persist) and
    /// [`journal`](Self::journal) so far is written and durable (a clean
    /// shutdown; tests). Blocking: not for an async worker.
    pub fn flush(&self) {
        let (tx, rx) = mpsc::channel();
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(Msg::Flush(tx));
        if sent.is_ok() {
            let _ = rx.recv();
        }
    }

    /// Write an index snapshot of everything handed to
    /// [`persist`](Self::persist) so far (a clean shutdown: the next start
    /// reads it instead of scanning the store file). Returns the objects it
    /// lists, or why it was not written. Blocking: not for an async worker.
    pub fn checkpoint(&self) -> Result<u64, String> {
        let (tx, rx) = mpsc::channel();
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(Msg::Checkpoint(tx));
        if sent.is_err() {
            return Err("the store's writer thread is gone".into());
        }
        rx.recv()
            .unwrap_or_else(|_| Err("the store's writer thread is gone".into()))
    }

    /// The index snapshot's base file (its logs are `PATH.N` beside it).
    pub fn snapshot_path(&self) -> &Path {
        self.snaps.path()
    }

    /// Whether `body` (a recovered object's) still has the bytes its record
    /// vouched for: length and checksum. Blocking reads of the whole body:
    /// for a background thread. Counts the outcome.
    pub fn verify_body(&self, body: &Body, len: u64, crc: u32) -> bool {
        let ok = checksum(self.salt, body, None).is_some_and(|(c, l, _)| c == crc && l == len);
        let counter = if ok {
            &self.stats.verified
        } else {
            &self.stats.verify_failures
        };
        counter.fetch_add(1, Relaxed);
        ok
    }

    /// Whether every segment of `body` lies in this store (a body that can
    /// be recorded as it is, e.g. the one a 304 refresh keeps).
    pub fn holds(&self, body: &Body) -> bool {
        body.segments().is_some_and(|segs| {
            segs.iter().all(|s| match s {
                Segment::File(f) => self.files.owns(f.extent()),
                Segment::Mem(b) => b.is_empty(),
            })
        })
    }
}

impl Stevedore for DiskStore {
    fn name(&self) -> &'static str {
        self.files.name()
    }

    fn kind(&self) -> &'static str {
        self.kind
    }

    fn limit(&self) -> Option<u64> {
        self.files.limit()
    }

    fn stats(&self) -> &StoreStats {
        self.files.stats()
    }

    fn file_stats(&self) -> Option<&FileStats> {
        self.files.file_stats()
    }

    fn try_alloc(&self, bytes: u64) -> Result<Allocation, NoSpace> {
        if self.recovering() {
            return Err(NoSpace {
                store: self.files.name(),
                wanted: bytes,
                available: 0,
            });
        }
        self.files.try_alloc(bytes)
    }

    fn free(&self, bytes: u64, allocs: u64) {
        self.files.free(bytes, allocs)
    }

    fn available(&self) -> u64 {
        if self.recovering() {
            return 0;
        }
        self.files.available()
    }

    fn disk(&self) -> Option<&DiskStore> {
        Some(self)
    }
}

/// Run blocking I/O `f`: on a worker of a multi-threaded tokio runtime
/// through `block_in_place` (the worker's other tasks move to another
/// thread meanwhile), elsewhere directly.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// `pread` as much of `buf` as the file has at `at`; the bytes read.
fn read_upto(f: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Read the arena and check a record wherever a granule starts with the
/// record magic ([`ObjectRecord::summary`]: checksum and fields, nothing
/// allocated per record). After a record the scan jumps over its own
/// extent and the body extents that follow it directly (a fetch allocates
/// them in that order), so large bodies are not read: the read after a
/// jump over [`SCAN_SMALL`] or more is [`SCAN_PROBE`]. Anywhere else
/// (small objects, free space) reads grow to [`SCAN_CHUNK`], and the
/// kernel is asked to read the next blocks meanwhile, so a store of small
/// objects is read sequentially at the disk's speed.
fn scan(files: &FileStore, salt: u64, size: u64, stats: &DiskStats) -> io::Result<Found> {
    let g = files.granularity();
    // Several sequential readers keep more of the disk busy than one
    // (measured on the development VM: 480 MB/s for one reader of 4 MiB
    // blocks, 790 MB/s for four).
    let parts = (size / SCAN_PART_MIN).clamp(1, SCAN_THREADS);
    if parts == 1 {
        return scan_range(files, salt, 0, size, size, stats);
    }
    let bounds: Vec<u64> = (0..=parts).map(|i| size / parts * i / g * g).collect();
    let found: Vec<io::Result<Found>> = std::thread::scope(|sc| {
        let parts: Vec<_> = bounds
            .windows(2)
            .map(|w| {
                let (from, to) = (w[0], if w[1] + g > size { size } else { w[1] });
                std::thread::Builder::new()
                    .name("store-scan".into())
                    .spawn_scoped(sc, move || scan_range(files, salt, from, to, size, stats))
            })
            .collect();
        parts
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a recovery scan thread panicked"))),
                Err(e) => Err(e),
            })
            .collect()
    });
    let found = found.into_iter().collect::<io::Result<Vec<Found>>>()?;
    // One allocation each, sized at once (no growth, nothing left behind).
    let mut out = Found {
        records: Vec::with_capacity(found.iter().map(|p| p.records.len()).sum()),
        extents: Vec::with_capacity(found.iter().map(|p| p.extents.len()).sum()),
    };
    for part in found {
        let base = out.extents.len();
        out.extents.extend_from_slice(&part.extents);
        for mut r in part.records {
            match u32::try_from(base + r.ext_at as usize) {
                Ok(at) => {
                    r.ext_at = at;
                    out.records.push(r);
                }
                Err(_) => {
                    stats.dropped_damaged.fetch_add(1, Relaxed);
                }
            }
        }
    }
    Ok(out)
}

/// [`scan`] of the records that start in `from..to` (granule-aligned;
/// reads may go on past `to`, up to `size`, to finish a record or jump
/// over a body). A part that starts inside an object's body checks its
/// granules as it does free space: only a record whose salted checksum
/// holds is taken.
fn scan_range(
    files: &FileStore,
    salt: u64,
    from: u64,
    to: u64,
    size: u64,
    stats: &DiskStats,
) -> io::Result<Found> {
    let g = files.granularity();
    let f = files.file();
    // Room for a record in every other granule (up to 16 M records), asked
    // for at once: untouched room costs no RAM, and one large allocation
    // goes back to the system when recovery is done instead of leaving
    // the pieces of a growing vector in the heap.
    let room = usize::try_from((to - from) / (2 * g)).map_or(1 << 24, |n| n.min(1 << 24));
    let mut out = Found {
        records: Vec::with_capacity(room),
        extents: Vec::with_capacity(room),
    };
    let mut buf = vec![0u8; SCAN_CHUNK];
    let mut rec = Vec::new();
    let mut chunk = SCAN_SMALL;
    let mut pos = from;
    while pos < to {
        let want = (size - pos).min(chunk as u64) as usize;
        let n = read_upto(f, &mut buf[..want], HEADER_SIZE + pos)?;
        stats.scanned_bytes.fetch_add(n as u64, Relaxed);
        if n == 0 {
            break;
        }
        let mut at = 0usize;
        let mut next = pos + n as u64;
        let mut jumped = None;
        while at + RECORD_HEAD <= n {
            if pos + at as u64 >= to {
                // The next part's.
                next = to;
                break;
            }
            if &buf[at..at + 4] != RECORD_MAGIC {
                at += g as usize;
                continue;
            }
            let off = pos + at as u64;
            let ext_at = out.extents.len();
            let decoded = match ObjectRecord::peek_len(&buf[at..n]) {
                Ok(len) if at + len <= n => {
                    ObjectRecord::summary(&buf[at..at + len], salt, &mut out.extents)
                }
                Ok(len) => {
                    rec.resize(len, 0);
                    let got = read_upto(f, &mut rec, HEADER_SIZE + off)?;
                    ObjectRecord::summary(&rec[..got], salt, &mut out.extents)
                }
                Err(e) => Err(e),
            };
            match decoded {
                Ok(sum) if sum.slot_len.is_multiple_of(g) && ext_at <= u32::MAX as usize => {
                    let body = &mut out.extents[ext_at..];
                    let ext_n = body.len();
                    let mut end = off + sum.slot_len;
                    // Sorted by offset to find the run after the record
                    // (the order of a body's extents is the record's to
                    // keep, but the index needs only where they are).
                    body.sort_by_key(|x| x.off);
                    for x in body.iter() {
                        if x.off == end && x.len.is_multiple_of(g) {
                            end = end.saturating_add(x.len);
                        } else if x.off > end {
                            break;
                        }
                    }
                    out.records.push(FoundRecord {
                        off,
                        slot: sum.slot_len,
                        tag: Entry::tag_of(&sum.digest),
                        inserted_at: sum.inserted_at,
                        expires: sum.expires,
                        body_len: sum.body_len,
                        ext_at: ext_at as u32,
                        ext_n: ext_n as u32,
                    });
                    if end >= pos + n as u64 {
                        jumped = Some(end - (pos + n as u64));
                        next = end;
                        break;
                    }
                    at = (end - pos) as usize;
                }
                Ok(_) | Err(_) => {
                    out.extents.truncate(ext_at);
                    stats.dropped_damaged.fetch_add(1, Relaxed);
                    at += g as usize;
                }
            }
        }
        // Past a large body: probe for the next record. Otherwise (small
        // objects, free space) the arena is dense with records: read on in
        // large blocks, as a sequential read of the file.
        chunk = match jumped {
            Some(over) if over >= SCAN_SMALL as u64 => SCAN_PROBE,
            Some(_) | None => (chunk * 2).min(SCAN_CHUNK),
        };
        pos = next.max(pos + 1);
        // Stay on a granule boundary.
        pos = pos.div_ceil(g) * g;
        // Have the kernel read the next block while this thread checks the
        // records of the one it has (the file is opened for random reads,
        // so nothing is read ahead otherwise).
        if chunk == SCAN_CHUNK && pos < to {
            let ahead = (to - pos).min(2 * SCAN_CHUNK as u64);
            let _ = rustix::fs::fadvise(
                f,
                HEADER_SIZE + pos,
                std::num::NonZeroU64::new(ahead),
                rustix::fs::Advice::WillNeed,
            );
        }
    }
    Ok(out)
}

/// Mark the space of the records found used, newest first (`ordered`:
/// they are listed that way already, as a snapshot lists them; otherwise
/// by `inserted_at`), and file them in an index: a record naming space
/// past `truncated_at` or space a newer record took is dropped (`dropped`
/// is told its offset before its space is given back). Returns the index, the oldest `inserted_at` filed (infinity
/// when none) and which records were filed.
fn fill_index(
    files: &FileStore,
    found: &Found,
    truncated_at: Option<u64>,
    stats: &DiskStats,
    ordered: bool,
    dropped: impl Fn(u64),
) -> (Index, f64, Vec<u32>) {
    let records = &found.records;
    let mut order: Vec<u32> = (0..records.len() as u32).collect();
    if !ordered {
        order.sort_by(|&a, &b| {
            records[b as usize]
                .inserted_at
                .total_cmp(&records[a as usize].inserted_at)
        });
    }
    let mut index = Index::with_capacity(records.len());
    let mut kept = Vec::with_capacity(records.len());
    let mut oldest = f64::INFINITY;
    let limit = truncated_at.unwrap_or(u64::MAX);
    let past = |off: u64, len: u64| off.checked_add(len).is_none_or(|e| e > limit);
    for i in order {
        let r = &records[i as usize];
        let body = found.extents_of(r);
        if past(r.off, r.slot) || body.iter().any(|x| past(x.off, x.len)) {
            stats.dropped_conflict.fetch_add(1, Relaxed);
            continue;
        }
        if !files.reserve(r.off, r.slot) {
            stats.dropped_conflict.fetch_add(1, Relaxed);
            continue;
        }
        let mut held = 0;
        while held < body.len() && files.reserve(body[held].off, body[held].len) {
            held += 1;
        }
        if held < body.len() {
            // A newer record owns some of its space: it is stale. Dropped
            // before its space is given back.
            dropped(r.off);
            files.release(r.off, r.slot);
            for x in &body[..held] {
                files.release(x.off, x.len);
            }
            stats.dropped_conflict.fetch_add(1, Relaxed);
            continue;
        }
        let filed = u32::try_from(r.slot).is_ok_and(|slot| {
            index.insert(Entry {
                tag: r.tag,
                off: r.off,
                slot,
                expires: Entry::seconds(r.expires),
            })
        });
        if !filed {
            dropped(r.off);
            files.release(r.off, r.slot);
            for x in body {
                files.release(x.off, x.len);
            }
            stats.dropped_damaged.fetch_add(1, Relaxed);
            continue;
        }
        kept.push(i);
        oldest = oldest.min(r.inserted_at);
        stats.recovered.fetch_add(1, Relaxed);
        stats.recovered_bytes.fetch_add(r.body_len, Relaxed);
    }
    (index, oldest, kept)
}

/// Whether the record `r` (an add a log did not commit) is on disk as the
/// log says: it checks out and names the same digest tag, slot, body
/// length and extents.
fn record_matches(files: &FileStore, salt: u64, r: &FoundRecord, x: &[BodyExtent]) -> bool {
    let Ok(len) = usize::try_from(r.slot) else {
        return false;
    };
    let mut buf = vec![0u8; len];
    let Ok(got) = read_upto(files.file(), &mut buf, HEADER_SIZE + r.off) else {
        return false;
    };
    let mut ext = Vec::new();
    let Ok(sum) = ObjectRecord::summary(&buf[..got], salt, &mut ext) else {
        return false;
    };
    let mut a: Vec<(u64, u64)> = ext.iter().map(|e| (e.off, e.len)).collect();
    let mut b: Vec<(u64, u64)> = x.iter().map(|e| (e.off, e.len)).collect();
    a.sort_unstable();
    b.sort_unstable();
    Entry::tag_of(&sum.digest) == r.tag
        && sum.slot_len == r.slot
        && sum.body_len == r.body_len
        && a == b
}

/// Read the journal's valid entries; a missing journal, or one of another
/// store (its salt differs: the store file was recreated), has none.
fn load_journal(path: &Path, salt: u64) -> Result<Vec<JournalEntry>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read it ({e}); check its permissions")),
    };
    match format::decode_journal(&bytes) {
        Ok((s, entries, _)) if s == salt => Ok(entries),
        Ok(_) | Err(FormatError::NoMagic | FormatError::Truncated) => Ok(Vec::new()),
        Err(FormatError::Version(v)) => Err(format!(
            "written by a newer Lacquer (format {v}); move it away to start without its bans"
        )),
        Err(e) => Err(format!(
            "damaged header ({e}); move it away to start without its bans"
        )),
    }
}

/// Write the journal anew with `entries` (to a temporary file renamed over
/// it, so a crash leaves the old or the new one) and open it for appends.
fn rewrite_journal(path: &Path, salt: u64, entries: &[JournalEntry]) -> io::Result<File> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        let mut b = format::journal_header(salt);
        for e in entries {
            b.extend_from_slice(&e.encode(salt));
        }
        f.write_all(&b)?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(d) = File::open(dir)
    {
        let _ = d.sync_all();
    }
    OpenOptions::new().append(true).open(path)
}

/// The writer thread: gathers jobs for [`COMMIT_INTERVAL`], makes the
/// bodies durable, logs the records it is about to write in the index
/// snapshot's log and makes that durable, writes the records, makes them
/// and the journal durable and logs the commit. A log grown past
/// [`snapshot::COMPACT_ENTRIES`] is folded into a new base in the
/// background; a checkpoint folds it at once.
#[allow(clippy::too_many_arguments)]
fn writer(
    rx: mpsc::Receiver<Msg>,
    file: File,
    journal: Arc<Mutex<File>>,
    salt: u64,
    granularity: u64,
    files: FileStore,
    stats: Arc<DiskStats>,
    snaps: Arc<Checkpoints>,
) {
    let mut open = true;
    let mut seq = 0u64;
    while open {
        let first = match rx.recv() {
            Ok(m) => m,
            Err(_) => return,
        };
        let ends = |m: &Msg| matches!(m, Msg::Flush(_) | Msg::Checkpoint(_));
        let mut flush_now = ends(&first);
        let mut batch = vec![first];
        let deadline = Instant::now() + COMMIT_INTERVAL;
        while !flush_now {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match rx.recv_timeout(left) {
                Ok(m) => {
                    flush_now = ends(&m);
                    batch.push(m);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        // Bodies first: a record never names bytes that are not durable.
        let _ = file.sync_data();
        stats.syncs.fetch_add(1, Relaxed);
        let mut waiters = Vec::new();
        let mut checkpoints = Vec::new();
        let mut placed = Vec::new();
        for m in batch {
            match m {
                Msg::Flush(tx) => waiters.push(tx),
                Msg::Checkpoint(tx) => checkpoints.push(tx),
                Msg::Persist(job) => match place_record(*job, salt, granularity, &files) {
                    Some(p) => placed.push(p),
                    None => {
                        stats.record_failures.fetch_add(1, Relaxed);
                    }
                },
            }
        }
        // Every record is in the snapshot log before it is written, so no
        // record is on disk that the log does not name.
        if !placed.is_empty() {
            let mut b = Vec::with_capacity(placed.len() * 96);
            for p in &placed {
                snapshot::log_add(&mut b, salt, &p.found, &p.extents);
            }
            snaps.append(&b, placed.len() as u64);
            snaps.sync();
        }
        let mut written = Vec::new();
        for p in placed {
            match p.ext.write(0, &p.bytes) {
                Ok(_) => {
                    stats.records.fetch_add(1, Relaxed);
                    written.push((p.ext, p.body));
                }
                Err(_) => {
                    stats.record_failures.fetch_add(1, Relaxed);
                    snaps.free(p.ext.offset());
                }
            }
        }
        let _ = file.sync_data();
        let _ = journal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sync_data();
        stats.syncs.fetch_add(1, Relaxed);
        if !written.is_empty() {
            seq += 1;
            let mut b = Vec::with_capacity(snapshot::LOG_ENTRY_HEAD + 8);
            snapshot::log_commit(&mut b, salt, seq);
            snaps.append(&b, 1);
        }
        // Only now may a dropped object's record extent be erased and
        // reused (the writer held it until its record was written).
        drop(written);
        for w in waiters {
            let _ = w.send(());
        }
        // Logs end at a batch's end: everything they add is committed.
        if !checkpoints.is_empty() {
            let r = rotate(&snaps).and_then(|()| {
                snaps
                    .compact(|r, x| record_matches(&files, salt, r, x))
                    .map_err(|e| e.to_string())
            });
            for c in checkpoints {
                let _ = c.send(r.clone());
            }
        } else if snaps.entries() >= snapshot::COMPACT_ENTRIES
            && !snaps.failed()
            && rotate(&snaps).is_ok()
        {
            let (snaps, files) = (Arc::clone(&snaps), files.clone());
            let _ = std::thread::Builder::new()
                .name("store-snapshot".into())
                .spawn(move || {
                    if let Err(e) = snaps.compact(|r, x| record_matches(&files, salt, r, x)) {
                        eprintln!(
                            "Storage {}: cannot write the index snapshot {} ({e}); \
                             the next start reads the older one or scans",
                            files.name(),
                            snaps.path().display()
                        );
                    }
                });
        }
    }
}

/// Start the snapshot's next log.
fn rotate(snaps: &Checkpoints) -> Result<(), String> {
    if snaps.failed() {
        return Err("a snapshot log append failed; the next start scans".into());
    }
    if !snaps.is_open() {
        return Err("recovery has not started the snapshot log yet".into());
    }
    let next = snaps.generation() + 1;
    snaps
        .open_log(next)
        .map_err(|e| format!("cannot start snapshot log {next} ({e})"))
}

/// A record ready to write: where, its bytes, and its snapshot entry.
struct Placed {
    ext: Extent,
    bytes: Vec<u8>,
    body: Body,
    found: FoundRecord,
    extents: Vec<BodyExtent>,
}

/// Checksum a job's body and place its record. `None` when it cannot be
/// written.
fn place_record(job: Job, salt: u64, granularity: u64, files: &FileStore) -> Option<Placed> {
    let Job {
        mut record,
        body,
        checksum: job_crc,
        slot,
        on_placed,
    } = job;
    let (crc, len, extents) = checksum(salt, &body, job_crc)?;
    record.body_len = len;
    record.body_crc = crc;
    record.extents = extents;
    // The slot length does not change the record's length.
    let need = record.encode(salt).len() as u64;
    let ext = match slot.filter(|s| s.len() >= need) {
        Some(s) => s,
        None => {
            let a = files
                .try_alloc(need.div_ceil(granularity) * granularity)
                .ok()?;
            let x = a.extent?;
            on_placed(x.clone());
            x
        }
    };
    record.slot_len = ext.len();
    let found = FoundRecord {
        off: ext.offset(),
        slot: ext.len(),
        tag: Entry::tag_of(&record.digest),
        inserted_at: record.inserted_at,
        expires: record.t_origin + record.ttl + record.grace + record.keep,
        body_len: record.body_len,
        ext_at: 0,
        ext_n: record.extents.len() as u32,
    };
    Some(Placed {
        bytes: record.encode(salt),
        ext,
        body,
        found,
        extents: std::mem::take(&mut record.extents),
    })
}

/// The salted CRC-32C of a finished body, its length and the extents it
/// fills from their start (`None` when it is not all in file extents laid
/// out that way, or a read fails). With the checksum `known` (fed every
/// byte by the fetch) nothing is read; otherwise blocking reads.
fn checksum(salt: u64, body: &Body, known: Option<Crc>) -> Option<(u32, u64, Vec<BodyExtent>)> {
    let read = known.is_none();
    let mut crc = known.unwrap_or_else(|| Crc::salted(salt));
    let mut extents: Vec<BodyExtent> = Vec::new();
    let mut len = 0u64;
    for s in body.segments()? {
        let span: &FileSpan = match s {
            Segment::File(f) => f,
            Segment::Mem(b) if b.is_empty() => continue,
            Segment::Mem(_) => return None,
        };
        let ext = span.extent();
        // A span continues its extent's bytes or starts a new extent.
        match extents.last_mut() {
            Some(last) if last.off == ext.offset() && last.used == span.at() => {
                last.used += span.len();
            }
            _ if span.at() == 0 => extents.push(BodyExtent {
                off: ext.offset(),
                len: ext.len(),
                used: span.len(),
            }),
            _ => return None,
        }
        let mut done = if read { 0 } else { span.len() };
        while done < span.len() {
            let n = (span.len() - done).min(SCAN_CHUNK as u64);
            let bytes = span.slice(done, n).read().ok()?;
            crc.update(&bytes);
            done += n;
        }
        len += span.len();
    }
    Some((crc.value(), len, extents))
}

#[cfg(test)]
mod tests;
