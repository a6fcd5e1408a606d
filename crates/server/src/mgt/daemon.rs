//! Starting, running and stopping the daemon: working directory, shared
//! memory, stores, cache, the boot VCL, listeners, the management CLI
//! (`-T`, `-M`, `-d`), housekeeping timers and graceful shutdown.
//!
//! Startup order matters: everything that can fail on bad input (flags,
//! VCL, storage specs, ports) is checked before anything is served, and
//! each failure is reported with what to fix.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use lacquer_cache::{Cache, CacheConfig};
use lacquer_storage::{MallocStore, Stevedore};
use lacquer_vcl::exec::{Context, HeaderName, HttpWhich, LogKind, Scratch, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;
use lacquer_vsl::{Tag, Vsl, VslConfig};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixListener};

use crate::client::session::SessInfoArgs;
use crate::mgt::cli::{self, Line, Reply, RequestReader, status};
use crate::mgt::listen::{Endpoint, ListenSpec};
use crate::runtime::counters::{Counters, Main, SESSIONS, SessGuard};
use crate::runtime::params::ParamSet;
use crate::runtime::state::{BoundListener, Shared};
use crate::runtime::vcls::{self, LoadedVcl, Temp, VclRegistry};
use crate::runtime::vxid::VxidAlloc;

/// Where the first VCL comes from.
#[derive(Clone, Debug)]
pub enum BootVcl {
    /// `-f`, once or more: each file is loaded in order, as `boot0`,
    /// `boot1`, ... and the last one as `boot`, which becomes active.
    Files(Vec<PathBuf>),
    /// `-b host[:port]`: a backend with the builtin VCL.
    Backend(String),
    /// Source text (the demo).
    Inline(String),
    /// `-d` without `-f`/`-b`: wait for `vcl.load` on the CLI.
    None,
}

/// Everything the command line decided.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: Vec<ListenSpec>,
    pub vcl: BootVcl,
    pub storage: Vec<String>,
    pub params: ParamSet,
    pub workdir: PathBuf,
    pub identity: Option<String>,
    pub admin: Option<String>,
    pub secret: Option<PathBuf>,
    pub reverse_cli: Option<String>,
    pub debug: bool,
    pub pidfile: Option<PathBuf>,
    /// `-I`: CLI commands run before the cache starts.
    pub cli_file: Option<PathBuf>,
    /// `-A`: the parsed hitch.conf (its frontends are already in `listen`).
    pub tls: Option<lacquer_tls::conf::HitchConf>,
}

/// The default working directory (`-n`): per host, under the temp dir.
pub fn default_workdir() -> PathBuf {
    std::env::temp_dir().join(format!("lacquer-{}", hostname()))
}

