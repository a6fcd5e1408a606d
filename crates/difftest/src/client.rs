//! The scripted client: sends each step's raw bytes on its connection,
//! reads the response by HTTP/1 framing (interim 1xx, HEAD, 204/304,
//! chunked, Content-Length, close-delimited) and writes a normalised
//! transcript: status line, headers without volatile values, the body (gzip
//! bodies compared decoded), and at the end whether each connection is
//! still open. A response that does not come within the read timeout is
//! recorded as `TIMEOUT`, the mark of a hang.

use crate::backend::find;
use crate::scenario::Step;
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// How long the client waits for a response before calling it a hang.
pub const READ_TIMEOUT: Duration = Duration::from_secs(8);

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
    /// The peer closed (or the connection failed).
    eof: bool,
}

enum Got {
    Bytes,
    Eof,
    Timeout,
}

impl Conn {
    fn more(&mut self, deadline: Instant) -> Got {
        if self.eof {
            return Got::Eof;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Got::Timeout;
        }
        let _ = self.s.set_read_timeout(Some(left));
        let mut tmp = [0u8; 16384];
        match self.s.read(&mut tmp) {
            Ok(0) => {
                self.eof = true;
                Got::Eof
            }
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                Got::Bytes
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Got::Timeout
            }
            Err(_) => {
                self.eof = true;
                Got::Eof
            }
        }
    }
}

/// A parsed response.
struct Resp {
    status_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

enum ReadErr {
    Timeout(usize),
    Eof(usize),
    Garbage(String),
}

fn read_head(c: &mut Conn, deadline: Instant) -> Result<(String, Vec<(String, String)>), ReadErr> {
    loop {
        if let Some(p) = find(&c.buf, b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&c.buf[..p]).into_owned();
            c.buf.drain(..p + 4);
            let mut lines = text.split("\r\n");
            let sl = lines.next().unwrap_or("").to_string();
            if !sl.starts_with("HTTP/1.") {
                return Err(ReadErr::Garbage(sl));
            }
            let hs = lines
                .map(|l| match l.split_once(':') {
                    // An empty value keeps its spelling (`Name:` and
                    // `Name: ` differ on the wire), quoted.
                    Some((n, v)) if v.trim().is_empty() => (n.to_string(), format!("{v:?}")),
                    Some((n, v)) => (n.to_string(), v.trim().to_string()),
                    None => (l.to_string(), String::new()),
                })
                .collect();
            return Ok((sl, hs));
        }
        match c.more(deadline) {
            Got::Bytes => {}
            Got::Eof => return Err(ReadErr::Eof(c.buf.len())),
            Got::Timeout => return Err(ReadErr::Timeout(c.buf.len())),
        }
    }
}

fn read_resp(c: &mut Conn, head_req: bool) -> Result<Resp, ReadErr> {
    let deadline = Instant::now() + READ_TIMEOUT;
    let (mut sl, mut hs) = read_head(c, deadline)?;
    // Interim responses: skip to the final one.
    while sl
        .split(' ')
        .nth(1)
        .is_some_and(|s| s.starts_with('1') && s != "101")
    {
        (sl, hs) = read_head(c, deadline)?;
    }
    let status: u16 = sl
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let hdr = |n: &str| {
        hs.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if head_req || status == 204 || status == 304 {
    } else if hdr("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let line = loop {
                if let Some(p) = find(&c.buf, b"\r\n") {
                    let l = String::from_utf8_lossy(&c.buf[..p]).into_owned();
                    c.buf.drain(..p + 2);
                    break l;
                }
                match c.more(deadline) {
                    Got::Bytes => {}
                    Got::Eof => return Err(ReadErr::Eof(body.len())),
                    Got::Timeout => return Err(ReadErr::Timeout(body.len())),
                }
            };
            let Ok(n) = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            else {
                return Err(ReadErr::Garbage(format!("chunk size {line:?}")));
            };
            let want = if n == 0 { 2 } else { n + 2 };
            while c.buf.len() < want {
                match c.more(deadline) {
                    Got::Bytes => {}
                    Got::Eof => return Err(ReadErr::Eof(body.len())),
                    Got::Timeout => return Err(ReadErr::Timeout(body.len())),
                }
            }
            if n == 0 {
                c.buf.drain(..2);
                break;
            }
            body.extend_from_slice(&c.buf[..n]);
            c.buf.drain(..n + 2);
        }
    } else if let Some(n) = hdr("content-length").and_then(|v| v.parse::<usize>().ok()) {
        while c.buf.len() < n {
            match c.more(deadline) {
                Got::Bytes => {}
                Got::Eof => return Err(ReadErr::Eof(c.buf.len())),
                Got::Timeout => return Err(ReadErr::Timeout(c.buf.len())),
            }
        }
        body = c.buf.drain(..n).collect();
    } else {
        loop {
            match c.more(deadline) {
                Got::Bytes => {}
                Got::Eof => break,
                Got::Timeout => return Err(ReadErr::Timeout(c.buf.len())),
            }
        }
        body = std::mem::take(&mut c.buf);
    }
    Ok(Resp {
        status_line: sl,
        headers: hs,
        body,
    })
}

