//! Shared test rig: a [`TestHost`] standing in for the server, and a [`Rig`]
//! that loads vmods from the crate's registry into a [`Runtime`] and calls
//! functions and methods by name through the `Vmods` trait, filling in
//! declared defaults the way the compiler does.

#![allow(dead_code)]

pub mod curl_vcl;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::regex::Regex;
use lacquer_vcl::exec::{Backend, Context, FuncRef, Value, VclRuntime, VmodArg, Vmods};
use lacquer_vcl::ir::{ImportedVmod, InstanceDef};
use lacquer_vcl::types::Type;
use lacquer_vcl::vars::VclVersion;
use lacquer_vcl::vmod::{ArgType, DefaultValue, FuncDecl, VmodDecl};
use lacquer_vmods::{Director, DynamicBackend, Host, Runtime, registry_with_test_vmods};

/// Directors get ids from here up.
pub const DIRECTOR_BASE: u32 = 1000;
/// Backends made at runtime get ids from here up.
pub const DYNAMIC_BASE: u32 = 2000;

/// A server double: backends are healthy unless marked sick; directors
/// are kept in registration order.
#[derive(Default)]
pub struct TestHost {
    pub sick: Mutex<HashSet<String>>,
    pub directors: Mutex<Vec<(String, Arc<dyn Director>)>>,
    pub removed: Mutex<Vec<Backend>>,
    pub backends: Mutex<Vec<Backend>>,
    pub xkey_calls: Mutex<Vec<(Vec<String>, bool)>>,
    /// Health change times by backend name.
    pub changed: Mutex<std::collections::HashMap<String, f64>>,
    /// Backends made by `new_backend`, in creation order.
    pub dynamic: Mutex<Vec<DynamicBackend>>,
    /// Backends retired by `delete_backend`.
    pub deleted: Mutex<Vec<Backend>>,
    /// Holds taken through `Host::hold` (None once released).
    pub holds: Mutex<Vec<Option<String>>>,
    /// Runtime parameters `Host::param` answers with.
    pub params: Mutex<std::collections::HashMap<String, String>>,
    /// Records written through `Host::log`.
    pub logged: Mutex<Vec<(lacquer_vcl::exec::LogKind, String)>>,
    /// Object event subscriptions (None once ended).
    pub subscribers: Mutex<Vec<Option<lacquer_vmods::ObjectEventFn>>>,
    /// Counter sets published, by name, with their values (removed when
    /// the vmod drops the set).
    pub counters: Arc<Mutex<std::collections::HashMap<String, Vec<u64>>>>,
}

/// A counter set of the [`TestHost`]: values in its map while it lives.
struct TestCounters {
    name: String,
    all: Arc<Mutex<std::collections::HashMap<String, Vec<u64>>>>,
}

impl lacquer_vmods::Counters for TestCounters {
    fn add(&self, field: usize, n: u64) -> Result<(), String> {
        let mut all = self.all.lock().unwrap();
        let v = all.get_mut(&self.name).unwrap();
        let c = v.get_mut(field).ok_or("no such counter")?;
        *c = c.wrapping_add(n);
        Ok(())
    }
}

impl Drop for TestCounters {
    fn drop(&mut self) {
        self.all.lock().unwrap().remove(&self.name);
    }
}

impl TestHost {
    pub fn set_sick(&self, name: &str, sick: bool) {
        let mut s = self.sick.lock().unwrap();
        if sick {
            s.insert(name.to_string());
        } else {
            s.remove(name);
        }
    }

    /// Tells the subscribers of object events about one.
    pub fn object_event(&self, ev: lacquer_vmods::ObjectEvent, id: usize) {
        let subs: Vec<_> = self
            .subscribers
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .cloned()
            .collect();
        for f in subs {
            f(ev, id);
        }
    }

