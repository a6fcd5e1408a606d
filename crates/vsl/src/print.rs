//! varnishlog-identical text output for records and transaction groups.
//!
//! Grouped output (`-g vxid|request|session`) prints a header per
//! transaction (`*   << Request  >> 1001      `) and its records prefixed by
//! level dashes (`-   ReqURL         /`); raw output (`-g raw`, level 0) and
//! verbose output (`-v`) print the VXID and side letter on every record
//! (`      1001 ReqURL         c /`). Payloads of binary or unsafe tags are
//! printed quoted with `%xx` escapes for non-printable bytes.

use std::io::Write;

use regex::bytes::Regex;

use crate::group::{Transaction, TxType};
use crate::record::Record;
use crate::record::Side;
use crate::tags::{F_BINARY, F_UNSAFE, Tag, TagSet};

/// Output options.
#[derive(Clone, Copy, Debug, Default)]
pub struct PrintOptions {
    /// Print VXID and side on every record even in grouped mode (`-v`).
    pub verbose: bool,
    /// Only client transactions (`-c`); with `backend_only` both kinds.
    pub client_only: bool,
    /// Only backend transactions (`-b`).
    pub backend_only: bool,
    /// ESI sub-requests are client transactions too (`-E`); without it
    /// `-c`/`-b` leave them out.
    pub esi: bool,
}

/// Appends the payload of `rec` as varnishlog prints it: text as its raw
/// bytes, binary payloads (HTTP/2 frames) as hex in brackets, unsafe
/// payloads quoted with `%xx` escapes.
pub fn push_payload(out: &mut Vec<u8>, tag: Tag, data: &[u8]) {
    if tag.flags() & F_BINARY != 0 {
        out.push(b'[');
        for &c in data {
            let _ = write!(out, "{c:02x}");
        }
        out.push(b']');
    } else if tag.flags() & F_UNSAFE != 0 {
        out.push(b'"');
        // All bytes, a Debug record's terminating NUL too (`%00`), as
        // varnishlog prints them.
        for &c in data {
            if (b' '..=b'~').contains(&c) {
                out.push(c);
            } else {
                let _ = write!(out, "%{c:02x}");
            }
        }
        out.push(b'"');
    } else {
        // Text payloads end at a NUL, as with C's "%.*s".
        let end = data.iter().position(|&c| c == 0).unwrap_or(data.len());
        out.extend_from_slice(&data[..end]);
    }
}

/// Appends `TAG            payload\n` (grouped, terse form).
pub fn push_record_terse(out: &mut Vec<u8>, rec: &Record) {
    let _ = write!(out, "{:<14} ", rec.tag.name());
    push_payload(out, rec.tag, &rec.data);
    out.push(b'\n');
}

/// Appends `      VXID TAG            s payload\n` (raw and verbose form).
pub fn push_record_verbose(out: &mut Vec<u8>, rec: &Record) {
    let _ = write!(
        out,
        "{:>10} {:<14} {} ",
        rec.vxid.id(),
        rec.tag.name(),
        rec.vxid.side().letter()
    );
    push_payload(out, rec.tag, &rec.data);
    out.push(b'\n');
}

/// Formats a reported group exactly like varnishlog, as text (payload
/// bytes that are not UTF-8 are replaced; [`format_group_bytes`] keeps
/// them).
pub fn format_group(
    group: &[Transaction],
    opts: PrintOptions,
    show: &dyn Fn(&Record) -> bool,
) -> String {
    String::from_utf8_lossy(&format_group_bytes(group, opts, show)).into_owned()
}

