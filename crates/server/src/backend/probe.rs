//! Backend health probes, with varnishd's window/threshold semantics.
//!
//! Every `.interval` a probe connects, sends its request, and reads the
//! response until the backend closes or `.timeout` expires. A poll is good
//! when the status line's code equals `.expected_response`. The last
//! `.window` results are kept as bits; the backend is healthy while at least
//! `.threshold` of them are good. `.initial` good results are assumed at
//! start so that a backend is usable before its first polls complete.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::pool::{Address, PoolTls, Stream};

/// A resolved probe declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeSpec {
    /// The complete request bytes sent on each poll.
    pub request: Vec<u8>,
    pub expected_response: u16,
    pub timeout: Duration,
    pub interval: Duration,
    pub window: u32,
    pub threshold: u32,
    pub initial: u32,
    /// PROXY protocol version sent before the request (the backend's
    /// `.proxy_header`), naming the probe's own connection.
    pub proxy_header: Option<u8>,
}

impl ProbeSpec {
    /// Builds the spec from VCL fields; `request` lines (if given) replace
    /// the generated `GET url` request. Missing fields take varnishd's
    /// defaults (url `/`, 200, timeout 2s, interval 5s, window 8,
    /// threshold 3, initial threshold-1).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        url: Option<&str>,
        request_lines: Option<&[String]>,
        host: &str,
        expected_response: Option<u16>,
        timeout: Option<f64>,
        interval: Option<f64>,
        window: Option<u32>,
        threshold: Option<u32>,
        initial: Option<u32>,
    ) -> Self {
        let request = match request_lines {
            Some(lines) => {
                let mut r = String::new();
                for l in lines {
                    r.push_str(l);
                    r.push_str("\r\n");
                }
                r.push_str("\r\n");
                r.into_bytes()
            }
            None => format!(
                "GET {} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
                url.unwrap_or("/")
            )
            .into_bytes(),
        };
        let window = window.unwrap_or(8).clamp(1, 64);
        let threshold = threshold.unwrap_or(3).min(window);
        ProbeSpec {
            request,
            expected_response: expected_response.unwrap_or(200),
            timeout: Duration::from_secs_f64(timeout.unwrap_or(2.0).max(0.0)),
            interval: Duration::from_secs_f64(interval.unwrap_or(5.0).max(0.001)),
            window,
            threshold,
            initial: initial.unwrap_or(threshold.saturating_sub(1)).min(window),
            proxy_header: None,
        }
    }
}

/// The outcome of one poll, with the flags varnishlog shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PollResult {
    pub connected_v4: bool,
    pub connected_v6: bool,
    pub connected_unix: bool,
    pub sent: bool,
    pub received: bool,
    pub good: bool,
    /// Seconds from connect to the end of the response.
    pub elapsed: f64,
    /// The status line, when one was read.
    pub status_line: String,
}

/// Polls once (over TLS when the backend's pool is a TLS one).
pub async fn poll(addr: &Address, tls: Option<&PoolTls>, spec: &ProbeSpec) -> PollResult {
    let start = Instant::now();
    let mut r = PollResult::default();
    let fut = async {
        // Without a TCP connection, a PROXY header names 0.0.0.0 as both ends.
        let zero = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        let (mut stream, ends) = match addr {
            Address::Tcp(a) => match tokio::net::TcpStream::connect(a).await {
                Ok(s) => {
                    r.connected_v4 = a.is_ipv4();
                    r.connected_v6 = a.is_ipv6();
                    let local = s.local_addr().unwrap_or(zero);
                    let s = match tls {
                        Some(t) => match t.connect(s).await {
                            Ok(s) => s,
                            Err(_) => return,
                        },
                        None => Stream::Tcp(s),
                    };
                    (s, (local, *a))
                }
                Err(_) => return,
            },
            Address::Unix(p) => match tokio::net::UnixStream::connect(p).await {
                Ok(s) => {
                    r.connected_unix = true;
                    (Stream::Unix(s), (zero, zero))
                }
                Err(_) => return,
            },
        };
        let preface = match spec.proxy_header {
            None => Vec::new(),
            Some(1) => lacquer_http::proxy::encode_v1(
                &ends.0.ip().to_string(),
                &ends.0.port().to_string(),
                ends.1,
            ),
            Some(_) => lacquer_http::proxy::encode_v2(ends.0, ends.1, None),
        };
        if stream
            .write_all(&[&preface[..], &spec.request].concat())
            .await
            .is_err()
        {
            return;
        }
        r.sent = true;
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) => break,
                Ok(n) => {
                    // Only the status line matters; keep reading (and
                    // discarding) until the backend closes.
                    if buf.len() < 1024 {
                        buf.extend_from_slice(&chunk[..n.min(1024 - buf.len())]);
                    }
                }
                Err(_) => break,
            }
        }
        if buf.is_empty() {
            return;
        }
        r.received = true;
        let line_end = buf
            .iter()
            .position(|b| *b == b'\r' || *b == b'\n')
            .unwrap_or(buf.len());
        r.status_line = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        r.good = parse_status(&r.status_line) == Some(spec.expected_response);
    };
    let timed_out = tokio::time::timeout(spec.timeout, fut).await.is_err();
    if timed_out {
        r.good = false;
    }
    r.elapsed = start.elapsed().as_secs_f64();
    r
}

