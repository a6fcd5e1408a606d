//! Sans-io HTTP/2 (RFC 9113) for lacquerd's client connections: frame
//! scanning and the per-type rules varnishd applies before a frame is
//! acted on, connection and stream error codes, SETTINGS with their legal
//! ranges, the request header block turned into a request head with the
//! checks HTTP/2 demands (lower-case names, pseudo-headers first and once,
//! no connection-specific fields), and the response header block encoded
//! as varnishd encodes it.
//!
//! No I/O and no task structure: the server's session owns the socket and
//! the streams and asks this module what a frame means and what to send.
//! [`frame`] holds the frame header codec and payload parsing shared with
//! the vtc runner.
//!
//! Invariants: every check is made before the work it guards (a frame is
//! only looked at once complete and under the announced frame size; a
//! header list is refused as soon as it passes its limit), and no input
//! panics.

pub mod frame;

use crate::hpack;

/// Error codes (RFC 9113 section 7).
pub mod code {
    pub const NO_ERROR: u32 = 0x0;
    pub const PROTOCOL_ERROR: u32 = 0x1;
    pub const INTERNAL_ERROR: u32 = 0x2;
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    pub const SETTINGS_TIMEOUT: u32 = 0x4;
    pub const STREAM_CLOSED: u32 = 0x5;
    pub const FRAME_SIZE_ERROR: u32 = 0x6;
    pub const REFUSED_STREAM: u32 = 0x7;
    pub const CANCEL: u32 = 0x8;
    pub const COMPRESSION_ERROR: u32 = 0x9;
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
    pub const INADEQUATE_SECURITY: u32 = 0xc;
    pub const HTTP_1_1_REQUIRED: u32 = 0xd;
}

/// What an offending frame or field costs: the stream (`RST_STREAM`) or
/// the whole connection (`GOAWAY`), with the error code sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A connection error: GOAWAY with this code, then close.
    Conn(u32),
    /// A stream error: RST_STREAM with this code on the frame's stream.
    Stream(u32),
}

impl Fault {
    /// The error code sent.
    pub fn code(self) -> u32 {
        match self {
            Fault::Conn(c) | Fault::Stream(c) => c,
        }
    }

    /// The code's name (`PROTOCOL_ERROR`, ...).
    pub fn name(self) -> &'static str {
        frame::error_name(self.code())
    }
}

/// The connection preface's first line as an HTTP/1 request line, which
/// is how an HTTP/1 parser sees a prior-knowledge client.
pub const PREFACE: &[u8; 24] = frame::PREFACE;

/// How much of `buf` matches the preface: `Some(true)` when all of it is
/// there, `Some(false)` when what is there is a prefix of it, `None` when
/// it is something else.
pub fn preface_state(buf: &[u8]) -> Option<bool> {
    let n = buf.len().min(PREFACE.len());
    (buf[..n] == PREFACE[..n]).then_some(n == PREFACE.len())
}

/// The local and remote SETTINGS of a connection (RFC 9113 section 6.5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub header_table_size: u32,
    pub enable_push: u32,
    pub max_concurrent_streams: u32,
    pub initial_window_size: u32,
    pub max_frame_size: u32,
    pub max_header_list_size: u32,
}

/// One setting: identifier, name (as varnishd logs it), legal range and
/// the error a value out of range is.
struct SettingDef {
    id: u16,
    name: &'static str,
    min: u32,
    max: u32,
    range_error: u32,
}

