//! Built-in TLS on the client side: TLS listeners (`-a ADDR,https` and
//! the frontends of `-A hitch.conf`), their handshake, the `TLS.*`
//! counters, the `tls.cert.*` commands and the reload on SIGHUP.
//!
//! The TLS machinery itself (configuration, certificates, SNI, tickets,
//! rustls configs) is the `lacquer-tls` crate; this module is the glue to
//! the daemon. An accepted connection on a TLS listener runs its handshake
//! here under `tls_handshake_timeout` (a client that stalls or sends junk
//! costs its task at most that long and is counted by cause); then the
//! decrypted stream goes to the same session code as plain HTTP, HTTP/2
//! included when ALPN chose `h2`. What the handshake negotiated reaches
//! VCL as the TLVs a TLS terminator would have sent in a PROXY v2 header,
//! so vmod `proxy` (and vmod `tls`, which reads the same) answer alike
//! behind Hitch and with Lacquer's own TLS.
//!
//! Certificates: `-a …,https` listeners and `-A` frontends without their
//! own `pem-file` share the top-level certificates of the `-A` file; the
//! `tls.cert.*` commands and SIGHUP act on that shared set (a frontend
//! with its own `pem-file`s keeps them, re-read on SIGHUP).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use lacquer_tls::certs::CertStore;
use lacquer_tls::conf::{HitchConf, PemFile};
use lacquer_tls::server::{Failure, FrontendOptions, TlsFrontend};
use lacquer_tls::tokio_rustls::server::TlsStream;
use lacquer_vsl::vsc::tables::Tls;
use lacquer_vsl::vsc::{Section, Vsc};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::client::session::SessInfoArgs;
use crate::client::sock::{ClientStream, Readable, SockCtl};
use crate::mgt::cli::{Reply, status};
use crate::mgt::listen::{ListenSpec, Proto};
use crate::pid;
use crate::runtime::state::Shared;

/// The TLS side of the daemon.
pub struct TlsState {
    /// The shared certificates (`tls.cert.*`), if any listener uses them.
    pub global: Option<Arc<CertStore>>,
    /// Every store, for SIGHUP.
    stores: Vec<Arc<CertStore>>,
    /// Listener name → its frontend.
    frontends: Vec<(String, Arc<TlsFrontend>)>,
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

/// The `-a` arguments that stand for the frontends of an `-A` file
/// (`tls0=HOST:PORT,HTTPS`, …), to be parsed with the others.
pub fn listen_args(conf: &HitchConf) -> Vec<String> {
    conf.frontends
        .iter()
        .enumerate()
        .map(|(i, fe)| {
            let host = match fe.host.as_deref() {
                None => String::new(),
                Some(h) if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
                Some(h) => h.to_string(),
            };
            format!("tls{i}={host}:{},HTTPS", fe.port)
        })
        .collect()
}

/// `pem-dir` files (sorted, filtered by `pem-dir-glob`) and `pem-file`s in
/// the order that makes the right one the default: the last `pem-file`,
/// else the first file of the directory.
fn global_pems(conf: &HitchConf) -> Result<Vec<PemFile>, String> {
    let mut dir_pems = Vec::new();
    if let Some(dir) = &conf.pem_dir {
        let rd = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: pem-dir {}: {e}", conf.file, dir.display()))?;
        let mut names: Vec<std::path::PathBuf> = rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .filter(|p| {
                conf.pem_dir_glob.as_deref().is_none_or(|g| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| lacquer_tls::conf::glob_match(g, n))
                })
            })
            .collect();
        names.sort();
        dir_pems = names
            .into_iter()
            .map(|cert| PemFile {
                cert,
                private_key: None,
                ocsp_resp_file: None,
                line: 0,
            })
            .collect();
    }
    if conf.global.pem_files.is_empty() {
        if !dir_pems.is_empty() {
            let first = dir_pems.remove(0);
            dir_pems.push(first);
        }
        return Ok(dir_pems);
    }
    dir_pems.extend(conf.global.pem_files.iter().cloned());
    Ok(dir_pems)
}

