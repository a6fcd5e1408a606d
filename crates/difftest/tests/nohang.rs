//! The no-hang sweep: a stalled peer on each side of lacquerd at each
//! stage of a request (client: before the head, inside the head, inside a
//! request body, not reading the response; backend: before the response
//! head, inside the body, inside a pipe, under an ESI include, with a
//! waiting list behind the stalled fetch). Every stage must end (a response
//! or a closed connection) within the configured timeouts plus a margin,
//! and afterwards lacquerd holds no more sockets than before the sweep.
//! The same sweep runs against varnishd, which holds the expectations
//! themselves to the reference.

use lacquer_difftest::backend::Backend;
use lacquer_difftest::daemon::{Daemon, Kind, Programs};
use lacquer_difftest::scenario::{BeResp, Framing};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// The timeouts every stage is bounded by (seconds).
const TMO: &[(&str, &str)] = &[
    ("timeout_idle", "1"),
    ("send_timeout", "2"),
    ("idle_send_timeout", "1"),
    ("first_byte_timeout", "1"),
    ("between_bytes_timeout", "1"),
    ("pipe_timeout", "2"),
    ("backend_idle_timeout", "1"),
    ("connect_timeout", "1"),
];

/// Longest any stage may take: the largest timeout, twice (a timeout may
/// start only after another ends), plus scheduling margin.
const BOUND: Duration = Duration::from_secs(7);

/// A backend response that never starts or stalls inside its body.
fn stalled(url: &str, delay_ms: u64, stall_ms: u64, body: &str) -> BeResp {
    BeResp {
        url: url.into(),
        status: 200,
        reason: "OK".into(),
        headers: vec![],
        body: body.into(),
        gzip: false,
        framing: Framing::Length,
        delay_ms,
        stall_ms,
        truncate: false,
        raw: None,
    }
}

/// Reads until EOF or `BOUND`; the bytes read and whether EOF came.
fn read_to_end_bounded(s: &mut TcpStream, limit: usize) -> (usize, bool) {
    let end = Instant::now() + BOUND;
    let mut n = 0;
    let mut buf = vec![0u8; 65536];
    while Instant::now() < end && n < limit {
        let _ = s.set_read_timeout(Some(
            end.saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        ));
        match s.read(&mut buf) {
            Ok(0) => return (n, true),
            Ok(k) => n += k,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return (n, false);
            }
            Err(_) => return (n, true),
        }
    }
    (n, false)
}

fn sockets(pid_dir: &Path) -> usize {
    // The daemon's pid is in its -n directory only for varnishd; use the
    // listening port's owner instead: count every socket of processes
    // whose command line names this directory.
    let mut n = 0;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let needle = pid_dir.display().to_string();
    for p in procs.flatten() {
        let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmd).contains(&needle) {
            continue;
        }
        if let Ok(fds) = std::fs::read_dir(p.path().join("fd")) {
            for fd in fds.flatten() {
                if std::fs::read_link(fd.path())
                    .is_ok_and(|l| l.display().to_string().starts_with("socket:"))
                {
                    n += 1;
                }
            }
        }
    }
    n
}

struct Stage {
    name: &'static str,
    run: Box<dyn FnOnce(u16) -> Result<(), String> + Send>,
}

fn stages() -> Vec<Stage> {
    let mut v: Vec<Stage> = Vec::new();
    v.push(Stage {
        name: "client silent after connect",
        run: Box::new(|port| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
            match read_to_end_bounded(&mut s, 1 << 20) {
                (_, true) => Ok(()),
                (n, false) => Err(format!("still open after {BOUND:?} ({n} bytes)")),
            }
        }),
    });
    v.push(Stage {
        name: "client stalls inside the request head",
        run: Box::new(|port| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
            s.write_all(b"GET /head HTTP/1.1\r\nHost: x\r\nX-Partial: ")
                .map_err(|e| e.to_string())?;
            match read_to_end_bounded(&mut s, 1 << 20) {
                (_, true) => Ok(()),
                (n, false) => Err(format!("still open after {BOUND:?} ({n} bytes)")),
            }
        }),
    });
    v.push(Stage {
        name: "client trickles its request head a byte at a time",
        run: Box::new(|port| {
            // A slowloris client: each byte comes well inside timeout_idle,
            // the head never ends. timeout_idle bounds the whole head, so
            // the session is closed however long the client keeps on.
            let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
            s.write_all(b"GET /trickle HTTP/1.1\r\nX-Slow: ")
                .map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .map_err(|e| e.to_string())?;
            let end = Instant::now() + BOUND;
            let mut buf = [0u8; 4096];
            while Instant::now() < end {
                if s.write_all(b"x").is_err() {
                    return Ok(());
                }
                match s.read(&mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(n) => return Err(format!("answered a head that never ended ({n} bytes)")),
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => return Ok(()),
                }
            }
            Err(format!("still open after {BOUND:?} of trickling"))
        }),
    });
    v.push(Stage {
        name: "client stalls inside a passed request body",
        run: Box::new(|port| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
            s.write_all(b"POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
                .map_err(|e| e.to_string())?;
            match read_to_end_bounded(&mut s, 1 << 20) {
                (_, true) => Ok(()),
                (n, false) => Err(format!("still open after {BOUND:?} ({n} bytes)")),
            }
        }),
    });
    v.push(Stage {
        name: "client does not read a large response",
        run: Box::new(|port| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
            s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
                .map_err(|e| e.to_string())?;
            // Past send_timeout the daemon gives up; then what is buffered
            // drains and EOF (or a reset) follows, well short of the body.
            thread::sleep(Duration::from_secs(5));
            match read_to_end_bounded(&mut s, 64 << 20) {
                (n, true) if n < (16 << 20) => Ok(()),
                (n, eof) => Err(format!(
                    "read {n} bytes, eof {eof}: the send was not abandoned"
                )),
            }
        }),
    });
    for (name, path) in [
        ("backend silent before its response head", "/fbt"),
        ("backend stalls inside the body", "/bbt"),
        ("backend silent under an ESI include", "/esi"),
        (
            "backend silent with a waiting list behind the fetch",
            "/fbt",
        ),
    ] {
        v.push(Stage {
            name,
            run: Box::new(move |port| {
                let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
                s.write_all(
                    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .map_err(|e| e.to_string())?;
                match read_to_end_bounded(&mut s, 1 << 20) {
                    (_, true) => Ok(()),
                    (n, false) => Err(format!("no end after {BOUND:?} ({n} bytes)")),
                }
            }),
        });
    }
    v.push(Stage {
        name: "backend silent inside a pipe",
        run: Box::new(|port| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
            s.write_all(b"GET /pipe HTTP/1.1\r\nHost: x\r\n\r\n")
                .map_err(|e| e.to_string())?;
            match read_to_end_bounded(&mut s, 1 << 20) {
                (_, true) => Ok(()),
                (n, false) => Err(format!("pipe still open after {BOUND:?} ({n} bytes)")),
            }
        }),
    });
    v
}

