//! Backend connections: connecting with a timeout, pooling idle connections
//! for reuse, and enforcing `.max_connections`.
//!
//! A connection handed out by [`Pool::get`] is either fresh or an idle one
//! that is still open and younger than `backend_idle_timeout`. The caller
//! gives it back with [`Pool::recycle`] only when the response was read to
//! its end and both sides agreed to keep it alive; otherwise it just drops
//! it. The count of open connections is decremented on drop, so a panicking
//! or cancelled fetch never leaks a `.max_connections` slot.
//!
//! As varnishd's connection pools, idle connections belong to the
//! *endpoint* (address and `.preamble`), not to one backend: every backend
//! of every loaded VCL that names the same endpoint shares them, so a VCL
//! reload keeps using the connections the previous VCL opened. An endpoint
//! lives as long as some backend refers to it; its idle connections close
//! when the last one goes. `LCK.conn_pool.*` counts the endpoints' locks.
//!
//! A TLS backend (`.ssl = 1`) connects over TCP, then runs the handshake
//! with the rustls client config its attributes ask for ([`PoolTls`]);
//! its endpoint is keyed by those attributes too, so pooled TLS
//! connections are only reused for the same name and settings. Configs are
//! shared per attribute set across backends and VCLs, and with them the
//! session cache: a new connection resumes the origin's last session. A
//! handshake failure (a certificate refused, an alert) is a failed connect
//! whose error names the problem, and the fetch takes the 503 path.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// Where a backend listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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
            Address::Unix(_) => f.write_str("0.0.0.0 0"),
        }
    }
}

/// A stream to a backend, TCP, Unix or TLS over TCP.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<lacquer_tls::tokio_rustls::client::TlsStream<TcpStream>>),
}

/// How a TLS backend's connections are made: the client config (shared per
/// attribute set) and the name verified and sent as SNI, or why they could
/// not be set up (a CA file missing, …): connects then fail with it.
#[derive(Clone, Debug)]
pub struct PoolTls {
    setup: Result<
        (
            Arc<lacquer_tls::rustls::ClientConfig>,
            lacquer_tls::rustls::pki_types::ServerName<'static>,
        ),
        String,
    >,
    /// Name and attributes: what makes pooled connections interchangeable.
    key: String,
}

/// Client configs shared by every TLS backend of the process.
static TLS_CONFIGS: LazyLock<lacquer_tls::client::Connectors> =
    LazyLock::new(lacquer_tls::client::Connectors::default);

