//! Edge Side Includes, as Varnish 7.1 does them.
//!
//! * [`parse`]: the sans-io parser that turns a body into verbatim/skip
//!   ranges and includes (varnishd's VEP), with varnishd's diagnostics.
//! * [`fetch::esi`](crate::fetch::esi): the fetch-side stage (`beresp.do_esi`): runs the parser over
//!   the body as it arrives, gunzipping and re-gzipping it when the object is
//!   stored compressed, and produces the instruction list kept with the
//!   object, so a body is parsed once, not at every delivery.
//! * [`client::esi`](crate::client::esi): delivery, where includes become sub-requests that run
//!   through VCL like client requests and are written into the parent's
//!   response in order; gzip'ed objects are stitched into one valid gzip
//!   stream for clients that accept gzip.
//!
//! The instruction list is stored with the object as a compact byte string
//! (see [`encode`]); the cache keeps it opaque.

pub mod parse;

use bytes::{BufMut, Bytes, BytesMut};

pub use parse::Instr;

const PLAIN: u8 = b'P';
const GZIP: u8 = b'G';
const VERBATIM: u8 = b'V';
const SKIP: u8 = b'S';
const INCLUDE: u8 = b'I';

/// An object's instruction list could not be read back (a broken internal
/// invariant: Lacquer wrote it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ESI instructions of the object are corrupt at byte {0}")]
pub struct Corrupt(pub usize);

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Encodes the instructions of an object stored plain or gzip'ed.
pub fn encode(gzip: bool, instrs: &[Instr]) -> Bytes {
    let mut out = BytesMut::with_capacity(1 + instrs.len() * 4);
    out.put_u8(if gzip { GZIP } else { PLAIN });
    for i in instrs {
        match i {
            Instr::Verbatim {
                len,
                plain_len,
                crc,
            } => {
                out.put_u8(VERBATIM);
                put_varint(&mut out, *len);
                if gzip {
                    put_varint(&mut out, *plain_len);
                    out.put_u32_le(*crc);
                }
            }
            Instr::Skip(len) => {
                out.put_u8(SKIP);
                put_varint(&mut out, *len);
            }
            Instr::Include {
                host,
                url,
                continue_on_error,
            } => {
                out.put_u8(INCLUDE);
                out.put_u8(u8::from(*continue_on_error) | (u8::from(host.is_some()) << 1));
                if let Some(h) = host {
                    put_varint(&mut out, h.len() as u64);
                    out.put_slice(h);
                }
                put_varint(&mut out, url.len() as u64);
                out.put_slice(url);
            }
        }
    }
    out.freeze()
}

/// Reads an encoded instruction list back.
#[derive(Debug, Clone)]
pub struct Program {
    code: Bytes,
    at: usize,
    gzip: bool,
}

impl Program {
    /// Starts reading `code` (as written by [`encode`]).
    pub fn new(code: Bytes) -> Result<Program, Corrupt> {
        let gzip = match code.first() {
            Some(&GZIP) => true,
            Some(&PLAIN) => false,
            _ => return Err(Corrupt(0)),
        };
        Ok(Program { code, at: 1, gzip })
    }

    /// Whether the object's body is gzip'ed with verbatim ranges that are
    /// independent deflate blocks.
    pub fn gzip(&self) -> bool {
        self.gzip
    }

    fn byte(&mut self) -> Result<u8, Corrupt> {
        let b = *self.code.get(self.at).ok_or(Corrupt(self.at))?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, Corrupt> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Corrupt(self.at))
    }

    fn bytes(&mut self) -> Result<Bytes, Corrupt> {
        let n = usize::try_from(self.varint()?).map_err(|_| Corrupt(self.at))?;
        let end = self.at.checked_add(n).ok_or(Corrupt(self.at))?;
        if end > self.code.len() {
            return Err(Corrupt(self.at));
        }
        let b = self.code.slice(self.at..end);
        self.at = end;
        Ok(b)
    }

    /// The next instruction, `None` at the end.
    pub fn next_instr(&mut self) -> Result<Option<Instr>, Corrupt> {
        if self.at >= self.code.len() {
            return Ok(None);
        }
        let at = self.at;
        Ok(Some(match self.byte()? {
            VERBATIM => {
                let len = self.varint()?;
                let (plain_len, crc) = if self.gzip {
                    let pl = self.varint()?;
                    let mut c = [0u8; 4];
                    for b in &mut c {
                        *b = self.byte()?;
                    }
                    (pl, u32::from_le_bytes(c))
                } else {
                    (0, 0)
                };
                Instr::Verbatim {
                    len,
                    plain_len,
                    crc,
                }
            }
            SKIP => Instr::Skip(self.varint()?),
            INCLUDE => {
                let flags = self.byte()?;
                let host = if flags & 2 != 0 {
                    Some(self.bytes()?)
                } else {
                    None
                };
                Instr::Include {
                    host,
                    url: self.bytes()?,
                    continue_on_error: flags & 1 != 0,
                }
            }
            _ => return Err(Corrupt(at)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_round_trip() {
        let instrs = vec![
            Instr::Skip(15),
            Instr::Verbatim {
                len: 300,
                plain_len: 70_000,
                crc: 0xdead_beef,
            },
            Instr::Include {
                host: Some(Bytes::from_static(b"example.com")),
                url: Bytes::from_static(b"/a?b"),
                continue_on_error: true,
            },
            Instr::Include {
                host: None,
                url: Bytes::from_static(b"/c"),
                continue_on_error: false,
            },
            Instr::Skip(1 << 40),
        ];
        for gzip in [false, true] {
            let mut p = Program::new(encode(gzip, &instrs)).unwrap();
            assert_eq!(p.gzip(), gzip);
            let mut back = Vec::new();
            while let Some(i) = p.next_instr().unwrap() {
                back.push(i);
            }
            if gzip {
                assert_eq!(back, instrs);
            } else {
                assert_eq!(
                    back[1],
                    Instr::Verbatim {
                        len: 300,
                        plain_len: 0,
                        crc: 0
                    }
                );
                assert_eq!(back.len(), instrs.len());
            }
        }
        let code = encode(true, &instrs);
        for cut in 1..code.len() {
            let mut p = Program::new(code.slice(..cut)).unwrap();
            let mut n = 0;
            while let Ok(Some(_)) = p.next_instr() {
                n += 1;
            }
            assert!(n < instrs.len(), "a truncated list is never complete");
        }
        assert!(Program::new(Bytes::from_static(b"X")).is_err());
    }
}
