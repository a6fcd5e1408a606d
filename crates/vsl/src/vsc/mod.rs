//! Shared-memory counters (`<workdir>/_.vsm_child/_.vsc`), Varnish's VSC.
//!
//! The daemon creates the file with [`Vsc::create`] and adds *sections* at
//! run time: `MAIN` once, one `VBE.<vcl>.<backend>` per backend, one
//! `SMA.<store>` per storage, ... Each section follows a [`Schema`] (the
//! declarative tables in [`tables`]) and owns a contiguous run of 64-bit
//! counter slots. The hot path holds a [`Section`] and bumps a slot by index
//! with one relaxed atomic add; dropping the section removes it.
//!
//! # File layout (64-bit words)
//! A header (magic, version, epoch, a directory *generation*, capacities),
//! a fixed directory of section entries, an append-only arena holding the
//! encoded schemas (names, types, descriptions), then the counter values.
//! Directory changes bump the generation to odd, change entries, and bump it
//! back to even (a seqlock), so readers ([`VscReader`]) retry a snapshot that
//! raced with a change instead of showing a half-added section.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, OnceLock};

use crate::shm::{self, ShmReader, ShmWriter};
use crate::vsm::VsmDir;

/// Counter semantics.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CounterType {
    /// Only grows (`c`).
    Counter,
    /// Goes up and down (`g`).
    Gauge,
    /// A bit pattern (`b`).
    Bitmap,
}

impl CounterType {
    /// varnishstat's flag letter.
    pub fn flag(self) -> char {
        match self {
            CounterType::Counter => 'c',
            CounterType::Gauge => 'g',
            CounterType::Bitmap => 'b',
        }
    }
}

/// How a value is displayed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    /// Plain number (`i`).
    Integer,
    /// Bytes (`B`).
    Bytes,
    /// Seconds (`d`).
    Duration,
    /// Bit pattern (`b`).
    Bitmap,
}

impl Format {
    /// varnishstat's format letter.
    pub fn letter(self) -> char {
        match self {
            Format::Integer => 'i',
            Format::Bytes => 'B',
            Format::Duration => 'd',
            Format::Bitmap => 'b',
        }
    }
}

/// Verbosity level of a counter.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Level {
    /// Shown by default.
    Info,
    /// Diagnostic.
    Diag,
    /// Debugging.
    Debug,
}

/// Static description of one counter of a schema.
#[derive(Debug)]
pub struct CounterDef {
    /// Field name (`cache_hit`).
    pub name: &'static str,
    /// Semantics.
    pub ctype: CounterType,
    /// Display format.
    pub format: Format,
    /// Level.
    pub level: Level,
    /// One-line description (what varnishstat prints).
    pub oneliner: &'static str,
    /// Longer description.
    pub long: &'static str,
}

/// The counters of a kind of section.
#[derive(Debug)]
pub struct Schema {
    /// Kind (`MAIN`, `VBE`, ...).
    pub kind: &'static str,
    /// Description of the kind.
    pub desc: &'static str,
    /// The counters, in order; a counter's index is its slot offset.
    pub fields: &'static [CounterDef],
}

macro_rules! schema {
    ($enum:ident, $static:ident, $kind:literal, $desc:literal;
     $( $name:ident : $ty:ident, $fmt:ident, $lvl:ident, $one:literal, $long:literal; )*) => {
        #[doc = concat!("Counter indexes of the `", $kind, "` schema.")]
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        #[repr(usize)]
        pub enum $enum {
            $(
                #[doc = $one]
                $name,
            )*
        }

        impl From<$enum> for usize {
            #[inline]
            fn from(f: $enum) -> usize {
                f as usize
            }
        }

        #[doc = concat!("Schema of the `", $kind, "` counters.")]
        pub static $static: Schema = Schema {
            kind: $kind,
            desc: $desc,
            fields: &[
                $( CounterDef {
                    name: stringify!($name),
                    ctype: CounterType::$ty,
                    format: Format::$fmt,
                    level: Level::$lvl,
                    oneliner: $one,
                    long: $long,
                }, )*
            ],
        };
    };
}

mod render;
pub mod tables;

pub use render::{filter, render_json, render_list, render_once, render_xml};