/// Resolves `-n NAME`: a path as given, a bare name under the default base.
pub fn workdir_from(n: &str) -> PathBuf {
    if n.contains('/') {
        PathBuf::from(n)
    } else {
        std::env::temp_dir().join(format!("lacquer-{n}"))
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The VCL `-b` stands for: `none` (any case) declares a backend that
/// never answers, an absolute path a Unix-socket backend, anything else
/// `host[:port]`.
pub fn backend_vcl(spec: &str) -> Result<String, String> {
    if spec.eq_ignore_ascii_case("none") {
        return Ok("vcl 4.1;\nbackend default none;\n".to_string());
    }
    if spec.starts_with('/') {
        return Ok(format!(
            "vcl 4.1;\nbackend default {{\n    .path = \"{spec}\";\n}}\n"
        ));
    }
    // An empty host goes to the compiler, which refuses it as varnishd's
    // does (`Backend host '""' could not be resolved`).
    let (host, port) = crate::mgt::listen::split_host_port(spec)?;
    Ok(format!(
        "vcl 4.1;\nbackend default {{\n    .host = \"{host}\";\n    .port = \"{}\";\n}}\n",
        port.unwrap_or("80")
    ))
}

/// Compiles the boot VCL and prints a summary (`-C`).
pub fn check_vcl(vcl: &BootVcl, params: &ParamSet) -> Result<String, String> {
    let opts = vcls::LoadOptions {
        err_unref: params.flag("vcc_err_unref"),
        storages: vec!["s0".into(), "Transient".into()],
        labels: Vec::new(),
        // As varnishd: relative includes are found along vcl_path only,
        // never in the working directory.
        vcl_path: match params.get("vcl_path") {
            crate::runtime::params::Value::Text(t) => t.split(':').map(str::to_string).collect(),
            _ => Vec::new(),
        },
        unsafe_path: params.flag("vcc_unsafe_path"),
        prefer_ipv6: params.flag("prefer_ipv6"),
        test_vmods: params.bit("debug", "vtc_mode"),
    };
    let loaded = match vcl {
        BootVcl::Files(files) => {
            let mut out = String::new();
            for (name, p) in boot_names(files) {
                let v = vcls::compile_path(&name, p, &opts).map_err(|e| vcc_failed(&e.message))?;
                out.push_str(&summary(&v));
            }
            return Ok(out);
        }
        BootVcl::Backend(b) => vcls::compile("boot", "<-b argument>", &backend_vcl(b)?, &opts),
        BootVcl::Inline(t) => vcls::compile("boot", "<inline>", t, &opts),
        BootVcl::None => return Err("-C needs -f or -b".to_string()),
    }
    .map_err(|e| vcc_failed(&e.message))?;
    Ok(summary(&loaded))
}

/// A compiler refusal as varnishd's manager reports it: the compiler's
/// message framed by the lines saying where it came from.
fn vcc_failed(message: &str) -> String {
    format!(
        "Message from VCC-compiler:\n{}\nRunning VCC-compiler failed, exited with 2\nVCL compilation failed",
        message.trim_end()
    )
}

/// The names varnishd gives the `-f` files: `boot0`, `boot1`, ... and
/// `boot` for the last.
fn boot_names(files: &[PathBuf]) -> impl Iterator<Item = (String, &PathBuf)> {
    let last = files.len().saturating_sub(1);
    files.iter().enumerate().map(move |(i, p)| {
        let name = if i == last {
            "boot".to_string()
        } else {
            format!("boot{i}")
        };
        (name, p)
    })
}

/// A short description of a compiled VCL.
pub fn summary(v: &LoadedVcl) -> String {
    let ir = &v.ir;
    // Subroutines the user wrote: built-in methods plus custom ones
    // (the builtin's helper subroutines are left out).
    let subs: Vec<&str> = ir
        .subs
        .iter()
        .map(|s| s.name.as_str())
        .filter(|n| {
            !n.starts_with("vcl_builtin_")
                && !n.starts_with("vcl_req_")
                && !n.starts_with("vcl_beresp_")
        })
        .collect();
    let names = |it: Vec<&str>| {
        if it.is_empty() {
            "-".to_string()
        } else {
            it.join(", ")
        }
    };
    format!(
        "VCL {} compiled.\n  subs:     {}\n  backends: {}\n  probes:   {}\n  acls:     {}\n  imports:  {}\n",
        match ir.version {
            lacquer_vcl::vars::VclVersion::V40 => "4.0",
            _ => "4.1",
        },
        names(subs),
        names(ir.backends.iter().map(|b| b.name.as_str()).collect()),
        names(ir.probes.iter().map(|p| p.name.as_str()).collect()),
        names(ir.acls.iter().map(|a| a.name.as_str()).collect()),
        names(ir.vmods.iter().map(|m| m.name.as_str()).collect()),
    )
}

/// A task for `vcl_init` / `vcl_fini`: no request, only vmod objects,
/// `server.*` and `now`.
struct InitTask {
    sh: Arc<Shared>,
    vcl: Arc<LoadedVcl>,
    privs: lacquer_vcl::exec::privs::TaskPrivs,
    sub: BuiltinSub,
    now: f64,
    errors: Vec<String>,
}

impl InitTask {
    fn new(sh: &Arc<Shared>, vcl: &Arc<LoadedVcl>, sub: BuiltinSub) -> Self {
        InitTask {
            sh: sh.clone(),
            vcl: vcl.clone(),
            privs: Default::default(),
            sub,
            now: lacquer_http::date::now(),
            errors: Vec::new(),
        }
    }
}

impl crate::runtime::task::TaskSub for InitTask {
    fn set_sub(&mut self, m: BuiltinSub) {
        self.sub = m;
    }
}

fn nope(what: &str) -> String {
    format!("{what} is not available in vcl_init/vcl_fini")
}

impl Context for InitTask {
    fn header(&self, _: HttpWhich, _: &HeaderName) -> Option<&[u8]> {
        None
    }
    fn set_header(&mut self, _: HttpWhich, _: &HeaderName, _: &[u8]) -> Result<(), String> {
        Ok(())
    }
    fn unset_header(&mut self, _: HttpWhich, _: &HeaderName) {}
    fn get_str(&self, var: VarId) -> Result<Option<&[u8]>, String> {
        match var {
            VarId::ServerHostname => Ok(Some(self.sh.hostname.as_bytes())),
            VarId::ServerIdentity => Ok(Some(self.sh.identity.as_bytes())),
            _ => Err(nope("this variable")),
        }
    }
    fn set_str(&mut self, _: VarId, _: &[u8]) -> Result<(), String> {
        Err(nope("setting variables"))
    }
    fn get(&self, var: VarId) -> Result<Value, String> {
        match var {
            VarId::Now => Ok(Value::Time(self.now)),
            other => match self.get_str(other)? {
                Some(s) => Ok(Value::Str(Bytes::copy_from_slice(s))),
                None => Ok(Value::Null),
            },
        }
    }
    fn set(&mut self, _: VarId, _: Value) -> Result<(), String> {
        Err(nope("setting variables"))
    }
    fn unset(&mut self, _: VarId) -> Result<(), String> {
        Err(nope("unset"))
    }
    // vcc lets vcl_init and vcl_fini read `storage.<name>.*` too.
    fn storage_var(&self, var: VarId, storage: &str) -> Result<Value, String> {
        crate::runtime::task::storage_value(&self.sh, var, storage)
    }
    fn hash_data(&mut self, _: Option<&[u8]>) {}
    fn synthetic(&mut self, _: &[u8]) {}
    fn ban(&mut self, spec: &[u8]) -> Result<(), String> {
        let s = std::str::from_utf8(spec).map_err(|_| "ban: not UTF-8".to_string())?;
        self.sh.add_ban(s, self.now)
    }
    fn log(&mut self, kind: LogKind, msg: &[u8]) {
        let text = String::from_utf8_lossy(msg).into_owned();
        if kind == LogKind::Error {
            // vcl_init's failures go to the CLI answer, not the log.
            if self.sub == BuiltinSub::Init {
                self.errors.push(text);
                return;
            }
            self.errors.push(text.clone());
        }
        self.sh.vsl.log_immediate(
            crate::runtime::task::log_kind_tag(kind),
            lacquer_vsl::Vxid::plain(0),
            format_args!("{text}"),
        );
    }
    fn log_raw(&mut self, tag: &str, vxid: u32, backend: bool, msg: &[u8]) -> Result<(), String> {
        crate::runtime::task::log_raw(&self.sh.vsl, tag, vxid, backend, msg)
    }
    fn resolve_backend(&mut self, backend: &Value) -> Result<Value, String> {
        let vcl = self.vcl.clone();
        vcl.resolve_value(backend, self)
    }
    fn now(&self) -> f64 {
        self.now
    }
    fn privs(&mut self) -> &mut lacquer_vcl::exec::privs::TaskPrivs {
        &mut self.privs
    }
    fn top_privs(&mut self) -> Option<lacquer_vcl::exec::privs::SharedPrivs> {
        None
    }
    fn sub(&self) -> BuiltinSub {
        self.sub
    }
    fn headers(&self, _: HttpWhich) -> Vec<(&[u8], &[u8])> {
        Vec::new()
    }
    fn add_header(&mut self, _: HttpWhich, _: &HeaderName, _: &[u8]) -> Result<(), String> {
        Err(nope("headers"))
    }
    fn replace_headers(&mut self, _: HttpWhich, _: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
        Err(nope("headers"))
    }
    fn rollback(&mut self, _: HttpWhich) -> Result<(), String> {
        Err(nope("rollback"))
    }
    fn cache_req_body(&mut self, _: u64) -> Result<bool, String> {
        Err(nope("the request body"))
    }
    fn late_100_continue(&mut self, _: bool) {}
    fn set_ip_tos(&mut self, _: i64) -> Result<(), String> {
        Err(nope("set_ip_tos"))
    }
    fn timestamp(&mut self, _: &[u8]) {}
    fn purge(&mut self, _: f64, _: f64, _: f64) -> Result<i64, String> {
        Err(nope("purge"))
    }
    fn digest(&self) -> Option<[u8; 32]> {
        None
    }
    fn proxy_tlv(&self, _: u8) -> Option<&[u8]> {
        None
    }
    /// `vcl_init`/`vcl_fini` run without a task workspace: nothing they
    /// build is charged.
    fn workspace(
        &mut self,
        _: lacquer_vcl::exec::WsKind,
    ) -> Option<&mut dyn lacquer_vcl::exec::Workspace> {
        None
    }

    fn peer_cred(&self) -> Option<(u32, u32)> {
        None
    }

    fn cached_req_body(&self) -> Option<&[u8]> {
        None
    }

    fn tcp_set(&mut self, _op: lacquer_vcl::exec::TcpOp<'_>) -> Result<(), String> {
        Err("vmod tcp works on client connections only".to_string())
    }

    fn tcp_info(&self) -> Result<lacquer_vcl::exec::TcpInfo, String> {
        Err(nope("tcp.dump_info"))
    }
}

/// Runs `vcl_init` of a freshly compiled VCL; an error message if it
/// failed, after `vcl_fini` has run to undo what init did and the vmods
/// heard the discard event, as varnishd.
pub fn init_vcl(sh: &Arc<Shared>, vcl: &Arc<LoadedVcl>) -> Result<(), String> {
    let failed = |msg: String| {
        format!(
            "VCL \"{}\" Failed initialization\nMessage:\n\t{msg}",
            vcl.name
        )
    };
    vcl.host.attach(sh);
    if let Err(e) = vcl.event(lacquer_vmods::VclEvent::Load, sh) {
        // The vmods' state goes with the VCL, as after a discard.
        let _ = vcl.event(lacquer_vmods::VclEvent::Discard, sh);
        return Err(failed(e));
    }
    let mut t = InitTask::new(sh, vcl, BuiltinSub::Init);
    let action = run_waiting(vcl, BuiltinSub::Init, &mut t);
    // The task's end may fail it too.
    let at_end = end_init_privs(&mut t);
    let ok = matches!(action, lacquer_vcl::exec::Action::Ok) && at_end.is_empty();
    t.errors.extend(at_end);
    match ok {
        true => Ok(()),
        false => {
            let first = t.errors.into_iter().next();
            unload_failed(sh, vcl);
            Err(format!(
                "VCL \"{}\" Failed initialization{}",
                vcl.name,
                first
                    .map(|e| format!("\nMessage:\n\t{e}"))
                    .unwrap_or_default()
            ))
        }
    }
}

/// Runs `vcl_init` or `vcl_fini`, where VCL may wait for I/O (a
/// `curl.get()` fetching configuration, as libvmod-curl users do): this
/// is the management path, not a request's task, so the thread blocks on
/// each wait while the runtime's workers do the I/O. Blocking needs a
/// multi-threaded runtime (lacquerd's); elsewhere (no runtime, or a
/// single-threaded one, where the thread is the only one that could
/// drive the I/O) the run cannot wait and such a call fails with the
/// reason.
fn run_waiting(vcl: &LoadedVcl, m: BuiltinSub, t: &mut InitTask) -> lacquer_vcl::exec::Action {
    let mut scratch = Scratch::default();
    match tokio::runtime::Handle::try_current() {
        Ok(rt) if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| vcl.run_blocking(m, t, &mut scratch, &rt))
        }
        _ => vcl.run(m, t, &mut scratch),
    }
}

