//! Compiler diagnostics and their rendering.
//!
//! Messages use Varnish's exact wording (varnishtest `-errvcl` checks match
//! substrings of them) and the default rendering reproduces vcc's layout:
//! the message, `('<file>' Line L Pos P)`, the quoted source line with tabs
//! expanded, and a marker line of `-` with `#` under the offending text.
//! A compact `file:line:col: message` form exists for tools and logs.

use std::fmt::Write as _;

use crate::source::{SourceMap, Span};

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Compilation fails.
    Error,
    /// Reported, compilation goes on (Varnish adds "(That was just a warning)").
    Warning,
}

/// Additional located information attached to a diagnostic, e.g.
/// "Previous definition:" pointing at the first definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub message: String,
    pub span: Option<Span>,
}

/// One compiler message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// Varnish's message text, without trailing newline. May contain
    /// several lines (e.g. the "VCL version declaration missing" advice).
    pub message: String,
    /// Where the problem is; `None` for whole-program errors such as
    /// "No backends or directors found".
    pub span: Option<Span>,
    /// Show `span` in vcc_ErrWhere2's range form (`Pos A) -- (Pos B)`)
    /// even when it covers a single token, as vcc does for some errors
    /// (e.g. a variable not available in a subroutine).
    pub range_form: bool,
    /// The location follows the message on the same line, as vcc prints
    /// some messages (`Impossible Subroutine('<vcl.inline>' Line ...`).
    pub inline_where: bool,
    pub notes: Vec<Note>,
}

impl Diagnostic {
    /// An error at `span`.
    pub fn error(message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            span: Some(span),
            range_form: false,
            inline_where: false,
            notes: Vec::new(),
        }
    }

    /// An error without location.
    pub fn error_nowhere(message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            span: None,
            range_form: false,
            inline_where: false,
            notes: Vec::new(),
        }
    }

    /// A warning at `span`.
    pub fn warning(message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            message: message.into(),
            span: Some(span),
            range_form: false,
            inline_where: false,
            notes: Vec::new(),
        }
    }

    /// Asks for the range form of the main location (see `range_form`).
    pub fn ranged(mut self) -> Diagnostic {
        self.range_form = true;
        self
    }

    /// Puts the location right after the message (see `inline_where`).
    pub fn where_inline(mut self) -> Diagnostic {
        self.inline_where = true;
        self
    }

    /// Adds a located note.
    pub fn with_note(mut self, message: impl Into<String>, span: Option<Span>) -> Diagnostic {
        self.notes.push(Note {
            message: message.into(),
            span,
        });
        self
    }

    /// Renders in Varnish's layout (see module docs).
    pub fn render(&self, sm: &SourceMap) -> String {
        let mut out = String::new();
        out.push_str(&self.message);
        if !(self.inline_where || continues_on_line(&self.message)) || self.span.is_none() {
            out.push('\n');
        }
        if let Some(span) = self.span {
            render_where(&mut out, sm, span, self.range_form);
        }
        for n in &self.notes {
            if !n.message.is_empty() {
                out.push_str(&n.message);
                out.push('\n');
            }
            if let Some(span) = n.span {
                render_where(&mut out, sm, span, false);
            }
        }
        if self.severity == Severity::Warning {
            out.push_str("(That was just a warning)\n");
        }
        out
    }

    /// Renders as `file:line:col: error: message` (first message line only
    /// is prefixed; notes follow on their own lines the same way).
    pub fn render_compact(&self, sm: &SourceMap) -> String {
        let mut out = String::new();
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        compact_line(&mut out, sm, self.span, sev, &self.message);
        for n in &self.notes {
            compact_line(&mut out, sm, n.span, "note", &n.message);
        }
        out
    }
}

/// vcc prints some messages without a line break before the location:
/// those ending in a space (`... 'set' at `) and those whose last line
/// starts with `At:` (`Symbols named 'vcl_*' are reserved.\nAt:(...)`).
fn continues_on_line(msg: &str) -> bool {
    msg.ends_with(' ')
        || msg
            .rsplit('\n')
            .next()
            .is_some_and(|l| l.starts_with("At:"))
}

fn compact_line(out: &mut String, sm: &SourceMap, span: Option<Span>, sev: &str, msg: &str) {
    let mut msg = msg.trim_end().replace('\n', " ");
    if msg.is_empty() {
        msg.push_str("here");
    }
    match span {
        Some(s) if (s.file.0 as usize) < sm.len() => {
            let f = sm.file(s.file);
            let (l, c) = f.line_col(s.start);
            let _ = writeln!(out, "{}:{}:{}: {}: {}", f.name(), l, c, sev, msg);
        }
        _ => {
            let _ = writeln!(out, "{}: {}", sev, msg);
        }
    }
}

