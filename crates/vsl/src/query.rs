//! The VSL query language of vsl-query(7) (`varnishlog -q`).
//!
//! A query is parsed once into an expression tree and evaluated against each
//! reported transaction group: a record condition is true if *any* record of
//! the group satisfies it.
//!
//! ```text
//! query     := line ( newline line )*         lines are or'ed; '#' comments,
//!                                             backslash-newline continues
//! expr      := and ( "or" and )*
//! and       := not ( "and" not )*
//! not       := "not" not | "(" expr ")" | "vxid" numop integer | cond
//! cond      := selector [ op operand ]
//! selector  := [ "{" level [ "+" | "-" ] "}" ] glob ( "," glob )* [ ":" prefix ] [ "[" field "]" ]
//! op        := "==" | "!=" | "<" | "<=" | ">" | ">=" | "eq" | "ne" | "~" | "!~"
//! operand   := quoted string ('...' or "...", backslash escapes) | [A-Za-z0-9+-_.*]+
//! ```
//!
//! Parsing never panics; errors say which line and column is wrong.

use std::fmt;

use regex::bytes::Regex;

use crate::group::Transaction;
use crate::record::Record;
use crate::tags::{TagError, TagSet};

/// A query syntax or semantic error, with its position.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("query line {line}, column {col}: {msg}")]
pub struct QueryError {
    /// 1-based line of the query text.
    pub line: usize,
    /// 1-based column (in bytes).
    pub col: usize,
    /// What is wrong.
    pub msg: String,
}

impl QueryError {
    /// The report Varnish's tools print for a bad `-q`/`-Q`: a heading,
    /// the message with its position, the offending line of `text` and a
    /// marker under the position.
    pub fn varnish_report(&self, text: &str) -> String {
        let line = logical_lines(text)
            .into_iter()
            .find(|(n, _)| *n == self.line)
            .map(|(_, l)| l)
            .unwrap_or_default();
        format!(
            "Query expression error:\n{} (Pos {})\n{}\n{}^\n",
            self.msg,
            self.col,
            line,
            "-".repeat(self.col.saturating_sub(1))
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NumOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl NumOp {
    fn test<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            NumOp::Eq => a == b,
            NumOp::Ne => a != b,
            NumOp::Lt => a < b,
            NumOp::Le => a <= b,
            NumOp::Gt => a > b,
            NumOp::Ge => a >= b,
        }
    }
}

#[derive(Clone, Debug)]
enum Test {
    /// Selection only.
    Exists,
    Int(NumOp, i64),
    /// Floats compare in thousandths, truncated, as Varnish 7.1 does.
    Float(NumOp, i128),
    StrEq(Vec<u8>, bool),
    StrNe(Vec<u8>, bool),
    Match(Regex),
    NoMatch(Regex),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Any,
    Eq(u32),
    AtLeast(u32),
    AtMost(u32),
}

#[derive(Clone, Debug)]
struct Cond {
    level: Level,
    tags: TagSet,
    prefix: Option<Vec<u8>>,
    field: Option<usize>,
    test: Test,
}

#[derive(Clone, Debug)]
enum Expr {
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Vxid(NumOp, i64),
    Cond(Cond),
}

/// A parsed query.
#[derive(Clone)]
pub struct Query {
    expr: Expr,
    text: String,
}

impl fmt::Debug for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Query").field("text", &self.text).finish()
    }
}

impl Query {
    /// Parses a query (possibly several lines, or'ed together).
    pub fn parse(text: &str) -> Result<Query, QueryError> {
        Query::parse_with(text, false)
    }

    /// Parses a query; with `caseless` (varnishlog `-C`), `eq`, `ne` and
    /// regular expressions ignore case.
    pub fn parse_with(text: &str, caseless: bool) -> Result<Query, QueryError> {
        let mut expr: Option<Expr> = None;
        for (line_no, line) in logical_lines(text) {
            let mut p = Parser {
                s: line.as_bytes(),
                pos: 0,
                line: line_no,
                caseless,
            };
            p.lex_check()?;
            p.skip_ws();
            if p.at_end() {
                continue;
            }
            let e = p.expr(0)?;
            p.skip_ws();
            if !p.at_end() {
                return Err(p.expected("'and' or 'or'"));
            }
            expr = Some(match expr {
                None => e,
                Some(prev) => Expr::Or(Box::new(prev), Box::new(e)),
            });
        }
        match expr {
            Some(expr) => Ok(Query {
                expr,
                text: text.to_string(),
            }),
            None => Err(QueryError {
                line: 1,
                col: 1,
                msg: "empty query".to_string(),
            }),
        }
    }

