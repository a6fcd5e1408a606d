//! Fuzz target `esi_parse`: arbitrary bodies through the ESI parser and the
//! fetch stage, checking invariants, not just "no panic":
//! - every input byte is passed downstream exactly once;
//! - the instructions of a plain object cover the body exactly;
//! - parsing whole and in arbitrary pieces (down to single bytes) gives the
//!   same instructions and the same diagnostics;
//! - a gzip'ed object decodes back to the body, and each verbatim range
//!   decodes on its own to the bytes the plain parse delivers.
#![no_main]

use bytes::Bytes;
use lacquer_server::fetch::esi::EsiFetch;
use lacquer_server::esi::parse::{Downstream, Features, Flush, Instr, Parser};
use lacquer_server::esi::Program;
use libfuzzer_sys::fuzz_target;

struct Count(u64);

impl Downstream for Count {
    fn pass(&mut self, n: u64, _: Flush) -> u64 {
        self.0 += n;
        self.0
    }
}

fn parse(body: &[u8], cuts: &[usize], f: Features) -> (Option<Vec<Instr>>, Vec<String>) {
    let mut p = Parser::new(b"/a/b?c", f, false);
    let mut ds = Count(0);
    let mut diags = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&body.len())) {
        let c = c.clamp(at, body.len());
        p.feed(&body[at..c], &mut ds);
        at = c;
        diags.extend(p.take_diags().into_iter().map(|d| d.text));
    }
    let out = p.finish(&mut ds);
    diags.extend(p.take_diags().into_iter().map(|d| d.text));
    assert_eq!(ds.0, body.len() as u64);
    (out, diags)
}

/// The delivered bytes of a plain object, with includes as NUL + url.
fn render(body: &[u8], instrs: &[Instr]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for i in instrs {
        match i {
            Instr::Verbatim { len, .. } => {
                out.extend_from_slice(&body[at..at + *len as usize]);
                at += *len as usize;
            }
            Instr::Skip(len) => at += *len as usize,
            Instr::Include { url, .. } => {
                out.push(0);
                out.extend_from_slice(url);
            }
        }
    }
    assert_eq!(at, body.len());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let f = Features {
        remove_bom: flags & 1 != 0,
        disable_xml_check: flags & 2 != 0,
        ignore_other_elements: flags & 4 != 0,
        ignore_https: flags & 8 != 0,
    };
    let body = rest;
    let (whole, d1) = parse(body, &[], f);
    let step = usize::from(flags >> 4) + 1;
    let cuts: Vec<usize> = (step..body.len()).step_by(step).collect();
    let (split, d2) = parse(body, &cuts, f);
    assert_eq!(whole, split);
    assert_eq!(d1, d2);
    let plain = whole.as_ref().map(|i| render(body, i));

    // The gzip'ed variant of the same object.
    let mut stage = EsiFetch::new(b"/a/b?c", f, false, true, 6, flags & 0x80 != 0);
    let mut stored = Vec::new();
    for piece in body.chunks(step) {
        stage
            .feed(Bytes::copy_from_slice(piece), &mut |b: Bytes| {
                stored.extend_from_slice(&b)
            })
            .unwrap();
    }
    let done = stage
        .finish(&mut |b: Bytes| stored.extend_from_slice(&b))
        .unwrap();
    let mut check = Vec::new();
    let mut g = lacquer_server::fetch::gzip::Gunzip::new();
    g.feed(&stored, &mut check).unwrap();
    g.finish().unwrap();
    assert_eq!(check, body);
    assert_eq!(done.esi.is_some(), plain.is_some());
    if let (Some(code), Some(plain)) = (done.esi, plain) {
        let mut prog = Program::new(code).unwrap();
        let mut out = Vec::new();
        let mut at = 0usize;
        while let Some(i) = prog.next_instr().unwrap() {
            match i {
                Instr::Verbatim { len, plain_len, .. } => {
                    let mut d = flate2_inflate(&stored[at..at + len as usize]);
                    assert_eq!(d.len() as u64, plain_len);
                    out.append(&mut d);
                    at += len as usize;
                }
                Instr::Skip(len) => at += len as usize,
                Instr::Include { url, .. } => {
                    out.push(0);
                    out.extend_from_slice(&url);
                }
            }
        }
        assert_eq!(out, plain);
    }
});

/// Inflates raw deflate blocks that end at a flush point.
fn flate2_inflate(data: &[u8]) -> Vec<u8> {
    lacquer_server::client::esi::inflate_range(data).unwrap()
}