/// Ends the vmod state of `vcl_init`/`vcl_fini`: fini hooks log outside
/// any transaction, as the subroutine's own records; the end checks'
/// errors are returned.
fn end_init_privs(t: &mut InitTask) -> Vec<String> {
    let mut privs = std::mem::take(&mut t.privs);
    privs.finish(&mut |kind, msg| t.log(kind, msg))
}

/// A VCL that failed to load after `vcl_init` ran goes as a discarded
/// one does: `vcl_fini` undoes what init did, then its vmods hear the
/// discard event (their per-VCL state ends), as varnishd's.
pub fn unload_failed(sh: &Arc<Shared>, vcl: &Arc<LoadedVcl>) {
    fini_vcl(sh, vcl);
    // The VCL goes whatever its vmods think of it.
    let _ = vcl.event(lacquer_vmods::VclEvent::Discard, sh);
}

/// Runs `vcl_fini` of a VCL about to be freed. Failing there changes
/// nothing (the VCL goes anyway); varnishd logs that it had no effect.
pub fn fini_vcl(sh: &Arc<Shared>, vcl: &Arc<LoadedVcl>) {
    let mut t = InitTask::new(sh, vcl, BuiltinSub::Fini);
    let action = run_waiting(vcl, BuiltinSub::Fini, &mut t);
    let at_end = end_init_privs(&mut t);
    for e in &at_end {
        t.log(LogKind::Error, e.as_bytes());
    }
    if !matches!(action, lacquer_vcl::exec::Action::Ok) || !at_end.is_empty() {
        sh.vsl.log_immediate(
            Tag::VCL_Error,
            lacquer_vsl::Vxid::plain(0),
            format_args!("VRT_fail() from vcl_fini{{}} has no effect"),
        );
    }
}

/// Writes a file readable only by its owner.
fn write_private(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)
}

/// A bound listener. A TCP socket listens only while the cache runs
/// ([`spawn_acceptor`]).
enum Bound {
    Tcp(tokio::net::TcpSocket, Named),
    Unix(UnixListener, Named, PathBuf),
}

/// What a listener tells its sessions about itself.
#[derive(Clone)]
struct Named {
    name: Arc<str>,
    /// The address as the operator wrote it.
    written: Arc<str>,
    /// `PROXY` listener: sessions start with a PROXY protocol header.
    proxy: bool,
    /// A TLS listener's frontend.
    tls: Option<Arc<lacquer_tls::server::TlsFrontend>>,
}

