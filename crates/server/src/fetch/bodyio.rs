//! Reading message bodies off a socket as segments, whatever their framing
//! (Content-Length, chunked, until close), with a timeout on every read.
//!
//! The receive buffer is shared with the head parser: bytes that arrived
//! with the head are used first, and bytes past the body's end (a pipelined
//! request) are left in the buffer for the next message.
//!
//! A response body that is not whole in the bytes that came with the head
//! is read as varnishd's `v1f_read` reads it: those bytes go out only
//! together with the next socket read, so a backend that stalls or fails
//! right after its head loses them (the client gets no body byte of a
//! fetch that then fails), where a backend that closes gives them up. A
//! chunked body is read so too when those bytes end inside a chunk's data.
//! Request bodies streamed to a fetch follow the same rule.

use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use lacquer_http::{BodyKind, ChunkedDecoder, ChunkedLimits};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Why a body could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum BodyIoError {
    #[error("timeout")]
    Timeout,
    #[error("EOF before the end of the body")]
    Eof,
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Framing(String),
}

/// Reads one body as segments.
#[derive(Debug)]
pub struct BodyStream {
    kind: BodyKind,
    remaining: u64,
    chunked: Option<ChunkedDecoder>,
    done: bool,
    /// A response body whose first read is still to come (see the module
    /// doc: bytes that arrived with the head wait for one socket read).
    first_read: bool,
    pub bytes_read: u64,
}

const READ_SIZE: usize = 64 * 1024;

/// Segments smaller than this are copied out of the read buffer.
const COPY_BELOW: usize = 16 * 1024;

/// Takes `n` bytes off the front of the read buffer. A small piece is
/// copied: a stored object must not keep a whole 64 KiB read buffer alive
/// for a few hundred bytes of body.
fn take(buf: &mut BytesMut, n: usize) -> Bytes {
    if n < COPY_BELOW {
        let b = Bytes::copy_from_slice(&buf[..n]);
        bytes::Buf::advance(buf, n);
        b
    } else {
        buf.split_to(n).freeze()
    }
}

impl BodyStream {
    /// A reader for a body framed as `kind`; `response` selects the error
    /// status chunked errors carry (503 for backends, 400 for clients).
    pub fn new(kind: BodyKind, response: bool) -> Self {
        let chunked = matches!(kind, BodyKind::Chunked).then(|| {
            if response {
                ChunkedDecoder::for_response(ChunkedLimits::default())
            } else {
                ChunkedDecoder::new(ChunkedLimits::default())
            }
        });
        BodyStream {
            kind,
            remaining: match kind {
                BodyKind::Length(n) => n,
                _ => 0,
            },
            chunked,
            done: matches!(kind, BodyKind::None),
            first_read: response,
            bytes_read: 0,
        }
    }

    /// True once the whole body was read.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Whether a chunked body stopped inside a chunk's data (varnishd's
    /// `chunked insufficient bytes`) rather than in a size line.
    pub fn in_chunk_data(&self) -> bool {
        self.chunked.as_ref().is_some_and(ChunkedDecoder::in_data)
    }

