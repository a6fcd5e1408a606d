//! Source files of one VCL compilation and positions inside them.
//!
//! A compilation reads several texts: the main VCL, every file it includes and
//! the built-in VCL. They are kept in one [`SourceMap`] so that every token and
//! AST node can carry a small [`Span`] (file id plus byte range) and errors can
//! still name the right file, line and column, exactly as Varnish does.

use std::fmt;

/// Index of a file inside a [`SourceMap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u32);

/// A byte range `[start, end)` inside one source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    pub file: FileId,
    pub start: u32,
    pub end: u32,
}

impl Span {
    /// Creates a span; `start` must not exceed `end`.
    pub fn new(file: FileId, start: u32, end: u32) -> Span {
        debug_assert!(start <= end, "span start after end");
        Span { file, start, end }
    }

    /// The smallest span covering `self` and `other`. When the two spans lie
    /// in different files (a construct straddling an include), `self` wins.
    pub fn to(self, other: Span) -> Span {
        if self.file != other.file {
            return self;
        }
        Span {
            file: self.file,
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> u32 {
        self.end - self.start
    }

    /// True for an empty range (used for the end-of-input position).
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// What kind of text a file is; only used for naming and policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// The VCL handed to the compiler (file or `vcl.inline`).
    Main,
    /// A file pulled in by `include`.
    Included,
    /// The built-in VCL appended after the user's VCL.
    Builtin,
}

/// One source text with its name as shown in error messages.
#[derive(Debug, Clone)]
pub struct SourceFile {
    name: String,
    text: String,
    kind: FileKind,
    /// Byte offsets at which each line starts (first entry is 0).
    line_starts: Vec<u32>,
}

impl SourceFile {
    /// Name as shown in diagnostics, e.g. `<vcl.inline>` or `/etc/varnish/x.vcl`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The full text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Kind of the file.
    pub fn kind(&self) -> FileKind {
        self.kind
    }

    /// The text covered by `span` (which must belong to this file). Out of
    /// range or non-boundary spans yield an empty string rather than a panic.
    pub fn slice(&self, span: Span) -> &str {
        self.text
            .get(span.start as usize..span.end as usize)
            .unwrap_or("")
    }

    /// 1-based line number and 0-based byte offset of the start of that line
    /// for byte offset `pos`.
    pub fn line_of(&self, pos: u32) -> (u32, u32) {
        let idx = match self.line_starts.binary_search(&pos) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        (idx as u32 + 1, self.line_starts[idx])
    }

    /// Byte offset at which the 1-based line `line` starts (the text length
    /// for lines past the end).
    pub fn line_start(&self, line: u32) -> u32 {
        let idx = (line.max(1) - 1) as usize;
        self.line_starts
            .get(idx)
            .copied()
            .unwrap_or(self.text.len() as u32)
    }

    /// Text of the 1-based line `line`, without its line terminator.
    pub fn line_text(&self, line: u32) -> &str {
        let idx = (line.max(1) - 1) as usize;
        let Some(&start) = self.line_starts.get(idx) else {
            return "";
        };
        let end = self
            .line_starts
            .get(idx + 1)
            .map(|&e| e as usize - 1)
            .unwrap_or(self.text.len());
        let s = self.text.get(start as usize..end).unwrap_or("");
        s.strip_suffix('\r').unwrap_or(s)
    }

    /// Position as Varnish prints it: 1-based line and 1-based column where
    /// tabs advance to the next multiple of 8 (vcc_icoord semantics).
    pub fn varnish_pos(&self, pos: u32) -> (u32, u32) {
        let (line, start) = self.line_of(pos);
        let end = (pos as usize).min(self.text.len());
        let mut col = 0u32;
        for b in self.text.as_bytes()[start as usize..end].iter() {
            if *b == b'\t' {
                col = (col & !7) + 8;
            } else {
                col += 1;
            }
        }
        (line, col + 1)
    }

    /// Position as editors count it: 1-based line and 1-based column in
    /// characters (tabs count as one).
    pub fn line_col(&self, pos: u32) -> (u32, u32) {
        let (line, start) = self.line_of(pos);
        let end = (pos as usize).min(self.text.len());
        let col = self
            .text
            .get(start as usize..end)
            .map(|s| s.chars().count())
            .unwrap_or(end - start as usize);
        (line, col as u32 + 1)
    }
}

/// Error raised when a byte sequence cannot be used as VCL source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidUtf8 {
    /// The file that was still added (with invalid bytes replaced by U+FFFD).
    pub file: FileId,
    /// Byte offset of the first invalid byte.
    pub offset: u32,
}

/// All source texts of one compilation.
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

/// Largest source text accepted; spans use `u32` offsets.
pub const MAX_SOURCE_LEN: usize = u32::MAX as usize - 1;

impl SourceMap {
    /// An empty map.
    pub fn new() -> SourceMap {
        SourceMap::default()
    }

