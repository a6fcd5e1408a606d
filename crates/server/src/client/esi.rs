//! ESI delivery: walking an object's instructions, running includes as
//! sub-requests and writing everything into the one client response.
//!
//! An include is a request of its own (`Begin req <parent> esi`, its own
//! vxid and log), built from the including request as it arrived, that runs
//! the full client state machine ([`crate::client::req_fsm::handle`]): vcl_recv, hash,
//! lookup (so a cached fragment is a hit and an uncacheable one is fetched),
//! vcl_deliver. Its body goes into the parent's response through an
//! [`EsiSink`] the parent lends it for the run, in order, on the same task:
//! nothing is buffered beyond a few kilobytes, and a client that goes away
//! stops the whole tree at the next write.
//!
//! Includes run ahead of their place in the page (`esi_parallel` of an
//! object's includes at once, a process-wide cap on all of them): each
//! runs as a task of its own whose body is recorded ([`Piece`]s, after its
//! own filters) instead of written, and replayed into the page's sink when
//! delivery reaches it, so the output is byte for byte the one-by-one
//! output. The page's own bytes go out as soon as they are ready; a page
//! that ends early (client gone, an include that aborts the response)
//! aborts the includes it started.
//!
//! When the top object is stored gzip'ed and the client takes gzip, the
//! response is one gzip stream stitched together without recompressing:
//! verbatim ranges of gzip'ed ESI objects are copied as they are stored
//! (independent, byte-aligned deflate blocks), anything else is wrapped in
//! stored deflate blocks, CRC-32 and length are combined as it goes, and
//! the stream ends with an empty final block and the trailer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use flate2::Decompress;
use lacquer_cache::ObjRef;
use lacquer_vsl::{Tag, VslBuf, Vxid};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::client::req_fsm::{After, ClientConn};
use crate::client::req_task::ReqTask;
use crate::client::req_task::TopReq;
use crate::esi::{Instr, Program};
use crate::fetch::gzip::{Gunzip, inflate};
use crate::pid;
use crate::runtime::counters::Main;
use crate::runtime::msg::ReqMsg;

/// The header of the gzip stream a stitched response starts with:
/// varnishd's `ved_vdp` writes this fixed one (XFL 2, OS Unix) whatever
/// the level the pieces were compressed at.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 3];

/// Output is written to the socket once this much is buffered.
const BUFFERED: usize = 16 * 1024;

/// Pieces at least this long are written without copying.
const DIRECT: usize = 8 * 1024;

/// The largest stored deflate block.
const STORED_MAX: usize = 65_535;

/// Includes running ahead of their place in the whole process, at most
/// (past this, includes run one after another at their place).
const AHEAD_PROCESS_MAX: usize = 4096;

/// A piece of an include's body recorded while it ran ahead of its place,
/// replayed into the including response when delivery reaches it.
#[derive(Debug)]
enum Piece {
    /// Plain bytes, after the include's own filters.
    Plain(Vec<u8>),
    /// A verbatim range of a gzip'ed ESI object, as stored.
    Gzip {
        data: Vec<u8>,
        crc: u32,
        plain_len: u64,
    },
}

/// The response body being assembled: framing, gzip stitching state and
/// accounting, shared by every level of an ESI tree in turn.
#[derive(Debug, Default)]
pub struct EsiSink {
    chunked: bool,
    /// `resp.filters` of vmods: every body byte passes through them.
    filters: VmodFilters,
    /// The vmod filters of the includes being delivered, outermost first:
    /// an include's plain bytes pass through its own, then its parents'.
    levels: Vec<VmodFilters>,
    /// The response is one gzip stream.
    gzip: bool,
    crc: u32,
    plain_len: u64,
    /// Body bytes written (framing excluded).
    bytes: u64,
    buf: Vec<u8>,
    idle_send: Duration,
    /// The include running now ends the whole response if it fails
    /// (`feature esi_include_onerror` without `onerror="continue"`).
    abort_on_error: bool,
    /// An include failed that way: nothing more is sent.
    abort: bool,
    /// Writing to the client failed.
    failed: bool,
    /// An include running ahead: its body is recorded here, not written.
    record: Option<Vec<Piece>>,
}

fn write_error(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}

/// The vmod delivery filters of a top-level ESI response.
#[derive(Default)]
struct VmodFilters(Vec<Box<dyn lacquer_vmods::FilterStage>>);

impl std::fmt::Debug for VmodFilters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} vmod filters", self.0.len())
    }
}

impl EsiSink {
    async fn send(
        &mut self,
        w: &mut (dyn AsyncWrite + Unpin + Send),
        extra: &[u8],
    ) -> io::Result<()> {
        let r = tokio::time::timeout(self.idle_send, async {
            if extra.is_empty() {
                w.write_all(&self.buf).await
            } else {
                crate::client::req_fsm::write_both(w, &self.buf, extra).await
            }
        })
        .await
        .unwrap_or_else(|_| Err(io::Error::other("idle send timeout")));
        self.buf.clear();
        if let Err(e) = &r {
            self.failed = true;
            return Err(write_error(e));
        }
        Ok(())
    }

