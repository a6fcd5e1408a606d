//! What `lacquer log`, `ncsa`, `top` and `hist` share, as Varnish's VUT
//! layer does for varnishlog, varnishncsa, varnishtop and varnishhist:
//!
//! * getopt-style option parsing with Varnish's messages and usage text
//!   ([`Getopt`], [`Prog`]);
//! * the common log options (`-n -r -d -g -q -Q -i -I -x -X -c -b -C -E
//!   -k -L -T -R -t -D -P`) in [`Common`];
//! * reading records from the daemon's live log (waiting up to `-t` for it
//!   to appear) or from a binary file, and turning them into reported
//!   transaction groups filtered by query, ESI, rate (`-R`) and count
//!   (`-k`) ([`Reader`]);
//! * signals (SIGHUP reopens output files, SIGINT/SIGTERM stop cleanly),
//!   `-D` (the tool continues as a detached copy of itself) and `-P`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lacquer_vsl::file::{FileError, FileReader};
use lacquer_vsl::print::RecordFilter;
use lacquer_vsl::{Grouper, Grouping, Query, ReadEvent, StartAt, Transaction, TxType, VslReader};

/// The environment variable that marks the detached copy started by `-D`.
const DAEMON_CHILD_ENV: &str = "LACQUER_TOOL_DAEMON_CHILD";

/// How a tool presents itself: the name it was run as (`varnishlog` when
/// run through that name, else `lacquer log`) and its option table.
#[derive(Debug, Clone)]
pub struct Prog {
    /// Name in messages and usage.
    pub name: String,
    /// The Varnish tool this one stands in for (`varnishlog`).
    pub varnish_name: &'static str,
    /// Option letters; a letter followed by `:` takes an argument.
    pub optstring: &'static str,
    /// Usage lines: option synopsis and description.
    pub options: &'static [(&'static str, &'static str)],
}

impl Prog {
    /// The usage text (`Usage: NAME <options>` and the option table).
    pub fn usage(&self) -> String {
        let mut s = format!("Usage: {} <options>\n\nOptions:\n", self.name);
        for (spec, desc) in self.options {
            s.push_str(&format!(" {spec:<25} {desc}\n"));
        }
        s
    }

    /// The `-V` text.
    pub fn version(&self) -> String {
        format!(
            "{} (lacquer-{}) (Varnish 7.1 compatible)\n\
             Options and output follow {} of Varnish Cache, \
             Copyright (c) 2006 Verdens Gang AS, Copyright (c) 2006-2022 Varnish Software;\n\
             this implementation is Lacquer's own.\n",
            self.name,
            env!("CARGO_PKG_VERSION"),
            self.varnish_name
        )
    }
}

/// The end of a tool run before it started reading: print this and exit
/// with this code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// Exit status.
    pub code: i32,
    /// Text for standard error (may be empty).
    pub stderr: String,
}

impl Exit {
    /// Fails with `msg` (a newline is added) and status 1.
    pub fn error(msg: impl Into<String>) -> Exit {
        let mut stderr = msg.into();
        stderr.push('\n');
        Exit { code: 1, stderr }
    }

    /// Prints the message and returns the status.
    pub fn report(self) -> i32 {
        eprint!("{}", self.stderr);
        self.code
    }
}

/// getopt(3) with GNU argument permutation: options may follow operands;
/// `--` ends the options. Errors use getopt's messages followed by the
/// usage; `-h` and `-V` are answered here for every tool.
#[derive(Debug)]
pub struct Getopt;

