//! `haproxy hN`: runs a real HAProxy in front of (or behind) the daemon
//! under test, as varnishtest does, so that the PROXY-protocol paths are
//! exercised by the peer they are written for.
//!
//! - `-conf CFG` / `-conf+backend CFG` store a configuration; the runner
//!   puts a `global` section with two stats sockets first (a Unix one in
//!   the instance's directory and a TCP one for `-cli`), and `+backend`
//!   appends a backend and a frontend per declared server.
//! - Every `fd@${NAME}` in the configuration becomes a listening socket on
//!   127.0.0.1 opened by the runner and inherited by HAProxy (the
//!   environment variable `NAME` holds its descriptor number); the test
//!   reaches it as `${hN_NAME_sock}` / `_addr` / `_port`.
//! - `-conf-OK CFG` and `-conf-BAD TEXT CFG` run `haproxy -c` and check
//!   its verdict (exit 0, or exit 1 with TEXT in the output).
//! - `-start` runs it (`-d`, or `-D` with a pid file), `-wait` stops it
//!   with SIGINT (then TERM, then KILL) and judges the exit, `-cli SPEC`
//!   runs `send` / `expect ~|!~` against its stats socket, `-arg`,
//!   `-W`, `-expectexit N` as varnishtest.
//!
//! The program is `$HAPROXY_PROGRAM` or `haproxy` from PATH; tests guard
//! themselves with `feature cmd {haproxy --version …}`.

use crate::ctx::{Ctx, R, lock, send_signal};
use crate::script::{self, Cmd};
use crate::{bail, fail};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What `haproxy -c` prints for a good configuration.
const GOOD_CONF: &str = "Configuration file is valid";

#[derive(Debug, Default)]
struct State {
    /// The configuration as it will be written (macros expanded).
    cfg: Option<String>,
    /// Extra command-line arguments (`-arg`).
    args: Vec<String>,
    daemon: bool,
    worker: bool,
    expect_exit: i32,
    /// Listening sockets handed to HAProxy: (environment name, socket).
    fds: Vec<(String, TcpListener)>,
    /// A `-cli` spec not run yet: (text, line).
    cli: Option<(String, usize)>,
    running: Option<Running>,
}

#[derive(Debug)]
struct Running {
    child: Child,
    /// The pid to signal: the child, or the daemon named by the pid file.
    pid: u32,
    /// Reads HAProxy's output until it closes; returns all of it.
    output: JoinHandle<String>,
    /// Kept open so HAProxy's stdin stays open while it runs.
    _stdin: Option<std::process::ChildStdin>,
    check_mode: bool,
}

/// One declared HAProxy instance.
#[derive(Debug)]
pub struct Haproxy {
    /// `hN`.
    pub name: String,
    workdir: PathBuf,
    state: Mutex<State>,
}

impl Haproxy {
    fn new(ctx: &Ctx, name: &str) -> R<Self> {
        let workdir = ctx.tmpdir.join(name);
        let _ = std::fs::remove_dir_all(&workdir);
        std::fs::create_dir_all(&workdir)
            .map_err(|e| fail!("cannot create {}: {e}", workdir.display()))?;
        Ok(Haproxy {
            name: name.to_string(),
            workdir,
            state: Mutex::new(State::default()),
        })
    }

    fn cfg_path(&self) -> PathBuf {
        self.workdir.join("cfg")
    }

