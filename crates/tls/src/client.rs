//! The backend side: `rustls::ClientConfig`s for TLS backends.
//!
//! A [`BackendTls`] is what a VCL backend's attributes ask for (`.ssl_sni`,
//! `.ssl_verify_peer`, `.ssl_verify_host`, `.ssl_ca`, `.certificate`).
//! [`Connectors`] keeps one config per distinct set of attributes, shared
//! by every backend (declared or created at run time) and every VCL that
//! asks for the same, so their connections share one session cache: a new
//! connection to an origin resumes the last session (tickets or ids).
//!
//! Trust comes from the `.ssl_ca` file when given, else from the system
//! store as OpenSSL tools find it (`SSL_CERT_FILE`, `SSL_CERT_DIR`, then
//! the distribution's bundle), read once. `.ssl_verify_peer = 0` accepts
//! any certificate (the handshake signatures are still checked);
//! `.ssl_verify_host = 0` checks the chain but not the name.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::conf::PemFile;

/// What one backend asks of its TLS connections.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BackendTls {
    /// Send SNI (`.ssl_sni`, not `.ssl_nosni`).
    pub sni: bool,
    /// Verify the chain (`.ssl_verify_peer`, not `.ssl_noverify`).
    pub verify_peer: bool,
    /// Verify the name against the certificate (`.ssl_verify_host`).
    pub verify_host: bool,
    /// A CA file instead of the system store (`.ssl_ca`).
    pub ca_file: Option<PathBuf>,
    /// A directory of CA files instead of the system store (libcurl's
    /// `CURLOPT_CAPATH`, vmod curl's `set_ssl_capath()`): every PEM
    /// certificate in its files is trusted, whatever their names.
    pub ca_dir: Option<PathBuf>,
    /// A client certificate (`.certificate`): key and chain in one PEM.
    pub client_cert: Option<PathBuf>,
}

impl Default for BackendTls {
    /// Varnish Enterprise's defaults: SNI on, peer verified, host not.
    fn default() -> Self {
        BackendTls {
            sni: true,
            verify_peer: true,
            verify_host: false,
            ca_file: None,
            ca_dir: None,
            client_cert: None,
        }
    }
}

/// Client configs by attribute set (see the module doc).
#[derive(Debug, Default)]
pub struct Connectors {
    map: Mutex<HashMap<BackendTls, Arc<ClientConfig>>>,
}

impl Connectors {
    /// The config for `spec`, made on first use.
    pub fn get(&self, spec: &BackendTls) -> Result<Arc<ClientConfig>, String> {
        if let Some(c) = self.map.lock().unwrap_or_else(|e| e.into_inner()).get(spec) {
            return Ok(c.clone());
        }
        let c = Arc::new(client_config(spec)?);
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(spec.clone(), c.clone());
        Ok(c)
    }
}

/// The system's trust store, read once (honours `SSL_CERT_FILE` and
/// `SSL_CERT_DIR`).
fn system_roots() -> Result<Arc<RootCertStore>, String> {
    static ROOTS: OnceLock<Result<Arc<RootCertStore>, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map_or_else(String::new, |e| format!(": {e}"));
                return Err(format!(
                    "no trusted CA certificate found in the system store (set SSL_CERT_FILE or give the backend .ssl_ca){why}"
                ));
            }
            Ok(Arc::new(roots))
        })
        .clone()
}

