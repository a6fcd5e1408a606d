//! Certificates made on the spot for tests (here and in the server's
//! integration tests, through the `test-util` feature): a CA, and leaf
//! certificates it signs for given DNS names, written as PEM files in the
//! layouts Hitch reads (key and chain in one file, or apart).

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// A fresh directory under the system's temp dir, unique to this process.
pub fn tempdir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "lacquer-tls-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create a temp dir");
    d
}

/// A certificate authority that signs leaf certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

impl Ca {
    /// A self-signed CA named `cn`.
    pub fn new(cn: &str) -> Self {
        let key = KeyPair::generate().expect("generate a CA key");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        p.distinguished_name.push(DnType::CommonName, cn);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = p.self_signed(&key).expect("self-sign the CA");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(p, key),
        }
    }

    /// Writes the CA certificate to `dir/ca.pem`.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let p = dir.join("ca.pem");
        std::fs::write(&p, &self.pem).expect("write the CA");
        p
    }

    fn leaf(&self, cn: &str, names: &[&str]) -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate().expect("generate a leaf key");
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("leaf params");
        p.distinguished_name.push(DnType::CommonName, cn);
        let cert = p.signed_by(&key, &self.issuer).expect("sign a leaf");
        (cert, key)
    }

    /// A leaf certificate (DER) and its key (PKCS#8 DER).
    pub fn leaf_der(&self, cn: &str, names: &[&str]) -> (Vec<u8>, Vec<u8>) {
        let (c, k) = self.leaf(cn, names);
        (c.der().to_vec(), k.serialize_der())
    }

    /// `dir/NAME.pem`: key, certificate and the CA, concatenated as Hitch
    /// wants them.
    pub fn leaf_file(&self, dir: &Path, name: &str, names: &[&str]) -> PathBuf {
        let (c, k) = self.leaf(names.first().copied().unwrap_or(name), names);
        let p = dir.join(format!("{name}.pem"));
        std::fs::write(&p, format!("{}{}{}", k.serialize_pem(), c.pem(), self.pem))
            .expect("write a pem-file");
        p
    }

    /// `dir/NAME.crt` (chain) and `dir/NAME.key` apart.
    pub fn leaf_pair_files(&self, dir: &Path, name: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let (c, k) = self.leaf(names.first().copied().unwrap_or(name), names);
        let cp = dir.join(format!("{name}.crt"));
        let kp = dir.join(format!("{name}.key"));
        std::fs::write(&cp, format!("{}{}", c.pem(), self.pem)).expect("write a certificate");
        std::fs::write(&kp, k.serialize_pem()).expect("write a key");
        (cp, kp)
    }
}
