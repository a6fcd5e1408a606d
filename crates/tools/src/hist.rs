//! `lacquer hist`: varnishhist. A live histogram of a per-transaction value
//! (by default the client response time, `Timestamp Process:` field 3) on
//! a logarithmic scale, hits drawn `|` and misses `#`, over the last 2000
//! transactions. Predefined profiles and custom ones
//! (`-P [cb:]tag:[prefix]:field[:min:max]`) choose the value; `-p` sets
//! the refresh period and `-B` replays a log file faster or slower than
//! real time.

use std::time::{Duration, Instant};

use crate::screen::{Input, Screen};
use crate::vut::{self, Common, Exit, Getopt, Prog, Reader, Signals, Step};
use lacquer_vsl::tags::{F_BINARY, F_UNSAFE};
use lacquer_vsl::{Grouping, Tag, Transaction, TxType};

const OPTIONS: &[(&str, &str)] = &[
    ("[-B <factor>]", "Time bending"),
    ("[-C]", "Caseless regular expressions"),
    ("[-d]", "Process old log entries and exit"),
    ("[-g <request|vxid>]", "Grouping mode (default: vxid)"),
    ("[-h]", "Usage help"),
    ("[-L <limit>]", "Incomplete transaction limit"),
    ("[-n <dir>]", "lacquerd working directory"),
    ("[-p <period>]", "Refresh period"),
    ("[-P responsetime]", "Predefined client profile"),
    ("[-P reqbodytime]", "Predefined client profile"),
    ("[-P size]", "Predefined client profile"),
    ("[-P Bereqtime]", "Predefined backend profile"),
    ("[-P Beresptime]", "Predefined backend profile"),
    ("[-P BerespBodytime]", "Predefined backend profile"),
    ("[-P Besize]", "Predefined backend profile"),
    (
        "[-P <[cb:]tag:[prefix]:field_num[:min:max]>]",
        "Custom profile definition",
    ),
    ("[-Q <file>]", "VSL query file"),
    ("[-q <query>]", "VSL query"),
    ("[-r <filename>]", "Binary file input"),
    ("[-t <seconds|off>]", "VSM connection timeout"),
    ("[-T <seconds>]", "Transaction end timeout"),
    ("[-V]", "Version"),
];

/// The program description for `name` (`varnishhist` or `lacquer hist`).
pub fn prog(name: &str) -> Prog {
    Prog {
        name: name.to_string(),
        varnish_name: "varnishhist",
        optstring: "B:Cdg:hL:n:p:P:Q:q:r:t:T:V",
        options: OPTIONS,
    }
}

/// What to graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Client (`c`) or backend (`b`) transactions.
    pub backend: bool,
    /// The record holding the value.
    pub tag: Tag,
    /// Only records starting with this text.
    pub prefix: Option<String>,
    /// 1-based whitespace-separated field holding the value.
    pub field: usize,
    /// Lowest power of ten on the axis.
    pub low: i32,
    /// Highest power of ten on the axis.
    pub high: i32,
}

/// A predefined profile (`-P name`).
#[derive(Debug)]
pub struct Predefined {
    /// Its name.
    pub name: &'static str,
    /// Backend (else client) transactions.
    pub backend: bool,
    /// The record holding the value.
    pub tag: Tag,
    /// Only records starting with this text.
    pub prefix: Option<&'static str>,
    /// 1-based field holding the value.
    pub field: usize,
    /// Lowest power of ten on the axis.
    pub low: i32,
    /// Highest power of ten on the axis.
    pub high: i32,
}

const fn predefined(
    name: &'static str,
    backend: bool,
    tag: Tag,
    prefix: Option<&'static str>,
    field: usize,
    low: i32,
    high: i32,
) -> Predefined {
    Predefined {
        name,
        backend,
        tag,
        prefix,
        field,
        low,
        high,
    }
}

