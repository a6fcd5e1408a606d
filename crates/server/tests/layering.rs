//! The server crate's layering, checked on its source tree: every folder
//! under `src/` is a group (ARCHITECTURE.md, "Layering of `server`"), a
//! group may name through `crate::` only the groups below it in
//! [`LAYERS`], and the groups' dependencies form no circle. A `use
//! crate::…` that goes up, or a new folder nobody placed in the layers,
//! fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each group with the groups it may use. Higher groups come first; each
/// may use only groups listed after it.
const LAYERS: &[(&str, &[&str])] = &[
    ("mgt", &["client", "fetch", "runtime", "backend", "esi"]),
    ("client", &["fetch", "runtime", "backend", "esi"]),
    ("fetch", &["runtime", "backend", "esi"]),
    ("runtime", &["backend", "esi"]),
    ("backend", &[]),
    ("esi", &[]),
];

/// One `crate::` path in a file of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Use {
    file: String,
    line: usize,
    from: String,
    to: String,
}

/// The text of a Rust source with comments and the contents of string and
/// character literals blanked (line structure kept), so paths named in
/// docs, comments and strings do not count as uses.
fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    // Copies the newlines of b[from..to], drops everything else.
    let blank = |out: &mut String, from: usize, to: usize| {
        for &c in &b[from..to] {
            if c == b'\n' {
                out.push('\n');
            }
        }
    };
    let ident_before = |i: usize| i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let start = i;
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            blank(&mut out, start, i.min(b.len()));
        } else if c == b'r' && !ident_before(i) && matches!(b.get(i + 1), Some(b'"' | b'#')) {
            // A raw string: r"..." or r#"..."#.
            let hashes = b[i + 1..].iter().take_while(|&&h| h == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = i + 2 + hashes;
            let end = b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| body + p + close.len());
            out.push_str("r\"\"");
            blank(&mut out, body, end);
            i = end;
        } else if c == b'"' {
            let start = i + 1;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, start, i.min(b.len()));
            out.push_str("\"\"");
            i += 1;
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\'', '\u{..}') or a lifetime.
            if b.get(i + 1) == Some(&b'\\') {
                let end = b[i + 2..]
                    .iter()
                    .position(|&q| q == b'\'')
                    .map_or(b.len(), |p| i + 2 + p + 1);
                out.push_str("' '");
                i = end;
            } else if b.get(i + 2) == Some(&b'\'') {
                out.push_str("' '");
                i += 3;
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            // Source is UTF-8; copy whole characters.
            let ch = src[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The first path segments after `crate::` in `code`, with their line
/// numbers: `crate::a::b` gives `a`; `crate::{a::x, b}` gives `a` and `b`.
fn crate_roots(code: &str) -> Vec<(usize, String)> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().next_back();
            let after = &rest[at + "crate::".len()..];
            rest = after;
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue; // `foo_crate::`, `$crate::` is not ours either
            }
            if let Some(group) = after.strip_prefix('{') {
                // One level of braces: each item's first segment.
                let inner = group.split('}').next().unwrap_or("");
                for item in inner.split(',') {
                    let name = ident(item.trim());
                    if !name.is_empty() {
                        out.push((n + 1, name));
                    }
                }
            } else {
                let name = ident(after);
                if !name.is_empty() {
                    out.push((n + 1, name));
                }
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source tree as (path under `src/`, text).
fn sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&src)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            (rel, text)
        })
        .collect()
}

/// Every `crate::` use from one group to another, macros exported at the
/// crate root (`#[macro_export]`) counted as uses of the group defining
/// them.
fn cross_group_uses(files: &[(String, String)]) -> Vec<Use> {
    let mut macro_home = BTreeMap::new();
    for (rel, text) in files {
        let Some((group, _)) = rel.split_once('/') else {
            continue;
        };
        let mut lines = text.lines();
        while let Some(l) = lines.next() {
            if l.trim() == "#[macro_export]"
                && let Some(def) = lines.next()
                && let Some(name) = def.trim().strip_prefix("macro_rules! ")
            {
                let name = name.trim_end_matches(" {").to_string();
                macro_home.insert(name, group.to_string());
            }
        }
    }
    let mut uses = Vec::new();
    for (rel, text) in files {
        let Some((group, _)) = rel.split_once('/') else {
            continue;
        };
        for (line, root) in crate_roots(&strip_comments(text)) {
            let to = macro_home.get(&root).cloned().unwrap_or(root);
            if to != group {
                uses.push(Use {
                    file: rel.clone(),
                    line,
                    from: group.to_string(),
                    to,
                });
            }
        }
    }
    uses
}

