//! The fetch-side ESI stage (`beresp.do_esi`), varnishd's `esi` and
//! `esi_gzip` fetch processors.
//!
//! Body pieces go through an optional gunzip (a gzip'ed backend body), the
//! [parser](crate::esi::parse), and then either straight into storage (a plain
//! object: the stored body is the body as received) or into a gzip
//! compressor that is flushed at every verbatim/skip boundary, so that each
//! verbatim range of the stored gzip body is an independent, byte-aligned
//! run of deflate blocks that delivery can copy into another gzip stream.
//! The stored gzip object stays a valid gzip file for clients that get it
//! without ESI processing.

use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress, Status};

use lacquer_vsl::Tag;

use crate::esi::parse::{Diag, Downstream, Features, Flush, Parser, Severity};
use crate::fetch::bo_task::BoTask;
use crate::fetch::gzip::{Gunzip, gzip_header};
use crate::pid;
use crate::runtime::counters::Main;

/// Counts bytes: the downstream of a plain object.
#[derive(Debug, Default)]
struct Count(u64);

impl Downstream for Count {
    fn pass(&mut self, n: u64, _: Flush) -> u64 {
        self.0 += n;
        self.0
    }
}

/// Compresses the bytes the parser passes on, flushing where it says.
struct Compressor {
    z: Compress,
    /// The gzip header for the level (`gzip_header`).
    header: [u8; 10],
    /// Parsed input not yet compressed (the parser passes bytes on later
    /// than it sees them when a keyword spans pieces).
    held: Vec<u8>,
    held_at: usize,
    out: Vec<u8>,
    total_out: u64,
    header_done: bool,
    crc: flate2::Crc,
    /// Bit positions for the `Gzip` log record: the final block and the end.
    last_bit: u64,
    stop_bit: u64,
}

impl Compressor {
    fn deflate(&mut self, mut input: &[u8], flush: FlushCompress) {
        loop {
            self.out.reserve(input.len() / 2 + 64);
            let before_in = self.z.total_in();
            let before_out = self.out.len();
            let status = self
                .z
                .compress_vec(input, &mut self.out, flush)
                .expect("deflate with a valid stream state cannot fail");
            input = &input[(self.z.total_in() - before_in) as usize..];
            self.total_out += (self.out.len() - before_out) as u64;
            let full = self.out.len() == self.out.capacity();
            match status {
                Status::StreamEnd => return,
                _ if input.is_empty() && !full => return,
                _ => {}
            }
        }
    }
}

impl Downstream for Compressor {
    fn pass(&mut self, n: u64, flush: Flush) -> u64 {
        if !self.header_done {
            self.out.extend_from_slice(&self.header);
            self.total_out += self.header.len() as u64;
            self.header_done = true;
        }
        let n = n as usize;
        let end = (self.held_at + n).min(self.held.len());
        let input = std::mem::take(&mut self.held);
        let chunk = &input[self.held_at..end];
        self.crc.update(chunk);
        match flush {
            Flush::Normal => {
                if !chunk.is_empty() {
                    self.deflate(chunk, FlushCompress::None);
                }
            }
            Flush::Align => self.deflate(chunk, FlushCompress::Sync),
            Flush::Reset => self.deflate(chunk, FlushCompress::Full),
            Flush::Finish => {
                let before = self.total_out;
                self.deflate(chunk, FlushCompress::Finish);
                self.last_bit = before * 8;
                // An empty fixed-Huffman final block is 10 bits.
                self.stop_bit = if self.total_out - before == 2 {
                    self.last_bit + 10
                } else {
                    self.total_out * 8
                };
                self.out.extend_from_slice(&self.crc.sum().to_le_bytes());
                self.out.extend_from_slice(&self.crc.amount().to_le_bytes());
                self.total_out += 8;
            }
        }
        self.held = input;
        self.held_at = end;
        self.total_out
    }
}

/// What the stage stores: the body as received, or compressed.
enum Out {
    Plain(Count),
    Gzip(Box<Compressor>),
}

/// A `Gzip` log record's fields (varnishd's `VGZ` summary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GzipStats {
    /// `G F E` (compressed here) or `U F -` (gunzipped here).
    pub id: &'static str,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub start_bit: u64,
    pub last_bit: u64,
    pub stop_bit: u64,
}