    /// The query text as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True if the group of transactions satisfies the query.
    pub fn matches(&self, group: &[Transaction]) -> bool {
        eval(&self.expr, group)
    }
}

/// Splits query text into logical lines: backslash-newline joins lines,
/// `#` starts a comment (outside quotes). Yields (1-based line, text).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start_line = 1;
    let mut line = 1;
    let mut quote: Option<char> = None;
    let mut comment = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
            if quote.is_none() && !comment && cur.ends_with('\\') {
                cur.pop();
                cur.push(' ');
                continue;
            }
            out.push((start_line, std::mem::take(&mut cur)));
            start_line = line;
            quote = None;
            comment = false;
            continue;
        }
        if comment {
            continue;
        }
        match quote {
            Some(q) => {
                cur.push(c);
                if c == '\\' {
                    if let Some(&n) = chars.peek()
                        && n != '\n'
                    {
                        cur.push(n);
                        chars.next();
                    }
                } else if c == q {
                    quote = None;
                }
            }
            None => {
                if c == '#' {
                    comment = true;
                } else {
                    if c == '"' || c == '\'' {
                        quote = Some(c);
                    }
                    cur.push(c);
                }
            }
        }
    }
    out.push((start_line, cur));
    out
}

/// Nesting limit for parentheses and `not` chains.
const MAX_DEPTH: usize = 100;

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    line: usize,
    caseless: bool,
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'_' | b'.' | b'*')
}