    /// Adds a text and returns its id. Texts longer than [`MAX_SOURCE_LEN`]
    /// are truncated (the lexer then reports whatever is cut off).
    pub fn add(
        &mut self,
        name: impl Into<String>,
        text: impl Into<String>,
        kind: FileKind,
    ) -> FileId {
        let mut text = text.into();
        if text.len() > MAX_SOURCE_LEN {
            let mut cut = MAX_SOURCE_LEN;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        let mut line_starts = vec![0u32];
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                line_starts.push(i as u32 + 1);
            }
        }
        let id = FileId(self.files.len() as u32);
        self.files.push(SourceFile {
            name: name.into(),
            text,
            kind,
            line_starts,
        });
        id
    }

    /// Adds raw bytes. Invalid UTF-8 is replaced by U+FFFD so the file can
    /// still be shown, and the offset of the first bad byte is returned as an
    /// error for the caller to report.
    pub fn add_bytes(
        &mut self,
        name: impl Into<String>,
        bytes: &[u8],
        kind: FileKind,
    ) -> Result<FileId, InvalidUtf8> {
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(self.add(name, s, kind)),
            Err(e) => {
                let offset = e.valid_up_to() as u32;
                let file = self.add(name, String::from_utf8_lossy(bytes).into_owned(), kind);
                Err(InvalidUtf8 { file, offset })
            }
        }
    }

    /// The file with id `id`. Panics on an id not produced by this map
    /// (an internal invariant).
    pub fn file(&self, id: FileId) -> &SourceFile {
        &self.files[id.0 as usize]
    }

    /// Iterates over all files with their ids.
    pub fn files(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files
            .iter()
            .enumerate()
            .map(|(i, f)| (FileId(i as u32), f))
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when no file was added.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The text covered by a span.
    pub fn slice(&self, span: Span) -> &str {
        self.file(span.file).slice(span)
    }
}

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns() {
        let mut sm = SourceMap::new();
        let id = sm.add("<x>", "ab\n\tcd\r\nxyz", FileKind::Main);
        let f = sm.file(id);
        assert_eq!(f.line_of(0), (1, 0));
        assert_eq!(f.line_of(3), (2, 3));
        assert_eq!(f.varnish_pos(4), (2, 9));
        assert_eq!(f.line_col(4), (2, 2));
        assert_eq!(f.line_text(2), "\tcd");
        assert_eq!(f.line_text(3), "xyz");
        assert_eq!(f.line_text(9), "");
        assert_eq!(f.varnish_pos(11), (3, 4));
    }

    #[test]
    fn invalid_utf8_reports_offset() {
        let mut sm = SourceMap::new();
        let err = sm
            .add_bytes("<x>", b"vcl 4.1;\xff", FileKind::Main)
            .unwrap_err();
        assert_eq!(err.offset, 8);
        assert!(sm.file(err.file).text().starts_with("vcl 4.1;"));
    }

    #[test]
    fn span_join() {
        let a = Span::new(FileId(0), 2, 4);
        let b = Span::new(FileId(0), 7, 9);
        assert_eq!(a.to(b), Span::new(FileId(0), 2, 9));
        assert_eq!(a.to(Span::new(FileId(1), 0, 1)), a);
    }
}
