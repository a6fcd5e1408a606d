//! The HTTP/1 engine behind `client` and `server` specs: reading and
//! writing messages byte-exactly the way varnishtest does (`txreq`,
//! `rxresp`, `expect`, `chunked`, `gunzip`, ...). One [`Http`] is one
//! connection of one actor; commands run on it in order.

use crate::ctx::{Ctx, R, SockHandle};
use crate::script::{self, Cmd};
use crate::text::{bytes, latin1};
use crate::{bail, fail};
use flate2::Compression;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A connected socket of either family.
#[derive(Debug)]
pub enum Stream {
    /// TCP connection.
    Tcp(TcpStream),
    /// Unix-domain connection.
    Unix(UnixStream),
}

impl Stream {
    /// A handle that can shut this socket down from another thread.
    pub fn handle(&self) -> Option<SockHandle> {
        match self {
            Stream::Tcp(s) => s.try_clone().ok().map(SockHandle::Tcp),
            Stream::Unix(s) => s.try_clone().ok().map(SockHandle::Unix),
        }
    }

    /// A second handle on the same connection.
    pub fn try_clone(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    /// Bound the next reads to `d` (at least 1 ms).
    pub fn set_read_timeout(&self, d: Duration) {
        let d = Some(d.max(Duration::from_millis(1)));
        let _ = match self {
            Stream::Tcp(s) => s.set_read_timeout(d),
            Stream::Unix(s) => s.set_read_timeout(d),
        };
    }

    /// Read some bytes.
    pub fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }

    /// Write all of `buf`.
    pub fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(buf),
            Stream::Unix(s) => s.write_all(buf),
        }
    }

    /// Send TCP urgent (out-of-band) data.
    fn send_urgent(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => socket2::SockRef::from(&*s).send_out_of_band(buf),
            Stream::Unix(_) => Err(std::io::Error::other("urgent data needs a TCP connection")),
        }
    }

    /// Peer address as (ip, port, path).
    fn peer(&self) -> (String, String, Option<String>) {
        match self {
            Stream::Tcp(s) => match s.peer_addr() {
                Ok(a) => (a.ip().to_string(), a.port().to_string(), None),
                Err(_) => ("0.0.0.0".into(), "0".into(), None),
            },
            Stream::Unix(_) => ("0.0.0.0".into(), "0".into(), None),
        }
    }
}

/// Whether a socket call that failed with `e` only ran out of time (or
/// was interrupted) and may be tried again.
pub fn retryable(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

/// How often a server waiting in `accept` checks whether it should stop.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// A listening socket of either family.
#[derive(Debug)]
pub enum Listener {
    /// TCP listener.
    Tcp(TcpListener),
    /// Unix-domain listener (with its path).
    Unix(UnixListener, String),
}

impl Listener {
    /// Accept one connection. The wait is a blocking `accept` bounded by a
    /// receive timeout (Linux applies `SO_RCVTIMEO` to `accept`), so a
    /// connection is taken the moment it arrives, as varnishtest's server
    /// threads do, while `stop()` or a test abort is still noticed within
    /// [`ACCEPT_POLL`]. Returns `Ok(None)` when interrupted.
    pub fn accept(&self, ctx: &Ctx, stop: &dyn Fn() -> bool) -> R<Option<Stream>> {
        let _ = match self {
            Listener::Tcp(l) => {
                let _ = l.set_nonblocking(false);
                socket2::SockRef::from(l).set_read_timeout(Some(ACCEPT_POLL))
            }
            Listener::Unix(l, _) => {
                let _ = l.set_nonblocking(false);
                socket2::SockRef::from(l).set_read_timeout(Some(ACCEPT_POLL))
            }
        };
        loop {
            if ctx.aborted() || stop() {
                return Ok(None);
            }
            let r = match self {
                Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
                Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
            };
            match r {
                Ok(s) => {
                    // The accepted socket inherits the listener's receive
                    // timeout: reads set their own.
                    let _ = match &s {
                        Stream::Tcp(t) => {
                            let _ = t.set_nodelay(true);
                            t.set_read_timeout(None)
                        }
                        Stream::Unix(u) => u.set_read_timeout(None),
                    };
                    if let Some(h) = s.handle() {
                        ctx.register_socket(h);
                    }
                    return Ok(Some(s));
                }
                Err(e) if retryable(&e) => {}
                Err(e) => bail!("accept failed: {e}"),
            }
        }
    }
}

/// Connect to `addr` (`IP PORT`, `IP:PORT`, `[IPv6]:PORT` or `/path`).
pub fn connect(ctx: &Ctx, addr: &str, timeout: f64) -> R<Stream> {
    let s = if addr.starts_with('/') {
        Stream::Unix(UnixStream::connect(addr).map_err(|e| fail!("Failed to open {addr}: {e}"))?)
    } else {
        let sa = resolve(addr)?;
        let t = TcpStream::connect_timeout(&sa, Duration::from_secs_f64(timeout.max(0.1)))
            .map_err(|e| fail!("Failed to open {addr}: {e}"))?;
        let _ = t.set_nodelay(true);
        Stream::Tcp(t)
    };
    if let Some(h) = s.handle() {
        ctx.register_socket(h);
    }
    Ok(s)
}

/// Resolve `IP PORT` / `IP:PORT` / `[IP]:PORT` / `host:port` to an address.
pub fn resolve(addr: &str) -> R<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    let addr = addr.trim();
    let (h, p) = if let Some((h, p)) = addr.split_once(' ') {
        (h.trim().to_string(), p.trim().to_string())
    } else if let Some(rest) = addr.strip_prefix('[') {
        match rest.split_once("]:") {
            Some((h, p)) => (h.to_string(), p.to_string()),
            None => (rest.trim_end_matches(']').to_string(), "0".into()),
        }
    } else if addr.matches(':').count() == 1 {
        let (h, p) = addr.split_once(':').unwrap_or((addr, "0"));
        (h.to_string(), p.to_string())
    } else {
        // A bare address (e.g. `::1`) means "any port".
        (addr.to_string(), "0".to_string())
    };
    let port: u16 = p
        .parse()
        .map_err(|_| fail!("bad port '{p}' in address '{addr}'"))?;
    (h.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| fail!("cannot resolve '{addr}': {e}"))?
        .next()
        .ok_or_else(|| fail!("cannot resolve '{addr}'"))
}

/// Generate varnishtest's synthetic body of `len` bytes: lines of 63
/// printable characters rotating through `!`..`}` and a final newline.
pub fn synth_body(len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    let (mut k, mut l) = (b'!', b'!');
    for (j, byte) in b.iter_mut().enumerate() {
        if j % 64 == 63 {
            *byte = b'\n';
            k += 1;
            if k == b'~' {
                k = b'!';
            }
            l = k;
        } else {
            *byte = l;
            l += 1;
            if l == b'~' {
                l = b'!';
            }
        }
    }
    if len > 0 {
        b[len - 1] = b'\n';
    }
    b
}