/// varnishhist's predefined profiles.
pub const PROFILES: &[Predefined] = &[
    predefined(
        "responsetime",
        false,
        Tag::Timestamp,
        Some("Process:"),
        3,
        -6,
        3,
    ),
    predefined(
        "reqbodytime",
        false,
        Tag::Timestamp,
        Some("ReqBody:"),
        3,
        -6,
        3,
    ),
    predefined("size", false, Tag::ReqAcct, None, 5, 1, 8),
    predefined("Bereqtime", true, Tag::Timestamp, Some("Bereq:"), 3, -6, 3),
    predefined(
        "Beresptime",
        true,
        Tag::Timestamp,
        Some("Beresp:"),
        3,
        -6,
        3,
    ),
    predefined(
        "BerespBodytime",
        true,
        Tag::Timestamp,
        Some("BerespBody:"),
        3,
        -6,
        3,
    ),
    predefined("Besize", true, Tag::BereqAcct, None, 5, 1, 8),
];

/// `sscanf(s, "%d")`: blanks, a sign and digits at the start of `s`.
fn scan_int(s: &str) -> Option<(i32, &str)> {
    let t = s.trim_start();
    let sign = usize::from(t.starts_with(['+', '-']));
    let digits = t[sign..].bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let end = sign + digits;
    Some((t[..end].parse().ok()?, &t[end..]))
}

/// C `strtod` on the longest numeric prefix of `s`, None if there is none.
fn strtod_prefix(s: &str) -> Option<f64> {
    let t = s.trim_start();
    (1..=t.len())
        .rev()
        .filter(|&i| t.is_char_boundary(i))
        .find_map(|i| t[..i].parse::<f64>().ok())
}

/// C `strtod`: 0 when `s` does not start with a number.
fn strtod(s: &str) -> f64 {
    strtod_prefix(s).unwrap_or(0.0)
}

/// The latest log time (`Timestamp` field 2) in a group, for `-B`.
fn group_time(g: &[Transaction]) -> Option<f64> {
    g.iter()
        .flat_map(|t| &t.records)
        .filter(|r| r.tag == Tag::Timestamp)
        .filter_map(|r| {
            let text = String::from_utf8_lossy(&r.data);
            text.split_whitespace().nth(1).and_then(strtod_prefix)
        })
        .reduce(f64::max)
}

impl Profile {
    /// A predefined profile by name.
    pub fn named(name: &str) -> Option<Profile> {
        PROFILES.iter().find(|p| p.name == name).map(|p| Profile {
            backend: p.backend,
            tag: p.tag,
            prefix: p.prefix.map(str::to_string),
            field: p.field,
            low: p.low,
            high: p.high,
        })
    }

    /// Parses `-P`'s argument with varnishhist's messages.
    pub fn parse(arg: &str) -> Result<Profile, String> {
        let Some(first) = arg.find(':') else {
            return Profile::named(arg).ok_or_else(|| format!("-P: No such profile '{arg}'"));
        };
        let bad = |shown: &str| format!("-P: '{shown}' is not a valid profile name or definition");
        let (backend, tag_at, colon1) =
            if first == 1 && (arg.starts_with('b') || arg.starts_with('c')) {
                let c = arg[2..].find(':').map(|i| i + 2).ok_or_else(|| bad(arg))?;
                (arg.starts_with('b'), 2, c)
            } else {
                (false, 0, first)
            };
        let tag = Tag::lookup(&arg[tag_at..colon1])
            .map_err(|_| format!("-P: '{arg}' is not a valid tag name"))?;
        if tag.flags() & (F_BINARY | F_UNSAFE) != 0 {
            return Err(format!("-P: '{arg}' is an unsafe or binary record"));
        }
        let colon2 = arg[colon1 + 1..]
            .find(':')
            .map(|i| i + colon1 + 1)
            .ok_or_else(|| bad(arg))?;
        // varnishhist cuts the argument there before the next checks.
        let shown = &arg[..colon2];
        let prefix = &arg[colon1 + 1..colon2];
        let rest = &arg[colon2 + 1..];
        let (field, after) = scan_int(rest).ok_or_else(|| bad(shown))?;
        let (mut low, mut high) = (-6, 3);
        if let Some(c) = after.find(':') {
            let (l, r) = scan_int(&after[c + 1..]).ok_or_else(|| bad(shown))?;
            let (h, _) = r
                .strip_prefix(':')
                .and_then(scan_int)
                .ok_or_else(|| bad(shown))?;
            (low, high) = (l, h);
        }
        if field < 1 {
            return Err(format!("-P: '{arg}': the field number must be 1 or more"));
        }
        // In i64: the bounds are any i32 and their difference may not be.
        if low >= high || i64::from(high) - i64::from(low) > 100 {
            return Err(format!(
                "-P: '{arg}': min must be below max (and the range at most 100 powers of ten)"
            ));
        }
        Ok(Profile {
            backend,
            tag,
            prefix: (!prefix.is_empty()).then(|| prefix.to_string()),
            field: field as usize,
            low,
            high,
        })
    }
}

