//! `debug.dyn`, `debug.dyn_uds` and `debug.director`: the test vmod's
//! dynamic backends and its failing director, which Varnish's suite uses to
//! exercise backends created, swapped and retired while VCL runs.
//!
//! A `dyn` object owns one backend made through [`crate::Host::new_backend`];
//! every `.refresh()` makes a new one (even for the same address, as the
//! suite expects) and retires the old one, so a task that picked the old
//! backend before the swap finds it sick and gone.
//!
//! `dyn` and its `.refresh()` also take a VCL backend's TLS attributes as
//! named arguments (`ssl`, `ssl_sni`, `ssl_verify_peer`,
//! `ssl_verify_host`, `ssl_ca`, `certificate`; a Lacquer addition, with
//! the defaults of the backend attributes), so backends made at run time
//! speak TLS as declared ones do.

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use lacquer_vcl::exec::{Backend, Context, LogKind, Value};

use crate::args::{Args, lossy};
use crate::host::{Director, DynamicBackend, DynamicTls, Endpoint};
use crate::{AnyObj, Env, Obj, this};

type R = Result<Value, String>;

/// One `dyn` or `dyn_uds` instance: the backend it currently stands for.
struct Dyn {
    name: String,
    current: Mutex<Backend>,
}

impl Dyn {
    fn current(&self) -> Backend {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts a freshly made backend in place and retires the one it
    /// replaces.
    fn swap(&self, env: &Env, be: Backend) {
        let old = std::mem::replace(
            &mut *self.current.lock().unwrap_or_else(|e| e.into_inner()),
            be,
        );
        env.host.delete_backend(&old);
    }
}

/// The probe argument, by name, when one was given.
fn probe_arg(a: &Args<'_>, i: usize) -> Option<String> {
    match a.get(i) {
        Some(Value::Probe(p)) => Some(p.to_string()),
        _ => None,
    }
}

/// A TCP backend at `addr`:`port` (names are resolved, first address wins).
fn tcp_backend(name: &str, a: &Args<'_>) -> Result<DynamicBackend, String> {
    let addr = lossy(a.str_or_empty(0)?).into_owned();
    let port = lossy(a.str_or_empty(1)?).into_owned();
    if addr.is_empty() || port.is_empty() {
        return Err("Missing dynamic backend address or port".into());
    }
    let num: u16 = port
        .parse()
        .map_err(|_| format!("{name}: bad backend port \"{port}\" (want a number)"))?;
    let sa = (addr.as_str(), num)
        .to_socket_addrs()
        .map_err(|e| format!("{name}: cannot resolve backend address {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{name}: backend address {addr} resolves to nothing"))?;
    Ok(DynamicBackend {
        name: name.to_string(),
        endpoint: Endpoint::Tcp(sa),
        host_header: Some(addr),
        probe: probe_arg(a, 2),
        tls: tls_args(a, 3)?,
    })
}

/// The TLS arguments from position `at` on: `ssl`, `ssl_sni`,
/// `ssl_verify_peer`, `ssl_verify_host`, `ssl_ca`, `certificate`. `None`
/// unless `ssl` is true.
fn tls_args(a: &Args<'_>, at: usize) -> Result<Option<DynamicTls>, String> {
    if !a.bool(at)?.unwrap_or(false) {
        return Ok(None);
    }
    let d = DynamicTls::default();
    let path = |i: usize| -> Result<Option<PathBuf>, String> {
        Ok(a.str(i)?
            .map(|p| PathBuf::from(lossy(p).into_owned()))
            .filter(|p| !p.as_os_str().is_empty()))
    };
    Ok(Some(DynamicTls {
        sni: a.bool(at + 1)?.unwrap_or(d.sni),
        verify_peer: a.bool(at + 2)?.unwrap_or(d.verify_peer),
        verify_host: a.bool(at + 3)?.unwrap_or(d.verify_host),
        ca_file: path(at + 4)?,
        certificate: path(at + 5)?,
    }))
}

/// A Unix-socket backend at `path`, which must name an existing socket.
fn uds_backend(name: &str, a: &Args<'_>) -> Result<DynamicBackend, String> {
    use std::os::unix::fs::FileTypeExt;
    let Some(path) = a.str(0)? else {
        return Err("path is NULL".into());
    };
    let path = lossy(path).into_owned();
    if !path.starts_with('/') {
        return Err(format!("path must be an absolute path: {path}"));
    }
    let md = std::fs::metadata(&path).map_err(|e| {
        let msg = e.to_string();
        // The OS text without Rust's " (os error N)" suffix, as strerror.
        let msg = msg.split(" (os error").next().unwrap_or(&msg).to_string();
        format!("Cannot stat path {path}: {msg}")
    })?;
    if !md.file_type().is_socket() {
        return Err(format!("{path} is not a socket"));
    }
    Ok(DynamicBackend {
        name: name.to_string(),
        endpoint: Endpoint::Unix(PathBuf::from(path)),
        host_header: Some("localhost".into()),
        probe: None,
        tls: None,
    })
}

fn make(env: &Env, name: &str, spec: DynamicBackend) -> Result<Obj, String> {
    let be = env.host.new_backend(spec)?;
    Ok(Arc::new(Dyn {
        name: name.to_string(),
        current: Mutex::new(be),
    }))
}

pub(super) fn new_dyn(
    env: &Env,
    _: &mut dyn Context,
    name: &str,
    a: &Args<'_>,
) -> Result<Obj, String> {
    make(env, name, tcp_backend(name, a)?)
}

pub(super) fn new_dyn_uds(
    env: &Env,
    _: &mut dyn Context,
    name: &str,
    a: &Args<'_>,
) -> Result<Obj, String> {
    make(env, name, uds_backend(name, a)?)
}

pub(super) fn backend(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Backend(this::<Dyn>(o).current()))
}

pub(super) fn refresh(env: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    let d = this::<Dyn>(o);
    let be = env.host.new_backend(tcp_backend(&d.name, a)?)?;
    d.swap(env, be);
    Ok(Value::Null)
}

pub(super) fn refresh_uds(env: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    let d = this::<Dyn>(o);
    let be = env.host.new_backend(uds_backend(&d.name, a)?)?;
    d.swap(env, be);
    Ok(Value::Null)
}

/// A director whose every callback fails the task that asks it, with
/// varnishd's `VRT_fail(ctx, "fail")` text (a `VCL_Error "fail"` record).
struct Failing;

impl Director for Failing {
    fn resolve(&self, ctx: &mut dyn Context) -> Option<Backend> {
        ctx.log(LogKind::Error, b"fail");
        None
    }
    fn healthy(&self) -> Result<bool, String> {
        Err("fail".into())
    }
    fn list(&self) -> Option<crate::DirectorList> {
        None
    }
}

pub(super) fn new_director(
    env: &Env,
    _: &mut dyn Context,
    name: &str,
    _: &Args<'_>,
) -> Result<Obj, String> {
    Ok(Arc::new(env.add_director(name, Arc::new(Failing))))
}

pub(super) fn director_fail(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Backend(this::<Backend>(o).clone()))
}
