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
    /// Listen address: [name=][address][:port][,PROTO][,user=U][,group=G][,mode=M] (repeatable).
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
    /// Jail: none, or unix[,user=U][,workuser=W][,ccgroup=G] (checked as
    /// varnishd does; Lacquer does not switch users).
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
    /// Management CLI listen address (default: a free localhost port;
    /// `none` for no management port).
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
    /// Print reference documentation: `parameter`, `vsl` or `builtin`.
    #[arg(short = 'x', value_name = "WHAT")]
    reference: Option<String>,
    /// Run a self-contained demo: a built-in origin and the example VCL.
    #[arg(long)]
    demo: bool,
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

/// How the demo tells users to run the `lacquer` tool: the binary next to
/// this one when it was built, else through cargo.
fn tool_command() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("lacquer")))
        .filter(|p| p.is_file())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "cargo run -q --release -p lacquer --".to_string())
}

/// `s` as one shell word: unchanged when it has no characters a shell treats
/// specially, otherwise in single quotes.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=,@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    use lacquer_server::daemon::{self, BootVcl, Config};
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
            "vsl" => {
                print!("{}", lacquer_vsl::tags::reference_rst());
                Ok(ExitCode::SUCCESS)
            }
            "builtin" => {
                print!("{}", lacquer_vcl::compile::BUILTIN_VCL);
                Ok(ExitCode::SUCCESS)
            }
            other => {
                anyhow::bail!("-x {other}: unknown reference (try: parameter, vsl, builtin)")
            }
        };
    }
    if let Some(j) = &args.jail {
        let jail = lacquer_server::jail::parse_jail(j).map_err(anyhow::Error::msg)?;
        if let Some(n) = jail.notice() {
            eprintln!("{n}");
        }
    }
    let mut params = lacquer_server::params::ParamSet::default();
    for p in &args.params {
        params.apply_arg(p)?;
    }
    for list in &args.readonly {
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            params.protect(name)?;
        }
    }
    if let Some(t) = &args.ttl {
        params.set("default_ttl", t)?;
    }
    if let Some(l) = &args.vsl_space {
        params.set("vsl_space", l)?;
    }
    let vcl = match (&args.vcl_file, &args.backend) {
        (Some(f), _) => BootVcl::File(f.into()),
        (None, Some(b)) => BootVcl::Backend(b.clone()),
        (None, None) if args.demo => BootVcl::None,
        (None, None) if args.debug => BootVcl::None,
        (None, None) => anyhow::bail!(
            "Neither -b nor -f given: say which backend to use (-b host:port) or which VCL to load (-f file.vcl); or try --demo"
        ),
    };
    if args.compile_only {
        return match daemon::check_vcl(&vcl, &params) {
            Ok(summary) => {
                print!("{summary}");
                Ok(ExitCode::SUCCESS)
            }
            Err(msg) => {
                eprintln!("{msg}");
                Ok(ExitCode::from(2))
            }
        };
    }
    let mut listen_args = args.listen.clone();
    if listen_args.is_empty() {
        listen_args.push(if args.demo {
            "127.0.0.1:6081".to_string()
        } else {
            ":80".to_string()
        });
    }
    let mut listen = Vec::new();
    for (i, a) in listen_args.iter().enumerate() {
        listen.push(lacquer_server::listen::parse_listen(a, i)?);
    }
    lacquer_server::listen::check_distinct(&listen)?;
    let workdir = args
        .workdir
        .as_deref()
        .map(daemon::workdir_from)
        .unwrap_or_else(daemon::default_workdir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let demo = args.demo;
    let listen_text = listen_args[0].clone();
    // The tools find the daemon's log and counters by work directory: when
    // the user chose one, the printed commands must name it too.
    let workdir_arg = match &args.workdir {
        Some(n) => format!(" -n {}", shell_quote(n)),
        None => String::new(),
    };
    let result = rt.block_on(async move {
        let vcl = if demo {
            let origin = lacquer_server::demo::start_origin()
                .await
                .map_err(|e| format!("Cannot start the demo origin: {e}"))?;
            eprint!(
                "{}",
                lacquer_server::demo::instructions(
                    &listen_text,
                    origin,
                    &tool_command(),
                    &workdir_arg,
                )
            );
            BootVcl::Inline(lacquer_server::demo::demo_vcl(origin.port()))
        } else {
            vcl
        };
        let cfg = Config {
            listen,
            vcl,
            storage: args.storage.clone(),
            params,
            workdir,
            identity: args.identity.clone(),
            // As varnishd: a management port on a free localhost port
            // unless -T says where, or -T none for none.
            admin: match args.admin.as_deref() {
                None => Some("localhost:0".to_string()),
                Some("none") => None,
                Some(a) => Some(a.to_string()),
            },
            secret: args.secret.as_ref().map(Into::into),
            reverse_cli: args.reverse_cli.clone(),
            debug: args.debug,
            pidfile: args.pidfile.as_ref().map(Into::into),
        };
        daemon::run(cfg).await
    });
    match result {
        Ok(bits) => Ok(ExitCode::from(bits)),
        Err(msg) => {
            eprintln!("Error: {msg}");
            Ok(ExitCode::from(2))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn shell_words() {
        assert_eq!(shell_quote("/tmp/w-1"), "/tmp/w-1");
        assert_eq!(shell_quote("my dir"), "'my dir'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