    /// Writes out what is buffered.
    async fn flush(&mut self, w: &mut (dyn AsyncWrite + Unpin + Send)) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other("client write failed"));
        }
        if !self.buf.is_empty() {
            self.send(w, &[]).await?;
        }
        let r = tokio::time::timeout(self.idle_send, w.flush())
            .await
            .unwrap_or_else(|_| Err(io::Error::other("idle send timeout")));
        if let Err(e) = &r {
            self.failed = true;
            return Err(write_error(e));
        }
        Ok(())
    }

    /// Body bytes through the vmod filters, then on the wire.
    async fn raw(
        &mut self,
        w: &mut (dyn AsyncWrite + Unpin + Send),
        data: &[u8],
    ) -> io::Result<()> {
        if self.filters.0.is_empty() {
            return self.wire(w, data).await;
        }
        let out = crate::client::vdp::run(&mut self.filters.0, data).map_err(io::Error::other)?;
        self.wire(w, &out).await
    }

    /// Ends the vmod filters: what they still had goes out.
    async fn end_filters(&mut self, w: &mut (dyn AsyncWrite + Unpin + Send)) -> io::Result<()> {
        let out = crate::client::vdp::finish(&mut self.filters.0).map_err(io::Error::other)?;
        self.wire(w, &out).await
    }

    /// Body bytes as they go on the wire (chunk framing added).
    async fn wire(
        &mut self,
        w: &mut (dyn AsyncWrite + Unpin + Send),
        data: &[u8],
    ) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other("client write failed"));
        }
        if data.is_empty() {
            return Ok(());
        }
        self.bytes += data.len() as u64;
        if self.chunked {
            lacquer_http::encode_chunk_header(data.len(), &mut self.buf);
        }
        if data.len() >= DIRECT {
            self.send(w, data).await?;
        } else {
            self.buf.extend_from_slice(data);
        }
        if self.chunked {
            self.buf.extend_from_slice(b"\r\n");
        }
        if self.buf.len() >= BUFFERED {
            self.send(w, &[]).await?;
        }
        Ok(())
    }

    /// Plain body bytes; in a gzip stream they go in stored blocks.
    async fn plain(
        &mut self,
        w: &mut (dyn AsyncWrite + Unpin + Send),
        data: &[u8],
    ) -> io::Result<()> {
        let filtered;
        let data = if self.levels.is_empty() {
            data
        } else {
            let mut cur = data.to_vec();
            for level in self.levels.iter_mut().rev() {
                cur = crate::client::vdp::run(&mut level.0, &cur).map_err(io::Error::other)?;
            }
            filtered = cur;
            &filtered
        };
        if let Some(rec) = &mut self.record {
            self.bytes += data.len() as u64;
            rec.push(Piece::Plain(data.to_vec()));
            return Ok(());
        }
        if !self.gzip {
            return self.raw(w, data).await;
        }
        self.crc = zlib_rs::crc32::crc32(self.crc, data);
        self.plain_len += data.len() as u64;
        for piece in data.chunks(STORED_MAX) {
            let n = piece.len() as u16;
            let mut block = Vec::with_capacity(5 + piece.len());
            block.push(0);
            block.extend_from_slice(&n.to_le_bytes());
            block.extend_from_slice(&(!n).to_le_bytes());
            block.extend_from_slice(piece);
            self.raw(w, &block).await?;
        }
        Ok(())
    }

    /// A verbatim range of a gzip'ed ESI object into a gzip stream: copied
    /// as stored (its CRC and length combined into the stream's), or
    /// recorded as it is.
    async fn gzip_range(
        &mut self,
        w: &mut (dyn AsyncWrite + Unpin + Send),
        data: &[u8],
        crc: u32,
        plain_len: u64,
    ) -> io::Result<()> {
        if let Some(rec) = &mut self.record {
            self.bytes += data.len() as u64;
            rec.push(Piece::Gzip {
                data: data.to_vec(),
                crc,
                plain_len,
            });
            return Ok(());
        }
        self.raw(w, data).await?;
        self.crc = zlib_rs::crc32::crc32_combine(self.crc, crc, plain_len);
        self.plain_len += plain_len;
        Ok(())
    }

    /// Replays what an include that ran ahead recorded, as if it ran here.
    async fn replay(
        &mut self,
        w: &mut (dyn AsyncWrite + Unpin + Send),
        pieces: Vec<Piece>,
    ) -> io::Result<()> {
        let mut inflater: Option<Decompress> = None;
        let mut plain = Vec::new();
        for p in pieces {
            match p {
                Piece::Plain(b) => self.plain(w, &b).await?,
                Piece::Gzip {
                    data,
                    crc,
                    plain_len,
                } if self.levels.is_empty() => self.gzip_range(w, &data, crc, plain_len).await?,
                // Filters of including levels must see the plain bytes.
                Piece::Gzip { data, .. } => {
                    let d = inflater.get_or_insert_with(|| Decompress::new(false));
                    d.reset(false);
                    plain.clear();
                    inflate(d, &data, &mut plain)?;
                    self.plain(w, &plain).await?;
                }
            }
        }
        Ok(())
    }

    /// Ends a gzip stream: an empty final stored block, CRC and length.
    async fn gzip_tail(&mut self, w: &mut (dyn AsyncWrite + Unpin + Send)) -> io::Result<()> {
        let mut tail = vec![1, 0, 0, 0xff, 0xff];
        tail.extend_from_slice(&self.crc.to_le_bytes());
        tail.extend_from_slice(&(self.plain_len as u32).to_le_bytes());
        self.raw(w, &tail).await
    }
}

