//! Output compatibility with real varnishlog 7.1.
//!
//! `tests/data/raw.txt` is `varnishlog -d -g raw` from a real varnishd 7.1.1
//! after two client requests; `vxid.txt`, `req.txt` and `sess.txt` are
//! `varnishlog -d` with `-g vxid`, `-g request` and `-g session` over the
//! same log, and `reqv.txt` is `-g request -v`. `queries.txt` holds, for a
//! list of `-g <grouping> -q <query>` runs over the same log, the query line
//! (`@@ grouping query`) followed by varnishlog's output; `filters.txt`
//! likewise for record selection options (`-i -x -I -X -c -b`). The records are replayed through our shared-memory log, read
//! back, grouped and printed; the text must be identical.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use lacquer_vsl::print::{PrintOptions, RecordFilter, format_group};
use lacquer_vsl::{
    Grouper, Grouping, Query, ReadEvent, Record, StartAt, Tag, Vsl, VslConfig, VslReader, Vxid,
    vsl_path,
};

fn data(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Parses varnishlog raw lines: `%10u %-14s %c %s`.
fn parse_raw(text: &str) -> Vec<Record> {
    text.lines()
        .map(|l| {
            let vxid: u32 = l[..10].trim().parse().unwrap();
            let tag = Tag::from_name(l[11..25].trim()).unwrap();
            let side = l.as_bytes()[26];
            let payload = l.get(28..).unwrap_or("");
            let vxid = match side {
                b'c' => Vxid::client(vxid),
                b'b' => Vxid::backend(vxid),
                _ => Vxid::plain(vxid),
            };
            Record::new(tag, vxid, payload)
        })
        .collect()
}

fn replay(name: &str) -> Vec<Record> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("lq-compat-{name}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = VslConfig {
        space: 1 << 20,
        ..VslConfig::default()
    };
    let vsl = Vsl::create(&vsl_path(&dir), &cfg).unwrap();
    for r in parse_raw(&data("raw.txt")) {
        vsl.log_immediate_bytes(r.tag, r.vxid, &r.data);
    }
    let mut reader = VslReader::open(&vsl_path(&dir), StartAt::Oldest).unwrap();
    let recs: Vec<Record> = reader
        .drain()
        .into_iter()
        .map(|e| match e {
            ReadEvent::Record(r) => r,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    recs
}

fn render(grouping: Grouping, query: Option<&str>) -> String {
    render_with(grouping, query, PrintOptions::default())
}

fn render_with(grouping: Grouping, query: Option<&str>, opts: PrintOptions) -> String {
    render_filtered(grouping, query, opts, &RecordFilter::new())
}

fn render_filtered(
    grouping: Grouping,
    query: Option<&str>,
    opts: PrintOptions,
    filter: &RecordFilter,
) -> String {
    let query = query.map(|q| Query::parse(q).unwrap());
    let mut g = Grouper::new(grouping);
    let mut groups = Vec::new();
    for r in replay(&format!("{grouping:?}")) {
        groups.extend(g.push(r));
    }
    groups.extend(g.flush());
    groups
        .iter()
        .filter(|grp| query.as_ref().is_none_or(|q| q.matches(grp)))
        .map(|grp| format_group(grp, opts, &|r| filter.matches(r)))
        .collect()
}

#[test]
fn raw_output_is_identical() {
    assert_eq!(render(Grouping::Raw, None), data("raw.txt"));
}

#[test]
fn vxid_output_is_identical() {
    assert_eq!(render(Grouping::Vxid, None), data("vxid.txt"));
}

#[test]
fn request_output_is_identical() {
    assert_eq!(render(Grouping::Request, None), data("req.txt"));
}

#[test]
fn verbose_request_output_is_identical() {
    let opts = PrintOptions {
        verbose: true,
        ..PrintOptions::default()
    };
    assert_eq!(render_with(Grouping::Request, None, opts), data("reqv.txt"));
}

#[test]
fn session_output_is_identical() {
    assert_eq!(render(Grouping::Session, None), data("sess.txt"));
}

#[test]
fn query_results_are_identical() {
    let text = data("queries.txt");
    let mut cases: Vec<(String, String, String)> = Vec::new();
    for line in text.split_inclusive('\n') {
        if let Some(head) = line.strip_prefix("@@ ") {
            let (g, q) = head.trim_end().split_once(' ').unwrap();
            cases.push((g.to_string(), q.to_string(), String::new()));
        } else {
            cases.last_mut().unwrap().2.push_str(line);
        }
    }
    assert_eq!(cases.len(), 25);
    for (g, q, expected) in cases {
        let got = render(g.parse().unwrap(), Some(&q));
        assert_eq!(got, expected, "-g {g} -q '{q}'");
    }
}

#[test]
fn record_filters_are_identical() {
    let text = data("filters.txt");
    let mut cases: Vec<(String, String)> = Vec::new();
    for line in text.split_inclusive('\n') {
        if let Some(args) = line.strip_prefix("@@ ") {
            cases.push((args.trim_end().to_string(), String::new()));
        } else {
            cases.last_mut().unwrap().1.push_str(line);
        }
    }
    assert_eq!(cases.len(), 11);
    for (args, expected) in cases {
        let words: Vec<String> = args.split(' ').map(|w| w.replace('\'', "")).collect();
        let mut grouping = Grouping::Vxid;
        let mut opts = PrintOptions::default();
        let mut f = RecordFilter::new();
        let mut it = words.iter();
        while let Some(w) = it.next() {
            match w.as_str() {
                "-g" => grouping = it.next().unwrap().parse().unwrap(),
                "-i" => f.include_tags(it.next().unwrap()).unwrap(),
                "-x" => f.exclude_tags(it.next().unwrap()).unwrap(),
                "-I" => f.include_regex(it.next().unwrap()).unwrap(),
                "-X" => f.exclude_regex(it.next().unwrap()).unwrap(),
                "-c" => {
                    f.client_only();
                    opts.client_only = true;
                }
                "-b" => {
                    f.backend_only();
                    opts.backend_only = true;
                }
                other => panic!("unexpected argument {other}"),
            }
        }
        assert_eq!(
            render_filtered(grouping, None, opts, &f),
            expected,
            "{args}"
        );
    }
}

#[test]
fn query_selects_groups() {
    let all = render(Grouping::Request, None);
    let hits = render(Grouping::Request, Some("ReqHeader:cookie"));
    assert!(!hits.is_empty() && hits.len() < all.len());
    assert!(hits.starts_with("*   << Request  >> 32770"));
    let none = render(Grouping::Request, Some("RespStatus >= 500"));
    assert!(none.is_empty());
    let both = render(Grouping::Request, Some("{2}BerespStatus == 200"));
    assert_eq!(both, all);
}
