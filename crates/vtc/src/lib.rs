//! The varnishtest-compatible test runner.
