//! A load generator of full TLS handshakes, for the `tls` benchmark
//! (`bench/tls.py`, load `handshake`).
//!
//! Every connection is new: TCP connect, a full handshake with no session
//! offered (resumption is off in the client, and each handshake's kind is
//! checked: a resumed one is counted and reported, never taken as full),
//! then one `HTTP/1.0` GET read to the server's close. Each of `--clients`
//! threads runs connections one after another for `--secs` seconds.
//!
//! Why not `openssl s_time -new`: one s_time process per client costs more
//! CPU per handshake than the servers it measures, so on a small machine
//! the clients bound the rate and pull every server's figure towards the
//! same value. This client is rustls with aws-lc-rs, threads and blocking
//! sockets, and does what a real client must: an ephemeral key exchange
//! and the check of the server's handshake signature. It does not check
//! the certificate chain (as `s_time`, which does not either), so its cost
//! is the protocol's, not a path-building library's.
//!
//! The key-exchange group offered is `--group` (default X25519, what
//! OpenSSL 3.0 clients such as `s_time` and curl offer first), the same for
//! every server, so all of them negotiate the same thing.
//!
//! Usage: `handshake_load --connect 127.0.0.1:PORT [--sni NAME] [--path /1k]
//! [--secs 3] [--clients 8] [--group x25519|secp256r1|x25519mlkem768]`.
//! Prints one JSON object: handshakes, seconds, rate, errors (with the first
//! error's text), resumed, hello_retries, and what the first handshake
//! negotiated.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lacquer_tls::client::AnyCert;
use rustls::crypto::{CryptoProvider, aws_lc_rs};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, HandshakeKind};

struct Opts {
    addr: SocketAddr,
    sni: ServerName<'static>,
    path: String,
    secs: f64,
    clients: usize,
    group: &'static dyn rustls::crypto::SupportedKxGroup,
}

fn usage(why: &str) -> String {
    format!(
        "handshake_load: {why}\nusage: handshake_load --connect HOST:PORT [--sni NAME] [--path /1k] [--secs 3] [--clients 8] [--group x25519|secp256r1|x25519mlkem768]"
    )
}

fn parse_args() -> Result<Opts, String> {
    let mut addr = None;
    let mut sni = "localhost".to_string();
    let mut path = "/".to_string();
    let mut secs = 3.0;
    let mut clients = 8;
    let mut group = aws_lc_rs::kx_group::X25519;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .ok_or_else(|| usage(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--connect" => {
                let v = val()?;
                addr = Some(
                    v.parse::<SocketAddr>()
                        .map_err(|e| usage(&format!("--connect {v}: {e}")))?,
                );
            }
            "--sni" => sni = val()?,
            "--path" => path = val()?,
            "--secs" => {
                let v = val()?;
                secs = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| *s > 0.0 && s.is_finite())
                    .ok_or_else(|| usage(&format!("--secs {v}: not a positive number")))?;
            }
            "--clients" => {
                let v = val()?;
                clients = v
                    .parse()
                    .ok()
                    .filter(|c| (1..=1024).contains(c))
                    .ok_or_else(|| usage(&format!("--clients {v}: not 1 to 1024")))?;
            }
            "--group" => {
                let v = val()?;
                group = match v.to_ascii_lowercase().as_str() {
                    "x25519" => aws_lc_rs::kx_group::X25519,
                    "secp256r1" | "p-256" => aws_lc_rs::kx_group::SECP256R1,
                    "x25519mlkem768" => aws_lc_rs::kx_group::X25519MLKEM768,
                    _ => return Err(usage(&format!("--group {v}: unknown group"))),
                };
            }
            _ => return Err(usage(&format!("unknown argument {a}"))),
        }
    }
    let addr = addr.ok_or_else(|| usage("--connect is required"))?;
    let sni = ServerName::try_from(sni.clone()).map_err(|e| usage(&format!("--sni {sni}: {e}")))?;
    Ok(Opts {
        addr,
        sni,
        path,
        secs,
        clients,
        group,
    })
}

/// What one thread counted.
#[derive(Default)]
struct Tally {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    resumed: u64,
    hello_retries: u64,
    negotiated: Option<String>,
}

