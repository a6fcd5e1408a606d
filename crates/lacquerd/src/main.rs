//! `lacquerd`: the cache daemon. A thin command-line layer over `lacquer-server`.
//!
//! The flags are varnishd's, so that an existing `varnishd` command line works
//! unchanged; `--demo` adds a self-contained demonstration setup.

use std::process::ExitCode;

use clap::Parser;

/// The varnishd-compatible command line.
#[derive(Parser, Debug)]
#[command(
    name = "lacquerd",
    about = "Lacquer: a Varnish-compatible HTTP cache",
    disable_version_flag = true,
    disable_help_flag = true
)]
struct Args {
    /// Listen address: [name=][address][:port][,PROTO][,mode=M] (repeatable).
    #[arg(short = 'a', value_name = "ADDRESS")]
    listen: Vec<String>,
    /// Backend host[:port], used with the builtin VCL (instead of -f).
    #[arg(short = 'b', value_name = "HOST[:PORT]", conflicts_with = "vcl_file")]
    backend: Option<String>,
    /// Compile the VCL, print a summary and exit.
    #[arg(short = 'C')]
    compile_only: bool,
    /// Debug mode: management CLI on standard input.
    #[arg(short = 'd')]
    debug: bool,
    /// Run in the foreground.
    #[arg(short = 'F')]
    foreground: bool,
    /// VCL file to load.
    #[arg(short = 'f', value_name = "FILE")]
    vcl_file: Option<String>,
    /// Hash algorithm (accepted for compatibility; Lacquer has one).
    #[arg(short = 'h', value_name = "TYPE")]
    hash: Option<String>,
    /// CLI command file to run at startup.
    #[arg(short = 'I', value_name = "FILE")]
    cli_file: Option<String>,
    /// Identity of this instance (server.identity).
    #[arg(short = 'i', value_name = "IDENTITY")]
    identity: Option<String>,
    /// Jail (accepted for compatibility; Lacquer does not change user).
    #[arg(short = 'j', value_name = "JAIL")]
    jail: Option<String>,
    /// Shared-memory log size (vsl_space).
    #[arg(short = 'l', value_name = "SIZE")]
    vsl_space: Option<String>,
    /// Reverse management CLI: connect to this address.
    #[arg(short = 'M', value_name = "ADDRESS:PORT")]
    reverse_cli: Option<String>,
    /// Working directory (instance name).
    #[arg(short = 'n', value_name = "DIR")]
    workdir: Option<String>,
    /// PID file.
    #[arg(short = 'P', value_name = "FILE")]
    pidfile: Option<String>,
    /// Set a parameter: name=value (repeatable).
    #[arg(short = 'p', value_name = "PARAM=VALUE")]
    params: Vec<String>,
    /// Make parameters read-only.
    #[arg(short = 'r', value_name = "PARAM[,PARAM…]")]
    readonly: Vec<String>,
    /// Secret file for management CLI authentication.
    #[arg(short = 'S', value_name = "FILE")]
    secret: Option<String>,
    /// Storage: [name=]malloc[,size] (repeatable).
    #[arg(short = 's', value_name = "STORAGE")]
    storage: Vec<String>,
    /// Management CLI listen address.
    #[arg(short = 'T', value_name = "ADDRESS:PORT")]
    admin: Option<String>,
    /// Default TTL (default_ttl).
    #[arg(short = 't', value_name = "TTL")]
    ttl: Option<String>,
    /// Print the version and exit.
    #[arg(short = 'V')]
    version: bool,
    /// Waiter (accepted for compatibility; Lacquer uses tokio).
    #[arg(short = 'W', value_name = "WAITER")]
    waiter: Option<String>,
    /// Print reference documentation: `parameter`.
    #[arg(short = 'x', value_name = "WHAT")]
    reference: Option<String>,
    /// Print help.
    #[arg(short = '?', long = "help", action = clap::ArgAction::Help)]
    help: Option<bool>,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.version {
        println!(
            "lacquerd (lacquer-{}) (Varnish 7.1 compatible)",
            env!("CARGO_PKG_VERSION")
        );
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(what) = &args.reference {
        return match what.as_str() {
            "parameter" => {
                print!("{}", lacquer_server::params::reference_markdown());
                Ok(ExitCode::SUCCESS)
            }
            other => anyhow::bail!("-x {other}: unknown reference (try: parameter)"),
        };
    }
    let mut params = lacquer_server::params::ParamSet::default();
    for p in &args.params {
        params.apply_arg(p)?;
    }
    if let Some(t) = &args.ttl {
        params.set("default_ttl", t)?;
    }
    if let Some(l) = &args.vsl_space {
        params.set("vsl_space", l)?;
    }
    for (i, a) in args.listen.iter().enumerate() {
        lacquer_server::listen::parse_listen(a, i)?;
    }
    anyhow::bail!(
        "the cache engine is not built yet: only -V and -x parameter work in this version"
    )
}