const SETTING_DEFS: [SettingDef; 6] = [
    SettingDef {
        id: 1,
        name: "header_table_size",
        min: 0,
        max: u32::MAX,
        range_error: code::PROTOCOL_ERROR,
    },
    SettingDef {
        id: 2,
        name: "enable_push",
        min: 0,
        max: 1,
        range_error: code::PROTOCOL_ERROR,
    },
    SettingDef {
        id: 3,
        name: "max_concurrent_streams",
        min: 0,
        max: u32::MAX,
        range_error: code::PROTOCOL_ERROR,
    },
    SettingDef {
        id: 4,
        name: "initial_window_size",
        min: 0,
        max: 0x7fff_ffff,
        range_error: code::FLOW_CONTROL_ERROR,
    },
    SettingDef {
        id: 5,
        name: "max_frame_size",
        min: 0x4000,
        max: 0xff_ffff,
        range_error: code::PROTOCOL_ERROR,
    },
    SettingDef {
        id: 6,
        name: "max_header_list_size",
        min: 0,
        max: u32::MAX,
        range_error: code::PROTOCOL_ERROR,
    },
];

/// What applying one received setting did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// An identifier this implementation does not know: ignored.
    Unknown,
    /// Set; `old` is the previous value (the initial window's change
    /// moves every open stream's send window).
    Set {
        name: &'static str,
        id: u16,
        old: u32,
    },
}

impl Settings {
    /// The values a peer assumes before any SETTINGS frame (the header
    /// list limit as varnishd counts "unlimited", so that its default is
    /// not announced).
    pub const PROTOCOL: Settings = Settings {
        header_table_size: 4096,
        enable_push: 1,
        max_concurrent_streams: u32::MAX,
        initial_window_size: 65535,
        max_frame_size: 16384,
        max_header_list_size: 0x7fff_ffff,
    };

    fn slot(&mut self, id: u16) -> Option<&mut u32> {
        Some(match id {
            1 => &mut self.header_table_size,
            2 => &mut self.enable_push,
            3 => &mut self.max_concurrent_streams,
            4 => &mut self.initial_window_size,
            5 => &mut self.max_frame_size,
            6 => &mut self.max_header_list_size,
            _ => return None,
        })
    }

    /// A SETTINGS payload announcing the values that differ from the
    /// protocol's defaults, in identifier order (as varnishd sends them).
    pub fn encode_changes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut me = *self;
        let mut proto = Settings::PROTOCOL;
        for d in &SETTING_DEFS {
            let v = *me.slot(d.id).expect("defined setting");
            if v != *proto.slot(d.id).expect("defined setting") {
                out.extend_from_slice(&d.id.to_be_bytes());
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
        out
    }

    /// Applies one received `(identifier, value)`. A value out of its
    /// legal range is a connection error with the setting's code (the
    /// name and value come back for the log).
    pub fn apply(&mut self, id: u16, value: u32) -> Result<Applied, (Fault, &'static str)> {
        self.apply_checked(id, value, true)
    }

    /// [`Settings::apply`], with the range check optional (varnishd's
    /// `debug=+h2_nocheck` takes any value, for tests).
    pub fn apply_checked(
        &mut self,
        id: u16,
        value: u32,
        check: bool,
    ) -> Result<Applied, (Fault, &'static str)> {
        let Some(d) = SETTING_DEFS.iter().find(|d| d.id == id) else {
            return Ok(Applied::Unknown);
        };
        if check && (value < d.min || value > d.max) {
            return Err((Fault::Conn(d.range_error), d.name));
        }
        let slot = self.slot(id).expect("defined setting");
        let old = std::mem::replace(slot, value);
        Ok(Applied::Set {
            name: d.name,
            id,
            old,
        })
    }
}

/// Decodes the base64url `HTTP2-Settings` header of an `h2c` upgrade
/// into settings pairs (`None` when it is not whole settings in base64url).
pub fn decode_upgrade_settings(v: &[u8]) -> Option<Vec<(u16, u32)>> {
    let bytes = crate::base64::decode(v, crate::base64::URL_SAFE, Some(b'=')).ok()?;
    if !bytes.len().is_multiple_of(6) {
        return None;
    }
    Some(
        bytes
            .chunks(6)
            .map(|c| {
                (
                    u16::from_be_bytes([c[0], c[1]]),
                    u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                )
            })
            .collect(),
    )
}

/// A complete frame at the start of `buf`: its header and its total
/// length (header included). `None` until all of it has arrived.
pub fn scan(buf: &[u8]) -> Option<(frame::Head, usize)> {
    let h: &[u8; 9] = buf.get(..9)?.try_into().ok()?;
    let head = frame::Head::parse(h);
    let total = 9 + head.len as usize;
    (buf.len() >= total).then_some((head, total))
}

/// How varnishd treats a frame type before looking at its payload.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// The flags defined for the type; others are ignored (and cleared).
    pub flags: u8,
    /// What the frame on stream 0 is, when it must not be there.
    pub on_zero: Option<Fault>,
    /// What the frame on another stream is, when it must be on stream 0.
    pub on_nonzero: Option<Fault>,
    /// What the frame is on a stream never opened.
    pub on_idle: Option<Fault>,
    /// A control frame: its payload counts as body bytes in the
    /// session's own accounting (the streams count HEADERS and DATA).
    pub overhead: bool,
}

