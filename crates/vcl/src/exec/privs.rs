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

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// State shared by the tasks of one client request tree (Varnish's
/// `PRIV_TOP`): the top request and its ESI includes, which run one after
/// another, each locking it only while a vmod function runs.
pub type SharedPrivs = Arc<Mutex<TaskPrivs>>;

/// A check run when the task ends ([`TaskPrivs::finish`]); an error is
/// the task failing at its end (Varnish's `VRT_fail` from a `PRIV_TASK`
/// fini callback).
pub type FiniCheck = Box<dyn FnOnce(&TaskPrivs) -> Result<(), String> + Send>;

/// Type-keyed state store for one task.
#[derive(Default)]
pub struct TaskPrivs {
    slots: HashMap<(TypeId, u64), Box<dyn Any + Send>>,
    finis: Vec<FiniCheck>,
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
            .and_then(|b| b.downcast_ref::<T>())
    }

    /// The value of type `T` under `key`, mutable, if one was stored.
    pub fn get_mut<T: Any + Send>(&mut self, key: u64) -> Option<&mut T> {
        self.slots
            .get_mut(&(TypeId::of::<T>(), key))
            .and_then(|b| b.downcast_mut::<T>())
    }

    /// The value of type `T` under `key`, created with `init` on first use.
    pub fn get_or_insert_with<T: Any + Send>(
        &mut self,
        key: u64,
        init: impl FnOnce() -> T,
    ) -> &mut T {
        self.slots
            .entry((TypeId::of::<T>(), key))
            .or_insert_with(|| Box::new(init()))
            .downcast_mut::<T>()
            .expect("TaskPrivs slot holds the type it is keyed by")
    }

    /// Stores a value, replacing any previous one of the same type and key.
    pub fn insert<T: Any + Send>(&mut self, key: u64, value: T) {
        self.slots.insert((TypeId::of::<T>(), key), Box::new(value));
    }

    /// Removes and returns the value of type `T` under `key`.
    pub fn remove<T: Any + Send>(&mut self, key: u64) -> Option<T> {
        self.slots
            .remove(&(TypeId::of::<T>(), key))
            .and_then(|b| b.downcast::<T>().ok())
            .map(|b| *b)
    }

    /// Drops all state (the task is over, or is being restarted clean).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.finis.clear();
    }

    /// Registers a check to run when the task ends.
    pub fn on_finish(&mut self, check: FiniCheck) {
        self.finis.push(check);
    }

    /// Ends the task: runs the registered checks (in registration order,
    /// against the state as the task left it), then drops all state.
    /// Returns the checks' errors.
    pub fn finish(&mut self) -> Vec<String> {
        let checks = std::mem::take(&mut self.finis);
        let errors = checks.into_iter().filter_map(|c| c(self).err()).collect();
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
        assert_eq!(p.finish(), ["jar still full"]);
        assert!(p.is_empty());
        assert!(p.finish().is_empty());
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
}
