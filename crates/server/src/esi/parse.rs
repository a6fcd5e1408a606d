//! The ESI parser: a sans-io state machine over body bytes that marks every
//! input byte as *verbatim* (delivered) or *skip* (ESI markup, removed
//! content) and records the `<esi:include>`s, as varnishd's VEP does.
//!
//! The parser is fed the (plain) body in whatever pieces the fetch gets it
//! in, down to single bytes (`debug=+esi_chop`), and keeps only a few bytes
//! of state between pieces. It never sees the bytes again after a piece:
//! what it decides is reported to a [`Downstream`] as "pass the next *n*
//! input bytes on" plus flush points at every verbatim/skip boundary, so
//! that a downstream gzip compressor can make each verbatim range an
//! independent, byte-aligned piece of deflate data. The instruction list
//! ([`Instr`]) measures ranges in downstream bytes (compressed bytes for a
//! gzip object), so delivery can cut the stored body without decoding it.
//!
//! Diagnostics keep varnishd's texts and its offsets ("ERR after N …",
//! where N is the downstream offset of the last range boundary), because
//! operators and the test-suite match on them.

use bytes::Bytes;

/// What a downstream stage does at a boundary (varnishd's `VGZ_*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Just pass the bytes on.
    Normal,
    /// A verbatim range ends: make everything so far decodable and byte
    /// aligned (a deflate sync flush).
    Align,
    /// A verbatim range starts: as `Align`, and forget history, so the range
    /// does not refer back to skipped bytes (a deflate full flush).
    Reset,
    /// End of the body.
    Finish,
}

/// Where parsed bytes go: a counter for plain objects, a compressor for
/// gzip objects.
pub trait Downstream {
    /// Hands the next `n` input bytes (in input order; `n` may be 0 when
    /// only `flush` matters) downstream and returns the downstream offset
    /// reached.
    fn pass(&mut self, n: u64, flush: Flush) -> u64;
}

/// The ESI features (`param.set feature +esi_…`) that change parsing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    pub remove_bom: bool,
    pub disable_xml_check: bool,
    pub ignore_other_elements: bool,
    pub ignore_https: bool,
}

/// One step of delivering an ESI object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instr {
    /// Deliver the next `len` stored bytes. For a gzip object these are
    /// independent deflate blocks holding `plain_len` bytes whose CRC-32 is
    /// `crc` (both 0 for a plain object).
    Verbatim { len: u64, plain_len: u64, crc: u32 },
    /// Skip the next `len` stored bytes.
    Skip(u64),
    /// Deliver the response to a sub-request for `url` (with `Host: host`
    /// when the `src` named one). `continue_on_error` is
    /// `onerror="continue"`.
    Include {
        host: Option<Bytes>,
        url: Bytes,
        continue_on_error: bool,
    },
}

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Counted in `MAIN.esi_errors`.
    Error,
    /// Counted in `MAIN.esi_warnings`.
    Warning,
    /// Not counted (the "No ESI processing" notices).
    Notice,
}

/// A parser message, logged as `ESI_xmlerror`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diag {
    pub severity: Severity,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Bom,
    TestXml,
    NotXml,
    NextTag,
    NotMyTag,
    StartTag,
    CommentEsi,
    Comment,
    Cdata,
    EsiTag,
    EsiEndTag,
    EsiInclude,
    EsiRemove,
    EsiComment,
    EsiBogon,
    InTag,
    TagError,
    Attr,
    SkipAttr,
    AttrGetVal,
    AttrDelim,
    AttrVal,
    Until,
    Match,
}

/// A keyword table: literals tried in order, and where an unmatched input
/// goes.
struct Table {
    entries: &'static [(&'static [u8], State)],
    default: State,
}

static START_TAG: Table = Table {
    entries: &[
        (b"!--esi", State::CommentEsi),
        (b"!---->", State::NextTag),
        (b"!--", State::Comment),
        (b"/esi:", State::EsiEndTag),
        (b"esi:", State::EsiTag),
        (b"![CDATA[", State::Cdata),
    ],
    default: State::NotMyTag,
};

static ESI_ELEMENT: Table = Table {
    entries: &[
        (b"include", State::EsiInclude),
        (b"remove", State::EsiRemove),
        (b"comment", State::EsiComment),
    ],
    default: State::EsiBogon,
};

static INCLUDE_ATTR: Table = Table {
    entries: &[
        (b"src=", State::AttrGetVal),
        (b"onerror=", State::AttrGetVal),
    ],
    default: State::SkipAttr,
};

/// varnishd looks for this sequence as the byte order mark.
static BOM: Table = Table {
    entries: &[(b"\xeb\xbb\xbf", State::Start)],
    default: State::Bom,
};

/// The element whose end (`>`) runs its action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    Include,
    Remove,
    Comment,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Verbatim,
    Skip,
}

/// Which attribute value is being collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AttrName {
    Src,
    OnError,
}

/// The ESI parser of one body.
pub struct Parser {
    features: Features,
    gzip: bool,
    /// The backend request's URL, base of relative `src`s.
    url: Bytes,

