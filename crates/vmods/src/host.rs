//! What the vmods need from the server beyond one task: backend health,
//! director registration and resolution, backend lookup by name, the
//! xkey (surrogate key) index, object event subscriptions and counters
//! vmods publish.
//!
//! The server implements [`Host`] once and passes it to
//! [`crate::Runtime::new`] for every VCL it loads. Directors created by
//! vmods (`directors.round_robin()`, ...) implement [`Director`] and are
//! registered with the host, which gives them a [`Backend`] identity; when
//! a request is about to be sent to such a backend, the server calls
//! [`Director::resolve`] (repeatedly, for layered directors) until it gets
//! a real backend.
//!
//! Vmods may also create real backends at runtime ([`Host::new_backend`],
//! Varnish's `VRT_new_backend`): each gets its own connection pool, `VBE`
//! counters and optional health probe, shows in `backend.list`, and lives
//! until [`Host::delete_backend`] retires it or its VCL is discarded. A
//! retired backend's handle stays a valid value but resolves to nothing
//! and reads as sick; fetches already using it finish on their own
//! connection.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use lacquer_vcl::exec::{Backend, Context, LogKind};

/// A load-balancing director created by a vmod.
pub trait Director: Send + Sync {
    /// Picks a backend (possibly another director) for the task, or `None`
    /// when no healthy backend is available.
    fn resolve(&self, ctx: &mut dyn Context) -> Option<Backend>;
    /// Whether the director has any healthy backend; an error fails the
    /// VCL task that asked (Varnish's `VRT_fail` in a healthy callback).
    fn healthy(&self) -> Result<bool, String>;
    /// What `backend.list` reports of the director beyond its name: its
    /// kind and members, or `None` for a director varnishd lists as a
    /// plain entry (no member report).
    fn list(&self) -> Option<DirectorList>;
}

/// A director's entry in `backend.list`: varnishd counts its healthy
/// members in the `Probe` column and, with `-p`, prints them as a table.
#[derive(Clone, Debug, PartialEq)]
pub struct DirectorList {
    /// The kind JSON output names (`round-robin`, `fallback`, ...).
    pub kind: &'static str,
    /// The member report, for the kinds varnishd reports members of
    /// (the hash director has none: it shows as an unprobed backend).
    pub report: Option<MemberReport>,
}

/// The members of a listed director.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberReport {
    /// The column heads of the member table after `Backend` (the
    /// kind's own column, `Health`, and any more).
    pub heads: Vec<&'static str>,
    pub members: Vec<ListedMember>,
}

/// One member of a listed director.
#[derive(Clone, Debug, PartialEq)]
pub struct ListedMember {
    /// The member's name in its VCL (without the `<vcl>.` prefix).
    pub name: String,
    pub healthy: bool,
    /// The cells after the name, one per [`MemberReport::heads`].
    pub cells: Vec<String>,
}

/// Where a backend created at runtime connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(SocketAddr),
    /// An absolute path to a Unix domain socket.
    Unix(PathBuf),
}

/// A backend a vmod asks the server to create at runtime.
#[derive(Clone, Debug)]
pub struct DynamicBackend {
    /// The name VCL and `backend.list` show (`<vcl>.<name>`), usually the
    /// vmod object's name.
    pub name: String,
    pub endpoint: Endpoint,
    /// The `Host` header a backend request without one gets.
    pub host_header: Option<String>,
    /// A probe declared in the VCL, by name, to poll the backend with.
    pub probe: Option<String>,
    /// TLS to the backend (`None`: plain TCP).
    pub tls: Option<DynamicTls>,
}

/// The TLS attributes of a backend created at run time, with the meaning
/// and defaults of a VCL backend's: `.ssl_sni` (1), `.ssl_verify_peer`
/// (1), `.ssl_verify_host` (0), `.ssl_ca` and `.certificate`. The name
/// sent by SNI and checked is the backend's `host_header`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamicTls {
    pub sni: bool,
    pub verify_peer: bool,
    pub verify_host: bool,
    /// A CA file that replaces the system's trust store.
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM: certificate chain and key) to present.
    pub certificate: Option<PathBuf>,
}

impl Default for DynamicTls {
    fn default() -> Self {
        DynamicTls {
            sni: true,
            verify_peer: true,
            verify_host: false,
            ca_file: None,
            certificate: None,
        }
    }
}

/// Something that happened to an object in the cache, as a vmod
/// subscribed with [`Host::subscribe_objects`] hears of it (varnishd's
/// `OEV_INSERT` and `OEV_EXPIRE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectEvent {
    /// A fetched object became visible to lookups.
    Insert,
    /// An object left the cache, however it went.
    Expire,
}