/// The body `-gziplen` compresses: like [`synth_body`] (a newline every
/// 64th byte and at the end) but the other bytes random printable ASCII,
/// as varnishtest 7.1's `synth_body(len, 1)` makes it, so the compressed
/// length is close to the input's (about 87 % at level 9), not the few
/// percent a repeating pattern compresses to.
pub fn synth_random_body(len: usize) -> Vec<u8> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ STATE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    let mut x = seed | 1;
    let mut b = synth_body(len);
    for (j, byte) in b.iter_mut().enumerate() {
        if j % 64 != 63 && j + 1 != len {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33;
            *byte = b' ' + (r % 95) as u8;
        }
    }
    b
}

/// Compare `lhs cmp rhs` like varnishtest's `expect`. `None` sides are
/// `<undef>`. Returns the log/failure text on mismatch.
pub fn expect_values(
    olhs: &str,
    lhs: Option<&str>,
    cmp: &str,
    orhs: &str,
    rhs: Option<&str>,
) -> R<String> {
    let undef = lhs.is_none() || rhs.is_none();
    let l = lhs.unwrap_or("<undef>");
    let r = rhs.unwrap_or("<undef>");
    let ok = match cmp {
        "~" | "!~" => {
            let re = crate::text::compile_regex(r)
                .map_err(|e| fail!("REGEXP error: '{}' ({e})", crate::text::display(r)))?;
            let m = crate::text::re_match(&re, l);
            if cmp == "~" { m } else { !m }
        }
        "==" => l == r,
        "!=" => l != r,
        "-lt" | "-le" | "-eq" | "-ne" | "-ge" | "-gt" => {
            let (Some(a), Some(b)) = (c_long(l), c_long(r)) else {
                bail!(
                    "EXPECT {olhs} ({}) {cmp} {orhs} ({}): not integers",
                    crate::text::display(l),
                    crate::text::display(r)
                );
            };
            match cmp {
                "-lt" => a < b,
                "-le" => a <= b,
                "-eq" => a == b,
                "-ne" => a != b,
                "-ge" => a >= b,
                _ => a > b,
            }
        }
        "<" | "<=" | ">" | ">=" => {
            if undef {
                false
            } else {
                let a = vnum(l);
                let b = vnum(r);
                match cmp {
                    "<" => a < b,
                    "<=" => a <= b,
                    ">" => a > b,
                    _ => a >= b,
                }
            }
        }
        _ => bail!(
            "EXPECT {olhs} ({}) {cmp} {orhs} ({}) test not implemented",
            crate::text::display(l),
            crate::text::display(r)
        ),
    };
    if ok {
        Ok(format!(
            "EXPECT {olhs} ({}) {cmp} \"{}\" match",
            crate::text::display(l),
            crate::text::display(orhs)
        ))
    } else {
        bail!(
            "EXPECT {olhs} ({}) {cmp} \"{}\" failed",
            crate::text::display(l),
            crate::text::display(orhs)
        )
    }
}

/// Parse an integer like `strtoll(s, NULL, 0)` on the whole string
/// (decimal, `0x` hex or leading-`0` octal).
pub fn c_long(s: &str) -> Option<i64> {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if t.len() > 1 && t.starts_with('0') {
        i64::from_str_radix(&t[1..], 8).ok()?
    } else {
        t.parse().ok()?
    };
    Some(if neg { -v } else { v })
}

/// Parse a number like Varnish's VNUM: NaN when it is not one.
pub fn vnum(s: &str) -> f64 {
    s.trim().parse::<f64>().unwrap_or(f64::NAN)
}

/// Gzip `input` like varnishtest (gzip wrapper, the given level).
pub fn gzip(input: &[u8], level: u32) -> R<Vec<u8>> {
    let mut enc = flate2::GzBuilder::new()
        .operating_system(3)
        .write(Vec::new(), Compression::new(level.min(9)));
    enc.write_all(input).map_err(|e| fail!("Gzip error: {e}"))?;
    enc.finish().map_err(|e| fail!("Gzip error: {e}"))
}

/// Append received bytes to a receive buffer whose first `pos` bytes are
/// consumed, reusing the buffer when everything was consumed.
pub fn append_compacting(buf: &mut Vec<u8>, pos: &mut usize, data: &[u8]) {
    if *pos > 0 && *pos == buf.len() {
        buf.clear();
        *pos = 0;
    }
    buf.extend_from_slice(data);
}

/// Gunzip a whole body, with varnishtest's error texts.
pub fn gunzip_bytes(body: &[u8]) -> Result<Vec<u8>, String> {
    if body.len() < 2 || body[0] != 0x1f || body[1] != 0x8b {
        return Err("Gunzip error: body lacks gzip magic".to_string());
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut out)
        .map_err(|e| format!("Gunzip error = {e}"))?;
    Ok(out)
}

/// One HTTP connection of a client or server actor.
pub struct Http<'a> {
    ctx: &'a Ctx,
    actx: Arc<Ctx>,
    h2: Option<Arc<crate::h2::Conn>>,
    name: String,
    stream: Option<Stream>,
    listener: Option<&'a Listener>,
    is_server: bool,
    rx: Vec<u8>,
    rx_pos: usize,
    req: Vec<Option<String>>,
    resp: Vec<Option<String>>,
    body: Option<Vec<u8>>,
    bodylen: String,
    chunklen: String,
    timeout: f64,
    fatal: bool,
    head_method: bool,
    gziplevel: u32,
    rem_ip: String,
    rem_port: String,
    rem_path: Option<String>,
    cancel: Option<Arc<AtomicBool>>,
}

impl<'a> Http<'a> {
    /// A session on `stream`. Servers pass their listener (for `accept`).
    pub fn new(
        ctx: &'a Arc<Ctx>,
        name: &str,
        stream: Stream,
        listener: Option<&'a Listener>,
        is_server: bool,
        path: Option<String>,
    ) -> Self {
        let (ip, port, _) = stream.peer();
        Http {
            ctx,
            actx: ctx.clone(),
            h2: None,
            name: name.to_string(),
            stream: Some(stream),
            listener,
            is_server,
            rx: Vec::new(),
            rx_pos: 0,
            req: vec![None, None, None],
            resp: vec![None, None, None],
            body: None,
            bodylen: "<undef>".into(),
            chunklen: String::new(),
            timeout: ctx.cfg.timeout.as_secs_f64() * 0.5,
            fatal: true,
            head_method: false,
            gziplevel: 0,
            rem_ip: ip,
            rem_port: port,
            rem_path: path,
            cancel: None,
        }
    }

