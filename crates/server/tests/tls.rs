//! Built-in TLS on the client side against real peers: `curl --cacert`,
//! `openssl s_client` (SNI matrix, `sni-nomatch-abort`, ALPN, resumption
//! with `-sess_out`/`-sess_in`), the handshake timeout and junk, and
//! certificates swapped through `tls.cert.*` while handshakes run.
//! Certificates are made by the test (`lacquer_tls::testcerts`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use lacquer_server::mgt::daemon::{self, BootVcl, Config, Running};
use lacquer_server::runtime::params::ParamSet;
use lacquer_tls::testcerts::{Ca, tempdir};
use lacquer_vsl::vsc::tables::Tls;

const VCL: &str = r#"vcl 4.1;
import tls;
import proxy;
backend none none;
sub vcl_recv { return (synth(200)); }
sub vcl_synth {
    set resp.http.x-tls = tls.is_tls() + " " + tls.version() + " " + tls.authority() + " " + tls.alpn() + " " + tls.cert_key();
    set resp.http.x-proxy = proxy.is_ssl() + " " + proxy.ssl_version() + " " + proxy.authority() + " " + proxy.alpn();
    if (tls.ja3()) {
        set resp.http.x-ja3 = tls.ja3();
    }
    set resp.body = "hello";
    return (deliver);
}
"#;