impl Parser<'_> {
    fn err(&self, msg: impl Into<String>) -> QueryError {
        self.err_at(self.pos, msg)
    }

    /// Varnish's "Expected X got 'TOKEN'" for the token at the cursor.
    fn expected(&mut self, what: &str) -> QueryError {
        self.skip_ws();
        let tok = String::from_utf8_lossy(self.peek_token()).into_owned();
        self.err(format!("Expected {what} got '{tok}'"))
    }

    /// The text of the token at the cursor: a word, a quoted string, an
    /// operator or one punctuation character (empty at the end).
    fn peek_token(&self) -> &[u8] {
        let rest = &self.s[self.pos..];
        let Some(&c) = rest.first() else {
            return rest;
        };
        let len = if is_word(c) {
            rest.iter().take_while(|&&b| is_word(b)).count()
        } else if c == b'"' || c == b'\'' {
            rest.iter()
                .skip(1)
                .position(|&b| b == c)
                .map_or(rest.len(), |i| i + 2)
        } else if [b"==", b"!=", b"<=", b">=", b"!~"]
            .iter()
            .any(|op| rest.starts_with(*op))
        {
            2
        } else {
            1
        };
        &rest[..len]
    }

    /// Varnish's lexer pass: characters outside the query alphabet are a
    /// syntax error, and every quoted string must end on its line.
    fn lex_check(&self) -> Result<(), QueryError> {
        let mut i = 0;
        while i < self.s.len() {
            let c = self.s[i];
            if c == b'"' || c == b'\'' {
                let start = i;
                i += 1;
                loop {
                    match self.s.get(i) {
                        None => return Err(self.err_at(start, "Unterminated string")),
                        Some(b'\\') => i += 2,
                        Some(&q) if q == c => break,
                        Some(_) => i += 1,
                    }
                }
            } else if !(is_word(c) || c.is_ascii_whitespace() || b"=!<>~(){}[]:,".contains(&c)) {
                return Err(self.err_at(i, "Syntax error"));
            }
            i += 1;
        }
        Ok(())
    }

    fn err_at(&self, pos: usize, msg: impl Into<String>) -> QueryError {
        QueryError {
            line: self.line,
            col: pos + 1,
            msg: msg.into(),
        }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    /// The word (unquoted token) at the cursor, without consuming it.
    fn peek_word(&self) -> &[u8] {
        let mut end = self.pos;
        while end < self.s.len() && is_word(self.s[end]) {
            end += 1;
        }
        &self.s[self.pos..end]
    }

    fn take_word(&mut self) -> &[u8] {
        let start = self.pos;
        while self.peek().is_some_and(is_word) {
            self.pos += 1;
        }
        &self.s[start..self.pos]
    }

    fn keyword(&mut self, kw: &str) -> bool {
        self.skip_ws();
        if self.peek_word() == kw.as_bytes() {
            self.pos += kw.len();
            true
        } else {
            false
        }
    }

    fn expr(&mut self, depth: usize) -> Result<Expr, QueryError> {
        if depth > MAX_DEPTH {
            return Err(self.err("expression nested too deeply"));
        }
        let mut e = self.and_expr(depth)?;
        while self.keyword("or") {
            let r = self.and_expr(depth)?;
            e = Expr::Or(Box::new(e), Box::new(r));
        }
        Ok(e)
    }

    fn and_expr(&mut self, depth: usize) -> Result<Expr, QueryError> {
        let mut e = self.not_expr(depth)?;
        while self.keyword("and") {
            let r = self.not_expr(depth)?;
            e = Expr::And(Box::new(e), Box::new(r));
        }
        Ok(e)
    }

    fn not_expr(&mut self, depth: usize) -> Result<Expr, QueryError> {
        if depth > MAX_DEPTH {
            return Err(self.err("expression nested too deeply"));
        }
        if self.keyword("not") {
            return Ok(Expr::Not(Box::new(self.not_expr(depth + 1)?)));
        }
        self.skip_ws();
        match self.peek() {
            None => Err(self.expected("VSL tag name")),
            Some(b'(') => {
                self.pos += 1;
                let e = self.expr(depth + 1)?;
                self.skip_ws();
                if self.peek() != Some(b')') {
                    return Err(self.expected("')'"));
                }
                self.pos += 1;
                Ok(e)
            }
            Some(_) => {
                if self.peek_word() == b"vxid" {
                    return self.vxid_expr();
                }
                self.cond()
            }
        }
    }

    /// `vxid OP INTEGER`: only numerical operators, an integer, and no tag
    /// list, level, prefix or field.
    fn vxid_expr(&mut self) -> Result<Expr, QueryError> {
        self.pos += 4;
        if matches!(self.peek(), Some(b'[' | b',' | b':')) {
            return Err(self.err("Unexpected taglist selection for vxid"));
        }
        self.skip_ws();
        let nop = match self.operator() {
            Some((Op::Num(nop), _)) => nop,
            Some((_, at)) => {
                self.pos = at;
                return Err(self.expected("vxid operator"));
            }
            None => return Err(self.expected("vxid operator")),
        };
        self.skip_ws();
        let tok = String::from_utf8_lossy(self.peek_token()).into_owned();
        let n = parse_strtoll(&tok)
            .filter(|(_, rest)| rest.is_empty())
            .map(|(n, _)| n)
            .ok_or_else(|| self.err(format!("Expected integer got '{tok}'")))?;
        self.pos += tok.len();
        Ok(Expr::Vxid(nop, n))
    }

    /// Parses an operator at the cursor (after whitespace), if any.
    fn operator(&mut self) -> Option<(Op, usize)> {
        let at = self.pos;
        let rest = &self.s[self.pos..];
        let (op, len) = if rest.starts_with(b"==") {
            (Op::Num(NumOp::Eq), 2)
        } else if rest.starts_with(b"!=") {
            (Op::Num(NumOp::Ne), 2)
        } else if rest.starts_with(b"<=") {
            (Op::Num(NumOp::Le), 2)
        } else if rest.starts_with(b">=") {
            (Op::Num(NumOp::Ge), 2)
        } else if rest.starts_with(b"<") {
            (Op::Num(NumOp::Lt), 1)
        } else if rest.starts_with(b">") {
            (Op::Num(NumOp::Gt), 1)
        } else if rest.starts_with(b"!~") {
            (Op::NoMatch, 2)
        } else if rest.starts_with(b"~") {
            (Op::Match, 1)
        } else {
            match self.peek_word() {
                b"eq" => (Op::StrEq, 2),
                b"ne" => (Op::StrNe, 2),
                _ => return None,
            }
        };
        self.pos += len;
        Some((op, at))
    }

    /// An operand: quoted string or unquoted word. Returns bytes and
    /// whether it was quoted.
    fn operand(&mut self, what: &str) -> Result<(Vec<u8>, bool), QueryError> {
        self.skip_ws();
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => {
                let start = self.pos;
                self.pos += 1;
                let mut v = Vec::new();
                loop {
                    match self.peek() {
                        None => return Err(self.err_at(start, "Unterminated string")),
                        Some(b'\\') => {
                            self.pos += 1;
                            match self.peek() {
                                None => {
                                    return Err(self.err_at(start, "Unterminated string"));
                                }
                                Some(c) => {
                                    // Keep escapes other than the quote
                                    // itself, so regex escapes survive.
                                    if c != q && c != b'\\' {
                                        v.push(b'\\');
                                    }
                                    v.push(c);
                                    self.pos += 1;
                                }
                            }
                        }
                        Some(c) if c == q => {
                            self.pos += 1;
                            return Ok((v, true));
                        }
                        Some(c) => {
                            v.push(c);
                            self.pos += 1;
                        }
                    }
                }
            }
            Some(c) if is_word(c) => Ok((self.take_word().to_vec(), false)),
            _ => Err(self.expected(what)),
        }
    }

    fn cond(&mut self) -> Result<Expr, QueryError> {
        self.skip_ws();
        let level = if self.peek() == Some(b'{') {
            self.level()?
        } else {
            Level::Any
        };
        let mut tags = TagSet::empty();
        loop {
            self.skip_ws();
            let start = self.pos;
            if !self.peek().is_some_and(is_word) {
                return Err(self.expected("VSL tag name"));
            }
            let glob = String::from_utf8_lossy(self.take_word()).into_owned();
            if glob == "vxid" {
                return Err(self.err_at(start, "Unexpected taglist selection for vxid"));
            }
            let set = TagSet::from_glob(&glob).map_err(|e| {
                self.err_at(
                    start,
                    match e {
                        TagError::Ambiguous(_) => "Tag name is ambiguous",
                        TagError::BadGlob(_) => "Syntax error in tag name",
                        TagError::Unknown(_) | TagError::NoMatch(_) => "Tag name matches zero tags",
                    },
                )
            })?;
            for t in set.iter() {
                tags.insert(t);
            }
            if self.peek() == Some(b',') {
                self.pos += 1;
                continue;
            }
            break;
        }
        let mut prefix = None;
        if self.peek() == Some(b':') {
            self.pos += 1;
            let p = match self.peek() {
                Some(c) if is_word(c) => self.take_word().to_vec(),
                Some(b'"' | b'\'') => unescape(&self.operand("string")?.0),
                _ => return Err(self.expected("string")),
            };
            prefix = Some(p);
        }
        let mut field = None;
        if self.peek() == Some(b'[') {
            self.pos += 1;
            self.skip_ws();
            let start = self.pos;
            if !self.peek().is_some_and(is_word) {
                return Err(self.expected("integer"));
            }
            let n = std::str::from_utf8(self.take_word())
                .ok()
                .filter(|w| w.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|w| w.parse::<usize>().ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| self.err_at(start, "Expected positive integer"))?;
            self.skip_ws();
            if self.peek() != Some(b']') {
                return Err(self.expected("']'"));
            }
            self.pos += 1;
            field = Some(n);
        }
        self.skip_ws();
        let test = match self.operator() {
            None => {
                let next = self.peek_word();
                if !next.is_empty() && next != b"and" && next != b"or" {
                    return Err(self.expected("operator"));
                }
                Test::Exists
            }
            Some((op, _)) => self.test(op)?,
        };
        Ok(Expr::Cond(Cond {
            level,
            tags,
            prefix,
            field,
            test,
        }))
    }

    fn level(&mut self) -> Result<Level, QueryError> {
        self.pos += 1;
        self.skip_ws();
        let start = self.pos;
        if !self.peek().is_some_and(is_word) {
            return Err(self.expected("integer"));
        }
        let word = self.take_word().to_vec();
        if word.first() == Some(&b'-') {
            return Err(self.err_at(start, "Expected positive integer"));
        }
        let digits = word.iter().take_while(|b| b.is_ascii_digit()).count();
        let n: u32 = std::str::from_utf8(&word[..digits])
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| self.err_at(start, "Syntax error in level limit"))?;
        let level = match &word[digits..] {
            b"+" => Level::AtLeast(n),
            b"-" => Level::AtMost(n),
            b"" => Level::Eq(n),
            _ => return Err(self.err_at(start, "Syntax error in level limit")),
        };
        self.skip_ws();
        if self.peek() != Some(b'}') {
            return Err(self.expected("'}'"));
        }
        self.pos += 1;
        Ok(level)
    }

    fn test(&mut self, op: Op) -> Result<Test, QueryError> {
        self.skip_ws();
        let start = self.pos;
        let what = match op {
            Op::Num(_) => "number",
            Op::StrEq | Op::StrNe => "string",
            Op::Match | Op::NoMatch => "regular expression",
        };
        let (v, quoted) = self.operand(what)?;
        match op {
            Op::Num(nop) => {
                // Quoted numbers are accepted too, as Varnish does.
                let v = if quoted { unescape(&v) } else { v };
                let s = std::str::from_utf8(&v).unwrap_or("");
                if s.contains('.') {
                    parse_milli(s)
                        .map(|m| Test::Float(nop, m))
                        .ok_or_else(|| self.err_at(start, "Floating point parse error"))
                } else {
                    parse_strtoll(s)
                        .filter(|(_, rest)| rest.is_empty())
                        .map(|(i, _)| Test::Int(nop, i))
                        .ok_or_else(|| self.err_at(start, "Integer parse error"))
                }
            }
            Op::StrEq => Ok(Test::StrEq(unescape(&v), self.caseless)),
            Op::StrNe => Ok(Test::StrNe(unescape(&v), self.caseless)),
            Op::Match | Op::NoMatch => {
                let pat = String::from_utf8_lossy(&v).into_owned();
                let re = crate::re::compile(&pat, self.caseless).map_err(|e| {
                    self.err_at(start, format!("Regular expression error: {}", e.msg))
                })?;
                Ok(if op == Op::Match {
                    Test::Match(re)
                } else {
                    Test::NoMatch(re)
                })
            }
        }
    }
}

