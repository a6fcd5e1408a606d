//! `lacquerd`: the cache daemon. A thin command-line layer over `lacquer-server`.
//!
//! The flags are varnishd's, so that an existing `varnishd` command line works
//! unchanged; `--demo` adds a self-contained demonstration setup.

use std::process::ExitCode;

/// jemalloc, as varnishd uses: a cache holds many small long-lived objects
/// among short-lived request allocations from every worker thread. With
/// glibc's per-thread arenas a cached 1 KB object cost 6.5 KB of RSS where
/// the heap held 2.4 KB; with jemalloc 5.0 KB, against varnishd's 4.6
/// (bench scenario 8). Its settings are in `.cargo/config.toml`.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// varnishd's option letters, as `-x optstring` prints them: a letter
/// followed by `:` takes an argument. `--demo` is Lacquer's own.
const OPTSTRING: &str = "?a:A:b:Cdf:Fh:i:I:j:l:M:n:P:p:r:S:s:T:t:VW:x:";

/// What each option does, for the usage text.
const USAGE: &[(&str, &str)] = &[
    (
        "-a [name=][address][:port][,PROTO][,user=U][,group=G][,mode=M]",
        "Listen address (repeatable); PROTO is HTTP, PROXY or HTTPS (TLS, certificates from -A)",
    ),
    (
        "-A file",
        "TLS configuration in Hitch's hitch.conf format: frontends to listen on, certificates",
    ),
    (
        "-b none | host[:port]",
        "Backend, with the builtin VCL (instead of -f)",
    ),
    (
        "-C",
        "Compile the VCL, print a summary on standard error and exit",
    ),
    ("-d", "Debug mode: management CLI on standard input"),
    ("-F", "Run in the foreground"),
    ("-f file", "VCL file to load ('' for none)"),
    ("-h type", "Hash algorithm (accepted; Lacquer has one)"),
    ("-I file", "CLI command file to run at startup"),
    ("-i identity", "Identity of this instance (server.identity)"),
    (
        "-j jail[,options]",
        "Jail: none, or unix[,user=U][,workuser=W][,ccgroup=G]",
    ),
    ("-l size", "Shared-memory log size (vsl_space)"),
    (
        "-M address:port",
        "Reverse management CLI: connect to this address",
    ),
    ("-n dir", "Working directory"),
    ("-P file", "PID file"),
    ("-p param=value", "Set a parameter (repeatable)"),
    ("-r param[,param...]", "Make parameters read-only"),
    ("-S secret-file", "Secret file for CLI authentication"),
    (
        "-s [name=]kind[,options]",
        "Storage (repeatable): malloc[,size], file,path[,size[,granularity[,advice]]], disk,path,size (persistent) or mse,/path/mse.conf",
    ),
    ("-T address:port | none", "Management CLI listen address"),
    ("-t TTL", "Default TTL (default_ttl)"),
    ("-V", "Print the version and exit (first argument only)"),
    ("-W waiter", "Waiter (accepted; Lacquer uses tokio)"),
    (
        "-x parameter|vsl|cli|builtin|optstring",
        "Print reference documentation (first argument only)",
    ),
    (
        "--demo",
        "Run a self-contained demo: a built-in origin and the example VCL",
    ),
];

/// The varnishd-compatible command line.
#[derive(Debug, Default)]
struct Args {
    listen: Vec<String>,
    /// `-A`: a hitch.conf.
    tls_conf: Option<String>,
    backend: Option<String>,
    compile_only: bool,
    debug: bool,
    foreground: bool,
    /// `-f`, in order.
    vcl_files: Vec<String>,
    cli_file: Option<String>,
    identity: Option<String>,
    jail: Option<String>,
    vsl_space: Option<String>,
    reverse_cli: Option<String>,
    workdir: Option<String>,
    pidfile: Option<String>,
    params: Vec<String>,
    /// `-r` lists, each with how many `-p` came before it.
    readonly: Vec<(usize, String)>,
    secret: Option<String>,
    storage: Vec<String>,
    admin: Option<String>,
    ttl: Option<String>,
    /// `-h`: checked, not used (Lacquer has one hash).
    hash: Option<String>,
    demo: bool,
}

