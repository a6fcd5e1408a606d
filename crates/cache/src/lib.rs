//! Object heads, lookup, waiting lists, expiry and bans: the object cache core of
//! a Varnish-compatible cache.
//!
//! The server drives it: it computes the digest with [`HashBuilder`], calls
//! [`Cache::lookup`] and acts on the [`Lookup`] decision (deliver a hit, fetch into
//! a [`BusyObj`], wait on a [`Waiter`], pass). A fetch inserts its object with
//! [`BusyObj::unbusy`] and streams the body through [`FetchBody`] while any number
//! of clients read it. Purges, bans ([`Cache::ban`], [`Cache::ban_lurker_step`])
//! and expiry ([`Cache::expire_due`]) remove objects; full stores evict through
//! per-store LRU lists. Counters are in [`CacheStats`].
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use lacquer_cache::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let stores = lacquer_storage::parse_storage_args(&["malloc,64m"]).unwrap();
//! let stores = stores.iter().map(|s| s.build().unwrap()).collect();
//! let cache = Cache::new(CacheConfig::default(), stores, 0.0);
//!
//! // vcl_hash: hash_data(req.url); hash_data(req.http.host)
//! let mut h = HashBuilder::new();
//! h.hash_data(b"/index.html");
//! h.hash_data(b"example.com");
//! let digest = h.finish();
//! let req_headers: Vec<(&str, &str)> = vec![("Host", "example.com")];
//! let now = 1_700_000_000.0;
//!
//! let req = LookupRequest::new(&digest, b"/index.html", &req_headers, now);
//! let obj = loop {
//!     match cache.lookup(&req).kind {
//!         Lookup::Hit(obj) => break obj,
//!         Lookup::Busy(waiter) => waiter.wait().await, // then look up again
//!         Lookup::Miss { busy, stale: _ } => {
//!             // ... fetch from the backend, run vcl_backend_response ...
//!             let s0 = cache.store("s0").unwrap();
//!             let new = NewObject {
//!                 meta: ObjMeta { vxid: 1002, t_origin: now, ttl: 120.0, grace: 10.0,
//!                                 keep: 0.0, kind: ObjKind::Normal },
//!                 status: 200,
//!                 reason: Bytes::from_static(b"OK"),
//!                 headers: vec![(Bytes::from_static(b"Content-Type"), Bytes::from_static(b"text/html"))],
//!                 gzip: false,
//!                 esi: None,
//!                 gzip_changed: false,
//!                 body_chunk: None,
//!                 vary_bytes: None,
//!                 body: NewBody::Streamed,
//!             };
//!             let mut inserted = busy.unbusy(new, &s0).expect("storage");
//!             let mut body = inserted.body.take().unwrap();
//!             body.push(Bytes::from_static(b"<html>hello</html>")).expect("storage");
//!             body.finish();
//!             break inserted.obj;
//!         }
//!         other => unreachable!("{other:?}"),
//!     }
//! };
//! let mut reader = obj.body().reader();
//! let first = reader.next().await.unwrap().unwrap();
//! assert_eq!(&first[..], b"<html>hello</html>");
//! assert!(matches!(cache.lookup(&req).kind, Lookup::Hit(_)));
//! # }
//! ```

pub mod ban;
mod banlist;
mod cache;
pub mod hash;
mod headers;
pub mod hooks;
mod lru;
mod object;
pub mod stats;
pub mod vary;
mod xkey;

pub use ban::{BanError, BanObject, BanRequest, BanSpec};
pub use banlist::BanInfo;
pub use cache::{
    BusyObj, Cache, CacheConfig, CacheEvent, Charge, EventSink, FetchBody, Lifetime, Lookup,
    LookupRequest, LookupResult, LurkerReport, NewBody, NewObject, PiecePlan, StorageError,
    StoredUpdate, Unbusied, Waiter,
};
pub use hash::{Digest, HashBuilder, digest_hex};
pub use headers::StoredHeaders;
pub use hooks::{HookVerdict, LookupHook, ObjEvent, ObjEventFn};
pub use lacquer_storage::{
    Allocation, Body, BodyError, BodyReader, MallocStore, Stevedore, StoreStats,
};
pub use lru::StoreRef;
pub use object::{ObjFlags, ObjKind, ObjMeta, ObjRef, ObjectData};
pub use stats::CacheStats;
pub use vary::{HeaderLookup, VarySpec};
