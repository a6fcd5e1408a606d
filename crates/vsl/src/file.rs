//! Varnish's binary log file format, as `varnishlog -w` writes and
//! `varnishlog -r` reads it, so files move freely between Lacquer's tools
//! and Varnish's.
//!
//! A file is the four bytes `VSL\0` followed by records, each two
//! little-endian 32-bit words and a payload padded with zeros to a multiple
//! of four bytes:
//!
//! * word 0: payload length in bytes (low 16 bits), tag number (high 8);
//! * word 1: the VXID with its client/backend marker bits;
//! * payload: text records end with a NUL that the length counts; binary
//!   and unsafe records (`F_BINARY`, `F_UNSAFE`: frame dumps, garbage,
//!   hash input, debug text) are stored as they are.
//!
//! In memory ([`Record`]) text payloads carry no terminator, so the writer
//! adds it and the reader removes it. A truncated file ends the input
//! quietly, like Varnish; a file that does not start with the magic is
//! refused.

use std::io::{self, Read, Write};

use crate::record::{Record, Vxid};
use crate::tags::{F_BINARY, F_UNSAFE, Tag};

/// The first four bytes of every log file.
pub const MAGIC: [u8; 4] = *b"VSL\0";

/// Longest payload a record may declare (the length field is 16 bits).
const MAX_LEN: usize = 0xffff;

/// Whether the file form of `tag` ends with a NUL the length counts.
fn terminated(tag: Tag) -> bool {
    tag.flags() & (F_BINARY | F_UNSAFE) == 0
}

/// Appends `rec` in file form to `out`.
pub fn encode(out: &mut Vec<u8>, rec: &Record) {
    let nul = usize::from(terminated(rec.tag));
    let data = &rec.data[..rec.data.len().min(MAX_LEN - nul)];
    let len = data.len() + nul;
    let w0 = (len as u32) | (u32::from(rec.tag as u8) << 24);
    out.extend_from_slice(&w0.to_le_bytes());
    out.extend_from_slice(&rec.vxid.raw().to_le_bytes());
    out.extend_from_slice(data);
    if nul == 1 {
        out.push(0);
    }
    out.resize(out.len() + (4 - len % 4) % 4, 0);
}

/// Writes records in file form; the magic goes first unless the file
/// already has content (appending, `-a`).
#[derive(Debug)]
pub struct FileWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
}

impl<W: Write> FileWriter<W> {
    /// A writer on `out`; `has_content` says the file is being appended to
    /// and already starts with the magic.
    pub fn new(mut out: W, has_content: bool) -> io::Result<FileWriter<W>> {
        if !has_content {
            out.write_all(&MAGIC)?;
        }
        Ok(FileWriter {
            out,
            buf: Vec::new(),
        })
    }

    /// Writes one record.
    pub fn write(&mut self, rec: &Record) -> io::Result<()> {
        self.buf.clear();
        encode(&mut self.buf, rec);
        self.out.write_all(&self.buf)
    }