    state: State,
    startup: bool,
    esi_found: bool,
    endtag: bool,
    emptytag: bool,
    canattr: bool,
    remove: bool,
    in_esi_tag: bool,

    // Range bookkeeping (varnishd's o_wait, o_pending, o_last, crc…).
    last_mark: Mark,
    /// Bytes passed downstream in the current mode, not yet emitted.
    wait: u64,
    /// Bytes seen but not yet assigned a mode.
    pending: u64,
    /// Downstream offset at the last emitted boundary.
    last: u64,
    crc: u32,
    crc_len: u64,
    crc_pending: u32,

    until: &'static [u8],
    until_pos: usize,
    until_next: State,
    /// Armed after `<!--esi`: the `-->` that ends the ESI comment.
    esicmt_armed: bool,
    esicmt_pos: usize,

    /// The keyword table being matched.
    table: Option<&'static Table>,
    /// The start of a keyword that the end of a piece cut: parsed again
    /// with the next piece, so that the result never depends on how the
    /// body was cut (at most the longest keyword, 8 bytes).
    carry: Vec<u8>,

    element: Option<Element>,
    attrs: Option<&'static Table>,
    attr_name: Option<AttrName>,
    attr_delim: u8,
    attr_val: Option<Vec<u8>>,
    include_src: Option<Vec<u8>>,
    include_continue: bool,

    instrs: Vec<Instr>,
    diags: Vec<Diag>,
}

impl std::fmt::Debug for Parser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parser")
            .field("state", &self.state)
            .field("gzip", &self.gzip)
            .finish()
    }
}

fn is_lws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_sp(c: u8) -> bool {
    matches!(c, b' ' | b'\t')
}

/// varnishd's XML name-start class: letters, `_`, `:` and any non-ASCII
/// byte.
fn is_xml_name_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':' || c >= 0x80
}

/// varnishd's XML name class: ASCII only (a non-ASCII byte inside an
/// attribute name is an error there).
fn is_xml_name(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b':' | b'-' | b'.')
}

/// Matches `input` against `table`: `Some(entry index or None for the
/// default)`, or `None` when `input` is too short to decide.
fn lookup(table: &Table, input: &[u8]) -> Option<Option<usize>> {
    for (i, (lit, _)) in table.entries.iter().enumerate() {
        let n = lit.len().min(input.len());
        if lit[..n] != input[..n] {
            continue;
        }
        if n == lit.len() {
            return Some(Some(i));
        }
        return None;
    }
    Some(None)
}

impl Parser {
    /// A parser for the body fetched for `url`; `gzip` when the downstream
    /// compresses (verbatim ranges then carry their plain length and CRC).
    pub fn new(url: &[u8], features: Features, gzip: bool) -> Parser {
        Parser {
            features,
            gzip,
            url: Bytes::copy_from_slice(url),
            state: State::Start,
            startup: true,
            esi_found: false,
            endtag: false,
            emptytag: false,
            canattr: false,
            remove: false,
            in_esi_tag: false,
            last_mark: Mark::Verbatim,
            wait: 0,
            pending: 0,
            last: 0,
            crc: 0,
            crc_len: 0,
            crc_pending: 0,
            until: b"",
            until_pos: 0,
            until_next: State::NextTag,
            esicmt_armed: false,
            esicmt_pos: 0,
            table: None,
            carry: Vec::new(),
            element: None,
            attrs: None,
            attr_name: None,
            attr_delim: 0,
            attr_val: None,
            include_src: None,
            include_continue: false,
            instrs: Vec::new(),
            diags: Vec::new(),
        }
    }

    /// Diagnostics produced since the last call.
    pub fn take_diags(&mut self) -> Vec<Diag> {
        std::mem::take(&mut self.diags)
    }

    fn error(&mut self, text: &str) {
        self.diags.push(Diag {
            severity: Severity::Error,
            text: format!("ERR after {} {text}", self.last),
        });
    }

    fn warn(&mut self, text: &str) {
        self.diags.push(Diag {
            severity: Severity::Warning,
            text: format!("WARN after {} {text}", self.last),
        });
    }

    fn notice(&mut self, text: &str) {
        self.diags.push(Diag {
            severity: Severity::Notice,
            text: text.to_string(),
        });
    }

    fn crc_update(&self, crc: u32, bytes: &[u8]) -> u32 {
        if self.gzip {
            zlib_rs::crc32::crc32(crc, bytes)
        } else {
            0
        }
    }

    /// Emits the range that just ended.
    fn emit(&mut self, len: u64, mark: Mark) {
        if len == 0 {
            return;
        }
        self.instrs.push(match mark {
            Mark::Skip => Instr::Skip(len),
            Mark::Verbatim if self.gzip => Instr::Verbatim {
                len,
                plain_len: self.crc_len,
                crc: self.crc,
            },
            Mark::Verbatim => Instr::Verbatim {
                len,
                plain_len: 0,
                crc: 0,
            },
        });
        self.crc = 0;
        self.crc_len = 0;
    }

