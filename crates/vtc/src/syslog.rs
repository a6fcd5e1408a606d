//! `syslog SN`: a UDP syslog receiver for the peers a test starts (HAProxy
//! logs to it), as varnishtest has.
//!
//! `-bind ADDR` binds (default `${listen_addr}`) and defines `${SN_addr}`,
//! `${SN_port}`, `${SN_sock}`; `-level L` sets the level `recv` waits
//! for; `-start` runs the spec `-repeat N` times in a thread; `-wait`
//! joins it and `-stop` ends it early. In the spec, `recv [LEVEL]` skips
//! datagrams until one of that level arrives (its `<PRI>` must parse) and
//! `expect ~|!~ REGEX` matches the last one received.

use crate::ctx::{Ctx, R, lock};
use crate::script::{self, Cmd};
use crate::server::join_polling;
use crate::{bail, fail};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Syslog severities by number (RFC 5424).
const LEVELS: [&str; 8] = [
    "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
];

fn level(name: &str) -> R<i32> {
    LEVELS
        .iter()
        .position(|l| *l == name)
        .map(|i| i as i32)
        .ok_or_else(|| fail!("wrong syslog level '{name}'"))
}

#[derive(Debug)]
struct State {
    bind: String,
    sock: Option<Arc<UdpSocket>>,
    /// The level `recv` waits for; -1 for none set.
    level: i32,
    repeat: u32,
    spec: Option<(String, usize)>,
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

/// One declared syslog receiver.
#[derive(Debug)]
pub struct Syslog {
    /// `SN`.
    pub name: String,
    state: Mutex<State>,
}

impl Syslog {
    fn bind(&self, ctx: &Ctx, st: &mut State) -> R<()> {
        let spec = st.bind.trim().to_string();
        let addr = match spec.rsplit_once(' ') {
            Some((h, p)) => format!("{h}:{p}"),
            None if spec.contains(':') => spec.clone(),
            None => format!("{spec}:0"),
        };
        let s = UdpSocket::bind(&addr)
            .map_err(|e| fail!("Syslog server bind address ({spec}) cannot be resolved: {e}"))?;
        let a = s
            .local_addr()
            .map_err(|e| fail!("Syslog server bind address ({spec}): {e}"))?;
        let (ip, port) = (a.ip().to_string(), a.port().to_string());
        ctx.define(&self.name, &format!("{}_addr", self.name), &ip);
        ctx.define(&self.name, &format!("{}_port", self.name), &port);
        ctx.define(&self.name, &format!("{}_sock", self.name), &a.to_string());
        // Later starts reuse the port.
        st.bind = format!("{ip} {port}");
        st.sock = Some(Arc::new(s));
        Ok(())
    }

    fn start(&self, ctx: &Arc<Ctx>, st: &mut State) -> R<()> {
        ctx.log(2, &self.name, "Starting syslog server");
        if st.sock.is_none() {
            self.bind(ctx, st)?;
        }
        ctx.log(1, &self.name, &format!("Bound on {}", st.bind));
        let (spec, line) = st
            .spec
            .clone()
            .ok_or_else(|| fail!("Syslog server {} has no specification", self.name))?;
        let sock = st.sock.clone().ok_or_else(|| fail!("syslog: not bound"))?;
        st.stop = Arc::new(AtomicBool::new(false));
        let (c2, name, stop, lvl, repeat, bind) = (
            ctx.clone(),
            self.name.clone(),
            st.stop.clone(),
            st.level,
            st.repeat,
            st.bind.clone(),
        );
        st.thread = Some(std::thread::spawn(move || {
            c2.log(2, &name, &format!("Started on {bind} (level: {lvl})"));
            let mut last = String::new();
            for i in 0..repeat {
                if repeat > 1 {
                    c2.log(3, &name, &format!("Iteration {i}"));
                }
                let r = script::run(&c2, &name, &spec, line, Some(&stop), &mut |cmd: &Cmd| {
                    run_cmd(&c2, &name, &sock, &stop, lvl, &mut last, cmd)
                });
                if r.is_err() {
                    break;
                }
            }
            c2.log(2, &name, "Ending");
        }));
        Ok(())
    }

    fn wait(&self, ctx: &Ctx, st: &mut State) -> R<()> {
        ctx.log(2, &self.name, "Waiting for syslog server");
        match st.thread.take() {
            Some(t) => join_polling(ctx, t),
            None => bail!("Syslog server not -started"),
        }
    }

    fn stop(&self, ctx: &Ctx, st: &mut State) {
        ctx.log(2, &self.name, "Stopping for syslog server");
        st.stop.store(true, Ordering::SeqCst);
        if let Some(t) = st.thread.take() {
            let _ = join_polling(ctx, t);
        }
    }

