//! VCL tokenizer, following vcc_token.c of Varnish 7.1.
//!
//! Produces the token list of one source file in a single linear pass. Token
//! rules mirror vcc: identifiers start with a letter and continue with
//! letters, digits, `_` and `-` (a `.` is its own token, so `req.http.Foo-Bar`
//! is `req` `.` `http` `.` `Foo-Bar`); numbers are integers (`CNUM`, at most
//! 15 digits) or reals (`FNUM`, at most 12+3 digits); strings are `"..."`
//! (single line), `{"..."}` or `"""..."""` without escapes; BLOBs are
//! `:base64:`; `C{ ... }C` is inline C (tokenized so the parser can reject it
//! with Varnish's message). Like vcc, lexing of a file stops at its first
//! error, and a NUL byte ends the text.

use crate::ast::StrDelim;
use crate::diag::Diagnostic;
use crate::source::{FileId, Span};

/// Fixed (operator and punctuation) tokens, as in vcc's generate.py.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Punct {
    /// `++`
    Inc,
    /// `--`
    Dec,
    /// `&&`
    CAnd,
    /// `||`
    COr,
    /// `<=`
    Leq,
    /// `==`
    Eq,
    /// `!=`
    Neq,
    /// `>=`
    Geq,
    /// `>>`
    Shr,
    /// `<<`
    Shl,
    /// `+=`
    Incr,
    /// `-=`
    Decr,
    /// `*=`
    MulAssign,
    /// `/=`
    DivAssign,
    /// `!~`
    NoMatch,
    LBrace,
    RBrace,
    LParen,
    RParen,
    Star,
    Plus,
    Minus,
    Slash,
    Percent,
    Gt,
    Lt,
    Assign,
    Semi,
    Bang,
    Amp,
    Dot,
    Pipe,
    Tilde,
    Comma,
}

impl Punct {
    /// The token text.
    pub fn as_str(self) -> &'static str {
        match self {
            Punct::Inc => "++",
            Punct::Dec => "--",
            Punct::CAnd => "&&",
            Punct::COr => "||",
            Punct::Leq => "<=",
            Punct::Eq => "==",
            Punct::Neq => "!=",
            Punct::Geq => ">=",
            Punct::Shr => ">>",
            Punct::Shl => "<<",
            Punct::Incr => "+=",
            Punct::Decr => "-=",
            Punct::MulAssign => "*=",
            Punct::DivAssign => "/=",
            Punct::NoMatch => "!~",
            Punct::LBrace => "{",
            Punct::RBrace => "}",
            Punct::LParen => "(",
            Punct::RParen => ")",
            Punct::Star => "*",
            Punct::Plus => "+",
            Punct::Minus => "-",
            Punct::Slash => "/",
            Punct::Percent => "%",
            Punct::Gt => ">",
            Punct::Lt => "<",
            Punct::Assign => "=",
            Punct::Semi => ";",
            Punct::Bang => "!",
            Punct::Amp => "&",
            Punct::Dot => ".",
            Punct::Pipe => "|",
            Punct::Tilde => "~",
            Punct::Comma => ",",
        }
    }
}

/// Kind of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokKind {
    /// Identifier.
    Id,
    /// Integer literal.
    CNum,
    /// Real literal (has a `.`).
    FNum,
    /// String literal with its delimiter style.
    CStr(StrDelim),
    /// `C{ ... }C`.
    CSrc,
    /// `:base64:`; the index into [`Tokens::blobs`].
    CBlob(u32),
    /// Operator or punctuation.
    Punct(Punct),
    /// End of input.
    Eoi,
}

impl TokKind {
    /// Name used by vcc in "Expected X got ..." messages.
    pub fn expect_name(self) -> String {
        match self {
            TokKind::Id => "ID".into(),
            TokKind::CNum => "CNUM".into(),
            TokKind::FNum => "FNUM".into(),
            TokKind::CStr(_) => "CSTR".into(),
            TokKind::CSrc => "CSRC".into(),
            TokKind::CBlob(_) => "CBLOB".into(),
            TokKind::Eoi => "EOI".into(),
            TokKind::Punct(p) => format!("'{}'", p.as_str()),
        }
    }
}