impl Getopt {
    /// Parses `args` for `prog`: the options in order, or how to exit
    /// (help, version, bad option, operands left over).
    pub fn parse(prog: &Prog, args: &[String]) -> Result<Vec<(char, Option<String>)>, Exit> {
        let mut out = Vec::new();
        let mut operands = 0;
        let mut i = 0;
        let takes = |c: char| -> Option<bool> {
            let mut it = prog.optstring.chars().peekable();
            while let Some(o) = it.next() {
                let arg = it.peek() == Some(&':');
                if arg {
                    it.next();
                }
                if o == c {
                    return Some(arg);
                }
            }
            None
        };
        let usage_err = |msg: String| Exit {
            code: 1,
            stderr: format!("{msg}{}", prog.usage()),
        };
        while i < args.len() {
            let a = &args[i];
            i += 1;
            if a == "--" {
                operands += args.len() - i;
                break;
            }
            if !a.starts_with('-') || a == "-" {
                operands += 1;
                continue;
            }
            let chars: Vec<char> = a.chars().skip(1).collect();
            let mut k = 0;
            while k < chars.len() {
                let c = chars[k];
                k += 1;
                match takes(c) {
                    None => {
                        return Err(usage_err(format!(
                            "{}: invalid option -- '{c}'\n",
                            prog.name
                        )));
                    }
                    Some(false) => {
                        if c == 'h' {
                            return Err(Exit {
                                code: 0,
                                stderr: prog.usage(),
                            });
                        }
                        if c == 'V' {
                            return Err(Exit {
                                code: 0,
                                stderr: prog.version(),
                            });
                        }
                        out.push((c, None));
                    }
                    Some(true) => {
                        let val = if k < chars.len() {
                            let v: String = chars[k..].iter().collect();
                            k = chars.len();
                            v
                        } else if i < args.len() {
                            i += 1;
                            args[i - 1].clone()
                        } else {
                            return Err(usage_err(format!(
                                "{}: option requires an argument -- '{c}'\n",
                                prog.name
                            )));
                        };
                        out.push((c, Some(val)));
                    }
                }
            }
        }
        if operands > 0 {
            return Err(Exit {
                code: 1,
                stderr: prog.usage(),
            });
        }
        Ok(out)
    }
}

/// Output rate limit (`-R limit[/duration]`): a token bucket of `limit`
/// transactions refilled over `period`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Transactions per period.
    pub limit: u32,
    /// The period in seconds.
    pub period: f64,
}

impl RateLimit {
    /// Parses `-R`'s argument with Varnish's messages.
    pub fn parse(arg: &str) -> Result<RateLimit, String> {
        let (l, d) = match arg.split_once('/') {
            Some((l, d)) => (l, Some(d)),
            None => (arg, None),
        };
        let l = l.trim_start();
        let digits = l.strip_prefix(['-', '+']).unwrap_or(l);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err("-R: Syntax error".into());
        }
        let limit: i128 = l.parse().unwrap_or(i128::MAX);
        if limit <= 0 || limit > i128::from(i32::MAX) {
            return Err("-R: Range error".into());
        }
        let period = match d {
            None => 1.0,
            Some("") => return Err("-R: Syntax error".into()),
            Some(d) => {
                let mantissa: String = d
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                if mantissa.len() > 20 {
                    return Err("-R: Syntax error".into());
                }
                parse_duration(d).ok_or("-R: Syntax error: Invalid duration")?
            }
        };
        Ok(RateLimit {
            limit: limit as u32,
            period,
        })
    }
}

/// A VCL-style duration: a number and a unit (`ms s m h d w y`), or a bare
/// unit meaning one of it. Positive and below 10^15 seconds.
pub fn parse_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = if num.is_empty() {
        1.0
    } else {
        num.parse().ok()?
    };
    let v = n * lacquer_vcl::parser::duration_unit(unit)?;
    (v.is_finite() && v > 0.0 && v < 1e15).then_some(v)
}

/// A plain decimal number (`12`, `0.5`): what `-T`, `-p` and `-t` take.
pub fn parse_decimal(s: &str) -> Option<f64> {
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let ok = !body.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
        && !(int.is_empty() && frac.is_empty());
    if !ok {
        return None;
    }
    s.parse().ok().filter(|v: &f64| v.is_finite())
}

/// The options VUT handles for every tool that reads the log.
#[derive(Debug, Clone)]
pub struct Common {
    /// `-d`: start at the oldest record, stop at the end.
    pub dump: bool,
    /// `-g`.
    pub grouping: Grouping,
    /// `-q` texts and `-Q` file contents, or'ed together.
    pub queries: Vec<String>,
    /// `-i -I -x -X` in order (letter, argument).
    pub filters: Vec<(char, String)>,
    /// `-c`.
    pub client: bool,
    /// `-b`.
    pub backend: bool,
    /// `-C`: caseless regular expressions.
    pub caseless: bool,
    /// `-E`: ESI sub-requests are reported too.
    pub esi: bool,
    /// `-k`: stop after this many reported transactions.
    pub limit: Option<u64>,
    /// `-L`: incomplete transactions kept.
    pub pending: usize,
    /// `-T`: seconds before an incomplete transaction is forced out.
    pub end_timeout: f64,
    /// `-R`.
    pub rate: Option<RateLimit>,
    /// `-t` as given (checked when attaching).
    pub attach_timeout: Option<String>,
    /// `-n`.
    pub workdir: Option<String>,
    /// `-r`.
    pub read_file: Option<String>,
    /// `-D`.
    pub daemon: bool,
    /// `-P`.
    pub pid_file: Option<PathBuf>,
}