/// The stream an include's request "writes to": its bytes go on to the
/// including response's connection. Reading gives end-of-file (an include
/// has no client of its own).
pub struct EsiStream<'a> {
    inner: &'a mut (dyn AsyncWrite + Unpin + Send),
}

impl AsyncRead for EsiStream<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for EsiStream<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().inner).poll_shutdown(cx)
    }
}

/// How a top-level ESI response is framed and encoded.
pub struct TopFraming {
    pub chunked: bool,
    /// One gzip stream (the object is gzip'ed and the client takes gzip).
    pub gzip: bool,
    pub idle_send: Duration,
    /// The vmod filters of `resp.filters`, in order.
    pub filters: Vec<Box<dyn lacquer_vmods::FilterStage>>,
}

/// Writes `head` and the body of an ESI object for a client request: the
/// result, and the body bytes sent. An error (client gone, an include that aborts the
/// response) means the connection must close.
pub async fn deliver_top(
    t: &mut ReqTask,
    w: &mut (dyn AsyncWrite + Unpin + Send),
    obj: &ObjRef,
    prog: Program,
    framing: TopFraming,
    head: Vec<u8>,
) -> (io::Result<()>, u64) {
    // The response head goes out with the first body bytes.
    let mut sink = EsiSink {
        chunked: framing.chunked,
        gzip: framing.gzip,
        idle_send: framing.idle_send,
        filters: VmodFilters(framing.filters),
        buf: head,
        ..EsiSink::default()
    };
    let r = async {
        if sink.gzip {
            sink.raw(w, &GZIP_HEADER).await?;
        }
        walk(t, w, &mut sink, obj, prog).await?;
        if sink.gzip {
            sink.gzip_tail(w).await?;
        }
        sink.end_filters(w).await?;
        if sink.chunked {
            sink.buf.extend_from_slice(lacquer_http::LAST_CHUNK);
        }
        sink.flush(w).await
    }
    .await;
    (r, sink.bytes)
}

/// A plain read position in an object's body.
struct Cursor {
    reader: lacquer_storage::BodyReader,
    cur: Bytes,
}

impl Cursor {
    /// At most `max` next bytes (at least one unless `max` is 0).
    async fn take(&mut self, max: u64) -> io::Result<Bytes> {
        if self.cur.is_empty() {
            self.cur = self
                .reader
                .next()
                .await
                .map_err(io::Error::other)?
                .ok_or_else(|| io::Error::other("ESI object body shorter than its instructions"))?;
        }
        let n = (self.cur.len() as u64).min(max) as usize;
        Ok(self.cur.split_to(n))
    }
}

