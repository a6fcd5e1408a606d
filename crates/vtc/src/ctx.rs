//! Per-test context shared by every actor thread of one test: macros, the
//! log buffer, the first failure, the abort flag, and everything the test
//! started (child processes, sockets) so that a failure or a timeout can
//! tear it all down.

use crate::Config;
use crate::macros::Macros;
use std::collections::HashMap;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// An error raised by a command: the message varnishtest would print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail(pub String);

/// Result type of command implementations.
pub type R<T> = Result<T, Fail>;

/// Build a [`Fail`] from format arguments.
#[macro_export]
macro_rules! fail {
    ($($arg:tt)*) => { $crate::ctx::Fail(format!($($arg)*)) };
}

/// Return early with a [`Fail`].
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::fail!($($arg)*)) };
}

/// The first failure of a test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Actor that failed (`top`, `c1`, `v1`...).
    pub actor: String,
    /// Line in the test file of the failing command (0 when unknown).
    pub line: usize,
    /// What went wrong.
    pub msg: String,
}

/// A socket that can be shut down from another thread to unblock readers.
#[derive(Debug)]
pub enum SockHandle {
    /// TCP connection.
    Tcp(TcpStream),
    /// Unix-domain connection.
    Unix(UnixStream),
}

impl SockHandle {
    /// Shut both directions down; errors (already closed) are irrelevant.
    pub fn shutdown(&self) {
        let _ = match self {
            SockHandle::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            SockHandle::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

/// Shared state of one running test.
pub struct Ctx {
    /// The test file.
    pub file: PathBuf,
    /// The test's private scratch directory (`${tmpdir}`).
    pub tmpdir: PathBuf,
    /// Runner configuration.
    pub cfg: Arc<Config>,
    macros: Mutex<Macros>,
    log: Mutex<Vec<String>>,
    start: Instant,
    abort: AtomicBool,
    failure: Mutex<Option<Failure>>,
    skipped: Mutex<Option<String>>,
    env: Mutex<Vec<(String, String)>>,
    pids: Mutex<Vec<(u32, bool)>>,
    sockets: Mutex<Vec<SockHandle>>,
    /// Declared servers, in declaration order (for `-vcl+backend`).
    pub servers: Mutex<Vec<Arc<crate::server::Server>>>,
    /// Declared clients.
    pub clients: Mutex<Vec<Arc<crate::client::Client>>>,
    /// Declared varnish instances.
    pub varnishes: Mutex<Vec<Arc<Mutex<crate::varnish::Varnish>>>>,
    /// Declared barriers.
    pub barriers: Mutex<HashMap<String, Arc<crate::barrier::Barrier>>>,
    /// Declared logexpect instances.
    pub logexpects: Mutex<Vec<Arc<crate::logexpect::LogExpect>>>,
    /// Declared processes.
    pub processes: Mutex<Vec<Arc<crate::process::Process>>>,
    /// Declared tunnels.
    pub tunnels: Mutex<Vec<Arc<crate::tunnel::Tunnel>>>,
    /// Declared HAProxy instances.
    pub haproxies: Mutex<Vec<Arc<crate::haproxy::Haproxy>>>,
    /// Declared syslog receivers.
    pub syslogs: Mutex<Vec<Arc<crate::syslog::Syslog>>>,
    /// Set by `feature disable_aslr`: processes start with address-space
    /// randomisation off, as varnishtest's children inherit its
    /// `ADDR_NO_RANDOMIZE` personality.
    no_aslr: AtomicBool,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("file", &self.file).finish()
    }
}

/// Lock a mutex, ignoring poisoning (a panicking actor must not hide the
/// state from the others).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Ctx {
    /// New context for `file` using scratch directory `tmpdir`.
    pub fn new(file: PathBuf, tmpdir: PathBuf, cfg: Arc<Config>, macros: Macros) -> Self {
        Ctx {
            file,
            tmpdir,
            cfg,
            macros: Mutex::new(macros),
            log: Mutex::new(Vec::new()),
            start: Instant::now(),
            abort: AtomicBool::new(false),
            failure: Mutex::new(None),
            skipped: Mutex::new(None),
            env: Mutex::new(Vec::new()),
            pids: Mutex::new(Vec::new()),
            sockets: Mutex::new(Vec::new()),
            servers: Mutex::new(Vec::new()),
            clients: Mutex::new(Vec::new()),
            varnishes: Mutex::new(Vec::new()),
            barriers: Mutex::new(HashMap::new()),
            logexpects: Mutex::new(Vec::new()),
            processes: Mutex::new(Vec::new()),
            tunnels: Mutex::new(Vec::new()),
            haproxies: Mutex::new(Vec::new()),
            syslogs: Mutex::new(Vec::new()),
            no_aslr: AtomicBool::new(false),
        }
    }

    /// Seconds since the test started.
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Append a log line at varnishtest verbosity `level` (0 = failure).
    pub fn log(&self, level: u8, actor: &str, msg: &str) {
        let pfx = match level {
            0 => "----",
            1 => "*",
            2 => "**",
            3 => "***",
            _ => "****",
        };
        let line = format!("{pfx:<4} {actor:<5} {msg}");
        if self.cfg.verbose_live {
            eprintln!("{line}");
        }
        lock(&self.log).push(line);
    }

    /// Log a multi-line blob, one log line per text line, as `pfx|line`.
    pub fn dump(&self, level: u8, actor: &str, pfx: &str, data: &str) {
        if data.is_empty() {
            self.log(level, actor, &format!("{pfx}|"));
            return;
        }
        for l in data.split_inclusive('\n') {
            let l = l.strip_suffix('\n').unwrap_or(l);
            let l = l.replace('\r', "\\r").replace('\t', "\\t");
            self.log(level, actor, &format!("{pfx}|{l}"));
        }
    }

    /// The whole log so far.
    pub fn log_lines(&self) -> Vec<String> {
        lock(&self.log).clone()
    }

    /// Access the macros.
    pub fn macros(&self) -> MutexGuard<'_, Macros> {
        lock(&self.macros)
    }

