//! Listen sockets follow the cache's state as varnishd's do: `stop` closes
//! them (a connection is then refused, not accepted and dropped), `start`
//! opens them again on the same address and serves.

mod common;

use std::time::Duration;

use tokio::net::TcpStream;

fn cli(l: &lacquer_server::mgt::daemon::Running, line: &str) -> u16 {
    let w: Vec<String> = line.split_whitespace().map(String::from).collect();
    lacquer_server::mgt::commands::dispatch(&l.shared, &w).status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_refuses_connections_and_start_serves_again() {
    let vcl = "vcl 4.1;\nbackend default none;\nsub vcl_recv { return (synth(200)); }\n";
    let l = common::lacquer(vcl, &[]).await;
    let addr = l.first_addr().unwrap();
    assert_eq!(common::get(addr, "/", "").await.status, 200);

    assert_eq!(cli(&l, "stop"), 200);
    // The acceptor closes the socket when it sees the stop.
    let mut refused = false;
    for _ in 0..100 {
        match TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                refused = true;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert!(refused, "a stopped cache refuses connections");

    assert_eq!(cli(&l, "start"), 200);
    let mut status = 0;
    for _ in 0..100 {
        if TcpStream::connect(addr).await.is_ok() {
            status = common::get(addr, "/", "").await.status;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, 200, "served again on the same address after start");
}