impl Default for Common {
    fn default() -> Self {
        Common {
            dump: false,
            grouping: Grouping::Vxid,
            queries: Vec::new(),
            filters: Vec::new(),
            client: false,
            backend: false,
            caseless: false,
            esi: false,
            limit: None,
            pending: lacquer_vsl::group::DEFAULT_MAX_PENDING,
            end_timeout: 120.0,
            rate: None,
            attach_timeout: None,
            workdir: None,
            read_file: None,
            daemon: false,
            pid_file: None,
        }
    }
}

/// Parses `-g` with Varnish's messages; `allowed` lists what the tool
/// accepts (varnishncsa and varnishhist refuse raw and session).
pub fn parse_grouping(arg: &str, allowed: &[Grouping]) -> Result<Grouping, String> {
    let names = [
        ("raw", Grouping::Raw),
        ("vxid", Grouping::Vxid),
        ("request", Grouping::Request),
        ("session", Grouping::Session),
    ];
    let hits: Vec<_> = names
        .iter()
        .filter(|(n, _)| !arg.is_empty() && n.starts_with(&arg.to_ascii_lowercase()))
        .collect();
    let g = match hits.as_slice() {
        [(_, g)] => *g,
        [] => return Err(format!("Unknown grouping type: {arg}")),
        _ => return Err(format!("Ambiguous grouping type: {arg}")),
    };
    if !allowed.contains(&g) {
        return Err(format!("Invalid grouping mode: {arg}"));
    }
    Ok(g)
}

impl Common {
    /// Handles one of the common options; false if `opt` is not one.
    pub fn handle(&mut self, opt: char, arg: Option<&str>) -> Result<bool, String> {
        let a = arg.unwrap_or("");
        match opt {
            'd' => self.dump = true,
            'g' => {
                self.grouping = parse_grouping(
                    a,
                    &[
                        Grouping::Raw,
                        Grouping::Vxid,
                        Grouping::Request,
                        Grouping::Session,
                    ],
                )?
            }
            'q' => self.queries.push(a.to_string()),
            'Q' => {
                let text =
                    std::fs::read_to_string(a).map_err(|e| format!("-Q {a}: {}", io_reason(&e)))?;
                self.queries.push(text);
            }
            'i' | 'I' | 'x' | 'X' => self.filters.push((opt, a.to_string())),
            'c' => self.client = true,
            'b' => self.backend = true,
            'C' => self.caseless = true,
            'E' => self.esi = true,
            'k' => match a.parse::<u64>() {
                Ok(n) if n > 0 && a.bytes().all(|b| b.is_ascii_digit()) => self.limit = Some(n),
                _ => return Err(format!("-k: Invalid number '{a}'")),
            },
            'L' => {
                let digits = a.strip_prefix('-').unwrap_or(a);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err("-L: Syntax error".into());
                }
                match a.parse::<i64>() {
                    Ok(n) if (1..=i64::from(i32::MAX)).contains(&n) => self.pending = n as usize,
                    _ => return Err("-L: Range error".into()),
                }
            }
            'T' => match parse_decimal(a) {
                Some(v) if v < 0.0 => return Err("-T: Range error".into()),
                Some(v) => self.end_timeout = v,
                None => return Err("-T: Syntax error".into()),
            },
            'R' => self.rate = Some(RateLimit::parse(a)?),
            't' => self.attach_timeout = Some(a.to_string()),
            'n' => self.workdir = Some(a.to_string()),
            'r' => self.read_file = Some(a.to_string()),
            'D' => self.daemon = true,
            'P' => self.pid_file = Some(PathBuf::from(a)),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks combinations once all options are in.
    pub fn check(&self) -> Result<(), String> {
        if self.workdir.is_some() && self.read_file.is_some() {
            return Err("Only one of -n and -r options may be used".into());
        }
        Ok(())
    }

    /// The record filter of `-i -I -x -X -c -b -C`, with Varnish's
    /// messages.
    pub fn record_filter(&self) -> Result<RecordFilter, String> {
        let mut f = RecordFilter::new();
        f.set_caseless(self.caseless);
        for (opt, arg) in &self.filters {
            match opt {
                'i' => f.include_tags(arg)?,
                'x' => f.exclude_tags(arg)?,
                'I' => f.include_regex(arg)?,
                _ => f.exclude_regex(arg)?,
            }
        }
        if self.client_side() {
            f.client_only();
        }
        if self.backend {
            f.backend_only();
        }
        Ok(f)
    }

    /// `-c`, or `-E`, which implies it.
    pub fn client_side(&self) -> bool {
        self.client || self.esi
    }

    /// The query of all `-q`/`-Q`, or None; errors in Varnish's layout.
    pub fn query(&self) -> Result<Option<Query>, String> {
        if self.queries.is_empty() {
            return Ok(None);
        }
        let text = self.queries.join("\n");
        Query::parse_with(&text, self.caseless)
            .map(Some)
            .map_err(|e| e.varnish_report(&text))
    }
}

/// Opens a `-w` output file: truncated, or appended to with `-a`.
pub fn open_output(path: &str, append: bool) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    if append {
        o.append(true).create(true);
    } else {
        o.write(true).create(true).truncate(true);
    }
    o.open(path)
}