/// Delivers one ESI object into `sink` by its instructions.
async fn walk(
    t: &mut ReqTask,
    w: &mut (dyn AsyncWrite + Unpin + Send),
    sink: &mut EsiSink,
    obj: &ObjRef,
    mut prog: Program,
) -> io::Result<()> {
    if t.esi_level > 0 && prog.gzip() && include_gunzips(t) {
        // An include's own `gunzip` delivery filter (the top level's is
        // counted where delivery chose it).
        t.sh.counters.inc(Main::n_gunzip);
    }
    let mut body = Cursor {
        reader: obj.body().reader(),
        cur: Bytes::new(),
    };
    let mut inflater: Option<Decompress> = None;
    let mut plain = Vec::new();
    let mut ahead = Ahead::new(t, &prog);
    loop {
        let instr = match prog.next_instr() {
            Ok(Some(i)) => i,
            Ok(None) => return Ok(()),
            Err(e) => {
                t.vsl.log(Tag::Error, format_args!("{e}"));
                return Err(io::Error::other(e));
            }
        };
        match instr {
            Instr::Verbatim {
                len,
                plain_len,
                crc,
            } => {
                let mut left = len;
                // Verbatim gzip goes through as it is, unless an include's
                // filters must see its plain bytes.
                if prog.gzip() && sink.gzip && sink.levels.is_empty() && sink.record.is_some() {
                    let mut data = Vec::with_capacity(len as usize);
                    while left > 0 {
                        let piece = body.take(left).await?;
                        left -= piece.len() as u64;
                        data.extend_from_slice(&piece);
                    }
                    sink.gzip_range(w, &data, crc, plain_len).await?;
                } else if prog.gzip() && sink.gzip && sink.levels.is_empty() {
                    while left > 0 {
                        let piece = body.take(left).await?;
                        left -= piece.len() as u64;
                        sink.raw(w, &piece).await?;
                    }
                    sink.crc = zlib_rs::crc32::crc32_combine(sink.crc, crc, plain_len);
                    sink.plain_len += plain_len;
                } else if prog.gzip() {
                    let d = inflater.get_or_insert_with(|| Decompress::new(false));
                    d.reset(false);
                    while left > 0 {
                        let piece = body.take(left).await?;
                        left -= piece.len() as u64;
                        plain.clear();
                        inflate(d, &piece, &mut plain)?;
                        sink.plain(w, &plain).await?;
                    }
                } else {
                    while left > 0 {
                        let piece = body.take(left).await?;
                        left -= piece.len() as u64;
                        sink.plain(w, &piece).await?;
                    }
                }
            }
            Instr::Skip(len) => {
                let mut left = len;
                while left > 0 {
                    left -= body.take(left).await?.len() as u64;
                }
            }
            Instr::Include {
                host,
                url,
                continue_on_error,
            } => {
                match ahead.next(t, sink) {
                    Some(task) => {
                        // What came before the include reaches the client
                        // while it finishes.
                        sink.flush(w).await?;
                        match task.await {
                            Ok(Some(back)) => {
                                sink.replay(w, back.record.unwrap_or_default()).await?;
                                sink.abort |= back.abort;
                            }
                            // The include did not hand its body back.
                            Ok(None) | Err(_) => {
                                return Err(io::Error::other("an ESI include failed"));
                            }
                        }
                    }
                    None => include(t, w, sink, host, url, continue_on_error).await?,
                }
                if sink.abort {
                    return Err(io::Error::other("an ESI include failed"));
                }
            }
        }
    }
}

/// The request an include starts from: the including request as it
/// arrived, for `url` (and `Host`), without what cannot apply to a piece of
/// a response (conditionals, ranges, a body), asking for gzip only when the
/// response is a gzip stream.
fn include_request(parent: &ReqMsg, host: Option<&Bytes>, url: &Bytes, gzip: bool) -> ReqMsg {
    let mut req = parent.clone();
    req.method = Bytes::from_static(b"GET");
    req.url = url.clone();
    req.proto = Bytes::from_static(b"HTTP/1.1");
    if let Some(h) = host {
        req.headers.remove("host");
        req.headers.append("Host", h.clone());
    }
    for name in [
        "if-modified-since",
        "if-none-match",
        "range",
        "content-length",
        "transfer-encoding",
    ] {
        req.headers.remove(name);
    }
    if gzip {
        crate::client::req_fsm::force_gzip_ae(&mut req.headers);
    } else {
        req.headers.remove("accept-encoding");
    }
    req
}

/// Logs what [`include_request`] changes in the including request, as
/// varnishd's `ved_include` logs it (each `http_Unset`, `http_ForceField`
/// and `http_SetHeader` on the include's request).
fn log_include_changes(vsl: &mut VslBuf, parent: &ReqMsg, host: Option<&Bytes>, gzip: bool) {
    let unset = |vsl: &mut VslBuf, name: &[u8]| {
        for (k, v) in parent.headers.iter() {
            if k.eq_ignore_ascii_case(name) {
                vsl.log_header(Tag::ReqUnset, k, v);
            }
        }
    };
    if let Some(h) = host {
        unset(vsl, b"host");
        vsl.log_header(Tag::ReqHeader, b"Host", h);
    }
    if parent.method != b"GET"[..] {
        vsl.log_str(Tag::ReqMethod, "GET");
    }
    if parent.proto != b"HTTP/1.1"[..] {
        vsl.log_str(Tag::ReqProtocol, "HTTP/1.1");
    }
    for name in [&b"if-modified-since"[..], b"if-none-match", b"range"] {
        unset(vsl, name);
    }
    let ae = parent.headers.get("accept-encoding");
    if gzip {
        if !ae.is_some_and(|v| v.eq_ignore_ascii_case(b"gzip")) {
            unset(vsl, b"accept-encoding");
            vsl.log_header(Tag::ReqHeader, b"Accept-Encoding", b"gzip");
        }
    } else {
        unset(vsl, b"accept-encoding");
    }
    unset(vsl, b"content-length");
}

