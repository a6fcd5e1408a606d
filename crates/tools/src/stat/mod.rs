//! `lacquer stat`: varnishstat's live view (the default on a terminal),
//! one-shot (`-1`), JSON (`-j`), XML (`-x`), field list (`-l`) and
//! Prometheus (`--prometheus`) output, with varnishstat's field globs
//! (`-f`, `-I`, `-X`), `-r`, `-t` and messages, and `--listen` to serve
//! `/metrics` and `/stats.json` over HTTP for a Prometheus scraper.

pub mod prom;
pub mod serve;
pub mod tui;
pub mod view;

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use lacquer_vsl::vsc::{self, CounterType, CounterValue, VscReader};

use crate::vut::{Exit, Getopt, Prog};

/// varnishstat's options, then Lacquer's (`-w`, and the long ones that
/// are taken out before getopt sees the rest).
const OPTIONS: &[(&str, &str)] = &[
    ("[-1]", "Print every counter once and exit"),
    (
        "[-f <glob>]",
        "Field glob (`^glob` excludes); first match decides",
    ),
    ("[-h]", "Print this usage"),
    ("[-I <glob>]", "Field glob that includes"),
    ("[-j]", "Print every counter once as JSON"),
    ("[-l]", "List the counter names the globs can select"),
    ("[-n <dir>]", "Working directory of the daemon"),
    (
        "[-r]",
        "Show gauges raw (a gauge below zero is shown as 0 otherwise)",
    ),
    (
        "[-t <seconds|off>]",
        "How long to wait for the daemon (default 5)",
    ),
    ("[-V]", "Print the version"),
    (
        "[-w <seconds>]",
        "Refresh interval of the live view (default 1)",
    ),
    ("[-X <glob>]", "Field glob that excludes"),
    ("[-x]", "Print every counter once as XML"),
    (
        "[--prometheus]",
        "Print every counter once in the Prometheus format",
    ),
    (
        "[--listen <addr>]",
        "Serve /metrics and /stats.json on this address",
    ),
];

/// How `lacquer stat` presents itself when run as `name`.
pub fn prog(name: &str) -> Prog {
    Prog {
        name: name.to_string(),
        varnish_name: "varnishstat",
        optstring: "1f:hI:jln:rt:Vw:X:x",
        options: OPTIONS,
    }
}

/// What `lacquer stat` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The live view (the default).
    Live,
    /// `-1`.
    Once,
    /// `-j`.
    Json,
    /// `-x`.
    Xml,
    /// `-l`.
    List,
    /// `--prometheus`.
    Prometheus,
}

/// `lacquer stat` options (varnishstat's, plus `-w`, `--prometheus` and
/// `--listen`).
#[derive(Debug)]
pub struct StatArgs {
    /// The output: the last of `-1 -j -x -l` given, `--prometheus` over
    /// any of them.
    pub mode: Mode,
    /// `--listen`: serve the counters on this address instead.
    pub listen: Option<String>,
    /// The field globs in command-line order, `^` marking those that
    /// exclude (`-f` as given, `-I glob`, `-X` as `^glob`).
    pub filter: Vec<String>,
    /// `-w`: refresh interval of the live view, in seconds.
    pub interval: f64,
    /// `-n`.
    pub workdir: Option<String>,
    /// `-r`: raw gauges.
    pub raw: bool,
    /// `-t`: how long to wait for the daemon's counters.
    pub timeout: Option<String>,
}

impl StatArgs {
    /// Parses the command line with varnishstat's messages.
    pub fn parse(prog: &Prog, args: &[String]) -> Result<StatArgs, Exit> {
        let mut a = StatArgs {
            mode: Mode::Live,
            listen: None,
            filter: Vec::new(),
            interval: 1.0,
            workdir: None,
            raw: false,
            timeout: None,
        };
        let mut short = Vec::new();
        let mut prometheus = false;
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--prometheus" => prometheus = true,
                "--listen" => match it.next() {
                    Some(v) => a.listen = Some(v.clone()),
                    None => return Err(Exit::error("--listen needs an address")),
                },
                l if l.starts_with("--listen=") => a.listen = Some(l[9..].to_string()),
                "--" => {
                    short.push(arg.clone());
                    short.extend(it.by_ref().cloned());
                }
                _ => short.push(arg.clone()),
            }
        }
        for (opt, val) in Getopt::parse(prog, &short)? {
            let v = val.unwrap_or_default();
            match opt {
                '1' => a.mode = Mode::Once,
                'j' => a.mode = Mode::Json,
                'x' => a.mode = Mode::Xml,
                'l' => a.mode = Mode::List,
                'f' => a.filter.push(v),
                // An inclusion glob that starts with `^` is taken as
                // written: the caret is escaped.
                'I' if v.starts_with('^') => a.filter.push(format!("\\{v}")),
                'I' => a.filter.push(v),
                'X' => a.filter.push(format!("^{v}")),
                'n' => a.workdir = Some(v),
                'r' => a.raw = !a.raw,
                't' => {
                    crate::vut::attach_limit(Some(&v)).map_err(Exit::error)?;
                    a.timeout = Some(v);
                }
                'w' => a.interval = parse_interval(&v).map_err(Exit::error)?,
                _ => unreachable!("getopt returns only the letters of the optstring"),
            }
        }
        if prometheus {
            a.mode = Mode::Prometheus;
        }
        Ok(a)
    }
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.1..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "-w: invalid interval {s:?}: give seconds between 0.1 and 3600"
        )),
    }
}