    /// Assigns `buf[*ver..p]` (and any pending bytes before it) to `mark`.
    fn mark(&mut self, buf: &[u8], ver: &mut usize, p: usize, mark: Mark, ds: &mut dyn Downstream) {
        if self.last_mark == mark && p == *ver && self.pending == 0 {
            return;
        }
        if self.last_mark != mark && (self.wait > 0 || self.startup) {
            let flush = if mark == Mark::Verbatim {
                Flush::Reset
            } else {
                Flush::Align
            };
            let at = ds.pass(0, flush);
            self.emit(at.saturating_sub(self.last), self.last_mark);
            self.last = at;
            self.wait = 0;
        }
        if self.pending > 0 {
            ds.pass(self.pending, Flush::Normal);
            if self.crc_len == 0 {
                self.crc = self.crc_pending;
                self.crc_len = self.pending;
            } else if self.gzip {
                self.crc = zlib_rs::crc32::crc32_combine(self.crc, self.crc_pending, self.pending);
                self.crc_len += self.pending;
            }
            self.crc_pending = 0;
            self.wait += self.pending;
            self.pending = 0;
        }
        let bytes = &buf[*ver..p];
        self.crc = self.crc_update(self.crc, bytes);
        self.crc_len += bytes.len() as u64;
        *ver = p;
        self.wait += bytes.len() as u64;
        self.last_mark = mark;
        ds.pass(bytes.len() as u64, Flush::Normal);
    }

    fn mark_pending(&mut self, buf: &[u8], ver: &mut usize, p: usize) {
        let bytes = &buf[*ver..p];
        self.crc_pending = self.crc_update(self.crc_pending, bytes);
        *ver = p;
        self.pending += bytes.len() as u64;
    }

    /// Parses the next piece of the body.
    pub fn feed(&mut self, buf: &[u8], ds: &mut dyn Downstream) {
        if buf.is_empty() {
            return;
        }
        if self.carry.is_empty() {
            self.parse(buf, ds);
        } else {
            let mut joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(buf);
            self.parse(&joined, ds);
        }
    }