/// An end before the daemon starts: what to print and the exit status.
#[derive(Debug, PartialEq)]
struct Early {
    code: u8,
    stdout: String,
    stderr: String,
}

impl Early {
    fn error(msg: impl std::fmt::Display) -> Early {
        Early {
            code: 2,
            stdout: String::new(),
            // As varnishd's ARGV_ERR.
            stderr: format!("Error: {msg}\n(-? gives usage)\n"),
        }
    }

    fn print(text: String) -> Early {
        Early {
            code: 0,
            stdout: text,
            stderr: String::new(),
        }
    }
}

fn usage(name: &str) -> String {
    let mut s = format!("Usage: {name} [options]\n");
    for (opt, what) in USAGE {
        s.push_str(&format!("    {opt}\n        {what}\n"));
    }
    s
}

fn version(name: &str) -> String {
    format!(
        "{name} (lacquer-{}) (Varnish 7.1 compatible)\n\
         Options and behaviour follow varnishd of Varnish Cache, \
         Copyright (c) 2006 Verdens Gang AS, Copyright (c) 2006-2022 Varnish Software;\n\
         this implementation is Lacquer's own.\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// `-x cli`: each CLI command with its syntax and help, as reStructuredText.
fn cli_reference() -> String {
    let mut s = String::new();
    for c in lacquer_server::mgt::cli::COMMANDS {
        s.push_str(&format!(
            ".. _ref_cli_{}:\n\n{}\n{}\n  {}\n\n",
            c.name.replace('.', "_"),
            c.syntax,
            "~".repeat(c.syntax.chars().count()),
            c.help
        ));
    }
    s
}

/// Parses varnishd's command line (getopt-style, with its messages and
/// its rules on which options go together); `-x`, `-V`, `-?` and
/// `--optstring` end here with their output.
/// `-h METHOD[,ARGS]` as varnishd's `mgt_hash` reads it: a known method,
/// with the arguments it takes (`classic` one, the others none).
fn check_hash(v: &str) -> Result<(), Early> {
    let mut parts = v.split(',');
    let method = parts.next().unwrap_or_default();
    let args = parts.count();
    let name = match method {
        "critbit" => "critbit",
        "simple" | "simple_list" => "simple",
        "classic" => "classic",
        _ => return Err(Early::error(format!("Unknown hash method \"{method}\""))),
    };
    match (name, args) {
        (_, 0) | ("classic", 1) => Ok(()),
        ("classic", _) => Err(Early::error("(-hclassic) too many arguments")),
        _ => Err(Early::error(format!(
            "Hash method \"{name}\" takes no arguments"
        ))),
    }
}

fn parse_args(name: &str, args: &[String]) -> Result<Args, Early> {
    if args.first().is_some_and(|a| a == "--optstring") {
        return Err(Early::print(format!("{OPTSTRING}\n")));
    }
    let takes = |c: char| -> Option<bool> {
        let i = OPTSTRING.find(c)?;
        Some(OPTSTRING[i + 1..].starts_with(':'))
    };
    let mut a = Args::default();
    let mut i = 0;
    while i < args.len() {
        let token = i;
        let arg = &args[i];
        i += 1;
        if arg == "--demo" {
            a.demo = true;
            continue;
        }
        if arg == "--" {
            if i < args.len() {
                return Err(Early::error(format!("Too many arguments ({}...)", args[i])));
            }
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            return Err(Early::error(format!("Too many arguments ({arg}...)")));
        }
        let letters: Vec<char> = arg.chars().skip(1).collect();
        let mut k = 0;
        while k < letters.len() {
            let c = letters[k];
            let first = token == 0 && k == 0;
            k += 1;
            let val = match takes(c) {
                None => {
                    return Err(Early {
                        code: 2,
                        stdout: String::new(),
                        stderr: format!("{name}: invalid option -- '{c}'\n{}", usage(name)),
                    });
                }
                Some(false) => None,
                Some(true) if k < letters.len() => {
                    let v: String = letters[k..].iter().collect();
                    k = letters.len();
                    Some(v)
                }
                Some(true) if i < args.len() => {
                    i += 1;
                    Some(args[i - 1].clone())
                }
                Some(true) => {
                    return Err(Early {
                        code: 2,
                        stdout: String::new(),
                        stderr: format!(
                            "{name}: option requires an argument -- '{c}'\n{}",
                            usage(name)
                        ),
                    });
                }
            };
            let v = val.unwrap_or_default();
            match c {
                '?' => {
                    return Err(Early {
                        code: 2,
                        stdout: String::new(),
                        stderr: usage(name),
                    });
                }
                'x' if !first => return Err(Early::error("-x must be the first argument")),
                'x' if args.len() > 2 => return Err(Early::error("Too many arguments for -x")),
                'x' => {
                    return Err(match v.as_str() {
                        "parameter" => {
                            Early::print(lacquer_server::runtime::params::reference_markdown())
                        }
                        "vsl" => Early::print(lacquer_vsl::tags::reference_rst()),
                        "cli" => Early::print(cli_reference()),
                        "builtin" => Early::print(lacquer_vcl::compile::BUILTIN_VCL.to_string()),
                        "optstring" => Early::print(format!("{OPTSTRING}\n")),
                        _ => Early::error(
                            "Invalid -x argument (parameter, vsl, cli, builtin or optstring)",
                        ),
                    });
                }
                'V' if !first => return Err(Early::error("-V must be the first argument")),
                'V' if args.len() > 1 => return Err(Early::error("Too many arguments for -V")),
                'V' => {
                    return Err(Early {
                        code: 0,
                        stdout: String::new(),
                        stderr: version(name),
                    });
                }
                'a' => a.listen.push(v),
                'A' if a.tls_conf.is_some() => return Err(Early::error("Only one -A allowed")),
                'A' => a.tls_conf = Some(v),
                'b' => a.backend = Some(v),
                'C' => a.compile_only = true,
                'd' => a.debug = true,
                'F' => a.foreground = true,
                'f' => a.vcl_files.push(v),
                'I' if a.cli_file.is_some() => return Err(Early::error("Only one -I allowed")),
                'I' => a.cli_file = Some(v),
                'i' => a.identity = Some(v),
                'j' => a.jail = Some(v),
                'l' => a.vsl_space = Some(v),
                'M' => a.reverse_cli = Some(v),
                'n' => a.workdir = Some(v),
                'P' => a.pidfile = Some(v),
                'p' => a.params.push(v),
                'r' => a.readonly.push((a.params.len(), v)),
                'S' => a.secret = Some(v),
                's' => a.storage.push(v),
                'T' => a.admin = Some(v),
                't' => a.ttl = Some(v),
                // Checked as varnishd checks them; Lacquer has one hash
                // and one waiter, whichever is named.
                'h' => a.hash = Some(v),
                'W' => {}
                _ => unreachable!("every letter of OPTSTRING is handled"),
            }
        }
    }
    // varnishd reads -h after -C has compiled (and exited).
    if let (false, Some(h)) = (a.compile_only, &a.hash) {
        check_hash(h)?;
    }
    if a.debug && a.foreground {
        return Err(Early::error("Only one of -d or -F can be specified"));
    }
    if a.backend.is_some() && !a.vcl_files.is_empty() {
        return Err(Early::error("Only one of -b or -f can be specified"));
    }
    if a.compile_only {
        if a.debug {
            return Err(Early::error("-d makes no sense with -C"));
        }
        if a.foreground {
            return Err(Early::error("-F makes no sense with -C"));
        }
        if a.backend.is_none() && a.vcl_files.is_empty() {
            return Err(Early::error(
                "-C needs either -b <backend> or -f <vcl_file>",
            ));
        }
    } else if !a.debug && !a.demo && a.backend.is_none() && a.vcl_files.is_empty() {
        return Err(Early::error(
            "Neither -b nor -f given: say which backend to use (-b host:port) or which VCL to load (-f file.vcl, or -f '' for none); or try --demo",
        ));
    }
    Ok(a)
}

fn main() -> ExitCode {
    let mut argv = std::env::args();
    let name = argv
        .next()
        .and_then(|p| {
            std::path::Path::new(&p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "lacquerd".to_string());
    let args: Vec<String> = argv.collect();
    let args = match parse_args(&name, &args) {
        Ok(a) => a,
        Err(e) => {
            print!("{}", e.stdout);
            eprint!("{}", e.stderr);
            return ExitCode::from(e.code);
        }
    };
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            // varnishd puts a parameter's refusal on the lines after "Error:".
            let msg = format!("{e:#}");
            let sep = if msg.starts_with('\n') { "" } else { " " };
            eprintln!("Error:{sep}{msg}");
            ExitCode::from(2)
        }
    }
}

/// A `-p`, `-t` or `-l` value refused: varnishd's text, which goes on the
/// line after `Error:` (all but the missing `=`).
fn param_error(e: lacquer_server::runtime::params::ParamError) -> anyhow::Error {
    match e {
        lacquer_server::runtime::params::ParamError::NoEquals
        | lacquer_server::runtime::params::ParamError::Protected(_)
        | lacquer_server::runtime::params::ParamError::NotAvailable(_) => anyhow::anyhow!("{e}"),
        e => anyhow::anyhow!("\n{e}"),
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
    use lacquer_server::mgt::daemon::{self, BootVcl, Config};
    if let Some(j) = &args.jail {
        if j.is_empty() {
            anyhow::bail!("-j argument is empty");
        }
        let jail = lacquer_server::mgt::jail::parse_jail(j).map_err(anyhow::Error::msg)?;
        if let Some(n) = jail.notice() {
            eprintln!("{n}");
        }
    }
    // varnishd opens the -I file as it reads its arguments (-C too).
    if let Some(f) = &args.cli_file
        && let Err(e) = std::fs::File::open(f)
    {
        let why = lacquer_vcl::include::io_reason(&e);
        let why = why.split(" (os error").next().unwrap_or_default();
        anyhow::bail!("\tCan't open {f}: {why}");
    }
    // varnishd checks each -s as it reads its arguments (mgt_stevedore.c),
    // before -C compiles; a file store opens (or creates) its file then.
    // (varnishd ends its file advice error without a newline.)
    let usage = |e: lacquer_storage::StorageSpecError| {
        let e = e.to_string();
        let sep = if e.starts_with("(-s file) invalid advice") {
            ""
        } else {
            "\n"
        };
        anyhow::anyhow!("{e}{sep}(-? gives usage)")
    };
    let specs = lacquer_storage::parse_storage_args(&args.storage).map_err(usage)?;
    if args.compile_only {
        for s in &specs {
            if let lacquer_storage::StorageKind::File { .. } = s.kind {
                s.build().map_err(usage)?;
            }
        }
    }
    // -p and -r take effect in the order given: a -p after the -r that
    // protects its parameter is refused, as varnishd refuses it. (-r
    // lists are split at commas and blanks.)
    let mut params = lacquer_server::runtime::params::ParamSet::default();
    let protect = |params: &mut lacquer_server::runtime::params::ParamSet, list: &str| {
        for name in list
            .split(|c: char| c == ',' || c.is_ascii_whitespace())
            .filter(|n| !n.is_empty())
        {
            params
                .protect(name)
                .map_err(|_| anyhow::anyhow!("\nUnknown parameter {name}"))?;
        }
        anyhow::Ok(())
    };
    for (i, p) in args.params.iter().enumerate() {
        for (_, list) in args.readonly.iter().filter(|(at, _)| *at == i) {
            protect(&mut params, list)?;
        }
        params.apply_arg(p).map_err(param_error)?;
    }
    for (_, list) in args
        .readonly
        .iter()
        .filter(|(at, _)| *at >= args.params.len())
    {
        protect(&mut params, list)?;
    }
    if let Some(t) = &args.ttl {
        params.set("default_ttl", t).map_err(param_error)?;
    }
    if let Some(l) = &args.vsl_space {
        params.set("vsl_space", l).map_err(param_error)?;
    }
    // `-f ''` starts without a VCL, as varnishd: the cache waits for one
    // on the CLI.
    let files: Vec<&String> = args.vcl_files.iter().filter(|f| !f.is_empty()).collect();
    // As varnishd, every -f file is read before anything starts; only a
    // regular file can be (a directory or a device reads as "Success").
    for f in &files {
        use lacquer_vcl::include::SourceLoader as _;
        if let Err(e) = lacquer_vcl::include::FsLoader.read(f) {
            let why = lacquer_vcl::include::io_reason(&e);
            // The system's words, without Rust's "(os error N)".
            let why = why.split(" (os error").next().unwrap_or_default();
            anyhow::bail!("Cannot read -f file '{f}' ({why})");
        }
    }
    let vcl = match (files.is_empty(), &args.backend) {
        (false, _) => BootVcl::Files(files.iter().map(|f| f.into()).collect()),
        (true, Some(b)) if args.vcl_files.is_empty() => BootVcl::Backend(b.clone()),
        (true, _) => BootVcl::None,
    };
    if let Some(s) = &args.secret
        && s != "none"
        && let Err(e) = std::fs::File::open(s)
    {
        // The system's words, without Rust's "(os error N)".
        let why = e.to_string();
        let why = why.split(" (os error").next().unwrap_or_default();
        anyhow::bail!("Cannot open -S file ({s}): {why}");
    }
    if args.compile_only {
        // varnishd checks each -a (and opens Unix sockets) while reading
        // its arguments, so -C refuses a bad one too.
        for (i, a) in args.listen.iter().enumerate() {
            let spec = lacquer_server::mgt::listen::parse_listen(a, i)?;
            for e in &spec.endpoints {
                if let lacquer_server::mgt::listen::Endpoint::Unix { path, .. } = e
                    && let Some(dir) = path.parent()
                    && !dir.as_os_str().is_empty()
                    && !dir.is_dir()
                {
                    anyhow::bail!(
                        "Could not get socket {}: No such file or directory",
                        path.display()
                    );
                }
            }
        }
        return match daemon::check_vcl(&vcl, &params) {
            Ok(summary) => {
                // Where varnishd prints the C it compiled to.
                eprint!("{summary}");
                if params.bit("debug", "vcl_keep") {
                    let workdir = args
                        .workdir
                        .as_deref()
                        .map(daemon::workdir_from)
                        .unwrap_or_else(daemon::default_workdir);
                    keep_compiled(&workdir, &summary)?;
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(msg) => {
                eprintln!("{msg}");
                Ok(ExitCode::from(2))
            }
        };
    }
    let tls_conf = match &args.tls_conf {
        Some(f) => {
            let c = lacquer_tls::conf::load(std::path::Path::new(f))?;
            for w in &c.warnings {
                eprintln!("Warning: {w}");
            }
            Some(c)
        }
        None => None,
    };
    let mut listen_args = args.listen.clone();
    let tls_listen = tls_conf
        .as_ref()
        .map(lacquer_server::mgt::tls::listen_args)
        .unwrap_or_default();
    if listen_args.is_empty() && tls_listen.is_empty() {
        listen_args.push(if args.demo {
            "127.0.0.1:6081".to_string()
        } else {
            ":80".to_string()
        });
    }
    let mut listen = Vec::new();
    for (i, a) in listen_args.iter().enumerate() {
        listen.push(lacquer_server::mgt::listen::parse_listen(a, i)?);
    }
    for a in &tls_listen {
        listen.push(lacquer_server::mgt::listen::parse_listen(a, 0)?);
    }
    if listen_args.is_empty() {
        listen_args.push(tls_listen[0].clone());
    }
    lacquer_server::mgt::listen::check_distinct(&listen)?;
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
            let origin = lacquer_server::mgt::demo::start_origin()
                .await
                .map_err(|e| format!("Cannot start the demo origin: {e}"))?;
            eprint!(
                "{}",
                lacquer_server::mgt::demo::instructions(
                    &listen_text,
                    origin,
                    &tool_command(),
                    &workdir_arg,
                )
            );
            BootVcl::Inline(lacquer_server::mgt::demo::demo_vcl(origin.port()))
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
            cli_file: args.cli_file.as_ref().map(Into::into),
            tls: tls_conf,
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

/// `-p debug=+vcl_keep` with `-C`: what the compiler produced is kept in
/// the working directory, in the build directory varnishd would use
/// (`vcl_boot.<seconds>.<microseconds>`), instead of only being printed.
fn keep_compiled(workdir: &std::path::Path, summary: &str) -> anyhow::Result<()> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let dir = workdir.join(format!(
        "vcl_boot.{}.{:06}",
        now.as_secs(),
        now.subsec_micros()
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| anyhow::anyhow!("Cannot create {} for vcl_keep: {e}", dir.display()))?;
    let file = dir.join("compiled.txt");
    std::fs::write(&file, summary)
        .map_err(|e| anyhow::anyhow!("Cannot write {}: {e}", file.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Args, Early> {
        let args: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        parse_args("varnishd", &args)
    }

    fn error(v: &[&str]) -> String {
        let e = parse(v).unwrap_err();
        assert_ne!(e.code, 0, "{v:?}");
        e.stderr
    }

    #[test]
    fn first_argument_only_options() {
        assert_eq!(
            error(&["-d", "-x", "foo"]),
            "Error: -x must be the first argument\n(-? gives usage)\n"
        );
        assert_eq!(
            error(&["-d", "-V", "foo"]),
            "Error: -V must be the first argument\n(-? gives usage)\n"
        );
        assert_eq!(
            error(&["-x", "foo", "bar"]),
            "Error: Too many arguments for -x\n(-? gives usage)\n"
        );
        assert!(error(&["-x", "foo"]).starts_with("Error: Invalid -x argument"));
        assert_eq!(
            error(&["-V", "-V"]),
            "Error: Too many arguments for -V\n(-? gives usage)\n"
        );
        let v = parse(&["-V"]).unwrap_err();
        assert_eq!(v.code, 0);
        assert!(v.stderr.contains("Copyright (c) 2006 Verdens Gang AS"));
        let o = parse(&["-x", "optstring"]).unwrap_err();
        assert_eq!(
            (o.code, o.stdout.as_str()),
            (0, "?a:A:b:Cdf:Fh:i:I:j:l:M:n:P:p:r:S:s:T:t:VW:x:\n")
        );
        assert_eq!(parse(&["--optstring"]).unwrap_err(), o);
        let cli = parse(&["-x", "cli"]).unwrap_err().stdout;
        assert!(cli.contains(".. _ref_cli_vcl_load:\n\nvcl.load "), "{cli}");
    }

    #[test]
    fn getopt_errors_and_usage() {
        let e = parse(&["-B"]).unwrap_err();
        // varnishd exits 2 on every getopt error and on -?.
        assert_eq!(e.code, 2);
        assert!(
            e.stderr
                .starts_with("varnishd: invalid option -- 'B'\nUsage: varnishd [options]")
        );
        // -A (TLS, as Varnish Enterprise and Varnish 9) takes a file, once.
        let e = parse(&["-A"]).unwrap_err();
        assert!(
            e.stderr
                .starts_with("varnishd: option requires an argument -- 'A'"),
            "{}",
            e.stderr
        );
        assert_eq!(
            error(&["-A", "a.conf", "-A", "b.conf", "-b", "none"]),
            "Error: Only one -A allowed\n(-? gives usage)\n"
        );
        assert!(error(&["-?"]).starts_with("Usage: varnishd [options]\n"));
        assert!(error(&["-n"]).contains("option requires an argument -- 'n'"));
        assert_eq!(
            error(&["foo"]),
            "Error: Too many arguments (foo...)\n(-? gives usage)\n"
        );
        assert_eq!(
            error(&["-b", "x", "--", "y"]),
            "Error: Too many arguments (y...)\n(-? gives usage)\n"
        );
    }

    #[test]
    fn hash_methods_as_varnishd_checks_them() {
        for ok in [
            "critbit",
            "simple_list",
            "simple",
            "classic",
            "classic,16383",
        ] {
            assert!(parse(&["-h", ok, "-b", "none"]).is_ok(), "{ok}");
        }
        assert_eq!(
            error(&["-h", "foo", "-b", "none"]),
            "Error: Unknown hash method \"foo\"\n(-? gives usage)\n"
        );
        assert_eq!(
            error(&["-h", "critbit,3", "-b", "none"]),
            "Error: Hash method \"critbit\" takes no arguments\n(-? gives usage)\n"
        );
        assert_eq!(
            error(&["-h", "simple_list,1", "-b", "none"]),
            "Error: Hash method \"simple\" takes no arguments\n(-? gives usage)\n"
        );
        assert_eq!(
            error(&["-h", "classic,5,6", "-b", "none"]),
            "Error: (-hclassic) too many arguments\n(-? gives usage)\n"
        );
    }

    #[test]
    fn options_that_do_not_go_together() {
        let cases: &[(&[&str], &str)] = &[
            (&["-d", "-F"], "Only one of -d or -F can be specified"),
            (
                &["-b", "a", "-f", "b"],
                "Only one of -b or -f can be specified",
            ),
            (&["-C", "-b", "None", "-d"], "-d makes no sense with -C"),
            (&["-C", "-b", "None", "-F"], "-F makes no sense with -C"),
            (&["-C"], "-C needs either -b <backend> or -f <vcl_file>"),
            (&["-n", "x"], "Neither -b nor -f given"),
            (&["-f", "", "-I", "a", "-I", "b"], "Only one -I allowed"),
        ];
        for (args, msg) in cases {
            assert!(error(args).contains(msg), "{args:?}: {}", error(args));
        }
    }

    #[test]
    fn options_parse() {
        let a = parse(&[
            "-a:0",
            "-a",
            "127.0.0.1:8080",
            "-f",
            "",
            "-l2m",
            "-p",
            "x=1",
            "-F",
            "--demo",
            "-hcritbit",
        ])
        .unwrap();
        assert_eq!(a.listen, [":0", "127.0.0.1:8080"]);
        assert_eq!(a.vcl_files, [""]);
        assert_eq!(a.vsl_space.as_deref(), Some("2m"));
        assert_eq!(a.params, ["x=1"]);
        assert!(a.foreground && a.demo && !a.debug);
        let a = parse(&["-dn", "v1"]).unwrap();
        assert!(a.debug);
        assert_eq!(a.workdir.as_deref(), Some("v1"));
    }

    #[test]
    fn shell_words() {
        assert_eq!(shell_quote("/tmp/w-1"), "/tmp/w-1");
        assert_eq!(shell_quote("my dir"), "'my dir'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