/// One token: kind and location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub kind: TokKind,
    pub span: Span,
}

impl Token {
    /// True if this is the punctuation `p`.
    pub fn is(&self, p: Punct) -> bool {
        self.kind == TokKind::Punct(p)
    }
}

/// The tokens of one file (without a trailing end-of-input token) plus
/// decoded BLOB contents.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    pub toks: Vec<Token>,
    pub blobs: Vec<Vec<u8>>,
}

/// Delimiter length of a string token's opening/closing delimiter.
pub fn delim_len(d: StrDelim) -> u32 {
    match d {
        StrDelim::Quote => 1,
        StrDelim::Brace => 2,
        StrDelim::TripleQuote => 3,
    }
}

/// Decoded contents of a string token (its text between the delimiters).
pub fn str_value(text: &str, tok: &Token) -> String {
    match tok.kind {
        TokKind::CStr(d) => {
            let l = delim_len(d) as usize;
            let s = tok.span.start as usize + l;
            let e = tok.span.end as usize - l;
            text.get(s..e).unwrap_or("").to_string()
        }
        _ => String::new(),
    }
}

/// Text of a token as vcc_ErrToken prints it: `'text'`, `end of input` or
/// `C{ ... }C`.
pub fn describe(text: &str, tok: &Token) -> String {
    match tok.kind {
        TokKind::Eoi => "end of input".into(),
        TokKind::CSrc => "C{ ... }C".into(),
        _ => format!(
            "'{}'",
            text.get(tok.span.start as usize..tok.span.end as usize)
                .unwrap_or("")
        ),
    }
}

fn is_ident1(b: u8) -> bool {
    b.is_ascii_alphabetic()
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// White space as vcc's lexer skips it: vertical tab too, but not form
/// feed (checked against varnishd 7.1.1, tests/diff/vcl-probes/lexical.vcls).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b)
}