/// Backend TLS handshakes done, resumed, failed, in the process, published
/// as `TLS.be_*` (`runtime::tls::publish_backend`).
pub static TLS_HANDSHAKES: [AtomicU64; 3] =
    [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// Set once any VCL has made a TLS backend: the `TLS` counter section then
/// exists even without a TLS listener, for its `be_*` fields.
pub static TLS_BACKENDS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl PoolTls {
    /// The connector for a backend with these attributes; `name` is
    /// `.host_header` if set, else `.host`.
    pub fn new(spec: &lacquer_tls::client::BackendTls, name: &str) -> Self {
        TLS_BACKENDS.store(true, Ordering::Relaxed);
        PoolTls {
            setup: TLS_CONFIGS
                .get(spec)
                .and_then(|c| lacquer_tls::client::server_name(Some(name), name).map(|n| (c, n))),
            key: format!("{name} {spec:?}"),
        }
    }

    /// Runs the client handshake over `tcp`.
    pub async fn connect(&self, tcp: TcpStream) -> io::Result<Stream> {
        let (config, name) = self
            .setup
            .as_ref()
            .map_err(|e| io::Error::other(format!("TLS setup: {e}")))?;
        let c = lacquer_tls::tokio_rustls::TlsConnector::from(config.clone());
        match c.connect(name.clone(), tcp).await {
            Ok(s) => {
                TLS_HANDSHAKES[0].fetch_add(1, Ordering::Relaxed);
                if s.get_ref().1.handshake_kind()
                    == Some(lacquer_tls::rustls::HandshakeKind::Resumed)
                {
                    TLS_HANDSHAKES[1].fetch_add(1, Ordering::Relaxed);
                }
                Ok(Stream::Tls(Box::new(s)))
            }
            Err(e) => {
                TLS_HANDSHAKES[2].fetch_add(1, Ordering::Relaxed);
                Err(io::Error::other(lacquer_tls::client::describe(&e)))
            }
        }
    }
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
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
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
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
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
            Stream::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl Stream {
    /// True when the peer has closed or sent unsolicited data: such an idle
    /// connection must not be reused.
    ///
    /// Asks the socket itself (a non-blocking peek) rather than the
    /// runtime's cached readiness, which may not have seen the peer's FIN
    /// yet.
    fn is_stale(&self) -> bool {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        let r = match self {
            Stream::Tcp(s) => socket2::SockRef::from(s).peek(&mut buf),
            Stream::Unix(s) => socket2::SockRef::from(s).peek(&mut buf),
            // Any TLS record now (close_notify, …) ends the reuse too.
            Stream::Tls(s) => socket2::SockRef::from(s.get_ref().0).peek(&mut buf),
        };
        !matches!(r, Err(ref e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// Why no connection could be had.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("backend at max_connections ({0})")]
    Busy(usize),
    #[error("held down after a connect error ({0:.3}s left)")]
    HeldDown(f64),
    #[error("connect timed out after {0:.3}s")]
    Timeout(f64),
    #[error("connect failed: {0}")]
    Io(#[from] io::Error),
}

impl ConnectError {
    /// The reason as varnishd's `FetchError` words it after the backend's
    /// name: `busy`, or `fail errno N (text)` for a failed or held-down
    /// connect (held down reads errno 0, as VCP_Get leaves it). An error
    /// with no errno (a TLS verify failure) keeps its own text.
    pub fn fetch_error(&self) -> String {
        match self {
            ConnectError::Busy(_) => "busy".to_string(),
            ConnectError::HeldDown(_) => "fail errno 0 (Success)".to_string(),
            ConnectError::Timeout(_) => "fail errno 110 (Connection timed out)".to_string(),
            ConnectError::Io(e) => match e.raw_os_error() {
                Some(n) => {
                    let text = e.to_string();
                    let text = text
                        .strip_suffix(&format!(" (os error {n})"))
                        .unwrap_or(&text);
                    format!("fail errno {n} ({text})")
                }
                None => self.to_string(),
            },
        }
    }
}

/// Counters of one pool, published as `VBE.<vcl>.<backend>.*`.
#[derive(Debug, Default)]
pub struct PoolStats {
    /// Connections opened (`conn` is the gauge below; this is the total).
    pub opened: AtomicU64,
    /// Fetches that reused an idle connection.
    pub reused: AtomicU64,
    /// Connection attempts that failed (all causes).
    pub fail: AtomicU64,
    /// Failed attempts by cause, as `VBE.*.fail_*` break `fail` down.
    pub fail_eacces: AtomicU64,
    pub fail_eaddrnotavail: AtomicU64,
    pub fail_econnrefused: AtomicU64,
    pub fail_enetunreach: AtomicU64,
    pub fail_etimedout: AtomicU64,
    pub fail_other: AtomicU64,
    /// Fetches and pipes not attempted because the backend was sick
    /// (`VBE.*.unhealthy`, counted with `MAIN.backend_unhealthy`).
    pub unhealthy: AtomicU64,
    /// Connection attempts not made because the endpoint was held down.
    pub helddown: AtomicU64,
    /// Requests refused because of `.max_connections`.
    pub busy: AtomicU64,
    /// Idle connections closed because they expired or went stale.
    pub closed_idle: AtomicU64,
    /// Bytes exchanged by the fetches this backend served (`BereqAcct`
    /// fields, as `VBE.*.bereq_hdrbytes` ... `beresp_bodybytes`).
    pub bereq_hdrbytes: AtomicU64,
    pub bereq_bodybytes: AtomicU64,
    pub beresp_hdrbytes: AtomicU64,
    pub beresp_bodybytes: AtomicU64,
    /// Pipes through this backend (`VBE.*.pipe_hdrbytes`: bereq heads;
    /// `pipe_out`: bytes from the client to the backend; `pipe_in`: back).
    pub pipe_hdrbytes: AtomicU64,
    pub pipe_out: AtomicU64,
    pub pipe_in: AtomicU64,
}

impl PoolStats {
    /// Counts a failed connection attempt under its cause.
    fn count_failure(&self, e: Option<&io::Error>) {
        self.fail.fetch_add(1, Ordering::Relaxed);
        let by_cause = match e.map(io::Error::kind) {
            None | Some(io::ErrorKind::TimedOut) => &self.fail_etimedout,
            Some(io::ErrorKind::ConnectionRefused) => &self.fail_econnrefused,
            Some(io::ErrorKind::PermissionDenied) => &self.fail_eacces,
            Some(io::ErrorKind::AddrNotAvailable) => &self.fail_eaddrnotavail,
            Some(io::ErrorKind::NetworkUnreachable) | Some(io::ErrorKind::HostUnreachable) => {
                &self.fail_enetunreach
            }
            Some(_) => &self.fail_other,
        };
        by_cause.fetch_add(1, Ordering::Relaxed);
    }
}

struct Idle {
    stream: Stream,
    since: Instant,
}

/// Lock counters of the endpoint pools (`LCK.conn_pool.*`).
#[derive(Debug, Default)]
pub struct LockStats {
    /// Endpoint pools (and so their locks) created.
    pub creat: AtomicU64,
    /// Endpoint pools destroyed.
    pub destroy: AtomicU64,
    /// Acquisitions of an endpoint's lock.
    pub locks: AtomicU64,
}

/// `LCK.conn_pool.*` of this process.
pub static CONN_POOL_LOCKS: LockStats = LockStats {
    creat: AtomicU64::new(0),
    destroy: AtomicU64::new(0),
    locks: AtomicU64::new(0),
};

/// What identifies an endpoint: connections to the same address opened
/// with the same preamble (and TLS name and attributes) are
/// interchangeable.
type EndpointKey = (Address, Option<Arc<[u8]>>, Option<String>);

/// Every live endpoint, so that backends naming the same one share it.
static ENDPOINTS: LazyLock<Mutex<HashMap<EndpointKey, Weak<Endpoint>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// How long an endpoint is left alone after a failed connect
/// (`backend_local_error_holddown`, `backend_remote_error_holddown`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Holddown {
    /// After a local error (no address or port, permission).
    pub local: Duration,
    /// After the remote side refused or could not be reached.
    pub remote: Duration,
}

impl Holddown {
    /// The holddown a failed connect earns, if any (as varnishd's
    /// connection pools choose it).
    fn after(&self, e: &io::Error) -> Option<Duration> {
        let d = match e.kind() {
            io::ErrorKind::PermissionDenied | io::ErrorKind::AddrNotAvailable => self.local,
            io::ErrorKind::ConnectionRefused
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::HostUnreachable => self.remote,
            _ => return None,
        };
        (!d.is_zero()).then_some(d)
    }
}

/// What an endpoint's lock protects.
#[derive(Default)]
struct EndpointState {
    idle: Vec<Idle>,
    /// No new connection is tried before this (after a connect error).
    holddown_until: Option<Instant>,
}

/// The idle connections to one endpoint, shared by all backends naming it.
struct Endpoint {
    key: EndpointKey,
    state: Mutex<EndpointState>,
}

impl Endpoint {
    /// The live endpoint for `key`, or a new one.
    fn get(key: EndpointKey) -> Arc<Endpoint> {
        let mut all = ENDPOINTS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ep) = all.get(&key).and_then(Weak::upgrade) {
            return ep;
        }
        CONN_POOL_LOCKS.creat.fetch_add(1, Ordering::Relaxed);
        let ep = Arc::new(Endpoint {
            key: key.clone(),
            state: Mutex::new(EndpointState::default()),
        });
        all.insert(key, Arc::downgrade(&ep));
        ep
    }

    fn lock(&self) -> MutexGuard<'_, EndpointState> {
        CONN_POOL_LOCKS.locks.fetch_add(1, Ordering::Relaxed);
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        CONN_POOL_LOCKS.destroy.fetch_add(1, Ordering::Relaxed);
        let mut all = ENDPOINTS.lock().unwrap_or_else(|e| e.into_inner());
        // A new endpoint for the same key may already have replaced this one.
        if all.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
            all.remove(&self.key);
        }
    }
}

/// The connections of one backend: its own count and limit, over the idle
/// connections of its endpoint.
pub struct Pool {
    addr: Address,
    max_connections: Option<usize>,
    open: Arc<AtomicUsize>,
    endpoint: Arc<Endpoint>,
    tls: Option<PoolTls>,
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
            Stream::Tls(s) => s.get_ref().0.local_addr().map(|a| a.port()).unwrap_or(0),
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
            Stream::Tls(s) => s
                .get_ref()
                .0
                .local_addr()
                .map(|a| format!("{} {}", a.ip(), a.port()))
                .unwrap_or_else(|_| "- -".to_string()),
            Stream::Unix(_) => "0.0.0.0 0".to_string(),
        }
    }
}

