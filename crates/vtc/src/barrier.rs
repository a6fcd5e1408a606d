//! `barrier` command: rendezvous points between actors. A `cond` barrier
//! releases when N actors called `sync`; a `sock` barrier also listens on a
//! TCP socket (published as `${bN_sock}`) so that Varnish itself (through
//! the `vtc` vmod) can take part: every connection counts as one waiter and
//! is closed when the barrier releases.

use crate::ctx::{Ctx, R, lock};
use crate::http::{Listener, Stream};
use crate::script::Cmd;
use crate::{bail, fail};
use std::net::TcpListener;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
struct State {
    expected: usize,
    waiting: usize,
    generation: u64,
    cyclic: bool,
    used_up: bool,
    socks: Vec<Stream>,
}

/// One barrier.
#[derive(Debug, Default)]
pub struct Barrier {
    name: String,
    state: Mutex<State>,
    cv: Condvar,
}

impl Barrier {
    fn arrive(&self, st: &mut State) -> R<u64> {
        if st.used_up {
            bail!("Barrier({}) use count exceeded", self.name);
        }
        let generation = st.generation;
        st.waiting += 1;
        if st.waiting >= st.expected {
            st.waiting = 0;
            st.generation += 1;
            if !st.cyclic {
                st.used_up = true;
            }
            for s in st.socks.drain(..) {
                if let Some(h) = s.handle() {
                    h.shutdown();
                }
            }
            self.cv.notify_all();
        }
        Ok(generation)
    }

    /// Wait at the barrier until it releases.
    pub fn sync(&self, ctx: &Ctx, actor: &str) -> R<()> {
        ctx.log(3, actor, &format!("Barrier({}) wait", self.name));
        let mut st = lock(&self.state);
        let generation = self.arrive(&mut st)?;
        while st.generation == generation {
            if ctx.aborted() {
                return Err(ctx.aborted_err());
            }
            st = self
                .cv
                .wait_timeout(st, Duration::from_millis(20))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(st);
        ctx.log(3, actor, &format!("Barrier({}) wake", self.name));
        Ok(())
    }
}

fn sock_thread(ctx: Arc<Ctx>, b: Arc<Barrier>, l: Listener) {
    loop {
        let s = match l.accept(&ctx, &|| false) {
            Ok(Some(s)) => s,
            _ => return,
        };
        let mut st = lock(&b.state);
        st.socks.push(s);
        if let Err(e) = b.arrive(&mut st) {
            ctx.fail(&b.name, 0, &e.0);
            return;
        }
    }
}

/// The `barrier` command.
pub fn cmd_barrier(ctx: &Arc<Ctx>, actor: &str, cmd: &Cmd) -> R<()> {
    let name = cmd.arg(1)?.to_string();
    if !name.starts_with('b') {
        bail!("Barrier name must start with 'b' ({name})");
    }
    let existing = lock(&ctx.barriers).get(&name).cloned();
    let mut i = 2;
    let av = &cmd.args;
    while i < av.len() {
        match av[i].as_str() {
            "cond" | "sock" => {
                if existing.is_some() {
                    bail!("Barrier({name}) use error: already initialized");
                }
                // As varnishtest: fewer than two parties is a test error.
                let n = crate::script::parse_int(cmd.arg(i + 1)?)?;
                if n < 2 {
                    bail!("Barrier({name}) use error: wrong expectation ({n})");
                }
                let mut cyclic = false;
                if av.get(i + 2).map(String::as_str) == Some("-cyclic") {
                    cyclic = true;
                }
                let b = Arc::new(Barrier {
                    name: name.clone(),
                    state: Mutex::new(State {
                        expected: n as usize,
                        cyclic,
                        ..State::default()
                    }),
                    cv: Condvar::new(),
                });
                if av[i] == "sock" {
                    let l = TcpListener::bind("127.0.0.1:0")
                        .map_err(|e| fail!("Barrier({name}) cannot listen: {e}"))?;
                    let a = l.local_addr().map_err(|e| fail!("{e}"))?;
                    ctx.define(&name, &format!("{name}_addr"), &a.ip().to_string());
                    ctx.define(&name, &format!("{name}_port"), &a.port().to_string());
                    ctx.define(&name, &format!("{name}_sock"), &a.to_string());
                    let (c2, b2) = (ctx.clone(), b.clone());
                    std::thread::spawn(move || sock_thread(c2, b2, Listener::Tcp(l)));
                }
                lock(&ctx.barriers).insert(name.clone(), b);
                i += if cyclic { 3 } else { 2 };
            }
            "sync" => {
                let b = lock(&ctx.barriers)
                    .get(&name)
                    .cloned()
                    .ok_or_else(|| fail!("Barrier({name}) is not initialized"))?;
                b.sync(ctx, actor)?;
            }
            "-cyclic" => {
                let b = existing
                    .clone()
                    .ok_or_else(|| fail!("Barrier({name}) is not initialized"))?;
                lock(&b.state).cyclic = true;
            }
            "-start" | "-wait" => {
                // Kept for compatibility with old test files: barriers have
                // no thread of their own to start or wait for.
            }
            other => bail!("Unknown barrier argument: {other}"),
        }
        i += 1;
    }
    Ok(())
}
