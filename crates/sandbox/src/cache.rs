//! A directory of precompiled modules, so a tenant that loaded once (in
//! this process or an earlier one) loads again without Cranelift: each
//! load compiles two modules (the instrumented one `main` runs in, and the
//! snapshot), which costs far more than running `main`.
//!
//! Loading machine code is `unsafe` in wasmtime (`Module::deserialize`):
//! bytes that are not exactly what `Module::serialize` wrote could hold
//! any code. This module is sound because it only ever deserializes files
//! it wrote itself, checked three ways before wasmtime sees them:
//!
//! - the directory is created by us with mode 0700 and refused when it is
//!   writable by anyone but its owner or owned by another user than the
//!   process's, so only this user (who could equally replace the daemon's
//!   binary) can put a file there;
//! - a file is named by the SHA-256 of the WebAssembly it was compiled
//!   from and the engine's compatibility hash (wasmtime's version, target
//!   and every setting that changes code: fuel, epochs, memory layout), so
//!   a module is only ever paired with its own compilation by this engine
//!   configuration; wasmtime checks that header again when it loads;
//! - a file holds a SHA-256 of the serialized bytes after a magic line and
//!   is written to a temporary name then renamed, so a torn or damaged
//!   file (crash, full disk, bit rot) is detected and recompiled, never
//!   handed to wasmtime.
//!
//! Operators do not give `.cwasm` files directly: tenant files are
//! `.wasm`/`.wat`, and the cache makes their second load cheap.

#![allow(unsafe_code)]

use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::Digest as _;
use wasmtime::{Engine, Module};

/// The first bytes of a cache file.
const MAGIC: &[u8; 16] = b"lacquer-cwasm-1\n";

/// The cache directory of one engine.
#[derive(Debug)]
pub(crate) struct ModuleCache {
    dir: PathBuf,
    /// The engine's compatibility hash, part of every file name.
    engine_key: u64,
    /// Modules loaded from the cache and compiled into it, for tests and
    /// diagnostics.
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl ModuleCache {
    /// Opens (creating it with mode 0700) the cache directory `dir`.
    /// Fails when the directory may be written by another user.
    pub(crate) fn open(engine: &Engine, dir: &Path) -> Result<ModuleCache, String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            format!("wasm module cache {}: {what}: {e}", dir.display())
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail("cannot create it", &e))?;
        let meta = std::fs::metadata(dir).map_err(|e| fail("cannot read it", &e))?;
        // /proc/self belongs to the process's effective user.
        let me = std::fs::metadata("/proc/self")
            .map_err(|e| fail("cannot tell which user this process runs as", &e))?
            .uid();
        if meta.uid() != me {
            return Err(fail(
                "refused",
                &format!(
                    "it belongs to uid {}, not to this process's uid {me}; precompiled code is only loaded from a directory of our own",
                    meta.uid()
                ),
            ));
        }
        if meta.permissions().mode() & 0o022 != 0 {
            return Err(fail(
                "refused",
                &format!(
                    "mode {:o} lets other users write in it; chmod 700 it",
                    meta.permissions().mode() & 0o777
                ),
            ));
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        Ok(ModuleCache {
            dir: dir.to_path_buf(),
            engine_key: h.finish(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    fn path(&self, wasm: &[u8]) -> PathBuf {
        let d = sha2::Sha256::digest(wasm);
        self.dir
            .join(format!("{}-{:016x}.cwasm", hex(&d), self.engine_key))
    }

    /// The module compiled from `wasm`: from the cache when a sound entry
    /// is there, else compiled and written to it (a write that fails only
    /// costs the next load a compilation).
    pub(crate) fn module(&self, engine: &Engine, wasm: &[u8]) -> Result<Module, String> {
        let path = self.path(wasm);
        if let Some(m) = self.read(engine, &path) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(m);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let m = Module::new(engine, wasm).map_err(|e| format!("{e:#}"))?;
        if let Ok(bytes) = m.serialize() {
            let _ = write(&path, &bytes);
        }
        Ok(m)
    }

    fn read(&self, engine: &Engine, path: &Path) -> Option<Module> {
        let data = std::fs::read(path).ok()?;
        let rest = data.strip_prefix(MAGIC.as_slice())?;
        if rest.len() < 32 {
            return None;
        }
        let (sum, payload) = rest.split_at(32);
        if sha2::Sha256::digest(payload).as_slice() != sum {
            return None;
        }
        // SAFETY: `payload` is byte for byte what `Module::serialize`
        // returned for the module compiled from the same WebAssembly by an
        // engine with the same compatibility hash: this process (or an
        // earlier one running as the same user) wrote it under a name
        // derived from both, into a directory no other user can write
        // (checked in `open`), behind a SHA-256 of those bytes verified
        // just above. wasmtime checks its version and engine settings
        // header again and returns an error on a mismatch.
        let m = unsafe { Module::deserialize(engine, payload) };
        m.ok()
    }
}

/// Writes a cache file atomically: a temporary name, then a rename.
fn write(path: &Path, payload: &[u8]) -> std::io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = path.with_extension(format!(
        "tmp{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let done = (|| {
        f.write_all(MAGIC)?;
        f.write_all(&sha2::Sha256::digest(payload))?;
        f.write_all(payload)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}
