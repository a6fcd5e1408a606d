//! `client cN`: a fake HTTP client. It connects (by default to
//! `${v1_sock}`), optionally sends a PROXY protocol header, and runs its
//! spec, `-repeat` times, on new connections or one (`-keepalive`).

use crate::ctx::{Ctx, R, lock};
use crate::http::{self, Http, Stream};
use crate::script::{self, Cmd};
use crate::server::join_polling;
use crate::{bail, fail};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

#[derive(Debug)]
struct State {
    spec: Option<(String, usize)>,
    connect: String,
    repeat: u64,
    keepalive: bool,
    proxy: Option<(u8, String)>,
    rcvbuf: Option<usize>,
    thread: Option<JoinHandle<()>>,
}

/// One declared client.
#[derive(Debug)]
pub struct Client {
    /// `cN`.
    pub name: String,
    state: Mutex<State>,
}

fn parse_sa(s: &str) -> R<SocketAddr> {
    s.parse::<SocketAddr>()
        .or_else(|_| http::resolve(s))
        .map_err(|_| fail!("bad PROXY address '{s}'"))
}

/// Build a PROXY protocol header (version 1 or 2) for "SRC DST".
pub fn proxy_header(version: u8, spec: &str) -> R<Vec<u8>> {
    let mut it = spec.split_whitespace();
    let (Some(a), Some(b)) = (it.next(), it.next()) else {
        bail!("PROXY spec needs 'CLIENT:PORT SERVER:PORT' (got '{spec}')");
    };
    let (src, dst) = (parse_sa(a)?, parse_sa(b)?);
    if version == 1 {
        let fam = if src.is_ipv4() { "TCP4" } else { "TCP6" };
        return Ok(format!(
            "PROXY {fam} {} {} {} {}\r\n",
            src.ip(),
            dst.ip(),
            src.port(),
            dst.port()
        )
        .into_bytes());
    }
    let mut v = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v.push(0x21);
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            v.push(0x11);
            v.extend_from_slice(&12u16.to_be_bytes());
            v.extend_from_slice(&s.octets());
            v.extend_from_slice(&d.octets());
        }
        (s, d) => {
            let s6 = match s {
                IpAddr::V4(x) => x.to_ipv6_mapped(),
                IpAddr::V6(x) => x,
            };
            let d6 = match d {
                IpAddr::V4(x) => x.to_ipv6_mapped(),
                IpAddr::V6(x) => x,
            };
            v.push(0x21);
            v.extend_from_slice(&36u16.to_be_bytes());
            v.extend_from_slice(&s6.octets());
            v.extend_from_slice(&d6.octets());
        }
    }
    v.extend_from_slice(&src.port().to_be_bytes());
    v.extend_from_slice(&dst.port().to_be_bytes());
    Ok(v)
}

