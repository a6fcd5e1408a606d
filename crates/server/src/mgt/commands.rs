//! Management commands: what each CLI command does to the running daemon,
//! and the text it answers with (varnishd's formats, so that varnishadm
//! scripts and varnishtest's `-cliok`/`-clierr`/`-cliexpect` keep working).
//!
//! Commands run on the CLI connection's task; the only slow one,
//! `vcl.load`, compiles in milliseconds.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::mgt::cli::{Reply, status};
use crate::runtime::params::{self, PARAMS, Param};
use crate::runtime::state::Shared;
use crate::runtime::vcls::{self, LoadOptions, Temp};

/// The banner shown at the start of a CLI session; while the cache is
/// stopped it says how to start it, as varnishd's does.
pub fn banner(running: bool) -> String {
    format!(
        "-----------------------------\n\
         Lacquer Cache CLI 1.0\n\
         -----------------------------\n\
         {},{},{}\n\
         lacquer-{} (Varnish 7.1 compatible)\n\
         \n\
         Type 'help' for command list.\n\
         Type 'quit' to close CLI session.\n{}",
        std::env::consts::OS,
        std::env::consts::ARCH,
        "-smalloc",
        env!("CARGO_PKG_VERSION"),
        if running {
            ""
        } else {
            "Type 'start' to launch worker process.\n"
        }
    )
}

/// The chunk size `debug.xid` was last given, which it reports back.
static XID_CHUNK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// A number as C's `strtoul(s, NULL, 0)` reads it, cut to 32 bits:
/// leading blanks and a sign, `0x` for hexadecimal and `0` for octal,
/// digits up to the first that does not fit (none: 0); a minus sign
/// negates modulo 2^32.
fn strtoul(s: &str) -> u32 {
    let s = s.trim_start();
    let (neg, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (16, h)
    } else if s.len() > 1 && s.starts_with('0') {
        (8, &s[1..])
    } else {
        (10, s)
    };
    let mut n: u64 = 0;
    for c in digits.chars() {
        let Some(d) = c.to_digit(radix) else {
            break;
        };
        // strtoul saturates at ULONG_MAX; kept to 64 bits here.
        n = n
            .saturating_mul(u64::from(radix))
            .saturating_add(u64::from(d));
    }
    let n = if neg { n.wrapping_neg() } else { n };
    n as u32
}

/// Options from the command line that VCL loads need.
pub fn load_options(sh: &Shared) -> LoadOptions {
    let p = sh.params();
    let labels = sh
        .vcls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .labels
        .keys()
        .cloned()
        .collect();
    LoadOptions {
        err_unref: p.flag("vcc_err_unref"),
        storages: sh.stores.iter().map(|s| s.name().to_string()).collect(),
        labels,
        vcl_path: match p.get("vcl_path") {
            params::Value::Text(t) => t.split(':').map(str::to_string).collect(),
            _ => Vec::new(),
        },
        unsafe_path: p.flag("vcc_unsafe_path"),
        prefer_ipv6: p.flag("prefer_ipv6"),
        test_vmods: p.bit("debug", "vtc_mode"),
    }
}

fn json_flag(args: &[String]) -> (bool, Vec<&str>) {
    let json = args.iter().any(|a| a == "-j");
    (
        json,
        args.iter()
            .filter(|a| *a != "-j")
            .map(String::as_str)
            .collect(),
    )
}

fn json_head(words: &[String]) -> String {
    let args: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
    format!(
        "[ 2, [{}], {:.3},\n",
        args.join(", "),
        lacquer_http::date::now()
    )
}

