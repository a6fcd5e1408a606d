//! The backend side of a request: the fetch state machine
//! ([`fetch_fsm`]), reading backend bodies, the gzip and ESI stages a body
//! passes through on its way to storage, and the TTL rules an object
//! starts with.

pub mod bo_task;
pub mod bodyio;
pub mod esi;
pub mod fetch_fsm;
pub mod gzip;
pub mod range;
pub mod rfc2616;
