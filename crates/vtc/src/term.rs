//! The virtual screen behind `process pN -expect-text` and friends: what a
//! program run on a pseudo-terminal has drawn, as varnishtest's terminal
//! emulator (FreeBSD's teken) would show it.
//!
//! The screen model is the `vt100` crate; a small scanner in front of it
//! handles what teken does and `vt100` does not: cons25 mode (`ESC [ = 1 T`
//! switches it on, `ESC [ = 0 T` off; in it a form feed clears the screen
//! and a backspace in the first column goes to the end of the previous
//! line), backward tabulation (`ESC [ n Z`), and the status and cursor
//! position reports (`ESC [ 5 n`, `ESC [ 6 n`) whose answers are returned
//! to the caller. Cells hold printable ASCII; anything else reads as `?`,
//! as in varnishtest.

/// Where the scanner is in the byte stream.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scan {
    Ground,
    /// After ESC (intermediate bytes collected in `seq`).
    Esc,
    /// Inside a control sequence (`ESC [` ...).
    Csi,
    /// Inside a control string (OSC, DCS, ...).
    Str,
}

fn nz(n: u16) -> std::num::NonZeroU16 {
    std::num::NonZeroU16::new(n).unwrap_or(std::num::NonZeroU16::MIN)
}

/// A terminal screen fed with a program's output.
pub struct Screen {
    parser: vt100::Parser,
    cons25: bool,
    scan: Scan,
    /// The escape or control sequence being scanned.
    seq: Vec<u8>,
    /// Bytes scanned but not yet given to the screen model.
    out: Vec<u8>,
}

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (r, c) = self.size();
        f.debug_struct("Screen")
            .field("rows", &r)
            .field("cols", &c)
            .finish()
    }
}

impl Screen {
    /// A blank screen of `rows` × `cols`.
    pub fn new(rows: u16, cols: u16) -> Self {
        Screen {
            parser: vt100::Parser::new(nz(rows), nz(cols), 0),
            cons25: false,
            scan: Scan::Ground,
            seq: Vec::new(),
            out: Vec::new(),
        }
    }

    /// Lines and columns.
    pub fn size(&self) -> (u16, u16) {
        let (r, c) = self.parser.screen().size();
        (r.get(), c.get())
    }

