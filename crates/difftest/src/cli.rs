//! Comparing management-CLI replies: a script of CLI commands (one a
//! line, `#` comments, `vcl.inline` here-documents allowed) is sent to
//! varnishd and to lacquerd, and each reply's status code and text are
//! compared after normalising what legitimately differs: timestamps, the
//! daemon's own VCL and backend names and ports, and the prose
//! descriptions under `param.show` (Lacquer's parameter descriptions are
//! its own words; the value, default and bounds lines above them are
//! compared). Scripts live in `tests/diff/cli/`.

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
    for l in text.lines() {
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
    fn timestamps_are_masked() {
        assert_eq!(
            mask_numbers("[ 2, [\"ban.list\"], 1795845346.213,"),
            "[ 2, [\"ban.list\"], <time>,"
        );
        assert_eq!(mask_numbers("12 1.5 x"), "12 1.5 x");
    }
}
