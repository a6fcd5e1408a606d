//! `lacquer`: the operator tool binary. A thin dispatcher over the library
//! crates: `log`, `stat`, `adm` (lacquer-tools), `vtc` (lacquer-vtc) and
//! `vcl check` (the daemon's VCL loader).

use std::process::ExitCode;

const USAGE: &str = "usage: lacquer <command> [options]

commands:
  log         show the transaction log (varnishlog; -w/-r binary log files)
  ncsa        access log lines in Apache/NCSA or custom formats (varnishncsa)
  top         the most frequent log records (varnishtop: live view, -1)
  hist        histogram of response times or sizes (varnishhist)
  stat        show counters (varnishstat: live view, -1, -j, --prometheus,
              -f, -w; --listen ADDR serves /metrics and /stats.json)
  adm         management CLI client (varnishadm)
  vtc         run varnishtest .vtc files against lacquerd
  vcl check   compile VCL files and report errors
  version     print the version
";

/// The Varnish tool names `lacquer` answers to when run through a link of
/// that name (e.g. `ln -s lacquer varnishlog`): the command each stands for.
const VARNISH_NAMES: &[(&str, &str)] = &[
    ("varnishadm", "adm"),
    ("varnishhist", "hist"),
    ("varnishlog", "log"),
    ("varnishncsa", "ncsa"),
    ("varnishstat", "stat"),
    ("varnishtop", "top"),
];

fn main() -> ExitCode {
    let mut argv = std::env::args();
    let argv0 = argv.next().unwrap_or_default();
    let args: Vec<String> = argv.collect();
    let base = argv0.rsplit('/').next().unwrap_or("");
    if let Some((name, cmd)) = VARNISH_NAMES.iter().find(|(n, _)| *n == base) {
        return exit(run_tool(cmd, name, &args).unwrap_or(2));
    }
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    if let Some(code) = run_tool(cmd, &format!("lacquer {cmd}"), rest) {
        return exit(code);
    }
    let code = match cmd.as_str() {
        "vtc" => lacquer_vtc::cli_main(rest),
        "vcl" if rest.first().map(String::as_str) == Some("check") => vcl_check(&rest[1..]),
        "version" | "-V" | "--version" => {
            println!("lacquer {}", env!("CARGO_PKG_VERSION"));
            0
        }
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            0
        }
        other => {
            eprintln!("lacquer: unknown command {other:?}\n\n{USAGE}");
            2
        }
    };
    exit(code)
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// Runs the operator tool `cmd` presenting itself as `name`; None if `cmd`
/// is not a tool.
fn run_tool(cmd: &str, name: &str, args: &[String]) -> Option<i32> {
    Some(match cmd {
        "log" => lacquer_tools::log::main(name, args),
        "ncsa" => lacquer_tools::ncsa::main(name, args),
        "top" => lacquer_tools::top::main(name, args),
        "hist" => lacquer_tools::hist::main(name, args),
        "stat" => lacquer_tools::stat::main(name, args),
        "adm" => lacquer_tools::adm::main(name, args),
        _ => return None,
    })
}

/// `lacquer vcl check FILE…`: compiles each file like `lacquerd -C`.
fn vcl_check(files: &[String]) -> i32 {
    if files.is_empty() {
        eprintln!("usage: lacquer vcl check FILE.vcl...");
        return 2;
    }
    let params = lacquer_server::runtime::params::ParamSet::default();
    let mut failed = 0;
    for f in files {
        let vcl = lacquer_server::mgt::daemon::BootVcl::Files(vec![f.into()]);
        match lacquer_server::mgt::daemon::check_vcl(&vcl, &params) {
            Ok(summary) => print!("{f}: {summary}"),
            Err(msg) => {
                failed += 1;
                eprintln!("{f}: failed\n{msg}");
            }
        }
    }
    println!("{} passed, {failed} failed", files.len() - failed);
    i32::from(failed > 0)
}
