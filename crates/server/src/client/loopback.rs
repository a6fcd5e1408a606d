//! In-process connections for HTTP calls lacquerd makes to itself.
//!
//! The auth-offload report's VCL calls `curl.fetch()` on Varnish's own
//! address (`localhost:6081`), so that the token service's answers are
//! cached by the very cache that asks. Over TCP every such call costs
//! three loopback sends with the receiver's processing done in the
//! sender's system call, their wake-ups, and a second session reading a
//! socket. Here a call whose destination is one of the daemon's own plain
//! HTTP listeners (not TLS, not PROXY: those expect what a real client
//! brings) gets a [`pipe`] instead of a socket: a pair of in-memory byte
//! streams, one end handed to `lacquer_vmods`' HTTP client (pooled there
//! as a kept-alive connection), the other served by
//! [`crate::client::session::serve`] as an accepted connection would be.
//! The request is still parsed, logged, counted and run through the
//! active VCL exactly like one from the network; what differs is only the
//! transport: the session's client address is the listener's loopback
//! address with port 0, and socket options VCL sets on it have no socket
//! to act on (as on a Unix-socket listener).
//!
//! Each direction of a pipe holds at most [`CAP`] bytes, so a fast writer
//! waits for its reader as on a socket. Dropping an end is a close: the
//! peer reads EOF, and its writes fail with `BrokenPipe`.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::client::session::{self, SessInfoArgs};
use crate::client::sock::Readable;
use crate::runtime::counters::SessGuard;
use crate::runtime::state::Shared;

/// Bytes one direction of a pipe buffers before its writer waits.
pub const CAP: usize = 256 << 10;

/// One direction of a pipe.
#[derive(Default)]
struct Chan {
    buf: VecDeque<u8>,
    /// The writing end is gone or shut down: the reader sees EOF once
    /// `buf` is drained.
    write_closed: bool,
    /// The reading end is gone: writes fail.
    read_closed: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

type Shared1 = Arc<Mutex<Chan>>;

/// One end of an in-process connection: reads what the other end wrote.
pub struct PipeEnd {
    rx: Shared1,
    tx: Shared1,
}

/// A connected pair of in-memory streams.
pub fn pipe() -> (PipeEnd, PipeEnd) {
    let a: Shared1 = Arc::default();
    let b: Shared1 = Arc::default();
    (
        PipeEnd {
            rx: a.clone(),
            tx: b.clone(),
        },
        PipeEnd { rx: b, tx: a },
    )
}

fn lock(c: &Shared1) -> std::sync::MutexGuard<'_, Chan> {
    c.lock().unwrap_or_else(|e| e.into_inner())
}

fn wake(w: &mut Option<Waker>) {
    if let Some(w) = w.take() {
        w.wake();
    }
}

fn park(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

impl AsyncRead for PipeEnd {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut c = lock(&self.rx);
        if c.buf.is_empty() {
            if c.write_closed || out.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            park(&mut c.reader, cx);
            return Poll::Pending;
        }
        let n = c.buf.len().min(out.remaining());
        let (front, back) = c.buf.as_slices();
        let from_front = n.min(front.len());
        out.put_slice(&front[..from_front]);
        out.put_slice(&back[..n - from_front]);
        c.buf.drain(..n);
        wake(&mut c.writer);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for PipeEnd {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut c = lock(&self.tx);
        if c.read_closed || c.write_closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let room = CAP.saturating_sub(c.buf.len());
        if room == 0 {
            park(&mut c.writer, cx);
            return Poll::Pending;
        }
        let n = room.min(data.len());
        c.buf.extend(&data[..n]);
        wake(&mut c.reader);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut c = lock(&self.tx);
        c.write_closed = true;
        wake(&mut c.reader);
        Poll::Ready(Ok(()))
    }
}

impl Readable for PipeEnd {
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut c = lock(&self.rx);
        if !c.buf.is_empty() || c.write_closed {
            return Poll::Ready(Ok(()));
        }
        park(&mut c.reader, cx);
        Poll::Pending
    }
}

impl Drop for PipeEnd {
    fn drop(&mut self) {
        let mut c = lock(&self.tx);
        c.write_closed = true;
        wake(&mut c.reader);
        drop(c);
        let mut c = lock(&self.rx);
        c.read_closed = true;
        c.buf.clear();
        wake(&mut c.writer);
    }
}

/// A plain HTTP listener of a running daemon.
struct Listener {
    addr: SocketAddr,
    name: Arc<str>,
    endpoint: Arc<str>,
    sh: Weak<Shared>,
}

fn listeners() -> &'static Mutex<Vec<Listener>> {
    static L: OnceLock<Mutex<Vec<Listener>>> = OnceLock::new();
    L.get_or_init(Default::default)
}