const VCL: &str = r#"
sub vcl_recv {
    if (req.url == "/pipe") { return (pipe); }
    if (req.url == "/body") { return (pass); }
}
sub vcl_backend_response {
    if (bereq.url == "/esi") { set beresp.do_esi = true; }
}
"#;

fn sweep(kind: Kind) {
    let progs = Programs::build_and_find().expect("the sweep needs varnishd and lacquerd");
    let root = std::env::temp_dir().join(format!(
        "lacquer-nohang-{}-{}",
        kind.name(),
        std::process::id()
    ));
    let extra: Vec<String> = TMO
        .iter()
        .flat_map(|(k, v)| ["-p".to_string(), format!("{k}={v}")])
        .collect();
    let mut d = Daemon::start(kind, &progs, &root, &extra).expect("daemon starts");
    let big = "x".repeat(16 << 20);
    let be = Backend::start(vec![
        stalled("/fbt", 30_000, 0, "late"),
        stalled("/bbt", 0, 30_000, "0123456789abcdef"),
        stalled("/esi", 0, 0, "a<esi:include src=\"/fbt\"/>b"),
        stalled("/pipe", 30_000, 0, "late"),
        stalled("/big", 0, 0, &big),
        stalled("*", 0, 0, "ok"),
    ])
    .expect("backend starts");
    let vcl = format!(
        "vcl 4.1;\nbackend default {{ .host = \"127.0.0.1\"; .port = \"{}\"; }}\n{VCL}",
        be.port
    );
    d.load_vcl(&vcl)
        .expect("CLI works")
        .expect("the sweep's VCL compiles");
    let before = sockets(&root);
    let port = d.http_port;
    let t0 = Instant::now();
    let handles: Vec<_> = stages()
        .into_iter()
        .map(|st| {
            let name = st.name;
            (
                name,
                thread::spawn(move || {
                    let t = Instant::now();
                    let r = (st.run)(port);
                    (r, t.elapsed())
                }),
            )
        })
        .collect();
    let mut failures = Vec::new();
    for (name, h) in handles {
        match h.join() {
            Ok((Ok(()), took)) if took <= BOUND + Duration::from_secs(5) => {}
            Ok((Ok(()), took)) => failures.push(format!("{name}: took {took:?}")),
            Ok((Err(e), _)) => failures.push(format!("{name}: {e}")),
            Err(_) => failures.push(format!("{name}: panicked")),
        }
    }
    // Backend connections left by the stalls close by their timeouts.
    thread::sleep(Duration::from_secs(3));
    let after = sockets(&root);
    assert!(d.alive(), "{} died during the sweep", kind.name());
    drop(be);
    drop(d);
    let _ = std::fs::remove_dir_all(&root);
    assert!(
        failures.is_empty(),
        "{}: stages that did not end in time: {failures:#?}",
        kind.name()
    );
    assert!(
        after <= before,
        "{}: {after} sockets after the sweep, {before} before: connections leak",
        kind.name()
    );
    assert!(t0.elapsed() < Duration::from_secs(30));
}

#[test]
fn lacquerd_ends_every_stalled_stage_in_time() {
    sweep(Kind::Lacquer);
}

#[test]
fn varnishd_ends_every_stalled_stage_in_time() {
    sweep(Kind::Varnish);
}
