//! The varnishtest-compatible test runner (`lacquer vtc`).
//!
//! Runs Varnish's `.vtc` test files against a daemon that is driven exactly
//! like varnishtest 7.1 drives varnishd (same command line, reverse CLI
//! connection with authentication, same CLI conversation), so the same
//! suite can check real varnishd and `lacquerd`.
//!
//! Entry points: [`cli_main`] for the command line, [`run_test`] for one
//! file. Counters and log records are read through the [`CounterSource`]
//! and [`LogSource`] traits (see [`sources`]).

pub mod barrier;
pub mod cli;
pub mod client;
pub mod commands;
pub mod ctx;
pub mod http;
pub mod lexer;
pub mod logexpect;
pub mod macros;
pub mod native;
pub mod process;
pub mod runner;
pub mod script;
pub mod server;
pub mod sources;
pub mod text;
pub mod varnish;

pub use cli::cli_main;
pub use runner::{Status, TestResult, run_test};
pub use sources::{
    CounterFactory, CounterSource, LogFactory, LogQuery, LogRecord, LogSource, VarnishlogSource,
    VarnishstatCounters,
};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Runner configuration shared by all tests of a run.
#[derive(Clone)]
pub struct Config {
    /// The daemon binary driven by `varnish vN`.
    pub varnishd: PathBuf,
    /// The runner's working directory (`${pwd}`).
    pub pwd: PathBuf,
    /// Per-test timeout (`-t`); HTTP actors time out after half of it.
    pub timeout: Duration,
    /// `-D name=value` macros.
    pub defines: Vec<(String, String)>,
    /// Print log lines as they happen (`-v` with one job).
    pub verbose_live: bool,
    /// Keep every test's temporary directory.
    pub keep_tmp: bool,
    /// Keep the temporary directory of failed tests.
    pub keep_failed_tmp: bool,
    /// How counters are read.
    pub counters: CounterFactory,
    /// How the log is read.
    pub logs: LogFactory,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("varnishd", &self.varnishd)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Look for `name` in the directories of `$PATH`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The default daemon: `lacquerd` next to the current executable, else on
/// `$PATH`, else the bare name (the launch will then report it missing).
pub fn default_daemon() -> PathBuf {
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        let p = dir.join("lacquerd");
        if p.is_file() {
            return p;
        }
    }
    find_in_path("lacquerd").unwrap_or_else(|| PathBuf::from("lacquerd"))
}

impl Config {
    /// Defaults: the given daemon, 60 s timeout, `varnishstat`/`varnishlog`
    /// from `$PATH` for counters and logs.
    pub fn new(varnishd: &Path) -> Self {
        if !native::is_varnishd(varnishd) {
            return Config {
                varnishd: varnishd.to_path_buf(),
                pwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
                timeout: Duration::from_secs(60),
                defines: Vec::new(),
                verbose_live: false,
                keep_tmp: false,
                keep_failed_tmp: false,
                counters: Arc::new(|wd: &Path| {
                    Box::new(native::VscCounters {
                        workdir: wd.to_path_buf(),
                    }) as Box<dyn CounterSource>
                }),
                logs: Arc::new(|q: &LogQuery| {
                    native::VslLog::open(q).map(|s| Box::new(s) as Box<dyn LogSource>)
                }),
            };
        }
        let stat = find_in_path("varnishstat").unwrap_or_else(|| PathBuf::from("varnishstat"));
        let log = find_in_path("varnishlog").unwrap_or_else(|| PathBuf::from("varnishlog"));
        Config {
            varnishd: varnishd.to_path_buf(),
            pwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            timeout: Duration::from_secs(60),
            defines: Vec::new(),
            verbose_live: false,
            keep_tmp: false,
            keep_failed_tmp: false,
            counters: Arc::new(move |wd: &Path| {
                Box::new(VarnishstatCounters {
                    bin: stat.clone(),
                    workdir: wd.to_path_buf(),
                }) as Box<dyn CounterSource>
            }),
            logs: Arc::new(move |q: &LogQuery| {
                VarnishlogSource::start(&log, q).map(|s| Box::new(s) as Box<dyn LogSource>)
            }),
        }
    }
}
