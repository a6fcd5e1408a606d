//! `vmod_saintmode` (varnish-modules): a director wrapping one backend that
//! is considered sick for objects it recently failed to deliver
//! (`saintmode.blacklist()` in `vcl_backend_response`), and sick for
//! everything once `threshold` objects are blacklisted.
//!
//! Blacklist entries are keyed by the request's hash digest and expire
//! after the given duration. The saintmode objects of a VCL are found
//! through per-VCL state (Varnish's `PRIV_VCL`).

use std::sync::{Arc, Mutex};

use lacquer_vcl::exec::{Backend, Context, LogKind, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;

use crate::args::Args;
use crate::{AnyObj, ClassImpl, Director, Env, FuncImpl, Host, MethodImpl, ModuleImpl, Obj, this};

const DECL: &str = r#"
$Module saintmode
$Function VOID blacklist(DURATION expires)
$Object saintmode(BACKEND backend, INT threshold)
$Method BACKEND .backend()
$Method INT .blacklist_count()
$Method BOOL .is_healthy()
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[("blacklist", blacklist as FuncImpl)],
    classes: &[ClassImpl {
        name: "saintmode",
        ctor: new_saintmode,
        methods: &[
            ("backend", sm_backend as MethodImpl),
            ("blacklist_count", sm_count),
            ("is_healthy", sm_healthy),
        ],
    }],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

/// One saintmode director.
struct Saint {
    backend: Backend,
    threshold: i64,
    host: Arc<dyn Host>,
    /// (object digest, expiry time).
    list: Mutex<Vec<([u8; 32], f64)>>,
}

use crate::wall_clock as now;

impl Saint {
    /// Unexpired entries (expired ones are dropped).
    fn live(&self, t: f64) -> std::sync::MutexGuard<'_, Vec<([u8; 32], f64)>> {
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        l.retain(|(_, exp)| *exp > t);
        l
    }

    fn healthy_at(&self, t: f64) -> bool {
        self.host.usable(&self.backend) && (self.live(t).len() as i64) < self.threshold
    }
}

impl Director for Saint {
    fn resolve(&self, ctx: &mut dyn Context) -> Option<Backend> {
        let t = now();
        if !self.healthy_at(t) {
            return None;
        }
        match ctx.digest() {
            Some(d) if self.live(t).iter().any(|(x, _)| *x == d) => None,
            _ => Some(self.backend.clone()),
        }
    }
    fn healthy(&self) -> Result<bool, String> {
        Ok(self.healthy_at(now()))
    }
    fn list(&self) -> Option<crate::DirectorList> {
        None
    }
}

/// The saintmode objects of one VCL.
#[derive(Default)]
struct Saints(Vec<Arc<Saint>>);

struct SaintObj {
    dir: Arc<Saint>,
    be: Backend,
}

fn new_saintmode(env: &Env, _: &mut dyn Context, name: &str, a: &Args<'_>) -> Result<Obj, String> {
    let backend = a
        .backend(0)?
        .cloned()
        .ok_or_else(|| format!("saintmode {name}: backend is NULL"))?;
    let threshold = a.int(1)?.unwrap_or(0);
    let dir = Arc::new(Saint {
        backend,
        threshold,
        host: env.host.clone(),
        list: Mutex::new(Vec::new()),
    });
    env.vcl_state()
        .get_or_insert_with(0, Saints::default)
        .0
        .push(dir.clone());
    let be = env.add_director(name, dir.clone());
    Ok(Arc::new(SaintObj { dir, be }))
}

fn blacklist(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    if ctx.sub() != BuiltinSub::BackendResponse {
        ctx.log(
            LogKind::Error,
            b"saintmode.blacklist() called outside of vcl_backend_response",
        );
        return Ok(Value::Null);
    }
    let expires = a.duration(0)?.unwrap_or(0.0);
    let Ok(Value::Backend(be)) = ctx.get(VarId::BerespBackend) else {
        ctx.log(LogKind::Error, b"saintmode.blacklist(): no backend");
        return Ok(Value::Null);
    };
    let saint = env
        .vcl_state()
        .get::<Saints>(0)
        .and_then(|s| s.0.iter().find(|x| x.backend == be).cloned());
    let Some(saint) = saint else {
        let m = format!(
            "saintmode.blacklist(): no saintmode object for backend {}",
            be.name
        );
        ctx.log(LogKind::Error, m.as_bytes());
        return Ok(Value::Null);
    };
    let Some(digest) = ctx.digest() else {
        ctx.log(LogKind::Error, b"saintmode.blacklist(): no object hash");
        return Ok(Value::Null);
    };
    let t = now();
    saint.live(t).push((digest, t + expires));
    Ok(Value::Null)
}

fn sm_backend(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Backend(this::<SaintObj>(o).be.clone()))
}

fn sm_count(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Int(this::<SaintObj>(o).dir.live(now()).len() as i64))
}

fn sm_healthy(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Bool(this::<SaintObj>(o).dir.healthy()?))
}
