//! `vmod_blob`: convert between BLOBs and their string encodings
//! (IDENTITY, BASE64 variants, HEX, URL percent-encoding), compare and
//! slice BLOBs, and hold a constant BLOB in an object.
//!
//! Errors are VCL failures with Varnish's messages (`vmod blob error:
//! ...`). Decoded bytes, the BLOB descriptors and encoded strings are
//! scratch of the task's workspace, charged as varnishd allocates them:
//! one that does not fit fails the task with varnishd's message.

use bytes::Bytes;
use lacquer_http::base64;
use lacquer_vcl::exec::{Context, Value, WsKind};

use crate::args::{Args, lossy, string};
use crate::{AnyObj, ClassImpl, Env, FuncImpl, MethodImpl, ModuleImpl, Obj, this};

const DECL: &str = r#"
$Module blob
$Function BLOB decode(ENUM {IDENTITY, BASE64, BASE64URL, BASE64URLNOPAD, BASE64CF, HEX, URL} decoding=IDENTITY, INT length=0, STRANDS encoded)
$Function STRING encode(ENUM {IDENTITY, BASE64, BASE64URL, BASE64URLNOPAD, BASE64CF, HEX, URL} encoding=IDENTITY, ENUM {LOWER, UPPER, DEFAULT} case=DEFAULT, BLOB blob)
$Function STRING transcode(ENUM {IDENTITY, BASE64, BASE64URL, BASE64URLNOPAD, BASE64CF, HEX, URL} decoding=IDENTITY, ENUM {IDENTITY, BASE64, BASE64URL, BASE64URLNOPAD, BASE64CF, HEX, URL} encoding=IDENTITY, ENUM {LOWER, UPPER, DEFAULT} case=DEFAULT, INT length=0, STRANDS encoded)
$Function BOOL same(BLOB, BLOB)
$Function BOOL equal(BLOB, BLOB)
$Function INT length(BLOB)
$Function BLOB sub(BLOB, BYTES length, BYTES offset=0)
$Object blob(ENUM {IDENTITY, BASE64, BASE64URL, BASE64URLNOPAD, BASE64CF, HEX, URL} decoding=IDENTITY, STRANDS encoded)
$Method BLOB .get()
$Method STRING .encode(ENUM {IDENTITY, BASE64, BASE64URL, BASE64URLNOPAD, BASE64CF, HEX, URL} encoding=IDENTITY, ENUM {LOWER, UPPER, DEFAULT} case=DEFAULT)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("decode", decode as FuncImpl),
        ("encode", encode),
        ("transcode", transcode),
        ("same", same),
        ("equal", equal),
        ("length", length),
        ("sub", sub),
    ],
    classes: &[ClassImpl {
        name: "blob",
        ctor: new_blob,
        methods: &[("get", obj_get as MethodImpl), ("encode", obj_encode)],
    }],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

const B64_CF: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-~";

/// An encoding scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Enc {
    Identity,
    Base64,
    Base64Url,
    Base64UrlNoPad,
    Base64Cf,
    Hex,
    Url,
}

impl Enc {
    fn parse(s: Option<&str>) -> Result<Enc, String> {
        Ok(match s.unwrap_or("IDENTITY") {
            "IDENTITY" => Enc::Identity,
            "BASE64" => Enc::Base64,
            "BASE64URL" => Enc::Base64Url,
            "BASE64URLNOPAD" => Enc::Base64UrlNoPad,
            "BASE64CF" => Enc::Base64Cf,
            "HEX" => Enc::Hex,
            "URL" => Enc::Url,
            other => return Err(format!("vmod blob error: unknown encoding {other}")),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Enc::Identity => "IDENTITY",
            Enc::Base64 => "BASE64",
            Enc::Base64Url => "BASE64URL",
            Enc::Base64UrlNoPad => "BASE64URLNOPAD",
            Enc::Base64Cf => "BASE64CF",
            Enc::Hex => "HEX",
            Enc::Url => "URL",
        }
    }

    /// (alphabet, padding byte) of the base64 variants.
    fn b64(self) -> Option<(&'static [u8; 64], Option<u8>)> {
        match self {
            Enc::Base64 => Some((base64::STANDARD, Some(b'='))),
            Enc::Base64Url => Some((base64::URL_SAFE, Some(b'='))),
            Enc::Base64UrlNoPad => Some((base64::URL_SAFE, None)),
            Enc::Base64Cf => Some((B64_CF, Some(b'_'))),
            _ => None,
        }
    }
}

/// Encodes `data`; `upper` selects uppercase hex digits (HEX, URL; the
/// default is lowercase).
pub(crate) fn encode_bytes(enc: Enc, upper: bool, data: &[u8]) -> Vec<u8> {
    let hex: &[u8; 16] = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    match enc {
        Enc::Identity => data.to_vec(),
        Enc::Hex => {
            let mut out = Vec::with_capacity(data.len() * 2);
            for b in data {
                out.push(hex[(b >> 4) as usize]);
                out.push(hex[(b & 15) as usize]);
            }
            out
        }
        Enc::Url => {
            let mut out = Vec::with_capacity(data.len());
            for &b in data {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                    out.push(b);
                } else {
                    out.extend_from_slice(&[b'%', hex[(b >> 4) as usize], hex[(b & 15) as usize]]);
                }
            }
            out
        }
        _ => {
            let (alpha, pad) = enc.b64().expect("base64 variant");
            let mut out = Vec::new();
            base64::encode_into(&mut out, data, alpha, pad);
            out
        }
    }
}

