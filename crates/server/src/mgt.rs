//! Management commands: what each CLI command does to the running daemon,
//! and the text it answers with (varnishd's formats, so that varnishadm
//! scripts and varnishtest's `-cliok`/`-clierr`/`-cliexpect` keep working).
//!
//! Commands run on the CLI connection's task; the only slow one,
//! `vcl.load`, compiles in milliseconds.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::cli::{Reply, status};
use crate::params::{self, PARAMS, Param};
use crate::state::Shared;
use crate::vcls::{self, LoadOptions, Temp};

/// The banner shown at the start of a CLI session.
pub fn banner() -> String {
    format!(
        "-----------------------------\n\
         Lacquer Cache CLI 1.0\n\
         -----------------------------\n\
         {},{},{}\n\
         lacquer-{} (Varnish 7.1 compatible)\n\
         \n\
         Type 'help' for command list.\n\
         Type 'quit' to close CLI session.\n",
        std::env::consts::OS,
        std::env::consts::ARCH,
        "-smalloc",
        env!("CARGO_PKG_VERSION")
    )
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
        crate::rfc2616::now()
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
    let logged = crate::cli::command(&words[0]).is_some_and(|c| c.child);
    let vx = lacquer_vsl::Vxid::NONE;
    if logged {
        // varnishd's manager compiles inline VCL and has its child load
        // the result: the child's log shows a vcl.load.
        let line = match words {
            [cmd, name, ..] if cmd == "vcl.inline" => {
                format!("vcl.load \"{name}\" (inline VCL)")
            }
            _ => words.join(" "),
        };
        sh.vsl
            .log_immediate(lacquer_vsl::Tag::CLI, vx, format_args!("Rd {line}"));
    }
    let r = execute(sh, words);
    if logged {
        sh.vsl.log_immediate(
            lacquer_vsl::Tag::CLI,
            vx,
            format_args!("Wr {} {} {}", r.status, r.body.len(), r.body),
        );
    }
    r
}

