//! `tunnel tN`: a TCP relay between a client and a server whose data flow
//! the spec controls: `pause` holds data in both directions, `send N` /
//! `recv N` let exactly N held bytes through (client to server / server to
//! client), `resume` lets everything flow again. The tunnel listens on
//! `${tN_sock}` and connects to `-connect` (default `${v1_sock}`).

use crate::ctx::{Ctx, R, lock};
use crate::http::{self, Listener, Stream};
use crate::script::{self, Cmd};
use crate::server::join_polling;
use crate::{bail, fail};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Debug, Default)]
struct Flow {
    paused: bool,
    /// Held bytes, client to server and server to client.
    held: [Vec<u8>; 2],
    closed: [bool; 2],
}

#[derive(Debug)]
struct State {
    spec: Option<(String, usize)>,
    connect: String,
    listener: Option<Arc<Listener>>,
    thread: Option<JoinHandle<()>>,
}

/// One declared tunnel.
#[derive(Debug)]
pub struct Tunnel {
    /// `tN`.
    pub name: String,
    state: Mutex<State>,
}

struct Relay {
    flow: Mutex<Flow>,
    cv: Condvar,
    /// Write ends: [to server, to client].
    out: [Mutex<Stream>; 2],
}

impl Relay {
    fn write(&self, dir: usize, data: &[u8]) -> R<()> {
        let mut o = lock(&self.out[dir]);
        let r = match &mut *o {
            Stream::Tcp(s) => s.write_all(data),
            Stream::Unix(s) => s.write_all(data),
        };
        r.map_err(|e| fail!("tunnel write failed: {e}"))
    }

    /// Forward data read from one side (`dir` 0: from the client).
    fn pump(&self, ctx: &Ctx, dir: usize, mut from: Stream) {
        let mut buf = [0u8; 8192];
        loop {
            let n = match &mut from {
                Stream::Tcp(s) => s.read(&mut buf),
                Stream::Unix(s) => s.read(&mut buf),
            };
            let n = match n {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut f = lock(&self.flow);
            f.held[dir].extend_from_slice(&buf[..n]);
            // Writes happen under the flow lock so that data released by
            // `resume`/`send` keeps its order with newly arriving data.
            if !f.paused {
                let data = std::mem::take(&mut f.held[dir]);
                if self.write(dir, &data).is_err() {
                    break;
                }
            }
            drop(f);
            self.cv.notify_all();
            if ctx.aborted() {
                break;
            }
        }
        lock(&self.flow).closed[dir] = true;
        self.cv.notify_all();
        self.maybe_close(dir);
    }

    /// Once the source side closed and nothing is held any more, pass the
    /// close on to the other side.
    fn maybe_close(&self, dir: usize) {
        let f = lock(&self.flow);
        if !f.closed[dir] || !f.held[dir].is_empty() {
            return;
        }
        drop(f);
        if let Some(h) = lock(&self.out[dir]).handle() {
            let _ = match h {
                crate::ctx::SockHandle::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
                crate::ctx::SockHandle::Unix(s) => s.shutdown(std::net::Shutdown::Write),
            };
        }
    }

    /// Let everything flow again, held data first.
    fn resume(&self) -> R<()> {
        let mut f = lock(&self.flow);
        f.paused = false;
        for dir in 0..2 {
            let data = std::mem::take(&mut f.held[dir]);
            if !data.is_empty() {
                self.write(dir, &data)?;
            }
        }
        drop(f);
        self.maybe_close(0);
        self.maybe_close(1);
        Ok(())
    }

    /// Let `n` held bytes through in direction `dir`, waiting for them.
    fn release(&self, ctx: &Ctx, dir: usize, n: usize) -> R<()> {
        let mut f = lock(&self.flow);
        while f.held[dir].len() < n {
            if ctx.aborted() {
                return Err(ctx.aborted_err());
            }
            if f.closed[dir] {
                bail!(
                    "tunnel: connection closed with {} of {n} bytes",
                    f.held[dir].len()
                );
            }
            f = self
                .cv
                .wait_timeout(f, Duration::from_millis(20))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let data: Vec<u8> = f.held[dir].drain(..n).collect();
        self.write(dir, &data)?;
        drop(f);
        self.maybe_close(dir);
        Ok(())
    }
}

impl Tunnel {
    fn listen(&self, ctx: &Ctx, st: &mut State) -> R<()> {
        if st.listener.is_some() {
            return Ok(());
        }
        let l = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| fail!("tunnel {} cannot listen: {e}", self.name))?;
        let a = l.local_addr().map_err(|e| fail!("{e}"))?;
        ctx.define(
            &self.name,
            &format!("{}_addr", self.name),
            &a.ip().to_string(),
        );
        ctx.define(
            &self.name,
            &format!("{}_port", self.name),
            &a.port().to_string(),
        );
        ctx.define(&self.name, &format!("{}_sock", self.name), &a.to_string());
        st.listener = Some(Arc::new(Listener::Tcp(l)));
        Ok(())
    }

    fn start(self: &Arc<Self>, ctx: &Arc<Ctx>, paused: bool) -> R<()> {
        let mut st = lock(&self.state);
        if st.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            bail!("tunnel {} already running", self.name);
        }
        self.listen(ctx, &mut st)?;
        let (spec, line) = st.spec.clone().unwrap_or_else(|| (String::new(), 0));
        let connect = ctx.expand(&st.connect)?;
        let l = st
            .listener
            .clone()
            .ok_or_else(|| fail!("tunnel not listening"))?;
        let (c2, me) = (ctx.clone(), self.clone());
        st.thread = Some(std::thread::spawn(move || {
            if let Err(e) = me.run(&c2, &l, &connect, &spec, line, paused) {
                c2.fail(&me.name, line, &e.0);
            }
        }));
        Ok(())
    }