struct Site {
    dir: PathBuf,
    ca: Ca,
    l: Running,
    /// The frontend with every certificate.
    main: SocketAddr,
    /// The frontend with sni-nomatch-abort.
    strict: SocketAddr,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn site(tag: &str, params: &[&str]) -> Site {
    site_with(tag, params, "").await
}

/// [`site`] with more lines for its hitch.conf.
async fn site_with(tag: &str, params: &[&str], extra: &str) -> Site {
    let dir = tempdir(tag);
    let ca = Ca::new("Lacquer Test CA");
    ca.write(&dir);
    let www = ca.leaf_file(&dir, "www", &["www.example.com"]);
    let wild = ca.leaf_file(&dir, "wild", &["*.example.com"]);
    let def = ca.leaf_file(&dir, "default", &["default.test"]);
    // Port 0: the kernel picks; the bound ports are read back below.
    let conf_text = format!(
        "frontend = \"[127.0.0.1]:0\"\nfrontend = {{\n  host = \"127.0.0.1\"\n  port = \"0\"\n  sni-nomatch-abort = on\n}}\npem-file = \"{}\"\npem-file = \"{}\"\npem-file = \"{}\"\nworkers = 2\n{extra}",
        www.display(),
        wild.display(),
        def.display()
    );
    let conf = lacquer_tls::conf::parse("hitch.conf", &conf_text).unwrap();
    let mut listen = Vec::new();
    for a in lacquer_server::mgt::tls::listen_args(&conf) {
        listen.push(lacquer_server::mgt::listen::parse_listen(&a, 0).unwrap());
    }
    let mut p = ParamSet::default();
    p.set("vsl_space", "1M").unwrap();
    for a in params {
        p.apply_arg(a).unwrap();
    }
    let l = daemon::start(Config {
        listen,
        vcl: BootVcl::Inline(VCL.to_string()),
        storage: vec!["malloc,8m".to_string()],
        params: p,
        workdir: dir.join("wd"),
        identity: None,
        admin: None,
        secret: None,
        reverse_cli: None,
        debug: false,
        pidfile: None,
        cli_file: None,
        tls: Some(conf),
    })
    .await
    .expect("daemon starts");
    let bound = |name: &str| -> SocketAddr {
        let ls = l.shared.listeners.lock().unwrap();
        let b = ls.iter().find(|b| b.name == name).expect("listener bound");
        let (ip, port) = b.printable.split_once(' ').unwrap();
        format!("{ip}:{port}").parse().unwrap()
    };
    let (main, strict) = (bound("tls0"), bound("tls1"));
    Site {
        main,
        strict,
        dir,
        ca,
        l,
    }
}

/// The `ReqStart` records a daemon has logged, once there is one (a
/// transaction's records reach the log when it ends, just after its
/// response; waits up to 5 s).
async fn req_starts(l: &Running) -> Vec<String> {
    use lacquer_vsl::{ReadEvent, StartAt, Tag, VslReader, vsl_path};
    let mut out = Vec::new();
    for _ in 0..100 {
        let mut r = VslReader::open(&vsl_path(&l.shared.workdir), StartAt::Oldest).unwrap();
        loop {
            match r.next_event() {
                ReadEvent::Record(rec) if rec.tag == Tag::ReqStart => {
                    out.push(String::from_utf8_lossy(&rec.data).into_owned());
                }
                ReadEvent::Record(_) | ReadEvent::Overrun { .. } => {}
                ReadEvent::Idle => break,
            }
        }
        if !out.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    out
}

fn tls_counter(l: &Running, c: Tls) -> u64 {
    l.shared.tls.get().expect("TLS is on").counters.get(c)
}

/// Runs a blocking command off the runtime, with its output.
async fn run(mut cmd: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("the peer program runs"))
        .await
        .unwrap()
}

fn curl(s: &Site, name: &str, extra: &[&str]) -> Command {
    let mut c = Command::new("curl");
    c.args(["-sS", "-i", "--max-time", "10", "--cacert"])
        .arg(s.dir.join("ca.pem"))
        .arg("--resolve")
        .arg(format!("{name}:{}:127.0.0.1", s.main.port()))
        .args(extra)
        .arg(format!("https://{name}:{}/", s.main.port()));
    c
}

/// `openssl s_client` sending one HTTP/1.0 request and reading until the
/// server closes: by then the TLS 1.3 session tickets, which come after
/// the handshake, have arrived (for `-sess_out`).
fn s_client(addr: SocketAddr, args: &[&str], ca: &Path) -> Command {
    let req = ca.with_file_name("request.txt");
    std::fs::write(&req, "GET / HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut c = Command::new("openssl");
    c.arg("s_client")
        .arg("-connect")
        .arg(addr.to_string())
        .arg("-CAfile")
        .arg(ca)
        .arg("-ign_eof")
        .args(args)
        .stdin(std::fs::File::open(&req).unwrap());
    c
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_and_openssl_see_the_right_certificate_and_vcl_sees_tls() {
    let s = site("peers", &["feature=+http2"]).await;
    // curl verifies against the test CA; HTTP/2 by ALPN.
    let o = run(curl(&s, "www.example.com", &[])).await;
    let t = text(&o);
    assert!(t.starts_with("HTTP/2 200"), "{t}");
    assert!(
        t.contains("x-tls: true TLSv1.3 www.example.com h2 EC256"),
        "{t}"
    );
    assert!(
        t.contains("x-proxy: true TLSv1.3 www.example.com h2"),
        "{t}"
    );
    let o = run(curl(&s, "img.example.com", &["--http1.1"])).await;
    let t = text(&o);
    assert!(t.starts_with("HTTP/1.1 200"), "{t}");
    assert!(
        t.contains("x-tls: true TLSv1.3 img.example.com http/1.1"),
        "{t}"
    );

    // The SNI matrix: exact, wildcard, default (unknown name and none).
    let ca = s.dir.join("ca.pem");
    for (args, subject) in [
        (
            &["-servername", "www.example.com"][..],
            "CN = www.example.com",
        ),
        (
            &["-servername", "img.example.com"][..],
            "CN = *.example.com",
        ),
        (&["-servername", "other.test"][..], "CN = default.test"),
        (&["-noservername"][..], "CN = default.test"),
    ] {
        let t = text(&run(s_client(s.main, args, &ca)).await);
        assert!(t.contains(&format!("subject={subject}")), "{args:?}: {t}");
        assert!(t.contains("Verify return code: 0 (ok)"), "{args:?}: {t}");
    }
    // sni-nomatch-abort: a known name passes, an unknown one is refused
    // with unrecognized_name, no name gets the default.
    let t = text(&run(s_client(s.strict, &["-servername", "www.example.com"], &ca)).await);
    assert!(t.contains("subject=CN = www.example.com"), "{t}");
    let before = tls_counter(&s.l, Tls::fail_sni_nomatch);
    let t = text(&run(s_client(s.strict, &["-servername", "other.test"], &ca)).await);
    assert!(t.contains("unrecognized name"), "{t}");
    assert_eq!(tls_counter(&s.l, Tls::fail_sni_nomatch), before + 1);
    let t = text(&run(s_client(s.strict, &["-noservername"], &ca)).await);
    assert!(t.contains("subject=CN = default.test"), "{t}");

    // ALPN: h2 while HTTP/2 is on, http/1.1 only once it is off.
    let t = text(&run(s_client(s.main, &["-alpn", "h2,http/1.1"], &ca)).await);
    assert!(t.contains("ALPN protocol: h2"), "{t}");
    let w: Vec<String> = ["param.set", "feature", "-http2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        lacquer_server::mgt::commands::dispatch(&s.l.shared, &w).status,
        200
    );
    let t = text(&run(s_client(s.main, &["-alpn", "h2,http/1.1"], &ca)).await);
    assert!(t.contains("ALPN protocol: http/1.1"), "{t}");

    // Resumption, TLS 1.3 and TLS 1.2, with the session in a file.
    for v in ["-tls1_3", "-tls1_2"] {
        let sess = s.dir.join(format!("sess{v}"));
        let sess = sess.to_str().unwrap();
        let t = text(
            &run(s_client(
                s.main,
                &[v, "-servername", "www.example.com", "-sess_out", sess],
                &ca,
            ))
            .await,
        );
        assert!(t.contains("New, TLSv1."), "{v}: {t}");
        let resumed = tls_counter(&s.l, Tls::resumed);
        let t = text(
            &run(s_client(
                s.main,
                &[v, "-servername", "www.example.com", "-sess_in", sess],
                &ca,
            ))
            .await,
        );
        assert!(t.contains("Reused, TLSv1."), "{v}: {t}");
        assert_eq!(tls_counter(&s.l, Tls::resumed), resumed + 1);
    }
    assert!(tls_counter(&s.l, Tls::handshakes) >= 12);
    assert!(tls_counter(&s.l, Tls::alpn_h2) >= 2);
    assert!(tls_counter(&s.l, Tls::tx_bytes) > 0);
    let _ = std::fs::remove_dir_all(&s.dir);
}

#[tokio::test]
async fn stalled_and_junk_clients_are_closed_and_counted() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = site("junk", &["tls_handshake_timeout=0.3"]).await;
    let started = std::time::Instant::now();
    let mut c = tokio::net::TcpStream::connect(s.main).await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), c.read(&mut buf))
        .await
        .expect("closed by the timeout, not left open");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    let took = started.elapsed();
    assert!(
        took.as_secs_f64() >= 0.25 && took.as_secs_f64() < 3.0,
        "{took:?}"
    );
    assert_eq!(tls_counter(&s.l, Tls::fail_timeout), 1);
    // Plain HTTP on the TLS port.
    let mut c = tokio::net::TcpStream::connect(s.main).await.unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), c.read_to_end(&mut got)).await;
    assert!(!got.starts_with(b"HTTP/"), "no HTTP answer on a TLS port");
    assert_eq!(tls_counter(&s.l, Tls::fail_junk), 1);
    assert_eq!(tls_counter(&s.l, Tls::handshakes), 0);
    let _ = std::fs::remove_dir_all(&s.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_swap_under_load_without_a_failed_handshake() {
    let s = Arc::new(site("swap", &[]).await);
    let mut roots = lacquer_tls::rustls::RootCertStore::empty();
    for c in lacquer_tls::certs::read_certs(&s.dir.join("ca.pem")).unwrap() {
        roots.add(c).unwrap();
    }
    let client = Arc::new(
        lacquer_tls::rustls::ClientConfig::builder_with_provider(lacquer_tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (client, stop, addr) = (client.clone(), stop.clone(), s.main);
        workers.push(tokio::spawn(async move {
            let (mut ok, mut bad) = (0u32, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let conn = lacquer_tls::tokio_rustls::TlsConnector::from(client.clone());
                let name = lacquer_tls::rustls::pki_types::ServerName::try_from("www.example.com")
                    .unwrap();
                match conn.connect(name, tcp).await {
                    Ok(_) => ok += 1,
                    Err(e) => bad.push(e.to_string()),
                }
            }
            (ok, bad)
        }));
    }
    let cli = |words: &[&str]| {
        let w: Vec<String> = words.iter().map(|s| s.to_string()).collect();
        lacquer_server::mgt::commands::dispatch(&s.l.shared, &w)
    };
    for round in 0..6 {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        let f =
            s.ca.leaf_file(&s.dir, &format!("r{round}"), &["www.example.com"]);
        let id = format!("r{round}");
        let r = cli(&["tls.cert.load", &id, f.to_str().unwrap()]);
        assert_eq!(r.status, 200, "{}", r.body);
        if round > 0 {
            let r = cli(&["tls.cert.discard", &format!("r{}", round - 1)]);
            assert_eq!(r.status, 200, "{}", r.body);
        }
        let r = cli(&["tls.cert.commit"]);
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let list = cli(&["tls.cert.list"]);
    assert!(list.body.contains("r5"), "{}", list.body);
    assert!(!list.body.contains("r4 "), "{}", list.body);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for w in workers {
        let (ok, bad) = w.await.unwrap();
        assert!(bad.is_empty(), "failed handshakes: {bad:?}");
        total += ok;
    }
    assert!(total > 50, "only {total} handshakes");
    assert_eq!(tls_counter(&s.l, Tls::cert_commits), 6);
    // A file that went bad between load and commit: refused, nothing lost.
    let bad = s.dir.join("bad.pem");
    std::fs::write(&bad, "junk").unwrap();
    assert_eq!(cli(&["tls.cert.load", bad.to_str().unwrap()]).status, 300);
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// With `tls_ja3` on, VCL reads the client's JA3 string: curl's and
/// openssl's hellos differ, the same client gives the same string, and
/// without the parameter there is none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_ja3_fingerprints_the_client_hello() {
    let s = site("ja3", &["tls_ja3=on"]).await;
    let ja3 = |t: &str| {
        t.lines()
            .find_map(|l| l.strip_prefix("x-ja3: ").map(str::to_string))
            .unwrap_or_default()
    };
    let a = ja3(&text(
        &run(curl(&s, "www.example.com", &["--http1.1"])).await,
    ));
    let b = ja3(&text(
        &run(curl(&s, "www.example.com", &["--http1.1"])).await,
    ));
    let fields: Vec<&str> = a.split(',').collect();
    assert_eq!(fields.len(), 5, "{a}");
    // TLS 1.3 hellos carry the legacy version 0x0303, and name the
    // supported groups (10) and the supported versions (43).
    assert_eq!(fields[0], "771", "{a}");
    assert!(fields[2].split('-').any(|e| e == "10"), "{a}");
    assert!(fields[2].split('-').any(|e| e == "43"), "{a}");
    assert_eq!(a, b);
    let o = run(s_client(
        s.main,
        &["-servername", "www.example.com", "-tls1_2"],
        &s.dir.join("ca.pem"),
    ))
    .await;
    let t = text(&o);
    assert!(t.contains("x-ja3: 771,"), "{t}");
    assert!(!t.contains(&format!("x-ja3: {a}")), "{t}");
    drop(s.l);
    let s = site("ja3-off", &[]).await;
    let t = text(&run(curl(&s, "www.example.com", &["--http1.1"])).await);
    assert!(t.starts_with("HTTP/1.1 200") && !t.contains("x-ja3"), "{t}");
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// Hitch from Debian in front (PROXY v2 with its TLVs) and Lacquer's own
/// TLS give VCL the same answers for what Hitch sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_hitch_vcl_sees_what_native_tls_shows() {
    let s = site("hitch", &[]).await;
    let hitch_port = free_port();
    // A second daemon listening for Hitch's PROXY v2.
    let mut p = ParamSet::default();
    p.set("vsl_space", "1M").unwrap();
    let behind = daemon::start(Config {
        listen: vec![lacquer_server::mgt::listen::parse_listen("127.0.0.1:0,PROXY", 0).unwrap()],
        vcl: BootVcl::Inline(VCL.to_string()),
        storage: vec!["malloc,8m".to_string()],
        params: p,
        workdir: s.dir.join("wd-behind"),
        identity: None,
        admin: None,
        secret: None,
        reverse_cli: None,
        debug: false,
        pidfile: None,
        cli_file: None,
        tls: None,
    })
    .await
    .expect("daemon starts");
    let proxy_port = behind.first_addr().unwrap().port();
    let conf = s.dir.join("hitch.conf");
    std::fs::write(
        &conf,
        format!(
            "frontend = \"[127.0.0.1]:{hitch_port}\"\nbackend = \"[127.0.0.1]:{proxy_port}\"\npem-file = \"{}\"\nwrite-proxy-v2 = on\nalpn-protos = \"http/1.1\"\nuser = \"nobody\"\ndaemon = off\n",
            s.dir.join("www.pem").display()
        ),
    )
    .unwrap();
    let mut hitch = Command::new("hitch")
        .arg(format!("--config={}", conf.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("hitch runs (apt-get install hitch)");
    let mut up = false;
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", hitch_port)).is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let fetch = |port: u16| {
        let mut c = Command::new("curl");
        c.args(["-sS", "-i", "--http1.1", "--max-time", "10", "--cacert"])
            .arg(s.dir.join("ca.pem"))
            .arg("--resolve")
            .arg(format!("www.example.com:{port}:127.0.0.1"))
            .arg(format!("https://www.example.com:{port}/"));
        c
    };
    let via_hitch = if up {
        text(&run(fetch(hitch_port)).await)
    } else {
        String::new()
    };
    let native = text(&run(fetch(s.main.port())).await);
    let _ = hitch.kill();
    let _ = hitch.wait();
    assert!(up, "hitch did not start");
    let header = |t: &str, name: &str| {
        t.lines()
            .find_map(|l| l.strip_prefix(name).map(str::to_string))
            .unwrap_or_default()
    };
    let p_h = header(&via_hitch, "x-proxy: ");
    assert_eq!(p_h, "true TLSv1.3 www.example.com http/1.1", "{via_hitch}");
    assert_eq!(p_h, header(&native, "x-proxy: "), "{native}");
    // vmod tls: the same, but for the key type Hitch does not send.
    let t_h = header(&via_hitch, "x-tls: ");
    assert_eq!(t_h, "true TLSv1.3 www.example.com http/1.1 ", "{via_hitch}");
    assert_eq!(header(&native, "x-tls: "), format!("{t_h}EC256"));
    // `ReqStart` gains Varnish 9's `https` field on both paths.
    let logged = req_starts(&behind).await;
    assert!(
        !logged.is_empty() && logged.iter().all(|r| r.ends_with(" a0 https")),
        "{logged:?}"
    );
    let logged = req_starts(&s.l).await;
    assert!(
        !logged.is_empty() && logged.iter().all(|r| r.ends_with(" tls0 https")),
        "{logged:?}"
    );
    drop(behind);
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// Two nodes that read the same ticket-key-file resume each other's
/// sessions; a node with its own random keys does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_sharing_a_ticket_key_file_resume_each_others_sessions() {
    let keys = tempdir("ticket-keys").join("keys");
    std::fs::write(&keys, "a secret shared by every node, 32 bytes or more\n").unwrap();
    let line = format!("ticket-key-file = \"{}\"\n", keys.display());
    let a = site_with("node-a", &[], &line).await;
    let b = site_with("node-b", &[], &line).await;
    let c = site("node-c", &[]).await;
    // The same CA is not needed for resumption: -CAfile only quiets
    // s_client; each site has its own.
    let sess = a.dir.join("sess");
    let sess = sess.to_str().unwrap();
    let ca = a.dir.join("ca.pem");
    let t = text(&run(s_client(a.main, &["-tls1_3", "-sess_out", sess], &ca)).await);
    assert!(t.contains("New, TLSv1.3"), "{t}");
    let t = text(&run(s_client(b.main, &["-tls1_3", "-sess_in", sess], &ca)).await);
    assert!(
        t.contains("Reused, TLSv1.3"),
        "node b resumes node a's session: {t}"
    );
    let t = text(&run(s_client(c.main, &["-tls1_3", "-sess_in", sess], &ca)).await);
    assert!(t.contains("New, TLSv1.3"), "node c has other keys: {t}");
    for s in [a, b, c] {
        let _ = std::fs::remove_dir_all(&s.dir);
    }
}

/// The failure counters of the client side that a server fault could
/// raise, summed (all but `fail_closed`: the client hung up).
fn tls_failures(l: &Running) -> u64 {
    [
        Tls::fail_timeout,
        Tls::fail_junk,
        Tls::fail_incompatible,
        Tls::fail_client_cert,
        Tls::fail_sni_nomatch,
        Tls::fail_other,
    ]
    .into_iter()
    .map(|c| tls_counter(l, c))
    .sum()
}

/// h2load (nghttp2) over TLS: HTTP/2 chosen by ALPN, ten streams at a
/// time on each of eight connections, then HTTP/1.1 over TLS; every
/// request is answered, one handshake per connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2load_over_tls_gets_every_answer() {
    let s = site("h2load", &["feature=+http2"]).await;
    let url = format!("https://127.0.0.1:{}/", s.main.port());
    let mut c = Command::new("h2load");
    c.args(["-n", "2000", "-c", "8", "-m", "10", "-t", "1", "-T", "20"])
        .arg(&url);
    let t = text(&run(c).await);
    assert!(t.contains("Application protocol: h2"), "{t}");
    assert!(
        t.contains("2000 done, 2000 succeeded, 0 failed, 0 errored, 0 timeout"),
        "{t}"
    );
    assert!(t.contains("status codes: 2000 2xx"), "{t}");
    assert_eq!(tls_counter(&s.l, Tls::handshakes), 8);
    assert_eq!(tls_counter(&s.l, Tls::alpn_h2), 8);
    let mut c = Command::new("h2load");
    c.args(["--h1", "-n", "400", "-c", "4", "-t", "1", "-T", "20"])
        .arg(&url);
    let t = text(&run(c).await);
    assert!(t.contains("Application protocol: http/1.1"), "{t}");
    assert!(
        t.contains("400 done, 400 succeeded, 0 failed, 0 errored, 0 timeout"),
        "{t}"
    );
    assert_eq!(tls_counter(&s.l, Tls::handshakes), 12);
    assert_eq!(tls_failures(&s.l) + tls_counter(&s.l, Tls::fail_closed), 0);
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// Certificates replaced through `tls.cert.*` and re-read as on SIGHUP
/// (`tls.cert.reload`) five times a second while eight `openssl s_time
/// -new` clients make a new connection with a full handshake (no session
/// offered) for every request: not one handshake fails, on either side.
/// The rate reached is printed (a debug build on a shared machine reaches
/// about a hundred per second; `bench/tls.py --only reload` gives the
/// release figure, in the thousands).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_swap_under_a_handshake_storm_without_a_failure() {
    let s = site("storm", &[]).await;
    let secs = 5;
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let mut c = Command::new("openssl");
            c.args(["s_time", "-new", "-www", "/", "-connect"])
                .arg(s.main.to_string())
                .args(["-time", &secs.to_string()]);
            tokio::spawn(run(c))
        })
        .collect();
    let cli = |words: &[&str]| {
        let w: Vec<String> = words.iter().map(|s| s.to_string()).collect();
        lacquer_server::mgt::commands::dispatch(&s.l.shared, &w)
    };
    let started = std::time::Instant::now();
    let mut swaps = 0;
    while started.elapsed().as_secs_f64() < secs as f64 - 0.5 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let id = format!("s{swaps}");
        let f = s.ca.leaf_file(&s.dir, &id, &["default.test"]);
        let r = cli(&["tls.cert.load", &id, f.to_str().unwrap()]);
        assert_eq!(r.status, 200, "{}", r.body);
        if swaps > 0 {
            let r = cli(&["tls.cert.discard", &format!("s{}", swaps - 1)]);
            assert_eq!(r.status, 200, "{}", r.body);
        }
        let r = cli(&["tls.cert.commit"]);
        assert_eq!(r.status, 200, "{}", r.body);
        let r = cli(&["tls.cert.reload"]);
        assert_eq!(r.status, 200, "{}", r.body);
        swaps += 1;
    }
    let mut made = 0u64;
    for c in clients {
        let o = c.await.unwrap();
        let t = text(&o);
        assert!(o.status.success(), "a client failed: {t}");
        // "765 connections in 3 real seconds, 5178 bytes read per connection"
        let n = t
            .lines()
            .filter(|l| l.contains(" real seconds"))
            .find_map(|l| {
                l.split(" connections in ")
                    .next()?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no count from s_time: {t}"));
        made += n;
    }
    let done = tls_counter(&s.l, Tls::handshakes);
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!(
        "{done} full handshakes in {elapsed:.1} s ({:.0}/s) across {swaps} certificate swaps",
        done as f64 / elapsed
    );
    assert!(swaps >= 10, "only {swaps} swaps");
    assert!(made >= 100, "only {made} connections");
    // Every connection a client counted was a handshake here, none resumed.
    assert!(done >= made, "{done} handshakes, {made} connections");
    assert_eq!(tls_counter(&s.l, Tls::resumed), 0);
    assert_eq!(tls_failures(&s.l), 0);
    // A client may hang up on the handshake it has in flight when its time
    // is up: at most one per client.
    assert!(tls_counter(&s.l, Tls::fail_closed) <= 8);
    let _ = std::fs::remove_dir_all(&s.dir);
}
