//! HTTP/2 client sessions (`-p feature=+http2`): after the prior-knowledge
//! preface or an `Upgrade: h2c` from HTTP/1.1, one task per connection
//! owns the socket and runs the frame protocol with varnishd's rules
//! (`lacquer_http::h2` says what each frame means), and one task per
//! stream runs its request through the same state machine as HTTP/1
//! ([`stream::run`]).
//!
//! The connection task reads frames, keeps the HPACK decoder, the
//! receive windows, the stream table and the SETTINGS, answers PING and
//! SETTINGS, refuses what is malformed (RST_STREAM for a stream error,
//! GOAWAY and the end of the session for a connection error) and writes
//! what the streams queue (`stream::Out`) in order: HEADERS split into
//! CONTINUATION frames and DATA within the peer's frame size. Send
//! windows live in [`stream::Flow`], which stream writers charge and this
//! task credits (WINDOW_UPDATE, SETTINGS_INITIAL_WINDOW_SIZE).
//!
//! Logs: frames in and out as `H2RxHdr`/`H2RxBody`/`H2TxHdr`/`H2TxBody`
//! (masked by default) on the session's transaction; each stream's
//! request is a transaction of its own whose `ReqAcct` counts header
//! block and DATA payload bytes.

mod stream;

pub(crate) use stream::log_100;
pub use stream::{StreamHead, StreamIo};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use lacquer_http::BodyKind;
use lacquer_http::h2::frame::{self, Head, flags, types};
use lacquer_http::h2::{Applied, Fault, Settings, code};
use lacquer_http::hpack;
use lacquer_vsl::{Tag, VslBuf};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::pid;
use crate::runtime::counters::Main;
use crate::runtime::msg::ReqMsg;
use crate::runtime::state::Shared;
use crate::runtime::task::{SessInfo, SessTimeouts};
use stream::{Flow, Out, RxChunk, StreamCtx, TxStream};

/// The request an `h2c` upgrade carried: it becomes stream 1.
pub struct Upgraded {
    pub req: ReqMsg,
    pub hdr_bytes: u64,
    pub t_req: f64,
    /// The `Upgrade` and `HTTP2-Settings` fields taken out of it, logged
    /// as `ReqUnset` in its transaction (varnishd's `h2_ou_session`).
    pub unset: Vec<(Bytes, Bytes)>,
}

/// An `h2c` upgrade that ends before its request runs (varnishd's
/// `h2_ou_rel` for unusable `HTTP2-Settings`, `h2_del_req` when no
/// preface follows the 101): the request is a transaction of its own,
/// holding what the upgrade changed in it (`unset`, and the protocol once
/// the 101 went out) and its header bytes, and the session's own
/// accounting is all zeros.
pub fn log_failed_upgrade(
    sh: &Shared,
    svsl: &mut VslBuf,
    hdr_bytes: u64,
    unset: &[(Bytes, Bytes)],
    switched: bool,
) {
    let svxid = svsl.vxid().id();
    let vxid = sh.vxid.next();
    svsl.log(Tag::Link, format_args!("req {vxid} rxreq"));
    let mut vsl = VslBuf::new(sh.vsl.clone(), lacquer_vsl::Vxid::client(vxid));
    vsl.log(Tag::Begin, format_args!("req {svxid} rxreq"));
    for (k, v) in unset {
        vsl.log_header(Tag::ReqUnset, k, v);
    }
    if switched {
        vsl.log_str(Tag::ReqProtocol, "HTTP/2.0");
    }
    vsl.log(
        Tag::ReqAcct,
        format_args!("{hdr_bytes} 0 {hdr_bytes} 0 0 0"),
    );
    vsl.log_str(Tag::End, "");
    vsl.flush();
    svsl.log_str(Tag::ReqAcct, "0 0 0 0 0 0");
}

/// A session's connection-wide facts the streams share.
pub struct SessCtx {
    pub sh: Arc<Shared>,
    pub info: Arc<SessInfo>,
    pub tmo: SessTimeouts,
    pub sock: Option<crate::client::sock::SockCtl>,
    pub svxid: u32,
}

/// Not an error code: the peer sent GOAWAY, so none goes back.
const PEER_GOAWAY: u32 = u32::MAX;

/// Not an error code: a frame over our max_frame_size cannot be read, and
/// varnishd (`h2_rxframe`, "No frame") closes without a GOAWAY.
const NO_FRAME: u32 = u32::MAX - 1;

/// How a session ended, as varnishd's `h2->error`: the connection error
/// code (`NO_ERROR` when the client left or stayed idle too long), and
/// whether a GOAWAY of ours went out for it.
#[derive(Clone, Copy)]
struct Ending {
    code: u32,
    goaway_sent: bool,
}

impl Ending {
    const LEFT: Ending = Ending {
        code: code::NO_ERROR,
        goaway_sent: false,
    };
}

/// varnishd's `h2_connectionerror`: a code that names a connection error,
/// or `PROTOCOL_ERROR` for a stream-only or unknown one.
fn connection_error(c: u32) -> u32 {
    match c {
        code::NO_ERROR
        | code::PROTOCOL_ERROR
        | code::INTERNAL_ERROR
        | code::FLOW_CONTROL_ERROR
        | code::SETTINGS_TIMEOUT
        | code::FRAME_SIZE_ERROR
        | code::COMPRESSION_ERROR
        | code::ENHANCE_YOUR_CALM
        | code::INADEQUATE_SECURITY
        | code::HTTP_1_1_REQUIRED => c,
        _ => code::PROTOCOL_ERROR,
    }
}