/// Writes vcc's location block: coordinates, source line, marker line and
/// a blank line. A span of one token is shown as vcc_ErrWhere does; a span
/// of several tokens as vcc_ErrWhere2 does (`... Pos P) -- (Pos Q)`, and
/// both lines when it runs over several); `range` forces the latter.
fn render_where(out: &mut String, sm: &SourceMap, span: Span, range: bool) {
    if span.file.0 as usize >= sm.len() {
        return;
    }
    let f = sm.file(span.file);
    let (line, col) = f.varnish_pos(span.start);
    let name = f.name();
    if !range && !spans_several_tokens(f.slice(span)) {
        let _ = writeln!(out, "('{name}' Line {line} Pos {col})");
        quote_and_mark(out, f, line, span.start, span.end.max(span.start + 1));
        out.push('\n');
        return;
    }
    // Position of the last character of the range.
    let last = span.end - 1;
    let (line2, col2) = f.varnish_pos(last);
    if line2 == line {
        let _ = writeln!(out, "('{name}' Line {line} Pos {col}) -- (Pos {col2})");
        quote_and_mark(out, f, line, span.start, span.end);
    } else {
        if line2 == line + 1 {
            let _ = writeln!(
                out,
                "('{name}' Line {line} Pos {col}) -- ('{name}' Line {line2} Pos {col2})"
            );
        } else {
            let _ = writeln!(out, "('{name}' Line {line} Pos {col})");
        }
        quote_and_mark(out, f, line, span.start, span.end);
        if line2 != line + 1 {
            let _ = writeln!(out, "[...]\n('{name}' Line {line2} Pos {col2})");
        }
        quote_and_mark(out, f, line2, span.start, span.end);
    }
    out.push('\n');
}

/// True if `text` holds more than one VCL token.
fn spans_several_tokens(text: &str) -> bool {
    let (toks, err) = crate::lexer::lex(crate::source::FileId(0), text);
    err.is_none() && toks.toks.len() > 1
}

/// Writes line `line` of `f` with tabs expanded to multiples of 8, and a
/// marker line with `#` under the bytes in `[mark_start, mark_end)`.
fn quote_and_mark(
    out: &mut String,
    f: &crate::source::SourceFile,
    line: u32,
    mark_start: u32,
    mark_end: u32,
) {
    let line_start = f.line_start(line);
    let text = f.line_text(line);
    let mut quoted = String::with_capacity(text.len() + 8);
    let mut marker = String::with_capacity(text.len() + 8);
    let mut x = 0u32;
    for (off, ch) in text.char_indices() {
        let pos = line_start + off as u32;
        let c = if pos >= mark_start && pos < mark_end {
            '#'
        } else {
            '-'
        };
        if ch == '\t' {
            let y = (x & !7) + 8;
            while x < y {
                quoted.push(' ');
                marker.push(c);
                x += 1;
            }
        } else {
            quoted.push(ch);
            marker.push(c);
            x += 1;
        }
    }
    if mark_start as usize >= line_start as usize + text.len() {
        // Position at the end of the line or input: show where it is.
        marker.push('#');
    }
    out.push_str(&quoted);
    out.push('\n');
    out.push_str(&marker);
    out.push('\n');
}