const PE: Option<Fault> = Some(Fault::Conn(code::PROTOCOL_ERROR));

/// The rules for a frame type; `None` for types to ignore.
pub fn rules(typ: u8) -> Option<Rules> {
    use frame::types::*;
    let r = |flags, on_zero, on_nonzero, on_idle, overhead| Rules {
        flags,
        on_zero,
        on_nonzero,
        on_idle,
        overhead,
    };
    Some(match typ {
        DATA => r(0x09, PE, None, PE, false),
        HEADERS => r(0x2d, PE, None, None, false),
        PRIORITY => r(0x00, PE, None, None, true),
        RST_STREAM => r(0x00, PE, None, PE, true),
        SETTINGS => r(0x01, None, PE, None, true),
        PUSH_PROMISE => r(0x0c, None, None, None, true),
        PING => r(0x01, None, PE, None, true),
        GOAWAY => r(0x00, None, PE, None, true),
        WINDOW_UPDATE => r(0x00, None, None, PE, true),
        CONTINUATION => r(0x04, PE, None, PE, false),
        _ => return None,
    })
}

/// A received request head, from a complete header block.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: Vec<u8>,
    pub path: Vec<u8>,
    /// Regular fields in arrival order; `:authority` becomes `host`
    /// where it stood.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Why a header block is refused: the fault, what to log, and whether
/// varnishd 7.1.1 found it while decoding a field (`h2h_decode_bytes`):
/// it then keeps its half-built request, so the session refuses the
/// next frame, whatever it is, with a connection PROTOCOL_ERROR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderError {
    pub fault: Fault,
    pub msg: String,
    pub in_field: bool,
}

/// A field that varnishd's HPACK decoder refuses as it decodes it.
fn field_err(msg: String) -> HeaderError {
    HeaderError {
        fault: Fault::Stream(code::PROTOCOL_ERROR),
        msg,
        in_field: true,
    }
}

fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// varnishd's `vct_issp`/`vct_isctl`: space, tab or a control character.
fn sp_or_ctl(c: u8) -> bool {
    c == b' ' || c == b'\t' || c < 0x20 || c == 0x7f
}

/// The header slots varnishd's request `struct http` has before the
/// regular fields (method, URL, protocol, status, reason).
const HDR_FIRST: usize = 5;