/// A JSON reply whose body is a list of items (no dangling comma when the
/// list is empty).
fn json_list(words: &[String], items: &[String]) -> String {
    let mut s = json_head(words);
    if items.is_empty() {
        s.truncate(s.trim_end().trim_end_matches(',').len());
        s.push('\n');
    } else {
        s.push_str(&items.join(",\n"));
    }
    s.push_str("\n]");
    s
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// `ban.list -j`: the ban list, newest first, as varnishd's JSON array.
fn ban_list_json(sh: &Arc<Shared>, words: &[String]) -> String {
    let items: Vec<String> = sh
        .cache
        .ban_info()
        .iter()
        .map(|b| {
            format!(
                "  {{\n    \"time\": {:.6},\n    \"refs\": {},\n    \"completed\": {},\n    \"spec\": {}\n  }}",
                b.time,
                b.refs,
                b.completed,
                json_str(&b.spec)
            )
        })
        .collect();
    json_list(words, &items)
}

/// Runs one command (already checked against the command table). The
/// commands varnishd's child executes are logged as `CLI` records, `Rd`
/// with the command and `Wr` with the reply, as the child logs them.
pub fn dispatch(sh: &Arc<Shared>, words: &[String]) -> Reply {
    // What varnishd's cache process serves it logs; it notices discarded
    // VCLs that went idle before each command.
    let child =
        sh.is_running() && crate::mgt::cli::command(&words[0]).is_some_and(|c| c.child_logs());
    if child {
        cli_log(sh, &format!("Rd {}", request_line(words)));
    }
    poll_discarded(sh);
    let reply = serve(sh, words);
    if child && !sh.is_running() {
        // The cache process died serving it (a panic): as with varnishd's
        // child, no answer comes back.
        return Reply::err(status::COMMS, "CLI communication error (hdr)");
    }
    if child {
        cli_log_reply(sh, reply.status, &reply.body);
    }
    reply
}

/// The manager's periodic ping of its cache process (`ping_interval`),
/// logged as the child logs the pings it answers. Nothing while stopped:
/// varnishd has no child to ping then.
pub fn child_ping(sh: &Arc<Shared>) {
    if !sh.is_running() {
        return;
    }
    cli_log(sh, "Rd ping");
    let reply = serve(sh, &["ping".to_string()]);
    cli_log_reply(sh, reply.status, &reply.body);
}

/// A request as the cache process receives it: words re-quoted where
/// they need it.
fn request_line(words: &[String]) -> String {
    let quote = |w: &String| {
        if !w.is_empty() && !w.contains(|c: char| c.is_whitespace() || c == '"' || c == '\\') {
            return w.clone();
        }
        let mut q = String::from("\"");
        for c in w.chars() {
            match c {
                '"' => q.push_str("\\\""),
                '\\' => q.push_str("\\\\"),
                '\n' => q.push_str("\\n"),
                c => q.push(c),
            }
        }
        q.push('"');
        q
    };
    words.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// Writes one `CLI` log record outside any transaction.
fn cli_log(sh: &Shared, text: &str) {
    sh.vsl.log_immediate(
        lacquer_vsl::Tag::CLI,
        lacquer_vsl::Vxid::plain(0),
        format_args!("{text}"),
    );
}

/// Logs the cache process's answer: `Wr <status> <length> <text>`.
fn cli_log_reply(sh: &Shared, status: u16, body: &str) {
    cli_log(sh, &format!("Wr {status:03} {} {body}", body.len()));
}

/// Has the cache side load a compiled VCL, as varnishd's manager asks its
/// child to: vmod load events and `vcl_init` run, and the VCL warms up
/// unless cold, all logged inside the `vcl.load` request the child gets.
pub fn child_load(sh: &Arc<Shared>, v: &Arc<vcls::LoadedVcl>, temp: Temp) -> Result<(), String> {
    let warm = temp != Temp::Cold;
    cli_log(
        sh,
        &format!(
            "Rd vcl.load \"{}\" {} {}{}",
            v.name,
            v.source_name(),
            u8::from(warm),
            temp.name()
        ),
    );
    let r = crate::mgt::daemon::init_vcl(sh, v).and_then(|()| {
        v.set_initialized();
        if warm {
            v.warm_up(sh)
                .inspect_err(|_| crate::mgt::daemon::unload_failed(sh, v))
        } else {
            Ok(())
        }
    });
    match &r {
        Ok(()) => cli_log_reply(
            sh,
            status::OK,
            &format!("Loaded \"{}\" as \"{}\"", v.source_name(), v.name),
        ),
        Err(e) => cli_log_reply(sh, status::CANT, e),
    }
    r
}

/// Starts the cache side: the VCLs loaded while stopped are loaded into
/// it, those that should be warm warm up, the active one is put to use.
fn start(sh: &Arc<Shared>) -> Reply {
    let (pending, warm, active) = {
        let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
        let pending: Vec<(Arc<vcls::LoadedVcl>, Temp)> = reg
            .order
            .iter()
            .filter_map(|n| reg.vcls.get(n))
            .filter(|e| !e.vcl.is_initialized())
            .map(|e| (e.vcl.clone(), e.temp))
            .collect();
        let warm: Vec<Arc<vcls::LoadedVcl>> = reg
            .vcls
            .iter()
            .filter(|(n, e)| e.temp == Temp::Warm || reg.active.as_ref() == Some(*n))
            .map(|(_, e)| e.vcl.clone())
            .collect();
        (pending, warm, reg.active.clone())
    };
    for (v, t) in &pending {
        if let Err(e) = child_load(sh, v, *t) {
            return Reply::err(status::CANT, e);
        }
    }
    // VCLs set warm while stopped warm up now, and may refuse.
    for v in &warm {
        if let Err(e) = v.warm_up(sh) {
            return Reply::err(status::CANT, e);
        }
    }
    // The backends of the VCLs now warm have their VBE counters as soon as
    // `start` is answered, as with a load while running.
    if let Some(s) = sh.stats.get() {
        s.publish(sh);
    }
    if let Some(a) = active {
        cli_log(sh, &format!("Rd vcl.use \"{a}\""));
        cli_log_reply(sh, status::OK, &format!("VCL '{a}' now active"));
    }
    cli_log(sh, "Rd start");
    cli_log_reply(sh, status::OK, "");
    if let Err(e) = sh.mgt.child_started(&sh.params().dump()) {
        return Reply::err(status::CANT, e);
    }
    sh.mgt.child_start.fetch_add(1, Ordering::Relaxed);
    sh.set_running(true);
    Reply::ok("")
}

fn serve(sh: &Arc<Shared>, words: &[String]) -> Reply {
    let cmd = words[0].as_str();
    let args = &words[1..];
    let (json, plain) = json_flag(args);
    match cmd {
        c if c.starts_with("tls.cert.") => crate::mgt::tls::cli(sh, c, &plain),
        "ping" => {
            let now = lacquer_http::date::now() as u64;
            if json {
                Reply::ok(format!("{}  \"PONG\", {now}, 1.0]", json_head(words)))
            } else {
                Reply::ok(format!("PONG {now} 1.0"))
            }
        }
        "banner" => Reply::ok(banner(sh.is_running())),
        "help" => help(words, &plain, json, sh.is_running()),
        "status" => {
            let state = if sh.is_running() {
                "running"
            } else {
                "stopped"
            };
            if json {
                let head = json_head(words);
                Reply::ok(format!(
                    "{}, \"{state}\"\n]",
                    head.trim_end().trim_end_matches(',')
                ))
            } else {
                Reply::ok(format!("Child in state {state}"))
            }
        }
        "start" => {
            if sh.is_running() {
                return Reply::err(status::CANT, "Child in state running");
            }
            if sh.active_vcl().is_none() {
                return Reply::err(status::CANT, "No VCL available");
            }
            start(sh)
        }
        "stop" => {
            if !sh.is_running() {
                return Reply::err(status::CANT, "Child in state stopped");
            }
            sh.set_running(false);
            // varnishd's child takes its memory storage with it.
            sh.cache.clear();
            match sh.mgt.child_stopped() {
                Ok(()) => Reply::ok(""),
                Err(e) => Reply::err(status::CANT, e),
            }
        }
        "pid" => {
            let pid = std::process::id();
            if json && sh.is_running() {
                Reply::ok(format!(
                    "{}  {{\"master\": {pid}, \"worker\": {pid}}}\n]",
                    json_head(words)
                ))
            } else if json {
                Reply::ok(format!("{}  {{\"master\": {pid}}}\n]", json_head(words)))
            } else if sh.is_running() {
                Reply::ok(format!("Master: {pid:>10}\nWorker: {pid:>10}\n"))
            } else {
                // No worker while the child is stopped.
                Reply::ok(format!("Master: {pid:>10}\n"))
            }
        }
        "vcl.load" => vcl_load(sh, plain[0], Source::File(plain[1]), plain.get(2).copied()),
        "vcl.inline" => vcl_load(
            sh,
            plain[0],
            Source::Inline(plain[1]),
            plain.get(2).copied(),
        ),
        "vcl.use" => vcl_use(sh, plain[0]),
        "vcl.discard" => vcl_discard(sh, &plain),
        "vcl.list" => vcl_list(sh, json, words),
        "vcl.show" => vcl_show(sh, &plain),
        "vcl.label" => vcl_label(sh, plain[0], plain[1]),
        "vcl.state" => vcl_state(sh, plain[0], plain[1]),
        "vcl.deps" => vcl_deps(sh, json, words),
        "vcl.symtab" => vcl_symtab(sh),
        "param.show" => param_show(sh, &plain, json, words),
        "param.set" => match sh.set_param(plain[0], plain[1]) {
            Err(e @ params::ParamError::NotAvailable(_)) => Reply::err(status::CANT, e.to_string()),
            Ok(()) if !json => Reply::ok(takes_effect(sh, plain[0])),
            // With -j the reply is the parameter as param.show -j shows it.
            // Its JSON head names the command without the value, as
            // varnishd's.
            Ok(()) if json => param_show(sh, &plain[..1], true, &words[..words.len() - 1]),
            Ok(()) => Reply::ok(""),
            Err(e @ params::ParamError::Protected(_)) => Reply::err(status::AUTH, e.to_string()),
            Err(e) => Reply::err(status::PARAM, e.to_string()),
        },
        "param.reset" => match params::lookup(params::canonical(plain[0])) {
            Some(p) => match sh.set_param(p.name, p.default) {
                Ok(()) => Reply::ok(takes_effect(sh, p.name)),
                Err(e @ params::ParamError::NotAvailable(_)) => {
                    Reply::err(status::CANT, e.to_string())
                }
                Err(e) => Reply::err(status::PARAM, e.to_string()),
            },
            None => Reply::err(
                status::PARAM,
                format!("Unknown parameter \"{}\".", plain[0]),
            ),
        },
        "ban" => {
            let spec: Vec<&str> = args.iter().map(String::as_str).collect();
            // varnishd's cheap checks first (ccf_ban): whole conditions
            // of three words, joined by `&&`.
            if spec.len() % 4 != 3 {
                return Reply::err(status::PARAM, "Wrong number of arguments");
            }
            if let Some(w) = spec.iter().skip(3).step_by(4).find(|w| **w != "&&") {
                return Reply::err(status::PARAM, format!("Found \"{w}\" expected &&"));
            }
            match lacquer_cache::BanSpec::parse_words(&spec) {
                Ok(b) => {
                    sh.cache.ban(b, lacquer_http::date::now());
                    Reply::ok("")
                }
                Err(e) => Reply::err(status::PARAM, e.to_string()),
            }
        }
        "ban.list" if json => Reply::ok(ban_list_json(sh, words)),
        "ban.list" => Reply::ok(sh.cache.ban_list()),
        "backend.list" => {
            // As varnishd's cli_backend_list: leading `-` words are
            // bundles of the flags `j` and `p`; one pattern may follow.
            let mut json = false;
            let mut probes = false;
            let mut rest = args.iter().map(String::as_str).peekable();
            while let Some(flags) = rest.next_if(|a| a.starts_with('-')) {
                for c in flags[1..].chars() {
                    match c {
                        'j' => json = true,
                        'p' => probes = true,
                        _ => return Reply::err(status::PARAM, format!("Invalid flag {c}")),
                    }
                }
            }
            let pattern = rest.next();
            if rest.next().is_some() {
                return Reply::err(status::PARAM, "Too many arguments");
            }
            backend_list(sh, pattern, probes, json, words)
        }
        "backend.set_health" => backend_set_health(sh, plain[0], plain[1]),
        "storage.list" if json => {
            let items: Vec<String> = sh
                .stores
                .iter()
                .map(|st| {
                    format!(
                        "  {{\n    \"name\": {},\n    \"storage\": {}\n}}",
                        json_str(st.name()),
                        json_str(st.kind())
                    )
                })
                .collect();
            Reply::ok(json_list(words, &items))
        }
        "storage.list" => {
            let mut s = String::from("Storage devices:\n");
            for st in &sh.stores {
                let _ = writeln!(s, "\tstorage.{} = {}", st.name(), st.kind());
            }
            Reply::ok(s)
        }
        "panic.show" => match sh.mgt.show() {
            Some(text) if json => {
                Reply::ok(format!("{}  {}\n]", json_head(words), json_str(&text)))
            }
            Some(text) => Reply::ok(text),
            None => Reply::err(
                status::CANT,
                "Child has not panicked or panic has been cleared",
            ),
        },
        "panic.clear" => {
            if let Some(a) = plain.first().filter(|a| **a != "-z") {
                return Reply::err(status::PARAM, format!("Unknown parameter \"{a}\"."));
            }
            if sh.mgt.clear(plain.contains(&"-z")) {
                Reply::ok("")
            } else {
                Reply::err(status::CANT, "No panic to clear")
            }
        }
        "debug.listen_address" => {
            let mut s = String::new();
            for l in sh
                .listeners
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
            {
                let _ = writeln!(s, "{} {}", l.name, l.printable);
            }
            Reply::ok(s)
        }
        "debug.fragfetch" => {
            if !sh.params().bit("debug", "vtc_mode") {
                return Reply::err(
                    status::CANT,
                    "debug.fragfetch is a test-only command: start with -p debug=+vtc_mode",
                );
            }
            match plain[0].parse::<usize>() {
                Ok(n) => {
                    sh.fetch_frag.store(n, std::sync::atomic::Ordering::Relaxed);
                    Reply::ok("")
                }
                Err(_) => Reply::err(
                    status::PARAM,
                    format!("Invalid size {} (a number of bytes)", plain[0]),
                ),
            }
        }
        "wasm.update" => match lacquer_vmods::wasm_cli_update(plain[0], plain[1]) {
            Ok(m) => Reply::ok(m),
            Err(e) => Reply::err(status::CANT, e),
        },
        // varnishd reads the seed with strtoul: any text is a number
        // (`x` is 0).
        "debug.srandom" => {
            lacquer_vmods::rnd::seed(plain.first().map_or(1, |v| strtoul(v)));
            Reply::ok("")
        }
        "debug.panic.master" => {
            // What the operator asked for: the manager dies at once, as
            // varnishd's master does on this command.
            eprintln!("Panic: debug.panic.master: you asked for it");
            std::process::abort()
        }
        "debug.panic.worker" => {
            // varnishd's child dies before it answers: the manager reports
            // the lost reply.
            crate::runtime::panic::asked_for(sh);
            Reply::err(status::COMMS, "CLI communication error (hdr)")
        }
        "debug.vmod" => {
            let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
            let mut s = String::new();
            // Lacquer's vmods are part of the binary: no file to name.
            for (name, refs) in reg.vmods() {
                let _ = writeln!(s, "{refs:5} {name} (built in)");
            }
            Reply::ok(s)
        }
        "debug.xid" => {
            // As varnishd: the numbers are read with strtoul (any text is
            // a number); the next transaction gets the id after the one
            // given. Lacquer hands ids out one by one: the chunk size is
            // only reported back.
            if let Some(v) = plain.first() {
                sh.vxid.set(strtoul(v).wrapping_add(1));
                let chunk = plain.get(1).map_or(1, |c| strtoul(c));
                XID_CHUNK.store(chunk, Ordering::Relaxed);
            }
            Reply::ok(format!(
                "XID is {} chunk {}",
                sh.vxid.peek().wrapping_sub(1),
                XID_CHUNK.load(Ordering::Relaxed)
            ))
        }
        _ => Reply::err(status::UNKNOWN, crate::mgt::cli::UNKNOWN_REQUEST),
    }
}

fn help(words: &[String], plain: &[&str], json: bool, running: bool) -> Reply {
    if json {
        let mut s = json_head(words);
        let cmds: Vec<String> = crate::mgt::cli::COMMANDS
            .iter()
            .filter(|c| c.available(running))
            .map(|c| {
                format!(
                    "  {{\n    \"request\": {},\n    \"syntax\": {},\n    \"help\": {},\n    \"minarg\": {},\n    \"maxarg\": {},\n    \"flags\": \"{}\",\n    \"json\": {}\n  }}",
                    json_str(c.name),
                    json_str(c.syntax),
                    json_str(c.help),
                    c.min_args,
                    c.max_args.map_or(-1, |m| m as i64),
                    // varnishd marks its debug commands `d` and the two
                    // it serves itself at every authentication level `i`.
                    match c.name {
                        _ if c.debug => "d",
                        "help" | "ping" => "i",
                        _ => "",
                    },
                    c.json
                )
            })
            .collect();
        s.push_str(&cmds.join(",\n"));
        s.push_str("\n]");
        return Reply::ok(s);
    }
    match plain.first() {
        None => Reply::ok(crate::mgt::cli::help_text(true, false, running)),
        Some(&"-a") => Reply::ok(crate::mgt::cli::help_text(true, true, running)),
        Some(&"-d") => Reply::ok(crate::mgt::cli::help_text(false, true, running)),
        Some(flag) if flag.starts_with('-') => Reply::err(status::UNKNOWN, "Unknown flag"),
        Some(name) => match crate::mgt::cli::command(name).filter(|c| c.available(running)) {
            Some(c) => Reply::ok(format!("{}\n{}\n", c.syntax, c.help)),
            // varnishd's text exactly: the name is not repeated.
            None => Reply::err(status::UNKNOWN, crate::mgt::cli::UNKNOWN_REQUEST),
        },
    }
}

/// Why a compiled VCL cannot be loaded with the current listeners: VCL
/// 4.0 while a Unix socket listens (varnishd raises its minimum VCL
/// version to 4.1 for them; the cache refuses older VCL as it loads it).
pub fn version_refusal(sh: &Shared, v: &vcls::LoadedVcl) -> Option<String> {
    let unix = sh
        .listeners
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|l| l.unix);
    (unix && v.ir.version == lacquer_vcl::vars::VclVersion::V40)
        .then(|| "Compiled VCL version (4.0) not supported.".to_string())
}

enum Source<'a> {
    File(&'a str),
    Inline(&'a str),
}

fn vcl_load(sh: &Arc<Shared>, name: &str, src: Source<'_>, temp: Option<&str>) -> Reply {
    if let Some(r) = bad_vcl_name(name) {
        return r;
    }
    let temp = match temp.map(Temp::parse) {
        None => Temp::Auto,
        Some(Some(t)) => t,
        Some(None) => {
            return Reply::err(status::PARAM, "State must be one of auto, cold or warm.");
        }
    };
    if sh
        .vcls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .vcls
        .contains_key(name)
    {
        return Reply::err(status::PARAM, format!("Already a VCL named {name}"));
    }
    let (max, handling) = {
        let p = sh.params();
        (p.uint("max_vcl"), p.uint("max_vcl_handling"))
    };
    let count = {
        let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
        (reg.vcls.len() + reg.discarded.len()) as u64
    };
    if count >= max && handling == 2 {
        return Reply::err(
            status::CANT,
            format!(
                "Too many ({count}) VCLs already loaded\n(See max_vcl and max_vcl_handling parameters)"
            ),
        );
    }
    let opts = load_options(sh);
    let loaded = match src {
        Source::File(path) => vcls::compile_path(name, std::path::Path::new(path), &opts),
        Source::Inline(text) => vcls::compile(name, "<vcl.inline>", text, &opts),
    };
    match loaded {
        Ok(v) => {
            if let Some(why) = version_refusal(sh, &v) {
                return Reply::err(
                    status::PARAM,
                    format!(
                        "Message from dlopen:\n{why}\nRunning dlopen failed, exited with 1\nVCL compilation failed"
                    ),
                );
            }
            let v = Arc::new(v);
            // A stopped cache loads it at `start`.
            if sh.is_running()
                && let Err(e) = child_load(sh, &v, temp)
            {
                return Reply::err(status::CANT, e);
            }
            sh.vcls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(v.clone(), temp);
            // The new backends' VBE counters exist once the load is answered.
            if let Some(s) = sh.stats.get() {
                s.publish(sh);
            }
            let mut out = String::new();
            if !v.warnings.is_empty() {
                let _ = write!(out, "Message from VCC-compiler:\n{}", v.warnings);
            }
            // As varnishd: the manager says so itself only while the child
            // is stopped; a running child's load answers with nothing.
            if !sh.is_running() {
                out.push_str("VCL compiled.\n");
            }
            if count + 1 > max && handling == 1 {
                let _ = write!(
                    out,
                    "{} VCLs loaded\nRemember to vcl.discard the old/unused VCLs.\n(See max_vcl and max_vcl_handling parameters)",
                    count + 1
                );
            }
            Reply::ok(out)
        }
        Err(e) => {
            // The diagnostics keep their blank lines (vcc ends a source
            // excerpt with one); only a missing final newline is added.
            let mut msg = e.message;
            if !msg.ends_with('\n') {
                msg.push('\n');
            }
            Reply::err(
                status::PARAM,
                format!(
                    "Message from VCC-compiler:\n{msg}Running VCC-compiler failed, exited with 2\nVCL compilation failed"
                ),
            )
        }
    }
}

fn vcl_use(sh: &Arc<Shared>, name: &str) -> Reply {
    let mut reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    let target = reg
        .labels
        .get(name)
        .cloned()
        .unwrap_or_else(|| name.to_string());
    let Some(entry) = reg.vcls.get(&target) else {
        return Reply::err(status::PARAM, format!("No VCL named {name} known"));
    };
    // As varnishd: naming what is already in use (the VCL, or the label
    // that chose it) changes nothing and says nothing.
    let in_use = if target == name {
        reg.active.as_deref() == Some(name) && reg.active_label.is_none()
    } else {
        reg.active_label.as_deref() == Some(name)
    };
    if in_use {
        return Reply::ok("");
    }
    if entry.temp == Temp::Cold {
        return Reply::err(
            status::CANT,
            format!("VCL '{name}' is cold - set to auto or warm first"),
        );
    }
    let vcl = entry.vcl.clone();
    if sh.is_running()
        && let Err(e) = vcl.warm_up(sh)
    {
        return Reply::err(status::CANT, e);
    }
    reg.active_label = (target != name).then(|| name.to_string());
    reg.active = Some(target);
    drop(reg);
    sh.active.store(Arc::new(Some(vcl)));
    Reply::ok(format!("VCL '{name}' now active"))
}

/// Frees the discarded VCLs no request uses any more, running their
/// `vcl_fini`. Like varnishd, this happens when the CLI is next used.
pub fn poll_discarded(sh: &Arc<Shared>) {
    let gone: Vec<Arc<vcls::LoadedVcl>> = {
        let mut reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
        let (gone, busy) = std::mem::take(&mut reg.discarded)
            .into_iter()
            .partition(|v| Arc::strong_count(v) == 1 && v.host.holders().is_empty());
        reg.discarded = busy;
        gone
    };
    for v in gone.iter().filter(|v| v.is_initialized()) {
        crate::mgt::daemon::fini_vcl(sh, v);
        // The VCL goes whatever its vmods think of it.
        let _ = v.event(lacquer_vmods::VclEvent::Discard, sh);
    }
}

/// Cools the `auto` VCLs that have sat warm and unused for `vcl_cooldown`
/// seconds (varnishd's VCL poker); called by housekeeping.
pub fn cool_idle_vcls(sh: &Arc<Shared>) {
    let cooldown = std::time::Duration::from_secs_f64(sh.params().duration("vcl_cooldown"));
    let now = std::time::Instant::now();
    let mut cold = Vec::new();
    {
        let mut reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
        let active = reg.active.clone();
        let labelled: Vec<String> = reg.labels.values().cloned().collect();
        for (name, e) in reg.vcls.iter_mut() {
            let idle = e.temp == Temp::Auto
                && e.vcl.is_warm()
                && active.as_deref() != Some(name.as_str())
                && !labelled.contains(name);
            if !idle {
                e.idle_since = None;
                continue;
            }
            let since = *e.idle_since.get_or_insert(now);
            if now.duration_since(since) >= cooldown {
                e.idle_since = None;
                cold.push(e.vcl.clone());
            }
        }
    }
    for v in cold {
        v.cool_down(sh);
    }
}

fn vcl_discard(sh: &Arc<Shared>, patterns: &[&str]) -> Reply {
    let mut reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    // Every VCL and label a pattern matches is discarded, or none is.
    let names: Vec<String> = reg.order.iter().chain(reg.labels.keys()).cloned().collect();
    let mut marked: Vec<String> = Vec::new();
    for pat in patterns {
        let hits: Vec<&String> = names.iter().filter(|n| glob(pat, n)).collect();
        if hits.is_empty() {
            return Reply::err(status::PARAM, format!("No VCL name matches {pat}\n"));
        }
        for n in hits {
            // What vcl.use named is the active one: the label when it
            // was a label (its VCL then is merely labelled).
            let in_use = reg.active_label.as_ref().or(reg.active.as_ref());
            if in_use == Some(n) {
                return Reply::err(
                    status::CANT,
                    format!("Cannot discard active VCL program {n}\n"),
                );
            }
            if !marked.contains(n) {
                marked.push(n.clone());
            }
        }
    }
    // What depends on a discarded VCL or label must go with it.
    for n in &marked {
        let dependents: Vec<&String> = if reg.labels.contains_key(n) {
            reg.order
                .iter()
                .filter(|v| reg.labels_used_by(v).contains(n))
                .collect()
        } else {
            reg.labels
                .iter()
                .filter(|(_, t)| *t == n)
                .map(|(l, _)| l)
                .collect()
        };
        let left: Vec<&&String> = dependents.iter().filter(|d| !marked.contains(d)).collect();
        if !left.is_empty() {
            let mut msg = if reg.labels.contains_key(n) {
                format!("Cannot discard VCL label {n}, other VCLs depend on it:\n")
            } else {
                format!("Cannot discard labeled VCL program {n}:\n")
            };
            for (k, d) in left.iter().enumerate() {
                if k == 5 {
                    msg.push_str("\t[...]");
                    break;
                }
                let _ = writeln!(msg, "\t{d}");
            }
            return Reply::err(status::CANT, msg);
        }
    }
    let mut gone = Vec::new();
    for n in &marked {
        reg.listing.retain(|o| o != n);
        if reg.labels.remove(n).is_some() {
            continue;
        }
        if let Some(e) = reg.vcls.remove(n) {
            reg.order.retain(|o| o != n);
            gone.push(e.vcl);
        }
    }
    drop(reg);
    // The cache process is told to cool each down, then to discard it;
    // requests still running on one keep it until they end.
    let running = sh.is_running();
    for v in gone {
        if running {
            cli_log(
                sh,
                &format!("Rd vcl.state {} 0{}", v.name, Temp::Cold.name()),
            );
        }
        v.cool_down(sh);
        if running {
            cli_log_reply(sh, status::OK, "");
            cli_log(sh, &format!("Rd vcl.discard {}", v.name));
        }
        sh.vcls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .discarded
            .push(v);
        poll_discarded(sh);
        if running {
            cli_log_reply(sh, status::OK, "");
        }
    }
    Reply::ok("")
}

/// Lays out rows as varnishd's text tables: each column as wide as its
/// widest cell, columns separated by spaces.
fn table(rows: &[Vec<String>]) -> String {
    let ncol = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut w = vec![0usize; ncol];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut s = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                // varnishd's table writer sizes every column after the
                // first one character wider than its widest cell.
                let extra = usize::from(i > 0);
                let _ = write!(line, "{c:<width$}", width = w[i] + extra + 3);
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

fn vcl_list(sh: &Arc<Shared>, json: bool, words: &[String]) -> Reply {
    let running = sh.is_running();
    let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    let mut rows = Vec::new();
    let mut js = Vec::new();
    for name in &reg.listing {
        if let Some(target) = reg.labels.get(name) {
            // How many loaded VCLs reach this label with return(vcl).
            let refs = reg
                .order
                .iter()
                .filter(|v| reg.labels_used_by(v).contains(name))
                .count();
            let label_status = if reg.active_label.as_deref() == Some(name.as_str()) {
                "active"
            } else {
                "available"
            };
            let mut row = vec![
                label_status.to_string(),
                "label".to_string(),
                "warm".to_string(),
                format!("{:>6}", if running { "0" } else { "-" }),
                name.clone(),
                "->".to_string(),
                target.clone(),
            ];
            let mut refs_json = String::new();
            if refs > 0 {
                if let Some(last) = row.last_mut() {
                    let _ = write!(last, " ({refs} return(vcl))");
                }
                refs_json = format!(",\n\"refs\": {refs}");
            }
            rows.push(row);
            js.push(format!(
                "  {{\n    \"status\": \"{label_status}\",\n    \"state\": \"label\",\n    \"temperature\": \"warm\",\n    \"busy\": 0,\n    \"name\": {},\n    \"label\": {{\n      \"name\": {}{refs_json}\n      }}\n}}",
                json_str(name),
                json_str(target)
            ));
            continue;
        }
        let Some(e) = reg.vcls.get(name) else {
            continue;
        };
        // A VCL chosen through a label is listed available, the label
        // active, as varnishd lists them.
        let status = if reg.active.as_deref() == Some(name) && reg.active_label.is_none() {
            "active"
        } else {
            "available"
        };
        let state = match e.temp {
            Temp::Auto => "auto",
            Temp::Warm => "warm",
            Temp::Cold => "cold",
        };
        // A stopped cache lists the temperature each VCL will start with.
        let temp = match running {
            true => e.vcl.temperature(),
            false if e.temp != Temp::Cold => "warm",
            false => "cold",
        };
        let nlabels = reg.labels.values().filter(|t| *t == name).count();
        // References beyond the registry's (and the active slot's) are
        // requests running on this VCL.
        let held = 1 + usize::from(reg.active.as_deref() == Some(name.as_str()));
        let busy = Arc::strong_count(&e.vcl).saturating_sub(held);
        let mut row = vec![
            status.to_string(),
            state.to_string(),
            temp.to_string(),
            // A stopped daemon lists no busy counts, as varnishd's manager
            // answering without its child: a `-` where the count would be.
            if running {
                format!("{busy:>6}")
            } else {
                format!("{:>6}", "-")
            },
            name.clone(),
        ];
        if nlabels > 0 {
            row.push("<-".to_string());
            row.push(format!(
                "({nlabels} label{})",
                if nlabels == 1 { "" } else { "s" }
            ));
        }
        rows.push(row);
        js.push(format!(
            "  {{\n    \"status\": \"{status}\",\n    \"state\": \"{state}\",\n    \"temperature\": \"{temp}\",\n    \"busy\": {busy},\n    \"name\": {}{}\n}}",
            json_str(name),
            if nlabels > 0 { format!(",\n    \"labels\": {nlabels}") } else { String::new() }
        ));
    }
    for v in &reg.discarded {
        let busy = Arc::strong_count(v).saturating_sub(1);
        rows.push(vec![
            "discarded".to_string(),
            "auto".to_string(),
            "cooling".to_string(),
            format!("{busy:>6}"),
            v.name.clone(),
        ]);
        js.push(format!(
            "  {{\n    \"status\": \"discarded\",\n    \"state\": \"auto\",\n    \"temperature\": \"cooling\",\n    \"busy\": {busy},\n    \"name\": {}\n}}",
            json_str(&v.name)
        ));
    }
    if json {
        Reply::ok(json_list(words, &js))
    } else {
        Reply::ok(table(&rows))
    }
}

fn vcl_show(sh: &Arc<Shared>, plain: &[&str]) -> Reply {
    // As varnishd: `-v` only in first place; otherwise a second word is
    // one too many.
    let (verbose, name) = match plain {
        ["-v", rest @ ..] => (true, rest.first().copied()),
        [_, extra] => {
            return Reply::err(status::PARAM, format!("Too many parameters: '{extra}'"));
        }
        _ => (false, plain.first().copied()),
    };
    let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    let name = match name {
        Some(n) => n.to_string(),
        None => match &reg.active {
            Some(a) => a.clone(),
            None => return Reply::err(status::CANT, "No active VCL"),
        },
    };
    let Some(vcl) = reg.resolve(&name) else {
        return Reply::err(status::PARAM, format!("No VCL named '{name}'"));
    };
    if verbose {
        let mut s = String::new();
        for (i, (file, text)) in vcl.sources.iter().enumerate() {
            let _ = write!(s, "// VCL.SHOW {i} {} {file}\n{text}\n", text.len());
        }
        let _ = write!(
            s,
            "// VCL.SHOW {} {} <builtin>\n{}\n",
            vcl.sources.len(),
            lacquer_vcl::compile::BUILTIN_VCL.len(),
            lacquer_vcl::compile::BUILTIN_VCL
        );
        Reply::ok(s)
    } else {
        Reply::ok(
            vcl.sources
                .first()
                .map(|(_, t)| t.clone())
                .unwrap_or_default(),
        )
    }
}

/// varnishd's rule for VCL and label names: a letter, then letters,
/// digits, `_` or `-`. Returns the refusal for a bad name.
fn bad_vcl_name(name: &str) -> Option<Reply> {
    let b = name.as_bytes();
    let bad = match b.first() {
        None => return Some(Reply::err(status::PARAM, "Empty VCL name")),
        Some(c) if !c.is_ascii_alphabetic() => *c,
        _ => *b
            .iter()
            .find(|c| !(c.is_ascii_alphanumeric() || **c == b'_' || **c == b'-'))?,
    };
    let shown = if bad > 0x20 && bad < 0x7f {
        format!("('{}')", bad as char)
    } else {
        format!("(0x{bad:02x})")
    };
    Some(Reply::err(
        status::PARAM,
        format!("Illegal character in VCL name {shown}"),
    ))
}

fn vcl_label(sh: &Arc<Shared>, label: &str, target: &str) -> Reply {
    if let Some(r) = bad_vcl_name(label) {
        return r;
    }
    let mut reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    if reg.vcls.contains_key(label) {
        return Reply::err(status::PARAM, format!("{label} is not a label"));
    }
    if reg.labels.contains_key(target) {
        return Reply::err(status::CANT, "VCL labels cannot point to labels");
    }
    if !reg.vcls.contains_key(target) {
        return Reply::err(status::PARAM, format!("No VCL named {target} known"));
    }
    // Moving a label may not make a VCL reach itself through labels.
    if reg.labels.get(label).is_some_and(|t| t != target) {
        let mut why = String::new();
        if reg.leads_to(target, label, &mut why) {
            return Reply::err(
                status::PARAM,
                format!("{why}Pointing label {label} at {target} would create a loop"),
            );
        }
    }
    if reg
        .labels
        .insert(label.to_string(), target.to_string())
        .is_none()
    {
        reg.listing.push(label.to_string());
    }
    // Moving the label `vcl.use` chose moves the active VCL with it.
    if reg.active_label.as_deref() == Some(label)
        && let Some(e) = reg.vcls.get(target)
    {
        let vcl = e.vcl.clone();
        if sh.is_running()
            && let Err(e) = vcl.warm_up(sh)
        {
            return Reply::err(status::CANT, e);
        }
        reg.active = Some(target.to_string());
        drop(reg);
        sh.active.store(Arc::new(Some(vcl)));
    }
    Reply::ok("")
}

fn vcl_state(sh: &Arc<Shared>, name: &str, temp: &str) -> Reply {
    let Some(t) = Temp::parse(temp) else {
        return Reply::err(status::PARAM, "State must be one of auto, cold or warm.");
    };
    let mut reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    let is_active = reg.active.as_deref() == Some(name);
    let Some(e) = reg.vcls.get_mut(name) else {
        return Reply::err(status::PARAM, format!("No VCL named {name} known"));
    };
    if t == Temp::Cold && is_active {
        return Reply::err(status::CANT, "Cannot set the active VCL cold.");
    }
    match t {
        Temp::Cold => e.vcl.cool_down(sh),
        // A stopped daemon warms it up at `start`.
        Temp::Warm if !sh.is_running() => {}
        Temp::Warm => {
            if let Err(err) = e.vcl.warm_up(sh) {
                return Reply::err(status::CANT, err);
            }
        }
        // Auto keeps the temperature it has; the cooldown decides.
        Temp::Auto => {}
    }
    e.temp = t;
    Reply::ok("")
}

/// Every symbol each VCL defines, by kind.
fn vcl_symtab(sh: &Arc<Shared>) -> Reply {
    let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = String::new();
    for name in &reg.order {
        let Some(e) = reg.vcls.get(name) else {
            continue;
        };
        let ir = &e.vcl.ir;
        let _ = writeln!(s, "VCL {name}:");
        let kinds: [(&str, Vec<&str>); 7] = [
            (
                "backend",
                ir.backends.iter().map(|b| b.name.as_str()).collect(),
            ),
            ("probe", ir.probes.iter().map(|p| p.name.as_str()).collect()),
            ("acl", ir.acls.iter().map(|a| a.name.as_str()).collect()),
            ("sub", ir.subs.iter().map(|x| x.name.as_str()).collect()),
            ("vmod", ir.vmods.iter().map(|v| v.alias.as_str()).collect()),
            (
                "object",
                ir.instances.iter().map(|i| i.name.as_str()).collect(),
            ),
            ("label", ir.labels.iter().map(String::as_str).collect()),
        ];
        for (kind, names) in kinds {
            for n in names {
                let _ = writeln!(s, "\t{kind}\t{n}");
            }
        }
    }
    Reply::ok(s)
}

/// `vcl.deps`: each VCL and label in the order they were made, with what
/// it depends on (a label its VCL, a VCL the labels it returns to).
fn vcl_deps(sh: &Arc<Shared>, json: bool, words: &[String]) -> Reply {
    let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    let mut rows = Vec::new();
    let mut js = Vec::new();
    for name in &reg.listing {
        let deps: Vec<String> = match reg.labels.get(name) {
            Some(target) => vec![target.clone()],
            None => reg.labels_used_by(name).to_vec(),
        };
        if deps.is_empty() {
            rows.push(vec![name.clone()]);
        }
        for d in &deps {
            rows.push(vec![name.clone(), d.clone()]);
        }
        let list = if deps.is_empty() {
            "[]".to_string()
        } else {
            let items: Vec<String> = deps
                .iter()
                .map(|d| format!("      {}", json_str(d)))
                .collect();
            format!("[\n{}\n    ]", items.join(",\n"))
        };
        js.push(format!(
            "  {{\n    \"name\": {},\n    \"deps\": {list}\n  }}",
            json_str(name)
        ));
    }
    if json {
        // varnishd answers vcl.deps -j in JSON version 1.
        let head = json_head(words).replacen("[ 2,", "[ 1,", 1);
        return Reply::ok(format!("{head}{}\n]", js.join(",\n")));
    }
    Reply::ok(table(&rows))
}

fn param_line(p: &Param, v: &params::Value, is_default: bool) -> String {
    // varnishd lists a parameter the system lacks with a dash.
    if !params::available(p.name) {
        return format!("{:<30}-", p.name);
    }
    let unit = if p.unit.is_empty() {
        String::new()
    } else {
        format!(" [{}]", p.unit)
    };
    format!(
        "{:<30}{}{unit}{}",
        p.name,
        p.show(v),
        if is_default { " (default)" } else { "" }
    )
}

fn param_show(sh: &Arc<Shared>, plain: &[&str], json: bool, words: &[String]) -> Reply {
    let long = plain.contains(&"-l");
    if long && json {
        return Reply::err(status::PARAM, "-l not permitted with param.show -j");
    }
    if plain.iter().filter(|a| **a != "-l").count() > 1 {
        return Reply::err(status::TOOMANY, "Too many parameters");
    }
    let which = plain.iter().find(|a| **a != "-l").copied();
    let ps = sh.params();
    if let Some(a) = which.and_then(params::alias) {
        return alias_show(a, &ps, json, words);
    }
    let selected: Vec<&Param> = match which {
        None => PARAMS.iter().collect(),
        Some("changed") => PARAMS.iter().filter(|p| !ps.is_default(p.name)).collect(),
        Some(name) => match params::lookup(name) {
            Some(p) => vec![p],
            None => {
                return Reply::err(status::PARAM, format!("Unknown parameter \"{name}\"."));
            }
        },
    };
    if json {
        let items: Vec<String> = selected
            .iter()
            .map(|p| {
                if !params::available(p.name) {
                    return format!(
                        "  {{\n    \"name\": {},\n    \"implemented\": false\n  }}",
                        json_str(p.name)
                    );
                }
                let v = ps.get(p.name);
                let value = match v {
                    params::Value::Duration(d) => format!("{d:.3}"),
                    params::Value::Uint(u) => u.to_string(),
                    params::Value::Bytes(b) => b.to_string(),
                    params::Value::Float(f) => f.to_string(),
                    params::Value::Bool(b) => b.to_string(),
                    other => pool_json(p.name, &p.show(other))
                        .unwrap_or_else(|| json_str(&p.show(other))),
                };
                // As varnishd's: units, minimum and maximum only where the
                // parameter has them, then its flags.
                let mut s = format!(
                    "  {{\n    \"name\": {},\n    \"implemented\": {},\n    \"value\": {value},\n",
                    json_str(p.name),
                    p.effective,
                );
                if !p.unit.is_empty() {
                    let _ = writeln!(s, "    \"units\": {},", json_str(p.unit));
                }
                let _ = writeln!(
                    s,
                    "    \"default\": {},",
                    json_str(&p.show(&p.default_value()))
                );
                let b = ps.bounds(p);
                if let Some(m) = &b.min {
                    let _ = writeln!(s, "    \"minimum\": {},", json_str(m));
                }
                if let Some(m) = &b.max {
                    let _ = writeln!(s, "    \"maximum\": {},", json_str(m));
                }
                let _ = writeln!(s, "    \"description\": {},", json_str(p.doc));
                let flags = params::flags(p.name);
                if flags.is_empty() {
                    s.push_str("    \"flags\": []\n  }");
                } else {
                    let f: Vec<String> = flags.iter().map(|f| format!("      \"{f}\"")).collect();
                    let _ = write!(s, "    \"flags\": [\n{}\n    ]\n  }}", f.join(",\n"));
                }
                s
            })
            .collect();
        return Reply::ok(format!("{}{}\n]", json_head(words), items.join(",\n")));
    }
    let mut s = String::new();
    for p in selected {
        let v = ps.get(p.name);
        let is_default = ps.is_default(p.name);
        if long || which.is_some_and(|w| w != "changed") {
            let _ = writeln!(s, "{}", p.name);
            if !params::available(p.name) {
                s.push_str("        Not available\n\n");
                continue;
            }
            let _ = writeln!(
                s,
                "        Value is: {}{}{}",
                p.show(v),
                if p.unit.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", p.unit)
                },
                if is_default { " (default)" } else { "" }
            );
            // As varnishd: the default only when the value differs, then
            // the bounds as they stand (some follow other parameters).
            if !is_default {
                let _ = writeln!(s, "        Default is: {}", p.show(&p.default_value()));
            }
            let b = ps.bounds(p);
            if let Some(m) = b.min {
                let _ = writeln!(s, "        Minimum is: {m}");
            }
            if let Some(m) = b.max {
                let _ = writeln!(s, "        Maximum is: {m}");
            }
            let _ = writeln!(s, "\n        {}\n", p.doc);
        } else {
            let _ = writeln!(s, "{}", param_line(p, v, is_default));
        }
    }
    Reply::ok(s)
}

/// What varnishd says after changing `name` while the child runs: when
/// the change waits for a restart or a VCL reload.
fn takes_effect(sh: &Shared, name: &str) -> &'static str {
    let flags = params::lookup(params::canonical(name)).map_or(&[][..], |p| params::flags(p.name));
    if !sh.is_running() {
        ""
    } else if flags.contains(&"must_restart") {
        "\nChange will take effect when child is restarted"
    } else if flags.contains(&"must_reload") {
        "\nChange will take effect when VCL script is reloaded"
    } else {
        ""
    }
}

/// A memory pool parameter's three numbers as varnishd's JSON object.
fn pool_json(name: &str, shown: &str) -> Option<String> {
    if !name.starts_with("pool_") {
        return None;
    }
    let n: Vec<&str> = shown.split(',').collect();
    let [min, max, age] = n.as_slice() else {
        return None;
    };
    Some(format!(
        "{{\n        \"min_pool\": {min},\n        \"max_pool\": {max},\n        \"max_age\": {age}\n    }}"
    ))
}

/// `param.show` of an alias by its name: the target's value, and which
/// parameter that is.
fn alias_show(a: &params::Alias, ps: &params::ParamSet, json: bool, words: &[String]) -> Reply {
    let v = params::lookup(a.target).map_or_else(String::new, |p| p.show(ps.get(a.target)));
    if json {
        return Reply::ok(format!(
            "{}  {{\n    \"name\": {},\n    \"alias\": {},\n    \"implemented\": true,\n    \"value\": {},\n    \"description\": {}\n  }}\n]",
            json_head(words),
            json_str(a.name),
            json_str(a.target),
            json_str(&v),
            json_str(a.doc)
        ));
    }
    Reply::ok(format!(
        "{}\n        Value is: {v}\n        Alias of: {}\n\n        {}\n\n",
        a.name, a.target, a.doc
    ))
}

/// Shell-style glob matching (fnmatch without flags): `*`, `?` and
/// bracket classes (`[a-c]`, `[!x]`); a `[` without its `]` is literal.
fn glob(pat: &str, s: &str) -> bool {
    /// The class at the start of `p` (just after `[`): whether `c` is in
    /// it, and the pattern after the closing `]`.
    fn class(p: &[u8], c: u8) -> Option<(bool, &[u8])> {
        let (neg, mut i) = match p.first() {
            Some(b'!' | b'^') => (true, 1),
            _ => (false, 0),
        };
        let mut hit = false;
        let mut first = true;
        loop {
            let a = *p.get(i)?;
            if a == b']' && !first {
                return Some((hit != neg, &p[i + 1..]));
            }
            first = false;
            if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|b| *b != b']') {
                hit |= (a..=p[i + 2]).contains(&c);
                i += 3;
            } else {
                hit |= a == c;
                i += 1;
            }
        }
    }
    fn m(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => m(&p[1..], s) || (!s.is_empty() && m(p, &s[1..])),
            (Some(b'?'), Some(_)) => m(&p[1..], &s[1..]),
            (Some(b'['), Some(c)) => match class(&p[1..], *c) {
                Some((true, rest)) => m(rest, &s[1..]),
                Some((false, _)) => false,
                None => *c == b'[' && m(&p[1..], &s[1..]),
            },
            (Some(a), Some(b)) if a == b => m(&p[1..], &s[1..]),
            _ => false,
        }
    }
    m(pat.as_bytes(), s.as_bytes())
}

