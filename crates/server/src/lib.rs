//! The daemon: sessions, request and fetch state machines, backends, management CLI.