    /// Expand macros in `s`.
    pub fn expand(&self, s: &str) -> R<String> {
        self.macros().expand(s).map_err(Fail)
    }

    /// Define a macro and log it like varnishtest.
    pub fn define(&self, actor: &str, name: &str, value: &str) {
        self.log(4, actor, &format!("macro def {name}={value}"));
        self.macros().define(name, value);
    }

    /// Forget a macro and log it like varnishtest.
    pub fn undefine(&self, actor: &str, name: &str) {
        self.log(4, actor, &format!("macro undef {name}"));
        self.macros().undefine(name);
    }

    /// Record a failure (the first one wins) and start tearing down.
    pub fn fail(&self, actor: &str, line: usize, msg: &str) {
        let mut f = lock(&self.failure);
        // An abort without a recorded failure or skip is the end-of-test
        // teardown: errors of actors still running then are not failures.
        if f.is_none() && self.aborted() && self.skipped().is_none() {
            self.log(3, actor, &format!("after teardown: {msg}"));
            return;
        }
        if f.is_none() {
            self.log(0, actor, msg);
            *f = Some(Failure {
                actor: actor.to_string(),
                line,
                msg: msg.to_string(),
            });
        } else if !self.aborted() {
            self.log(0, actor, msg);
        }
        drop(f);
        self.abort();
    }

    /// The first failure, if any.
    pub fn failure(&self) -> Option<Failure> {
        lock(&self.failure).clone()
    }

    /// Mark the test skipped (a missing feature) and stop it.
    pub fn skip(&self, why: &str) {
        *lock(&self.skipped) = Some(why.to_string());
        self.abort.store(true, Ordering::SeqCst);
    }

    /// Skip reason, if the test was skipped.
    pub fn skipped(&self) -> Option<String> {
        lock(&self.skipped).clone()
    }

    /// True once the test must stop (failure, skip or timeout).
    pub fn aborted(&self) -> bool {
        self.abort.load(Ordering::SeqCst)
    }

