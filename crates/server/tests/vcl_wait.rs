//! VCL that waits for I/O without blocking: vmod `curl` calls suspend the
//! request's (or fetch's) VCL and the task resumes it when the answer is
//! in. The auth-offload report's VCL runs unchanged (but for the service
//! address); a call suspends in every built-in subroutine where vmod calls
//! are legal, across `restart` and `retry`; many requests waiting at once
//! on a slow service do not wait for each other.

mod common;

use std::time::{Duration, Instant};

use common::*;

const NO: Duration = Duration::ZERO;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_offload_reports_curl_vcl_runs_as_written() {
    // The OAuth service: token "good" belongs to user 42, anything else is
    // refused.
    let oauth = backend(|r| {
        if r.url == "/oauth/token_validation" && r.header("OAuth-Token") == Some("good") {
            let extra = format!(
                "OAuth-Country: CZ\r\nOAuth-User-Id: 42\r\nOAuth-User-Scope: read\r\nX-Seen-Ip: {}\r\n",
                r.header("OAuth-Ip").unwrap_or("")
            );
            (NO, ok("", &extra))
        } else {
            (NO, b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n".to_vec())
        }
    })
    .await;
    let app = backend(|r| {
        let body = format!(
            "user={} country={} scope={}",
            r.header("OAuth-User-Id").unwrap_or("-"),
            r.header("OAuth-Country").unwrap_or("-"),
            r.header("OAuth-User-Scope").unwrap_or("-")
        );
        (NO, ok(&body, "Cache-Control: max-age=0\r\n"))
    })
    .await;
    let vcl = vcl_with(
        app.addr,
        &format!(
            r#"
import curl;
sub vcl_recv {{
    curl.header_add("OAuth-Ip: " + req.http.X-Forwarded-For);
    curl.header_add("OAuth-Token: " + regsub(req.http.Authorization, "^Bearer ", ""));
    curl.fetch("http://{oauth}/oauth/token_validation");

    if (curl.status() == 200) {{
        set req.http.OAuth-Country = curl.header("OAuth-Country");
        set req.http.OAuth-User-Id = curl.header("OAuth-User-Id");
        set req.http.OAuth-User-Scope = curl.header("OAuth-User-Scope");
    }} else if (curl.status() == 0) {{
        return (synth(502, "Bad Gateway"));
    }} else {{
        return (synth(401, "Unauthorized"));
    }}
}}
"#,
            oauth = oauth.addr
        ),
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    let r = get(
        a,
        "/api",
        "Authorization: Bearer good\r\nX-Forwarded-For: 10.1.2.3\r\n",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "user=42 country=CZ scope=read");
    let seen = oauth.last();
    assert_eq!(seen.header("OAuth-Token"), Some("good"));
    // Lacquer appends the client address to X-Forwarded-For, as varnishd.
    assert!(seen.header("OAuth-Ip").unwrap().starts_with("10.1.2.3"));
    let r = get(a, "/api", "Authorization: Bearer bad\r\n").await;
    assert_eq!(r.status, 401);
    assert_eq!(app.count(), 1);
    // Calls to the service reuse one pooled connection.
    assert_eq!(oauth.count(), 2);

    // The service down: status 0, the VCL's 502.
    let dead = {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    let vcl_dead = vcl.replace(&oauth.addr.to_string(), &dead.to_string());
    let l2 = lacquer(&vcl_dead, &[]).await;
    let r = get(
        l2.first_addr().unwrap(),
        "/api",
        "Authorization: Bearer good\r\n",
    )
    .await;
    assert_eq!(r.status, 502);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_lacquerds_own_address_is_served_in_process() {
    // The report's layout: the VCL calls its own cache (`localhost:6081`
    // there), which caches the token service's answers per token.
    let oauth = backend(|r| {
        let user = r.header("OAuth-Token").unwrap_or("-").to_string();
        (NO, ok("valid", &format!("OAuth-User-Id: {user}\r\n")))
    })
    .await;
    let port = {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let vcl = vcl_with(
        oauth.addr,
        &format!(
            r#"
import curl;
import std;
sub vcl_recv {{
    if (req.url == "/oauth/token_validation") {{
        return (hash);
    }}
    curl.header_add("OAuth-Token: " + regsub(req.http.Authorization, "^Bearer ", ""));
    curl.fetch("http://localhost:{port}/oauth/token_validation");
    return (synth(200));
}}
sub vcl_hash {{
    if (req.url == "/oauth/token_validation") {{
        hash_data(req.http.OAuth-Token);
    }}
}}
sub vcl_backend_response {{
    set beresp.ttl = 1h;
}}
sub vcl_deliver {{
    set resp.http.X-Peer-Port = std.port(client.ip);
}}
sub vcl_synth {{
    set resp.http.X-User = curl.header("OAuth-User-Id");
    set resp.http.X-Inner-Peer-Port = curl.header("X-Peer-Port");
    set resp.http.X-Body = curl.body();
}}
"#
        ),
    );
    let l = lacquer_on(&vcl, &[], &format!("127.0.0.1:{port}")).await;
    let a = l.first_addr().unwrap();
    for (token, fetches) in [("t1", 1), ("t1", 1), ("t2", 2), ("t1", 2)] {
        let r = get(a, "/api", &format!("Authorization: Bearer {token}\r\n")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("X-User"), Some(token));
        assert_eq!(r.header("X-Body"), Some("valid"));
        // The inner request came through a session with no socket: its
        // client port is 0 (over TCP it would be an ephemeral port).
        assert_eq!(r.header("X-Inner-Peer-Port"), Some("0"));
        // The token service's answers are cached per token.
        assert_eq!(oauth.count(), fetches);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_suspends_in_every_subroutine_across_restart_and_retry() {
    // The service answers with the subroutine named in its URL.
    let svc = backend(|r| (NO, ok("", &format!("X-Sub: {}\r\n", &r.url[1..])))).await;
    let app = backend(|r| {
        let status = if r.url == "/error" { 500 } else { 200 };
        let out = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nX-Bereq-Trace: {}\r\n\r\nok",
            r.header("X-Trace").unwrap_or("")
        );
        (NO, out.into_bytes())
    })
    .await;
    let dead = {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    let vcl = vcl_with(
        app.addr,
        &format!(
            r#"
import curl;
backend dead {{ .host = "{dh}"; .port = "{dp}"; }}
sub do_call {{
    # Suspends inside a custom subroutine, inside an if.
    if (true) {{
        curl.get("http://{svc}/" + req.http.X-Sub);
    }}
}}
sub vcl_recv {{
    set req.http.X-Sub = "recv" + req.restarts;
    call do_call;
    set req.http.X-Trace = req.http.X-Trace + curl.header("X-Sub") + ",";
    if (req.method == "PURGE") {{ return (purge); }}
    if (req.url == "/synth") {{ return (synth(299, "S")); }}
    if (req.url == "/pass") {{ return (pass); }}
    if (req.url == "/dead") {{ set req.backend_hint = dead; return (pass); }}
    if (req.method == "PIPE") {{ return (pipe); }}
}}
sub vcl_hash {{
    curl.get("http://{svc}/hash");
    set req.http.X-Trace = req.http.X-Trace + curl.header("X-Sub") + ",";
}}
sub vcl_hit {{
    curl.get("http://{svc}/hit");
    set req.http.X-Trace = req.http.X-Trace + curl.header("X-Sub") + ",";
}}
sub vcl_miss {{
    curl.get("http://{svc}/miss");
    set req.http.X-Trace = req.http.X-Trace + curl.header("X-Sub") + ",";
}}
sub vcl_pass {{
    curl.get("http://{svc}/pass");
    set req.http.X-Trace = req.http.X-Trace + curl.header("X-Sub") + ",";
}}
sub vcl_purge {{
    curl.get("http://{svc}/purge");
    return (synth(200, "purged " + curl.header("X-Sub")));
}}
sub vcl_pipe {{
    curl.get("http://{svc}/pipe");
    set bereq.http.X-Trace = curl.header("X-Sub");
}}
sub vcl_backend_fetch {{
    curl.get("http://{svc}/fetch" + bereq.retries);
    set bereq.http.X-Trace = bereq.http.X-Trace + curl.header("X-Sub") + ",";
}}
sub vcl_backend_response {{
    curl.get("http://{svc}/response" + bereq.retries);
    set beresp.http.X-Be-Trace = beresp.http.X-Be-Trace + curl.header("X-Sub") + ",";
    if (bereq.retries == 0 && bereq.url != "/pass") {{ return (retry); }}
    set beresp.http.X-Be-Trace = bereq.http.X-Trace;
}}
sub vcl_backend_error {{
    curl.get("http://{svc}/error");
    set beresp.http.X-Be-Trace = curl.header("X-Sub");
    set beresp.status = 200;
    return (deliver);
}}
sub vcl_deliver {{
    curl.get("http://{svc}/deliver" + req.restarts);
    set req.http.X-Trace = req.http.X-Trace + curl.header("X-Sub") + ",";
    if (req.restarts == 0 && req.url == "/obj") {{ return (restart); }}
    set resp.http.X-Trace = req.http.X-Trace;
}}
sub vcl_synth {{
    curl.get("http://{svc}/synth");
    set resp.http.X-Trace = req.http.X-Trace + curl.header("X-Sub");
    return (deliver);
}}
"#,
            svc = svc.addr,
            dh = dead.ip(),
            dp = dead.port()
        ),
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();

    // miss, a fetch retried once, deliver, restart, then a hit.
    let r = get(a, "/obj", "").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("x-trace"),
        Some("recv0,hash,miss,deliver0,recv1,hash,hit,deliver1,")
    );
    // The fetch: bereq starts from the request's trace, and the retry ran
    // vcl_backend_fetch again on the same bereq (a retry keeps bereq).
    assert_eq!(
        r.header("x-be-trace"),
        Some("recv0,hash,miss,fetch0,fetch1,")
    );
    assert_eq!(app.count(), 2);

    let r = get(a, "/pass", "").await;
    assert_eq!(r.header("x-trace"), Some("recv0,hash,pass,deliver0,"));
    assert_eq!(r.header("x-be-trace"), Some("recv0,hash,pass,fetch0,"));

    let r = get(a, "/synth", "").await;
    assert_eq!(r.status, 299);
    // As varnishd, vcl_hash runs after vcl_recv whatever it returned.
    assert_eq!(r.header("x-trace"), Some("recv0,hash,synth"));

    let r = get(a, "/dead", "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-be-trace"), Some("error"));

    let r = raw(a, b"PURGE /obj HTTP/1.1\r\nHost: test\r\n\r\n", false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-trace"), Some("recv0,hash,synth"));

    let r = raw(
        a,
        b"PIPE /piped HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-bereq-trace"), Some("pipe"));

    let subs: Vec<String> = svc
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.url.clone())
        .collect();
    for want in [
        "/recv0",
        "/recv1",
        "/hash",
        "/hit",
        "/miss",
        "/pass",
        "/purge",
        "/pipe",
        "/fetch0",
        "/fetch1",
        "/response0",
        "/response1",
        "/error",
        "/deliver0",
        "/deliver1",
        "/synth",
    ] {
        assert!(
            subs.iter().any(|s| s == want),
            "{want} not called: {subs:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_on_a_slow_service_do_not_wait_for_each_other() {
    let slow = backend(|_| (Duration::from_millis(100), ok("", "X-Ok: 1\r\n"))).await;
    let vcl = vcl_with(
        slow.addr,
        &format!(
            r#"
import curl;
sub vcl_recv {{
    curl.get("http://{}/check");
    return (synth(200 + curl.status() - 200, curl.header("X-Ok")));
}}
"#,
            slow.addr
        ),
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    let n = 300;
    let threads = || std::fs::read_dir("/proc/self/task").unwrap().count();
    // Warm up (the runtime's blocking pool, pooled connections).
    assert_eq!(get(a, "/", "").await.status, 200);
    let threads_before = threads();
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| tokio::spawn(async move { get(a, "/", "").await.status }))
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Every request is waiting on the service now: no thread per call.
    let threads_during = threads();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let took = t0.elapsed();
    assert!(
        threads_during <= threads_before + 2,
        "threads grew from {threads_before} to {threads_during} with {n} calls waiting"
    );
    // Two worker threads blocked per call would need n * 100 ms / 2 = 15 s.
    assert!(took < Duration::from_secs(5), "{n} requests took {took:?}");
    assert_eq!(slow.count(), n + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_in_vcl_recv_run_beside_a_connection_owed_100_continue() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let svc = backend(|_| (Duration::from_millis(50), ok("", "X-Ok: yes\r\n"))).await;
    let app = backend(|r| (NO, ok(&String::from_utf8_lossy(&r.body), ""))).await;
    // std.cache_req_body() in vcl_recv of a request owed 100 Continue runs
    // vcl_recv on a thread of its own; the curl call blocks that thread.
    let vcl = vcl_with(
        app.addr,
        &format!(
            r#"
import std;
import curl;
sub vcl_recv {{
    std.cache_req_body(1KB);
    curl.get("http://{}/check");
    set req.http.X-Ok = curl.header("X-Ok");
    return (pass);
}}
sub vcl_deliver {{
    set resp.http.X-Ok = req.http.X-Ok;
}}
"#,
            svc.addr
        ),
    );
    let l = lacquer(&vcl, &[]).await;
    let a = l.first_addr().unwrap();
    let mut s = tokio::net::TcpStream::connect(a).await.unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        .await
        .unwrap();
    let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
    let mut got = vec![0u8; interim.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
        .await
        .expect("no 100 Continue within 5 s")
        .unwrap();
    assert_eq!(&got[..], interim);
    s.write_all(b"hello").await.unwrap();
    let r = read_resp(&mut s, false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ok"), Some("yes"));
    assert_eq!(r.text(), "hello");
}

/// libvmod-curl users call it in `vcl_init` (to fetch configuration):
/// there the management path blocks on the call while the runtime's
/// workers do the I/O, and what it fetched serves every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_vcl_init_fetches_configuration() {
    let conf = backend(|r| {
        let body = if r.url == "/config" { "blue" } else { "?" };
        (Duration::from_millis(50), ok(body, "X-Mode: strict\r\n"))
    })
    .await;
    let vcl = vcl_with(
        conf.addr,
        &format!(
            r#"
import curl;
import var;
sub vcl_init {{
    curl.get("http://{c}/config");
    if (curl.status() != 200) {{
        return (fail);
    }}
    var.global_set("colour", curl.body());
    var.global_set("mode", curl.header("X-Mode"));
    curl.free();
}}
sub vcl_recv {{
    return (synth(200, var.global_get("colour") + "/" + var.global_get("mode")));
}}
"#,
            c = conf.addr
        ),
    );
    let l = lacquer(&vcl, &[]).await;
    assert_eq!(conf.count(), 1);
    let r = get(l.first_addr().unwrap(), "/", "").await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("blue/strict"), "{}", r.text());
    // Requests do not call the service again.
    assert_eq!(conf.count(), 1);
}