    fn parse(&mut self, buf: &[u8], ds: &mut dyn Downstream) {
        let mut ver = 0usize;
        if self.startup {
            // A gzip header must come out as a skip range, or an object
            // starting with an include would deliver it after the include.
            self.last_mark = Mark::Skip;
            self.mark(buf, &mut ver, 0, Mark::Verbatim, ds);
            self.startup = false;
        }
        let e = buf.len();
        let mut p = 0usize;
        while p < e {
            let c = buf[p];
            match self.state {
                State::Start => {
                    if self.features.remove_bom && c == 0xeb {
                        self.table = Some(&BOM);
                        self.state = State::Match;
                    } else {
                        self.state = State::Bom;
                    }
                }
                State::Bom => {
                    self.mark(buf, &mut ver, p, Mark::Skip, ds);
                    self.state = if self.features.disable_xml_check {
                        State::NextTag
                    } else {
                        State::TestXml
                    };
                }
                State::TestXml => {
                    while p < e && is_lws(buf[p]) {
                        p += 1;
                    }
                    self.mark(buf, &mut ver, p, Mark::Verbatim, ds);
                    if p < e {
                        if buf[p] == b'<' {
                            p += 1;
                            self.state = State::StartTag;
                        } else if buf[p] == 0xeb {
                            self.notice(
                                "No ESI processing, first char not '<' but BOM. \
                                 (See feature esi_remove_bom)",
                            );
                            self.state = State::NotXml;
                        } else {
                            self.notice(
                                "No ESI processing, first char not '<'. \
                                 (See feature esi_disable_xml_check)",
                            );
                            self.state = State::NotXml;
                        }
                    }
                }
                State::NotXml => {
                    p = e;
                    self.mark(buf, &mut ver, p, Mark::Verbatim, ds);
                }
                State::NotMyTag => {
                    if self.features.ignore_other_elements {
                        p += 1;
                        self.state = State::NextTag;
                    } else {
                        while p < e {
                            p += 1;
                            if buf[p - 1] == b'>' {
                                self.state = State::NextTag;
                                break;
                            }
                        }
                    }
                    // While part of an ESI comment's `-->` is matched, the
                    // bytes stay pending as in NextTag: a `>` in the next
                    // piece may end the comment and make them a skip, as it
                    // would in one piece (varnishd marks them here, so its
                    // result depends on where the body was cut).
                    if p == e && !self.remove && self.esicmt_pos == 0 {
                        self.mark(buf, &mut ver, p, Mark::Verbatim, ds);
                    }
                }
                State::NextTag => {
                    self.emptytag = false;
                    self.attrs = None;
                    self.element = None;
                    while p < e && buf[p] != b'<' {
                        if !self.esicmt_armed {
                            p += 1;
                            continue;
                        }
                        if buf[p] != b"-->"[self.esicmt_pos] {
                            p += 1;
                            self.esicmt_pos = 0;
                            continue;
                        }
                        if !self.remove && self.esicmt_pos == 0 {
                            self.mark(buf, &mut ver, p, Mark::Verbatim, ds);
                        }
                        p += 1;
                        self.esicmt_pos += 1;
                        if self.esicmt_pos == 3 {
                            self.esi_found = true;
                            self.esicmt_armed = false;
                            self.esicmt_pos = 0;
                            // The end of the ESI comment is not delivered,
                            // what came before it is.
                            self.mark(buf, &mut ver, p, Mark::Skip, ds);
                        }
                    }
                    if p < e {
                        if !self.remove {
                            self.mark(buf, &mut ver, p, Mark::Verbatim, ds);
                        }
                        p += 1;
                        self.state = State::StartTag;
                    } else if self.esicmt_pos == 0 && !self.remove {
                        self.mark(buf, &mut ver, p, Mark::Verbatim, ds);
                    }
                }
                State::StartTag => {
                    self.endtag = false;
                    self.table = Some(&START_TAG);
                    self.state = State::Match;
                }
                State::CommentEsi => {
                    if self.remove {
                        self.error("ESI 1.0 Nested <!--esi element in <esi:remove>");
                    }
                    self.esicmt_armed = true;
                    self.esicmt_pos = 0;
                    self.state = State::NextTag;
                    self.mark(buf, &mut ver, p, Mark::Skip, ds);
                }
                State::Comment => {
                    self.esicmt_armed = false;
                    self.esicmt_pos = 0;
                    self.start_until(b"-->");
                }
                State::Cdata => self.start_until(b"]]>"),
                State::EsiEndTag => {
                    self.endtag = true;
                    self.state = State::EsiTag;
                }
                State::EsiTag => {
                    self.in_esi_tag = true;
                    self.esi_found = true;
                    self.mark(buf, &mut ver, p, Mark::Skip, ds);
                    self.table = Some(&ESI_ELEMENT);
                    self.state = State::Match;
                }
                State::EsiInclude => {
                    if self.remove {
                        self.error("ESI 1.0 <esi:include> element nested in <esi:remove>");
                        self.state = State::TagError;
                    } else if self.endtag {
                        self.error("ESI 1.0 </esi:include> illegal end-tag");
                        self.state = State::TagError;
                    } else {
                        self.element = Some(Element::Include);
                        self.attrs = Some(&INCLUDE_ATTR);
                        self.state = State::InTag;
                    }
                }
                State::EsiRemove => {
                    self.element = Some(Element::Remove);
                    self.state = State::InTag;
                }
                State::EsiComment => {
                    if self.remove {
                        self.error("ESI 1.0 <esi:comment> element nested in <esi:remove>");
                        self.state = State::TagError;
                    } else if self.endtag {
                        self.error("ESI 1.0 </esi:comment> illegal end-tag");
                        self.state = State::TagError;
                    } else {
                        self.element = Some(Element::Comment);
                        self.state = State::InTag;
                    }
                }
                State::EsiBogon => {
                    self.error("ESI 1.0 <esi:bogus> element");
                    self.state = State::TagError;
                }
                State::InTag => {
                    while p < e && is_lws(buf[p]) && !self.emptytag {
                        p += 1;
                        self.canattr = true;
                    }
                    if p < e && buf[p] == b'/' && !self.emptytag {
                        p += 1;
                        self.emptytag = true;
                        self.canattr = false;
                    }
                    if p < e && buf[p] == b'>' {
                        p += 1;
                        self.mark(buf, &mut ver, p, Mark::Skip, ds);
                        self.end_of_tag();
                        self.in_esi_tag = false;
                        self.state = State::NextTag;
                    } else if p < e && self.emptytag {
                        self.error("XML 1.0 '>' does not follow '/' in tag");
                        self.state = State::TagError;
                    } else if p < e && self.canattr && is_xml_name_start(buf[p]) {
                        self.state = State::Attr;
                    } else if p < e {
                        self.error("XML 1.0 Illegal attribute start char");
                        self.state = State::TagError;
                    }
                }
                State::TagError => {
                    while p < e && buf[p] != b'>' {
                        p += 1;
                    }
                    if p < e {
                        p += 1;
                        self.mark(buf, &mut ver, p, Mark::Skip, ds);
                        self.in_esi_tag = false;
                        self.state = State::NextTag;
                        self.attr_val = None;
                    }
                }
                State::Attr => match self.attrs {
                    None => {
                        p += 1;
                        self.state = State::SkipAttr;
                    }
                    Some(t) => {
                        self.table = Some(t);
                        self.state = State::Match;
                    }
                },
                State::SkipAttr => {
                    while p < e && is_xml_name(buf[p]) {
                        p += 1;
                    }
                    if p < e {
                        match buf[p] {
                            b'=' => {
                                p += 1;
                                self.attr_name = None;
                                self.state = State::AttrDelim;
                            }
                            b'>' | b'/' => self.state = State::InTag,
                            c if is_sp(c) => self.state = State::InTag,
                            _ => {
                                self.error("XML 1.0 Illegal attr char");
                                self.state = State::TagError;
                            }
                        }
                    }
                }
                State::AttrGetVal => {
                    self.attr_val = Some(Vec::new());
                    self.state = State::AttrDelim;
                }
                State::AttrDelim => {
                    if c == b'"' || c == b'\'' {
                        self.attr_delim = c;
                        p += 1;
                        self.state = State::AttrVal;
                    } else if !is_sp(c) {
                        self.attr_delim = b' ';
                        self.state = State::AttrVal;
                    } else {
                        self.error("XML 1.0 Illegal attribute delimiter");
                        self.state = State::TagError;
                    }
                }
                State::AttrVal => {
                    let start = p;
                    while p < e
                        && buf[p] != b'>'
                        && buf[p] != self.attr_delim
                        && (self.attr_delim != b' ' || !is_sp(buf[p]))
                    {
                        p += 1;
                    }
                    if let Some(v) = self.attr_val.as_mut() {
                        v.extend_from_slice(&buf[start..p]);
                    }
                    if p < e && buf[p] == b'>' {
                        self.error("XML 1.0 Missing end attribute delimiter");
                        self.state = State::TagError;
                        self.attr_delim = 0;
                        self.attr_val = None;
                    } else if p < e {
                        self.attr_delim = 0;
                        p += 1;
                        self.state = State::InTag;
                        if let Some(v) = self.attr_val.take() {
                            self.attribute(v);
                        }
                    }
                }
                State::Until => {
                    while p < e {
                        p += 1;
                        if self.until_step(buf[p - 1]) {
                            break;
                        }
                    }
                    if p == e && !self.remove {
                        self.mark(buf, &mut ver, p, Mark::Verbatim, ds);
                    }
                }
                State::Match => {
                    let table = self.table.unwrap_or(&START_TAG);
                    match lookup(table, &buf[p..]) {
                        Some(hit) => {
                            if let Some(i) = hit {
                                p += table.entries[i].0.len();
                            }
                            self.matched(table, hit);
                        }
                        None => {
                            // The piece ends inside a keyword: keep its
                            // start for the next piece.
                            self.carry.extend_from_slice(&buf[p..]);
                            break;
                        }
                    }
                }
            }
        }
        // Every byte of the piece gets a mark before the piece is gone.
        if p == ver {
        } else if self.in_esi_tag || self.remove {
            self.mark(buf, &mut ver, p, Mark::Skip, ds);
        } else {
            self.mark_pending(buf, &mut ver, p);
        }
    }