/// `lacquer hist` options.
#[derive(Debug)]
pub struct HistArgs {
    /// The options shared with the other log tools.
    pub common: Common,
    /// What to graph.
    pub profile: Profile,
    /// Refresh period in milliseconds (`-p`).
    pub delay_ms: u64,
    /// Time bending factor (`-B`), 0 for none.
    pub timebend: f64,
}

impl HistArgs {
    /// Parses the command line (without the program name).
    pub fn parse(p: &Prog, args: &[String]) -> Result<HistArgs, Exit> {
        let mut common = Common::default();
        let mut profile = None;
        let mut delay_ms = 1000;
        let mut timebend = 0.0;
        for (opt, val) in Getopt::parse(p, args)? {
            let v = val.as_deref().unwrap_or("");
            match opt {
                'p' => {
                    let ms = (1e3 * strtod(v)).round();
                    if !(1.0..1e12).contains(&ms) {
                        return Err(Exit::error(format!("-p: invalid '{v}'")));
                    }
                    delay_ms = ms as u64;
                }
                'P' => profile = Some(Profile::parse(v).map_err(Exit::error)?),
                'B' => {
                    timebend = strtod(v);
                    if timebend == 0.0 || timebend.is_nan() {
                        return Err(Exit::error(format!(
                            "-B: being able to bend time does not mean we can stop it (invalid factor '{v}')"
                        )));
                    }
                    if timebend < 0.0 {
                        return Err(Exit::error(format!(
                            "-B: being able to bend time does not mean we can make it go backwards (invalid factor '{v}')"
                        )));
                    }
                }
                'g' => {
                    common.grouping = vut::parse_grouping(v, &[Grouping::Vxid, Grouping::Request])
                        .map_err(|e| {
                            Exit::error(format!("{e} (only vxid and request are supported)"))
                        })?;
                }
                _ => {
                    common.handle(opt, val.as_deref()).map_err(Exit::error)?;
                }
            }
        }
        common.check().map_err(Exit::error)?;
        let profile = profile.unwrap_or_else(|| Profile::named("responsetime").expect("built in"));
        if profile.backend {
            common.backend = true;
        } else {
            common.client = true;
        }
        Ok(HistArgs {
            common,
            profile,
            delay_ms,
            timebend,
        })
    }
}

/// How far back the histogram remembers.
const HIST_N: usize = 2000;
/// Buckets per power of ten.
const HIST_RES: i32 = 100;

/// The vertical scales, the smallest one that fits is used.
const SCALES: &[u32] = &[
    1,
    2,
    3,
    4,
    5,
    10,
    15,
    20,
    25,
    50,
    100,
    250,
    500,
    1000,
    2500,
    5000,
    10000,
    25000,
    50000,
    100000,
    u32::MAX,
];

/// The histogram.
#[derive(Debug)]
pub struct Hist {
    profile: Profile,
    hits: Vec<u32>,
    misses: Vec<u32>,
    /// The last HIST_N samples: bucket, and whether a hit.
    ring: Vec<(usize, bool)>,
    next: usize,
    /// Latest log time replayed (for `-B`).
    pub log_time: f64,
}

impl Hist {
    /// An empty histogram for `profile`.
    pub fn new(profile: Profile) -> Hist {
        let buckets = ((profile.high - profile.low) * HIST_RES) as usize;
        Hist {
            profile,
            hits: vec![0; buckets],
            misses: vec![0; buckets],
            ring: Vec::new(),
            next: 0,
            log_time: 0.0,
        }
    }

    /// Samples in the histogram.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// True before the first sample.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Takes the value of each transaction of `group` the profile selects
    /// (ESI sub-requests, restarts and retries left out).
    pub fn accumulate(&mut self, group: &[Transaction]) {
        for t in group {
            let want = if self.profile.backend {
                TxType::BeReq
            } else {
                TxType::Request
            };
            if t.tx_type != want || t.reason == "esi" {
                continue;
            }
            self.transaction(t);
        }
    }