/// The reason part of an I/O error, without Rust's "(os error N)".
pub fn io_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Signals the tools react to, recorded by a watcher thread.
#[derive(Debug)]
pub struct Signals {
    hup: AtomicBool,
    stop: AtomicBool,
}

static SIGNALS: Signals = Signals {
    hup: AtomicBool::new(false),
    stop: AtomicBool::new(false),
};

impl Signals {
    /// Starts watching SIGHUP, SIGINT and SIGTERM (once per process) and
    /// returns the shared flags.
    pub fn install() -> &'static Signals {
        static STARTED: std::sync::Once = std::sync::Once::new();
        STARTED.call_once(|| {
            let (tx, rx) = std::sync::mpsc::channel::<bool>();
            std::thread::spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    let _ = tx.send(false);
                    return;
                };
                rt.block_on(async move {
                    use tokio::signal::unix::{SignalKind, signal};
                    let (Ok(mut hup), Ok(mut int), Ok(mut term)) = (
                        signal(SignalKind::hangup()),
                        signal(SignalKind::interrupt()),
                        signal(SignalKind::terminate()),
                    ) else {
                        let _ = tx.send(false);
                        return;
                    };
                    let _ = tx.send(true);
                    loop {
                        tokio::select! {
                            _ = hup.recv() => SIGNALS.hup.store(true, Ordering::SeqCst),
                            _ = int.recv() => SIGNALS.stop.store(true, Ordering::SeqCst),
                            _ = term.recv() => SIGNALS.stop.store(true, Ordering::SeqCst),
                        }
                    }
                });
            });
            // Wait until the handlers are in place, so a signal sent right
            // after start-up is not lost.
            let _ = rx.recv_timeout(Duration::from_secs(2));
        });
        &SIGNALS
    }

    /// True once after each SIGHUP.
    pub fn take_hup(&self) -> bool {
        self.hup.swap(false, Ordering::SeqCst)
    }

    /// True after SIGINT or SIGTERM.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// `-D`: continues the run in a detached copy of this program (its own
/// session, no terminal, standard streams on /dev/null) and returns its
/// pid to the caller, which then exits. Returns None in the copy itself.
pub fn daemonize() -> Result<Option<u32>, String> {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(DAEMON_CHILD_ENV).is_some() {
        return Ok(None);
    }
    let exe = std::env::current_exe().map_err(|e| format!("-D: cannot find myself: {e}"))?;
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    let child = std::process::Command::new(exe)
        .arg0(argv0)
        .args(args)
        .env(DAEMON_CHILD_ENV, "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("-D: cannot start the daemon: {e}"))?;
    Ok(Some(child.id()))
}

/// True in the detached copy started by [`daemonize`].
pub fn is_daemon_child() -> bool {
    std::env::var_os(DAEMON_CHILD_ENV).is_some()
}

/// A `-P` file: written with the tool's pid, removed when dropped by the
/// process that owns it.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
}

