//! VCL hot reload under load: client tasks hammer the cache over
//! keep-alive connections while the test loads, uses, labels and discards
//! VCLs through the management CLI. Nothing may fail or drop, a request
//! that starts after `vcl.use` returns runs the new VCL, a request in
//! flight keeps the VCL it started with, cached objects survive every
//! switch, and a discarded VCL's backends (and their counters) go away.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::*;
use lacquer_http::{BodyKind, Limits, parse_response_buf};
use lacquer_server::mgt::daemon::Running;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Objects the load spreads over.
const OBJECTS: usize = 8;
/// Client tasks.
const CLIENTS: usize = 4;
/// Upper bound of requests per client task.
const MAX_PER_CLIENT: u64 = 50_000;

/// A VCL named by `tag`: its deliveries carry `X-Vcl: <tag>`, `/slow`
/// passes, and (once the label exists, `switch`) a request with `X-Label`
/// switches to the VCL labelled `lab`.
fn vcl(be: SocketAddr, tag: &str, switch: bool) -> String {
    let switch = if switch {
        "if (req.http.X-Label) { return (vcl(lab)); }"
    } else {
        ""
    };
    vcl_with(
        be,
        &format!(
            r#"
sub vcl_recv {{
    {switch}
    if (req.url == "/slow") {{ return (pass); }}
}}
sub vcl_deliver {{ set resp.http.X-Vcl = "{tag}"; }}
"#
        ),
    )
}

/// A labelled VCL: no `return (vcl())` of its own.
fn label_vcl(be: SocketAddr, tag: &str) -> String {
    vcl_with(
        be,
        &format!("sub vcl_deliver {{ set resp.http.X-Vcl = \"{tag}\"; }}\n"),
    )
}

/// Runs one CLI command (the words as the CLI parser would give them);
/// returns the reply body, failing the test on a non-200 status.
fn cli(l: &Running, words: &[&str]) -> String {
    let w: Vec<String> = words.iter().map(|s| s.to_string()).collect();
    let r = lacquer_server::mgt::commands::dispatch(&l.shared, &w);
    assert_eq!(r.status, 200, "{words:?}: {}", r.body);
    r.body
}

fn cli_status(l: &Running, words: &[&str]) -> (u16, String) {
    let w: Vec<String> = words.iter().map(|s| s.to_string()).collect();
    let r = lacquer_server::mgt::commands::dispatch(&l.shared, &w);
    (r.status, r.body)
}

/// A keep-alive client connection with a read buffer.
struct Conn {
    s: TcpStream,
    buf: BytesMut,
}

impl Conn {
    async fn open(a: SocketAddr) -> Conn {
        Conn {
            s: TcpStream::connect(a).await.unwrap(),
            buf: BytesMut::with_capacity(4096),
        }
    }

    /// One request and its response: (status, X-Vcl, body), or an error
    /// saying what went wrong.
    async fn get(&mut self, url: &str, extra: &str) -> Result<(u16, String, Vec<u8>), String> {
        let req = format!("GET {url} HTTP/1.1\r\nHost: t\r\n{extra}\r\n");
        self.s
            .write_all(req.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let head = loop {
            if let Some(h) = parse_response_buf(&mut self.buf, &Limits::response())
                .map_err(|e| format!("bad response: {e}"))?
            {
                break h;
            }
            self.fill().await?;
        };
        let n = match head.body_kind(false).map_err(|e| e.to_string())? {
            BodyKind::Length(n) => n as usize,
            BodyKind::None => 0,
            other => return Err(format!("unexpected framing {other:?}")),
        };
        while self.buf.len() < n {
            self.fill().await?;
        }
        let body = self.buf.split_to(n).to_vec();
        let xvcl = head
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(b"x-vcl"))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default();
        Ok((head.status, xvcl, body))
    }

    async fn fill(&mut self) -> Result<(), String> {
        match tokio::time::timeout(Duration::from_secs(10), self.s.read_buf(&mut self.buf)).await {
            Err(_) => Err("no response within 10 s".to_string()),
            Ok(Err(e)) => Err(format!("read: {e}")),
            Ok(Ok(0)) => Err("connection closed by the server".to_string()),
            Ok(Ok(_)) => Ok(()),
        }
    }
}