fn bind_all(
    specs: &[ListenSpec],
    tls: Option<&crate::runtime::tls::TlsState>,
) -> Result<Vec<Bound>, String> {
    let mut out = Vec::new();
    for spec in specs {
        for ep in &spec.endpoints {
            let named = Named {
                name: Arc::from(spec.name.as_str()),
                written: Arc::from(spec.written.as_str()),
                proxy: spec.proto == crate::mgt::listen::Proto::Proxy,
                tls: tls.and_then(|t| t.frontend(&spec.name)),
            };
            match ep {
                Endpoint::Tcp(addr) => {
                    let sock = match crate::runtime::state::ListenSlot::bind(*addr) {
                        Ok(s) => s,
                        // A wildcard spec gives both v4 and v6; a host
                        // without IPv6 only loses that half.
                        Err(_) if spec.endpoints.len() > 1 && addr.is_ipv6() => continue,
                        Err(e) => {
                            return Err(format!(
                                "Could not get socket {addr}: {e} (is another process listening there?)"
                            ));
                        }
                    };
                    // local.endpoint names the address really bound (the
                    // port the kernel chose for `:0`).
                    let mut named = named;
                    if let Ok(a) = sock.local_addr() {
                        named.written = Arc::from(a.to_string().as_str());
                    }
                    out.push(Bound::Tcp(sock, named));
                }
                Endpoint::Unix {
                    path,
                    mode,
                    uid,
                    gid,
                } => {
                    let _ = std::fs::remove_file(path);
                    let l = UnixListener::bind(path).map_err(|e| {
                        format!("Could not bind Unix socket {}: {e}", path.display())
                    })?;
                    if uid.is_some() || gid.is_some() {
                        std::os::unix::fs::chown(path, *uid, *gid).map_err(|e| {
                            format!("Could not change the owner of {}: {e}", path.display())
                        })?;
                    }
                    if let Some(m) = mode {
                        use std::os::unix::fs::PermissionsExt;
                        std::fs::set_permissions(path, std::fs::Permissions::from_mode(*m))
                            .map_err(|e| format!("Could not chmod {}: {e}", path.display()))?;
                    }
                    out.push(Bound::Unix(l, named, path.clone()));
                }
            }
        }
    }
    Ok(out)
}

/// Starts a session on an accepted TCP connection.
fn serve_tcp(sh: &Arc<Shared>, named: &Named, s: tokio::net::TcpStream, peer: SocketAddr) {
    let _ = s.set_nodelay(true);
    let local = s.local_addr().unwrap_or(peer);
    let (s, ctl) = crate::client::sock::client_stream(s);
    let args = SessInfoArgs::new(
        peer,
        local,
        named.name.clone(),
        named.written.clone(),
        named.proxy,
    );
    let sh = sh.clone();
    let tls = named.tls.clone().zip(sh.tls.get().cloned());
    tokio::spawn(async move {
        let _g = SessGuard::new();
        match tls {
            Some((fe, state)) => {
                crate::client::tls::serve(sh, state, fe, s, args, ctl).await;
            }
            None => crate::client::session::serve(sh, s, args, Some(ctl)).await,
        }
    });
}

fn printable(b: &Bound) -> BoundListener {
    match b {
        Bound::Tcp(l, Named { name, .. }) => {
            let a = l
                .local_addr()
                .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
            BoundListener {
                name: name.to_string(),
                printable: format!("{} {}", a.ip(), a.port()),
                unix: false,
            }
        }
        Bound::Unix(_, Named { name, .. }, path) => BoundListener {
            name: name.to_string(),
            printable: format!("{} -", path.display()),
            unix: true,
        },
    }
}