const MAGIC: u64 = u64::from_le_bytes(*b"LQVSC\0\0\x01");
const VERSION: u64 = 1;
const H_MAGIC: usize = 0;
const H_VERSION: usize = 1;
const H_EPOCH: usize = 2;
const H_GEN: usize = 3;
const H_NSECT: usize = 4;
const H_NVAL: usize = 5;
const H_ARENA: usize = 6;
const H_ARENA_USED: usize = 7;
const DIR: usize = 16;
const SECT_WORDS: usize = 24;
const S_LIVE: usize = 0;
const S_SEQ: usize = 1;
const S_SCHEMA: usize = 2;
const S_BASE: usize = 3;
const S_NFIELDS: usize = 4;
const S_NAMELEN: usize = 5;
const S_NAME: usize = 6;
/// Longest section name in bytes.
pub const MAX_NAME: usize = (SECT_WORDS - S_NAME) * 8;

/// File name of the counters inside the cache's shared-memory directory.
pub const VSC_FILE: &str = "_.vsc";

/// Path of the counters file for a working directory: in the cache's
/// directory (`_.vsm_child/`), whose index lists each section as a `Stat`
/// segment ([`Vsc::publish_in`]).
pub fn vsc_path(workdir: &Path) -> PathBuf {
    workdir.join(crate::vsm::CHILD_DIR).join(VSC_FILE)
}

/// Errors of the counters file.
#[derive(Debug, thiserror::Error)]
pub enum VscError {
    /// File system or mapping failure.
    #[error("{path}: {source}")]
    Io {
        /// File concerned.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not a counters file of this format, or is corrupt.
    #[error("{path}: {what}; is the daemon running with this working directory (-n)?")]
    Format {
        /// File concerned.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The file is full.
    #[error("counter segment full: {0}; restart with a larger capacity")]
    Full(String),
    /// Bad section name.
    #[error("bad counter section name \"{0}\": must be 1 to {MAX_NAME} bytes without spaces")]
    BadName(String),
    /// A snapshot kept racing with directory changes.
    #[error("counters changed too often while being read; try again")]
    Busy,
}

/// Capacities of the counters file.
#[derive(Clone, Debug)]
pub struct VscConfig {
    /// Maximum number of live sections.
    pub max_sections: usize,
    /// Maximum number of counter slots.
    pub max_values: usize,
    /// Bytes for encoded schemas.
    pub arena_bytes: usize,
}

impl Default for VscConfig {
    fn default() -> Self {
        VscConfig {
            max_sections: 2048,
            max_values: 65536,
            arena_bytes: 256 * 1024,
        }
    }
}

struct WriterState {
    schemas: HashMap<usize, usize>,
    free_sections: Vec<usize>,
    next_value: usize,
    free_values: Vec<(usize, usize)>,
    seq: u64,
}

struct Inner {
    shm: ShmWriter,
    path: PathBuf,
    nsect: usize,
    nval: usize,
    arena: usize,
    arena_words: usize,
    values: usize,
    state: Mutex<WriterState>,
    /// The directory whose index lists the sections (see
    /// [`Vsc::publish_in`]).
    index: OnceLock<Arc<Mutex<VsmDir>>>,
}

/// The writer side of the counters file.
#[derive(Clone)]
pub struct Vsc {
    inner: Arc<Inner>,
}

impl fmt::Debug for Vsc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vsc")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// A live section: the hot-path handle to its counters. Removed from the
/// file when dropped.
pub struct Section {
    inner: Arc<Inner>,
    slot: usize,
    base: usize,
    len: usize,
    name: String,
}

impl fmt::Debug for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Section").field("name", &self.name).finish()
    }
}

impl Vsc {
    /// Creates (or replaces) the counters file at `path`.
    pub fn create(path: &Path, cfg: &VscConfig) -> Result<Vsc, VscError> {
        let nsect = cfg.max_sections.max(1);
        let nval = cfg.max_values.max(1);
        let arena_words = (cfg.arena_bytes / 8).max(64);
        let arena = DIR + nsect * SECT_WORDS;
        let values = arena + arena_words;
        let bytes = (values + nval) * 8;
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let shm = ShmWriter::create(path, bytes, |w| {
            w.at(H_VERSION).store(VERSION, Ordering::Relaxed);
            w.at(H_EPOCH).store(epoch, Ordering::Relaxed);
            w.at(H_NSECT).store(nsect as u64, Ordering::Relaxed);
            w.at(H_NVAL).store(nval as u64, Ordering::Relaxed);
            w.at(H_ARENA).store(arena_words as u64, Ordering::Relaxed);
            w.at(H_MAGIC).store(MAGIC, Ordering::Release);
        })
        .map_err(|source| VscError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Vsc {
            inner: Arc::new(Inner {
                shm,
                path: path.to_path_buf(),
                nsect,
                nval,
                arena,
                arena_words,
                values,
                state: Mutex::new(WriterState {
                    schemas: HashMap::new(),
                    free_sections: (0..nsect).rev().collect(),
                    next_value: 0,
                    free_values: Vec::new(),
                    seq: 0,
                }),
                index: OnceLock::new(),
            }),
        })
    }

