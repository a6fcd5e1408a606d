//! varnishncsa's log line formats: parsing a format string (`-F`, `-f`)
//! into items with varnishncsa's error messages, collecting the values a
//! transaction's records give each item, and rendering one line with the
//! text (`\xNN`) or JSON (`-j`, `\u00NN`) escaping.

use lacquer_vsl::tags::TagError;
use lacquer_vsl::tags::{F_BINARY, F_UNSAFE};
use lacquer_vsl::{Record, Tag, Transaction, TxType};

/// The default format.
pub const DEFAULT_FORMAT: &str = "%h %l %u %t \"%r\" %s %b \"%{Referer}i\" \"%{User-agent}i\"";

/// Values varnishncsa takes from fixed records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// `%H` protocol.
    Proto,
    /// `%U` URL path.
    Path,
    /// `%q` query string.
    Query,
    /// `%b` body bytes sent.
    BodyBytes,
    /// `%h` remote (or backend) address.
    Host,
    /// `%m` method.
    Method,
    /// `%s` status.
    Status,
    /// `%I` bytes received.
    BytesIn,
    /// `%O` bytes sent.
    BytesOut,
    /// Start time (Timestamp `Start:`).
    TStart,
    /// End time (Timestamp `Resp:`, `PipeSess:`, `BerespBody:`).
    TEnd,
    /// `%{Varnish:time_firstbyte}x`.
    Ttfb,
    /// The Host header as `%r` uses it (first one).
    HostHeader,
    /// The Authorization header's basic credentials (first one).
    Auth,
}

const SLOTS: usize = 14;

/// What a `%{X}t` or `%t` prints.
#[derive(Clone, Debug, PartialEq, Eq)]
enum TimeFmt {
    Strftime(String),
    Sec,
    Msec,
    Usec,
    MsecFrac,
    UsecFrac,
}

/// Units of `%D`, `%T` and `%{X}T`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Duration {
    Sec,
    Msec,
    Usec,
}

/// The `%{Varnish:...}x` words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Word {
    HitMiss,
    Handling,
    Side,
}

/// A header watch (`%{X}i`, `%{X}o`): the last matching header wins.
#[derive(Clone, Debug)]
struct HeaderWatch {
    /// Lowercase `name:`.
    key: Vec<u8>,
    /// Request (`i`) or response (`o`) headers.
    request: bool,
}

/// A `%{VSL:tag[:prefix][[field]]}x` watch: the first matching record wins.
#[derive(Clone, Debug)]
struct VslWatch {
    tag: Tag,
    /// Lowercase `prefix:`.
    prefix: Option<Vec<u8>>,
    /// 1-based field, 0 for the whole record.
    field: usize,
}

#[derive(Clone, Debug)]
enum Item {
    Lit(String),
    Slot(Slot, &'static str, &'static str),
    Header(usize),
    VclLog(usize),
    Vsl(usize),
    Word(Word),
    Vxid,
    Time(TimeFmt),
    Duration(Duration),
    RequestLine,
    User,
}

/// A parsed format.
#[derive(Clone, Debug)]
pub struct Format {
    items: Vec<Item>,
    headers: Vec<HeaderWatch>,
    vcl_logs: Vec<Vec<u8>>,
    vsls: Vec<VslWatch>,
}

fn tag_error(e: &TagError, name: &str) -> String {
    match e {
        TagError::Ambiguous(_) => format!("Tag not unique: {name}"),
        _ => format!("Unknown log tag: {name}"),
    }
}

/// `strtol(s, &end, 10)` over the whole of `s`: leading blanks and a sign
/// allowed, nothing after the digits.
fn strtol_all(s: &str) -> Option<i64> {
    let t = s.trim_start();
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(t.parse::<i64>().unwrap_or(if t.starts_with('-') {
        i64::MIN
    } else {
        i64::MAX
    }))
}

