//! The daemon: sessions, request and fetch state machines, backends, management CLI.
//!
//! `lacquerd` is a thin command-line layer over this crate. Its modules are
//! grouped by the role they play, as varnishd separates its manager from
//! the client and backend sides of its cache process:
//!
//! * [`mgt`]: starting and stopping the daemon, the management CLI and its
//!   commands, listen and jail specifications, the demo setup.
//! * [`client`]: client connections (HTTP/1 and HTTP/2), the request state
//!   machine, request bodies, delivery and its filters, pipe.
//! * [`fetch`]: the backend fetch state machine, body reading, gzip
//!   filters, TTL rules.
//! * [`backend`]: connection pools and health probes.
//! * [`esi`]: the ESI parser and the instruction list stored with objects.
//! * [`runtime`]: what every side shares while VCL runs: tasks, loaded VCLs,
//!   HTTP messages, workspaces, vxids, parameters, counters, daemon state.
//!
//! ARCHITECTURE.md states which group may use which.

pub mod backend;
pub mod client;
pub mod esi;
pub mod fetch;
pub mod mgt;
pub mod runtime;