fn parse_status(line: &str) -> Option<u16> {
    let rest = line.strip_prefix("HTTP/1.")?;
    let mut parts = rest.splitn(3, ' ');
    let _minor = parts.next()?;
    let code = parts.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok()
}

/// An administrative override of the probed health (`backend.set_health`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admin {
    Auto = 0,
    Healthy = 1,
    Sick = 2,
}

/// The health of one backend.
#[derive(Debug)]
pub struct Health {
    admin: AtomicU8,
    probed_healthy: AtomicBool,
    /// When the health last changed, seconds since the epoch (as f64 bits).
    changed: std::sync::atomic::AtomicU64,
    state: Mutex<Window>,
}

#[derive(Debug, Clone)]
struct Window {
    /// Happy polls, newest in the lowest bit.
    bits: u64,
    /// The other stages of each poll, in the order of [`flags`]: IPv4,
    /// IPv6 and Unix connects, send errors, sends, receive errors,
    /// receives.
    stages: [u64; 7],
    avg: f64,
    polls: u32,
}

/// What a poll did to the health, for the `Backend_health` log record.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// `Went healthy`, `Still healthy`, `Went sick`, `Still sick`.
    pub verdict: &'static str,
    pub good: u32,
    pub avg: f64,
}

impl Health {
    /// Health of a backend without a probe: healthy unless set otherwise.
    pub fn unprobed() -> Self {
        Health {
            admin: AtomicU8::new(Admin::Auto as u8),
            probed_healthy: AtomicBool::new(true),
            // A new backend counts as having just changed, as varnishd's.
            changed: now_secs().to_bits().into(),
            state: Mutex::new(Window {
                bits: 0,
                stages: [0; 7],
                avg: 0.0,
                polls: 0,
            }),
        }
    }

    /// Health of a probed backend before its first poll.
    pub fn probed(spec: &ProbeSpec) -> Self {
        let bits = if spec.initial == 0 {
            0
        } else {
            u64::MAX >> (64 - spec.initial)
        };
        Health {
            admin: AtomicU8::new(Admin::Auto as u8),
            probed_healthy: AtomicBool::new(spec.initial >= spec.threshold),
            changed: now_secs().to_bits().into(),
            state: Mutex::new(Window {
                bits,
                stages: [0; 7],
                avg: 0.0,
                polls: 0,
            }),
        }
    }

    /// Whether requests may use the backend now.
    pub fn healthy(&self) -> bool {
        match self.admin() {
            Admin::Healthy => true,
            Admin::Sick => false,
            Admin::Auto => self.probed_healthy.load(Ordering::Relaxed),
        }
    }