fn body_of(url: &str) -> String {
    format!("object {url}")
}

fn counter(l: &Running, name: &str) -> Option<u64> {
    let path = lacquer_vsl::vsc::vsc_path(&l.shared.workdir);
    let snap = lacquer_vsl::vsc::VscReader::open(&path)
        .unwrap()
        .snapshot()
        .unwrap();
    lacquer_vsl::vsc::lookup(&snap, name).map(|c| c.value)
}

fn vbe_sections(l: &Running, vcl: &str) -> usize {
    let path = lacquer_vsl::vsc::vsc_path(&l.shared.workdir);
    let snap = lacquer_vsl::vsc::VscReader::open(&path)
        .unwrap()
        .snapshot()
        .unwrap();
    let prefix = format!("VBE.{vcl}.");
    snap.iter().filter(|c| c.name.starts_with(&prefix)).count()
}

/// Waits up to 3 s for `cond`.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load_loses_nothing() {
    let be = backend(|r| {
        if r.url == "/slow" {
            (Duration::from_millis(1500), ok("slow", ""))
        } else {
            (
                Duration::ZERO,
                ok(&body_of(&r.url), "Cache-Control: max-age=3600\r\n"),
            )
        }
    })
    .await;
    let l = Arc::new(lacquer(&vcl(be.addr, "boot", false), &[]).await);
    let a = l.first_addr().unwrap();
    // The label the VCLs switch to must exist before they are loaded.
    cli(&l, &["vcl.inline", "lab_a", &label_vcl(be.addr, "label-a")]);
    cli(&l, &["vcl.label", "lab", "lab_a"]);

    // Warm the cache: one fetch per object.
    let mut c = Conn::open(a).await;
    for i in 0..OBJECTS {
        let url = format!("/obj/{i}");
        let (st, _, body) = c.get(&url, "").await.unwrap();
        assert_eq!((st, body), (200, body_of(&url).into_bytes()));
    }
    assert_eq!(be.count(), OBJECTS);
    let hits_before = counter(&l, "MAIN.cache_hit").unwrap();

    // The load.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    // 0 while `boot` is active, i + 1 once `vcl.use v<i>` returned.
    let generation = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for k in 0..CLIENTS {
        let (stop, served, generation) = (stop.clone(), served.clone(), generation.clone());
        clients.push(tokio::spawn(async move {
            let mut c = Conn::open(a).await;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < MAX_PER_CLIENT {
                let url = format!("/obj/{}", (n as usize + k) % OBJECTS);
                let g = generation.load(Ordering::Acquire);
                let (st, xvcl, body) = c
                    .get(&url, "")
                    .await
                    .map_err(|e| format!("client {k} request {n}: {e}"))?;
                if st != 200 || body != body_of(&url).as_bytes() || xvcl.is_empty() {
                    return Err(format!(
                        "client {k} request {n}: status {st}, X-Vcl {xvcl:?}, body {:?}",
                        String::from_utf8_lossy(&body)
                    ));
                }
                // A request that starts after `vcl.use` runs that VCL or
                // a newer one, on a connection that was open before.
                let ran = match xvcl.strip_prefix("tag-") {
                    Some(j) => j.parse::<u64>().map_err(|e| format!("{xvcl:?}: {e}"))? + 1,
                    None => 0,
                };
                if ran < g {
                    return Err(format!(
                        "client {k} request {n}: ran {xvcl} after generation {g} was in use"
                    ));
                }
                n += 1;
                served.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<u64, String>(n)
        }));
    }

    // A request in flight at a switch keeps its VCL.
    let slow = tokio::spawn(async move {
        let mut c = Conn::open(a).await;
        c.get("/slow", "").await
    });
    eventually("the slow request reaches the backend", || {
        be.seen.lock().unwrap().iter().any(|r| r.url == "/slow")
    })
    .await;

    // Reloads: load, use, check at once on a fresh connection, discard the
    // one before the previous (cold first), relabel now and then.
    let mut probe = Conn::open(a).await;
    let rounds = 30u64;
    let mut label_target = "lab_a".to_string();
    let mut discarded_targets = Vec::new();
    for i in 0..rounds {
        let name = format!("v{i}");
        let tag = format!("tag-{i}");
        cli(&l, &["vcl.inline", &name, &vcl(be.addr, &tag, true)]);
        let t = Instant::now();
        cli(&l, &["vcl.use", &name]);
        generation.store(i + 1, Ordering::Release);
        let (st, xvcl, _) = probe.get("/obj/0", "").await.unwrap();
        assert_eq!((st, xvcl.as_str()), (200, tag.as_str()), "round {i}");
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "the new VCL answered {:?} after vcl.use",
            t.elapsed()
        );
        if i >= 2 {
            let old = format!("v{}", i - 2);
            // Its backend counters exist, so their removal below means
            // something.
            eventually("the VBE counters of a loaded VCL", || {
                vbe_sections(&l, &old) > 0
            })
            .await;
            cli(&l, &["vcl.state", &old, "cold"]);
            cli(&l, &["vcl.discard", &old]);
        }
        if i % 10 == 5 {
            // Move the label to a fresh VCL, then drop the old target.
            let target = format!("lab_{i}");
            cli(&l, &["vcl.inline", &target, &label_vcl(be.addr, &target)]);
            let (st, _) = cli_status(&l, &["vcl.discard", &label_target]);
            assert_ne!(st, 200, "a labelled VCL cannot be discarded");
            cli(&l, &["vcl.label", "lab", &target]);
            let (st, xvcl, body) = probe.get("/obj/1", "X-Label: 1\r\n").await.unwrap();
            assert_eq!((st, xvcl.as_str()), (200, target.as_str()));
            assert_eq!(
                body,
                body_of("/obj/1").into_bytes(),
                "the label VCL hits too"
            );
            let old = std::mem::replace(&mut label_target, target);
            eventually("the VBE counters of a labelled VCL", || {
                vbe_sections(&l, &old) > 0
            })
            .await;
            cli(&l, &["vcl.state", &old, "cold"]);
            cli(&l, &["vcl.discard", &old]);
            discarded_targets.push(old);
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }

    // The slow request started on `boot`, finished after many switches.
    let (st, xvcl, body) = slow.await.unwrap().unwrap();
    assert_eq!(
        (st, xvcl.as_str(), body.as_slice()),
        (200, "boot", &b"slow"[..])
    );

    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for c in clients {
        total += c.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(total > 100, "the load ran: {total} requests");
    assert_eq!(served.load(Ordering::Relaxed), total);

    // Cached objects survived: no refetch, hits kept growing.
    let fetched = be
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.url.starts_with("/obj/"))
        .count();
    assert_eq!(fetched, OBJECTS, "no object was fetched twice");
    let hits_after = counter(&l, "MAIN.cache_hit").unwrap();
    assert!(
        hits_after >= hits_before + total,
        "hits {hits_before} -> {hits_after} for {total} requests"
    );

    // Discarded VCLs released their backends: gone from backend.list and
    // from the counters; the live ones are still there.
    let last = format!("v{}", rounds - 1);
    for i in 0..rounds - 2 {
        let out = cli(&l, &["backend.list", &format!("v{i}.*")]);
        assert!(!out.contains(&format!("v{i}.b1")), "v{i}: {out}");
    }
    assert!(cli(&l, &["backend.list"]).contains(&format!("{last}.b1")));
    eventually("VBE counters of live VCLs published", || {
        vbe_sections(&l, &last) > 0
    })
    .await;
    eventually("VBE counters of discarded VCLs removed", || {
        (0..rounds - 2).all(|i| vbe_sections(&l, &format!("v{i}")) == 0)
            && discarded_targets.iter().all(|t| vbe_sections(&l, t) == 0)
    })
    .await;
    assert_eq!(discarded_targets.len(), 3);
    assert!(
        vbe_sections(&l, &label_target) > 0,
        "the labelled VCL stays warm"
    );
    let list = cli(&l, &["vcl.list"]);
    assert!(!list.contains(" v0\n") && list.contains(&last), "{list}");
}
