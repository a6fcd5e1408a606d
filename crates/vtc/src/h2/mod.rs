//! The HTTP/2 side of `client` and `server` specs (varnishtest's
//! `stream ID {...}` language): one [`Conn`] per connection once the
//! preface was sent (`txpri`) or received (`rxpri`), holding the HPACK
//! tables, the connection window and the streams.
//!
//! Each `stream` has its own spec, run in the caller's thread (`-run`) or
//! in a thread of its own (`-start`, `-wait`). Frames are read from the
//! socket only while some stream waits for one (as varnishtest does, so
//! that a test controls when the peer's frames are processed), by the
//! waiting stream itself: it takes the reader role, reads one frame,
//! processes it (window accounting, HPACK decoding, metadata) and queues it
//! on the stream it belongs to. A frame for a stream that does not exist
//! yet stops reading until that stream is declared.
//!
//! Locks: `state` guards everything shared and is never held while reading
//! the socket; `reader` is held only by the stream in the reader role;
//! `writer` serialises whole frames on the wire.

pub use lacquer_http::h2::frame;

use crate::ctx::{Ctx, Fail, R, lock};
use crate::http::{self, Stream};
use crate::script::{self, Cmd};
use crate::text::{bytes, latin1};
use crate::{bail, fail};
use frame::{Head, Meta, flags, types};
use lacquer_http::hpack::{self, Header, Indexing, Name, Table};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most header fields one header block may decode to (varnishtest's
/// per-message limit); more is an error, which also bounds what a hostile
/// block of indexed fields can expand to.
const MAX_HDR: usize = 50;

/// The SETTINGS exchange run when a `stream` is used before HTTP/2 was
/// started, and after an `h2c` upgrade.
pub const PREAMBLE: &str = "
    txsettings
    rxsettings
    txsettings -ack
    rxsettings
    expect settings.ack == true
";

/// A received frame with its parsed payload.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The frame header.
    pub head: Head,
    /// The raw payload.
    pub data: Vec<u8>,
    /// What the payload says.
    pub meta: Meta,
}

#[derive(Debug)]
struct StreamState {
    id: u32,
    name: String,
    queue: VecDeque<Frame>,
    frame: Option<Frame>,
    req: Vec<Header>,
    resp: Vec<Header>,
    body: Option<Vec<u8>>,
    ws: i64,
    weight: u32,
    dependency: u32,
    spec: Option<(String, usize)>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct HdrBlock {
    stream: u32,
    to_req: bool,
    block: Vec<u8>,
}

#[derive(Debug)]
struct State {
    streams: Vec<StreamState>,
    dec: Table,
    enc: Table,
    /// Initial stream window we announced.
    iws: i64,
    /// Connection receive window.
    ws: i64,
    /// A stream is reading the socket.
    reading: bool,
    /// The connection failed (EOF, timeout): waiting streams get nothing.
    dead: bool,
    /// A frame for a stream not declared yet.
    pending: Option<(Head, Vec<u8>)>,
    /// Header block being assembled across CONTINUATION frames.
    cont: Option<HdrBlock>,
}

impl State {
    fn idx(&self, sid: u32) -> R<usize> {
        self.streams
            .iter()
            .position(|s| s.id == sid)
            .ok_or_else(|| fail!("stream {sid} is not declared on this connection"))
    }

    /// varnishtest's exclusive dependency: every other stream depending on
    /// the same parent now depends on stream `i`.
    fn exclusive_dependency(&mut self, i: usize) {
        let (id, dep) = (self.streams[i].id, self.streams[i].dependency);
        if id == 0 {
            return;
        }
        for s in &mut self.streams {
            if s.id != id && s.dependency == dep {
                s.dependency = id;
            }
        }
    }
}

#[derive(Debug)]
struct Reader {
    sock: Stream,
    buf: Vec<u8>,
    pos: usize,
}

/// Session settings a connection starts with.
#[derive(Debug, Clone)]
pub struct Options {
    /// Failures stop the test (`fatal`), or are only logged (`non_fatal`).
    pub fatal: bool,
    /// Read timeout in seconds.
    pub timeout: f64,
    /// Set when the owning server is stopped (`-break`).
    pub cancel: Option<Arc<AtomicBool>>,
}

/// One HTTP/2 connection of a client or server actor.
#[derive(Debug)]
pub struct Conn {
    ctx: Arc<Ctx>,
    sess: String,
    is_server: bool,
    state: Mutex<State>,
    cond: Condvar,
    writer: Mutex<Stream>,
    reader: Mutex<Reader>,
    fatal: AtomicBool,
    timeout: Mutex<f64>,
    cancel: Option<Arc<AtomicBool>>,
}

/// Parse an unsigned integer like `strtoul(s, .., 0)` over the whole
/// string, failing with varnishtest's message.
fn strtou32(s: &str, what: &str, bits: u32) -> R<u32> {
    let v =
        http::c_long(s).ok_or_else(|| fail!("{what} takes an integer as argument (found {s})"))?;
    let v = v as u32;
    if bits > 0 && bits < 32 && v >= 1 << bits {
        bail!("{what} must be a {bits}-bits integer (found {s})");
    }
    Ok(v)
}

fn arg(cmd: &Cmd, i: usize) -> R<&str> {
    cmd.args.get(i).map(String::as_str).ok_or_else(|| {
        fail!(
            "{}: missing argument after {}",
            cmd.args[0],
            cmd.args[i - 1]
        )
    })
}

fn error_code(s: &str, what: &str) -> R<u32> {
    match frame::ERRORS.iter().position(|e| *e == s) {
        Some(i) => Ok(i as u32),
        None => strtou32(s, what, 0),
    }
}

/// The bytes of a `-data`/`-pad`-like option (`literal` names the one
/// taking text; the other takes a length of generated text).
fn text_or_synth(opt: &str, literal: &str, v: &str) -> R<Vec<u8>> {
    if opt == literal {
        Ok(bytes(v))
    } else {
        Ok(http::synth_body(strtou32(v, opt, 0)? as usize))
    }
}

fn huff_arg(s: &str, what: &str) -> R<bool> {
    match s {
        "plain" => Ok(false),
        "huf" => Ok(true),
        _ => bail!("{what} arg can be huf or plain (got: {s})"),
    }
}

fn indexing_arg(s: &str, what: &str) -> R<Indexing> {
    match s {
        "inc" => Ok(Indexing::Inc),
        "not" => Ok(Indexing::Not),
        "never" => Ok(Indexing::Never),
        _ => bail!("first {what} arg can be inc, not, never (got: {s})"),
    }
}

fn find_header(h: &[Header], name: &str) -> Option<String> {
    h.iter()
        .find(|f| f.name.eq_ignore_ascii_case(name.as_bytes()))
        .map(|f| latin1(&f.value))
}

/// A C string view of bytes: up to the first NUL.
fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    latin1(&b[..end])
}