    /// Lists every section, now and from now on, as a `Stat` segment (the
    /// section's counters: their offset and length in the file) in the
    /// index of `dir`, the directory the file is in; a section dropped is
    /// withdrawn from it. Done once; later calls change nothing.
    pub fn publish_in(&self, dir: Arc<Mutex<VsmDir>>) -> Result<(), VscError> {
        let inner = &self.inner;
        let io = |source| VscError::Io {
            path: inner.path.clone(),
            source,
        };
        if inner.path.parent() != Some(dir.lock().unwrap_or_else(|e| e.into_inner()).path()) {
            return Err(io(std::io::Error::other(
                "the counters file is not in the directory whose index should list it",
            )));
        }
        let _st = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if inner.index.set(dir.clone()).is_err() {
            return Ok(());
        }
        let w = inner.shm.words();
        let mut d = dir.lock().unwrap_or_else(|e| e.into_inner());
        let mut live: Vec<(u64, String, usize, usize)> = Vec::new();
        for slot in 0..inner.nsect {
            let e = DIR + slot * SECT_WORDS;
            if w.at(e + S_LIVE).load(Ordering::Relaxed) != 1 {
                continue;
            }
            let n = w.at(e + S_NAMELEN).load(Ordering::Relaxed) as usize;
            let mut name = Vec::new();
            shm::unpack_bytes(
                n,
                |i| w.at(e + S_NAME + i).load(Ordering::Relaxed),
                &mut name,
            );
            live.push((
                w.at(e + S_SEQ).load(Ordering::Relaxed),
                String::from_utf8_lossy(&name).into_owned(),
                inner.values + w.at(e + S_BASE).load(Ordering::Relaxed) as usize,
                w.at(e + S_NFIELDS).load(Ordering::Relaxed) as usize,
            ));
        }
        // In the order they were added.
        live.sort();
        for (_, name, base, len) in live {
            inner
                .publish_section(&mut d, &name, base, len)
                .map_err(io)?;
        }
        Ok(())
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Adds a section named `name` (`MAIN`, `SMA.s0`, `VBE.boot.default`)
    /// following `schema`. Its counters start at zero.
    pub fn add_section(&self, schema: &'static Schema, name: &str) -> Result<Section, VscError> {
        if name.is_empty() || name.len() > MAX_NAME || name.contains(char::is_whitespace) {
            return Err(VscError::BadName(name.to_string()));
        }
        let inner = &self.inner;
        let mut st = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let schema_off = match st.schemas.get(&(schema as *const Schema as usize)) {
            Some(off) => *off,
            None => {
                let off = inner.write_schema(schema)?;
                st.schemas.insert(schema as *const Schema as usize, off);
                off
            }
        };
        let len = schema.fields.len();
        let base = alloc_values(&mut st, inner.nval, len)
            .ok_or_else(|| VscError::Full(format!("no room for {len} more counters")))?;
        let Some(slot) = st.free_sections.pop() else {
            free_values(&mut st, base, len);
            return Err(VscError::Full(format!(
                "{} sections already in use",
                inner.nsect
            )));
        };
        st.seq += 1;
        let w = inner.shm.words();
        for i in 0..len {
            w.at(inner.values + base + i).store(0, Ordering::Relaxed);
        }
        let e = DIR + slot * SECT_WORDS;
        inner.begin_change();
        w.at(e + S_SEQ).store(st.seq, Ordering::Relaxed);
        w.at(e + S_SCHEMA)
            .store(schema_off as u64, Ordering::Relaxed);
        w.at(e + S_BASE).store(base as u64, Ordering::Relaxed);
        w.at(e + S_NFIELDS).store(len as u64, Ordering::Relaxed);
        w.at(e + S_NAMELEN)
            .store(name.len() as u64, Ordering::Relaxed);
        shm::pack_bytes(name.as_bytes(), |i, v| {
            w.at(e + S_NAME + i).store(v, Ordering::Relaxed)
        });
        w.at(e + S_LIVE).store(1, Ordering::Relaxed);
        inner.end_change();
        if let Some(d) = inner.index.get() {
            let mut d = d.lock().unwrap_or_else(|e| e.into_inner());
            inner
                .publish_section(&mut d, name, inner.values + base, len)
                .map_err(|source| VscError::Io {
                    path: d.path().join(crate::vsm::INDEX),
                    source,
                })?;
        }
        Ok(Section {
            inner: inner.clone(),
            slot,
            base: inner.values + base,
            len,
            name: name.to_string(),
        })
    }

    /// Snapshot of all counters, read in-process (same result as a
    /// [`VscReader`] would give).
    pub fn snapshot(&self) -> Result<Vec<CounterValue>, VscError> {
        let w = self.inner.shm.words();
        snapshot_with(&self.inner.path, w.len(), |i| {
            w.at(i).load(Ordering::Acquire)
        })
    }
}

impl Inner {
    /// The file's name in its directory, as index lines give it.
    fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Lists the section whose counters start at word `base` in `dir`'s
    /// index.
    fn publish_section(
        &self,
        dir: &mut VsmDir,
        name: &str,
        base: usize,
        len: usize,
    ) -> std::io::Result<()> {
        let file = self.file_name();
        dir.publish_part(&file, base as u64 * 8, len as u64 * 8, "Stat", name)
            .map(drop)
    }
    fn begin_change(&self) {
        let w = self.shm.words();
        w.at(H_GEN).fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    fn end_change(&self) {
        self.shm.words().at(H_GEN).fetch_add(1, Ordering::Release);
    }

    /// Appends an encoded schema to the arena; returns its word offset.
    fn write_schema(&self, schema: &Schema) -> Result<usize, VscError> {
        let mut words = vec![schema.fields.len() as u64];
        encode_str(&mut words, schema.kind);
        encode_str(&mut words, schema.desc);
        for f in schema.fields {
            words
                .push(type_code(f.ctype) | (format_code(f.format) << 8) | ((f.level as u64) << 16));
            encode_str(&mut words, f.name);
            encode_str(&mut words, f.oneliner);
            encode_str(&mut words, f.long);
        }
        let w = self.shm.words();
        let used = w.at(H_ARENA_USED).load(Ordering::Relaxed) as usize;
        if used + words.len() > self.arena_words {
            return Err(VscError::Full(format!(
                "no room to describe the {} counters",
                schema.kind
            )));
        }
        for (i, v) in words.iter().enumerate() {
            w.at(self.arena + used + i).store(*v, Ordering::Relaxed);
        }
        w.at(H_ARENA_USED)
            .store((used + words.len()) as u64, Ordering::Release);
        Ok(used)
    }
}

fn alloc_values(st: &mut WriterState, cap: usize, len: usize) -> Option<usize> {
    if let Some(i) = st.free_values.iter().position(|&(_, l)| l >= len) {
        let (b, l) = st.free_values[i];
        if l == len {
            st.free_values.swap_remove(i);
        } else {
            st.free_values[i] = (b + len, l - len);
        }
        return Some(b);
    }
    if st.next_value + len <= cap {
        let b = st.next_value;
        st.next_value += len;
        return Some(b);
    }
    None
}

fn free_values(st: &mut WriterState, base: usize, len: usize) {
    if len > 0 {
        st.free_values.push((base, len));
    }
}

fn type_code(t: CounterType) -> u64 {
    match t {
        CounterType::Counter => 0,
        CounterType::Gauge => 1,
        CounterType::Bitmap => 2,
    }
}

fn format_code(f: Format) -> u64 {
    match f {
        Format::Integer => 0,
        Format::Bytes => 1,
        Format::Duration => 2,
        Format::Bitmap => 3,
    }
}

fn encode_str(out: &mut Vec<u64>, s: &str) {
    out.push(s.len() as u64);
    let base = out.len();
    out.resize(base + s.len().div_ceil(8), 0);
    shm::pack_bytes(s.as_bytes(), |i, w| out[base + i] = w);
}

impl Section {
    /// Section name (`VBE.boot.default`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counter slot for field `f` (index into the schema).
    #[inline]
    pub fn counter(&self, f: impl Into<usize>) -> &AtomicU64 {
        let f = f.into();
        assert!(
            f < self.len,
            "counter index {f} out of range for {}",
            self.name
        );
        self.inner.shm.words().at(self.base + f)
    }