/// Formats a reported group exactly like varnishlog: transaction headers,
/// level prefixes, and a blank line after grouped output. Records for which
/// `show` returns false are left out (varnishlog's `-i/-x/-I/-X`).
pub fn format_group_bytes(
    group: &[Transaction],
    opts: PrintOptions,
    show: &dyn Fn(&Record) -> bool,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut delim = false;
    for t in group {
        if opts.client_only || opts.backend_only {
            let keep = match t.tx_type {
                TxType::Request => opts.client_only && (opts.esi || t.reason != "esi"),
                TxType::BeReq => opts.backend_only,
                TxType::Record => true,
                TxType::Session | TxType::Unknown => false,
            };
            if !keep {
                continue;
            }
        }
        let verbose = t.level == 0 || opts.verbose;
        if t.level > 0 {
            push_level(&mut out, t.level, b'*');
            if verbose {
                out.extend_from_slice(&[b' '; 11]);
            }
            let _ = write!(out, "{} ", t.tx_type.label());
            if verbose {
                out.extend_from_slice(b"  ");
            }
            let _ = writeln!(out, "{:<10}", t.vxid);
            delim = true;
        }
        for r in t.records.iter().filter(|r| show(r)) {
            if t.level > 0 {
                push_level(&mut out, t.level, b'-');
            }
            if verbose {
                push_record_verbose(&mut out, r);
            } else {
                push_record_terse(&mut out, r);
            }
        }
    }
    if delim {
        out.push(b'\n');
    }
    out
}

/// varnishlog's record selection options (`-i`, `-x`, `-I`, `-X`, `-c`,
/// `-b`), applied in the order given like Varnish: when the first tag
/// option is an inclusion (`-i`/`-I`), every tag starts out excluded; `-i`
/// and `-x` then clear and set per-tag exclusion. A record is shown if an
/// `-I` expression matches it, else hidden if an `-X` expression matches
/// it, else shown unless its tag is excluded.
#[derive(Clone, Debug, Default)]
pub struct RecordFilter {
    seen: bool,
    suppress: TagSet,
    select_re: Vec<(Option<TagSet>, Regex)>,
    suppress_re: Vec<(Option<TagSet>, Regex)>,
    client_only: bool,
    backend_only: bool,
    caseless: bool,
}

impl RecordFilter {
    /// A filter that shows every record.
    pub fn new() -> RecordFilter {
        RecordFilter::default()
    }

    fn first_include(&mut self) {
        if !self.seen {
            self.suppress = TagSet::all();
        }
        self.seen = true;
    }

    /// `-C`: the regular expressions of later `-I`/`-X` ignore case.
    pub fn set_caseless(&mut self, caseless: bool) {
        self.caseless = caseless;
    }

    fn tags(opt: &str, list: &str) -> Result<TagSet, String> {
        TagSet::from_list(list).map_err(|e| format!("{opt}: {}", e.list_message()))
    }

    /// `-i taglist`: show records with these tags (globs allowed).
    pub fn include_tags(&mut self, list: &str) -> Result<(), String> {
        let tags = RecordFilter::tags("-i", list)?;
        self.first_include();
        for t in tags.iter() {
            self.suppress.remove(t);
        }
        Ok(())
    }

    /// `-x taglist`: hide records with these tags.
    pub fn exclude_tags(&mut self, list: &str) -> Result<(), String> {
        let tags = RecordFilter::tags("-x", list)?;
        self.seen = true;
        for t in tags.iter() {
            self.suppress.insert(t);
        }
        Ok(())
    }

    fn parse_re(&self, opt: &str, arg: &str) -> Result<(Option<TagSet>, Regex), String> {
        let (tags, re) = match arg.split_once(':') {
            Some((list, re)) => (Some(RecordFilter::tags(opt, list)?), re),
            None => (None, arg),
        };
        let re = crate::re::compile(re, self.caseless)
            .map_err(|e| format!("{opt}: Regex error at position {} ({})", e.pos, e.msg))?;
        Ok((tags, re))
    }

    /// `-I [taglist:]regex`: show records whose payload matches.
    pub fn include_regex(&mut self, arg: &str) -> Result<(), String> {
        let f = self.parse_re("-I", arg)?;
        self.first_include();
        self.select_re.push(f);
        Ok(())
    }

