//! The daemon: sessions, request and fetch state machines, backends, management CLI.
//!
//! `lacquerd` is a thin command-line layer over this crate.

pub mod backend;
pub mod cli;
pub mod cond;
pub mod gzip;
pub mod listen;
pub mod params;
pub mod rfc2616;
pub mod vxid;
