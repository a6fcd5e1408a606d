//! Handshakes between this crate's server and client sides over an
//! in-memory pipe: SNI choice, ALPN, resumption, `sni-nomatch-abort`,
//! client certificates and the backend verify matrix.

use std::sync::Arc;

use rustls::server::ServerSessionMemoryCache;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::certs::CertStore;
use crate::client::{BackendTls, Connectors, client_config};
use crate::conf::{ClientVerify, PemFile};
use crate::info::TlsInfo;
use crate::server::{Failure, FrontendOptions, TlsFrontend};
use crate::testcerts::{Ca, tempdir};
use crate::tickets::Tickets;

fn pem(p: std::path::PathBuf) -> PemFile {
    PemFile {
        cert: p,
        private_key: None,
        ocsp_resp_file: None,
        ocsp_dir: None,
        line: 1,
    }
}

struct Setup {
    dir: std::path::PathBuf,
    ca: Ca,
    fe: Arc<TlsFrontend>,
}

fn setup(opts: FrontendOptions) -> Setup {
    let dir = tempdir("hs");
    let ca = Ca::new("Handshake CA");
    let a = ca.leaf_file(&dir, "a", &["www.example.com"]);
    let w = ca.leaf_file(&dir, "w", &["*.example.com"]);
    let d = ca.leaf_file(&dir, "d", &["default.test"]);
    ca.write(&dir);
    let store = Arc::new(CertStore::load(&[pem(a), pem(w), pem(d)], crate::provider()).unwrap());
    let fe = TlsFrontend::new(
        store,
        opts,
        Arc::new(Tickets::random(3600).unwrap()),
        ServerSessionMemoryCache::new(1024),
    )
    .unwrap();
    Setup {
        dir,
        ca,
        fe: Arc::new(fe),
    }
}

/// Runs one handshake; returns the server's view (or its failure) and the
/// certificate names the client saw.
async fn handshake(
    fe: &Arc<TlsFrontend>,
    client: Arc<rustls::ClientConfig>,
    name: &str,
    h2: bool,
) -> (Result<TlsInfo, Failure>, Result<Vec<String>, String>) {
    let (c, s) = tokio::io::duplex(64 * 1024);
    let fe = fe.clone();
    let server = tokio::spawn(async move {
        match fe.accept(s, h2).await {
            Ok((mut t, info)) => {
                let mut b = [0u8; 4];
                let _ = t.read_exact(&mut b).await;
                let _ = t.write_all(b"pong").await;
                let _ = t.shutdown().await;
                Ok(info)
            }
            Err(e) => Err(e.failure),
        }
    });
    let conn = tokio_rustls::TlsConnector::from(client);
    let sn = ServerName::try_from(name.to_string()).unwrap();
    let seen = match conn.connect(sn, c).await {
        Ok(mut t) => {
            let names =
                crate::certs::cert_names(&t.get_ref().1.peer_certificates().unwrap()[0]).unwrap();
            t.write_all(b"ping").await.unwrap();
            let mut b = Vec::new();
            let _ = t.read_to_end(&mut b).await;
            Ok(names)
        }
        Err(e) => Err(crate::client::describe(&e)),
    };
    (server.await.unwrap(), seen)
}

fn trusting(s: &Setup) -> Arc<rustls::ClientConfig> {
    Arc::new(
        client_config(&BackendTls {
            verify_host: true,
            ca_file: Some(s.dir.join("ca.pem")),
            ..BackendTls::default()
        })
        .unwrap(),
    )
}

#[tokio::test]
async fn sni_choice_alpn_and_resumption() {
    let s = setup(FrontendOptions::default());
    let cfg = trusting(&s);
    let (info, names) = handshake(&s.fe, cfg.clone(), "www.example.com", false).await;
    let info = info.unwrap();
    assert_eq!(names.unwrap(), ["www.example.com"]);
    assert_eq!(info.version, "TLSv1.3");
    assert_eq!(info.sni.as_deref(), Some("www.example.com"));
    assert_eq!(info.alpn.as_deref(), Some("http/1.1"));
    assert!(!info.resumed);
    // The same client config resumes (TLS 1.3 ticket).
    let (info, _) = handshake(&s.fe, cfg.clone(), "www.example.com", false).await;
    assert!(info.unwrap().resumed, "second connection resumes");
    let (_, names) = handshake(&s.fe, cfg.clone(), "img.example.com", false).await;
    assert_eq!(names.unwrap(), ["*.example.com"]);
    // An unknown name gets the default, which the client then refuses.
    let (_, names) = handshake(&s.fe, cfg.clone(), "other.test", false).await;
    assert!(
        names
            .unwrap_err()
            .contains("not valid for the backend's name")
    );
    // h2 is chosen only when the listener serves it.
    let mut h2c = (*cfg).clone();
    h2c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let h2c = Arc::new(h2c);
    let (info, _) = handshake(&s.fe, h2c.clone(), "www.example.com", true).await;
    assert_eq!(info.unwrap().alpn.as_deref(), Some("h2"));
    let (info, _) = handshake(&s.fe, h2c, "www.example.com", false).await;
    assert_eq!(info.unwrap().alpn.as_deref(), Some("http/1.1"));
}

