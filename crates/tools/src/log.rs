//! `lacquer log`: varnishlog over the daemon's shared-memory log or a
//! binary log file (`-r`), with grouping (`-g`), queries (`-q`, `-Q`),
//! record filters (`-i -x -I -X -c -b -C`), dumping the buffer (`-d`) or
//! following new records, and writing binary log files that Varnish's
//! varnishlog reads too (`-w`, `-a`; `-A` for text), as a daemon (`-D`,
//! `-P`) whose output file is reopened on SIGHUP.

use std::io::{BufWriter, Write};
use std::time::Duration;

use lacquer_vsl::file::FileWriter;
use lacquer_vsl::print::{PrintOptions, RecordFilter, format_group_bytes};
use lacquer_vsl::{Tag, Transaction};

use crate::vut::{self, Common, Exit, Getopt, Prog, Reader, Signals, Step};

const OPTIONS: &[(&str, &str)] = &[
    ("[-a]", "Append to file"),
    ("[-A]", "Text output"),
    ("[-b]", "Only display backend records"),
    ("[-c]", "Only display client records"),
    ("[-C]", "Caseless regular expressions"),
    ("[-d]", "Process old log entries and exit"),
    ("[-D]", "Daemonize"),
    ("[-E]", "Display ESI transactions"),
    (
        "[-g <session|request|vxid|raw>]",
        "Grouping mode (default: vxid)",
    ),
    ("[-h]", "Usage help"),
    ("[-i <taglist>]", "Include tags"),
    ("[-I <[taglist:]regex>]", "Include by regex"),
    ("[-k <num>]", "Limit transactions"),
    ("[-L <limit>]", "Incomplete transaction limit"),
    ("[-n <dir>]", "lacquerd working directory"),
    ("[-P <file>]", "PID file"),
    ("[-Q <file>]", "VSL query file"),
    ("[-q <query>]", "VSL query"),
    ("[-r <filename>]", "Binary file input"),
    ("[-R <limit[/duration]>]", "Output rate limit"),
    ("[-t <seconds|off>]", "VSM connection timeout"),
    ("[-T <seconds>]", "Transaction end timeout"),
    ("[-u]", "Unbuffered output"),
    ("[-v]", "Verbose record printing"),
    ("[-V]", "Version"),
    ("[-w <filename>]", "Output filename"),
    ("[-x <taglist>]", "Exclude tags"),
    ("[-X <[taglist:]regex>]", "Exclude by regex"),
];

/// The program description for `name` (`varnishlog` or `lacquer log`).
pub fn prog(name: &str) -> Prog {
    Prog {
        name: name.to_string(),
        varnish_name: "varnishlog",
        optstring: "aAbcCdDEg:hi:I:k:L:n:P:q:Q:r:R:t:T:uvVw:x:X:",
        options: OPTIONS,
    }
}

/// `lacquer log` options.
#[derive(Debug, Default)]
pub struct LogArgs {
    /// The options shared with the other log tools.
    pub common: Common,
    /// `-a`: append to the `-w` file.
    pub append: bool,
    /// `-A`: text output to the `-w` file.
    pub text: bool,
    /// `-u`: flush after every transaction.
    pub unbuffered: bool,
    /// `-v`: VXID and side on every record.
    pub verbose: bool,
    /// `-w`: output file (`-` is standard output).
    pub write: Option<String>,
}

impl LogArgs {
    /// Parses the command line (without the program name).
    pub fn parse(p: &Prog, args: &[String]) -> Result<LogArgs, Exit> {
        let mut a = LogArgs::default();
        for (opt, val) in Getopt::parse(p, args)? {
            match opt {
                'a' => a.append = true,
                'A' => a.text = true,
                'u' => a.unbuffered = true,
                'v' => a.verbose = true,
                'w' => a.write = val,
                _ => {
                    a.common.handle(opt, val.as_deref()).map_err(Exit::error)?;
                }
            }
        }
        a.common.check().map_err(Exit::error)?;
        if a.common.daemon {
            match a.write.as_deref() {
                None => return Err(Exit::error("Missing -w option")),
                Some("-") => return Err(Exit::error("Daemon cannot write to stdout")),
                Some(_) => {}
            }
        }
        Ok(a)
    }
}

/// Runs `lacquer log` as `name`; returns the process exit code.
pub fn main(name: &str, args: &[String]) -> i32 {
    let p = prog(name);
    let a = match LogArgs::parse(&p, args) {
        Ok(a) => a,
        Err(e) => return e.report(),
    };
    // Check what can be checked before going to the background.
    let checked = a
        .common
        .record_filter()
        .and_then(|f| a.common.query().map(|_| f));
    if let Err(e) = checked {
        return Exit::error(e).report();
    }
    if a.common.daemon && !vut::is_daemon_child() {
        // Fail here, where the error can be seen, not in the background.
        if let Some(path) = &a.write
            && let Err(e) = vut::open_output(path, true)
        {
            return Exit::error(format!("Cannot open output file ({})", vut::io_reason(&e)))
                .report();
        }
    }
    let _pid = match vut::start_daemon(&a.common) {
        Ok(p) => p,
        Err(Ok(code)) => return code,
        Err(Err(e)) => return Exit::error(e).report(),
    };
    let mut out = match Output::open(&a) {
        Ok(o) => o,
        Err(e) => return Exit::error(e).report(),
    };
    match run(&a, &mut out) {
        Ok(()) => 0,
        Err(e) => Exit::error(e).report(),
    }
}