    fn start_until(&mut self, what: &'static [u8]) {
        self.until = what;
        self.until_pos = 0;
        self.until_next = State::NextTag;
        self.state = State::Until;
    }

    /// One byte through the `Until` scanner; true when the string is found.
    fn until_step(&mut self, b: u8) -> bool {
        if b != self.until[self.until_pos] {
            self.until_pos = 0;
            false
        } else {
            self.until_pos += 1;
            if self.until_pos == self.until.len() {
                self.state = self.until_next;
                true
            } else {
                false
            }
        }
    }

    fn matched(&mut self, table: &Table, hit: Option<usize>) {
        self.state = match hit {
            Some(i) => table.entries[i].1,
            None => table.default,
        };
        if std::ptr::eq(table, &INCLUDE_ATTR) {
            self.attr_name = match hit {
                Some(0) => Some(AttrName::Src),
                Some(_) => Some(AttrName::OnError),
                None => None,
            };
        }
        self.table = None;
    }

    /// An attribute value of the current element is complete.
    fn attribute(&mut self, value: Vec<u8>) {
        match self.attr_name {
            Some(AttrName::Src) => {
                if self.include_src.is_some() {
                    self.error("ESI 1.0 <esi:include> has multiple src= attributes");
                    self.state = State::TagError;
                    self.include_src = None;
                    return;
                }
                self.include_src = Some(value);
            }
            Some(AttrName::OnError) => self.include_continue = value == b"continue",
            None => {}
        }
    }

    /// The `>` of an ESI element.
    fn end_of_tag(&mut self) {
        match self.element {
            Some(Element::Comment) if !self.emptytag => {
                self.error("ESI 1.0 <esi:comment> needs final '/'");
            }
            Some(Element::Comment) => {}
            Some(Element::Remove) => {
                if self.emptytag {
                    self.error("ESI 1.0 <esi:remove/> not legal");
                } else if self.remove && !self.endtag {
                    self.error("ESI 1.0 <esi:remove> already open");
                } else if !self.remove && self.endtag {
                    self.error("ESI 1.0 <esi:remove> not open");
                } else {
                    self.remove = !self.endtag;
                }
            }
            Some(Element::Include) => self.include(),
            None => {}
        }
    }

