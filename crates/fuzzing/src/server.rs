//! The parsers that live in `lacquer-server`: ESI markup in fetched bodies
//! and `-p name=value` parameters.

use bytes::Bytes;
use lacquer_server::esi::parse::{Downstream, Features, Flush, Parser};
use lacquer_server::esi::{Instr, Program, encode};
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

/// A body through the ESI parser: every input byte goes downstream once,
/// the instructions cover exactly the body, feeding it in two pieces or
/// byte by byte gives the same instructions and diagnostics, and the
/// instructions survive their storage encoding. The first byte picks the
/// ESI features.
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
    if let Some(instrs) = whole.0 {
        let covered: u64 = instrs
            .iter()
            .map(|i| match i {
                Instr::Verbatim { len, .. } | Instr::Skip(len) => *len,
                Instr::Include { .. } => 0,
            })
            .sum();
        assert_eq!(covered, body.len() as u64, "instructions cover the body");
        let code: Bytes = encode(false, &instrs);
        let mut prog = Program::new(code).expect("encoded program");
        let mut back = Vec::new();
        while let Some(i) = prog.next_instr().expect("encoded instruction") {
            back.push(i);
        }
        assert_eq!(back, instrs, "ESI program round trip");
    }
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