    /// `-X [taglist:]regex`: hide records whose payload matches.
    pub fn exclude_regex(&mut self, arg: &str) -> Result<(), String> {
        let f = self.parse_re("-X", arg)?;
        self.seen = true;
        self.suppress_re.push(f);
        Ok(())
    }

    /// `-c`: client records only.
    pub fn client_only(&mut self) {
        self.client_only = true;
    }

    /// `-b`: backend records only.
    pub fn backend_only(&mut self) {
        self.backend_only = true;
    }

    fn any_re(list: &[(Option<TagSet>, Regex)], rec: &Record) -> bool {
        list.iter()
            .any(|(tags, re)| tags.is_none_or(|t| t.contains(rec.tag)) && re.is_match(&rec.data))
    }

    /// True if the record is to be shown.
    pub fn matches(&self, rec: &Record) -> bool {
        // As varnishlog's: each of -c and -b is a condition on the
        // record's side, so both together select nothing.
        let side = rec.vxid.side();
        if self.client_only && side != Side::Client {
            return false;
        }
        if self.backend_only && side != Side::Backend {
            return false;
        }
        if !self.select_re.is_empty() && RecordFilter::any_re(&self.select_re, rec) {
            return true;
        }
        if RecordFilter::any_re(&self.suppress_re, rec) {
            return false;
        }
        !self.suppress.contains(rec.tag)
    }
}