    /// Builds the configuration file text and opens the sockets it binds
    /// by descriptor.
    fn store_conf(&self, ctx: &Ctx, st: &mut State, cfg: &str, auto_backend: bool) -> R<()> {
        let mut text = format!(
            "    global\n\tstats socket \"{}\" level admin mode 600\n    stats socket \"fd@${{cli}}\" level admin\n",
            self.workdir.join("stats.sock").display()
        );
        text.push_str(cfg);
        if auto_backend {
            let servers: Vec<_> = lock(&ctx.servers).clone();
            let bound: Vec<(String, String, String)> = servers
                .iter()
                .filter_map(|s| s.bound().map(|(a, p, unix)| (s.name.clone(), a, p, unix)))
                .map(|(n, a, p, unix)| {
                    if unix {
                        bail!("haproxy -conf+backend: server {n} listens on a Unix socket");
                    }
                    Ok((n, a, p))
                })
                .collect::<R<_>>()?;
            for (n, a, p) in &bound {
                let id = &n[1..];
                text.push_str(&format!("\n    backend be{id}\n\tserver srv{id} {a}:{p}\n"));
            }
            for (n, _, _) in &bound {
                let id = &n[1..];
                text.push_str(&format!(
                    "\n    frontend http{id}\n\tuse_backend be{id}\n\tbind \"fd@${{fe{id}}}\"\n"
                ));
            }
        }
        st.fds.clear();
        for var in fd_vars(&text) {
            let l = TcpListener::bind("127.0.0.1:0")
                .map_err(|e| fail!("Create listen socket failed: {e}"))?;
            let a = l
                .local_addr()
                .map_err(|e| fail!("Create listen socket failed: {e}"))?;
            let base = format!("{}_{var}", self.name);
            ctx.define(&self.name, &format!("{base}_sock"), &a.to_string());
            ctx.define(&self.name, &format!("{base}_addr"), &a.ip().to_string());
            ctx.define(&self.name, &format!("{base}_port"), &a.port().to_string());
            ctx.log(4, &self.name, &format!("setenv({var}, {})", l.as_raw_fd()));
            st.fds.push((var, l));
        }
        st.cfg = Some(ctx.expand(&text)?);
        Ok(())
    }

