//! Pluggable readers of a running daemon's counters and log.
//!
//! varnishtest reads counters (VSC) and the log (VSL) from the daemon's
//! shared memory through libvarnishapi. The runner reaches them through two
//! small traits instead, so that the integrator can plug in a native
//! shared-memory reader later. The default implementations shell out to
//! `varnishstat` and `varnishlog`, which works with real varnishd today.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// Reads the counters of one daemon instance.
pub trait CounterSource: Send {
    /// All counters with fully qualified names (`MAIN.n_object`,
    /// `VBE.vcl1.s1.req`, ...) and their current values.
    fn snapshot(&mut self) -> Result<Vec<(String, u64)>, String>;
}

/// Creates a [`CounterSource`] for the daemon whose `-n` directory is given.
pub type CounterFactory = Arc<dyn Fn(&Path) -> Box<dyn CounterSource> + Send + Sync>;

/// Counter reader running `varnishstat -1 -n DIR`.
#[derive(Debug, Clone)]
pub struct VarnishstatCounters {
    /// The `varnishstat` binary.
    pub bin: PathBuf,
    /// The daemon's `-n` directory.
    pub workdir: PathBuf,
}

impl CounterSource for VarnishstatCounters {
    fn snapshot(&mut self) -> Result<Vec<(String, u64)>, String> {
        let out = Command::new(&self.bin)
            .arg("-1")
            .arg("-n")
            .arg(&self.workdir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.bin.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} failed: {}",
                self.bin.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(parse_varnishstat(&String::from_utf8_lossy(&out.stdout)))
    }
}

/// Parse `varnishstat -1` output (`NAME VALUE RATE DESCRIPTION` lines).
pub fn parse_varnishstat(s: &str) -> Vec<(String, u64)> {
    s.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next()?;
            let v = it.next()?.parse::<u64>().ok()?;
            Some((name.to_string(), v))
        })
        .collect()
}

/// One log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Transaction id (0 for non-transactional records).
    pub vxid: u64,
    /// Tag name (`ReqURL`, `Begin`, ...).
    pub tag: String,
    /// `c` (client side), `b` (backend side) or `-`.
    pub kind: char,
    /// The record payload.
    pub data: String,
}

/// What a logexpect asks the log reader for (its command line options).
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    /// The daemon's `-n` directory.
    pub workdir: PathBuf,
    /// Grouping (`-g`): `vxid` (default), `request`, `session`, `raw`.
    pub grouping: String,
    /// VSL query (`-q`).
    pub query: Option<String>,
    /// Start from the head of the log (`-d`) instead of new records only.
    pub from_head: bool,
    /// Tags to include (`-i`), tags to exclude (`-x`).
    pub include: Vec<String>,
    /// Tags to exclude.
    pub exclude: Vec<String>,
    /// Further varnishlog-style options, passed through as given
    /// (`-b`, `-c`, `-I REGEX`, `-X REGEX`, `-T SECONDS`, `-L LIMIT`).
    pub extra: Vec<String>,
}

/// Streams log records of one daemon instance.
pub trait LogSource: Send {
    /// The next record, waiting at most `timeout`. `Ok(None)` means no
    /// record arrived in time (the caller polls again).
    fn next(&mut self, timeout: Duration) -> Result<Option<LogRecord>, String>;
}

/// Creates a [`LogSource`]. It must only return once it is attached, so
/// that records produced after it returns are seen.
pub type LogFactory = Arc<dyn Fn(&LogQuery) -> Result<Box<dyn LogSource>, String> + Send + Sync>;

/// Log reader running `varnishlog` and parsing its text output.
///
/// `varnishlog -d` exits after dumping the log, so reading "from the head
/// and then on" is done with two readers: a tailing one attached first, and
/// a dump of what was already there. Records of the dump are delivered
/// first; the tail's first records that repeat the end of the dump are
/// dropped.
pub struct VarnishlogSource {
    child: Child,
    rx: Receiver<LogRecord>,
    head: std::collections::VecDeque<LogRecord>,
}

impl std::fmt::Debug for VarnishlogSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VarnishlogSource").finish()
    }
}

impl VarnishlogSource {
    /// Start `bin` for `q` and wait until it has attached to the log.
    pub fn start(bin: &Path, q: &LogQuery) -> Result<Self, String> {
        let (child, rx) = Self::spawn(bin, q, false)?;
        let mut head = std::collections::VecDeque::new();
        if q.from_head {
            let (mut dump, drx) = Self::spawn(bin, q, true)?;
            let _ = dump.wait();
            let mut dumped = Vec::new();
            while let Ok(r) = drx.recv_timeout(Duration::from_secs(5)) {
                dumped.push(r);
            }
            // The tail reader attached first, so its first records may
            // repeat the end of the dump: drop that overlap.
            std::thread::sleep(Duration::from_millis(50));
            let mut tail = Vec::new();
            while let Ok(r) = rx.try_recv() {
                tail.push(r);
            }
            let k = (0..=tail.len().min(dumped.len()))
                .rev()
                .find(|&k| tail[..k] == dumped[dumped.len() - k..])
                .unwrap_or(0);
            head.extend(dumped);
            head.extend(tail.into_iter().skip(k));
        }
        Ok(VarnishlogSource { child, rx, head })
    }