    /// The `VBE.*.happy` counter: one bit a poll, newest lowest, as
    /// varnishd's shift register; 0 for a backend without a probe.
    pub fn happy_bits(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).bits
    }

    /// The probed health, ignoring any override.
    pub fn probed_healthy(&self) -> bool {
        self.probed_healthy.load(Ordering::Relaxed)
    }

    pub fn admin(&self) -> Admin {
        match self.admin.load(Ordering::Relaxed) {
            1 => Admin::Healthy,
            2 => Admin::Sick,
            _ => Admin::Auto,
        }
    }

    /// When the health last changed (creation time if never).
    pub fn last_change(&self) -> f64 {
        f64::from_bits(self.changed.load(Ordering::Relaxed))
    }

    /// Overrides the probed health; when that changes whether the backend
    /// is usable, it counts as a health change (the shard director's
    /// rampup starts from it).
    pub fn set_admin(&self, a: Admin) {
        let was = self.healthy();
        self.admin.store(a as u8, Ordering::Relaxed);
        if self.healthy() != was {
            self.changed.store(now_secs().to_bits(), Ordering::Relaxed);
        }
    }

    /// The record varnishd logs when probing starts: the verdict of the
    /// initial window, its flags (`H` when the newest initial poll counts
    /// as good) and the number of good polls in it.
    pub fn initial_record(&self, spec: &ProbeSpec) -> (&'static str, &'static str, u32) {
        let w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let good = (w.bits & mask(spec.window)).count_ones();
        let verdict = if good >= spec.threshold {
            "Went healthy"
        } else {
            "Went sick"
        };
        let flags = if w.bits & 1 == 1 {
            "-------H"
        } else {
            "--------"
        };
        (verdict, flags, good)
    }

    /// Good polls in the window and the window size, as `backend.list`
    /// shows them (`3/8`).
    pub fn window_counts(&self, spec: &ProbeSpec) -> (u32, u32) {
        let w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        ((w.bits & mask(spec.window)).count_ones(), spec.window)
    }

    /// Records a poll; returns the transition to log.
    pub fn record(&self, spec: &ProbeSpec, r: &PollResult) -> Transition {
        let mut w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        w.bits = (w.bits << 1) | u64::from(r.good);
        for (stage, c) in w.stages.iter_mut().zip(flags(r).bytes()) {
            *stage = (*stage << 1) | u64::from(c != b'-');
        }
        if r.good {
            // Running average over up to four polls, as varnishd reports it.
            w.polls = (w.polls + 1).min(4);
            w.avg += (r.elapsed - w.avg) / f64::from(w.polls);
        }
        let good = (w.bits & mask(spec.window)).count_ones();
        let now_healthy = good >= spec.threshold;
        let was = self.probed_healthy.swap(now_healthy, Ordering::Relaxed);
        if was != now_healthy {
            self.changed.store(now_secs().to_bits(), Ordering::Relaxed);
        }
        let verdict = match (was, now_healthy) {
            (false, true) => "Went healthy",
            (true, true) => "Still healthy",
            (true, false) => "Went sick",
            (false, false) => "Still sick",
        };
        Transition {
            verdict,
            good,
            avg: w.avg,
        }
    }
}

/// Seconds since the epoch.
fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn mask(window: u32) -> u64 {
    if window >= 64 {
        u64::MAX
    } else {
        (1u64 << window) - 1
    }
}

impl Health {
    /// The probe history as `backend.list -p` shows it: the average time
    /// of good polls, then one line per stage that happened at least once
    /// in the last 64 polls, oldest poll on the left.
    pub fn history(&self) -> String {
        const STAGES: [(char, &str); 8] = [
            ('4', "Good IPv4"),
            ('6', "Good IPv6"),
            ('U', "Good UNIX"),
            ('x', "Error Xmit"),
            ('X', "Good Xmit"),
            ('r', "Error Recv"),
            ('R', "Good Recv"),
            ('H', "Happy"),
        ];
        let w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = format!(
            "  Average response time of good probes: {:.6}\n  Oldest {} Newest\n",
            w.avg,
            "=".repeat(50)
        );
        let maps = w.stages.iter().copied().chain([w.bits]);
        for (map, (c, name)) in maps.zip(STAGES) {
            if map == 0 {
                continue;
            }
            out.push_str("  ");
            for i in (0..64).rev() {
                out.push(if map >> i & 1 == 1 { c } else { '-' });
            }
            out.push(' ');
            out.push_str(name);
            out.push('\n');
        }
        out
    }
}