/// The decoder's error: the input (its start) is quoted; callers prefix
/// what they were doing.
fn decode_error(input: &[u8]) -> String {
    let n = input.len().min(40);
    format!("illegal encoding beginning with \"{}\"", lossy(&input[..n]))
}

fn hex_val(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Decodes the STRANDS argument `i` (only its first `length` bytes when
/// `length > 0`). As in varnishd, an error quotes the argument's first
/// part (`"-_-_"` for `"-_-_" + req.http.foo`), `(null)` when that part
/// is NULL.
fn decode_arg(enc: Enc, length: i64, a: &Args<'_>, i: usize) -> Result<Vec<u8>, String> {
    let first = a.first_strand(i)?.unwrap_or(b"(null)");
    decode_quoting(enc, length, a.str_or_empty(i)?, first)
}

/// Decodes `whole`; an error quotes `quoted` (the input as given, not the
/// part `length` kept).
fn decode_quoting(enc: Enc, length: i64, whole: &[u8], quoted: &[u8]) -> Result<Vec<u8>, String> {
    let input = if length > 0 && (length as usize) < whole.len() {
        &whole[..length as usize]
    } else {
        whole
    };
    let decode_error = |_: &[u8]| decode_error(quoted);
    match enc {
        Enc::Identity => Ok(input.to_vec()),
        Enc::Hex => {
            let mut digits = Vec::with_capacity(input.len() + 1);
            if input.len() % 2 == 1 {
                digits.push(0);
            }
            for &b in input {
                digits.push(hex_val(b).ok_or_else(|| decode_error(input))?);
            }
            Ok(digits.chunks(2).map(|p| p[0] << 4 | p[1]).collect())
        }
        Enc::Url => {
            let mut out = Vec::with_capacity(input.len());
            let mut i = 0;
            while i < input.len() {
                if input[i] == b'%' {
                    let hi = input.get(i + 1).copied().and_then(hex_val);
                    let lo = input.get(i + 2).copied().and_then(hex_val);
                    match (hi, lo) {
                        (Some(h), Some(l)) => out.push(h << 4 | l),
                        _ => return Err(decode_error(input)),
                    }
                    i += 3;
                } else {
                    out.push(input[i]);
                    i += 1;
                }
            }
            Ok(out)
        }
        _ => {
            let (alpha, pad) = enc.b64().expect("base64 variant");
            // As varnishd's base64_decode: a last group of one character
            // (six bits, not a byte) is an error, not nothing.
            if input.iter().filter(|c| Some(**c) != pad).count() % 4 == 1 {
                return Err(decode_error(input));
            }
            base64::decode(input, alpha, pad).map_err(|_| decode_error(input))
        }
    }
}

/// An encoded result as a VCL string: like Varnish's C strings it ends at
/// the first NUL byte (only IDENTITY can produce one).
fn c_string(mut v: Vec<u8>) -> Value {
    truncate_at_nul(&mut v);
    string(v)
}

/// Cuts `v` at its first NUL byte, where a C string would end.
fn truncate_at_nul(v: &mut Vec<u8>) {
    if let Some(n) = v.iter().position(|&b| b == 0) {
        v.truncate(n);
    }
}

fn case_upper(enc: Enc, case: Option<&str>) -> Result<bool, String> {
    match (enc, case.unwrap_or("DEFAULT")) {
        // Varnish's hex and URL encoders write lowercase unless told UPPER.
        (_, "DEFAULT") => Ok(false),
        (Enc::Hex | Enc::Url, c) => Ok(c == "UPPER"),
        (e, c) => Err(format!(
            "vmod blob error: case {c} is illegal with encoding {}",
            e.name()
        )),
    }
}

/// What a BLOB's descriptor takes in varnishd's workspace (type, length,
/// pointer: `vtc.typesize("uzp")`).
const BLOB_STRUCT: u64 = 24;

/// Bytes left in the task's workspace (all the room there is for a task
/// without one).
fn ws_free(ctx: &mut dyn Context) -> u64 {
    ctx.workspace(WsKind::Task).map_or(u64::MAX, |w| w.free())
}

/// Takes `n` bytes of the task's workspace; `false` when they do not fit.
fn ws_take(ctx: &mut dyn Context, n: u64) -> bool {
    ctx.workspace(WsKind::Task).is_none_or(|w| w.alloc(n))
}

/// A decoded BLOB put in the workspace as varnishd does: the bytes, then
/// its descriptor (an empty BLOB is a constant).
fn ws_blob(ctx: &mut dyn Context, data: Vec<u8>, what: &str) -> R {
    if data.is_empty() {
        return Ok(Value::Blob(Bytes::new()));
    }
    if data.len() as u64 > ws_free(ctx) {
        return Err("vmod blob error: cannot decode, out of space".into());
    }
    if !(ws_take(ctx, data.len() as u64) && ws_take(ctx, BLOB_STRUCT)) {
        return Err(format!("Workspace overflow ({what})"));
    }
    Ok(Value::Blob(data.into()))
}

/// An encoded string put in the workspace (with its NUL; as a C string
/// it ends at the first NUL, which only IDENTITY can produce).
fn ws_encoded(ctx: &mut dyn Context, mut out: Vec<u8>) -> R {
    truncate_at_nul(&mut out);
    if !ws_take(ctx, out.len() as u64 + 1) {
        return Err("vmod blob error: cannot encode, out of space".into());
    }
    Ok(string(out))
}

fn decode(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let enc = Enc::parse(a.enum_(0)?)?;
    let data = decode_arg(enc, a.int(1)?.unwrap_or(0), a, 2)
        .map_err(|e| format!("vmod blob error: cannot decode, {e}"))?;
    ws_blob(ctx, data, "blob.decode")
}

fn encode(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let enc = Enc::parse(a.enum_(0)?)?;
    let upper = case_upper(enc, a.enum_(1)?)?;
    let data = a.blob(2)?.cloned().unwrap_or_default();
    ws_encoded(ctx, encode_bytes(enc, upper, &data))
}

fn transcode(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let dec = Enc::parse(a.enum_(0)?)?;
    let enc = Enc::parse(a.enum_(1)?)?;
    let upper = case_upper(enc, a.enum_(2)?)?;
    let data = decode_arg(dec, a.int(3)?.unwrap_or(0), a, 4)
        .map_err(|e| format!("vmod blob error: cannot decode, {e}"))?;
    ws_encoded(ctx, encode_bytes(enc, upper, &data))
}

fn same(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Bool(match (a.blob(0)?, a.blob(1)?) {
        (None, None) => true,
        (Some(x), Some(y)) => x.as_ptr() == y.as_ptr() && x.len() == y.len(),
        _ => false,
    }))
}

fn equal(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Bool(match (a.blob(0)?, a.blob(1)?) {
        (None, None) => true,
        (Some(x), Some(y)) => x == y,
        _ => false,
    }))
}

