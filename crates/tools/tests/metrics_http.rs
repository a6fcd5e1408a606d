//! `lacquer stat --listen`: the scrape server run against a counters file
//! in a temporary working directory, fetched over loopback. The Prometheus
//! exposition is checked line by line against the text format's grammar
//! (names, labels, HELP/TYPE before and once per family, samples of a
//! family together), and the routes, HEAD and the request bounds.

use std::collections::HashSet;
use std::net::SocketAddr;

use lacquer_tools::stat::{Source, serve};
use lacquer_vsl::vsc::{Vsc, VscConfig, tables, vsc_path};
use regex::Regex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn fetch(addr: SocketAddr, req: &[u8]) -> (String, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("answer within 10 s")
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete head");
    (head.to_string(), body.to_string())
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes()
}

/// Checks the exposition against the text format; returns the samples.
fn validate(body: &str) -> Vec<(String, String, f64)> {
    let name = r"[a-zA-Z_:][a-zA-Z0-9_:]*";
    let help = Regex::new(&format!(r"^# HELP ({name}) (?:[^\\\n]|\\\\|\\n)*$")).unwrap();
    let typ = Regex::new(&format!(r"^# TYPE ({name}) (counter|gauge)$")).unwrap();
    let label = r#"[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*""#;
    let sample = Regex::new(&format!(
        r"^({name})(\{{{label}(?:,{label})*\}})? ([0-9]+)$"
    ))
    .unwrap();
    assert!(body.ends_with('\n'), "the exposition ends with a newline");
    let mut done: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut pending_help: Option<String> = None;
    let mut samples = Vec::new();
    for (i, line) in body.lines().enumerate() {
        let at = format!("line {}: {line:?}", i + 1);
        if let Some(c) = help.captures(line) {
            assert!(pending_help.is_none(), "{at}: HELP without TYPE before");
            let n = c[1].to_string();
            assert!(!done.contains(&n), "{at}: family {n} appears twice");
            pending_help = Some(n);
        } else if let Some(c) = typ.captures(line) {
            let n = c[1].to_string();
            assert_eq!(
                pending_help.take().as_deref(),
                Some(&*n),
                "{at}: TYPE follows its HELP"
            );
            if let Some(prev) = current.replace(n.clone()) {
                done.insert(prev);
            }
            if c[2] == *"counter" {
                assert!(!n.ends_with("_total") || n.len() > 6, "{at}");
            }
        } else if let Some(c) = sample.captures(line) {
            assert_eq!(
                current.as_deref(),
                Some(&c[1]),
                "{at}: sample outside its family"
            );
            assert!(pending_help.is_none(), "{at}");
            let labels = c.get(2).map_or("", |m| m.as_str()).to_string();
            samples.push((c[1].to_string(), labels, c[3].parse::<f64>().unwrap()));
        } else {
            panic!("{at}: not HELP, TYPE or a sample");
        }
    }
    assert!(pending_help.is_none(), "a HELP without TYPE at the end");
    samples
}

