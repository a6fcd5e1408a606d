//! The client's request body: left on the connection until something needs
//! it, as in varnishd, so an upload through a pass is streamed to the
//! backend with a few buffers of memory whatever its size.
//!
//! - Before VCL runs, only as much is read as `std.cache_req_body()` could
//!   want (the largest constant limit it is called with in the VCL; a
//!   computed limit means [`DYNAMIC_PREFETCH`](crate::runtime::vcls::DYNAMIC_PREFETCH)): VCL cannot wait for I/O, so
//!   the body a call may keep is read ahead. A VCL that never calls it
//!   reads nothing ahead. A body that fits is *cached*: a pass sends it
//!   with `Content-Length` and a retry can send it again.
//! - Otherwise a pass fetch streams it: the session reads segments off the
//!   socket and hands them to the fetch task through a channel of
//!   [`CHANNEL_SEGMENTS`] segments (each at most one socket read), so
//!   memory per upload stays bounded. A `Content-Length` body keeps its
//!   length, a chunked one is sent chunked. If the client stops early
//!   (EOF, `timeout_idle`, bad chunking) the fetch fails with a 503, and a
//!   retry is refused ("req.body not cached"), since the bytes are gone.
//! - A body nobody used (a hit, a synth, a failed fetch) is read and
//!   discarded before the response goes out, as varnishd's `VRB_Ignore`
//!   does, so the connection stays usable; if that fails the response says
//!   `Connection: close` and the connection closes. Responses sent outside
//!   the delivery path (an overflowed workspace's 500) discard it after.
//!
//! `Expect: 100-continue` (HTTP/1.1, no body bytes sent yet) changes the
//! first point: the client sends nothing before the interim `100 Continue`,
//! which varnishd sends only when the body is read, or right after
//! vcl_recv unless `std.late_100_continue(true)` postponed it. So nothing
//! is read ahead, and a `std.cache_req_body()` in vcl_recv must send the
//! 100 and read the body *at the call*, while VCL (synchronous) runs.
//! [`recv_with_body`] does that: vcl_recv runs on a scoped thread and the
//! call asks the connection's owner, blocked beside it in
//! `block_in_place`, to do the I/O ([`BodyLink`]). Only a request owing a
//! 100 to a VCL that can call `std.cache_req_body()` takes this path, so
//! every other request runs VCL as before. The alternatives were worse:
//! the VCL context cannot hold the connection (generic, borrowed by the
//! session), and wrapping the context to add it means delegating its whole
//! interface; re-running vcl_recv after reading would repeat its effects.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use lacquer_http::BodyKind;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use crate::fetch::bodyio::{BodyIoError, BodyStream};
use crate::fetch::fetch_fsm::Segment;

/// Segments in flight between the client connection and a fetch.
pub const CHANNEL_SEGMENTS: usize = 4;

/// A request body not (completely) read yet.
#[derive(Debug)]
pub struct Pending {
    stream: BodyStream,
    kind: BodyKind,
    /// Segments already read ahead (less than the whole body).
    prefix: Vec<Bytes>,
}

/// What reading ahead got of a body.
#[derive(Debug)]
pub enum ReqBody {
    /// Read completely and kept, with the size a `std.cache_req_body()`
    /// limit is checked against (see [`ReqBody::read_ahead`]).
    Cached(Bytes, u64),
    /// Still (at least partly) on the connection.
    Pending(Pending),
}

