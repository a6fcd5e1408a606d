//! Backends: connection pools and health probes.

pub mod pool;
pub mod probe;

/// The connect-error holddowns the parameters ask for.
pub fn holddown(p: &crate::runtime::params::ParamSet) -> pool::Holddown {
    let d = |name| std::time::Duration::from_secs_f64(p.duration(name).max(0.0));
    pool::Holddown {
        local: d("backend_local_error_holddown"),
        remote: d("backend_remote_error_holddown"),
    }
}