    /// Adds one (relaxed atomic add).
    #[inline]
    pub fn inc(&self, f: impl Into<usize>) {
        self.counter(f).fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, f: impl Into<usize>, n: u64) {
        self.counter(f).fetch_add(n, Ordering::Relaxed);
    }

    /// Subtracts `n` (gauges).
    #[inline]
    pub fn sub(&self, f: impl Into<usize>, n: u64) {
        self.counter(f).fetch_sub(n, Ordering::Relaxed);
    }

    /// Sets the value (gauges, bitmaps, uptime).
    #[inline]
    pub fn set(&self, f: impl Into<usize>, v: u64) {
        self.counter(f).store(v, Ordering::Relaxed);
    }

    /// Current value.
    #[inline]
    pub fn get(&self, f: impl Into<usize>) -> u64 {
        self.counter(f).load(Ordering::Relaxed)
    }
}

impl Drop for Section {
    fn drop(&mut self) {
        let inner = &self.inner;
        let mut st = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let w = inner.shm.words();
        inner.begin_change();
        w.at(DIR + self.slot * SECT_WORDS + S_LIVE)
            .store(0, Ordering::Relaxed);
        inner.end_change();
        if let Some(d) = inner.index.get() {
            let id = crate::vsm::SegmentId::new(inner.file_name(), self.base as u64 * 8);
            // A failing index write leaves a stale line readers skip (its
            // section is gone from the file); nothing to undo here.
            let _ = d.lock().unwrap_or_else(|e| e.into_inner()).withdraw(&id);
        }
        free_values(&mut st, self.base - inner.values, self.len);
        st.free_sections.push(self.slot);
    }
}

/// One counter in a snapshot, with its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterValue {
    /// Full name (`MAIN.cache_hit`, `VBE.boot.default.req`).
    pub name: String,
    /// Value.
    pub value: u64,
    /// Semantics.
    pub ctype: CounterType,
    /// Display format.
    pub format: Format,
    /// Level.
    pub level: Level,
    /// One-line description.
    pub oneliner: String,
    /// Longer description.
    pub long: String,
}

/// Finds a counter in a snapshot by full name (`MAIN.cache_hit`,
/// `VBE.boot.default.req`); a bare name (`cache_hit`) means `MAIN.<name>`,
/// as in varnishtest's `-expect`.
pub fn lookup<'a>(snapshot: &'a [CounterValue], name: &str) -> Option<&'a CounterValue> {
    snapshot.iter().find(|c| c.name == name).or_else(|| {
        if name.contains('.') {
            None
        } else {
            let full = format!("MAIN.{name}");
            snapshot.iter().find(|c| c.name == full)
        }
    })
}

