//! The client side: accepting connections and reading requests (HTTP/1 in
//! [`session`], HTTP/2 in [`h2`]), the request state machine
//! ([`req_fsm`]), request bodies, delivery (conditional and range
//! decisions, delivery filters, ESI includes, transmit under send
//! timeouts), in-process connections for VCL's calls to this daemon
//! ([`loopback`]), pipe mode, the socket options VCL may set, and TLS listeners
//! ([`tls`]: the handshake before a session starts).

pub mod cond;
pub mod esi;
pub mod h2;
pub mod loopback;
pub mod pipe;
pub mod req_fsm;
pub mod req_task;
pub mod reqbody;
pub mod session;
pub mod sock;
pub mod tls;
pub mod txio;
pub mod vdp;
