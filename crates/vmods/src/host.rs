//! What the vmods need from the server beyond one task: backend health,
//! director registration and resolution, backend lookup by name and the
//! xkey (surrogate key) index.
//!
//! The server implements [`Host`] once and passes it to
//! [`crate::Runtime::new`] for every VCL it loads. Directors created by
//! vmods (`directors.round_robin()`, ...) implement [`Director`] and are
//! registered with the host, which gives them a [`Backend`] identity; when
//! a request is about to be sent to such a backend, the server calls
//! [`Director::resolve`] (repeatedly, for layered directors) until it gets
//! a real backend.

use std::sync::Arc;

use lacquer_vcl::exec::{Backend, Context};

/// A load-balancing director created by a vmod.
pub trait Director: Send + Sync {
    /// Picks a backend (possibly another director) for the task, or `None`
    /// when no healthy backend is available.
    fn resolve(&self, ctx: &mut dyn Context) -> Option<Backend>;
    /// Whether the director has any healthy backend.
    fn healthy(&self) -> bool;
}

/// Server services shared by all tasks.
pub trait Host: Send + Sync {
    /// Whether a backend is healthy (probe state and admin health). For a
    /// backend that is a registered director, the server answers with
    /// [`Director::healthy`].
    fn backend_healthy(&self, backend: &Backend) -> bool;
    /// When the backend's health last changed (seconds since the epoch, 0
    /// if never); the shard director's rampup uses it.
    fn backend_changed(&self, backend: &Backend) -> f64;
    /// Registers a director under its VCL object name and returns the
    /// backend handle VCL uses for it.
    fn add_director(&self, name: &str, director: Arc<dyn Director>) -> Backend;
    /// Forgets a director registered by [`Host::add_director`]; called when
    /// the VCL that created it is dropped ([`crate::Runtime`]'s `Drop`).
    fn remove_director(&self, backend: &Backend);
    /// Finds a backend of the current VCL by name (`directors.lookup()`).
    fn lookup_backend(&self, name: &str) -> Option<Backend>;
    /// Invalidates every object tagged (by its `xkey` response headers)
    /// with one of `keys`; `soft` expires them but keeps them for grace
    /// and keep. Returns the number of objects affected.
    fn xkey_purge(&self, keys: &[&[u8]], soft: bool) -> i64;
}