impl TlsState {
    /// Sets up the frontends of every HTTPS listener in `listen`; `None`
    /// when there is none (and no `-A` file).
    pub fn new(
        conf: Option<&HitchConf>,
        listen: &[ListenSpec],
        vsc: &Vsc,
        ticket_period: u64,
    ) -> Result<Option<Arc<TlsState>>, String> {
        let https: Vec<&ListenSpec> = listen.iter().filter(|l| l.proto == Proto::Https).collect();
        if https.is_empty() && conf.is_none() {
            return Ok(None);
        }
        let empty = HitchConf::default();
        let conf = conf.unwrap_or(&empty);
        let provider = lacquer_tls::provider();
        let pems = global_pems(conf)?;
        let global = if pems.is_empty() {
            None
        } else {
            Some(Arc::new(
                CertStore::load(&pems, provider.clone()).map_err(|e| e.to_string())?,
            ))
        };
        let mut stores: Vec<Arc<CertStore>> = global.iter().cloned().collect();
        let tickets: Arc<dyn lacquer_tls::rustls::server::ProducesTickets> =
            Arc::new(match &conf.ticket_key_file {
                Some(f) => lacquer_tls::tickets::Tickets::from_file(f, ticket_period)?,
                None => lacquer_tls::tickets::Tickets::random(ticket_period)?,
            });
        let sessions = lacquer_tls::rustls::server::ServerSessionMemoryCache::new(64 * 1024);
        let mut frontends = Vec::new();
        for spec in https {
            // A frontend of the -A file, or a plain `-a …,https`.
            let own = spec
                .name
                .strip_prefix("tls")
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|i| conf.frontends.get(i));
            let (opts, store) = match own {
                Some(fe) => {
                    let eff = conf.effective(fe);
                    let opts = FrontendOptions::from_effective(&eff, conf.alpn_protos.clone());
                    let store = if fe.scope.pem_files.is_empty() {
                        global.clone()
                    } else {
                        let s = Arc::new(
                            CertStore::load(&eff.pem_files, provider.clone())
                                .map_err(|e| e.to_string())?,
                        );
                        stores.push(s.clone());
                        Some(s)
                    };
                    (opts, store)
                }
                None => {
                    // Top-level options and certificates.
                    let eff = conf.effective(&lacquer_tls::conf::Frontend {
                        host: None,
                        port: String::new(),
                        match_global_certs: false,
                        scope: lacquer_tls::conf::Scope::default(),
                        line: 0,
                    });
                    (
                        FrontendOptions::from_effective(&eff, conf.alpn_protos.clone()),
                        global.clone(),
                    )
                }
            };
            let store = store.ok_or_else(|| {
                format!(
                    "-a {}: an https listener needs certificates: give -A FILE with a pem-file (Hitch's hitch.conf format)",
                    spec.written
                )
            })?;
            let fe = TlsFrontend::new(store, opts, tickets.clone(), sessions.clone())
                .map_err(|e| format!("-a {}: {e}", spec.written))?;
            frontends.push((spec.name.clone(), Arc::new(fe)));
        }
        let counters = vsc
            .add_section(&lacquer_vsl::vsc::tables::TLS, "TLS")
            .map_err(|e| e.to_string())?;
        Ok(Some(Arc::new(TlsState {
            global,
            stores,
            frontends,
            counters,
        })))
    }

    /// The frontend of the listener called `name`.
    pub fn frontend(&self, name: &str) -> Option<Arc<TlsFrontend>> {
        self.frontends
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
    }

    /// Copies the backend handshake counts into `TLS.be_*`.
    pub fn publish_backend(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let h = &crate::backend::pool::TLS_HANDSHAKES;
        self.counters.set(Tls::be_handshakes, h[0].load(Relaxed));
        self.counters.set(Tls::be_resumed, h[1].load(Relaxed));
        self.counters.set(Tls::be_fail, h[2].load(Relaxed));
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

/// Reloads the certificates on every SIGHUP while the daemon runs.
pub fn spawn_sighup(sh: Arc<Shared>, tls: Arc<TlsState>) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            for e in tls.reload() {
                sh.vsl.log_immediate(
                    lacquer_vsl::Tag::Error,
                    lacquer_vsl::Vxid::plain(0),
                    format_args!("TLS certificate reload (SIGHUP) failed: {e}"),
                );
            }
        }
    });
}

/// A decrypted client connection, as the session reads and writes it.
pub struct TlsConn {
    inner: TlsStream<ClientStream>,
    tls: Arc<TlsState>,
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.tls.counters.add(Tls::rx_bytes, n as u64);
        }
        r
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.tls.counters.add(Tls::tx_bytes, n as u64);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            self.tls.counters.add(Tls::tx_bytes, n as u64);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Readable for TlsConn {
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (io, conn) = self.inner.get_ref();
        // Decrypted bytes (or the client's close_notify) already wait.
        if !conn.wants_read() {
            return Poll::Ready(Ok(()));
        }
        io.poll_readable(cx)
    }
}

/// The PROXY v2 TLV bytes (type, 16-bit length, value) that describe a
/// finished handshake, as a TLS terminator in front would send them.
fn tlv_bytes(info: &lacquer_tls::info::TlsInfo) -> Vec<u8> {
    let mut out = Vec::new();
    for (t, v) in info.to_proxy_tlvs() {
        let len = u16::try_from(v.len()).unwrap_or(u16::MAX);
        out.push(t);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&v[..usize::from(len)]);
    }
    out
}