/// The flag string of a `Backend_health` record, e.g. `4---X-RH`.
pub fn flags(r: &PollResult) -> String {
    let f = |on: bool, c: char| if on { c } else { '-' };
    let mut s = String::with_capacity(8);
    s.push(f(r.connected_v4, '4'));
    s.push(f(r.connected_v6, '6'));
    s.push(f(r.connected_unix, 'U'));
    s.push(f(
        !r.sent && (r.connected_v4 || r.connected_v6 || r.connected_unix),
        'x',
    ));
    s.push(f(r.sent, 'X'));
    s.push(f(r.sent && !r.received, 'r'));
    s.push(f(r.received, 'R'));
    s.push(f(r.good, 'H'));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn spec() -> ProbeSpec {
        ProbeSpec::new(
            Some("/health"),
            None,
            "example",
            None,
            Some(1.0),
            Some(0.1),
            Some(4),
            Some(3),
            None,
        )
    }

    async fn server(reply: &'static [u8]) -> Address {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut b = [0u8; 1024];
                let _ = s.read(&mut b).await;
                let _ = s.write_all(reply).await;
            }
        });
        Address::Tcp(addr)
    }

    #[test]
    fn defaults_and_request() {
        let s = spec();
        assert_eq!(s.initial, 2);
        assert_eq!(
            s.request,
            b"GET /health HTTP/1.1\r\nHost: example\r\nConnection: close\r\n\r\n"
        );
        let lines = vec!["GET / HTTP/1.1".to_string(), "Host: x".to_string()];
        let s = ProbeSpec::new(None, Some(&lines), "h", None, None, None, None, None, None);
        assert_eq!(s.request, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!((s.window, s.threshold, s.initial), (8, 3, 2));
    }

    #[tokio::test]
    async fn good_and_bad_polls() {
        let s = spec();
        let good = poll(&server(b"HTTP/1.1 200 OK\r\n\r\n").await, None, &s).await;
        assert!(good.good, "{good:?}");
        assert_eq!(flags(&good), "4---X-RH");
        assert_eq!(good.status_line, "HTTP/1.1 200 OK");
        let bad = poll(&server(b"HTTP/1.1 500 Oops\r\n\r\n").await, None, &s).await;
        assert!(!bad.good);
        assert_eq!(flags(&bad), "4---X-R-");
        let junk = poll(&server(b"garbage\r\n").await, None, &s).await;
        assert!(!junk.good);
    }

    #[test]
    fn window_threshold() {
        let s = spec();
        let h = Health::probed(&s);
        assert!(!h.healthy(), "initial 2 < threshold 3");
        let good = PollResult {
            good: true,
            ..Default::default()
        };
        let bad = PollResult::default();
        assert_eq!(h.record(&s, &good).verdict, "Went healthy");
        assert!(h.healthy());
        assert_eq!(h.record(&s, &bad).verdict, "Still healthy");
        assert_eq!(h.record(&s, &bad).verdict, "Went sick");
        assert_eq!(h.window_counts(&s), (2, 4));
        h.set_admin(Admin::Healthy);
        assert!(h.healthy());
        h.set_admin(Admin::Auto);
        assert!(!h.healthy());
    }

    #[test]
    fn history_lines() {
        let s = spec();
        let h = Health::probed(&s);
        let good = PollResult {
            connected_v4: true,
            sent: true,
            received: true,
            good: true,
            ..Default::default()
        };
        let refused = PollResult::default();
        h.record(&s, &good);
        h.record(&s, &refused);
        let text = h.history();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("  Average response time of good probes: "));
        assert_eq!(lines[1], format!("  Oldest {} Newest", "=".repeat(50)));
        // Initial 2 happy, then the good poll, then the refused one.
        assert!(
            lines.contains(&format!("  {}HHH- Happy", "-".repeat(60)).as_str()),
            "{text}"
        );
        assert!(
            lines.contains(&format!("  {}4- Good IPv4", "-".repeat(62)).as_str()),
            "{text}"
        );
        assert!(
            !text.contains("Good UNIX"),
            "stages that never happened are left out"
        );
    }
}