/// Turns a decoded header list into a request head with varnishd 7.1.1's
/// rules (`h2h_addhdr`, `h2_end_headers`): names made of lower-case token
/// characters, values without NUL, CR or LF; `:method` and `:path` not
/// empty, not repeated and without spaces or control characters;
/// `:scheme` (which becomes a `scheme` field) not empty and without them;
/// `:authority` becoming `host` (a repeated one gives two, which the
/// request state machine answers with 400); other pseudo-headers refused.
/// Connection-specific fields pass here (the request's hop-by-hop filter
/// drops them, as varnishd's does). A list over `max_list` bytes (RFC
/// 7541 counting: the client workspace) or with more regular fields than
/// `max_hdr` (`http_max_hdr`) leaves slots for is refused with
/// ENHANCE_YOUR_CALM after the whole block, as varnishd does.
pub fn request_head(
    fields: Vec<hpack::Header>,
    max_list: u64,
    max_hdr: usize,
) -> Result<RequestHead, HeaderError> {
    let mut head = RequestHead::default();
    let (mut method, mut path) = (false, false);
    let mut size = 0u64;
    let mut calm = None;
    for f in fields {
        size += f.name.len() as u64 + f.value.len() as u64 + 32;
        if size > max_list && calm.is_none() {
            calm = Some(format!("Header list larger than {max_list} bytes"));
        }
        let shown = String::from_utf8_lossy(&f.name).into_owned();
        if f.value.iter().any(|&c| c == 0 || c == b'\r' || c == b'\n') {
            return Err(field_err(format!("Illegal field header value: {shown}")));
        }
        if let Some(p) = f.name.strip_prefix(b":") {
            // varnishd (and so every client tested against it) accepts
            // pseudo-headers after regular ones: so does this.
            let seen = match p {
                b"method" => &mut method,
                b"path" => &mut path,
                b"scheme" => {
                    if f.value.is_empty() || f.value.iter().any(|&c| sp_or_ctl(c)) {
                        return Err(field_err("Illegal :scheme pseudo-header".into()));
                    }
                    head.headers.push((b"scheme".to_vec(), f.value));
                    continue;
                }
                b"authority" => {
                    head.headers.push((b"host".to_vec(), f.value));
                    continue;
                }
                _ => return Err(field_err(format!("Unknown pseudo-header: {shown}"))),
            };
            if std::mem::replace(seen, true) {
                return Err(field_err(format!("Duplicate pseudo-header: {shown}")));
            }
            if f.value.iter().any(|&c| sp_or_ctl(c)) {
                return Err(field_err(format!("Illegal pseudo-header: {shown}")));
            }
            if f.value.is_empty() {
                return Err(field_err(format!("Empty pseudo-header: {shown}")));
            }
            if p == b"method" {
                head.method = f.value;
            } else {
                head.path = f.value;
            }
            continue;
        }
        if f.name.is_empty() || !f.name.iter().all(|&c| is_tchar(c)) {
            return Err(field_err(format!(
                "Illegal field header name (non-token): {shown}"
            )));
        }
        if f.name.iter().any(u8::is_ascii_uppercase) {
            return Err(field_err(format!(
                "Illegal field header name (upper-case): {shown}"
            )));
        }
        head.headers.push((f.name, f.value));
    }
    if calm.is_none() && head.headers.len() + HDR_FIRST > max_hdr {
        calm = Some("Too many headers".into());
    }
    if let Some(msg) = calm {
        return Err(HeaderError {
            fault: Fault::Stream(code::ENHANCE_YOUR_CALM),
            msg,
            in_field: false,
        });
    }
    let missing = |what: &str| HeaderError {
        fault: Fault::Stream(code::PROTOCOL_ERROR),
        msg: format!("Missing {what}"),
        in_field: false,
    };
    if !method {
        return Err(missing(":method"));
    }
    if !path {
        return Err(missing(":path"));
    }
    // RFC 9113 section 8.2.3: cookie crumbs are joined for HTTP/1.
    let crumbs = head.headers.iter().filter(|(n, _)| n == b"cookie").count();
    if crumbs > 1 {
        let mut joined = Vec::new();
        for (_, v) in head.headers.iter().filter(|(n, _)| n == b"cookie") {
            if !joined.is_empty() {
                joined.extend_from_slice(b"; ");
            }
            joined.extend_from_slice(v);
        }
        let first = head
            .headers
            .iter()
            .position(|(n, _)| n == b"cookie")
            .expect("counted above");
        head.headers[first].1 = joined;
        let mut i = 0;
        head.headers.retain(|(n, _)| {
            i += 1;
            n != b"cookie" || i - 1 == first
        });
    }
    Ok(head)
}

