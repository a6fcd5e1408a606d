//! The operator tools behind `lacquer log`, `lacquer stat` and
//! `lacquer adm`: readers of the daemon's shared-memory log and counters,
//! and a management CLI client, with varnishlog's, varnishstat's and
//! varnishadm's options and output formats.

pub mod adm;
pub mod log;
pub mod stat;

use std::path::PathBuf;

/// The working directory a tool reads: `-n` as given (a bare name is
/// resolved the way lacquerd resolves it), else the default instance.
pub fn workdir(n: Option<&str>) -> PathBuf {
    match n {
        Some(n) if n.contains('/') => PathBuf::from(n),
        Some(n) => std::env::temp_dir().join(format!("lacquer-{n}")),
        None => std::env::temp_dir().join(format!("lacquer-{}", hostname())),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}