/// Runs `lacquer stat` as `name`; returns the process exit code.
pub fn main(name: &str, args: &[String]) -> i32 {
    let a = match StatArgs::parse(&prog(name), args) {
        Ok(a) => a,
        Err(e) => return e.report(),
    };
    let result = if let Some(addr) = &a.listen {
        serve::main(addr, source(&a), a.filter.clone())
    } else if a.mode == Mode::Live {
        let mut src = source(&a);
        attach(&mut src, a.timeout.as_deref()).and_then(|()| {
            let st = view::ViewState::new(a.filter.clone(), (a.interval * 1000.0) as u64);
            tui::run(&mut src, st, a.raw)
        })
    } else {
        run(&a).map(|out| print!("{out}"))
    };
    match result {
        Ok(()) => 0,
        Err(e) => Exit::error(e).report(),
    }
}

/// Waits for the daemon's counters as `-t` says (see
/// [`crate::vut::attach_limit`]), printing a dot a second as varnishstat
/// does.
pub fn attach(src: &mut Source, timeout: Option<&str>) -> Result<(), String> {
    let limit = crate::vut::attach_limit(timeout)?;
    let started = Instant::now();
    let mut dots = 0;
    loop {
        let err = match src.snapshot() {
            Ok(_) => break,
            Err(e) => e,
        };
        if limit.is_some_and(|l| started.elapsed().as_secs_f64() >= l) {
            if dots > 0 {
                eprintln!();
            }
            return Err(format!(
                "Could not get hold of varnishd, is it running? ({err})"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
        if started.elapsed().as_secs() > dots {
            dots += 1;
            eprint!(".");
        }
    }
    if dots > 0 {
        eprintln!();
    }
    Ok(())
}

fn source(a: &StatArgs) -> Source {
    Source::new(vsc::vsc_path(&crate::workdir(a.workdir.as_deref())))
}

/// The counters of a daemon, read afresh on each call: the file is
/// (re)opened when missing or replaced by a restarted daemon, and a
/// snapshot that raced with sections being added is retried.
#[derive(Debug)]
pub struct Source {
    path: PathBuf,
    reader: Option<VscReader>,
    reopened: bool,
}

impl Source {
    /// Counters of the file at `path` (see [`vsc::vsc_path`]).
    pub fn new(path: PathBuf) -> Source {
        Source {
            path,
            reader: None,
            reopened: false,
        }
    }

    /// A snapshot of all counters.
    pub fn snapshot(&mut self) -> Result<Vec<CounterValue>, String> {
        if self.reader.as_ref().is_some_and(VscReader::is_replaced) {
            self.reader = None;
        }
        let reader = match &mut self.reader {
            Some(r) => r,
            None => {
                let r = VscReader::open(&self.path).map_err(|e| e.to_string())?;
                self.reopened = true;
                self.reader.insert(r)
            }
        };
        // A snapshot that races with sections being added or removed says
        // Busy; trying again is the documented answer.
        let mut tries = 0;
        loop {
            match reader.snapshot() {
                Ok(s) => return Ok(s),
                Err(vsc::VscError::Busy) if tries < 100 => tries += 1,
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// True once after each time [`Source::snapshot`] (re)opened the
    /// file: after the first, it means the counters started over.
    pub fn take_reopened(&mut self) -> bool {
        std::mem::take(&mut self.reopened)
    }
}

/// Keeps the counters the `-f` globs select (all without globs).
pub fn select(snap: Vec<CounterValue>, globs: &[String]) -> Vec<CounterValue> {
    if globs.is_empty() {
        return snap;
    }
    let globs: Vec<&str> = globs.iter().map(String::as_str).collect();
    vsc::filter(snap, &globs)
}

/// Gauges as varnishstat shows them unless `-r`: one that went below
/// zero (a wrapped unsigned value) is shown as 0.
pub fn adjust(mut snap: Vec<CounterValue>, raw: bool) -> Vec<CounterValue> {
    if !raw {
        for c in &mut snap {
            if c.ctype == CounterType::Gauge && (c.value as i64) < 0 {
                c.value = 0;
            }
        }
    }
    snap
}

/// Produces the one-shot output (`-1`, `-j`, `-x`, `-l` or
/// `--prometheus`).
pub fn run(a: &StatArgs) -> Result<String, String> {
    let mut src = source(a);
    attach(&mut src, a.timeout.as_deref())?;
    let snap = select(adjust(src.snapshot()?, a.raw), &a.filter);
    Ok(match a.mode {
        Mode::Json => vsc::render_json(&snap, SystemTime::now()),
        Mode::Xml => vsc::render_xml(&snap, SystemTime::now()),
        Mode::List => vsc::render_list(&snap),
        Mode::Prometheus => prom::render(&snap),
        Mode::Once | Mode::Live => vsc::render_once(&snap),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lacquer_vsl::vsc::{Vsc, VscConfig, tables};

    fn parse(args: &[&str]) -> Result<StatArgs, Exit> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        StatArgs::parse(&prog("varnishstat"), &args)
    }

    #[test]
    fn options() {
        let a = parse(&[
            "-w",
            "0.5",
            "-f",
            "MAIN.*",
            "-X",
            "*uptime",
            "-I",
            "^x",
            "--listen",
            "127.0.0.1:9131",
            "-j",
        ])
        .unwrap();
        assert_eq!(a.interval, 0.5);
        assert_eq!(a.filter, ["MAIN.*", "^*uptime", "\\^x"]);
        assert_eq!(a.listen.as_deref(), Some("127.0.0.1:9131"));
        assert_eq!(a.mode, Mode::Json);
        let a = parse(&["--listen=[::1]:9", "-x", "-r", "--prometheus"]).unwrap();
        assert_eq!(a.listen.as_deref(), Some("[::1]:9"));
        assert_eq!(a.mode, Mode::Prometheus);
        assert!(a.raw);
        let a = parse(&[]).unwrap();
        assert_eq!((a.interval, a.mode), (1.0, Mode::Live));
        for bad in ["0", "-0.5", "nan", "inf", "x", "3601"] {
            let e = parse(&[&format!("-w{bad}")]).unwrap_err();
            assert!(
                e.stderr.contains("give seconds between 0.1 and 3600"),
                "{bad}: {e:?}"
            );
        }
        for bad in ["-1", "Nan", "foo"] {
            let e = parse(&["-t", bad]).unwrap_err();
            assert_eq!(e.stderr, format!("-t: Invalid argument: {bad}\n"));
        }
        let e = parse(&["extra"]).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(e.stderr.starts_with("Usage: varnishstat <options>"));
        let e = parse(&["-h"]).unwrap_err();
        assert_eq!(e.code, 0);
        assert!(e.stderr.contains(" [-X <glob>] "), "{}", e.stderr);
        assert!(
            parse(&["-V"])
                .unwrap_err()
                .stderr
                .contains("Copyright (c) 2006 Verdens Gang AS")
        );
        assert!(parse(&["--listen"]).is_err());
    }

    #[test]
    fn attach_waits_then_says_varnishd_is_missing() {
        let mut src = Source::new(PathBuf::from("/nonexistent/_.vsc"));
        let t = Instant::now();
        let e = attach(&mut src, Some("0.2")).unwrap_err();
        assert!(
            e.starts_with("Could not get hold of varnishd, is it running?"),
            "{e}"
        );
        assert!(t.elapsed() >= Duration::from_millis(200));
    }

    #[test]
    fn gauges_below_zero_show_as_zero_unless_raw() {
        let g = CounterValue {
            name: "MAIN.n_object".into(),
            value: u64::MAX,
            ctype: CounterType::Gauge,
            format: vsc::Format::Integer,
            level: vsc::Level::Info,
            oneliner: String::new(),
            long: String::new(),
        };
        let mut c = g.clone();
        c.ctype = CounterType::Counter;
        let adjusted = adjust(vec![g.clone(), c.clone()], false);
        assert_eq!((adjusted[0].value, adjusted[1].value), (0, u64::MAX));
        assert_eq!(adjust(vec![g], true)[0].value, u64::MAX);
    }

    #[test]
    fn source_reopens_a_replaced_file_and_says_so() {
        let dir = std::env::temp_dir().join(format!("lq-stat-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = vsc::vsc_path(&dir);
        let mut src = Source::new(path.clone());
        let e = src.snapshot().unwrap_err();
        assert!(e.contains("_.vsc"), "{e}");
        let vsc = Vsc::create(&path, &VscConfig::default()).unwrap();
        let m = vsc.add_section(&tables::MAIN, "MAIN").unwrap();
        m.add(tables::Main::cache_hit, 3);
        let snap = src.snapshot().unwrap();
        assert!(src.take_reopened());
        assert!(!src.take_reopened(), "said once");
        assert_eq!(vsc::lookup(&snap, "cache_hit").unwrap().value, 3);
        assert_eq!(select(snap.clone(), &[]).len(), snap.len());
        assert_eq!(select(snap, &["MAIN.cache_hit".to_string()]).len(), 1);
        // A restarted daemon creates a new file: read it, and say so.
        drop(m);
        let vsc2 = Vsc::create(&path, &VscConfig::default()).unwrap();
        let _m2 = vsc2.add_section(&tables::MAIN, "MAIN").unwrap();
        let snap = src.snapshot().unwrap();
        assert!(src.take_reopened());
        assert_eq!(vsc::lookup(&snap, "cache_hit").unwrap().value, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