    /// Change the size, keeping what fits.
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.flush();
        self.parser.set_size(nz(rows), nz(cols));
    }

    /// Cursor position, 0-based (row, column).
    pub fn cursor(&self) -> (u16, u16) {
        self.parser.screen().cursor_position()
    }

    /// The text of line `row` (0-based), one character per column.
    pub fn line(&self, row: u16) -> String {
        let (_, cols) = self.size();
        let s = self.parser.screen();
        (0..cols)
            .map(|c| match s.cell(row, c) {
                None => ' ',
                Some(cell) if cell.is_wide_continuation() => '?',
                Some(cell) => {
                    let t = cell.contents();
                    let mut ch = t.chars();
                    match (ch.next(), ch.next()) {
                        (None, _) => ' ',
                        (Some(x), None) if (' '..='~').contains(&x) => x,
                        _ => '?',
                    }
                }
            })
            .collect()
    }

    fn flush(&mut self) {
        if !self.out.is_empty() {
            self.parser.process(&self.out);
            self.out.clear();
        }
    }

    /// Feed program output. Returns the terminal's answers to status
    /// requests, to be written back to the program if wanted.
    pub fn feed(&mut self, data: &[u8]) -> Vec<u8> {
        let mut answers = Vec::new();
        for &b in data {
            match self.scan {
                Scan::Ground => match b {
                    0x1b => {
                        self.scan = Scan::Esc;
                        self.seq.clear();
                        self.seq.push(b);
                    }
                    0x0c if self.cons25 => {
                        self.out.extend_from_slice(b"\x1b[2J\x1b[H");
                    }
                    0x08 if self.cons25 => {
                        self.flush();
                        let (r, c) = self.cursor();
                        if c == 0 {
                            if r > 0 {
                                let (_, cols) = self.size();
                                self.out
                                    .extend_from_slice(format!("\x1b[{};{}H", r, cols).as_bytes());
                            }
                        } else {
                            self.out.push(b);
                        }
                    }
                    _ => self.out.push(b),
                },
                Scan::Esc => {
                    self.seq.push(b);
                    match b {
                        b'[' if self.seq.len() == 2 => self.scan = Scan::Csi,
                        b']' | b'P' | b'X' | b'^' | b'_' if self.seq.len() == 2 => {
                            self.scan = Scan::Str;
                            self.out.append(&mut self.seq);
                        }
                        0x20..=0x2f => {}
                        _ => {
                            self.scan = Scan::Ground;
                            self.out.append(&mut self.seq);
                        }
                    }
                }
                Scan::Csi => {
                    self.seq.push(b);
                    match b {
                        0x20..=0x3f => {}
                        0x40..=0x7e => {
                            self.scan = Scan::Ground;
                            self.csi(&mut answers);
                        }
                        _ => {
                            // Not a control sequence after all.
                            self.scan = if b == 0x1b { Scan::Esc } else { Scan::Ground };
                            self.out.append(&mut self.seq);
                            if b == 0x1b {
                                self.out.pop();
                                self.seq.push(b);
                            }
                        }
                    }
                }
                Scan::Str => match b {
                    0x1b => {
                        self.scan = Scan::Esc;
                        self.seq.clear();
                        self.seq.push(b);
                    }
                    0x07 | 0x18 | 0x1a => {
                        self.scan = Scan::Ground;
                        self.out.push(b);
                    }
                    _ => self.out.push(b),
                },
            }
        }
        self.flush();
        answers
    }

    /// A complete control sequence is in `seq`: handle the ones the screen
    /// model lacks, pass the others on.
    fn csi(&mut self, answers: &mut Vec<u8>) {
        let body = &self.seq[2..self.seq.len() - 1];
        let fin = self.seq[self.seq.len() - 1];
        let private = body.first().copied().filter(|c| (b'<'..=b'?').contains(c));
        let params: Vec<u16> = body[usize::from(private.is_some())..]
            .split(|&c| c == b';')
            .map(|p| {
                std::str::from_utf8(p)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0)
            })
            .collect();
        let p0 = params.first().copied().unwrap_or(0);
        match (private, fin) {
            (Some(b'='), b'T') => {
                match p0 {
                    0 => self.cons25 = false,
                    1 => self.cons25 = true,
                    _ => {}
                }
                self.seq.clear();
            }
            (None, b'Z') => {
                self.seq.clear();
                self.flush();
                let (_, mut c) = self.cursor();
                for _ in 0..p0.max(1) {
                    c = if c == 0 { 0 } else { (c - 1) / 8 * 8 };
                }
                self.out
                    .extend_from_slice(format!("\x1b[{}G", c + 1).as_bytes());
            }
            (None, b'n') if p0 == 5 || p0 == 6 => {
                self.seq.clear();
                self.flush();
                if p0 == 5 {
                    answers.extend_from_slice(b"\x1b[0n");
                } else {
                    let (r, c) = self.cursor();
                    answers.extend_from_slice(format!("\x1b[{};{}R", r + 1, c + 1).as_bytes());
                }
            }
            _ => self.out.append(&mut self.seq),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn screen(data: &[u8]) -> Screen {
        let mut s = Screen::new(24, 80);
        s.feed(data);
        s
    }

    #[test]
    fn text_and_cursor() {
        let s = screen(b"foo\r\nbar");
        assert_eq!(&s.line(0)[..4], "foo ");
        assert_eq!(&s.line(1)[..3], "bar");
        assert_eq!(s.cursor(), (1, 3));
        assert_eq!(s.line(2), " ".repeat(80));
    }

    #[test]
    fn positioning_and_clamping() {
        let s = screen(b"\x1b[4;200H%\x1b[10;4HABC\x1b[8G\x1b[2X>");
        assert_eq!(s.line(3).chars().nth(79), Some('%'));
        assert_eq!(&s.line(9)[3..7], "ABC ");
        assert_eq!(s.line(9).chars().nth(7), Some('>'));
    }

    #[test]
    fn non_ascii_reads_as_question_mark() {
        let s = screen("a\u{20ac}b\x01".as_bytes());
        assert_eq!(&s.line(0)[..3], "a?b");
    }

    #[test]
    fn backward_tab() {
        let s = screen(b"\x1b[7;7H\tX\tY\tZ\x1b[2ZW\x1b[2Ew\x1b[F*");
        assert_eq!(s.line(6).chars().nth(8), Some('X'));
        assert_eq!(s.line(6).chars().nth(16), Some('W'));
        assert_eq!(s.line(8).chars().next(), Some('w'));
        assert_eq!(s.line(7).chars().next(), Some('*'));
    }

    #[test]
    fn cons25_form_feed_and_backspace() {
        let mut s = screen(b"junk\r\nmore");
        s.feed(b"\x1b[=1T\x0c\x08@\r\n\x08");
        assert_eq!(&s.line(0)[..2], "@ ");
        assert_eq!(&s.line(1)[..4], "    ");
        assert_eq!(s.cursor(), (0, 79));
        // Back to xterm: a form feed is a line feed.
        s.feed(b"\x1b[=0T\x1b[H\x0cx");
        assert_eq!(s.line(1).chars().next(), Some('x'));
    }

    #[test]
    fn reports_and_split_sequences() {
        let mut s = Screen::new(24, 80);
        assert!(s.feed(b"\x1b[3;5H\x1b[").is_empty());
        let a = s.feed(b"6n");
        assert_eq!(a, b"\x1b[3;5R");
        assert_eq!(s.feed(b"\x1b[5n"), b"\x1b[0n");
        s.feed(b"\x1b]0;title\x07ok");
        assert_eq!(&s.line(2)[4..6], "ok");
    }

    #[test]
    fn resize_keeps_text() {
        let mut s = screen(b"hello");
        s.resize(25, 200);
        assert_eq!(s.size(), (25, 200));
        assert_eq!(&s.line(0)[..5], "hello");
        assert_eq!(s.line(0).len(), 200);
    }
}