    fn cancelled(&self) -> bool {
        self.ctx.aborted()
            || self
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Flag that, once set, makes failures of this session silent (the
    /// actor is being stopped on purpose).
    pub fn set_cancel(&mut self, c: Arc<AtomicBool>) {
        self.cancel = Some(c);
    }

    /// Run a spec on this connection.
    pub fn run_spec(&mut self, text: &str, first_line: usize) -> Result<(), script::Stopped> {
        let ctx = self.ctx;
        let name = self.name.clone();
        let cancel = self.cancel.clone();
        script::run(
            ctx,
            &name,
            text,
            first_line,
            cancel.as_deref(),
            &mut |cmd| self.command(cmd),
        )
    }

    /// Take the connection back (to keep it across `-keepalive` repeats),
    /// after the HTTP/2 streams, if any, are done.
    pub fn into_stream(mut self) -> Option<Stream> {
        if self.stop_h2().is_err() {
            return None;
        }
        self.stream.take()
    }

    /// Leave HTTP/2: wait for the streams, and keep whatever they read
    /// ahead for HTTP/1 use of the connection.
    fn stop_h2(&mut self) -> R<()> {
        if let Some(c) = self.h2.take() {
            let rest = c.stop()?;
            let mut v = self.rx[self.rx_pos..].to_vec();
            v.extend_from_slice(&rest);
            self.rx = v;
            self.rx_pos = 0;
        }
        Ok(())
    }

    /// Switch the connection to HTTP/2 (after the preface).
    fn start_h2(&mut self) -> R<()> {
        let leftover = self.rx[self.rx_pos..].to_vec();
        self.rx.clear();
        self.rx_pos = 0;
        let s = self
            .stream
            .as_ref()
            .ok_or_else(|| fail!("connection is closed"))?;
        let c = crate::h2::Conn::start(
            self.actx.clone(),
            &self.name,
            self.is_server,
            s,
            leftover,
            crate::h2::Options {
                fatal: self.fatal,
                timeout: self.timeout,
                cancel: self.cancel.clone(),
            },
        )?;
        self.h2 = Some(c);
        Ok(())
    }

    fn txpri(&mut self, cmd: &Cmd) -> R<()> {
        self.only(cmd, false)?;
        let p = crate::h2::frame::PREFACE;
        self.ctx.dump(4, &self.name, "txpri", &latin1(p));
        // Dribble the preface out in two writes, as varnishtest does.
        let r = self.stream()?.write_all(&p[..18]);
        if let Err(e) = r {
            self.soft_fail(format!("Write failed: {e}"))?;
        }
        std::thread::sleep(Duration::from_millis(10));
        let r = self.stream()?.write_all(&p[18..]);
        if let Err(e) = r {
            self.soft_fail(format!("Write failed: {e}"))?;
        }
        self.start_h2()
    }

    fn rxpri(&mut self, cmd: &Cmd) -> R<()> {
        self.only(cmd, true)?;
        let p = crate::h2::frame::PREFACE;
        let got = self.take(p.len())?;
        if got.len() < p.len() {
            bail!("Couldn't retrieve connection preface");
        }
        if got != p[..] {
            bail!("Received invalid preface");
        }
        self.start_h2()
    }

    /// The `stream` command: implies the preface and SETTINGS exchange
    /// when HTTP/2 is not started yet.
    fn stream_cmd(&mut self, cmd: &Cmd) -> R<()> {
        if self.h2.is_none() {
            self.log(4, "Not in H/2 mode, do what's needed");
            let pri = Cmd {
                line: cmd.line,
                args: vec![if self.is_server { "rxpri" } else { "txpri" }.into()],
                lines: vec![cmd.line],
            };
            if self.is_server {
                self.rxpri(&pri)?;
            } else {
                self.txpri(&pri)?;
            }
            self.h2_stream0(cmd.line, "-run")?;
        }
        let c = self
            .h2
            .clone()
            .ok_or_else(|| fail!("HTTP/2 is not started"))?;
        c.cmd_stream(cmd)
    }

    /// Run the SETTINGS preamble on stream 0 (`-run` or `-start`).
    fn h2_stream0(&mut self, line: usize, how: &str) -> R<()> {
        let c = self
            .h2
            .clone()
            .ok_or_else(|| fail!("HTTP/2 is not started"))?;
        c.cmd_stream(&Cmd {
            line,
            args: vec![
                "stream".into(),
                "0".into(),
                crate::h2::PREAMBLE.into(),
                how.into(),
            ],
            lines: vec![line; 4],
        })
    }

    /// `upgrade` (server): answer an `h2c` upgrade request and start
    /// HTTP/2 with the SETTINGS exchange running on stream 0.
    fn upgrade(&mut self, cmd: &Cmd) -> R<()> {
        self.only(cmd, true)?;
        if Self::find_header(&self.req, "Upgrade") != Some("h2c") {
            bail!("Req misses \"Upgrade: h2c\" header");
        }
        if Self::find_header(&self.req, "Connection") != Some("Upgrade, HTTP2-Settings") {
            bail!("Req misses \"Connection: Upgrade, HTTP2-Settings\" header");
        }
        let settings = Self::find_header(&self.req, "HTTP2-Settings")
            .ok_or_else(|| fail!("Req misses \"HTTP2-Settings\" header"))?
            .to_string();
        let resp = Cmd {
            line: cmd.line,
            args: [
                "txresp",
                "-status",
                "101",
                "-hdr",
                "Connection: Upgrade",
                "-hdr",
                "Upgrade: h2c",
            ]
            .map(String::from)
            .to_vec(),
            lines: vec![cmd.line; 7],
        };
        self.txresp(&resp)?;
        let pri = Cmd {
            line: cmd.line,
            args: vec!["rxpri".into()],
            lines: vec![cmd.line],
        };
        self.rxpri(&pri)?;
        if let Some(c) = &self.h2 {
            c.b64_settings(&settings)?;
        }
        self.h2_stream0(cmd.line, "-start")
    }

    /// The client side of `txreq -up SETTINGS`: check the 101, send the
    /// preface and start the SETTINGS exchange on stream 0.
    fn upgrade_client(&mut self, line: usize, settings: &str) -> R<()> {
        let mk = |a: &[&str]| Cmd {
            line,
            args: a.iter().map(|s| s.to_string()).collect(),
            lines: vec![line; a.len()],
        };
        self.command(&mk(&["rxresp"]))?;
        self.command(&mk(&["expect", "resp.status", "==", "101"]))?;
        self.command(&mk(&["expect", "resp.http.connection", "==", "Upgrade"]))?;
        self.command(&mk(&["expect", "resp.http.upgrade", "==", "h2c"]))?;
        self.txpri(&mk(&["txpri"]))?;
        if let Some(c) = &self.h2 {
            c.b64_settings(settings)?;
        }
        self.h2_stream0(line, "-start")
    }

    fn log(&self, lvl: u8, msg: &str) {
        self.ctx.log(lvl, &self.name, msg);
    }

    /// A failure that respects `non_fatal`: fatal ones abort the command,
    /// non-fatal ones are only logged.
    fn soft_fail(&self, msg: String) -> R<()> {
        if self.fatal {
            Err(crate::ctx::Fail(msg))
        } else {
            self.log(0, &msg);
            Ok(())
        }
    }

    fn stream(&mut self) -> R<&mut Stream> {
        self.stream
            .as_mut()
            .ok_or_else(|| fail!("connection is closed"))
    }

    fn write(&mut self, what: &str, data: &[u8]) -> R<()> {
        self.ctx.dump(4, &self.name, what, &latin1(data));
        let r = self.stream()?.write_all(data);
        if let Err(e) = r {
            return self.soft_fail(format!("Write failed: {e}"));
        }
        Ok(())
    }

    /// Read more bytes into the receive buffer. `Ok(false)` on EOF (when
    /// `eof_ok`) or after a non-fatal error.
    fn fill(&mut self, eof_ok: bool) -> R<bool> {
        if self.ctx.aborted() {
            return Err(self.ctx.aborted_err());
        }
        let timeout = self.timeout;
        let mut deadline = std::time::Instant::now() + Duration::from_secs_f64(timeout.max(0.001));
        let mut buf = [0u8; 16384];
        // Read in short slices so that a stop (`server -break`) or a test
        // abort is noticed promptly.
        let r = loop {
            if self.cancelled() {
                return Err(fail!("stopped"));
            }
            let now = std::time::Instant::now();
            let left = deadline.saturating_duration_since(now);
            let s = self.stream()?;
            s.set_read_timeout(left.min(Duration::from_millis(100)));
            match s.read(&mut buf) {
                Err(e)
                    if (e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut)
                        && std::time::Instant::now() < deadline =>
                {
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // As varnishtest's http_rxchar: after `non_fatal` a timeout
                // is logged and the wait goes on (only the test's own
                // timeout ends it); EOF and errors still end the read.
                Err(e)
                    if !self.fatal
                        && (e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::TimedOut) =>
                {
                    if self.ctx.aborted() {
                        return Err(self.ctx.aborted_err());
                    }
                    self.log(3, &format!("HTTP rx timeout ({timeout:.3}s)"));
                    deadline =
                        std::time::Instant::now() + Duration::from_secs_f64(timeout.max(0.001));
                    continue;
                }
                r => break r,
            }
        };
        match r {
            Ok(0) => {
                if eof_ok {
                    Ok(false)
                } else {
                    self.soft_fail("HTTP rx EOF".to_string())?;
                    Ok(false)
                }
            }
            Ok(n) => {
                append_compacting(&mut self.rx, &mut self.rx_pos, &buf[..n]);
                Ok(true)
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                if self.ctx.aborted() {
                    return Err(self.ctx.aborted_err());
                }
                self.soft_fail(format!("HTTP rx timeout ({timeout:.3}s)"))?;
                Ok(false)
            }
            Err(e) => {
                if self.ctx.aborted() {
                    return Err(self.ctx.aborted_err());
                }
                if eof_ok && e.kind() == std::io::ErrorKind::ConnectionReset {
                    return Ok(false);
                }
                self.soft_fail(format!("HTTP rx failed ({e})"))?;
                Ok(false)
            }
        }
    }

    fn avail(&self) -> usize {
        self.rx.len() - self.rx_pos
    }

    /// Take exactly `n` bytes (fewer only after a non-fatal failure).
    fn take(&mut self, n: usize) -> R<Vec<u8>> {
        while self.avail() < n {
            if !self.fill(false)? {
                break;
            }
        }
        let k = n.min(self.avail());
        let v = self.rx[self.rx_pos..self.rx_pos + k].to_vec();
        self.rx_pos += k;
        Ok(v)
    }

    /// Take everything up to EOF.
    fn take_to_eof(&mut self, max: usize) -> R<Vec<u8>> {
        loop {
            if max > 0 && self.avail() >= max {
                break;
            }
            if !self.fill(true)? {
                break;
            }
        }
        let k = if max > 0 {
            max.min(self.avail())
        } else {
            self.avail()
        };
        let v = self.rx[self.rx_pos..self.rx_pos + k].to_vec();
        self.rx_pos += k;
        Ok(v)
    }

    /// Take one line including its `\n`.
    fn take_line(&mut self) -> R<Option<Vec<u8>>> {
        loop {
            if let Some(i) = self.rx[self.rx_pos..].iter().position(|&c| c == b'\n') {
                let v = self.rx[self.rx_pos..self.rx_pos + i + 1].to_vec();
                self.rx_pos += i + 1;
                return Ok(Some(v));
            }
            if !self.fill(false)? {
                return Ok(None);
            }
        }
    }

    /// Receive a header block (up to and including the empty line).
    fn rxhdr(&mut self) -> R<String> {
        self.body = None;
        self.bodylen = "<undef>".into();
        let mut st = 0u8;
        let mut i = self.rx_pos;
        let end = loop {
            if i >= self.rx.len() {
                let base = self.rx_pos;
                if !self.fill(true)? {
                    let got = latin1(&self.rx[self.rx_pos..]);
                    self.rx_pos = self.rx.len();
                    self.ctx.dump(4, &self.name, "rxhdr", &got);
                    self.soft_fail("HTTP header is incomplete".to_string())?;
                    return Ok(got);
                }
                // fill() may have compacted the buffer.
                i = i - base + self.rx_pos;
                continue;
            }
            let c = self.rx[i];
            i += 1;
            st = match (st, c) {
                (0, b'\r') => 1,
                (0 | 1, b'\n') => 2,
                (2, b'\r') => 3,
                (2 | 3, b'\n') => break i,
                _ => 0,
            };
        };
        let hdr = latin1(&self.rx[self.rx_pos..end]);
        self.rx_pos = end;
        self.ctx.dump(4, &self.name, "rxhdr", &hdr);
        self.log(4, &format!("rxhdrlen = {}", hdr.len()));
        Ok(hdr)
    }

    /// Split a header block into the three first-line fields and headers.
    fn split(&self, hdr: &str) -> Vec<Option<String>> {
        // Leading whitespace, including empty lines, is skipped.
        let hdr = hdr.trim_start_matches([' ', '\t', '\r', '\n']);
        let mut hh: Vec<Option<String>> = Vec::new();
        let mut lines = hdr.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let first = lines.next().unwrap_or("");
        if hdr.is_empty() {
            self.log(4, "No headers");
            return vec![None, None, None];
        }
        let first = first.trim_start_matches([' ', '\t']);
        let (a, rest) = first.split_once([' ', '\t']).unwrap_or((first, ""));
        hh.push(Some(a.to_string()));
        let rest = rest.trim_start_matches([' ', '\t']);
        match rest.split_once([' ', '\t']) {
            Some((b, c)) => {
                hh.push(Some(b.to_string()));
                hh.push(Some(c.trim_start_matches([' ', '\t']).to_string()));
            }
            None => {
                hh.push(Some(rest.to_string()));
                hh.push(None);
            }
        }
        for l in lines {
            if l.is_empty() {
                break;
            }
            hh.push(Some(l.to_string()));
        }
        for (n, h) in hh.iter().enumerate() {
            self.ctx.dump(
                4,
                &self.name,
                &format!("http[{n:2}] "),
                h.as_deref().unwrap_or("(null)"),
            );
        }
        hh
    }

    fn find_header<'h>(hh: &'h [Option<String>], name: &str) -> Option<&'h str> {
        for h in hh.iter().skip(3).flatten() {
            if h.len() > name.len()
                && h.as_bytes()[name.len()] == b':'
                && h[..name.len()].eq_ignore_ascii_case(name)
            {
                return Some(h[name.len() + 1..].trim_start_matches([' ', '\t']));
            }
        }
        None
    }

    fn count_header(hh: &[Option<String>], name: &str) -> usize {
        hh.iter()
            .skip(3)
            .flatten()
            .filter(|h| {
                h.len() > name.len()
                    && h.as_bytes()[name.len()] == b':'
                    && h[..name.len()].eq_ignore_ascii_case(name)
            })
            .count()
    }

    /// Read one chunk; returns its length (0 for the last chunk), or -1
    /// after a non-fatal failure.
    fn rxchunk(&mut self) -> R<i64> {
        let Some(line) = self.take_line()? else {
            return Ok(-1);
        };
        let ls = latin1(&line);
        self.ctx.dump(4, &self.name, "len", &ls);
        let t = ls.trim_start_matches([' ', '\t']);
        let digits: String = t.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        let after = &t[digits.len()..];
        if digits.is_empty() || !(after.is_empty() || after.starts_with([' ', '\t', '\r', '\n'])) {
            self.soft_fail("Chunklen fail".to_string())?;
            return Ok(-1);
        }
        let i = i64::from_str_radix(&digits, 16).unwrap_or(0);
        self.chunklen = i.to_string();
        if i > 0 {
            let data = self.take(i as usize)?;
            self.ctx.dump(4, &self.name, "chunk", &latin1(&data));
            self.body
                .get_or_insert_with(Vec::new)
                .extend_from_slice(&data);
        }
        let crlf = self.take(2)?;
        if crlf != b"\r\n" {
            self.soft_fail("Chunklen without CRLF".to_string())?;
            return Ok(-1);
        }
        Ok(i)
    }

    /// Receive a body according to the headers; `eof_body` allows
    /// read-to-EOF bodies; `max` limits this receive (0 = all).
    fn swallow_body(&mut self, req: bool, eof_body: bool, max: usize) -> R<()> {
        let hh = if req { &self.req } else { &self.resp };
        let te = Self::find_header(hh, "transfer-encoding").map(str::to_string);
        let cl = Self::find_header(hh, "content-length").map(str::to_string);
        let have = self.body.as_ref().map(Vec::len).unwrap_or(0);
        self.body.get_or_insert_with(Vec::new);
        if te
            .as_deref()
            .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
        {
            if cl.is_some() {
                return self.soft_fail("Both C-E: Chunked and C-L".to_string());
            }
            loop {
                let i = self.rxchunk()?;
                if i <= 0 {
                    break;
                }
                let got = self.body.as_ref().map(Vec::len).unwrap_or(0) - have;
                if max > 0 && got >= max {
                    break;
                }
            }
        } else if let Some(cl) = cl {
            let total: usize = cl.trim().parse().unwrap_or(0);
            let want = if max > 0 && total > have + max {
                max
            } else {
                total.saturating_sub(have)
            };
            let data = self.take(want)?;
            self.ctx.dump(4, &self.name, "c-l", &latin1(&data));
            self.body
                .get_or_insert_with(Vec::new)
                .extend_from_slice(&data);
        } else if eof_body {
            let data = self.take_to_eof(max)?;
            self.ctx.dump(4, &self.name, "eof", &latin1(&data));
            self.body
                .get_or_insert_with(Vec::new)
                .extend_from_slice(&data);
        }
        let l = self.body.as_ref().map(Vec::len).unwrap_or(0);
        self.bodylen = l.to_string();
        Ok(())
    }

    fn resolve(&self, spec: &str) -> Option<String> {
        let body = || {
            Some(match &self.body {
                Some(b) => latin1(b),
                None => spec.to_string(),
            })
        };
        match spec {
            "remote.ip" => Some(self.rem_ip.clone()),
            "remote.port" => Some(self.rem_port.clone()),
            "remote.path" => self.rem_path.clone(),
            "req.method" => self.req[0].clone(),
            "req.url" => self.req[1].clone(),
            "req.proto" => self.req[2].clone(),
            "resp.proto" => self.resp[0].clone(),
            "resp.status" => self.resp[1].clone(),
            "resp.reason" => self.resp[2].clone(),
            "resp.chunklen" => Some(self.chunklen.clone()),
            "req.bodylen" | "resp.bodylen" => Some(self.bodylen.clone()),
            "req.body" | "resp.body" => body(),
            "h2.state" => Some(self.h2.is_some().to_string()),
            _ => {
                if let Some(h) = spec.strip_prefix("req.http.") {
                    Self::find_header(&self.req, h).map(str::to_string)
                } else if let Some(h) = spec.strip_prefix("resp.http.") {
                    Self::find_header(&self.resp, h).map(str::to_string)
                } else {
                    Some(spec.to_string())
                }
            }
        }
    }

    fn only(&self, cmd: &Cmd, server: bool) -> R<()> {
        if self.h2.is_some() && !matches!(cmd.args[0].as_str(), "close" | "accept") {
            bail!("\"{}\" only possible before H/2 upgrade", cmd.args[0]);
        }
        if self.is_server != server {
            bail!(
                "\"{}\" only possible in {}",
                cmd.args[0],
                if server { "server" } else { "client" }
            );
        }
        Ok(())
    }

    /// Shared tail of txreq/txresp: headers and body arguments.
    #[allow(clippy::too_many_arguments)]
    fn tx_args(
        &mut self,
        av: &[String],
        mut i: usize,
        out: &mut Vec<u8>,
        mut body: Option<Vec<u8>>,
        mut nohost: bool,
        mut nodate: bool,
        mut noserver: bool,
        mut nouseragent: bool,
    ) -> R<usize> {
        let mut nolen = false;
        let arg = |k: usize| -> R<&String> {
            av.get(k)
                .ok_or_else(|| fail!("{}: missing value after {}", av[0], av[k - 1]))
        };
        while i < av.len() {
            match av[i].as_str() {
                "-nolen" => nolen = true,
                "-nohost" => nohost = true,
                "-nodate" => nodate = true,
                "-hdr" => {
                    let h = arg(i + 1)?;
                    // 7.1 only lets Host (and Date/Server/User-Agent) headers
                    // replace the defaults; Content-Length is never implied.
                    let lc = h.to_ascii_lowercase();
                    if lc.starts_with("host:") {
                        nohost = true;
                    }
                    if lc.starts_with("date:") {
                        nodate = true;
                    }
                    if lc.starts_with("server:") {
                        noserver = true;
                    }
                    if lc.starts_with("user-agent:") {
                        nouseragent = true;
                    }
                    out.extend_from_slice(&bytes(h));
                    out.extend_from_slice(b"\r\n");
                    i += 1;
                }
                "-hdrlen" => {
                    let name = arg(i + 1)?;
                    let n = script::parse_int(arg(i + 2)?)?.max(0);
                    out.extend_from_slice(&bytes(name));
                    out.extend_from_slice(b": ");
                    let mut l = n;
                    while l > 0 {
                        l -= 1;
                        out.push(b'0' + (l % 10) as u8);
                    }
                    out.extend_from_slice(b"\r\n");
                    i += 2;
                }
                _ => break,
            }
            i += 1;
        }
        while i < av.len() {
            match av[i].as_str() {
                "-body" => {
                    // The body is a C string in varnishtest: it ends at the
                    // first NUL (which a quoted `\0` escape produces).
                    let mut b = bytes(arg(i + 1)?);
                    if let Some(z) = b.iter().position(|&c| c == 0) {
                        b.truncate(z);
                    }
                    // A literal backslash-zero then stands for a NUL byte.
                    let mut v = Vec::with_capacity(b.len());
                    let mut k = 0;
                    while k < b.len() {
                        if b[k] == b'\\' && b.get(k + 1) == Some(&b'0') {
                            v.push(0);
                            k += 2;
                        } else {
                            v.push(b[k]);
                            k += 1;
                        }
                    }
                    body = Some(v);
                    i += 1;
                }
                "-bodyfrom" => {
                    let f = arg(i + 1)?;
                    body = Some(
                        std::fs::read(self.ctx.path(f))
                            .map_err(|e| fail!("cannot read -bodyfrom file {f}: {e}"))?,
                    );
                    i += 1;
                }
                "-bodylen" => {
                    let n = script::parse_int(arg(i + 1)?)?;
                    body = Some(synth_body(n.max(0) as usize));
                    i += 1;
                }
                "-gziplevel" => {
                    self.gziplevel = script::parse_int(arg(i + 1)?)?.clamp(0, 9) as u32;
                    i += 1;
                }
                "-gzipresidual" => {
                    // The residual-bit check needs Varnish's patched zlib
                    // (stop_bit); the generated bytes do not depend on it.
                    script::parse_int(arg(i + 1)?)?;
                    i += 1;
                }
                "-gzipbody" => {
                    let g = gzip(&bytes(arg(i + 1)?), self.gziplevel)?;
                    self.log(3, &format!("new bodylen {}", g.len()));
                    self.bodylen = g.len().to_string();
                    body = Some(g);
                    out.extend_from_slice(b"Content-Encoding: gzip\r\n");
                    i += 1;
                }
                "-gziplen" => {
                    let n = script::parse_int(arg(i + 1)?)?;
                    let g = gzip(&synth_random_body(n.max(0) as usize), self.gziplevel)?;
                    self.log(3, &format!("new bodylen {}", g.len()));
                    self.bodylen = g.len().to_string();
                    body = Some(g);
                    out.extend_from_slice(b"Content-Encoding: gzip\r\n");
                    i += 1;
                }
                _ => break,
            }
            i += 1;
        }
        if !nohost {
            let lh = self.ctx.expand("${localhost}")?;
            out.extend_from_slice(format!("Host: {lh}\r\n").as_bytes());
        }
        if !nodate {
            let d = crate::macros::http_date(std::time::SystemTime::now());
            out.extend_from_slice(format!("Date: {d}\r\n").as_bytes());
        }
        if !noserver {
            out.extend_from_slice(format!("Server: {}\r\n", self.name).as_bytes());
        }
        if !nouseragent {
            out.extend_from_slice(format!("User-Agent: {}\r\n", self.name).as_bytes());
        }
        if let Some(b) = &body
            && !nolen
        {
            out.extend_from_slice(format!("Content-Length: {}\r\n", b.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        if let Some(b) = body {
            out.extend_from_slice(&b);
        }
        Ok(i)
    }

    fn txreq(&mut self, cmd: &Cmd) -> R<()> {
        self.only(cmd, false)?;
        let av = &cmd.args;
        let (mut method, mut url, mut proto) = ("GET", "/", "HTTP/1.1");
        let mut nouseragent = false;
        let mut up: Option<String> = None;
        self.head_method = false;
        let mut i = 1;
        while i < av.len() {
            match av[i].as_str() {
                "-url" => {
                    url = cmd.arg(i + 1)?;
                    i += 1;
                }
                "-proto" => {
                    proto = cmd.arg(i + 1)?;
                    i += 1;
                }
                "-method" | "-req" => {
                    method = cmd.arg(i + 1)?;
                    self.head_method = method == "HEAD";
                    i += 1;
                }
                "-up" => {
                    up = Some(cmd.arg(i + 1)?.to_string());
                    i += 1;
                }
                "-nouseragent" => nouseragent = true,
                _ => break,
            }
            i += 1;
        }
        let mut out = bytes(&format!("{method} {url} {proto}\r\n"));
        if let Some(u) = &up {
            out.extend_from_slice(
                format!(
                    "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: {u}\r\n"
                )
                .as_bytes(),
            );
        }
        let nohost = proto != "HTTP/1.1";
        // varnishtest 7.1 adds no User-Agent, Date or Server headers.
        let _ = nouseragent;
        let i = self.tx_args(av, i, &mut out, None, nohost, true, true, true)?;
        if i < av.len() {
            bail!("Unknown http txreq spec: {}", av[i]);
        }
        self.write("txreq", &out)?;
        match up {
            Some(u) => self.upgrade_client(cmd.line, &u),
            None => Ok(()),
        }
    }

    fn txresp(&mut self, cmd: &Cmd) -> R<()> {
        self.only(cmd, true)?;
        let av = &cmd.args;
        let (mut proto, mut status, mut reason) = ("HTTP/1.1", "200", "OK");
        let mut noserver = false;
        let mut i = 1;
        while i < av.len() {
            match av[i].as_str() {
                "-proto" => {
                    proto = cmd.arg(i + 1)?;
                    i += 1;
                }
                "-status" => {
                    status = cmd.arg(i + 1)?;
                    i += 1;
                }
                "-reason" => {
                    reason = cmd.arg(i + 1)?;
                    i += 1;
                }
                "-noserver" => noserver = true,
                _ => break,
            }
            i += 1;
        }
        let mut out = bytes(&format!("{proto} {status} {reason}\r\n"));
        // varnishtest 7.1 adds no Date or Server headers to responses.
        let _ = noserver;
        let i = self.tx_args(av, i, &mut out, Some(Vec::new()), true, true, true, true)?;
        if i < av.len() {
            bail!("Unknown http txresp spec: {}", av[i]);
        }
        self.write("txresp", &out)
    }

    fn no_args(cmd: &Cmd, what: &str) -> R<()> {
        if let Some(a) = cmd.args.get(1) {
            bail!("Unknown http {what} spec: {a}");
        }
        Ok(())
    }

    fn rx_common(&mut self, req: bool) -> R<()> {
        let hdr = self.rxhdr()?;
        let hh = self.split(&hdr);
        if req {
            self.req = hh;
        } else {
            self.resp = hh;
        }
        let hh = if req { &self.req } else { &self.resp };
        if Self::count_header(hh, "Content-Length") > 1 {
            bail!("Multiple Content-Length headers.");
        }
        Ok(())
    }

    /// Execute one spec command.
    pub fn command(&mut self, cmd: &Cmd) -> R<()> {
        let av = &cmd.args;
        match av[0].as_str() {
            "txreq" => self.txreq(cmd),
            "txresp" => self.txresp(cmd),
            "rxreq" => {
                self.only(cmd, true)?;
                Self::no_args(cmd, "rxreq")?;
                self.rx_common(true)?;
                self.swallow_body(true, false, 0)?;
                self.log(4, &format!("bodylen = {}", self.bodylen));
                Ok(())
            }
            "rxreqhdrs" => {
                Self::no_args(cmd, "rxreq")?;
                self.rx_common(true)
            }
            "rxreqbody" => {
                self.only(cmd, true)?;
                Self::no_args(cmd, "rxreq")?;
                self.swallow_body(true, false, 0)?;
                self.log(4, &format!("bodylen = {}", self.bodylen));
                Ok(())
            }
            "rxresp" => {
                self.only(cmd, false)?;
                let mut has_obj = true;
                for a in &av[1..] {
                    if a == "-no_obj" {
                        has_obj = false;
                    } else {
                        bail!("Unknown http rxresp spec: {a}");
                    }
                }
                self.rx_common(false)?;
                if !has_obj || self.resp[0].is_none() || self.resp[1].is_none() {
                    return Ok(());
                }
                if self.head_method {
                    return Ok(());
                }
                let eof = self.resp[1].as_deref() == Some("200");
                self.swallow_body(false, eof, 0)?;
                self.log(4, &format!("bodylen = {}", self.bodylen));
                Ok(())
            }
            "rxresphdrs" => {
                self.only(cmd, false)?;
                Self::no_args(cmd, "rxresp")?;
                self.rx_common(false)
            }
            "rxrespbody" => {
                self.only(cmd, false)?;
                let mut max = 0usize;
                let mut i = 1;
                while i < av.len() {
                    if av[i] == "-max" {
                        max = script::parse_int(cmd.arg(i + 1)?)?.max(0) as usize;
                        i += 2;
                    } else {
                        bail!("Unknown http rxrespbody spec: {}", av[i]);
                    }
                }
                self.swallow_body(false, true, max)?;
                self.log(4, &format!("bodylen = {}", self.bodylen));
                Ok(())
            }
            "rxchunk" => {
                self.only(cmd, false)?;
                self.body.get_or_insert_with(Vec::new);
                if self.rxchunk()? == 0 {
                    let l = self.body.as_ref().map(Vec::len).unwrap_or(0);
                    self.bodylen = l.to_string();
                    self.log(4, &format!("bodylen = {}", self.bodylen));
                }
                Ok(())
            }
            "expect" => {
                if av.len() != 4 {
                    bail!("expect needs exactly 3 arguments: LHS OP RHS");
                }
                let l = self.resolve(&av[1]);
                let r = self.resolve(&av[3]);
                let msg = expect_values(&av[1], l.as_deref(), &av[2], &av[3], r.as_deref())?;
                self.log(4, &msg);
                Ok(())
            }
            "expect_pattern" => {
                let body = self.body.clone().unwrap_or_default();
                let mut t = b'0';
                for (p, &c) in body.iter().enumerate() {
                    if c != t {
                        bail!("EXPECT PATTERN FAIL @{p} should 0x{t:02x} is 0x{c:02x}");
                    }
                    t = (t + 1) & !0x08;
                }
                self.log(4, "EXPECT PATTERN SUCCESS");
                Ok(())
            }
            "expect_close" => self.expect_close(),
            "send" => {
                let data = bytes(cmd.arg(1)?);
                self.write("send", &data)
            }
            "send_n" => {
                let n = script::parse_int(cmd.arg(1)?)?.max(0) as usize;
                let data = bytes(cmd.arg(2)?);
                self.ctx.dump(4, &self.name, "send_n", cmd.arg(2)?);
                let all = data.repeat(n);
                let r = self.stream()?.write_all(&all);
                if let Err(e) = r {
                    return self.soft_fail(format!("Write error in http_send(): {e}"));
                }
                Ok(())
            }
            "send_urgent" => {
                let data = bytes(cmd.arg(1)?);
                self.ctx.dump(4, &self.name, "send_urgent", cmd.arg(1)?);
                match self.stream()?.send_urgent(&data) {
                    Ok(n) if n == data.len() => Ok(()),
                    Ok(n) => self.soft_fail(format!(
                        "Write error in http_send_urgent(): short write {n}"
                    )),
                    Err(e) => self.soft_fail(format!("Write error in http_send_urgent(): {e}")),
                }
            }
            "sendhex" => {
                let data = hex_to_bin(cmd.arg(1)?)?;
                self.write("sendhex", &data)
            }
            "recv" => {
                let n = script::parse_int(cmd.arg(1)?)?.max(0) as usize;
                let d = self.take(n)?;
                self.ctx.dump(4, &self.name, "recv", &latin1(&d));
                Ok(())
            }
            "chunked" => {
                let d = bytes(cmd.arg(1)?);
                let mut out = format!("{:x}\r\n", d.len()).into_bytes();
                out.extend_from_slice(&d);
                out.extend_from_slice(b"\r\n");
                self.write("chunked", &out)
            }
            "chunkedlen" => {
                let n = script::parse_int(cmd.arg(1)?)?.max(0) as usize;
                let out = if n == 0 {
                    b"0\r\n\r\n".to_vec()
                } else {
                    let mut o = format!("{n:x}\r\n").into_bytes();
                    o.extend((0..n).map(|u| b'0' + (u & 7) as u8));
                    o.extend_from_slice(b"\r\n");
                    o
                };
                self.write("chunked", &out)
            }
            "timeout" => {
                let t = cmd.arg(1)?;
                self.timeout = vnum(t);
                if self.timeout.is_nan() {
                    bail!("timeout is not a number ({t})");
                }
                if let Some(c) = &self.h2 {
                    c.set_timeout(self.timeout);
                }
                Ok(())
            }
            "fatal" | "non_fatal" => {
                self.fatal = av[0] == "fatal";
                if let Some(c) = &self.h2 {
                    c.set_fatal(self.fatal);
                }
                Ok(())
            }
            "gunzip" => self.gunzip(),
            "write_body" => {
                let f = cmd.arg(1)?;
                let b = self.body.clone().unwrap_or_default();
                std::fs::write(self.ctx.path(f), b).map_err(|e| fail!("failed to write body: {e}"))
            }
            "close" => {
                self.only(cmd, true)?;
                self.stop_h2()?;
                if let Some(h) = self.stream.as_ref().and_then(Stream::handle) {
                    h.shutdown();
                }
                self.stream = None;
                self.rx.clear();
                self.rx_pos = 0;
                self.log(4, "Closed");
                Ok(())
            }
            "accept" => {
                self.only(cmd, true)?;
                self.stop_h2()?;
                if let Some(h) = self.stream.as_ref().and_then(Stream::handle) {
                    h.shutdown();
                }
                self.stream = None;
                self.rx.clear();
                self.rx_pos = 0;
                self.log(4, "Accepting");
                let l = self
                    .listener
                    .ok_or_else(|| fail!("accept: no listening socket"))?;
                let cancel = self.cancel.clone();
                let stop = move || {
                    cancel
                        .as_ref()
                        .is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst))
                };
                match l.accept(self.ctx, &stop)? {
                    Some(s) => {
                        let (ip, port, _) = s.peer();
                        self.rem_ip = ip;
                        self.rem_port = port;
                        self.stream = Some(s);
                        self.log(3, "Accepted socket");
                        Ok(())
                    }
                    None => Err(self.ctx.aborted_err()),
                }
            }
            "loop" => {
                let n = script::parse_int(cmd.arg(1)?)?;
                let spec = cmd.arg(2)?.to_string();
                let line = cmd.lines.get(2).copied().unwrap_or(cmd.line);
                for _ in 0..n.max(0) {
                    if self.run_spec(&spec, line).is_err() {
                        return Err(self.ctx.aborted_err());
                    }
                }
                Ok(())
            }
            "txpri" => self.txpri(cmd),
            "rxpri" => self.rxpri(cmd),
            "stream" => self.stream_cmd(cmd),
            "upgrade" => self.upgrade(cmd),
            "settings" => {
                let Some(c) = &self.h2 else {
                    bail!("Only possible in H/2 mode");
                };
                let mut i = 1;
                while i < av.len() {
                    if av[i] != "-dectbl" {
                        bail!("Unknown settings spec: {}", av[i]);
                    }
                    let v = cmd.arg(i + 1)?;
                    let n = c_long(v)
                        .ok_or_else(|| fail!("-dectbl takes an integer as argument (found {v})"))?;
                    c.resize_dec(n as u32);
                    i += 2;
                }
                Ok(())
            }
            _ => match crate::commands::common(self.ctx, &self.name, cmd)? {
                true => Ok(()),
                false => bail!("Unknown command: \"{}\"", av[0]),
            },
        }
    }

    fn gunzip(&mut self) -> R<()> {
        let body = self.body.clone().unwrap_or_default();
        if body.len() < 2 || body[0] != 0x1f || body[1] != 0x8b {
            self.soft_fail("Gunzip error: body lacks gzip magic".to_string())?;
        }
        let mut out = Vec::new();
        let mut d = flate2::read::GzDecoder::new(&body[..]);
        if let Err(e) = d.read_to_end(&mut out) {
            self.soft_fail(format!("Gunzip error = {e}"))?;
        }
        self.log(3, &format!("new bodylen {}", out.len()));
        self.ctx.dump(4, &self.name, "body", &latin1(&out));
        self.bodylen = out.len().to_string();
        self.body = Some(out);
        Ok(())
    }

    fn expect_close(&mut self) -> R<()> {
        self.log(4, "Expecting close");
        self.stop_h2()?;
        // Bytes already buffered count as received data.
        loop {
            while self.rx_pos < self.rx.len() {
                let c = self.rx[self.rx_pos];
                self.rx_pos += 1;
                if !matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                    return self.soft_fail(format!("Expecting close: read = 1, c = 0x{c:02x}"));
                }
            }
            let timeout = self.timeout;
            let Some(s) = self.stream.as_mut() else {
                break;
            };
            s.set_read_timeout(Duration::from_secs_f64(timeout.max(0.001)));
            let mut b = [0u8; 1];
            match s.read(&mut b) {
                Ok(0) => break,
                Ok(_) => {
                    self.rx.push(b[0]);
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    if self.ctx.aborted() {
                        return Err(self.ctx.aborted_err());
                    }
                    return self.soft_fail("Expected close: timeout".to_string());
                }
                Err(_) => {
                    if self.ctx.aborted() {
                        return Err(self.ctx.aborted_err());
                    }
                    break;
                }
            }
        }
        self.log(4, "EOF, as expected");
        Ok(())
    }
}

impl Drop for Http<'_> {
    /// Close the connection for real: the abort registry holds duplicates
    /// of every socket, so dropping ours alone would not send a FIN.
    fn drop(&mut self) {
        let _ = self.stop_h2();
        if let Some(h) = self.stream.as_ref().and_then(Stream::handle) {
            h.shutdown();
        }
    }
}