    /// Teardown: a receiver still running is stopped.
    pub fn reset(&self, ctx: &Ctx) {
        let mut st = lock(&self.state);
        if st.thread.is_some() {
            self.stop(ctx, &mut st);
        }
    }
}

fn run_cmd(
    ctx: &Ctx,
    name: &str,
    sock: &UdpSocket,
    stop: &AtomicBool,
    default_level: i32,
    last: &mut String,
    cmd: &Cmd,
) -> R<()> {
    match cmd.args[0].as_str() {
        "recv" => {
            let want = match cmd.args.get(1) {
                Some(l) => level(l)?,
                None => default_level,
            };
            let timeout = ctx.cfg.timeout.mul_f64(0.5);
            let end = Instant::now() + timeout;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                if ctx.aborted() || stop.load(Ordering::SeqCst) {
                    return Err(ctx.aborted_err());
                }
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    bail!("syslog rx timeout ({:.3}s)", timeout.as_secs_f64());
                }
                let _ = sock.set_read_timeout(Some(left.min(Duration::from_millis(100))));
                let n = match sock.recv(&mut buf) {
                    Ok(n) => n,
                    Err(e) if crate::http::retryable(&e) => {
                        continue;
                    }
                    Err(e) => bail!("recv failed: {e}"),
                };
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                ctx.dump(4, name, "syslog", &text);
                let pri = text
                    .strip_prefix('<')
                    .ok_or_else(|| fail!("syslog PRI, no '<'"))?;
                let close = pri.find('>').ok_or_else(|| fail!("syslog PRI, no '>'"))?;
                let prival: u32 = pri[..close]
                    .parse()
                    .map_err(|_| fail!("syslog PRI, bad number"))?;
                *last = text;
                if want >= 0 && want as u32 == prival & 7 {
                    return Ok(());
                }
            }
        }
        "expect" => {
            let (op, pat) = (cmd.arg(1)?, cmd.arg(2)?);
            if op != "~" && op != "!~" {
                bail!("syslog expect: operator must be ~ or !~ (got {op})");
            }
            let re = regex::Regex::new(pat).map_err(|e| fail!("REGEXP error: '{e}' ({pat})"))?;
            if re.is_match(last) != (op == "~") {
                bail!("EXPECT FAILED {op} \"{pat}\"");
            }
            ctx.log(4, name, &format!("EXPECT MATCH {op} \"{pat}\""));
            Ok(())
        }
        other => bail!("Unknown syslog command: {other}"),
    }
}

/// The `syslog` command.
pub fn cmd_syslog(ctx: &Arc<Ctx>, cmd: &Cmd) -> R<()> {
    let name = cmd.arg(1)?.to_string();
    if !name.starts_with('S') {
        bail!("Syslog name must start with 'S' (got {name})");
    }
    let existing = lock(&ctx.syslogs).iter().find(|s| s.name == name).cloned();
    let s = match existing {
        Some(s) => s,
        None => {
            let s = Arc::new(Syslog {
                name: name.clone(),
                state: Mutex::new(State {
                    bind: ctx.expand("${listen_addr}")?,
                    sock: None,
                    level: -1,
                    repeat: 1,
                    spec: None,
                    thread: None,
                    stop: Arc::new(AtomicBool::new(false)),
                }),
            });
            lock(&ctx.syslogs).push(s.clone());
            s
        }
    };
    let mut st = lock(&s.state);
    let av = &cmd.args;
    let mut i = 2;
    while i < av.len() {
        match av[i].as_str() {
            "-wait" => s.wait(ctx, &mut st)?,
            "-stop" => s.stop(ctx, &mut st),
            a => {
                // Changing a running receiver waits for its spec first.
                if st.thread.is_some() {
                    s.wait(ctx, &mut st)?;
                }
                match a {
                    "-repeat" => {
                        st.repeat = script::parse_int(cmd.arg(i + 1)?)?.max(0) as u32;
                        i += 1;
                    }
                    "-bind" => {
                        st.bind = cmd.arg(i + 1)?.to_string();
                        i += 1;
                        s.bind(ctx, &mut st)?;
                    }
                    "-level" => {
                        st.level = level(cmd.arg(i + 1)?)?;
                        i += 1;
                    }
                    "-start" => s.start(ctx, &mut st)?,
                    _ if a.starts_with('-') => bail!("Unknown syslog argument: {a}"),
                    _ => {
                        st.spec =
                            Some((a.to_string(), cmd.lines.get(i).copied().unwrap_or(cmd.line)))
                    }
                }
            }
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::level;

    #[test]
    fn levels_by_name() {
        assert_eq!(level("emerg").unwrap(), 0);
        assert_eq!(level("info").unwrap(), 6);
        assert!(level("loud").is_err());
    }
}
