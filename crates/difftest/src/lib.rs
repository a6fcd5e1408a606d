//! Differential testing of lacquerd against varnishd 7.1: the same
//! scenario (VCL, scripted backend, scripted client) runs on both daemons
//! and the normalised transcripts are compared. `grammar` makes scenarios from
//! a seed by the thousand (with `axes` laid over them), `runner::minimise` shrinks a difference to a
//! small case saved under `tests/diff/cases/`, and `tests/regressions.rs`
//! replays those cases. Deliberate differences are listed, with reasons,
//! in `tests/diff/DEVIATIONS.md`.

pub mod axes;
pub mod backend;
pub mod cli;
pub mod client;
pub mod cond;
pub mod daemon;
pub mod grammar;
pub mod magento;
pub mod rng;
pub mod runner;
pub mod scenario;
