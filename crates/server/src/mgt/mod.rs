//! The manager's side: starting, running and stopping the daemon, the
//! management CLI (protocol and commands), runtime parameters' commands,
//! listen and jail specifications, and the `--demo` setup.

pub mod cli;
pub mod commands;
pub mod daemon;
pub mod demo;
pub mod jail;
pub mod listen;
pub mod tls;