/// An `accept()` failed: counted by cause (`MAIN.sess_fail_*`) and logged
/// (`SessError`) as varnishd does, then a short pause so that a resource
/// shortage (out of file descriptors) does not spin.
async fn accept_failed(
    sh: &Shared,
    name: &str,
    local: Option<SocketAddr>,
    fd: i32,
    e: &std::io::Error,
) {
    use nix::errno::Errno;
    let errno = e.raw_os_error().unwrap_or(0);
    let by_cause = match Errno::from_raw(errno) {
        Errno::ECONNABORTED => Main::sess_fail_econnaborted,
        Errno::EINTR => Main::sess_fail_eintr,
        Errno::EMFILE => Main::sess_fail_emfile,
        Errno::EBADF => Main::sess_fail_ebadf,
        Errno::ENOBUFS | Errno::ENOMEM => Main::sess_fail_enomem,
        _ => Main::sess_fail_other,
    };
    sh.counters.inc(by_cause);
    sh.counters.inc(Main::sess_fail);
    // Unix sockets report 0.0.0.0 0, as varnishd.
    let local = local.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let message = e.to_string();
    let message = message.split(" (os error").next().unwrap_or_default();
    sh.vsl.log_immediate(
        lacquer_vsl::Tag::SessError,
        lacquer_vsl::Vxid::plain(0),
        format_args!(
            "{name} {} {} {fd} {errno} \"{message}\"",
            local.ip(),
            local.port()
        ),
    );
    if by_cause != Main::sess_fail_econnaborted && by_cause != Main::sess_fail_eintr {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Serves a bound listener. A TCP socket listens while the cache runs and
/// is closed when it stops (`Shared::set_running`), as varnishd's manager
/// reopens its sockets when the child goes (`MAC_reopen_sockets`):
/// connections are refused, not accepted and dropped, before `start` and
/// after `stop`.
fn spawn_acceptor(sh: Arc<Shared>, b: Bound) {
    match b {
        Bound::Tcp(sock, named) => {
            let slot = match crate::runtime::state::ListenSlot::new(sock) {
                Ok(s) => Arc::new(s),
                Err(e) => {
                    eprintln!("Could not use listen socket {}: {e}", named.written);
                    return;
                }
            };
            let addr = slot.addr;
            // VCL's HTTP calls to this listener are served in process.
            if let (None, false) = (&named.tls, named.proxy) {
                crate::client::loopback::register(
                    &sh,
                    addr,
                    named.name.clone(),
                    named.written.clone(),
                );
            }
            sh.tcp_listeners
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(slot.clone());
            tokio::spawn(async move {
                loop {
                    sh.until_running(true).await;
                    let Some(l) = slot.listener() else {
                        // It could not listen (see `set_running`): wait
                        // for the next start.
                        sh.until_running(false).await;
                        continue;
                    };
                    loop {
                        let accepted = tokio::select! {
                            r = l.accept() => r,
                            () = sh.until_running(false) => break,
                        };
                        let (s, peer) = match accepted {
                            Ok(x) => x,
                            Err(e) => {
                                let fd = std::os::fd::AsRawFd::as_raw_fd(&*l);
                                accept_failed(&sh, &named.name, Some(addr), fd, &e).await;
                                continue;
                            }
                        };
                        serve_tcp(&sh, &named, s, peer);
                    }
                    // Stopped: the last handle goes, the socket closes and
                    // connections are refused until the next start.
                    drop(l);
                }
            });
        }
        Bound::Unix(l, named, _) => {
            tokio::spawn(async move {
                loop {
                    // A Unix socket keeps listening while the cache is
                    // stopped: connections wait in its backlog (see
                    // DEVIATIONS.md).
                    sh.until_running(true).await;
                    let (s, _) = match l.accept().await {
                        Ok(x) => x,
                        Err(e) => {
                            let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
                            accept_failed(&sh, &named.name, None, fd, &e).await;
                            continue;
                        }
                    };
                    // Unix-socket sessions report 0.0.0.0 addresses, as
                    // varnishd (a PROXY header may still name others).
                    let zero = SocketAddr::from(([0, 0, 0, 0], 0));
                    let args = SessInfoArgs::new(
                        zero,
                        zero,
                        named.name.clone(),
                        named.written.clone(),
                        named.proxy,
                    );
                    let sh = sh.clone();
                    // VCL's handle on the socket (debug.sndbuf()) works on
                    // a duplicate of the descriptor.
                    let ctl = std::os::fd::AsFd::as_fd(&s)
                        .try_clone_to_owned()
                        .ok()
                        .map(crate::client::sock::unix_ctl);
                    tokio::spawn(async move {
                        let _g = SessGuard::new();
                        crate::client::session::serve(sh, s, args, ctl).await;
                    });
                }
            });
        }
    }
}

/// Serves one management CLI connection (`-T`, `-M`, or `-d` on stdio).
pub async fn serve_cli<R, W>(sh: Arc<Shared>, r: R, mut w: W, secret: Option<Vec<u8>>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // cli_limit is read for each reply: a param.set takes effect at once.
    let limit = || sh.params().bytes("cli_limit") as usize;
    let mut authed = secret.is_none();
    let challenge = cli::challenge();
    let first = if authed {
        Reply::ok(crate::mgt::commands::banner(sh.is_running()))
    } else {
        Reply::err(status::AUTH, cli::auth_banner(&challenge))
    };
    if w.write_all(&first.encode(limit())).await.is_err() {
        return;
    }
    let mut lines = BufReader::new(r).lines();
    let mut reader = RequestReader::default();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = match reader.line(&line) {
            Line::More | Line::Empty => continue,
            Line::Error(e) => Reply::err(
                status::SYNTAX,
                format!("{}Syntax Error: {e}\n", cli::UNKNOWN_REQUEST),
            ),
            Line::Request(words) if !authed => {
                // Before authentication only help, ping, auth and quit
                // exist, and any answer but 200 ends the connection
                // (varnishd's "very intolerant" unauthenticated mode).
                match words[0].as_str() {
                    "help" | "ping" | "auth" | "quit" => {
                        match cli::check_args(&words, sh.is_running()) {
                            Err(r) => r,
                            Ok(_) if words[0] == "auth" => {
                                let s = secret.as_deref().unwrap_or_default();
                                if words[1] == lacquer_cli::auth_response(&challenge, s) {
                                    authed = true;
                                    Reply::ok(crate::mgt::commands::banner(sh.is_running()))
                                } else {
                                    Reply::err(status::CLOSE, "")
                                }
                            }
                            Ok(_) if words[0] == "quit" => {
                                Reply::err(status::CLOSE, "Closing CLI connection")
                            }
                            Ok(_) => crate::mgt::commands::dispatch(&sh, &words),
                        }
                    }
                    _ => Reply::err(status::UNKNOWN, cli::UNKNOWN_REQUEST),
                }
            }
            Line::Request(words) => {
                let words = cli::as_child_reads(words, sh.is_running());
                if words[0] == "quit" {
                    let _ = w
                        .write_all(
                            &Reply::err(status::CLOSE, "Closing CLI connection").encode(limit()),
                        )
                        .await;
                    return;
                }
                match cli::check_args(&words, sh.is_running()) {
                    Err(r) => r,
                    // Once authenticated, auth checks again: a wrong
                    // answer closes the connection, and without -S there
                    // is nothing to check against.
                    Ok(_) if words[0] == "auth" => match &secret {
                        None => Reply::err(status::CANT, "Secret file not configured\n"),
                        Some(s) if words[1] == lacquer_cli::auth_response(&challenge, s) => {
                            Reply::ok(crate::mgt::commands::banner(sh.is_running()))
                        }
                        Some(_) => Reply::err(status::CLOSE, ""),
                    },
                    Ok(_) => crate::mgt::commands::dispatch(&sh, &words),
                }
            }
        };
        if w.write_all(&reply.encode(limit())).await.is_err() || w.flush().await.is_err() {
            return;
        }
        if reply.status == status::CLOSE || (!authed && reply.status != status::OK) {
            return;
        }
    }
}

/// Logs what the cache's expiry and ban lurker did, outside any
/// transaction (vxid 0) as varnishd's expiry thread and lurker do:
/// `ExpKill` records (masked unless `vsl_mask` has `+ExpKill`) and `ExpBan`.
fn log_cache_event(vsl: &lacquer_vsl::Vsl, e: lacquer_cache::CacheEvent) {
    use lacquer_cache::CacheEvent as E;
    let zero = lacquer_vsl::Vxid::plain(0);
    match e {
        E::ExpiryArmed {
            when, id, flags, ..
        } => vsl.log_immediate(
            lacquer_vsl::Tag::ExpKill,
            zero,
            format_args!("EXP_When p=0x{id:x} e={when:.6} f=0x{flags:x}"),
        ),
        E::ExpiryCheck { id, left, flags } => vsl.log_immediate(
            lacquer_vsl::Tag::ExpKill,
            zero,
            format_args!("EXP_expire p=0x{id:x} e={left:.6} f=0x{flags:x}"),
        ),
        E::Expired { vxid, ttl_left } => vsl.log_immediate(
            lacquer_vsl::Tag::ExpKill,
            zero,
            format_args!("EXP_Expired x={vxid} t={ttl_left:.0}"),
        ),
        E::LurkerBanned { vxid } => vsl.log_immediate(
            lacquer_vsl::Tag::ExpBan,
            zero,
            format_args!("{vxid} killed for lurker"),
        ),
        // varnishd logs an eviction in the transaction of the fetch that
        // needed the room, which the event does not carry.
        E::Nuked { .. } => {}
    }
}

/// `-I`: runs the commands of `path` as varnishd does before its cache
/// process starts, showing each (`> command`) and its reply framed as on
/// the CLI on standard error, between `BEGIN` and `END of -I file
/// processing`. A command that fails ends the start, unless its line
/// starts with `-`.
fn run_cli_file(sh: &Arc<Shared>, path: &std::path::Path) -> Result<(), String> {
    use std::io::Write;
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("Can't open {}: {e}", path.display()))?;
    let limit = sh.params().bytes("cli_limit") as usize;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "BEGIN of -I file processing");
    let _ = err.write_all(&Reply::ok(crate::mgt::commands::banner(sh.is_running())).encode(limit));
    let mut reader = RequestReader::default();
    let mut first: Option<&str> = None;
    for line in text.lines() {
        let start = *first.get_or_insert(line);
        let reply = match reader.line(line) {
            Line::More => continue,
            Line::Empty => {
                first = None;
                continue;
            }
            Line::Error(e) => Reply::err(
                status::SYNTAX,
                format!("{}Syntax Error: {e}\n", cli::UNKNOWN_REQUEST),
            ),
            Line::Request(words) => match cli::check_args(&words, sh.is_running()) {
                Ok(_) => crate::mgt::commands::dispatch(sh, &words),
                Err(r) => r,
            },
        };
        first = None;
        let _ = writeln!(err, "> {start}");
        if reply.status != status::OK && !start.trim_start().starts_with('-') {
            return Err(format!(
                "-I file CLI command failed ({})\n{}",
                reply.status, reply.body
            ));
        }
        let _ = err.write_all(&reply.encode(limit));
    }
    let _ = writeln!(err, "END of -I file processing");
    Ok(())
}

