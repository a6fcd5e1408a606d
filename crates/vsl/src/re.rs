//! Regular expressions as the log tools compile them (`-I`, `-X`, `~` in
//! queries, `-C` for caseless), with errors worded like the PCRE messages
//! Varnish's tools print: a character position and PCRE's description of
//! the common mistakes, so scripts that check them keep working.

use regex::bytes::{Regex, RegexBuilder};
use regex_syntax::ast::ErrorKind;

/// A compile error: where (a byte offset into the pattern) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReError {
    /// Byte offset PCRE would report.
    pub pos: usize,
    /// What is wrong.
    pub msg: String,
}

/// Compiles `pattern` for matching record payloads.
pub fn compile(pattern: &str, caseless: bool) -> Result<Regex, ReError> {
    if let Err(e) = regex_syntax::ast::parse::Parser::new().parse(pattern) {
        return Err(describe(pattern, &e));
    }
    RegexBuilder::new(pattern)
        .case_insensitive(caseless)
        .build()
        .map_err(|e| ReError {
            pos: 0,
            msg: e
                .to_string()
                .lines()
                .last()
                .unwrap_or("")
                .trim()
                .to_string(),
        })
}

fn describe(pattern: &str, e: &regex_syntax::ast::Error) -> ReError {
    let start = e.span().start.offset;
    let end = pattern.len();
    let (pos, msg) = match e.kind() {
        ErrorKind::GroupUnclosed => (end, "missing closing parenthesis"),
        ErrorKind::GroupUnopened => (start, "unmatched closing parenthesis"),
        ErrorKind::ClassUnclosed => (end, "missing terminating ] for character class"),
        ErrorKind::RepetitionMissing => (start, "quantifier does not follow a repeatable item"),
        ErrorKind::EscapeUnexpectedEof => (end, "\\ at end of pattern"),
        ErrorKind::RepetitionCountInvalid => {
            let close = e.span().end.offset.saturating_sub(1);
            (close, "numbers out of order in {} quantifier")
        }
        ErrorKind::GroupNameUnexpectedEof | ErrorKind::GroupNameInvalid => {
            (end, "syntax error in subpattern name (missing terminator?)")
        }
        _ => {
            return ReError {
                pos: start,
                msg: e.kind().to_string(),
            };
        }
    };
    ReError {
        pos,
        msg: msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcre_like_messages() {
        for (p, pos, msg) in [
            ("(foo", 4, "missing closing parenthesis"),
            ("a)", 1, "unmatched closing parenthesis"),
            ("[a", 2, "missing terminating ] for character class"),
            ("*a", 0, "quantifier does not follow a repeatable item"),
            ("a\\", 2, "\\ at end of pattern"),
            ("a{2,1}", 5, "numbers out of order in {} quantifier"),
        ] {
            let e = compile(p, false).unwrap_err();
            assert_eq!((e.pos, e.msg.as_str()), (pos, msg), "{p}");
        }
        assert!(compile("^a", true).unwrap().is_match(b"ABC"));
        assert!(!compile("^a", false).unwrap().is_match(b"ABC"));
        assert!(compile("\\p{Nope}", false).is_err());
    }
}
