//! The client side: one [`TlsFrontend`] per TLS listener, which turns an
//! accepted socket into a TLS stream.
//!
//! A frontend owns its certificate store, its options (protocol versions,
//! cipher suites in the operator's order, client certificate checking)
//! and the `rustls::ServerConfig`s built from them: one offering `h2` and
//! `http/1.1` by ALPN, one offering `http/1.1` only, so `h2` is offered
//! exactly when the listener serves HTTP/2 at the time of the handshake.
//! The configs are rebuilt when the certificate set changes
//! (`tls.cert.commit`); a handshake keeps the config, and so the
//! certificates, it started with.
//!
//! The handshake reads the client hello first: with `sni-nomatch-abort`
//! a name no certificate answers for ends it with a fatal
//! `unrecognized_name` alert (the default certificate still serves clients
//! that send no name). Session resumption is on: stateless tickets
//! ([`crate::tickets`]) and a session-id cache for TLS 1.2 clients that
//! do not take tickets.

use std::io;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

use crate::certs::{CertSet, CertStore, Choice};
use crate::conf::{ClientVerify, Effective, Proto};
use crate::info::TlsInfo;
use crate::suites;

/// What a frontend is configured with, before certificates.
#[derive(Debug, Clone)]
pub struct FrontendOptions {
    pub protos: Vec<Proto>,
    pub ciphers: Option<String>,
    pub ciphersuites: Option<String>,
    pub prefer_server_ciphers: bool,
    pub sni_nomatch_abort: bool,
    pub client_verify: ClientVerify,
    pub client_verify_ca: Option<std::path::PathBuf>,
    /// `alpn-protos` as configured (`None`: h2 and http/1.1 as served).
    pub alpn_protos: Option<Vec<String>>,
}

impl FrontendOptions {
    /// From a hitch.conf frontend's effective options.
    pub fn from_effective(e: &Effective, alpn: Option<Vec<String>>) -> Self {
        FrontendOptions {
            protos: e.tls_protos.clone(),
            ciphers: e.ciphers.clone(),
            ciphersuites: e.ciphersuites.clone(),
            prefer_server_ciphers: e.prefer_server_ciphers,
            sni_nomatch_abort: e.sni_nomatch_abort,
            client_verify: e.client_verify,
            client_verify_ca: e.client_verify_ca.clone(),
            alpn_protos: alpn,
        }
    }
}

impl Default for FrontendOptions {
    fn default() -> Self {
        FrontendOptions {
            protos: vec![Proto::Tls12, Proto::Tls13],
            ciphers: None,
            ciphersuites: None,
            prefer_server_ciphers: false,
            sni_nomatch_abort: false,
            client_verify: ClientVerify::None,
            client_verify_ca: None,
            alpn_protos: None,
        }
    }
}

/// The configs built for one certificate set.
struct Built {
    generation: u64,
    set: Arc<CertSet>,
    h1: Arc<ServerConfig>,
    h2: Arc<ServerConfig>,
}

/// Why a handshake failed, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// `tls_handshake_timeout` passed first.
    Timeout,
    /// The client closed or reset before finishing.
    Closed,
    /// Bytes that are not TLS (plain HTTP, junk, a broken record).
    Junk,
    /// No protocol version, cipher suite, group or ALPN protocol in common.
    Incompatible,
    /// A required client certificate was missing or did not verify.
    ClientCert,
    /// `sni-nomatch-abort` and a name no certificate answers for.
    SniNoMatch,
    /// The client sent an alert, or anything else went wrong.
    Other,
}

impl Failure {
    /// The cause's name in counters and logs.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Closed => "closed",
            Failure::Junk => "junk",
            Failure::Incompatible => "incompatible",
            Failure::ClientCert => "client_cert",
            Failure::SniNoMatch => "sni_nomatch",
            Failure::Other => "other",
        }
    }

    /// Classifies an I/O error from the handshake.
    pub fn of(e: &io::Error) -> Failure {
        use rustls::Error as E;
        if let Some(r) = e.get_ref().and_then(|i| i.downcast_ref::<E>()) {
            return match r {
                E::InvalidMessage(_)
                | E::InappropriateMessage { .. }
                | E::InappropriateHandshakeMessage { .. }
                | E::DecryptError => Failure::Junk,
                E::PeerIncompatible(_) | E::NoApplicationProtocol => Failure::Incompatible,
                E::NoCertificatesPresented | E::InvalidCertificate(_) => Failure::ClientCert,
                _ => Failure::Other,
            };
        }
        match e.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted => Failure::Closed,
            io::ErrorKind::InvalidData => Failure::Junk,
            _ => Failure::Other,
        }
    }
}

/// A failed handshake: its cause and the error text for the log.
#[derive(Debug)]
pub struct HandshakeError {
    pub failure: Failure,
    pub msg: String,
}

/// The TLS side of one listener.
pub struct TlsFrontend {
    pub store: Arc<CertStore>,
    opts: FrontendOptions,
    provider: Arc<CryptoProvider>,
    tickets: Arc<dyn ProducesTickets>,
    sessions: Arc<dyn StoresServerSessions>,
    verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    built: ArcSwap<Built>,
}

impl std::fmt::Debug for TlsFrontend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFrontend")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

/// The fatal `unrecognized_name` alert as a TLS record (TLS 1.2 framing,
/// which every client reads before or after a 1.3 hello).
const UNRECOGNIZED_NAME: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70];

/// Resolves the certificate from the set a config was built for.
#[derive(Debug)]
struct SetResolver(Arc<CertSet>);

impl ResolvesServerCert for SetResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0
            .choose(hello.server_name())
            .map(|(c, _)| c.key.clone())
    }
}

