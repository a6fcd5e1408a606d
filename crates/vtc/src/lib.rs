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
//!
//! # What the daemon under test must do
//!
//! `varnish vN` runs, through `/bin/sh -c`, exactly what varnishtest 7.1
//! runs:
//!
//! ```text
//! cd PWD && exec DAEMON -d -n TMPDIR/vN -l 2m -p auto_restart=off
//!   -p syslog_cli_traffic=off -p thread_pool_min=10 -p debug=+vtc_mode
//!   -p vsl_mask=+Debug -p h2_initial_window_size=1m
//!   -p h2_rx_window_low_water=64k [-a '127.0.0.1:0'[,PROTO]]
//!   -M '127.0.0.1 PORT' -P TMPDIR/vN/varnishd.pid [-arg values...]
//! ```
//!
//! (`-a '127.0.0.1:0'` is left out when an `-arg` already has `-a `.) Stdin
//! is a pipe kept open for the daemon's life; stdout and stderr are logged.
//! The daemon connects to the `-M` address and sends a `107` CLI response
//! whose first line is a challenge; the runner answers `auth HEX` with
//! SHA-256(challenge + "\n" + contents of `-n`/`_.secret` + challenge +
//! "\n"), expecting `200`. CLI responses are `STATUS LEN\n`, LEN bytes,
//! `\n`. Commands used: `vcl.inline vclN << DELIM` (here-document; the body
//! starts with a `vcl 4.1;` line that the user VCL may follow with its own
//! `vcl 4.x;`), `vcl.use`, `start`, `status` (`Child in state running` /
//! `Child in state stopped`), `debug.listen_address` (lines `aN ADDR PORT`,
//! `aN /path -` for Unix sockets), `debug.xid 999`, `stop`,
//! `backend.list`, `panic.show` (anything but `200` means no panic); at the
//! end the CLI socket and stdin are closed and exit status 0 is expected.
//! Counters are read by default with `varnishstat -1 -n DIR` and the log
//! with `varnishlog -n DIR -g GROUPING [-q QUERY] [-d]`.

pub mod barrier;
pub mod cli;
pub mod client;
pub mod commands;
pub mod ctx;
pub mod h2;
pub mod haproxy;
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
pub mod syslog;
pub mod term;
pub mod text;
pub mod tunnel;
pub mod varnish;

pub use cli::{cli_main, cli_main_with};
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
    /// Copy each daemon's log into the test log as `vsl|` lines at level
    /// 4, as varnishtest does (`-v`).
    pub print_vsl: bool,
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

/// Counter reading through a `varnishstat`-compatible tool.
pub fn varnishstat_factory(bin: &Path) -> CounterFactory {
    let bin = bin.to_path_buf();
    Arc::new(move |wd: &Path| {
        Box::new(VarnishstatCounters {
            bin: bin.clone(),
            workdir: wd.to_path_buf(),
        }) as Box<dyn CounterSource>
    })
}

/// Log reading through a `varnishlog`-compatible tool.
pub fn varnishlog_factory(bin: &Path) -> LogFactory {
    let bin = bin.to_path_buf();
    Arc::new(move |q: &LogQuery| {
        VarnishlogSource::start(&bin, q).map(|s| Box::new(s) as Box<dyn LogSource>)
    })
}

impl Config {
    /// Read counters with this `varnishstat`-compatible tool.
    pub fn set_varnishstat(&mut self, bin: &Path) {
        self.counters = varnishstat_factory(bin);
    }

    /// Read the log with this `varnishlog`-compatible tool.
    pub fn set_varnishlog(&mut self, bin: &Path) {
        self.logs = varnishlog_factory(bin);
    }

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
                print_vsl: false,
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
            print_vsl: false,
            keep_tmp: false,
            keep_failed_tmp: false,
            counters: varnishstat_factory(&stat),
            logs: varnishlog_factory(&log),
        }
    }
}