/// The `:status` field as varnishd encodes it: indexed for the codes of
/// the static table, else never-indexed under the `:status` name.
fn encode_status(out: &mut Vec<u8>, status: u16) {
    let idx = match status {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => 0,
    };
    if idx > 0 {
        hpack::encode_indexed(out, idx);
    } else {
        out.push(0x18);
        let s = format!("{:03}", status % 1000);
        hpack::encode_str(out, s.as_bytes(), false);
    }
}

/// Fields varnishd 7.1's `h2_build_headers` leaves out of an HTTP/2
/// response head, silently: the HTTP/1 connection-specific ones
/// (`TE`, `Trailer` and `Proxy-Connection` go out).
const H2_DROPPED: [&[u8]; 5] = [
    b"connection",
    b"keep-alive",
    b"http2-settings",
    b"transfer-encoding",
    b"upgrade",
];

/// Encodes a response head as varnishd does: `:status`, then every field
/// never-indexed, its name from the static table when it is there (the
/// first entry of that name) else lower-cased, values as plain strings.
/// No dynamic table is used, so the peer's table never matters.
pub fn encode_response_head<'a>(
    status: u16,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    out: &mut Vec<u8>,
) {
    encode_status(out, status);
    for (name, value) in fields {
        if H2_DROPPED.iter().any(|d| d.eq_ignore_ascii_case(name)) {
            continue;
        }
        let idx = hpack::STATIC
            .iter()
            .position(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name));
        match idx {
            Some(i) if !name.starts_with(b":") => hpack::encode_int(out, 0x10, 4, i as u32 + 1),
            _ => {
                out.push(0x10);
                let lower = name.to_ascii_lowercase();
                hpack::encode_str(out, &lower, false);
            }
        }
        hpack::encode_str(out, value, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: &str, v: &str) -> hpack::Header {
        hpack::Header {
            name: n.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
        }
    }

    #[test]
    fn request_head_maps_pseudo_headers_and_joins_cookies() {
        let r = request_head(
            vec![
                h(":method", "GET"),
                h(":path", "/x"),
                h(":scheme", "http"),
                h(":authority", "example.com"),
                h("cookie", "a=1"),
                h("accept", "*/*"),
                h("cookie", "b=2"),
            ],
            u64::MAX,
            64,
        )
        .unwrap();
        assert_eq!(r.method, b"GET");
        assert_eq!(r.path, b"/x");
        assert_eq!(
            r.headers,
            vec![
                (b"scheme".to_vec(), b"http".to_vec()),
                (b"host".to_vec(), b"example.com".to_vec()),
                (b"cookie".to_vec(), b"a=1; b=2".to_vec()),
                (b"accept".to_vec(), b"*/*".to_vec()),
            ]
        );
    }

    #[test]
    fn request_head_refuses_what_varnishd_refuses() {
        let base = || vec![h(":method", "GET"), h(":path", "/")];
        let bad = |extra: Vec<hpack::Header>| {
            let mut f = base();
            f.extend(extra);
            let e = request_head(f, u64::MAX, 64).unwrap_err();
            (e.fault, e.in_field)
        };
        let pe = (Fault::Stream(code::PROTOCOL_ERROR), true);
        assert_eq!(bad(vec![h("snaFu", "x")]), pe);
        assert_eq!(bad(vec![h("sna[]fu", "x")]), pe);
        assert_eq!(bad(vec![h("", "x")]), pe);
        assert_eq!(bad(vec![h(":method", "GET")]), pe);
        assert_eq!(bad(vec![h(":foo", "x")]), pe);
        assert_eq!(bad(vec![h(":status", "200")]), pe);
        assert_eq!(bad(vec![h("a", "b\nc")]), pe);
        assert_eq!(bad(vec![h(":scheme", "")]), pe);
        let mut f = vec![h(":method", "G T"), h(":path", "/")];
        assert!(request_head(f.clone(), u64::MAX, 64).unwrap_err().in_field);
        f[0] = h(":method", "");
        assert!(request_head(f, u64::MAX, 64).unwrap_err().in_field);
        // What varnishd 7.1.1 lets through.
        for ok in [
            h("connection", "close"),
            h("te", "gzip"),
            h("transfer-encoding", "chunked"),
            h(":scheme", "http"),
            h(":authority", "a"),
            h("x", " leading space"),
        ] {
            let mut f = base();
            f.extend([ok.clone(), ok]);
            assert!(request_head(f, u64::MAX, 64).is_ok());
        }
        assert!(request_head(vec![h(":method", "GET"), h(":path", "*")], u64::MAX, 64).is_ok());
        // Checked at the end of the block, not while decoding.
        let missing = request_head(vec![h(":method", "GET")], u64::MAX, 64).unwrap_err();
        assert_eq!(missing.fault, Fault::Stream(code::PROTOCOL_ERROR));
        assert!(!missing.in_field);
        let calm = (Fault::Stream(code::ENHANCE_YOUR_CALM), false);
        let e = request_head(base(), 10, 64).unwrap_err();
        assert_eq!((e.fault, e.in_field), calm);
        let mut f = base();
        f.extend((0..60).map(|i| h(&format!("x{i}"), "v")));
        let e = request_head(f, u64::MAX, 64).unwrap_err();
        assert_eq!((e.fault, e.in_field), calm);
    }

    #[test]
    fn settings_ranges_and_changes() {
        let mut s = Settings::PROTOCOL;
        assert_eq!(s.encode_changes(), Vec::<u8>::new());
        s.max_concurrent_streams = 100;
        assert_eq!(s.encode_changes(), vec![0, 3, 0, 0, 0, 100]);
        assert_eq!(
            s.apply(4, 0x8000_0000),
            Err((Fault::Conn(code::FLOW_CONTROL_ERROR), "initial_window_size"))
        );
        assert_eq!(
            s.apply(5, 100),
            Err((Fault::Conn(code::PROTOCOL_ERROR), "max_frame_size"))
        );
        assert_eq!(
            s.apply(2, 2).unwrap_err().0,
            Fault::Conn(code::PROTOCOL_ERROR)
        );
        assert_eq!(s.apply(0x99, 7), Ok(Applied::Unknown));
        assert!(matches!(
            s.apply(4, 1000),
            Ok(Applied::Set { old: 65535, .. })
        ));
    }

    #[test]
    fn upgrade_settings_decode() {
        assert_eq!(
            decode_upgrade_settings(b"AAMAAABkAAQAAP__"),
            Some(vec![(3, 100), (4, 0xffff)])
        );
        assert_eq!(decode_upgrade_settings(b"#######"), None);
        assert_eq!(decode_upgrade_settings(b"AAMA"), None);
    }

    #[test]
    fn response_head_round_trips_through_the_decoder() {
        let mut out = Vec::new();
        encode_response_head(
            402,
            [
                (&b"Content-Length"[..], &b"11"[..]),
                (b"X-Varnish", b"1001"),
            ]
            .into_iter(),
            &mut out,
        );
        let mut t = hpack::Table::new(4096);
        let (f, e) = hpack::decode_block(&mut t, &out);
        assert_eq!(e, None);
        let got: Vec<_> = f
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (b":status".to_vec(), b"402".to_vec()),
                (b"content-length".to_vec(), b"11".to_vec()),
                (b"x-varnish".to_vec(), b"1001".to_vec()),
            ]
        );
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn scan_waits_for_whole_frames() {
        let f = frame::encode(frame::types::PING, 0, 0, &[0; 8]).unwrap();
        assert_eq!(scan(&f[..5]), None);
        assert_eq!(scan(&f[..16]), None);
        assert_eq!(scan(&f).map(|(h, n)| (h.len, n)), Some((8, 17)));
    }
}
