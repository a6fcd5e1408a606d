//! Token-level `include` expansion, as vcc does it (vcc_source.c).
//!
//! Every file is lexed on its own; wherever the identifier `include` appears
//! (at any position, even inside a subroutine) it must be followed by optional
//! `+glob`, a string and `;`, and those tokens are replaced by the tokens of
//! the named file. Names starting with `./` are relative to the including
//! file (which must then have an absolute name); other relative names are
//! searched in `vcl_path`. Recursive inclusion is an error. The result is one
//! flat token stream whose spans point into the files they came from.

use std::io;
use std::path::Path;

use crate::diag::{Diagnostic, Diagnostics};
use crate::lexer::{self, Punct, TokKind, Token};
use crate::source::{FileId, FileKind, SourceMap, Span};

/// Reads included files; tests and embedders can supply their own.
pub trait SourceLoader {
    /// Reads a whole file.
    fn read(&self, path: &str) -> io::Result<Vec<u8>>;
    /// Expands a glob(3)-style pattern into a sorted list of paths.
    fn glob(&self, pattern: &str) -> io::Result<Vec<String>>;
}

/// Loads files from the local file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsLoader;

impl SourceLoader for FsLoader {
    /// vcc reads regular files only (VFIL_readfile): for a directory or a
    /// device such as `/dev/null` it fails with errno left at 0, so its
    /// message reads `Cannot read file '/dev/null' (Success)`; the error
    /// here carries the same reason text.
    fn read(&self, path: &str) -> io::Result<Vec<u8>> {
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            return Err(io::Error::other("Success"));
        }
        std::fs::read(path)
    }

    fn glob(&self, pattern: &str) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        let (root, rest) = match pattern.strip_prefix('/') {
            Some(r) => ("/".to_string(), r),
            None => (String::new(), pattern),
        };
        let comps: Vec<&str> = rest.split('/').filter(|c| !c.is_empty()).collect();
        glob_walk(&root, &comps, &mut out)?;
        out.sort();
        Ok(out)
    }
}

fn glob_walk(base: &str, comps: &[&str], out: &mut Vec<String>) -> io::Result<()> {
    let Some((first, rest)) = comps.split_first() else {
        if !base.is_empty() && Path::new(base).is_file() {
            out.push(base.to_string());
        }
        return Ok(());
    };
    let join = |name: &str| {
        if base.is_empty() {
            name.to_string()
        } else if base.ends_with('/') {
            format!("{base}{name}")
        } else {
            format!("{base}/{name}")
        }
    };
    if !first.contains(['*', '?', '[']) {
        let p = join(first);
        if Path::new(&p).exists() {
            glob_walk(&p, rest, out)?;
        }
        return Ok(());
    }
    let dir = if base.is_empty() { "." } else { base };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') || first.starts_with('.'))
        .filter(|n| glob_match(first.as_bytes(), n.as_bytes()))
        .collect();
    names.sort();
    for n in names {
        glob_walk(&join(&n), rest, out)?;
    }
    Ok(())
}