/// A vmod's callback for object events: the event and the object's
/// identity (stable while the object lives, as varnishd's address).
pub type ObjectEventFn = Arc<dyn Fn(ObjectEvent, usize) + Send + Sync>;

/// A set of counters a vmod publishes in shared memory (varnishd's VSC
/// segments made by vmods), seen by `varnishstat` and varnishtest while
/// the value lives; dropping it withdraws them.
pub trait Counters: Send + Sync {
    /// Adds `n` to the counter at `field`, its position in the kind's
    /// counter table; fails for a position past its end.
    fn add(&self, field: usize, n: u64) -> Result<(), String>;
}

/// Server services shared by all tasks.
pub trait Host: Send + Sync {
    /// Whether a backend is healthy (probe state and admin health). For a
    /// backend that is a registered director, the server answers with
    /// [`Director::healthy`], whose error fails the asking task.
    fn backend_healthy(&self, backend: &Backend) -> Result<bool, String>;
    /// [`Host::backend_healthy`] where a failing director counts as sick
    /// (a director weighing its members).
    fn usable(&self, backend: &Backend) -> bool {
        self.backend_healthy(backend).unwrap_or(false)
    }
    /// When the backend's health last changed (seconds since the epoch, 0
    /// if never); the shard director's rampup uses it.
    fn backend_changed(&self, backend: &Backend) -> f64;
    /// Registers a director under its VCL object name and returns the
    /// backend handle VCL uses for it.
    fn add_director(&self, name: &str, director: Arc<dyn Director>) -> Backend;
    /// Forgets a director registered by [`Host::add_director`]; called when
    /// the VCL that created it is dropped ([`crate::Runtime`]'s `Drop`).
    fn remove_director(&self, backend: &Backend);
    /// Creates a backend at runtime for the VCL this host serves. Fails
    /// (with the reason) when the VCL is being discarded or the probe is
    /// unknown.
    fn new_backend(&self, spec: DynamicBackend) -> Result<Backend, String>;
    /// Retires a backend made by [`Host::new_backend`]: its probe stops,
    /// it leaves `backend.list` and its counters go; the handle resolves to
    /// nothing from now on. Other handles are left alone.
    fn delete_backend(&self, backend: &Backend);
    /// Finds a backend of the current VCL by name (`directors.lookup()`).
    fn lookup_backend(&self, name: &str) -> Option<Backend>;
    /// Writes a log record outside any transaction (vxid 0), for what a
    /// vmod does on its own rather than for a task (the shard director's
    /// hash ring dump, changes applied when a task ends).
    fn log(&self, kind: LogKind, msg: &str);
    /// Holds the VCL back from going cold on behalf of `who` (Varnish's
    /// VCL references from vmods): while held, a VCL asked to cool stays
    /// `cooling`, cannot be warmed again, and is not freed. Returns the
    /// hold's id for [`Host::release`].
    fn hold(&self, who: &str) -> u64;
    /// Ends a hold taken with [`Host::hold`].
    fn release(&self, id: u64);
    /// A runtime parameter's current value as `param.show` prints it
    /// (`None` for an unknown name, or before the daemon is attached).
    fn param(&self, name: &str) -> Option<String>;
    /// The cache process panics with `why` (test vmods only: `vtc.panic`):
    /// it stops serving and loses its objects, as varnishd's child dying.
    fn panic(&self, why: &str);
    /// Invalidates every object tagged (by its `xkey` response headers)
    /// with one of `keys`; `soft` expires them but keeps them for grace
    /// and keep. Returns the number of objects affected.
    fn xkey_purge(&self, keys: &[&[u8]], soft: bool) -> i64;
    /// Subscribes `f` to objects entering and leaving the cache (varnishd's
    /// `ObjSubscribeEvents`); returns the id that ends it with
    /// [`Host::unsubscribe_objects`]. The callback runs on whatever thread
    /// inserts or removes an object, outside the cache's locks. Fails when
    /// the VCL has no cache to hear from.
    fn subscribe_objects(&self, f: ObjectEventFn) -> Result<u64, String>;
    /// Ends a subscription made with [`Host::subscribe_objects`].
    fn unsubscribe_objects(&self, id: u64);
    /// Publishes a set of counters of `kind` (a counter table, `DEBUG`)
    /// named `kind` or, with an `ident`, `kind.ident`. Fails for an
    /// unknown kind, a bad name, or a daemon without shared memory.
    fn new_counters(&self, kind: &str, ident: &str) -> Result<Box<dyn Counters>, String>;
}