fn explain_flags(fl: u8, typ: u8) -> Option<String> {
    use types::*;
    Some(
        if fl & flags::ACK != 0 && (typ == PING || typ == SETTINGS) {
            "flag: ACK".into()
        } else if fl & flags::END_STREAM != 0 && matches!(typ, HEADERS | PUSH_PROMISE | DATA) {
            "flag: END_STREAM".into()
        } else if fl & flags::END_HEADERS != 0
            && matches!(typ, HEADERS | PUSH_PROMISE | CONTINUATION)
        {
            "flag: END_TYPE_HEADERS".into()
        } else if fl & flags::PRIORITY != 0 && matches!(typ, HEADERS | PUSH_PROMISE) {
            "flag: END_PRIORITY".into()
        } else if fl & flags::PADDED != 0 && matches!(typ, DATA | HEADERS | PUSH_PROMISE) {
            "flag: PADDED".into()
        } else if fl != 0 {
            format!("UNKNOWN FLAG(S): 0x{fl:02x}")
        } else {
            return None;
        },
    )
}

/// What a payload becomes when a soft error is ignored (`non_fatal`).
fn degraded_meta(head: &Head, data: &[u8]) -> Meta {
    match head.typ {
        types::WINDOW_UPDATE if data.len() == 4 => {
            Meta::WinUp(u32::from_be_bytes([data[0], data[1], data[2], data[3]]))
        }
        types::DATA => Meta::Data {
            padded: 0,
            body: Vec::new(),
        },
        _ => Meta::Headers {
            padded: 0,
            prio: None,
            promised: None,
            block: Vec::new(),
        },
    }
}

impl Conn {
    /// Start HTTP/2 on `sock` (the preface has been exchanged). `leftover`
    /// holds bytes already read from the socket after the preface.
    pub fn start(
        ctx: Arc<Ctx>,
        sess: &str,
        is_server: bool,
        sock: &Stream,
        leftover: Vec<u8>,
        opts: Options,
    ) -> R<Arc<Conn>> {
        let rd = sock
            .try_clone()
            .map_err(|e| fail!("cannot duplicate the connection for HTTP/2: {e}"))?;
        let wr = sock
            .try_clone()
            .map_err(|e| fail!("cannot duplicate the connection for HTTP/2: {e}"))?;
        Ok(Arc::new(Conn {
            ctx,
            sess: sess.to_string(),
            is_server,
            state: Mutex::new(State {
                streams: Vec::new(),
                dec: Table::new(4096),
                enc: Table::new(4096),
                iws: 0xffff,
                ws: 0xffff,
                reading: false,
                dead: false,
                pending: None,
                cont: None,
            }),
            cond: Condvar::new(),
            writer: Mutex::new(wr),
            reader: Mutex::new(Reader {
                sock: rd,
                buf: leftover,
                pos: 0,
            }),
            fatal: AtomicBool::new(opts.fatal),
            timeout: Mutex::new(opts.timeout),
            cancel: opts.cancel,
        }))
    }

    /// `fatal` / `non_fatal` of the owning session.
    pub fn set_fatal(&self, f: bool) {
        self.fatal.store(f, Ordering::SeqCst);
    }

    /// `timeout` of the owning session.
    pub fn set_timeout(&self, t: f64) {
        *lock(&self.timeout) = t;
    }

    fn fatal(&self) -> bool {
        self.fatal.load(Ordering::SeqCst)
    }

    fn st(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn cancelled(&self) -> bool {
        self.ctx.aborted()
            || self
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(Ordering::SeqCst))
    }

    /// A failure that respects `non_fatal`.
    fn soft_fail(&self, actor: &str, msg: String) -> R<()> {
        if self.fatal() {
            Err(Fail(msg))
        } else {
            self.ctx.log(0, actor, &msg);
            Ok(())
        }
    }

    /// `settings -dectbl N`: resize the decoding table.
    pub fn resize_dec(&self, n: u32) {
        self.st().dec.resize(n);
    }

    /// Apply an `HTTP2-Settings` header (base64url of SETTINGS pairs) from
    /// an `h2c` upgrade, logging each setting.
    pub fn b64_settings(&self, s: &str) -> R<()> {
        let Some(pairs) = lacquer_http::h2::decode_upgrade_settings(s.trim().as_bytes()) else {
            bail!("Bad \"HTTP2-Settings\" header: not whole settings in base64url");
        };
        for (id, val) in pairs {
            let name = frame::SETTINGS
                .get(id as usize)
                .copied()
                .unwrap_or("unknown");
            if id == 1 {
                let mut st = self.st();
                if self.is_server {
                    st.enc.resize(val);
                } else {
                    st.dec.resize(val);
                }
            }
            self.ctx
                .log(4, &self.sess, &format!("Upgrade: {name} ({id}): {val}"));
        }
        Ok(())
    }

    /// Wait for every running stream, then give back the bytes read ahead
    /// of HTTP/2 processing (for HTTP/1 use of the same connection).
    pub fn stop(&self) -> R<Vec<u8>> {
        let ids: Vec<u32> = self.st().streams.iter().map(|s| s.id).collect();
        for id in ids {
            self.wait_stream(id)?;
        }
        let r = lock(&self.reader);
        Ok(r.buf[r.pos..].to_vec())
    }

    fn wait_stream(&self, sid: u32) -> R<()> {
        let t = {
            let mut st = self.st();
            let i = st.idx(sid)?;
            st.streams[i].thread.take()
        };
        if let Some(t) = t {
            self.ctx
                .log(2, &self.sess, &format!("Waiting for stream {sid}"));
            crate::server::join_polling(&self.ctx, t)?;
        }
        Ok(())
    }

    /// The `stream ID [SPEC] [-start|-wait|-run]` command.
    pub fn cmd_stream(self: &Arc<Self>, cmd: &Cmd) -> R<()> {
        let name = cmd.arg(1)?.to_string();
        let sid = {
            let mut st = self.st();
            match st.streams.iter().find(|s| s.name == name) {
                Some(s) => s.id,
                None => {
                    let id = strtou32(&name, "stream", 0)?;
                    if id & (1 << 31) != 0 {
                        bail!("Stream id must be a 31-bits integer (found {name})");
                    }
                    let ws = st.iws;
                    st.streams.push(StreamState {
                        id,
                        name: name.clone(),
                        queue: VecDeque::new(),
                        frame: None,
                        req: Vec::new(),
                        resp: Vec::new(),
                        body: None,
                        ws,
                        weight: 16,
                        dependency: 0,
                        spec: None,
                        thread: None,
                    });
                    if st.pending.as_ref().is_some_and(|(h, _)| h.stream == id)
                        && let Some((h, d)) = st.pending.take()
                    {
                        let r = self.process(&mut st, h, d);
                        self.cond.notify_all();
                        r?;
                    }
                    id
                }
            }
        };
        for (i, a) in cmd.args.iter().enumerate().skip(2) {
            if self.ctx.aborted() {
                break;
            }
            if a == "-wait" {
                self.wait_stream(sid)?;
                continue;
            }
            // Touching a running stream waits for it first.
            self.wait_stream(sid)?;
            match a.as_str() {
                "-start" => self.start_stream(sid)?,
                "-run" => {
                    self.start_stream(sid)?;
                    self.wait_stream(sid)?;
                }
                _ if a.starts_with('-') => bail!("Unknown stream argument: {a}"),
                _ => {
                    let line = cmd.lines.get(i).copied().unwrap_or(cmd.line);
                    let mut st = self.st();
                    let k = st.idx(sid)?;
                    st.streams[k].spec = Some((a.clone(), line));
                }
            }
        }
        Ok(())
    }

