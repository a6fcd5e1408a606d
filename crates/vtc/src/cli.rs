//! Command line of the runner: `[-j N] [-k] [-q] [-v] [-L] [-l] [-t TIMEOUT]
//! [-D name=val] [--report FILE.json] [--varnishd PATH] FILE...`.
//! Tests run in parallel with `-j`, each isolated; output follows
//! varnishtest's format and ends with `N passed, N failed, N skipped`.

use crate::runner::{Status, TestResult, run_test};
use crate::{Config, default_daemon};
use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// Parsed options.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Parallel jobs.
    pub jobs: usize,
    /// Keep going after a failure.
    pub keep_going: bool,
    /// Quiet: only failures are reported in full.
    pub quiet: bool,
    /// Verbose: print every test's full log.
    pub verbose: bool,
    /// Leave all temporary directories.
    pub leave_tmp: bool,
    /// Leave temporary directories of failed tests.
    pub leave_failed_tmp: bool,
    /// Per-test timeout in seconds.
    pub timeout: f64,
    /// `-D` macros.
    pub defines: Vec<(String, String)>,
    /// JSON report destination.
    pub report: Option<PathBuf>,
    /// Daemon binary.
    pub varnishd: Option<PathBuf>,
    /// `varnishstat`-compatible counter tool (default: from `$PATH`).
    pub varnishstat: Option<PathBuf>,
    /// `varnishlog`-compatible log tool (default: from `$PATH`).
    pub varnishlog: Option<PathBuf>,
    /// Test files.
    pub files: Vec<PathBuf>,
}

const USAGE: &str = "usage: lacquer vtc [-j N] [-k] [-q] [-v] [-L] [-l] [-t TIMEOUT] \
[-D name=val] [--report FILE.json] [--varnishd PATH] [--varnishstat PATH] \
[--varnishlog PATH] FILE...";

/// Parse the arguments (without the program name).
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        jobs: 1,
        keep_going: false,
        quiet: false,
        verbose: false,
        leave_tmp: false,
        leave_failed_tmp: false,
        timeout: 60.0,
        defines: Vec::new(),
        report: None,
        varnishd: None,
        varnishstat: None,
        varnishlog: None,
        files: Vec::new(),
    };
    let mut i = 0;
    let val = |i: usize, what: &str| -> Result<String, String> {
        args.get(i + 1)
            .cloned()
            .ok_or_else(|| format!("option {what} needs a value"))
    };
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-j" => {
                o.jobs = val(i, a)?
                    .parse()
                    .map_err(|_| "-j needs a positive number".to_string())?;
                if o.jobs == 0 {
                    return Err("-j needs a positive number".into());
                }
                i += 1;
            }
            "-k" => o.keep_going = true,
            "-q" => o.quiet = true,
            "-v" => o.verbose = true,
            "-L" => o.leave_tmp = true,
            "-l" => o.leave_failed_tmp = true,
            "-t" => {
                o.timeout = val(i, a)?
                    .parse()
                    .map_err(|_| "-t needs a number of seconds".to_string())?;
                if o.timeout <= 0.0 {
                    return Err("-t needs a positive number of seconds".into());
                }
                i += 1;
            }
            "-D" => {
                let d = val(i, a)?;
                let (k, v) = d
                    .split_once('=')
                    .ok_or_else(|| format!("-D needs name=value (got '{d}')"))?;
                o.defines.push((k.to_string(), v.to_string()));
                i += 1;
            }
            "--report" => {
                o.report = Some(PathBuf::from(val(i, a)?));
                i += 1;
            }
            "--varnishd" => {
                o.varnishd = Some(PathBuf::from(val(i, a)?));
                i += 1;
            }
            "--varnishstat" => {
                o.varnishstat = Some(PathBuf::from(val(i, a)?));
                i += 1;
            }
            "--varnishlog" => {
                o.varnishlog = Some(PathBuf::from(val(i, a)?));
                i += 1;
            }
            "-h" | "--help" => return Err(String::new()),
            _ if a.starts_with('-') && a.len() > 1 => return Err(format!("unknown option {a}")),
            _ => o.files.push(PathBuf::from(a)),
        }
        i += 1;
    }
    if o.files.is_empty() {
        return Err("no test files given".into());
    }
    Ok(o)
}

fn json_report(results: &[TestResult]) -> serde_json::Value {
    let tests: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            serde_json::json!({
                "file": r.file.display().to_string(),
                "status": match r.status {
                    Status::Passed => "passed",
                    Status::Failed => "failed",
                    Status::Skipped => "skipped",
                },
                "duration": (r.duration * 1000.0).round() / 1000.0,
                "failure": r.failure.as_ref().map(|f| serde_json::json!({
                    "actor": f.actor,
                    "line": f.line,
                    "message": crate::text::display(&f.msg),
                })),
                "skip_reason": r.skip_reason,
            })
        })
        .collect();
    serde_json::json!({ "tests": tests })
}