/// The uses [`LAYERS`] does not allow.
fn violations(uses: &[Use]) -> Vec<String> {
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    uses.iter()
        .filter(|u| {
            !allowed
                .get(u.from.as_str())
                .is_some_and(|may| may.contains(&u.to.as_str()))
        })
        .map(|u| {
            format!(
                "src/{}:{}: group `{}` uses `crate::{}`, which ARCHITECTURE.md's layering does not allow",
                u.file, u.line, u.from, u.to
            )
        })
        .collect()
}

/// A circle in the graph of groups, if there is one.
fn group_cycle(uses: &[Use]) -> Option<Vec<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for u in uses {
        graph.entry(&u.from).or_default().insert(&u.to);
        graph.entry(&u.to).or_default();
    }
    // Depth-first search with colours: 1 on the path, 2 done.
    fn visit<'a>(
        n: &'a str,
        graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        colour: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        colour.insert(n, 1);
        path.push(n);
        for &m in &graph[n] {
            match colour.get(m) {
                Some(1) => {
                    let at = path.iter().position(|&p| p == m).expect("on the path");
                    let mut circle: Vec<String> =
                        path[at..].iter().map(|s| s.to_string()).collect();
                    circle.push(m.to_string());
                    return Some(circle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, graph, colour, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        colour.insert(n, 2);
        None
    }
    let mut colour = BTreeMap::new();
    for &n in graph.keys() {
        if !colour.contains_key(n)
            && let Some(c) = visit(n, &graph, &mut colour, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn every_folder_is_a_placed_group_and_only_lib_rs_is_outside() {
    let files = sources();
    let known: BTreeSet<&str> = LAYERS.iter().map(|(g, _)| *g).collect();
    for (rel, _) in &files {
        match rel.split_once('/') {
            None => assert_eq!(
                rel, "lib.rs",
                "src/{rel}: modules live in a group folder (see ARCHITECTURE.md, \"Layering of `server`\")"
            ),
            Some((group, _)) => assert!(
                known.contains(group),
                "src/{rel}: folder `{group}` is not in the layers of tests/layering.rs; \
                 place it there and in ARCHITECTURE.md"
            ),
        }
    }
    let present: BTreeSet<&str> = files
        .iter()
        .filter_map(|(rel, _)| rel.split_once('/').map(|(g, _)| g))
        .collect();
    assert_eq!(
        present, known,
        "the layers name exactly the folders of src/"
    );
}

#[test]
fn crate_paths_only_go_down_the_layers() {
    let uses = cross_group_uses(&sources());
    assert!(
        !uses.is_empty(),
        "the scan found no uses between groups at all"
    );
    let bad = violations(&uses);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn no_import_circle_spans_two_groups() {
    let uses = cross_group_uses(&sources());
    if let Some(c) = group_cycle(&uses) {
        panic!(
            "the groups depend on each other in a circle: {}",
            c.join(" -> ")
        );
    }
}

#[test]
fn the_checks_see_what_they_must() {
    let files = vec![
        (
            "client/a.rs".to_string(),
            "use crate::mgt::daemon;\n// crate::mgt in a comment\nlet s = (\"/* crate::x */\", '\"', r#\"\"crate::y\"#);\nuse crate::{runtime::msg, esi};\n".to_string(),
        ),
        (
            "runtime/b.rs".to_string(),
            "#[macro_export]\nmacro_rules! m {\n() => {};\n}\n/* crate::client */ use crate::client::c;\n"
                .to_string(),
        ),
        ("esi/c.rs".to_string(), "use crate::m;\n".to_string()),
    ];
    let uses = cross_group_uses(&files);
    let pairs: Vec<(&str, &str, usize)> = uses
        .iter()
        .map(|u| (u.from.as_str(), u.to.as_str(), u.line))
        .collect();
    assert_eq!(
        pairs,
        [
            ("client", "mgt", 1),
            ("client", "runtime", 4),
            ("client", "esi", 4),
            ("runtime", "client", 5),
            ("esi", "runtime", 1),
        ]
    );
    let bad = violations(&uses);
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad[0].starts_with("src/client/a.rs:1: group `client` uses `crate::mgt`"));
    assert!(bad[1].starts_with("src/runtime/b.rs:5: group `runtime` uses `crate::client`"));
    assert!(bad[2].starts_with("src/esi/c.rs:1: group `esi` uses `crate::runtime`"));
    assert_eq!(
        group_cycle(&uses),
        Some(
            ["client", "esi", "runtime", "client"]
                .map(String::from)
                .to_vec()
        )
    );
    assert_eq!(group_cycle(&uses[..1]), None);
}
