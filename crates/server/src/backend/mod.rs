//! Backends: connection pools and health probes.

pub mod pool;
pub mod probe;
