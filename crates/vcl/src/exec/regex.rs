//! Compiled VCL regular expressions, `~` matching and Varnish's
//! `regsub()` / `regsuball()` substitution semantics.
//!
//! Varnish uses PCRE2 without UTF mode: patterns and subjects are bytes. We
//! compile with the `regex` crate in byte mode (Unicode off, so `.` is any
//! byte and classes are ASCII) and fall back to Unicode mode, then to
//! `fancy-regex` for PCRE features the `regex` crate lacks (look-around,
//! back-references). The fallback engine works on text: a subject that is
//! not UTF-8 is matched in its lossy form.
//!
//! Substitution follows `VRT_regsub`: `\0`..`\9` insert capture groups
//! (missing groups insert nothing), a backslash before any other character
//! inserts that character, a trailing backslash is literal. `regsuball`
//! restarts matching on the remainder after each match, so `^` anchors at
//! every restart and, as PCRE's NOTEMPTY, later matches must be non-empty.

use std::borrow::Cow;

use regex_automata::Input;
use regex_automata::dfa::{Automaton, dense};

/// A compiled regular expression.
#[derive(Clone, Debug)]
pub struct Regex {
    source: Box<str>,
    engine: Engine,
    /// Set when the pattern is a plain literal with optional `^` / `$`
    /// anchors (`^/static/`, `\.css$`, `gzip`): matched without the engine.
    literal: Option<Literal>,
    /// A fully built DFA for `is_match` of anchored patterns that
    /// compile to a small one: no per-search cache or pool, several times
    /// faster than the meta engine. Substitutions still use `engine`.
    dfa: Option<dense::DFA<Vec<u32>>>,
}

/// Largest DFA (bytes) built for a pattern; bigger ones use the lazy DFA.
const DFA_SIZE_LIMIT: usize = 256 * 1024;

/// Builds a byte-oriented dense DFA for `pattern` within the size limit.
fn build_dfa(pattern: &str, unicode: bool) -> Option<dense::DFA<Vec<u32>>> {
    dense::Builder::new()
        .configure(
            dense::Config::new()
                .dfa_size_limit(Some(DFA_SIZE_LIMIT))
                .determinize_size_limit(Some(DFA_SIZE_LIMIT)),
        )
        .syntax(
            regex_automata::util::syntax::Config::new()
                .unicode(unicode)
                .utf8(false),
        )
        .thompson(regex_automata::nfa::thompson::Config::new().utf8(false))
        .build(pattern)
        .ok()
}

/// A pattern that is a literal byte string, possibly anchored.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Literal {
    bytes: Box<[u8]>,
    start: bool,
    end: bool,
}

impl Literal {
    /// Recognizes `^?literal$?` where the literal uses no metacharacters
    /// (punctuation may be backslash-escaped).
    fn parse(p: &str) -> Option<Literal> {
        let b = p.as_bytes();
        let start = b.first() == Some(&b'^');
        let mut i = usize::from(start);
        let mut end = false;
        let mut bytes = Vec::with_capacity(b.len());
        while i < b.len() {
            match b[i] {
                b'\\' => {
                    let n = *b.get(i + 1)?;
                    if !n.is_ascii_punctuation() {
                        return None;
                    }
                    bytes.push(n);
                    i += 2;
                }
                b'$' if i + 1 == b.len() => {
                    end = true;
                    i += 1;
                }
                b'.' | b'[' | b']' | b'(' | b')' | b'*' | b'+' | b'?' | b'{' | b'}' | b'|'
                | b'^' | b'$' => return None,
                c => {
                    bytes.push(c);
                    i += 1;
                }
            }
        }
        Some(Literal {
            bytes: bytes.into(),
            start,
            end,
        })
    }

    /// The first match of a non-empty literal, as a byte range.
    fn find(&self, h: &[u8]) -> Option<(usize, usize)> {
        let n = &self.bytes[..];
        let at = match (self.start, self.end) {
            (true, true) => (h == n).then_some(0),
            (true, false) => h.starts_with(n).then_some(0),
            (false, true) => h.ends_with(n).then(|| h.len() - n.len()),
            (false, false) => h.windows(n.len()).position(|w| w == n),
        }?;
        Some((at, at + n.len()))
    }

