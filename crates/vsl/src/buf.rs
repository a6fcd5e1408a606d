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
use crate::ring::{HEADER_BYTES, Vsl, header_template};
use crate::tags::Tag;

/// A transaction's log buffer. Flushes on [`VslBuf::flush`] and on drop.
///
/// Records are encoded in place (header word, VXID word, zero-padded
/// payload), so appending is a couple of copies into a reused buffer.
pub struct VslBuf {
    vsl: Arc<Vsl>,
    vxid: Vxid,
    bytes: Vec<u8>,
    limit: usize,
}

impl fmt::Debug for VslBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VslBuf")
            .field("vxid", &self.vxid)
            .field("buffered_bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

/// Log a formatted record into a [`VslBuf`] (or `&mut VslBuf`):
/// `vsl!(buf, Tag::ReqURL, "{}", url)`. The arguments are not formatted
/// when the tag is masked. `buf` should be a place (variable or field): it
/// is named twice.
#[macro_export]
macro_rules! vsl {
    ($buf:expr, $tag:expr, $($arg:tt)*) => {{
        let tag: $crate::Tag = $tag;
        if $buf.enabled(tag) {
            $buf.log(tag, format_args!($($arg)*));
        }
    }};
}

impl VslBuf {
    /// A new, empty buffer logging for `vxid`.
    pub fn new(vsl: Arc<Vsl>, vxid: Vxid) -> VslBuf {
        let limit = vsl.buffer_words() * 8;
        VslBuf {
            vsl,
            vxid,
            bytes: Vec::new(),
            limit,
        }
    }

    /// A new buffer with room for `bytes` bytes of records before it grows:
    /// request and fetch tasks log a couple of kilobytes each, and growing
    /// from empty would cost several reallocations per transaction.
    pub fn with_capacity(vsl: Arc<Vsl>, vxid: Vxid, bytes: usize) -> VslBuf {
        let mut b = VslBuf::new(vsl, vxid);
        b.bytes.reserve(bytes.min(b.limit));
        b
    }

    /// A new buffer that reuses `bytes`' allocation (its contents are
    /// discarded): a session hands each request the buffer of the one
    /// before, so a keep-alive connection allocates its log buffer once.
    pub fn with_buffer(vsl: Arc<Vsl>, vxid: Vxid, mut bytes: Vec<u8>) -> VslBuf {
        bytes.clear();
        let limit = vsl.buffer_words() * 8;
        VslBuf {
            vsl,
            vxid,
            bytes,
            limit,
        }
    }

    /// Publishes what is buffered and hands back the empty buffer's
    /// allocation (see [`VslBuf::with_buffer`]).
    pub fn take_buffer(&mut self) -> Vec<u8> {
        self.flush();
        std::mem::take(&mut self.bytes)
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

    /// Starts a record: reserves its header; returns its offset.
    #[inline]
    fn begin(&mut self) -> usize {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&[0u8; HEADER_BYTES]);
        start
    }

    /// Completes the record started at `start`: truncates the payload (see
    /// [`Vsl::max_payload`]), fills in the header, pads, and flushes if full.
    #[inline(always)]
    fn finish(&mut self, start: usize, tag: Tag) {
        if tag == Tag::Debug {
            // varnishd's Debug records keep their C string terminator,
            // and tools show it (varnishncsa -j prints it as \u0000).
            self.bytes.push(0);
        }
        let mut len = self.bytes.len() - start - HEADER_BYTES;
        // Every payload is allowed `vsl_reclen - 1` bytes: only a longer
        // one needs its tag's own limit (binary tags keep one more byte).
        if len >= self.vsl.reclen() {
            let max = self.vsl.max_payload(tag);
            if len > max {
                self.bytes.truncate(start + HEADER_BYTES + max);
                len = max;
            }
        }
        // Header word and VXID in one store.
        let head = u128::from(header_template(tag, len)) | u128::from(self.vxid.raw()) << 64;
        self.bytes[start..start + HEADER_BYTES]
            .copy_from_slice(&head.to_le_bytes()[..HEADER_BYTES]);
        // Zero-pad to a whole word: a fixed-size append and a cut is
        // cheaper than a variable-length copy.
        let padded = self.bytes.len().next_multiple_of(8);
        self.bytes.extend_from_slice(&[0u8; 8]);
        self.bytes.truncate(padded);
        self.after_record();
    }

    /// After a record is complete: flushes a full buffer, and every record
    /// in sync mode.
    #[inline]
    fn after_record(&mut self) {
        if self.bytes.len() >= self.limit {
            self.vsl.note_overflow_flush();
            self.flush();
        } else if self.vsl.is_sync() {
            self.flush();
        }
    }

    /// Appends a formatted record (truncated at `vsl_reclen`).
    pub fn log(&mut self, tag: Tag, args: fmt::Arguments<'_>) {
        if !self.enabled(tag) {
            return;
        }
        if let Some(s) = args.as_str() {
            self.log_bytes(tag, s.as_bytes());
            return;
        }
        let start = self.begin();
        let limit = start + HEADER_BYTES + self.vsl.max_payload(tag);
        format_truncated(&mut self.bytes, limit, args);
        self.finish(start, tag);
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
            let start = self.begin();
            // Cut a long payload before copying it (`finish` would anyway).
            let data = if data.len() >= self.vsl.reclen() {
                &data[..data.len().min(self.vsl.max_payload(tag))]
            } else {
                data
            };
            self.bytes.extend_from_slice(data);
            self.finish(start, tag);
        }
    }

    /// Appends a record whose payload `fill` writes straight into the buffer
    /// (truncated at `vsl_reclen`): for payloads of numbers and text built
    /// without formatting machinery (see [`push_fixed6`]).
    pub fn log_with(&mut self, tag: Tag, fill: impl FnOnce(&mut Vec<u8>)) {
        if self.enabled(tag) {
            let start = self.begin();
            fill(&mut self.bytes);
            self.finish(start, tag);
        }
    }

    /// Appends an HTTP header record (`name: value`) without formatting
    /// machinery: the most frequent record kind.
    pub fn log_header(&mut self, tag: Tag, name: &[u8], value: &[u8]) {
        if !self.enabled(tag) {
            return;
        }
        let start = self.begin();
        self.bytes.extend_from_slice(name);
        self.bytes.extend_from_slice(b": ");
        self.bytes.extend_from_slice(value);
        self.finish(start, tag);
    }

    /// Appends a `Timestamp` record, `label: absolute since_start
    /// since_last`, each with six decimals like Varnish, using integer
    /// formatting (much cheaper than float formatting on the hot path).
    pub fn log_timestamp(&mut self, label: &str, absolute: f64, since_start: f64, since_last: f64) {
        if !self.enabled(Tag::Timestamp) {
            return;
        }
        let start = self.begin();
        self.bytes.extend_from_slice(label.as_bytes());
        self.bytes.extend_from_slice(b": ");
        push_fixed6(&mut self.bytes, absolute);
        self.bytes.push(b' ');
        push_fixed6(&mut self.bytes, since_start);
        self.bytes.push(b' ');
        push_fixed6(&mut self.bytes, since_last);
        self.finish(start, Tag::Timestamp);
    }

    /// Number of bytes buffered and not yet published.
    pub fn buffered_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Publishes the buffered records to the shared log.
    pub fn flush(&mut self) {
        if !self.bytes.is_empty() {
            self.vsl.commit(&self.bytes);
            self.bytes.clear();
        }
    }
}

