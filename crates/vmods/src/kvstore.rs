//! `vmod_kvstore` (Varnish Enterprise's 6.x API): in-memory key-value
//! stores with optional TTLs, as objects made in `vcl_init`.
//!
//! `new kv = kvstore.init()` makes a store shared by every task of the
//! VCL (`GLOBAL`); `kvstore.init(REQUEST)` gives each task its own,
//! empty at the task's start. Methods: `.get(key[, default])`,
//! `.set(key, value[, ttl])`, `.delete(key)`, `.counter(key, delta[, ttl])`
//! (adds `delta` and returns the new value, so a delta of 0 reads a
//! counter; a key that does not hold an integer counts from 0), `.size()`
//! and `.compact()` (drops expired keys, which are otherwise dropped only
//! when a call lands on them). A TTL is given when a key is created or
//! set: counting on an existing key keeps its expiry, so
//! `counter(key, 1, 10m) == 1` is true once per key per ten minutes.
//!
//! A global store is split into shards, each behind its own reader-writer
//! lock: reads of different keys rarely meet, and a counter is updated
//! under its shard's write lock, so concurrent counts are exact.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use lacquer_vcl::exec::{Context, Value};

use crate::args::Args;
use crate::{AnyObj, ClassImpl, Env, MethodImpl, ModuleImpl, Obj, this};

const DECL: &str = r#"
$Module kvstore
$Object init(ENUM { GLOBAL, REQUEST } scope = GLOBAL)
$Method STRING .get(STRING key, [STRING default_value])
$Method VOID .set(STRING key, STRING value, [DURATION ttl])
$Method VOID .delete(STRING key)
$Method INT .counter(STRING key, INT count, [DURATION ttl])
$Method INT .size()
$Method VOID .compact()
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[],
    classes: &[ClassImpl {
        name: "init",
        ctor: new_store,
        methods: &[
            ("get", kv_get as MethodImpl),
            ("set", kv_set),
            ("delete", kv_delete),
            ("counter", kv_counter),
            ("size", kv_size),
            ("compact", kv_compact),
        ],
    }],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

/// Shards of a global store: a power of two.
const SHARDS: usize = 64;

/// One stored value and when it expires (`None`: never).
#[derive(Clone, Debug)]
struct Entry {
    value: Bytes,
    expires: Option<f64>,
}

impl Entry {
    fn live(&self, now: f64) -> bool {
        self.expires.is_none_or(|t| t > now)
    }
}

/// The keys and values of one store (or of one shard of it).
#[derive(Default, Debug)]
pub(crate) struct Table(HashMap<Bytes, Entry>);

impl Table {
    fn get(&self, key: &[u8], now: f64) -> Option<&Bytes> {
        self.0.get(key).filter(|e| e.live(now)).map(|e| &e.value)
    }

    fn set(&mut self, key: Bytes, value: Bytes, ttl: Option<f64>, now: f64) {
        let expires = ttl.filter(|t| *t > 0.0).map(|t| now + t);
        self.0.insert(key, Entry { value, expires });
    }

    fn delete(&mut self, key: &[u8]) {
        self.0.remove(key);
    }

    /// Adds `delta` to the integer under `key` (0 when absent, expired or
    /// not an integer) and returns the sum. A key that did not exist gets
    /// `ttl`; a live one keeps its expiry. Reading (delta 0) an absent key
    /// creates nothing.
    fn counter(&mut self, key: &[u8], delta: i64, ttl: Option<f64>, now: f64) -> i64 {
        match self.0.get_mut(key) {
            Some(e) if e.live(now) => {
                let n = parse_int(&e.value).saturating_add(delta);
                if delta != 0 {
                    e.value = Bytes::from(n.to_string());
                }
                n
            }
            _ if delta == 0 => 0,
            _ => {
                self.set(
                    Bytes::copy_from_slice(key),
                    Bytes::from(delta.to_string()),
                    ttl,
                    now,
                );
                delta
            }
        }
    }

    fn live_len(&self, now: f64) -> usize {
        self.0.values().filter(|e| e.live(now)).count()
    }

    fn compact(&mut self, now: f64) {
        self.0.retain(|_, e| e.live(now));
    }
}

/// An integer as a counter reads it: optional sign and digits, anything
/// else (or an overflow) is 0.
fn parse_int(b: &[u8]) -> i64 {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// A global store: shards chosen by key hash.
#[derive(Debug)]
struct Shared {
    hasher: RandomState,
    shards: Box<[RwLock<Table>]>,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| RwLock::new(Table::default())).collect(),
        }
    }

    fn shard(&self, key: &[u8]) -> &RwLock<Table> {
        let h = self.hasher.hash_one(key) as usize;
        &self.shards[h & (SHARDS - 1)]
    }

    fn read<T>(&self, key: &[u8], f: impl FnOnce(&Table) -> T) -> T {
        f(&self.shard(key).read().unwrap_or_else(|e| e.into_inner()))
    }

    fn write<T>(&self, key: &[u8], f: impl FnOnce(&mut Table) -> T) -> T {
        f(&mut self.shard(key).write().unwrap_or_else(|e| e.into_inner()))
    }

    fn each<T>(&self, mut f: impl FnMut(&mut Table) -> T) -> Vec<T> {
        self.shards
            .iter()
            .map(|s| f(&mut s.write().unwrap_or_else(|e| e.into_inner())))
            .collect()
    }
}

/// One `kvstore.init()` object.
#[derive(Debug)]
enum Store {
    Global(Shared),
    /// Per task: the task's own [`Table`], kept in its private state
    /// under this id.
    Request(u64),
}

