//! The shared-memory log's readers and the tools built on it: binary log
//! files (`lacquer log -r`), the VSM index (`lacquer adm -n`), and the
//! format and profile languages of `lacquer ncsa -F` and `lacquer hist -P`,
//! each run against a sample transaction group so that what parses is also
//! evaluated.

use lacquer_tools::hist::{Hist, Profile};
use lacquer_tools::ncsa::format::Format;
use lacquer_vsl::file::{FileReader, FileWriter};
use lacquer_vsl::vsm::live_segment;
use lacquer_vsl::{Record, Tag, Transaction, TxType, Vxid};

/// A client request with a cache hit and its backend fetch, with the
/// records ncsa formats, hist profiles and log queries read.
pub(crate) fn sample_group() -> Vec<Transaction> {
    let c = Vxid::client(1001);
    let b = Vxid::backend(1002);
    let req = [
        (Tag::Begin, "req 1000 rxreq"),
        (Tag::Timestamp, "Start: 1700000000.000000 0.000000 0.000000"),
        (Tag::ReqStart, "192.0.2.1 41234 a0"),
        (Tag::ReqMethod, "GET"),
        (Tag::ReqURL, "/index.html?q=1"),
        (Tag::ReqProtocol, "HTTP/1.1"),
        (Tag::ReqHeader, "Host: example.com"),
        (Tag::ReqHeader, "Authorization: Basic dXNlcjpwYXNz"),
        (Tag::ReqHeader, "Referer: http://example.com/"),
        (Tag::VCL_call, "RECV"),
        (Tag::VCL_Log, "key: value"),
        (Tag::VCL_return, "hash"),
        (Tag::Hit, "1003 119.990000 10.000000 0.000000"),
        (Tag::Link, "bereq 1002 fetch"),
        (Tag::RespStatus, "200"),
        (Tag::RespHeader, "Content-Length: 5"),
        (Tag::Timestamp, "Resp: 1700000000.500000 1.500000 0.250000"),
        (Tag::ReqAcct, "78 0 78 210 5 215"),
        (Tag::End, ""),
    ];
    let bereq = [
        (Tag::Begin, "bereq 1001 fetch"),
        (Tag::BereqMethod, "GET"),
        (Tag::BereqURL, "/index.html?q=1"),
        (Tag::BereqHeader, "Host: example.com"),
        (Tag::BerespStatus, "200"),
        (
            Tag::Timestamp,
            "BerespBody: 1700000000.400000 0.400000 0.100000",
        ),
        (Tag::End, ""),
    ];
    let tx = |vxid: u32, parent: u32, tx_type, reason: &str, v, recs: &[(Tag, &str)]| Transaction {
        level: 1 + u32::from(tx_type == TxType::BeReq),
        vxid,
        parent,
        tx_type,
        reason: reason.to_string(),
        records: recs.iter().map(|&(t, d)| Record::new(t, v, d)).collect(),
    };
    vec![
        tx(1001, 1000, TxType::Request, "rxreq", c, &req),
        tx(1002, 1001, TxType::BeReq, "fetch", b, &bereq),
    ]
}

/// Every record a log file gives, until its end or a read error.
fn read_all(data: &[u8]) -> Option<Vec<Record>> {
    let mut r = FileReader::new(data).ok()?;
    let mut out = Vec::new();
    while let Ok(Some(rec)) = r.next_record() {
        out.push(rec);
    }
    Some(out)
}

/// A binary log file: any bytes are refused or read to their end without
/// a panic, never yielding more records than 8-byte heads fit in the
/// input, and what was read, written again as a file, reads back as the
/// same records.
pub fn file_read(data: &[u8]) {
    let Some(records) = read_all(data) else {
        return;
    };
    assert!(records.len() <= data.len() / 8, "{} records", records.len());
    let mut w = FileWriter::new(Vec::new(), false).expect("writing to memory");
    for r in &records {
        w.write(r).expect("writing to memory");
    }
    let again = read_all(&w.into_inner()).expect("a written file has the magic");
    assert_eq!(again, records, "log file round trip");
}

/// The VSM index text: every lookup answers without a panic, and a file
/// it names is a segment file of the directory (`_.` prefix, no `/`) that
/// the index published.
pub fn vsm_index(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for (class, ident) in [("Arg", "-T"), ("Arg", "-S"), ("Stat", ""), ("Log", "")] {
        if let Some(f) = live_segment(&text, class, ident) {
            assert!(f.starts_with("_.") && !f.contains('/'), "{f:?}");
            assert!(
                text.lines()
                    .any(|l| l.starts_with("+ ") && l[2..].starts_with(f)),
                "{f:?} was never published"
            );
        }
    }
}

/// A `varnishncsa` format (`-F`), in text and JSON mode: parsed or
/// refused with a message, and a parsed format collects and renders the
/// sample transactions into lines that end in a newline.
pub fn ncsa_format(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let group = sample_group();
    for json in [false, true] {
        match Format::parse(text, json) {
            Ok(f) => {
                for t in &group {
                    let Some(v) = f.collect(t, json) else {
                        continue;
                    };
                    if let Some(line) = f.render(&v, json) {
                        assert_eq!(line.last(), Some(&b'\n'), "{line:?}");
                    }
                }
            }
            Err(e) => assert!(!e.is_empty()),
        }
    }
}

/// A `varnishhist` profile (`-P`): parsed or refused, and a parsed
/// profile accumulates the sample transactions and draws its screen.
pub fn hist_profile(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(p) = Profile::parse(text) else {
        return;
    };
    assert!(p.field >= 1 && p.low < p.high, "{p:?}");
    let mut h = Hist::new(p);
    let group = sample_group();
    h.accumulate(&group);
    h.accumulate(&group);
    assert!(h.len() <= 4);
    let screen = h.screen(80, 24, "head", "right");
    assert!(!screen.is_empty());
}
