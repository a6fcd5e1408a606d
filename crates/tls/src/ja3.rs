//! JA3 fingerprints of TLS clients, from the bytes of their ClientHello.
//!
//! A JA3 string is five comma-separated fields taken from the ClientHello
//! as the client sent it: the legacy protocol version, the cipher suites,
//! the extension types (in the client's order), the supported groups
//! (extension 10) and the EC point formats (extension 11), each list's
//! values in decimal joined by `-`, with the GREASE values of RFC 8701
//! left out. Varnish Enterprise's `tls.ja3()` returns this string (the
//! MD5 that identifies a client is taken in VCL when wanted).
//!
//! rustls hands out a parsed ClientHello without the extension order or
//! the legacy version, so the fingerprint is read here from the raw
//! handshake records, written by hand: it is a bounded walk over
//! length-prefixed fields that never allocates more than its input.

/// What the bytes received so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ja3 {
    /// The ClientHello is complete: its JA3 string.
    Fingerprint(String),
    /// The ClientHello is not complete yet: read more.
    NeedMore,
    /// Not a TLS ClientHello (or a malformed one): no fingerprint.
    NotHello,
}

/// The largest ClientHello looked at (a handshake message spread over
/// records is reassembled up to this size).
pub const MAX_HELLO: usize = 16 * 1024;

/// The JA3 string of the ClientHello at the start of `bytes` (TLS records
/// as received on the connection).
pub fn fingerprint(bytes: &[u8]) -> Ja3 {
    // Reassemble the handshake bytes carried by the leading records.
    let mut hs = Vec::new();
    let mut rest = bytes;
    loop {
        if rest.len() < 5 {
            break;
        }
        if rest[0] != 22 {
            return Ja3::NotHello;
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len == 0 {
            return Ja3::NotHello;
        }
        let Some(frag) = rest.get(5..5 + len) else {
            // A record still arriving: keep what it brought so far.
            hs.extend_from_slice(&rest[5..]);
            break;
        };
        hs.extend_from_slice(frag);
        rest = &rest[5 + len..];
        if hello_len(&hs).is_some_and(|n| hs.len() >= n) {
            break;
        }
    }
    if hs.len() > MAX_HELLO {
        return Ja3::NotHello;
    }
    match hello_len(&hs) {
        None if bytes.len() >= MAX_HELLO => Ja3::NotHello,
        None => Ja3::NeedMore,
        Some(n) if n > MAX_HELLO => Ja3::NotHello,
        Some(n) if hs.len() < n => {
            if bytes.len() >= MAX_HELLO {
                Ja3::NotHello
            } else {
                Ja3::NeedMore
            }
        }
        Some(n) => match parse_hello(&hs[4..n]) {
            Some(s) => Ja3::Fingerprint(s),
            None => Ja3::NotHello,
        },
    }
}

/// The whole handshake message's length (type, 24-bit length, body) once
/// its header is in and says ClientHello; `Some(usize::MAX)` for another
/// message type, so the caller sees it as too large.
fn hello_len(hs: &[u8]) -> Option<usize> {
    if hs.len() < 4 {
        return None;
    }
    if hs[0] != 1 {
        return Some(usize::MAX);
    }
    let n = (usize::from(hs[1]) << 16) | (usize::from(hs[2]) << 8) | usize::from(hs[3]);
    Some(4 + n)
}

/// A cursor over length-prefixed fields.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = b;
        Some(a)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A field with a one-byte length prefix.
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u8()?);
        self.take(n)
    }

    /// A field with a two-byte length prefix.
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u16()?);
        self.take(n)
    }
}

/// RFC 8701's reserved values: both bytes equal, low nibble 0xA.
fn is_grease(v: u16) -> bool {
    let [a, b] = v.to_be_bytes();
    a == b && a & 0x0f == 0x0a
}

/// The decimal values of a list of 16-bit items, GREASE left out.
fn list16(bytes: &[u8]) -> Option<String> {
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    let vals: Vec<String> = bytes
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .filter(|v| !is_grease(*v))
        .map(|v| v.to_string())
        .collect();
    Some(vals.join("-"))
}