/// One connection: handshake, request, response to the close. Returns the
/// handshake's kind and what it negotiated.
fn one(cfg: &Arc<ClientConfig>, o: &Opts, req: &[u8]) -> Result<(HandshakeKind, String), String> {
    let mut sock = TcpStream::connect_timeout(&o.addr, Duration::from_secs(10))
        .map_err(|e| format!("connect {}: {e}", o.addr))?;
    sock.set_nodelay(true)
        .map_err(|e| format!("nodelay: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| format!("timeout: {e}"))?;
    let mut conn = ClientConnection::new(cfg.clone(), o.sni.clone())
        .map_err(|e| format!("client connection: {e}"))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    let kind = conn
        .handshake_kind()
        .ok_or_else(|| "handshake finished without a kind".to_string())?;
    let negotiated = format!(
        "{:?} {:?} {:?}",
        conn.protocol_version(),
        conn.negotiated_cipher_suite().map(|s| s.suite()),
        conn.negotiated_key_exchange_group().map(|g| g.name())
    );
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    tls.write_all(req).map_err(|e| format!("request: {e}"))?;
    let mut resp = Vec::with_capacity(4096);
    let mut buf = [0u8; 16384];
    loop {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => resp.extend_from_slice(&buf[..n]),
            // A server that closes without close_notify after a complete
            // HTTP/1.0 response has still answered.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(format!("response: {e}")),
        }
    }
    check_response(&resp)?;
    Ok((kind, negotiated))
}

/// A 200 whose body is as long as its `Content-Length` says.
fn check_response(resp: &[u8]) -> Result<(), String> {
    let head_end = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("response: no complete head in {} bytes", resp.len()))?;
    let head = String::from_utf8_lossy(&resp[..head_end]);
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("response: status line {status:?}"));
    }
    let body = resp.len() - head_end - 4;
    let cl = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    match cl {
        Some(n) if n != body => Err(format!(
            "response: Content-Length {n} but {body} body bytes"
        )),
        _ => Ok(()),
    }
}

fn run(cfg: Arc<ClientConfig>, o: Arc<Opts>, deadline: Instant) -> Tally {
    let req = format!(
        "GET {} HTTP/1.0\r\nHost: {}\r\n\r\n",
        o.path,
        o.sni.to_str()
    );
    let mut t = Tally::default();
    while Instant::now() < deadline {
        match one(&cfg, &o, req.as_bytes()) {
            Ok((kind, negotiated)) => {
                match kind {
                    HandshakeKind::Full => t.ok += 1,
                    HandshakeKind::FullWithHelloRetryRequest => {
                        t.ok += 1;
                        t.hello_retries += 1;
                    }
                    HandshakeKind::Resumed => t.resumed += 1,
                }
                t.negotiated.get_or_insert(negotiated);
            }
            Err(e) => {
                t.errors += 1;
                t.first_error.get_or_insert(e);
                // A refused or reset server is not hammered in a tight loop.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    t
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(o) => Arc::new(o),
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let provider = CryptoProvider {
        kx_groups: vec![o.group],
        ..aws_lc_rs::default_provider()
    };
    let provider = Arc::new(provider);
    let cfg = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS 1.3 with the aws-lc-rs provider: {e}"));
    let mut cfg = match cfg {
        Ok(b) => b
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
            .with_no_client_auth(),
        Err(e) => {
            eprintln!("handshake_load: {e}");
            return ExitCode::FAILURE;
        }
    };
    // No session is stored, so none is ever offered: every handshake is full.
    cfg.resumption = rustls::client::Resumption::disabled();
    let cfg = Arc::new(cfg);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(o.secs);
    let threads: Vec<_> = (0..o.clients)
        .map(|_| {
            let (cfg, o) = (cfg.clone(), o.clone());
            std::thread::spawn(move || run(cfg, o, deadline))
        })
        .collect();
    let mut all = Tally::default();
    for th in threads {
        let t = match th.join() {
            Ok(t) => t,
            Err(_) => {
                eprintln!("handshake_load: a client thread panicked");
                return ExitCode::FAILURE;
            }
        };
        all.ok += t.ok;
        all.errors += t.errors;
        all.resumed += t.resumed;
        all.hello_retries += t.hello_retries;
        if all.first_error.is_none() {
            all.first_error = t.first_error;
        }
        if all.negotiated.is_none() {
            all.negotiated = t.negotiated;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{{\"handshakes\": {}, \"secs\": {:.3}, \"rate\": {:.1}, \"errors\": {}, \"first_error\": {}, \"resumed\": {}, \"hello_retries\": {}, \"negotiated\": {}, \"clients\": {}}}",
        all.ok,
        secs,
        all.ok as f64 / secs,
        all.errors,
        all.first_error
            .as_deref()
            .map_or("null".to_string(), json_str),
        all.resumed,
        all.hello_retries,
        all.negotiated
            .as_deref()
            .map_or("null".to_string(), json_str),
        o.clients
    );
    if all.ok == 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
