//! Storage backends (stevedores): where object bodies live and how their bytes are
//! accounted.
//!
//! * [`Stevedore`] is a named store that accounts bytes (`SMA.*` counters in
//!   [`StoreStats`]); [`MallocStore`] is the in-memory implementation behind
//!   `-s malloc[,SIZE]` and the unlimited `Transient` store.
//! * [`FileStore`] (`-s file`) keeps bodies in a file, in extents of its own
//!   allocator ([`file`]), counted as `SMF.*`.
//! * [`disk`] is the persistent store (`-s mse,CONF`, `-s disk,PATH,SIZE`):
//!   bodies in the `file` store's extents plus object records and a ban
//!   journal, so the cache is found again after a restart or a crash.
//! * [`spec`] parses `-s` arguments the way varnishd accepts them.
//! * [`body`] holds an object body as a list of [`bytes::Bytes`] segments that one
//!   fetch appends to while any number of readers stream it.
//!
//! Eviction (LRU nuking) is not done here: a store only answers "allocated" or
//! "no space"; the cache crate owns the LRU lists and retries after nuking.

pub mod body;
pub mod disk;
pub mod file;
mod mapped;
pub mod spec;
mod store;

pub use body::{Body, BodyError, BodyReader, BodyWriter, Segment};
pub use disk::{DiskConfig, DiskStats, DiskStore, Recovered};
pub use file::{Advice, Extent, FileSpan, FileStats, FileStore};
pub use spec::{StorageKind, StorageSpec, StorageSpecError, parse_size, parse_storage_args};
pub use store::{Allocation, MallocStore, NoSpace, Stevedore, StoreStats};
