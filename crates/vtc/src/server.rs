//! `server sN`: a fake backend. It listens (by default on 127.0.0.1 with a
//! port from the OS, published as `${sN_addr}`, `${sN_port}`, `${sN_sock}`),
//! and runs its spec on each accepted connection (`-repeat`, `-keepalive`,
//! `-dispatch`). The listening socket survives restarts, so a server keeps
//! its address for the whole test.

use crate::ctx::{Ctx, R, lock};
use crate::http::{Http, Listener, Stream};
use crate::script::{self, Cmd};
use crate::{bail, fail};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct State {
    spec: Option<(String, usize)>,
    listen: String,
    listener: Option<Arc<Listener>>,
    repeat: u64,
    keepalive: bool,
    dispatch: bool,
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    /// (addr, port) of a TCP listener, or the path of a Unix one.
    bound: Option<(String, String, bool)>,
}

/// One declared server.
#[derive(Debug)]
pub struct Server {
    /// `sN`.
    pub name: String,
    state: Mutex<State>,
}

impl Server {
    /// The backend declaration `-vcl+backend` adds for this server. As
    /// varnishtest's `cmd_server_gen_vcl`, a server that does not listen
    /// yet is declared too: by its `-listen` path for a Unix socket, with
    /// an empty host and port otherwise.
    pub fn genvcl(&self) -> String {
        let st = lock(&self.state);
        let (a, p, unix) = match st.bound.clone() {
            Some(b) => b,
            None if st.listen.starts_with('/') => (st.listen.clone(), String::new(), true),
            None => (String::new(), String::new(), false),
        };
        if unix {
            format!("backend {} {{ .path = \"{}\"; }}\n", self.name, a)
        } else {
            format!(
                "backend {} {{ .host = \"{}\"; .port = \"{}\"; }}\n",
                self.name, a, p
            )
        }
    }

    /// The address this server listens on: (address, port, is a Unix
    /// socket), once it listens.
    pub fn bound(&self) -> Option<(String, String, bool)> {
        lock(&self.state).bound.clone()
    }