fn execute(sh: &Arc<Shared>, words: &[String]) -> Reply {
    let cmd = words[0].as_str();
    let args = &words[1..];
    let (json, plain) = json_flag(args);
    match cmd {
        "ping" => {
            let now = crate::rfc2616::now() as u64;
            if json {
                Reply::ok(format!("{}  \"PONG\", {now}, 1.0]", json_head(words)))
            } else {
                Reply::ok(format!("PONG {now} 1.0"))
            }
        }
        "banner" => Reply::ok(banner()),
        "help" => help(words, &plain, json),
        "status" => {
            let state = if sh.is_running() {
                "running"
            } else {
                "stopped"
            };
            if json {
                Reply::ok(format!("{}  \"{state}\"\n]", json_head(words)))
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
            sh.running.store(true, Ordering::Release);
            Reply::ok("")
        }
        "stop" => {
            if !sh.is_running() {
                return Reply::err(status::CANT, "Child in state stopped");
            }
            sh.running.store(false, Ordering::Release);
            Reply::ok("")
        }
        "pid" => {
            let pid = std::process::id();
            if json {
                Reply::ok(format!(
                    "{}  {{\"master\": {pid}, \"worker\": {pid}}}\n]",
                    json_head(words)
                ))
            } else {
                Reply::ok(format!("Master: {pid:>10}\nWorker: {pid:>10}\n"))
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
        "vcl.deps" => vcl_deps(sh),
        "param.show" => param_show(sh, &plain, json, words),
        "param.set" => match sh.set_param(plain[0], plain[1]) {
            Ok(()) => Reply::ok(""),
            Err(e @ params::ParamError::Unknown(_)) => Reply::err(status::PARAM, e.to_string()),
            Err(e) => Reply::err(
                status::PARAM,
                format!(
                    "{e}\n\n(attempting to set param '{}' to '{}')",
                    plain[0], plain[1]
                ),
            ),
        },
        "param.reset" => match params::lookup(plain[0]) {
            Some(p) => match sh.set_param(p.name, p.default) {
                Ok(()) => Reply::ok(""),
                Err(e) => Reply::err(status::PARAM, e.to_string()),
            },
            None => Reply::err(
                status::PARAM,
                format!("Unknown parameter \"{}\".", plain[0]),
            ),
        },
        "ban" => {
            let spec: Vec<&str> = args.iter().map(String::as_str).collect();
            match lacquer_cache::BanSpec::parse_words(&spec) {
                Ok(b) => {
                    sh.cache.ban(b, crate::rfc2616::now());
                    Reply::ok("")
                }
                Err(e) => Reply::err(status::PARAM, e.to_string()),
            }
        }
        "ban.list" if json => Reply::ok(ban_list_json(sh, words)),
        "ban.list" => Reply::ok(sh.cache.ban_list()),
        "backend.list" => backend_list(sh, &plain, json, words),
        "backend.set_health" => backend_set_health(sh, plain[0], plain[1]),
        "storage.list" if json => {
            let items: Vec<String> = sh
                .stores
                .iter()
                .map(|st| format!("  {}", json_str(&format!("storage.{}", st.name()))))
                .collect();
            Reply::ok(json_list(words, &items))
        }
        "storage.list" => {
            let mut s = String::from("Storage devices:\n");
            for st in &sh.stores {
                let _ = writeln!(s, "\tstorage.{} = malloc", st.name());
            }
            Reply::ok(s)
        }
        "panic.show" => Reply::err(
            status::CANT,
            "Child has not panicked or panic has been cleared",
        ),
        "panic.clear" => Reply::err(status::CANT, "No panic to clear"),
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
        "debug.xid" => {
            if let Some(v) = plain.first() {
                // The next transaction gets the id after the one given.
                match v.parse::<u32>() {
                    Ok(n) => sh.vxid.set(n.wrapping_add(1)),
                    Err(_) => return Reply::err(status::PARAM, format!("Invalid xid {v}")),
                }
            }
            Reply::ok(format!("XID is {} chunk 1", sh.vxid.peek().wrapping_sub(1)))
        }
        _ => Reply::err(
            status::UNKNOWN,
            "Unknown request.\nType 'help' for more info.",
        ),
    }
}

fn help(words: &[String], plain: &[&str], json: bool) -> Reply {
    if json {
        let mut s = json_head(words);
        let cmds: Vec<String> = crate::cli::COMMANDS
            .iter()
            .map(|c| {
                format!(
                    "  {{\n    \"request\": {},\n    \"syntax\": {},\n    \"help\": {},\n    \"minarg\": {},\n    \"maxarg\": {},\n    \"flags\": \"{}\",\n    \"json\": {}\n  }}",
                    json_str(c.name),
                    json_str(c.syntax),
                    json_str(c.help),
                    c.min_args,
                    c.max_args.map_or(-1, |m| m as i64),
                    if c.debug { "d" } else { "" },
                    c.json
                )
            })
            .collect();
        s.push_str(&cmds.join(",\n"));
        s.push_str("\n]");
        return Reply::ok(s);
    }
    match plain.first() {
        None => Reply::ok(crate::cli::help_text()),
        Some(name) => match crate::cli::command(name) {
            Some(c) => Reply::ok(format!("{}\n{}\n", c.syntax, c.help)),
            None => Reply::err(
                status::UNKNOWN,
                format!("Unknown request.\nType 'help' for more info.\n(no command \"{name}\")"),
            ),
        },
    }
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
    let opts = load_options(sh);
    let loaded = match src {
        Source::File(path) => vcls::compile_path(name, std::path::Path::new(path), &opts),
        Source::Inline(text) => vcls::compile(name, "<vcl.inline>", text, &opts),
    };
    match loaded {
        Ok(v) => {
            let v = Arc::new(v);
            if let Err(e) = crate::daemon::init_vcl(sh, &v) {
                return Reply::err(status::CANT, e);
            }
            if temp != Temp::Cold {
                v.warm_up(sh.vsl.clone());
            }
            sh.vcls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(v, temp);
            if let Some(s) = sh.stats.get() {
                s.publish(sh);
            }
            Reply::ok("VCL compiled.\n")
        }
        Err(e) => Reply::err(
            status::PARAM,
            format!(
                "Message from VCC-compiler:\n{}\nRunning VCC-compiler failed, exited with 2\nVCL compilation failed",
                e.message.trim_end()
            ),
        ),
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
        return Reply::err(status::PARAM, format!("No VCL named {name}"));
    };
    if entry.temp == Temp::Cold {
        return Reply::err(status::CANT, format!("VCL '{name}' is cold"));
    }
    let vcl = entry.vcl.clone();
    vcl.warm_up(sh.vsl.clone());
    reg.active_label = (target != name).then(|| name.to_string());
    reg.active = Some(target);
    drop(reg);
    sh.active.store(Arc::new(Some(vcl)));
    Reply::ok(format!("VCL '{name}' now active"))
}

fn vcl_discard(sh: &Arc<Shared>, names: &[&str]) -> Reply {
    let mut reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    for n in names {
        if reg.active.as_deref() == Some(*n) || reg.active_label.as_deref() == Some(*n) {
            return Reply::err(status::CANT, format!("Cannot discard active VCL: {n}"));
        }
        if reg.labels.contains_key(*n) {
            reg.labels.remove(*n);
            continue;
        }
        if reg.labels.values().any(|t| t == n) {
            return Reply::err(status::CANT, format!("Cannot discard labeled VCL: {n}"));
        }
        match reg.vcls.remove(*n) {
            Some(e) => {
                e.vcl.cool_down();
                reg.order.retain(|o| o != n);
            }
            None => return Reply::err(status::PARAM, format!("No VCL named {n}")),
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
                let _ = write!(line, "{c:<width$}", width = w[i] + 3);
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

fn vcl_list(sh: &Arc<Shared>, json: bool, words: &[String]) -> Reply {
    let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    let mut rows = Vec::new();
    let mut js = Vec::new();
    for name in &reg.order {
        let Some(e) = reg.vcls.get(name) else {
            continue;
        };
        let status = if reg.active.as_deref() == Some(name) {
            "active"
        } else {
            "available"
        };
        let state = match e.temp {
            Temp::Auto => "auto",
            Temp::Warm => "warm",
            Temp::Cold => "cold",
        };
        let temp = if e.vcl.is_warm() { "warm" } else { "cold" };
        let nlabels = reg.labels.values().filter(|t| *t == name).count();
        let mut row = vec![
            status.to_string(),
            state.to_string(),
            temp.to_string(),
            "0".to_string(),
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
            "  {{\n    \"status\": \"{status}\",\n    \"state\": \"{state}\",\n    \"temperature\": \"{temp}\",\n    \"busy\": 0,\n    \"name\": {}{}\n}}",
            json_str(name),
            if nlabels > 0 { format!(",\n    \"labels\": {nlabels}") } else { String::new() }
        ));
    }
    for (label, target) in &reg.labels {
        rows.push(vec![
            "available".to_string(),
            "label".to_string(),
            "warm".to_string(),
            "0".to_string(),
            label.clone(),
            "->".to_string(),
            target.clone(),
        ]);
        js.push(format!(
            "  {{\n    \"status\": \"available\",\n    \"state\": \"label\",\n    \"temperature\": \"warm\",\n    \"busy\": 0,\n    \"name\": {},\n    \"label\": {{\n      \"name\": {}\n      }}\n}}",
            json_str(label),
            json_str(target)
        ));
    }
    if json {
        Reply::ok(json_list(words, &js))
    } else {
        Reply::ok(table(&rows))
    }
}

fn vcl_show(sh: &Arc<Shared>, plain: &[&str]) -> Reply {
    let verbose = plain.contains(&"-v");
    let name = plain.iter().find(|a| **a != "-v").copied();
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
            let _ = write!(s, "// VCL.SHOW {i} {} {file}\n{text}", text.len());
        }
        let _ = write!(
            s,
            "// VCL.SHOW {} {} <builtin>\n{}",
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
        return Reply::err(status::PARAM, format!("{label} is a VCL, not a label"));
    }
    if reg.labels.contains_key(target) {
        return Reply::err(status::CANT, "VCL labels cannot point to labels");
    }
    if !reg.vcls.contains_key(target) {
        return Reply::err(status::PARAM, format!("No VCL named {target}"));
    }
    reg.labels.insert(label.to_string(), target.to_string());
    // Moving the label `vcl.use` chose moves the active VCL with it.
    if reg.active_label.as_deref() == Some(label)
        && let Some(e) = reg.vcls.get(target)
    {
        let vcl = e.vcl.clone();
        vcl.warm_up(sh.vsl.clone());
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
        return Reply::err(status::PARAM, format!("No VCL named {name}"));
    };
    if t == Temp::Cold && is_active {
        return Reply::err(status::CANT, "Cannot set the active VCL cold.");
    }
    e.temp = t;
    match t {
        Temp::Cold => e.vcl.cool_down(),
        _ => e.vcl.warm_up(sh.vsl.clone()),
    }
    Reply::ok("")
}

fn vcl_deps(sh: &Arc<Shared>) -> Reply {
    let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = String::new();
    for name in &reg.order {
        let _ = writeln!(s, "{name}");
    }
    for (l, t) in &reg.labels {
        let _ = writeln!(s, "{l}\t{t}");
    }
    Reply::ok(s)
}

fn param_line(p: &Param, v: &params::Value, is_default: bool) -> String {
    let unit = if p.unit.is_empty() {
        String::new()
    } else {
        format!(" [{}]", p.unit)
    };
    format!(
        "{:<30}{v}{unit}{}",
        p.name,
        if is_default { " (default)" } else { "" }
    )
}

fn param_show(sh: &Arc<Shared>, plain: &[&str], json: bool, words: &[String]) -> Reply {
    let long = plain.contains(&"-l");
    let which = plain.iter().find(|a| **a != "-l").copied();
    let ps = sh.params();
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
                let v = ps.get(p.name);
                format!(
                    "  {{\n    \"name\": {},\n    \"implemented\": {},\n    \"value\": {},\n    \"units\": {},\n    \"default\": {},\n    \"description\": {}\n  }}",
                    json_str(p.name),
                    p.effective,
                    match v {
                        params::Value::Duration(d) => format!("{d:.3}"),
                        params::Value::Uint(u) => u.to_string(),
                        params::Value::Bytes(b) => b.to_string(),
                        params::Value::Float(f) => f.to_string(),
                        params::Value::Bool(b) => b.to_string(),
                        other => json_str(&other.to_string()),
                    },
                    json_str(p.unit),
                    json_str(p.default),
                    json_str(p.doc)
                )
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
            let _ = writeln!(
                s,
                "        Value is: {v}{}{}",
                if p.unit.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", p.unit)
                },
                if is_default { " (default)" } else { "" }
            );
            let _ = writeln!(s, "        Default is: {}", p.default);
            let _ = writeln!(s, "\n        {}\n", p.doc);
        } else {
            let _ = writeln!(s, "{}", param_line(p, v, is_default));
        }
    }
    Reply::ok(s)
}

/// Shell-style glob matching for backend patterns.
fn glob(pat: &str, s: &str) -> bool {
    fn m(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => m(&p[1..], s) || (!s.is_empty() && m(p, &s[1..])),
            (Some(b'?'), Some(_)) => m(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => m(&p[1..], &s[1..]),
            _ => false,
        }
    }
    m(pat.as_bytes(), s.as_bytes())
}

fn matching_backends(sh: &Arc<Shared>, pattern: Option<&str>) -> Vec<Arc<vcls::BackendRt>> {
    let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::new();
    for name in &reg.order {
        let Some(e) = reg.vcls.get(name) else {
            continue;
        };
        for b in &e.vcl.backends {
            let ok = match pattern {
                None => reg.active.as_deref() == Some(name.as_str()),
                Some(p) if p.contains('.') => glob(p, &b.name),
                Some(p) => reg.active.as_deref() == Some(name.as_str()) && glob(p, &b.vcl_name),
            };
            if ok {
                out.push(b.clone());
            }
        }
    }
    out
}

fn backend_list(sh: &Arc<Shared>, plain: &[&str], json: bool, words: &[String]) -> Reply {
    let probe_detail = plain.contains(&"-p");
    let pattern = plain.iter().find(|a| **a != "-p").copied();
    let list = matching_backends(sh, pattern);
    let now = crate::rfc2616::format_http_date(crate::rfc2616::now());
    let mut rows = vec![vec![
        "Backend name".to_string(),
        "Admin".to_string(),
        "Probe".to_string(),
        "Health".to_string(),
        "Last change".to_string(),
    ]];
    let mut js = Vec::new();
    for b in &list {
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
            Some(spec) => b.health.window_counts(spec),
            None => (0, 0),
        };
        let health = if b.healthy() { "healthy" } else { "sick" };
        rows.push(vec![
            b.name.clone(),
            admin.to_string(),
            format!("{good}/{window}"),
            health.to_string(),
            now.clone(),
        ]);
        js.push(format!(
            "  {}: {{\n    \"type\": \"backend\",\n    \"admin_health\": \"{admin}\",\n    \"probe_message\": \"{good}/{window} {health}\",\n    \"last_change\": {:.3}\n  }}",
            json_str(&b.name),
            crate::rfc2616::now()
        ));
    }
    if json {
        return Reply::ok(format!(
            "{}  {{\n{}\n  }}\n]",
            json_head(words),
            js.join(",\n")
        ));
    }
    let mut s = table(&rows);
    if probe_detail {
        for b in &list {
            if let Some(spec) = &b.probe {
                let (good, window) = b.health.window_counts(spec);
                let _ = writeln!(
                    s,
                    "{}\n Current states  good: {good:2} threshold: {:2} window: {window:2}",
                    b.name, spec.threshold
                );
            }
        }
    }
    Reply::ok(s)
}

fn backend_set_health(sh: &Arc<Shared>, pattern: &str, state: &str) -> Reply {
    let admin = match state {
        "auto" => crate::backend::probe::Admin::Auto,
        "healthy" => crate::backend::probe::Admin::Healthy,
        "sick" => crate::backend::probe::Admin::Sick,
        _ => return Reply::err(status::PARAM, "Invalid state"),
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
        assert_eq!(
            t,
            "active      auto     boot\navailable   label    x\n"
                .replace("auto     ", "auto    ")
                .replace("label    ", "label   ")
        );
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
    fn globbing() {
        assert!(glob("boot.*", "boot.default"));
        assert!(glob("*def*", "boot.default"));
        assert!(!glob("b?x", "boot"));
    }
}