/// The JA3 string of a ClientHello body.
fn parse_hello(body: &[u8]) -> Option<String> {
    let mut r = Reader(body);
    let version = r.u16()?;
    r.take(32)?; // random
    r.vec8()?; // legacy session id
    let ciphers = list16(r.vec16()?)?;
    r.vec8()?; // compression methods
    let (mut exts, mut groups, mut formats) = (Vec::new(), String::new(), String::new());
    // Extensions are optional in a TLS 1.0-style hello.
    if !r.0.is_empty() {
        let mut e = Reader(r.vec16()?);
        while !e.0.is_empty() {
            let ty = e.u16()?;
            let data = e.vec16()?;
            if is_grease(ty) {
                continue;
            }
            exts.push(ty.to_string());
            match ty {
                10 => groups = list16(Reader(data).vec16()?)?,
                11 => {
                    let f = Reader(data).vec8()?;
                    formats = f.iter().map(u8::to_string).collect::<Vec<_>>().join("-");
                }
                _ => {}
            }
        }
    }
    Some(format!(
        "{version},{ciphers},{},{groups},{formats}",
        exts.join("-")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello body with the given parts.
    fn hello(version: u16, ciphers: &[u16], exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = version.to_be_bytes().to_vec();
        b.extend_from_slice(&[7; 32]);
        b.push(0);
        b.extend_from_slice(&((ciphers.len() * 2) as u16).to_be_bytes());
        for c in ciphers {
            b.extend_from_slice(&c.to_be_bytes());
        }
        b.extend_from_slice(&[1, 0]);
        let mut e = Vec::new();
        for (t, d) in exts {
            e.extend_from_slice(&t.to_be_bytes());
            e.extend_from_slice(&(d.len() as u16).to_be_bytes());
            e.extend_from_slice(d);
        }
        b.extend_from_slice(&(e.len() as u16).to_be_bytes());
        b.extend_from_slice(&e);
        b
    }

    /// `body` as a handshake message in records of at most `frag` bytes.
    fn records(body: &[u8], frag: usize) -> Vec<u8> {
        let mut hs = vec![1, 0, 0, 0];
        hs[1..4].copy_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(body);
        let mut out = Vec::new();
        for c in hs.chunks(frag) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(c.len() as u16).to_be_bytes());
            out.extend_from_slice(c);
        }
        out
    }

    fn sample() -> Vec<u8> {
        let groups = [0, 8, 0x0a, 0x0a, 0, 29, 0, 23, 0, 24].to_vec();
        hello(
            0x0303,
            &[0x2a2a, 4865, 4866, 49195],
            &[
                (0x1a1a, vec![]),
                (0, vec![0, 0]),
                (10, groups),
                (11, vec![1, 0]),
                (65281, vec![0]),
            ],
        )
    }

    #[test]
    fn fields_in_order_without_grease() {
        let bytes = records(&sample(), 16 * 1024);
        assert_eq!(
            fingerprint(&bytes),
            Ja3::Fingerprint("771,4865-4866-49195,0-10-11-65281,29-23-24,0".into())
        );
    }

    #[test]
    fn a_hello_over_several_records_and_reads() {
        let bytes = records(&sample(), 20);
        for cut in 0..bytes.len() {
            assert_eq!(fingerprint(&bytes[..cut]), Ja3::NeedMore, "cut at {cut}");
        }
        assert!(matches!(fingerprint(&bytes), Ja3::Fingerprint(_)));
    }

    #[test]
    fn no_extensions_leave_empty_fields() {
        let mut body = hello(0x0301, &[47, 53], &[]);
        body.truncate(body.len() - 2);
        assert_eq!(
            fingerprint(&records(&body, 1000)),
            Ja3::Fingerprint("769,47-53,,,".into())
        );
    }

    #[test]
    fn junk_is_not_a_hello() {
        assert_eq!(fingerprint(b"GET / HTTP/1.1\r\n\r\n"), Ja3::NotHello);
        // A handshake record whose message is not a ClientHello.
        assert_eq!(fingerprint(&[22, 3, 1, 0, 4, 2, 0, 0, 0]), Ja3::NotHello);
        // Lengths that run past the message.
        let mut body = sample();
        body[34 + 1] = 0xff;
        assert_eq!(fingerprint(&records(&body, 1000)), Ja3::NotHello);
        // An announced size beyond the limit.
        assert_eq!(
            fingerprint(&[22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff]),
            Ja3::NotHello
        );
    }
}