/// A started daemon.
pub struct Running {
    pub shared: Arc<Shared>,
    cli_done: Option<tokio::task::JoinHandle<()>>,
    /// The locked pid files, held for as long as the daemon runs.
    _pidfiles: Vec<std::fs::File>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").finish_non_exhaustive()
    }
}

impl Running {
    /// The address of the first TCP listener (tests use `127.0.0.1:0`).
    pub fn first_addr(&self) -> Option<SocketAddr> {
        let l = self
            .shared
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        l.iter().find_map(|b| {
            let (ip, port) = b.printable.split_once(' ')?;
            format!("{ip}:{port}")
                .parse()
                .ok()
                .or_else(|| format!("[{ip}]:{port}").parse().ok())
        })
    }
}

/// Builds the shared state and starts serving; returns when the daemon
/// should exit.
/// Serves until told to stop; the exit status bits say whether the cache
/// process panicked meanwhile (`0x40`, as varnishd's manager).
pub async fn run(cfg: Config) -> Result<u8, String> {
    let r = start(cfg).await?;
    // Run until a signal, or until the reverse/debug CLI goes away.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let cli_done = r.cli_done;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match cli_done { Some(h) => { let _ = h.await; } None => std::future::pending::<()>().await } } => {}
    }
    // Graceful shutdown: stop accepting, let requests in flight finish.
    r.shared.set_running(false);
    let deadline = Instant::now() + Duration::from_secs(5);
    while SESSIONS.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Persistent stores write their index snapshot, so that the next start
    // reads it instead of its logs or a scan of the store file.
    let stores = r.shared.stores.clone();
    let _ = tokio::task::spawn_blocking(move || {
        for s in stores.iter().filter_map(|s| s.disk()) {
            if let Err(e) = s.checkpoint() {
                eprintln!(
                    "Storage {}: no index snapshot written at shutdown ({e}); \
                     the next start reads the older one and its logs, or scans",
                    s.name()
                );
            }
        }
    })
    .await;
    Ok(r.shared.mgt.exit_bits())
}

