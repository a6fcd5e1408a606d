//! `process pN`: runs an external command (through `/bin/sh`) with its
//! output captured to `${pN_out}` / `${pN_err}`, input from `-write`, and
//! exit status checks. Terminal emulation (`-expect-text`, `-screen_dump`,
//! ...) is not available: those options fail the test explicitly.

use crate::ctx::{Ctx, R, lock, send_signal};
use crate::script::{self, Cmd};
use crate::server::join_polling;
use crate::text::bytes;
use crate::{bail, fail};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
struct State {
    command: Option<String>,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    readers: Vec<std::thread::JoinHandle<()>>,
    expect_exit: i32,
    killed: bool,
    log_output: bool,
}

/// One declared process.
#[derive(Debug)]
pub struct Process {
    /// `pN`.
    pub name: String,
    state: Mutex<State>,
    out_bytes: Arc<AtomicU64>,
}

impl Process {
    fn start(&self, ctx: &Arc<Ctx>) -> R<()> {
        let mut st = lock(&self.state);
        if st.child.is_some() {
            bail!("Process {} already running", self.name);
        }
        let cmdline = st
            .command
            .clone()
            .ok_or_else(|| fail!("Process {} has no command", self.name))?;
        let dir = ctx.tmpdir.join(&self.name);
        std::fs::create_dir_all(&dir).map_err(|e| fail!("cannot create {}: {e}", dir.display()))?;
        let out = dir.join("stdout");
        let err = dir.join("stderr");
        let mut c = ctx.shell_command(&cmdline);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = c.spawn().map_err(|e| fail!("cannot start process: {e}"))?;
        let pid = child.id();
        ctx.track_pid(pid, true);
        ctx.log(3, &self.name, &format!("CMD: {cmdline}"));
        ctx.log(3, &self.name, &format!("PID: {pid}"));
        ctx.define(&self.name, &format!("{}_pid", self.name), &pid.to_string());
        self.out_bytes.store(0, Ordering::SeqCst);
        let mut readers = Vec::new();
        for (pipe, path, count) in [
            (
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
                out,
                true,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
                err,
                false,
            ),
        ] {
            let Some(mut p) = pipe else { continue };
            let mut f = std::fs::File::create(&path)
                .map_err(|e| fail!("cannot create {}: {e}", path.display()))?;
            let counter = self.out_bytes.clone();
            let (c2, n2, logit) = (ctx.clone(), self.name.clone(), st.log_output);
            readers.push(std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                loop {
                    match p.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let _ = f.write_all(&buf[..n]);
                            if count {
                                counter.fetch_add(n as u64, Ordering::SeqCst);
                            }
                            if logit {
                                c2.dump(
                                    4,
                                    &n2,
                                    if count { "stdout" } else { "stderr" },
                                    &crate::text::latin1(&buf[..n]),
                                );
                            }
                        }
                    }
                }
            }));
        }
        st.stdin = child.stdin.take();
        st.child = Some(child);
        st.readers = readers;
        st.killed = false;
        Ok(())
    }

    fn wait(&self, ctx: &Ctx) -> R<()> {
        let (child, readers, expect, killed) = {
            let mut st = lock(&self.state);
            st.stdin = None;
            (
                st.child.take(),
                std::mem::take(&mut st.readers),
                st.expect_exit,
                st.killed,
            )
        };
        let Some(mut child) = child else {
            return Ok(());
        };
        let pid = child.id();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => {}
                Err(e) => bail!("wait failed: {e}"),
            }
            if ctx.aborted() {
                send_signal(pid, "KILL", true);
                let _ = child.wait();
                return Err(ctx.aborted_err());
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        ctx.untrack_pid(pid);
        for r in readers {
            join_polling(ctx, r)?;
        }
        ctx.log(2, &self.name, &format!("Exit status: {status}"));
        match status.code() {
            Some(c) if c == expect => Ok(()),
            None if killed => Ok(()),
            _ => bail!("Bad exit status: {status} (expected exit {expect})"),
        }
    }

    fn signal(&self, sig: &str) -> R<()> {
        let mut st = lock(&self.state);
        let Some(c) = st.child.as_ref() else {
            bail!("Process {} is not running", self.name);
        };
        let pid = c.id();
        st.killed = true;
        send_signal(pid, sig, true);
        Ok(())
    }

    fn write(&self, data: &[u8]) -> R<()> {
        let mut st = lock(&self.state);
        let Some(i) = st.stdin.as_mut() else {
            bail!("Process {} has no open stdin", self.name);
        };
        i.write_all(data)
            .map_err(|e| fail!("write to process failed: {e}"))
    }

    /// Kill the process if it still runs (test teardown).
    pub fn kill(&self) {
        let mut st = lock(&self.state);
        st.stdin = None;
        if let Some(mut c) = st.child.take() {
            send_signal(c.id(), "KILL", true);
            let _ = c.wait();
        }
    }
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
                state: Mutex::new(State::default()),
                out_bytes: Arc::new(AtomicU64::new(0)),
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
    let av = &cmd.args;
    let mut i = 2;
    while i < av.len() {
        let a = av[i].as_str();
        match a {
            "-start" => p.start(ctx)?,
            "-wait" => p.wait(ctx)?,
            "-run" => {
                p.start(ctx)?;
                p.wait(ctx)?;
            }
            "-stop" => {
                p.signal("TERM")?;
                p.wait(ctx)?;
            }
            "-kill" => {
                let s = cmd.arg(i + 1)?.trim_start_matches("SIG").to_string();
                p.signal(&s)?;
                i += 1;
            }
            "-close" => {
                lock(&p.state).stdin = None;
            }
            "-expect-exit" => {
                lock(&p.state).expect_exit = script::parse_int(cmd.arg(i + 1)?)? as i32;
                i += 1;
            }
            "-log" | "-dump" | "-hexdump" => lock(&p.state).log_output = true,
            "-allow-core" => {}
            "-write" => {
                p.write(&bytes(cmd.arg(i + 1)?))?;
                i += 1;
            }
            "-writeln" => {
                let mut b = bytes(cmd.arg(i + 1)?);
                b.push(b'\n');
                p.write(&b)?;
                i += 1;
            }
            "-writehex" => {
                p.write(&crate::http::hex_to_bin(cmd.arg(i + 1)?)?)?;
                i += 1;
            }
            "-need-bytes" => {
                let s = cmd.arg(i + 1)?;
                let n = script::parse_int(s.trim_start_matches('+'))?.max(0) as u64;
                let target = if s.starts_with('+') {
                    p.out_bytes.load(Ordering::SeqCst) + n
                } else {
                    n
                };
                while p.out_bytes.load(Ordering::SeqCst) < target {
                    ctx.sleep(Duration::from_millis(10))?;
                }
                i += 1;
            }
            "-expect-text" | "-match-text" | "-expect-cursor" | "-screen_dump" | "-screen-dump"
            | "-winsz" | "-ansi-response" => {
                bail!("terminal emulation not supported by runner (process {a})")
            }
            _ if a.starts_with('-') => bail!("Unknown process argument: {a}"),
            _ => lock(&p.state).command = Some(a.to_string()),
        }
        i += 1;
    }
    Ok(())
}
