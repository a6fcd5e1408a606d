//! Index snapshots of the persistent store, so that a restart reads a
//! compact list of the objects on disk instead of scanning the whole store
//! file for records.
//!
//! A snapshot is two kinds of files next to the ban journal:
//!
//! * the base `NAME.snap`: every live object record at one moment (where
//!   the record is, its slot, digest tag, timing, body length and body
//!   extents), stamped with the store's identity (salt, arena size,
//!   granularity, creation time) and a generation `G`, its bytes covered by
//!   a CRC-32C;
//! * the logs `NAME.snap.G`, `NAME.snap.G+1`, …: what changed after the
//!   base, appended as it happens. The store's writer logs each record it
//!   is about to write (an *add*, synced before the record is written, so
//!   no record exists on disk that no log names) and a *commit* once its
//!   batch is durable; an erased record is logged (a *free*) before its
//!   space can be reused. Every entry carries a salted CRC-32C, so a torn
//!   tail ends the log.
//!
//! Recovery ([`load`]) takes the base and applies its logs in order
//! ([`merge`]): the newest entry for an offset decides, and adds after a
//! log's last commit are trusted only once their record is read back and
//! matches. The result lists the survivors newest first, which is the
//! order recovery claims their space in (a newer record wins space two
//! claim). A base that is missing, damaged, of another store file, of
//! another size, or without its first log, or a log torn anywhere but at
//! the end of the last one, is not used: the store is scanned instead.
//!
//! After recovery the store starts a new log (generation `K+1`) and writes
//! a base `K+1` of what it recovered (to a temporary file renamed over the
//! old base), then removes the older logs; a crash before the rename finds
//! the old base with all its logs, `K+1`'s included. While running, a log
//! that grew past [`COMPACT_ENTRIES`] (and a clean shutdown) makes the
//! writer start the next log and fold the base and the finished logs into
//! a new base ([`Checkpoints::compact`]).

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::format::{BodyExtent, Crc, FormatError, crc32c};

/// Magic of a base file.
pub const SNAP_MAGIC: &[u8; 16] = b"LACQUER-SNAP\0\0\0\0";
/// Magic of a log file.
pub const LOG_MAGIC: &[u8; 16] = b"LACQUER-SLOG\0\0\0\0";
/// The snapshot format this Lacquer writes (and the newest it reads).
pub const SNAP_VERSION: u32 = 1;
/// Bytes of a base's header: magic, version, generation, salt, arena size,
/// granularity, creation time, CRC-32C of the 60 bytes before it.
pub const SNAP_HEAD: usize = 64;
/// Bytes of a base's trailer: `LQSE`, CRC-32C (salted) of the entries,
/// entry count.
pub const SNAP_TAIL: usize = 16;
const TAIL_MAGIC: &[u8; 4] = b"LQSE";
/// Bytes of a log's header: magic, version, generation, salt, CRC-32C of
/// the 36 bytes before it.
pub const LOG_HEAD: usize = 40;
/// Bytes of a log entry before its payload: kind, payload length, CRC.
pub const LOG_ENTRY_HEAD: usize = 9;
/// Fixed bytes of an object entry (before its body extents, 16 each).
pub const ENTRY_FIXED: usize = 52;
/// Log entries after which the writer folds the log into a new base.
pub const COMPACT_ENTRIES: u64 = if cfg!(test) { 64 } else { 1 << 18 };

const ADD: u8 = 1;
const FREE: u8 = 2;
const COMMIT: u8 = 3;

/// A record the recovery found (by scanning the store file, or in a
/// snapshot): where, its slot's length (whole granules), what the index
/// and the conflict check need, and where its body extents are in
/// [`Found::extents`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FoundRecord {
    /// Arena offset of the record.
    pub off: u64,
    /// Length of its extent.
    pub slot: u64,
    /// The digest's index tag (`index::Entry::tag_of`).
    pub tag: u64,
    /// When the object entered the cache.
    pub inserted_at: f64,
    /// When it is gone for good.
    pub expires: f64,
    /// Its body's length.
    pub body_len: u64,
    /// First of its body extents in [`Found::extents`].
    pub ext_at: u32,
    /// How many.
    pub ext_n: u32,
}

/// Records found, one fixed-size entry each, the body extents of all of
/// them in one list.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Found {
    /// The records.
    pub records: Vec<FoundRecord>,
    /// Their body extents.
    pub extents: Vec<BodyExtent>,
}