    fn transaction(&mut self, t: &Transaction) {
        let mut hit = false;
        let mut value = None;
        for r in &t.records {
            if r.tag.flags() & (F_BINARY | F_UNSAFE) != 0 {
                continue;
            }
            let text = String::from_utf8_lossy(&r.data);
            match r.tag {
                Tag::Hit => hit = true,
                Tag::VCL_return
                    if text.eq_ignore_ascii_case("restart")
                        || text.eq_ignore_ascii_case("retry") =>
                {
                    return;
                }
                _ => {}
            }
            if r.tag != self.profile.tag {
                continue;
            }
            if let Some(p) = &self.profile.prefix
                && !text.starts_with(p.as_str())
            {
                continue;
            }
            if let Some(v) = text
                .split_whitespace()
                .nth(self.profile.field - 1)
                .and_then(strtod_prefix)
            {
                value = Some(v);
            }
        }
        let Some(v) = value.filter(|v| *v > 0.0) else {
            return;
        };
        // In i64: a bound near i32's limits times HIST_RES leaves i32.
        let res = i64::from(HIST_RES);
        let (low, high) = (
            i64::from(self.profile.low) * res,
            i64::from(self.profile.high) * res,
        );
        let b = ((res as f64 * v.log10()).round() as i64).clamp(low, high - 1) - low;
        let b = b as usize;
        if self.ring.len() == HIST_N {
            let (old, was_hit) = self.ring[self.next];
            if was_hit {
                self.hits[old] -= 1;
            } else {
                self.misses[old] -= 1;
            }
            self.ring[self.next] = (b, hit);
        } else {
            self.ring.push((b, hit));
        }
        self.next = (self.next + 1) % HIST_N;
        if hit {
            self.hits[b] += 1;
        } else {
            self.misses[b] += 1;
        }
    }

    /// The screen for a terminal of `cols` x `lines`, as varnishhist draws
    /// it: the scale and counts on the first line, the identity (or `EOF`)
    /// right-aligned, the bars, and the axis with its powers of ten.
    pub fn screen(&self, cols: usize, lines: usize, head: &str, right: &str) -> Vec<String> {
        let lines = lines.max(3);
        let mut g = vec![vec![' '; cols]; lines];
        let put = |g: &mut Vec<Vec<char>>, row: usize, col: usize, s: &str| {
            for (i, c) in s.chars().enumerate() {
                if let Some(cell) = g.get_mut(row).and_then(|r| r.get_mut(col + i)) {
                    *cell = c;
                }
            }
        };
        let range = (self.profile.high - self.profile.low) as usize;
        let w = cols / range;
        let n = w * range;
        for k in 0..n {
            put(&mut g, lines - 2, k, "-");
        }
        for i in 0..range {
            put(&mut g, lines - 2, w * i, "+");
            put(
                &mut g,
                lines - 1,
                w * i,
                &format!("|1e{}", self.profile.low + i as i32),
            );
        }
        put(
            &mut g,
            0,
            0,
            &format!("{right:>width$}", width = cols.saturating_sub(1)),
        );
        let buckets = self.hits.len();
        let (mut bm, mut bh) = (vec![0u32; n], vec![0u32; n]);
        let mut max = 1;
        if n > 0 {
            for k in 0..buckets {
                let l = k * n / buckets;
                bm[l] += self.misses[k];
                bh[l] += self.hits[k];
                max = max.max(bm[l] + bh[l]);
            }
        }
        let room = (lines - 3) as u32;
        let scale = *SCALES
            .iter()
            .find(|&&s| max / s <= room)
            .unwrap_or(&u32::MAX);
        put(&mut g, 0, 0, &head.replace("{scale}", &scale.to_string()));
        let mut j = 5;
        while j < lines - 2 {
            put(
                &mut g,
                lines - 2 - j,
                0,
                &format!("{}_", j as u64 * u64::from(scale)),
            );
            j += 5;
        }
        for k in 0..n {
            let miss = (bm[k] / scale) as usize;
            let all = ((bm[k] + bh[k]) / scale) as usize;
            for l in 0..all.min(lines - 2) {
                put(&mut g, lines - 3 - l, k, if l < miss { "#" } else { "|" });
            }
        }
        g.into_iter().map(|r| r.into_iter().collect()).collect()
    }
}

/// `%g` of C's printf for the small numbers varnishhist prints.
fn fmt_g(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() {
        "0".into()
    } else {
        s.to_string()
    }
}

