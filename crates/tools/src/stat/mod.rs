//! `lacquer stat`: varnishstat's live view (the default on a terminal),
//! one-shot (`-1`), JSON (`-j`) and Prometheus (`--prometheus`) output, with
//! `-f` glob filters, and `--listen` to serve `/metrics` and `/stats.json`
//! over HTTP for a Prometheus scraper.

pub mod prom;
pub mod serve;
pub mod tui;
pub mod view;

use std::path::PathBuf;
use std::time::SystemTime;

use clap::Parser;
use lacquer_vsl::vsc::{self, CounterValue, VscReader};

/// `lacquer stat` options (varnishstat's, plus `--prometheus` and
/// `--listen`).
#[derive(Parser, Debug)]
#[command(name = "lacquer stat", about = "Show counters of a running lacquerd")]
pub struct StatArgs {
    /// Print all counters once and exit.
    #[arg(short = '1')]
    pub once: bool,
    /// Print the counters as JSON (varnishstat's shape).
    #[arg(short = 'j')]
    pub json: bool,
    /// Print the counters in the Prometheus text format.
    #[arg(long)]
    pub prometheus: bool,
    /// Serve GET /metrics (Prometheus) and /stats.json on this address
    /// (e.g. 127.0.0.1:9131) instead of showing the counters.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Only counters matching this glob (repeatable; `^glob` excludes).
    #[arg(short = 'f')]
    pub filter: Vec<String>,
    /// Refresh interval of the live view, in seconds.
    #[arg(short = 'w', default_value_t = 1.0, value_parser = parse_interval)]
    pub interval: f64,
    /// Working directory of the daemon.
    #[arg(short = 'n')]
    pub workdir: Option<String>,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.1..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "invalid interval {s:?}: give seconds between 0.1 and 3600"
        )),
    }
}

/// Runs `lacquer stat`; returns the process exit code.
pub fn main(args: &[String]) -> i32 {
    let a = match StatArgs::try_parse_from(
        std::iter::once("lacquer stat".to_string()).chain(args.iter().cloned()),
    ) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return 2;
        }
    };
    let result = if let Some(addr) = &a.listen {
        serve::main(addr, source(&a), a.filter.clone())
    } else if a.once || a.json || a.prometheus {
        run(&a).map(|out| print!("{out}"))
    } else {
        let mut src = source(&a);
        let st = view::ViewState::new(a.filter.clone(), (a.interval * 1000.0) as u64);
        tui::run(&mut src, st)
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("lacquer stat: {e}");
            1
        }
    }
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

/// Produces the one-shot output (`-1`, `-j` or `--prometheus`).
pub fn run(a: &StatArgs) -> Result<String, String> {
    let snap = select(source(a).snapshot()?, &a.filter);
    if a.json {
        Ok(vsc::render_json(&snap, SystemTime::now()))
    } else if a.prometheus {
        Ok(prom::render(&snap))
    } else {
        Ok(vsc::render_once(&snap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lacquer_vsl::vsc::{Vsc, VscConfig, tables};

    fn parse(args: &[&str]) -> Result<StatArgs, String> {
        StatArgs::try_parse_from(std::iter::once("lacquer stat").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn options() {
        let a = parse(&[
            "-w",
            "0.5",
            "-f",
            "MAIN.*",
            "-f",
            "^*uptime",
            "--listen",
            "127.0.0.1:9131",
        ])
        .unwrap();
        assert_eq!(a.interval, 0.5);
        assert_eq!(a.filter, ["MAIN.*", "^*uptime"]);
        assert_eq!(a.listen.as_deref(), Some("127.0.0.1:9131"));
        assert_eq!(parse(&[]).unwrap().interval, 1.0);
        for bad in ["0", "-0.5", "nan", "inf", "x", "3601"] {
            let e = parse(&[&format!("-w{bad}")]).unwrap_err();
            assert!(
                e.contains("give seconds between 0.1 and 3600"),
                "{bad}: {e}"
            );
        }
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
