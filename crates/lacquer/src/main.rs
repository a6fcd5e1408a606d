//! `lacquer`: the operator tool binary. A thin dispatcher over the library
//! crates: `log`, `stat`, `adm` (lacquer-tools), `vtc` (lacquer-vtc) and
//! `vcl check` (the daemon's VCL loader).

use std::process::ExitCode;

const USAGE: &str = "usage: lacquer <command> [options]

commands:
  log         show the transaction log (varnishlog)
  stat        show counters (varnishstat: live view, -1, -j, --prometheus,
              -f, -w; --listen ADDR serves /metrics and /stats.json)
  adm         management CLI client (varnishadm)
  vtc         run varnishtest .vtc files against lacquerd
  vcl check   compile VCL files and report errors
  version     print the version
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    let code = match cmd.as_str() {
        "log" => lacquer_tools::log::main(rest),
        "stat" => lacquer_tools::stat::main(rest),
        "adm" => lacquer_tools::adm::main(rest),
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
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// `lacquer vcl check FILE…`: compiles each file like `lacquerd -C`.
fn vcl_check(files: &[String]) -> i32 {
    if files.is_empty() {
        eprintln!("usage: lacquer vcl check FILE.vcl...");
        return 2;
    }
    let params = lacquer_server::params::ParamSet::default();
    let mut failed = 0;
    for f in files {
        let vcl = lacquer_server::daemon::BootVcl::File(f.into());
        match lacquer_server::daemon::check_vcl(&vcl, &params) {
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