/// Runs `lacquer hist` as `name`; returns the process exit code.
pub fn main(name: &str, args: &[String]) -> i32 {
    let p = prog(name);
    let a = match HistArgs::parse(&p, args) {
        Ok(a) => a,
        Err(e) => return e.report(),
    };
    match live(&a) {
        Ok(()) => 0,
        Err(e) => Exit::error(e).report(),
    }
}

fn live(a: &HistArgs) -> Result<(), String> {
    let mut reader = Reader::open(&a.common)?;
    let ident = if a.common.read_file.is_some() {
        String::new()
    } else {
        crate::hostname()
    };
    let signals = Signals::install();
    let mut hist = Hist::new(a.profile.clone());
    let mut screen = Screen::open("varnishhist has no text output")?;
    let mut delay = a.delay_ms.max(1);
    let mut timebend = a.timebend;
    let mut eof = false;
    // -B: log time at the start of the replay, and when that was.
    let mut replay: Option<(f64, Instant)> = None;
    let mut held: Option<Vec<Transaction>> = None;
    let mut last_draw: Option<Instant> = None;
    while !signals.stopping() && !signals.take_hup() {
        let started = Instant::now();
        while !eof && started.elapsed() < Duration::from_millis(50) {
            let g = match held.take() {
                Some(g) => g,
                None => match reader.step()? {
                    Step::Group(g) => g,
                    Step::Overrun => {
                        replay = None;
                        continue;
                    }
                    Step::Idle => break,
                    Step::End => {
                        eof = true;
                        break;
                    }
                },
            };
            if timebend > 0.0
                && let Some(t) = group_time(&g)
            {
                // Replay at `timebend` times the pace the log was written:
                // hold the group until its time has come.
                let (t0, at) = *replay.get_or_insert((t, Instant::now()));
                if t > t0 + at.elapsed().as_secs_f64() * timebend {
                    held = Some(g);
                    break;
                }
                hist.log_time = hist.log_time.max(t);
            }
            hist.accumulate(&g);
        }
        if last_draw.is_none_or(|t| t.elapsed() >= Duration::from_millis(delay)) {
            last_draw = Some(Instant::now());
            let mut head = format!(
                "1:{{scale}}, n = {}, d = {}",
                hist.len(),
                fmt_g(delay as f64 * 1e-3)
            );
            if let Some((t0, _)) = replay
                && t0 > 0.0
            {
                let when = lacquer_vcl::exec::value::http_date(hist.log_time).unwrap_or_default();
                head.push_str(&format!(" @ {when} x {}", fmt_g(timebend)));
            }
            let right = if eof { "EOF" } else { ident.as_str() };
            let (cols, lines) = screen.size()?;
            screen.show(hist.screen(cols, lines, &head, right))?;
        }
        let Some(input) = screen.input(Duration::from_millis(20))? else {
            continue;
        };
        match input {
            Input::Quit => break,
            Input::Redraw => {}
            Input::Char(d @ '0'..='9') => delay = 1000 << (d as u32 - '0' as u32),
            Input::Char('+') => delay = (delay / 2).max(1),
            Input::Char('-') => delay = delay.saturating_mul(2),
            Input::Char(c @ ('<' | '>')) => {
                replay = Some((hist.log_time, Instant::now()));
                timebend = if timebend == 0.0 {
                    1.0
                } else if c == '<' {
                    timebend / 2.0
                } else {
                    timebend * 2.0
                };
            }
            Input::Char(_) => screen.beep(),
        }
        last_draw = None;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lacquer_vsl::{Record, Vxid};

    fn parse(v: &[&str]) -> Result<HistArgs, String> {
        let args: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        HistArgs::parse(&prog("varnishhist"), &args).map_err(|e| e.stderr)
    }

    #[test]
    fn option_errors_are_varnishhists() {
        for (args, want) in [
            (&["-p", "0"][..], "-p: invalid '0'"),
            (
                &["-p", "2.0", "-B", "0"],
                "-B: being able to bend time does not mean we can stop it (invalid factor '0')",
            ),
            (
                &["-B", "-1"],
                "-B: being able to bend time does not mean we can make it go backwards (invalid factor '-1')",
            ),
            (
                &["-g", "raw"],
                "Invalid grouping mode: raw (only vxid and request are supported)",
            ),
            (&["-P", "foo"], "-P: No such profile 'foo'"),
            (
                &["-P", "Timestamp::"],
                "-P: 'Timestamp:' is not a valid profile name or definition",
            ),
            (
                &["-P", "b:"],
                "-P: 'b:' is not a valid profile name or definition",
            ),
            (&["-P", "foo:"], "-P: 'foo:' is not a valid tag name"),
            (
                &["-P", "b:Debug:"],
                "-P: 'b:Debug:' is an unsafe or binary record",
            ),
            (
                &["-P", "b:BereqAcct:x"],
                "-P: 'b:BereqAcct:x' is not a valid profile name or definition",
            ),
            (
                &["-P", "b:BereqAcct:x:"],
                "-P: 'b:BereqAcct:x' is not a valid profile name or definition",
            ),
            (
                &["-P", "b:BereqAcct::5:1:a"],
                "-P: 'b:BereqAcct:' is not a valid profile name or definition",
            ),
            (&["-P", "b:BereqAcct::5", "-p", "0"], "-p: invalid '0'"),
        ] {
            assert_eq!(parse(args).unwrap_err(), format!("{want}\n"), "{args:?}");
        }
        let a = parse(&["-P", "b:BereqAcct::5:-1:1"]).unwrap();
        assert_eq!((a.profile.field, a.profile.low, a.profile.high), (5, -1, 1));
        assert!(a.profile.backend && a.common.backend && !a.common.client);
        let a = parse(&[]).unwrap();
        assert_eq!(a.profile, Profile::named("responsetime").unwrap());
        assert!(a.common.client);
    }

    fn req(id: u32, process: &str, hit: bool) -> Transaction {
        let c = |tag, d: &str| Record::new(tag, Vxid::client(id), d);
        let mut records = vec![c(Tag::Begin, "req 1 rxreq")];
        if hit {
            records.push(c(Tag::Hit, "2 119 10 0"));
        }
        records.push(c(
            Tag::Timestamp,
            &format!("Process: 1700000000.0 {process} 0.0"),
        ));
        records.push(c(Tag::End, ""));
        Transaction {
            level: 1,
            vxid: id,
            parent: 1,
            tx_type: TxType::Request,
            reason: "rxreq".into(),
            records,
        }
    }

    #[test]
    fn axis_bounds_near_i32_limits() {
        // Found by the hist_profile fuzz target: these overflowed i32.
        let e = Profile::parse("c:Timestamp:Process:3:-2000000000:2000000000").unwrap_err();
        assert!(e.contains("min must be below max"), "{e}");
        let p = Profile::parse("c:Timestamp:Process:3:2147483600:2147483647").unwrap();
        let mut h = Hist::new(p);
        h.accumulate(&[req(1, "0.001", false)]);
        assert_eq!(h.len(), 1);
        assert_eq!(h.misses[0], 1, "below the axis: the first bucket");
        let last = h.screen(80, 24, "", "").pop().unwrap();
        assert!(last.contains("|1e2147483646"), "{last:?}");
    }

    #[test]
    fn draws_like_varnishhist() {
        let mut h = Hist::new(Profile::named("responsetime").unwrap());
        h.accumulate(&[req(1, "0.001", false)]);
        h.accumulate(&[req(2, "0.001", true)]);
        h.accumulate(&[req(3, "0", false)]);
        assert_eq!(h.len(), 2);
        let s = h.screen(80, 24, "1:{scale}, n = 2, d = 1", "box");
        assert_eq!(s.len(), 24);
        assert!(s[0].starts_with("1:1, n = 2, d = 1"), "{:?}", s[0]);
        assert!(s[0].trim_end().ends_with("box"));
        assert!(s[2].starts_with("20_"), "{:?}", s[2]);
        assert!(
            s[23].starts_with("|1e-6") && s[23].contains("|1e2"),
            "{:?}",
            s[23]
        );
        assert!(s[22].starts_with("+-------"));
        // 1 ms is bucket 300 of 900: column 300 * 72 / 900 = 24.
        assert_eq!(&s[21][24..25], "#");
        assert_eq!(&s[20][24..25], "|");
        assert_eq!(fmt_g(1.1), "1.1");
        assert_eq!(fmt_g(1.0), "1");
        assert_eq!(fmt_g(0.001), "0.001");
    }
}