/// The request of an include of `parent`: a new vxid linked from the
/// parent's log, its own log opened as varnishd's, one ESI level deeper,
/// on the parent's client connection and request tree (`PRIV_TOP`).
fn new_include(parent: &mut ReqTask, host: Option<&Bytes>, url: &Bytes, gzip: bool) -> ReqTask {
    // As varnishd's ESI VDP, an include asks for gzip when the object
    // holding it is gzip'ed, whatever the client takes (the gzip'ed pieces
    // are then gunzipped together for it).
    let gzip = parent.obj.as_ref().map_or(gzip, |o| o.data().gzip);
    let sh = parent.sh.clone();
    let vxid = sh.vxid.next();
    parent.vsl.log(Tag::Link, format_args!("req {vxid} esi"));
    sh.counters.inc(Main::esi_req);
    let req = include_request(&parent.req_orig, host, url, gzip);
    let now = lacquer_http::date::now();
    let mut vsl = VslBuf::with_capacity(sh.vsl.clone(), Vxid::client(vxid), 2048);
    vsl.log(Tag::Begin, format_args!("req {} esi", parent.vxid));
    vsl.log_timestamp("Start", now, 0.0, 0.0);
    vsl.log_bytes(Tag::ReqURL, url);
    log_include_changes(&mut vsl, &parent.req_orig, host, gzip);
    crate::client::req_fsm::log_req_start(&mut vsl, &parent.sess, &req);
    let top = parent.top.clone().unwrap_or_else(|| {
        Arc::new(TopReq {
            req: parent.req.clone(),
            t_req: parent.t_req,
        })
    });
    let mut child = ReqTask::new(
        sh,
        parent.vcl.clone(),
        parent.sess.clone(),
        parent.timeouts,
        vxid,
        req,
        now,
        vsl,
    );
    child.esi_level = parent.esi_level + 1;
    // An include runs on its parent's client connection.
    child.sock = parent.sock.clone();
    child.top = Some(top);
    child.top_privs = Some(parent.shared_top_privs());
    child
}

/// Runs one include as a sub-request whose body goes into `sink`. (Boxed:
/// an include runs the request state machine, which can include again.)
fn include<'a>(
    parent: &'a mut ReqTask,
    w: &'a mut (dyn AsyncWrite + Unpin + Send),
    sink: &'a mut EsiSink,
    host: Option<Bytes>,
    url: Bytes,
    continue_on_error: bool,
) -> Pin<Box<dyn Future<Output = io::Result<()>> + Send + 'a>> {
    Box::pin(async move {
        let sh = parent.sh.clone();
        let params = sh.params();
        let max_depth = params.uint(pid!("max_esi_depth"));
        let abort_on_error =
            params.bit(pid!("feature"), "esi_include_onerror") && !continue_on_error;
        drop(params);
        if u64::from(parent.esi_level) >= max_depth {
            parent.vsl.log(
                Tag::VCL_Error,
                format_args!("ESI depth limit reach (param max_esi_depth = {max_depth})"),
            );
            sink.abort |= abort_on_error;
            return Ok(());
        }
        // What came before the include reaches the client before it runs.
        sink.flush(w).await?;
        let saved_abort_on_error = sink.abort_on_error;
        sink.abort_on_error = abort_on_error;
        let bytes_before = sink.bytes;
        let mut child = new_include(parent, host.as_ref(), &url, sink.gzip);
        child.esi_sink = Some(Box::new(std::mem::take(sink)));
        {
            let mut conn = ClientConn {
                stream: EsiStream { inner: w },
                rbuf: BytesMut::new(),
                h2: None,
            };
            crate::client::req_fsm::handle(&mut child, &mut conn).await;
        }
        if let Some(back) = child.esi_sink.take() {
            *sink = *back;
        } else {
            // The include did not hand the response back: it cannot go on.
            sink.failed = true;
        }
        sink.abort_on_error = saved_abort_on_error;
        finish_child(&mut child, sink.bytes - bytes_before);
        if sink.failed {
            return Err(io::Error::other("client write failed"));
        }
        Ok(())
    })
}

/// The end of an include's transaction: its last records, its privs and
/// workspace; `sent` is the body bytes it delivered.
fn finish_child(child: &mut ReqTask, sent: u64) {
    let end = lacquer_http::date::now();
    child
        .vsl
        .log_timestamp("Resp", end, end - child.t_req, end - child.now);
    child.end_privs();
    child
        .vsl
        .log(Tag::ReqAcct, format_args!("0 0 0 0 {sent} {sent}"));
    // The include's own workspace ends with it.
    child.ws.flush_trace(&mut child.vsl);
    if lacquer_vcl::exec::Workspace::overflowed(&child.ws) {
        child
            .sh
            .counters
            .inc(crate::runtime::counters::Main::ws_client_overflow);
    }
    child.vsl.log_str(Tag::End, "");
    child.vsl.flush();
}

/// Slots of [`AHEAD_PROCESS_MAX`].
fn ahead_slots() -> &'static Arc<tokio::sync::Semaphore> {
    static SLOTS: std::sync::OnceLock<Arc<tokio::sync::Semaphore>> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(AHEAD_PROCESS_MAX)))
}

/// An include running ahead: its task hands back its recording sink.
type AheadTask = tokio::task::JoinHandle<Option<Box<EsiSink>>>;

/// The includes of one object and those of them running ahead of the
/// walk, `esi_parallel` at most. Dropping it (the walk ended early) aborts
/// what still runs.
struct Ahead {
    includes: Vec<(Option<Bytes>, Bytes, bool)>,
    /// The running ones, by index in `includes`.
    running: std::collections::VecDeque<(usize, AheadTask)>,
    /// The next include the walk reaches.
    next: usize,
    /// The next include to start.
    started: usize,
    window: usize,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        for (_, task) in &self.running {
            task.abort();
        }
    }
}