    /// The next segment, `None` at the end of the body.
    pub async fn next<R: AsyncRead + Unpin>(
        &mut self,
        r: &mut R,
        buf: &mut BytesMut,
        timeout: Duration,
    ) -> Result<Option<Bytes>, BodyIoError> {
        if std::mem::take(&mut self.first_read) && !buf.is_empty() {
            let short = match self.kind {
                BodyKind::Length(_) => (buf.len() as u64) < self.remaining,
                BodyKind::Eof => true,
                // varnishd reads a chunk's data with v1f_read too: a chunk
                // whose data the bytes from the head end inside waits for
                // one more read (a stall there loses them).
                BodyKind::Chunked => self.chunked.as_ref().is_some_and(|dec| {
                    let mut dry = dec.clone();
                    let mut out = Vec::new();
                    matches!(dry.decode_to(&buf[..], &mut out), Ok((_, false))) && dry.in_data()
                }),
                BodyKind::None => false,
            };
            if short {
                // v1f_read: the pipelined bytes, then one read() for the
                // rest; its failure fails the whole read.
                buf.reserve(READ_SIZE);
                let failed = match tokio::time::timeout(timeout, r.read_buf(buf)).await {
                    Err(_) => Some(BodyIoError::Timeout),
                    Ok(Err(e)) => Some(e.into()),
                    Ok(Ok(_)) => None,
                };
                if let Some(e) = failed {
                    // The chunked filter had parsed up to the lost data
                    // (its error is `chunked insufficient bytes`).
                    if let Some(dec) = self.chunked.as_mut() {
                        let mut lost = Vec::new();
                        if let Ok((used, _)) = dec.decode_to(&buf[..], &mut lost) {
                            let _ = buf.split_to(used);
                        }
                    }
                    return Err(e);
                }
            }
        }
        loop {
            if self.done {
                return Ok(None);
            }
            if !buf.is_empty() {
                match self.kind {
                    BodyKind::None => unreachable!("done is set for empty bodies"),
                    BodyKind::Length(_) => {
                        let n = (buf.len() as u64).min(self.remaining) as usize;
                        self.remaining -= n as u64;
                        self.done = self.remaining == 0;
                        self.bytes_read += n as u64;
                        return Ok(Some(take(buf, n)));
                    }
                    BodyKind::Eof => {
                        let n = buf.len();
                        let seg = take(buf, n);
                        self.bytes_read += seg.len() as u64;
                        return Ok(Some(seg));
                    }
                    BodyKind::Chunked => {
                        let dec = self.chunked.as_mut().expect("chunked decoder present");
                        let mut out = Vec::new();
                        let (used, done) = dec
                            .decode_to(&buf[..], &mut out)
                            .map_err(|e| BodyIoError::Framing(e.message().to_string()))?;
                        let _ = buf.split_to(used);
                        self.done = done;
                        if !out.is_empty() {
                            self.bytes_read += out.len() as u64;
                            return Ok(Some(Bytes::from(out)));
                        }
                        if done {
                            return Ok(None);
                        }
                    }
                }
            }
            if self.done {
                return Ok(None);
            }
            buf.reserve(READ_SIZE);
            let n = match tokio::time::timeout(timeout, r.read_buf(buf)).await {
                Err(_) => return Err(BodyIoError::Timeout),
                Ok(r) => r?,
            };
            if n == 0 {
                if matches!(self.kind, BodyKind::Eof) {
                    self.done = true;
                    return Ok(None);
                }
                return Err(BodyIoError::Eof);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(kind: BodyKind, wire: &[u8]) -> (Vec<u8>, BytesMut) {
        let mut r = wire;
        let mut buf = BytesMut::new();
        let mut s = BodyStream::new(kind, true);
        let mut out = Vec::new();
        while let Some(seg) = s
            .next(&mut r, &mut buf, Duration::from_secs(1))
            .await
            .unwrap()
        {
            out.extend_from_slice(&seg);
        }
        (out, buf)
    }

    #[tokio::test]
    async fn framings() {
        let (b, rest) = read_all(BodyKind::Length(5), b"helloNEXT").await;
        assert_eq!(b, b"hello");
        // The reader may have buffered the next message's bytes.
        assert!(b"NEXT".starts_with(&rest[..]));
        let (b, _) = read_all(BodyKind::Chunked, b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").await;
        assert_eq!(b, b"abcde");
        let (b, _) = read_all(BodyKind::Eof, b"until close").await;
        assert_eq!(b, b"until close");
        let (b, _) = read_all(BodyKind::None, b"ignored").await;
        assert!(b.is_empty());
    }

    /// A reader that hands out its bytes, then stalls forever.
    struct Stalls(&'static [u8]);

    impl AsyncRead for Stalls {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            out: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            if self.0.is_empty() {
                return std::task::Poll::Pending;
            }
            out.put_slice(self.0);
            self.0 = b"";
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_chunk_cut_in_the_heads_bytes_waits_for_the_next_read() {
        let t = Duration::from_millis(50);
        // Inside a chunk's data: lost with the stalled read, and the
        // decoder stands inside that chunk (`chunked insufficient bytes`).
        let mut buf = BytesMut::from(&b"5\r\n012"[..]);
        let mut s = BodyStream::new(BodyKind::Chunked, true);
        let r = s.next(&mut Stalls(b""), &mut buf, t).await;
        assert!(matches!(r, Err(BodyIoError::Timeout)), "{r:?}");
        assert!(s.in_chunk_data());
        // Whole chunks in the head's bytes go out without another read.
        let mut buf = BytesMut::from(&b"3\r\nabc\r\n"[..]);
        let mut s = BodyStream::new(BodyKind::Chunked, true);
        let seg = s.next(&mut Stalls(b""), &mut buf, t).await.unwrap();
        assert_eq!(seg.as_deref(), Some(&b"abc"[..]));
    }

    #[tokio::test]
    async fn bytes_that_came_with_the_head_wait_for_the_next_read() {
        let t = Duration::from_millis(50);
        // Stalled after the head: the head's body bytes are lost.
        for kind in [BodyKind::Length(10), BodyKind::Eof] {
            let mut buf = BytesMut::from(&b"abc"[..]);
            let mut s = BodyStream::new(kind, true);
            let r = s.next(&mut Stalls(b""), &mut buf, t).await;
            assert!(matches!(r, Err(BodyIoError::Timeout)), "{kind:?}");
        }
        // The next read brings more: both go out together.
        let mut buf = BytesMut::from(&b"abc"[..]);
        let mut s = BodyStream::new(BodyKind::Length(10), true);
        let seg = s.next(&mut Stalls(b"de"), &mut buf, t).await.unwrap();
        assert_eq!(seg.as_deref(), Some(&b"abcde"[..]));
        // A closing backend gives them up before the short body fails.
        let mut buf = BytesMut::from(&b"abc"[..]);
        let mut s = BodyStream::new(BodyKind::Length(10), true);
        let seg = s.next(&mut &b""[..], &mut buf, t).await.unwrap();
        assert_eq!(seg.as_deref(), Some(&b"abc"[..]));
        assert!(matches!(
            s.next(&mut &b""[..], &mut buf, t).await,
            Err(BodyIoError::Eof)
        ));
        // Whole in the head's bytes, or a request body: no extra read.
        let mut buf = BytesMut::from(&b"abc"[..]);
        let mut s = BodyStream::new(BodyKind::Length(3), true);
        let seg = s.next(&mut Stalls(b""), &mut buf, t).await.unwrap();
        assert_eq!(seg.as_deref(), Some(&b"abc"[..]));
        let mut buf = BytesMut::from(&b"abc"[..]);
        let mut s = BodyStream::new(BodyKind::Length(10), false);
        let seg = s.next(&mut Stalls(b""), &mut buf, t).await.unwrap();
        assert_eq!(seg.as_deref(), Some(&b"abc"[..]));
    }

    #[tokio::test]
    async fn short_and_bad_bodies() {
        let mut r: &[u8] = b"abc";
        let mut buf = BytesMut::new();
        let mut s = BodyStream::new(BodyKind::Length(10), true);
        let t = Duration::from_secs(1);
        assert!(s.next(&mut r, &mut buf, t).await.unwrap().is_some());
        assert!(matches!(
            s.next(&mut r, &mut buf, t).await,
            Err(BodyIoError::Eof)
        ));
        let mut r: &[u8] = b"zz\r\n";
        let mut s = BodyStream::new(BodyKind::Chunked, true);
        assert!(matches!(
            s.next(&mut r, &mut BytesMut::new(), t).await,
            Err(BodyIoError::Framing(_))
        ));
    }
}