impl std::fmt::Display for GzipStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {}",
            self.id, self.bytes_in, self.bytes_out, self.start_bit, self.last_bit, self.stop_bit
        )
    }
}

/// What the stage produced once the body is complete.
#[derive(Debug)]
pub struct Finished {
    /// The encoded instructions, when the body had ESI markup.
    pub esi: Option<Bytes>,
    /// Parser diagnostics, in order.
    pub diags: Vec<Diag>,
    /// `Gzip` records to log, in varnishd's order.
    pub gzip_stats: Vec<GzipStats>,
}

/// The ESI stage for the fetch `bo` is about to store, and the header
/// changes it implies: the body is stored gzip'ed when `gzip_out` (the
/// filter list says `esi_gzip`: a gzip'ed backend body re-compressed, a
/// plain one with `beresp.do_gzip` compressed), else plain. As varnishd, an object with ESI processing is not streamed: clients
/// wait for the whole body (and its instructions).
pub fn stage(bo: &mut BoTask, backend_gzip: bool, gzip_out: bool) -> EsiFetch {
    let params = bo.sh.params();
    let features = Features {
        remove_bom: params.bit(pid!("feature"), "esi_remove_bom"),
        disable_xml_check: params.bit(pid!("feature"), "esi_disable_xml_check"),
        ignore_other_elements: params.bit(pid!("feature"), "esi_ignore_other_elements"),
        ignore_https: params.bit(pid!("feature"), "esi_ignore_https"),
    };
    let level = params.uint(pid!("gzip_level")) as u32;
    let chop = params.bit(pid!("debug"), "esi_chop");
    drop(params);
    // As varnishd's `gunzip` and `esi_gzip` fetch filters, each coder
    // counts.
    if backend_gzip {
        bo.sh.counters.inc(Main::n_gunzip);
    }
    if gzip_out {
        bo.sh.counters.inc(Main::n_gzip);
    }
    // As varnishd's gunzip and esi_gzip filters: the body they code is
    // not the backend's, so its ETag turns weak (moved to the end of the
    // list), and a Content-Encoding they set comes after it.
    if backend_gzip || gzip_out {
        bo.beresp.headers.remove("content-length");
        crate::fetch::gzip::weaken_etag(&mut bo.beresp.headers);
    }
    if backend_gzip {
        bo.beresp.headers.remove("content-encoding");
    }
    if gzip_out {
        bo.beresp.headers.remove("content-encoding");
        bo.beresp.headers.append("Content-Encoding", "gzip");
    }
    bo.do_stream = false;
    EsiFetch::new(&bo.bereq.url, features, backend_gzip, gzip_out, level, chop)
}

/// Logs what the stage found (`ESI_xmlerror`, `Gzip`) and counts parse
/// errors and warnings.
pub fn log_done(bo: &mut BoTask, done: &Finished) {
    for d in &done.diags {
        match d.severity {
            Severity::Error => bo.sh.counters.inc(Main::esi_errors),
            Severity::Warning => bo.sh.counters.inc(Main::esi_warnings),
            Severity::Notice => {}
        }
        bo.vsl.log_str(Tag::ESI_xmlerror, &d.text);
    }
    for g in &done.gzip_stats {
        bo.vsl.log(Tag::Gzip, format_args!("{g}"));
    }
}

/// The ESI stage of one fetch.
pub struct EsiFetch {
    parser: Parser,
    gunzip: Option<Gunzip>,
    gunzip_in: u64,
    plain_in: u64,
    out: Out,
    /// Feed the parser one byte at a time (`debug=+esi_chop`).
    chop: bool,
    diags: Vec<Diag>,
}

impl std::fmt::Debug for EsiFetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EsiFetch")
            .field("parser", &self.parser)
            .finish()
    }
}

impl EsiFetch {
    /// A stage for the body of `url`. `gzip_in`: the backend body is
    /// gzip'ed; `gzip_out`: store it gzip'ed (at `level`).
    pub fn new(
        url: &[u8],
        features: Features,
        gzip_in: bool,
        gzip_out: bool,
        level: u32,
        chop: bool,
    ) -> EsiFetch {
        let out = if gzip_out {
            Out::Gzip(Box::new(Compressor {
                z: Compress::new(Compression::new(level.min(9)), false),
                header: gzip_header(level),
                held: Vec::new(),
                held_at: 0,
                out: Vec::new(),
                total_out: 0,
                header_done: false,
                crc: flate2::Crc::new(),
                last_bit: 0,
                stop_bit: 0,
            }))
        } else {
            Out::Plain(Count::default())
        };
        EsiFetch {
            parser: Parser::new(url, features, gzip_out),
            gunzip: gzip_in.then(Gunzip::new),
            gunzip_in: 0,
            plain_in: 0,
            out,
            chop,
            diags: Vec::new(),
        }
    }

