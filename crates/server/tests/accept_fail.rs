//! A failed `accept()` (here: out of file descriptors) is counted by cause
//! and logged as varnishd does, and the listener recovers. Its own test
//! binary: it lowers the process's descriptor limit.

mod common;

use std::time::Duration;

use common::*;
use lacquer_server::runtime::counters::Main;
use nix::sys::resource::{Resource, getrlimit, setrlimit};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_out_of_descriptors_is_counted_and_recovers() {
    let l = lacquer("vcl 4.1; backend b none;", &[]).await;
    let a = l.first_addr().unwrap();
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    // One descriptor left: the client's socket takes it, accept() gets none.
    setrlimit(Resource::RLIMIT_NOFILE, open, hard).unwrap();
    let client = std::net::TcpStream::connect(a);
    let t0 = std::time::Instant::now();
    while l.shared.counters.get(Main::sess_fail_emfile) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "no EMFILE counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    assert!(l.shared.counters.get(Main::sess_fail) >= 1);
    assert_eq!(l.shared.counters.get(Main::sess_fail_other), 0);
    drop(client);
    // The listener still serves.
    let r = get(a, "/", "").await;
    assert_eq!(r.status, 503);
}
