//! `lacquer log`: varnishlog over the daemon's shared-memory log, with
//! grouping (`-g`), queries (`-q`), record filters (`-i -x -I -X -c -b`),
//! dumping the buffer (`-d`) or following new records.

use std::io::Write;
use std::time::Duration;

use clap::Parser;
use lacquer_vsl::print::{PrintOptions, RecordFilter, format_group};
use lacquer_vsl::{Grouper, Grouping, Query, ReadEvent, StartAt, VslReader, vsl_path};

/// `lacquer log` options (varnishlog's).
#[derive(Parser, Debug)]
#[command(
    name = "lacquer log",
    about = "Show the transaction log of a running lacquerd"
)]
pub struct LogArgs {
    /// Dump the records already in the log, then exit.
    #[arg(short = 'd')]
    pub dump: bool,
    /// Grouping: raw, vxid, request or session.
    #[arg(short = 'g', default_value = "vxid")]
    pub grouping: String,
    /// Only transaction groups matching this VSL query.
    #[arg(short = 'q')]
    pub query: Option<String>,
    /// Include only these tags (glob list).
    #[arg(short = 'i')]
    pub include: Vec<String>,
    /// Exclude these tags (glob list).
    #[arg(short = 'x')]
    pub exclude: Vec<String>,
    /// Include records matching `[taglist:]regex`.
    #[arg(short = 'I')]
    pub include_re: Vec<String>,
    /// Exclude records matching `[taglist:]regex`.
    #[arg(short = 'X')]
    pub exclude_re: Vec<String>,
    /// Only client transactions.
    #[arg(short = 'c')]
    pub client: bool,
    /// Only backend transactions.
    #[arg(short = 'b')]
    pub backend: bool,
    /// Verbose: vxid and side on every record.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Working directory of the daemon.
    #[arg(short = 'n')]
    pub workdir: Option<String>,
}

/// Runs `lacquer log`; returns the process exit code.
pub fn main(args: &[String]) -> i32 {
    let a = match LogArgs::try_parse_from(
        std::iter::once("lacquer log".to_string()).chain(args.iter().cloned()),
    ) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return 2;
        }
    };
    match run(&a, &mut std::io::stdout()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("lacquer log: {e}");
            1
        }
    }
}

/// Reads and prints records until the end of the dump (`-d`) or forever.
pub fn run(a: &LogArgs, out: &mut dyn Write) -> Result<(), String> {
    let grouping: Grouping = a.grouping.parse()?;
    let query = match &a.query {
        Some(q) => Some(Query::parse(q).map_err(|e| format!("-q: {e}"))?),
        None => None,
    };
    let mut filter = RecordFilter::new();
    for i in &a.include {
        filter.include_tags(i)?;
    }
    for x in &a.exclude {
        filter.exclude_tags(x)?;
    }
    for i in &a.include_re {
        filter.include_regex(i)?;
    }
    for x in &a.exclude_re {
        filter.exclude_regex(x)?;
    }
    let opts = PrintOptions {
        verbose: a.verbose,
        client_only: a.client,
        backend_only: a.backend,
    };
    let dir = crate::workdir(a.workdir.as_deref());
    let start = if a.dump {
        StartAt::Oldest
    } else {
        StartAt::Now
    };
    let mut reader = VslReader::open(&vsl_path(&dir), start).map_err(|e| e.to_string())?;
    let mut grouper = Grouper::new(grouping);
    let emit =
        |groups: Vec<Vec<lacquer_vsl::Transaction>>, out: &mut dyn Write| -> Result<(), String> {
            for g in groups {
                if query.as_ref().is_some_and(|q| !q.matches(&g)) {
                    continue;
                }
                let text = format_group(&g, opts, &|r| filter.matches(r));
                out.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
            }
            out.flush().map_err(|e| e.to_string())
        };
    loop {
        match reader.next_event() {
            ReadEvent::Record(r) => {
                let groups = grouper.push(r);
                emit(groups, out)?;
            }
            ReadEvent::Overrun { .. } => {
                writeln!(out, "Log overrun").map_err(|e| e.to_string())?;
            }
            ReadEvent::Idle => {
                if a.dump {
                    let groups = grouper.flush();
                    return emit(groups, out);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