fn matching_backends(sh: &Arc<Shared>, pattern: Option<&str>) -> Vec<Arc<vcls::BackendRt>> {
    matching_entries(sh, pattern)
        .into_iter()
        .filter_map(|e| match e {
            vcls::Listed::Backend(b) => Some(b),
            vcls::Listed::Director { .. } => None,
        })
        .collect()
}

/// The entries of `backend.list` a pattern selects: all of the active
/// VCL's without one; `vcl.name` patterns look in every VCL.
fn matching_entries(sh: &Arc<Shared>, pattern: Option<&str>) -> Vec<vcls::Listed> {
    let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::new();
    for name in &reg.order {
        let Some(e) = reg.vcls.get(name) else {
            continue;
        };
        let active = reg.active.as_deref() == Some(name.as_str());
        for entry in e.vcl.listed() {
            let ok = match pattern {
                None => active,
                Some(p) if p.contains('.') => glob(p, entry.name()),
                Some(p) => active && glob(p, entry.vcl_name()),
            };
            if ok {
                out.push(entry);
            }
        }
    }
    out
}

fn backend_list(
    sh: &Arc<Shared>,
    pattern: Option<&str>,
    probe_detail: bool,
    json: bool,
    words: &[String],
) -> Reply {
    let list = matching_entries(sh, pattern);
    let now_secs = lacquer_http::date::now();
    let now = lacquer_http::date::format_http_date(now_secs);
    let mut rows = vec![vec![
        "Backend name".to_string(),
        "Admin".to_string(),
        "Probe".to_string(),
        "Health".to_string(),
        "Last change".to_string(),
    ]];
    let mut js = Vec::new();
    let mut probed = Vec::new();
    for entry in &list {
        let (kind, admin, good, window, health, members) = match entry {
            vcls::Listed::Backend(b) => {
                let admin = match b.health.admin() {
                    crate::backend::probe::Admin::Auto => {
                        if b.probe.is_some() {
                            "probe"
                        } else {
                            "healthy"
                        }
                    }
                    crate::backend::probe::Admin::Healthy => "healthy",
                    crate::backend::probe::Admin::Sick => "sick",
                };
                let (good, window) = match &b.probe {
                    Some(spec) => {
                        probed.push((b.clone(), spec.clone()));
                        b.health.window_counts(spec)
                    }
                    None => (0, 0),
                };
                // The Health column is the probe's verdict; a forced
                // state shows in the Admin column only, as in varnishd.
                let health = match b.health.admin() {
                    crate::backend::probe::Admin::Auto => b.healthy(),
                    _ => b.health.probed_healthy(),
                };
                ("backend", admin, good, window, health, None)
            }
            // A director that reports its members is probed through
            // them: varnishd counts the healthy ones in the Probe column.
            // Others show as an unprobed backend.
            vcls::Listed::Director { director, .. } => match director.list() {
                Some(lacquer_vmods::DirectorList {
                    kind,
                    report: Some(r),
                }) => {
                    let good = r.members.iter().filter(|m| m.healthy).count() as u32;
                    let healthy = director.healthy().unwrap_or(false);
                    (
                        kind,
                        "probe",
                        good,
                        r.members.len() as u32,
                        healthy,
                        Some(r),
                    )
                }
                Some(l) => (l.kind, "healthy", 0, 0, true, None),
                None => ("director", "healthy", 0, 0, true, None),
            },
        };
        let health = if health { "healthy" } else { "sick" };
        rows.push(vec![
            entry.name().to_string(),
            admin.to_string(),
            format!("{good}/{window}"),
            health.to_string(),
            now.clone(),
        ]);
        if let Some(l) = members.as_ref().filter(|_| probe_detail) {
            rows.push(Vec::new());
            let mut head = vec![String::new(), "Backend".to_string()];
            head.extend(l.heads.iter().map(|h| h.to_string()));
            rows.push(head);
            for m in &l.members {
                let mut row = vec![String::new(), m.name.clone()];
                row.extend(m.cells.iter().cloned());
                rows.push(row);
            }
            rows.push(Vec::new());
        }
        // With -p, varnishd adds the probe's details: an empty object
        // for a backend without a probe.
        let details = if probe_detail && window == 0 {
            "      \"probe_details\": {},\n"
        } else {
            ""
        };
        js.push(format!(
            "    {}: {{\n      \"type\": \"{kind}\",\n      \"admin_health\": \"{admin}\",\n      \"probe_message\": [{good}, {window}, \"{health}\"],\n{details}      \"last_change\": {now_secs:.3}\n    }}",
            json_str(entry.name()),
        ));
    }
    if json {
        // varnishd's backend.list is the one reply of JSON version 3.
        let head = json_head(words).replacen("[ 2,", "[ 3,", 1);
        return Reply::ok(format!("{head}  {{\n{}\n  }}\n]", js.join(",\n")));
    }
    let mut s = table(&rows);
    if probe_detail {
        for (b, spec) in &probed {
            let (good, window) = b.health.window_counts(spec);
            let _ = writeln!(
                s,
                "{}\n Current states  good: {good:2} threshold: {:2} window: {window:2}",
                b.name, spec.threshold
            );
            s.push_str(&b.health.history());
        }
    }
    Reply::ok(s)
}