impl Ahead {
    /// The includes of `prog`, none started.
    fn new(t: &ReqTask, prog: &Program) -> Ahead {
        let params = t.sh.params();
        // Varnish's tests pin varnishd's one-by-one order of include
        // fetches: under varnishtest they run that way.
        let window = if params.bit(pid!("debug"), "vtc_mode") {
            1
        } else {
            params.uint(pid!("esi_parallel")).max(1) as usize
        };
        drop(params);
        let mut includes = Vec::new();
        if window > 1 {
            let mut scan = prog.clone();
            while let Ok(Some(i)) = scan.next_instr() {
                if let Instr::Include {
                    host,
                    url,
                    continue_on_error,
                } = i
                {
                    includes.push((host, url, continue_on_error));
                }
            }
        }
        Ahead {
            includes,
            running: Default::default(),
            next: 0,
            started: 0,
            window,
        }
    }

    /// The walk reached its next include: starts those up to the window
    /// ahead, and gives the task of this one if it runs ahead (`None`:
    /// run it here).
    fn next(&mut self, t: &mut ReqTask, sink: &EsiSink) -> Option<AheadTask> {
        let k = self.next;
        self.next += 1;
        self.started = self.started.max(k);
        while self.started < self.includes.len() && self.started < k + self.window {
            let (host, url, onerror) = self.includes[self.started].clone();
            // At the depth limit or the process cap it runs at its place.
            if let Some(task) = start_ahead(t, sink, host, url, onerror) {
                self.running.push_back((self.started, task));
            }
            self.started += 1;
        }
        while let Some((i, _)) = self.running.front() {
            if *i > k {
                break;
            }
            let (i, task) = self.running.pop_front()?;
            if i == k {
                return Some(task);
            }
            task.abort();
        }
        None
    }
}

/// A stream for an include running ahead: it writes nothing (its sink
/// records) and reads end-of-file.
struct Discard;

