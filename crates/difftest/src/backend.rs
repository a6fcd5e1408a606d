//! The scripted backend: a loopback listener, one thread per connection,
//! answering each request with the next scripted response for its path and
//! recording what it received (request line, headers, body, and whether the
//! request came on a fresh or a reused connection). One backend serves one
//! daemon for one scenario; dropping it closes the listener and every
//! connection it still holds.

use crate::scenario::{BeResp, Framing};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// The path a scenario's backend probe asks for: answered 200 and not
/// recorded.
pub const PROBE_PATH: &str = "/health_check.php";

/// One request as the backend saw it.
#[derive(Clone, Debug)]
pub struct Received {
    /// The request head, lines joined by `\n`, volatile values masked.
    pub head: Vec<String>,
    pub body: Vec<u8>,
    /// Whether an earlier request came on this connection.
    pub reused: bool,
}

struct State {
    script: Vec<BeResp>,
    cursor: HashMap<String, usize>,
    log: Vec<Received>,
    conns: Vec<TcpStream>,
}

pub struct Backend {
    pub port: u16,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    accept: Option<thread::JoinHandle<()>>,
}

impl Backend {
    /// Listens on a free loopback port and serves `script`.
    pub fn start(script: Vec<BeResp>) -> std::io::Result<Backend> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        l.set_nonblocking(true)?;
        let state = Arc::new(Mutex::new(State {
            script,
            cursor: HashMap::new(),
            log: Vec::new(),
            conns: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let accept = thread::spawn(move || {
            while !sp.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) => {
                        let _ = c.set_nonblocking(false);
                        if let Ok(k) = c.try_clone() {
                            st.lock().expect("backend state").conns.push(k);
                        }
                        let (st2, sp2) = (st.clone(), sp.clone());
                        thread::spawn(move || serve(c, &st2, &sp2));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Ok(Backend {
            port,
            state,
            stop,
            accept: Some(accept),
        })
    }

    /// What the backend received so far.
    pub fn log(&self) -> Vec<Received> {
        self.state.lock().expect("backend state").log.clone()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for c in &self.state.lock().expect("backend state").conns {
            let _ = c.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request (head and body by its framing). `None` at EOF or on
/// bytes that are not a request.
fn read_request(c: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(Vec<String>, Vec<u8>)> {
    let head_end = loop {
        if let Some(p) = find(buf, b"\r\n\r\n") {
            break p;
        }
        let mut tmp = [0u8; 4096];
        match c.read(&mut tmp) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    };
    let head: Vec<String> = String::from_utf8_lossy(&buf[..head_end])
        .split("\r\n")
        .map(str::to_string)
        .collect();
    buf.drain(..head_end + 4);
    let hdr = |name: &str| {
        head.iter().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let mut body = Vec::new();
    if hdr("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let line = read_line(c, buf)?;
            let n = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
            if n == 0 {
                // Trailers end with an empty line.
                while !read_line(c, buf)?.is_empty() {}
                break;
            }
            fill(c, buf, n + 2)?;
            body.extend_from_slice(&buf[..n]);
            buf.drain(..n + 2);
        }
    } else if let Some(n) = hdr("content-length").and_then(|v| v.parse::<usize>().ok()) {
        fill(c, buf, n)?;
        body = buf.drain(..n).collect();
    }
    Some((head, body))
}

fn read_line(c: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(p) = find(buf, b"\r\n") {
            let l = String::from_utf8_lossy(&buf[..p]).into_owned();
            buf.drain(..p + 2);
            return Some(l);
        }
        let mut tmp = [0u8; 4096];
        match c.read(&mut tmp) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
}

fn fill(c: &mut TcpStream, buf: &mut Vec<u8>, n: usize) -> Option<()> {
    while buf.len() < n {
        let mut tmp = [0u8; 4096];
        match c.read(&mut tmp) {
            Ok(0) | Err(_) => return None,
            Ok(k) => buf.extend_from_slice(&tmp[..k]),
        }
    }
    Some(())
}

pub(crate) fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// Masks header values that differ between runs or daemons by design
/// (transaction ids).
fn mask_head(head: Vec<String>) -> Vec<String> {
    head.into_iter()
        .map(|l| match l.split_once(':') {
            Some((n, _)) if n.eq_ignore_ascii_case("x-varnish") => format!("{n}: *"),
            _ => l,
        })
        .collect()
}

fn serve(mut c: TcpStream, st: &Mutex<State>, stop: &AtomicBool) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    let mut reused = false;
    while !stop.load(Ordering::Relaxed) {
        let Some((head, body)) = read_request(&mut c, &mut buf) else {
            return;
        };
        let head_only = head.first().is_some_and(|l| l.starts_with("HEAD "));
        let path = head
            .first()
            .and_then(|l| l.split(' ').nth(1))
            .unwrap_or("")
            .split('?')
            .next()
            .unwrap_or("")
            .to_string();
        if path == PROBE_PATH {
            // A health probe: always healthy, not part of the transcript
            // (when probes come is a matter of timing).
            let _ =
                c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
            let _ = c.shutdown(Shutdown::Both);
            return;
        }
        let resp = {
            let mut s = st.lock().expect("backend state");
            s.log.push(Received {
                head: mask_head(head),
                body,
                reused,
            });
            pick(&mut s, &path)
        };
        reused = true;
        if !send(&mut c, &resp, head_only) {
            let _ = c.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// The next response for `path`: its own list first, then `*`; the last
/// one repeats once a list is used up.
fn pick(s: &mut State, path: &str) -> BeResp {
    let key = if s.script.iter().any(|r| r.url == path) {
        path.to_string()
    } else {
        "*".to_string()
    };
    let list: Vec<&BeResp> = s.script.iter().filter(|r| r.url == key).collect();
    if list.is_empty() {
        return BeResp {
            url: "*".into(),
            status: 200,
            reason: "OK".into(),
            headers: vec![],
            body: "fallback".into(),
            gzip: false,
            framing: Framing::Length,
            delay_ms: 0,
            stall_ms: 0,
            truncate: false,
            raw: None,
        };
    }
    let i = s.cursor.entry(key).or_insert(0);
    let r = list[(*i).min(list.len() - 1)].clone();
    *i += 1;
    r
}

pub(crate) fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    e.write_all(b).expect("gzip into memory");
    e.finish().expect("gzip into memory")
}

/// Sends one response; false when the connection must close after it.
fn send(c: &mut TcpStream, r: &BeResp, head_only: bool) -> bool {
    if r.delay_ms > 0 {
        thread::sleep(Duration::from_millis(r.delay_ms));
    }
    if let Some(raw) = &r.raw {
        let _ = c.write_all(raw.as_bytes());
        return false;
    }
    let body = if r.gzip {
        gzip(r.body.as_bytes())
    } else {
        r.body.as_bytes().to_vec()
    };
    let mut head = format!("HTTP/1.1 {} {}\r\n", r.status, r.reason);
    for (n, v) in &r.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    if r.gzip {
        head.push_str("Content-Encoding: gzip\r\n");
    }
    match r.framing {
        Framing::Length => head.push_str(&format!("Content-Length: {}\r\n", body.len())),
        Framing::Chunked => head.push_str("Transfer-Encoding: chunked\r\n"),
        Framing::Close => head.push_str("Connection: close\r\n"),
        Framing::None => {}
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    let body = if r.framing == Framing::None || head_only {
        Vec::new()
    } else {
        body
    };
    let cut = if r.truncate {
        body.len() / 2
    } else {
        body.len()
    };
    let half = cut / 2;
    let encode = |b: &[u8], last: bool| -> Vec<u8> {
        if r.framing != Framing::Chunked {
            return b.to_vec();
        }
        let mut o = Vec::new();
        for piece in b.chunks(7) {
            o.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            o.extend_from_slice(piece);
            o.extend_from_slice(b"\r\n");
        }
        if last {
            o.extend_from_slice(b"0\r\n\r\n");
        }
        o
    };
    if head_only {
        return c.write_all(&out).is_ok() && r.framing != Framing::Close;
    }
    out.extend(encode(&body[..half], false));
    if c.write_all(&out).is_err() {
        return false;
    }
    if r.stall_ms > 0 {
        thread::sleep(Duration::from_millis(r.stall_ms));
    }
    if c.write_all(&encode(&body[half..cut], !r.truncate)).is_err() {
        return false;
    }
    !(r.truncate || r.framing == Framing::Close)
}