fn print_result(out: &mut impl Write, r: &TestResult, o: &Options) {
    let f = r.file.display();
    // With -v and one job the log was already printed live.
    let live = o.verbose && o.jobs == 1;
    let show_log = !live && (o.verbose || r.status == Status::Failed);
    if show_log {
        for l in &r.log {
            let _ = out.write_all(&crate::text::bytes(l));
            let _ = out.write_all(b"\n");
        }
    }
    let line = match r.status {
        Status::Passed => format!("#    top  TEST {f} passed ({:.3})", r.duration),
        Status::Skipped => format!("#    top  TEST {f} skipped"),
        Status::Failed => format!("#    top  TEST {f} FAILED ({:.3}) exit=2", r.duration),
    };
    if !o.quiet || r.status == Status::Failed {
        let _ = writeln!(out, "{line}");
    }
}

/// Run the tests described by `args` (without the program name); returns
/// the process exit code: 0 when nothing failed, 2 when a test failed,
/// 77 when every test was skipped, 1 for usage errors.
pub fn cli_main(args: &[String]) -> i32 {
    cli_main_with(args, &|_| {})
}

/// Like [`cli_main`], letting the caller adjust the configuration (for
/// example to plug in native [`crate::CounterSource`] / [`crate::LogSource`]
/// implementations) before the tests run.
pub fn cli_main_with(args: &[String], setup: &dyn Fn(&mut Config)) -> i32 {
    let o = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("lacquer vtc: {e}");
            }
            eprintln!("{USAGE}");
            return 1;
        }
    };
    let daemon = o.varnishd.clone().unwrap_or_else(default_daemon);
    let mut cfg = Config::new(&daemon);
    if let Some(p) = &o.varnishstat {
        cfg.set_varnishstat(p);
    }
    if let Some(p) = &o.varnishlog {
        cfg.set_varnishlog(p);
    }
    cfg.timeout = Duration::from_secs_f64(o.timeout);
    cfg.defines = o.defines.clone();
    cfg.verbose_live = o.verbose && o.jobs == 1;
    cfg.print_vsl = o.verbose;
    cfg.keep_tmp = o.leave_tmp;
    cfg.keep_failed_tmp = o.leave_failed_tmp;
    setup(&mut cfg);
    let results = run_all(&o, Arc::new(cfg));
    let passed = results
        .iter()
        .filter(|r| r.status == Status::Passed)
        .count();
    let failed = results
        .iter()
        .filter(|r| r.status == Status::Failed)
        .count();
    let skipped = results
        .iter()
        .filter(|r| r.status == Status::Skipped)
        .count();
    if let Some(p) = &o.report {
        let s = serde_json::to_string_pretty(&json_report(&results)).unwrap_or_default();
        if let Err(e) = std::fs::write(p, s) {
            eprintln!("lacquer vtc: cannot write report {}: {e}", p.display());
        }
    }
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        2
    } else if passed == 0 && skipped > 0 {
        77
    } else {
        0
    }
}

/// Run all files with `o.jobs` workers, printing results as they finish.
pub fn run_all(o: &Options, cfg: Arc<Config>) -> Vec<TestResult> {
    let queue = Arc::new(Mutex::new(o.files.iter().cloned().collect::<VecDeque<_>>()));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<TestResult>();
    let mut workers = Vec::new();
    for _ in 0..o.jobs.min(o.files.len()).max(1) {
        let (q, s, t, c) = (queue.clone(), stop.clone(), tx.clone(), cfg.clone());
        workers.push(std::thread::spawn(move || {
            loop {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let next = q.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                let Some(f) = next else { break };
                if t.send(run_test(&f, c.clone())).is_err() {
                    break;
                }
            }
        }));
    }
    drop(tx);
    let mut results = Vec::new();
    let stdout = std::io::stdout();
    for r in rx {
        {
            let mut out = stdout.lock();
            print_result(&mut out, &r, o);
            let _ = out.flush();
        }
        if r.status == Status::Failed && !o.keep_going {
            stop.store(true, Ordering::SeqCst);
        }
        results.push(r);
    }
    for w in workers {
        let _ = w.join();
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn args() {
        let o = parse_args(&s(&[
            "-j",
            "3",
            "-k",
            "-D",
            "a=b",
            "--varnishd",
            "/x",
            "f.vtc",
        ]))
        .unwrap();
        assert_eq!(o.jobs, 3);
        assert!(o.keep_going);
        assert_eq!(o.defines, vec![("a".into(), "b".into())]);
        assert_eq!(o.varnishd, Some(PathBuf::from("/x")));
        assert_eq!(o.files, vec![PathBuf::from("f.vtc")]);
        assert!(parse_args(&s(&["-j", "0", "f"])).is_err());
        assert!(parse_args(&s(&["-D", "x", "f"])).is_err());
        assert!(parse_args(&s(&["-z", "f"])).is_err());
        assert!(parse_args(&s(&[])).is_err());
    }
}
