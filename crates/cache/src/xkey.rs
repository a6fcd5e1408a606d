//! The surrogate-key index behind vmod `xkey` (varnish-modules): every
//! object in the cache whose headers carry `xkey` (or its older name
//! `X-HashTwo`) is listed under each key those headers name, so that
//! `xkey.purge("k")` finds the objects of a key without walking the cache.
//!
//! Entries are weak references added when an object enters the cache and
//! taken out when it leaves (however it leaves), so the index holds no
//! object alive and does not keep their memory. Keys are split as the vmod
//! splits them: on white space and commas.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::object::{ObjCore, ObjectData};

/// Key → the objects tagged with it.
type KeyMap = HashMap<Box<[u8]>, Vec<Weak<ObjCore>>>;

/// The index (one per cache).
#[derive(Default)]
pub(crate) struct XkeyIndex {
    map: Mutex<KeyMap>,
}

/// The keys an object's headers tag it with (duplicates removed).
fn keys_of(data: &ObjectData) -> Vec<&[u8]> {
    let mut keys: Vec<&[u8]> = Vec::new();
    for (name, value) in data.headers.iter() {
        if name.eq_ignore_ascii_case(b"xkey") || name.eq_ignore_ascii_case(b"x-hashtwo") {
            for k in split_keys(value) {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
    }
    keys
}

/// A key list as the xkey header and `xkey.purge()` write it.
fn split_keys(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|b| b.is_ascii_whitespace() || *b == b',')
        .filter(|k| !k.is_empty())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl XkeyIndex {
    /// Runs `f` on the map and `oc`'s keys, when it has any.
    fn with_keys(&self, oc: &ObjCore, f: impl FnOnce(&mut KeyMap, Vec<&[u8]>)) {
        let Some(data) = oc.data.get() else { return };
        let keys = keys_of(data);
        if !keys.is_empty() {
            f(&mut lock(&self.map), keys);
        }
    }

    /// Lists `oc` under its keys (an object entering the cache).
    pub(crate) fn insert(&self, oc: &Arc<ObjCore>) {
        self.with_keys(oc, |map, keys| {
            for k in keys {
                map.entry(k.into()).or_default().push(Arc::downgrade(oc));
            }
        });
    }

    /// Takes `oc` out of the lists of its keys (an object leaving).
    pub(crate) fn remove(&self, oc: &ObjCore) {
        self.with_keys(oc, |map, keys| {
            for k in keys {
                if let Some(list) = map.get_mut(k) {
                    list.retain(|w| !std::ptr::eq(w.as_ptr(), oc));
                    if list.is_empty() {
                        map.remove(k);
                    }
                }
            }
        });
    }

    /// The objects listed under each of `keys`, key by key (an object
    /// tagged with two of them is in both lists).
    pub(crate) fn find(&self, keys: &[&[u8]]) -> Vec<Vec<Arc<ObjCore>>> {
        let map = lock(&self.map);
        keys.iter()
            .map(|k| {
                map.get(*k)
                    .into_iter()
                    .flatten()
                    .filter_map(Weak::upgrade)
                    .collect()
            })
            .collect()
    }
}