    fn listen(&self, ctx: &Ctx, st: &mut State) -> R<()> {
        if st.listener.is_some() {
            return Ok(());
        }
        let spec = st.listen.clone();
        if spec.starts_with('/') {
            let _ = std::fs::remove_file(&spec);
            let l = UnixListener::bind(&spec)
                .map_err(|e| fail!("Server listen address ({spec}) cannot be used: {e}"))?;
            // The daemon may run as another user: let it connect.
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&spec, std::fs::Permissions::from_mode(0o666));
            ctx.define(&self.name, &format!("{}_addr", self.name), "0.0.0.0");
            ctx.define(&self.name, &format!("{}_port", self.name), "0");
            ctx.define(&self.name, &format!("{}_sock", self.name), &spec);
            st.bound = Some((spec.clone(), "-".into(), true));
            st.listener = Some(Arc::new(Listener::Unix(l, spec)));
        } else {
            let sa = crate::http::resolve(&spec)?;
            let l = TcpListener::bind(sa)
                .map_err(|e| fail!("Server listen address ({spec}) cannot be used: {e}"))?;
            let a = l.local_addr().map_err(|e| fail!("{e}"))?;
            let ip = a.ip().to_string();
            let port = a.port().to_string();
            ctx.define(&self.name, &format!("{}_addr", self.name), &ip);
            ctx.define(&self.name, &format!("{}_port", self.name), &port);
            let sock = if a.is_ipv6() {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            };
            ctx.define(&self.name, &format!("{}_sock", self.name), &sock);
            ctx.log(1, &self.name, &format!("Listen on {sock}"));
            st.bound = Some((ip, port, false));
            st.listener = Some(Arc::new(Listener::Tcp(l)));
        }
        Ok(())
    }

    fn start(self: &Arc<Self>, ctx: &Arc<Ctx>) -> R<()> {
        let mut st = lock(&self.state);
        if let Some(t) = &st.thread {
            if !t.is_finished() {
                bail!("Server {} already running", self.name);
            }
            if let Some(t) = st.thread.take() {
                let _ = t.join();
            }
        }
        ctx.log(2, &self.name, "Starting server");
        self.listen(ctx, &mut st)?;
        let (spec, line) = st
            .spec
            .clone()
            .ok_or_else(|| fail!("Server {} has no specification", self.name))?;
        let listener = st.listener.clone().ok_or_else(|| fail!("not listening"))?;
        st.stop = Arc::new(AtomicBool::new(false));
        let stop = st.stop.clone();
        let (repeat, keepalive, dispatch) = (st.repeat, st.keepalive, st.dispatch);
        let sock = st
            .bound
            .as_ref()
            .map(|(a, p, u)| if *u { a.clone() } else { format!("{a}:{p}") })
            .unwrap_or_default();
        ctx.log(
            2,
            &self.name,
            &format!("Started on {sock} ({repeat} iterations)"),
        );
        let me = self.clone();
        let ctx2 = ctx.clone();
        st.thread = Some(std::thread::spawn(move || {
            me.run(
                &ctx2, &listener, &spec, line, repeat, keepalive, dispatch, &stop,
            );
        }));
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        ctx: &Arc<Ctx>,
        l: &Arc<Listener>,
        spec: &str,
        line: usize,
        repeat: u64,
        keepalive: bool,
        dispatch: bool,
        stop: &Arc<AtomicBool>,
    ) {
        let stopped = || stop.load(Ordering::SeqCst);
        let path = match &**l {
            Listener::Unix(_, p) => Some(p.clone()),
            Listener::Tcp(_) => None,
        };
        if dispatch {
            let mut n = 0u64;
            loop {
                let s = match l.accept(ctx, &stopped) {
                    Ok(Some(s)) => s,
                    Ok(None) => break,
                    Err(e) => {
                        ctx.fail(&self.name, line, &e.0);
                        break;
                    }
                };
                n += 1;
                let name = format!("s{n}");
                let (c2, spec2, stop2, path2, l2) = (
                    ctx.clone(),
                    spec.to_string(),
                    stop.clone(),
                    path.clone(),
                    l.clone(),
                );
                std::thread::spawn(move || {
                    c2.log(3, &name, "accepted connection (dispatch)");
                    let mut h = Http::new(&c2, &name, s, Some(&l2), true, path2);
                    h.set_cancel(stop2);
                    let _ = h.run_spec(&spec2, line);
                });
            }
            return;
        }
        let mut conn: Option<Stream> = None;
        for _ in 0..repeat {
            let s = match conn.take() {
                Some(s) => s,
                None => match l.accept(ctx, &stopped) {
                    Ok(Some(s)) => {
                        ctx.log(3, &self.name, "accepted fd");
                        s
                    }
                    Ok(None) => return,
                    Err(e) => {
                        if !stopped() {
                            ctx.fail(&self.name, line, &e.0);
                        }
                        return;
                    }
                },
            };
            let mut h = Http::new(ctx, &self.name, s, Some(l), true, path.clone());
            h.set_cancel(stop.clone());
            if h.run_spec(spec, line).is_err() {
                return;
            }
            let s = h.into_stream();
            if keepalive {
                conn = s;
            } else if let Some(s) = s {
                ctx.log(3, &self.name, "shutting fd");
                if let Some(hd) = s.handle() {
                    hd.shutdown();
                }
            }
        }
        if let Some(hd) = conn.as_ref().and_then(Stream::handle) {
            ctx.log(3, &self.name, "shutting fd");
            hd.shutdown();
        }
        ctx.log(2, &self.name, "Ending");
    }

    /// Wait for the server thread to finish.
    pub fn wait(&self, ctx: &Ctx) -> R<()> {
        ctx.log(2, &self.name, "Waiting for server");
        let t = lock(&self.state).thread.take();
        if let Some(t) = t {
            join_polling(ctx, t)?;
        }
        Ok(())
    }

    /// Stop the server thread (like `-break`), ignoring its errors.
    pub fn stop(&self, ctx: &Ctx) {
        let (t, stop) = {
            let mut st = lock(&self.state);
            (st.thread.take(), st.stop.clone())
        };
        stop.store(true, Ordering::SeqCst);
        if let Some(t) = t {
            // Its connection may be blocked in a read: the ctx socket
            // registry shuts it down only on abort, so give it a moment,
            // then leave it (it holds no resources the next test needs).
            let end = Instant::now() + Duration::from_millis(200);
            while !t.is_finished() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
        let _ = ctx;
    }
}