/// Reader of the counters file, usually in another process.
pub struct VscReader {
    shm: ShmReader,
    path: PathBuf,
}

impl fmt::Debug for VscReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VscReader")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl VscReader {
    /// Maps the counters file at `path` (see [`vsc_path`]).
    pub fn open(path: &Path) -> Result<VscReader, VscError> {
        let shm = ShmReader::open(path).map_err(|source| VscError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let r = VscReader {
            shm,
            path: path.to_path_buf(),
        };
        let w = r.shm.words();
        if w.len() < DIR || w.load(H_MAGIC, Ordering::Acquire) != MAGIC {
            return Err(VscError::Format {
                path: path.to_path_buf(),
                what: "not a Lacquer counters file (bad magic)".to_string(),
            });
        }
        if w.load(H_VERSION, Ordering::Relaxed) != VERSION {
            return Err(VscError::Format {
                path: path.to_path_buf(),
                what: "counters format version not supported by this tool".to_string(),
            });
        }
        Ok(r)
    }

    /// True if the daemon replaced the file since it was opened.
    pub fn is_replaced(&self) -> bool {
        self.shm.is_replaced(&self.path)
    }

    /// All live counters, ordered by section creation then schema order.
    pub fn snapshot(&self) -> Result<Vec<CounterValue>, VscError> {
        let w = self.shm.words();
        let len = w.len();
        snapshot_with(&self.path, len, |i| {
            if i < len {
                w.load(i, Ordering::Acquire)
            } else {
                0
            }
        })
    }
}