impl ReqBody {
    /// Reads ahead up to `limit` bytes of a body framed as `kind`: the
    /// whole body when it fits (cached), else what was read stays as the
    /// prefix of a pending body.
    pub async fn read_ahead<R: AsyncRead + Unpin>(
        kind: BodyKind,
        r: &mut R,
        buf: &mut BytesMut,
        timeout: Duration,
        limit: u64,
    ) -> Result<(ReqBody, u64), BodyIoError> {
        let mut stream = BodyStream::new(kind, false);
        let mut prefix = Vec::new();
        let mut have = 0u64;
        if let BodyKind::Length(n) = kind
            && n > limit
        {
            // Known to be too big: nothing to gain from reading ahead.
            return Ok((ReqBody::Pending(Pending::new(kind)), 0));
        }
        // As varnishd's vrb_pull, which checks the limit before each read
        // only: an HTTP/2 body without a length (the only kind read to its
        // end, `Eof`) whose end came with a read is checked on what came
        // before that read. What follows a read without waiting (the end,
        // or data that arrived meanwhile) counts as part of that read.
        let eof = matches!(kind, BodyKind::Eof);
        let whole = |prefix: &[Bytes], have: u64, checked: u64| {
            let mut all = BytesMut::with_capacity(have as usize);
            for s in prefix {
                all.extend_from_slice(s);
            }
            Ok((ReqBody::Cached(all.freeze(), checked), have))
        };
        while have <= limit {
            let before = have;
            match stream.next(r, buf, timeout).await? {
                Some(seg) => {
                    have += seg.len() as u64;
                    prefix.push(seg);
                }
                None => return whole(&prefix, have, have),
            }
            if !eof {
                continue;
            }
            loop {
                match tokio::time::timeout(Duration::ZERO, stream.next(r, buf, timeout)).await {
                    Ok(Ok(None)) => return whole(&prefix, have, before),
                    Ok(Ok(Some(seg))) => {
                        have += seg.len() as u64;
                        prefix.push(seg);
                        if have > limit {
                            // Read ahead no further than the limit.
                            break;
                        }
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(_) => break,
                }
            }
        }
        Ok((
            ReqBody::Pending(Pending {
                stream,
                kind,
                prefix,
            }),
            have,
        ))
    }
}

/// A `std.cache_req_body()` that has to wait for the body asks for it
/// here: `(kind, limit)` goes to the connection's owner, which sends the
/// owed `100 Continue`, reads up to `limit` bytes and answers.
#[derive(Debug)]
pub struct BodyLink {
    ask: std::sync::mpsc::Sender<(BodyKind, u64)>,
    answer: std::sync::mpsc::Receiver<Pulled>,
}

/// What the connection's owner did for a [`BodyLink`] request.
#[derive(Debug)]
pub struct Pulled {
    /// The interim `100 Continue` went out.
    pub sent_100: bool,
    /// The body read (kept or still pending), and the bytes read.
    pub result: Result<(ReqBody, u64), BodyIoError>,
}

impl BodyLink {
    /// Asks for a body framed as `kind`, up to `limit` bytes, and waits
    /// (the caller runs on [`recv_with_body`]'s VCL thread); `None` when
    /// the connection side is gone.
    pub fn pull(&self, kind: BodyKind, limit: u64) -> Option<Pulled> {
        self.ask.send((kind, limit)).ok()?;
        self.answer.recv().ok()
    }
}

/// Runs `run` (vcl_recv) so that `std.cache_req_body()` can read the body
/// off `conn` while it runs: `run` gets its own scoped thread, `task`
/// carries a [`BodyLink`] back to this one, which serves its requests on
/// the connection (each bounded by `timeout`) until `run` returns. Must be
/// called on a multi-threaded runtime (it uses `block_in_place`).
pub fn recv_with_body<S, T>(
    conn: &mut crate::client::req_fsm::ClientConn<S>,
    task: &mut crate::client::req_task::ReqTask,
    timeout: Duration,
    run: impl FnOnce(&mut crate::client::req_task::ReqTask) -> T + Send,
) -> T
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    T: Send,
{
    let rt = tokio::runtime::Handle::current();
    let (ask_tx, ask_rx) = std::sync::mpsc::channel();
    let (answer_tx, answer_rx) = std::sync::mpsc::channel();
    task.body_link = Some(BodyLink {
        ask: ask_tx,
        answer: answer_rx,
    });
    tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let vcl = scope.spawn(|| {
                let _rt = rt.enter();
                let out =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut *task)));
                // Dropping the link ends the loop below, however run ended.
                task.body_link = None;
                out
            });
            while let Ok((kind, limit)) = ask_rx.recv() {
                let pulled = rt.block_on(pull_with_100(conn, kind, limit, timeout));
                if answer_tx.send(pulled).is_err() {
                    break;
                }
            }
            match vcl.join() {
                Ok(Ok(out)) => out,
                Ok(Err(panic)) | Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    })
}