impl AsyncRead for Discard {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Discard {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Starts an include of `parent` as a task of its own whose body is
/// recorded; `None` when it must run at its place (the depth limit, whose
/// error that path reports, or the process-wide cap).
fn start_ahead(
    parent: &mut ReqTask,
    sink: &EsiSink,
    host: Option<Bytes>,
    url: Bytes,
    continue_on_error: bool,
) -> Option<AheadTask> {
    let sh = parent.sh.clone();
    let params = sh.params();
    let max_depth = params.uint(pid!("max_esi_depth"));
    let abort_on_error = params.bit(pid!("feature"), "esi_include_onerror") && !continue_on_error;
    drop(params);
    if u64::from(parent.esi_level) >= max_depth {
        return None;
    }
    let slot = ahead_slots().clone().try_acquire_owned().ok()?;
    let mut child = new_include(parent, host.as_ref(), &url, sink.gzip);
    child.esi_sink = Some(Box::new(EsiSink {
        gzip: sink.gzip,
        idle_send: sink.idle_send,
        abort_on_error,
        record: Some(Vec::new()),
        ..EsiSink::default()
    }));
    Some(tokio::spawn(async move {
        let _slot = slot;
        let mut conn = ClientConn {
            stream: Discard,
            rbuf: BytesMut::new(),
            h2: None,
        };
        crate::client::req_fsm::handle(&mut child, &mut conn).await;
        let back = child.esi_sink.take();
        finish_child(&mut child, back.as_ref().map_or(0, |s| s.bytes));
        back
    }))
}

/// Whether varnishd would push a `gunzip` delivery filter for a gzip'ed
/// include (its cnt_transmit): gzip support is on and the include's request
/// does not accept gzip when it is delivered. An include of a gzip'ed ESI
/// parent is asked for with `Accept-Encoding: gzip` and stitched in
/// compressed, so it counts no `n_gunzip` unless its vcl_deliver removed
/// that header; an include of a plain parent is asked for without it.
fn include_gunzips(t: &ReqTask) -> bool {
    t.sh.params().flag(pid!("http_gzip_support"))
        && !t
            .req
            .headers
            .get("accept-encoding")
            .is_some_and(crate::fetch::gzip::accepts_gzip)
}

/// Writes a non-ESI object's body as plain bytes into `sink`.
async fn object_body(
    w: &mut (dyn AsyncWrite + Unpin + Send),
    sink: &mut EsiSink,
    obj: &ObjRef,
    gzip_support: bool,
    gunzips: bool,
    counters: &crate::runtime::counters::Counters,
) -> io::Result<()> {
    // A gzip'ed fragment is decoded for a plain response (the include asked
    // without Accept-Encoding) and re-wrapped for a gzip one.
    let decode = obj.data().gzip && (sink.gzip || gzip_support);
    if obj.data().gzip && gunzips {
        // The include's `gunzip` delivery filter.
        counters.inc(Main::n_gunzip);
    }
    let mut gunzip = decode.then(Gunzip::new);
    let mut reader = obj.body().reader();
    let mut out = Vec::new();
    while let Some(seg) = reader.next().await.map_err(io::Error::other)? {
        match gunzip.as_mut() {
            Some(g) => {
                out.clear();
                g.feed(&seg, &mut out).map_err(io::Error::other)?;
                sink.plain(w, &out).await?;
            }
            None => sink.plain(w, &seg).await?,
        }
    }
    if let Some(g) = &gunzip {
        g.finish().map_err(io::Error::other)?;
    }
    Ok(())
}

/// The headers of an include's response as varnishd's cnt_transmit
/// leaves them, logged though they are never sent: `gunzip` unsets
/// `Content-Encoding` (vdp_gunzip_init) and makes the length the plain
/// one when the gzip trailer says it; `esi` makes it unknown. A
/// `Content-Length` that disagrees goes, and the known length is printed.
fn include_length(t: &mut ReqTask, o: &ObjRef, list: &str) {
    let names = crate::fetch::gzip::filter_names(list);
    let has = |f: &str| names.iter().any(|(_, n)| *n == f);
    let final_len = o.body().final_len();
    let clval = t
        .resp
        .headers
        .get("content-length")
        .and_then(lacquer_http::parse_content_length);
    let mut resp_len = final_len.or(clval);
    if has("gunzip") {
        resp_len = crate::client::req_fsm::gunzip_response(t, o, final_len);
    }
    if has("esi") {
        resp_len = None;
    }
    let status = t.resp.status % 1000;
    let no_body = status < 200 || status == 204 || status == 304;
    if !no_body && clval.is_some() && clval == resp_len {
        return;
    }
    for (k, v) in t.resp.headers.iter() {
        if k.eq_ignore_ascii_case(b"content-length") {
            t.vsl.log_header(Tag::RespUnset, k, v);
        }
    }
    t.resp.headers.remove("content-length");
    if let Some(len) = resp_len.filter(|_| !no_body) {
        let len = len.to_string();
        t.vsl
            .log_header(Tag::RespHeader, b"Content-Length", len.as_bytes());
        t.resp.headers.append("Content-Length", len);
    }
}

/// Delivers an include's response (after its vcl_deliver or vcl_synth)
/// into the including response, as varnishd's ESI transport does: with
/// `feature esi_include_onerror` only a 200 or 204 is included; a failure
/// to deliver ends the whole response unless the include had
/// `onerror="continue"`.
pub async fn include_body<S>(
    t: &mut ReqTask,
    conn: &mut ClientConn<S>,
    obj: Option<ObjRef>,
    synth: Option<Bytes>,
) -> After
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let Some(mut sink) = t.esi_sink.take() else {
        return After::Close;
    };
    let w: &mut (dyn AsyncWrite + Unpin + Send) = &mut conn.stream;
    let status = t.resp.status % 1000;
    let onerror = t.sh.params().bit(pid!("feature"), "esi_include_onerror");
    // The include's own vmod filters (its resp.filters), for its bytes.
    let mut filters = Ok(None);
    let mut no_room = false;
    if let Some(o) = &obj {
        let list = String::from_utf8_lossy(t.delivery_filters()).into_owned();
        t.vsl.log_str(Tag::Filters, &list);
        // As varnishd's cnt_transmit and ved_deliver: an include with a
        // body to send has its filter list's text (here the empty one and
        // its NUL) and its ESI stage's entry on its own workspace; without
        // room it sends nothing and the page goes on. Measured for the
        // empty filter list only (see `default_list_modelled`).
        no_room = list.is_empty()
            && t.vdp_filters.is_none()
            && status >= 200
            && status != 204
            && status != 304
            && o.body().final_len() != Some(0)
            && !(t.ws.take(1) && t.ws.take(crate::runtime::ws::size::VDP_ENTRY));
        if no_room {
            t.vsl.log_str(Tag::Error, "Failure to push ESI processors");
        }
        include_length(t, o, &list);
        if t.vdp_filters.is_some() {
            filters = crate::client::vdp::DeliveryPlan::parse(&list, &t.vcl.vmods).map(|mut p| {
                p.before_gunzip.append(&mut p.after_gunzip);
                Some(p.before_gunzip)
            });
        }
    }
    let pushed = matches!(filters, Ok(Some(_)));
    if let Ok(Some(f)) = std::mem::replace(&mut filters, Ok(None)) {
        sink.levels.push(VmodFilters(f));
    }
    // As varnishd's cnt_transmit: a 1xx, 204 or 304 has no body to send
    // (ved_deliver is told so and sends nothing), whatever the object
    // holds.
    let bodiless = status < 200 || status == 204 || status == 304;
    let result = if no_room {
        Ok(())
    } else if let Err(e) = filters {
        t.vsl.log_str(Tag::Error, &e);
        t.vsl.log_str(Tag::Error, "Failure to push processors");
        Err(io::Error::other(e))
    } else if onerror && status != 200 && status != 204 {
        Err(io::Error::other("include status"))
    } else if bodiless {
        Ok(())
    } else {
        match (obj, synth) {
            (_, Some(b)) => sink.plain(w, &b).await,
            (Some(o), None) => match o.data().esi.clone().filter(|_| t.esi) {
                Some(code) => match Program::new(code) {
                    Ok(prog) => walk(t, w, &mut sink, &o, prog).await,
                    Err(e) => {
                        t.vsl.log(Tag::Error, format_args!("{e}"));
                        Err(io::Error::other(e))
                    }
                },
                None => {
                    let gzip_support = t.sh.params().flag(pid!("http_gzip_support"));
                    let gunzips = include_gunzips(t);
                    object_body(w, &mut sink, &o, gzip_support, gunzips, &t.sh.counters).await
                }
            },
            (None, None) => Ok(()),
        }
    };
    // The include's filters end: what they still had passes through its
    // parents' filters.
    let own = if pushed { sink.levels.pop() } else { None };
    let result = match own {
        Some(mut level) => match crate::client::vdp::finish(&mut level.0) {
            Ok(tail) => match result {
                Ok(()) => sink.plain(w, &tail).await,
                err => err,
            },
            Err(e) => Err(io::Error::other(e)),
        },
        None => result,
    };
    if result.is_err() && sink.abort_on_error {
        sink.abort = true;
    }
    t.esi_sink = Some(sink);
    After::KeepAlive
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    async fn sink_output(gzip: bool, chunked: bool, parts: &[&[u8]]) -> (Vec<u8>, u64) {
        let mut out: Vec<u8> = Vec::new();
        let mut sink = EsiSink {
            chunked,
            gzip,
            idle_send: Duration::from_secs(5),
            ..EsiSink::default()
        };
        {
            let w: &mut (dyn AsyncWrite + Unpin + Send) = &mut out;
            if gzip {
                sink.raw(w, &GZIP_HEADER).await.unwrap();
            }
            for p in parts {
                sink.plain(w, p).await.unwrap();
            }
            if gzip {
                sink.gzip_tail(w).await.unwrap();
            }
            sink.flush(w).await.unwrap();
        }
        (out, sink.bytes)
    }

