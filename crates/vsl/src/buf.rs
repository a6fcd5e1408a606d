//! Per-task log buffer (`VslBuf`), the hot-path writer API.
//!
//! Like Varnish's per-worker VSL buffer, a task (session, request, backend
//! fetch) appends its records to a private buffer and publishes them to the
//! shared ring in one reservation when the task ends or the buffer fills up
//! (`vsl_buffer`). Appending a masked tag costs one relaxed load and a bit
//! test; appending a record is a copy into the buffer.

use std::fmt;
use std::sync::Arc;

use crate::record::Vxid;
use crate::ring::{Vsl, encode_record};
use crate::tags::Tag;

/// A transaction's log buffer. Flushes on [`VslBuf::flush`] and on drop.
pub struct VslBuf {
    vsl: Arc<Vsl>,
    vxid: Vxid,
    words: Vec<u64>,
    limit: usize,
    scratch: Vec<u8>,
}

impl fmt::Debug for VslBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VslBuf")
            .field("vxid", &self.vxid)
            .field("buffered_words", &self.words.len())
            .finish_non_exhaustive()
    }
}

/// Log a formatted record into a [`VslBuf`]:
/// `vsl!(buf, Tag::ReqURL, "{}", url)`. The arguments are not evaluated
/// into a string when the tag is masked.
#[macro_export]
macro_rules! vsl {
    ($buf:expr, $tag:expr, $($arg:tt)*) => {{
        let buf: &mut $crate::VslBuf = &mut $buf;
        let tag: $crate::Tag = $tag;
        if buf.enabled(tag) {
            buf.log(tag, format_args!($($arg)*));
        }
    }};
}

impl VslBuf {
    /// A new, empty buffer logging for `vxid`.
    pub fn new(vsl: Arc<Vsl>, vxid: Vxid) -> VslBuf {
        let limit = vsl.buffer_words();
        VslBuf {
            vsl,
            vxid,
            words: Vec::new(),
            limit,
            scratch: Vec::new(),
        }
    }

    /// The transaction id records are logged under.
    pub fn vxid(&self) -> Vxid {
        self.vxid
    }

    /// Changes the transaction id for subsequent records (buffers are
    /// reused across requests of a session). Buffered records keep theirs.
    pub fn set_vxid(&mut self, vxid: Vxid) {
        self.vxid = vxid;
    }

    /// The log this buffer publishes to.
    pub fn vsl(&self) -> &Arc<Vsl> {
        &self.vsl
    }

    /// False if `tag` is masked off: callers may skip building a payload.
    #[inline]
    pub fn enabled(&self, tag: Tag) -> bool {
        !self.vsl.is_masked(tag)
    }

    /// Appends a formatted record (truncated at `vsl_reclen`).
    pub fn log(&mut self, tag: Tag, args: fmt::Arguments<'_>) {
        if !self.enabled(tag) {
            return;
        }
        if let Some(s) = args.as_str() {
            self.push(tag, self.vxid, s.as_bytes());
            return;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        format_truncated(&mut scratch, self.vsl.reclen(), args);
        self.push(tag, self.vxid, &scratch);
        self.scratch = scratch;
    }

    /// Appends a record with a text payload.
    #[inline]
    pub fn log_str(&mut self, tag: Tag, s: &str) {
        self.log_bytes(tag, s.as_bytes());
    }

    /// Appends a record with a byte payload (truncated at `vsl_reclen`).
    #[inline]
    pub fn log_bytes(&mut self, tag: Tag, data: &[u8]) {
        if self.enabled(tag) {
            self.push(tag, self.vxid, data);
        }
    }

    /// Appends an HTTP header record (`name: value`) without formatting
    /// machinery: the most frequent record kind.
    pub fn log_header(&mut self, tag: Tag, name: &[u8], value: &[u8]) {
        if !self.enabled(tag) {
            return;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend_from_slice(name);
        scratch.extend_from_slice(b": ");
        scratch.extend_from_slice(value);
        self.push(tag, self.vxid, &scratch);
        self.scratch = scratch;
    }

    fn push(&mut self, tag: Tag, vxid: Vxid, data: &[u8]) {
        let data = &data[..data.len().min(self.vsl.reclen())];
        let need = 2 + data.len().div_ceil(8);
        if self.words.len() + need > self.limit && !self.words.is_empty() {
            self.flush();
        }
        encode_record(&mut self.words, tag, vxid, data);
    }

    /// Number of bytes buffered and not yet published.
    pub fn buffered_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Publishes the buffered records to the shared log.
    pub fn flush(&mut self) {
        if !self.words.is_empty() {
            self.vsl.commit(&self.words);
            self.words.clear();
        }
    }
}

impl Drop for VslBuf {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Formats `args` into `out`, stopping silently at `limit` bytes.
pub(crate) fn format_truncated(out: &mut Vec<u8>, limit: usize, args: fmt::Arguments<'_>) {
    struct Trunc<'a> {
        out: &'a mut Vec<u8>,
        room: usize,
    }
    impl fmt::Write for Trunc<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let b = s.as_bytes();
            if b.len() <= self.room {
                self.out.extend_from_slice(b);
                self.room -= b.len();
                Ok(())
            } else {
                self.out.extend_from_slice(&b[..self.room]);
                self.room = 0;
                // Stop formatting: the record is full.
                Err(fmt::Error)
            }
        }
    }
    let room = limit.saturating_sub(out.len());
    // An error here only means "truncated", which is the intended outcome.
    let _ = fmt::write(&mut Trunc { out, room }, args);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{MIN_SPACE, ReadEvent, StartAt, VslConfig, VslReader, vsl_path};

