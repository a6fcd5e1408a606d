//! TLS for Lacquer, on both sides, with rustls and the aws-lc-rs provider.
//!
//! - [`conf`]: Hitch's `hitch.conf` format, as `lacquerd -A FILE` reads it.
//! - [`certs`]: certificate loading, the SNI choice (exact, wildcard,
//!   default) and the staged reload behind `tls.cert.*`.
//! - [`suites`]: OpenSSL cipher strings onto rustls's suites.
//! - [`tickets`]: session tickets with rotating, optionally shared keys.
//! - [`server`]: a TLS listener's handshake ([`server::TlsFrontend`]).
//! - [`client`]: `ClientConfig`s for TLS backends, shared per attribute set.
//! - [`info`]: what a connection negotiated, from a handshake or from a
//!   PROXY v2 header's TLVs, for vmod `tls` and vmod `proxy`.
//!
//! Nothing here knows about HTTP or VCL; the server crate wires it in.

pub mod certs;
pub mod client;
pub mod conf;
mod der;
#[cfg(test)]
mod handshake_tests;
pub mod info;
pub mod ja3;
pub mod ocsp;
pub mod server;
pub mod suites;
#[cfg(any(test, feature = "test-util"))]
pub mod testcerts;
pub mod tickets;

pub use der::subject_cn;
pub use rustls;
pub use suites::provider;
pub use tokio_rustls;