    /// Whether the stored body is gzip'ed.
    pub fn stores_gzip(&self) -> bool {
        matches!(self.out, Out::Gzip(_))
    }

    fn parse(&mut self, plain: &[u8]) {
        let ds: &mut dyn Downstream = match &mut self.out {
            Out::Plain(c) => c,
            Out::Gzip(z) => {
                z.held.extend_from_slice(plain);
                &mut **z
            }
        };
        if self.chop {
            for b in plain.chunks(1) {
                self.parser.feed(b, ds);
            }
        } else {
            self.parser.feed(plain, ds);
        }
        self.diags.extend(self.parser.take_diags());
        if let Out::Gzip(z) = &mut self.out {
            let at = z.held_at;
            z.held.drain(..at);
            z.held_at = 0;
        }
    }

    /// Takes one piece of the backend body; what is to be stored goes to
    /// `store` (the piece itself, for a plain object).
    pub fn feed(&mut self, seg: Bytes, store: &mut dyn FnMut(Bytes)) -> Result<(), String> {
        let plain = match self.gunzip.as_mut() {
            Some(g) => {
                self.gunzip_in += seg.len() as u64;
                let mut buf = Vec::new();
                g.feed(&seg, &mut buf).map_err(|e| e.to_string())?;
                Bytes::from(buf)
            }
            None => seg,
        };
        self.plain_in += plain.len() as u64;
        if plain.is_empty() {
            return Ok(());
        }
        self.parse(&plain);
        match &mut self.out {
            Out::Plain(_) => store(plain),
            Out::Gzip(z) => {
                if !z.out.is_empty() {
                    store(Bytes::from(std::mem::take(&mut z.out)));
                }
            }
        }
        Ok(())
    }

