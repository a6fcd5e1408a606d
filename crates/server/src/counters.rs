//! The daemon's `MAIN.*` counters, as the request and fetch paths update
//! them. Each is one relaxed atomic add on the hot path; the values are
//! published to other processes through the shared-memory counter segment.

use std::sync::atomic::{AtomicU64, Ordering};

/// One counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// The `MAIN.*` counters the server maintains itself (the cache and
        /// stores keep their own).
        #[derive(Debug, Default)]
        pub struct Counters {
            $(pub $name: Counter,)*
        }

        impl Counters {
            /// Every counter with its `MAIN.` name, in declaration order.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.get()),)*]
            }
        }
    };
}

counters!(
    sess_conn,
    sess_fail,
    sess_drop,
    sess_closed,
    sess_closed_err,
    client_req,
    client_req_400,
    client_req_417,
    cache_hit,
    cache_hit_grace,
    cache_hitpass,
    cache_hitmiss,
    cache_miss,
    backend_conn,
    backend_unhealthy,
    backend_busy,
    backend_fail,
    backend_reuse,
    backend_recycle,
    backend_retry,
    backend_req,
    fetch_failed,
    fetch_304,
    busy_sleep,
    busy_wakeup,
    s_sess,
    s_pipe,
    s_pass,
    s_fetch,
    s_bgfetch,
    s_synth,
    s_req_hdrbytes,
    s_req_bodybytes,
    s_resp_hdrbytes,
    s_resp_bodybytes,
    s_pipe_hdrbytes,
    s_pipe_in,
    s_pipe_out,
    n_purges,
    n_obj_purged,
    restarts,
    sc_rem_close,
    sc_req_close,
    sc_req_http10,
    sc_rx_bad,
    sc_rx_body,
    sc_rx_junk,
    sc_rx_overflow,
    sc_rx_timeout,
    sc_tx_pipe,
    sc_tx_error,
    sc_resp_close,
    sc_overload,
    esi_errors,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting() {
        let c = Counters::default();
        c.cache_hit.inc();
        c.s_resp_bodybytes.add(10);
        let s = c.snapshot();
        assert!(s.contains(&("cache_hit", 1)));
        assert!(s.contains(&("s_resp_bodybytes", 10)));
    }
}
