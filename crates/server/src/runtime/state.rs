//! Daemon-wide state shared by every session, fetch and CLI connection.
//!
//! Hot-path readers take snapshots without locks: parameters and the active
//! VCL sit behind `ArcSwap`, counters are atomics. Locks guard only the
//! management-side registries (loaded VCLs, labels), which requests never
//! touch.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;
use lacquer_cache::Cache;
use lacquer_storage::Stevedore;
use lacquer_vsl::Vsl;

use crate::runtime::counters::Counters;
use crate::runtime::params::ParamSet;
use crate::runtime::vcls::{LoadedVcl, VclRegistry};
use crate::runtime::vxid::VxidAlloc;

/// A listener's bound address, for `debug.listen_address`.
#[derive(Clone, Debug)]
pub struct BoundListener {
    pub name: String,
    /// `host port` as varnishd prints it, or the socket path.
    pub printable: String,
    /// A Unix socket: VCL 4.0 cannot be loaded while one listens, as
    /// 4.0 has no way to tell such clients apart.
    pub unix: bool,
}

/// Everything a task may need from the daemon.
pub struct Shared {
    pub params: ArcSwap<ParamSet>,
    pub vxid: VxidAlloc,
    pub vsl: Arc<Vsl>,
    pub counters: Arc<Counters>,
    pub cache: Arc<Cache>,
    /// Every store, `Transient` included, in `-s` order.
    pub stores: Vec<Arc<dyn Stevedore>>,
    /// The VCL new requests start in.
    pub active: ArcSwap<Option<Arc<LoadedVcl>>>,
    pub vcls: Mutex<VclRegistry>,
    pub identity: String,
    pub hostname: String,
    pub started: Instant,
    pub listeners: Mutex<Vec<BoundListener>>,
    /// False until the cache starts and between `stop` and `start`: TCP
    /// listen sockets are then bound but not listening, so connections are
    /// refused as varnishd's are while its child is not running (set with
    /// [`set_running`](Shared::set_running)).
    pub(crate) running: AtomicBool,
    /// Wakes the acceptors waiting in [`until_running`](Shared::until_running)
    /// on each change.
    pub(crate) running_changed: tokio::sync::Notify,
    /// The TCP listen sockets, opened and closed with the running state.
    pub(crate) tcp_listeners: Mutex<Vec<Arc<ListenSlot>>>,
    /// The management side's view of the cache process (`MGT.*`, the
    /// last panic).
    pub mgt: crate::runtime::panic::MgtState,
    pub workdir: std::path::PathBuf,
    /// `debug.fragfetch`: the largest body piece a fetch handles at once
    /// (0: as read).
    pub fetch_frag: AtomicUsize,
    /// The counter sections copied on each housekeeping tick; a VCL load
    /// publishes at once, so its backends' VBE counters exist as soon as
    /// the load is answered (as varnishd creates them with the backends).
    pub stats: std::sync::OnceLock<Arc<crate::runtime::stats::Sections>>,
    /// Built-in TLS, when a listener uses it.
    pub tls: std::sync::OnceLock<Arc<crate::runtime::tls::TlsState>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("identity", &self.identity)
            .finish()
    }
}

impl Shared {
    /// The current parameters.
    pub fn params(&self) -> arc_swap::Guard<Arc<ParamSet>> {
        self.params.load()
    }

    /// Changes one parameter (copy-on-write).
    pub fn set_param(
        &self,
        name: &str,
        value: &str,
    ) -> Result<(), crate::runtime::params::ParamError> {
        let mut p = ParamSet::clone(&self.params.load());
        p.set_unless_protected(name, value)?;
        self.apply_params(&p);
        self.params.store(Arc::new(p));
        Ok(())
    }

    /// Pushes parameters that live in other subsystems to them.
    pub fn apply_params(&self, p: &ParamSet) {
        if let crate::runtime::params::Value::Bits(masked) = p.get("vsl_mask") {
            let mut set = lacquer_vsl::TagSet::default();
            for name in masked {
                if let Some(tag) = lacquer_vsl::Tag::from_name(name) {
                    set.insert(tag);
                }
            }
            self.vsl.set_mask(set);
        }
        let _ = self.vsl.set_reclen(p.bytes("vsl_reclen") as usize);
        self.vsl.set_sync(p.bit("debug", "syncvsl"));
        let t = p.duration("curl_timeout");
        lacquer_vmods::curl_set_defaults(
            (t > 0.0).then(|| std::time::Duration::from_secs_f64(t)),
            p.uint("curl_max_inflight"),
        );
    }