    fn run(
        &self,
        ctx: &Arc<Ctx>,
        l: &Listener,
        connect: &str,
        spec: &str,
        line: usize,
        paused: bool,
    ) -> R<()> {
        let Some(client) = l.accept(ctx, &|| false)? else {
            return Ok(());
        };
        let server = http::connect(ctx, connect, 10.0)?;
        ctx.log(3, &self.name, &format!("tunnel to {connect} open"));
        let dup = |s: &Stream| -> R<Stream> {
            match s {
                Stream::Tcp(t) => t.try_clone().map(Stream::Tcp),
                Stream::Unix(u) => u.try_clone().map(Stream::Unix),
            }
            .map_err(|e| fail!("tunnel: {e}"))
        };
        let relay = Arc::new(Relay {
            flow: Mutex::new(Flow {
                paused,
                ..Flow::default()
            }),
            cv: Condvar::new(),
            out: [Mutex::new(dup(&server)?), Mutex::new(dup(&client)?)],
        });
        let mut pumps = Vec::new();
        for (dir, from) in [(0usize, client), (1, server)] {
            let (r2, c2) = (relay.clone(), ctx.clone());
            pumps.push(std::thread::spawn(move || r2.pump(&c2, dir, from)));
        }
        let res = script::run_collect(ctx, &self.name, spec, line, &mut |cmd: &Cmd| {
            match cmd.args[0].as_str() {
                "pause" => lock(&relay.flow).paused = true,
                "resume" => relay.resume()?,
                "send" | "recv" => {
                    let n = script::parse_int(cmd.arg(1)?)?.max(0) as usize;
                    let dir = if cmd.args[0] == "send" { 0 } else { 1 };
                    relay.release(ctx, dir, n)?;
                }
                _ => {
                    if !crate::commands::common(ctx, &self.name, cmd)? {
                        bail!("Unknown tunnel command: \"{}\"", cmd.args[0]);
                    }
                }
            }
            Ok(())
        });
        match res {
            Ok(()) => {}
            Err(None) => return Err(ctx.aborted_err()),
            Err(Some((_, e))) => return Err(e),
        }
        // The end of the spec resumes the flow.
        relay.resume()?;
        for p in pumps {
            join_polling(ctx, p)?;
        }
        ctx.log(2, &self.name, "Ending");
        Ok(())
    }

    fn wait(&self, ctx: &Ctx) -> R<()> {
        let t = lock(&self.state).thread.take();
        if let Some(t) = t {
            ctx.log(2, &self.name, "Waiting for tunnel");
            join_polling(ctx, t)?;
        }
        Ok(())
    }
}

/// The `tunnel` command.
pub fn cmd_tunnel(ctx: &Arc<Ctx>, cmd: &Cmd) -> R<()> {
    let name = cmd.arg(1)?.to_string();
    if !name.starts_with('t') {
        bail!("Tunnel name must start with 't' ({name})");
    }
    let existing = lock(&ctx.tunnels).iter().find(|t| t.name == name).cloned();
    let tn = match existing {
        Some(t) => t,
        None => {
            let t = Arc::new(Tunnel {
                name: name.clone(),
                state: Mutex::new(State {
                    spec: None,
                    connect: "${v1_sock}".into(),
                    listener: None,
                    thread: None,
                }),
            });
            let mut st = lock(&t.state);
            t.listen(ctx, &mut st)?;
            drop(st);
            lock(&ctx.tunnels).push(t.clone());
            t
        }
    };
    let av = &cmd.args;
    let mut i = 2;
    while i < av.len() {
        let a = av[i].as_str();
        match a {
            "-start" => tn.start(ctx, false)?,
            "-start+pause" => tn.start(ctx, true)?,
            "-wait" => tn.wait(ctx)?,
            "-run" => {
                tn.start(ctx, false)?;
                tn.wait(ctx)?;
            }
            "-connect" => {
                lock(&tn.state).connect = cmd.arg(i + 1)?.to_string();
                i += 1;
            }
            "-listen" => bail!("tunnel -listen: only the default listen address is supported"),
            _ if a.starts_with('-') => bail!("Unknown tunnel argument: {a}"),
            _ => {
                let line = cmd.lines.get(i).copied().unwrap_or(cmd.line);
                lock(&tn.state).spec = Some((a.to_string(), line));
            }
        }
        i += 1;
    }
    Ok(())
}
