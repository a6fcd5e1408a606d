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

pub mod ban;
mod banlist;
mod cache;
pub mod hash;
mod headers;
mod lru;
mod object;
pub mod stats;
pub mod vary;

pub use ban::{BanError, BanObject, BanRequest, BanSpec};
pub use banlist::BanInfo;
pub use cache::{
    BusyObj, Cache, CacheConfig, FetchBody, Lookup, LookupRequest, LookupResult, LurkerReport,
    NewBody, NewObject, StorageError, Unbusied, Waiter,
};
pub use hash::{Digest, HashBuilder, digest_hex};
pub use headers::StoredHeaders;
pub use lacquer_storage::{Body, BodyError, BodyReader, MallocStore, Stevedore, StoreStats};
pub use lru::StoreRef;
pub use object::{ObjFlags, ObjKind, ObjMeta, ObjRef, ObjectData};
pub use stats::CacheStats;
pub use vary::{HeaderLookup, VarySpec};