impl Format {
    /// Parses a format string; errors are varnishncsa's messages.
    pub fn parse(fmt: &str, json: bool) -> Result<Format, String> {
        let mut f = Format {
            items: Vec::new(),
            headers: Vec::new(),
            vcl_logs: Vec::new(),
            vsls: Vec::new(),
        };
        let mut lit = String::new();
        let mut rest = fmt;
        while let Some(c) = rest.chars().next() {
            let at = rest;
            rest = &rest[c.len_utf8()..];
            if c == '\\' && !rest.is_empty() {
                let n = rest.chars().next().unwrap_or('\\');
                rest = &rest[n.len_utf8()..];
                lit.push(match n {
                    't' => '\t',
                    'n' => '\n',
                    other => other,
                });
                continue;
            }
            if c != '%' {
                lit.push(c);
                continue;
            }
            if !lit.is_empty() {
                f.items.push(Item::Lit(std::mem::take(&mut lit)));
            }
            let unknown = |at: &str| format!("Unknown format specifier at: {at}");
            let Some(k) = rest.chars().next() else {
                return Err(unknown(at));
            };
            rest = &rest[k.len_utf8()..];
            let num = |text: &'static str| if json { "0" } else { text };
            let txt = |text: &'static str| if json { "" } else { text };
            let item = match k {
                'b' => Item::Slot(Slot::BodyBytes, "-", num("-")),
                'D' => Item::Duration(Duration::Usec),
                'h' => Item::Slot(Slot::Host, "-", txt("-")),
                'H' => Item::Slot(Slot::Proto, "HTTP/1.0", "HTTP/1.0"),
                'I' => Item::Slot(Slot::BytesIn, "-", num("-")),
                'l' => Item::Lit("-".into()),
                'm' => Item::Slot(Slot::Method, "-", txt("-")),
                'O' => Item::Slot(Slot::BytesOut, "-", num("-")),
                'q' => Item::Slot(Slot::Query, "", ""),
                'r' => Item::RequestLine,
                's' => Item::Slot(Slot::Status, "-", num("-")),
                't' => Item::Time(TimeFmt::Strftime("[%d/%b/%Y:%T %z]".into())),
                'T' => Item::Duration(Duration::Sec),
                'u' => Item::User,
                'U' => Item::Slot(Slot::Path, "-", txt("-")),
                '{' => {
                    // Braces nest: %{{%F}T{%T}}t formats "{%F}T{%T}".
                    let mut depth = 1;
                    let close = rest.char_indices().find_map(|(i, c)| {
                        match c {
                            '{' => depth += 1,
                            '}' => depth -= 1,
                            _ => {}
                        }
                        (depth == 0).then_some(i)
                    });
                    let Some(close) = close else {
                        return Err(format!("Unmatched bracket at: {at}"));
                    };
                    let arg = &rest[..close];
                    rest = &rest[close + 1..];
                    let Some(kind) = rest.chars().next() else {
                        return Err(unknown(at));
                    };
                    rest = &rest[kind.len_utf8()..];
                    match kind {
                        'i' | 'o' => {
                            f.headers.push(HeaderWatch {
                                key: format!("{}:", arg.to_ascii_lowercase()).into_bytes(),
                                request: kind == 'i',
                            });
                            Item::Header(f.headers.len() - 1)
                        }
                        't' => Item::Time(match arg {
                            "sec" => TimeFmt::Sec,
                            "msec" => TimeFmt::Msec,
                            "usec" => TimeFmt::Usec,
                            "msec_frac" => TimeFmt::MsecFrac,
                            "usec_frac" => TimeFmt::UsecFrac,
                            _ => TimeFmt::Strftime(arg.to_string()),
                        }),
                        'T' => Item::Duration(match arg {
                            "s" => Duration::Sec,
                            "ms" => Duration::Msec,
                            "us" => Duration::Usec,
                            _ => {
                                let spec = &at[..at.len() - rest.len()];
                                return Err(format!("Unknown specifier: {spec}"));
                            }
                        }),
                        'x' => f.extension(arg, json)?,
                        _ => return Err(unknown(at)),
                    }
                }
                _ => return Err(unknown(at)),
            };
            f.items.push(item);
        }
        if !lit.is_empty() {
            f.items.push(Item::Lit(lit));
        }
        Ok(f)
    }