/// Runs the handshake of a connection accepted on a TLS listener, then
/// serves it as any session. The caller holds the session guard.
pub async fn serve(
    sh: Arc<Shared>,
    tls: Arc<TlsState>,
    fe: Arc<TlsFrontend>,
    stream: ClientStream,
    mut args: SessInfoArgs,
    ctl: SockCtl,
) {
    let (timeout, h2) = {
        let p = sh.params();
        (
            p.duration(pid!("tls_handshake_timeout")),
            p.bit(pid!("feature"), "http2"),
        )
    };
    let limit = std::time::Duration::from_secs_f64(timeout.clamp(0.0, 1e9));
    let failed = |failure: Failure, msg: &str| {
        tls.counters.inc(match failure {
            Failure::Timeout => Tls::fail_timeout,
            Failure::Closed => Tls::fail_closed,
            Failure::Junk => Tls::fail_junk,
            Failure::Incompatible => Tls::fail_incompatible,
            Failure::ClientCert => Tls::fail_client_cert,
            Failure::SniNoMatch => Tls::fail_sni_nomatch,
            Failure::Other => Tls::fail_other,
        });
        sh.vsl.log_immediate(
            lacquer_vsl::Tag::Error,
            lacquer_vsl::Vxid::plain(0),
            format_args!(
                "TLS handshake failed ({}): listener {} client {} {}: {msg}",
                failure.name(),
                args.listener,
                args.client.ip(),
                args.client.port()
            ),
        );
    };
    let conn = match tokio::time::timeout(limit, fe.accept(stream, h2)).await {
        Err(_) => {
            failed(Failure::Timeout, "tls_handshake_timeout");
            return;
        }
        Ok(Err(e)) => {
            failed(e.failure, &e.msg);
            return;
        }
        Ok(Ok(c)) => c,
    };
    let (conn, info) = conn;
    tls.counters.inc(Tls::handshakes);
    if info.resumed {
        tls.counters.inc(Tls::resumed);
    }
    if info.alpn.as_deref() == Some("h2") {
        tls.counters.inc(Tls::alpn_h2);
    }
    args.tlvs = tlv_bytes(&info);
    let conn = TlsConn {
        inner: conn,
        tls: tls.clone(),
    };
    crate::client::session::serve(sh, conn, args, Some(ctl)).await;
}

/// The `tls.cert.*` commands.
pub fn cli(sh: &Shared, cmd: &str, args: &[&str]) -> Reply {
    let Some(tls) = sh.tls.get() else {
        return Reply::err(
            status::CANT,
            "No TLS: start lacquerd with -A FILE or an -a ADDR,https listener",
        );
    };
    let Some(store) = &tls.global else {
        return Reply::err(
            status::CANT,
            "No shared certificates: the -A file has no top-level pem-file",
        );
    };
    match cmd {
        "tls.cert.list" => {
            let mut out = format!(
                "{:<8} {:<8} {:<24} {:<16} {}\n",
                "Frontend", "State", "Hostname", "Certificate ID", "File"
            );
            for c in store.list() {
                let names = if c.names.is_empty() {
                    vec!["-".to_string()]
                } else {
                    c.names.clone()
                };
                for n in names {
                    out.push_str(&format!(
                        "{:<8} {:<8} {:<24} {:<16} {}\n",
                        "default",
                        c.state,
                        n,
                        c.id,
                        c.path.display()
                    ));
                }
            }
            Reply::ok(out)
        }
        "tls.cert.load" => {
            let (id, file) = match args {
                [file] => (None, *file),
                [id, file] => (Some(*id), *file),
                _ => return Reply::err(status::SYNTAX, "tls.cert.load [<id>] <pem-file>"),
            };
            let pem = PemFile {
                cert: file.into(),
                private_key: None,
                ocsp_resp_file: None,
                line: 0,
            };
            match store.stage_load(id, pem, true) {
                Ok(id) => Reply::ok(format!("{id} staged; tls.cert.commit to use it\n")),
                Err(e) => Reply::err(status::CANT, e.to_string()),
            }
        }
        "tls.cert.discard" => match store.stage_discard(args[0]) {
            Ok(()) => Reply::ok(""),
            Err(e) => Reply::err(status::CANT, e),
        },
        "tls.cert.commit" => match store.commit() {
            Ok(n) => {
                tls.counters.inc(Tls::cert_commits);
                Reply::ok(format!("{n} certificates in use\n"))
            }
            Err(e) => Reply::err(
                status::CANT,
                format!("commit refused, nothing changed: {e}"),
            ),
        },
        "tls.cert.rollback" => {
            store.rollback();
            Reply::ok("")
        }
        "tls.cert.reload" => {
            let errors = tls.reload();
            if errors.is_empty() {
                Reply::ok("")
            } else {
                Reply::err(status::CANT, errors.join("\n"))
            }
        }
        other => Reply::err(status::UNKNOWN, format!("Unknown request: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontends_become_listen_args() {
        let c = lacquer_tls::conf::parse(
            "f",
            "frontend = \"[*]:8443\"\nfrontend = { host = \"::1\" port = \"9443\" }\nfrontend = \"127.0.0.1:443\"\n",
        )
        .unwrap();
        assert_eq!(
            listen_args(&c),
            [
                "tls0=:8443,HTTPS",
                "tls1=[::1]:9443,HTTPS",
                "tls2=127.0.0.1:443,HTTPS"
            ]
        );
    }
}