    fn is_match(&self, h: &[u8]) -> bool {
        let n = &self.bytes[..];
        match (self.start, self.end) {
            (true, true) => h == n,
            (true, false) => h.starts_with(n),
            (false, true) => h.ends_with(n),
            (false, false) => match n.len() {
                0 => true,
                1 => h.contains(&n[0]),
                len => h.windows(len).any(|w| w == n),
            },
        }
    }
}

#[derive(Clone, Debug)]
enum Engine {
    Bytes(regex::bytes::Regex),
    Fancy(fancy_regex::Regex),
}

/// A match: byte ranges of the groups (group 0 is the whole match).
struct Captures {
    groups: [Option<(usize, usize)>; 10],
}

impl Regex {
    /// Compiles a pattern; the error text is suitable for a VCL compile
    /// error ("Regexp compilation error: ...").
    pub fn new(pattern: &str) -> Result<Regex, String> {
        let mut unicode = false;
        let bytes = regex::bytes::RegexBuilder::new(pattern)
            .unicode(false)
            .build()
            .or_else(|_| {
                unicode = true;
                regex::bytes::RegexBuilder::new(pattern).build()
            });
        let mut dfa = None;
        let engine = match bytes {
            Ok(r) => {
                // Unanchored patterns keep the meta engine: its literal
                // prefilters (memchr, Teddy) beat a byte-at-a-time DFA scan
                // when nothing bounds the search (measured on User-Agent
                // alternations); anchored ones are faster on the DFA.
                if pattern.starts_with('^') || pattern.ends_with('$') {
                    dfa = build_dfa(pattern, unicode);
                }
                Engine::Bytes(r)
            }
            Err(first) => match fancy_regex::Regex::new(pattern) {
                Ok(r) => Engine::Fancy(r),
                Err(_) => return Err(first.to_string()),
            },
        };
        Ok(Regex {
            source: pattern.into(),
            engine,
            literal: Literal::parse(pattern),
            dfa,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern matches anywhere in `subject`. `Err` carries a
    /// matching failure (backtracking limit of the fallback engine), which
    /// Varnish logs and treats as no match.
    pub fn is_match(&self, subject: &[u8]) -> Result<bool, String> {
        if let Some(l) = &self.literal {
            return Ok(l.is_match(subject));
        }
        if let Some(dfa) = &self.dfa
            && let Ok(m) = dfa.try_search_fwd(&Input::new(subject).earliest(true))
        {
            return Ok(m.is_some());
        }
        match &self.engine {
            Engine::Bytes(r) => Ok(r.is_match(subject)),
            Engine::Fancy(r) => r
                .is_match(&String::from_utf8_lossy(subject))
                .map_err(|e| format!("Regexp matching returned {e}")),
        }
    }

    /// Finds the first match in `subject`; with `not_empty`, the first
    /// non-empty one. Capture groups other than 0 are only filled in when
    /// `groups_wanted` (the capturing search is several times slower).
    fn find(
        &self,
        subject: &[u8],
        not_empty: bool,
        groups_wanted: bool,
    ) -> Result<Option<Captures>, String> {
        let mut groups = [None; 10];
        // A non-empty literal has no groups and cannot match empty.
        if let Some(l) = self.literal.as_ref().filter(|l| !l.bytes.is_empty()) {
            groups[0] = l.find(subject);
            return Ok(groups[0].map(|_| Captures { groups }));
        }
        match &self.engine {
            Engine::Bytes(r) if !groups_wanted => {
                let mut at = 0;
                while at <= subject.len() {
                    let Some(m) = r.find_at(subject, at) else {
                        return Ok(None);
                    };
                    if not_empty && m.start() == m.end() {
                        at = m.end() + 1;
                        continue;
                    }
                    groups[0] = Some((m.start(), m.end()));
                    return Ok(Some(Captures { groups }));
                }
                Ok(None)
            }
            Engine::Bytes(r) => {
                let mut locs = r.capture_locations();
                let mut at = 0;
                loop {
                    if at > subject.len() {
                        return Ok(None);
                    }
                    let Some(m) = r.captures_read_at(&mut locs, subject, at) else {
                        return Ok(None);
                    };
                    if not_empty && m.start() == m.end() {
                        at = m.end() + 1;
                        continue;
                    }
                    for (i, g) in groups.iter_mut().enumerate() {
                        *g = locs.get(i);
                    }
                    return Ok(Some(Captures { groups }));
                }
            }
            Engine::Fancy(r) => {
                let text = match String::from_utf8_lossy(subject) {
                    Cow::Borrowed(t) => t,
                    // Offsets into the lossy text would not match the
                    // subject's bytes; substitute on the text instead.
                    Cow::Owned(_) => {
                        return Err("Regexp subject is not valid UTF-8".into());
                    }
                };
                let mut at = 0;
                loop {
                    if at > text.len() {
                        return Ok(None);
                    }
                    let caps = r
                        .captures_from_pos(text, at)
                        .map_err(|e| format!("Regexp matching returned {e}"))?;
                    let Some(caps) = caps else { return Ok(None) };
                    let Some(m) = caps.get(0) else {
                        return Ok(None);
                    };
                    if not_empty && m.start() == m.end() {
                        at = m.end() + 1;
                        while at < text.len() && !text.is_char_boundary(at) {
                            at += 1;
                        }
                        continue;
                    }
                    for (i, g) in groups.iter_mut().enumerate() {
                        *g = caps.get(i).map(|m| (m.start(), m.end()));
                    }
                    return Ok(Some(Captures { groups }));
                }
            }
        }
    }

    /// `regsub(subject, re, sub)` (`all == false`) or `regsuball`, appending
    /// the result to `out`.
    pub fn substitute(
        &self,
        subject: &[u8],
        sub: &[u8],
        all: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let groups_wanted = sub
            .windows(2)
            .any(|w| w[0] == b'\\' && (b'1'..=b'9').contains(&w[1]));
        // The match-only search is much cheaper than a capturing one.
        if groups_wanted && !self.is_match(subject)? {
            out.extend_from_slice(subject);
            return Ok(());
        }
        let mut rest = subject;
        let mut not_empty = false;
        while let Some(caps) = self.find(rest, not_empty, groups_wanted)? {
            let (start, end) = caps.groups[0].unwrap_or((0, 0));
            out.extend_from_slice(&rest[..start]);
            expand(sub, rest, &caps, out);
            rest = &rest[end..];
            if !all {
                break;
            }
            not_empty = true;
        }
        out.extend_from_slice(rest);
        Ok(())
    }
}

/// Appends the substitution string with `\N` references expanded.
fn expand(sub: &[u8], subject: &[u8], caps: &Captures, out: &mut Vec<u8>) {
    let mut i = 0;
    while i < sub.len() {
        let c = sub[i];
        if c != b'\\' || i + 1 == sub.len() {
            out.push(c);
            i += 1;
            continue;
        }
        let n = sub[i + 1];
        if n.is_ascii_digit() {
            if let Some((s, e)) = caps.groups[(n - b'0') as usize] {
                out.extend_from_slice(&subject[s..e]);
            }
        } else {
            out.push(n);
        }
        i += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(pattern: &str, subject: &str, with: &str, all: bool) -> String {
        let mut out = Vec::new();
        Regex::new(pattern)
            .unwrap()
            .substitute(subject.as_bytes(), with.as_bytes(), all, &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn matching() {
        let r = Regex::new("^/static").unwrap();
        assert!(r.is_match(b"/static/x.png").unwrap());
        assert!(!r.is_match(b"/x/static").unwrap());
        let ci = Regex::new("(?i)\\.JPG$").unwrap();
        assert!(ci.is_match(b"/a.jpg").unwrap());
        // Byte semantics: '.' matches a non-UTF-8 byte.
        assert!(Regex::new("^a.b$").unwrap().is_match(b"a\xffb").unwrap());
        assert!(Regex::new("(").is_err());
        assert_eq!(r.as_str(), "^/static");
    }

    #[test]
    fn literal_fast_path_agrees_with_engine() {
        let pats = [
            "^/static/",
            "\\.css$",
            "gzip",
            "^$",
            "",
            "^exact$",
            "a\\.b",
            "#",
            "\\?$",
        ];
        let subjects: [&[u8]; 9] = [
            b"/static/x.css",
            b"a.css",
            b"x-gzip",
            b"",
            b"exact",
            b"a.b?",
            b"#frag",
            b"/q?",
            b"nothing",
        ];
        for p in pats {
            let r = Regex::new(p).unwrap();
            assert!(r.literal.is_some(), "{p}");
            let engine = regex::bytes::Regex::new(p).unwrap();
            for s in subjects {
                assert_eq!(r.is_match(s).unwrap(), engine.is_match(s), "{p} on {s:?}");
            }
        }
        for p in ["^a.b", "a|b", "\\d", "^(x)$", "a+", "x{2}", "^a$b"] {
            let r = Regex::new(p).unwrap();
            assert_eq!(
                r.dfa.is_some(),
                p.starts_with('^') || p.ends_with('$'),
                "{p}"
            );
            let engine = regex::bytes::Regex::new(p).unwrap();
            for s in [
                &b"a.b"[..],
                b"axb",
                b"b",
                b"7",
                b"x",
                b"xx",
                b"aa",
                b"a$b",
                b"",
            ] {
                assert_eq!(r.is_match(s).unwrap(), engine.is_match(s), "{p} on {s:?}");
            }
            assert!(Regex::new(p).unwrap().literal.is_none(), "{p}");
        }
    }

    #[test]
    fn lookaround_falls_back() {
        let r = Regex::new("^/(?!admin)").unwrap();
        assert!(r.is_match(b"/shop").unwrap());
        assert!(!r.is_match(b"/admin").unwrap());
        assert_eq!(sub("(a)(?=b)", "abac", "[\\1]", true), "[a]bac");
        let back = Regex::new("^(\\w+)-\\1$").unwrap();
        assert!(back.is_match(b"ab-ab").unwrap());
        assert!(!back.is_match(b"ab-cd").unwrap());
    }

    #[test]
    fn regsub_semantics() {
        assert_eq!(sub("b", "abcb", "X", false), "aXcb");
        assert_eq!(sub("b", "abcb", "X", true), "aXcX");
        assert_eq!(sub("z", "abc", "X", true), "abc");
        assert_eq!(
            sub(
                "^(\\w+)\\.example\\.com$",
                "www.example.com",
                "\\1 \\0",
                false
            ),
            "www www.example.com"
        );
        // Missing group inserts nothing; escaped non-digit is literal.
        assert_eq!(sub("(a)|(b)", "b", "<\\1|\\2>", false), "<|b>");
        assert_eq!(sub("a", "a", "\\n\\\\x\\", false), "n\\x\\");
        // `^` re-anchors on the remainder after each match.
        assert_eq!(sub("^a", "aaab", "b", true), "bbbb");
        // An empty first match is replaced once; later ones must be
        // non-empty.
        assert_eq!(sub("x*", "abc", "-", true), "-abc");
        assert_eq!(sub("[0-9]*", "12ab34", "#", true), "#ab#");
        assert_eq!(sub(", *", "a, b,c", ";", true), "a;b;c");
    }

    #[test]
    fn literal_substitution_matches_engine_semantics() {
        assert_eq!(sub("^www\\.", "www.example.com", "", false), "example.com");
        assert_eq!(sub("^www\\.", "a.www.b", "", true), "a.www.b");
        assert_eq!(sub("^a", "aaab", "b", true), "bbbb");
        assert_eq!(sub("\\?$", "/x?", "", true), "/x");
        assert_eq!(sub("o", "foo", "[\\0\\1]", true), "f[o][o]");
        assert_eq!(sub("^ab$", "ab", "X", true), "X");
        assert_eq!(sub("zz", "abc", "X", true), "abc");
    }

    #[test]
    fn cookie_cleanup() {
        // The classic "strip Google Analytics cookies" idiom.
        assert_eq!(
            sub(
                "(^|;\\s*)(_ga|_gid)=[^;]*",
                "_ga=1; sess=2; _gid=3",
                "",
                true
            ),
            "; sess=2"
        );
    }
}
