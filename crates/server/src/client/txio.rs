//! Writing a response to a client under varnishd's send timeouts.
//!
//! varnishd writes with blocking `writev` on a socket whose `SO_SNDTIMEO`
//! is `idle_send_timeout`, and gives the whole delivery until
//! `send_timeout` after it started. A write that makes no complete
//! progress within `idle_send_timeout` is logged (`Debug "Hit idle send
//! timeout, wrote = n/m; retrying"`) and tried again while the delivery is
//! within `send_timeout`; past it the delivery stops (`Debug "Hit total
//! send timeout …; not retrying"`) and the session ends with `TX_ERROR`.
//! [`TimedWriter`] keeps those rules over an async stream: each write call
//! stands for one `writev`, its idle timer restarting whenever varnishd's
//! would return.

use std::io;

use std::time::Duration;

use bytes::Bytes;
use lacquer_vsl::{Tag, VslBuf};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// Why writing to the client stopped.
#[derive(Debug)]
pub enum TxError {
    /// The client closed the connection (`REM_CLOSE`).
    Closed,
    /// A send timeout or another write error (`TX_ERROR`).
    Failed,
    /// A delivery processor failed (the object's body, gunzip, a vmod
    /// filter) with the socket fine: varnishd's V1D_Deliver then closes
    /// as `REM_CLOSE`.
    Aborted,
}

impl TxError {
    /// The session close reason varnishd logs for it.
    pub fn close_reason(&self) -> &'static str {
        match self {
            TxError::Closed => "REM_CLOSE",
            TxError::Failed => "TX_ERROR",
            TxError::Aborted => "REM_CLOSE",
        }
    }
}

/// A client stream written under `idle_send_timeout` and a total deadline.
pub struct TimedWriter<'a, S> {
    stream: &'a mut S,
    idle: Duration,
    deadline: Instant,
}

impl<'a, S: AsyncWrite + Unpin> TimedWriter<'a, S> {
    /// Starts a delivery now: `send_timeout` counts from here.
    pub fn new(stream: &'a mut S, send_timeout: f64, idle_send_timeout: f64) -> Self {
        let secs = |s: f64| Duration::from_secs_f64(if s.is_finite() { s.max(0.001) } else { 1e9 });
        TimedWriter {
            stream,
            idle: secs(idle_send_timeout),
            deadline: Instant::now() + secs(send_timeout),
        }
    }

    /// Writes `bufs` in order, as one `writev`.
    ///
    /// As varnishd's `V1L_Flush`, the total deadline is checked before
    /// every try, the first one included: a client that reads slowly
    /// enough for each try to progress within `idle_send_timeout` still
    /// loses the connection once `send_timeout` has passed.
    pub async fn write(&mut self, vsl: &mut VslBuf, bufs: &[&[u8]]) -> Result<(), TxError> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut done = 0usize;
        // What the last try returned as varnishd's `writev` would (-1 for
        // nothing written), the bytes this try has written, when it
        // started, and the error it ended with.
        let mut last: isize = 0;
        let mut in_call = 0usize;
        let mut call_start = Instant::now();
        let mut errtxt = "Success";
        let mut checked = false;
        while done < total {
            if !checked {
                if Instant::now() > self.deadline {
                    let left = total - done;
                    vsl.log(
                        Tag::Debug,
                        format_args!("Hit total send timeout, wrote = {last}/{left}; not retrying"),
                    );
                    vsl.log(
                        Tag::Debug,
                        format_args!("Write error, retval = -1, len = {left}, errno = {errtxt}"),
                    );
                    return Err(TxError::Failed);
                }
                checked = true;
            }
            let mut slices: Vec<io::IoSlice<'_>> = Vec::with_capacity(bufs.len());
            let mut skip = done;
            for b in bufs {
                if skip >= b.len() {
                    skip -= b.len();
                    continue;
                }
                slices.push(io::IoSlice::new(&b[skip..]));
                skip = 0;
            }
            let write = self.stream.write_vectored(&slices);
            match tokio::time::timeout_at(call_start + self.idle, write).await {
                Ok(Ok(0)) => return Err(self.error(vsl, total, io::ErrorKind::WriteZero.into())),
                Ok(Ok(n)) => {
                    done += n;
                    in_call += n;
                }
                Ok(Err(e)) => return Err(self.error(vsl, total, e)),
                Err(_) => {
                    let left = total - done + in_call;
                    last = if in_call == 0 { -1 } else { in_call as isize };
                    vsl.log(
                        Tag::Debug,
                        format_args!("Hit idle send timeout, wrote = {last}/{left}; retrying"),
                    );
                    errtxt = "Resource temporarily unavailable";
                    in_call = 0;
                    call_start = Instant::now();
                    checked = false;
                }
            }
        }
        Ok(())
    }

    /// Flushes what the stream buffers.
    pub async fn flush(&mut self, vsl: &mut VslBuf) -> Result<(), TxError> {
        match tokio::time::timeout_at(Instant::now() + self.idle, self.stream.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.error(vsl, 0, e)),
            Err(_) => {
                vsl.log_str(Tag::Debug, "Hit idle send timeout flushing; not retrying");
                Err(TxError::Failed)
            }
        }
    }

    fn error(&self, vsl: &mut VslBuf, len: usize, e: io::Error) -> TxError {
        vsl.log(
            Tag::Debug,
            format_args!("Write error, retval = -1, len = {len}, errno = {e}"),
        );
        if e.kind() == io::ErrorKind::BrokenPipe {
            TxError::Closed
        } else {
            TxError::Failed
        }
    }
}

/// Storage segments (and the small bytes between them) waiting to go out
/// in one vectored write, so that a large object costs a few `writev`
/// calls, as varnishd's, instead of one per storage segment.
#[derive(Default)]
pub struct SegmentBatch {
    parts: Vec<Bytes>,
    bytes: usize,
}