/// Sends the owed `100 Continue`, then reads up to `limit` bytes of the
/// body (nothing when its length already exceeds `limit`: no 100 then).
async fn pull_with_100<S>(
    conn: &mut crate::client::req_fsm::ClientConn<S>,
    kind: BodyKind,
    limit: u64,
    timeout: Duration,
) -> Pulled
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    use tokio::io::AsyncWriteExt;
    if matches!(kind, BodyKind::Length(n) if n > limit) {
        return Pulled {
            sent_100: false,
            result: Ok((ReqBody::Pending(Pending::new(kind)), 0)),
        };
    }
    if let Err(e) = conn.stream.write_all(CONTINUE_100).await {
        return Pulled {
            sent_100: false,
            result: Err(e.into()),
        };
    }
    Pulled {
        sent_100: true,
        result: ReqBody::read_ahead(kind, &mut conn.stream, &mut conn.rbuf, timeout, limit).await,
    }
}

/// The interim response a client waiting on `Expect: 100-continue` gets.
pub const CONTINUE_100: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Logs a failed read of an HTTP/1 request body as varnishd's body pull
/// (`v1f_pull_*` through `VFP_Error`) logs it: a `FetchError` on the
/// request with the framing fault's own text.
pub(crate) fn log_pull_error(
    vsl: &mut lacquer_vsl::VslBuf,
    kind: BodyKind,
    e: &crate::fetch::bodyio::BodyIoError,
) {
    use crate::fetch::bodyio::BodyIoError;
    use lacquer_vsl::Tag;
    match (e, kind) {
        (BodyIoError::Eof, BodyKind::Length(_)) => {
            vsl.log_str(Tag::FetchError, "straight insufficient bytes");
        }
        // v1f_read logs the failed read() first (a timeout is the socket's
        // EAGAIN), then the framing filter gives up.
        (BodyIoError::Timeout | BodyIoError::Io(_), BodyKind::Length(_)) => {
            let text = match e {
                BodyIoError::Io(io) => crate::fetch::fetch_fsm::errno_text(io),
                _ => "Resource temporarily unavailable".to_string(),
            };
            vsl.log_str(Tag::FetchError, &text);
            vsl.log_str(Tag::FetchError, "straight insufficient bytes");
        }
        // The same failed read under the chunked filter.
        (BodyIoError::Timeout | BodyIoError::Io(_), BodyKind::Chunked) => {
            let text = match e {
                BodyIoError::Io(io) => crate::fetch::fetch_fsm::errno_text(io),
                _ => "Resource temporarily unavailable".to_string(),
            };
            vsl.log_str(Tag::FetchError, &text);
            vsl.log_str(Tag::FetchError, "chunked read err");
        }
        (BodyIoError::Framing(msg), _) => vsl.log_str(Tag::FetchError, msg),
        _ => vsl.log(Tag::FetchError, format_args!("req.body read error: {e}")),
    }
}

/// A failed body read as varnishd words it after `errno`: `N (text)`
/// (a read timeout is the socket's `EAGAIN`), or the failure's own text
/// when no system call failed.
pub(crate) fn errno_words(e: &crate::fetch::bodyio::BodyIoError) -> String {
    use crate::fetch::bodyio::BodyIoError;
    match e {
        BodyIoError::Timeout => "11 (Resource temporarily unavailable)".to_string(),
        BodyIoError::Io(io) => match io.raw_os_error() {
            Some(n) => format!("{n} ({})", crate::fetch::fetch_fsm::errno_text(io)),
            None => io.to_string(),
        },
        _ => e.to_string(),
    }
}

/// Logs the interim `100 Continue` as varnishd does (a minimal response)
/// and counts its bytes among the request's response header bytes, as
/// varnishd's `http1_minimal_response` does.
pub fn log_100(t: &mut crate::client::req_task::ReqTask) {
    use lacquer_vsl::Tag;
    t.vsl.log_str(Tag::RespProtocol, "HTTP/1.1");
    t.vsl.log_str(Tag::RespStatus, "100");
    t.vsl.log_str(Tag::RespReason, "Continue");
    t.interim_hdr_bytes += CONTINUE_100.len() as u64;
}