    fn spawn(bin: &Path, q: &LogQuery, dump: bool) -> Result<(Child, Receiver<LogRecord>), String> {
        let mut c = Command::new(bin);
        c.arg("-n").arg(&q.workdir);
        let g = if q.grouping.is_empty() {
            "vxid"
        } else {
            q.grouping.as_str()
        };
        c.arg("-g").arg(g);
        if let Some(qq) = &q.query {
            c.arg("-q").arg(qq);
        }
        if dump {
            c.arg("-d");
        }
        for i in &q.include {
            c.arg("-i").arg(i);
        }
        for x in &q.exclude {
            c.arg("-x").arg(x);
        }
        c.args(&q.extra);
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = c
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
        let pid = child.id();
        let out = child.stdout.take().ok_or("no stdout from varnishlog")?;
        let (tx, rx) = channel();
        let raw = g == "raw";
        // One thread reads lines; another assembles records, appending
        // continuation lines (multi-line payloads) to the previous record
        // and flushing it once the next record starts or output pauses.
        let (ltx, lrx) = channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(out).split(b'\n') {
                let Ok(line) = line else { break };
                if ltx.send(crate::text::latin1(&line)).is_err() {
                    break;
                }
            }
        });
        std::thread::spawn(move || {
            let mut kind = '-';
            let mut vxid = 0u64;
            let mut pending: Option<LogRecord> = None;
            loop {
                let line = match lrx.recv_timeout(Duration::from_millis(20)) {
                    Ok(l) => l,
                    Err(RecvTimeoutError::Timeout) => {
                        if let Some(r) = pending.take()
                            && tx.send(unquote_binary(r)).is_err()
                        {
                            return;
                        }
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                };
                let starts_record = if raw {
                    is_raw_record(&line)
                } else {
                    line.is_empty() || line.starts_with(['*', '-'])
                };
                if !starts_record {
                    if let Some(p) = pending.as_mut() {
                        p.data.push('\n');
                        p.data.push_str(&line);
                    }
                    continue;
                }
                if let Some(r) = pending.take()
                    && tx.send(unquote_binary(r)).is_err()
                {
                    return;
                }
                pending = if raw {
                    parse_raw_line(&line)
                } else {
                    parse_grouped_line(&line, &mut vxid, &mut kind)
                };
            }
            if let Some(r) = pending.take() {
                let _ = tx.send(unquote_binary(r));
            }
        });
        if dump {
            return Ok((child, rx));
        }
        // Wait until varnishlog has mapped the log segment, so that
        // nothing produced after we return is missed.
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps"))
                && maps.contains("_.vsm_child")
            {
                std::thread::sleep(Duration::from_millis(20));
                break;
            }
            if let Ok(Some(_)) = child.try_wait() {
                return Err("varnishlog exited early (is the daemon running?)".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok((child, rx))
    }
}

impl Drop for VarnishlogSource {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LogSource for VarnishlogSource {
    fn next(&mut self, timeout: Duration) -> Result<Option<LogRecord>, String> {
        if let Some(r) = self.head.pop_front() {
            return Ok(Some(r));
        }
        match self.rx.recv_timeout(timeout) {
            Ok(r) => Ok(Some(r)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err("log reader ended".into()),
        }
    }
}

/// Tags whose payload is binary: varnishlog prints them quoted, with
/// `%XX` escapes.
const BINARY_TAGS: &[&str] = &[
    "Debug", "Hash", "H2RxHdr", "H2RxBody", "H2TxHdr", "H2TxBody",
];

/// Undo varnishlog's quoting of binary payloads (and drop the trailing
/// NUL byte varnishtest does not see either).
pub fn unquote_binary(mut r: LogRecord) -> LogRecord {
    if !BINARY_TAGS.contains(&r.tag.as_str()) || r.data.len() < 2 {
        return r;
    }
    let Some(inner) = r.data.strip_prefix('"').and_then(|d| d.strip_suffix('"')) else {
        return r;
    };
    let b = inner.as_bytes();
    let mut out = String::with_capacity(inner.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&inner[i + 1..i + 3], 16)
        {
            out.push(v as char);
            i += 3;
            continue;
        }
        out.push(inner[i..].chars().next().unwrap_or('?'));
        i += inner[i..].chars().next().map(char::len_utf8).unwrap_or(1);
    }
    if out.ends_with('\0') {
        out.pop();
    }
    r.data = out;
    r
}

/// Whether a raw-mode output line starts a record (`%10u TAG ...`).
pub fn is_raw_record(line: &str) -> bool {
    line.len() > 11 && line.as_bytes()[10] == b' ' && line[..10].trim_start().parse::<u64>().is_ok()
}

/// Parse a `varnishlog -g raw` line: `VXID TAG TYPE DATA`.
pub fn parse_raw_line(line: &str) -> Option<LogRecord> {
    let t = line.trim_start();
    let (vxid, rest) = t.split_once(' ')?;
    let vxid = vxid.parse().ok()?;
    let rest = rest.trim_start();
    let (tag, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let rest = rest.trim_start();
    let (kind, data) = rest.split_at(rest.chars().next().map(char::len_utf8).unwrap_or(0));
    Some(LogRecord {
        vxid,
        tag: tag.to_string(),
        kind: kind.chars().next().unwrap_or('-'),
        data: data.strip_prefix(' ').unwrap_or(data).to_string(),
    })
}

/// Parse a grouped `varnishlog` line (`*   << Request  >> 1001` headers
/// set the current transaction; `-   Tag   data` lines are records).
pub fn parse_grouped_line(line: &str, vxid: &mut u64, kind: &mut char) -> Option<LogRecord> {
    let lead: String = line
        .chars()
        .take_while(|c| *c == '*' || *c == '-')
        .collect();
    if lead.is_empty() {
        return None;
    }
    if lead.starts_with('*') {
        let rest = line[lead.len()..].trim_start();
        // Transaction header.
        let inner = rest.strip_prefix("<<")?;
        let (ty, id) = inner.split_once(">>")?;
        *vxid = id.trim().parse().unwrap_or(0);
        *kind = match ty.trim() {
            "Request" | "Session" => 'c',
            "BeReq" => 'b',
            _ => '-',
        };
        return None;
    }
    // Layout: the level marks padded to 4 columns, the tag padded to 14
    // columns, one space, then the payload (which may itself start with
    // spaces).
    let body = line.get(lead.len().max(3) + 1..).unwrap_or("");
    let tag_len = body.find(' ').unwrap_or(body.len());
    let tag = &body[..tag_len];
    let data = body.get(tag_len.max(14) + 1..).unwrap_or("");
    Some(LogRecord {
        vxid: *vxid,
        tag: tag.to_string(),
        kind: *kind,
        data: data.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parse() {
        let v = parse_varnishstat("MAIN.uptime  12  1.0  Child uptime\nMGT.x 3 . y\nbad\n");
        assert_eq!(v, vec![("MAIN.uptime".into(), 12), ("MGT.x".into(), 3)]);
    }

    #[test]
    fn raw_parse() {
        let r = parse_raw_line("         0 CLI            - Rd ping").unwrap();
        assert_eq!(
            (r.vxid, r.tag.as_str(), r.kind, r.data.as_str()),
            (0, "CLI", '-', "Rd ping")
        );
        assert!(is_raw_record("         0 CLI            - Rd ping"));
        assert!(!is_raw_record("vcl1.s1        healthy"));
        let r = parse_raw_line("      1001 ReqURL         c /foo").unwrap();
        assert_eq!((r.vxid, r.kind, r.data.as_str()), (1001, 'c', "/foo"));
    }

    #[test]
    fn binary_unquote() {
        let r = parse_raw_line("         0 Debug          - \"a (new)%00\"").unwrap();
        assert_eq!(unquote_binary(r).data, "a (new)");
        let r = parse_raw_line("         0 ReqURL         c \"/x\"").unwrap();
        assert_eq!(unquote_binary(r).data, "\"/x\"");
    }

    #[test]
    fn grouped_parse() {
        let (mut v, mut k) = (0, '-');
        assert!(parse_grouped_line("*   << Request  >> 1001      ", &mut v, &mut k).is_none());
        let r = parse_grouped_line("-   ReqURL         /x y", &mut v, &mut k).unwrap();
        assert_eq!(
            (r.vxid, r.kind, r.tag.as_str(), r.data.as_str()),
            (1001, 'c', "ReqURL", "/x y")
        );
        assert!(parse_grouped_line("**  << BeReq    >> 1002", &mut v, &mut k).is_none());
        let r = parse_grouped_line("--  Begin          bereq 1001 fetch", &mut v, &mut k).unwrap();
        assert_eq!((r.vxid, r.kind), (1002, 'b'));
        assert!(parse_grouped_line("", &mut v, &mut k).is_none());
    }
}