impl SegmentBatch {
    /// At most this many bytes or parts go in one write.
    const MAX_BYTES: usize = 1 << 20;
    const MAX_PARTS: usize = 64;

    /// Queues `seg` after what `out` holds (which moves into the batch).
    pub fn push(&mut self, out: &mut Vec<u8>, seg: Bytes) {
        if !out.is_empty() {
            self.bytes += out.len();
            self.parts.push(Bytes::from(std::mem::take(out)));
        }
        self.bytes += seg.len();
        self.parts.push(seg);
    }

    pub fn full(&self) -> bool {
        self.bytes >= Self::MAX_BYTES || self.parts.len() + 2 >= Self::MAX_PARTS
    }

    /// Writes the batch and then `out`, in one vectored write, and empties
    /// both.
    pub async fn send<S: AsyncWrite + Unpin>(
        &mut self,
        w: &mut TimedWriter<'_, S>,
        vsl: &mut VslBuf,
        out: &mut Vec<u8>,
    ) -> Result<(), TxError> {
        if self.parts.is_empty() && out.is_empty() {
            return Ok(());
        }
        let mut bufs: Vec<&[u8]> = Vec::with_capacity(self.parts.len() + 1);
        bufs.extend(self.parts.iter().map(|b| &b[..]));
        if !out.is_empty() {
            bufs.push(out);
        }
        w.write(vsl, &bufs).await?;
        self.parts.clear();
        self.bytes = 0;
        out.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn vsl() -> VslBuf {
        let d = std::env::temp_dir().join(format!("lq-txio-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let cfg = lacquer_vsl::VslConfig {
            space: lacquer_vsl::ring::MIN_SPACE,
            ..lacquer_vsl::VslConfig::default()
        };
        let ring = lacquer_vsl::Vsl::create(&lacquer_vsl::vsl_path(&d), &cfg).unwrap();
        VslBuf::new(ring, lacquer_vsl::Vxid::client(1))
    }

    #[tokio::test]
    async fn a_reader_that_keeps_up_gets_everything() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            b.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut v = vsl();
        let data = vec![7u8; 10_000];
        {
            let mut w = TimedWriter::new(&mut a, 5.0, 1.0);
            w.write(&mut v, &[b"head", &data]).await.unwrap();
            w.flush(&mut v).await.unwrap();
        }
        drop(a);
        let got = reader.await.unwrap();
        assert_eq!(got.len(), 10_004);
    }

    #[tokio::test]
    async fn a_stalled_reader_hits_idle_then_total_timeout() {
        let (mut a, _b) = tokio::io::duplex(16);
        let mut v = vsl();
        let mut w = TimedWriter::new(&mut a, 0.25, 0.1);
        let t0 = std::time::Instant::now();
        let r = w.write(&mut v, &[&[0u8; 100]]).await;
        assert!(matches!(r, Err(TxError::Failed)));
        let took = t0.elapsed().as_secs_f64();
        assert!((0.25..2.0).contains(&took), "gave up after {took}s");
    }

    #[tokio::test]
    async fn a_write_after_send_timeout_is_refused_even_if_the_reader_keeps_up() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            b.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut v = vsl();
        {
            let mut w = TimedWriter::new(&mut a, 0.2, 5.0);
            w.write(&mut v, &[b"first"]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            let r = w.write(&mut v, &[b"second"]).await;
            assert!(matches!(r, Err(TxError::Failed)), "{r:?}");
        }
        drop(a);
        assert_eq!(reader.await.unwrap(), b"first");
    }

    /// A client socket that takes everything and counts the write calls.
    #[derive(Default)]
    struct Counting {
        got: Vec<u8>,
        calls: usize,
    }

    impl AsyncWrite for Counting {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            self.calls += 1;
            self.got.extend_from_slice(buf);
            std::task::Poll::Ready(Ok(buf.len()))
        }

        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> std::task::Poll<io::Result<usize>> {
            self.calls += 1;
            let mut n = 0;
            for b in bufs {
                self.got.extend_from_slice(b);
                n += b.len();
            }
            std::task::Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn segments_leave_in_order_a_megabyte_per_write() {
        let mut sock = Counting::default();
        let mut v = vsl();
        let mut expect = Vec::new();
        {
            let mut w = TimedWriter::new(&mut sock, 5.0, 1.0);
            let mut batch = SegmentBatch::default();
            let mut out = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
            expect.extend_from_slice(&out);
            for i in 0..40u8 {
                let seg = Bytes::from(vec![i; 64 * 1024]);
                expect.extend_from_slice(&seg);
                batch.push(&mut out, seg);
                out.extend_from_slice(b"--");
                expect.extend_from_slice(b"--");
                if batch.full() {
                    batch.send(&mut w, &mut v, &mut out).await.unwrap();
                }
            }
            out.extend_from_slice(b"end");
            expect.extend_from_slice(b"end");
            batch.send(&mut w, &mut v, &mut out).await.unwrap();
            assert!(out.is_empty());
            // Nothing left: a send of an empty batch writes nothing.
            batch.send(&mut w, &mut v, &mut out).await.unwrap();
        }
        assert_eq!(sock.got, expect);
        // 2.5 MiB in writes of about 1 MiB: three calls, not forty.
        assert_eq!(sock.calls, 3);
    }

    #[tokio::test]
    async fn a_closed_reader_is_a_remote_close() {
        let (mut a, b) = tokio::io::duplex(16);
        drop(b);
        let mut v = vsl();
        let mut w = TimedWriter::new(&mut a, 1.0, 1.0);
        let r = w.write(&mut v, &[b"x"]).await;
        assert!(r.is_err());
    }
}