/// Where records go: text to standard output or a file, or the binary
/// format to a file (or standard output).
pub enum Output {
    /// varnishlog's text.
    Text(Box<dyn Write>),
    /// The binary log format.
    Binary(FileWriter<Box<dyn Write>>),
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Output::Text(_) => "Output::Text",
            Output::Binary(_) => "Output::Binary",
        })
    }
}

impl Output {
    /// Opens what `-w`, `-a` and `-A` ask for.
    pub fn open(a: &LogArgs) -> Result<Output, String> {
        let (w, has_content): (Box<dyn Write>, bool) = match a.write.as_deref() {
            None | Some("-") => (Box::new(std::io::stdout()), false),
            Some(path) => {
                let f = vut::open_output(path, a.append)
                    .map_err(|e| format!("Cannot open output file ({})", vut::io_reason(&e)))?;
                let has = a.append && f.metadata().map(|m| m.len() > 0).unwrap_or(false);
                (Box::new(BufWriter::new(f)), has)
            }
        };
        if a.write.is_none() || a.text {
            return Ok(Output::Text(w));
        }
        FileWriter::new(w, has_content)
            .map(Output::Binary)
            .map_err(|e| format!("Cannot write output file ({})", vut::io_reason(&e)))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Text(w) => w.flush(),
            Output::Binary(w) => w.flush(),
        }
    }
}

/// Writes one group: text like varnishlog, or the binary records the
/// filters keep (always with the `Begin`, `End` and `Link` records that
/// hold transactions together, as varnishlog writes them).
fn write_group(
    out: &mut Output,
    g: &[Transaction],
    opts: PrintOptions,
    filter: &RecordFilter,
) -> std::io::Result<()> {
    match out {
        Output::Text(w) => w.write_all(&format_group_bytes(g, opts, &|r| filter.matches(r))),
        Output::Binary(w) => {
            for t in g {
                for r in &t.records {
                    if matches!(r.tag, Tag::Begin | Tag::End | Tag::Link) || filter.matches(r) {
                        w.write(r)?;
                    }
                }
            }
            Ok(())
        }
    }
}

/// Reads and writes records until the input ends (`-d`, `-r`, `-k`) or a
/// signal stops the run; SIGHUP reopens the `-w` file.
pub fn run(a: &LogArgs, out: &mut Output) -> Result<(), String> {
    let filter = a.common.record_filter()?;
    let opts = PrintOptions {
        verbose: a.verbose,
        client_only: a.common.client_side(),
        backend_only: a.common.backend,
        esi: a.common.esi,
    };
    let signals = Signals::install();
    let mut reader = Reader::open(&a.common)?;
    let io = |e: std::io::Error| format!("Cannot write output ({})", vut::io_reason(&e));
    match pump(a, out, &filter, opts, signals, &mut reader) {
        // The reader of our output went away (`varnishlog | head`): done.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(io(e)),
        Ok(r) => r,
    }
}

fn pump(
    a: &LogArgs,
    out: &mut Output,
    filter: &RecordFilter,
    opts: PrintOptions,
    signals: &Signals,
    reader: &mut Reader,
) -> std::io::Result<Result<(), String>> {
    let mut dirty = false;
    loop {
        if signals.stopping() {
            break;
        }
        if signals.take_hup() && a.write.as_deref().is_some_and(|w| w != "-") {
            out.flush()?;
            match Output::open(a) {
                Ok(o) => *out = o,
                Err(e) => return Ok(Err(e)),
            }
        }
        let step = match reader.step() {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        match step {
            Step::Group(g) => {
                write_group(out, &g, opts, filter)?;
                dirty = true;
                if a.unbuffered {
                    out.flush()?;
                    dirty = false;
                }
            }
            Step::Overrun => {
                if let Output::Text(w) = out {
                    writeln!(w, "Log overrun")?;
                }
            }
            Step::Idle => {
                if dirty {
                    out.flush()?;
                    dirty = false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Step::End => break,
        }
    }
    out.flush().map(Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<LogArgs, Exit> {
        let args: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        LogArgs::parse(&prog("varnishlog"), &args)
    }

    #[test]
    fn daemon_needs_a_file() {
        assert_eq!(parse(&["-D"]).unwrap_err().stderr, "Missing -w option\n");
        assert_eq!(
            parse(&["-D", "-w", "-"]).unwrap_err().stderr,
            "Daemon cannot write to stdout\n"
        );
        assert_eq!(
            parse(&["-n", "x", "-r", "y"]).unwrap_err().stderr,
            "Only one of -n and -r options may be used\n"
        );
        let a = parse(&["-w", "f", "-a", "-A", "-u", "-v", "-g", "raw"]).unwrap();
        assert!(a.append && a.text && a.unbuffered && a.verbose);
    }
}