fn backend_set_health(sh: &Arc<Shared>, pattern: &str, state: &str) -> Reply {
    // varnishd compares the state ignoring case.
    let admin = match state.to_ascii_lowercase().as_str() {
        "auto" => crate::backend::probe::Admin::Auto,
        "healthy" => crate::backend::probe::Admin::Healthy,
        "sick" => crate::backend::probe::Admin::Sick,
        _ => return Reply::err(status::PARAM, format!("Invalid state {state}")),
    };
    let list = matching_backends(sh, Some(pattern));
    if list.is_empty() {
        return Reply::err(status::PARAM, "No Backends matches");
    }
    for b in list {
        b.health.set_admin(admin);
    }
    Reply::ok("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let t = table(&[
            vec!["active".into(), "auto".into(), "boot".into()],
            vec!["available".into(), "label".into(), "x".into()],
        ]);
        // As varnishd's vcl.list: three spaces after the first column,
        // one more after the others.
        assert_eq!(t, "active      auto     boot\navailable   label    x\n");
    }

    #[test]
    fn vcl_names_follow_varnishd_rules() {
        assert!(bad_vcl_name("vcl_1-a").is_none());
        let r = bad_vcl_name("0000").unwrap();
        assert_eq!(r.status, status::PARAM);
        assert_eq!(r.body, "Illegal character in VCL name ('0')");
        assert!(bad_vcl_name("a00/").unwrap().body.ends_with("('/')"));
        assert!(bad_vcl_name("a00\u{e5}").unwrap().body.ends_with("(0xc3)"));
    }

    #[test]
    fn json_lists_are_valid_when_empty() {
        let w = vec!["vcl.list".to_string(), "-j".to_string()];
        let empty = json_list(&w, &[]);
        assert!(empty.starts_with("[ 2, [\"vcl.list\", \"-j\"], "));
        assert!(empty.ends_with("\n\n]") && !empty.contains(",\n\n]"));
        let one = json_list(&w, &["  \"x\"".to_string(), "  \"y\"".to_string()]);
        assert!(one.ends_with(",\n  \"x\",\n  \"y\"\n]"));
    }

    #[test]
    fn numbers_as_strtoul_reads_them() {
        assert_eq!(strtoul("1000"), 1000);
        assert_eq!(strtoul("x"), 0);
        assert_eq!(strtoul("-1"), u32::MAX);
        assert_eq!(strtoul("0x10"), 16);
        assert_eq!(strtoul("010"), 8);
        assert_eq!(strtoul("12ab"), 12);
        assert_eq!(strtoul(" +7"), 7);
    }

    #[test]
    fn globbing() {
        assert!(glob("boot.*", "boot.default"));
        assert!(glob("*def*", "boot.default"));
        assert!(!glob("b?x", "boot"));
        assert!(glob("vcl[1-7]", "vcl3"));
        assert!(!glob("vcl[1-7]", "vcl8"));
        assert!(glob("vcl[A-B]", "vclB"));
        assert!(glob("x[!a]", "xb"));
        assert!(!glob("x[!a]", "xa"));
        assert!(glob("a[", "a["));
    }
}
