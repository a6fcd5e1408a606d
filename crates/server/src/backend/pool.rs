//! Backend connections: connecting with a timeout, pooling idle connections
//! for reuse, and enforcing `.max_connections`.
//!
//! A connection handed out by [`Pool::get`] is either fresh or an idle one
//! that is still open and younger than `backend_idle_timeout`. The caller
//! gives it back with [`Pool::recycle`] only when the response was read to
//! its end and both sides agreed to keep it alive; otherwise it just drops
//! it. The count of open connections is decremented on drop, so a panicking
//! or cancelled fetch never leaks a `.max_connections` slot.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// Where a backend listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Address {
    /// The peer as `BackendOpen` records show it: `ip port`, and
    /// `0.0.0.0 0` for a Unix socket, as varnishd logs them.
    pub fn log_peer(&self) -> String {
        match self {
            Address::Tcp(_) => self.to_string(),
            Address::Unix(_) => "0.0.0.0 0".to_string(),
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(a) => write!(f, "{} {}", a.ip(), a.port()),
            Address::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A stream to a backend, TCP or Unix.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl Stream {
    /// True when the peer has closed or sent unsolicited data: such an idle
    /// connection must not be reused.
    fn is_stale(&self) -> bool {
        let mut buf = [0u8; 1];
        let r = match self {
            Stream::Tcp(s) => s.try_read(&mut buf),
            Stream::Unix(s) => s.try_read(&mut buf),
        };
        !matches!(r, Err(ref e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// Why no connection could be had.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("backend at max_connections ({0})")]
    Busy(usize),
    #[error("connect timed out after {0:.3}s")]
    Timeout(f64),
    #[error("connect failed: {0}")]
    Io(#[from] io::Error),
}

/// Counters of one pool, published as `VBE.<vcl>.<backend>.*`.
#[derive(Debug, Default)]
pub struct PoolStats {
    /// Connections opened (`conn` is the gauge below; this is the total).
    pub opened: AtomicU64,
    /// Fetches that reused an idle connection.
    pub reused: AtomicU64,
    /// Connection attempts that failed.
    pub fail: AtomicU64,
    /// Requests refused because of `.max_connections`.
    pub busy: AtomicU64,
    /// Idle connections closed because they expired or went stale.
    pub closed_idle: AtomicU64,
}

struct Idle {
    stream: Stream,
    since: Instant,
}

/// The connections of one backend.
pub struct Pool {
    addr: Address,
    max_connections: Option<usize>,
    open: Arc<AtomicUsize>,
    idle: Mutex<Vec<Idle>>,
    pub stats: PoolStats,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("addr", &self.addr)
            .field("open", &self.open.load(Ordering::Relaxed))
            .finish()
    }
}

/// A connection checked out of a [`Pool`].
#[derive(Debug)]
pub struct Conn {
    pub stream: Stream,
    /// True when this connection was taken from the idle pool.
    pub reused: bool,
    slot: Slot,
}

/// Holds one unit of the pool's open-connection count until dropped.
#[derive(Debug)]
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Conn {
    /// The local port of the connection (0 for Unix sockets).
    pub fn local_port(&self) -> u16 {
        match &self.stream {
            Stream::Tcp(s) => s.local_addr().map(|a| a.port()).unwrap_or(0),
            Stream::Unix(_) => 0,
        }
    }

    /// The local address as `ip port`, as `BackendOpen` records show it.
    pub fn local_addr_string(&self) -> String {
        match &self.stream {
            Stream::Tcp(s) => s
                .local_addr()
                .map(|a| format!("{} {}", a.ip(), a.port()))
                .unwrap_or_else(|_| "- -".to_string()),
            Stream::Unix(_) => "0.0.0.0 0".to_string(),
        }
    }
}

impl Pool {
    pub fn new(addr: Address, max_connections: Option<usize>) -> Self {
        Pool {
            addr,
            max_connections: max_connections.filter(|m| *m > 0),
            open: Arc::new(AtomicUsize::new(0)),
            idle: Mutex::new(Vec::new()),
            stats: PoolStats::default(),
        }
    }

    pub fn address(&self) -> &Address {
        &self.addr
    }

    /// Open connections, idle or in use.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Takes a reusable idle connection or opens a new one.
    pub async fn get(
        &self,
        connect_timeout: Duration,
        idle_timeout: Duration,
    ) -> Result<Conn, ConnectError> {
        if let Some(conn) = self.take_idle(idle_timeout) {
            self.stats.reused.fetch_add(1, Ordering::Relaxed);
            return Ok(conn);
        }
        let slot = self.reserve()?;
        let stream = match tokio::time::timeout(connect_timeout, self.connect()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                self.stats.fail.fetch_add(1, Ordering::Relaxed);
                return Err(ConnectError::Io(e));
            }
            Err(_) => {
                self.stats.fail.fetch_add(1, Ordering::Relaxed);
                return Err(ConnectError::Timeout(connect_timeout.as_secs_f64()));
            }
        };
        self.stats.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Conn {
            stream,
            reused: false,
            slot,
        })
    }

    fn reserve(&self) -> Result<Slot, ConnectError> {
        let n = self.open.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(self.open.clone());
        if let Some(max) = self.max_connections
            && n >= max
        {
            drop(slot);
            self.stats.busy.fetch_add(1, Ordering::Relaxed);
            return Err(ConnectError::Busy(max));
        }
        Ok(slot)
    }

    async fn connect(&self) -> io::Result<Stream> {
        match &self.addr {
            Address::Tcp(a) => {
                let s = TcpStream::connect(a).await?;
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            Address::Unix(p) => Ok(Stream::Unix(UnixStream::connect(p).await?)),
        }
    }

    fn take_idle(&self, idle_timeout: Duration) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(i) = idle.pop() {
            if i.since.elapsed() < idle_timeout && !i.stream.is_stale() {
                drop(idle);
                // The slot was released when the connection went idle.
                self.open.fetch_add(1, Ordering::AcqRel);
                return Some(Conn {
                    stream: i.stream,
                    reused: true,
                    slot: Slot(self.open.clone()),
                });
            }
            self.stats.closed_idle.fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    /// Returns a connection whose exchange completed cleanly to the pool.
    pub fn recycle(&self, conn: Conn) {
        let Conn { stream, slot, .. } = conn;
        // Idle connections do not count against max_connections.
        drop(slot);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.push(Idle {
            stream,
            since: Instant::now(),
        });
    }

    /// Closes idle connections older than `idle_timeout`; returns how many.
    pub fn reap(&self, idle_timeout: Duration) -> usize {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let before = idle.len();
        idle.retain(|i| i.since.elapsed() < idle_timeout);
        let n = before - idle.len();
        self.stats
            .closed_idle
            .fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Idle connections waiting for reuse.
    pub fn idle_count(&self) -> usize {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const T: Duration = Duration::from_secs(2);

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut b = [0u8; 64];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn reuse_and_counting() {
        let pool = Pool::new(Address::Tcp(echo_server().await), Some(1));
        let mut c = pool.get(T, T).await.unwrap();
        assert!(!c.reused);
        assert_eq!(pool.open_connections(), 1);
        assert!(matches!(pool.get(T, T).await, Err(ConnectError::Busy(1))));
        c.stream.write_all(b"x").await.unwrap();
        let mut b = [0u8; 1];
        c.stream.read_exact(&mut b).await.unwrap();
        pool.recycle(c);
        assert_eq!(pool.open_connections(), 0);
        let c = pool.get(T, T).await.unwrap();
        assert!(c.reused);
        assert_eq!(pool.stats.reused.load(Ordering::Relaxed), 1);
        drop(c);
        assert_eq!(pool.open_connections(), 0);
    }

    #[tokio::test]
    async fn refused_and_stale() {
        // A port that was bound and released: nothing listens there.
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let pool = Pool::new(Address::Tcp(addr), None);
        assert!(matches!(pool.get(T, T).await, Err(ConnectError::Io(_))));
        assert_eq!(pool.stats.fail.load(Ordering::Relaxed), 1);
        assert_eq!(pool.open_connections(), 0);

        // A server that closes at once: the idle connection goes stale.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                drop(s);
            }
        });
        let pool = Pool::new(Address::Tcp(addr), None);
        let c = pool.get(T, T).await.unwrap();
        pool.recycle(c);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let c = pool.get(T, T).await.unwrap();
        assert!(!c.reused, "a closed idle connection must not be reused");
        assert_eq!(pool.stats.closed_idle.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn idle_expiry() {
        let pool = Pool::new(Address::Tcp(echo_server().await), None);
        let c = pool.get(T, T).await.unwrap();
        pool.recycle(c);
        assert_eq!(pool.idle_count(), 1);
        assert_eq!(pool.reap(Duration::ZERO), 1);
        assert_eq!(pool.idle_count(), 0);
    }
}