impl Drop for VslBuf {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Appends `v` with exactly six decimals (like C's `%.6f`, rounding to the
/// nearest microsecond). Non-finite values print as `nan`/`inf`/`-inf`.
pub fn push_fixed6(out: &mut Vec<u8>, v: f64) {
    if !v.is_finite() {
        out.extend_from_slice(if v.is_nan() {
            b"nan"
        } else if v > 0.0 {
            b"inf"
        } else {
            b"-inf"
        });
        return;
    }
    if v.to_bits() == 0 {
        // +0.0: the since-start and since-last times of a transaction's
        // first timestamps.
        out.extend_from_slice(b"0.000000");
        return;
    }
    let Some(m) = round_micros(v.abs()) else {
        let _ = std::io::Write::write_fmt(out, format_args!("{v:.6}"));
        return;
    };
    // Digits are written backwards into a stack buffer, two at a time.
    let mut buf = [0u8; 24];
    let mut i = buf.len();
    let (mut int, fr) = (m / 1_000_000, (m % 1_000_000) as u32);
    // The six decimals as three pairs, in 32-bit arithmetic.
    let (hi, lo) = (fr / 10_000, fr % 10_000);
    for d in [lo % 100, lo / 100, hi] {
        i -= 2;
        buf[i..i + 2].copy_from_slice(pair(u64::from(d)));
    }
    i -= 1;
    buf[i] = b'.';
    while int >= 10 {
        i -= 2;
        buf[i..i + 2].copy_from_slice(pair(int % 100));
        int /= 100;
    }
    if int > 0 || buf[i] == b'.' {
        i -= 1;
        buf[i] = b'0' + int as u8;
    }
    if v.is_sign_negative() {
        i -= 1;
        buf[i] = b'-';
    }
    out.extend_from_slice(&buf[i..]);
}

/// `a` (finite, not negative) in whole microseconds, rounded exactly as the
/// float formatter rounds (to nearest, ties to even), in integer arithmetic:
/// `a` is `mant * 2^e`, so `a * 10^6` is an integer (at most 73 bits) shifted
/// by `e`. `None` from 2^63 seconds up, which the caller formats the slow way.
#[inline]
fn round_micros(a: f64) -> Option<u64> {
    let bits = a.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    let (mant, e) = if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), biased - 1075)
    };
    let scaled = u128::from(mant) * 1_000_000;
    if e >= 0 {
        return if e > 10 {
            None
        } else {
            u64::try_from(scaled << e).ok()
        };
    }
    let shift = e.unsigned_abs();
    if shift >= 128 {
        // Below 2^-75 s: far under half a microsecond.
        return Some(0);
    }
    let q = scaled >> shift;
    let r = scaled & ((1u128 << shift) - 1);
    let half = 1u128 << (shift - 1);
    let q = if r > half || (r == half && q & 1 == 1) {
        q + 1
    } else {
        q
    };
    u64::try_from(q).ok()
}