/// The session close reason varnishd's HTTP/2 error table gives a
/// connection error, and its counter.
fn close_reason(c: u32) -> (&'static str, Main) {
    match c {
        code::NO_ERROR => ("REM_CLOSE", Main::sc_rem_close),
        code::INTERNAL_ERROR => ("VCL_FAILURE", Main::sc_vcl_failure),
        code::FLOW_CONTROL_ERROR | code::ENHANCE_YOUR_CALM => ("OVERLOAD", Main::sc_overload),
        code::SETTINGS_TIMEOUT => ("RX_TIMEOUT", Main::sc_rx_timeout),
        code::HTTP_1_1_REQUIRED => ("REQ_HTTP20", Main::sc_req_http20),
        _ => ("RX_JUNK", Main::sc_rx_junk),
    }
}

/// The `h2c` upgrade answer.
pub const RESP_101: &[u8] =
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";

/// What the receive side knows of a stream.
struct RxStream {
    /// Where DATA goes; `None` once the peer ended its side.
    rx: Option<mpsc::UnboundedSender<RxChunk>>,
    r_window: i64,
    /// The Content-Length the request announced.
    content_length: Option<u64>,
    received: u64,
    /// Body bytes handed to the stream and not read by it yet.
    buffered: i64,
    /// The receive buffer charged to `h2_rxbuf_storage` (none yet).
    rxbuf: Option<lacquer_cache::Allocation>,
    /// The response ended (END_STREAM sent or the stream reset).
    ended: bool,
    /// The error code of the peer's RST_STREAM while the request ran: as
    /// varnishd's `r2->error`, it goes back in an RST_STREAM of ours when
    /// the request finishes.
    peer_reset: Option<u32>,
    /// A response head went out on the stream.
    head_sent: bool,
}

/// A header block arriving in HEADERS then CONTINUATION frames.
struct Cont {
    sid: u32,
    block: Vec<u8>,
    end_stream: bool,
    hdr_bytes: u64,
}

struct Conn {
    ctx: Arc<SessCtx>,
    local: Settings,
    remote: Settings,
    dec: hpack::Table,
    highest: u32,
    streams: HashMap<u32, RxStream>,
    cont: Option<Cont>,
    /// A header field was refused while its block was decoded: varnishd
    /// 7.1.1 keeps that request as the one being received (`new_req`),
    /// so any next frame is a connection PROTOCOL_ERROR.
    refused_field: bool,
    r_window: i64,
    flow: Arc<Mutex<Flow>>,
    out_tx: mpsc::UnboundedSender<Out>,
    wbuf: Vec<u8>,
    tasks: tokio::task::JoinSet<()>,
    /// The error code of the client's GOAWAY, as a connection error.
    peer_goaway: u32,
    low_water: i64,
    increment: u32,
    /// The largest header list (and header block) accepted: what the
    /// client workspace holds, where varnishd decodes headers (it does not
    /// hold clients to the SETTINGS_MAX_HEADER_LIST_SIZE it announces).
    max_list: u64,
    /// Body bytes taken off the queue since the last socket write (they
    /// leave `Flow::queued` once written).
    drained: usize,
    /// The store request body buffers are charged to (`h2_rxbuf_storage`).
    rxbuf_store: String,
    /// The session's own accounting, varnishd's `ReqAcct` on the session:
    /// frame headers both ways, control frame payloads as body bytes.
    acct: [u64; 4],
}

fn local_settings(sh: &Shared) -> Settings {
    let p = sh.params();
    let clamp = |v: u64| v.min(u64::from(u32::MAX)) as u32;
    Settings {
        header_table_size: clamp(p.bytes(pid!("h2_header_table_size"))),
        enable_push: 1,
        max_concurrent_streams: clamp(p.uint(pid!("h2_max_concurrent_streams"))),
        initial_window_size: clamp(p.bytes(pid!("h2_initial_window_size"))),
        max_frame_size: clamp(p.bytes(pid!("h2_max_frame_size"))),
        max_header_list_size: clamp(p.bytes(pid!("h2_max_header_list_size"))),
    }
}

/// The settings an upgrade's `HTTP2-Settings` header carries, checked as
/// a SETTINGS frame would be; `None` when they are unusable.
pub fn upgrade_settings(v: &[u8]) -> Option<Vec<(u16, u32)>> {
    let pairs = lacquer_http::h2::decode_upgrade_settings(v)?;
    let mut s = Settings::PROTOCOL;
    for &(id, v) in &pairs {
        s.apply(id, v).ok()?;
    }
    Some(pairs)
}

/// Runs an HTTP/2 session on `stream`, whose read buffer `rbuf` starts
/// with the preface (prior knowledge) or, after an upgrade, with whatever
/// the client sent after its HTTP/1 request. Returns the session's close
/// reason (counted), as varnishd's `h2_del_sess` takes it from its error
/// table: `REM_CLOSE` when the client left, went idle or sent a GOAWAY
/// without error; `RX_JUNK` for a protocol error either side named, or a
/// bad preface.
pub async fn serve<S>(
    ctx: Arc<SessCtx>,
    stream: S,
    rbuf: BytesMut,
    svsl: &mut VslBuf,
    upgraded: Option<(Upgraded, Vec<(u16, u32)>)>,
) -> &'static str
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let sh = ctx.sh.clone();
    let (reason, counter) = match run(ctx, stream, rbuf, svsl, upgraded).await {
        Some(end) => close_reason(end.code),
        None => ("RX_JUNK", Main::sc_rx_junk),
    };
    sh.counters.inc(counter);
    reason
}