/// Headers whose values differ by design between runs or daemons.
const MASKED: &[&str] = &["date", "x-varnish", "age", "last-modified", "expires"];

fn gunzip(b: &[u8]) -> Option<Vec<u8>> {
    let mut d = flate2::read::MultiGzDecoder::new(b);
    let mut out = Vec::new();
    d.read_to_end(&mut out).ok()?;
    Some(out)
}

/// `XID: 1234` in synthetic bodies becomes `XID: *`.
fn mask_xid(b: &str) -> (String, bool) {
    let mut out = String::new();
    let mut rest = b;
    let mut hit = false;
    while let Some(p) = rest.find("XID: ") {
        out.push_str(&rest[..p + 5]);
        rest = rest[p + 5..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push('*');
        hit = true;
    }
    out.push_str(rest);
    (out, hit)
}

/// What a connection still had to say after the script: a response
/// nobody read is named by its status line (its headers carry dates and
/// ids, and the bytes read at once end wherever 256 ends them), other
/// bytes are shown as they are.
fn unexpected(b: &[u8]) -> String {
    if b.starts_with(b"HTTP/")
        && let Some(end) = b.windows(2).position(|w| w == b"\r\n")
    {
        return format!("open, unexpected response {}", show(&b[..end]));
    }
    format!("open, {} unexpected bytes {}", b.len(), show(b))
}

pub(crate) fn show(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let s: String = s.chars().take(400).collect();
    s.escape_debug().to_string()
}

fn describe(r: &Resp, out: &mut Vec<String>, tag: &str) {
    out.push(format!("{tag} status {}", r.status_line));
    let gz = r
        .headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("content-encoding") && v.contains("gzip"));
    let partial = r.status_line.split(' ').nth(1) == Some("206");
    // A synthetic response's length depends on the XID in its body, also
    // when only its head was asked for, and so do the totals of its ranges.
    let synthetic = r
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("retry-after"));
    let synthetic_head = r.body.is_empty() && synthetic;
    let (body, xid) = if gz && !partial && !r.body.is_empty() {
        match gunzip(&r.body) {
            Some(p) => {
                let (t, x) = mask_xid(&String::from_utf8_lossy(&p));
                (
                    format!("gunzipped {:?}", t.chars().take(400).collect::<String>()),
                    x,
                )
            }
            None => (format!("bad gzip, {} bytes", r.body.len()), false),
        }
    } else if gz && partial {
        (format!("gzip range of {} bytes", r.body.len()), false)
    } else {
        let (t, x) = mask_xid(&String::from_utf8_lossy(&r.body));
        (format!("{:?}", t.chars().take(400).collect::<String>()), x)
    };
    // Header order is compared elsewhere (issue 23): here a stable sort by
    // name keeps an order difference from hiding the rest.
    let mut headers = r.headers.clone();
    headers.sort_by_key(|(n, _)| n.to_ascii_lowercase());
    for (n, v) in &headers {
        let l = n.to_ascii_lowercase();
        // Length or chunked depends on whether the fetch had finished
        // when delivery began, a race in varnishd itself: the body and
        // the connection's state are compared instead.
        if l == "transfer-encoding" || l == "content-length" {
            continue;
        }
        let v = if MASKED.contains(&l.as_str())
            || ((gz || xid || synthetic_head) && l == "content-length")
            || ((gz || xid || synthetic) && l == "content-range")
            || (xid && l == "etag")
        {
            "*"
        } else {
            v.as_str()
        };
        // The product in Via is a deliberate difference (DEVIATIONS.md).
        let v = if l == "via" {
            v.split(" (").next().unwrap_or(v)
        } else {
            v
        };
        out.push(format!("{tag} hdr {n}: {v}"));
    }
    out.push(format!("{tag} body {body}"));
}