    fn include(&mut self) {
        if !self.emptytag {
            self.warn("ESI 1.0 <esi:include> lacks final '/'");
        }
        let continue_on_error = std::mem::take(&mut self.include_continue);
        let Some(src) = self.include_src.take() else {
            self.error("ESI 1.0 <esi:include> lacks src attr");
            return;
        };
        if src.iter().any(|&c| is_lws(c)) {
            self.error("ESI 1.0 <esi:include> has whitespace in src= attribute");
            return;
        }
        // varnishd reads the src as a C string: it ends at a NUL byte,
        // which never reaches a request line.
        let src = match src.iter().position(|&c| c == 0) {
            Some(n) => &src[..n],
            None => &src[..],
        };
        // As varnishd, a src that is only the scheme ("http://") is a
        // relative path, and "http:///x" sets an empty Host.
        let (host, path): (Option<&[u8]>, &[u8]) = if src.len() > 7
            && let Some(rest) = src.strip_prefix(b"http://".as_slice())
        {
            match rest.iter().position(|&c| c == b'/') {
                Some(i) => (Some(&rest[..i]), &rest[i..]),
                None => {
                    self.error("ESI 1.0 <esi:include> invalid src= URL");
                    return;
                }
            }
        } else if src.len() > 8
            && let Some(rest) = src.strip_prefix(b"https://".as_slice())
        {
            if !self.features.ignore_https {
                self.warn("ESI 1.0 <esi:include> with https:// ignored");
                return;
            }
            self.warn("ESI 1.0 <esi:include> https:// treated as http://");
            match rest.iter().position(|&c| c == b'/') {
                Some(i) => (Some(&rest[..i]), &rest[i..]),
                None => {
                    self.error("ESI 1.0 <esi:include> invalid src= URL");
                    return;
                }
            }
        } else {
            (None, src)
        };
        let mut url = Vec::with_capacity(path.len() + self.url.len());
        if host.is_none() && path.first() != Some(&b'/') {
            // Relative: against the directory of the URL, as varnishd
            // computes it (the part before the last '/' ahead of any '?';
            // a URL without '/' is taken whole, its '?' included).
            let q = self.url.iter().position(|&c| c == b'?');
            let before_q = &self.url[..q.unwrap_or(self.url.len())];
            match before_q.iter().rposition(|&c| c == b'/') {
                Some(i) => url.extend_from_slice(&self.url[..i]),
                None => url.extend_from_slice(&self.url[..q.map_or(self.url.len(), |q| q + 1)]),
            }
            url.push(b'/');
        }
        decode_entities(path, &mut url);
        self.instrs.push(Instr::Include {
            host: host.map(Bytes::copy_from_slice),
            url: Bytes::from(url),
            continue_on_error,
        });
    }

    /// The body is complete: the instructions, or `None` when the body held
    /// no ESI markup at all (it is then delivered as it is).
    pub fn finish(&mut self, ds: &mut dyn Downstream) -> Option<Vec<Instr>> {
        self.include_src = None;
        self.attr_val = None;
        let carry = std::mem::take(&mut self.carry);
        if !carry.is_empty() {
            let mut ver = 0;
            if self.in_esi_tag || self.remove {
                self.mark(&carry, &mut ver, carry.len(), Mark::Skip, ds);
            } else {
                self.mark_pending(&carry, &mut ver, carry.len());
            }
        }
        if !matches!(
            self.state,
            State::Start | State::Bom | State::TestXml | State::NotXml | State::NextTag
        ) {
            self.error("VEP ended inside a tag");
        }
        if self.pending > 0 {
            let mut ver = 0;
            let mark = self.last_mark;
            self.mark(&[], &mut ver, 0, mark, ds);
        }
        if self.wait > 0 {
            let at = ds.pass(0, Flush::Align);
            self.emit(at.saturating_sub(self.last), self.last_mark);
            self.last = at;
            self.wait = 0;
        }
        ds.pass(0, Flush::Finish);
        if self.esi_found && !self.instrs.is_empty() {
            Some(std::mem::take(&mut self.instrs))
        } else {
            None
        }
    }
}