impl TlsFrontend {
    /// A frontend over `store`; `tickets` and `sessions` are shared by
    /// every frontend of the process so a client resumes on any of them.
    pub fn new(
        store: Arc<CertStore>,
        opts: FrontendOptions,
        tickets: Arc<dyn ProducesTickets>,
        sessions: Arc<dyn StoresServerSessions>,
    ) -> Result<Self, String> {
        let provider = Arc::new(suites::provider_for(
            opts.ciphers.as_deref(),
            opts.ciphersuites.as_deref(),
            &opts.protos,
        )?);
        let verifier = match opts.client_verify {
            ClientVerify::None => None,
            mode => {
                let ca = opts.client_verify_ca.as_deref().ok_or_else(|| {
                    "client-verify optional or required needs client-verify-ca (the CA file that signs client certificates)".to_string()
                })?;
                let mut roots = rustls::RootCertStore::empty();
                for c in crate::certs::read_certs(ca).map_err(|e| e.to_string())? {
                    roots
                        .add(c)
                        .map_err(|e| format!("{}: bad CA certificate: {e}", ca.display()))?;
                }
                let b = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider.clone(),
                );
                let b = if mode == ClientVerify::Optional {
                    b.allow_unauthenticated()
                } else {
                    b
                };
                Some(
                    b.build()
                        .map_err(|e| format!("client-verify-ca {}: {e}", ca.display()))?,
                )
            }
        };
        let set = store.current();
        let generation = store.generation();
        let (h1, h2) = Self::build(&opts, &provider, &tickets, &sessions, &verifier, &set)?;
        Ok(TlsFrontend {
            store,
            opts,
            provider,
            tickets,
            sessions,
            verifier,
            built: ArcSwap::from_pointee(Built {
                generation,
                set,
                h1,
                h2,
            }),
        })
    }

    fn build(
        opts: &FrontendOptions,
        provider: &Arc<CryptoProvider>,
        tickets: &Arc<dyn ProducesTickets>,
        sessions: &Arc<dyn StoresServerSessions>,
        verifier: &Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
        set: &Arc<CertSet>,
    ) -> Result<(Arc<ServerConfig>, Arc<ServerConfig>), String> {
        if set.certs.is_empty() {
            return Err("no certificate: a TLS listener needs at least one pem-file".into());
        }
        let versions: Vec<&'static rustls::SupportedProtocolVersion> = opts
            .protos
            .iter()
            .map(|p| match p {
                Proto::Tls12 => &rustls::version::TLS12,
                Proto::Tls13 => &rustls::version::TLS13,
            })
            .collect();
        let make = |h2: bool| -> Result<Arc<ServerConfig>, String> {
            let b = ServerConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(&versions)
                .map_err(|e| format!("TLS versions and cipher suites do not fit: {e}"))?;
            let b = match verifier {
                Some(v) => b.with_client_cert_verifier(v.clone()),
                None => b.with_no_client_auth(),
            };
            let mut c = b.with_cert_resolver(Arc::new(SetResolver(set.clone())));
            c.ignore_client_order = opts.prefer_server_ciphers;
            c.ticketer = tickets.clone();
            c.session_storage = sessions.clone();
            c.send_tls13_tickets = 2;
            let allowed = |p: &str| {
                opts.alpn_protos
                    .as_ref()
                    .is_none_or(|l| l.iter().any(|a| a == p))
            };
            if h2 && allowed("h2") {
                c.alpn_protocols.push(b"h2".to_vec());
            }
            if allowed("http/1.1") {
                c.alpn_protocols.push(b"http/1.1".to_vec());
            }
            Ok(Arc::new(c))
        };
        Ok((make(false)?, make(true)?))
    }

    /// The configs for the certificate set in use, rebuilt after a commit.
    fn configs(&self) -> Arc<Built> {
        let b = self.built.load_full();
        let generation = self.store.generation();
        if b.generation == generation {
            return b;
        }
        let set = self.store.current();
        match Self::build(
            &self.opts,
            &self.provider,
            &self.tickets,
            &self.sessions,
            &self.verifier,
            &set,
        ) {
            Ok((h1, h2)) => {
                let nb = Arc::new(Built {
                    generation,
                    set,
                    h1,
                    h2,
                });
                self.built.store(nb.clone());
                nb
            }
            // An empty set (every certificate discarded): keep serving
            // with the last good one.
            Err(_) => b,
        }
    }

    /// Runs the server side of a handshake on `io`, and says what it
    /// negotiated. `h2` says whether the listener serves HTTP/2 now. The
    /// caller bounds the time.
    pub async fn accept<IO>(
        &self,
        io: IO,
        h2: bool,
    ) -> Result<(TlsStream<IO>, TlsInfo), HandshakeError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let built = self.configs();
        let fail = |e: io::Error| HandshakeError {
            failure: Failure::of(&e),
            msg: e.to_string(),
        };
        let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io);
        let mut start = acceptor.await.map_err(fail)?;
        if self.opts.sni_nomatch_abort
            && let Some(name) = start.client_hello().server_name()
            && matches!(
                built.set.choose(Some(name)),
                Some((_, Choice::Default)) | None
            )
        {
            let name = name.to_string();
            let _ = start.io.write_all(&UNRECOGNIZED_NAME).await;
            let _ = start.io.shutdown().await;
            return Err(HandshakeError {
                failure: Failure::SniNoMatch,
                msg: format!("no certificate for the server name '{name}' (sni-nomatch-abort)"),
            });
        }
        let config = if h2 {
            built.h2.clone()
        } else {
            built.h1.clone()
        };
        let stream = start.into_stream(config).await.map_err(fail)?;
        let conn = stream.get_ref().1;
        let leaf = built.set.choose(conn.server_name()).map(|(c, _)| &**c);
        let info = TlsInfo::of_server(conn, leaf);
        Ok((stream, info))
    }
}
