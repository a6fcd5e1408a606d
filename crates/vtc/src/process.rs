//! `process pN`: runs a command (through `/bin/sh`) with stdin and stdout
//! on a pseudo-terminal and stderr on a pipe, like varnishtest. Terminal
//! output goes verbatim to `${pN_out}` and into a virtual screen
//! ([`crate::term`]) that `-expect-text`, `-match-text`, `-expect-cursor`
//! and `-screen_dump` inspect; stderr goes to `${pN_err}` and the log.
//!
//! The child becomes a session leader with the terminal as its controlling
//! terminal through util-linux `setsid --ctty` (no `unsafe` pre-exec code
//! here); the terminal is set up as varnishtest does (canonical mode with
//! echo, `TERM=xterm`, 24×80 unless `-winsz` says otherwise). The exit
//! status is checked when the process ends: exit code `-expect-exit`
//! (default 0), or death by the signal this test sent it.

use crate::ctx::{Ctx, R, lock, send_signal};
use crate::script::Cmd;
use crate::term::Screen;
use crate::text::{bytes, latin1};
use crate::{bail, fail};
use rustix::fs::{Mode, OFlags};
use rustix::termios::{
    ControlModes, InputModes, LocalModes, OptionalActions, OutputModes, SpecialCodeIndex, Winsize,
};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How terminal output is also put in the test log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogMode {
    None,
    /// Line by line (`-log`).
    Lines,
    /// As text (`-dump`).
    Dump,
    /// As hex (`-hexdump`).
    Hex,
}

#[derive(Debug)]
struct Running {
    pid: u32,
    /// Our side of the terminal, for writes and window size changes.
    master: File,
    /// Reaps the child and checks its exit status.
    waiter: JoinHandle<()>,
}

#[derive(Debug)]
struct State {
    command: Option<String>,
    running: Option<Running>,
    log: LogMode,
    ansi_response: bool,
}

/// What the process threads share with the commands.
#[derive(Debug)]
struct Shared {
    screen: Mutex<Screen>,
    out_bytes: AtomicU64,
    err_bytes: AtomicU64,
    expect_exit: AtomicI32,
    /// Signal the process may die of (negative: set by `-kill`, where a
    /// normal exit with the expected code is fine too).
    expect_signal: AtomicI32,
    allow_core: AtomicBool,
    /// Set at test teardown: the end of the process is not checked.
    torn_down: AtomicBool,
}

/// One declared process.
#[derive(Debug)]
pub struct Process {
    /// `pN`.
    pub name: String,
    state: Mutex<State>,
    shared: Arc<Shared>,
}