    fn extension(&mut self, arg: &str, json: bool) -> Result<Item, String> {
        match arg {
            "Varnish:time_firstbyte" => {
                return Ok(Item::Slot(Slot::Ttfb, "-", if json { "0" } else { "-" }));
            }
            "Varnish:hitmiss" => return Ok(Item::Word(Word::HitMiss)),
            "Varnish:handling" => return Ok(Item::Word(Word::Handling)),
            "Varnish:side" => return Ok(Item::Word(Word::Side)),
            "Varnish:vxid" => return Ok(Item::Vxid),
            _ => {}
        }
        if let Some(key) = arg.strip_prefix("VCL_Log:") {
            self.vcl_logs.push(format!("{key}:").into_bytes());
            return Ok(Item::VclLog(self.vcl_logs.len() - 1));
        }
        let Some(spec) = arg.strip_prefix("VSL:") else {
            return Err(format!("Unknown formatting extension: {arg}"));
        };
        if spec.is_empty() {
            return Err("Missing tag in VSL:".into());
        }
        let mut name = spec;
        let mut field = 0;
        if let Some(body) = spec.strip_suffix(']') {
            let Some(open) = body.rfind('[').filter(|&i| i > 0) else {
                return Err(format!("Syntax error: VSL:{spec}"));
            };
            let idx = &body[open + 1..];
            if idx.is_empty() {
                return Err(format!("Syntax error: VSL:{spec}"));
            }
            let Some(n) = strtol_all(idx) else {
                return Err(format!("Syntax error: VSL:{spec}"));
            };
            if !(1..=255).contains(&n) {
                return Err(format!(
                    "Syntax error. Field specifier must be between 1 and 255: {spec}"
                ));
            }
            field = n as usize;
            name = &body[..open];
        }
        let (tag_name, prefix) = match name.split_once(':') {
            Some((t, p)) => (t, Some(p)),
            None => (name, None),
        };
        let tag = Tag::lookup(tag_name).map_err(|e| tag_error(&e, name))?;
        if !json && tag.flags() & (F_BINARY | F_UNSAFE) != 0 {
            return Err(format!("Tag {} can contain control characters", tag.name()));
        }
        self.vsls.push(VslWatch {
            tag,
            prefix: prefix.map(|p| format!("{}:", p.to_ascii_lowercase()).into_bytes()),
            field,
        });
        Ok(Item::Vsl(self.vsls.len() - 1))
    }
}

/// A case-insensitive `prefix` at the start of `data`; returns the rest
/// without the blanks after the prefix.
fn after_prefix<'a>(data: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    if data.len() < prefix.len() || !data[..prefix.len()].eq_ignore_ascii_case(prefix) {
        return None;
    }
    let mut rest = &data[prefix.len()..];
    while rest.first() == Some(&b' ') {
        rest = &rest[1..];
    }
    Some(rest)
}

fn trim(mut b: &[u8]) -> &[u8] {
    while b.first().is_some_and(u8::is_ascii_whitespace) {
        b = &b[1..];
    }
    while b.last().is_some_and(u8::is_ascii_whitespace) {
        b = &b[..b.len() - 1];
    }
    b
}

/// The `n`th (1-based) whitespace-separated field.
fn field(b: &[u8], n: usize) -> Option<&[u8]> {
    b.split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty())
        .nth(n - 1)
}

/// What one transaction's records give a format.
#[derive(Debug)]
pub struct Values {
    slots: [Option<Vec<u8>>; SLOTS],
    headers: Vec<Option<Vec<u8>>>,
    vcl_logs: Vec<Option<Vec<u8>>>,
    vsls: Vec<Option<Vec<u8>>>,
    hitmiss: &'static str,
    handling: &'static str,
    side: &'static str,
    vxid: u32,
    skip: bool,
}