impl Client {
    fn start(self: &Arc<Self>, ctx: &Arc<Ctx>) -> R<()> {
        let mut st = lock(&self.state);
        if st.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            bail!("Client {} already running", self.name);
        }
        ctx.log(2, &self.name, "Starting client");
        let (spec, line) = st
            .spec
            .clone()
            .ok_or_else(|| fail!("Client {} has no specification", self.name))?;
        let connect = ctx.expand(&st.connect)?;
        let (repeat, keepalive, proxy, rcvbuf) =
            (st.repeat, st.keepalive, st.proxy.clone(), st.rcvbuf);
        ctx.log(
            2,
            &self.name,
            &format!("Started on {connect} ({repeat} iterations)"),
        );
        let me = self.clone();
        let c2 = ctx.clone();
        st.thread = Some(std::thread::spawn(move || {
            let opts = (repeat, keepalive, proxy, rcvbuf);
            if let Err(e) = me.run(&c2, &connect, &spec, line, opts) {
                c2.fail(&me.name, line, &e.0);
            }
        }));
        Ok(())
    }

    fn run(
        &self,
        ctx: &Arc<Ctx>,
        connect: &str,
        spec: &str,
        line: usize,
        (repeat, keepalive, proxy, rcvbuf): (u64, bool, Option<(u8, String)>, Option<usize>),
    ) -> R<()> {
        let timeout = ctx.cfg.timeout.as_secs_f64() * 0.5;
        let open = || -> R<Stream> {
            ctx.log(3, &self.name, &format!("Connect to {connect}"));
            let mut s = http::connect(ctx, connect, timeout)?;
            if let Some(n) = rcvbuf {
                let r = match &s {
                    Stream::Tcp(t) => socket2::SockRef::from(t).set_recv_buffer_size(n),
                    Stream::Unix(u) => socket2::SockRef::from(u).set_recv_buffer_size(n),
                };
                r.map_err(|e| fail!("-rcvbuf {n}: {e}"))?;
                ctx.log(3, &self.name, &format!("-rcvbuf fd new={n}"));
            }
            ctx.log(3, &self.name, &format!("connected to {connect}"));
            if let Some((v, p)) = &proxy {
                let hdr = proxy_header(*v, p)?;
                use std::io::Write;
                let r = match &mut s {
                    Stream::Tcp(t) => t.write_all(&hdr),
                    Stream::Unix(u) => u.write_all(&hdr),
                };
                r.map_err(|e| fail!("Write failed (PROXY header): {e}"))?;
            }
            Ok(s)
        };
        let path = connect.starts_with('/').then(|| connect.to_string());
        let mut conn: Option<Stream> = None;
        for _ in 0..repeat {
            let s = match conn.take() {
                Some(s) => s,
                None => open()?,
            };
            let mut h = Http::new(ctx, &self.name, s, None, false, path.clone());
            if h.run_spec(spec, line).is_err() {
                return Ok(());
            }
            let s = h.into_stream();
            if keepalive {
                conn = s;
            } else if let Some(s) = s {
                ctx.log(3, &self.name, "closing fd");
                if let Some(h) = s.handle() {
                    h.shutdown();
                }
            }
        }
        if let Some(hd) = conn.as_ref().and_then(Stream::handle) {
            ctx.log(3, &self.name, "closing fd");
            hd.shutdown();
        }
        ctx.log(2, &self.name, "Ending");
        Ok(())
    }

    /// Wait for the client to finish.
    pub fn wait(&self, ctx: &Ctx) -> R<()> {
        let t = lock(&self.state).thread.take();
        if let Some(t) = t {
            ctx.log(2, &self.name, "Waiting for client");
            join_polling(ctx, t)?;
        }
        Ok(())
    }
}

/// The `client` command.
pub fn cmd_client(ctx: &Arc<Ctx>, cmd: &Cmd) -> R<()> {
    let name = cmd.arg(1)?.to_string();
    if !name.starts_with('c') {
        bail!("Client name must start with 'c' ({name})");
    }
    let existing = lock(&ctx.clients).iter().find(|c| c.name == name).cloned();
    let cl = match existing {
        Some(c) => c,
        None => {
            let c = Arc::new(Client {
                name: name.clone(),
                state: Mutex::new(State {
                    spec: None,
                    connect: "${v1_sock}".into(),
                    repeat: 1,
                    keepalive: false,
                    proxy: None,
                    rcvbuf: None,
                    thread: None,
                }),
            });
            lock(&ctx.clients).push(c.clone());
            c
        }
    };
    let av = &cmd.args;
    let mut i = 2;
    while i < av.len() {
        let a = av[i].as_str();
        match a {
            "-wait" => cl.wait(ctx)?,
            "-start" => cl.start(ctx)?,
            "-run" => {
                cl.start(ctx)?;
                cl.wait(ctx)?;
            }
            "-repeat" => {
                lock(&cl.state).repeat = script::parse_int(cmd.arg(i + 1)?)?.max(0) as u64;
                i += 1;
            }
            "-keepalive" => lock(&cl.state).keepalive = true,
            "-rcvbuf" => {
                let n = script::parse_int(cmd.arg(i + 1)?)?.max(0) as usize;
                lock(&cl.state).rcvbuf = Some(n);
                i += 1;
            }
            "-connect" => {
                lock(&cl.state).connect = cmd.arg(i + 1)?.to_string();
                i += 1;
            }
            "-proxy1" | "-proxy2" => {
                let v = if a == "-proxy1" { 1 } else { 2 };
                lock(&cl.state).proxy = Some((v, cmd.arg(i + 1)?.to_string()));
                i += 1;
            }
            _ if a.starts_with('-') => bail!("Unknown client argument: {a}"),
            _ => {
                let line = cmd.lines.get(i).copied().unwrap_or(cmd.line);
                lock(&cl.state).spec = Some((a.to_string(), line));
            }
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_v1() {
        let h = proxy_header(1, "1.2.3.4:1111 5.6.7.8:5678").unwrap();
        assert_eq!(h, b"PROXY TCP4 1.2.3.4 5.6.7.8 1111 5678\r\n");
    }

    #[test]
    fn proxy_v2() {
        let h = proxy_header(2, "1.2.3.4:1111 5.6.7.8:5678").unwrap();
        assert_eq!(h.len(), 16 + 12);
        assert_eq!(h[12], 0x21);
        assert_eq!(h[13], 0x11);
        assert!(proxy_header(2, "x").is_err());
    }
}
