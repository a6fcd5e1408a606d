//! What the client side, the fetch side and the manager share while the
//! daemon runs: the tasks VCL runs for, loaded VCLs, the HTTP messages VCL
//! sees, workspaces, vxids, runtime parameters, counters and their
//! publishing, panic records and the daemon-wide state.

pub mod counters;
pub mod msg;
pub mod panic;
pub mod params;
pub mod state;
pub mod stats;
pub mod task;
pub mod tls;
pub mod tweak;
pub mod vcls;
pub mod vxid;
pub mod ws;