impl Values {
    fn set(&mut self, s: Slot, v: &[u8], force: bool) {
        let slot = &mut self.slots[s as usize];
        if slot.is_none() || force {
            *slot = Some(v.to_vec());
        }
    }

    fn get(&self, s: Slot) -> Option<&[u8]> {
        self.slots[s as usize].as_deref()
    }

    fn fields(&mut self, data: &[u8], want: &[(usize, Slot)], force: bool) {
        for (n, s) in want {
            if let Some(f) = field(data, *n) {
                self.set(*s, f, force);
            }
        }
    }
}

impl Format {
    /// Collects what `t` gives this format; None if varnishncsa skips the
    /// transaction (garbage, restarts). `json` makes binary and unsafe
    /// records visible to the format (they are ignored otherwise).
    pub fn collect(&self, t: &Transaction, json: bool) -> Option<Values> {
        let backend = t.tx_type == TxType::BeReq;
        let mut v = Values {
            slots: Default::default(),
            headers: vec![None; self.headers.len()],
            vcl_logs: vec![None; self.vcl_logs.len()],
            vsls: vec![None; self.vsls.len()],
            hitmiss: "-",
            handling: "-",
            side: if backend { "b" } else { "c" },
            vxid: t.vxid,
            skip: false,
        };
        for r in &t.records {
            if !json && r.tag.flags() & (F_BINARY | F_UNSAFE) != 0 {
                continue;
            }
            // Text payloads carry no terminator here; binary and unsafe
            // ones keep all their bytes (a Debug record's NUL included,
            // which -j shows as \u0000, as varnishncsa does).
            self.scan(&mut v, r, &r.data, backend);
            if v.skip {
                return None;
            }
        }
        Some(v)
    }