impl Found {
    /// The body extents of `r`.
    pub fn extents_of(&self, r: &FoundRecord) -> &[BodyExtent] {
        let at = r.ext_at as usize;
        self.extents
            .get(at..at + r.ext_n as usize)
            .unwrap_or_default()
    }

    /// Append `r` with its extents `ext`; false (nothing added) when the
    /// list is beyond what an entry can index.
    pub fn push(&mut self, r: &FoundRecord, ext: &[BodyExtent]) -> bool {
        let (Ok(at), Ok(n)) = (u32::try_from(self.extents.len()), u32::try_from(ext.len())) else {
            return false;
        };
        if at.checked_add(n).is_none() {
            return false;
        }
        self.extents.extend_from_slice(ext);
        self.records.push(FoundRecord {
            ext_at: at,
            ext_n: n,
            ..*r
        });
        true
    }
}

/// What a snapshot must match to describe a store file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Identity {
    /// The store's salt (new for every store laid out).
    pub salt: u64,
    /// Its arena size.
    pub arena_size: u64,
    /// Its granularity.
    pub granularity: u64,
    /// When it was laid out.
    pub created: f64,
}

impl Identity {
    fn same(&self, o: &Identity) -> bool {
        self.salt == o.salt
            && self.arena_size == o.arena_size
            && self.granularity == o.granularity
            && self.created.to_bits() == o.created.to_bits()
    }
}

/// Why a snapshot file is not used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SnapError {
    /// Its bytes do not parse or check out.
    #[error("damaged ({0})")]
    Damaged(#[from] FormatError),
    /// It describes another store file, or this one at another size.
    #[error("of another store file or size ({0})")]
    Mismatch(&'static str),
    /// It does not follow from the files next to it.
    #[error("stale ({0})")]
    Stale(String),
    /// It cannot be read.
    #[error("unreadable ({0})")]
    Io(String),
}

/// One operation of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOp {
    /// A record about to be written: [`Log::found`]'s record at this index.
    Add(u32),
    /// The record at this arena offset was erased.
    Free(u64),
    /// Every add before it is durable.
    Commit(u64),
}

/// A decoded log.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Log {
    /// Its generation.
    pub generation: u64,
    /// The records its adds name.
    pub found: Found,
    /// Its operations in order.
    pub ops: Vec<LogOp>,
    /// Bytes after the last valid entry (a torn tail).
    pub torn: bool,
}

/// A bounds-checked little-endian reader.
struct Rd<'a>(&'a [u8]);

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if self.0.len() < n {
            return Err(FormatError::Truncated);
        }
        let (h, t) = self.0.split_at(n);
        self.0 = t;
        Ok(h)
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }

    fn u64(&mut self) -> Result<u64, FormatError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    fn f64(&mut self) -> Result<f64, FormatError> {
        Ok(f64::from_bits(self.u64()?))
    }
}

/// Append the entry of `r` with body extents `ext`.
pub fn put_entry(b: &mut Vec<u8>, r: &FoundRecord, ext: &[BodyExtent]) {
    b.extend_from_slice(&r.tag.to_le_bytes());
    b.extend_from_slice(&r.off.to_le_bytes());
    b.extend_from_slice(&r.slot.to_le_bytes());
    b.extend_from_slice(&r.inserted_at.to_le_bytes());
    b.extend_from_slice(&r.expires.to_le_bytes());
    b.extend_from_slice(&r.body_len.to_le_bytes());
    b.extend_from_slice(&(ext.len() as u32).to_le_bytes());
    for x in ext {
        b.extend_from_slice(&x.off.to_le_bytes());
        b.extend_from_slice(&x.len.to_le_bytes());
    }
}

