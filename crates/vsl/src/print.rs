//! varnishlog-identical text output for records and transaction groups.
//!
//! Grouped output (`-g vxid|request|session`) prints a header per
//! transaction (`*   << Request  >> 1001      `) and its records prefixed by
//! level dashes (`-   ReqURL         /`); raw output (`-g raw`, level 0) and
//! verbose output (`-v`) print the VXID and side letter on every record
//! (`      1001 ReqURL         c /`). Payloads of binary or unsafe tags are
//! printed quoted with `%xx` escapes for non-printable bytes.

use std::fmt::Write;

use crate::group::Transaction;
use crate::record::Record;
use crate::tags::{F_BINARY, F_UNSAFE, Tag};

/// Output options.
#[derive(Clone, Copy, Debug, Default)]
pub struct PrintOptions {
    /// Print VXID and side on every record even in grouped mode (`-v`).
    pub verbose: bool,
}

/// Appends the payload of `rec` as varnishlog prints it.
pub fn push_payload(out: &mut String, tag: Tag, data: &[u8]) {
    if tag.flags() & (F_BINARY | F_UNSAFE) != 0 {
        out.push('"');
        let mut d = data;
        if tag == Tag::Debug && d.last() == Some(&0) {
            d = &d[..d.len() - 1];
        }
        for &c in d {
            if (b' '..=b'~').contains(&c) {
                out.push(char::from(c));
            } else {
                let _ = write!(out, "%{c:02x}");
            }
        }
        out.push('"');
    } else {
        // Text payloads end at a NUL, as with C's "%.*s".
        let end = data.iter().position(|&c| c == 0).unwrap_or(data.len());
        out.push_str(&String::from_utf8_lossy(&data[..end]));
    }
}

/// Appends `TAG            payload\n` (grouped, terse form).
pub fn push_record_terse(out: &mut String, rec: &Record) {
    let _ = write!(out, "{:<14} ", rec.tag.name());
    push_payload(out, rec.tag, &rec.data);
    out.push('\n');
}

/// Appends `      VXID TAG            s payload\n` (raw and verbose form).
pub fn push_record_verbose(out: &mut String, rec: &Record) {
    let _ = write!(
        out,
        "{:>10} {:<14} {} ",
        rec.vxid.id(),
        rec.tag.name(),
        rec.vxid.side().letter()
    );
    push_payload(out, rec.tag, &rec.data);
    out.push('\n');
}

/// Formats a reported group exactly like varnishlog: transaction headers,
/// level prefixes, and a blank line after grouped output. Records for which
/// `show` returns false are left out (varnishlog's `-i/-x/-I/-X`).
pub fn format_group(
    group: &[Transaction],
    opts: PrintOptions,
    show: &dyn Fn(&Record) -> bool,
) -> String {
    let mut out = String::new();
    let mut delim = false;
    for t in group {
        let verbose = t.level == 0 || opts.verbose;
        if t.level > 0 {
            push_level(&mut out, t.level, '*');
            if verbose {
                out.push_str(&" ".repeat(11));
            }
            let _ = write!(out, "{} ", t.tx_type.label());
            if verbose {
                out.push_str("  ");
            }
            let _ = writeln!(out, "{:<10}", t.vxid);
            delim = true;
        }
        for r in t.records.iter().filter(|r| show(r)) {
            if t.level > 0 {
                push_level(&mut out, t.level, '-');
            }
            if verbose {
                push_record_verbose(&mut out, r);
            } else {
                push_record_terse(&mut out, r);
            }
        }
    }
    if delim {
        out.push('\n');
    }
    out
}

fn push_level(out: &mut String, level: u32, c: char) {
    if level > 3 {
        let _ = write!(out, "{c}{}{c} ", level % 10);
    } else {
        let n = level as usize;
        for _ in 0..n {
            out.push(c);
        }
        out.push_str(&" ".repeat(4 - n));
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
        let s = format_group(&g[0], PrintOptions { verbose: true }, &all);
        assert!(s.starts_with("*              << BeReq    >>   1002      \n"));
        assert!(s.contains("-         1002 BereqURL       b /\n"));
    }

    #[test]
    fn binary_payloads_and_deep_levels() {
        let mut s = String::new();
        push_payload(&mut s, Tag::H2RxHdr, &[0, 1, b'a', 0xff]);
        assert_eq!(s, "\"%00%01a%ff\"");
        let mut s = String::new();
        push_payload(&mut s, Tag::ReqURL, b"/a\0junk");
        assert_eq!(s, "/a");
        let mut s = String::new();
        push_level(&mut s, 5, '*');
        assert_eq!(s, "*5* ");
    }
}