    fn start_stream(self: &Arc<Self>, sid: u32) -> R<()> {
        let mut st = self.st();
        let k = st.idx(sid)?;
        let name = st.streams[k].name.clone();
        let (spec, line) = st.streams[k]
            .spec
            .clone()
            .ok_or_else(|| fail!("stream {name} has no specification"))?;
        self.ctx
            .log(2, &self.sess, &format!("Starting stream {name}"));
        let me = self.clone();
        let actor = format!("{}.{}", self.sess, name);
        st.streams[k].thread = Some(std::thread::spawn(move || {
            let ctx = me.ctx.clone();
            let cancel = me.cancel.clone();
            let mut h = |cmd: &Cmd| me.command(sid, &actor, cmd);
            let _ = script::run(&ctx, &actor, &spec, line, cancel.as_deref(), &mut h);
            ctx.log(2, &actor, &format!("Ending stream {sid}"));
        }));
        Ok(())
    }

    // ----- the wire -----

    fn write_frame(&self, actor: &str, typ: u8, fl: u8, sid: u32, payload: &[u8]) -> R<()> {
        let wire = frame::encode(typ, fl, sid, payload).map_err(Fail)?;
        self.ctx.log(
            3,
            actor,
            &format!(
                "tx: stream: {sid}, type: {} ({typ}), flags: 0x{fl:02x}, size: {}",
                frame::type_name(typ),
                payload.len()
            ),
        );
        let r = lock(&self.writer).write_all(&wire);
        if let Err(e) = r {
            return self.soft_fail(actor, format!("Write failed: {e}"));
        }
        Ok(())
    }