    /// Resolves a backend value through directors, like the server would.
    pub fn resolve(&self, ctx: &mut dyn Context, b: &Backend) -> Option<Backend> {
        let mut cur = b.clone();
        for _ in 0..10 {
            if cur.id < DIRECTOR_BASE {
                return Some(cur);
            }
            let d = self.directors.lock().unwrap()[(cur.id - DIRECTOR_BASE) as usize]
                .1
                .clone();
            cur = d.resolve(ctx)?;
        }
        None
    }
}

impl Host for TestHost {
    fn param(&self, name: &str) -> Option<String> {
        self.params.lock().unwrap().get(name).cloned()
    }
    fn backend_healthy(&self, b: &Backend) -> Result<bool, String> {
        if b.id >= DYNAMIC_BASE {
            return Ok(!self.deleted.lock().unwrap().contains(b));
        }
        if b.id >= DIRECTOR_BASE {
            let d = self.directors.lock().unwrap()[(b.id - DIRECTOR_BASE) as usize]
                .1
                .clone();
            return d.healthy();
        }
        Ok(!self.sick.lock().unwrap().contains(&*b.name))
    }

    fn new_backend(&self, spec: DynamicBackend) -> Result<Backend, String> {
        let mut d = self.dynamic.lock().unwrap();
        let name = spec.name.clone();
        d.push(spec);
        Ok(Backend {
            id: DYNAMIC_BASE + d.len() as u32 - 1,
            name: name.into(),
        })
    }

    fn delete_backend(&self, backend: &Backend) {
        self.deleted.lock().unwrap().push(backend.clone());
    }

    fn log(&self, kind: lacquer_vcl::exec::LogKind, msg: &str) {
        self.logged.lock().unwrap().push((kind, msg.to_string()));
    }

    fn hold(&self, who: &str) -> u64 {
        let mut h = self.holds.lock().unwrap();
        h.push(Some(who.to_string()));
        h.len() as u64 - 1
    }

    fn release(&self, id: u64) {
        if let Some(slot) = self.holds.lock().unwrap().get_mut(id as usize) {
            *slot = None;
        }
    }

    fn panic(&self, why: &str) {
        self.logged
            .lock()
            .unwrap()
            .push((lacquer_vcl::exec::LogKind::Error, format!("panic: {why}")));
    }

    fn backend_changed(&self, b: &Backend) -> f64 {
        self.changed
            .lock()
            .unwrap()
            .get(&*b.name)
            .copied()
            .unwrap_or(0.0)
    }

    fn add_director(&self, name: &str, director: Arc<dyn Director>) -> Backend {
        let mut d = self.directors.lock().unwrap();
        d.push((name.to_string(), director));
        Backend {
            id: DIRECTOR_BASE + d.len() as u32 - 1,
            name: name.into(),
        }
    }

    fn remove_director(&self, backend: &Backend) {
        self.removed.lock().unwrap().push(backend.clone());
    }

    fn lookup_backend(&self, name: &str) -> Option<Backend> {
        self.backends
            .lock()
            .unwrap()
            .iter()
            .find(|b| &*b.name == name)
            .cloned()
    }

    fn subscribe_objects(&self, f: lacquer_vmods::ObjectEventFn) -> Result<u64, String> {
        let mut s = self.subscribers.lock().unwrap();
        s.push(Some(f));
        Ok(s.len() as u64 - 1)
    }

    fn new_counters(
        &self,
        kind: &str,
        ident: &str,
    ) -> Result<Box<dyn lacquer_vmods::Counters>, String> {
        let name = if ident.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{ident}")
        };
        self.counters.lock().unwrap().insert(name.clone(), vec![0]);
        Ok(Box::new(TestCounters {
            name,
            all: self.counters.clone(),
        }))
    }

    fn unsubscribe_objects(&self, id: u64) {
        if let Some(slot) = self.subscribers.lock().unwrap().get_mut(id as usize) {
            *slot = None;
        }
    }

    fn xkey_purge(&self, keys: &[&[u8]], soft: bool) -> i64 {
        let keys: Vec<String> = keys
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        let n = keys.len() as i64;
        self.xkey_calls.lock().unwrap().push((keys, soft));
        n
    }
}