    /// Stop everything: set the flag and unblock every registered socket.
    pub fn abort(&self) {
        self.abort.store(true, Ordering::SeqCst);
        for s in lock(&self.sockets).drain(..) {
            s.shutdown();
        }
    }

    /// Register a socket so that [`Ctx::abort`] can unblock its readers.
    pub fn register_socket(&self, s: SockHandle) {
        if self.aborted() {
            s.shutdown();
        }
        let mut v = lock(&self.sockets);
        if v.len() > 256 {
            v.drain(..128);
        }
        v.push(s);
    }

    /// Error to return from a wait that was interrupted by an abort.
    pub fn aborted_err(&self) -> Fail {
        Fail("test aborted".into())
    }

    /// Sleep for `d`, waking early (with an error) when the test aborts.
    pub fn sleep(&self, d: Duration) -> R<()> {
        let end = Instant::now() + d;
        loop {
            if self.aborted() {
                return Err(self.aborted_err());
            }
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            std::thread::sleep((end - now).min(Duration::from_millis(10)));
        }
    }

    /// Remember a child process to kill at teardown. `group` means it leads
    /// its own process group and the whole group is killed.
    pub fn track_pid(&self, pid: u32, group: bool) {
        lock(&self.pids).push((pid, group));
    }

    /// Forget a child that was reaped normally.
    pub fn untrack_pid(&self, pid: u32) {
        lock(&self.pids).retain(|(p, _)| *p != pid);
    }

    /// SIGKILL every remaining tracked child (and its group).
    pub fn kill_children(&self) {
        let pids: Vec<(u32, bool)> = lock(&self.pids).drain(..).collect();
        for (pid, group) in pids {
            send_signal(pid, "KILL", group);
        }
    }

    /// A file name from the test, relative names being relative to
    /// `${tmpdir}` (varnishtest runs each test from there).
    pub fn path(&self, name: &str) -> PathBuf {
        let p = PathBuf::from(crate::text::os_str(name));
        if p.is_absolute() {
            p
        } else {
            self.tmpdir.join(p)
        }
    }

    /// Start every later process with address-space randomisation off
    /// (`feature disable_aslr`).
    pub fn disable_aslr(&self) {
        self.no_aslr.store(true, Ordering::SeqCst);
    }

    /// Environment overrides set by `setenv`.
    pub fn env(&self) -> Vec<(String, String)> {
        lock(&self.env).clone()
    }

    /// Set an environment override for the processes this test starts.
    pub fn setenv(&self, name: &str, value: &str, if_unset: bool) {
        let mut env = lock(&self.env);
        let exists = env.iter().any(|(n, _)| n == name) || std::env::var_os(name).is_some();
        if if_unset && exists {
            return;
        }
        env.retain(|(n, _)| n != name);
        env.push((name.to_string(), value.to_string()));
    }

    /// A `/bin/sh -c` command set up like varnishtest's: working directory
    /// `${tmpdir}`, `setenv` overrides, and the daemon under test reachable
    /// as `varnishd` first on PATH.
    pub fn shell_command(&self, script: &str) -> Command {
        let mut c = self.command("/bin/sh");
        c.arg("-c");
        c.arg(crate::text::os_str(script));
        c
    }

    /// A command for `program` in the test's environment (see
    /// [`Ctx::shell_command`]).
    pub fn command(&self, program: &str) -> Command {
        let mut c = if self.no_aslr.load(Ordering::SeqCst) {
            let mut c = Command::new("setarch");
            c.args([std::env::consts::ARCH, "-R", program]);
            c
        } else {
            Command::new(program)
        };
        c.current_dir(&self.tmpdir);
        let bindir = self.tmpdir.join(".vtc-bin");
        let path = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("{}:{}", bindir.display(), path));
        for (n, v) in self.env() {
            c.env(n, v);
        }
        c
    }
}

/// Send a signal with the `kill` utility (no unsafe libc calls needed).
/// `sig` is a name like `KILL` or `TERM`; `group` targets the process group.
pub fn send_signal(pid: u32, sig: &str, group: bool) -> bool {
    let target = if group {
        format!("-{pid}")
    } else {
        pid.to_string()
    };
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg("--")
        .arg(target)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}