    fn scan(&self, v: &mut Values, r: &Record, b: &[u8], backend: bool) {
        use Slot::*;
        let line = trim(b);
        match (r.tag, backend) {
            (Tag::HttpGarbage, _) => v.skip = true,
            (Tag::PipeAcct, false) => v.fields(b, &[(3, BytesIn), (4, BytesOut)], false),
            (Tag::BackendOpen, true) => v.fields(b, &[(3, Host)], true),
            (Tag::ReqStart, false) => v.fields(b, &[(1, Host)], false),
            (Tag::BereqMethod, true) | (Tag::ReqMethod, false) => v.set(Method, line, false),
            (Tag::BereqURL, true) | (Tag::ReqURL, false) => {
                let q = b.iter().position(|&c| c == b'?').unwrap_or(b.len());
                v.set(Path, trim(&b[..q]), false);
                v.set(Query, trim(&b[q..]), false);
            }
            (Tag::BereqProtocol, true) | (Tag::ReqProtocol, false) => v.set(Proto, line, false),
            (Tag::BerespStatus, true) | (Tag::RespStatus, false) => v.set(Status, line, true),
            (Tag::BereqAcct, true) | (Tag::ReqAcct, false) => {
                v.fields(b, &[(3, BytesIn), (5, BodyBytes), (6, BytesOut)], false)
            }
            (Tag::Timestamp, _) => {
                let end_labels: &[&[u8]] = &[b"Resp:", b"PipeSess:", b"BerespBody:"];
                let first_byte: &[&[u8]] = &[b"Process:", b"Pipe:", b"Beresp:"];
                if let Some(p) = after_prefix(b, b"Start:") {
                    v.fields(p, &[(1, TStart)], false);
                } else if let Some(p) = end_labels.iter().find_map(|l| after_prefix(b, l)) {
                    v.fields(p, &[(1, TEnd)], false);
                } else if let Some(p) = first_byte.iter().find_map(|l| after_prefix(b, l)) {
                    v.fields(p, &[(2, Ttfb)], false);
                }
            }
            (Tag::BereqHeader, true) | (Tag::ReqHeader, false) => {
                if let Some(p) = after_prefix(b, b"Authorization:")
                    && let Some(p) = after_prefix(p, b"basic ")
                {
                    v.set(Auth, trim(p), false);
                } else if let Some(p) = after_prefix(b, b"Host:") {
                    v.set(HostHeader, trim(p), false);
                }
            }
            (Tag::VCL_call, false) => {
                let (hm, h) = match line.to_ascii_lowercase().as_slice() {
                    b"recv" => ("-", "-"),
                    b"hit" => ("hit", "hit"),
                    b"miss" => ("miss", "miss"),
                    b"pass" => ("miss", "pass"),
                    b"synth" => ("miss", "synth"),
                    _ => (v.hitmiss, v.handling),
                };
                v.hitmiss = hm;
                v.handling = h;
            }
            (Tag::VCL_return, false) => {
                if line.eq_ignore_ascii_case(b"pipe") {
                    v.hitmiss = "miss";
                    v.handling = "pipe";
                } else if line.eq_ignore_ascii_case(b"restart") {
                    v.skip = true;
                }
            }
            (Tag::VCL_Log, _) => {
                for (i, key) in self.vcl_logs.iter().enumerate() {
                    if b.starts_with(key) && v.vcl_logs[i].is_none() {
                        v.vcl_logs[i] = Some(trim(&b[key.len()..]).to_vec());
                    }
                }
            }
            _ => {}
        }
        let request_hdr = matches!(
            (r.tag, backend),
            (Tag::ReqHeader, false) | (Tag::BereqHeader, true)
        );
        let response_hdr = matches!(
            (r.tag, backend),
            (Tag::RespHeader, false) | (Tag::BerespHeader, true)
        );
        if request_hdr || response_hdr {
            for (i, w) in self.headers.iter().enumerate() {
                if w.request == request_hdr
                    && let Some(p) = after_prefix(b, &w.key)
                {
                    v.headers[i] = Some(trim(p).to_vec());
                }
            }
        }
        for (i, w) in self.vsls.iter().enumerate() {
            if w.tag != r.tag || v.vsls[i].is_some() {
                continue;
            }
            let p = match &w.prefix {
                Some(pre) => match after_prefix(b, pre) {
                    Some(p) => p,
                    None => continue,
                },
                None => b,
            };
            v.vsls[i] = if w.field == 0 {
                Some(trim(p).to_vec())
            } else {
                field(p, w.field).map(<[u8]>::to_vec)
            };
        }
    }