/// Join a thread, giving up when the test aborts.
pub fn join_polling(ctx: &Ctx, t: JoinHandle<()>) -> R<()> {
    let mut abort_deadline: Option<Instant> = None;
    while !t.is_finished() {
        if ctx.aborted() {
            let d = *abort_deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(2));
            if Instant::now() > d {
                return Err(ctx.aborted_err());
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = t.join();
    if ctx.aborted() {
        return Err(ctx.aborted_err());
    }
    Ok(())
}

/// The `server` command.
pub fn cmd_server(ctx: &Arc<Ctx>, cmd: &Cmd) -> R<()> {
    let name = cmd.arg(1)?.to_string();
    if !name.starts_with('s') {
        bail!("Server name must start with 's' ({name})");
    }
    let existing = lock(&ctx.servers).iter().find(|s| s.name == name).cloned();
    let srv = match existing {
        Some(s) => s,
        None => {
            let s = Arc::new(Server {
                name: name.clone(),
                state: Mutex::new(State {
                    // Without a spec a server accepts and closes.
                    spec: Some((String::new(), cmd.line)),
                    listen: ctx.expand("${listen_addr}")?,
                    listener: None,
                    repeat: 1,
                    keepalive: false,
                    dispatch: false,
                    thread: None,
                    stop: Arc::new(AtomicBool::new(false)),
                    bound: None,
                }),
            });
            lock(&ctx.servers).push(s.clone());
            s
        }
    };
    let av = &cmd.args;
    let mut i = 2;
    while i < av.len() {
        let a = av[i].as_str();
        // Like varnishtest: touching a running server implies -wait.
        if a != "-wait" && a != "-break" && lock(&srv.state).thread.is_some() {
            srv.wait(ctx)?;
        }
        match a {
            "-wait" => srv.wait(ctx)?,
            "-break" => {
                srv.stop(ctx);
                ctx.log(2, &name, "Stopped");
            }
            "-start" => srv.start(ctx)?,
            "-repeat" => {
                lock(&srv.state).repeat = script::parse_int(cmd.arg(i + 1)?)?.max(0) as u64;
                i += 1;
            }
            "-keepalive" => lock(&srv.state).keepalive = true,
            "-dispatch" => {
                if name != "s0" {
                    bail!("-dispatch only works on s0");
                }
                lock(&srv.state).dispatch = true;
                srv.start(ctx)?;
            }
            "-listen" => {
                let mut st = lock(&srv.state);
                if st.thread.as_ref().is_some_and(|t| !t.is_finished()) {
                    bail!("Server {name} running: cannot change -listen");
                }
                st.listen = cmd.arg(i + 1)?.to_string();
                st.listener = None;
                st.bound = None;
                srv.listen(ctx, &mut st)?;
                i += 1;
            }
            _ if a.starts_with('-') => bail!("Unknown server argument: {a}"),
            _ => {
                let line = cmd.lines.get(i).copied().unwrap_or(cmd.line);
                lock(&srv.state).spec = Some((a.to_string(), line));
            }
        }
        i += 1;
    }
    Ok(())
}
