//! TLS to backends against a real origin: nginx serving HTTPS with a
//! certificate from a CA the test makes, through the verify matrix
//! (trusted, untrusted issuer, wrong name with `.ssl_verify_host` on and
//! off, verification off), pooled connections reused and new ones resumed.

mod common;

use std::process::{Child, Command};
use std::sync::atomic::Ordering;

use lacquer_tls::testcerts::{Ca, tempdir};

/// The handshake counters (`TLS_HANDSHAKES`) are process-wide, and the
/// test harness runs this file's tests on parallel threads: each test holds
/// this lock so the counting test sees only its own handshakes.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Nginx {
    child: Child,
    port: u16,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx on a free port with `cert` for `origin.test`, answering
/// `hello over tls` to anything.
fn nginx(dir: &std::path::Path, cert: &std::path::Path, key: &std::path::Path) -> Nginx {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let conf = format!(
        "pid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{ worker_connections 64; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n  server {{\n    listen 127.0.0.1:{port} ssl;\n    ssl_certificate {c};\n    ssl_certificate_key {k};\n    location / {{ return 200 'hello over tls'; }}\n  }}\n}}\n",
        d = dir.display(),
        c = cert.display(),
        k = key.display()
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let child = Command::new("nginx")
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&conf_path)
        // One process (no master/worker pair), so killing it leaves no
        // worker behind; no inherited output, so nothing it leaves can
        // hold the test runner's pipe open.
        .args(["-g", "daemon off; master_process off;"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nginx runs (apt-get install nginx)");
    // Owned at once, so every path below kills and reaps it.
    let n = Nginx { child, port };
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    drop(n);
    panic!(
        "nginx did not start: {}",
        std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_matrix_reuse_and_resumption_against_nginx() {
    let _serial = SERIAL.lock().await;
    let dir = tempdir("be");
    let ca = Ca::new("Origin CA");
    let ca_file = ca.write(&dir);
    let (cert, key) = ca.leaf_pair_files(&dir, "origin", &["origin.test"]);
    let n = nginx(&dir, &cert, &key);
    let ca_s = ca_file.display();
    let port = n.port;
    let vcl = format!(
        r#"vcl 4.1;
backend trusted {{ .host = "127.0.0.1"; .port = "{port}"; .host_header = "origin.test";
    .ssl = 1; .ssl_verify_host = 1; .ssl_ca = "{ca_s}"; }}
backend untrusted {{ .host = "127.0.0.1"; .port = "{port}"; .host_header = "origin.test";
    .ssl = 1; }}
backend wrong_name {{ .host = "127.0.0.1"; .port = "{port}"; .host_header = "other.test";
    .ssl = 1; .ssl_verify_host = 1; .ssl_ca = "{ca_s}"; }}
backend wrong_name_ok {{ .host = "127.0.0.1"; .port = "{port}"; .host_header = "other.test";
    .ssl = 1; .ssl_verify_host = 0; .ssl_ca = "{ca_s}"; }}
backend noverify {{ .host = "127.0.0.1"; .port = "{port}"; .host_header = "other.test";
    .ssl = 1; .ssl_noverify = 1; }}
sub vcl_recv {{ return (pass); }}
sub vcl_backend_fetch {{
    if (bereq.url ~ "^/trusted") {{ set bereq.backend = trusted; }}
    elsif (bereq.url ~ "^/untrusted") {{ set bereq.backend = untrusted; }}
    elsif (bereq.url ~ "^/wrong_name_ok") {{ set bereq.backend = wrong_name_ok; }}
    elsif (bereq.url ~ "^/wrong_name") {{ set bereq.backend = wrong_name; }}
    else {{
        set bereq.backend = noverify;
        # The origin closes each of these: every fetch opens a connection.
        set bereq.http.connection = "close";
    }}
}}
"#
    );
    // The untrusted case must not find the test CA in the system store.
    let l = common::lacquer(&vcl, &[]).await;
    let addr = l.first_addr().unwrap();
    let h = &lacquer_server::backend::pool::TLS_HANDSHAKES;
    for (url, status) in [
        ("/trusted", 200),
        ("/untrusted", 503),
        ("/wrong_name", 503),
        ("/wrong_name_ok", 200),
        ("/noverify", 200),
    ] {
        let r = common::get(addr, url, "").await;
        assert_eq!(r.status, status, "{url}: {}", r.text());
        if status == 200 {
            assert_eq!(r.text(), "hello over tls", "{url}");
        }
    }
    assert!(
        h[2].load(Ordering::Relaxed) >= 2,
        "the refused certificates count as failures"
    );
    // Pooled: more fetches over the trusted backend reuse its connection.
    let before = h[0].load(Ordering::Relaxed);
    for _ in 0..5 {
        assert_eq!(common::get(addr, "/trusted", "").await.status, 200);
    }
    assert_eq!(
        h[0].load(Ordering::Relaxed),
        before,
        "no new handshake while one is pooled"
    );
    // New connections (the origin closes each) resume the session.
    let resumed = h[1].load(Ordering::Relaxed);
    let done = h[0].load(Ordering::Relaxed);
    for i in 0..10 {
        let r = common::get(addr, &format!("/noverify/{i}"), "").await;
        assert_eq!(r.status, 200);
    }
    let new = h[0].load(Ordering::Relaxed) - done;
    let res = h[1].load(Ordering::Relaxed) - resumed;
    assert!(
        new >= 1 && res * 100 >= new * 90,
        "{res} of {new} new connections resumed"
    );
    // No TLS listener here: the `TLS` section exists for its `be_*` fields
    // all the same, as the tick after the first TLS backend makes it.
    let mut published = None;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let path = lacquer_vsl::vsc::vsc_path(&l.shared.workdir);
        let snap = lacquer_vsl::vsc::VscReader::open(&path)
            .unwrap()
            .snapshot()
            .unwrap();
        published = lacquer_vsl::vsc::lookup(&snap, "TLS.be_handshakes").map(|c| c.value);
        if published == Some(h[0].load(Ordering::Relaxed)) {
            break;
        }
    }
    assert_eq!(
        published,
        Some(h[0].load(Ordering::Relaxed)),
        "TLS.be_handshakes is published without a TLS listener"
    );
    drop(n);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Backends a vmod creates at run time (`debug.dyn`, and its
/// `.refresh()`) take the TLS attributes of declared ones: the same
/// verify matrix against the same kind of origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_backends_take_the_tls_attributes() {
    let _serial = SERIAL.lock().await;
    let dir = tempdir("dynbe");
    let ca = Ca::new("Dynamic Origin CA");
    let ca_file = ca.write(&dir);
    // The dynamic backend's name for verification is its address.
    let (cert, key) = ca.leaf_pair_files(&dir, "origin", &["origin.test", "127.0.0.1"]);
    let n = nginx(&dir, &cert, &key);
    let ca_s = ca_file.display();
    let port = n.port;
    let vcl = format!(
        r#"vcl 4.1;
import debug;
backend default none;
sub vcl_init {{
    new trusted = debug.dyn("127.0.0.1", "{port}", ssl = true, ssl_verify_host = true,
        ssl_ca = "{ca_s}");
    new untrusted = debug.dyn("127.0.0.1", "{port}", ssl = true);
    new noverify = debug.dyn("127.0.0.1", "{port}", ssl = true, ssl_verify_peer = false);
    new plain = debug.dyn("127.0.0.1", "{port}");
    new swapped = debug.dyn("127.0.0.1", "{port}");
}}
sub vcl_recv {{
    if (req.url ~ "^/swapped") {{
        swapped.refresh("127.0.0.1", "{port}", ssl = true, ssl_ca = "{ca_s}");
    }}
    return (pass);
}}
sub vcl_backend_fetch {{
    if (bereq.url ~ "^/trusted") {{ set bereq.backend = trusted.backend(); }}
    elsif (bereq.url ~ "^/untrusted") {{ set bereq.backend = untrusted.backend(); }}
    elsif (bereq.url ~ "^/noverify") {{ set bereq.backend = noverify.backend(); }}
    elsif (bereq.url ~ "^/swapped") {{ set bereq.backend = swapped.backend(); }}
    else {{ set bereq.backend = plain.backend(); }}
}}
"#
    );
    // vmod debug is loaded in vtc mode.
    let l = common::lacquer(&vcl, &["debug=+vtc_mode"]).await;
    let addr = l.first_addr().unwrap();
    for (url, ok) in [
        ("/trusted", true),
        ("/untrusted", false),
        ("/noverify", true),
        ("/swapped", true),
        // Plain HTTP to the TLS port: nginx refuses it.
        ("/plain", false),
    ] {
        let r = common::get(addr, url, "").await;
        if ok {
            assert_eq!(r.status, 200, "{url}: {}", r.text());
            assert_eq!(r.text(), "hello over tls", "{url}");
        } else {
            assert_ne!(r.status, 200, "{url}: {}", r.text());
            assert_ne!(r.text(), "hello over tls", "{url}");
        }
    }
    drop(n);
    let _ = std::fs::remove_dir_all(&dir);
}