impl PidFile {
    /// Writes `pid` to `path`.
    pub fn write(path: &Path, pid: u32) -> Result<PidFile, String> {
        std::fs::write(path, format!("{pid}\n")).map_err(|e| {
            format!(
                "Cannot create pid file {}: {}",
                path.display(),
                io_reason(&e)
            )
        })?;
        Ok(PidFile {
            path: path.to_path_buf(),
        })
    }

    /// Takes over a file another process wrote for us (the `-D` copy).
    pub fn adopt(path: &Path) -> PidFile {
        PidFile {
            path: path.to_path_buf(),
        }
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Does the `-D`/`-P` dance for a tool whose options are parsed: in the
/// starting process with `-D`, starts the copy, writes its pid file and
/// says to exit 0 (`Err(0)`); otherwise returns the pid file to keep.
pub fn start_daemon(c: &Common) -> Result<Option<PidFile>, Result<i32, String>> {
    if c.daemon {
        match daemonize().map_err(Err)? {
            Some(pid) => {
                if let Some(p) = &c.pid_file {
                    // The copy removes it when it exits.
                    std::mem::forget(PidFile::write(p, pid).map_err(Err)?);
                }
                return Err(Ok(0));
            }
            None => return Ok(c.pid_file.as_deref().map(PidFile::adopt)),
        }
    }
    match &c.pid_file {
        Some(p) => PidFile::write(p, std::process::id()).map(Some).map_err(Err),
        None => Ok(None),
    }
}

enum Source {
    /// The daemon's log; `None` until attached.
    Live {
        dir: PathBuf,
        reader: Option<VslReader>,
        start: StartAt,
    },
    File(FileReader<Box<dyn Read>>),
}

/// What [`Reader::step`] produced.
#[derive(Debug)]
pub enum Step {
    /// A transaction group that passed the query, ESI and rate filters.
    Group(Vec<Transaction>),
    /// Records were lost to the writer lapping us.
    Overrun,
    /// Nothing new right now.
    Idle,
    /// The input ended (`-d`, `-r`, or `-k` reached).
    End,
}

/// Records from the live log or a file, grouped and selected.
pub struct Reader {
    source: Source,
    grouper: Grouper,
    query: Option<Query>,
    /// `-c` (or `-E`), `-b` and `-E`, for choosing the transactions a
    /// group may start with.
    client: bool,
    backend: bool,
    esi: bool,
    dump: bool,
    limit: Option<u64>,
    reported: u64,
    end_timeout: Duration,
    last_expire: Instant,
    rate: Option<RateLimit>,
    credits: f64,
    refilled: Instant,
    queue: std::collections::VecDeque<Vec<Transaction>>,
    ended: bool,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("grouper", &self.grouper)
            .finish_non_exhaustive()
    }
}

/// How long to wait for the daemon's log by default (`-t`).
const DEFAULT_ATTACH: f64 = 5.0;

impl Reader {
    /// Opens the input the options name: `-r FILE` (`-` is standard
    /// input), else the daemon's log under `-n`, waiting up to `-t` seconds
    /// for it (printing a dot a second as Varnish does).
    pub fn open(c: &Common) -> Result<Reader, String> {
        let query = c.query()?;
        let source = match &c.read_file {
            Some(f) => {
                let input: Box<dyn Read> = if f == "-" {
                    Box::new(std::io::stdin())
                } else {
                    Box::new(
                        std::fs::File::open(f)
                            .map_err(|e| format!("Cannot open {f}: {}", io_reason(&e)))?,
                    )
                };
                match FileReader::new(input) {
                    Ok(r) => Source::File(r),
                    Err(FileError::NotVsl) => return Err(format!("Not a VSL file: {f}")),
                    Err(e) => return Err(e.to_string()),
                }
            }
            None => {
                let dir = crate::workdir(c.workdir.as_deref());
                let start = if c.dump {
                    StartAt::Oldest
                } else {
                    StartAt::Now
                };
                let reader = attach(&dir, start, c.attach_timeout.as_deref())?;
                Source::Live {
                    dir,
                    reader: Some(reader),
                    start,
                }
            }
        };
        let mut grouper = Grouper::new(c.grouping);
        grouper.set_max_pending(c.pending);
        let now = Instant::now();
        Ok(Reader {
            source,
            grouper,
            query,
            client: c.client_side(),
            backend: c.backend,
            esi: c.esi,
            dump: c.dump,
            limit: c.limit,
            reported: 0,
            end_timeout: Duration::from_secs_f64(c.end_timeout.min(1e9)),
            last_expire: now,
            rate: c.rate,
            credits: c.rate.map_or(0.0, |r| f64::from(r.limit)),
            refilled: now,
            queue: Default::default(),
            ended: false,
        })
    }

