//! Built-in TLS on the manager's side: the `-A` file's frontends as
//! listeners, the TLS state built from the listeners at startup, the
//! `tls.cert.*` commands and the reload on SIGHUP. The handshake itself is
//! `client::tls`; the state both use is `runtime::tls`.

use std::sync::Arc;

use lacquer_tls::certs::CertStore;
use lacquer_tls::conf::{HitchConf, PemFile};
use lacquer_tls::server::{FrontendOptions, TlsFrontend};
use lacquer_vsl::vsc::Vsc;
use lacquer_vsl::vsc::tables::Tls;

use crate::mgt::cli::{Reply, status};
use crate::mgt::listen::{ListenSpec, Proto};
use crate::runtime::state::Shared;
use crate::runtime::tls::TlsState;

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
                ocsp_dir: conf.ocsp_dir.clone(),
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

/// Sets up the frontends of every HTTPS listener in `listen`; `None`
/// when there is none (and no `-A` file).
pub fn build(
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
                ocsp_dir: None,
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