/// The diagnostics of one compilation, in the order found.
#[derive(Debug, Clone, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// An empty collection.
    pub fn new() -> Diagnostics {
        Diagnostics::default()
    }

    /// Records a diagnostic.
    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    /// Moves all diagnostics of `other` to the end of `self`.
    pub fn extend(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
    }

    /// True if any error (not warning) was recorded.
    pub fn has_errors(&self) -> bool {
        self.items.iter().any(|d| d.severity == Severity::Error)
    }

    /// Number of errors.
    pub fn error_count(&self) -> usize {
        self.items
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    /// All diagnostics.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.items.iter()
    }

    /// Number of diagnostics.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Renders all in Varnish's layout, one after another.
    pub fn render(&self, sm: &SourceMap) -> String {
        self.items.iter().map(|d| d.render(sm)).collect()
    }

    /// Renders all in compact `file:line:col: message` form.
    pub fn render_compact(&self, sm: &SourceMap) -> String {
        self.items.iter().map(|d| d.render_compact(sm)).collect()
    }

    /// Consumes the collection.
    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.items
    }
}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{FileId, FileKind};

    #[test]
    fn varnish_layout() {
        let mut sm = SourceMap::new();
        let f = sm.add("<vcl.inline>", "vcl 4.1;\n\tset x = 1\n}", FileKind::Main);
        assert_eq!(f, FileId(0));
        // '}' at offset 20
        let d = Diagnostic::error("Expected ';' got '}'", Span::new(f, 20, 21));
        let r = d.render(&sm);
        assert_eq!(
            r,
            "Expected ';' got '}'\n('<vcl.inline>' Line 3 Pos 1)\n}\n#\n\n"
        );
        let d = Diagnostic::error("Symbol not found", Span::new(f, 14, 15));
        assert_eq!(
            d.render(&sm),
            "Symbol not found\n('<vcl.inline>' Line 2 Pos 13)\n        set x = 1\n------------#----\n\n"
        );
        assert_eq!(
            d.render_compact(&sm),
            "<vcl.inline>:2:6: error: Symbol not found\n"
        );
    }

    #[test]
    fn range_form_on_request() {
        let mut sm = SourceMap::new();
        let f = sm.add("a.vcl", "x = beresp.status;", FileKind::Main);
        let d = Diagnostic::error("", Span::new(f, 4, 10));
        assert!(d.render(&sm).starts_with("\n('a.vcl' Line 1 Pos 5)\n"));
        assert!(d.ranged().render(&sm).starts_with(
            "\n('a.vcl' Line 1 Pos 5) -- (Pos 10)\nx = beresp.status;\n----######--------\n"
        ));
    }

    #[test]
    fn notes_and_warnings() {
        let mut sm = SourceMap::new();
        let f = sm.add("a.vcl", "probe p {}\nprobe p {}", FileKind::Main);
        let d = Diagnostic::warning("Unused probe p, defined:", Span::new(f, 6, 7))
            .with_note("Previous definition:", Some(Span::new(f, 17, 18)));
        let r = d.render(&sm);
        assert!(r.contains("('a.vcl' Line 1 Pos 7)\nprobe p {}\n------#---\n"));
        assert!(r.contains("Previous definition:\n('a.vcl' Line 2 Pos 7)"));
        assert!(r.ends_with("(That was just a warning)\n"));
        let mut ds = Diagnostics::new();
        ds.push(d);
        assert!(!ds.has_errors());
        ds.push(Diagnostic::error_nowhere("No backends or directors found"));
        assert_eq!(ds.error_count(), 1);
        assert!(ds.render_compact(&sm).contains("error: No backends"));
    }

    #[test]
    fn location_on_the_same_line() {
        let mut sm = SourceMap::new();
        let f = sm.add("<x>", "backend vcl_b none;", FileKind::Main);
        let d = Diagnostic::error(
            "Symbols named 'vcl_*' are reserved.\nAt:",
            Span::new(f, 8, 13),
        );
        assert!(
            d.render(&sm)
                .starts_with("Symbols named 'vcl_*' are reserved.\nAt:('<x>' Line 1 Pos 9)\n")
        );
        let d = Diagnostic::error("'set' at ", Span::new(f, 0, 7));
        assert!(d.render(&sm).starts_with("'set' at ('<x>' Line 1 Pos 1)\n"));
    }

    #[test]
    fn ranges_render_like_err_where2() {
        let mut sm = SourceMap::new();
        let f = sm.add("<x>", "vcl 4.2;\nsub a {\n  x\n}\n", FileKind::Main);
        let d = Diagnostic::error("VCL version 4.2 not supported.", Span::new(f, 0, 7));
        assert_eq!(
            d.render(&sm),
            "VCL version 4.2 not supported.\n('<x>' Line 1 Pos 1) -- (Pos 7)\nvcl 4.2;\n#######-\n\n"
        );
        let d = Diagnostic::error("m", Span::new(f, 9, 20));
        assert_eq!(
            d.render(&sm),
            "m\n('<x>' Line 2 Pos 1) -- ('<x>' Line 3 Pos 3)\nsub a {\n#######\n  x\n###\n\n"
        );
        let d = Diagnostic::error("m", Span::new(f, 0, 22));
        let r = d.render(&sm);
        assert!(r.contains("[...]\n('<x>' Line 4 Pos 1)\n}\n#\n"), "{r}");
    }

    #[test]
    fn end_of_input_marker() {
        let mut sm = SourceMap::new();
        let f = sm.add("<x>", "sub a {", FileKind::Main);
        let d = Diagnostic::error("End of input", Span::new(f, 7, 7));
        assert!(d.render(&sm).contains("sub a {\n-------#\n"));
    }
}