/// Appends `s` with the XML 1.0 predefined entities decoded.
fn decode_entities(s: &[u8], out: &mut Vec<u8>) {
    const ENTITIES: [(&[u8], u8); 5] = [
        (b"&apos;", b'\''),
        (b"&quot;", b'"'),
        (b"&lt;", b'<'),
        (b"&gt;", b'>'),
        (b"&amp;", b'&'),
    ];
    let mut i = 0;
    'outer: while i < s.len() {
        if s[i] == b'&' {
            for (ent, c) in ENTITIES {
                if s[i..].starts_with(ent) {
                    out.push(c);
                    i += ent.len();
                    continue 'outer;
                }
            }
        }
        out.push(s[i]);
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts bytes, as for a plain object.
    struct Count(u64);

    impl Downstream for Count {
        fn pass(&mut self, n: u64, _: Flush) -> u64 {
            self.0 += n;
            self.0
        }
    }

    fn parse_pieces(pieces: &[&[u8]], f: Features) -> (Option<Vec<Instr>>, Vec<String>) {
        let mut p = Parser::new(b"/dir/page?x=/y", f, false);
        let mut ds = Count(0);
        let mut diags = Vec::new();
        for piece in pieces {
            p.feed(piece, &mut ds);
            diags.extend(p.take_diags());
        }
        let out = p.finish(&mut ds);
        diags.extend(p.take_diags());
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        assert_eq!(ds.0, total as u64, "every byte is passed downstream");
        (out, diags.into_iter().map(|d| d.text).collect())
    }

    /// What delivery would produce, with includes as `[url]`.
    fn render(body: &[u8], instrs: &[Instr]) -> String {
        let mut out = String::new();
        let mut at = 0usize;
        for i in instrs {
            match i {
                Instr::Verbatim { len, .. } => {
                    out.push_str(&String::from_utf8_lossy(&body[at..at + *len as usize]));
                    at += *len as usize;
                }
                Instr::Skip(len) => at += *len as usize,
                Instr::Include { host, url, .. } => {
                    out.push('[');
                    if let Some(h) = host {
                        out.push_str(&String::from_utf8_lossy(h));
                    }
                    out.push_str(&String::from_utf8_lossy(url));
                    out.push(']');
                }
            }
        }
        assert_eq!(at, body.len(), "instructions cover the body");
        out
    }

    fn esi(body: &str) -> (String, Vec<String>) {
        let (instrs, diags) = parse_pieces(&[body.as_bytes()], Features::default());
        let out = match instrs {
            Some(i) => render(body.as_bytes(), &i),
            None => format!("(no esi) {body}"),
        };
        // Every split in two and byte-by-byte parse the same.
        for cut in 1..body.len() {
            let (a, b) = body.as_bytes().split_at(cut);
            let (i2, d2) = parse_pieces(&[a, b], Features::default());
            let o2 = match i2 {
                Some(i) => render(body.as_bytes(), &i),
                None => format!("(no esi) {body}"),
            };
            assert_eq!(o2, out, "split at {cut}");
            assert_eq!(d2, diags, "split at {cut}");
        }
        let bytes: Vec<&[u8]> = body.as_bytes().chunks(1).collect();
        let (i3, d3) = parse_pieces(&bytes, Features::default());
        let o3 = match i3 {
            Some(i) => render(body.as_bytes(), &i),
            None => format!("(no esi) {body}"),
        };
        assert_eq!(o3, out, "byte by byte");
        assert_eq!(d3, diags, "byte by byte");
        (out, diags)
    }

    #[test]
    fn removes_markup_and_finds_includes() {
        let (out, d) =
            esi("<html>a<esi:include src=\"/x\"/>b<esi:remove>gone</esi:remove>c<!--esi d-->e");
        assert_eq!(out, "<html>a[/x]bc de");
        assert!(d.is_empty(), "{d:?}");
        let (out, _) = esi("<p><esi:include src=\"rel&amp;a\"/><esi:include src=\"http://h/p\"/>");
        assert_eq!(out, "<p>[/dir/rel&a][h/p]");
        // Only the scheme is a relative URL; an empty host is kept; a NUL
        // ends the src (varnishd reads it as a C string).
        let (out, _) = esi("<p><esi:include src=\"http://\"/><esi:include src=\"http:///i\"/>");
        assert_eq!(out, "<p>[/dir/http://][/i]");
        let (out, _) = esi("<p><esi:include src=\"/a\0b\"/>");
        assert_eq!(out, "<p>[/a]");
        let (out, _) = esi("<p><esi:comment text=\"x\"/><![CDATA[<esi:include src=\"/n\"/>]]>");
        assert_eq!(out, "<p><![CDATA[<esi:include src=\"/n\"/>]]>");
    }

    #[test]
    fn varnish_messages_and_offsets() {
        let (out, d) = esi(
            "\n\t\t<esi:remove>\n<esi:include src=\"q\">\n<!--esi X -->\n</esi:remove>\n<esX>Hello\n",
        );
        assert_eq!(out, "\n\t\t\n<esX>Hello\n");
        assert_eq!(
            d,
            [
                "ERR after 3 ESI 1.0 <esi:include> element nested in <esi:remove>",
                "ERR after 3 ESI 1.0 Nested <!--esi element in <esi:remove>",
            ]
        );
        let (out, d) = esi("x <esi:include src=\"/a\"/>");
        assert_eq!(out, "(no esi) x <esi:include src=\"/a\"/>");
        assert_eq!(
            d,
            ["No ESI processing, first char not '<'. (See feature esi_disable_xml_check)"]
        );
        let (_, d) = esi(
            "<a><esi:include src=\"/a b\"/><esi:include src=\"http://nohost\"/><esi:bogus/><esi:include src=\"/ok\">",
        );
        assert_eq!(
            d,
            [
                "ERR after 3 ESI 1.0 <esi:include> has whitespace in src= attribute",
                "ERR after 28 ESI 1.0 <esi:include> invalid src= URL",
                "ERR after 62 ESI 1.0 <esi:bogus> element",
                "WARN after 74 ESI 1.0 <esi:include> lacks final '/'",
            ]
        );
        let (_, d) = esi("<a>text<b>more<esi:remove><x");
        assert_eq!(d, ["ERR after 14 VEP ended inside a tag"]);
    }

    #[test]
    fn onerror_and_relative_urls() {
        let mut p = Parser::new(b"noslash?q", Features::default(), false);
        let mut ds = Count(0);
        p.feed(
            b"<a><esi:include src=\"f\" onerror=\"continue\"/><esi:include src=\"/g\"/>",
            &mut ds,
        );
        let i = p.finish(&mut ds).unwrap();
        let incs: Vec<_> = i
            .iter()
            .filter_map(|i| match i {
                Instr::Include {
                    url,
                    continue_on_error,
                    ..
                } => Some((url.clone(), *continue_on_error)),
                _ => None,
            })
            .collect();
        assert_eq!(
            incs,
            [
                (Bytes::from_static(b"noslash?/f"), true),
                (Bytes::from_static(b"/g"), false)
            ]
        );
    }

    #[test]
    fn features_change_parsing() {
        let f = Features {
            disable_xml_check: true,
            ignore_other_elements: true,
            ..Features::default()
        };
        let body = b"\n<f<esi?\n<esi:remove>\nbar\n</esi:remove>\nfoo\n";
        let (i, d) = parse_pieces(&[body], f);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(render(body, &i.unwrap()), "\n<f<esi?\n\nfoo\n");
        let https = Features {
            ignore_https: true,
            ..Features::default()
        };
        let (i, d) = parse_pieces(&[b"<a><esi:include src=\"https://h/x\"/>"], https);
        assert_eq!(
            d,
            ["WARN after 3 ESI 1.0 <esi:include> https:// treated as http://"]
        );
        assert!(matches!(
            &i.unwrap()[..],
            [
                Instr::Verbatim { .. },
                Instr::Include { .. },
                Instr::Skip(_)
            ]
        ));
    }

    #[test]
    fn a_keyword_cut_by_the_piece_boundary_parses_as_if_whole() {
        // A broken byte-order mark cut after its first byte (found by the
        // fuzz target): the check for '<' still sees that byte.
        let bom = Features {
            remove_bom: true,
            ..Features::default()
        };
        let body: &[u8] = b"\xeb\x8b<esi:include src=\"/x\"/>";
        let (whole, d1) = parse_pieces(&[body], bom);
        let (split, d2) = parse_pieces(&[&body[..1], &body[1..]], bom);
        assert_eq!(whole, split);
        assert_eq!(d1, d2);
        assert!(whole.is_none());
    }

    #[test]
    fn a_comment_end_after_another_tag_does_not_depend_on_the_cut() {
        // Found by the fuzz target: in an ESI comment, "--" then a tag that
        // is not ESI's, then ">": the pending "--" match completes on that
        // ">", whether or not a piece ended just before it.
        for (ignore, body) in [
            (true, &b"<!--esi a--<=>b-->"[..]),
            (false, &b"<!--esi a--<x>>b-->"[..]),
        ] {
            let f = Features {
                ignore_other_elements: ignore,
                ..Features::default()
            };
            let (whole, d1) = parse_pieces(&[body], f);
            let cut = body.len() - 6;
            let (split, d2) = parse_pieces(&[&body[..cut], &body[cut..]], f);
            let (bytes, _) = parse_pieces(&body.chunks(1).collect::<Vec<_>>(), f);
            assert_eq!(whole, split, "{}", String::from_utf8_lossy(body));
            assert_eq!(whole, bytes, "{}", String::from_utf8_lossy(body));
            assert_eq!(d1, d2);
            let whole = whole.expect("an ESI object");
            assert_eq!(
                render(body, &whole),
                " a--b-->",
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn hostile_input_never_panics() {
        let mut seed = 0x2545_f491_u64;
        let alphabet: &[&[u8]] = &[
            b"<",
            b">",
            b"/",
            b"esi:",
            b"include",
            b"remove",
            b"comment",
            b" src=",
            b"\"",
            b"'",
            b"!--",
            b"-->",
            b"esi",
            b"![CDATA[",
            b"]]>",
            b"=",
            b"x",
            b" ",
            b"\n",
            b"\xeb\xbb\xbf",
            b"onerror=",
            b"&amp;",
            b"http://",
            b"https://",
        ];
        for _ in 0..300 {
            let mut body = Vec::new();
            for _ in 0..40 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                body.extend_from_slice(alphabet[(seed % alphabet.len() as u64) as usize]);
            }
            let all = Features {
                remove_bom: seed & 1 == 0,
                disable_xml_check: seed & 2 == 0,
                ignore_other_elements: seed & 4 == 0,
                ignore_https: seed & 8 == 0,
            };
            let (whole, d1) = parse_pieces(&[&body], all);
            let pieces: Vec<&[u8]> = body.chunks(1 + (seed % 5) as usize).collect();
            let (split, d2) = parse_pieces(&pieces, all);
            assert_eq!(d1, d2);
            if let (Some(a), Some(b)) = (&whole, &split) {
                assert_eq!(render(&body, a), render(&body, b));
            } else {
                assert_eq!(whole.is_some(), split.is_some());
            }
        }
    }
}
