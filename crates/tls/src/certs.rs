//! Certificates for the client side: loading `pem-file`s, choosing one by
//! SNI, and replacing the set while connections run.
//!
//! A [`CertSet`] is immutable: the names each certificate answers for
//! (its DNS subject alternative names, else its subject's common name),
//! and the default one. The choice for a client hello is the exact name
//! first, then a wildcard one label deep (`*.example.com` for
//! `www.example.com`), then the default: the last `pem-file` listed, as
//! Hitch does. Among certificates that answer for the same name the one
//! loaded last wins (Hitch logs this and does the same).
//!
//! [`CertStore`] holds the set in use behind an `ArcSwap` and the staged
//! changes of Varnish's `tls.cert.*` commands: `load` and `discard` edit a
//! staging list, `commit` builds a new set from it (every file re-read;
//! any failure leaves the set in use alone), `rollback` drops the staged
//! changes. A handshake takes the set at its start and keeps it, so a
//! commit never changes the certificate of a connection already running.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::conf::PemFile;

/// A certificate file that could not be used: which file and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {msg}")]
pub struct CertError {
    pub path: String,
    pub msg: String,
}

fn cert_err(path: &Path, msg: impl Into<String>) -> CertError {
    CertError {
        path: path.display().to_string(),
        msg: msg.into(),
    }
}

/// One loaded certificate with the names it answers for.
#[derive(Debug)]
pub struct LoadedCert {
    /// The `tls.cert.*` id (`cert0`, … or the one the operator gave).
    pub id: String,
    pub source: PemFile,
    pub key: Arc<CertifiedKey>,
    /// Lower-case DNS names; wildcards as written (`*.example.com`).
    pub names: Vec<String>,
    /// The leaf's signature algorithm (`ecdsa-with-SHA256`) and key
    /// (`EC256`), as `tls.cert_sign()`/`tls.cert_key()` report them: read
    /// once here, not per handshake.
    pub sig_alg: Option<String>,
    pub key_alg: Option<String>,
}

/// Reads every certificate in a PEM file (the chain, leaf first).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, CertError> {
    let data = std::fs::read(path).map_err(|e| cert_err(path, format!("cannot read: {e}")))?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&data)
        .collect::<Result<_, _>>()
        .map_err(|e| cert_err(path, format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(cert_err(path, "no CERTIFICATE block in the file"));
    }
    Ok(certs)
}

/// Loads a `pem-file` (key and chain in one file, or the key apart).
pub fn load_pem(
    id: &str,
    pem: &PemFile,
    provider: &CryptoProvider,
) -> Result<LoadedCert, CertError> {
    let chain = read_certs(&pem.cert)?;
    let key_path = pem.private_key.as_deref().unwrap_or(&pem.cert);
    let data =
        std::fs::read(key_path).map_err(|e| cert_err(key_path, format!("cannot read: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(&data).map_err(|e| {
        cert_err(
            key_path,
            format!("no usable private key (PKCS#1, PKCS#8 or SEC1 PEM block): {e}"),
        )
    })?;
    let names = cert_names(&chain[0]).map_err(|m| cert_err(&pem.cert, m))?;
    let mut ck = CertifiedKey::from_der(chain, key, provider).map_err(|e| {
        cert_err(
            &pem.cert,
            format!("key and certificate do not go together: {e}"),
        )
    })?;
    // As Hitch: a staple cached in ocsp-dir first, else ocsp-resp-file.
    let cached = pem
        .ocsp_dir
        .as_deref()
        .and_then(|dir| crate::ocsp::cached_staple(dir, &pem.cert));
    if let Some(der) = cached {
        ck.ocsp = Some(der);
    } else if let Some(ocsp) = &pem.ocsp_resp_file {
        let der = std::fs::read(ocsp)
            .map_err(|e| cert_err(ocsp, format!("cannot read the OCSP response: {e}")))?;
        if der.first() != Some(&0x30) {
            return Err(cert_err(ocsp, "not a DER OCSP response"));
        }
        ck.ocsp = Some(der);
    }
    let leaf = ck.cert.first().map(|c| c.as_ref());
    let sig_alg = leaf.and_then(crate::der::signature_name);
    let key_alg = leaf.and_then(crate::der::key_name);
    Ok(LoadedCert {
        id: id.to_string(),
        source: pem.clone(),
        key: Arc::new(ck),
        names,
        sig_alg,
        key_alg,
    })
}

/// The DNS names a server certificate is valid for, lower-cased: its
/// subject alternative names.
pub fn cert_names(leaf: &CertificateDer<'_>) -> Result<Vec<String>, String> {
    let ee = webpki::EndEntityCert::try_from(leaf)
        .map_err(|e| format!("cannot parse the certificate: {e:?}"))?;
    Ok(ee
        .valid_dns_names()
        .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
        .collect())
}

/// An immutable set of certificates with its SNI index.
#[derive(Debug, Default)]
pub struct CertSet {
    pub certs: Vec<Arc<LoadedCert>>,
    exact: HashMap<String, usize>,
    /// Keyed by the part after `*.`.
    wild: HashMap<String, usize>,
    default: Option<usize>,
}

/// How a certificate was chosen for a client hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Exact,
    Wildcard,
    /// No SNI name, or one no certificate answers for.
    Default,
}