/// Appends `n` in decimal without formatting machinery.
pub fn push_u64(out: &mut Vec<u8>, n: u64) {
    let mut buf = [0u8; 20];
    out.extend_from_slice(u64_digits(n, &mut buf));
}

/// The decimal digits of `n`, written at the end of `buf`.
pub fn u64_digits(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    while n >= 10 {
        i -= 2;
        buf[i..i + 2].copy_from_slice(pair(n % 100));
        n /= 100;
    }
    if n > 0 || i == buf.len() {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    &buf[i..]
}

/// The two decimal digits of `n` (below 100).
#[inline]
fn pair(n: u64) -> &'static [u8] {
    const DIGITS: &[u8; 200] = b"\
        0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let n = n as usize * 2;
    &DIGITS[n..n + 2]
}

/// Formats `args` into `out`, stopping silently when `out` reaches `limit`
/// bytes in total.
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
    fn sync_mode_publishes_each_record_at_once() {
        let (d, vsl) = setup("sync", 64 * 1024);
        let mut b = VslBuf::new(vsl.clone(), Vxid::client(7));
        b.log_str(Tag::ReqMethod, "buffered");
        assert!(b.buffered_bytes() > 0);
        vsl.set_sync(true);
        b.log_str(Tag::ReqMethod, "at once");
        assert_eq!(b.buffered_bytes(), 0);
        let t = texts(&vsl_path(&d));
        assert!(t.iter().any(|l| l.ends_with("at once")), "{t:?}");
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

    fn log_via_reference(b: &mut VslBuf, url: &str) {
        vsl!(b, Tag::ReqURL, "{url}");
    }

    #[test]
    fn macro_accepts_references() {
        let (d, vsl) = setup("macro", 16 * 1024);
        let mut b = VslBuf::new(vsl.clone(), Vxid::client(3));
        log_via_reference(&mut b, "/ref");
        b.flush();
        assert_eq!(texts(vsl.path()), vec!["3 ReqURL /ref"]);
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
        assert!(vsl.stats().flushes >= 1);
        assert!(texts(vsl.path()).len() >= 10);
        let long = "y".repeat(1000);
        vsl!(b, Tag::VCL_Log, "{long}");
        b.flush();
        let t = texts(vsl.path());
        assert_eq!(t.len(), 21);
        assert_eq!(t[20].len(), "5 VCL_Log ".len() + 254);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn timestamps_match_printf() {
        for v in [
            0.0,
            0.000025,
            0.002130,
            1795317704.74885,
            1795317704.748851,
            -1.5,
            12.9999996,
            0.0000005,
            1e-9,
            -1e-9,
            -0.0,
            99.9999996,
            1234567890123.0,
            // Exact ties (k/128 s is a whole number of half microseconds):
            // the formatter rounds them to even.
            1.0 / 128.0,
            3.0 / 128.0,
            -5.0 / 128.0,
            1795317704.0 + 1.0 / 128.0,
            1795317704.0 + 3.0 / 128.0,
            // Past the integer fast path, and subnormals.
            9.3e12,
            1.8e13,
            9.3e18,
            1e300,
            -1e300,
            5e-324,
            f64::MIN_POSITIVE,
        ] {
            let mut out = Vec::new();
            push_fixed6(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{v:.6}"), "{v}");
        }
        // A sweep over magnitudes from nanoseconds to epoch times, both
        // signs, against the float formatter.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mant = (x >> 11) as f64 / (1u64 << 53) as f64;
            let exp = (x % 20) as i32 - 9;
            let sign = if x & 1 == 0 { 1.0 } else { -1.0 };
            let v = sign * mant * 10f64.powi(exp);
            let mut out = Vec::new();
            push_fixed6(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{v:.6}"), "{v:e}");
        }
        for n in [0, 7, 10, 99, 100, 101, 65535, 1_000_000, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
        let mut out = Vec::new();
        push_fixed6(&mut out, f64::NAN);
        assert_eq!(out, b"nan");
        let (d, vsl) = setup("ts", 16 * 1024);
        let mut b = VslBuf::new(vsl.clone(), Vxid::client(7));
        b.log_timestamp("Resp", 1795317704.74885, 0.00213, 0.000025);
        b.flush();
        assert_eq!(
            texts(vsl.path()),
            vec!["7 Timestamp Resp: 1795317704.748850 0.002130 0.000025"]
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn log_with_fills_in_place_and_truncates() {
        let (d, vsl) = setup("with", 16 * 1024);
        let mut b = VslBuf::with_capacity(vsl.clone(), Vxid::client(9), 4096);
        b.log_with(Tag::Hit, |o| {
            o.extend_from_slice(b"3 ");
            push_fixed6(o, 119.5);
        });
        b.log_with(Tag::VCL_Log, |o| o.extend_from_slice(&[b'z'; 1000]));
        b.flush();
        let t = texts(vsl.path());
        assert_eq!(t[0], "9 Hit 3 119.500000");
        assert_eq!(t[1].len(), "9 VCL_Log ".len() + 254);
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