/// Convert `"0F EE a5  3df2"` style hex to bytes.
pub fn hex_to_bin(s: &str) -> R<Vec<u8>> {
    let digits: Vec<u32> = s
        .chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| {
            c.to_digit(16)
                .ok_or_else(|| fail!("Illegal Hex char '{c}'"))
        })
        .collect::<R<_>>()?;
    if !digits.len().is_multiple_of(2) {
        bail!("Odd number of Hex digits");
    }
    Ok(digits.chunks(2).map(|p| (p[0] * 16 + p[1]) as u8).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gziplen_body_is_random_printable() {
        let a = synth_random_body(1000);
        let b = synth_random_body(1000);
        assert_eq!(a.len(), 1000);
        assert_ne!(a, b, "two bodies differ, as varnishtest's do");
        for (j, c) in a.iter().enumerate() {
            if j % 64 == 63 || j == 999 {
                assert_eq!(*c, b'\n', "byte {j}");
            } else {
                assert!((b' '..=b'~').contains(c), "byte {j}: {c}");
            }
        }
        // varnishtest's -gziplevel 9 -gziplen 1000 gives 872..876 bytes.
        let g = gzip(&a, 9).unwrap();
        assert!((840..=900).contains(&g.len()), "{}", g.len());
    }

    #[test]
    fn synth() {
        let b = synth_body(130);
        assert_eq!(b.len(), 130);
        assert_eq!(b[0], b'!');
        assert_eq!(b[63], b'\n');
        assert_eq!(b[64], b'"');
        assert_eq!(b[129], b'\n');
    }

    #[test]
    fn expect_ops() {
        assert!(expect_values("a", Some("1"), "==", "1", Some("1")).is_ok());
        assert!(expect_values("a", Some("1"), "!=", "1", Some("1")).is_err());
        assert!(expect_values("a", Some("10"), ">", "9", Some("9")).is_ok());
        assert!(expect_values("a", Some("10"), "<=", "9", Some("9")).is_err());
        assert!(expect_values("a", None, "==", "<undef>", Some("<undef>")).is_ok());
        assert!(expect_values("a", None, ">", "1", Some("1")).is_err());
        assert!(expect_values("a", Some("foobar"), "~", "o+b", Some("o+b")).is_ok());
        assert!(expect_values("a", Some("foobar"), "!~", "^x", Some("^x")).is_ok());
        assert!(expect_values("a", Some("x"), "<>", "y", Some("y")).is_err());
        assert!(expect_values("a", Some("201"), "-gt", "0xc8", Some("0xc8")).is_ok());
        assert!(expect_values("a", Some("201"), "-lt", "201", Some("201")).is_err());
        assert!(expect_values("a", Some("x"), "-eq", "1", Some("1")).is_err());
    }

    #[test]
    fn hex() {
        assert_eq!(hex_to_bin("0F ee\n a5").unwrap(), vec![0x0f, 0xee, 0xa5]);
        assert!(hex_to_bin("0").is_err());
        assert!(hex_to_bin("zz").is_err());
    }

    #[test]
    fn gzip_roundtrip() {
        let g = gzip(b"hello", 0).unwrap();
        assert_eq!(&g[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3]);
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&g[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, b"hello");
    }

    #[test]
    fn resolve_forms() {
        assert_eq!(resolve("127.0.0.1 80").unwrap().port(), 80);
        assert_eq!(resolve("127.0.0.1:81").unwrap().port(), 81);
        assert_eq!(resolve("[::1]:82").unwrap().port(), 82);
        assert!(resolve("127.0.0.1:x").is_err());
        assert_eq!(resolve("::1").unwrap().port(), 0);
    }
}