fn roots_for(spec: &BackendTls) -> Result<Arc<RootCertStore>, String> {
    if spec.ca_file.is_none() && spec.ca_dir.is_none() {
        return system_roots();
    }
    let mut roots = RootCertStore::empty();
    let mut add = |f: &std::path::Path| -> Result<(), String> {
        for c in crate::certs::read_certs(f).map_err(|e| e.to_string())? {
            roots
                .add(c)
                .map_err(|e| format!("{}: bad CA certificate: {e}", f.display()))?;
        }
        Ok(())
    };
    if let Some(f) = &spec.ca_file {
        add(f)?;
    }
    if let Some(d) = &spec.ca_dir {
        let entries = std::fs::read_dir(d)
            .map_err(|e| format!("{}: cannot read the CA directory: {e}", d.display()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        // Files without a certificate (a README, a CRL) are skipped, as
        // OpenSSL's lookup skips what it cannot use.
        for f in &files {
            let _ = add(f);
        }
        if roots.is_empty() {
            return Err(format!(
                "{}: no CA certificate found in the directory",
                d.display()
            ));
        }
    }
    Ok(Arc::new(roots))
}

/// Builds the client config `spec` asks for.
pub fn client_config(spec: &BackendTls) -> Result<ClientConfig, String> {
    let provider = crate::suites::provider();
    let verifier: Arc<dyn ServerCertVerifier> = if spec.verify_peer {
        let webpki =
            WebPkiServerVerifier::builder_with_provider(roots_for(spec)?, provider.clone())
                .build()
                .map_err(|e| format!("cannot build the certificate verifier: {e}"))?;
        if spec.verify_host {
            webpki
        } else {
            Arc::new(ChainOnly(webpki))
        }
    } else {
        Arc::new(AnyCert(provider.clone()))
    };
    let b = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut c = match &spec.client_cert {
        Some(path) => {
            let pem = PemFile {
                cert: path.clone(),
                private_key: None,
                ocsp_resp_file: None,
                ocsp_dir: None,
                line: 0,
            };
            let l = crate::certs::load_pem("client", &pem, &provider).map_err(|e| e.to_string())?;
            b.with_client_auth_cert(l.key.cert.clone(), load_key(path)?)
                .map_err(|e| format!("{}: client certificate: {e}", path.display()))?
        }
        None => b.with_no_client_auth(),
    };
    c.enable_sni = spec.sni;
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(c)
}

fn load_key(path: &std::path::Path) -> Result<rustls_pki_types::PrivateKeyDer<'static>, String> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("{}: no usable private key: {e}", path.display()))
}

/// The name a backend connection verifies and sends as SNI: `.host_header`
/// when set, else `.host`.
pub fn server_name(host_header: Option<&str>, host: &str) -> Result<ServerName<'static>, String> {
    let name = host_header
        .map(|h| match h.rsplit_once(':') {
            // A Host header may carry a port; the name is without it.
            Some((n, p)) if !n.ends_with(']') && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => h,
        })
        .unwrap_or(host);
    let name = name.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(name.to_string())
        .map_err(|e| format!("'{name}' is not a name TLS can verify: {e}"))
}

/// Says what went wrong in a backend handshake, for `FetchError`.
pub fn describe(e: &std::io::Error) -> String {
    use rustls::Error as E;
    match e.get_ref().and_then(|i| i.downcast_ref::<E>()) {
        Some(E::InvalidCertificate(c)) => {
            format!("backend certificate rejected: {}", cert_problem(c))
        }
        Some(E::AlertReceived(a)) => format!("backend sent TLS alert {a:?}"),
        Some(other) => format!("TLS handshake failed: {other}"),
        None => format!("TLS handshake failed: {e}"),
    }
}

fn cert_problem(c: &CertificateError) -> String {
    match c {
        CertificateError::UnknownIssuer => "unknown issuer (not signed by a trusted CA)".into(),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => "expired".into(),
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "not valid yet".into()
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            format!("not valid for the backend's name ({c})")
        }
        CertificateError::Revoked => "revoked".into(),
        CertificateError::BadSignature => "bad signature".into(),
        other => other.to_string(),
    }
}

/// Checks the chain but not the name (`.ssl_verify_host = 0`).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            // webpki checks the name last: a name error means the chain is good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Accepts any certificate (`.ssl_verify_peer = 0`); the handshake's
/// signatures are still checked against the certificate presented, with
/// the provider's algorithms. Public for load generators that check no
/// chain (`examples/handshake_load.rs`).
#[derive(Debug)]
pub struct AnyCert(pub Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
