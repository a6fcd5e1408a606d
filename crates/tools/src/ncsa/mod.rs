//! `lacquer ncsa`: varnishncsa. One line per client request (`-c`, the
//! default) and/or backend request (`-b`) in Apache's combined log format
//! or any format given with `-F`/`-f` (see [`format`]), optionally
//! JSON-escaped (`-j`), to standard output or a file (`-w`, `-a`) that a
//! daemon (`-D`, `-P`) reopens on SIGHUP for log rotation.

pub mod format;

use std::io::{BufWriter, Write};
use std::time::Duration;

use lacquer_vsl::{Grouping, Transaction, TxType};

use crate::vut::{self, Common, Exit, Getopt, Prog, Reader, Signals, Step};
use format::{DEFAULT_FORMAT, Format};

const OPTIONS: &[(&str, &str)] = &[
    ("[-a]", "Append to file"),
    ("[-b]", "Backend mode"),
    ("[-c]", "Client mode"),
    ("[-C]", "Caseless regular expressions"),
    ("[-d]", "Process old log entries and exit"),
    ("[-D]", "Daemonize"),
    ("[-E]", "Show ESI requests"),
    ("[-F <format>]", "Set output format"),
    ("[-f <formatfile>]", "Read output format from file"),
    ("[-g <request|vxid>]", "Grouping mode (default: vxid)"),
    ("[-h]", "Usage help"),
    ("[-j]", "Make output JSON-compatible"),
    ("[-L <limit>]", "Incomplete transaction limit"),
    ("[-n <dir>]", "lacquerd working directory"),
    ("[-P <file>]", "PID file"),
    ("[-Q <file>]", "VSL query file"),
    ("[-q <query>]", "VSL query"),
    ("[-r <filename>]", "Binary file input"),
    ("[-R <limit[/duration]>]", "Output rate limit"),
    ("[-t <seconds|off>]", "VSM connection timeout"),
    ("[-V]", "Version"),
    ("[-w <filename>]", "Output filename"),
];

/// The program description for `name` (`varnishncsa` or `lacquer ncsa`).
pub fn prog(name: &str) -> Prog {
    Prog {
        name: name.to_string(),
        varnish_name: "varnishncsa",
        optstring: "abcCdDEF:f:g:hjL:n:P:Q:q:r:R:t:Vw:",
        options: OPTIONS,
    }
}

/// `lacquer ncsa` options.
#[derive(Debug, Default)]
pub struct NcsaArgs {
    /// The options shared with the other log tools.
    pub common: Common,
    /// `-a`.
    pub append: bool,
    /// `-F` or the first line of the `-f` file.
    pub format: Option<String>,
    /// `-j`.
    pub json: bool,
    /// `-w`.
    pub write: Option<String>,
}

fn read_format_file(path: &str) -> Result<String, String> {
    let text = std::fs::read(path)
        .map_err(|e| format!("Can't open format file ({})", vut::io_reason(&e)))?;
    if text.is_empty() {
        return Err("Empty format file".into());
    }
    let line = text.split(|&b| b == b'\n').next().unwrap_or(&[]);
    Ok(String::from_utf8_lossy(line).into_owned())
}

impl NcsaArgs {
    /// Parses the command line (without the program name).
    pub fn parse(p: &Prog, args: &[String]) -> Result<NcsaArgs, Exit> {
        let mut a = NcsaArgs::default();
        for (opt, val) in Getopt::parse(p, args)? {
            let v = val.as_deref().unwrap_or("");
            match opt {
                'a' => a.append = true,
                'j' => a.json = true,
                'w' => a.write = val,
                'F' | 'f' => {
                    if a.format.is_some() {
                        return Err(Exit::error("Format already set"));
                    }
                    a.format = Some(if opt == 'F' {
                        v.to_string()
                    } else {
                        read_format_file(v).map_err(Exit::error)?
                    });
                }
                'g' => {
                    a.common.grouping =
                        vut::parse_grouping(v, &[Grouping::Vxid, Grouping::Request])
                            .map_err(Exit::error)?;
                }
                _ => {
                    a.common.handle(opt, val.as_deref()).map_err(Exit::error)?;
                }
            }
        }
        // Client mode is the default, and -E implies it.
        if !a.common.backend || a.common.esi {
            a.common.client = true;
        }
        a.common.check().map_err(Exit::error)?;
        if a.common.daemon && a.write.is_none() {
            return Err(Exit::error("Missing -w option"));
        }
        if a.common.daemon && a.write.as_deref() == Some("-") {
            return Err(Exit::error("Daemon cannot write to stdout"));
        }
        Ok(a)
    }
}