impl Pool {
    /// A backend's pool over the endpoint `addr` (with the `.preamble` its
    /// new connections start with).
    pub fn new(addr: Address, preamble: Option<Arc<[u8]>>, max_connections: Option<usize>) -> Self {
        Pool {
            endpoint: Endpoint::get((addr.clone(), preamble, None)),
            addr,
            max_connections: max_connections.filter(|m| *m > 0),
            open: Arc::new(AtomicUsize::new(0)),
            tls: None,
            stats: PoolStats::default(),
        }
    }

    /// Makes the pool's connections TLS ones (a backend with `.ssl = 1`):
    /// they are pooled apart from plain ones to the same address.
    pub fn with_tls(mut self, tls: PoolTls) -> Self {
        let (addr, preamble, _) = self.endpoint.key.clone();
        self.endpoint = Endpoint::get((addr, preamble, Some(tls.key.clone())));
        self.tls = Some(tls);
        self
    }

    /// The TLS side of the pool's connections, if any.
    pub fn tls(&self) -> Option<&PoolTls> {
        self.tls.as_ref()
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
        holddown: Holddown,
    ) -> Result<Conn, ConnectError> {
        if let Some(conn) = self.take_idle(idle_timeout) {
            self.stats.reused.fetch_add(1, Ordering::Relaxed);
            return Ok(conn);
        }
        let held = self.endpoint.lock().holddown_until;
        if let Some(left) = held.and_then(|t| t.checked_duration_since(Instant::now())) {
            self.stats.helddown.fetch_add(1, Ordering::Relaxed);
            return Err(ConnectError::HeldDown(left.as_secs_f64()));
        }
        let slot = self.reserve()?;
        let stream = match tokio::time::timeout(connect_timeout, self.connect()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                self.stats.count_failure(Some(&e));
                if let Some(d) = holddown.after(&e) {
                    self.endpoint.lock().holddown_until = Some(Instant::now() + d);
                }
                return Err(ConnectError::Io(e));
            }
            Err(_) => {
                self.stats.count_failure(None);
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
                match &self.tls {
                    Some(t) => t.connect(s).await,
                    None => Ok(Stream::Tcp(s)),
                }
            }
            Address::Unix(p) => Ok(Stream::Unix(UnixStream::connect(p).await?)),
        }
    }

    fn take_idle(&self, idle_timeout: Duration) -> Option<Conn> {
        let mut state = self.endpoint.lock();
        let idle = &mut state.idle;
        while let Some(i) = idle.pop() {
            if i.since.elapsed() < idle_timeout && !i.stream.is_stale() {
                drop(state);
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
        self.endpoint.lock().idle.push(Idle {
            stream,
            since: Instant::now(),
        });
    }

    /// Closes idle connections older than `idle_timeout`; returns how many.
    pub fn reap(&self, idle_timeout: Duration) -> usize {
        let mut state = self.endpoint.lock();
        let idle = &mut state.idle;
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
        self.endpoint.lock().idle.len()
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
        let pool = Pool::new(Address::Tcp(echo_server().await), None, Some(1));
        let mut c = pool.get(T, T, Holddown::default()).await.unwrap();
        assert!(!c.reused);
        assert_eq!(pool.open_connections(), 1);
        assert!(matches!(
            pool.get(T, T, Holddown::default()).await,
            Err(ConnectError::Busy(1))
        ));
        c.stream.write_all(b"x").await.unwrap();
        let mut b = [0u8; 1];
        c.stream.read_exact(&mut b).await.unwrap();
        pool.recycle(c);
        assert_eq!(pool.open_connections(), 0);
        let c = pool.get(T, T, Holddown::default()).await.unwrap();
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
        let pool = Pool::new(Address::Tcp(addr), None, None);
        assert!(matches!(
            pool.get(T, T, Holddown::default()).await,
            Err(ConnectError::Io(_))
        ));
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
        let pool = Pool::new(Address::Tcp(addr), None, None);
        let c = pool.get(T, T, Holddown::default()).await.unwrap();
        pool.recycle(c);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let c = pool.get(T, T, Holddown::default()).await.unwrap();
        assert!(!c.reused, "a closed idle connection must not be reused");
        assert_eq!(pool.stats.closed_idle.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn idle_expiry() {
        let pool = Pool::new(Address::Tcp(echo_server().await), None, None);
        let c = pool.get(T, T, Holddown::default()).await.unwrap();
        pool.recycle(c);
        assert_eq!(pool.idle_count(), 1);
        assert_eq!(pool.reap(Duration::ZERO), 1);
        assert_eq!(pool.idle_count(), 0);
    }
}
