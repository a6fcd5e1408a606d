//! HTTP/2 frames (RFC 7540 section 4 and 6), as lacquerd reads them and the
//! vtc runner sends and checks them: the 9-byte frame header, payload parsing with strict length
//! checks into the metadata tests can `expect` on, and the names of frame
//! types, error codes and settings used in logs and options.

/// Frame type numbers.
pub mod types {
    /// DATA.
    pub const DATA: u8 = 0;
    /// HEADERS.
    pub const HEADERS: u8 = 1;
    /// PRIORITY.
    pub const PRIORITY: u8 = 2;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 4;
    /// PUSH_PROMISE.
    pub const PUSH_PROMISE: u8 = 5;
    /// PING.
    pub const PING: u8 = 6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 9;
}

/// Flag bits.
pub mod flags {
    /// ACK (SETTINGS, PING).
    pub const ACK: u8 = 0x1;
    /// END_STREAM (DATA, HEADERS).
    pub const END_STREAM: u8 = 0x1;
    /// END_HEADERS (HEADERS, PUSH_PROMISE, CONTINUATION).
    pub const END_HEADERS: u8 = 0x4;
    /// PADDED (DATA, HEADERS, PUSH_PROMISE).
    pub const PADDED: u8 = 0x8;
    /// PRIORITY (HEADERS).
    pub const PRIORITY: u8 = 0x20;
}

/// The connection preface a client sends first.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Largest payload a frame header can describe.
pub const MAX_PAYLOAD: usize = 0xff_ffff;

const TYPE_NAMES: [&str; 10] = [
    "DATA",
    "HEADERS",
    "PRIORITY",
    "RST_STREAM",
    "SETTINGS",
    "PUSH_PROMISE",
    "PING",
    "GOAWAY",
    "WINDOW_UPDATE",
    "CONTINUATION",
];

/// Error code names (RFC 7540 section 7), by value.
pub const ERRORS: [&str; 14] = [
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
];

/// Settings names (RFC 7540 section 6.5.2), index = identifier.
pub const SETTINGS: [&str; 7] = [
    "unknown",
    "HEADER_TABLE_SIZE",
    "ENABLE_PUSH",
    "MAX_CONCURRENT_STREAMS",
    "INITIAL_WINDOW_SIZE",
    "MAX_FRAME_SIZE",
    "MAX_HEADER_LIST_SIZE",
];

/// Name of a frame type (`?` for unknown types).
pub fn type_name(t: u8) -> &'static str {
    TYPE_NAMES.get(t as usize).copied().unwrap_or("?")
}

/// Name of an error code (`unknown` beyond the table).
pub fn error_name(e: u32) -> &'static str {
    ERRORS.get(e as usize).copied().unwrap_or("unknown")
}

/// The fixed 9-byte header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Payload length.
    pub len: u32,
    /// Frame type.
    pub typ: u8,
    /// Flags.
    pub flags: u8,
    /// Stream identifier, all 32 bits (the reserved bit included).
    pub stream: u32,
}

impl Head {
    /// Decode a frame header.
    pub fn parse(b: &[u8; 9]) -> Head {
        Head {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            typ: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]),
        }
    }

    /// Encode this header.
    pub fn encode(&self) -> [u8; 9] {
        let l = self.len.to_be_bytes();
        let s = self.stream.to_be_bytes();
        [
            l[1], l[2], l[3], self.typ, self.flags, s[0], s[1], s[2], s[3],
        ]
    }
}

/// A whole frame on the wire: header followed by `payload`. Fails when the
/// payload is longer than a frame can carry.
pub fn encode(typ: u8, flags: u8, stream: u32, payload: &[u8]) -> Result<Vec<u8>, String> {
    if payload.len() > MAX_PAYLOAD {
        return Err(format!(
            "{} frame payload of {} bytes exceeds the 24-bit length field",
            type_name(typ),
            payload.len()
        ));
    }
    let h = Head {
        len: payload.len() as u32,
        typ,
        flags,
        stream,
    };
    let mut v = h.encode().to_vec();
    v.extend_from_slice(payload);
    Ok(v)
}

/// A priority specification: dependency, exclusive flag, weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prio {
    /// Stream depended on.
    pub stream: u32,
    /// Exclusive dependency.
    pub exclusive: bool,
    /// Weight byte as sent (0..=255).
    pub weight: u8,
}

/// What a frame's payload says, per type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meta {
    /// DATA: body bytes (padding removed) and the pad length.
    Data {
        /// Pad length.
        padded: u8,
        /// Body bytes.
        body: Vec<u8>,
    },
    /// HEADERS, PUSH_PROMISE and CONTINUATION: a header block fragment.
    Headers {
        /// Pad length.
        padded: u8,
        /// Priority carried by a HEADERS frame.
        prio: Option<Prio>,
        /// Promised stream of a PUSH_PROMISE frame.
        promised: Option<u32>,
        /// The fragment.
        block: Vec<u8>,
    },
    /// PRIORITY.
    Priority(Prio),
    /// RST_STREAM error code.
    Rst(u32),
    /// SETTINGS: value per known identifier (index 1..=6), and every
    /// (identifier, value) pair in order.
    Settings {
        /// Known settings by identifier.
        known: [Option<u32>; 7],
        /// All pairs as sent.
        pairs: Vec<(u16, u32)>,
    },
    /// PING: opaque data and ACK flag.
    Ping {
        /// The 8 bytes.
        data: [u8; 8],
        /// ACK flag.
        ack: bool,
    },
    /// GOAWAY.
    Goaway {
        /// Last stream id.
        last: u32,
        /// Error code.
        err: u32,
        /// Debug data, if any.
        debug: Option<Vec<u8>>,
    },
    /// WINDOW_UPDATE increment.
    WinUp(u32),
}