#[tokio::test]
async fn nomatch_abort_and_reload_keep_running_connections() {
    let s = setup(FrontendOptions {
        sni_nomatch_abort: true,
        ..FrontendOptions::default()
    });
    let cfg = trusting(&s);
    let (info, seen) = handshake(&s.fe, cfg.clone(), "other.test", false).await;
    assert_eq!(info.unwrap_err(), Failure::SniNoMatch);
    assert!(
        seen.unwrap_err().contains("UnrecognisedName"),
        "alert reaches the client"
    );
    // A reload that replaces the wildcard takes effect for new handshakes.
    let n = s.ca.leaf_file(&s.dir, "n", &["*.example.com", "new.test"]);
    s.fe.store.stage_discard("cert1").unwrap();
    s.fe.store.stage_load(None, pem(n), false).unwrap();
    s.fe.store.commit().unwrap();
    let (_, names) = handshake(&s.fe, cfg.clone(), "new.test", false).await;
    assert_eq!(names.unwrap(), ["*.example.com", "new.test"]);
}

#[tokio::test]
async fn client_certificates() {
    let dir = tempdir("cv");
    let ca = Ca::new("Client CA");
    let ca_file = ca.write(&dir);
    let s = setup(FrontendOptions {
        client_verify: ClientVerify::Required,
        client_verify_ca: Some(ca_file.clone()),
        ..FrontendOptions::default()
    });
    let plain = trusting(&s);
    let (info, _) = handshake(&s.fe, plain.clone(), "www.example.com", false).await;
    assert!(info.is_err(), "no client certificate: refused");
    let client_pem = ca.leaf_file(&dir, "client", &["client.test"]);
    let with = Arc::new(
        client_config(&BackendTls {
            verify_host: true,
            ca_file: Some(s.dir.join("ca.pem")),
            client_cert: Some(client_pem),
            ..BackendTls::default()
        })
        .unwrap(),
    );
    let (info, _) = handshake(&s.fe, with, "www.example.com", false).await;
    let info = info.unwrap();
    assert!(info.client_cert);
    assert_eq!(info.client_cert_cn.as_deref(), Some("client.test"));
    // client-verify without a CA file is refused with a reason.
    let e = TlsFrontend::new(
        s.fe.store.clone(),
        FrontendOptions {
            client_verify: ClientVerify::Optional,
            ..FrontendOptions::default()
        },
        Arc::new(Tickets::random(3600).unwrap()),
        ServerSessionMemoryCache::new(16),
    )
    .unwrap_err();
    assert!(e.contains("needs client-verify-ca"), "{e}");
}

#[tokio::test]
async fn backend_verify_matrix() {
    let s = setup(FrontendOptions::default());
    let other_dir = tempdir("other-ca");
    let other = Ca::new("Someone Else");
    let other_ca = other.write(&other_dir);
    let conns = Connectors::default();
    let spec = |verify_peer, verify_host, ca: &std::path::Path| BackendTls {
        sni: true,
        verify_peer,
        verify_host,
        ca_file: Some(ca.to_path_buf()),
        ca_dir: None,
        client_cert: None,
    };
    let good = s.dir.join("ca.pem");
    let cases = [
        // (verify_peer, verify_host, ca, name, ok)
        (true, true, good.as_path(), "www.example.com", true),
        (true, true, good.as_path(), "wrong.test", false),
        (true, false, good.as_path(), "wrong.test", true),
        (true, false, other_ca.as_path(), "www.example.com", false),
        (false, true, other_ca.as_path(), "wrong.test", true),
    ];
    for (vp, vh, ca, name, ok) in cases {
        let cfg = conns.get(&spec(vp, vh, ca)).unwrap();
        let (_, seen) = handshake(&s.fe, cfg, name, false).await;
        assert_eq!(
            seen.is_ok(),
            ok,
            "{vp} {vh} {} {name}: {seen:?}",
            ca.display()
        );
        if let Err(e) = seen {
            assert!(
                e.contains("unknown issuer") || e.contains("not valid for the backend's name"),
                "{e}"
            );
        }
    }
    // One config per attribute set: the same Arc comes back.
    let a = conns.get(&spec(true, true, &good)).unwrap();
    let b = conns.get(&spec(true, true, &good)).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
}

#[tokio::test]
async fn junk_and_versions() {
    let s = setup(FrontendOptions {
        protos: vec![crate::conf::Proto::Tls12],
        ..FrontendOptions::default()
    });
    // Plain HTTP on a TLS port.
    let (mut c, srv) = tokio::io::duplex(4096);
    let fe = s.fe.clone();
    let t = tokio::spawn(async move { fe.accept(srv, false).await.map(|_| ()).unwrap_err() });
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(t.await.unwrap().failure, Failure::Junk);
    // A client that closes at once.
    let (c, srv) = tokio::io::duplex(4096);
    drop(c);
    assert_eq!(
        s.fe.accept(srv, false)
            .await
            .map(|_| ())
            .unwrap_err()
            .failure,
        Failure::Closed
    );
    // TLS 1.2 only: the handshake says so.
    let (info, _) = handshake(&s.fe, trusting(&s), "www.example.com", false).await;
    let info = info.unwrap();
    assert_eq!(info.version, "TLSv1.2");
    assert!(info.cipher.starts_with("ECDHE-"), "{}", info.cipher);
    // A TLS 1.3-only client cannot talk to it.
    let mut roots = rustls::RootCertStore::empty();
    for c in crate::certs::read_certs(&s.dir.join("ca.pem")).unwrap() {
        roots.add(c).unwrap();
    }
    let c13 = rustls::ClientConfig::builder_with_provider(crate::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let (info, _) = handshake(&s.fe, Arc::new(c13), "www.example.com", false).await;
    assert_eq!(info.unwrap_err(), Failure::Incompatible);
}