/// A plain backend value.
pub fn be(id: u32, name: &str) -> Value {
    Value::Backend(Backend {
        id,
        name: name.into(),
    })
}

pub fn s(v: &str) -> Option<Value> {
    Some(Value::str(v.to_string()))
}

pub fn e(v: &str) -> Option<Value> {
    Some(Value::Enum(v.into()))
}

/// A loaded VCL's vmods.
pub struct Rig {
    pub rt: Runtime,
    pub host: Arc<TestHost>,
    decls: Vec<Arc<VmodDecl>>,
    instances: Vec<InstanceDef>,
}

fn default_value(ty: &ArgType, d: &DefaultValue) -> Value {
    match (ty, d) {
        (_, DefaultValue::Null) => Value::Null,
        (_, DefaultValue::Bool(b)) => Value::Bool(*b),
        (_, DefaultValue::Int(i)) => Value::Int(*i),
        (ArgType::Value(Type::Duration), DefaultValue::Real(r) | DefaultValue::Number(r)) => {
            Value::Duration(*r)
        }
        (ArgType::Value(Type::Bytes), DefaultValue::Number(r)) => Value::Bytes(*r as i64),
        (ArgType::Value(Type::Time), DefaultValue::Number(r)) => Value::Time(*r),
        (_, DefaultValue::Real(r) | DefaultValue::Number(r)) => Value::Real(*r),
        (_, DefaultValue::Str(s)) => Value::str(s.clone()),
        (_, DefaultValue::Enum(e)) => Value::Enum(e.as_str().into()),
    }
}

/// Completes positional arguments with the declaration's defaults. PRIV
/// arguments are not passed (the vmod supplies its own state), as in the
/// executor.
fn fill(f: &FuncDecl, mut args: Vec<VmodArg>) -> Vec<VmodArg> {
    let decl = f.args.iter().filter(|a| !matches!(a.ty, ArgType::Priv(_)));
    for (i, d) in decl.enumerate() {
        if i >= args.len() {
            args.push(None);
        }
        if args[i].is_none()
            && let Some(def) = &d.default
        {
            args[i] = Some(default_value(&d.ty, def));
        }
        assert!(
            args[i].is_some() || d.optional,
            "missing required argument {} of {}",
            i + 1,
            f.name
        );
    }
    args
}

impl Rig {
    /// Loads `vmods` and declares `objects` as (instance name, vmod, class).
    pub fn new(vmods: &[&str], objects: &[(&str, &str, &str)]) -> Rig {
        let reg = registry_with_test_vmods();
        let decls: Vec<Arc<VmodDecl>> = vmods
            .iter()
            .map(|n| reg.get(n).unwrap_or_else(|| panic!("no vmod {n}")).clone())
            .collect();
        let imports: Vec<ImportedVmod> = decls
            .iter()
            .map(|d| ImportedVmod {
                name: d.name.clone(),
                alias: d.name.clone(),
                decl: d.clone(),
            })
            .collect();
        let instances: Vec<InstanceDef> = objects
            .iter()
            .map(|(name, vmod, class)| {
                let vi = vmods.iter().position(|v| v == vmod).unwrap();
                InstanceDef {
                    name: name.to_string(),
                    vmod: vi,
                    class: decls[vi].object(class).unwrap().0,
                }
            })
            .collect();
        let host = Arc::new(TestHost::default());
        let rt = Runtime::new(&imports, &instances, VclVersion::V41, host.clone()).unwrap();
        Rig {
            rt,
            host,
            decls,
            instances,
        }
    }