/// Decode one object entry into `out`, checking it against the store's
/// geometry: granule-aligned space within the arena, finite times, a body
/// no longer than its extents.
fn get_entry(r: &mut Rd<'_>, id: &Identity, out: &mut Found) -> Result<(), FormatError> {
    let g = id.granularity.max(1);
    let in_arena = |off: u64, len: u64| {
        len > 0
            && off.is_multiple_of(g)
            && len.is_multiple_of(g)
            && off.checked_add(len).is_some_and(|e| e <= id.arena_size)
    };
    let tag = r.u64()?;
    let off = r.u64()?;
    let slot = r.u64()?;
    let inserted_at = r.f64()?;
    let expires = r.f64()?;
    let body_len = r.u64()?;
    let n = r.u32()? as usize;
    if tag == 0 || !in_arena(off, slot) || slot > u64::from(u32::MAX) {
        return Err(FormatError::Malformed("snapshot entry: record place"));
    }
    if !inserted_at.is_finite() || !expires.is_finite() {
        return Err(FormatError::Malformed("snapshot entry: timing"));
    }
    if n.saturating_mul(16) > r.0.len() {
        return Err(FormatError::Malformed("snapshot entry: extent count"));
    }
    let mark = out.extents.len();
    let mut room = 0u64;
    for _ in 0..n {
        let (xo, xl) = (r.u64()?, r.u64()?);
        if !in_arena(xo, xl) {
            out.extents.truncate(mark);
            return Err(FormatError::Malformed("snapshot entry: body extent"));
        }
        room = room.saturating_add(xl);
        out.extents.push(BodyExtent {
            off: xo,
            len: xl,
            used: xl,
        });
    }
    let rec = FoundRecord {
        off,
        slot,
        tag,
        inserted_at,
        expires,
        body_len,
        ext_at: 0,
        ext_n: 0,
    };
    let (Ok(ext_at), Ok(ext_n)) = (u32::try_from(mark), u32::try_from(n)) else {
        out.extents.truncate(mark);
        return Err(FormatError::Malformed("snapshot: too many extents"));
    };
    if body_len > room {
        out.extents.truncate(mark);
        return Err(FormatError::Malformed("snapshot entry: body length"));
    }
    out.records.push(FoundRecord {
        ext_at,
        ext_n,
        ..rec
    });
    Ok(())
}

/// The header of a base.
pub fn snap_header(id: &Identity, generation: u64) -> [u8; SNAP_HEAD] {
    let mut b = [0u8; SNAP_HEAD];
    b[..16].copy_from_slice(SNAP_MAGIC);
    b[16..20].copy_from_slice(&SNAP_VERSION.to_le_bytes());
    b[20..28].copy_from_slice(&generation.to_le_bytes());
    b[28..36].copy_from_slice(&id.salt.to_le_bytes());
    b[36..44].copy_from_slice(&id.arena_size.to_le_bytes());
    b[44..52].copy_from_slice(&id.granularity.to_le_bytes());
    b[52..60].copy_from_slice(&id.created.to_le_bytes());
    let c = crc32c(&b[..60]);
    b[60..64].copy_from_slice(&c.to_le_bytes());
    b
}

/// Read a base's header: its identity and generation.
pub fn peek_snapshot(b: &[u8]) -> Result<(Identity, u64), FormatError> {
    if b.len() < SNAP_HEAD {
        return Err(FormatError::Truncated);
    }
    if &b[..16] != SNAP_MAGIC {
        return Err(FormatError::NoMagic);
    }
    let mut r = Rd(&b[16..SNAP_HEAD]);
    let version = r.u32()?;
    let generation = r.u64()?;
    let id = Identity {
        salt: r.u64()?,
        arena_size: r.u64()?,
        granularity: r.u64()?,
        created: r.f64()?,
    };
    if r.u32()? != crc32c(&b[..60]) {
        return Err(FormatError::Checksum);
    }
    if version > SNAP_VERSION {
        return Err(FormatError::Version(version));
    }
    if version == 0 {
        return Err(FormatError::Malformed("snapshot version 0"));
    }
    Ok((id, generation))
}

/// Writes a base: the header now, entries as they come, the trailer at
/// [`finish`](Self::finish).
pub struct SnapWriter<W: Write> {
    w: W,
    crc: Crc,
    count: u64,
    buf: Vec<u8>,
}

impl<W: Write> SnapWriter<W> {
    /// Start a base of generation `generation` for the store `id`.
    pub fn new(mut w: W, id: &Identity, generation: u64) -> io::Result<Self> {
        w.write_all(&snap_header(id, generation))?;
        Ok(SnapWriter {
            w,
            crc: Crc::salted(id.salt),
            count: 0,
            buf: Vec::with_capacity(256),
        })
    }

    /// Add an object.
    pub fn push(&mut self, r: &FoundRecord, ext: &[BodyExtent]) -> io::Result<()> {
        self.buf.clear();
        put_entry(&mut self.buf, r, ext);
        self.crc.update(&self.buf);
        self.count += 1;
        self.w.write_all(&self.buf)
    }