/// The session itself; what ended it.
async fn run<S>(
    ctx: Arc<SessCtx>,
    stream: S,
    mut rbuf: BytesMut,
    svsl: &mut VslBuf,
    upgraded: Option<(Upgraded, Vec<(u16, u32)>)>,
) -> Option<Ending>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let idle = Duration::from_secs_f64(ctx.tmo.timeout_idle.max(0.001));
    // The preface (an upgraded client sends it after the 101).
    let preface = loop {
        match lacquer_http::h2::preface_state(&rbuf) {
            Some(true) => break true,
            Some(false) => {}
            None => break false,
        }
        rbuf.reserve(4096);
        match tokio::time::timeout(idle, rd.read_buf(&mut rbuf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => break false,
        }
    };
    if !preface {
        svsl.log_str(Tag::Debug, "H2: No/Bad PRISM");
        if let Some((up, _)) = &upgraded {
            log_failed_upgrade(&ctx.sh, svsl, up.hdr_bytes, &up.unset, true);
        }
        return None;
    }
    let _ = rbuf.split_to(lacquer_http::h2::PREFACE.len());
    svsl.log_str(Tag::Debug, "H2: Got pu PRISM");
    let local = local_settings(&ctx.sh);
    let (low_water, increment) = {
        let p = ctx.sh.params();
        (
            p.bytes(pid!("h2_rx_window_low_water")) as i64,
            p.bytes(pid!("h2_rx_window_increment")).min(0x7fff_ffff) as u32,
        )
    };
    let (out_tx, mut out_rx) = mpsc::unbounded_channel();
    let mut c = Conn {
        ctx: ctx.clone(),
        local,
        remote: Settings::PROTOCOL,
        dec: hpack::Table::new(local.header_table_size),
        highest: 0,
        streams: HashMap::new(),
        cont: None,
        refused_field: false,
        // As varnishd: the connection's receive window is taken to start
        // at our initial stream window (what the client may send before
        // a WINDOW_UPDATE is its own business).
        r_window: i64::from(local.initial_window_size),
        flow: Arc::new(Mutex::new(Flow {
            conn_window: 65535,
            streams: HashMap::new(),
            queued: 0,
            queue_waiters: Vec::new(),
            max_frame: Settings::PROTOCOL.max_frame_size as usize,
            dead: false,
        })),
        out_tx,
        wbuf: Vec::new(),
        tasks: tokio::task::JoinSet::new(),
        peer_goaway: code::NO_ERROR,
        low_water,
        increment,
        acct: [0; 4],
        // varnishd announces SETTINGS_MAX_HEADER_LIST_SIZE but decodes
        // up to what the client workspace holds.
        max_list: ctx.sh.params().bytes(pid!("workspace_client")),
        drained: 0,
        rxbuf_store: match ctx.sh.params().get(pid!("h2_rxbuf_storage")) {
            crate::runtime::params::Value::Text(t) => t.clone(),
            _ => "Transient".to_string(),
        },
    };
    let settings = local.encode_changes();
    c.send_frame(svsl, types::SETTINGS, 0, 0, &settings);
    if let Some((up, pairs)) = upgraded {
        for (id, v) in pairs {
            if let Ok(Applied::Set { name, .. }) = c.remote.apply(id, v) {
                svsl.log(Tag::Debug, format_args!("H2SETTING {name}=0x{v:08x}"));
            }
        }
        c.apply_remote_frame_size();
        // As varnishd's h2_ou_session: the upgraded request's stream 1
        // does not raise the highest stream id, so a client may open
        // stream 1 again once it is done.
        c.open_stream(
            svsl,
            1,
            up.req,
            up.hdr_bytes,
            BodyKind::None,
            up.t_req,
            None,
            up.unset,
        );
    }
    // Frames that came in the same read as the preface (a client may send
    // its preface, SETTINGS and first requests in one write) are handled
    // before waiting for more: else they wait for the client's next bytes.
    let mut buffered = !rbuf.is_empty();
    let ending = loop {
        if std::mem::take(&mut buffered) {
            if let Some(e) = c.rx(svsl, &mut rbuf) {
                break e;
            }
            rbuf.reserve(16 * 1024);
            continue;
        }
        if !ctx.sh.is_running() {
            // The cache "process" died (an emulated panic): the
            // connection goes down with it, nothing more is sent.
            c.wbuf.clear();
            break Ending::LEFT;
        }
        if !c.wbuf.is_empty() {
            let buf = std::mem::take(&mut c.wbuf);
            let send = Duration::from_secs_f64(ctx.tmo.send_timeout.max(0.001));
            match tokio::time::timeout(send, wr.write_all(&buf)).await {
                Ok(Ok(())) => {}
                // The client cannot take what is owed it: as gone.
                Ok(Err(_)) | Err(_) => break Ending::LEFT,
            }
        }
        if c.drained > 0 {
            // Written (or dropped, for streams that ended): room again.
            let mut f = c.flow.lock().expect("flow lock");
            f.queued -= std::mem::take(&mut c.drained).min(f.queued);
            f.wake_all();
        }
        tokio::select! {
            biased;
            o = out_rx.recv() => {
                let Some(o) = o else { break Ending::LEFT };
                c.handle_out(svsl, o);
                // Whatever else is queued goes out in the same write.
                while let Ok(o) = out_rx.try_recv() {
                    c.handle_out(svsl, o);
                    if c.wbuf.len() >= 64 * 1024 {
                        break;
                    }
                }
            }
            r = tokio::time::timeout(idle, rd.read_buf(&mut rbuf)) => {
                match r {
                    Err(_) => {
                        // Streams that ended leave their finished tasks
                        // behind until reaped.
                        while c.tasks.try_join_next().is_some() {}
                        if c.streams.is_empty() && c.tasks.is_empty() {
                            svsl.log_str(Tag::Debug, "H2: No frame (hs=TIMEOUT)");
                            break Ending::LEFT;
                        }
                        continue;
                    }
                    Ok(Ok(0)) | Ok(Err(_)) => {
                        svsl.log_str(Tag::Debug, "H2: No frame (hs=EOF)");
                        break Ending::LEFT;
                    }
                    Ok(Ok(_)) => {}
                }
                if let Some(e) = c.rx(svsl, &mut rbuf) {
                    break e;
                }
                rbuf.reserve(16 * 1024);
            }
        }
    };
    if !c.wbuf.is_empty() {
        let buf = std::mem::take(&mut c.wbuf);
        let _ = tokio::time::timeout(
            Duration::from_secs_f64(ctx.tmo.send_timeout.max(0.001)),
            wr.write_all(&buf),
        )
        .await;
    }
    svsl.log(
        Tag::Debug,
        format_args!("H2 CLEANUP {}", frame::error_name(ending.code)),
    );
    // Every stream learns that the connection is gone, and ends.
    {
        let mut f = c.flow.lock().expect("flow lock");
        f.dead = true;
        f.wake_all();
    }
    for s in c.streams.values_mut() {
        if let Some(tx) = s.rx.take() {
            let _ = tx.send(Err(()));
        }
        if let Some(space) = s.rxbuf.take() {
            ctx.sh.cache.release_buffer(&c.rxbuf_store, space);
        }
    }
    drop(out_rx);
    while c.tasks.join_next().await.is_some() {}
    // As varnishd (`h2_new_session` waits for its streams before the
    // session is closed), the connection stays open until the streams
    // still running have ended, whatever ended the session: a client's
    // GOAWAY does not cut it short.
    let _ = wr.shutdown().await;
    if ending.goaway_sent {
        // After a GOAWAY, what the client still sends is read and dropped
        // for a moment, so that closing does not reset the connection
        // before the client has read the GOAWAY.
        let until = tokio::time::Instant::now() + Duration::from_secs(1);
        let mut sink = [0u8; 4096];
        while let Ok(Ok(n)) = tokio::time::timeout_at(until, rd.read(&mut sink)).await {
            if n == 0 {
                break;
            }
        }
    }
    let [rxh, rxb, txh, txb] = c.acct;
    let sh = &ctx.sh;
    sh.counters
        .add(crate::runtime::counters::Main::s_req_hdrbytes, rxh);
    sh.counters
        .add(crate::runtime::counters::Main::s_req_bodybytes, rxb);
    sh.counters
        .add(crate::runtime::counters::Main::s_resp_hdrbytes, txh);
    sh.counters
        .add(crate::runtime::counters::Main::s_resp_bodybytes, txb);
    svsl.log(
        Tag::ReqAcct,
        format_args!("{rxh} {rxb} {} {txh} {txb} {}", rxh + rxb, txh + txb),
    );
    Some(ending)
}

