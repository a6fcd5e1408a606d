//! The PROXY protocol (HAProxy's v1 text and v2 binary headers), sans-io.
//!
//! A load balancer or TLS terminator in front of the cache opens each
//! connection with one PROXY header that names the real client and the
//! address it connected to, then speaks HTTP. Listeners declared
//! `-a addr,PROXY` expect that header; backends declared with
//! `.proxy_header = 1|2` are sent one. This module decides when a header
//! is complete ([`scan`]), parses it with varnishd's acceptance rules and
//! log texts ([`parse`]), finds v2 TLVs ([`find_tlv`]) and writes headers
//! ([`encode_v1`], [`encode_v2`]). It does no I/O.
//!
//! Acceptance follows varnishd 7.1 (`cache_proxy_proto.c`), since clients
//! and log readers rely on it:
//!
//! - the whole header is at most [`MAX_HEADER`] bytes, a v1 line ends by
//!   byte 108; longer is an overflow;
//! - v1 needs exactly five space-separated fields after `PROXY`, `TCP4` or
//!   `TCP6`, numeric addresses of that family and numeric ports, `CRLF`;
//! - v2 `LOCAL` keeps the connection's own addresses; `UNSPEC`, non-TCP
//!   families and address blocks that are too short are logged and
//!   ignored (the connection's addresses stay), any other command is
//!   refused;
//! - v2 TLVs must tile the rest of the header exactly (also inside the SSL
//!   TLV) and a `CRC32C` TLV must match, else the header is refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The largest PROXY header accepted (varnishd reads at most this much
/// before giving up with an overflow).
pub const MAX_HEADER: usize = 1024;

/// The v1 line must end (its `\n`) at or before this offset.
const V1_MAX_NL: usize = 107;

const V1_SIG: &[u8] = b"PROXY";
/// The v2 signature.
pub const V2_SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// TLV types (PROXY protocol v2 section 2.2).
pub const PP2_TYPE_ALPN: u8 = 0x01;
pub const PP2_TYPE_AUTHORITY: u8 = 0x02;
pub const PP2_TYPE_CRC32C: u8 = 0x03;
pub const PP2_TYPE_SSL: u8 = 0x20;
/// First of the range the protocol leaves to applications
/// (`PP2_TYPE_MIN_CUSTOM`): Lacquer's own TLS listeners put the client's
/// JA3 string here (`tls_ja3`), for vmod `tls`'s `ja3()`.
pub const PP2_TYPE_LACQUER_JA3: u8 = 0xE0;

/// How far the bytes read so far get a PROXY header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// Could still become a header: read more.
    More,
    /// Neither signature: not a PROXY header.
    Junk,
    /// Longer than a header may be.
    Overflow,
    /// The header is the first `n` bytes.
    Complete(usize),
}

/// Decides whether `buf` (what the connection sent so far) starts with a
/// complete PROXY header.
pub fn scan(buf: &[u8]) -> Scan {
    let is_v1 = buf.iter().zip(V1_SIG).all(|(a, b)| a == b);
    let is_v2 = buf.iter().zip(V2_SIG).all(|(a, b)| a == b);
    if buf.is_empty() {
        return Scan::More;
    }
    if is_v1 {
        if buf.len() <= V1_SIG.len() {
            return Scan::More;
        }
        return match buf[V1_SIG.len()..].iter().position(|&b| b == b'\n') {
            Some(i) if i + V1_SIG.len() > V1_MAX_NL => Scan::Overflow,
            Some(i) => Scan::Complete(i + V1_SIG.len() + 1),
            None if buf.len() >= MAX_HEADER => Scan::Overflow,
            None => Scan::More,
        };
    }
    if is_v2 {
        if buf.len() < 16 {
            return Scan::More;
        }
        let total = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
        return if total > MAX_HEADER {
            Scan::Overflow
        } else if buf.len() < total {
            Scan::More
        } else {
            Scan::Complete(total)
        };
    }
    Scan::Junk
}

/// A log record the header produced, as varnishd writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// `Proxy`: version and the addresses taken over.
    Proxy(String),
    /// `ProxyGarbage`: what was wrong (or ignored).
    Garbage(String),
}