struct Geometry {
    nsect: usize,
    arena: usize,
    arena_used: usize,
    values: usize,
    nval: usize,
}

fn snapshot_with(
    path: &Path,
    len: usize,
    load: impl Fn(usize) -> u64,
) -> Result<Vec<CounterValue>, VscError> {
    let bad = |what: &str| VscError::Format {
        path: path.to_path_buf(),
        what: what.to_string(),
    };
    let nsect = load(H_NSECT) as usize;
    let nval = load(H_NVAL) as usize;
    let arena_words = load(H_ARENA) as usize;
    let arena = DIR
        .checked_add(
            nsect
                .checked_mul(SECT_WORDS)
                .ok_or_else(|| bad("bad header"))?,
        )
        .ok_or_else(|| bad("bad header"))?;
    let values = arena
        .checked_add(arena_words)
        .ok_or_else(|| bad("bad header"))?;
    if values.checked_add(nval).is_none_or(|end| end > len) {
        return Err(bad("header sizes do not match the file size"));
    }
    for _ in 0..1000 {
        let g1 = load(H_GEN);
        if g1 % 2 == 1 {
            std::thread::yield_now();
            continue;
        }
        let geo = Geometry {
            nsect,
            arena,
            arena_used: (load(H_ARENA_USED) as usize).min(arena_words),
            values,
            nval,
        };
        let result = read_all(&geo, &load);
        fence(Ordering::Acquire);
        if load(H_GEN) == g1 {
            return result.map_err(|w| bad(&w));
        }
    }
    Err(VscError::Busy)
}

struct Entry {
    seq: u64,
    name: String,
    schema: usize,
    base: usize,
    nfields: usize,
}

fn read_all(geo: &Geometry, load: &impl Fn(usize) -> u64) -> Result<Vec<CounterValue>, String> {
    let mut entries = Vec::new();
    for s in 0..geo.nsect {
        let e = DIR + s * SECT_WORDS;
        if load(e + S_LIVE) != 1 {
            continue;
        }
        let namelen = (load(e + S_NAMELEN) as usize).min(MAX_NAME);
        let mut name = Vec::new();
        shm::unpack_bytes(namelen, |i| load(e + S_NAME + i), &mut name);
        entries.push(Entry {
            seq: load(e + S_SEQ),
            name: String::from_utf8_lossy(&name).into_owned(),
            schema: load(e + S_SCHEMA) as usize,
            base: load(e + S_BASE) as usize,
            nfields: load(e + S_NFIELDS) as usize,
        });
    }
    entries.sort_by_key(|e| e.seq);
    let mut cache: HashMap<usize, Vec<DecodedField>> = HashMap::new();
    let mut out = Vec::new();
    for e in entries {
        let fields = match cache.entry(e.schema) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(decode_schema(geo, e.schema, load)?)
            }
        };
        if fields.len() != e.nfields || e.base.saturating_add(e.nfields) > geo.nval {
            return Err(format!("corrupt directory entry for {}", e.name));
        }
        for (i, f) in fields.iter().enumerate() {
            out.push(CounterValue {
                name: format!("{}.{}", e.name, f.name),
                value: load(geo.values + e.base + i),
                ctype: f.ctype,
                format: f.format,
                level: f.level,
                oneliner: f.oneliner.clone(),
                long: f.long.clone(),
            });
        }
    }
    Ok(out)
}

struct DecodedField {
    name: String,
    ctype: CounterType,
    format: Format,
    level: Level,
    oneliner: String,
    long: String,
}