/// A payload that breaks the frame's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadFrame {
    /// What is wrong.
    pub msg: String,
    /// varnishtest treats these as failures only in `fatal` mode (bad
    /// padding, reserved bit of WINDOW_UPDATE); the others always fail.
    pub soft: bool,
}

fn bad(msg: String) -> BadFrame {
    BadFrame { msg, soft: false }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Strip padding: returns (pad length, payload without pad-length byte
/// and padding).
fn unpad(flags_: u8, data: &[u8]) -> Result<(u8, &[u8]), BadFrame> {
    if flags_ & flags::PADDED == 0 {
        return Ok((0, data));
    }
    let Some(&pad) = data.first() else {
        return Err(BadFrame {
            msg: "invalid padding: PADDED flag on an empty frame".into(),
            soft: true,
        });
    };
    if pad as usize >= data.len() {
        return Err(BadFrame {
            msg: format!(
                "invalid padding: {pad} reported, but size is only {}",
                data.len()
            ),
            soft: true,
        });
    }
    Ok((pad, &data[1..data.len() - pad as usize]))
}

/// Parse the payload of a frame of type `typ`. Unknown types are an error.
pub fn parse(typ: u8, flags_: u8, data: &[u8]) -> Result<Meta, BadFrame> {
    use types::*;
    let exact = |n: usize| {
        if data.len() != n {
            Err(bad(format!(
                "{} frame: size should be {n}, but isn't ({})",
                type_name(typ),
                data.len()
            )))
        } else {
            Ok(())
        }
    };
    match typ {
        DATA => {
            let (padded, body) = unpad(flags_, data)?;
            Ok(Meta::Data {
                padded,
                body: body.to_vec(),
            })
        }
        HEADERS | PUSH_PROMISE => {
            let (padded, rest) = unpad(flags_, data)?;
            let mut prio = None;
            let mut promised = None;
            let mut shift = 0;
            if typ == HEADERS && flags_ & flags::PRIORITY != 0 {
                if rest.len() < 5 {
                    return Err(bad(format!(
                        "HEADERS frame with PRIORITY flag: {} bytes, need 5 for the priority",
                        rest.len()
                    )));
                }
                let n = be32(rest);
                prio = Some(Prio {
                    stream: n & 0x7fff_ffff,
                    exclusive: n >> 31 == 1,
                    weight: rest[4],
                });
                shift = 5;
            } else if typ == PUSH_PROMISE {
                if rest.len() < 4 {
                    return Err(bad(format!(
                        "PUSH_PROMISE frame: {} bytes, need 4 for the promised stream",
                        rest.len()
                    )));
                }
                promised = Some(be32(rest) & 0x7fff_ffff);
                shift = 4;
            }
            Ok(Meta::Headers {
                padded,
                prio,
                promised,
                block: rest[shift..].to_vec(),
            })
        }
        CONTINUATION => Ok(Meta::Headers {
            padded: 0,
            prio: None,
            promised: None,
            block: data.to_vec(),
        }),
        PRIORITY => {
            exact(5)?;
            let n = be32(data);
            Ok(Meta::Priority(Prio {
                stream: n & 0x7fff_ffff,
                exclusive: n >> 31 == 1,
                weight: data[4],
            }))
        }
        RST_STREAM => {
            exact(4)?;
            Ok(Meta::Rst(be32(data)))
        }
        SETTINGS => {
            if !data.len().is_multiple_of(6) {
                return Err(bad(format!(
                    "SETTINGS frame: size should be a multiple of 6, but isn't ({})",
                    data.len()
                )));
            }
            let mut known = [None; 7];
            let mut pairs = Vec::with_capacity(data.len() / 6);
            for c in data.chunks_exact(6) {
                let id = u16::from_be_bytes([c[0], c[1]]);
                let v = be32(&c[2..]);
                if let Some(k) = known.get_mut(id as usize) {
                    *k = Some(v);
                }
                pairs.push((id, v));
            }
            Ok(Meta::Settings { known, pairs })
        }
        PING => {
            exact(8)?;
            let mut d = [0u8; 8];
            d.copy_from_slice(data);
            Ok(Meta::Ping {
                data: d,
                ack: flags_ & flags::ACK != 0,
            })
        }
        GOAWAY => {
            if data.len() < 8 {
                return Err(bad(format!(
                    "GOAWAY frame: size should be at least 8, but isn't ({})",
                    data.len()
                )));
            }
            if data[0] & 0x80 != 0 {
                return Err(bad(
                    "GOAWAY frame: first bit of data is reserved and should be 0".into(),
                ));
            }
            Ok(Meta::Goaway {
                last: be32(data),
                err: be32(&data[4..]),
                debug: (data.len() > 8).then(|| data[8..].to_vec()),
            })
        }
        WINDOW_UPDATE => {
            exact(4)?;
            if data[0] & 0x80 != 0 {
                return Err(BadFrame {
                    msg: "WINDOW_UPDATE frame: first bit of data is reserved and should be 0"
                        .into(),
                    soft: true,
                });
            }
            Ok(Meta::WinUp(be32(data)))
        }
        _ => Err(bad(format!("unknown frame type {typ}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_roundtrip() {
        let h = Head {
            len: 0x012345,
            typ: 4,
            flags: 1,
            stream: 0x8000_0003,
        };
        let b = h.encode();
        assert_eq!(b, [0x01, 0x23, 0x45, 4, 1, 0x80, 0, 0, 3]);
        assert_eq!(Head::parse(&b), h);
        let f = encode(types::PING, 0, 0, b"01234567").unwrap();
        assert_eq!(f.len(), 17);
        assert!(encode(types::DATA, 0, 1, &vec![0; MAX_PAYLOAD + 1]).is_err());
    }

    #[test]
    fn data_padding() {
        let m = parse(types::DATA, flags::PADDED, b"\x04foonnnn").unwrap();
        assert_eq!(
            m,
            Meta::Data {
                padded: 4,
                body: b"foo".to_vec()
            }
        );
        let e = parse(types::DATA, flags::PADDED, b"\x04foo").unwrap_err();
        assert!(e.soft && e.msg.contains("invalid padding"));
        assert!(parse(types::DATA, flags::PADDED, b"").is_err());
        assert_eq!(
            parse(types::DATA, 0, b"x").unwrap(),
            Meta::Data {
                padded: 0,
                body: b"x".to_vec()
            }
        );
    }

    #[test]
    fn headers_prio_and_push() {
        let m = parse(
            types::HEADERS,
            flags::PRIORITY | flags::PADDED,
            b"\x01\x80\x00\x00\x05\x7b\x88p",
        )
        .unwrap();
        assert_eq!(
            m,
            Meta::Headers {
                padded: 1,
                prio: Some(Prio {
                    stream: 5,
                    exclusive: true,
                    weight: 123
                }),
                promised: None,
                block: vec![0x88],
            }
        );
        assert!(parse(types::HEADERS, flags::PRIORITY, b"\x00\x00").is_err());
        let m = parse(types::PUSH_PROMISE, 0, b"\x00\x00\x00\x02\x82").unwrap();
        assert!(matches!(
            m,
            Meta::Headers {
                promised: Some(2),
                ..
            }
        ));
        assert!(parse(types::PUSH_PROMISE, 0, b"\x00").is_err());
    }

    #[test]
    fn fixed_sizes() {
        assert!(parse(types::PRIORITY, 0, b"1234").is_err());
        assert!(parse(types::RST_STREAM, 0, b"12345").is_err());
        assert!(parse(types::PING, 0, b"1234567").is_err());
        assert!(
            parse(types::WINDOW_UPDATE, 0, b"\x80\x00\x00\x01")
                .unwrap_err()
                .soft
        );
        assert_eq!(
            parse(types::WINDOW_UPDATE, 0, b"\x00\x00\x01\xf4").unwrap(),
            Meta::WinUp(500)
        );
        assert_eq!(
            parse(types::RST_STREAM, 0, b"\x00\x00\x00\x08").unwrap(),
            Meta::Rst(8)
        );
        assert!(parse(42, 0, b"").is_err());
    }

    #[test]
    fn settings_and_goaway() {
        let m = parse(
            types::SETTINGS,
            0,
            b"\x00\x04\x00\x00\x00\x80\x00\x09\x00\x00\x00\x01",
        )
        .unwrap();
        let Meta::Settings { known, pairs } = m else {
            panic!("not settings")
        };
        assert_eq!(known[4], Some(128));
        assert_eq!(pairs, [(4, 128), (9, 1)]);
        assert!(parse(types::SETTINGS, 0, b"\x00\x04\x00").is_err());
        let m = parse(types::GOAWAY, 0, b"\x00\x00\x00\x07\x00\x00\x00\x09dbg").unwrap();
        assert_eq!(
            m,
            Meta::Goaway {
                last: 7,
                err: 9,
                debug: Some(b"dbg".to_vec())
            }
        );
        assert!(parse(types::GOAWAY, 0, b"\x80\x00\x00\x07\x00\x00\x00\x09").is_err());
        assert!(parse(types::GOAWAY, 0, b"\x00\x00").is_err());
        assert_eq!(error_name(9), "COMPRESSION_ERROR");
        assert_eq!(error_name(99), "unknown");
        assert_eq!(type_name(8), "WINDOW_UPDATE");
        assert_eq!(type_name(10), "?");
    }
}
