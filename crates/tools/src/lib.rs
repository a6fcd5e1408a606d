//! The operator tools behind `lacquer log`, `ncsa`, `top`, `hist`, `stat`
//! and `adm`: readers of the daemon's shared-memory log (or of binary log
//! files) and counters, and a management CLI client, with varnishlog's,
//! varnishncsa's, varnishtop's, varnishhist's, varnishstat's and
//! varnishadm's options and output formats. [`vut`] holds what the log
//! tools share.

pub mod adm;
pub mod hist;
pub mod lineedit;
pub mod log;
pub mod ncsa;
pub mod screen;
pub mod stat;
pub mod top;
pub mod vut;

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

/// The host's name, the daemon's default identity (`-i`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}
