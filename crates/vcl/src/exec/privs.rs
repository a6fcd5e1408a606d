//! Per-task private state for vmods (Varnish's `PRIV_TASK`).
//!
//! Some vmods keep state for the duration of one task (a client request or
//! a backend fetch): `var`'s variables, `cookie`'s parsed cookie jar,
//! `std.ban_error()`'s last message, a shard parameter set overridden for
//! one backend request. The server owns one [`TaskPrivs`] per task, hands it
//! out through [`super::Context::privs`] and drops it when the task ends;
//! the vmods store their state in it keyed by its Rust type (each vmod uses
//! its own private types, so keys never collide) plus a number that tells
//! apart several values of the same type (one per object instance).
//!
//! `PRIV_TOP` state uses the same store, shared ([`SharedPrivs`]) by a
//! client request and its ESI includes.
//!
//! A value may carry a fini hook ([`TaskPrivs::set_fini`], Varnish's
//! `vmod_priv_methods.fini`): when the task ends ([`TaskPrivs::finish`])
//! each hook gets its value and the task's log, in the order the values
//! were first stored.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex};

use super::context::LogKind;

/// State shared by the tasks of one client request tree (Varnish's
/// `PRIV_TOP`): the top request and its ESI includes, which run one after
/// another, each locking it only while a vmod function runs.
pub type SharedPrivs = Arc<Mutex<TaskPrivs>>;

/// A check run when the task ends ([`TaskPrivs::finish`]); an error is
/// the task failing at its end (Varnish's `VRT_fail` from a `PRIV_TASK`
/// fini callback).
pub type FiniCheck = Box<dyn FnOnce(&TaskPrivs) -> Result<(), String> + Send>;

/// Where a fini hook writes: one record of the given kind into the log of
/// the task that is ending.
pub type FiniLog<'a> = dyn FnMut(LogKind, &[u8]) + 'a;