/// How long a step on a new connection waits after the step before it.
const NEW_CONN_PAUSE_MS: u64 = 30;

/// Runs the steps against `addr` and returns the transcript lines.
pub fn run(addr: &str, steps: &[Step]) -> Vec<String> {
    let mut out = Vec::new();
    let mut conns: BTreeMap<usize, Conn> = BTreeMap::new();
    let mut i = 0;
    while i < steps.len() {
        let st = &steps[i];
        let tag = format!("r{i} c{}", st.conn);
        if st.wait_ms > 0 {
            std::thread::sleep(Duration::from_millis(st.wait_ms));
        }
        if let std::collections::btree_map::Entry::Vacant(e) = conns.entry(st.conn) {
            // A request on a new connection comes a little after the
            // previous answer, as a separate client's would: both daemons
            // finish what the last fetch left (its backend connection
            // back in the pool) first, so reuse does not hang on which
            // thread the machine's load schedules first.
            if i > 0 {
                std::thread::sleep(Duration::from_millis(NEW_CONN_PAUSE_MS));
            }
            match TcpStream::connect(addr) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    e.insert(Conn {
                        s,
                        buf: Vec::new(),
                        eof: false,
                    });
                }
                Err(err) => {
                    out.push(format!("{tag} connect failed: {}", err.kind()));
                    i += 1;
                    continue;
                }
            }
        }
        let c = conns.get_mut(&st.conn).expect("connection just opened");
        // A pipelined group: this step and the following ones flagged so.
        let mut group = vec![i];
        let mut bytes = st.raw.clone().into_bytes();
        while steps[*group.last().expect("non-empty")].pipeline
            && group.last().expect("non-empty") + 1 < steps.len()
            && steps[group.last().expect("non-empty") + 1].conn == st.conn
        {
            let n = group.last().expect("non-empty") + 1;
            bytes.extend_from_slice(steps[n].raw.as_bytes());
            group.push(n);
        }
        if c.eof || c.s.write_all(&bytes).is_err() {
            out.push(format!("{tag} send failed: connection closed"));
            c.eof = true;
            i = group.last().expect("non-empty") + 1;
            continue;
        }
        if st.close_early {
            let _ = c.s.shutdown(Shutdown::Both);
            c.eof = true;
            out.push(format!("{tag} closed early"));
            // Let the daemon see the close before the next step.
            std::thread::sleep(Duration::from_millis(100));
            i = group.last().expect("non-empty") + 1;
            continue;
        }
        for &k in &group {
            let tag = format!("r{k} c{}", st.conn);
            let head_req = steps[k].raw.starts_with("HEAD ");
            match read_resp(c, head_req) {
                Ok(r) => describe(&r, &mut out, &tag),
                Err(ReadErr::Timeout(n)) => {
                    out.push(format!("{tag} TIMEOUT after {n} bytes"));
                    c.eof = true;
                    let _ = c.s.shutdown(Shutdown::Both);
                    break;
                }
                Err(ReadErr::Eof(n)) => {
                    out.push(format!("{tag} EOF after {n} bytes"));
                    break;
                }
                Err(ReadErr::Garbage(g)) => {
                    out.push(format!(
                        "{tag} unparsable response {:?}",
                        show(g.as_bytes())
                    ));
                    c.eof = true;
                    let _ = c.s.shutdown(Shutdown::Both);
                    break;
                }
            }
        }
        i = group.last().expect("non-empty") + 1;
    }
    // Is each connection still open? One pause for all of them, then a
    // read that does not wait: a connection the daemon closed reads EOF.
    // (Waiting on each in turn made the last ones idle long enough to
    // meet timeout_idle, a race between the two daemons' timers.)
    std::thread::sleep(Duration::from_millis(300));
    for (n, c) in conns.iter_mut() {
        if c.eof {
            out.push(format!("c{n} end closed"));
            continue;
        }
        let _ = c.s.set_nonblocking(true);
        let mut tmp = [0u8; 256];
        let state = match c.s.read(&mut tmp) {
            Ok(0) => "closed".to_string(),
            Ok(k) => unexpected(&tmp[..k]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                "open".to_string()
            }
            Err(_) => "closed".to_string(),
        };
        out.push(format!("c{n} end {state}"));
    }
    out
}