    /// The grouping mode.
    pub fn grouping(&self) -> Grouping {
        self.grouper.grouping()
    }

    fn keep(&mut self, g: &[Transaction]) -> bool {
        if !self.wanted_root(g) {
            return false;
        }
        if self.query.as_ref().is_some_and(|q| !q.matches(g)) {
            return false;
        }
        if let Some(r) = self.rate {
            let now = Instant::now();
            let dt = now.duration_since(self.refilled).as_secs_f64();
            self.refilled = now;
            let cap = f64::from(r.limit);
            self.credits = (self.credits + dt * cap / r.period).min(cap);
            if self.credits < 1.0 {
                return false;
            }
            self.credits -= 1.0;
        }
        true
    }

    /// With `-c`/`-b`, each transaction of `-g vxid` is reported only if
    /// it is of the side asked for (ESI sub-requests only with `-E`;
    /// sessions never), as varnishd's log API picks its candidates. Other
    /// groupings keep every group; the tools filter its members.
    fn wanted_root(&self, g: &[Transaction]) -> bool {
        if !(self.client || self.backend) || self.grouper.grouping() != Grouping::Vxid {
            return true;
        }
        g.first().is_none_or(|t| match t.tx_type {
            TxType::Request => self.client && (self.esi || t.reason != "esi"),
            TxType::BeReq => self.backend,
            TxType::Record => true,
            TxType::Session | TxType::Unknown => false,
        })
    }

    fn accept(&mut self, groups: Vec<Vec<Transaction>>) {
        for g in groups {
            if self.keep(&g) {
                self.queue.push_back(g);
            }
        }
    }

    fn next_record(&mut self) -> Result<Option<ReadEvent>, String> {
        match &mut self.source {
            Source::File(f) => match f.next_record() {
                Ok(Some(r)) => Ok(Some(ReadEvent::Record(r))),
                Ok(None) => Ok(None),
                Err(e) => Err(format!("VSL file read error: {}", io_reason(&e))),
            },
            Source::Live { dir, reader, start } => {
                let mut ev = match reader {
                    Some(r) => r.next_event(),
                    None => ReadEvent::Idle,
                };
                // Whether the daemon restarted (its log replaced by a new
                // file) is asked only when the log has nothing new: a
                // replaced log gets no more records. Asking before every
                // record (two `stat` calls) was 40 % of the reader's CPU
                // while lacquerd served 10k requests/s (issue 18).
                if ev == ReadEvent::Idle && reader.as_ref().is_some_and(VslReader::is_replaced) {
                    // The daemon restarted: follow its new log.
                    *reader = VslReader::open(&lacquer_vsl::vsl_path(dir), *start).ok();
                    ev = match reader {
                        Some(r) => r.next_event(),
                        None => ReadEvent::Idle,
                    };
                }
                if ev == ReadEvent::Idle {
                    if self.dump {
                        return Ok(None);
                    }
                    // A detached tool (-D) whose daemon's working directory
                    // was removed has nothing left to follow: it ends
                    // instead of lingering.
                    if is_daemon_child()
                        && self.last_expire.elapsed() >= Duration::from_millis(500)
                        && !dir.exists()
                    {
                        return Ok(None);
                    }
                }
                Ok(Some(ev))
            }
        }
    }

