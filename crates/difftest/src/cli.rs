//! Comparing management-CLI replies: a script of CLI commands (one a
//! line, `#` comments, `vcl.inline` here-documents allowed) is sent to
//! varnishd and to lacquerd, and each reply's status code and text are
//! compared after normalising what legitimately differs: timestamps, the
//! daemon's own VCL and backend names and ports, and the prose
//! descriptions under `param.show` (Lacquer's parameter descriptions are
//! its own words; the value, default and bounds lines above them are
//! compared). Also masked: the seconds in `PONG`, ports in
//! `debug.listen_address`, dates in `backend.list`, the prose of `help`
//! (its syntax lines are compared), the daemon's identity lines in the
//! banner, each daemon's own directory in `vcl.show -v` and the built-in
//! VCL's text after it (DEVIATIONS.md says why each is Lacquer's own).
//! Scripts live in `tests/diff/cli/`.

use crate::daemon::Daemon;

/// One command of a script: its text (several lines for a here-document).
pub fn commands(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = script.lines();
    while let Some(l) = lines.next() {
        if l.trim().is_empty() || l.starts_with('#') {
            continue;
        }
        let mut cmd = l.to_string();
        if let Some(pos) = l.find("<< ") {
            let tag = l[pos + 3..].trim().to_string();
            for body in lines.by_ref() {
                cmd.push('\n');
                cmd.push_str(body);
                if body == tag {
                    break;
                }
            }
        }
        out.push(cmd);
    }
    out
}

/// A reply with the parts that legitimately differ masked.
pub fn normalise(cmd: &str, text: &str) -> String {
    let mut out = Vec::new();
    let verb = cmd.split_whitespace().next().unwrap_or("");
    let long_show = verb == "param.show" && !cmd.contains(" -j") && {
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        args.contains(&"-l") || args.iter().any(|a| !a.starts_with('-') && *a != "changed")
    };
    let mut in_doc = false;
    let mut in_builtin = false;
    let text = if verb == "help" {
        without_extensions(text)
    } else {
        text.to_string()
    };
    for (i, l) in text.lines().enumerate() {
        if let Some(m) = masked(verb, cmd, i, l, &mut in_builtin) {
            if !m.is_empty() {
                out.push(m);
            }
            continue;
        }
        if long_show {
            // Keep the name, value, default and bounds lines of each
            // parameter; drop its description.
            if !l.starts_with(' ') && !l.is_empty() {
                in_doc = false;
            } else if l.is_empty() {
                in_doc = true;
                continue;
            }
            if in_doc {
                continue;
            }
        }
        out.push(mask_numbers(l));
    }
    out.join("\n")
}

/// Lacquer's own commands, and varnishd's two debug commands for its
/// worker-thread pools that Lacquer does not have (DEVIATIONS.md): left
/// out of `help` replies, as lines of the plain list and as objects of
/// `help -j`.
const EXTENSIONS: &[&str] = &[
    "tls.cert.",
    "wasm.update",
    "debug.reqpool.fail",
    "debug.shutdown.delay",
];

fn without_extensions(text: &str) -> String {
    let ours = |l: &str| {
        let l = l.trim_start().trim_start_matches("\"request\": \"");
        EXTENSIONS.iter().any(|e| l.starts_with(e))
    };
    if text.starts_with('[') {
        // JSON: objects start with a line `  {`; drop those naming ours.
        let body = text.trim_end().trim_end_matches(']').trim_end();
        let mut out = String::new();
        let mut parts = body.split(",\n  {\n");
        out.push_str(parts.next().unwrap_or(""));
        for p in parts {
            if !p.lines().next().is_some_and(ours) {
                out.push_str(",\n  {\n");
                out.push_str(p);
            }
        }
        out.push_str("\n]\n");
        return out;
    }
    text.lines()
        .filter(|l| !ours(l))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The masked form of line `i` of a reply to `cmd` where the two daemons
/// legitimately differ (`Some("")` drops the line), else `None`.
fn masked(verb: &str, cmd: &str, i: usize, l: &str, in_builtin: &mut bool) -> Option<String> {
    let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
    match verb {
        "ping" if l.starts_with("PONG ") => Some("PONG <time> 1.0".to_string()),
        "pid" => Some(
            l.chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .collect(),
        ),
        "debug.listen_address" => {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() == 3).then(|| format!("{} {} <port>", f[0], f[1]))
        }
        "backend.list" => l
            .find(", ")
            .filter(|p| *p >= 3 && l.ends_with(" GMT"))
            .map(|p| format!("{}<date>", &l[..p - 3])),
        "help" if args.contains(&"-j") => l
            .trim_start()
            .starts_with("\"help\": ")
            .then(|| "    \"help\": <prose>,".to_string()),
        "help" if args.first().is_some_and(|a| !a.starts_with('-')) && i == 1 => {
            Some("<prose>".to_string())
        }
        "banner" | "auth" if (1..=4).contains(&i) && !l.starts_with("---") => {
            Some("<identity>".to_string())
        }
        "param.show" | "param.set" if args.contains(&"-j") => l
            .trim_start()
            .starts_with("\"description\": ")
            .then(|| "    \"description\": <prose>,".to_string()),
        "vcl.show" if l.starts_with("// VCL.SHOW ") => {
            let f: Vec<&str> = l.splitn(5, ' ').collect();
            let file = f.get(4).copied().unwrap_or("");
            *in_builtin = file == "<builtin>";
            if *in_builtin {
                return Some(format!("// VCL.SHOW {} <len> <builtin>", f[2]));
            }
            let file = file
                .replace("/varnishd/", "/<daemon>/")
                .replace("/lacquerd/", "/<daemon>/");
            Some(format!("// VCL.SHOW {} {} {file}", f[2], f[3]))
        }
        "vcl.show" if *in_builtin => Some(String::new()),
        _ => None,
    }
}