impl CertSet {
    /// Indexes `certs`; the last one is the default.
    pub fn new(certs: Vec<Arc<LoadedCert>>) -> Self {
        let mut set = CertSet {
            default: certs.len().checked_sub(1),
            ..CertSet::default()
        };
        for (i, c) in certs.iter().enumerate() {
            for n in &c.names {
                match n.strip_prefix("*.") {
                    Some(base) => set.wild.insert(base.to_string(), i),
                    None => set.exact.insert(n.clone(), i),
                };
            }
        }
        set.certs = certs;
        set
    }

    /// The certificate for `sni` and how it was found; `None` only for an
    /// empty set.
    pub fn choose(&self, sni: Option<&str>) -> Option<(&Arc<LoadedCert>, Choice)> {
        if let Some(name) = sni {
            let name = name.trim_end_matches('.');
            // Most clients send the name in lower case: no copy then.
            let name: std::borrow::Cow<'_, str> = if name.bytes().any(|b| b.is_ascii_uppercase()) {
                name.to_ascii_lowercase().into()
            } else {
                name.into()
            };
            if let Some(&i) = self.exact.get(name.as_ref()) {
                return Some((&self.certs[i], Choice::Exact));
            }
            if let Some((_, base)) = name.split_once('.')
                && let Some(&i) = self.wild.get(base)
            {
                return Some((&self.certs[i], Choice::Wildcard));
            }
        }
        self.default.map(|i| (&self.certs[i], Choice::Default))
    }
}

/// The certificate set in use and the changes staged by `tls.cert.*`.
#[derive(Debug)]
pub struct CertStore {
    live: ArcSwap<CertSet>,
    provider: Arc<CryptoProvider>,
    staged: Mutex<Staged>,
    /// Handed to callers that must rebuild what depends on the set
    /// (server configs); bumped on every commit.
    generation: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct Staged {
    /// The list a commit would install (`None`: nothing staged).
    list: Option<Vec<(String, PemFile)>>,
    next_id: usize,
}

/// One line of `tls.cert.list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertListing {
    pub id: String,
    pub state: &'static str,
    pub path: PathBuf,
    pub names: Vec<String>,
}

impl CertStore {
    /// Loads `pems` (in order; the last is the default).
    pub fn load(pems: &[PemFile], provider: Arc<CryptoProvider>) -> Result<Self, CertError> {
        let mut certs = Vec::new();
        for (i, p) in pems.iter().enumerate() {
            certs.push(Arc::new(load_pem(&format!("cert{i}"), p, &provider)?));
        }
        Ok(CertStore {
            live: ArcSwap::from_pointee(CertSet::new(certs)),
            provider,
            staged: Mutex::new(Staged {
                list: None,
                next_id: pems.len(),
            }),
            generation: 0.into(),
        })
    }

    /// The set a new handshake uses.
    pub fn current(&self) -> Arc<CertSet> {
        self.live.load_full()
    }