    fn setup(name: &str, buffer: usize) -> (std::path::PathBuf, Arc<Vsl>) {
        let d = std::env::temp_dir().join(format!("lq-buf-{}-{}", name, std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let cfg = VslConfig {
            space: MIN_SPACE,
            buffer,
            ..VslConfig::default()
        };
        (d.clone(), Vsl::create(&vsl_path(&d), &cfg).unwrap())
    }

    fn texts(path: &std::path::Path) -> Vec<String> {
        let mut r = VslReader::open(path, StartAt::Oldest).unwrap();
        r.drain()
            .into_iter()
            .filter_map(|e| match e {
                ReadEvent::Record(r) => Some(format!("{} {} {}", r.vxid.id(), r.tag, r.text())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn buffered_until_flush_or_drop() {
        let (d, vsl) = setup("flush", 16 * 1024);
        let mut b = VslBuf::new(vsl.clone(), Vxid::client(1001));
        vsl!(b, Tag::Begin, "req {} {}", 1000, "rxreq");
        b.log_str(Tag::ReqURL, "/");
        b.log_header(Tag::ReqHeader, b"Host", b"example.com");
        vsl!(b, Tag::Debug, "{}", "masked");
        assert!(texts(vsl.path()).is_empty());
        b.flush();
        assert_eq!(
            texts(vsl.path()),
            vec![
                "1001 Begin req 1000 rxreq",
                "1001 ReqURL /",
                "1001 ReqHeader Host: example.com"
            ]
        );
        b.set_vxid(Vxid::client(1003));
        b.log(Tag::End, format_args!(""));
        drop(b);
        assert_eq!(texts(vsl.path()).last().unwrap(), "1003 End ");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn flushes_when_full_and_truncates() {
        let (d, vsl) = setup("full", 256);
        let mut b = VslBuf::new(vsl.clone(), Vxid::backend(5));
        for i in 0..20 {
            vsl!(b, Tag::BereqHeader, "X-N: {i}");
        }
        assert!(b.buffered_bytes() <= 256);
        assert!(texts(vsl.path()).len() >= 10);
        let long = "y".repeat(1000);
        vsl!(b, Tag::VCL_Log, "{long}");
        b.flush();
        let t = texts(vsl.path());
        assert_eq!(t.len(), 21);
        assert_eq!(t[20].len(), "5 VCL_Log ".len() + 255);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn truncating_formatter() {
        let mut v = Vec::new();
        format_truncated(&mut v, 5, format_args!("{}-{}", "abc", "defg"));
        assert_eq!(v, b"abc-d");
        let mut v = Vec::new();
        format_truncated(&mut v, 50, format_args!("{}", 42));
        assert_eq!(v, b"42");
    }
}
