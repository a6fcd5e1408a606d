//! The shared-memory transaction log (VSL) and counters (VSC).
//!
//! The daemon writes log records and counters into two memory-mapped files
//! in its working directory (`_.vsl`, `_.vsc`); `lacquer log`, `lacquer stat`
//! and the vtc runner map them read-only in other processes.
//!
//! * [`tags`]: the table of all Varnish 7.1 log tags.
//! * [`ring`]: the log file, its writer ([`Vsl`]) and reader ([`VslReader`]).
//! * [`buf`]: the per-task hot-path buffer ([`VslBuf`], [`vsl!`]).
//! * [`group`]: grouping records into transactions (`-g raw|vxid|request|session`).
//! * [`mod@print`]: varnishlog-identical output.
//! * [`query`]: the VSL query language of vsl-query(7) (`-q`).
//! * [`vsc`]: the counters file, counter tables and varnishstat renderers.

pub mod buf;
pub mod group;
pub mod print;
pub mod query;
pub mod record;
pub mod ring;
mod shm;
pub mod tags;
pub mod vsc;

pub use buf::VslBuf;
pub use group::{Grouper, Grouping, Transaction, TxType};
pub use query::Query;
pub use record::{Record, Side, Vxid};
pub use ring::{ReadEvent, StartAt, Vsl, VslConfig, VslError, VslReader, vsl_path};
pub use tags::{Tag, TagSet};
