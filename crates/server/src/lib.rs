//! The daemon: sessions, request and fetch state machines, backends, management CLI.
//!
//! `lacquerd` is a thin command-line layer over this crate.

pub mod backend;
pub mod bodyio;
pub mod cli;
pub mod cond;
pub mod counters;
pub mod daemon;
pub mod demo;
pub mod esi;
pub mod fetch;
pub mod gzip;
pub mod h2;
pub mod jail;
pub mod listen;
pub mod mgt;
pub mod msg;
pub mod panic;
pub mod params;
pub mod pipe;
pub mod req;
pub mod reqbody;
pub mod rfc2616;
pub mod session;
pub mod sock;
pub mod state;
pub mod stats;
pub mod task;
pub mod tls;
pub mod txio;
pub mod vcls;
pub mod vdp;
pub mod vxid;
pub mod ws;