    /// Write the trailer; the writer back.
    pub fn finish(mut self) -> io::Result<W> {
        let mut t = [0u8; SNAP_TAIL];
        t[..4].copy_from_slice(TAIL_MAGIC);
        t[4..8].copy_from_slice(&self.crc.value().to_le_bytes());
        t[8..16].copy_from_slice(&self.count.to_le_bytes());
        self.w.write_all(&t)?;
        Ok(self.w)
    }
}

/// Decode a base written for the store `want`: its generation and objects.
pub fn decode_snapshot(b: &[u8], want: &Identity) -> Result<(u64, Found), SnapError> {
    let (id, generation) = peek_snapshot(b)?;
    if id.salt != want.salt {
        return Err(SnapError::Mismatch("salt"));
    }
    if !id.same(want) {
        return Err(SnapError::Mismatch("size or layout"));
    }
    if b.len() < SNAP_HEAD + SNAP_TAIL {
        return Err(FormatError::Truncated.into());
    }
    let body = &b[SNAP_HEAD..b.len() - SNAP_TAIL];
    let mut t = Rd(&b[b.len() - SNAP_TAIL..]);
    if t.take(4)? != TAIL_MAGIC {
        return Err(FormatError::Truncated.into());
    }
    let crc = t.u32()?;
    let count = t.u64()?;
    let mut c = Crc::salted(id.salt);
    c.update(body);
    if c.value() != crc {
        return Err(FormatError::Checksum.into());
    }
    // At most one entry per `ENTRY_FIXED` bytes: a forged count allocates
    // nothing large.
    let cap = usize::try_from(count)
        .unwrap_or(usize::MAX)
        .min(body.len() / ENTRY_FIXED);
    let mut out = Found {
        records: Vec::with_capacity(cap),
        extents: Vec::with_capacity(cap),
    };
    let mut r = Rd(body);
    while !r.0.is_empty() {
        get_entry(&mut r, want, &mut out)?;
    }
    if out.records.len() as u64 != count {
        return Err(FormatError::Malformed("snapshot: entry count").into());
    }
    Ok((generation, out))
}

/// The header of a log of generation `generation`.
pub fn log_header(generation: u64, salt: u64) -> [u8; LOG_HEAD] {
    let mut b = [0u8; LOG_HEAD];
    b[..16].copy_from_slice(LOG_MAGIC);
    b[16..20].copy_from_slice(&SNAP_VERSION.to_le_bytes());
    b[20..28].copy_from_slice(&generation.to_le_bytes());
    b[28..36].copy_from_slice(&salt.to_le_bytes());
    let c = crc32c(&b[..36]);
    b[36..40].copy_from_slice(&c.to_le_bytes());
    b
}

fn log_entry(b: &mut Vec<u8>, salt: u64, kind: u8, payload: &[u8]) {
    let len = (payload.len() as u32).to_le_bytes();
    let mut c = Crc::salted(salt);
    c.update(&[kind]);
    c.update(&len);
    c.update(payload);
    b.push(kind);
    b.extend_from_slice(&len);
    b.extend_from_slice(&c.value().to_le_bytes());
    b.extend_from_slice(payload);
}

/// Append a log's add of `r`.
pub fn log_add(b: &mut Vec<u8>, salt: u64, r: &FoundRecord, ext: &[BodyExtent]) {
    let mut p = Vec::with_capacity(ENTRY_FIXED + 16 * ext.len());
    put_entry(&mut p, r, ext);
    log_entry(b, salt, ADD, &p);
}

/// Append a log's free of the record at `off`.
pub fn log_free(b: &mut Vec<u8>, salt: u64, off: u64) {
    log_entry(b, salt, FREE, &off.to_le_bytes());
}

/// Append a log's commit (`seq` numbers the writer's batches).
pub fn log_commit(b: &mut Vec<u8>, salt: u64, seq: u64) {
    log_entry(b, salt, COMMIT, &seq.to_le_bytes());
}