fn length(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Int(a.blob(0)?.map_or(0, |b| b.len() as i64)))
}

fn sub(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let b = a.blob(0)?.cloned().unwrap_or_default();
    let len = a.bytes_val(1)?.unwrap_or(0);
    let off = a.bytes_val(2)?.unwrap_or(0);
    if b.is_empty() {
        return Err("vmod blob error: blob is empty in blob.sub()".into());
    }
    if len < 0 || off < 0 || (len as u64).saturating_add(off as u64) > b.len() as u64 {
        return Err(format!(
            "vmod blob error: size {len} from offset {off} requires more bytes than blob length {} in blob.sub()",
            b.len()
        ));
    }
    // The sub-BLOB points into the BLOB: only its descriptor is new.
    if !ws_take(ctx, BLOB_STRUCT) {
        return Err("Workspace overflow (blob.sub)".into());
    }
    Ok(Value::Blob(b.slice(off as usize..(off + len) as usize)))
}

/// `blob.blob()`: a constant BLOB decoded once in `vcl_init`.
struct BlobObj {
    data: Bytes,
}

fn new_blob(_: &Env, _: &mut dyn Context, name: &str, a: &Args<'_>) -> Result<Obj, String> {
    let enc = Enc::parse(a.enum_(0)?)?;
    let data = decode_arg(enc, 0, a, 1)
        .map_err(|e| format!("vmod blob error: cannot create blob {name}, {e}"))?;
    Ok(std::sync::Arc::new(BlobObj { data: data.into() }))
}

