//! Storage backends (stevedores): where object bodies live and how their bytes are
//! accounted.
//!
//! * [`Stevedore`] is a named store that accounts bytes (`SMA.*` counters in
//!   [`StoreStats`]); [`MallocStore`] is the in-memory implementation behind
//!   `-s malloc[,SIZE]` and the unlimited `Transient` store.
//! * [`spec`] parses `-s` arguments the way varnishd accepts them.
//! * [`body`] holds an object body as a list of [`bytes::Bytes`] segments that one
//!   fetch appends to while any number of readers stream it.
//!
//! Eviction (LRU nuking) is not done here: a store only answers "allocated" or
//! "no space"; the cache crate owns the LRU lists and retries after nuking.

pub mod body;
pub mod spec;
mod store;

pub use body::{Body, BodyError, BodyReader, BodyWriter};
pub use spec::{StorageKind, StorageSpec, StorageSpecError, parse_size, parse_storage_args};
pub use store::{MallocStore, NoSpace, Stevedore, StoreStats};