/// Decode a log written for the store `want`. Entries stop at the first
/// one that does not check out (a torn tail, [`Log::torn`]).
pub fn decode_log(b: &[u8], want: &Identity) -> Result<Log, SnapError> {
    if b.len() < LOG_HEAD {
        return Err(FormatError::Truncated.into());
    }
    if &b[..16] != LOG_MAGIC {
        return Err(FormatError::NoMagic.into());
    }
    let mut r = Rd(&b[16..LOG_HEAD]);
    let version = r.u32()?;
    let generation = r.u64()?;
    let salt = r.u64()?;
    if r.u32()? != crc32c(&b[..36]) {
        return Err(FormatError::Checksum.into());
    }
    if version > SNAP_VERSION {
        return Err(FormatError::Version(version).into());
    }
    if version == 0 {
        return Err(FormatError::Malformed("snapshot log version 0").into());
    }
    if salt != want.salt {
        return Err(SnapError::Mismatch("salt"));
    }
    let mut log = Log {
        generation,
        ..Log::default()
    };
    let mut r = Rd(&b[LOG_HEAD..]);
    while !r.0.is_empty() {
        if entry(&mut r, want, &mut log).is_err() {
            log.torn = true;
            break;
        }
    }
    return Ok(log);

    fn entry(r: &mut Rd<'_>, want: &Identity, log: &mut Log) -> Result<(), FormatError> {
        let head = r.take(LOG_ENTRY_HEAD)?;
        let kind = head[0];
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
        let crc = u32::from_le_bytes([head[5], head[6], head[7], head[8]]);
        let payload = r.take(len as usize)?;
        let mut c = Crc::salted(want.salt);
        c.update(&head[..5]);
        c.update(payload);
        if c.value() != crc {
            return Err(FormatError::Checksum);
        }
        let mut p = Rd(payload);
        let op = match kind {
            ADD => {
                let at = u32::try_from(log.found.records.len())
                    .map_err(|_| FormatError::Malformed("log: too many adds"))?;
                let mut one = Found::default();
                get_entry(&mut p, want, &mut one)?;
                if !p.0.is_empty() {
                    return Err(FormatError::Malformed("log: add length"));
                }
                let rec = one.records[0];
                if !log.found.push(&rec, one.extents_of(&rec)) {
                    return Err(FormatError::Malformed("log: too many extents"));
                }
                LogOp::Add(at)
            }
            FREE => LogOp::Free(p.u64()?),
            COMMIT => LogOp::Commit(p.u64()?),
            _ => return Err(FormatError::Malformed("log: entry kind")),
        };
        if !p.0.is_empty() {
            return Err(FormatError::Malformed("log: entry length"));
        }
        log.ops.push(op);
        Ok(())
    }
}

/// The live objects of a base and the logs after it (oldest first), newest
/// first: the newest entry for an offset decides (an add makes it live, a
/// free dead), and an add after its log's last commit is kept only when
/// `check` (which reads the record back) says its record is there.
pub fn merge(
    base: &Found,
    logs: &[Log],
    mut check: impl FnMut(&FoundRecord, &[BodyExtent]) -> bool,
) -> Found {
    let mut decided: HashSet<u64> = HashSet::new();
    let mut out = Found {
        records: Vec::with_capacity(base.records.len()),
        extents: Vec::with_capacity(base.extents.len()),
    };
    for log in logs.iter().rev() {
        let last_commit = log.ops.iter().rposition(|o| matches!(o, LogOp::Commit(_)));
        for (i, op) in log.ops.iter().enumerate().rev() {
            match *op {
                LogOp::Free(off) => {
                    decided.insert(off);
                }
                LogOp::Commit(_) => {}
                LogOp::Add(k) => {
                    let Some(r) = log.found.records.get(k as usize) else {
                        continue;
                    };
                    if !decided.insert(r.off) {
                        continue;
                    }
                    let ext = log.found.extents_of(r);
                    let committed = last_commit.is_some_and(|c| i < c);
                    if committed || check(r, ext) {
                        out.push(r, ext);
                    }
                }
            }
        }
    }
    for r in &base.records {
        if !decided.contains(&r.off) {
            out.push(r, base.extents_of(r));
        }
    }
    out
}

/// The file of log `generation` next to base `path`.
pub fn log_path(path: &Path, generation: u64) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".{generation}"));
    PathBuf::from(p)
}

/// The generations of the logs next to base `path`.
fn log_generations(path: &Path) -> Vec<u64> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut prefix = name.to_owned();
    prefix.push(".");
    let prefix = prefix.as_encoded_bytes();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| {
        let e = e.ok()?;
        let n = e.file_name();
        let rest = n.as_encoded_bytes().strip_prefix(prefix)?;
        std::str::from_utf8(rest).ok()?.parse::<u64>().ok()
    })
    .collect()
}

fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(d) = File::open(dir)
    {
        let _ = d.sync_all();
    }
}

/// A generation newer than every snapshot file next to base `path`.
pub fn next_generation(path: &Path) -> u64 {
    let base = std::fs::read(path)
        .ok()
        .and_then(|b| peek_snapshot(&b).ok())
        .map_or(0, |(_, g)| g);
    log_generations(path).into_iter().fold(base, u64::max) + 1
}

/// Remove the base `path` (first, so that its logs never count without
/// it) and its logs older than `keep_from` (all of them with `u64::MAX`).
pub fn remove(path: &Path, base_too: bool, keep_from: u64) {
    if base_too {
        let _ = std::fs::remove_file(path);
        sync_dir(path);
    }
    for g in log_generations(path) {
        if g < keep_from {
            let _ = std::fs::remove_file(log_path(path, g));
        }
    }
}

/// The base at `path` and its logs, decoded.
pub fn read(path: &Path, want: &Identity) -> Result<(u64, Found, Vec<Log>), SnapError> {
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => SnapError::Stale("no base".into()),
        _ => SnapError::Io(e.to_string()),
    })?;
    let (generation, base) = decode_snapshot(&bytes, want)?;
    drop(bytes);
    let mut logs: Vec<Log> = Vec::new();
    let mut g = generation;
    loop {
        let b = match std::fs::read(log_path(path, g)) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => return Err(SnapError::Io(e.to_string())),
        };
        if logs.last().is_some_and(|l| l.torn) {
            return Err(SnapError::Stale(format!(
                "log {} is torn before the end",
                g - 1
            )));
        }
        let log = decode_log(&b, want)?;
        if log.generation != g {
            return Err(SnapError::Stale(format!(
                "log {g} says generation {}",
                log.generation
            )));
        }
        logs.push(log);
        g += 1;
    }
    if logs.is_empty() {
        return Err(SnapError::Stale(format!("log {generation} is missing")));
    }
    if let Some(after) = log_generations(path).into_iter().find(|&x| x > g) {
        return Err(SnapError::Stale(format!(
            "log {g} is missing before log {after}"
        )));
    }
    Ok((generation, base, logs))
}

/// Write base `generation` of `found` (the records `keep` lists, or all) to a
/// temporary file and rename it over `path`.
pub fn write_base(
    path: &Path,
    id: &Identity,
    generation: u64,
    found: &Found,
    keep: Option<&[u32]>,
) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    let tmp = PathBuf::from(tmp);
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    let mut w = SnapWriter::new(BufWriter::with_capacity(1 << 20, f), id, generation)?;
    match keep {
        Some(k) => {
            for &i in k {
                if let Some(r) = found.records.get(i as usize) {
                    w.push(r, found.extents_of(r))?;
                }
            }
        }
        None => {
            for r in &found.records {
                w.push(r, found.extents_of(r))?;
            }
        }
    }
    let f = w.finish()?.into_inner().map_err(|e| e.into_error())?;
    f.sync_data()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    sync_dir(path);
    Ok(())
}

/// Create log `generation` next to base `path` (its header written, not yet
/// durable: [`Checkpoints::sync`] makes it so before anything relies on
/// it), open for appends.
pub fn create_log(path: &Path, generation: u64, salt: u64) -> io::Result<File> {
    let p = log_path(path, generation);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&p)?;
    f.write_all(&log_header(generation, salt))?;
    OpenOptions::new().append(true).open(&p)
}

/// The running store's snapshot files: the open log, where the erasure
/// hook and the writer append.
#[derive(Debug)]
pub struct Checkpoints {
    path: PathBuf,
    id: Identity,
    /// The open log and its generation (`None` until recovery started it).
    log: Mutex<LogState>,
    /// Entries appended to the open log.
    entries: AtomicU64,
    /// Held while a base is written.
    compacting: Mutex<()>,
}

#[derive(Debug, Default)]
struct LogState {
    file: Option<File>,
    generation: u64,
    /// Frees from before the log was open.
    pending: Vec<u8>,
    /// An append failed: the log no longer says everything.
    failed: bool,
    /// The open log's directory entry may not be durable yet.
    new_entry: bool,
}