/// A value's fini hook, type-erased.
type Fini = Box<dyn FnOnce(Box<dyn Any + Send>, &mut FiniLog<'_>) + Send>;

/// One stored value: its creation rank (fini order) and its hook.
struct Slot {
    value: Box<dyn Any + Send>,
    seq: u64,
    fini: Option<Fini>,
}

/// Hashes a slot key (a `TypeId`, already a hash of the type, and an
/// instance number) with one multiply-rotate per word instead of SipHash:
/// the keys come from vmod code, never from a client, so they need no
/// protection against chosen collisions, and a vmod call looks its state
/// up on every call (vmod curl several times per request).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Type-keyed state store for one task.
#[derive(Default)]
pub struct TaskPrivs {
    slots: HashMap<(TypeId, u64), Slot, BuildHasherDefault<KeyHasher>>,
    finis: Vec<FiniCheck>,
    /// Creation rank of the next new slot.
    next_seq: u64,
}

impl std::fmt::Debug for TaskPrivs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskPrivs")
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl TaskPrivs {
    /// An empty store.
    pub fn new() -> TaskPrivs {
        TaskPrivs::default()
    }

    /// The value of type `T` under `key`, if one was stored.
    pub fn get<T: Any + Send>(&self, key: u64) -> Option<&T> {
        self.slots
            .get(&(TypeId::of::<T>(), key))
            .and_then(|s| s.value.downcast_ref::<T>())
    }

    /// The value of type `T` under `key`, mutable, if one was stored.
    pub fn get_mut<T: Any + Send>(&mut self, key: u64) -> Option<&mut T> {
        self.slots
            .get_mut(&(TypeId::of::<T>(), key))
            .and_then(|s| s.value.downcast_mut::<T>())
    }

    /// The value of type `T` under `key`, created with `init` on first use.
    pub fn get_or_insert_with<T: Any + Send>(
        &mut self,
        key: u64,
        init: impl FnOnce() -> T,
    ) -> &mut T {
        let seq = &mut self.next_seq;
        self.slots
            .entry((TypeId::of::<T>(), key))
            .or_insert_with(|| {
                *seq += 1;
                Slot {
                    value: Box::new(init()),
                    seq: *seq,
                    fini: None,
                }
            })
            .value
            .downcast_mut::<T>()
            .expect("TaskPrivs slot holds the type it is keyed by")
    }

    /// Stores a value, replacing any previous one of the same type and key
    /// (which keeps its place in the fini order and its fini hook).
    pub fn insert<T: Any + Send>(&mut self, key: u64, value: T) {
        match self.slots.get_mut(&(TypeId::of::<T>(), key)) {
            Some(s) => s.value = Box::new(value),
            None => {
                self.next_seq += 1;
                let slot = Slot {
                    value: Box::new(value),
                    seq: self.next_seq,
                    fini: None,
                };
                self.slots.insert((TypeId::of::<T>(), key), slot);
            }
        }
    }

    /// Gives the value of type `T` under `key` a hook that receives it
    /// when the task ends; false (and nothing done) if there is no such
    /// value. A value removed with [`TaskPrivs::remove`] or dropped by
    /// [`TaskPrivs::clear`] does not reach its hook.
    pub fn set_fini<T: Any + Send>(&mut self, key: u64, fini: fn(T, &mut FiniLog<'_>)) -> bool {
        let Some(s) = self.slots.get_mut(&(TypeId::of::<T>(), key)) else {
            return false;
        };
        s.fini = Some(Box::new(move |v, log| {
            if let Ok(v) = v.downcast::<T>() {
                fini(*v, log);
            }
        }));
        true
    }

    /// Removes and returns the value of type `T` under `key`.
    pub fn remove<T: Any + Send>(&mut self, key: u64) -> Option<T> {
        self.slots
            .remove(&(TypeId::of::<T>(), key))
            .and_then(|s| s.value.downcast::<T>().ok())
            .map(|b| *b)
    }

    /// Drops all state without running fini hooks (the state is being
    /// thrown away, not ended).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.finis.clear();
    }

    /// Registers a check to run when the task ends.
    pub fn on_finish(&mut self, check: FiniCheck) {
        self.finis.push(check);
    }

    /// Ends the task: runs the registered checks (in registration order,
    /// against the state as the task left it), then hands each value with
    /// a fini hook to it (in the order the values were first stored), with
    /// `log` for their records; all state is gone afterwards. Returns the
    /// checks' errors.
    pub fn finish(&mut self, log: &mut FiniLog<'_>) -> Vec<String> {
        let checks = std::mem::take(&mut self.finis);
        let errors = checks.into_iter().filter_map(|c| c(self).err()).collect();
        let mut slots: Vec<Slot> = self.slots.drain().map(|(_, s)| s).collect();
        slots.sort_by_key(|s| s.seq);
        for s in slots {
            if let Some(f) = s.fini {
                f(s.value, log);
            }
        }
        self.clear();
        errors
    }

    /// True if nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.finis.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Jar(Vec<u8>);

    #[test]
    fn finish_runs_checks_then_drops_state() {
        let mut p = TaskPrivs::new();
        p.insert(0, Jar(b"ok".to_vec()));
        p.on_finish(Box::new(|p: &TaskPrivs| match p.get::<Jar>(0) {
            Some(j) if j.0 == b"ok" => Err("jar still full".into()),
            _ => Ok(()),
        }));
        assert_eq!(p.finish(&mut |_, _| {}), ["jar still full"]);
        assert!(p.is_empty());
        assert!(p.finish(&mut |_, _| {}).is_empty());
    }

    #[test]
    fn fini_hooks_get_values_in_creation_order() {
        fn fini_jar(j: Jar, log: &mut FiniLog<'_>) {
            log(LogKind::Debug, &j.0);
        }
        fn fini_num(n: u32, log: &mut FiniLog<'_>) {
            log(LogKind::Debug, n.to_string().as_bytes());
        }
        let mut p = TaskPrivs::new();
        assert!(!p.set_fini::<Jar>(0, fini_jar));
        p.insert(2, Jar(b"second".to_vec()));
        p.get_or_insert_with(1, || 7u32);
        p.insert(0, Jar(b"first".to_vec()));
        p.insert(9, Jar(b"no hook".to_vec()));
        p.insert(5, Jar(b"removed".to_vec()));
        assert!(p.set_fini::<Jar>(0, fini_jar));
        assert!(p.set_fini::<Jar>(2, fini_jar));
        assert!(p.set_fini::<u32>(1, fini_num));
        assert!(p.set_fini::<Jar>(5, fini_jar));
        assert!(p.remove::<Jar>(5).is_some());
        // Replacing a value keeps its rank and its hook.
        p.insert(2, Jar(b"replaced".to_vec()));
        let mut seen = Vec::new();
        p.finish(&mut |k, m| {
            assert_eq!(k, LogKind::Debug);
            seen.push(String::from_utf8(m.to_vec()).unwrap());
        });
        assert_eq!(seen, ["replaced", "7", "first"]);
        assert!(p.is_empty());
        // clear() throws state away without hooks.
        p.insert(0, Jar(b"x".to_vec()));
        p.set_fini::<Jar>(0, |_, _| panic!("hook after clear"));
        p.clear();
        assert!(p.finish(&mut |_, _| {}).is_empty());
    }

    #[test]
    fn keyed_by_type_and_number() {
        let mut p = TaskPrivs::new();
        assert!(p.is_empty());
        assert!(p.get::<Jar>(0).is_none());
        p.get_or_insert_with(0, || Jar(b"a".to_vec())).0.push(b'b');
        assert_eq!(p.get::<Jar>(0), Some(&Jar(b"ab".to_vec())));
        assert!(p.get::<Jar>(1).is_none());
        p.insert(1, Jar(b"x".to_vec()));
        p.insert(0u64, 7u32);
        assert_eq!(p.get::<u32>(0), Some(&7));
        *p.get_mut::<u32>(0).unwrap() += 1;
        assert_eq!(p.remove::<u32>(0), Some(8));
        assert!(p.get::<u32>(0).is_none());
        assert_eq!(p.get::<Jar>(1), Some(&Jar(b"x".to_vec())));
        p.clear();
        assert!(p.is_empty());
    }

    #[test]
    fn slot_keys_spread_over_the_table() {
        use std::hash::BuildHasher;
        let b = BuildHasherDefault::<KeyHasher>::default();
        let mut seen = std::collections::HashSet::new();
        for n in 0..1000u64 {
            seen.insert(b.hash_one((TypeId::of::<Jar>(), n)));
            seen.insert(b.hash_one((TypeId::of::<u32>(), n)));
        }
        assert_eq!(seen.len(), 2000, "distinct slot keys hash alike");
        let mut p = TaskPrivs::new();
        for n in 0..1000u64 {
            p.insert(n, n as u32);
        }
        assert!((0..1000u64).all(|n| p.get::<u32>(n) == Some(&(n as u32))));
    }
}