/// Builds the shared state and starts serving in the background.
pub async fn start(cfg: Config) -> Result<Running, String> {
    std::fs::create_dir_all(&cfg.workdir).map_err(|e| {
        format!(
            "Cannot create working directory {}: {e} (use -n to choose another)",
            cfg.workdir.display()
        )
    })?;
    let mut pidfiles = Vec::new();
    if let Some(p) = &cfg.pidfile {
        pidfiles.push(lock_pidfile(p)?);
    }
    pidfiles.push(lock_pidfile(&cfg.workdir.join("_.pid"))?);
    let params = cfg.params.clone();
    let vsl_cfg = VslConfig {
        space: params.bytes("vsl_space") as usize,
        reclen: params.bytes("vsl_reclen") as usize,
        buffer: params.bytes("vsl_buffer") as usize,
        ..Default::default()
    };
    // The cache's directory first: creating it clears what a previous run
    // left, the log and the counters included.
    let child_dir = cfg.workdir.join(lacquer_vsl::vsm::CHILD_DIR);
    let vsm_child = Arc::new(Mutex::new(
        lacquer_vsl::vsm::VsmDir::create(&child_dir)
            .map_err(|e| format!("Cannot create {}: {e}", child_dir.display()))?,
    ));
    let vsl_file = lacquer_vsl::vsl_path(&cfg.workdir);
    let vsl = Vsl::create(&vsl_file, &vsl_cfg)
        .map_err(|e| format!("Cannot create the shared-memory log: {e}"))?;
    let vsl_len = std::fs::metadata(&vsl_file).map_or(0, |m| m.len());
    vsm_child
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .publish_part(lacquer_vsl::ring::VSL_FILE, 0, vsl_len, "Log", "Log")
        .map_err(|e| format!("Cannot publish the log in {}: {e}", child_dir.display()))?;
    let vsc = lacquer_vsl::vsc::Vsc::create(
        &lacquer_vsl::vsc::vsc_path(&cfg.workdir),
        &Default::default(),
    )
    .map_err(|e| format!("Cannot create the counters segment: {e}"))?;
    // The counters keep the directory: its index follows their sections.
    vsc.publish_in(vsm_child)
        .map_err(|e| format!("Cannot publish the counters: {e}"))?;
    // The manager's section comes first, as varnishd's (its process maps
    // the segment before the child adds `MAIN`): tools list in this order.
    let mgt_section = vsc
        .add_section(&lacquer_vsl::vsc::tables::MGT, "MGT")
        .map_err(|e| e.to_string())?;
    let counters = Arc::new(Counters::new(&vsc).map_err(|e| e.to_string())?);
    let specs = lacquer_storage::parse_storage_args(&cfg.storage).map_err(|e| e.to_string())?;
    let mut stores: Vec<Arc<dyn Stevedore>> = Vec::new();
    for s in &specs {
        stores.push(s.build().map_err(|e| e.to_string())?);
    }
    if specs.is_empty() {
        stores.push(Arc::new(MallocStore::new("s0", Some(100 << 20))));
    }
    if !stores.iter().any(|s| s.name() == "Transient") {
        stores.push(Arc::new(MallocStore::new("Transient", None)));
    }
    let cache = Arc::new(Cache::new(
        CacheConfig {
            nuke_limit: params.uint("nuke_limit") as u32,
            lru_interval: params.duration("lru_interval"),
            ..Default::default()
        },
        stores.clone(),
        lacquer_http::date::now(),
    ));
    let host = hostname();
    let sh = Arc::new(Shared {
        params: ArcSwap::from_pointee(params.clone()),
        vxid: VxidAlloc::default(),
        vsl,
        counters,
        cache,
        stores,
        active: ArcSwap::from_pointee(None),
        vcls: std::sync::Mutex::new(VclRegistry::default()),
        identity: cfg.identity.clone().unwrap_or_else(|| host.clone()),
        hostname: host,
        started: Instant::now(),
        listeners: Default::default(),
        running: AtomicBool::new(false),
        running_changed: Default::default(),
        tcp_listeners: Default::default(),
        fetch_frag: std::sync::atomic::AtomicUsize::new(0),
        mgt: Default::default(),
        workdir: cfg.workdir.clone(),
        stats: std::sync::OnceLock::new(),
        tls: std::sync::OnceLock::new(),
    });
    sh.apply_params(&params);
    let exp_vsl = sh.vsl.clone();
    sh.cache
        .set_event_sink(Arc::new(move |e| log_cache_event(&exp_vsl, e)));
    let sections = Arc::new(
        crate::runtime::stats::Sections::new(&vsc, &sh, mgt_section).map_err(|e| e.to_string())?,
    );
    let _ = sh.stats.set(sections.clone());
    if let Some(t) = crate::mgt::tls::build(cfg.tls.as_ref(), &cfg.listen, &vsc, 3600)? {
        crate::mgt::tls::spawn_sighup(sh.clone(), t.clone());
        let _ = sh.tls.set(t);
    }
    let bound = bind_all(&cfg.listen, sh.tls.get().map(|t| &**t))?;
    // The boot VCLs: (name, file name, source).
    let boot: Vec<(String, String, String)> = match &cfg.vcl {
        BootVcl::Files(files) => boot_names(files)
            .map(|(name, p)| {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("Cannot read VCL file {}: {e}", p.display()))?;
                Ok((name, p.display().to_string(), text))
            })
            .collect::<Result<_, String>>()?,
        BootVcl::Backend(b) => vec![("boot".into(), "<-b argument>".into(), backend_vcl(b)?)],
        BootVcl::Inline(t) => vec![("boot".into(), "<demo>".into(), t.clone())],
        BootVcl::None => Vec::new(),
    };
    *sh.listeners.lock().unwrap_or_else(|e| e.into_inner()) = bound.iter().map(printable).collect();
    for (name, file, text) in boot {
        let opts = crate::mgt::commands::load_options(&sh);
        let v = Arc::new(vcls::compile(&name, &file, &text, &opts).map_err(|e| e.message)?);
        if let Some(refusal) = crate::mgt::commands::version_refusal(&sh, &v) {
            return Err(refusal);
        }
        // Without -d the cache starts at once; with it, at `start`.
        if !cfg.debug {
            crate::mgt::commands::child_load(&sh, &v, Temp::Auto)?;
        }
        let mut reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
        reg.insert(v.clone(), Temp::Auto);
        // The last one loaded is the active one.
        reg.active = Some(name);
        drop(reg);
        sh.active.store(Arc::new(Some(v)));
    }
    // Listeners (bound before the boot VCL compiles, as varnishd binds
    // them while reading its arguments; they accept once it is loaded).
    for b in bound {
        spawn_acceptor(sh.clone(), b);
    }
    // As varnishd: without -S a random secret is made in the working
    // directory, and -T/-M connections must answer its challenge.
    let secret_path = match &cfg.secret {
        Some(p) if p.as_os_str() == "none" => None,
        Some(p) => Some(p.clone()),
        None => {
            let p = cfg.workdir.join("_.secret");
            let secret = format!("{}{}\n", cli::challenge(), cli::challenge());
            write_private(&p, secret.as_bytes()).map_err(|e| {
                format!(
                    "Cannot create secret-file in {} ({e})",
                    cfg.workdir.display()
                )
            })?;
            Some(p)
        }
    };
    let secret = match &secret_path {
        Some(p) => Some(
            std::fs::read(p)
                .map_err(|e| format!("Cannot read secret file {}: {e}", p.display()))?,
        ),
        None => None,
    };
    let vsm_dir = cfg.workdir.join(lacquer_vsl::vsm::MGT_DIR);
    let mut vsm = lacquer_vsl::vsm::VsmDir::create(&vsm_dir)
        .map_err(|e| format!("Cannot create {}: {e}", vsm_dir.display()))?;
    // Management CLI.
    if let Some(addr) = &cfg.admin {
        let a = addr.replace(' ', ":");
        let l = TcpListener::bind(&a)
            .await
            .map_err(|e| format!("Could not open management port -T {addr}: {e}"))?;
        // As varnishd's `Arg` segments: where `lacquer adm -n` finds us.
        let bound = l.local_addr().map(|a| a.to_string()).unwrap_or(a.clone());
        publish_arg(&mut vsm, "-T", &bound)?;
        if let Some(p) = &secret_path {
            publish_arg(&mut vsm, "-S", &p.display().to_string())?;
        }
        let sh2 = sh.clone();
        let secret = secret.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let (r, w) = s.into_split();
                tokio::spawn(serve_cli(sh2.clone(), r, w, secret.clone()));
            }
        });
    }
    sh.mgt.set_vsm(vsm);
    let mut cli_done: Option<tokio::task::JoinHandle<()>> = None;
    if let Some(addr) = &cfg.reverse_cli {
        let a = addr.replace(' ', ":");
        let s = tokio::net::TcpStream::connect(&a)
            .await
            .map_err(|e| format!("Could not connect to -M {addr}: {e}"))?;
        let (r, w) = s.into_split();
        cli_done = Some(tokio::spawn(serve_cli(sh.clone(), r, w, secret.clone())));
    } else if cfg.debug {
        cli_done = Some(tokio::spawn(serve_cli(
            sh.clone(),
            tokio::io::stdin(),
            tokio::io::stdout(),
            None,
        )));
    }
    if let Some(path) = &cfg.cli_file {
        run_cli_file(&sh, path)?;
    }
    if !cfg.debug && sh.active_vcl().is_some() {
        sh.mgt.child_started(&sh.params().dump())?;
        sh.mgt.child_start.fetch_add(1, Ordering::Relaxed);
        sh.set_running(true);
    }
    // Housekeeping.
    let hk = sh.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut last_ping = std::time::Instant::now();
        let mut memory_target = 0;
        loop {
            tick.tick().await;
            let now = lacquer_http::date::now();
            let ping = hk.params().uint("ping_interval");
            if ping > 0 && last_ping.elapsed() >= Duration::from_secs(ping) {
                // varnishd's manager pings its child this often, and the
                // log shows it; operators and tests look for it there.
                last_ping = std::time::Instant::now();
                crate::mgt::commands::child_ping(&hk);
            }
            hk.cache.expire_due(now);
            let p = hk.params();
            if p.duration("ban_lurker_sleep") > 0.0 {
                hk.cache.ban_lurker_step(
                    now,
                    p.duration("ban_lurker_age"),
                    p.uint("ban_lurker_batch") as usize,
                    p.uint("ban_cutoff") as usize,
                );
            }
            let target = p.uint("memory_target");
            if target != memory_target {
                memory_target = target;
                // MSE's governor: the memory tier follows the target.
                if let Some(ram) = lacquer_storage::spec::total_ram().filter(|_| target > 0) {
                    for s in hk.cache.stores() {
                        if s.stevedore().chosen_only() {
                            let size = ram / 100 * target;
                            let nuked = hk.cache.resize_store(s.name(), size);
                            eprintln!(
                                "memory_target {target}%: memory tier {} resized to {size} bytes ({} objects nuked)",
                                s.name(),
                                nuked.unwrap_or(0)
                            );
                        }
                    }
                }
            }
            crate::mgt::commands::cool_idle_vcls(&hk);
            // Every tick: varnishd's waiter closes an idle backend
            // connection at backend_idle_timeout, not up to a second later.
            {
                let idle = Duration::from_secs_f64(p.duration("backend_idle_timeout"));
                if let Some(v) = hk.active_vcl() {
                    for b in &v.backends {
                        b.pool.reap(idle);
                    }
                }
            }
            drop(p);
            sections.publish(&hk);
        }
    });
    Ok(Running {
        shared: sh,
        cli_done,
        _pidfiles: pidfiles,
    })
}