    /// The body is complete.
    pub fn finish(mut self, store: &mut dyn FnMut(Bytes)) -> Result<Finished, String> {
        if let Some(g) = &self.gunzip {
            g.finish().map_err(|e| e.to_string())?;
        }
        let ds: &mut dyn Downstream = match &mut self.out {
            Out::Plain(c) => c,
            Out::Gzip(z) => &mut **z,
        };
        let instrs = self.parser.finish(ds);
        self.diags.extend(self.parser.take_diags());
        let mut gzip_stats = Vec::new();
        let gzip = match &mut self.out {
            Out::Plain(_) => false,
            Out::Gzip(z) => {
                if !z.out.is_empty() {
                    store(Bytes::from(std::mem::take(&mut z.out)));
                }
                gzip_stats.push(GzipStats {
                    id: "G F E",
                    bytes_in: self.plain_in,
                    bytes_out: z.total_out,
                    start_bit: 80,
                    last_bit: z.last_bit,
                    stop_bit: z.stop_bit,
                });
                true
            }
        };
        if self.gunzip.is_some() {
            // The block positions of the backend's stream are not tracked.
            gzip_stats.push(GzipStats {
                id: "U F -",
                bytes_in: self.gunzip_in,
                bytes_out: self.plain_in,
                start_bit: 80,
                last_bit: 0,
                stop_bit: 0,
            });
        }
        Ok(Finished {
            esi: instrs.map(|i| crate::esi::encode(gzip, &i)),
            diags: self.diags,
            gzip_stats,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::esi::{Instr, Program};

    fn run(body: &[u8], gzip_in: bool, gzip_out: bool, piece: usize) -> (Vec<u8>, Finished) {
        let input = if gzip_in {
            crate::fetch::gzip::gzip_all(body, 6)
        } else {
            body.to_vec()
        };
        let mut f = EsiFetch::new(b"/", Features::default(), gzip_in, gzip_out, 6, false);
        let mut stored = Vec::new();
        for p in input.chunks(piece) {
            f.feed(Bytes::copy_from_slice(p), &mut |b: Bytes| {
                stored.extend_from_slice(&b)
            })
            .unwrap();
        }
        let fin = f
            .finish(&mut |b: Bytes| stored.extend_from_slice(&b))
            .unwrap();
        (stored, fin)
    }

    /// Delivers a stored gzip ESI body the way `deliver` does: verbatim
    /// ranges inflated one by one, with includes as `[url]`.
    fn deliver_gzip(stored: &[u8], code: Bytes) -> Vec<u8> {
        let mut p = Program::new(code).unwrap();
        assert!(p.gzip());
        let mut at = 0usize;
        let mut out = Vec::new();
        while let Some(i) = p.next_instr().unwrap() {
            match i {
                Instr::Verbatim {
                    len,
                    plain_len,
                    crc,
                } => {
                    let range = &stored[at..at + len as usize];
                    let plain = crate::fetch::gzip::inflate_range(range).unwrap();
                    assert_eq!(plain.len() as u64, plain_len);
                    assert_eq!(zlib_rs::crc32::crc32(0, &plain), crc);
                    out.extend_from_slice(&plain);
                    at += len as usize;
                }
                Instr::Skip(len) => at += len as usize,
                Instr::Include { url, .. } => {
                    out.push(b'[');
                    out.extend_from_slice(&url);
                    out.push(b']');
                }
            }
        }
        out
    }

    const PAGE: &[u8] = b"\n<html>Before <esi:include src=\"/a\"/> between \
        <esi:remove>not this</esi:remove><!--esi and --> after</html>\n";

    #[test]
    fn plain_object_is_stored_as_received() {
        for piece in [1, 7, 1000] {
            let (stored, fin) = run(PAGE, false, false, piece);
            assert_eq!(stored, PAGE);
            assert!(fin.gzip_stats.is_empty());
            assert!(!Program::new(fin.esi.unwrap()).unwrap().gzip());
        }
    }

    #[test]
    fn gzip_object_stays_valid_gzip_and_ranges_decode_alone() {
        for (gzip_in, piece) in [(false, 1000), (false, 3), (true, 5), (true, 1000)] {
            let (stored, fin) = run(PAGE, gzip_in, true, piece);
            assert_eq!(crate::fetch::gzip::gunzip_all(&stored).unwrap(), PAGE);
            let out = deliver_gzip(&stored, fin.esi.unwrap());
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "\n<html>Before [/a] between  and  after</html>\n"
            );
            assert_eq!(fin.gzip_stats[0].id, "G F E");
            assert_eq!(fin.gzip_stats.len(), 1 + usize::from(gzip_in));
        }
    }

    #[test]
    fn gzip_layout_matches_varnishd() {
        // The header and an empty full-flush block are skipped before the
        // first verbatim range, so errors count compressed offsets (e00022:
        // "ERR after 24"), and a body without ESI is 34 bytes (e00028).
        let mut f = EsiFetch::new(b"/", Features::default(), false, true, 6, false);
        let mut stored = Vec::new();
        f.feed(
            Bytes::from_static(b"\n\t\t<esi:remove>\n<esi:include src=\"x\"/>\n</esi:remove>x"),
            &mut |b: Bytes| stored.extend_from_slice(&b),
        )
        .unwrap();
        let fin = f.finish(&mut |_| {}).unwrap();
        assert_eq!(
            fin.diags[0].text,
            "ERR after 24 ESI 1.0 <esi:include> element nested in <esi:remove>"
        );
        let no_esi = Features {
            disable_xml_check: true,
            ..Features::default()
        };
        let mut f = EsiFetch::new(b"/", no_esi, false, true, 6, false);
        let mut stored = Vec::new();
        f.feed(Bytes::from_static(b"bar"), &mut |b: Bytes| {
            stored.extend_from_slice(&b)
        })
        .unwrap();
        let fin = f
            .finish(&mut |b: Bytes| stored.extend_from_slice(&b))
            .unwrap();
        assert!(fin.esi.is_none());
        assert_eq!(stored.len(), 34);
        assert_eq!(crate::fetch::gzip::gunzip_all(&stored).unwrap(), b"bar");
    }

    #[test]
    fn broken_gzip_input_is_an_error() {
        let mut f = EsiFetch::new(b"/", Features::default(), true, false, 6, false);
        assert!(
            f.feed(Bytes::from_static(b"not gzip"), &mut |_| {})
                .is_err()
        );
    }
}