    /// The active VCL, if one is loaded and in use.
    pub fn active_vcl(&self) -> Option<Arc<LoadedVcl>> {
        self.active.load().as_ref().clone()
    }

    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    /// Starts (`true`) or stops the cache side. Starting makes every TCP
    /// listen socket listen before it returns (bound again if a stop closed
    /// it); stopping closes them once their acceptors let go, as varnishd's
    /// manager reopens its sockets without listening when the child stops.
    pub fn set_running(&self, on: bool) {
        let slots = self.tcp_listeners.lock().unwrap_or_else(|e| e.into_inner());
        let backlog = self.params().uint(crate::pid!("listen_depth")) as u32;
        for slot in slots.iter() {
            if on {
                if let Err(e) = slot.open(backlog) {
                    eprintln!("Could not reopen listen socket {}: {e}", slot.addr);
                }
            } else {
                slot.close();
            }
        }
        drop(slots);
        self.running.store(on, Ordering::Release);
        self.running_changed.notify_waiters();
    }

    /// Returns once the cache side runs (`on`) or is stopped.
    pub async fn until_running(&self, on: bool) {
        loop {
            let woken = self.running_changed.notified();
            let mut woken = std::pin::pin!(woken);
            woken.as_mut().enable();
            if self.running.load(Ordering::Acquire) == on {
                return;
            }
            woken.await;
        }
    }

    /// The VCL a label (or name) refers to, for `return (vcl(label))`.
    pub fn vcl_by_label(&self, label: &str) -> Option<Arc<LoadedVcl>> {
        self.vcls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .resolve(label)
    }

    /// Adds a ban from VCL or the CLI; the error text is Varnish's.
    pub fn add_ban(&self, spec: &str, now: f64) -> Result<(), String> {
        self.cache.ban_str(spec, now).map_err(|e| e.to_string())
    }

    /// The piece size fetches cut bodies into (`debug.fragfetch`).
    pub fn fetch_fragment(&self) -> usize {
        match self.fetch_frag.load(Ordering::Relaxed) {
            0 => usize::MAX,
            n => n,
        }
    }

    /// The store called `name`.
    pub fn store(&self, name: &str) -> Option<&Arc<dyn Stevedore>> {
        self.stores.iter().find(|s| s.name() == name)
    }
}

/// A TCP listen socket that listens only while the cache runs: bound at
/// start-up (so a taken address fails the start, as in varnishd), listening
/// from [`open`](ListenSlot::open), closed by [`close`](ListenSlot::close)
/// once its acceptor drops its handle.
pub struct ListenSlot {
    /// The address it is bound to (the port the kernel chose for `:0`).
    pub addr: std::net::SocketAddr,
    /// The socket bound at start-up, until it first listens.
    bound: Mutex<Option<tokio::net::TcpSocket>>,
    /// The listening socket, while the cache runs.
    current: Mutex<Option<Arc<tokio::net::TcpListener>>>,
}

impl ListenSlot {
    /// A slot for a socket already bound (and not listening).
    pub fn new(sock: tokio::net::TcpSocket) -> std::io::Result<ListenSlot> {
        Ok(ListenSlot {
            addr: sock.local_addr()?,
            bound: Mutex::new(Some(sock)),
            current: Mutex::new(None),
        })
    }

    /// A new socket bound to `addr`, not listening.
    pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpSocket> {
        let sock = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()
        } else {
            tokio::net::TcpSocket::new_v6()
        }?;
        let _ = sock.set_reuseaddr(true);
        sock.bind(addr)?;
        Ok(sock)
    }

    /// Makes the socket listen (binding a new one after a close).
    fn open(&self, backlog: u32) -> std::io::Result<()> {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if cur.is_some() {
            return Ok(());
        }
        let sock = match self.bound.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(s) => s,
            None => ListenSlot::bind(self.addr)?,
        };
        *cur = Some(Arc::new(sock.listen(backlog)?));
        Ok(())
    }

    /// Lets go of the listening socket: it closes when the acceptor drops
    /// its handle too.
    fn close(&self) {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// The listening socket, if the cache runs and it could listen.
    pub fn listener(&self) -> Option<Arc<tokio::net::TcpListener>> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