    /// Flushes the underlying output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying output.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Why a log file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The input is empty.
    #[error("VSL file read error: EOF")]
    Empty,
    /// The input does not start with `VSL\0`.
    #[error("not a VSL file (it does not start with the VSL magic)")]
    NotVsl,
    /// Reading failed.
    #[error("VSL file read error: {0}")]
    Io(#[from] io::Error),
}

/// Reads records from a log file (or a pipe).
#[derive(Debug)]
pub struct FileReader<R: Read> {
    input: R,
    done: bool,
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: Read> FileReader<R> {
    /// Checks the magic at the start of `input`.
    pub fn new(mut input: R) -> Result<FileReader<R>, FileError> {
        let mut magic = [0u8; 4];
        match read_full(&mut input, &mut magic)? {
            0 => Err(FileError::Empty),
            4 if magic == MAGIC => Ok(FileReader { input, done: false }),
            _ => Err(FileError::NotVsl),
        }
    }

    /// The next record, or `None` at the end of the input (a record cut
    /// short by the end of the file ends the input too). Records with a
    /// tag number this build does not know are skipped.
    pub fn next_record(&mut self) -> io::Result<Option<Record>> {
        while !self.done {
            let mut head = [0u8; 8];
            if read_full(&mut self.input, &mut head)? < 8 {
                self.done = true;
                break;
            }
            let w0 = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            let vxid = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            let len = (w0 & 0xffff) as usize;
            let padded = len.next_multiple_of(4);
            let mut data = vec![0u8; padded];
            if read_full(&mut self.input, &mut data)? < padded {
                self.done = true;
                break;
            }
            data.truncate(len);
            let Some(tag) = Tag::from_u8((w0 >> 24) as u8) else {
                continue;
            };
            if terminated(tag) {
                // Drop the terminator (and any padding NULs before it).
                while data.last() == Some(&0) {
                    data.pop();
                }
            }
            return Ok(Some(Record {
                tag,
                vxid: Vxid::from_raw(vxid),
                data,
            }));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record::new(Tag::Begin, Vxid::backend(3), "bereq 2 fetch"),
            Record::new(Tag::ReqURL, Vxid::client(2), "/1?foo=bar"),
            Record::new(Tag::End, Vxid::client(2), ""),
            Record::new(Tag::HttpGarbage, Vxid::client(5), b"GET\r\n".to_vec()),
            Record::new(Tag::H2RxHdr, Vxid::client(6), vec![0, 1, 2]),
            Record::new(Tag::CLI, Vxid::NONE, "Rd ping"),
        ]
    }

    #[test]
    fn layout_is_varnishlogs() {
        let mut b = Vec::new();
        encode(&mut b, &sample()[0]);
        // Captured from `varnishlog -w` of Varnish 7.1.
        let mut want = vec![0x0e, 0, 0, 0x4c, 3, 0, 0, 0x80];
        want.extend_from_slice(b"bereq 2 fetch\0\0\0");
        assert_eq!(b, want);
        let mut b = Vec::new();
        encode(&mut b, &sample()[2]);
        assert_eq!(b, [1, 0, 0, 0x4d, 2, 0, 0, 0x40, 0, 0, 0, 0]);
        let mut b = Vec::new();
        encode(&mut b, &sample()[3]);
        assert_eq!(&b[..4], &[5, 0, 0, 9]);
        assert_eq!(&b[8..], b"GET\r\n\0\0\0");
    }

    #[test]
    fn round_trip() {
        let mut w = FileWriter::new(Vec::new(), false).unwrap();
        for r in sample() {
            w.write(&r).unwrap();
        }
        let bytes = w.into_inner();
        assert_eq!(&bytes[..4], b"VSL\0");
        let mut r = FileReader::new(&bytes[..]).unwrap();
        let mut got = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            got.push(rec);
        }
        assert_eq!(got, sample());
        // Appending writes no second magic.
        let w = FileWriter::new(Vec::new(), true).unwrap();
        assert!(w.into_inner().is_empty());
    }

    #[test]
    fn bad_and_short_input() {
        assert!(matches!(FileReader::new(&b""[..]), Err(FileError::Empty)));
        assert!(matches!(
            FileReader::new(&b"foobar\n"[..]),
            Err(FileError::NotVsl)
        ));
        assert!(matches!(
            FileReader::new(&b"VS"[..]),
            Err(FileError::NotVsl)
        ));
        let mut w = FileWriter::new(Vec::new(), false).unwrap();
        for r in sample() {
            w.write(&r).unwrap();
        }
        let bytes = w.into_inner();
        // Every truncation reads a prefix of the records, never fails.
        for cut in 4..bytes.len() {
            let mut r = FileReader::new(&bytes[..cut]).unwrap();
            let mut n = 0;
            while let Some(rec) = r.next_record().unwrap() {
                assert_eq!(rec, sample()[n]);
                n += 1;
            }
            assert!(n < sample().len());
        }
        // Unknown tags are skipped; oversized payloads are cut.
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[1, 0, 0, 0xfe, 0, 0, 0, 0, b'x', 0, 0, 0]);
        encode(&mut b, &sample()[1]);
        let mut r = FileReader::new(&b[..]).unwrap();
        assert_eq!(r.next_record().unwrap(), Some(sample()[1].clone()));
        assert_eq!(r.next_record().unwrap(), None);
        let big = Record::new(Tag::ReqURL, Vxid::client(1), vec![b'a'; 70000]);
        let mut b = Vec::new();
        encode(&mut b, &big);
        assert_eq!(b.len(), 8 + 0x10000);
    }
}