fn hex_line(d: &[u8]) -> String {
    d.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Set the terminal up like varnishtest: canonical input with echo,
/// output post-processing (NL to CR-NL), 9600 baud, the usual control
/// characters.
fn init_term(fd: &OwnedFd) -> std::io::Result<()> {
    let mut t = rustix::termios::tcgetattr(fd)?;
    t.control_modes = ControlModes::CREAD | ControlModes::CS8 | ControlModes::HUPCL;
    t.input_modes = InputModes::BRKINT
        | InputModes::ICRNL
        | InputModes::IMAXBEL
        | InputModes::IXON
        | InputModes::IXANY;
    t.local_modes = LocalModes::ICANON
        | LocalModes::ISIG
        | LocalModes::IEXTEN
        | LocalModes::ECHO
        | LocalModes::ECHOE
        | LocalModes::ECHOKE
        | LocalModes::ECHOCTL;
    t.output_modes = OutputModes::OPOST | OutputModes::ONLCR;
    t.set_speed(9600)?;
    t.special_codes[SpecialCodeIndex::VEOF] = 0x04;
    t.special_codes[SpecialCodeIndex::VERASE] = 0x08;
    t.special_codes[SpecialCodeIndex::VKILL] = 0x15;
    t.special_codes[SpecialCodeIndex::VINTR] = 0x03;
    t.special_codes[SpecialCodeIndex::VQUIT] = 0x1c;
    rustix::termios::tcsetattr(fd, OptionalActions::Flush, &t)?;
    Ok(())
}

fn winsize(rows: u16, cols: u16) -> Winsize {
    Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// A new pseudo-terminal: (master, slave).
fn open_pty(rows: u16, cols: u16) -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::pty::OpenptFlags;
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let name = rustix::pty::ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    init_term(&slave)?;
    rustix::termios::tcsetwinsize(&slave, winsize(rows, cols))?;
    Ok((master, slave))
}

impl Process {
    fn running(&self) -> bool {
        lock(&self.state).running.is_some()
    }

    fn start(&self, ctx: &Arc<Ctx>) -> R<()> {
        let mut st = lock(&self.state);
        if st.running.is_some() {
            bail!("Already running, -wait first");
        }
        let cmdline = st
            .command
            .clone()
            .ok_or_else(|| fail!("Process {} has no command", self.name))?;
        ctx.log(4, &self.name, &format!("CMD: {cmdline}"));
        let dir = ctx.tmpdir.join(&self.name);
        std::fs::create_dir_all(&dir).map_err(|e| fail!("cannot create {}: {e}", dir.display()))?;
        let open = |f: &str| {
            let p = dir.join(f);
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&p)
                .map_err(|e| fail!("cannot create {}: {e}", p.display()))
        };
        let (mut out_f, mut err_f) = (open("stdout")?, open("stderr")?);
        let (rows, cols) = lock(&self.shared.screen).size();
        let (master, slave) =
            open_pty(rows, cols).map_err(|e| fail!("cannot open a pseudo-terminal: {e}"))?;
        let slave2 = slave
            .try_clone()
            .map_err(|e| fail!("cannot duplicate the terminal: {e}"))?;
        let mut c = ctx.command("setsid");
        c.arg("--ctty")
            .arg("/bin/sh")
            .arg("-c")
            .arg(crate::text::os_str(&cmdline))
            .env("TERM", "xterm")
            .env_remove("TERMCAP")
            .stdin(Stdio::from(slave))
            .stdout(Stdio::from(slave2))
            .stderr(Stdio::piped());
        let mut child: Child = c
            .spawn()
            .map_err(|e| fail!("cannot start process with setsid (util-linux): {e}"))?;
        drop(c);
        let pid = child.id();
        ctx.track_pid(pid, true);
        ctx.log(3, &self.name, &format!("PID: {pid}"));
        ctx.define(&self.name, &format!("{}_pid", self.name), &pid.to_string());
        let master = File::from(master);
        let mut rd = master
            .try_clone()
            .map_err(|e| fail!("cannot duplicate the terminal: {e}"))?;
        let mut responder = master
            .try_clone()
            .map_err(|e| fail!("cannot duplicate the terminal: {e}"))?;
        let (sh, name, c2, mode, ansi) = (
            self.shared.clone(),
            self.name.clone(),
            ctx.clone(),
            st.log,
            st.ansi_response,
        );
        let term_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            let mut partial = Vec::new();
            loop {
                let n = match rd.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let d = &buf[..n];
                sh.out_bytes.fetch_add(n as u64, Ordering::SeqCst);
                match mode {
                    LogMode::None => {}
                    LogMode::Dump => c2.dump(4, &name, "stdout", &latin1(d)),
                    LogMode::Hex => c2.log(4, &name, &format!("stdout|{}", hex_line(d))),
                    LogMode::Lines => {
                        partial.extend_from_slice(d);
                        while let Some(i) = partial.iter().position(|&b| b == b'\n') {
                            let l: Vec<u8> = partial.drain(..=i).collect();
                            c2.dump(4, &name, "output", &latin1(&l));
                        }
                    }
                }
                let _ = out_f.write_all(d);
                let answers = lock(&sh.screen).feed(d);
                if !answers.is_empty() {
                    c2.dump(4, &name, "term_response", &latin1(&answers));
                    if ansi && let Err(e) = responder.write_all(&answers) {
                        c2.fail(&name, 0, &format!("Could not write to process: {e}"));
                    }
                }
            }
        });
        let mut err_pipe = child.stderr.take();
        let (sh, name, c2) = (self.shared.clone(), self.name.clone(), ctx.clone());
        let err_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Some(p) = err_pipe.as_mut() {
                let n = match p.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                sh.err_bytes.fetch_add(n as u64, Ordering::SeqCst);
                c2.dump(4, &name, "stderr", &latin1(&buf[..n]));
                let _ = err_f.write_all(&buf[..n]);
            }
        });
        let (sh, name, c2) = (self.shared.clone(), self.name.clone(), ctx.clone());
        let waiter = std::thread::spawn(move || {
            let status = child.wait();
            c2.untrack_pid(pid);
            // As varnishtest: `${pN_pid}` exists while the process runs.
            c2.undefine(&name, &format!("{name}_pid"));
            // Output still in flight is read before the status is judged;
            // a descendant keeping the terminal open does not hold us.
            let end = Instant::now() + Duration::from_secs(1);
            while !(term_reader.is_finished() && err_reader.is_finished()) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
            if sh.torn_down.load(Ordering::SeqCst) {
                return;
            }
            match status {
                Ok(s) => {
                    if let Err(e) = judge_exit(&sh, s) {
                        c2.fail(&name, 0, &e);
                    } else {
                        c2.log(2, &name, &format!("Exit status: {s}"));
                    }
                }
                Err(e) => c2.fail(&name, 0, &format!("wait for process failed: {e}")),
            }
        });
        st.running = Some(Running {
            pid,
            master,
            waiter,
        });
        Ok(())
    }

    fn wait(&self, ctx: &Ctx) -> R<()> {
        let r = lock(&self.state).running.take();
        if let Some(r) = r {
            crate::server::join_polling(ctx, r.waiter)?;
        }
        ctx.log(
            4,
            &self.name,
            &format!(
                "stdout {} bytes, stderr {} bytes",
                self.shared.out_bytes.load(Ordering::SeqCst),
                self.shared.err_bytes.load(Ordering::SeqCst)
            ),
        );
        Ok(())
    }

    fn kill_sig(&self, ctx: &Ctx, sig: &str) -> R<()> {
        let st = lock(&self.state);
        let Some(r) = st.running.as_ref().filter(|r| !r.waiter.is_finished()) else {
            bail!("Cannot signal a non-running process");
        };
        let num = match sig {
            "TERM" => 15,
            "INT" => 2,
            "KILL" => 9,
            "HUP" => 1,
            _ => match sig.strip_prefix('-').and_then(|n| n.parse::<i32>().ok()) {
                Some(n) => n,
                None => bail!("Could not grok signal ({sig})"),
            },
        };
        let _ =
            self.shared
                .expect_signal
                .compare_exchange(0, -num, Ordering::SeqCst, Ordering::SeqCst);
        // Right after `-start`, `setsid` may not have made its process
        // group yet: a signal to the group then finds none. Try again
        // briefly, then the process itself, before giving up.
        let mut sent = false;
        for _ in 0..100 {
            sent = send_signal(r.pid, &num.to_string(), true);
            if sent || r.waiter.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if !sent && !send_signal(r.pid, &num.to_string(), false) {
            bail!("Failed to send signal {num} to process group {}", r.pid);
        }
        ctx.log(4, &self.name, &format!("Sent signal {num}"));
        Ok(())
    }

    fn write(&self, ctx: &Ctx, data: &[u8]) -> R<()> {
        let mut st = lock(&self.state);
        let Some(r) = st.running.as_mut() else {
            bail!("Cannot write to a non-running process");
        };
        ctx.log(4, &self.name, &format!("Writing {} bytes", data.len()));
        r.master
            .write_all(data)
            .map_err(|e| fail!("Failed to write: len={} {e}", data.len()))
    }

    fn expect_text(&self, ctx: &Ctx, lin: &str, col: &str, pat: &str) -> R<()> {
        let (rows, cols) = lock(&self.shared.screen).size();
        let (y, x) = position("-expect-text", lin, col, (rows, cols))?;
        let l = pat.chars().count() as i64;
        if x > 0 && x + l - 1 > i64::from(cols) {
            bail!(
                "-expect-text: '{pat}' at column {x} would end at column {} (screen has {cols})",
                x + l - 1
            );
        }
        let mut delay = Duration::from_millis(10);
        loop {
            let found = {
                let scr = lock(&self.shared.screen);
                let (rows, _) = scr.size();
                let lines: Vec<u16> = if y == 0 {
                    (0..rows).collect()
                } else {
                    vec![(y - 1) as u16]
                };
                let mut hit = None;
                for r in lines {
                    let text = scr.line(r);
                    if x == 0 {
                        if let Some(i) = text.find(pat) {
                            hit = Some((r + 1, i + 1));
                            break;
                        }
                    } else if text
                        .get((x - 1) as usize..)
                        .is_some_and(|t| t.starts_with(pat))
                    {
                        hit = Some((r + 1, x as usize));
                        break;
                    }
                }
                if hit.is_none() && x != 0 && y != 0 {
                    let t: String = scr
                        .line((y - 1) as u16)
                        .chars()
                        .skip((x - 1) as usize)
                        .take(l as usize)
                        .collect();
                    ctx.log(4, &self.name, &format!("text at {y},{x}: '{t}'"));
                }
                hit
            };
            if let Some((fy, fx)) = found {
                ctx.log(
                    4,
                    &self.name,
                    &format!("found expected text at {fy},{fx}: '{pat}'"),
                );
                return Ok(());
            }
            ctx.sleep(delay)?;
            if delay < Duration::from_secs(3) {
                delay *= 2;
            }
        }
    }

    fn match_text(&self, ctx: &Ctx, lin: &str, col: &str, re: &str) -> R<()> {
        let scr = lock(&self.shared.screen);
        let (rows, cols) = scr.size();
        let (y, x) = position("-match-text", lin, col, (rows, cols))?;
        let rx =
            crate::text::compile_regex(re).map_err(|e| fail!("invalid regexp \"{re}\" ({e})"))?;
        let (y0, x0) = ((y.max(1) - 1) as u16, (x.max(1) - 1) as usize);
        let mut text = String::new();
        for r in y0..rows {
            text.extend(scr.line(r).chars().skip(x0));
            text.push('\n');
        }
        if !crate::text::re_match(&rx, &text) {
            bail!("match failed: (\"{re}\")");
        }
        ctx.log(4, &self.name, "match succeeded");
        Ok(())
    }

    fn expect_cursor(&self, lin: &str, col: &str) -> R<()> {
        let scr = lock(&self.shared.screen);
        let (rows, cols) = scr.size();
        let (r, c) = scr.cursor();
        let (y, x) = position("-expect-cursor", lin, col, (rows, cols))?;
        if y != 0 && y - 1 != i64::from(r) {
            bail!("Cursor on line {} (expected {y})", r + 1);
        }
        if x != 0 && x - 1 != i64::from(c) {
            bail!("Cursor in column {} (expected {x})", c + 1);
        }
        Ok(())
    }

    fn screen_dump(&self, ctx: &Ctx) {
        let scr = lock(&self.shared.screen);
        let (rows, _) = scr.size();
        for r in 0..rows {
            ctx.log(3, &self.name, &format!("screen|{}", scr.line(r)));
        }
        let (r, c) = scr.cursor();
        ctx.log(
            3,
            &self.name,
            &format!("Cursor at line {} column {}", r + 1, c + 1),
        );
    }

    fn winsz(&self, ctx: &Ctx, lin: &str, col: &str) -> R<()> {
        let rows = crate::http::c_long(lin).filter(|&n| n > 1 && n <= 0xffff);
        let cols = crate::http::c_long(col).filter(|&n| n > 1 && n <= 0xffff);
        let (Some(rows), Some(cols)) = (rows, cols) else {
            bail!("-winsz needs LINES and COLUMNS above 1 (got {lin} {col})");
        };
        lock(&self.shared.screen).resize(rows as u16, cols as u16);
        let st = lock(&self.state);
        if let Some(r) = st.running.as_ref()
            && let Err(e) =
                rustix::termios::tcsetwinsize(&r.master, winsize(rows as u16, cols as u16))
        {
            ctx.log(4, &self.name, &format!("TIOCSWINSZ failed: {e}"));
        }
        Ok(())
    }

    /// Kill the process if it still runs (test teardown).
    pub fn kill(&self) {
        self.shared.torn_down.store(true, Ordering::SeqCst);
        let r = lock(&self.state).running.take();
        if let Some(r) = r {
            send_signal(r.pid, "KILL", true);
            let end = Instant::now() + Duration::from_secs(2);
            while !r.waiter.is_finished() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Parse a `LIN COL` screen position (1-based, 0 meaning "any") checked
/// against the screen size.
fn position(what: &str, lin: &str, col: &str, (rows, cols): (u16, u16)) -> R<(i64, i64)> {
    let y = crate::http::c_long(lin).unwrap_or(0);
    if y < 0 || y > i64::from(rows) {
        bail!("{what}: line {y} is not on the screen (1..{rows}, 0 for any)");
    }
    let x = crate::http::c_long(col).unwrap_or(0);
    if x < 0 || x > i64::from(cols) {
        bail!("{what}: column {x} is not on the screen (1..{cols}, 0 for any)");
    }
    Ok((y, x))
}

/// Check an exit status against `-expect-exit` and the signal sent.
fn judge_exit(sh: &Shared, s: std::process::ExitStatus) -> Result<(), String> {
    let want_exit = sh.expect_exit.load(Ordering::SeqCst);
    let want_sig = sh.expect_signal.load(Ordering::SeqCst);
    if let Some(c) = s.code()
        && want_sig <= 0
        && c == want_exit
    {
        return Ok(());
    }
    if let Some(sig) = s.signal()
        && sig == want_sig.abs()
        && s.core_dumped() == sh.allow_core.load(Ordering::SeqCst)
    {
        return Ok(());
    }
    Err(format!(
        "Bad exit status: {s} (expected exit {want_exit}{})",
        if want_sig != 0 {
            format!(" or signal {}", want_sig.abs())
        } else {
            String::new()
        }
    ))
}

/// The `process` command.
pub fn cmd_process(ctx: &Arc<Ctx>, cmd: &Cmd) -> R<()> {
    let name = cmd.arg(1)?.to_string();
    if !name.starts_with('p') {
        bail!("Process name must start with 'p' ({name})");
    }
    let existing = lock(&ctx.processes)
        .iter()
        .find(|p| p.name == name)
        .cloned();
    let p = match existing {
        Some(p) => p,
        None => {
            let p = Arc::new(Process {
                name: name.clone(),
                state: Mutex::new(State {
                    command: None,
                    running: None,
                    log: LogMode::None,
                    ansi_response: false,
                }),
                shared: Arc::new(Shared {
                    screen: Mutex::new(Screen::new(24, 80)),
                    out_bytes: AtomicU64::new(0),
                    err_bytes: AtomicU64::new(0),
                    expect_exit: AtomicI32::new(0),
                    expect_signal: AtomicI32::new(0),
                    allow_core: AtomicBool::new(false),
                    torn_down: AtomicBool::new(false),
                }),
            });
            let dir = ctx.tmpdir.join(&name);
            ctx.define(&name, &format!("{name}_dir"), &dir.display().to_string());
            ctx.define(
                &name,
                &format!("{name}_out"),
                &dir.join("stdout").display().to_string(),
            );
            ctx.define(
                &name,
                &format!("{name}_err"),
                &dir.join("stderr").display().to_string(),
            );
            lock(&ctx.processes).push(p.clone());
            p
        }
    };
    let bsnap = p.shared.out_bytes.load(Ordering::SeqCst);
    let av = &cmd.args;
    let mut spec_set = false;
    let mut i = 2;
    while i < av.len() {
        if ctx.aborted() {
            break;
        }
        let a = av[i].as_str();
        let set_log = |m: LogMode| -> R<()> {
            if p.running() {
                bail!("Cannot log a running process ({a} must come before -start)");
            }
            lock(&p.state).log = m;
            Ok(())
        };
        match a {
            "-allow-core" => p.shared.allow_core.store(true, Ordering::SeqCst),
            "-close" => p.kill_sig(ctx, "HUP")?,
            "-log" => set_log(LogMode::Lines)?,
            "-dump" => set_log(LogMode::Dump)?,
            "-hexdump" => set_log(LogMode::Hex)?,
            "-expect-exit" | "-expect-signal" => {
                let v = crate::http::c_long(cmd.arg(i + 1)?).unwrap_or(0) as i32;
                let field = if a == "-expect-exit" {
                    &p.shared.expect_exit
                } else {
                    &p.shared.expect_signal
                };
                field.store(v, Ordering::SeqCst);
                i += 1;
            }
            "-kill" => {
                p.kill_sig(ctx, cmd.arg(i + 1)?.trim_start_matches("SIG"))?;
                i += 1;
            }
            "-need-bytes" => {
                let s = cmd.arg(i + 1)?;
                let n = crate::http::c_long(s.trim_start_matches('+'))
                    .unwrap_or(0)
                    .max(0) as u64;
                let target = if s.starts_with('+') { n + bsnap } else { n };
                loop {
                    let have = p.shared.out_bytes.load(Ordering::SeqCst);
                    ctx.log(4, &p.name, &format!("Have {have} bytes"));
                    if have >= target {
                        break;
                    }
                    ctx.sleep(Duration::from_millis(100))?;
                }
                i += 1;
            }
            "-run" => {
                p.start(ctx)?;
                p.wait(ctx)?;
            }
            "-start" => p.start(ctx)?,
            "-wait" => p.wait(ctx)?,
            "-stop" => {
                p.kill_sig(ctx, "TERM")?;
                // Give it a moment to go, as varnishtest does.
                let end = Instant::now() + Duration::from_secs(1);
                while Instant::now() < end
                    && lock(&p.state)
                        .running
                        .as_ref()
                        .is_some_and(|r| !r.waiter.is_finished())
                {
                    ctx.sleep(Duration::from_millis(10))?;
                }
            }
            "-ansi-response" => lock(&p.state).ansi_response = true,
            "-expect-text" | "-match-text" => {
                let (l, c, t) = (cmd.arg(i + 1)?, cmd.arg(i + 2)?, cmd.arg(i + 3)?);
                if a == "-expect-text" {
                    p.expect_text(ctx, l, c, t)?;
                } else {
                    p.match_text(ctx, l, c, t)?;
                }
                i += 3;
            }
            "-expect-cursor" => {
                p.expect_cursor(cmd.arg(i + 1)?, cmd.arg(i + 2)?)?;
                i += 2;
            }
            "-screen_dump" | "-screen-dump" => p.screen_dump(ctx),
            "-winsz" => {
                p.winsz(ctx, cmd.arg(i + 1)?, cmd.arg(i + 2)?)?;
                i += 2;
            }
            "-write" => {
                p.write(ctx, &bytes(cmd.arg(i + 1)?))?;
                i += 1;
            }
            "-writeln" => {
                let mut b = bytes(cmd.arg(i + 1)?);
                b.push(b'\n');
                p.write(ctx, &b)?;
                i += 1;
            }
            "-writehex" => {
                let d = crate::http::hex_to_bin(cmd.arg(i + 1)?)?;
                ctx.log(4, &p.name, &format!("sendhex|{}", hex_line(&d)));
                p.write(ctx, &d)?;
                i += 1;
            }
            _ if a.starts_with('-') || spec_set => bail!("Unknown process argument: {a}"),
            _ => {
                lock(&p.state).command = Some(a.to_string());
                spec_set = true;
            }
        }
        i += 1;
    }
    Ok(())
}