/// fnmatch(3)-like matching of one path component: `*`, `?`, `[...]`
/// (with `!`/`^` negation and ranges). Iterative, linear in practice.
pub fn glob_match(pat: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pat.len() {
            match pat[p] {
                b'*' => {
                    star = Some((p, n));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    n += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class_match(pat, p, name[n]) {
                        if matched {
                            p = next;
                            n += 1;
                            continue;
                        }
                    } else if name[n] == b'[' {
                        p += 1;
                        n += 1;
                        continue;
                    }
                }
                c => {
                    if c == name[n] {
                        p += 1;
                        n += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, sn)) => {
                p = sp + 1;
                n = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    while p < pat.len() && pat[p] == b'*' {
        p += 1;
    }
    p == pat.len()
}

/// Matches `c` against the bracket expression starting at `pat[start]`
/// (`[`). Returns whether it matched and the index after `]`, or `None`
/// for an unterminated bracket (then `[` is literal).
fn class_match(pat: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let neg = matches!(pat.get(i), Some(b'!') | Some(b'^'));
    if neg {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < pat.len() {
        if pat[i] == b']' && !first {
            return Some((matched != neg, i + 1));
        }
        first = false;
        if i + 2 < pat.len() && pat[i + 1] == b'-' && pat[i + 2] != b']' {
            if pat[i] <= c && c <= pat[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if pat[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    None
}

/// Settings for include resolution.
pub struct IncludeConfig<'a> {
    /// Directories searched for relative include names (vcl_path).
    pub vcl_path: &'a [String],
    /// When false, names containing `/` are refused (vcc_unsafe_path off).
    pub unsafe_path: bool,
    pub loader: &'a dyn SourceLoader,
}

/// Includes nested deeper than this are refused (a guard against
/// pathological chains of distinct files; loops are caught separately).
pub const MAX_INCLUDE_DEPTH: usize = 64;

/// The expanded token stream of a compilation.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    /// Tokens in order; the last one is always [`TokKind::Eoi`].
    pub toks: Vec<Token>,
    /// Decoded BLOB literals, indexed by [`TokKind::CBlob`].
    pub blobs: Vec<Vec<u8>>,
}

struct Expander<'a, 'c> {
    sm: &'a mut SourceMap,
    cfg: &'a IncludeConfig<'c>,
    out: Stream,
    diags: Diagnostics,
}

/// One level of the include chain: the file and the string token of the
/// `include` that pulled it in.
#[derive(Clone, Copy)]
struct Level {
    file: FileId,
    via: Option<Span>,
}

/// Lexes `files` in order (the main file, then optionally the built-in VCL)
/// and expands their includes into one stream ending with an end-of-input
/// token. Stops at the first error, like vcc.
pub fn expand(
    sm: &mut SourceMap,
    files: &[FileId],
    cfg: &IncludeConfig<'_>,
) -> (Stream, Diagnostics) {
    let mut ex = Expander {
        sm,
        cfg,
        out: Stream::default(),
        diags: Diagnostics::new(),
    };
    for &f in files {
        let mut chain = vec![Level { file: f, via: None }];
        if ex.file(&mut chain).is_err() {
            break;
        }
    }
    let eoi = match files.last() {
        Some(&f) => {
            let len = ex.sm.file(f).text().len() as u32;
            Span::new(f, len, len)
        }
        None => Span::new(FileId(0), 0, 0),
    };
    ex.out.toks.push(Token {
        kind: TokKind::Eoi,
        span: eoi,
    });
    (ex.out, ex.diags)
}

impl Expander<'_, '_> {
    /// Adds "included from" context for an error in the innermost file of
    /// `chain` (vcc prints each include site, separated by "Which was
    /// included from:").
    fn with_context(&self, mut d: Diagnostic, chain: &[Level], skip_first: bool) -> Diagnostic {
        let mut first = true;
        for lvl in chain.iter().rev() {
            let Some(via) = lvl.via else { break };
            if first && skip_first {
                first = false;
                continue;
            }
            let msg = if first {
                ""
            } else {
                "Which was included from:"
            };
            first = false;
            d.notes.push(crate::diag::Note {
                message: msg.into(),
                span: Some(via),
            });
        }
        d
    }

    fn fail(&mut self, d: Diagnostic, chain: &[Level], skip_first: bool) -> Result<(), ()> {
        let d = self.with_context(d, chain, skip_first);
        self.diags.push(d);
        Err(())
    }

    fn file(&mut self, chain: &mut Vec<Level>) -> Result<(), ()> {
        let file = chain.last().expect("include chain is never empty").file;
        let (toks, err) = {
            let text = self.sm.file(file).text();
            lexer::lex(file, text)
        };
        if let Some(d) = err {
            return self.fail(d, chain, false);
        }
        let base = self.out.blobs.len() as u32;
        self.out.blobs.extend(toks.blobs);
        let list = toks.toks;
        self.out.toks.reserve(list.len() + 1);
        let eof = {
            let len = self.sm.file(file).text().len() as u32;
            Token {
                kind: TokKind::Eoi,
                span: Span::new(file, len, len),
            }
        };
        let at = |i: usize| list.get(i).copied().unwrap_or(eof);
        let mut i = 0;
        while i < list.len() {
            let t = list[i];
            let is_include =
                t.kind == TokKind::Id && t.span.len() == 7 && self.sm.slice(t.span) == "include";
            if !is_include {
                let kind = match t.kind {
                    TokKind::CBlob(b) => TokKind::CBlob(b + base),
                    k => k,
                };
                self.out.toks.push(Token { kind, span: t.span });
                i += 1;
                continue;
            }
            // Flags: "+glob" (sign directly followed by the name).
            let mut j = i + 1;
            let mut glob = false;
            loop {
                let t1 = at(j);
                if !(t1.is(Punct::Plus) || t1.is(Punct::Minus)) {
                    break;
                }
                let t2 = at(j + 1);
                if t2.span.start != t1.span.end || t2.kind != TokKind::Id {
                    return self.fail(
                        Diagnostic::error("Expected a flag at:", t1.span),
                        chain,
                        false,
                    );
                }
                if self.sm.slice(t2.span) == "glob" {
                    glob = t1.is(Punct::Plus);
                } else {
                    return self.fail(
                        Diagnostic::error("Unknown include flag:", t2.span),
                        chain,
                        false,
                    );
                }
                j += 2;
            }
            let name_tok = at(j);
            let TokKind::CStr(_) = name_tok.kind else {
                return self.fail(
                    Diagnostic::error("include not followed by string constant.", name_tok.span),
                    chain,
                    false,
                );
            };
            if !at(j + 1).is(Punct::Semi) {
                return self.fail(
                    Diagnostic::error("include <string> not followed by semicolon.", name_tok.span),
                    chain,
                    false,
                );
            }
            let mut filename = lexer::str_value(self.sm.file(file).text(), &name_tok);
            if let Some(rest) = filename.strip_prefix("./") {
                let parent = self.sm.file(file).name();
                if !parent.starts_with('/') {
                    return self.fail(
                        Diagnostic::error(
                            "include \"./xxxxx\"; needs absolute filename of including file.",
                            name_tok.span,
                        ),
                        chain,
                        false,
                    );
                }
                let dir = &parent[..parent.rfind('/').unwrap_or(0)];
                filename = format!("{dir}/{rest}");
            }
            let names = if glob {
                match self.cfg.loader.glob(&filename) {
                    Ok(v) if !v.is_empty() => v,
                    Ok(_) => {
                        return self.fail(
                            Diagnostic::error("glob pattern matched no files.", name_tok.span),
                            chain,
                            false,
                        );
                    }
                    Err(e) => {
                        return self.fail(
                            Diagnostic::error(
                                format!("glob(3) expansion failed ({e})"),
                                name_tok.span,
                            ),
                            chain,
                            false,
                        );
                    }
                }
            } else {
                vec![filename]
            };
            for name in names {
                self.include_one(chain, &name, name_tok.span)?;
            }
            i = j + 2;
        }
        Ok(())
    }

    fn include_one(&mut self, chain: &mut Vec<Level>, name: &str, via: Span) -> Result<(), ()> {
        if !self.cfg.unsafe_path && name.contains('/') {
            return self.fail(
                Diagnostic::error(format!("VCL filename '{name}' is unsafe."), via),
                chain,
                false,
            );
        }
        let (path, bytes) = match self.find(name) {
            Ok(v) => v,
            Err((path, e)) => {
                return self.fail(
                    Diagnostic::error(
                        format!("Cannot read file '{path}' ({})", io_reason(&e)),
                        via,
                    ),
                    chain,
                    false,
                );
            }
        };
        for lvl in chain.iter() {
            if self.sm.file(lvl.file).name() == path {
                return self.fail(
                    Diagnostic::error(format!("Recursive use of '{path}' at:"), via),
                    chain,
                    false,
                );
            }
        }
        if chain.len() > MAX_INCLUDE_DEPTH {
            return self.fail(
                Diagnostic::error(
                    format!("Includes nested deeper than {MAX_INCLUDE_DEPTH} levels at:"),
                    via,
                ),
                chain,
                false,
            );
        }
        let id = match self.sm.add_bytes(path.clone(), &bytes, FileKind::Included) {
            Ok(id) => id,
            Err(bad) => {
                chain.push(Level {
                    file: bad.file,
                    via: Some(via),
                });
                let d = invalid_utf8(bad.file, bad.offset, self.sm);
                let r = self.fail(d, chain, false);
                chain.pop();
                return r;
            }
        };
        chain.push(Level {
            file: id,
            via: Some(via),
        });
        let r = self.file(chain);
        chain.pop();
        r
    }

    /// Finds and reads an include file: absolute names directly, relative
    /// names in each `vcl_path` directory (or the working directory when no
    /// path is configured). Returns the path used.
    fn find(&self, name: &str) -> Result<(String, Vec<u8>), (String, io::Error)> {
        if name.starts_with('/') || self.cfg.vcl_path.is_empty() {
            return match self.cfg.loader.read(name) {
                Ok(b) => Ok((name.to_string(), b)),
                Err(e) => Err((name.to_string(), e)),
            };
        }
        let mut last = None;
        for dir in self.cfg.vcl_path {
            let p = if dir.ends_with('/') {
                format!("{dir}{name}")
            } else {
                format!("{dir}/{name}")
            };
            match self.cfg.loader.read(&p) {
                Ok(b) => return Ok((p, b)),
                Err(e) => last = Some(e),
            }
        }
        // As vcc: a name searched for is reported as it was written.
        Err((name.to_string(), last.expect("vcl_path is not empty")))
    }
}

/// The diagnostic for a source file that is not valid UTF-8.
pub fn invalid_utf8(file: FileId, offset: u32, sm: &SourceMap) -> Diagnostic {
    let text = sm.file(file).text();
    let mut end = offset as usize + 1;
    while end < text.len() && !text.is_char_boundary(end) {
        end += 1;
    }
    let end = end.min(text.len()) as u32;
    Diagnostic::error(
        "Syntax error at\n(the file is not valid UTF-8; VCL source must be UTF-8 text)",
        Span::new(file, offset, end.max(offset)),
    )
}

/// strerror-like text for an I/O error.
/// The `strerror` text varnishd prints in `Cannot read file` messages.
pub fn io_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "No such file or directory".into(),
        io::ErrorKind::PermissionDenied => "Permission denied".into(),
        io::ErrorKind::IsADirectory => "Is a directory".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct MapLoader(HashMap<String, String>);

    impl SourceLoader for MapLoader {
        fn read(&self, path: &str) -> io::Result<Vec<u8>> {
            self.0
                .get(path)
                .map(|s| s.clone().into_bytes())
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
        fn glob(&self, pattern: &str) -> io::Result<Vec<String>> {
            let mut v: Vec<String> = self
                .0
                .keys()
                .filter(|k| glob_match(pattern.as_bytes(), k.as_bytes()))
                .cloned()
                .collect();
            v.sort();
            Ok(v)
        }
    }

    fn run(main: &str, files: &[(&str, &str)]) -> (SourceMap, Stream, Diagnostics) {
        let loader = MapLoader(
            files
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        );
        let mut sm = SourceMap::new();
        let f = sm.add("/etc/main.vcl", main, FileKind::Main);
        let cfg = IncludeConfig {
            vcl_path: &[],
            unsafe_path: true,
            loader: &loader,
        };
        let (s, d) = expand(&mut sm, &[f], &cfg);
        (sm, s, d)
    }

    fn texts(sm: &SourceMap, s: &Stream) -> Vec<String> {
        s.toks
            .iter()
            .map(|t| sm.slice(t.span).to_string())
            .collect()
    }

    #[test]
    fn expands_at_token_level() {
        let (sm, s, d) = run(
            "a include \"/x.vcl\"; b",
            &[("/x.vcl", "c include \"./y.vcl\"; d"), ("/y.vcl", "e")],
        );
        assert!(d.is_empty(), "{}", d.render(&sm));
        assert_eq!(texts(&sm, &s), vec!["a", "c", "e", "d", "b", ""]);
        assert_eq!(sm.file(s.toks[2].span.file).name(), "/y.vcl");
    }

    #[test]
    fn glob_includes_sorted() {
        let (sm, s, d) = run(
            "include +glob \"/s_*.vcl\";",
            &[("/s_b.vcl", "b"), ("/s_a.vcl", "a"), ("/t.vcl", "t")],
        );
        assert!(d.is_empty());
        assert_eq!(texts(&sm, &s), vec!["a", "b", ""]);
        let (_, _, d) = run("include +glob \"/q*.vcl\";", &[]);
        assert_eq!(
            d.iter().next().unwrap().message,
            "glob pattern matched no files."
        );
    }

    #[test]
    fn include_errors() {
        let msg = |main: &str, files: &[(&str, &str)]| {
            let (_, _, d) = run(main, files);
            d.iter().next().expect("error").message.clone()
        };
        assert_eq!(
            msg("include;", &[]),
            "include not followed by string constant."
        );
        assert_eq!(
            msg("include", &[]),
            "include not followed by string constant."
        );
        assert_eq!(
            msg("include \"/a\" x", &[]),
            "include <string> not followed by semicolon."
        );
        assert_eq!(
            msg("include \"/nope.vcl\";", &[]),
            "Cannot read file '/nope.vcl' (No such file or directory)"
        );
        assert_eq!(
            msg("include \"/a.vcl\";", &[("/a.vcl", "include \"/a.vcl\";")]),
            "Recursive use of '/a.vcl' at:"
        );
        assert_eq!(msg("include +foo \"/a\";", &[]), "Unknown include flag:");
        assert_eq!(msg("include + glob \"/a\";", &[]), "Expected a flag at:");
    }

    #[test]
    fn errors_in_included_files_name_both_files() {
        let (sm, _, d) = run(
            "sub x {}\ninclude \"/a.vcl\";",
            &[
                ("/a.vcl", "include \"/b.vcl\";"),
                ("/b.vcl", "\"unterminated"),
            ],
        );
        let r = d.render(&sm);
        assert!(
            r.starts_with("Unterminated string, starting at\n('/b.vcl' Line 1 Pos 1)"),
            "{r}"
        );
        assert!(r.contains("('/a.vcl' Line 1 Pos 9)"), "{r}");
        assert!(
            r.contains("Which was included from:\n('/etc/main.vcl' Line 2 Pos 9)"),
            "{r}"
        );
    }

    #[test]
    fn relative_include_needs_absolute_parent() {
        let loader = MapLoader(HashMap::new());
        let mut sm = SourceMap::new();
        let f = sm.add("<vcl.inline>", "include \"./x.vcl\";", FileKind::Main);
        let cfg = IncludeConfig {
            vcl_path: &[],
            unsafe_path: true,
            loader: &loader,
        };
        let (_, d) = expand(&mut sm, &[f], &cfg);
        assert!(
            d.iter()
                .next()
                .unwrap()
                .message
                .contains("needs absolute filename")
        );
    }

    #[test]
    fn unsafe_path_and_search_path() {
        let loader = MapLoader(
            [("/etc/v/a.vcl".to_string(), "a".to_string())]
                .into_iter()
                .collect(),
        );
        let mut sm = SourceMap::new();
        let f = sm.add(
            "<vcl.inline>",
            "include \"a.vcl\"; include \"/etc/v/a.vcl\";",
            FileKind::Main,
        );
        let path = vec!["/tmp".to_string(), "/etc/v".to_string()];
        let cfg = IncludeConfig {
            vcl_path: &path,
            unsafe_path: false,
            loader: &loader,
        };
        let (_, d) = expand(&mut sm, &[f], &cfg);
        assert_eq!(
            d.iter().next().unwrap().message,
            "VCL filename '/etc/v/a.vcl' is unsafe."
        );
        assert_eq!(sm.file(FileId(1)).name(), "/etc/v/a.vcl");
    }

    #[test]
    fn files_that_are_not_regular_are_refused_as_vcc_does() {
        let dir = std::env::temp_dir();
        let dir = dir.to_str().unwrap();
        let mut sm = SourceMap::new();
        for (path, want) in [
            (
                "/dev/null",
                "Cannot read file '/dev/null' (Success)".to_string(),
            ),
            (dir, format!("Cannot read file '{dir}' (Success)")),
        ] {
            let f = sm.add(
                "<vcl.inline>",
                format!("include \"{path}\";"),
                FileKind::Main,
            );
            let cfg = IncludeConfig {
                vcl_path: &[],
                unsafe_path: true,
                loader: &FsLoader,
            };
            let (_, d) = expand(&mut sm, &[f], &cfg);
            assert_eq!(d.iter().next().unwrap().message, want);
        }
    }

    #[test]
    fn relative_names_are_searched_along_vcl_path_only() {
        // "y.vcl" exists relative to the working directory, not in the path.
        let loader = MapLoader(
            [
                ("y.vcl".to_string(), "cwd".to_string()),
                ("/etc/v/z.vcl".to_string(), "path".to_string()),
            ]
            .into_iter()
            .collect(),
        );
        let mut sm = SourceMap::new();
        let f = sm.add("<vcl.inline>", "include \"z.vcl\";", FileKind::Main);
        let path = vec!["/tmp".to_string(), "/etc/v/".to_string()];
        let cfg = IncludeConfig {
            vcl_path: &path,
            unsafe_path: true,
            loader: &loader,
        };
        let (s, d) = expand(&mut sm, &[f], &cfg);
        assert!(d.is_empty(), "{}", d.render(&sm));
        assert_eq!(texts(&sm, &s), vec!["path", ""]);
        let g = sm.add("<vcl.inline>", "include \"y.vcl\";", FileKind::Main);
        let (_, d) = expand(&mut sm, &[g], &cfg);
        assert_eq!(
            d.iter().next().unwrap().message,
            "Cannot read file 'y.vcl' (No such file or directory)"
        );
    }

    #[test]
    fn file_system_loader_and_glob() {
        let dir = std::env::temp_dir().join(format!("lacquer-inc-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/b_2.vcl"), "two").unwrap();
        std::fs::write(dir.join("sub/b_1.vcl"), "one").unwrap();
        std::fs::write(dir.join("sub/c.txt"), "no").unwrap();
        let d = dir.to_string_lossy().into_owned();
        let found = FsLoader.glob(&format!("{d}/s*/b_*.vcl")).unwrap();
        assert_eq!(
            found,
            vec![format!("{d}/sub/b_1.vcl"), format!("{d}/sub/b_2.vcl")]
        );
        assert!(
            FsLoader
                .glob(&format!("{d}/nope/*.vcl"))
                .unwrap()
                .is_empty()
        );
        let mut sm = SourceMap::new();
        let main = format!("{d}/main.vcl");
        let f = sm.add(main, "x include +glob \"./sub/b_*.vcl\"; y", FileKind::Main);
        let cfg = IncludeConfig {
            vcl_path: &[],
            unsafe_path: true,
            loader: &FsLoader,
        };
        let (s, diags) = expand(&mut sm, &[f], &cfg);
        assert!(diags.is_empty(), "{}", diags.render(&sm));
        assert_eq!(texts(&sm, &s), vec!["x", "one", "two", "y", ""]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn glob_matching() {
        assert!(glob_match(b"sub_*.vcl", b"sub_foo.vcl"));
        assert!(!glob_match(b"sub_*.vcl", b"sub_foo.vc"));
        assert!(glob_match(b"a?c", b"abc"));
        assert!(glob_match(b"[a-c]x", b"bx"));
        assert!(!glob_match(b"[!a-c]x", b"bx"));
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"[x", b"[x"));
    }
}