    #[tokio::test]
    async fn stitched_gzip_stream_is_valid() {
        let big = vec![b'x'; 70_000];
        let (out, n) = sink_output(true, false, &[b"hello ", &big, b"", b" world"]).await;
        assert_eq!(n, out.len() as u64);
        // varnishd's ved_vdp header: XFL 2, OS Unix.
        assert_eq!(&out[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 3]);
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&out[..])
            .read_to_end(&mut plain)
            .unwrap();
        let mut expect = b"hello ".to_vec();
        expect.extend_from_slice(&big);
        expect.extend_from_slice(b" world");
        assert_eq!(plain, expect);
    }

    #[tokio::test]
    async fn chunked_framing_counts_only_body_bytes() {
        let big = vec![b'y'; 10_000];
        let (mut out, n) = sink_output(false, true, &[b"abc", &big, b"de"]).await;
        assert_eq!(n, 3 + 10_000 + 2);
        out.extend_from_slice(lacquer_http::LAST_CHUNK);
        let mut d = lacquer_http::ChunkedDecoder::new(lacquer_http::ChunkedLimits::default());
        let mut body = Vec::new();
        let (used, done) = d.decode_to(&out, &mut body).unwrap();
        assert!(done && used == out.len());
        assert_eq!(body.len(), 10_005);
        assert!(body.starts_with(b"abcyyy") && body.ends_with(b"yyde"));
    }

    #[test]
    fn include_requests_drop_what_cannot_apply() {
        let mut h = lacquer_http::Headers::new();
        h.append("Host", "top");
        h.append("If-None-Match", "\"x\"");
        h.append("Range", "bytes=1-2");
        h.append("Accept-Encoding", "br");
        h.append("Cookie", "c=1");
        let top = ReqMsg {
            method: Bytes::from_static(b"POST"),
            url: Bytes::from_static(b"/"),
            proto: Bytes::from_static(b"HTTP/1.0"),
            headers: h,
        };
        let r = include_request(
            &top,
            Some(&Bytes::from_static(b"frag")),
            &Bytes::from_static(b"/f"),
            true,
        );
        assert_eq!(&r.method[..], b"GET");
        assert_eq!(&r.proto[..], b"HTTP/1.1");
        assert_eq!(r.headers.get("host"), Some(&b"frag"[..]));
        assert_eq!(r.headers.get("accept-encoding"), Some(&b"gzip"[..]));
        assert_eq!(r.headers.get("cookie"), Some(&b"c=1"[..]));
        assert!(r.headers.get("range").is_none() && r.headers.get("if-none-match").is_none());
        let r = include_request(&top, None, &Bytes::from_static(b"/g"), false);
        assert_eq!(r.headers.get("host"), Some(&b"top"[..]));
        assert!(r.headers.get("accept-encoding").is_none());
    }
}
