//! The daemon's TLS state while it runs: the frontend of each TLS
//! listener, the certificate stores behind `tls.cert.*` and SIGHUP, and the
//! `TLS.*` counters. The manager builds it (`mgt::tls`), the client side
//! handshakes with it (`client::tls`), counters publishing reads it; it
//! lives here, below all three, so none of them reaches up for it.

use std::sync::Arc;

use lacquer_tls::certs::CertStore;
use lacquer_tls::server::TlsFrontend;
use lacquer_vsl::vsc::Section;
use lacquer_vsl::vsc::tables::Tls;

/// The TLS side of the daemon.
pub struct TlsState {
    /// The shared certificates (`tls.cert.*`), if any listener uses them.
    pub global: Option<Arc<CertStore>>,
    /// Every store, for SIGHUP.
    pub(crate) stores: Vec<Arc<CertStore>>,
    /// Listener name → its frontend.
    pub(crate) frontends: Vec<(String, Arc<TlsFrontend>)>,
    /// The `TLS` counter section.
    pub counters: Section,
}

impl std::fmt::Debug for TlsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsState")
            .field("listeners", &self.frontends.len())
            .finish_non_exhaustive()
    }
}

impl TlsState {
    /// The frontend of the listener called `name`.
    pub fn frontend(&self, name: &str) -> Option<Arc<TlsFrontend>> {
        self.frontends
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
    }

    /// Re-reads every certificate from its files (SIGHUP); a store whose
    /// files fail keeps its certificates.
    pub fn reload(&self) -> Vec<String> {
        let mut errors = Vec::new();
        for s in &self.stores {
            match s.reload() {
                Ok(_) => self.counters.inc(Tls::cert_commits),
                Err(e) => errors.push(e.to_string()),
            }
        }
        errors
    }
}

/// Copies the backend handshake counts into `section`'s `TLS.be_*` fields:
/// the TLS listeners' section, or one made for TLS backends alone.
pub fn publish_backend(section: &Section) {
    use std::sync::atomic::Ordering::Relaxed;
    let h = &crate::backend::pool::TLS_HANDSHAKES;
    section.set(Tls::be_handshakes, h[0].load(Relaxed));
    section.set(Tls::be_resumed, h[1].load(Relaxed));
    section.set(Tls::be_fail, h[2].load(Relaxed));
}