/// The addresses a header names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Addrs {
    pub client: SocketAddr,
    pub server: SocketAddr,
    /// The client address as the header wrote it (v1) or as varnishd
    /// prints it (v2): what `X-Forwarded-For` and `ReqStart` show.
    pub client_ip: String,
    pub client_port: String,
}

/// An accepted header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxied {
    pub version: u8,
    /// `None`: keep the connection's own addresses (v2 `LOCAL`, or an
    /// address block that was ignored).
    pub addrs: Option<Addrs>,
    /// The v2 TLV area, validated (empty for v1 and when ignored).
    pub tlvs: Vec<u8>,
}

/// The outcome of [`parse`]: the log records to write, and the header or
/// `Err(())` when the connection must be dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub log: Vec<Record>,
    pub result: Result<Proxied, ()>,
}

/// Parses a complete header (the first `n` bytes of [`Scan::Complete`]).
pub fn parse(header: &[u8]) -> Parsed {
    if header.starts_with(V2_SIG) {
        parse_v2(header)
    } else {
        parse_v1(header)
    }
}

fn garbage(msg: impl Into<String>) -> Parsed {
    Parsed {
        log: vec![Record::Garbage(msg.into())],
        result: Err(()),
    }
}

fn parse_v1(line: &[u8]) -> Parsed {
    // The first CR must be the one right before the closing LF.
    let Some(cr) = line.iter().position(|&b| b == b'\r') else {
        return Parsed {
            log: vec![],
            result: Err(()),
        };
    };
    if cr + 2 != line.len() || line[cr + 1] != b'\n' {
        return Parsed {
            log: vec![],
            result: Err(()),
        };
    }
    let text = &line[..cr];
    let fields: Vec<&[u8]> = text.split(|&b| b == b' ').skip(1).collect();
    if fields.len() < 5 {
        return garbage("PROXY1: Too few fields");
    }
    if fields.len() > 5 {
        return garbage("PROXY1: Too many fields");
    }
    let v6 = match fields[0] {
        b"TCP4" => false,
        b"TCP6" => true,
        _ => return garbage("PROXY1: Wrong TCP[46] field"),
    };
    let Some(client) = v1_addr(fields[1], fields[3], v6) else {
        return garbage("PROXY1: Cannot resolve source address");
    };
    let Some(server) = v1_addr(fields[2], fields[4], v6) else {
        return garbage("PROXY1: Cannot resolve destination address");
    };
    // Every field is ASCII once it resolved.
    let s = |f: &[u8]| String::from_utf8_lossy(f).into_owned();
    Parsed {
        log: vec![Record::Proxy(format!(
            "1 {} {} {} {}",
            s(fields[1]),
            s(fields[3]),
            s(fields[2]),
            s(fields[4])
        ))],
        result: Ok(Proxied {
            version: 1,
            addrs: Some(Addrs {
                client,
                server,
                client_ip: s(fields[1]),
                client_port: s(fields[3]),
            }),
            tlvs: Vec::new(),
        }),
    }
}

/// A numeric address of the family the v1 header named, and a numeric port.
fn v1_addr(host: &[u8], port: &[u8], v6: bool) -> Option<SocketAddr> {
    let host = std::str::from_utf8(host).ok()?;
    if port.is_empty() || !port.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let port: u16 = std::str::from_utf8(port).ok()?.parse().ok()?;
    let ip: IpAddr = if v6 {
        IpAddr::V6(host.parse::<Ipv6Addr>().ok()?)
    } else {
        IpAddr::V4(host.parse::<Ipv4Addr>().ok()?)
    };
    Some(SocketAddr::new(ip, port))
}