fn decode_schema(
    geo: &Geometry,
    off: usize,
    load: &impl Fn(usize) -> u64,
) -> Result<Vec<DecodedField>, String> {
    let mut pos = off;
    let word = |pos: &mut usize| -> Result<u64, String> {
        if *pos >= geo.arena_used {
            return Err("counter description runs past its area".to_string());
        }
        let v = load(geo.arena + *pos);
        *pos += 1;
        Ok(v)
    };
    let string = |pos: &mut usize| -> Result<String, String> {
        let len = word(pos)? as usize;
        let nw = len.div_ceil(8);
        if pos.saturating_add(nw) > geo.arena_used || len > 1 << 20 {
            return Err("counter description string runs past its area".to_string());
        }
        let mut b = Vec::new();
        shm::unpack_bytes(len, |i| load(geo.arena + *pos + i), &mut b);
        *pos += nw;
        Ok(String::from_utf8_lossy(&b).into_owned())
    };
    let n = word(&mut pos)? as usize;
    if n > 1 << 16 {
        return Err("implausible counter count in description".to_string());
    }
    let _kind = string(&mut pos)?;
    let _desc = string(&mut pos)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let m = word(&mut pos)?;
        let ctype = match m & 0xff {
            0 => CounterType::Counter,
            1 => CounterType::Gauge,
            _ => CounterType::Bitmap,
        };
        let format = match (m >> 8) & 0xff {
            0 => Format::Integer,
            1 => Format::Bytes,
            2 => Format::Duration,
            _ => Format::Bitmap,
        };
        let level = match (m >> 16) & 0xff {
            0 => Level::Info,
            1 => Level::Diag,
            _ => Level::Debug,
        };
        out.push(DecodedField {
            name: string(&mut pos)?,
            ctype,
            format,
            level,
            oneliner: string(&mut pos)?,
            long: string(&mut pos)?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::tables::{LCK, Lck, MAIN, Main, SMA, Sma, VBE, Vbe};
    use super::*;

    pub(crate) fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lq-vsc-{}-{}", name, std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join(VSC_FILE)
    }

    #[test]
    fn sections_are_listed_in_the_directory_index() {
        use crate::vsm::{CHILD_DIR, INDEX, VsmDir, live_segment};
        let work = std::env::temp_dir().join(format!("lq-vsc-index-{}", std::process::id()));
        let dir = Arc::new(Mutex::new(VsmDir::create(&work.join(CHILD_DIR)).unwrap()));
        let vsc = Vsc::create(&vsc_path(&work), &VscConfig::default()).unwrap();
        let main = vsc.add_section(&MAIN, "MAIN").unwrap();
        vsc.publish_in(dir.clone()).unwrap();
        let vbe = vsc.add_section(&VBE, "VBE.vcl1.s1").unwrap();
        let index = || std::fs::read_to_string(work.join(CHILD_DIR).join(INDEX)).unwrap();
        let t = index();
        assert_eq!(live_segment(&t, "Stat", "MAIN"), Some(VSC_FILE));
        assert_eq!(live_segment(&t, "Stat", "VBE.vcl1.s1"), Some(VSC_FILE));
        // Offsets and lengths are the sections' counters in the file.
        let line = t
            .lines()
            .find(|l| l.ends_with(" Stat VBE.vcl1.s1"))
            .unwrap();
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[2], (vbe.base * 8).to_string());
        assert_eq!(f[3], (VBE.fields.len() * 8).to_string());
        drop(vbe);
        let t = index();
        assert!(t.ends_with(&format!("- {}\n", &line[2..])));
        assert_eq!(live_segment(&t, "Stat", "VBE.vcl1.s1"), None);
        // Once only; a file elsewhere is refused.
        vsc.publish_in(dir.clone()).unwrap();
        assert_eq!(index().matches(" Stat MAIN").count(), 1);
        let other = Vsc::create(&tmp("elsewhere"), &VscConfig::default()).unwrap();
        assert!(other.publish_in(dir).is_err());
        drop(main);
        std::fs::remove_dir_all(&work).unwrap();
        std::fs::remove_dir_all(tmp("elsewhere").parent().unwrap()).unwrap();
    }

    #[test]
    fn tables_are_complete() {
        assert_eq!(MAIN.fields.len(), 144);
        assert_eq!(MAIN.fields[Main::cache_hit as usize].name, "cache_hit");
        assert_eq!(MAIN.fields[Main::uptime as usize].format, Format::Duration);
        assert_eq!(VBE.fields[Vbe::happy as usize].ctype, CounterType::Bitmap);
        for s in [&MAIN, &SMA, &VBE, &LCK] {
            for f in s.fields {
                assert!(!f.oneliner.is_empty() && !f.long.is_empty(), "{}", f.name);
            }
        }
    }

    #[test]
    fn sections_counters_and_reader() {
        let path = tmp("basic");
        let vsc = Vsc::create(&path, &VscConfig::default()).unwrap();
        let main = vsc.add_section(&MAIN, "MAIN").unwrap();
        main.inc(Main::cache_hit);
        main.add(Main::s_resp_bodybytes, 100);
        main.set(Main::threads, 10);
        main.sub(Main::threads, 3);
        assert_eq!(main.get(Main::threads), 7);
        let be = vsc.add_section(&VBE, "VBE.boot.default").unwrap();
        be.inc(Vbe::req);
        let r = VscReader::open(&path).unwrap();
        let snap = r.snapshot().unwrap();
        assert_eq!(snap.len(), MAIN.fields.len() + VBE.fields.len());
        let get = |n: &str| snap.iter().find(|c| c.name == n).unwrap().clone();
        assert_eq!(get("MAIN.cache_hit").value, 1);
        assert_eq!(get("MAIN.threads").value, 7);
        assert_eq!(get("MAIN.threads").ctype, CounterType::Gauge);
        assert_eq!(get("VBE.boot.default.req").value, 1);
        assert_eq!(get("MAIN.uptime").oneliner, "Child process uptime");
        assert_eq!(lookup(&snap, "cache_hit").unwrap().value, 1);
        assert_eq!(lookup(&snap, "VBE.boot.default.req").unwrap().value, 1);
        assert!(lookup(&snap, "nope").is_none());
        // Removal and slot reuse.
        drop(be);
        let snap = r.snapshot().unwrap();
        assert!(!snap.iter().any(|c| c.name.starts_with("VBE.")));
        let s0 = vsc.add_section(&SMA, "SMA.s0").unwrap();
        s0.add(Sma::g_bytes, 5);
        let l = vsc.add_section(&LCK, "LCK.sma").unwrap();
        l.inc(Lck::locks);
        let snap = vsc.snapshot().unwrap();
        assert_eq!(
            snap.iter()
                .find(|c| c.name == "SMA.s0.g_bytes")
                .unwrap()
                .value,
            5
        );
        assert_eq!(
            snap.iter()
                .find(|c| c.name == "SMA.s0.c_req")
                .unwrap()
                .value,
            0
        );
        assert_eq!(snap.last().unwrap().name, "LCK.sma.dbg_try_fail");
        assert!(matches!(
            vsc.add_section(&SMA, "bad name"),
            Err(VscError::BadName(_))
        ));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn capacity_errors() {
        let path = tmp("full");
        let cfg = VscConfig {
            max_sections: 2,
            max_values: 200,
            ..VscConfig::default()
        };
        let vsc = Vsc::create(&path, &cfg).unwrap();
        let _m = vsc.add_section(&MAIN, "MAIN").unwrap();
        assert!(matches!(
            vsc.add_section(&MAIN, "MAIN2"),
            Err(VscError::Full(_))
        ));
        let _v = vsc.add_section(&VBE, "VBE.a").unwrap();
        assert!(matches!(
            vsc.add_section(&LCK, "LCK.x"),
            Err(VscError::Full(_))
        ));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn reader_rejects_other_files() {
        let path = tmp("bad");
        std::fs::write(&path, vec![1u8; 1024]).unwrap();
        assert!(VscReader::open(&path).is_err());
        // A valid file with hostile header sizes and directory entries.
        use std::os::unix::fs::FileExt;
        let vsc = Vsc::create(&path, &VscConfig::default()).unwrap();
        let _m = vsc.add_section(&MAIN, "MAIN").unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let r = VscReader::open(&path).unwrap();
        f.write_at(&u64::MAX.to_le_bytes(), (H_NSECT * 8) as u64)
            .unwrap();
        assert!(matches!(r.snapshot(), Err(VscError::Format { .. })));
        f.write_at(&2048u64.to_le_bytes(), (H_NSECT * 8) as u64)
            .unwrap();
        assert!(r.snapshot().is_ok());
        for (field, v) in [(S_SCHEMA, 1u64 << 40), (S_NFIELDS, 7), (S_BASE, u64::MAX)] {
            f.write_at(&v.to_le_bytes(), ((DIR + field) * 8) as u64)
                .unwrap();
            assert!(
                matches!(r.snapshot(), Err(VscError::Format { .. })),
                "{field}"
            );
        }
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
