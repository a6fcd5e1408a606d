//! The parsers that live in `lacquer-server`: ESI markup in fetched bodies
//! and `-p name=value` parameters.

use bytes::Bytes;
use flate2::Crc;
use lacquer_server::esi::parse::{Downstream, Features, Flush, Parser};
use lacquer_server::esi::{Instr, Program, encode};
use lacquer_server::fetch::esi::EsiFetch;
use lacquer_server::fetch::gzip::{Gunzip, inflate_range};
use lacquer_server::runtime::params::{ParamSet, canonical, lookup};

/// Counts the bytes handed downstream, as for an object stored plain.
struct Count(u64);

impl Downstream for Count {
    fn pass(&mut self, n: u64, _: Flush) -> u64 {
        self.0 += n;
        self.0
    }
}

type EsiOutcome = (Option<Vec<Instr>>, Vec<String>, u64);

fn esi_run(pieces: &[&[u8]], features: Features) -> EsiOutcome {
    let mut p = Parser::new(b"/fuzz/page", features, false);
    let mut ds = Count(0);
    let mut diags = Vec::new();
    for piece in pieces {
        p.feed(piece, &mut ds);
        diags.extend(p.take_diags().into_iter().map(|d| d.text));
    }
    let instrs = p.finish(&mut ds);
    diags.extend(p.take_diags().into_iter().map(|d| d.text));
    (instrs, diags, ds.0)
}

/// The bytes a plain object's instructions deliver, an include as a NUL
/// and its URL.
fn render(body: &[u8], instrs: &[Instr]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
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
    assert_eq!(at, body.len(), "instructions cover the body");
    out
}

/// A body through the ESI parser: every input byte goes downstream once,
/// the instructions cover exactly the body, feeding it in two pieces, in
/// pieces of a size the first byte picks, or byte by byte gives the same
/// instructions and diagnostics, and the instructions survive their
/// storage encoding. Then the same body through the fetch stage that
/// stores it gzip'ed ([`esi_gzip`]). The first byte picks the ESI
/// features, the piece size and the fetch stage's byte-by-byte mode.
pub fn esi(data: &[u8]) {
    let Some((&f, body)) = data.split_first() else {
        return;
    };
    let features = Features {
        remove_bom: f & 1 != 0,
        disable_xml_check: f & 2 != 0,
        ignore_other_elements: f & 4 != 0,
        ignore_https: f & 8 != 0,
    };
    let whole = esi_run(&[body], features);
    assert_eq!(whole.2, body.len() as u64, "bytes passed downstream");
    let at = crate::split_point(body);
    let split = esi_run(&[&body[..at], &body[at..]], features);
    assert_eq!(whole, split, "split at {at}");
    if body.len() <= 256 {
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(whole, esi_run(&bytes, features), "byte by byte");
    }
    let step = usize::from(f >> 4) + 1;
    let pieces: Vec<&[u8]> = body.chunks(step).collect();
    assert_eq!(whole, esi_run(&pieces, features), "pieces of {step}");
    let plain = whole.0.as_ref().map(|i| render(body, i));
    esi_gzip(body, features, step, f & 0x80 != 0, plain.as_deref());
    if let Some(instrs) = whole.0 {
        let code: Bytes = encode(false, &instrs);
        let mut prog = Program::new(code).expect("encoded program");
        let mut back = Vec::new();
        while let Some(i) = prog.next_instr().expect("encoded instruction") {
            back.push(i);
        }
        assert_eq!(back, instrs, "ESI program round trip");
    }
}

/// The fetch stage storing `body` gzip'ed, fed in pieces of `step`
/// (byte by byte inside when `chop`): the stored object gunzips to the
/// body, it has instructions exactly when the plain parse had them
/// (`plain`, what those deliver), and each verbatim range inflates on its
/// own to `plain_len` bytes with the CRC the instruction names, together
/// delivering what the plain object delivers.
fn esi_gzip(body: &[u8], features: Features, step: usize, chop: bool, plain: Option<&[u8]>) {
    let mut stage = EsiFetch::new(b"/fuzz/page", features, false, true, 6, chop);
    let mut stored = Vec::new();
    for piece in body.chunks(step) {
        stage
            .feed(Bytes::copy_from_slice(piece), &mut |b: Bytes| {
                stored.extend_from_slice(&b)
            })
            .expect("a plain body feeds the gzip stage");
    }
    let done = stage
        .finish(&mut |b: Bytes| stored.extend_from_slice(&b))
        .expect("a plain body finishes the gzip stage");
    let mut check = Vec::new();
    let mut g = Gunzip::new();
    g.feed(&stored, &mut check)
        .unwrap_or_else(|e| panic!("stored object does not gunzip: {e}"));
    g.finish()
        .unwrap_or_else(|e| panic!("stored object ends badly: {e}"));
    assert!(check == body, "stored object gunzips to another body");
    assert_eq!(done.esi.is_some(), plain.is_some(), "gzip and plain ESI");
    let (Some(code), Some(plain)) = (done.esi, plain) else {
        return;
    };
    let mut prog = Program::new(code).expect("the stage's program");
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = prog.next_instr().expect("the stage's instruction") {
        match i {
            Instr::Verbatim {
                len,
                plain_len,
                crc,
            } => {
                let piece = inflate_range(&stored[at..at + len as usize])
                    .unwrap_or_else(|e| panic!("range at {at}: {e}"));
                assert_eq!(piece.len() as u64, plain_len, "range at {at}");
                let mut c = Crc::new();
                c.update(&piece);
                assert_eq!(c.sum(), crc, "CRC of the range at {at}");
                out.extend_from_slice(&piece);
                at += len as usize;
            }
            Instr::Skip(len) => at += len as usize,
            Instr::Include { url, .. } => {
                out.push(0);
                out.extend_from_slice(&url);
            }
        }
    }
    assert!(out == plain, "gzip'ed object delivers otherwise");
}

/// `-p name=value` arguments, one per line, applied in order to the
/// defaults: a value that was accepted, shown as `param.show` shows it,
/// is accepted again and shows the same.
pub fn params(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut set = ParamSet::default();
    for arg in text.lines() {
        if set.apply_arg(arg).is_err() {
            continue;
        }
        let name = canonical(arg.split_once('=').map_or(arg, |(n, _)| n).trim());
        let p = lookup(name).unwrap_or_else(|| panic!("accepted unknown parameter {name:?}"));
        let shown = p.show(set.get(name));
        set.set(name, &shown)
            .unwrap_or_else(|e| panic!("{name}: shown value {shown:?} refused: {e:?}"));
        assert_eq!(p.show(set.get(name)), shown, "{name} round trip");
    }
    let _ = set.dump();
}