fn parse_v2(h: &[u8]) -> Parsed {
    let accepted = |log: Vec<Record>, addrs, tlvs| Parsed {
        log,
        result: Ok(Proxied {
            version: 2,
            addrs,
            tlvs,
        }),
    };
    if h.len() < 16 {
        return garbage("PROXY2: short header");
    }
    let len = usize::from(u16::from_be_bytes([h[14], h[15]]));
    let h = &h[..(16 + len).min(h.len())];
    let version = h[12] >> 4;
    if version != 2 {
        return garbage(format!("PROXY2: bad version ({version})"));
    }
    match h[12] & 0x0f {
        0 => {
            return accepted(
                vec![Record::Proxy("2 local local local local".into())],
                None,
                Vec::new(),
            );
        }
        1 => {}
        c => return garbage(format!("PROXY2: bad command ({c})")),
    }
    let (v6, alen) = match h[13] {
        0x00 => {
            return accepted(
                vec![Record::Garbage(
                    "PROXY2: Ignoring UNSPEC|UNSPEC addresses".into(),
                )],
                None,
                Vec::new(),
            );
        }
        0x11 => (false, 4),
        0x21 => (true, 16),
        other => {
            return accepted(
                vec![Record::Garbage(format!(
                    "PROXY2: Ignoring unsupported protocol (0x{other:02x})"
                ))],
                None,
                Vec::new(),
            );
        }
    };
    let flen = 2 * alen + 4;
    let body = &h[16..];
    if body.len() < flen {
        return accepted(
            vec![Record::Garbage(format!(
                "PROXY2: Ignoring short {} addresses ({})",
                if v6 { "IPv6" } else { "IPv4" },
                body.len()
            ))],
            None,
            Vec::new(),
        );
    }
    let ip = |b: &[u8]| -> IpAddr {
        if v6 {
            let mut o = [0u8; 16];
            o.copy_from_slice(b);
            IpAddr::V6(Ipv6Addr::from(o))
        } else {
            IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
        }
    };
    let port = |i: usize| u16::from_be_bytes([body[2 * alen + i], body[2 * alen + i + 1]]);
    let client = SocketAddr::new(ip(&body[..alen]), port(0));
    let server = SocketAddr::new(ip(&body[alen..2 * alen]), port(2));
    let mut log = vec![Record::Proxy(format!(
        "2 {} {} {} {}",
        client.ip(),
        client.port(),
        server.ip(),
        server.port()
    ))];
    let tlvs = &body[flen..];
    if let Err(e) = check_tlvs(h, tlvs, 16 + flen) {
        log.push(Record::Garbage(e.message().into()));
        return Parsed {
            log,
            result: Err(()),
        };
    }
    let addrs = Addrs {
        client,
        server,
        client_ip: client.ip().to_string(),
        client_port: client.port().to_string(),
    };
    accepted(log, Some(addrs), tlvs.to_vec())
}

/// Why a TLV area was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TlvError {
    /// 1 or 2 bytes left over: not even a TLV head.
    Dribble,
    /// A TLV longer than what is left.
    Length,
    /// The `CRC32C` TLV does not match the header.
    Crc,
}

impl TlvError {
    /// The `ProxyGarbage` text varnishd logs.
    fn message(self) -> &'static str {
        match self {
            TlvError::Dribble => "PROXY2: TLV Dribble bytes",
            TlvError::Length => "PROXY2: TLV Length Error",
            TlvError::Crc => "PROXY2: CRC error",
        }
    }
}

/// Walks a TLV area, calling `each` with (type, value) until it fails or
/// the area does not tile exactly.
fn walk<'a>(
    mut data: &'a [u8],
    mut each: impl FnMut(u8, &'a [u8]) -> Result<(), TlvError>,
) -> Result<(), TlvError> {
    while !data.is_empty() {
        if data.len() < 3 {
            return Err(TlvError::Dribble);
        }
        let len = usize::from(u16::from_be_bytes([data[1], data[2]]));
        let Some(value) = data.get(3..3 + len) else {
            return Err(TlvError::Length);
        };
        each(data[0], value)?;
        data = &data[3 + len..];
    }
    Ok(())
}