    /// The next thing that happened. Never blocks: live input that has
    /// nothing new gives [`Step::Idle`].
    pub fn step(&mut self) -> Result<Step, String> {
        loop {
            if self.limit.is_some_and(|k| self.reported >= k) {
                return Ok(Step::End);
            }
            if let Some(g) = self.queue.pop_front() {
                self.reported += 1;
                return Ok(Step::Group(g));
            }
            if self.ended {
                return Ok(Step::End);
            }
            match self.next_record()? {
                None => {
                    let g = self.grouper.flush();
                    self.accept(g);
                    self.ended = true;
                }
                Some(ReadEvent::Record(r)) => {
                    let g = self.grouper.push(r);
                    self.accept(g);
                }
                Some(ReadEvent::Overrun { .. }) => return Ok(Step::Overrun),
                Some(ReadEvent::Idle) => {
                    if self.last_expire.elapsed() >= Duration::from_millis(500) {
                        self.last_expire = Instant::now();
                        let g = self.grouper.expire(self.end_timeout);
                        self.accept(g);
                        if !self.queue.is_empty() {
                            continue;
                        }
                    }
                    return Ok(Step::Idle);
                }
            }
        }
    }
}

/// How long `-t` says to wait for the daemon, in seconds: `off` is
/// forever (None), no `-t` is 5 s; anything but a number of seconds at
/// least 0 is refused with varnish's message.
pub fn attach_limit(timeout: Option<&str>) -> Result<Option<f64>, String> {
    Ok(match timeout {
        None => Some(DEFAULT_ATTACH),
        Some(t) if t.eq_ignore_ascii_case("off") => None,
        Some("") => Some(0.0),
        Some(t) => match parse_decimal(t).or_else(|| t.parse::<f64>().ok()) {
            Some(v) if v.is_finite() && v >= 0.0 => Some(v),
            _ => return Err(format!("-t: Invalid argument: {t}")),
        },
    })
}

/// Waits for the daemon's log under `dir` as `-t` says: `off` waits
/// forever, N seconds (default 5) then fails with Varnish's message; a
/// signal stops the wait.
pub fn attach(dir: &Path, start: StartAt, timeout: Option<&str>) -> Result<VslReader, String> {
    let limit = attach_limit(timeout)?;
    let path = lacquer_vsl::vsl_path(dir);
    let signals = Signals::install();
    let started = Instant::now();
    let mut dots = 0u64;
    loop {
        if let Ok(r) = VslReader::open(&path, start) {
            if dots > 0 {
                eprintln!();
            }
            return Ok(r);
        }
        let waited = started.elapsed().as_secs_f64();
        if limit.is_some_and(|l| waited >= l) {
            if dots > 0 {
                eprintln!();
            }
            return Err("VSM: Could not get hold of varnishd, is it running?".into());
        }
        if signals.stopping() {
            return Err("VSM: Attach interrupted".into());
        }
        std::thread::sleep(Duration::from_millis(50));
        if started.elapsed().as_secs() > dots {
            dots += 1;
            eprint!(".");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog() -> Prog {
        Prog {
            name: "varnishtest-tool".into(),
            varnish_name: "varnishlog",
            optstring: "abg:hV",
            options: &[("[-a]", "Append"), ("[-g <x>]", "Grouping mode")],
        }
    }

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_live_reader_drains_the_old_log_then_follows_a_restarted_daemon() {
        use lacquer_vsl::{Tag, Vsl, VslConfig, Vxid};
        let dir = std::env::temp_dir().join(format!("lq-vut-follow-{}", std::process::id()));
        let path = lacquer_vsl::vsl_path(&dir);
        let cfg = VslConfig {
            space: lacquer_vsl::ring::MIN_SPACE,
            ..VslConfig::default()
        };
        let old = Vsl::create(&path, &cfg).unwrap();
        let mut r = Reader::open(&Common {
            workdir: Some(dir.to_string_lossy().into_owned()),
            grouping: Grouping::Raw,
            attach_timeout: Some("1".into()),
            ..Common::default()
        })
        .unwrap();
        let mut seen = Vec::new();
        let read = |r: &mut Reader, seen: &mut Vec<String>| {
            for _ in 0..100 {
                match r.step().unwrap() {
                    Step::Group(g) => seen.extend(
                        g.iter()
                            .flat_map(|t| &t.records)
                            .map(|rec| String::from_utf8_lossy(&rec.data).into_owned()),
                    ),
                    Step::Idle => return,
                    other => panic!("unexpected {other:?}"),
                }
            }
        };
        old.log_immediate(Tag::CLI, Vxid::NONE, format_args!("Rd one"));
        read(&mut r, &mut seen);
        // The daemon restarts: its last record is still unread when the
        // new log replaces the old one.
        old.log_immediate(Tag::CLI, Vxid::NONE, format_args!("Rd two"));
        let new = Vsl::create(&path, &cfg).unwrap();
        read(&mut r, &mut seen);
        new.log_immediate(Tag::CLI, Vxid::NONE, format_args!("Rd three"));
        read(&mut r, &mut seen);
        assert_eq!(seen, ["Rd one", "Rd two", "Rd three"]);
        drop((old, new));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn getopt_like_c() {
        let p = prog();
        assert_eq!(
            Getopt::parse(&p, &args(&["-ab", "-gvxid", "-g", "raw"])).unwrap(),
            vec![
                ('a', None),
                ('b', None),
                ('g', Some("vxid".into())),
                ('g', Some("raw".into()))
            ]
        );
        let e = Getopt::parse(&p, &args(&["-K"])).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(e.stderr.starts_with(
            "varnishtest-tool: invalid option -- 'K'\nUsage: varnishtest-tool <options>\n"
        ));
        let e = Getopt::parse(&p, &args(&["-g"])).unwrap_err();
        assert!(e.stderr.contains("option requires an argument -- 'g'"));
        let e = Getopt::parse(&p, &args(&["extra"])).unwrap_err();
        assert_eq!(
            (e.code, e.stderr.lines().next()),
            (1, Some("Usage: varnishtest-tool <options>"))
        );
        let e = Getopt::parse(&p, &args(&["-h"])).unwrap_err();
        assert_eq!(e.code, 0);
        assert!(
            e.stderr
                .contains(" [-g <x>]                  Grouping mode\n")
        );
        let e = Getopt::parse(&p, &args(&["-V"])).unwrap_err();
        assert!(e.stderr.contains("Copyright (c) 2006 Verdens Gang AS"));
    }

    #[test]
    fn option_values_with_varnish_messages() {
        let mut c = Common::default();
        let h = |c: &mut Common, o: char, a: &str| c.handle(o, Some(a));
        assert_eq!(
            h(&mut c, 'g', "r").unwrap_err(),
            "Ambiguous grouping type: r"
        );
        assert_eq!(
            h(&mut c, 'g', "foo").unwrap_err(),
            "Unknown grouping type: foo"
        );
        assert!(h(&mut c, 'g', "req").is_ok());
        assert_eq!(c.grouping, Grouping::Request);
        assert_eq!(
            h(&mut c, 'k', "foo").unwrap_err(),
            "-k: Invalid number 'foo'"
        );
        assert_eq!(h(&mut c, 'L', "0").unwrap_err(), "-L: Range error");
        assert_eq!(h(&mut c, 'L', "x").unwrap_err(), "-L: Syntax error");
        assert_eq!(h(&mut c, 'T', "1e2").unwrap_err(), "-T: Syntax error");
        assert_eq!(h(&mut c, 'T', "-1").unwrap_err(), "-T: Range error");
        assert_eq!(
            parse_grouping("session", &[Grouping::Vxid]).unwrap_err(),
            "Invalid grouping mode: session"
        );
        for (arg, want) in [
            ("1foo", "-R: Syntax error"),
            ("0", "-R: Range error"),
            ("-1", "-R: Range error"),
            ("3000000000", "-R: Range error"),
            ("10/0s", "-R: Syntax error: Invalid duration"),
            ("10/-10s", "-R: Syntax error: Invalid duration"),
            ("10/1q", "-R: Syntax error: Invalid duration"),
            ("10/11f09s", "-R: Syntax error: Invalid duration"),
            ("10/1", "-R: Syntax error: Invalid duration"),
            ("10/", "-R: Syntax error"),
            (
                "1000000000/1000000000000000000000000000000s",
                "-R: Syntax error",
            ),
        ] {
            assert_eq!(RateLimit::parse(arg).unwrap_err(), want, "{arg}");
        }
        assert_eq!(
            RateLimit::parse("10/2m").unwrap(),
            RateLimit {
                limit: 10,
                period: 120.0
            }
        );
        assert_eq!(RateLimit::parse("5/m").unwrap().period, 60.0);
        assert_eq!(RateLimit::parse("100").unwrap().period, 1.0);
    }

    #[test]
    fn attach_timeout_messages() {
        let dir = std::env::temp_dir().join(format!("lq-vut-none-{}", std::process::id()));
        let e = attach(&dir, StartAt::Now, Some("0")).unwrap_err();
        assert_eq!(e, "VSM: Could not get hold of varnishd, is it running?");
        for bad in ["-1", "foo", "NaN", "inf"] {
            let e = attach(&dir, StartAt::Now, Some(bad)).unwrap_err();
            assert_eq!(e, format!("-t: Invalid argument: {bad}"));
        }
    }
}