    /// Calls `vmod.func` with positional arguments (defaults filled in).
    pub fn call(
        &self,
        ctx: &mut dyn Context,
        name: &str,
        args: Vec<VmodArg>,
    ) -> Result<Value, String> {
        let (v, f) = name.split_once('.').unwrap();
        let vi = self.decls.iter().position(|d| d.name == v).unwrap();
        let (fi, decl) = self.decls[vi]
            .function(f)
            .unwrap_or_else(|| panic!("no {name}"));
        let mut vcl = NoVcl::default();
        let args = vcl.compile_regexes(decl, fill(decl, args));
        self.rt.call(
            ctx,
            &mut vcl,
            FuncRef {
                vmod: vi as u32,
                func: fi as u32,
            },
            &args,
        )
    }

    /// Runs `new <obj> = ...(args)`.
    pub fn new_obj(
        &self,
        ctx: &mut dyn Context,
        obj: &str,
        args: Vec<VmodArg>,
    ) -> Result<(), String> {
        let ii = self.instances.iter().position(|i| i.name == obj).unwrap();
        let inst = &self.instances[ii];
        let class = &self.decls[inst.vmod].objects[inst.class];
        let args = fill(&class.ctor, args);
        self.rt.construct(
            ctx,
            &mut NoVcl::default(),
            FuncRef {
                vmod: inst.vmod as u32,
                func: inst.class as u32,
            },
            ii as u32,
            obj,
            &args,
        )
    }

    /// Calls `obj.method(args)`.
    pub fn method(
        &self,
        ctx: &mut dyn Context,
        obj: &str,
        method: &str,
        args: Vec<VmodArg>,
    ) -> Result<Value, String> {
        let ii = self.instances.iter().position(|i| i.name == obj).unwrap();
        let inst = &self.instances[ii];
        let class = &self.decls[inst.vmod].objects[inst.class];
        let (mi, m) = class
            .method(method)
            .unwrap_or_else(|| panic!("no method {method}"));
        let mut vcl = NoVcl::default();
        let args = vcl.compile_regexes(m, fill(m, args));
        self.rt.method(ctx, &mut vcl, ii as u32, mi as u32, &args)
    }
}

/// The VCL side of calls made without a program: these tests pass no
/// ACL or SUB values, so any request for one is a test bug. REGEX
/// arguments are given as strings and compiled here, as the compiler
/// would compile their literals with the VCL.
#[derive(Default)]
pub struct NoVcl {
    regexes: Vec<Regex>,
}

impl NoVcl {
    /// Replaces each string given for a REGEX parameter with the compiled
    /// regex (a bad pattern is a test bug).
    fn compile_regexes(&mut self, f: &FuncDecl, mut args: Vec<VmodArg>) -> Vec<VmodArg> {
        let decl = f.args.iter().filter(|a| !matches!(a.ty, ArgType::Priv(_)));
        for (arg, d) in args.iter_mut().zip(decl) {
            if d.ty == ArgType::Value(Type::Regex)
                && let Some(Value::Str(s)) = arg
            {
                let pattern = std::str::from_utf8(s).unwrap();
                self.regexes.push(Regex::new(pattern).unwrap());
                *arg = Some(Value::Regex(self.regexes.len() as u32 - 1));
            }
        }
        args
    }
}

impl VclRuntime for NoVcl {
    fn acl_match(&mut self, _: &mut dyn Context, acl: u32, _: SocketAddr) -> Result<bool, String> {
        Err(format!("no VCL program to match ACL #{acl} in"))
    }
    fn check_call(&self, _: &dyn Context, sub: u32) -> Option<String> {
        Some(format!("no VCL program to call sub #{sub} in"))
    }
    fn call(&mut self, _: &mut dyn Context, _: u32) -> bool {
        false
    }
    fn regex(&self, i: u32) -> Option<&Regex> {
        self.regexes.get(i as usize)
    }
}

/// A client request context.
pub fn req() -> MockContext {
    MockContext::new("GET", "/")
}

/// The string form of a value (NULL as `None`).
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Str(b) => Some(String::from_utf8_lossy(b).into_owned()),
        other => {
            let mut out = Vec::new();
            other.append_to(&mut out, &[]).unwrap();
            Some(String::from_utf8_lossy(&out).into_owned())
        }
    }
}