/// Removes the backslashes kept by `operand` for string comparisons.
fn unescape(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    let mut it = v.iter();
    while let Some(&c) = it.next() {
        if c == b'\\' {
            if let Some(&n) = it.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Num(NumOp),
    StrEq,
    StrNe,
    Match,
    NoMatch,
}

fn eval(e: &Expr, group: &[Transaction]) -> bool {
    match e {
        Expr::Or(a, b) => eval(a, group) || eval(b, group),
        Expr::And(a, b) => eval(a, group) && eval(b, group),
        Expr::Not(a) => !eval(a, group),
        Expr::Vxid(op, n) => group.iter().any(|t| op.test(i64::from(t.vxid), *n)),
        Expr::Cond(c) => group.iter().any(|t| {
            let level_ok = match c.level {
                Level::Any => true,
                Level::Eq(l) => t.level == l,
                Level::AtLeast(l) => t.level >= l,
                Level::AtMost(l) => t.level <= l,
            };
            level_ok && t.records.iter().any(|r| cond_matches(c, r))
        }),
    }
}

fn is_space(c: u8) -> bool {
    c.is_ascii_whitespace()
}

fn cond_matches(c: &Cond, r: &Record) -> bool {
    if !c.tags.contains(r.tag) {
        return false;
    }
    let mut v: &[u8] = &r.data;
    if let Some(end) = v.iter().position(|&b| b == 0) {
        v = &v[..end];
    }
    if let Some(p) = &c.prefix {
        if v.len() <= p.len() || !v[..p.len()].eq_ignore_ascii_case(p) || v[p.len()] != b':' {
            return false;
        }
        v = &v[p.len() + 1..];
        while v.first().is_some_and(|&b| is_space(b)) {
            v = &v[1..];
        }
    }
    if let Some(n) = c.field {
        match v
            .split(|&b| is_space(b))
            .filter(|f| !f.is_empty())
            .nth(n - 1)
        {
            Some(f) => v = f,
            None => return false,
        }
    }
    match &c.test {
        Test::Exists => true,
        Test::StrEq(s, false) => v == s.as_slice(),
        Test::StrEq(s, true) => v.eq_ignore_ascii_case(s),
        Test::StrNe(s, false) => v != s.as_slice(),
        Test::StrNe(s, true) => !v.eq_ignore_ascii_case(s),
        Test::Match(re) => re.is_match(v),
        Test::NoMatch(re) => !re.is_match(v),
        Test::Int(op, n) => match parse_int_lhs(v) {
            Some(x) => op.test(x, *n),
            None => false,
        },
        Test::Float(op, f) => match first_token(v).and_then(parse_milli) {
            Some(x) => op.test(x, *f),
            None => false,
        },
    }
}

fn first_token(v: &[u8]) -> Option<&str> {
    let t = v.split(|&b| is_space(b)).find(|f| !f.is_empty())?;
    std::str::from_utf8(t).ok()
}

/// C `strtoll(s, &end, 0)`: optional sign, `0x` hex, leading-`0` octal or
/// decimal digits; saturates on overflow. Returns the value and the rest of
/// the string, or `None` if no digit was read.
fn parse_strtoll(s: &str) -> Option<(i64, &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    let neg = match b.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        _ => false,
    };
    let radix = if b.len() > i + 2
        && b[i] == b'0'
        && (b[i + 1] | 0x20) == b'x'
        && b[i + 2].is_ascii_hexdigit()
    {
        i += 2;
        16
    } else if b.len() > i + 1 && b[i] == b'0' {
        8
    } else {
        10
    };
    let start = i;
    let mut v: i128 = 0;
    while i < b.len() && char::from(b[i]).is_digit(radix) {
        let d = char::from(b[i]).to_digit(radix).unwrap_or(0);
        v = (v * i128::from(radix) + i128::from(d)).min(i128::from(i64::MAX) + 1);
        i += 1;
    }
    if i == start {
        return None;
    }
    let v = if neg { -v } else { v };
    let v = v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    Some((v, &s[i..]))
}

/// Record value as an integer, the way Varnish 7.1 reads it: `strtoll`,
/// or the integral part when the value is a decimal number.
fn parse_int_lhs(v: &[u8]) -> Option<i64> {
    let t = first_token(v)?;
    match parse_strtoll(t) {
        Some((n, "")) => Some(n),
        Some((n, rest)) if rest.starts_with('.') && parse_milli(t).is_some() => Some(n),
        Some(_) => None,
        None => parse_milli(t)
            .map(|m| (m / 1000).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64),
    }
}

/// A decimal number `[+-]digits[.digits]` in thousandths, extra decimals
/// truncated (Varnish 7.1 compares floats with three decimals).
fn parse_milli(s: &str) -> Option<i128> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().all(|c| c.is_ascii_digit()) || !frac.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut v: i128 = 0;
    for c in int
        .bytes()
        .chain(frac.bytes().chain(std::iter::repeat(b'0')).take(3))
    {
        v = v.checked_mul(10)?.checked_add(i128::from(c - b'0'))?;
    }
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::Grouping;
    use crate::group::tests::{run, sample};

    fn q(s: &str) -> Query {
        Query::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn on_request(s: &str) -> bool {
        let g = run(Grouping::Request, sample());
        q(s).matches(&g[0])
    }

    #[test]
    fn record_conditions() {
        assert!(on_request("ReqURL"));
        assert!(on_request("ReqURL eq \"/\""));
        assert!(!on_request("ReqURL eq '/x'"));
        assert!(on_request("ReqURL ne '/x'"));
        assert!(on_request("RespStatus == 200"));
        assert!(on_request("RespStatus >= 200 and RespStatus < 300"));
        assert!(!on_request("RespStatus != 200"));
        assert!(on_request("respstatus == 200"));
        assert!(on_request("ReqHeader:user-agent ~ \"cu.l\""));
        assert!(on_request("ReqHeader:User-Agent eq curl"));
        assert!(!on_request("ReqHeader:cookie"));
        assert!(on_request("not ReqHeader:cookie"));
        // Floats compare with three decimals, truncated (like Varnish 7.1).
        assert!(!on_request("Timestamp:Resp[2] > 0.00005"));
        assert!(on_request("Timestamp:Resp[2] == 0.0009"));
        assert!(on_request("Timestamp:Resp[2] >= 0."));
        assert!(!on_request("Timestamp:Resp[2] > 0.5"));
        assert!(on_request("Timestamp:Resp[2] == 0"));
        assert!(on_request("RespStatus == \"200\""));
        assert!(on_request("RespStatus > 0x10"));
        assert!(!on_request("RespStatus == 200.1"));
        assert!(on_request("RespStatus == 200.0009"));
        assert!(on_request("Timestamp:Resp[1] > 1699999999"));
        assert!(!on_request("Timestamp:Resp[9]"));
        assert!(on_request("*Status == 200"));
        assert!(on_request("BerespStatus,RespStatus == 200"));
        assert!(on_request("Req* ~ \"^/$\""));
        assert!(on_request("ReqURL !~ foo"));
    }

    #[test]
    fn levels_vxid_and_boolean() {
        assert!(on_request("{2}BerespStatus == 200"));
        assert!(!on_request("{1}BerespStatus == 200"));
        assert!(on_request("{1-}ReqURL"));
        assert!(on_request("{2+}BereqURL"));
        assert!(on_request("vxid == 1002"));
        assert!(!on_request("vxid == 7"));
        assert!(on_request(
            "(vxid == 7 or ReqURL) and not (RespStatus >= 500)"
        ));
        assert!(on_request("# comment only line\nvxid == 7\nReqURL"));
        assert!(on_request("RespStatus \\\n >= \\\n 200"));
    }

    #[test]
    fn errors_have_positions() {
        for (s, needle, col) in [
            ("", "empty query", 1),
            ("ReqURL ==", "Expected number got ''", 10),
            ("ReqURL == abc", "Integer parse error", 11),
            ("ReqURL == 1e-3", "Integer parse error", 11),
            ("ReqURL == 1.2.3", "Floating point parse error", 11),
            ("NoSuchTag", "Tag name matches zero tags", 1),
            ("Resp", "Tag name is ambiguous", 1),
            (
                "ReqURL ~ \"(\"",
                "Regular expression error: missing closing",
                10,
            ),
            ("(ReqURL", "Expected ')' got ''", 8),
            ("ReqURL and", "Expected VSL tag name got ''", 11),
            ("{x}ReqURL", "Syntax error in level limit", 2),
            ("{}", "Expected integer got '}'", 2),
            ("{-1}", "Expected positive integer", 2),
            ("{1a}", "Syntax error in level limit", 2),
            ("[]", "Expected VSL tag name got '['", 1),
            ("ReqURL[0]", "Expected positive integer", 8),
            ("ReqHeader:[]", "Expected string got '['", 11),
            ("ReqHeader:foo[]", "Expected integer got ']'", 15),
            ("ReqHeader:foo[a]", "Expected positive integer", 15),
            ("ReqURL eq \"abc", "Unterminated string", 11),
            ("\"b\\la", "Unterminated string", 1),
            (" / ", "Syntax error", 2),
            ("ReqURL )", "Expected 'and' or 'or' got ')'", 8),
            ("vxid ~ 3", "Expected vxid operator got '~'", 6),
            ("vxid eq 3", "Expected vxid operator got 'eq'", 6),
            ("vxid != 1001.5", "Expected integer got '1001.5'", 9),
            (
                "vxid[1] >= 1001",
                "Unexpected taglist selection for vxid",
                5,
            ),
            (
                "{1}vxid <= 1001",
                "Unexpected taglist selection for vxid",
                4,
            ),
            (
                "vxid,Link > 1001",
                "Unexpected taglist selection for vxid",
                5,
            ),
            (
                "Link,vxid > 1001",
                "Unexpected taglist selection for vxid",
                6,
            ),
            ("Req*x", "Syntax error in tag name", 1),
            ("*x* eq \"foo\"", "Syntax error in tag name", 1),
            ("RespStatus > >", "Expected number got '>'", 14),
            ("ReqMethod eq >", "Expected string got '>'", 14),
            ("ReqMethod ~ >", "Expected regular expression got '>'", 13),
            (
                "RespStatus ReqMethod 200",
                "Expected operator got 'ReqMethod'",
                12,
            ),
        ] {
            let e = Query::parse(s).unwrap_err();
            assert!(e.msg.contains(needle), "{s}: {e}");
            assert_eq!(e.col, col, "{s}: {e}");
        }
        let e = Query::parse("RespStatus > foo").unwrap_err();
        assert_eq!(
            e.varnish_report("RespStatus > foo"),
            "Query expression error:\nInteger parse error (Pos 14)\nRespStatus > foo\n-------------^\n"
        );
        let e = Query::parse("ReqURL\nReqURL ==").unwrap_err();
        assert_eq!(e.line, 2);
        let deep = "(".repeat(500) + "ReqURL" + &")".repeat(500);
        assert!(Query::parse(&deep).is_err());
        let nots = "not ".repeat(500) + "ReqURL";
        assert!(Query::parse(&nots).is_err());
    }

    #[test]
    fn random_input_never_panics() {
        // A stable-toolchain cousin of the cargo-fuzz target: pseudo-random
        // strings over the query alphabet must parse or fail cleanly.
        const ALPHABET: &[&str] = &[
            "Req", "URL", "Header", "*", ":", "[", "]", "{", "}", "1", "2", "+", "-", "(", ")",
            " ", "and", " or ", "not ", "==", "!=", "<", ">=", "~", "!~", "eq", "ne", "\"", "'",
            "\\", "\n", "#", ",", ".", "e", "vxid", "x", "0", "é", "\t",
        ];
        let g = run(Grouping::Request, sample());
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut parsed = 0;
        for _ in 0..20_000 {
            let mut s = String::new();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = (seed % 12) as usize;
            for _ in 0..n {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                s.push_str(ALPHABET[(seed % ALPHABET.len() as u64) as usize]);
            }
            if let Ok(q) = Query::parse(&s) {
                parsed += 1;
                let _ = q.matches(&g[0]);
            }
        }
        assert!(parsed > 0);
    }

    #[test]
    fn caseless_option() {
        let g = run(Grouping::Request, sample());
        assert!(!q("ReqURL ~ \"^/$\" and ReqHeader:user-agent eq CURL").matches(&g[0]));
        let c = Query::parse_with("ReqHeader:user-agent eq CURL", true).unwrap();
        assert!(c.matches(&g[0]));
        let c = Query::parse_with("ReqHeader ~ \"user-AGENT\"", true).unwrap();
        assert!(c.matches(&g[0]));
    }

    #[test]
    fn number_parsing() {
        assert_eq!(parse_strtoll("0x1F"), Some((31, "")));
        assert_eq!(parse_strtoll("-017x"), Some((-15, "x")));
        assert_eq!(
            parse_strtoll("99999999999999999999999"),
            Some((i64::MAX, ""))
        );
        assert_eq!(parse_strtoll("x"), None);
        assert_eq!(parse_milli("1795316561.389552"), Some(1_795_316_561_389));
        assert_eq!(parse_milli("-.5"), Some(-500));
        assert_eq!(parse_milli("1."), Some(1000));
        assert_eq!(parse_milli("."), None);
        assert_eq!(parse_milli("1e3"), None);
    }

    #[test]
    fn int_lhs_parsing() {
        assert_eq!(parse_int_lhs(b" 200 OK"), Some(200));
        assert_eq!(parse_int_lhs(b"0x10"), Some(16));
        assert_eq!(parse_int_lhs(b"010"), Some(8));
        assert_eq!(parse_int_lhs(b"-3"), Some(-3));
        assert_eq!(parse_int_lhs(b"1.9"), Some(1));
        assert_eq!(parse_int_lhs(b"abc"), None);
        assert_eq!(parse_int_lhs(b""), None);
    }

    #[test]
    fn raw_grouping_query() {
        let g = run(
            Grouping::Raw,
            vec![Record::new(crate::Tag::Error, crate::Vxid::NONE, "boom")],
        );
        assert!(q("vxid == 0 and Error").matches(&g[0]));
        assert!(q("{0}Error eq boom").matches(&g[0]));
    }
}