/// A received frame as varnishd logs it: the binary header and body
/// records, and a `Debug` line `H2RXF TYPE[len] 0xflags 0xstream 0xbody`.
fn log_rx_frame(svsl: &mut VslBuf, raw: &[u8]) {
    use std::fmt::Write;
    svsl.log_bytes(Tag::H2RxHdr, &raw[..9]);
    if raw.len() > 9 {
        svsl.log_bytes(Tag::H2RxBody, &raw[9..]);
    }
    if !svsl.enabled(Tag::Debug) {
        return;
    }
    let mut t = String::with_capacity(40 + 2 * raw.len());
    match lacquer_http::h2::rules(raw[3]) {
        Some(_) => t.push_str(frame::type_name(raw[3])),
        None => {
            let _ = write!(t, "0x{:02x}", raw[3]);
        }
    }
    let len = raw.len() - 9;
    let _ = write!(t, "[{len}] 0x{:02x} 0x", raw[4]);
    for b in &raw[5..9] {
        let _ = write!(t, "{b:02x}");
    }
    if len > 0 {
        t.push_str(" 0x");
        for b in &raw[9..] {
            let _ = write!(t, "{b:02x}");
        }
    }
    svsl.log(Tag::Debug, format_args!("H2RXF {t}"));
}

impl Conn {
    /// Handles the complete frames in `rbuf`; how the session ends when
    /// one of them ends it (a GOAWAY of ours is queued for a connection
    /// error).
    fn rx(&mut self, svsl: &mut VslBuf, rbuf: &mut BytesMut) -> Option<Ending> {
        let f = self.read_frames(svsl, rbuf).err()?;
        if let Fault::Conn(NO_FRAME) = f {
            svsl.log_str(Tag::Debug, "H2: No frame (hs=OVERFLOW)");
            return Some(Ending::LEFT);
        }
        if let Fault::Conn(PEER_GOAWAY) = f {
            return Some(Ending {
                code: self.peer_goaway,
                goaway_sent: false,
            });
        }
        self.goaway(svsl, f);
        Some(Ending {
            code: connection_error(f.code()),
            goaway_sent: true,
        })
    }

    /// Queues a frame for the socket, logging it when the mask allows.
    fn send_frame(&mut self, svsl: &mut VslBuf, typ: u8, fl: u8, sid: u32, payload: &[u8]) {
        let head = Head {
            len: payload.len() as u32,
            typ,
            flags: fl,
            stream: sid,
        }
        .encode();
        self.acct[2] += 9;
        if lacquer_http::h2::rules(typ).is_some_and(|r| r.overhead) {
            self.acct[3] += payload.len() as u64;
        }
        svsl.log_bytes(Tag::H2TxHdr, &head);
        if !payload.is_empty() {
            svsl.log_bytes(Tag::H2TxBody, payload);
        }
        self.wbuf.extend_from_slice(&head);
        self.wbuf.extend_from_slice(payload);
    }

    fn rst(&mut self, svsl: &mut VslBuf, sid: u32, err: u32) {
        svsl.log(
            Tag::Debug,
            format_args!("H2: stream {sid}: {}", frame::error_name(err)),
        );
        self.send_frame(svsl, types::RST_STREAM, 0, sid, &err.to_be_bytes());
    }