    /// Bumped by every commit.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    fn staged_list<'a>(&self, st: &'a mut Staged) -> &'a mut Vec<(String, PemFile)> {
        st.list.get_or_insert_with(|| {
            self.live
                .load()
                .certs
                .iter()
                .map(|c| (c.id.clone(), c.source.clone()))
                .collect()
        })
    }

    /// `tls.cert.load`: stages a certificate (checked now, installed at
    /// commit). A new one goes last, so it becomes the default unless
    /// `default_last` is false, in which case it goes first.
    pub fn stage_load(
        &self,
        id: Option<&str>,
        pem: PemFile,
        default_last: bool,
    ) -> Result<String, CertError> {
        let mut st = self.staged.lock().unwrap_or_else(|e| e.into_inner());
        let id = match id {
            Some(i) => i.to_string(),
            None => {
                let i = format!("cert{}", st.next_id);
                st.next_id += 1;
                i
            }
        };
        load_pem(&id, &pem, &self.provider)?;
        let list = self.staged_list(&mut st);
        if list.iter().any(|(i, _)| *i == id) {
            return Err(cert_err(
                &pem.cert,
                format!("a certificate with id '{id}' exists"),
            ));
        }
        if default_last {
            list.push((id.clone(), pem));
        } else {
            list.insert(0, (id.clone(), pem));
        }
        Ok(id)
    }

    /// `tls.cert.discard ID`: stages the removal of a certificate.
    pub fn stage_discard(&self, id: &str) -> Result<(), String> {
        let mut st = self.staged.lock().unwrap_or_else(|e| e.into_inner());
        let list = self.staged_list(&mut st);
        let before = list.len();
        list.retain(|(i, _)| i != id);
        if list.len() == before {
            return Err(format!("no certificate with id '{id}'"));
        }
        Ok(())
    }

    /// `tls.cert.commit`: installs the staged list (every file read
    /// again). On failure nothing changes and the staged list stays.
    pub fn commit(&self) -> Result<usize, CertError> {
        let mut st = self.staged.lock().unwrap_or_else(|e| e.into_inner());
        let Some(list) = st.list.as_ref() else {
            return Ok(self.live.load().certs.len());
        };
        let mut certs = Vec::with_capacity(list.len());
        for (id, pem) in list {
            certs.push(Arc::new(load_pem(id, pem, &self.provider)?));
        }
        let n = certs.len();
        self.live.store(Arc::new(CertSet::new(certs)));
        st.list = None;
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(n)
    }

    /// `tls.cert.rollback`: forgets the staged changes.
    pub fn rollback(&self) {
        self.staged.lock().unwrap_or_else(|e| e.into_inner()).list = None;
    }

    /// Re-reads every certificate in use from its files (SIGHUP).
    pub fn reload(&self) -> Result<usize, CertError> {
        {
            let mut st = self.staged.lock().unwrap_or_else(|e| e.into_inner());
            self.staged_list(&mut st);
        }
        self.commit()
    }

    /// `tls.cert.list`: the certificates in use, and staged changes.
    pub fn list(&self) -> Vec<CertListing> {
        let live = self.live.load();
        let st = self.staged.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<CertListing> = live
            .certs
            .iter()
            .map(|c| {
                let staged_out = st
                    .list
                    .as_ref()
                    .is_some_and(|l| !l.iter().any(|(i, _)| *i == c.id));
                CertListing {
                    id: c.id.clone(),
                    state: if staged_out { "discard" } else { "active" },
                    path: c.source.cert.clone(),
                    names: c.names.clone(),
                }
            })
            .collect();
        if let Some(l) = &st.list {
            for (id, pem) in l {
                if !live.certs.iter().any(|c| c.id == *id) {
                    out.push(CertListing {
                        id: id.clone(),
                        state: "staged",
                        path: pem.cert.clone(),
                        names: Vec::new(),
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testcerts::{self, Ca};

    fn pem(p: PathBuf) -> PemFile {
        PemFile {
            cert: p,
            private_key: None,
            ocsp_resp_file: None,
            ocsp_dir: None,
            line: 1,
        }
    }

    #[test]
    fn sni_exact_then_wildcard_then_last_as_default() {
        let dir = testcerts::tempdir("sni");
        let ca = Ca::new("Test CA");
        let a = ca.leaf_file(&dir, "a", &["www.example.com"]);
        let w = ca.leaf_file(&dir, "w", &["*.example.com"]);
        let d = ca.leaf_file(&dir, "d", &["default.test"]);
        let store = CertStore::load(&[pem(a), pem(w), pem(d)], crate::provider()).unwrap();
        let set = store.current();
        let pick = |s: Option<&str>| {
            let (c, how) = set.choose(s).unwrap();
            (c.id.clone(), how)
        };
        assert_eq!(
            pick(Some("www.example.com")),
            ("cert0".into(), Choice::Exact)
        );
        assert_eq!(
            pick(Some("WWW.Example.COM.")),
            ("cert0".into(), Choice::Exact)
        );
        assert_eq!(
            pick(Some("img.example.com")),
            ("cert1".into(), Choice::Wildcard)
        );
        assert_eq!(
            pick(Some("a.b.example.com")),
            ("cert2".into(), Choice::Default)
        );
        assert_eq!(pick(Some("example.com")), ("cert2".into(), Choice::Default));
        assert_eq!(pick(None), ("cert2".into(), Choice::Default));
    }

    #[test]
    fn staged_load_discard_commit_rollback() {
        let dir = testcerts::tempdir("staged");
        let ca = Ca::new("Test CA");
        let a = ca.leaf_file(&dir, "a", &["a.test"]);
        let b = ca.leaf_file(&dir, "b", &["b.test"]);
        let store = CertStore::load(&[pem(a.clone())], crate::provider()).unwrap();
        let before = store.current();
        let id = store.stage_load(Some("bee"), pem(b), true).unwrap();
        assert_eq!(id, "bee");
        // Staged only: the set in use is unchanged.
        assert_eq!(store.current().certs.len(), 1);
        let l = store.list();
        assert_eq!(l[1].state, "staged");
        store.rollback();
        assert_eq!(store.list().len(), 1);
        store
            .stage_load(Some("bee"), pem(dir.join("b.pem")), true)
            .unwrap();
        store.stage_discard("cert0").unwrap();
        assert!(store.stage_discard("nope").is_err());
        assert_eq!(store.commit().unwrap(), 1);
        let after = store.current();
        assert_eq!(after.certs[0].id, "bee");
        assert_eq!(store.generation(), 1);
        // The old set lives on for whoever holds it (a running handshake).
        assert_eq!(before.certs[0].id, "cert0");
        assert_eq!(before.choose(Some("a.test")).unwrap().1, Choice::Exact);
        // A broken file is refused when staged, and nothing changes.
        std::fs::write(dir.join("bad.pem"), "junk").unwrap();
        let e = store
            .stage_load(None, pem(dir.join("bad.pem")), true)
            .unwrap_err();
        assert!(e.to_string().contains("no CERTIFICATE block"), "{e}");
        // A file broken between load and commit fails the commit only.
        store.stage_load(Some("a2"), pem(a.clone()), false).unwrap();
        std::fs::write(&a, "junk").unwrap();
        assert!(store.commit().is_err());
        assert_eq!(store.current().certs[0].id, "bee");
    }

    #[test]
    fn key_apart_mismatch_and_ocsp() {
        let dir = testcerts::tempdir("apart");
        let ca = Ca::new("Test CA");
        let (cert, key) = ca.leaf_pair_files(&dir, "x", &["x.test"]);
        let (_, other_key) = ca.leaf_pair_files(&dir, "y", &["y.test"]);
        let p = PemFile {
            private_key: Some(key),
            ..pem(cert.clone())
        };
        assert!(load_pem("c", &p, &crate::provider()).is_ok());
        let bad = PemFile {
            private_key: Some(other_key),
            ..pem(cert.clone())
        };
        let e = load_pem("c", &bad, &crate::provider()).unwrap_err();
        assert!(e.msg.contains("do not go together"), "{e}");
        let ocsp = dir.join("o.der");
        std::fs::write(&ocsp, [0x30, 0x03, 0x0a, 0x01, 0x00]).unwrap();
        let with = PemFile {
            private_key: p.private_key.clone(),
            ocsp_resp_file: Some(ocsp),
            ocsp_dir: None,
            ..pem(cert)
        };
        let l = load_pem("c", &with, &crate::provider()).unwrap();
        assert_eq!(
            l.key.ocsp.as_deref(),
            Some(&[0x30, 0x03, 0x0a, 0x01, 0x00][..])
        );
        // A staple cached in ocsp-dir under Hitch's name for the file
        // comes before ocsp-resp-file; an empty ocsp-dir changes nothing.
        let odir = dir.join("ocsp");
        std::fs::create_dir_all(&odir).unwrap();
        let in_dir = PemFile {
            ocsp_dir: Some(odir.clone()),
            ..with.clone()
        };
        let l = load_pem("c", &in_dir, &crate::provider()).unwrap();
        assert_eq!(l.key.ocsp.as_deref().map(|d| d[4]), Some(0x00));
        std::fs::write(
            crate::ocsp::cached_staple_path(&odir, &with.cert),
            [0x30, 0x03, 0x0a, 0x01, 0x01],
        )
        .unwrap();
        let l = load_pem("c", &in_dir, &crate::provider()).unwrap();
        assert_eq!(l.key.ocsp.as_deref().map(|d| d[4]), Some(0x01));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
