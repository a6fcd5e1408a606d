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
    /// False between `stop` and `start`: new connections are refused.
    pub running: AtomicBool,
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