/// Masks Unix timestamps (`1795845346.213`, `1795845346.213456`).
fn mask_numbers(l: &str) -> String {
    let b = l.as_bytes();
    let mut out = String::with_capacity(l.len());
    let mut i = 0;
    while i < b.len() {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i - start == 10 && b.get(i) == Some(&b'.') {
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j > i + 1 {
                out.push_str("<time>");
                i = j;
                continue;
            }
        }
        if i > start {
            out.push_str(&l[start..i]);
        } else {
            out.push(l[i..].chars().next().unwrap_or(' '));
            i += l[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

/// The replies of one daemon to a script, normalised, one entry a
/// command: `status` then the text.
pub fn replies(d: &mut Daemon, cmds: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for c in cmds {
        let (st, text) = d.cli(c)?;
        out.push(format!("{st}\n{}", normalise(c, &text)));
    }
    Ok(out)
}

/// The commands whose replies differ: (command, varnishd's, lacquerd's).
pub fn differences(cmds: &[String], v: &[String], l: &[String]) -> Vec<(String, String, String)> {
    cmds.iter()
        .zip(v.iter().zip(l))
        .filter(|(_, (a, b))| a != b)
        .map(|(c, (a, b))| (c.clone(), a.clone(), b.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_split_into_commands() {
        let c = commands("# note\nping\n\nvcl.inline x << EOF\nvcl 4.1;\nEOF\nvcl.list\n");
        assert_eq!(
            c,
            ["ping", "vcl.inline x << EOF\nvcl 4.1;\nEOF", "vcl.list"]
        );
    }

    #[test]
    fn param_show_keeps_the_value_lines() {
        let t = "gzip_level\n        Value is: 6 (default)\n        Minimum is: 0\n\n        Gzip level.\n\n";
        assert_eq!(
            normalise("param.show gzip_level", t),
            "gzip_level\n        Value is: 6 (default)\n        Minimum is: 0"
        );
        assert_eq!(normalise("param.show", "a  1\nb  2\n"), "a  1\nb  2");
    }

    #[test]
    fn daemon_specific_lines_are_masked() {
        assert_eq!(normalise("ping", "PONG 1795845346 1.0"), "PONG <time> 1.0");
        assert_eq!(
            normalise("debug.listen_address", "a0 127.0.0.1 37573\n"),
            "a0 127.0.0.1 <port>"
        );
        assert_eq!(
            normalise(
                "backend.list",
                "boot.default   healthy    0/0      healthy    Sat, 28 Nov 2026 18:12:34 GMT"
            ),
            "boot.default   healthy    0/0      healthy    <date>"
        );
        assert_eq!(
            normalise("help ping", "ping [-j]\nKeep alive.\n"),
            "ping [-j]\n<prose>"
        );
        assert_eq!(
            normalise(
                "vcl.show -v boot",
                "// VCL.SHOW 0 9 /tmp/x/lacquerd/boot.vcl\nvcl 4.1;\n// VCL.SHOW 1 99 <builtin>\nsub x {}\n"
            ),
            "// VCL.SHOW 0 9 /tmp/x/<daemon>/boot.vcl\nvcl 4.1;\n// VCL.SHOW 1 <len> <builtin>"
        );
    }

    #[test]
    fn lacquer_extensions_leave_help() {
        assert_eq!(
            normalise("help", "ping\ntls.cert.list\nwasm.update x\nquit\n"),
            "ping\nquit"
        );
        let j = "[ 2, [\"help\", \"-j\"], 1.0,\n  {\n    \"request\": \"ping\"\n  },\n  {\n    \"request\": \"tls.cert.list\"\n  }\n]\n";
        assert_eq!(
            without_extensions(j),
            "[ 2, [\"help\", \"-j\"], 1.0,\n  {\n    \"request\": \"ping\"\n  }\n]\n"
        );
    }

    #[test]
    fn timestamps_are_masked() {
        assert_eq!(
            mask_numbers("[ 2, [\"ban.list\"], 1795845346.213,"),
            "[ 2, [\"ban.list\"], <time>,"
        );
        assert_eq!(mask_numbers("12 1.5 x"), "12 1.5 x");
    }
}