/// Validates the TLVs of `header` (which start at offset `start`): exact
/// tiling, the SSL TLV's sub-TLVs, and the CRC32C of the whole header.
fn check_tlvs(header: &[u8], tlvs: &[u8], start: usize) -> Result<(), TlvError> {
    let mut offset = start;
    walk(tlvs, |kind, value| {
        let at = offset + 3;
        offset += 3 + value.len();
        match kind {
            PP2_TYPE_SSL => {
                // Client flags (1 byte) and verify result (4), then sub-TLVs.
                if value.len() < 5 {
                    return Err(TlvError::Length);
                }
                walk(&value[5..], |_, _| Ok(()))
            }
            PP2_TYPE_CRC32C => {
                let sent = value
                    .get(..4)
                    .map(|v| u32::from_be_bytes([v[0], v[1], v[2], v[3]]));
                // The checksum covers the header with its own field zeroed.
                let mut copy = header.to_vec();
                copy[at..at + value.len().min(4)].fill(0);
                if sent != Some(crc32c(&copy)) {
                    return Err(TlvError::Crc);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    })
}

/// The value of the first TLV of type `kind` in a validated TLV area.
pub fn find_tlv(tlvs: &[u8], kind: u8) -> Option<&[u8]> {
    let mut found = None;
    let _ = walk(tlvs, |k, v| {
        if k == kind && found.is_none() {
            found = Some(v);
        }
        Ok(())
    });
    found
}

const CRC32C_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// CRC-32C (Castagnoli), as the v2 `CRC32C` TLV carries it.
pub fn crc32c(data: &[u8]) -> u32 {
    !data.iter().fold(!0u32, |crc, &b| {
        (crc >> 8) ^ CRC32C_TABLE[((crc ^ u32::from(b)) & 0xff) as usize]
    })
}

/// A v1 header for a connection from `client_ip`:`client_port` to
/// `server`; the family (`TCP4`/`TCP6`) is the server address's.
pub fn encode_v1(client_ip: &str, client_port: &str, server: SocketAddr) -> Vec<u8> {
    format!(
        "PROXY {} {client_ip} {} {client_port} {}\r\n",
        if server.is_ipv4() { "TCP4" } else { "TCP6" },
        server.ip(),
        server.port()
    )
    .into_bytes()
}

/// A v2 `PROXY` header for `client` → `server`, with an `AUTHORITY` TLV
/// when `authority` is given and not empty. Mixed families are sent as
/// IPv6 (IPv4 addresses mapped).
pub fn encode_v2(client: SocketAddr, server: SocketAddr, authority: Option<&[u8]>) -> Vec<u8> {
    let mut body = Vec::with_capacity(64);
    let fam = match (client, server) {
        (SocketAddr::V4(c), SocketAddr::V4(s)) => {
            body.extend_from_slice(&c.ip().octets());
            body.extend_from_slice(&s.ip().octets());
            0x11
        }
        _ => {
            let v6 = |a: SocketAddr| match a.ip() {
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                IpAddr::V6(a) => a.octets(),
            };
            body.extend_from_slice(&v6(client));
            body.extend_from_slice(&v6(server));
            0x21
        }
    };
    body.extend_from_slice(&client.port().to_be_bytes());
    body.extend_from_slice(&server.port().to_be_bytes());
    if let Some(a) = authority.filter(|a| !a.is_empty()) {
        // The header length is 16 bits: an authority that cannot fit is cut.
        let a = &a[..a.len().min(usize::from(u16::MAX) - 3 - body.len())];
        body.push(PP2_TYPE_AUTHORITY);
        body.extend_from_slice(&(a.len() as u16).to_be_bytes());
        body.extend_from_slice(a);
    }
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(V2_SIG);
    out.push(0x21);
    out.push(fam);
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn garbage_of(p: &Parsed) -> Vec<&str> {
        p.log
            .iter()
            .filter_map(|r| match r {
                Record::Garbage(g) => Some(g.as_str()),
                Record::Proxy(_) => None,
            })
            .collect()
    }

    /// The TLV-laden v2 header of Varnish's o00005 / proxy_b00000 tests,
    /// with the CRC32C value and one TLV type byte as parameters.
    fn tls_header(crc: &str, first_type: &str, len: &str, ssl_len: &str, tail: &str) -> Vec<u8> {
        hex(&format!(
            "0d0a0d0a000d0a515549540a 2111 {len}
             d946b521 5f8ea822 ed96 01bb
             {first_type} 0004 {crc}
             010002 6832
             02000a 686f636465742e6e6574
             2000{ssl_len} 0100000000
             210007 544c5376312e33
             250005 4543323536
             24000a 5253412d534841323536
             230016 414541442d4145533132382d47434d2d534841323536 {tail}"
        ))
    }

    #[test]
    fn scan_v1() {
        assert_eq!(scan(b""), Scan::More);
        assert_eq!(scan(b"PRO"), Scan::More);
        assert_eq!(scan(b"PROXY"), Scan::More);
        assert_eq!(scan(b"PROXY "), Scan::More);
        assert_eq!(scan(b"XYZ\r\n"), Scan::Junk);
        assert_eq!(scan(b"PROXZ"), Scan::Junk);
        let l = b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\nGET";
        assert_eq!(scan(l), Scan::Complete(l.len() - 3));
        // The line may end at offset 107, not later.
        let mut l = b"PROXY TCP4 1.2.3.4 5.6.7.8 1234 5678 ".to_vec();
        l.extend(std::iter::repeat_n(b' ', 69));
        l.extend_from_slice(b"\r\n");
        assert_eq!(scan(&l), Scan::Complete(108));
        l.insert(10, b' ');
        assert_eq!(scan(&l), Scan::Overflow);
        let long = [b"PROXY ".as_slice(), &[b'x'; 1100]].concat();
        assert_eq!(scan(&long[..1000]), Scan::More);
        assert_eq!(scan(&long[..1024]), Scan::Overflow);
    }

    #[test]
    fn scan_v2() {
        let h = hex("0d0a0d0a000d0a515549540a 2000 0000");
        assert_eq!(scan(&h[..5]), Scan::More);
        assert_eq!(scan(&h[..15]), Scan::More);
        assert_eq!(scan(&h), Scan::Complete(16));
        assert_eq!(
            scan(&hex("0d0a0d0a000d0a515549540a 2000 0401")),
            Scan::Overflow
        );
        let mut h = hex("0d0a0d0a000d0a515549540a 2000 03f0");
        assert_eq!(scan(&h), Scan::More);
        h.resize(1024, 0);
        assert_eq!(scan(&h), Scan::Complete(1024));
    }

    #[test]
    fn v1_errors_as_varnishd() {
        let g = |s: &str| garbage_of(&parse(s.as_bytes())).concat();
        assert_eq!(g("PROXY A B C D\r\n"), "PROXY1: Too few fields");
        assert_eq!(g("PROXY A B C D E F\r\n"), "PROXY1: Too many fields");
        assert_eq!(g("PROXY A B C D E\r\n"), "PROXY1: Wrong TCP[46] field");
        assert_eq!(
            g("PROXY TCP4 1.2.3.4 C D E\r\n"),
            "PROXY1: Cannot resolve source address"
        );
        assert_eq!(
            g("PROXY TCP4 1.2.3.4 5.6.7.8 1234 E\r\n"),
            "PROXY1: Cannot resolve destination address"
        );
        assert_eq!(
            g("PROXY TCP4 1:f::2 5:a::8 1234 5678\r\n"),
            "PROXY1: Cannot resolve source address"
        );
        assert_eq!(
            g("PROXY TCP6 1.2.3.4 5.6.7.8 1234 5678\r\n"),
            "PROXY1: Cannot resolve source address"
        );
        // Missing CR: dropped without a record.
        let p = parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 1234 5678\n");
        assert_eq!(p.result, Err(()));
        assert!(p.log.is_empty());
        assert_eq!(
            parse(b"PROXY TCP4 1\r.2.3.4 5.6.7.8 1 2\r\n").result,
            Err(())
        );
    }

    #[test]
    fn v1_good() {
        let p = parse(b"PROXY TCP6 1:f::2 5:a::8 1234 5678\r\n");
        assert_eq!(
            p.log,
            vec![Record::Proxy("1 1:f::2 1234 5:a::8 5678".into())]
        );
        let a = p.result.unwrap().addrs.unwrap();
        assert_eq!(a.client, "[1:f::2]:1234".parse().unwrap());
        assert_eq!(a.server, "[5:a::8]:5678".parse().unwrap());
        assert_eq!(a.client_ip, "1:f::2");
        assert_eq!(a.client_port, "1234");
    }

    #[test]
    fn v2_commands_and_families() {
        let sig = "0d0a0d0a000d0a515549540a";
        let p = parse(&hex(&format!("{sig} 2000 0000")));
        assert_eq!(
            p.log,
            vec![Record::Proxy("2 local local local local".into())]
        );
        assert_eq!(p.result.unwrap().addrs, None);
        let p = parse(&hex(&format!("{sig} 2200 0000")));
        assert_eq!(garbage_of(&p), ["PROXY2: bad command (2)"]);
        assert!(p.result.is_err());
        let p = parse(&hex(&format!("{sig} 1100 0000")));
        assert_eq!(garbage_of(&p), ["PROXY2: bad version (1)"]);
        let ok_ignored = |h: &str, msg: &str| {
            let p = parse(&hex(&format!("{sig} {h}")));
            assert_eq!(garbage_of(&p), [msg]);
            assert_eq!(p.result.unwrap().addrs, None);
        };
        ok_ignored("2100 0000", "PROXY2: Ignoring UNSPEC|UNSPEC addresses");
        ok_ignored("2199 0000", "PROXY2: Ignoring unsupported protocol (0x99)");
        ok_ignored("2131 0000", "PROXY2: Ignoring unsupported protocol (0x31)");
        ok_ignored(
            "2111 000b 0102030405060708090a0b",
            "PROXY2: Ignoring short IPv4 addresses (11)",
        );
    }

    #[test]
    fn v2_addresses_and_tlvs() {
        let h = encode_v2(
            "[102:304:506::d0e:f10]:2314".parse().unwrap(),
            "[8182:8384:8586::8d8e:8f80]:2828".parse().unwrap(),
            Some(b"example.com"),
        );
        assert_eq!(scan(&h), Scan::Complete(h.len()));
        let p = parse(&h);
        assert_eq!(
            p.log,
            vec![Record::Proxy(
                "2 102:304:506::d0e:f10 2314 8182:8384:8586::8d8e:8f80 2828".into()
            )]
        );
        let got = p.result.unwrap();
        assert_eq!(
            find_tlv(&got.tlvs, PP2_TYPE_AUTHORITY),
            Some(&b"example.com"[..])
        );
        assert_eq!(find_tlv(&got.tlvs, PP2_TYPE_ALPN), None);
    }

    #[test]
    fn v2_crc_and_tlv_errors_as_varnishd() {
        let good = tls_header("9503ee75", "03", "0065", "3d", "");
        let p = parse(&good);
        assert_eq!(
            p.log,
            vec![Record::Proxy(
                "2 217.70.181.33 60822 95.142.168.34 443".into()
            )]
        );
        let t = p.result.unwrap().tlvs;
        assert_eq!(find_tlv(&t, PP2_TYPE_ALPN), Some(&b"h2"[..]));
        let ssl = find_tlv(&t, PP2_TYPE_SSL).unwrap();
        assert_eq!(find_tlv(&ssl[5..], 0x21), Some(&b"TLSv1.3"[..]));

        let bad_crc = parse(&tls_header("9503ee74", "03", "0065", "3d", ""));
        assert_eq!(garbage_of(&bad_crc), ["PROXY2: CRC error"]);
        assert!(bad_crc.result.is_err());
        let dribble = parse(&tls_header("9503ee74", "ff", "0067", "3d", "ffff"));
        assert_eq!(garbage_of(&dribble), ["PROXY2: TLV Dribble bytes"]);
        let short = parse(&tls_header("9503ee74", "ff", "0060", "3d", ""));
        assert_eq!(garbage_of(&short), ["PROXY2: TLV Length Error"]);
        let ssl_short = parse(&tls_header("9503ee74", "ff", "0065", "3c", ""));
        assert_eq!(garbage_of(&ssl_short), ["PROXY2: TLV Length Error"]);
    }

    #[test]
    fn crc32c_known_value() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn encoders_round_trip() {
        let s: SocketAddr = "5.6.7.8:80".parse().unwrap();
        let v1 = encode_v1("1.2.3.4", "1234", s);
        assert_eq!(v1, b"PROXY TCP4 1.2.3.4 5.6.7.8 1234 80\r\n");
        assert_eq!(scan(&v1), Scan::Complete(v1.len()));
        assert!(parse(&v1).result.is_ok());
        let c: SocketAddr = "1.2.3.4:1234".parse().unwrap();
        let v2 = encode_v2(c, s, Some(b"a.b"));
        assert_eq!(v2[12..14], [0x21, 0x11]);
        assert_eq!(&v2[v2.len() - 6..], b"\x02\x00\x03a.b");
        let a = parse(&v2).result.unwrap().addrs.unwrap();
        assert_eq!((a.client, a.server), (c, s));
        // The header of Varnish's o00003 test.
        let v2 = encode_v2(
            "1.2.3.4:1111".parse().unwrap(),
            "5.6.7.8:5678".parse().unwrap(),
            Some(b"vtc.varnish-cache.org"),
        );
        assert_eq!(
            v2,
            hex("0d0a0d0a000d0a515549540a2111002401020304050607080457162e02\
                 00157674632e7661726e6973682d63616368652e6f7267")
        );
    }
}
