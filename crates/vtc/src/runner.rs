//! Runs one test file: sets up its private directory and built-in macros,
//! executes the top-level commands in a thread of their own, enforces the
//! per-test timeout (killing every child process the test started), tears
//! the actors down like varnishtest's "RESETTING" phase, and reports.

use crate::Config;
use crate::ctx::{Ctx, Failure, R, lock};
use crate::macros::Macros;
use crate::script::{self, Cmd};
use crate::{bail, fail};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Outcome of one test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// All commands succeeded.
    Passed,
    /// A command failed or the test timed out.
    Failed,
    /// A required feature is missing.
    Skipped,
}

/// Result of running one test file.
#[derive(Debug, Clone)]
pub struct TestResult {
    /// The test file as given.
    pub file: PathBuf,
    /// Outcome.
    pub status: Status,
    /// Wall-clock duration in seconds.
    pub duration: f64,
    /// First failure (for failed tests).
    pub failure: Option<Failure>,
    /// Why the test was skipped.
    pub skip_reason: Option<String>,
    /// The full log of the test.
    pub log: Vec<String>,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn make_tmpdir() -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    loop {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p = base.join(format!(
            "vtc.{}.{:08x}",
            std::process::id(),
            nanos ^ (n as u32).wrapping_mul(2654435761)
        ));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A TCP port nothing listens on (bound then released), for `${bad_backend}`.
fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(9)
}

/// The Varnish tool names a test may run in `shell` and `process`
/// commands; `lacquer` answers to each of them (it dispatches on its name).
pub const TOOL_NAMES: &[&str] = &[
    "varnishadm",
    "varnishhist",
    "varnishlog",
    "varnishncsa",
    "varnishstat",
    "varnishtop",
];

/// When the daemon is lacquerd, makes the Varnish tool names in `bindir`
/// (first on the PATH of the test's shells and processes) run lacquer's
/// tools, so `varnishlog -n ${v1_name}` reads lacquerd's log. With real
/// varnishd nothing is linked and the installed tools run.
fn link_tools(bindir: &Path, daemon: &Path) {
    if crate::native::is_varnishd(daemon) {
        return;
    }
    let Some(lacquer) = tools_binary(daemon) else {
        return;
    };
    for name in TOOL_NAMES {
        let _ = std::os::unix::fs::symlink(&lacquer, bindir.join(name));
    }
}

/// The `lacquer` binary: this process when it is one, else the one next to
/// the daemon, else the one on `$PATH`.
fn tools_binary(daemon: &Path) -> Option<PathBuf> {
    let is_lacquer = |p: &Path| p.file_name().is_some_and(|n| n == "lacquer") && p.is_file();
    if let Ok(exe) = std::env::current_exe()
        && is_lacquer(&exe)
    {
        return Some(exe);
    }
    let sibling = daemon.with_file_name("lacquer");
    if daemon.parent().is_some_and(|d| !d.as_os_str().is_empty()) && is_lacquer(&sibling) {
        return std::path::absolute(sibling).ok();
    }
    crate::find_in_path("lacquer")
}

/// Run one test file.
pub fn run_test(file: &Path, cfg: Arc<Config>) -> TestResult {
    let start = Instant::now();
    let tmpdir = match make_tmpdir() {
        Ok(t) => t,
        Err(e) => {
            return TestResult {
                file: file.to_path_buf(),
                status: Status::Failed,
                duration: 0.0,
                failure: Some(Failure {
                    actor: "top".into(),
                    line: 0,
                    msg: format!("cannot create a temporary directory: {e}"),
                }),
                skip_reason: None,
                log: Vec::new(),
            };
        }
    };
    let bindir = tmpdir.join(".vtc-bin");
    let _ = std::fs::create_dir(&bindir);
    let _ = std::os::unix::fs::symlink(&cfg.varnishd, bindir.join("varnishd"));
    link_tools(&bindir, &cfg.varnishd);
    let mut m = Macros::new();
    m.define("pwd", &cfg.pwd.display().to_string());
    m.define("localhost", "127.0.0.1");
    m.define("bad_backend", &format!("127.0.0.1:{}", unused_port()));
    m.define("listen_addr", "127.0.0.1:0");
    m.define("bad_ip", "192.0.2.255");
    let testdir = std::path::absolute(file)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    m.define("testdir", &testdir.display().to_string());
    m.define("tmpdir", &tmpdir.display().to_string());
    for (k, v) in &cfg.defines {
        m.define(k, v);
    }
    let ctx = Arc::new(Ctx::new(file.to_path_buf(), tmpdir.clone(), cfg.clone(), m));
    ctx.log(1, "top", &format!("TEST {} starting", file.display()));
    let c2 = ctx.clone();
    let f2 = file.to_path_buf();
    let worker = std::thread::spawn(move || {
        run_top(&c2, &f2);
        reset(&c2);
    });
    let deadline = start + cfg.timeout;
    let mut timed_out = false;
    while !worker.is_finished() {
        if Instant::now() > deadline && !timed_out {
            timed_out = true;
            ctx.fail(
                "top",
                0,
                &format!("TEST TIMED OUT after {:.0}s", cfg.timeout.as_secs_f64()),
            );
            ctx.kill_children();
        }
        if timed_out && Instant::now() > deadline + Duration::from_secs(5) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if worker.is_finished() {
        let _ = worker.join();
    }
    ctx.kill_children();
    let duration = start.elapsed().as_secs_f64();
    let failure = ctx.failure();
    let skip = ctx.skipped();
    let status = if failure.is_some() {
        Status::Failed
    } else if skip.is_some() {
        Status::Skipped
    } else {
        Status::Passed
    };
    if !(cfg.keep_tmp || status == Status::Failed && cfg.keep_failed_tmp) {
        let _ = std::fs::remove_dir_all(&tmpdir);
    }
    TestResult {
        file: file.to_path_buf(),
        status,
        duration,
        failure,
        skip_reason: skip,
        log: ctx.log_lines(),
    }
}

fn run_top(ctx: &Arc<Ctx>, file: &Path) {
    let text = match std::fs::read(file) {
        Ok(b) => crate::text::latin1(&b),
        Err(e) => {
            ctx.fail("top", 0, &format!("Cannot read {}: {e}", file.display()));
            return;
        }
    };
    let head = text.trim_start();
    if !head.starts_with("varnishtest") && !head.starts_with("vtest") {
        ctx.fail("top", 1, "File doesn't start with 'vtest' or 'varnishtest'");
        return;
    }
    let _ = script::run(ctx, "top", &text, 1, None, &mut |cmd| top_command(ctx, cmd));
}

/// Tear down like varnishtest: wait for clients, stop servers and log
/// readers, stop and wait for every daemon, kill leftover processes.
fn reset(ctx: &Arc<Ctx>) {
    ctx.log(1, "top", &format!("RESETTING after {}", ctx.file.display()));
    let clients: Vec<_> = lock(&ctx.clients).clone();
    for c in clients {
        let _ = c.wait(ctx);
    }
    let haproxies: Vec<_> = lock(&ctx.haproxies).clone();
    for h in haproxies {
        h.reset(ctx);
    }
    let syslogs: Vec<_> = lock(&ctx.syslogs).clone();
    for s in syslogs {
        s.reset(ctx);
    }
    let servers: Vec<_> = lock(&ctx.servers).clone();
    for s in &servers {
        s.stop(ctx);
    }
    let les: Vec<_> = lock(&ctx.logexpects).clone();
    for l in les {
        if l.running() && ctx.failure().is_none() {
            ctx.log(2, &l.name, "still running at the end of the test: stopped");
        }
    }
    let vs: Vec<_> = lock(&ctx.varnishes).clone();
    for v in vs {
        let mut g = lock(&v);
        if ctx.aborted() {
            g.kill();
        } else if let Err(e) = g.wait(ctx) {
            let name = g.name.clone();
            ctx.fail(&name, 0, &e.0);
            g.kill();
        }
    }
    for p in lock(&ctx.processes).iter() {
        p.kill();
    }
    ctx.abort();
}

/// Whether feature `f` (without its `!`) is present, with varnishtest
/// 7.1's names and checks (`vtc_misc.c`); an unknown name fails the test.
fn feature(ctx: &Ctx, f: &str) -> R<bool> {
    Ok(match f {
        "64bit" => cfg!(target_pointer_width = "64"),
        "ipv4" => std::net::TcpListener::bind("127.0.0.1:0").is_ok(),
        "ipv6" => std::net::TcpListener::bind("[::1]:0").is_ok(),
        "dns" => dns_works(),
        "disable_aslr" => {
            let works = aslr_can_be_disabled();
            if works {
                ctx.disable_aslr();
            }
            works
        }
        "root" => std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .map(|l| l.split_whitespace().nth(2) == Some("0"))
            })
            .unwrap_or(false),
        "user_varnish" => file_has_name("/etc/passwd", "varnish"),
        "user_vcache" => file_has_name("/etc/passwd", "vcache"),
        "group_varnish" => file_has_name("/etc/group", "varnish"),
        // Lacquer is not built with these (varnishtest's `-i` build-tree
        // mode, deprecated persistent storage, coverage, sanitizers, the
        // workspace emulator); abstract sockets are not offered by `-a`.
        "topbuild" | "persistent_storage" | "coverage" | "asan" | "msan" | "tsan" | "ubsan"
        | "sanitizer" | "workspace_emulator" | "abstract_uds" => false,
        _ => bail!("FAIL test, unknown feature: {f}"),
    })
}

