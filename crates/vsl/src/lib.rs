//! The shared-memory transaction log (VSL) and counters (VSC).
//!
//! The daemon writes log records and counters into two memory-mapped files
//! in its working directory (`_.vsm_child/_.vsl`, `_.vsm_child/_.vsc`,
//! listed in that directory's index, see [`vsm`]); `lacquer log`, `lacquer stat`
//! and the vtc runner map them read-only in other processes.
//!
//! * [`tags`]: the table of all Varnish 7.1 log tags.
//! * [`ring`]: the log file, its writer ([`Vsl`]) and reader ([`VslReader`]).
//! * [`buf`]: the per-task hot-path buffer ([`VslBuf`], [`vsl!`]).
//! * [`file`]: Varnish's binary log file format (`varnishlog -w`/`-r`).
//! * [`group`]: grouping records into transactions (`-g raw|vxid|request|session`).
//! * [`mod@print`]: varnishlog-identical output and record filters.
//! * [`query`]: the VSL query language of vsl-query(7) (`-q`).
//! * [`re`]: regular expressions with PCRE-worded errors (`-I`, `-X`, `~`).
//! * [`vsc`]: the counters file, counter tables and varnishstat renderers.
//!
//! # Example
//! ```
//! use lacquer_vsl::print::{PrintOptions, format_group};
//! use lacquer_vsl::vsc::tables::{MAIN, Main};
//! use lacquer_vsl::vsc::{Vsc, VscConfig, VscReader, lookup, render_once, vsc_path};
//! use lacquer_vsl::*;
//!
//! let dir = std::env::temp_dir().join(format!("lq-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//!
//! // Daemon side: one log for the process, one buffer per task.
//! let cfg = VslConfig { space: 1 << 20, ..VslConfig::default() };
//! let log = Vsl::create(&vsl_path(&dir), &cfg).unwrap();
//! let mut reader = VslReader::open(&vsl_path(&dir), StartAt::Oldest).unwrap();
//! {
//!     let mut req = VslBuf::new(log.clone(), Vxid::client(1001));
//!     vsl!(req, Tag::Begin, "req {} rxreq", 1000);
//!     req.log_str(Tag::ReqURL, "/");
//!     req.log_header(Tag::ReqHeader, b"Host", b"example.com");
//!     req.log_str(Tag::End, "");
//! } // dropped: published in one batch
//! log.log_immediate(Tag::CLI, Vxid::NONE, format_args!("Rd {}", "ping"));
//!
//! // Reader side: group, filter with a query, print like varnishlog.
//! let query = Query::parse("ReqURL eq \"/\"").unwrap();
//! let mut grouper = Grouper::new(Grouping::Request);
//! let mut out = String::new();
//! while let ReadEvent::Record(rec) = reader.next_event() {
//!     for group in grouper.push(rec) {
//!         if query.matches(&group) {
//!             out += &format_group(&group, PrintOptions::default(), &|_| true);
//!         }
//!     }
//! }
//! assert_eq!(
//!     out,
//!     "*   << Request  >> 1001      \n-   Begin          req 1000 rxreq\n\
//!      -   ReqURL         /\n-   ReqHeader      Host: example.com\n-   End            \n\n"
//! );
//!
//! // Counters: a section handle on the hot path, snapshots for tools.
//! let vsc = Vsc::create(&vsc_path(&dir), &VscConfig::default()).unwrap();
//! let main = vsc.add_section(&MAIN, "MAIN").unwrap();
//! main.inc(Main::cache_hit);
//! let snap = VscReader::open(&vsc_path(&dir)).unwrap().snapshot().unwrap();
//! assert_eq!(lookup(&snap, "cache_hit").unwrap().value, 1);
//! assert!(render_once(&snap).contains("         1         0.00 Cache hits\n"));
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

pub mod buf;
pub mod file;
pub mod group;
pub mod print;
pub mod query;
pub mod re;
pub mod record;
pub mod ring;
mod shm;
pub mod tags;
pub mod vsc;
pub mod vsm;

pub use buf::{VslBuf, push_fixed6, push_u64, u64_digits};
pub use group::{Grouper, Grouping, Transaction, TxType};
pub use query::Query;
pub use record::{Record, Side, Vxid};
pub use ring::{ReadEvent, StartAt, Vsl, VslConfig, VslError, VslReader, VslStats, vsl_path};
pub use tags::{Tag, TagSet};

// The daemon shares these across threads: keep them Send + Sync.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    fn sendable<T: Send>() {}
    shared::<Vsl>();
    shared::<vsc::Vsc>();
    shared::<vsc::Section>();
    sendable::<VslBuf>();
    sendable::<VslReader>();
    sendable::<vsc::VscReader>();
};