    fn goaway(&mut self, svsl: &mut VslBuf, f: Fault) {
        let mut p = self.highest.to_be_bytes().to_vec();
        p.extend_from_slice(&f.code().to_be_bytes());
        self.send_frame(svsl, types::GOAWAY, 0, 0, &p);
    }

    fn apply_remote_frame_size(&mut self) {
        let mut f = self.flow.lock().expect("flow lock");
        f.max_frame = self.remote.max_frame_size as usize;
    }

    /// Ends a stream for both sides: its body reader sees an error, its
    /// writer fails.
    fn kill(&mut self, sid: u32) {
        if let Some(s) = self.streams.get_mut(&sid) {
            s.ended = true;
            if let Some(tx) = s.rx.take() {
                let _ = tx.send(Err(()));
            }
        }
        let mut f = self.flow.lock().expect("flow lock");
        if let Some(t) = f.streams.get_mut(&sid) {
            t.reset = true;
            if let Some(w) = t.waker.take() {
                w.wake();
            }
        }
    }

    /// Streams still counted against the concurrency limit.
    fn open_streams(&self) -> usize {
        self.streams.values().filter(|s| !s.ended).count()
    }

    fn handle_out(&mut self, svsl: &mut VslBuf, o: Out) {
        match o {
            Out::Headers { sid, block, end } => {
                let Some(s) = self.streams.get_mut(&sid) else {
                    return;
                };
                if s.ended {
                    return;
                }
                s.head_sent = true;
                if end {
                    s.ended = true;
                }
                let max = self.remote.max_frame_size as usize;
                let mut chunks = block.chunks(max.max(1)).peekable();
                let mut first = true;
                if block.is_empty() {
                    let fl = flags::END_HEADERS | if end { flags::END_STREAM } else { 0 };
                    self.send_frame(svsl, types::HEADERS, fl, sid, &[]);
                    return;
                }
                while let Some(ch) = chunks.next() {
                    let last = chunks.peek().is_none();
                    let mut fl = if last { flags::END_HEADERS } else { 0 };
                    let typ = if first {
                        if end {
                            fl |= flags::END_STREAM;
                        }
                        types::HEADERS
                    } else {
                        types::CONTINUATION
                    };
                    first = false;
                    self.send_frame(svsl, typ, fl, sid, ch);
                }
            }
            Out::Data { sid, data } => {
                self.drained += data.len();
                if self.streams.get(&sid).is_some_and(|s| !s.ended) {
                    self.send_frame(svsl, types::DATA, 0, sid, &data);
                }
            }
            Out::Consumed { sid, n } => {
                let initial = i64::from(self.local.initial_window_size);
                let (low_water, increment) = (self.low_water, i64::from(self.increment));
                let Some(s) = self.streams.get_mut(&sid) else {
                    return;
                };
                s.buffered -= i64::from(n);
                if s.rx.is_none()
                    && s.buffered == 0
                    && let Some(space) = s.rxbuf.take()
                {
                    // The whole body was read: its buffer goes back.
                    self.ctx.sh.cache.release_buffer(&self.rxbuf_store, space);
                }
                // As varnishd: while the peer still sends, the window is
                // topped up to the free room of the stream's buffer (of
                // the initial window's size), at most an increment.
                if s.rx.is_some() && !s.ended && s.r_window < low_water {
                    let credit = increment.min(initial - s.buffered - s.r_window);
                    if credit > 0 {
                        s.r_window += credit;
                        let c = (credit as u32).to_be_bytes();
                        self.send_frame(svsl, types::WINDOW_UPDATE, 0, sid, &c);
                    }
                }
            }
            Out::Reset { sid, code, why } => {
                if self.streams.get(&sid).is_some_and(|s| !s.ended) {
                    svsl.log(Tag::Debug, format_args!("H2: stream {sid}: {why}"));
                    self.rst(svsl, sid, code);
                    self.kill(sid);
                }
            }
            Out::Done { sid } => {
                if let Some(s) = self.streams.remove(&sid) {
                    if let Some(space) = s.rxbuf {
                        self.ctx.sh.cache.release_buffer(&self.rxbuf_store, space);
                    }
                    if let Some(c) = s.peer_reset {
                        self.rst(svsl, sid, c);
                    } else if !s.ended && s.head_sent {
                        self.send_frame(svsl, types::DATA, flags::END_STREAM, sid, &[]);
                    }
                    // A request that ended without an answer (a body
                    // std.cache_req_body() could not keep: SC_RX_BODY)
                    // sends nothing on its stream, as varnishd's.
                }
                self.flow.lock().expect("flow lock").streams.remove(&sid);
                // A stream's task is done or about to be: the finished
                // ones are reaped so a long connection does not keep one
                // entry per stream it ever carried.
                while self.tasks.try_join_next().is_some() {}
            }
        }
    }

    /// Processes every complete frame in `rbuf`.
    fn read_frames(&mut self, svsl: &mut VslBuf, rbuf: &mut BytesMut) -> Result<(), Fault> {
        loop {
            if rbuf.len() >= 9 {
                let h = Head::parse(rbuf[..9].try_into().expect("nine bytes"));
                if h.len > self.local.max_frame_size {
                    svsl.log(
                        Tag::Debug,
                        format_args!(
                            "H2: frame of {} bytes over max_frame_size {}",
                            h.len, self.local.max_frame_size
                        ),
                    );
                    return Err(Fault::Conn(NO_FRAME));
                }
            }
            let Some((head, total)) = lacquer_http::h2::scan(rbuf) else {
                return Ok(());
            };
            let raw = rbuf.split_to(total).freeze();
            log_rx_frame(svsl, &raw);
            self.acct[0] += 9;
            if lacquer_http::h2::rules(head.typ).is_none_or(|r| r.overhead) {
                self.acct[1] += u64::from(head.len);
            }
            self.frame(svsl, head, raw.slice(9..))?;
        }
    }

