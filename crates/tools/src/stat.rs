//! `lacquer stat`: varnishstat's one-shot (`-1`), JSON (`-j`) and
//! Prometheus views of the counters, with `-f` glob filters.

use std::fmt::Write as _;
use std::time::SystemTime;

use clap::Parser;
use lacquer_vsl::vsc::{self, VscReader};

/// `lacquer stat` options (varnishstat's).
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
    /// Only counters matching this glob (repeatable; `^glob` excludes).
    #[arg(short = 'f')]
    pub filter: Vec<String>,
    /// Working directory of the daemon.
    #[arg(short = 'n')]
    pub workdir: Option<String>,
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
    match run(&a) {
        Ok(out) => {
            print!("{out}");
            0
        }
        Err(e) => {
            eprintln!("lacquer stat: {e}");
            1
        }
    }
}

/// Produces the output for the options.
pub fn run(a: &StatArgs) -> Result<String, String> {
    let dir = crate::workdir(a.workdir.as_deref());
    let path = vsc::vsc_path(&dir);
    let reader = VscReader::open(&path).map_err(|e| e.to_string())?;
    // A snapshot that races with sections being added or removed says
    // Busy; trying again is the documented answer.
    let mut tries = 0;
    let snap = loop {
        match reader.snapshot() {
            Ok(s) => break s,
            Err(vsc::VscError::Busy) if tries < 100 => tries += 1,
            Err(e) => return Err(e.to_string()),
        }
    };
    let globs: Vec<&str> = a.filter.iter().map(String::as_str).collect();
    let snap = if globs.is_empty() {
        snap
    } else {
        vsc::filter(snap, &globs)
    };
    if a.json {
        Ok(vsc::render_json(&snap, SystemTime::now()))
    } else if a.prometheus {
        Ok(prometheus(&snap))
    } else {
        Ok(vsc::render_once(&snap))
    }
}

/// The Prometheus text exposition of the counters: `MAIN.cache_hit`
/// becomes `lacquer_main_cache_hit`, counters get `_total`-free names as
/// varnish exporters use, with HELP and TYPE lines.
pub fn prometheus(snap: &[vsc::CounterValue]) -> String {
    let mut out = String::new();
    for c in snap {
        let name: String = format!("lacquer_{}", c.name)
            .chars()
            .map(|ch| {
                if ch.is_ascii_alphanumeric() {
                    ch.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let kind = if c.ctype.flag() == 'c' {
            "counter"
        } else {
            "gauge"
        };
        let _ = writeln!(out, "# HELP {name} {}", c.oneliner);
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name} {}", c.value);
    }
    out
}