fn obj_get(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Blob(this::<BlobObj>(o).data.clone()))
}

fn obj_encode(_: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    let enc = Enc::parse(a.enum_(0)?)?;
    let upper = case_upper(enc, a.enum_(1)?)?;
    Ok(c_string(encode_bytes(enc, upper, &this::<BlobObj>(o).data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_bytes(enc: Enc, length: i64, input: &[u8]) -> Result<Vec<u8>, String> {
        decode_quoting(enc, length, input, input)
    }

    fn enc(e: Enc, d: &str) -> String {
        String::from_utf8(encode_bytes(e, false, d.as_bytes())).unwrap()
    }

    #[test]
    fn base64_round_trips() {
        assert_eq!(enc(Enc::Base64, "Man is"), "TWFuIGlz");
        assert_eq!(enc(Enc::Base64, "Ma"), "TWE=");
        assert_eq!(enc(Enc::Base64UrlNoPad, "Ma"), "TWE");
        assert_eq!(
            encode_bytes(Enc::Base64Cf, false, &[0xfb, 0xf6]),
            b"-~Y_".to_vec()
        );
        for e in [
            Enc::Base64,
            Enc::Base64Url,
            Enc::Base64UrlNoPad,
            Enc::Base64Cf,
        ] {
            for s in ["", "f", "fo", "foo", "foob", "\u{ff}\u{fe}x"] {
                let d = decode_bytes(e, 0, &encode_bytes(e, false, s.as_bytes())).unwrap();
                assert_eq!(d, s.as_bytes(), "{e:?} {s}");
            }
        }
        assert_eq!(decode_bytes(Enc::Base64, 0, b"+/Y=").unwrap(), [0xfb, 0xf6]);
        assert!(decode_bytes(Enc::Base64, 0, b"a").is_err());
        assert!(decode_bytes(Enc::Base64, 1, b"aGVsbG8=").is_err());
        assert!(
            decode_bytes(Enc::Base64, 0, b"-_-_")
                .unwrap_err()
                .ends_with("illegal encoding beginning with \"-_-_\"")
        );
    }

    #[test]
    fn hex_and_url() {
        assert_eq!(decode_bytes(Enc::Hex, 0, b"666F6f").unwrap(), b"foo");
        assert_eq!(decode_bytes(Enc::Hex, 0, b"102").unwrap(), [0x01, 0x02]);
        assert!(decode_bytes(Enc::Hex, 0, b"gg").is_err());
        assert_eq!(enc(Enc::Hex, "\x00\x01"), "0001");
        assert_eq!(
            String::from_utf8(encode_bytes(Enc::Url, true, b"a b/~")).unwrap(),
            "a%20b%2F~"
        );
        assert_eq!(decode_bytes(Enc::Url, 0, b"a%20b%2f").unwrap(), b"a b/");
        assert!(decode_bytes(Enc::Url, 0, b"%zz").is_err());
        assert_eq!(decode_bytes(Enc::Identity, 3, b"abcdef").unwrap(), b"abc");
    }

    #[test]
    fn case_rules() {
        assert!(!case_upper(Enc::Hex, None).unwrap());
        assert!(!case_upper(Enc::Url, None).unwrap());
        assert!(case_upper(Enc::Hex, Some("UPPER")).unwrap());
        assert_eq!(
            case_upper(Enc::Identity, Some("LOWER")).unwrap_err(),
            "vmod blob error: case LOWER is illegal with encoding IDENTITY"
        );
    }
}