    /// Read exactly `n` bytes through the reader's buffer.
    fn get_bytes(&self, rd: &mut Reader, n: usize) -> Result<Vec<u8>, String> {
        let timeout = *lock(&self.timeout);
        let deadline = Instant::now() + Duration::from_secs_f64(timeout.max(0.001));
        let mut chunk = [0u8; 16384];
        while rd.buf.len() - rd.pos < n {
            if self.cancelled() {
                return Err("stopped".into());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("HTTP2 rx timeout ({timeout:.3}s)"));
            }
            rd.sock
                .set_read_timeout(left.min(Duration::from_millis(100)));
            match rd.sock.read(&mut chunk) {
                Ok(0) => return Err("HTTP2 rx EOF".into()),
                Ok(k) => http::append_compacting(&mut rd.buf, &mut rd.pos, &chunk[..k]),
                Err(e) if http::retryable(&e) => {}
                Err(e) => return Err(format!("HTTP2 rx failed ({e})")),
            }
        }
        let v = rd.buf[rd.pos..rd.pos + n].to_vec();
        rd.pos += n;
        Ok(v)
    }

    /// Read one whole frame; the error says which part could not be read.
    fn read_frame(&self) -> Result<(Head, Vec<u8>), (String, &'static str)> {
        let mut rd = lock(&self.reader);
        let hb = self
            .get_bytes(&mut rd, 9)
            .map_err(|e| (e, "could not get frame header"))?;
        let mut h9 = [0u8; 9];
        h9.copy_from_slice(&hb);
        let head = Head::parse(&h9);
        self.ctx.log(
            3,
            &self.sess,
            &format!(
                "rx: stream: {}, type: {} ({}), flags: 0x{:02x}, size: {}",
                head.stream,
                frame::type_name(head.typ),
                head.typ,
                head.flags,
                head.len
            ),
        );
        if let Some(m) = explain_flags(head.flags, head.typ) {
            self.ctx.log(3, &self.sess, &m);
        }
        let data = self
            .get_bytes(&mut rd, head.len as usize)
            .map_err(|e| (e, "could not get frame body"))?;
        Ok((head, data))
    }

    /// Next frame queued for stream `sid`, reading the socket if no other
    /// stream is. `None` when the connection failed in `non_fatal` mode.
    fn rxstuff(&self, sid: u32, actor: &str) -> R<Option<Frame>> {
        let mut st = self.st();
        loop {
            let k = st.idx(sid)?;
            if let Some(f) = st.streams[k].queue.pop_front() {
                st.streams[k].frame = None;
                return Ok(Some(f));
            }
            if st.dead {
                return Ok(None);
            }
            if self.cancelled() {
                return Err(self.ctx.aborted_err());
            }
            if !st.reading && st.pending.is_none() {
                st.reading = true;
                drop(st);
                let r = self.read_frame();
                st = self.st();
                st.reading = false;
                let res = match r {
                    Ok((h, d)) => self.process(&mut st, h, d),
                    Err((detail, what)) => {
                        st.dead = true;
                        if !self.cancelled() {
                            self.ctx.log(3, &self.sess, &detail);
                        }
                        self.soft_fail(actor, what.to_string())
                    }
                };
                self.cond.notify_all();
                if let Err(e) = res {
                    st.dead = true;
                    return Err(e);
                }
                continue;
            }
            st = self
                .cond
                .wait_timeout(st, Duration::from_millis(100))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Apply a received frame to its stream and queue it there.
    fn process(&self, st: &mut State, head: Head, data: Vec<u8>) -> R<()> {
        let Ok(k) = st.idx(head.stream) else {
            st.pending = Some((head, data));
            return Ok(());
        };
        let actor = format!("{}.{}", self.sess, st.streams[k].name);
        if let Some(c) = &st.cont
            && (head.typ != types::CONTINUATION || c.stream != head.stream)
        {
            bail!("Expected CONTINUATION frame for stream {}", c.stream);
        }
        let meta = match frame::parse(head.typ, head.flags, &data) {
            Ok(m) => m,
            Err(b) if b.soft => {
                self.soft_fail(&actor, b.msg)?;
                degraded_meta(&head, &data)
            }
            Err(b) => return Err(Fail(b.msg)),
        };
        let log = |lvl: u8, m: &str| self.ctx.log(lvl, &actor, m);
        match &meta {
            Meta::Data { padded, body } => {
                if head.flags & flags::PADDED != 0 {
                    log(4, &format!("padding: {padded:3}"));
                }
                let n = body.len() as i64;
                let s = &mut st.streams[k];
                if s.id != 0 {
                    s.ws -= n;
                }
                if body.is_empty() {
                    log(4, &format!("s{} - no data", s.id));
                } else {
                    s.body.get_or_insert_with(Vec::new).extend_from_slice(body);
                }
                st.ws -= n;
            }
            Meta::Headers {
                padded,
                prio,
                block,
                ..
            } => {
                if head.flags & flags::PADDED != 0 && head.typ != types::CONTINUATION {
                    log(4, &format!("padding: {padded:3}"));
                }
                if head.typ == types::CONTINUATION {
                    let Some(c) = st.cont.as_mut() else {
                        bail!(
                            "CONTINUATION frame on stream {} without HEADERS",
                            head.stream
                        );
                    };
                    c.block.extend_from_slice(block);
                } else {
                    let to_req = head.typ == types::PUSH_PROMISE || self.is_server;
                    let s = &mut st.streams[k];
                    if to_req {
                        s.req.clear();
                    } else {
                        s.resp.clear();
                    }
                    if let Some(p) = prio {
                        s.dependency = p.stream;
                        s.weight = u32::from(p.weight);
                        log(4, &format!("stream->dependency: {}", p.stream));
                        log(4, &format!("stream->weight: {}", p.weight));
                        if p.exclusive {
                            st.exclusive_dependency(k);
                        }
                    }
                    st.cont = Some(HdrBlock {
                        stream: head.stream,
                        to_req,
                        block: block.clone(),
                    });
                }
                if head.flags & flags::END_HEADERS != 0
                    && let Some(c) = st.cont.take()
                {
                    self.decode_into(st, k, &c)?;
                }
            }
            Meta::Priority(p) => {
                let s = &mut st.streams[k];
                s.dependency = p.stream;
                s.weight = u32::from(p.weight);
                if p.exclusive {
                    st.exclusive_dependency(k);
                }
                log(3, &format!("prio->stream: {}", p.stream));
                log(3, &format!("prio->weight: {}", p.weight));
            }
            Meta::Rst(e) => {
                log(2, "ouch");
                log(4, &format!("rst->err: {} ({e})", frame::error_name(*e)));
            }
            Meta::Settings { pairs, .. } => {
                for &(id, v) in pairs {
                    let name = frame::SETTINGS
                        .get(id as usize)
                        .copied()
                        .unwrap_or("unknown");
                    if id == 1 {
                        st.enc.resize(v);
                    }
                    log(4, &format!("settings->{name} ({id}): {}", v as i32));
                }
            }
            Meta::Ping { data, .. } => log(4, &format!("ping->data: {}", c_str(data))),
            Meta::Goaway { last, err, debug } => {
                log(3, &format!("goaway->laststream: {last}"));
                log(
                    3,
                    &format!("goaway->err: {} ({err})", frame::error_name(*err)),
                );
                if let Some(d) = debug {
                    log(3, &format!("goaway->debug: {}", c_str(d)));
                }
            }
            Meta::WinUp(n) => log(3, &format!("winup->size: {}", *n as i32)),
        }
        st.streams[k].queue.push_back(Frame { head, data, meta });
        Ok(())
    }

    fn decode_into(&self, st: &mut State, k: usize, c: &HdrBlock) -> R<()> {
        let (hdrs, err) = hpack::decode_block(&mut st.dec, &c.block);
        let s = &mut st.streams[k];
        let target = if c.to_req { &mut s.req } else { &mut s.resp };
        for h in hdrs {
            if target.len() >= MAX_HDR {
                return self.soft_fail(
                    &self.sess,
                    format!("Max number of headers reached ({MAX_HDR})"),
                );
            }
            self.ctx.log(
                4,
                &self.sess,
                &format!(
                    "header[{:2}]: {} : {}",
                    target.len(),
                    latin1(&h.name),
                    latin1(&h.value)
                ),
            );
            target.push(h);
        }
        if let Some(e) = err {
            let msg = format!("Header decoding failed ({e})");
            if self.fatal() {
                return Err(Fail(msg));
            }
            self.ctx.log(4, &self.sess, &msg);
        }
        Ok(())
    }

    // ----- stream commands -----

    fn command(&self, sid: u32, actor: &str, cmd: &Cmd) -> R<()> {
        match cmd.args[0].as_str() {
            "txreq" | "txresp" | "txpush" | "txcont" => self.tx11obj(sid, actor, cmd),
            "txdata" => self.txdata(sid, actor, cmd),
            "txrst" => {
                let mut err = 0;
                let mut i = 1;
                while i < cmd.args.len() {
                    match cmd.args[i].as_str() {
                        "-err" => {
                            err = error_code(arg(cmd, i + 1)?, "-err")?;
                            i += 1;
                        }
                        a => bail!("Unknown txrst spec: {a}"),
                    }
                    i += 1;
                }
                self.write_frame(actor, types::RST_STREAM, 0, sid, &err.to_be_bytes())
            }
            "txprio" => self.txprio(sid, actor, cmd),
            "txsettings" => self.txsettings(sid, actor, cmd),
            "txping" => {
                let mut data = [0u8; 8];
                let mut have = false;
                let mut fl = 0;
                let mut i = 1;
                while i < cmd.args.len() {
                    match cmd.args[i].as_str() {
                        "-data" => {
                            if have {
                                bail!("this frame already has data");
                            }
                            let d = bytes(arg(cmd, i + 1)?);
                            if d.len() != 8 {
                                bail!("data must be a 8-char string, found  ({})", cmd.args[i + 1]);
                            }
                            data.copy_from_slice(&d);
                            have = true;
                            i += 1;
                        }
                        "-ack" => fl |= flags::ACK,
                        a => bail!("Unknown txping spec: {a}"),
                    }
                    i += 1;
                }
                self.write_frame(actor, types::PING, fl, sid, &data)
            }
            "txgoaway" => {
                let (mut err, mut last) = (0u32, 0u32);
                let mut debug: Option<Vec<u8>> = None;
                let mut i = 1;
                while i < cmd.args.len() {
                    match cmd.args[i].as_str() {
                        "-err" => err = error_code(arg(cmd, i + 1)?, "-err")?,
                        "-laststream" => last = strtou32(arg(cmd, i + 1)?, "-laststream", 31)?,
                        "-debug" => {
                            if debug.is_some() {
                                bail!("this frame already has debug data");
                            }
                            debug = Some(bytes(arg(cmd, i + 1)?));
                        }
                        a => bail!("Unknown txgoaway spec: {a}"),
                    }
                    i += 2;
                }
                let mut p = last.to_be_bytes().to_vec();
                p.extend_from_slice(&err.to_be_bytes());
                p.extend_from_slice(&debug.unwrap_or_default());
                self.write_frame(actor, types::GOAWAY, 0, sid, &p)
            }
            "txwinup" => {
                let mut size = 0u32;
                let mut i = 1;
                if cmd.args.len() < 3 {
                    bail!("txwinup needs -size INT");
                }
                while i < cmd.args.len() {
                    match cmd.args[i].as_str() {
                        "-size" => size = strtou32(arg(cmd, i + 1)?, "-size", 0)?,
                        a => bail!("Unknown txwinup spec: {a}"),
                    }
                    i += 2;
                }
                {
                    let mut st = self.st();
                    let k = st.idx(sid)?;
                    if sid == 0 {
                        st.ws += i64::from(size);
                    }
                    st.streams[k].ws += i64::from(size);
                }
                self.write_frame(actor, types::WINDOW_UPDATE, 0, sid, &size.to_be_bytes())
            }
            "sendhex" => {
                if cmd.args.len() != 2 {
                    bail!("sendhex takes exactly one argument");
                }
                let data = http::hex_to_bin(&cmd.args[1])?;
                self.ctx.dump(4, actor, "sendhex", &latin1(&data));
                let r = lock(&self.writer).write_all(&data);
                if let Err(e) = r {
                    return self.soft_fail(actor, format!("Write failed: {e}"));
                }
                Ok(())
            }
            "rxhdrs" => self.rx_seq(sid, actor, cmd, types::HEADERS, "rxhdrs"),
            "rxpush" => self.rx_seq(sid, actor, cmd, types::PUSH_PROMISE, "rxpush"),
            "rxcont" => self.rx_seq(sid, actor, cmd, types::CONTINUATION, "rxcont"),
            "rxdata" => self.rx_seq(sid, actor, cmd, types::DATA, "rxdata"),
            "rxreq" | "rxresp" => self.rxmsg(sid, actor, cmd),
            "rxprio" => self.rx_one(sid, actor, cmd, types::PRIORITY),
            "rxrst" => self.rx_one(sid, actor, cmd, types::RST_STREAM),
            "rxsettings" => self.rx_one(sid, actor, cmd, types::SETTINGS),
            "rxping" => self.rx_one(sid, actor, cmd, types::PING),
            "rxgoaway" => self.rx_one(sid, actor, cmd, types::GOAWAY),
            "rxwinup" => self.rx_one(sid, actor, cmd, types::WINDOW_UPDATE),
            "rxframe" => match self.rxstuff(sid, actor)? {
                Some(f) => {
                    let mut st = self.st();
                    let k = st.idx(sid)?;
                    st.streams[k].frame = Some(f);
                    Ok(())
                }
                None => bail!("No frame received"),
            },
            "expect" => {
                if cmd.args.len() != 4 {
                    bail!("expect needs exactly 3 arguments: LHS OP RHS");
                }
                let (l, r) = {
                    let st = self.st();
                    let k = st.idx(sid)?;
                    (
                        self.resolve(&st, k, &cmd.args[1])?,
                        self.resolve(&st, k, &cmd.args[3])?,
                    )
                };
                let msg = http::expect_values(
                    &cmd.args[1],
                    l.as_deref(),
                    &cmd.args[2],
                    &cmd.args[3],
                    r.as_deref(),
                )?;
                self.ctx.log(4, actor, &msg);
                Ok(())
            }
            "gunzip" => {
                let mut st = self.st();
                let k = st.idx(sid)?;
                let body = st.streams[k].body.clone().unwrap_or_default();
                match http::gunzip_bytes(&body) {
                    Ok(out) => {
                        self.ctx
                            .log(3, actor, &format!("new bodylen {}", out.len()));
                        self.ctx.dump(4, actor, "body", &latin1(&out));
                        st.streams[k].body = Some(out);
                        Ok(())
                    }
                    Err(e) => {
                        drop(st);
                        self.soft_fail(actor, e)
                    }
                }
            }
            "write_body" => {
                if cmd.args.len() != 2 {
                    bail!("write_body takes exactly one file name");
                }
                let f = &cmd.args[1];
                let body = {
                    let st = self.st();
                    let k = st.idx(sid)?;
                    st.streams[k].body.clone().unwrap_or_default()
                };
                std::fs::write(self.ctx.path(f), body)
                    .map_err(|e| fail!("failed to write body to {f}: {e}"))
            }
            "loop" => {
                let n = script::parse_int(cmd.arg(1)?)?;
                let spec = cmd.arg(2)?;
                let line = cmd.lines.get(2).copied().unwrap_or(cmd.line);
                for _ in 0..n.max(0) {
                    let mut h = |c: &Cmd| self.command(sid, actor, c);
                    let cancel = self.cancel.as_deref();
                    if script::run(&self.ctx, actor, spec, line, cancel, &mut h).is_err() {
                        return Err(self.ctx.aborted_err());
                    }
                }
                Ok(())
            }
            _ => match crate::commands::common(&self.ctx, actor, cmd)? {
                true => Ok(()),
                false => bail!("Unknown command: \"{}\"", cmd.args[0]),
            },
        }
    }

    fn only(&self, cmd: &Cmd, server: bool) -> R<()> {
        if self.is_server != server {
            bail!(
                "\"{}\" only possible in {}",
                cmd.args[0],
                if server { "server" } else { "client" }
            );
        }
        Ok(())
    }

    fn set_frame(&self, sid: u32, f: Option<Frame>) -> R<()> {
        let mut st = self.st();
        let k = st.idx(sid)?;
        st.streams[k].frame = f;
        Ok(())
    }

    fn check_type(f: &Frame, want: u8, n: u32, what: &str) -> R<()> {
        if f.head.typ != want {
            bail!(
                "Frame #{n} for {what} was of type {} ({}) instead of {} ({want})",
                frame::type_name(f.head.typ),
                f.head.typ,
                frame::type_name(want)
            );
        }
        Ok(())
    }

    /// `rxhdrs`, `rxpush`, `rxcont`, `rxdata` with `-some N` / `-all`.
    fn rx_seq(&self, sid: u32, actor: &str, cmd: &Cmd, first: u8, what: &str) -> R<()> {
        let mut times = 1u32;
        let mut all = false;
        let mut i = 1;
        while i < cmd.args.len() {
            match cmd.args[i].as_str() {
                "-some" => {
                    times = strtou32(arg(cmd, i + 1)?, "-some", 0)?;
                    if times == 0 {
                        bail!(
                            "-some argument must be more than 0 (found \"{}\")",
                            cmd.args[i + 1]
                        );
                    }
                    i += 1;
                }
                "-all" => all = true,
                a => bail!("Unknown {what} spec: {a}"),
            }
            i += 1;
        }
        let (end_flag, next) = match first {
            types::DATA => (flags::END_STREAM, types::DATA),
            _ => (flags::END_HEADERS, types::CONTINUATION),
        };
        let mut want = first;
        let mut rcv = 0u32;
        let last = loop {
            let Some(f) = self.rxstuff(sid, actor)? else {
                break None;
            };
            rcv += 1;
            Self::check_type(&f, want, rcv, what)?;
            want = next;
            let done = f.head.flags & end_flag != 0;
            if !(rcv < times || (all && !done)) {
                break Some(f);
            }
        };
        self.set_frame(sid, last)
    }

    fn rxmsg(&self, sid: u32, actor: &str, cmd: &Cmd) -> R<()> {
        let what = cmd.args[0].as_str();
        // Like varnishtest, arguments (`-no_obj`...) are ignored.
        self.only(cmd, what == "rxreq")?;
        let Some(mut f) = self.rxstuff(sid, actor)? else {
            return Ok(());
        };
        let mut rcv = 1;
        Self::check_type(&f, types::HEADERS, rcv, what)?;
        let mut end_stream = f.head.flags & flags::END_STREAM != 0;
        while f.head.flags & flags::END_HEADERS == 0 {
            let Some(n) = self.rxstuff(sid, actor)? else {
                return Ok(());
            };
            f = n;
            rcv += 1;
            Self::check_type(&f, types::CONTINUATION, rcv, what)?;
        }
        let mut last = Some(f);
        while !end_stream {
            let Some(n) = self.rxstuff(sid, actor)? else {
                last = None;
                break;
            };
            rcv += 1;
            Self::check_type(&n, types::DATA, rcv, what)?;
            end_stream = n.head.flags & flags::END_STREAM != 0;
            last = Some(n);
        }
        self.set_frame(sid, last)
    }

    fn rx_one(&self, sid: u32, actor: &str, cmd: &Cmd, want: u8) -> R<()> {
        if let Some(a) = cmd.args.get(1) {
            bail!("Unknown {} spec: {a}", cmd.args[0]);
        }
        let f = self.rxstuff(sid, actor)?;
        let bad = f
            .as_ref()
            .filter(|f| f.head.typ != want)
            .map(|f| f.head.typ);
        self.set_frame(sid, f)?;
        if let Some(t) = bad {
            bail!(
                "Wrong frame type {} ({t}) wanted {}",
                frame::type_name(t),
                frame::type_name(want)
            );
        }
        Ok(())
    }

    fn tx11obj(&self, sid: u32, actor: &str, cmd: &Cmd) -> R<()> {
        let what = cmd.args[0].as_str();
        let (is_req, is_resp, is_push, is_cont) = (
            what == "txreq",
            what == "txresp",
            what == "txpush",
            what == "txcont",
        );
        let mut typ = types::CONTINUATION;
        let mut fl = flags::END_HEADERS;
        let mut status_done = true;
        let mut req_done = true;
        if is_req {
            self.only(cmd, false)?;
            typ = types::HEADERS;
            fl |= flags::END_STREAM;
            req_done = false;
        } else if is_resp {
            self.only(cmd, true)?;
            typ = types::HEADERS;
            fl |= flags::END_STREAM;
            status_done = false;
        } else if is_push {
            self.only(cmd, true)?;
            typ = types::PUSH_PROMISE;
            req_done = false;
        }
        let (mut path_done, mut method_done, mut scheme_done) = (req_done, req_done, req_done);
        let mut block = Vec::new();
        let mut promised = 0u32;
        let mut body: Option<Vec<u8>> = None;
        let mut pad: Option<Vec<u8>> = None;
        let (mut dep, mut weight, mut exclusive) = (0u32, 16u32, false);
        let mut gziplevel = 0u32;
        let mut st = self.st();
        let enc = |st: &mut State, block: &mut Vec<u8>, n: &[u8], v: &[u8]| {
            hpack::encode_literal(
                block,
                &mut st.enc,
                Indexing::Not,
                Name::Literal(n, false),
                v,
                false,
            )
            .map_err(|e| fail!("{what}: {e}"))
        };
        let av = &cmd.args;
        let mut i = 1;
        while i < av.len() {
            let a = av[i].as_str();
            let req_like = is_req || is_push;
            match a {
                "-noadd" => {
                    (status_done, path_done, method_done, scheme_done) = (true, true, true, true);
                }
                "-status" if is_resp => {
                    enc(&mut st, &mut block, b":status", &bytes(arg(cmd, i + 1)?))?;
                    status_done = true;
                    i += 1;
                }
                "-url" if req_like => {
                    enc(&mut st, &mut block, b":path", &bytes(arg(cmd, i + 1)?))?;
                    path_done = true;
                    i += 1;
                }
                "-method" | "-req" if req_like => {
                    enc(&mut st, &mut block, b":method", &bytes(arg(cmd, i + 1)?))?;
                    method_done = true;
                    i += 1;
                }
                "-scheme" if req_like => {
                    enc(&mut st, &mut block, b":scheme", &bytes(arg(cmd, i + 1)?))?;
                    scheme_done = true;
                    i += 1;
                }
                "-hdr" => {
                    if av.len() < i + 3 {
                        bail!("-hdr takes two arguments in http2");
                    }
                    enc(&mut st, &mut block, &bytes(&av[i + 1]), &bytes(&av[i + 2]))?;
                    i += 2;
                }
                "-idxHdr" => {
                    let n = strtou32(arg(cmd, i + 1)?, "-idxHdr", 0)?;
                    hpack::encode_indexed(&mut block, n);
                    i += 1;
                }
                "-litIdxHdr" => {
                    let how = indexing_arg(arg(cmd, i + 1)?, "-litidxHdr")?;
                    let n = strtou32(arg(cmd, i + 2)?, "second -litidxHdr arg", 0)?;
                    let huff = huff_arg(arg(cmd, i + 3)?, "third -litHdr")?;
                    let v = bytes(arg(cmd, i + 4)?);
                    hpack::encode_literal(&mut block, &mut st.enc, how, Name::Index(n), &v, huff)
                        .map_err(|e| fail!("-litIdxHdr: {e}"))?;
                    i += 4;
                }
                "-litHdr" => {
                    let how = indexing_arg(arg(cmd, i + 1)?, "-litHdr")?;
                    let nh = huff_arg(arg(cmd, i + 2)?, "second -litHdr")?;
                    let n = bytes(arg(cmd, i + 3)?);
                    let vh = huff_arg(arg(cmd, i + 4)?, "fourth -litHdr")?;
                    let v = bytes(arg(cmd, i + 5)?);
                    hpack::encode_literal(
                        &mut block,
                        &mut st.enc,
                        how,
                        Name::Literal(&n, nh),
                        &v,
                        vh,
                    )
                    .map_err(|e| fail!("-litHdr: {e}"))?;
                    i += 5;
                }
                "-nostrend" => fl &= !flags::END_STREAM,
                "-nohdrend" => fl &= !flags::END_HEADERS,
                "-promised" if is_push => {
                    promised = strtou32(arg(cmd, i + 1)?, "-promised", 31)?;
                    i += 1;
                }
                "-pad" | "-padlen" if !is_cont => {
                    if pad.is_some() {
                        bail!("{what}: padding given twice");
                    }
                    pad = Some(text_or_synth(a, "-pad", arg(cmd, i + 1)?)?);
                    i += 1;
                }
                "-body" | "-bodyfrom" | "-bodylen" | "-gzipbody" | "-gziplen"
                    if is_req || is_resp =>
                {
                    if body.is_some() {
                        bail!("{what}: body given twice");
                    }
                    let v = arg(cmd, i + 1)?;
                    body = Some(match a {
                        "-body" => bytes(v),
                        "-bodyfrom" => std::fs::read(self.ctx.path(v))
                            .map_err(|e| fail!("cannot read -bodyfrom file {v}: {e}"))?,
                        "-bodylen" => http::synth_body(strtou32(v, "-bodylen", 0)? as usize),
                        _ => {
                            let raw = if a == "-gzipbody" {
                                bytes(v)
                            } else {
                                http::synth_body(strtou32(v, "-gziplen", 0)? as usize)
                            };
                            let g = http::gzip(&raw, gziplevel)?;
                            self.ctx.log(3, actor, &format!("new bodylen {}", g.len()));
                            enc(&mut st, &mut block, b":content-encoding", b"gzip")?;
                            g
                        }
                    });
                    fl &= !flags::END_STREAM;
                    i += 1;
                }
                "-gziplevel" | "-gzipresidual" if is_req || is_resp => {
                    let n = strtou32(arg(cmd, i + 1)?, a, 0)?;
                    if a == "-gziplevel" {
                        gziplevel = n.min(9);
                    }
                    i += 1;
                }
                "-dep" if is_req || is_resp => {
                    dep = strtou32(arg(cmd, i + 1)?, "-dep", 0)?;
                    fl |= flags::PRIORITY;
                    i += 1;
                }
                "-ex" if is_req || is_resp => {
                    exclusive = true;
                    fl |= flags::PRIORITY;
                }
                "-weight" if is_req || is_resp => {
                    weight = strtou32(arg(cmd, i + 1)?, "-weight", 8)?;
                    fl |= flags::PRIORITY;
                    i += 1;
                }
                _ => bail!("Unknown {what} spec: {a}"),
            }
            i += 1;
        }
        if !status_done {
            enc(&mut st, &mut block, b":status", b"200")?;
        }
        if !path_done {
            enc(&mut st, &mut block, b":path", b"/")?;
        }
        if !method_done {
            enc(&mut st, &mut block, b":method", b"GET")?;
        }
        if !scheme_done {
            enc(&mut st, &mut block, b":scheme", b"http")?;
        }
        let mut payload = Vec::with_capacity(block.len() + 16);
        if let Some(p) = &pad {
            if p.len() > 255 {
                bail!("Padding is limited to 255 bytes");
            }
            fl |= flags::PADDED;
            payload.push(p.len() as u8);
        }
        if fl & flags::PRIORITY != 0 {
            let k = st.idx(sid)?;
            st.streams[k].weight = weight & 0xff;
            st.streams[k].dependency = dep;
            let e = if exclusive { 1u32 << 31 } else { 0 };
            payload.extend_from_slice(&(dep | e).to_be_bytes());
            payload.push((weight & 0xff) as u8);
            self.ctx
                .log(4, actor, &format!("stream->dependency: {dep}"));
            self.ctx
                .log(4, actor, &format!("stream->weight: {}", weight & 0xff));
            if exclusive {
                st.exclusive_dependency(k);
            }
        }
        if is_push {
            payload.extend_from_slice(&promised.to_be_bytes());
        }
        payload.extend_from_slice(&block);
        if let Some(p) = &pad {
            payload.extend_from_slice(p);
        }
        drop(st);
        self.write_frame(actor, typ, fl, sid, &payload)?;
        if let Some(b) = body {
            self.write_frame(actor, types::DATA, flags::END_STREAM, sid, &b)?;
        }
        Ok(())
    }

    fn txdata(&self, sid: u32, actor: &str, cmd: &Cmd) -> R<()> {
        let mut fl = flags::END_STREAM;
        let mut body: Option<Vec<u8>> = None;
        let mut pad: Option<Vec<u8>> = None;
        let mut i = 1;
        while i < cmd.args.len() {
            let a = cmd.args[i].as_str();
            match a {
                "-data" | "-datalen" => {
                    if body.is_some() {
                        bail!("txdata: data given twice");
                    }
                    body = Some(text_or_synth(a, "-data", arg(cmd, i + 1)?)?);
                    i += 1;
                }
                "-pad" | "-padlen" => {
                    if pad.is_some() {
                        bail!("txdata: padding given twice");
                    }
                    pad = Some(text_or_synth(a, "-pad", arg(cmd, i + 1)?)?);
                    i += 1;
                }
                "-nostrend" => fl &= !flags::END_STREAM,
                _ => bail!("Unknown txdata spec: {a}"),
            }
            i += 1;
        }
        let body = body.unwrap_or_default();
        let payload = match pad {
            Some(p) => {
                if p.len() > 255 {
                    bail!("Padding is limited to 255 bytes");
                }
                fl |= flags::PADDED;
                let mut v = vec![p.len() as u8];
                v.extend_from_slice(&body);
                v.extend_from_slice(&p);
                v
            }
            None => body,
        };
        self.write_frame(actor, types::DATA, fl, sid, &payload)
    }

    fn txprio(&self, sid: u32, actor: &str, cmd: &Cmd) -> R<()> {
        let (mut dep, mut weight, mut exclusive) = (0u32, 0u32, false);
        let mut i = 1;
        while i < cmd.args.len() {
            match cmd.args[i].as_str() {
                "-stream" => {
                    dep = strtou32(arg(cmd, i + 1)?, "-stream", 0)?;
                    i += 1;
                }
                "-ex" => exclusive = true,
                "-weight" => {
                    weight = strtou32(arg(cmd, i + 1)?, "-weight", 8)?;
                    i += 1;
                }
                a => bail!("Unknown txprio spec: {a}"),
            }
            i += 1;
        }
        {
            let mut st = self.st();
            let k = st.idx(sid)?;
            st.streams[k].weight = weight & 0xff;
            st.streams[k].dependency = dep;
            if exclusive {
                st.exclusive_dependency(k);
            }
        }
        let e = if exclusive { 1u32 << 31 } else { 0 };
        let mut p = (dep | e).to_be_bytes().to_vec();
        p.push((weight & 0xff) as u8);
        self.write_frame(actor, types::PRIORITY, 0, sid, &p)
    }

    fn txsettings(&self, sid: u32, actor: &str, cmd: &Cmd) -> R<()> {
        let mut p = Vec::new();
        let mut fl = 0;
        // The table resize and window changes take effect with the frame,
        // atomically with respect to frames being processed.
        let mut st = self.st();
        let mut i = 1;
        while i < cmd.args.len() {
            let a = cmd.args[i].as_str();
            let mut put = |id: u16, v: u32| {
                p.extend_from_slice(&id.to_be_bytes());
                p.extend_from_slice(&v.to_be_bytes());
            };
            match a {
                "-push" => {
                    let v = match arg(cmd, i + 1)? {
                        "false" => 0,
                        "true" => 1,
                        o => bail!("Push parameter is either \"true\" or \"false\", not {o}"),
                    };
                    put(2, v);
                    i += 1;
                }
                "-hdrtbl" | "-maxstreams" | "-winsize" | "-framesize" | "-hdrsize" => {
                    let v = strtou32(arg(cmd, i + 1)?, &a[1..], 0)?;
                    let id = match a {
                        "-hdrtbl" => 1,
                        "-maxstreams" => 3,
                        "-winsize" => 4,
                        "-framesize" => 5,
                        _ => 6,
                    };
                    put(id, v);
                    if id == 1 {
                        st.dec.resize(v);
                    } else if id == 4 {
                        let delta = i64::from(v) - st.iws;
                        for s in &mut st.streams {
                            s.ws += delta;
                        }
                        st.iws = i64::from(v);
                    }
                    i += 1;
                }
                "-ack" => fl |= flags::ACK,
                _ => bail!("Unknown txsettings spec: {a}"),
            }
            i += 1;
        }
        let r = self.write_frame(actor, types::SETTINGS, fl, sid, &p);
        drop(st);
        r
    }

    /// Resolve an `expect` operand on stream `k`.
    fn resolve(&self, st: &State, k: usize, spec: &str) -> R<Option<String>> {
        let s = &st.streams[k];
        let f = s.frame.as_ref();
        let last = |t: u8| -> R<&Frame> {
            match f {
                Some(f) if f.head.typ == t => Ok(f),
                _ => bail!("Last frame was not of type {}", frame::type_name(t)),
            }
        };
        let num = |v: i64| Ok(Some(v.to_string()));
        match spec {
            "ping.data" | "ping.ack" => {
                let Meta::Ping { data, ack } = &last(types::PING)?.meta else {
                    bail!("Last frame was not of type PING");
                };
                return Ok(Some(if spec == "ping.ack" {
                    ack.to_string()
                } else {
                    c_str(data)
                }));
            }
            "winup.size" => {
                if let Meta::WinUp(n) = last(types::WINDOW_UPDATE)?.meta {
                    return num(i64::from(n));
                }
            }
            "prio.stream" | "prio.exclusive" | "prio.weight" => {
                if let Meta::Priority(p) = last(types::PRIORITY)?.meta {
                    return Ok(Some(match spec {
                        "prio.stream" => p.stream.to_string(),
                        "prio.exclusive" => p.exclusive.to_string(),
                        _ => p.weight.to_string(),
                    }));
                }
            }
            "rst.err" => {
                if let Meta::Rst(e) = last(types::RST_STREAM)?.meta {
                    return num(i64::from(e));
                }
            }
            "push.id" => {
                if let Meta::Headers {
                    promised: Some(p), ..
                } = last(types::PUSH_PROMISE)?.meta
                {
                    return num(i64::from(p));
                }
            }
            "stream.window" => return num(if s.id != 0 { s.ws } else { st.ws }),
            "stream.weight" => return Ok((s.id != 0).then(|| s.weight.to_string())),
            "stream.dependency" => return Ok((s.id != 0).then(|| s.dependency.to_string())),
            _ => {}
        }
        if let Some(k) = spec.strip_prefix("settings.") {
            let f = last(types::SETTINGS)?;
            let Meta::Settings { known, .. } = &f.meta else {
                bail!("Last frame was not of type SETTINGS");
            };
            let idx = match k {
                "ack" => return Ok(Some((f.head.flags & flags::ACK != 0).to_string())),
                "push" => return Ok(known[2].map(|v| (v == 1).to_string())),
                "hdrtbl" => Some(1),
                "maxstreams" => Some(3),
                "winsize" => Some(4),
                "framesize" => Some(5),
                "hdrsize" => Some(6),
                _ => None,
            };
            if let Some(i) = idx {
                return Ok(known[i].map(|v| (v as i32).to_string()));
            }
        }
        if let Some(k) = spec.strip_prefix("goaway.")
            && let Meta::Goaway {
                last: l,
                err,
                debug,
            } = &last(types::GOAWAY)?.meta
        {
            match k {
                "err" => return num(i64::from(*err)),
                "laststream" => return num(i64::from(*l)),
                "debug" => return Ok(debug.as_deref().map(c_str)),
                _ => {}
            }
        }
        if let Some(k) = spec.strip_prefix("frame.") {
            let Some(f) = f else {
                bail!("No frame received yet.");
            };
            match k {
                "data" => return Ok(Some(c_str(&f.data))),
                "type" => return num(i64::from(f.head.typ)),
                "size" => return num(i64::from(f.head.len)),
                "stream" => return num(i64::from(f.head.stream)),
                "padding" => {
                    return match &f.meta {
                        Meta::Data { padded, .. } | Meta::Headers { padded, .. }
                            if f.head.typ != types::CONTINUATION =>
                        {
                            num(i64::from(*padded))
                        }
                        _ => bail!("Last frame was not of type DATA, HEADERS or PUSH"),
                    };
                }
                _ => {}
            }
        }
        if let Some(rest) = spec
            .strip_prefix("tbl.dec")
            .map(|r| (r, &st.dec))
            .or_else(|| spec.strip_prefix("tbl.enc").map(|r| (r, &st.enc)))
        {
            let (r, t) = rest;
            match r {
                ".size" => return num(i64::from(t.size())),
                ".maxsize" => return num(i64::from(t.max_size())),
                ".length" => return num(t.len() as i64),
                _ => {}
            }
            if let Some(inner) = r.strip_prefix('[')
                && let Some((n, field)) = inner.split_once(']')
                && let Ok(n) = n.parse::<u32>()
                && (field == ".key" || field == ".value")
            {
                let h = n.checked_add(61).and_then(|i| t.get(i));
                return Ok(h.map(|(k, v)| latin1(if field == ".key" { k } else { v })));
            }
        }
        let rr = spec
            .strip_prefix("req.")
            .map(|r| (r, &s.req))
            .or_else(|| spec.strip_prefix("resp.").map(|r| (r, &s.resp)));
        if let Some((r, h)) = rr {
            return Ok(match r {
                "body" => s.body.as_deref().map(latin1),
                "bodylen" => Some(s.body.as_ref().map_or(0, Vec::len).to_string()),
                "status" => find_header(h, ":status"),
                "url" => find_header(h, ":path"),
                "method" => find_header(h, ":method"),
                "authority" => find_header(h, ":authority"),
                "scheme" => find_header(h, ":scheme"),
                _ => r.strip_prefix("http.").and_then(|n| find_header(h, n)),
            });
        }
        if let Some(i) = frame::ERRORS.iter().position(|e| *e == spec) {
            return Ok(Some(i.to_string()));
        }
        Ok(Some(spec.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_like_strtoul() {
        assert_eq!(strtou32("0x10", "x", 0).unwrap(), 16);
        assert_eq!(strtou32("17", "x", 0).unwrap(), 17);
        assert!(strtou32("1a", "x", 0).is_err());
        assert!(strtou32("256", "-weight", 8).is_err());
        assert_eq!(strtou32("255", "-weight", 8).unwrap(), 255);
        assert_eq!(error_code("COMPRESSION_ERROR", "-err").unwrap(), 9);
        assert_eq!(error_code("12", "-err").unwrap(), 12);
        assert!(error_code("BOGUS", "-err").is_err());
    }

    #[test]
    fn flag_explanations() {
        assert_eq!(explain_flags(1, types::SETTINGS).unwrap(), "flag: ACK");
        assert_eq!(explain_flags(1, types::DATA).unwrap(), "flag: END_STREAM");
        assert_eq!(
            explain_flags(4, types::CONTINUATION).unwrap(),
            "flag: END_TYPE_HEADERS"
        );
        assert!(explain_flags(0, types::DATA).is_none());
        assert_eq!(
            explain_flags(0x40, types::PING).unwrap(),
            "UNKNOWN FLAG(S): 0x40"
        );
    }

    #[test]
    fn c_strings() {
        assert_eq!(c_str(b"ab\0cd"), "ab");
        assert_eq!(
            find_header(
                &[Header {
                    name: b"Foo".to_vec(),
                    value: b"1".to_vec()
                }],
                "foo"
            )
            .as_deref(),
            Some("1")
        );
    }
}