fn new_store(_: &Env, _: &mut dyn Context, _: &str, a: &Args<'_>) -> Result<Obj, String> {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    Ok(std::sync::Arc::new(match a.enum_(0)? {
        Some("REQUEST") => Store::Request(NEXT_ID.fetch_add(1, Ordering::Relaxed)),
        _ => Store::Global(Shared::new()),
    }))
}

impl Store {
    /// Runs `f` on the table holding `key` for writing.
    fn write<T>(&self, ctx: &mut dyn Context, key: &[u8], f: impl FnOnce(&mut Table) -> T) -> T {
        match self {
            Store::Global(s) => s.write(key, f),
            Store::Request(id) => f(ctx.privs().get_or_insert_with(*id, Table::default)),
        }
    }
}

fn key(a: &Args<'_>) -> Result<Bytes, String> {
    Ok(a.bytes(0)?.unwrap_or_default())
}

fn kv_get(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let k = key(a)?;
    let now = ctx.now();
    let found = match this::<Store>(o) {
        Store::Global(s) => s.read(&k, |t| t.get(&k, now).cloned()),
        Store::Request(id) => ctx
            .privs()
            .get::<Table>(*id)
            .and_then(|t| t.get(&k, now).cloned()),
    };
    Ok(match found {
        Some(v) => Value::Str(v),
        None => a.bytes(1)?.map_or(Value::Null, Value::Str),
    })
}

fn kv_set(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let k = key(a)?;
    let v = a.bytes(1)?.unwrap_or_default();
    let ttl = a.duration(2)?;
    let now = ctx.now();
    this::<Store>(o).write(ctx, &k.clone(), |t| t.set(k, v, ttl, now));
    Ok(Value::Null)
}

fn kv_delete(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let k = key(a)?;
    this::<Store>(o).write(ctx, &k, |t| t.delete(&k));
    Ok(Value::Null)
}

fn kv_counter(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let k = key(a)?;
    let delta = a.int(1)?.unwrap_or(0);
    let ttl = a.duration(2)?;
    let now = ctx.now();
    let store = this::<Store>(o);
    let n = match store {
        // A read takes the shared lock only.
        Store::Global(s) if delta == 0 => s.read(&k, |t| t.get(&k, now).map(|v| parse_int(v))),
        _ => None,
    };
    let n = match n {
        Some(n) => n,
        None => store.write(ctx, &k, |t| t.counter(&k, delta, ttl, now)),
    };
    Ok(Value::Int(n))
}

fn kv_size(_: &Env, o: &AnyObj, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let now = ctx.now();
    let n = match this::<Store>(o) {
        Store::Global(s) => s.each(|t| t.live_len(now)).into_iter().sum(),
        Store::Request(id) => ctx.privs().get::<Table>(*id).map_or(0, |t| t.live_len(now)),
    };
    Ok(Value::Int(n as i64))
}

fn kv_compact(_: &Env, o: &AnyObj, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let now = ctx.now();
    match this::<Store>(o) {
        Store::Global(s) => {
            s.each(|t| t.compact(now));
        }
        Store::Request(id) => {
            if let Some(t) = ctx.privs().get_mut::<Table>(*id) {
                t.compact(now);
            }
        }
    }
    Ok(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn table_get_set_delete_and_ttl() {
        let mut t = Table::default();
        t.set(b("a"), b("one"), None, 100.0);
        t.set(b("b"), b("two"), Some(10.0), 100.0);
        assert_eq!(t.get(b"a", 100.0), Some(&b("one")));
        assert_eq!(t.get(b"b", 109.9), Some(&b("two")));
        assert_eq!(t.get(b"b", 110.0), None);
        assert_eq!(t.live_len(110.0), 1);
        t.compact(110.0);
        assert_eq!(t.0.len(), 1);
        // A TTL of 0 means no expiry.
        t.set(b("c"), b("x"), Some(0.0), 100.0);
        assert_eq!(t.get(b"c", 1e12), Some(&b("x")));
        t.delete(b"a");
        assert_eq!(t.get(b"a", 100.0), None);
    }

    #[test]
    fn counter_semantics() {
        let mut t = Table::default();
        // Reading an absent counter is 0 and creates nothing.
        assert_eq!(t.counter(b"k", 0, None, 0.0), 0);
        assert!(t.0.is_empty());
        assert_eq!(t.counter(b"k", 1, Some(60.0), 0.0), 1);
        assert_eq!(t.counter(b"k", 5, Some(60.0), 30.0), 6);
        assert_eq!(t.counter(b"k", -2, None, 30.0), 4);
        assert_eq!(t.counter(b"k", 0, None, 59.0), 4);
        // Counting kept the expiry of the first count.
        assert_eq!(t.counter(b"k", 0, None, 60.0), 0);
        assert_eq!(t.counter(b"k", 1, Some(60.0), 60.0), 1);
        // A value that is not an integer counts from 0; the sum is a string.
        t.set(b("s"), b("abc"), None, 0.0);
        assert_eq!(t.counter(b"s", 3, None, 0.0), 3);
        assert_eq!(t.get(b"s", 0.0), Some(&b("3")));
        t.set(b("m"), b(&i64::MAX.to_string()), None, 0.0);
        assert_eq!(t.counter(b"m", 1, None, 0.0), i64::MAX);
    }

    #[test]
    fn shared_counts_are_exact_under_concurrency() {
        let s = std::sync::Arc::new(Shared::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for i in 0..2000 {
                        let key = format!("k{}", i % 7);
                        s.write(key.as_bytes(), |t| t.counter(key.as_bytes(), 1, None, 0.0));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let total: i64 = (0..7)
            .map(|i| {
                let key = format!("k{i}");
                s.read(key.as_bytes(), |t| {
                    parse_int(t.get(key.as_bytes(), 0.0).unwrap())
                })
            })
            .sum();
        assert_eq!(total, 8000);
    }
}