#[tokio::test]
async fn serves_metrics_json_and_refuses_the_rest() {
    let dir = std::env::temp_dir().join(format!("lq-metrics-http-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let vsc = Vsc::create(&vsc_path(&dir), &VscConfig::default()).unwrap();
    let main = vsc.add_section(&tables::MAIN, "MAIN").unwrap();
    main.add(tables::Main::cache_hit, 7);
    main.set(tables::Main::n_object, 3);
    let s0 = vsc.add_section(&tables::SMA, "SMA.s0").unwrap();
    s0.set(tables::Sma::g_bytes, 4096);
    let _tr = vsc.add_section(&tables::SMA, "SMA.Transient").unwrap();
    let b1 = vsc.add_section(&tables::VBE, "VBE.boot.default").unwrap();
    b1.add(tables::Vbe::req, 11);
    b1.set(tables::Vbe::happy, 1);
    let b2 = vsc.add_section(&tables::VBE, "VBE.boot.other").unwrap();
    b2.add(tables::Vbe::req, 2);

    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let server = tokio::spawn(serve::serve(l, Source::new(vsc_path(&dir)), Vec::new()));

    let (head, body) = fetch(addr, &get("/metrics")).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8"));
    assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));
    let samples = validate(&body);
    let value = |n: &str, labels: &str| {
        samples
            .iter()
            .find(|(name, l, _)| name == n && l == labels)
            .unwrap_or_else(|| panic!("no sample {n}{labels}"))
            .2
    };
    assert_eq!(value("varnish_main_cache_hit", ""), 7.0);
    assert_eq!(value("varnish_main_n_object", ""), 3.0);
    assert_eq!(
        value(
            "varnish_backend_req",
            r#"{backend="default",server="boot"}"#
        ),
        11.0
    );
    assert_eq!(
        value("varnish_backend_req", r#"{backend="other",server="boot"}"#),
        2.0
    );
    assert_eq!(
        value(
            "varnish_backend_happy",
            r#"{backend="default",server="boot"}"#
        ),
        1.0
    );
    assert_eq!(value("varnish_sma_g_bytes", r#"{type="s0"}"#), 4096.0);
    assert_eq!(value("varnish_sma_g_bytes", r#"{type="Transient"}"#), 0.0);
    assert!(body.contains("\n# TYPE varnish_main_cache_hit counter\n"));
    assert!(body.contains("\n# TYPE varnish_main_n_object gauge\n"));
    assert!(body.contains("\n# TYPE varnish_sma_g_bytes gauge\n"));
    assert!(body.contains("\n# TYPE varnish_backend_happy gauge\n"));
    assert!(body.contains("# HELP varnish_main_cache_hit Cache hits\n"));

    // Live values: the next scrape sees the change; a removed backend is gone.
    main.inc(tables::Main::cache_hit);
    drop(b2);
    let (_, body) = fetch(addr, &get("/metrics")).await;
    let samples = validate(&body);
    assert!(
        samples
            .iter()
            .any(|s| s.0 == "varnish_main_cache_hit" && s.2 == 8.0)
    );
    assert!(!body.contains("backend=\"other\""));

    // HEAD: the same head, no body.
    let (head, body) = fetch(addr, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(body.is_empty());
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(len > 1000);

    // varnishstat -j's document.
    let (head, body) = fetch(addr, &get("/stats.json")).await;
    assert!(
        head.contains("\r\nContent-Type: application/json\r\n"),
        "{head}"
    );
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["version"], 1);
    assert_eq!(j["counters"]["MAIN.cache_hit"]["value"], 8);
    assert_eq!(j["counters"]["MAIN.cache_hit"]["flag"], "c");
    assert_eq!(j["counters"]["VBE.boot.default.req"]["value"], 11);

    // Everything else.
    for path in ["/", "/metricsx", "/stats.json/x", "/favicon.ico"] {
        let (head, _) = fetch(addr, &get(path)).await;
        assert!(head.starts_with("HTTP/1.1 404 "), "{path}: {head}");
    }
    let (head, _) = fetch(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 405 ") && head.contains("\r\nAllow: GET, HEAD"));
    let (head, _) = fetch(addr, b"GET /metrics HTTP/1.1\r\nBad Header\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 400 "), "{head}");
    let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", 300).flatten());
    let (head, _) = fetch(addr, &huge).await;
    assert!(head.starts_with("HTTP/1.1 431 "), "{head}");
    let mut long = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 9000));
    let (head, _) = fetch(addr, &long).await;
    assert!(head.starts_with("HTTP/1.1 431 "), "{head}");

    // The daemon going away: 503 with the reason, not a dropped connection.
    drop((main, s0, b1, _tr, vsc));
    std::fs::remove_dir_all(&dir).unwrap();
    let l2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr2 = l2.local_addr().unwrap();
    let s2 = tokio::spawn(serve::serve(l2, Source::new(vsc_path(&dir)), Vec::new()));
    let (head, body) = fetch(addr2, &get("/metrics")).await;
    assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
    assert!(body.starts_with("cannot read the counters: "), "{body}");
    server.abort();
    s2.abort();
}