    fn start(&self, ctx: &Arc<Ctx>, st: &mut State, check_mode: bool) -> R<()> {
        if st.running.is_some() {
            bail!("haproxy {} is already running", self.name);
        }
        ctx.log(2, &self.name, "haproxy_start");
        let cfg = st
            .cfg
            .clone()
            .ok_or_else(|| fail!("haproxy {} has no configuration (-conf)", self.name))?;
        ctx.dump(4, &self.name, "conf", &cfg);
        std::fs::write(self.cfg_path(), &cfg)
            .map_err(|e| fail!("failed to write haproxy configuration file: {e}"))?;
        let program = std::env::var("HAPROXY_PROGRAM").unwrap_or_else(|_| "haproxy".into());
        let mut line = format!("exec {program}");
        line.push_str(if check_mode {
            " -c"
        } else if st.daemon {
            " -D"
        } else {
            " -d"
        });
        if st.worker {
            line.push_str(" -W");
        }
        for a in &st.args {
            line.push(' ');
            line.push_str(a);
        }
        line.push_str(&format!(" -f {}", self.cfg_path().display()));
        let pid_file = (st.worker || st.daemon).then(|| self.workdir.join("pid"));
        if let Some(p) = &pid_file {
            let _ = std::fs::remove_file(p);
            line.push_str(&format!(" -p {}", p.display()));
        }
        ctx.dump(4, &self.name, "argv", &line);
        if st.worker && !st.daemon {
            // The master exits 128 + SIGINT when stopped by SIGINT.
            st.expect_exit = 128 + 2;
        }
        let (rd, wr) = std::io::pipe().map_err(|e| fail!("cannot create a pipe: {e}"))?;
        let wr2 = wr
            .try_clone()
            .map_err(|e| fail!("cannot duplicate a pipe: {e}"))?;
        let mut c = ctx.shell_command(&line);
        c.current_dir(&self.workdir)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(wr))
            .stderr(Stdio::from(wr2));
        // The listening sockets are inherited: only for this spawn are
        // they not close-on-exec.
        for (var, l) in &st.fds {
            c.env(var, l.as_raw_fd().to_string());
            rustix::io::fcntl_setfd(l, rustix::io::FdFlags::empty())
                .map_err(|e| fail!("cannot pass a socket to haproxy: {e}"))?;
        }
        let spawned = c.spawn();
        for (_, l) in &st.fds {
            let _ = rustix::io::fcntl_setfd(l, rustix::io::FdFlags::CLOEXEC);
        }
        drop(c);
        let mut child = spawned.map_err(|e| fail!("cannot start {program}: {e}"))?;
        let pid = child.id();
        ctx.track_pid(pid, false);
        ctx.log(3, &self.name, &format!("PID: {pid}"));
        ctx.define(&self.name, &format!("{}_pid", self.name), &pid.to_string());
        ctx.define(
            &self.name,
            &format!("{}_name", self.name),
            &self.workdir.display().to_string(),
        );
        let (c2, name) = (ctx.clone(), self.name.clone());
        let output = std::thread::spawn(move || {
            let mut rd = rd;
            let mut all = String::new();
            let mut buf = [0u8; 4096];
            loop {
                match rd.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let t = String::from_utf8_lossy(&buf[..n]).into_owned();
                        c2.dump(4, &name, "debug", &t);
                        all.push_str(&t);
                    }
                }
            }
            all
        });
        let stdin = child.stdin.take();
        let mut running = Running {
            child,
            pid,
            output,
            _stdin: stdin,
            check_mode,
        };
        if let Some(p) = pid_file {
            match self.wait_pid_file(ctx, &p, st.daemon, pid) {
                Ok(daemon_pid) => {
                    running.pid = daemon_pid;
                    ctx.track_pid(daemon_pid, false);
                }
                Err(e) => {
                    st.running = Some(running);
                    return Err(e);
                }
            }
        }
        st.running = Some(running);
        Ok(())
    }

    /// Waits (3 s at most) for the pid file to name a live process.
    fn wait_pid_file(&self, ctx: &Ctx, p: &PathBuf, daemon: bool, child: u32) -> R<u32> {
        ctx.log(3, &self.name, "wait-pid-file");
        let end = Instant::now() + Duration::from_secs(3);
        let mut why = String::new();
        while Instant::now() < end {
            if ctx.aborted() {
                return Err(ctx.aborted_err());
            }
            match std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
            {
                None => why = format!("Could not read PID file '{}'", p.display()),
                Some(pid) if !daemon && pid != child => {
                    why = format!("PID file has different PID ({pid} != {child})")
                }
                Some(pid) if !PathBuf::from(format!("/proc/{pid}")).exists() => {
                    why = format!("Could not find PID {pid} process")
                }
                Some(pid) => {
                    ctx.log(
                        2,
                        &self.name,
                        &format!("haproxy PID {pid} successfully started"),
                    );
                    return Ok(pid);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        bail!("haproxy {} PID file check failed:\n\t{why}", self.name)
    }

    /// Stops the instance (starting it first if it never ran) and judges
    /// how it ended; returns its output.
    fn wait(&self, ctx: &Arc<Ctx>, st: &mut State) -> R<String> {
        ctx.log(2, &self.name, "Wait");
        if st.running.is_none() {
            self.start(ctx, st, false)?;
        }
        if let Some((spec, line)) = st.cli.take() {
            self.run_cli(ctx, &spec, line)?;
        }
        let Some(mut r) = st.running.take() else {
            bail!("haproxy {} is not running", self.name)
        };
        ctx.log(2, &self.name, &format!("Stop HAproxy pid={}", r.pid));
        // As varnishtest: SIGINT, then TERM, then KILL, two seconds each
        // (a soft-stopping HAProxy may wait for its connections); the exit
        // by the last signal sent is a good one.
        let mut last_signal: Option<(&str, i32)> = None;
        if !r.check_mode {
            let signals = [("INT", 2), ("TERM", 15), ("KILL", 9)];
            let mut next = 0;
            let mut tries = 0;
            loop {
                let alive = if st.daemon {
                    PathBuf::from(format!("/proc/{}", r.pid)).exists()
                } else {
                    !r.output.is_finished()
                };
                if !alive {
                    break;
                }
                if tries == 0 {
                    let (name, num) = signals[next];
                    if send_signal(r.pid, name, false) {
                        last_signal = Some((name, num));
                    }
                    next = (next + 1).min(signals.len() - 1);
                }
                std::thread::sleep(Duration::from_millis(100));
                tries = (tries + 1) % 20;
            }
        }
        let out = r.output.join().unwrap_or_default();
        let status = r
            .child
            .wait()
            .map_err(|e| fail!("wait for haproxy failed: {e}"))?;
        ctx.untrack_pid(r.child.id());
        ctx.untrack_pid(r.pid);
        if !st.daemon {
            use std::os::unix::process::ExitStatusExt;
            let by_signal = last_signal.is_some_and(|(_, n)| status.signal() == Some(n));
            if status.code() != Some(st.expect_exit) && !by_signal {
                bail!(
                    "Bad exit status: {status} (expected exit {}{})",
                    st.expect_exit,
                    last_signal
                        .map(|(n, _)| format!(" or SIG{n}"))
                        .unwrap_or_default()
                );
            }
            ctx.log(2, &self.name, &format!("Exit status: {status}"));
        }
        Ok(out)
    }

    fn check_conf(&self, ctx: &Arc<Ctx>, st: &mut State, expect: &str, exit: i32) -> R<()> {
        st.expect_exit = exit;
        self.start(ctx, st, true)?;
        let out = self.wait(ctx, st)?;
        if !out.contains(expect) {
            bail!("Did not find expected string '{expect}'");
        }
        ctx.log(2, &self.name, &format!("Found expected '{expect}'"));
        Ok(())
    }

    /// Runs a `-cli` spec against the TCP stats socket.
    fn run_cli(&self, ctx: &Ctx, spec: &str, line: usize) -> R<()> {
        ctx.log(2, &self.name, "CLI starting");
        let mut conn: Option<std::net::TcpStream> = None;
        let addr = ctx.expand(&format!("${{{}_cli_sock}}", self.name))?;
        let r = script::run_collect(ctx, &self.name, spec, line, &mut |cmd: &Cmd| {
            match cmd.args[0].as_str() {
                "send" => {
                    let s = match &mut conn {
                        Some(s) => s,
                        None => {
                            let s = std::net::TcpStream::connect(&addr)
                                .map_err(|e| fail!("CLI failed to open {addr}: {e}"))?;
                            ctx.log(3, &self.name, &format!("CLI connected to {addr}"));
                            conn.insert(s)
                        }
                    };
                    let msg = format!("{}\n", cmd.arg(1)?);
                    ctx.dump(4, &self.name, "CLI send", &msg);
                    s.write_all(msg.as_bytes())
                        .map_err(|e| fail!("CLI send error: {e}"))?;
                    // HAProxy answers and closes once the write side is shut.
                    s.shutdown(std::net::Shutdown::Write)
                        .map_err(|e| fail!("Shutdown failed: {e}"))?;
                    Ok(())
                }
                "expect" => {
                    let (op, pat) = (cmd.arg(1)?, cmd.arg(2)?);
                    if op != "~" && op != "!~" {
                        bail!("CLI expect: operator must be ~ or !~ (got {op})");
                    }
                    let mut s = conn
                        .take()
                        .ok_or_else(|| fail!("CLI expect without a send"))?;
                    let _ = s.set_read_timeout(Some(ctx.cfg.timeout));
                    let mut got = Vec::new();
                    s.read_to_end(&mut got)
                        .map_err(|e| fail!("CLI recv() failed ({e})"))?;
                    let got = String::from_utf8_lossy(&got);
                    ctx.dump(4, &self.name, "CLI recv", &got);
                    let re = regex::Regex::new(pat)
                        .map_err(|e| fail!("CLI regexp error: '{e}' ({pat})"))?;
                    if re.is_match(&got) != (op == "~") {
                        bail!("CLI expect failed {op} \"{pat}\"");
                    }
                    ctx.log(4, &self.name, &format!("CLI expect match {op} \"{pat}\""));
                    Ok(())
                }
                other => bail!("Unknown haproxy CLI command: {other}"),
            }
        });
        match r {
            Ok(()) => {
                ctx.log(2, &self.name, "CLI ending");
                Ok(())
            }
            Err(Some((_, e))) => Err(e),
            Err(None) => Err(ctx.aborted_err()),
        }
    }

    /// Teardown: a running instance is stopped; its exit is judged only
    /// when the test has not failed already.
    pub fn reset(&self, ctx: &Arc<Ctx>) {
        let mut st = lock(&self.state);
        if st.running.is_some()
            && let Err(e) = self.wait(ctx, &mut st)
            && !ctx.aborted()
        {
            ctx.fail(&self.name, 0, &e.0);
        }
    }
}

/// The names in `fd@${NAME}`, each once, in order of appearance.
fn fd_vars(cfg: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = cfg;
    while let Some(i) = rest.find("fd@${") {
        let after = &rest[i + 5..];
        let Some(end) = after.find('}') else { break };
        let var = &after[..end];
        rest = &after[end + 1..];
        if !out.iter().any(|v| v == var) {
            out.push(var.to_string());
        }
    }
    out
}

/// The `haproxy` command.
pub fn cmd_haproxy(ctx: &Arc<Ctx>, cmd: &Cmd) -> R<()> {
    let name = cmd.arg(1)?.to_string();
    if !name.starts_with('h') {
        bail!("haproxy name must start with 'h' (got {name})");
    }
    let existing = lock(&ctx.haproxies)
        .iter()
        .find(|h| h.name == name)
        .cloned();
    let h = match existing {
        Some(h) => h,
        None => {
            let h = Arc::new(Haproxy::new(ctx, &name)?);
            lock(&ctx.haproxies).push(h.clone());
            h
        }
    };
    let mut st = lock(&h.state);
    let av = &cmd.args;
    let mut i = 2;
    while i < av.len() {
        if ctx.aborted() {
            return Err(ctx.aborted_err());
        }
        match av[i].as_str() {
            "-conf-OK" => {
                h.store_conf(ctx, &mut st, cmd.arg(i + 1)?, false)?;
                h.check_conf(ctx, &mut st, GOOD_CONF, 0)?;
                i += 1;
            }
            "-conf-BAD" => {
                let expect = cmd.arg(i + 1)?.to_string();
                h.store_conf(ctx, &mut st, cmd.arg(i + 2)?, false)?;
                h.check_conf(ctx, &mut st, &expect, 1)?;
                i += 2;
            }
            "-D" => st.daemon = true,
            "-W" => st.worker = true,
            "-arg" => {
                st.args.push(cmd.arg(i + 1)?.to_string());
                i += 1;
            }
            "-cli" => {
                let line = cmd.lines.get(i + 1).copied().unwrap_or(cmd.line);
                let spec = cmd.arg(i + 1)?.to_string();
                if st.running.is_some() {
                    h.run_cli(ctx, &spec, line)?;
                } else {
                    st.cli = Some((spec, line));
                }
                i += 1;
            }
            "-conf" | "-conf+backend" => {
                let auto = av[i] == "-conf+backend";
                h.store_conf(ctx, &mut st, cmd.arg(i + 1)?, auto)?;
                i += 1;
            }
            "-expectexit" => {
                st.expect_exit = script::parse_int(cmd.arg(i + 1)?)? as i32;
                i += 1;
            }
            "-start" => h.start(ctx, &mut st, false)?,
            "-wait" => {
                h.wait(ctx, &mut st)?;
            }
            other => bail!("Unknown haproxy argument: {other}"),
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::fd_vars;

    #[test]
    fn descriptor_names_are_found_once_each() {
        let cfg =
            "stats socket \"fd@${cli}\"\nbind \"fd@${fe1}\"\nbind fd@${fe1}\nbind fd@${broken";
        assert_eq!(fd_vars(cfg), ["cli", "fe1"]);
        assert!(fd_vars("bind 127.0.0.1:80").is_empty());
    }
}