fn b64_value(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Result of decoding a BLOB body.
enum BlobScan {
    /// Every byte of the region was consumed at a group boundary
    /// (vcc then reports a missing colon).
    Unterminated,
    /// Decoding stopped at byte offset `stop` (absolute), having produced
    /// `bytes`.
    Stopped { stop: usize, bytes: Vec<u8> },
}

/// Decodes base64 from `b[start..limit]` with the exact stopping rules of
/// Varnish's VENC_Decode_Base64 (which vcc relies on for its BLOB error
/// messages): stop at the first non-base64 byte, at a `=` too early in a
/// group, or at a non-zero pad remainder; a partial group at the limit
/// stops at the limit.
fn scan_blob(b: &[u8], start: usize, limit: usize) -> BlobScan {
    let mut out = Vec::new();
    let mut n = 0u8;
    let mut w = 0u8;
    let mut pads = 0u8;
    let mut i = start;
    while i < limit {
        let c = b[i];
        let v = if c == b'=' {
            0
        } else {
            match b64_value(c) {
                Some(v) => v,
                None => {
                    return BlobScan::Stopped {
                        stop: i,
                        bytes: out,
                    };
                }
            }
        };
        if c == b'=' {
            if n < 2 {
                return BlobScan::Stopped {
                    stop: i,
                    bytes: out,
                };
            }
            pads += 1;
        } else if pads > 0 {
            return BlobScan::Stopped {
                stop: i - 1,
                bytes: out,
            };
        }
        if pads > 0 && w != 0 {
            return BlobScan::Stopped {
                stop: i - 1,
                bytes: out,
            };
        }
        n += 1;
        match n {
            1 => w = v << 2,
            2 => {
                w |= v >> 4;
                out.push(w);
                w = v << 4;
            }
            3 => {
                w |= v >> 2;
                if pads == 0 {
                    out.push(w);
                }
                w = v << 6;
            }
            _ => {
                w |= v;
                if pads == 0 {
                    out.push(w);
                }
                w = 0;
                n = 0;
            }
        }
        i += 1;
    }
    if n != 0 {
        return BlobScan::Stopped {
            stop: limit,
            bytes: out,
        };
    }
    BlobScan::Unterminated
}

/// Tokenizes `text` (the contents of file `file`). On a lexical error the
/// tokens before it are returned together with the diagnostic.
pub fn lex(file: FileId, text: &str) -> (Tokens, Option<Diagnostic>) {
    let bytes = text.as_bytes();
    // Like vcc, the source ends at the first NUL byte.
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let b = &bytes[..end];
    let mut out = Tokens {
        toks: Vec::with_capacity(end / 4 + 1),
        blobs: Vec::new(),
    };
    let sp = |s: usize, e: usize| Span::new(file, s as u32, e as u32);
    let mut p = 0usize;
    let err = |msg: &str, s: usize, e: usize| Some(Diagnostic::error(msg, sp(s, e)));
    while p < end {
        let c = b[p];
        if is_space(c) {
            p += 1;
            continue;
        }
        if c == b'#' {
            while p < end && b[p] != b'\n' {
                p += 1;
            }
            continue;
        }
        if c == b'/' && b.get(p + 1) == Some(&b'*') {
            let mut q = p + 2;
            let mut closed = false;
            while q < end {
                if b[q] == b'/' && b.get(q + 1) == Some(&b'*') {
                    let d = Diagnostic::error("/* ... */ comment contains /*", sp(p, p + 2))
                        .with_note("", Some(sp(q, q + 2)));
                    return (out, Some(d));
                }
                if b[q] == b'*' && b.get(q + 1) == Some(&b'/') {
                    p = q + 2;
                    closed = true;
                    break;
                }
                q += 1;
            }
            if closed {
                continue;
            }
            return (
                out,
                err("Unterminated /* ... */ comment, starting at", p, p + 2),
            );
        }
        if c == b'/' && b.get(p + 1) == Some(&b'/') {
            while p < end && b[p] != b'\n' {
                p += 1;
            }
            continue;
        }
        if c == b':' {
            // The scannable region is trimmed to whole groups of four.
            let limit = end - (end - (p + 1)) % 4;
            match scan_blob(b, p + 1, limit) {
                BlobScan::Unterminated => {
                    let e = (limit + 1).min(end);
                    return (out, err("Missing colon at end of BLOB:", p, e.max(p + 1)));
                }
                BlobScan::Stopped { stop, bytes } => {
                    let tok_end = (stop + 1).min(end);
                    // Past the end vcc sees the terminating NUL.
                    let r = if stop < end { b[stop] } else { 0 };
                    let msg = if r == b':' && (stop - p) % 4 != 1 {
                        Some("BLOB must have n*4 base64 characters")
                    } else if r == b'=' {
                        Some("Wrong padding ('=') in BLOB:")
                    } else if r != b':' {
                        Some("Illegal BLOB character:")
                    } else {
                        None
                    };
                    if let Some(m) = msg {
                        // Keep the span on a character boundary.
                        let mut e = tok_end;
                        while !text.is_char_boundary(e) {
                            e += 1;
                        }
                        return (out, err(m, p, e));
                    }
                    let idx = out.blobs.len() as u32;
                    out.blobs.push(bytes);
                    out.toks.push(Token {
                        kind: TokKind::CBlob(idx),
                        span: sp(p, stop + 1),
                    });
                    p = stop + 1;
                    continue;
                }
            }
        }
        // Delimited tokens, in vcc's order of precedence.
        let delim: Option<(&str, &str, &str, bool, TokKind)> = if b[p..].starts_with(b"\"\"\"") {
            Some((
                "long-string",
                "\"\"\"",
                "\"\"\"",
                true,
                TokKind::CStr(StrDelim::TripleQuote),
            ))
        } else if b[p..].starts_with(b"{\"") {
            Some((
                "long-string",
                "{\"",
                "\"}",
                true,
                TokKind::CStr(StrDelim::Brace),
            ))
        } else if c == b'"' {
            Some(("string", "\"", "\"", false, TokKind::CStr(StrDelim::Quote)))
        } else if b[p..].starts_with(b"C{") {
            Some(("inline C source", "C{", "}C", true, TokKind::CSrc))
        } else {
            None
        };
        if let Some((name, open, close, multiline, kind)) = delim {
            let body = p + open.len();
            let found = text[body..end].find(close).map(|i| body + i);
            let found = match found {
                Some(q) if !multiline => {
                    if b[body..q].iter().any(|&x| x == b'\n' || x == b'\r') {
                        None
                    } else {
                        Some(q)
                    }
                }
                other => other,
            };
            match found {
                None => {
                    return (
                        out,
                        err(
                            &format!("Unterminated {name}, starting at"),
                            p,
                            p + open.len(),
                        ),
                    );
                }
                Some(q) => {
                    out.toks.push(Token {
                        kind,
                        span: sp(p, q + close.len()),
                    });
                    p = q + close.len();
                    continue;
                }
            }
        }
        if let Some((punct, len)) = fixed_token(&b[p..]) {
            out.toks.push(Token {
                kind: TokKind::Punct(punct),
                span: sp(p, p + len),
            });
            p += len;
            continue;
        }
        if is_ident1(c) {
            let mut q = p + 1;
            while q < end && is_ident(b[q]) {
                q += 1;
            }
            out.toks.push(Token {
                kind: TokKind::Id,
                span: sp(p, q),
            });
            p = q;
            continue;
        }
        if c.is_ascii_digit() {
            let mut q = p;
            while q < end && b[q].is_ascii_digit() {
                q += 1;
            }
            if q >= end || b[q] != b'.' {
                if q - p > 15 {
                    return (out, err("Too many digits for integer.", p, q));
                }
                out.toks.push(Token {
                    kind: TokKind::CNum,
                    span: sp(p, q),
                });
                p = q;
                continue;
            }
            let dot = q + 1;
            let mut r = dot;
            while r < end && b[r].is_ascii_digit() {
                r += 1;
            }
            // Varnish 7.1 allows three decimals; Varnish Enterprise
            // accepts more in a duration (`0.000001s`, which the
            // StorageGRID guide's VCL sets). A bare REAL keeps the limit.
            if dot - p > 13 || (r - dot > 3 && !duration_unit_follows(b, r, end)) {
                return (out, err("Too many digits for real.", p, r));
            }
            out.toks.push(Token {
                kind: TokKind::FNum,
                span: sp(p, r),
            });
            p = r;
            continue;
        }
        // Anything else: mark the whole (possibly multi-byte) character.
        let mut e = p + 1;
        while !text.is_char_boundary(e) {
            e += 1;
        }
        return (out, err("Syntax error at", p, e));
    }
    (out, None)
}

/// Whether the number ending at `at` is a duration: a duration unit
/// (`ms`, `s`, `m`, `h`, `d`, `w`, `y`) follows, after blanks, as a whole
/// identifier.
fn duration_unit_follows(b: &[u8], at: usize, end: usize) -> bool {
    let mut p = at;
    while p < end && is_space(b[p]) {
        p += 1;
    }
    let mut q = p;
    while q < end && is_ident(b[q]) {
        q += 1;
    }
    q > p
        && std::str::from_utf8(&b[p..q])
            .ok()
            .and_then(crate::parser::duration_unit)
            .is_some()
}

/// Matches the longest fixed token at the start of `s`.
fn fixed_token(s: &[u8]) -> Option<(Punct, usize)> {
    let two = if s.len() >= 2 {
        match (s[0], s[1]) {
            (b'+', b'+') => Some(Punct::Inc),
            (b'-', b'-') => Some(Punct::Dec),
            (b'&', b'&') => Some(Punct::CAnd),
            (b'|', b'|') => Some(Punct::COr),
            (b'<', b'=') => Some(Punct::Leq),
            (b'=', b'=') => Some(Punct::Eq),
            (b'!', b'=') => Some(Punct::Neq),
            (b'>', b'=') => Some(Punct::Geq),
            (b'>', b'>') => Some(Punct::Shr),
            (b'<', b'<') => Some(Punct::Shl),
            (b'+', b'=') => Some(Punct::Incr),
            (b'-', b'=') => Some(Punct::Decr),
            (b'*', b'=') => Some(Punct::MulAssign),
            (b'/', b'=') => Some(Punct::DivAssign),
            (b'!', b'~') => Some(Punct::NoMatch),
            _ => None,
        }
    } else {
        None
    };
    if let Some(p) = two {
        return Some((p, 2));
    }
    let one = match *s.first()? {
        b'{' => Punct::LBrace,
        b'}' => Punct::RBrace,
        b'(' => Punct::LParen,
        b')' => Punct::RParen,
        b'*' => Punct::Star,
        b'+' => Punct::Plus,
        b'-' => Punct::Minus,
        b'/' => Punct::Slash,
        b'%' => Punct::Percent,
        b'>' => Punct::Gt,
        b'<' => Punct::Lt,
        b'=' => Punct::Assign,
        b';' => Punct::Semi,
        b'!' => Punct::Bang,
        b'&' => Punct::Amp,
        b'.' => Punct::Dot,
        b'|' => Punct::Pipe,
        b'~' => Punct::Tilde,
        b',' => Punct::Comma,
        _ => return None,
    };
    Some((one, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<TokKind> {
        let (t, e) = lex(FileId(0), src);
        assert!(e.is_none(), "unexpected error {e:?}");
        t.toks.iter().map(|t| t.kind).collect()
    }

    fn texts(src: &str) -> Vec<String> {
        let (t, _) = lex(FileId(0), src);
        t.toks
            .iter()
            .map(|t| src[t.span.start as usize..t.span.end as usize].to_string())
            .collect()
    }

    fn error(src: &str) -> String {
        let (_, e) = lex(FileId(0), src);
        e.expect("expected an error").message
    }

    #[test]
    fn identifiers_and_dots() {
        assert_eq!(
            texts("req.http.X-Forwarded-For == a_b1"),
            vec!["req", ".", "http", ".", "X-Forwarded-For", "==", "a_b1"]
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(
            kinds("10 1.5 4. 10s"),
            vec![
                TokKind::CNum,
                TokKind::FNum,
                TokKind::FNum,
                TokKind::CNum,
                TokKind::Id
            ]
        );
        assert_eq!(
            error("x = 1234567890123456;"),
            "Too many digits for integer."
        );
        assert_eq!(error("1234567890123."), "Too many digits for real.");
        assert_eq!(error("0.1234"), "Too many digits for real.");
        // Durations may have more decimals (as Varnish Enterprise); a
        // bare REAL, or one followed by another word, may not.
        assert_eq!(
            kinds("0.000001s 0.1234 ms"),
            vec![TokKind::FNum, TokKind::Id, TokKind::FNum, TokKind::Id]
        );
        assert_eq!(error("0.1234 + 1s"), "Too many digits for real.");
        assert_eq!(error("0.1234KB"), "Too many digits for real.");
        assert_eq!(error("0.1234 sx"), "Too many digits for real.");
        assert_eq!(error("1234567890123.5s"), "Too many digits for real.");
        assert!(
            lex(FileId(0), "123456789012.123 123456789012345")
                .1
                .is_none()
        );
    }

    #[test]
    fn strings() {
        let src = r#""a b" {"x
y"} """q"q""" "#;
        let (t, e) = lex(FileId(0), src);
        assert!(e.is_none());
        assert_eq!(t.toks.len(), 3);
        assert_eq!(str_value(src, &t.toks[0]), "a b");
        assert_eq!(str_value(src, &t.toks[1]), "x\ny");
        assert_eq!(str_value(src, &t.toks[2]), "q\"q");
        assert_eq!(
            error("set x = \"abc\n\";"),
            "Unterminated string, starting at"
        );
        assert_eq!(error("{\"abc"), "Unterminated long-string, starting at");
        assert_eq!(
            error("\"\"\"abc\"\""),
            "Unterminated long-string, starting at"
        );
    }

    #[test]
    fn comments() {
        assert_eq!(
            texts("a # x\nb // y\nc /* z\n */ d"),
            vec!["a", "b", "c", "d"]
        );
        assert_eq!(
            error("a /* b"),
            "Unterminated /* ... */ comment, starting at"
        );
        assert_eq!(error("/* a /* b */"), "/* ... */ comment contains /*");
    }

    #[test]
    fn operators() {
        assert_eq!(
            texts("a+=b -=c*=d/=e!~f&&g||h<=i>=j==k!=l++m --n<<o>>p%q"),
            vec![
                "a", "+=", "b", "-=", "c", "*=", "d", "/=", "e", "!~", "f", "&&", "g", "||", "h",
                "<=", "i", ">=", "j", "==", "k", "!=", "l", "++", "m", "--", "n", "<<", "o", ">>",
                "p", "%", "q"
            ]
        );
    }

    #[test]
    fn inline_c_and_syntax_errors() {
        assert_eq!(kinds("C{ int x; }C"), vec![TokKind::CSrc]);
        assert_eq!(
            error("C{ int x;"),
            "Unterminated inline C source, starting at"
        );
        assert_eq!(error("a [ b"), "Syntax error at");
        assert_eq!(error("a é b"), "Syntax error at");
        // A vertical tab separates tokens, a form feed is an error, as in
        // varnishd 7.1 (tests/diff/vcl-probes/lexical.vcls).
        assert_eq!(texts("a \u{b}b"), vec!["a", "b"]);
        assert_eq!(error("a \u{c} b"), "Syntax error at");
        assert_eq!(error("a \u{1} b"), "Syntax error at");
    }

    #[test]
    fn blobs() {
        let (t, e) = lex(FileId(0), "x = :AAEC: ;\n\n");
        assert!(e.is_none());
        assert_eq!(t.blobs[0], vec![0, 1, 2]);
        let (t, e) = lex(FileId(0), ":AQ==: :AQI=:   ");
        assert!(e.is_none(), "{e:?}");
        assert_eq!(t.blobs, vec![vec![1], vec![1, 2]]);
        let m = "BLOB must have n*4 base64 characters";
        assert_eq!(error(" sub vcl_recv { :a: } }"), m);
        assert_eq!(error(" sub vcl_recv { :bbbbaa: } }"), m);
        assert_eq!(error(" sub vcl_recv { :bbbbccccaaa: } }"), m);
        assert_eq!(
            error(" sub vcl_recv { :aa?: } }"),
            "Illegal BLOB character:"
        );
        let w = "Wrong padding ('=') in BLOB:";
        assert_eq!(error(" sub vcl_recv { :aaaa=aa: } }"), w);
        assert_eq!(error(" sub vcl_recv { :aaaa==a: } }"), w);
        assert_eq!(error(" sub vcl_recv { :aaaaa=a: } }"), w);
        assert_eq!(
            error(" sub vcl_recv { :AB==: } }"),
            "Illegal BLOB character:"
        );
        assert_eq!(
            error(" sub vcl_recv { :aaaa"),
            "Missing colon at end of BLOB:"
        );
        assert_eq!(error(" sub vcl_recv { :"), "Missing colon at end of BLOB:");
        // vcc only decodes up to a multiple of four characters before the
        // end of the text, so a blob ending exactly there is "missing" its
        // colon; Varnish 7.1 behaves the same.
        assert_eq!(error("x = :AAEC: ;"), "Missing colon at end of BLOB:");
    }

    #[test]
    fn nul_ends_input() {
        assert_eq!(texts("a\0 [ b"), vec!["a"]);
    }

    #[test]
    fn never_panics_on_odd_input() {
        for src in [
            "",
            ":",
            "\"",
            "{\"",
            "\"\"\"",
            "C{",
            "/*",
            "1.",
            "9999999999999999.9",
            "::::",
            ":=",
            ":A=",
            ":AA=",
            ":AAA=",
            ":AAAA",
            "ü",
            "\u{feff}",
            "a\u{0}",
        ] {
            let _ = lex(FileId(0), src);
        }
    }
}