/// varnishtest's DNS check: the canary name resolves to 192.0.2.255 over
/// IPv4 and to nothing over IPv6.
fn dns_works() -> bool {
    use std::net::ToSocketAddrs;
    let Ok(addrs) = ("dns-canary.varnish-cache.org", 80).to_socket_addrs() else {
        return false;
    };
    let addrs: Vec<_> = addrs.collect();
    let v4 = addrs.iter().find(|a| a.is_ipv4());
    v4.is_some_and(|a| a.ip().to_string() == "192.0.2.255") && !addrs.iter().any(|a| a.is_ipv6())
}

/// `feature disable_aslr` holds where processes can be started with
/// address-space randomisation off (`setarch -R`, Linux's
/// `ADDR_NO_RANDOMIZE` personality, which varnishtest sets on itself).
fn aslr_can_be_disabled() -> bool {
    std::process::Command::new("setarch")
        .args([std::env::consts::ARCH, "-R", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn file_has_name(path: &str, name: &str) -> bool {
    std::fs::read_to_string(path)
        .map(|s| s.lines().any(|l| l.split(':').next() == Some(name)))
        .unwrap_or(false)
}

/// A failed `varnish vN`, `logexpect lN` or `process pN` command is the
/// instance's failure (varnishtest logs it on the instance's log, `v1`,
/// not `top`).
fn as_instance(ctx: &Ctx, cmd: &Cmd, r: R<()>) -> R<()> {
    match r {
        Err(e) if !ctx.aborted() => {
            let name = cmd.args.get(1).map_or("top", String::as_str);
            ctx.fail(name, cmd.line, &e.0);
            Err(e)
        }
        r => r,
    }
}

fn top_command(ctx: &Arc<Ctx>, cmd: &Cmd) -> R<()> {
    let av = &cmd.args;
    match av[0].as_str() {
        "varnishtest" | "vtest" => {
            ctx.log(1, "top", &format!("VTEST {}", cmd.arg(1)?));
            Ok(())
        }
        "feature" => {
            // As varnishtest: every name may carry a `!` (skip when the
            // feature is present), `cmd` takes a command line whose exit
            // status decides, and the first unmet one skips the test.
            let mut i = 1;
            while i < av.len() {
                let (neg, f) = match av[i].strip_prefix('!') {
                    Some(f) => (true, f),
                    None => (false, av[i].as_str()),
                };
                let have = match f {
                    "cmd" => {
                        let c = cmd
                            .args
                            .get(i + 1)
                            .ok_or_else(|| fail!("Missing the command-line"))?;
                        i += 1;
                        crate::commands::run_shell(ctx, c)?.1 == Some(0)
                    }
                    "ignore_unknown_macro" => {
                        ctx.macros().ignore_unknown = true;
                        !neg
                    }
                    _ => feature(ctx, f)?,
                };
                i += 1;
                if have == neg {
                    let why = if neg { "conflicting" } else { "lacking" };
                    ctx.log(1, "top", &format!("SKIPPING test, {why} feature: {f}"));
                    ctx.skip(f);
                    return Ok(());
                }
            }
            Ok(())
        }
        "server" => crate::server::cmd_server(ctx, cmd),
        "client" => crate::client::cmd_client(ctx, cmd),
        "varnish" => as_instance(ctx, cmd, crate::varnish::cmd_varnish(ctx, cmd)),
        "logexpect" => as_instance(ctx, cmd, crate::logexpect::cmd_logexpect(ctx, cmd)),
        "process" => as_instance(ctx, cmd, crate::process::cmd_process(ctx, cmd)),
        "barrier" => crate::barrier::cmd_barrier(ctx, "top", cmd),
        "include" => {
            let f = cmd.arg(1)?;
            let text = std::fs::read(ctx.path(f))
                .map_err(|e| fail!("Cannot read include file {f}: {e}"))?;
            script::run(ctx, "top", &crate::text::latin1(&text), 1, None, &mut |c| {
                top_command(ctx, c)
            })
            .map_err(|_| ctx.aborted_err())
        }
        "setenv" => {
            let (ifunset, i) = if av.get(1).map(String::as_str) == Some("-ifunset") {
                (true, 2)
            } else {
                (false, 1)
            };
            if let Some(extra) = av.get(i + 2) {
                bail!("CMD setenv: Unexpected argument '{extra}'");
            }
            ctx.setenv(cmd.arg(i)?, cmd.arg(i + 1)?, ifunset);
            Ok(())
        }
        "filewrite" => {
            let (append, i) = if av.get(1).map(String::as_str) == Some("-a") {
                (true, 2)
            } else {
                (false, 1)
            };
            let f = cmd.arg(i)?;
            let mut data = Vec::new();
            for s in &av[i + 1..] {
                data.extend_from_slice(&crate::text::bytes(s));
            }
            let mut o = std::fs::OpenOptions::new();
            o.create(true).write(true);
            if append {
                o.append(true);
            } else {
                o.truncate(true);
            }
            use std::io::Write;
            o.open(ctx.path(f))
                .and_then(|mut h| h.write_all(&data))
                .map_err(|e| fail!("Cannot write file {f}: {e}"))
        }
        "loop" => {
            let n = script::parse_int(cmd.arg(1)?)?;
            let spec = cmd.arg(2)?.to_string();
            let line = cmd.lines.get(2).copied().unwrap_or(cmd.line);
            for _ in 0..n.max(0) {
                script::run(ctx, "top", &spec, line, None, &mut |c| top_command(ctx, c))
                    .map_err(|_| ctx.aborted_err())?;
            }
            Ok(())
        }
        "tunnel" => crate::tunnel::cmd_tunnel(ctx, cmd),
        "haproxy" => crate::haproxy::cmd_haproxy(ctx, cmd),
        "syslog" => crate::syslog::cmd_syslog(ctx, cmd),
        "stream" => {
            bail!("{} not supported by runner", av[0])
        }
        _ => match crate::commands::common(ctx, "top", cmd)? {
            true => Ok(()),
            false => bail!("Unknown command: \"{}\"", av[0]),
        },
    }
}
