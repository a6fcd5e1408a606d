//! Fuzz entry points for every parser in Lacquer that reads bytes from a
//! client, a backend, an operator or a disk (and the allocator the disk
//! stores recover into).
//!
//! Each `pub fn <target>(data: &[u8])` feeds arbitrary bytes to the real
//! parser through its public API and asserts the cheap invariants the parser
//! promises: it never panics, what it consumed lies within the input, and a
//! value it accepted, serialised again, parses back to the same value
//! (where the crate has a serialiser). A failed invariant panics, which is
//! what a fuzzer reports as a crash.
//!
//! Two drivers call these functions: the cargo-fuzz project in `fuzz/`
//! (nightly, libFuzzer, one three-line target per function), and the
//! stable smoke test in `tests/smoke.rs`, which runs every target over its
//! checked-in corpus (`fuzz/corpus/<target>/`) plus seeded pseudo-random
//! mutations of it, so the targets keep compiling and fixed crashes stay
//! fixed without nightly. [`TARGETS`] lists them by the names both use.
//!
//! The ESI parser and the `-p` parameters live in `lacquer-server`, which
//! pulls in wasmtime; they are behind the `server` feature (on by default)
//! so the fuzz project can build the other targets without it.

#![forbid(unsafe_code)]

mod disk;
mod h2;
mod http1;
mod logs;
mod snapshot;
mod text;

#[cfg(feature = "server")]
mod server;

pub use disk::{arena, disk_format, disk_index, mse_conf, storage_args};
pub use h2::{h2_frames, hpack};
pub use http1::{chunked, http_request, http_response, proxy};
pub use logs::{file_read, hist_profile, ncsa_format, vsm_index};
pub use snapshot::disk_snapshot;
pub use text::{hitch_conf, regex, tls_ja3, vcl, vsl_query};

#[cfg(feature = "server")]
pub use server::{esi, params};

/// A fuzz target: its name (the `fuzz/fuzz_targets/<name>.rs` binary and
/// the `fuzz/corpus/<name>/` directory) and its entry point.
pub type Target = (&'static str, fn(&[u8]));

/// Every target built with the enabled features.
pub const TARGETS: &[Target] = &[
    ("http_request", http_request),
    ("http_response", http_response),
    ("chunked", chunked),
    ("proxy", proxy),
    ("h2_frames", h2_frames),
    ("hpack", hpack),
    ("hitch_conf", hitch_conf),
    ("tls_ja3", tls_ja3),
    ("vcl", vcl),
    ("regex", regex),
    ("vsl_query", vsl_query),
    ("file_read", file_read),
    ("vsm_index", vsm_index),
    ("ncsa_format", ncsa_format),
    ("hist_profile", hist_profile),
    ("disk_format", disk_format),
    ("disk_index", disk_index),
    ("disk_snapshot", disk_snapshot),
    ("mse_conf", mse_conf),
    ("storage_args", storage_args),
    ("arena", arena),
    #[cfg(feature = "server")]
    ("esi", esi),
    #[cfg(feature = "server")]
    ("params", params),
];

/// Splits `data` at a point chosen from its first byte (for targets that
/// check that feeding input in two pieces gives what one piece gives).
fn split_point(data: &[u8]) -> usize {
    match data.first() {
        Some(&b) if !data.is_empty() => usize::from(b) % (data.len() + 1),
        _ => 0,
    }
}