    /// Renders the line for `v` (with its newline), or None when a time
    /// item has no start time, as varnishncsa leaves such lines out.
    pub fn render(&self, v: &Values, json: bool) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let q = |out: &mut Vec<u8>, b: &[u8]| quote(out, b, json);
        for item in &self.items {
            match item {
                Item::Lit(s) => out.extend_from_slice(s.as_bytes()),
                Item::Slot(s, text, js) => match v.get(*s) {
                    Some(b) => q(&mut out, b),
                    None => q(&mut out, if json { js } else { text }.as_bytes()),
                },
                Item::Header(i) => match &v.headers[*i] {
                    Some(b) => q(&mut out, b),
                    None => q(&mut out, if json { b"" } else { b"-" }),
                },
                Item::VclLog(i) => q(&mut out, v.vcl_logs[*i].as_deref().unwrap_or(b"")),
                Item::Vsl(i) => match &v.vsls[*i] {
                    Some(b) => q(&mut out, b),
                    None => q(&mut out, if json { b"" } else { b"-" }),
                },
                Item::Word(h) => out.extend_from_slice(
                    match h {
                        Word::HitMiss => v.hitmiss,
                        Word::Handling => v.handling,
                        Word::Side => v.side,
                    }
                    .as_bytes(),
                ),
                Item::Vxid => out.extend_from_slice(v.vxid.to_string().as_bytes()),
                Item::RequestLine => {
                    q(&mut out, v.get(Slot::Method).unwrap_or(b"-"));
                    out.push(b' ');
                    match v.get(Slot::HostHeader) {
                        Some(h) => {
                            if !h.starts_with(b"http://") {
                                out.extend_from_slice(b"http://");
                            }
                            q(&mut out, h);
                        }
                        None => out.extend_from_slice(b"http://localhost"),
                    }
                    q(&mut out, v.get(Slot::Path).unwrap_or(b""));
                    q(&mut out, v.get(Slot::Query).unwrap_or(b""));
                    out.push(b' ');
                    q(&mut out, v.get(Slot::Proto).unwrap_or(b"HTTP/1.0"));
                }
                Item::User => match v.get(Slot::Auth).and_then(basic_user) {
                    Some(u) => q(&mut out, &u),
                    None => q(&mut out, b"-"),
                },
                Item::Time(fmt) => {
                    let start = Stamp::parse(v.get(Slot::TStart)?)?;
                    out.extend_from_slice(&start.format(fmt));
                }
                Item::Duration(unit) => {
                    let start = Stamp::parse(v.get(Slot::TStart)?)?.value;
                    let end = v
                        .get(Slot::TEnd)
                        .and_then(Stamp::parse)
                        .map_or(start, |s| s.value);
                    let d = end - start;
                    let n = match unit {
                        Duration::Sec => d,
                        Duration::Msec => d * 1e3,
                        Duration::Usec => d * 1e6,
                    };
                    out.extend_from_slice((n as i64 as i32).to_string().as_bytes());
                }
            }
        }
        out.push(b'\n');
        Some(out)
    }
}

/// A log timestamp, computed with in the same double-precision steps as
/// varnishncsa, so that `%{usec}t` and the fractions print the same digits.
struct Stamp {
    value: f64,
}

impl Stamp {
    fn parse(b: &[u8]) -> Option<Stamp> {
        let value: f64 = std::str::from_utf8(b).ok()?.parse().ok()?;
        value.is_finite().then_some(Stamp { value })
    }

    fn format(&self, f: &TimeFmt) -> Vec<u8> {
        let t = self.value;
        let secs = t.floor();
        match f {
            TimeFmt::Strftime(s) => {
                // TODO(#6): varnishncsa prints local time; Lacquer prints
                // UTC (the same on hosts that run in UTC, as servers do).
                lacquer_vcl::exec::value::strftime(secs, s.as_bytes())
            }
            TimeFmt::Sec => (secs as i64).to_string().into_bytes(),
            TimeFmt::Msec => ((t * 1e3) as i64).to_string().into_bytes(),
            TimeFmt::Usec => ((t * 1e6) as i64).to_string().into_bytes(),
            TimeFmt::MsecFrac => format!("{:03}", ((t - secs) * 1e3) as i64).into_bytes(),
            TimeFmt::UsecFrac => format!("{:06}", ((t - secs) * 1e6) as i64).into_bytes(),
        }
    }
}

/// The user name of HTTP basic credentials (before the first `:`), or None
/// if they do not decode.
fn basic_user(b64: &[u8]) -> Option<Vec<u8>> {
    use lacquer_http::base64;
    let mut out = base64::decode(b64, base64::STANDARD, Some(b'=')).ok()?;
    if out.len() > 127 {
        return None;
    }
    if let Some(colon) = out.iter().position(|&c| c == b':') {
        out.truncate(colon);
    }
    if let Some(nul) = out.iter().position(|&c| c == 0) {
        out.truncate(nul);
    }
    Some(out)
}

