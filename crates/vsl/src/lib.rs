//! The shared-memory transaction log (VSL) and counters (VSC).