fn open_output(path: &str, append: bool) -> Result<std::fs::File, String> {
    vut::open_output(path, append)
        .map_err(|e| format!("Can't open output file ({})", vut::io_reason(&e)))
}

/// Runs `lacquer ncsa` as `name`; returns the process exit code.
pub fn main(name: &str, args: &[String]) -> i32 {
    let p = prog(name);
    let a = match NcsaArgs::parse(&p, args) {
        Ok(a) => a,
        Err(e) => return e.report(),
    };
    let fmt = match Format::parse(a.format.as_deref().unwrap_or(DEFAULT_FORMAT), a.json) {
        Ok(f) => f,
        Err(e) => return Exit::error(e).report(),
    };
    if let Err(e) = a.common.query() {
        return Exit::error(e).report();
    }
    if a.common.daemon
        && !vut::is_daemon_child()
        && let Some(w) = &a.write
        && let Err(e) = open_output(w, true)
    {
        return Exit::error(e).report();
    }
    let _pid = match vut::start_daemon(&a.common) {
        Ok(p) => p,
        Err(Ok(code)) => return code,
        Err(Err(e)) => return Exit::error(e).report(),
    };
    let out: Box<dyn Write> = match a.write.as_deref() {
        None | Some("-") => Box::new(std::io::stdout()),
        Some(w) => match open_output(w, a.append) {
            Ok(f) => Box::new(BufWriter::new(f)),
            Err(e) => return Exit::error(e).report(),
        },
    };
    match run(&a, &fmt, out) {
        Ok(()) => 0,
        Err(e) => Exit::error(e).report(),
    }
}

/// The lines a reported group gives: its client requests (in client mode)
/// and backend requests (in backend mode), ESI sub-requests only with
/// `-E`.
pub fn lines(a: &NcsaArgs, fmt: &Format, group: &[Transaction]) -> Vec<Vec<u8>> {
    group
        .iter()
        .filter(|t| match t.tx_type {
            TxType::Request => a.common.client,
            TxType::BeReq => a.common.backend,
            _ => false,
        })
        .filter(|t| t.reason != "esi" || a.common.esi)
        .filter_map(|t| fmt.collect(t, a.json))
        .filter_map(|v| fmt.render(&v, a.json))
        .collect()
}

fn run(a: &NcsaArgs, fmt: &Format, mut out: Box<dyn Write>) -> Result<(), String> {
    let signals = Signals::install();
    let mut reader = Reader::open(&a.common)?;
    let io = |e: std::io::Error| format!("Cannot write output ({})", vut::io_reason(&e));
    let mut dirty = false;
    loop {
        if signals.stopping() {
            break;
        }
        if signals.take_hup() {
            match a.write.as_deref() {
                // Log rotation: the file was moved away; start a new one.
                Some(w) if w != "-" => {
                    out.flush().map_err(io)?;
                    out = Box::new(BufWriter::new(open_output(w, true)?));
                }
                _ => break,
            }
        }
        match reader.step()? {
            Step::Group(g) => {
                for line in lines(a, fmt, &g) {
                    match out.write_all(&line) {
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                        r => r.map_err(io)?,
                    }
                    dirty = true;
                }
            }
            Step::Overrun => {}
            Step::Idle => {
                if dirty {
                    out.flush().map_err(io)?;
                    dirty = false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Step::End => break,
        }
    }
    match out.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(io(e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<NcsaArgs, Exit> {
        let args: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        NcsaArgs::parse(&prog("varnishncsa"), &args)
    }

    #[test]
    fn options() {
        assert_eq!(parse(&["-D"]).unwrap_err().stderr, "Missing -w option\n");
        assert_eq!(
            parse(&["-g", "session"]).unwrap_err().stderr,
            "Invalid grouping mode: session\n"
        );
        assert_eq!(
            parse(&["-F", "x", "-F", "y"]).unwrap_err().stderr,
            "Format already set\n"
        );
        assert_eq!(
            parse(&["-f", "/nonexistent/file"]).unwrap_err().stderr,
            "Can't open format file (No such file or directory)\n"
        );
        assert_eq!(
            parse(&["-f", "/dev/null"]).unwrap_err().stderr,
            "Empty format file\n"
        );
        let a = parse(&[]).unwrap();
        assert!(a.common.client && !a.common.backend);
        let a = parse(&["-b"]).unwrap();
        assert!(!a.common.client && a.common.backend);
        let a = parse(&["-b", "-E"]).unwrap();
        assert!(a.common.client && a.common.backend);
        let e = parse(&["extra"]).unwrap_err();
        assert!(e.stderr.starts_with("Usage: varnishncsa <options>\n"));
    }
}