/// Appends `b` escaped as varnishncsa does: `"` and `\` get a backslash,
/// `\n \r \t \v` their C escapes, other control bytes `\xNN` (text) or
/// `\u00NN` (JSON); bytes from 0x7f are `\xNN` in text and kept in JSON.
pub fn quote(out: &mut Vec<u8>, b: &[u8], json: bool) {
    for &c in b {
        match c {
            b'"' | b'\\' => {
                out.push(b'\\');
                out.push(c);
            }
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x0b => out.extend_from_slice(b"\\v"),
            0x20..=0x7e => out.push(c),
            _ if json && c >= 0x7f => out.push(c),
            _ if json => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            _ => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(f: &str) -> String {
        Format::parse(f, false).unwrap_err()
    }

    #[test]
    fn format_errors_are_varnishncsas() {
        assert_eq!(err("%{foo}A"), "Unknown format specifier at: %{foo}A");
        assert_eq!(err("%A"), "Unknown format specifier at: %A");
        assert_eq!(err("%{foo"), "Unmatched bracket at: %{foo");
        assert_eq!(err("%{foo}x"), "Unknown formatting extension: foo");
        assert_eq!(err("%{VSL:}x"), "Missing tag in VSL:");
        assert_eq!(err("%{VSL:nonexistent}x"), "Unknown log tag: nonexistent");
        assert_eq!(err("%{VSL:Req}x"), "Tag not unique: Req");
        assert_eq!(err("%{VSL:Begin[}x"), "Unknown log tag: Begin[");
        assert_eq!(err("%{VSL:Begin]}x"), "Syntax error: VSL:Begin]");
        assert_eq!(err("%{VSL:Begin[a}x"), "Unknown log tag: Begin[a");
        assert_eq!(err("%{VSL:Begin[a]}x"), "Syntax error: VSL:Begin[a]");
        assert_eq!(
            err("%{VSL:Begin[0]}x"),
            "Syntax error. Field specifier must be between 1 and 255: Begin[0]"
        );
        assert_eq!(
            err("%{VSL:Begin[999999999999]}x"),
            "Syntax error. Field specifier must be between 1 and 255: Begin[999999999999]"
        );
        assert_eq!(err("%{foo}T"), "Unknown specifier: %{foo}T");
        assert_eq!(err("abc%"), "Unknown format specifier at: %");
        assert_eq!(err("%%"), "Unknown format specifier at: %%");
        assert_eq!(err("%{VSL::}x"), "Tag not unique: :");
        assert_eq!(err("%{{%F}t"), "Unmatched bracket at: %{{%F}t");
        assert!(Format::parse("%{{%F}T{%T}}t %{{{%FT%T}}}t", false).is_ok());
        assert_eq!(
            err("%{VSL:Debug}x"),
            "Tag Debug can contain control characters"
        );
        assert!(Format::parse("%{VSL:Debug}x", true).is_ok());
        assert!(Format::parse(DEFAULT_FORMAT, false).is_ok());
    }

    #[test]
    fn escaping() {
        let mut t = Vec::new();
        quote(
            &mut t,
            b"a\"b\\c\td\x01\xc3\xa9\x7f\x1f/ z\x80\n\r\x0b\x08\x00",
            false,
        );
        assert_eq!(
            t,
            b"a\\\"b\\\\c\\td\\x01\\xc3\\xa9\\x7f\\x1f/ z\\x80\\n\\r\\v\\x08\\x00".to_vec()
        );
        let mut j = Vec::new();
        quote(&mut j, b"a\"\x01\xc3\xa9\x7f\x0c\x0b", true);
        assert_eq!(j, b"a\\\"\\u0001\xc3\xa9\x7f\\u000c\\v".to_vec());
    }

    #[test]
    fn basic_credentials() {
        assert_eq!(basic_user(b"dXNlcjpwYXNz"), Some(b"user".to_vec()));
        assert_eq!(basic_user(b"dXNlcg=="), Some(b"user".to_vec()));
        assert_eq!(basic_user(b"!!!!"), None);
        assert_eq!(basic_user(b"dXNl=cg"), None);
    }
}