/// Reads ahead what `std.cache_req_body()` may keep of a request body
/// framed as `kind` (the VCL's prefetch; nothing when it has none) and
/// hands it to `task`: kept whole, or pending with what was read so far.
/// Counts the bytes read.
pub async fn take_ahead<R: AsyncRead + Unpin>(
    task: &mut crate::client::req_task::ReqTask,
    kind: BodyKind,
    r: &mut R,
    buf: &mut BytesMut,
    timeout: Duration,
) -> Result<(), BodyIoError> {
    let prefetch = task.vcl.req_body_prefetch;
    let (b, n) = if prefetch == 0 {
        (ReqBody::Pending(Pending::new(kind)), 0)
    } else {
        ReqBody::read_ahead(kind, r, buf, timeout, prefetch).await?
    };
    task.sh
        .counters
        .add(crate::runtime::counters::Main::s_req_bodybytes, n);
    task.req_body_bytes = n;
    match b {
        ReqBody::Cached(b, checked) => {
            task.req_body = Some(b);
            task.req_body_checked = checked;
            task.req_body_read_at = Some(lacquer_http::date::now());
        }
        ReqBody::Pending(p) => task.body_pending = Some(p),
    }
    Ok(())
}

impl Pending {
    /// A body framed as `kind`, nothing of which was read yet.
    ///
    /// Read as varnishd's `v1f_read` reads it (see `bodyio`): body bytes
    /// that came with the head go on only together with one more socket
    /// read, so a client that stalls inside its body forwards none of it.
    pub fn new(kind: BodyKind) -> Self {
        Pending {
            stream: BodyStream::new(kind, true),
            kind,
            prefix: Vec::new(),
        }
    }

    /// How the body is framed.
    pub fn kind(&self) -> BodyKind {
        self.kind
    }

    /// The length a fetch announces (`None`: chunked or until close).
    pub fn length(&self) -> Option<u64> {
        match self.kind {
            BodyKind::Length(n) => Some(n),
            _ => None,
        }
    }

    /// Feeds the rest of the body into `tx`, a segment at a time, then the
    /// end marker. Returns the bytes read off the connection and, when the
    /// fetch stopped listening first, what is left of the body (to be
    /// discarded). A read failure is sent to the fetch and returned.
    pub async fn pump<R: AsyncRead + Unpin>(
        mut self,
        r: &mut R,
        buf: &mut BytesMut,
        timeout: Duration,
        tx: &mpsc::Sender<Segment>,
    ) -> Result<(u64, Option<Pending>), BodyIoError> {
        let mut read = 0u64;
        for seg in std::mem::take(&mut self.prefix) {
            if tx.send(Ok(seg)).await.is_err() {
                return Ok((read, Some(self)));
            }
        }
        loop {
            match self.stream.next(r, buf, timeout).await {
                Ok(Some(seg)) => {
                    read += seg.len() as u64;
                    if tx.send(Ok(seg)).await.is_err() {
                        return Ok((read, Some(self)));
                    }
                }
                Ok(None) => {
                    let _ = tx.send(Ok(Bytes::new())).await;
                    return Ok((read, None));
                }
                Err(e) => {
                    let _ = tx
                        .send(Err(format!("req.body read error: {}", errno_words(&e))))
                        .await;
                    return Err(e);
                }
            }
        }
    }

    /// The segments read ahead, when the body is framed by length (they
    /// can be forwarded as they came, e.g. down a pipe); `None` for a
    /// chunked body, whose read-ahead was decoded.
    pub fn raw_prefix(&self) -> Option<&[Bytes]> {
        matches!(self.kind, BodyKind::Length(_)).then_some(&self.prefix[..])
    }