    /// One frame, as varnishd's receive loop takes it.
    fn frame(&mut self, svsl: &mut VslBuf, mut head: Head, p: Bytes) -> Result<(), Fault> {
        head.stream &= 0x7fff_ffff;
        let sid = head.stream;
        let Some(rules) = lacquer_http::h2::rules(head.typ) else {
            svsl.log(
                Tag::Debug,
                format_args!("H2: Unknown frame type 0x{:02x} (ignored)", head.typ),
            );
            return Ok(());
        };
        if head.flags & !rules.flags != 0 {
            svsl.log(
                Tag::Debug,
                format_args!(
                    "H2: Unknown flags 0x{:02x} on {} (ignored)",
                    head.flags & !rules.flags,
                    frame::type_name(head.typ)
                ),
            );
            head.flags &= rules.flags;
        }
        if let Some(f) = if sid == 0 {
            rules.on_zero
        } else {
            rules.on_nonzero
        } {
            return Err(f);
        }
        if sid > self.highest
            && let Some(f) = rules.on_idle
        {
            return Err(f);
        }
        if sid != 0 && sid & 1 == 0 {
            svsl.log(Tag::Debug, format_args!("H2: illegal stream (={sid})"));
            return Err(Fault::Conn(code::PROTOCOL_ERROR));
        }
        if self.refused_field
            || self
                .cont
                .as_ref()
                .is_some_and(|cont| !(head.typ == types::CONTINUATION && cont.sid == sid))
        {
            return Err(Fault::Conn(code::PROTOCOL_ERROR));
        }
        let r = match head.typ {
            types::DATA => self.rx_data(svsl, head, &p),
            types::HEADERS => self.rx_headers(svsl, head, &p),
            types::CONTINUATION => self.rx_continuation(svsl, head, &p),
            // varnishd 7.1's h2_rx_priority looks at nothing in the
            // frame, not even its length.
            types::PRIORITY => Ok(()),
            types::RST_STREAM => {
                if p.len() != 4 {
                    return Err(Fault::Conn(code::FRAME_SIZE_ERROR));
                }
                if let Some(s) = self.streams.get_mut(&sid) {
                    let c = u32::from_be_bytes(p[..4].try_into().expect("four bytes"));
                    // varnishd's h2_streamerror: a code it does not know
                    // is a PROTOCOL_ERROR.
                    s.peer_reset = Some(if c <= code::HTTP_1_1_REQUIRED {
                        c
                    } else {
                        code::PROTOCOL_ERROR
                    });
                    self.kill(sid);
                }
                Ok(())
            }
            types::SETTINGS => self.rx_settings(svsl, head, &p),
            types::PUSH_PROMISE => Err(Fault::Conn(code::PROTOCOL_ERROR)),
            types::PING => {
                if p.len() != 8 {
                    return Err(Fault::Conn(code::FRAME_SIZE_ERROR));
                }
                if head.flags != 0 {
                    return Err(Fault::Conn(code::PROTOCOL_ERROR));
                }
                self.send_frame(svsl, types::PING, flags::ACK, 0, &p);
                Ok(())
            }
            types::GOAWAY => {
                let err = p
                    .get(4..8)
                    .map_or(0, |b| u32::from_be_bytes(b.try_into().expect("four bytes")));
                self.peer_goaway = connection_error(err);
                svsl.log(
                    Tag::Debug,
                    format_args!("GOAWAY {}", frame::error_name(self.peer_goaway)),
                );
                // The peer is leaving: nothing goes back.
                return Err(Fault::Conn(PEER_GOAWAY));
            }
            types::WINDOW_UPDATE => self.rx_window_update(head, &p),
            _ => Ok(()),
        };
        match r {
            Err(Fault::Stream(e)) if sid != 0 => {
                self.rst(svsl, sid, e);
                self.kill(sid);
                Ok(())
            }
            Err(Fault::Stream(e)) => Err(Fault::Conn(e)),
            other => other,
        }
    }

    fn rx_window_update(&mut self, head: Head, p: &[u8]) -> Result<(), Fault> {
        if p.len() != 4 {
            return Err(Fault::Conn(code::FRAME_SIZE_ERROR));
        }
        let inc = u32::from_be_bytes(p.try_into().expect("four bytes")) & 0x7fff_ffff;
        if inc == 0 {
            return Err(Fault::Stream(code::PROTOCOL_ERROR));
        }
        let mut f = self.flow.lock().expect("flow lock");
        let w = if head.stream == 0 {
            f.conn_window += i64::from(inc);
            f.conn_window
        } else {
            let Some(s) = f.streams.get_mut(&head.stream) else {
                return Ok(());
            };
            s.window += i64::from(inc);
            s.window
        };
        f.wake_all();
        if w >= 1 << 31 {
            return Err(Fault::Stream(code::FLOW_CONTROL_ERROR));
        }
        Ok(())
    }

    fn rx_settings(&mut self, svsl: &mut VslBuf, head: Head, p: &[u8]) -> Result<(), Fault> {
        if head.flags & flags::ACK != 0 {
            if !p.is_empty() {
                return Err(Fault::Conn(code::FRAME_SIZE_ERROR));
            }
            return Ok(());
        }
        if !p.len().is_multiple_of(6) {
            return Err(Fault::Conn(code::PROTOCOL_ERROR));
        }
        for s in p.chunks(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            let nocheck = self.ctx.sh.params().bit(pid!("debug"), "h2_nocheck");
            match self.remote.apply_checked(id, v, !nocheck) {
                Ok(Applied::Unknown) => svsl.log(
                    Tag::Debug,
                    format_args!("H2SETTING unknown setting 0x{id:04x}={v:08x} (ignored)"),
                ),
                Ok(Applied::Set { name, id, old }) => {
                    svsl.log(Tag::Debug, format_args!("H2SETTING {name}=0x{v:08x}"));
                    if id == 4 {
                        let d = i64::from(v) - i64::from(old);
                        let mut f = self.flow.lock().expect("flow lock");
                        for s in f.streams.values_mut() {
                            s.window += d;
                        }
                        f.wake_all();
                    }
                }
                Err((fault, name)) => {
                    svsl.log(
                        Tag::Debug,
                        format_args!("H2SETTING invalid {name}=0x{v:08x}"),
                    );
                    return Err(fault);
                }
            }
        }
        self.apply_remote_frame_size();
        self.send_frame(svsl, types::SETTINGS, flags::ACK, 0, &[]);
        Ok(())
    }