fn push_level(out: &mut Vec<u8>, level: u32, c: u8) {
    if level > 3 {
        let _ = write!(out, "{}{}{} ", c as char, level % 10, c as char);
    } else {
        let n = level as usize;
        out.extend(std::iter::repeat_n(c, n));
        out.extend(std::iter::repeat_n(b' ', 4 - n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::Grouping;
    use crate::group::tests::{run, sample};
    use crate::record::Vxid;

    fn all(_: &Record) -> bool {
        true
    }

    #[test]
    fn request_group_like_varnishlog() {
        let g = run(Grouping::Request, sample());
        let s = format_group(&g[0], PrintOptions::default(), &all);
        let expected = "\
*   << Request  >> 1001      
-   Begin          req 1000 rxreq
-   ReqURL         /
-   ReqHeader      User-Agent: curl
-   Link           bereq 1002 fetch
-   RespStatus     200
-   Timestamp      Resp: 1700000000.000100 0.000100 0.000050
-   End            
**  << BeReq    >> 1002      
--  Begin          bereq 1001 fetch
--  BereqURL       /
--  BerespStatus   200
--  End            

";
        assert_eq!(s, expected);
    }

    #[test]
    fn session_levels_and_filter() {
        let g = run(Grouping::Session, sample());
        let s = format_group(&g[0], PrintOptions::default(), &|r: &Record| {
            r.tag == Tag::Begin
        });
        assert_eq!(
            s,
            "*   << Session  >> 1000      \n-   Begin          sess 0 HTTP/1\n\
             **  << Request  >> 1001      \n--  Begin          req 1000 rxreq\n\
             *** << BeReq    >> 1002      \n--- Begin          bereq 1001 fetch\n\n"
        );
    }

    #[test]
    fn raw_and_verbose_lines() {
        let g = run(
            Grouping::Raw,
            vec![Record::new(Tag::CLI, Vxid::NONE, "Rd ping")],
        );
        assert_eq!(
            format_group(&g[0], PrintOptions::default(), &all),
            "         0 CLI            - Rd ping\n"
        );
        let g = run(Grouping::Vxid, sample());
        let opts = PrintOptions {
            verbose: true,
            ..PrintOptions::default()
        };
        let s = format_group(&g[0], opts, &all);
        assert!(s.starts_with("*              << BeReq    >>   1002      \n"));
        assert!(s.contains("-         1002 BereqURL       b /\n"));
    }

    #[test]
    fn record_filters() {
        let url = Record::new(Tag::ReqURL, Vxid::client(1), "/a");
        let hdr = Record::new(Tag::ReqHeader, Vxid::client(1), "Host: x");
        let be = Record::new(Tag::BereqURL, Vxid::backend(2), "/a");
        let mut f = RecordFilter::new();
        assert!(f.matches(&url) && f.matches(&hdr));
        f.include_tags("ReqURL").unwrap();
        assert!(f.matches(&url) && !f.matches(&hdr) && !f.matches(&be));
        let mut f = RecordFilter::new();
        f.exclude_tags("Req*").unwrap();
        assert!(!f.matches(&url) && f.matches(&be));
        let mut f = RecordFilter::new();
        f.include_regex("ReqHeader:^Host").unwrap();
        assert!(f.matches(&hdr) && !f.matches(&url));
        let mut f = RecordFilter::new();
        f.exclude_regex("/a").unwrap();
        assert!(!f.matches(&url) && f.matches(&hdr));
        let mut f = RecordFilter::new();
        f.backend_only();
        assert!(f.matches(&be) && !f.matches(&url));
        assert!(RecordFilter::new().include_tags("Nope").is_err());
        assert!(RecordFilter::new().include_regex("ReqURL:(").is_err());
        // -c drops whole backend transactions from grouped output.
        let g = run(Grouping::Request, sample());
        let opts = PrintOptions {
            client_only: true,
            ..PrintOptions::default()
        };
        let s = format_group(&g[0], opts, &all);
        assert!(s.contains("<< Request") && !s.contains("<< BeReq"));
    }

    #[test]
    fn client_and_backend_options_as_varnishlog() {
        // -c and -b each restrict records to their side: together, no
        // record is left (the transaction headers still print).
        let mut f = RecordFilter::new();
        f.client_only();
        f.backend_only();
        assert!(!f.matches(&Record::new(Tag::ReqURL, Vxid::client(1), "/")));
        assert!(!f.matches(&Record::new(Tag::BereqURL, Vxid::backend(2), "/")));
        // An ESI sub-request is left out by -c unless -E is given.
        let recs = vec![
            Record::new(Tag::Begin, Vxid::client(1001), "req 1000 rxreq"),
            Record::new(Tag::Link, Vxid::client(1001), "req 1003 esi"),
            Record::new(Tag::End, Vxid::client(1001), ""),
            Record::new(Tag::Begin, Vxid::client(1003), "req 1001 esi"),
            Record::new(Tag::End, Vxid::client(1003), ""),
        ];
        let g = run(Grouping::Request, recs);
        let mut opts = PrintOptions {
            client_only: true,
            ..PrintOptions::default()
        };
        let s = format_group(&g[0], opts, &all);
        assert!(s.contains("<< Request  >> 1001") && !s.contains("1003      "));
        opts.esi = true;
        let s = format_group(&g[0], opts, &all);
        assert!(s.contains("**  << Request  >> 1003"));
        // Without -c/-b/-E every transaction prints.
        let s = format_group(&g[0], PrintOptions::default(), &all);
        assert!(s.contains("**  << Request  >> 1003"));
    }

    #[test]
    fn binary_payloads_and_deep_levels() {
        let mut s = Vec::new();
        push_payload(&mut s, Tag::H2RxHdr, &[0, 1, b'a', 0xff]);
        assert_eq!(s, b"[000161ff]");
        let mut s = Vec::new();
        push_payload(&mut s, Tag::Debug, b"x\0");
        assert_eq!(s, b"\"x%00\"");
        let mut s = Vec::new();
        push_payload(&mut s, Tag::ReqURL, b"/a\0junk");
        assert_eq!(s, b"/a");
        let mut s = Vec::new();
        push_payload(&mut s, Tag::ReqHeader, b"X: \xff");
        assert_eq!(s, b"X: \xff");
        let mut s = Vec::new();
        push_level(&mut s, 5, b'*');
        assert_eq!(s, b"*5* ");
    }
}