    /// Reads the rest of the body and throws it away; the bytes read.
    pub async fn discard<R: AsyncRead + Unpin>(
        mut self,
        r: &mut R,
        buf: &mut BytesMut,
        timeout: Duration,
    ) -> Result<u64, BodyIoError> {
        let mut read = 0u64;
        while let Some(seg) = self.stream.next(r, buf, timeout).await? {
            read += seg.len() as u64;
        }
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn unframed_body_is_checked_before_the_read_that_ends_it() {
        use tokio::io::AsyncWriteExt;
        // Five bytes and the end at once: one read, checked on nothing.
        let mut r: &[u8] = b"hello";
        let mut buf = BytesMut::new();
        let (b, n) = ReqBody::read_ahead(BodyKind::Eof, &mut r, &mut buf, T, 4)
            .await
            .unwrap();
        assert!(matches!(&b, ReqBody::Cached(x, 0) if &x[..] == b"hello"));
        assert_eq!(n, 5);
        // Five bytes, the end still to come: over the limit, pending.
        let (mut client, mut server) = tokio::io::duplex(64);
        client.write_all(b"hello").await.unwrap();
        let mut buf = BytesMut::new();
        let (b, n) = ReqBody::read_ahead(BodyKind::Eof, &mut server, &mut buf, T, 4)
            .await
            .unwrap();
        assert!(matches!(b, ReqBody::Pending(_)));
        assert_eq!(n, 5);
        // Three bytes, then two and the end: checked on the three.
        let (mut client, mut server) = tokio::io::duplex(64);
        client.write_all(b"hel").await.unwrap();
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            client.write_all(b"lo").await.unwrap();
        });
        let mut buf = BytesMut::new();
        let (b, _) = ReqBody::read_ahead(BodyKind::Eof, &mut server, &mut buf, T, 4)
            .await
            .unwrap();
        late.await.unwrap();
        assert!(matches!(&b, ReqBody::Cached(x, 3) if &x[..] == b"hello"));
    }

    #[tokio::test]
    async fn small_body_is_cached_big_one_stays_pending() {
        let mut r: &[u8] = b"";
        let mut buf = BytesMut::from(&b"hello"[..]);
        let (b, n) = ReqBody::read_ahead(BodyKind::Length(5), &mut r, &mut buf, T, 10)
            .await
            .unwrap();
        assert!(matches!(&b, ReqBody::Cached(x, _) if &x[..] == b"hello"));
        assert_eq!(n, 5);

        let mut buf = BytesMut::from(&b"hello"[..]);
        let (b, n) = ReqBody::read_ahead(BodyKind::Length(5), &mut r, &mut buf, T, 4)
            .await
            .unwrap();
        assert!(matches!(b, ReqBody::Pending(_)));
        assert_eq!((n, buf.len()), (0, 5), "nothing read for a known-big body");

        let wire = b"3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n";
        let mut buf = BytesMut::new();
        let mut r: &[u8] = wire;
        let (b, n) = ReqBody::read_ahead(BodyKind::Chunked, &mut r, &mut buf, T, 2)
            .await
            .unwrap();
        assert!(matches!(b, ReqBody::Pending(_)));
        assert!(n > 2);
        let ReqBody::Pending(p) = b else {
            unreachable!()
        };
        let (tx, mut rx) = mpsc::channel(CHANNEL_SEGMENTS);
        let (_, left) = p.pump(&mut r, &mut buf, T, &tx).await.unwrap();
        assert!(left.is_none());
        drop(tx);
        let mut all = Vec::new();
        let mut ended = false;
        while let Some(s) = rx.recv().await {
            let s = s.unwrap();
            ended = s.is_empty();
            all.extend_from_slice(&s);
        }
        assert!(ended, "the end marker comes last");
        assert_eq!(all, b"abcdef", "prefix then the rest, in order");
    }

    #[tokio::test]
    async fn short_body_reaches_the_fetch_as_an_error() {
        let mut r: &[u8] = b"only";
        let mut buf = BytesMut::new();
        let p = Pending::new(BodyKind::Length(10));
        let (tx, mut rx) = mpsc::channel(CHANNEL_SEGMENTS);
        assert!(p.pump(&mut r, &mut buf, T, &tx).await.is_err());
        assert_eq!(&rx.recv().await.unwrap().unwrap()[..], b"only");
        let e = rx.recv().await.unwrap().unwrap_err();
        assert!(e.starts_with("req.body read error"), "{e}");
    }

    #[tokio::test]
    async fn discard_leaves_the_next_request() {
        let mut r: &[u8] = b"";
        let mut buf = BytesMut::from(&b"abcGET / HTTP/1.1\r\n"[..]);
        let p = Pending::new(BodyKind::Length(3));
        assert_eq!(p.discard(&mut r, &mut buf, T).await.unwrap(), 3);
        assert_eq!(&buf[..], b"GET / HTTP/1.1\r\n");
    }
}
