//! Commands usable both at top level and inside client/server specs
//! (`delay`, `barrier bN sync`, `shell`), plus the shell runner shared with
//! `feature cmd`.

use crate::ctx::{Ctx, R, lock};
use crate::script::{self, Cmd};
use crate::text::latin1;
use crate::{bail, fail};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

/// Run a common command. Returns `Ok(false)` when `cmd` is not one.
pub fn common(ctx: &Ctx, actor: &str, cmd: &Cmd) -> R<bool> {
    match cmd.args[0].as_str() {
        "delay" => {
            let d = script::parse_f64(cmd.arg(1)?)
                .map_err(|_| fail!("Syntax error in number ({})", cmd.args[1]))?;
            ctx.log(3, actor, &format!("delaying {d} second(s)"));
            ctx.sleep(Duration::from_secs_f64(d.max(0.0)))?;
            Ok(true)
        }
        "barrier" => {
            let name = cmd.arg(1)?;
            if cmd.args.len() != 3 || cmd.args[2] != "sync" {
                bail!("barrier: only 'barrier {name} sync' is possible here");
            }
            let b = lock(&ctx.barriers)
                .get(name)
                .cloned()
                .ok_or_else(|| fail!("Barrier({name}) is not initialized"))?;
            b.sync(ctx, actor)?;
            Ok(true)
        }
        "shell" => {
            cmd_shell(ctx, actor, cmd)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Run `script` with `/bin/sh` like varnishtest (stderr merged into
/// stdout, in `${tmpdir}`), killing it if the test aborts. Returns the
/// output and the exit code (`None` when killed by a signal).
pub fn run_shell(ctx: &Ctx, script: &str) -> R<(String, Option<i32>)> {
    let mut c = ctx.shell_command(&format!("exec 2>&1 ; {script}"));
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c.process_group(0);
    let mut child = c.spawn().map_err(|e| fail!("cannot run /bin/sh: {e}"))?;
    let pid = child.id();
    ctx.track_pid(pid, true);
    let mut out = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut v);
        }
        v
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => bail!("waiting for shell failed: {e}"),
        }
        if ctx.aborted() {
            crate::ctx::send_signal(pid, "KILL", true);
            let _ = child.wait();
            ctx.untrack_pid(pid);
            return Err(ctx.aborted_err());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    ctx.untrack_pid(pid);
    // Descendants that kept stdout open must not block us forever.
    crate::ctx::send_signal(pid, "KILL", true);
    let out = reader.join().unwrap_or_default();
    Ok((latin1(&out), status.code()))
}

/// `shell [-err | -exit N] [-expect TEXT | -match REGEX] SCRIPT`, checked
/// as varnishtest's `cmd_shell` checks it: the exit status compared is
/// `WEXITSTATUS` (0 for a shell killed by a signal, which `-err` accepts as
/// a failure), and `-expect` and `-match` exclude each other.
fn cmd_shell(ctx: &Ctx, actor: &str, cmd: &Cmd) -> R<()> {
    let av = &cmd.args;
    // None: `-err`, any failure; Some(n): exit status n.
    let mut exit: Option<i32> = Some(0);
    let mut expect: Option<String> = None;
    let mut re: Option<String> = None;
    let mut i = 1;
    while i < av.len() {
        match av[i].as_str() {
            "-err" => exit = None,
            "-exit" => {
                exit = Some(script::parse_int(cmd.arg(i + 1)?)? as i32);
                i += 1;
            }
            "-expect" => {
                if re.is_some() {
                    bail!("Cannot use -expect with -match");
                }
                expect = Some(cmd.arg(i + 1)?.to_string());
                i += 1;
            }
            "-match" => {
                if expect.is_some() {
                    bail!("Cannot use -match with -expect");
                }
                re = Some(cmd.arg(i + 1)?.to_string());
                i += 1;
            }
            _ => break,
        }
        i += 1;
    }
    // As varnishtest: the first argument after the options is the script;
    // any further ones (`shell {a} ; shell {b}` on one line) are ignored.
    if i >= av.len() {
        bail!("shell: a command string is needed after the options");
    }
    let rx = match &re {
        Some(r) => Some(
            crate::text::compile_regex(r)
                .map_err(|e| fail!("shell_match invalid regexp (\"{r}\"): {e}"))?,
        ),
        None => None,
    };
    let script = &av[i];
    ctx.dump(4, actor, "shell_cmd", &format!("exec 2>&1 ; {script}"));
    let (out, code) = run_shell(ctx, script)?;
    ctx.dump(4, actor, "shell_out", &out);
    let status = code.unwrap_or(0);
    ctx.log(4, actor, &format!("shell_status = 0x{status:04x}"));
    if code.is_none() {
        ctx.log(4, actor, "shell_signal = killed");
    }
    match exit {
        None if code == Some(0) => bail!("shell did not fail as expected"),
        Some(e) if status != e => {
            bail!("shell_exit not as expected: got 0x{status:04x} wanted 0x{e:04x}")
        }
        _ => {}
    }
    if let Some(x) = expect {
        if !out.contains(&x) {
            bail!("shell_expect not found: (\"{}\")", crate::text::display(&x));
        }
        ctx.log(4, actor, "shell_expect found");
    } else if let (Some(rx), Some(r)) = (rx, re) {
        if !crate::text::re_match(&rx, &out) {
            bail!("shell_match failed: (\"{}\")", crate::text::display(&r));
        }
        ctx.log(4, actor, "shell_match succeeded");
    }
    Ok(())
}