impl Checkpoints {
    /// For the base at `path` of the store `id`; no log open yet.
    pub fn new(path: PathBuf, id: Identity) -> Checkpoints {
        Checkpoints {
            path,
            id,
            log: Mutex::new(LogState::default()),
            entries: AtomicU64::new(0),
            compacting: Mutex::new(()),
        }
    }

    /// The base file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store this is for.
    pub fn identity(&self) -> &Identity {
        &self.id
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Append encoded entries to the open log (or keep them until it is
    /// open). A failed write makes every later base refused: the log
    /// no longer says everything, so the next start scans.
    pub fn append(&self, bytes: &[u8], n: u64) {
        let mut s = self.state();
        if s.failed {
            return;
        }
        match s.file.as_mut() {
            Some(f) => {
                if f.write_all(bytes).is_err() {
                    drop(s);
                    self.fail();
                    return;
                }
            }
            None => s.pending.extend_from_slice(bytes),
        }
        self.entries.fetch_add(n, Relaxed);
    }

    /// The log no longer says everything: no base may be used any more
    /// (the next start scans), nothing more is kept.
    fn fail(&self) {
        {
            let mut s = self.state();
            s.failed = true;
            s.pending = Vec::new();
            s.file = None;
        }
        let _ = std::fs::remove_file(&self.path);
        sync_dir(&self.path);
    }

    /// Log the erasure of the record at `off`.
    pub fn free(&self, off: u64) {
        let mut b = Vec::with_capacity(LOG_ENTRY_HEAD + 8);
        log_free(&mut b, self.id.salt, off);
        self.append(&b, 1);
    }

    /// Make the open log durable.
    pub fn sync(&self) {
        let (f, new_entry) = {
            let mut s = self.state();
            let f = s.file.as_ref().and_then(|f| f.try_clone().ok());
            (f, std::mem::take(&mut s.new_entry))
        };
        if let Some(f) = f {
            let _ = f.sync_data();
        }
        if new_entry {
            sync_dir(&self.path);
        }
    }

    /// Entries in the open log.
    pub fn entries(&self) -> u64 {
        self.entries.load(Relaxed)
    }

    /// Whether appends failed (no base is written any more).
    pub fn failed(&self) -> bool {
        self.state().failed
    }

    /// Open log `generation` (created durable) for appends; what was kept for it
    /// is written first.
    pub fn open_log(&self, generation: u64) -> io::Result<()> {
        let f = match create_log(&self.path, generation, self.id.salt) {
            Ok(f) => f,
            Err(e) => {
                self.fail();
                return Err(e);
            }
        };
        let (old, lost) = {
            let mut s = self.state();
            let old = s.file.replace(f);
            s.generation = generation;
            s.new_entry = true;
            let pending = std::mem::take(&mut s.pending);
            let lost = !pending.is_empty()
                && s.file
                    .as_mut()
                    .is_some_and(|f| f.write_all(&pending).is_err());
            (old, lost)
        };
        if lost {
            self.fail();
            return Err(io::Error::other("cannot append to the new log"));
        }
        self.entries.store(0, Relaxed);
        if let Some(o) = old {
            // The finished log is complete on disk before a base folds it.
            o.sync_data()?;
        }
        Ok(())
    }

    /// Hold off every fold until the guard drops (recovery writes its
    /// base meanwhile).
    pub fn hold(&self) -> std::sync::MutexGuard<'_, ()> {
        self.compacting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether recovery has opened a log (before that nothing may rotate
    /// or fold: recovery picks the next generation).
    pub fn is_open(&self) -> bool {
        self.state().file.is_some()
    }

    /// The open log's generation.
    pub fn generation(&self) -> u64 {
        self.state().generation
    }

    /// Fold the base and every finished log (older than the open one) into
    /// a new base of the open log's generation, then remove the folded
    /// logs. `check` reads a record back (see [`merge`]).
    pub fn compact(
        &self,
        check: impl FnMut(&FoundRecord, &[BodyExtent]) -> bool,
    ) -> Result<u64, SnapError> {
        let _g = self.compacting.lock().unwrap_or_else(|p| p.into_inner());
        if self.failed() {
            return Err(SnapError::Stale("a log append failed".into()));
        }
        let open = self.generation();
        let (generation, base, mut logs) = read(&self.path, &self.id)?;
        if generation == open {
            return Ok(base.records.len() as u64);
        }
        logs.retain(|l| l.generation < open);
        let merged = merge(&base, &logs, check);
        drop((base, logs));
        // The new base's first log is durable before the base names it.
        self.sync();
        write_base(&self.path, &self.id, open, &merged, None)
            .map_err(|e| SnapError::Io(e.to_string()))?;
        remove(&self.path, false, open);
        Ok(merged.records.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> Identity {
        Identity {
            salt: 7,
            arena_size: 1 << 20,
            granularity: 512,
            created: 1.5,
        }
    }

    fn rec(off: u64, tag: u64) -> (FoundRecord, Vec<BodyExtent>) {
        (
            FoundRecord {
                off,
                slot: 512,
                tag,
                inserted_at: off as f64,
                expires: 100.0,
                body_len: 700,
                ext_at: 0,
                ext_n: 0,
            },
            vec![BodyExtent {
                off: off + 512,
                len: 1024,
                used: 1024,
            }],
        )
    }

    fn base_of(recs: &[(FoundRecord, Vec<BodyExtent>)]) -> Vec<u8> {
        let mut w = SnapWriter::new(Vec::new(), &id(), 3).unwrap();
        for (r, x) in recs {
            w.push(r, x).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn a_base_reads_back_as_written() {
        let recs: Vec<_> = (0..10).map(|i| rec(i * 2048, i + 1)).collect();
        let b = base_of(&recs);
        let (generation, f) = decode_snapshot(&b, &id()).unwrap();
        assert_eq!(generation, 3);
        assert_eq!(f.records.len(), 10);
        for (i, r) in f.records.iter().enumerate() {
            assert_eq!(r.off, recs[i].0.off);
            assert_eq!(f.extents_of(r), &recs[i].1[..]);
        }
    }

    #[test]
    fn a_damaged_truncated_or_foreign_base_is_refused() {
        let b = base_of(&[rec(0, 1), rec(2048, 2)]);
        for cut in 0..b.len() {
            assert!(decode_snapshot(&b[..cut], &id()).is_err(), "cut at {cut}");
        }
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert!(decode_snapshot(&d, &id()).is_err(), "flip at {i}");
        }
        let other = Identity { salt: 8, ..id() };
        assert_eq!(
            decode_snapshot(&b, &other),
            Err(SnapError::Mismatch("salt"))
        );
        let grown = Identity {
            arena_size: 2 << 20,
            ..id()
        };
        assert!(matches!(
            decode_snapshot(&b, &grown),
            Err(SnapError::Mismatch(_))
        ));
    }

    #[test]
    fn a_log_stops_at_a_torn_tail() {
        let mut b = log_header(3, 7).to_vec();
        let (r, x) = rec(4096, 9);
        log_add(&mut b, 7, &r, &x);
        log_commit(&mut b, 7, 1);
        log_free(&mut b, 7, 4096);
        let whole = decode_log(&b, &id()).unwrap();
        assert_eq!(
            whole.ops,
            vec![LogOp::Add(0), LogOp::Commit(1), LogOp::Free(4096)]
        );
        assert!(!whole.torn);
        let torn = decode_log(&b[..b.len() - 3], &id()).unwrap();
        assert_eq!(torn.ops.len(), 2);
        assert!(torn.torn);
    }

    #[test]
    fn merge_lets_the_newest_entry_decide_and_checks_uncommitted_adds() {
        let base = {
            let b = base_of(&[rec(0, 1), rec(2048, 2), rec(8192, 5)]);
            decode_snapshot(&b, &id()).unwrap().1
        };
        let mut b = log_header(3, 7).to_vec();
        log_free(&mut b, 7, 2048);
        let (r, x) = rec(4096, 3);
        log_add(&mut b, 7, &r, &x);
        log_commit(&mut b, 7, 1);
        // After the last commit: kept only if its record is there.
        let (r, x) = rec(6144, 4);
        log_add(&mut b, 7, &r, &x);
        let (r, x) = rec(8192, 6);
        log_add(&mut b, 7, &r, &x);
        let log = decode_log(&b, &id()).unwrap();
        let m = merge(&base, std::slice::from_ref(&log), |r, _| r.off == 6144);
        let offs: Vec<u64> = m.records.iter().map(|r| r.off).collect();
        // The uncommitted add at 8192 failed its check: the base's entry
        // at 8192 is dead with it (that space was handed out again).
        assert_eq!(offs, vec![6144, 4096, 0]);
        assert_eq!(m.extents_of(&m.records[1])[0].off, 4096 + 512);
    }
}