    fn rx_headers(&mut self, svsl: &mut VslBuf, head: Head, p: &[u8]) -> Result<(), Fault> {
        let sid = head.stream;
        if self.streams.contains_key(&sid) || sid <= self.highest {
            // Trailers, or a stream that was already used.
            return Err(Fault::Conn(code::PROTOCOL_ERROR));
        }
        // As varnishd: the stream counts as opened (for GOAWAY's last
        // stream) before its frame is checked.
        self.highest = sid;
        let mut body = p;
        if head.flags & flags::PADDED != 0 {
            let Some((&pad, rest)) = body.split_first() else {
                return Err(Fault::Conn(code::PROTOCOL_ERROR));
            };
            if pad as usize > rest.len() {
                return Err(Fault::Conn(code::PROTOCOL_ERROR));
            }
            body = &rest[..rest.len() - pad as usize];
        }
        if head.flags & flags::PRIORITY != 0 {
            if body.len() < 5 {
                return Err(Fault::Conn(code::PROTOCOL_ERROR));
            }
            body = &body[5..];
        }
        self.cont = Some(Cont {
            sid,
            block: body.to_vec(),
            end_stream: head.flags & flags::END_STREAM != 0,
            hdr_bytes: p.len() as u64,
        });
        if head.flags & flags::END_HEADERS != 0 {
            return self.end_headers(svsl);
        }
        Ok(())
    }

    fn rx_continuation(&mut self, svsl: &mut VslBuf, head: Head, p: &[u8]) -> Result<(), Fault> {
        let Some(cont) = self.cont.as_mut() else {
            return Err(Fault::Conn(code::PROTOCOL_ERROR));
        };
        if (cont.block.len() + p.len()) as u64 > self.max_list {
            return Err(Fault::Conn(code::ENHANCE_YOUR_CALM));
        }
        cont.block.extend_from_slice(p);
        cont.hdr_bytes += p.len() as u64;
        if head.flags & flags::END_HEADERS != 0 {
            return self.end_headers(svsl);
        }
        Ok(())
    }

    /// A complete header block: the request starts, or the stream is
    /// refused.
    fn end_headers(&mut self, svsl: &mut VslBuf) -> Result<(), Fault> {
        let cont = self.cont.take().expect("a header block in progress");
        let sid = cont.sid;
        let t_req = lacquer_http::date::now();
        let (fields, err) = hpack::decode_block_bounded(
            &mut self.dec,
            &cont.block,
            self.local.header_table_size,
            self.max_list,
        );
        if let Some(e) = err {
            svsl.log(Tag::Debug, format_args!("HPACK(hdr) {e}"));
            // Decoding stopped half-way: the HPACK state is lost.
            return Err(Fault::Conn(match e {
                hpack::DecodeError::ListSize(_) => code::ENHANCE_YOUR_CALM,
                _ => code::COMPRESSION_ERROR,
            }));
        }
        if self.open_streams() >= self.local.max_concurrent_streams as usize {
            svsl.log(
                Tag::Debug,
                format_args!("H2: stream {sid}: Hit maximum number of concurrent streams"),
            );
            self.rst(svsl, sid, code::REFUSED_STREAM);
            return Ok(());
        }
        let max_hdr = self.ctx.sh.params().uint(pid!("http_max_hdr")) as usize;
        let rh = match lacquer_http::h2::request_head(fields, self.max_list, max_hdr) {
            Ok(h) => h,
            Err(e) => {
                svsl.log_str(Tag::BogoHeader, &e.msg);
                self.refused_field = e.in_field;
                return match e.fault {
                    Fault::Stream(c) => {
                        self.rst(svsl, sid, c);
                        Ok(())
                    }
                    f => Err(f),
                };
            }
        };
        let mut headers = lacquer_http::Headers::with_capacity(rh.headers.len() + 4);
        for (n, v) in rh.headers {
            headers.append(Bytes::from(n), Bytes::from(v));
        }
        let cl = match headers.get("content-length") {
            None => None,
            Some(v) => match std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
            {
                Some(n) => Some(n),
                None => {
                    svsl.log_str(Tag::Debug, "Non-parseable Content-Length");
                    self.rst(svsl, sid, code::PROTOCOL_ERROR);
                    return Ok(());
                }
            },
        };
        if cont.end_stream && cl.is_some_and(|n| n > 0) {
            return Err(Fault::Conn(code::PROTOCOL_ERROR));
        }
        let body = match (cont.end_stream, cl) {
            (true, _) | (false, Some(0)) => BodyKind::None,
            (false, Some(n)) => BodyKind::Length(n),
            (false, None) => BodyKind::Eof,
        };
        let req = ReqMsg {
            method: Bytes::from(rh.method),
            url: Bytes::from(rh.path),
            proto: Bytes::from_static(b"HTTP/2.0"),
            headers,
        };
        let receiving = (!cont.end_stream).then_some(cl);
        self.open_stream(
            svsl,
            sid,
            req,
            cont.hdr_bytes,
            body,
            t_req,
            receiving,
            Vec::new(),
        );
        Ok(())
    }