/// Publishes a command-line argument in the manager's directory.
fn publish_arg(vsm: &mut lacquer_vsl::vsm::VsmDir, opt: &str, value: &str) -> Result<(), String> {
    vsm.publish("Arg", opt, value.as_bytes())
        .map(drop)
        .map_err(|e| format!("Cannot publish {opt} in shared memory: {e}"))
}

/// Opens, locks and fills a pid file, as varnishd does with `-P` and with
/// `_.pid` in its working directory: a second daemon on the same working
/// directory (whose log and counters it would clobber) or pid file is
/// refused.
fn lock_pidfile(p: &Path) -> Result<std::fs::File, String> {
    use std::io::{Read, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(p)
        .map_err(|e| format!("Could not open pid-file {}: {e}", p.display()))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = f.read_to_string(&mut pid);
            return Err(format!("Varnishd is already running (pid={})", pid.trim()));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("Could not lock pid-file {}: {e}", p.display()));
        }
    }
    f.set_len(0)
        .and_then(|_| f.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .map_err(|e| format!("Could not write pid-file {}: {e}", p.display()))?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::{backend_vcl, boot_names, lock_pidfile};
    use std::path::PathBuf;

    #[test]
    fn boot_vcls_are_named_as_varnishd_names_them() {
        let files: Vec<PathBuf> = ["a", "b", "c"].iter().map(PathBuf::from).collect();
        let names: Vec<String> = boot_names(&files).map(|(n, _)| n).collect();
        assert_eq!(names, ["boot0", "boot1", "boot"]);
        let one = [PathBuf::from("a")];
        assert_eq!(boot_names(&one).next().unwrap().0, "boot");
    }

    #[test]
    fn a_pid_file_is_held_by_one_daemon() {
        let dir = std::env::temp_dir().join(format!("lq-pid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("_.pid");
        let held = lock_pidfile(&p).unwrap();
        let pid = std::process::id();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{pid}\n"));
        assert_eq!(
            lock_pidfile(&p).unwrap_err(),
            format!("Varnishd is already running (pid={pid})")
        );
        drop(held);
        assert!(lock_pidfile(&p).is_ok(), "released with its holder");
        let err = lock_pidfile(&dir.join("no/such/dir/x.pid")).unwrap_err();
        assert!(err.starts_with("Could not open pid-file"), "{err}");
    }

    #[test]
    fn b_argument_forms() {
        assert_eq!(
            backend_vcl("None").unwrap(),
            "vcl 4.1;\nbackend default none;\n"
        );
        assert!(
            backend_vcl("/run/origin.sock")
                .unwrap()
                .contains(".path = \"/run/origin.sock\";")
        );
        let tcp = backend_vcl("127.0.0.1:8080").unwrap();
        assert!(tcp.contains(".host = \"127.0.0.1\";") && tcp.contains(".port = \"8080\";"));
        // No host: the compiler refuses it, with varnishd's words.
        assert!(backend_vcl(":80").unwrap().contains(".host = \"\";"));
    }
}
