//! Tokeniser for the vtc language, following varnishtest's rules.
//!
//! A script is a sequence of commands, one per line. Words are separated by
//! whitespace; `"..."` strings have backslash escapes processed; `{...}`
//! blocks nest and are kept verbatim (they may span lines); `#` at the start
//! of a command comments out the rest of the line; a backslash before a
//! newline continues the command on the next line. Macro expansion is not
//! done here: varnishtest expands each token just before the command runs,
//! because earlier commands define the macros later ones use.

use std::fmt;

/// One word of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The token text (quotes removed and escapes processed, or the verbatim
    /// content of a brace block without the outer braces).
    pub text: String,
    /// Line (1-based, in the file) where the token's content starts.
    pub line: usize,
    /// True when the token was a `{...}` block.
    pub brace: bool,
}

/// One command: its first line and its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawCommand {
    /// Line (1-based, in the file) where the command starts.
    pub line: usize,
    /// The command's words; never empty.
    pub tokens: Vec<Token>,
}

/// A tokenisation error with its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LexError {
    /// Line (1-based, in the file) of the problem.
    pub line: usize,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for LexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.msg)
    }
}

impl std::error::Error for LexError {}

/// Process one backslash escape starting at `chars[i]` (the backslash).
/// Returns the produced character and the number of input chars consumed.
/// Mirrors varnishtest's rules: `\n \r \t \\ \"`, octal `\NNN`, hex `\xHH`;
/// any other escaped character stands for itself.
pub fn backslash(chars: &[char], i: usize) -> (char, usize) {
    let Some(&c) = chars.get(i + 1) else {
        return ('\\', 1);
    };
    match c {
        'n' => ('\n', 2),
        'r' => ('\r', 2),
        't' => ('\t', 2),
        '\\' => ('\\', 2),
        '"' => ('"', 2),
        '0'..='7' => {
            let mut v: u32 = 0;
            let mut n = 0;
            while n < 3 {
                match chars.get(i + 1 + n) {
                    Some(d @ '0'..='7') => {
                        v = v * 8 + d.to_digit(8).unwrap_or(0);
                        n += 1;
                    }
                    _ => break,
                }
            }
            (char::from_u32(v & 0xff).unwrap_or('\0'), 1 + n)
        }
        'x' => {
            let mut v: u32 = 0;
            let mut n = 0;
            while n < 2 {
                match chars.get(i + 2 + n).and_then(|d| d.to_digit(16)) {
                    Some(d) => {
                        v = v * 16 + d;
                        n += 1;
                    }
                    None => break,
                }
            }
            if n == 0 {
                ('x', 2)
            } else {
                (char::from_u32(v).unwrap_or('\0'), 2 + n)
            }
        }
        other => (other, 2),
    }
}

/// Split `src` into commands. `first_line` is the file line of `src`'s
/// first character (1 for a whole file, the block's line for a nested spec).
pub fn tokenize(src: &str, first_line: usize) -> Result<Vec<RawCommand>, LexError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = first_line;
    let n = chars.len();
    while i < n {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '#' {
            while i < n && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        // First content on a line: collect tokens up to the end of line.
        let cmd_line = line;
        let mut tokens = Vec::new();
        while i < n {
            let c = chars[i];
            if c == '\n' {
                break;
            }
            if c.is_whitespace() {
                i += 1;
                continue;
            }
            if c == '\\' && chars.get(i + 1) == Some(&'\n') {
                i += 2;
                line += 1;
                continue;
            }
            if c == '"' {
                let tok_line = line;
                i += 1;
                let mut s = String::new();
                loop {
                    match chars.get(i) {
                        None => {
                            return Err(LexError {
                                line: tok_line,
                                msg: "unterminated quoted string".into(),
                            });
                        }
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\n') => {
                            return Err(LexError {
                                line: tok_line,
                                msg: "Unterminated quoted string in line".into(),
                            });
                        }
                        Some('\\') => {
                            let (ch, used) = backslash(&chars, i);
                            s.push(ch);
                            i += used;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                tokens.push(Token {
                    text: s,
                    line: tok_line,
                    brace: false,
                });
            } else if c == '{' {
                let tok_line = line;
                let start = i + 1;
                let mut depth = 0usize;
                let mut end = None;
                while i < n {
                    match chars[i] {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = Some(i);
                                break;
                            }
                        }
                        '\n' => line += 1,
                        _ => {}
                    }
                    i += 1;
                }
                let Some(end) = end else {
                    return Err(LexError {
                        line: tok_line,
                        msg: "unbalanced '{': no matching '}' before end of text".into(),
                    });
                };
                i = end + 1;
                tokens.push(Token {
                    text: chars[start..end].iter().collect(),
                    line: tok_line,
                    brace: true,
                });
            } else {
                let start = i;
                while i < n && !chars[i].is_whitespace() {
                    i += 1;
                }
                tokens.push(Token {
                    text: chars[start..i].iter().collect(),
                    line,
                    brace: false,
                });
            }
        }
        if !tokens.is_empty() {
            out.push(RawCommand {
                line: cmd_line,
                tokens,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(src: &str) -> Vec<Vec<String>> {
        tokenize(src, 1)
            .unwrap()
            .into_iter()
            .map(|c| c.tokens.into_iter().map(|t| t.text).collect())
            .collect()
    }

    #[test]
    fn basic_words_and_comments() {
        assert_eq!(
            words("# c\nvarnishtest \"a b\"\n  delay 1 # not a comment\n"),
            vec![
                vec!["varnishtest".to_string(), "a b".into()],
                vec![
                    "delay".into(),
                    "1".into(),
                    "#".into(),
                    "not".into(),
                    "a".into(),
                    "comment".into()
                ],
            ]
        );
    }

    #[test]
    fn escapes() {
        assert_eq!(
            words(r#"x "a\tb\x41\101\"\\\q""#),
            vec![vec!["x".to_string(), "a\tbAA\"\\q".into()]]
        );
    }

    #[test]
    fn braces_nest_and_keep_lines() {
        let cmds = tokenize("server s1 {\n rxreq {a}\n txresp\n} -start\nclient c1", 1).unwrap();
        assert_eq!(cmds.len(), 2);
        assert_eq!(cmds[0].tokens[2].text, "\n rxreq {a}\n txresp\n");
        assert!(cmds[0].tokens[2].brace);
        assert_eq!(cmds[0].tokens[3].text, "-start");
        assert_eq!(cmds[0].tokens[3].line, 4);
        assert_eq!(cmds[1].line, 5);
    }

    #[test]
    fn continuation() {
        let cmds = tokenize("txreq -url /x \\\n  -hdr \"a: b\"\nrxresp", 1).unwrap();
        assert_eq!(cmds.len(), 2);
        assert_eq!(cmds[0].tokens.len(), 5);
        assert_eq!(cmds[1].line, 3);
    }

    #[test]
    fn errors_name_line() {
        let e = tokenize("a\nb \"x\ny\"", 1).unwrap_err();
        assert_eq!(e.line, 2);
        let e = tokenize("a\n\nb {x", 1).unwrap_err();
        assert_eq!(e.line, 3);
    }
}