    /// Registers stream `sid` and starts its task. `receiving` is
    /// `Some(content_length)` when request body DATA is expected; `unset`
    /// are the fields an `h2c` upgrade took out of the request.
    #[allow(clippy::too_many_arguments)]
    fn open_stream(
        &mut self,
        svsl: &mut VslBuf,
        sid: u32,
        req: ReqMsg,
        hdr_bytes: u64,
        body: BodyKind,
        t_req: f64,
        receiving: Option<Option<u64>>,
        unset: Vec<(Bytes, Bytes)>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        self.streams.insert(
            sid,
            RxStream {
                rx: receiving.is_some().then_some(tx),
                r_window: i64::from(self.local.initial_window_size),
                content_length: receiving.flatten(),
                received: 0,
                buffered: 0,
                rxbuf: None,
                ended: false,
                peer_reset: None,
                head_sent: false,
            },
        );
        self.flow.lock().expect("flow lock").streams.insert(
            sid,
            TxStream {
                window: i64::from(self.remote.initial_window_size),
                waker: None,
                reset: false,
            },
        );
        let vxid = self.ctx.sh.vxid.next();
        svsl.log(Tag::Link, format_args!("req {vxid} rxreq"));
        svsl.flush();
        let sc = StreamCtx {
            sh: self.ctx.sh.clone(),
            info: self.ctx.info.clone(),
            tmo: self.ctx.tmo,
            sock: self.ctx.sock.clone(),
            sid,
            svxid: self.ctx.svxid,
            vxid,
            flow: self.flow.clone(),
            out: self.out_tx.clone(),
            rx,
            unset,
        };
        self.tasks
            .spawn(stream::run(sc, req, hdr_bytes, body, t_req));
    }

    fn rx_data(&mut self, svsl: &mut VslBuf, head: Head, p: &Bytes) -> Result<(), Fault> {
        let sid = head.stream;
        let len = p.len() as i64;
        let Some(s) = self.streams.get_mut(&sid) else {
            return Ok(());
        };
        let Some(tx) = s.rx.clone() else {
            return Err(Fault::Stream(code::STREAM_CLOSED));
        };
        let data = if head.flags & flags::PADDED != 0 {
            let Some(&pad) = p.first() else {
                return Err(Fault::Conn(code::PROTOCOL_ERROR));
            };
            if pad as usize >= p.len() {
                svsl.log(
                    Tag::Debug,
                    format_args!("H2: stream {sid}: Padding larger than frame length"),
                );
                return Err(Fault::Conn(code::PROTOCOL_ERROR));
            }
            p.slice(1..p.len() - pad as usize)
        } else {
            p.clone()
        };
        let end = head.flags & flags::END_STREAM != 0;
        s.received += data.len() as u64;
        if let Some(cl) = s.content_length
            && (s.received > cl || (end && s.received != cl))
        {
            svsl.log(
                Tag::Debug,
                format_args!("H2: stream {sid}: Received data and Content-Length mismatch"),
            );
            return Err(Fault::Stream(code::PROTOCOL_ERROR));
        }
        // The connection window counts every DATA frame of a stream still
        // receiving, once its padding and length passed (as varnishd's
        // h2_rx_data orders its checks).
        if len > self.r_window {
            svsl.log(
                Tag::Debug,
                format_args!("H2: stream {sid}: Exceeded connection receive window"),
            );
            return Err(Fault::Conn(code::FLOW_CONTROL_ERROR));
        }
        self.r_window -= len;
        if self.r_window < self.low_water {
            self.r_window += i64::from(self.increment);
            let inc = self.increment.to_be_bytes();
            self.send_frame(svsl, types::WINDOW_UPDATE, 0, 0, &inc);
        }
        let Some(s) = self.streams.get_mut(&sid) else {
            return Ok(());
        };
        if len > s.r_window {
            svsl.log(
                Tag::Debug,
                format_args!("H2: stream {sid}: Exceeded stream receive window"),
            );
            return Err(Fault::Stream(code::FLOW_CONTROL_ERROR));
        }
        s.r_window -= len;
        if data.is_empty() {
            // Padding only: nothing for the stream to read, so nothing
            // would open the window again; varnishd opens it here once
            // it is closed and the buffer empty.
            let initial = i64::from(self.local.initial_window_size);
            if s.r_window == 0 && s.buffered == 0 && !end {
                s.r_window += initial;
                let c = (initial as u32).to_be_bytes();
                self.send_frame(svsl, types::WINDOW_UPDATE, 0, sid, &c);
            }
        } else {
            if s.rxbuf.is_none() {
                // As varnishd: the stream's receive buffer (a window's
                // worth, or just this frame's data when it is the only
                // one) is charged to h2_rxbuf_storage.
                let mut size = u64::from(self.local.initial_window_size).max(s.r_window as u64);
                if end {
                    size = size.min(data.len() as u64);
                }
                let mut nuked = Vec::new();
                let got = self
                    .ctx
                    .sh
                    .cache
                    .charge_buffer(&self.rxbuf_store, size, &mut |x| nuked.push(x));
                for x in nuked {
                    svsl.log(Tag::ExpKill, format_args!("LRU x={x}"));
                }
                match got {
                    Ok(space) => s.rxbuf = Some(space),
                    Err(_) => {
                        svsl.log(
                            Tag::Debug,
                            format_args!(
                                "H2: stream {sid}: Failed to allocate request body buffer"
                            ),
                        );
                        return Err(Fault::Stream(code::INTERNAL_ERROR));
                    }
                }
            }
            s.buffered += data.len() as i64;
            let _ = tx.send(Ok(data));
        }
        let Some(s) = self.streams.get_mut(&sid) else {
            return Ok(());
        };
        if end {
            s.rx = None;
        }
        Ok(())
    }
}