/// Records a plain HTTP listener of `sh` (bound to `addr`) as a
/// destination HTTP calls from VCL reach in process, and installs the
/// connector in the vmods' client on first use. Listeners of a daemon
/// that is gone are forgotten.
pub fn register(sh: &Arc<Shared>, addr: SocketAddr, name: Arc<str>, endpoint: Arc<str>) {
    let mut l = listeners().lock().unwrap_or_else(|e| e.into_inner());
    l.retain(|x| x.sh.strong_count() > 0);
    l.push(Listener {
        addr,
        name,
        endpoint,
        sh: Arc::downgrade(sh),
    });
    drop(l);
    lacquer_vmods::set_local_connector(Box::new(|host, port| {
        connect(host, port).map(|e| Box::new(e) as Box<dyn lacquer_vmods::HttpcStream>)
    }));
}

/// The address a URL's host names, when it is a literal address or
/// `localhost` (names that need a resolver are never in-process).
fn host_ip(host: &str) -> Option<IpAddr> {
    if host.eq_ignore_ascii_case("localhost") {
        return Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    host.parse().ok()
}

/// Whether a listener bound to `bound` receives what is sent to `ip`.
fn reaches(bound: IpAddr, ip: IpAddr) -> bool {
    bound == ip || (bound.is_unspecified() && ip.is_loopback() && bound.is_ipv4() == ip.is_ipv4())
}

/// An in-process connection to one of the daemon's own plain HTTP
/// listeners at `host:port`, its other end served as an accepted
/// session; `None` when no running daemon here listens there.
fn connect(host: &str, port: u16) -> Option<PipeEnd> {
    let ip = host_ip(host)?;
    let (sh, args) = {
        let l = listeners().lock().unwrap_or_else(|e| e.into_inner());
        let x = l
            .iter()
            .find(|x| x.addr.port() == port && reaches(x.addr.ip(), ip))?;
        let sh = x.sh.upgrade()?;
        let local = SocketAddr::new(
            if x.addr.ip().is_unspecified() {
                ip
            } else {
                x.addr.ip()
            },
            port,
        );
        let client = SocketAddr::new(local.ip(), 0);
        let args = SessInfoArgs::new(client, local, x.name.clone(), x.endpoint.clone(), false);
        (sh, args)
    };
    if !sh.is_running() {
        return None;
    }
    let rt = tokio::runtime::Handle::try_current().ok()?;
    let (ours, theirs) = pipe();
    rt.spawn(async move {
        let _g = SessGuard::new();
        session::serve(sh, theirs, args, None).await;
    });
    Some(ours)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_cross_in_order_and_a_drop_is_a_close() {
        let (mut a, mut b) = pipe();
        a.write_all(b"hello ").await.unwrap();
        a.write_all(b"world").await.unwrap();
        let mut got = [0u8; 11];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello world");
        b.write_all(b"back").await.unwrap();
        drop(b);
        let mut rest = Vec::new();
        a.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"back");
        let e = a.write_all(b"x").await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }

    #[tokio::test]
    async fn a_writer_waits_for_its_reader_beyond_the_cap() {
        let (mut a, mut b) = pipe();
        let big = vec![7u8; CAP * 3 + 5];
        let w = tokio::spawn(async move {
            a.write_all(&big).await.unwrap();
            a.shutdown().await.unwrap();
            a
        });
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), CAP * 3 + 5);
        assert!(got.iter().all(|&x| x == 7));
        drop(w.await.unwrap());
    }

    #[tokio::test]
    async fn readable_wakes_on_data_and_on_close() {
        let (mut a, b) = pipe();
        let r = tokio::spawn(async move {
            std::future::poll_fn(|cx| b.poll_readable(cx))
                .await
                .unwrap();
            b
        });
        tokio::task::yield_now().await;
        a.write_all(b"x").await.unwrap();
        let b = r.await.unwrap();
        let (a2, b2) = pipe();
        drop(a2);
        std::future::poll_fn(|cx| b2.poll_readable(cx))
            .await
            .unwrap();
        drop((a, b));
    }

    #[test]
    fn only_own_addresses_match() {
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert!(reaches(any, lo));
        assert!(reaches(lo, lo));
        assert!(!reaches(lo, "10.0.0.1".parse().unwrap()));
        assert!(!reaches(any, "10.0.0.1".parse().unwrap()));
        assert!(!reaches(any, "::1".parse().unwrap()));
        assert_eq!(host_ip("LocalHost"), Some(lo));
        assert_eq!(host_ip("example.com"), None);
        assert_eq!(host_ip("::1"), Some("::1".parse().unwrap()));
    }
}
