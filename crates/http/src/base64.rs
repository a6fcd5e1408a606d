//! Base64 in its variants (RFC 4648 standard and URL-safe alphabets, with
//! or without padding, or any other 64-byte alphabet), one encoder and one
//! decoder for every user: vmod `blob`, the VCL executor's BLOB strings,
//! HTTP/2's `HTTP2-Settings` upgrade header and `lacquer ncsa`'s `%u`
//! (the Basic-auth user).
//!
//! Malformed input gets one treatment everywhere: a byte outside the
//! alphabet, or data after padding began, is an error; bits left over
//! after the last whole byte are dropped, and the amount of padding is not
//! checked (as vmod blob's decoder in varnishd).

/// The standard alphabet (RFC 4648 section 4).
pub const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
/// The URL- and filename-safe alphabet (RFC 4648 section 5).
pub const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Input that is not base64 in the alphabet asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed;

/// Appends `data` encoded with `alphabet`, padded to a multiple of four
/// with `pad` when there is one.
pub fn encode_into(out: &mut Vec<u8>, data: &[u8], alphabet: &[u8; 64], pad: Option<u8>) {
    out.reserve(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(chunk.get(1).copied().unwrap_or(0)) << 8)
            | u32::from(chunk.get(2).copied().unwrap_or(0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(alphabet[(n >> (18 - 6 * i) & 63) as usize]);
            } else if let Some(p) = pad {
                out.push(p);
            }
        }
    }
}

/// Decodes `input` written with `alphabet`; `pad` is the padding byte the
/// input may end with (none for unpadded variants).
pub fn decode(input: &[u8], alphabet: &[u8; 64], pad: Option<u8>) -> Result<Vec<u8>, Malformed> {
    let mut value = [None; 256];
    for (i, &c) in alphabet.iter().enumerate() {
        value[usize::from(c)] = Some(i as u32);
    }
    let mut out = Vec::with_capacity(input.len() / 4 * 3 + 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    let mut padded = false;
    for &c in input {
        if Some(c) == pad {
            padded = true;
            continue;
        }
        match value[usize::from(c)] {
            Some(v) if !padded => {
                acc = (acc << 6 | v) & 0xffff;
                bits += 6;
                if bits >= 8 {
                    bits -= 8;
                    out.push((acc >> bits) as u8);
                }
            }
            _ => return Err(Malformed),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_in_both_alphabets() {
        let data: Vec<u8> = (0..=255).collect();
        for (alpha, pad) in [
            (STANDARD, Some(b'=')),
            (URL_SAFE, None),
            (URL_SAFE, Some(b'=')),
        ] {
            for n in 0..8 {
                let mut enc = Vec::new();
                encode_into(&mut enc, &data[..n * 37 % 256], alpha, pad);
                assert_eq!(
                    decode(&enc, alpha, pad).as_deref(),
                    Ok(&data[..n * 37 % 256])
                );
            }
        }
        let mut enc = Vec::new();
        encode_into(&mut enc, b"user:pass", STANDARD, Some(b'='));
        assert_eq!(enc, b"dXNlcjpwYXNz");
        enc.clear();
        encode_into(&mut enc, b"hello", STANDARD, Some(b'='));
        assert_eq!(enc, b"aGVsbG8=");
    }

    #[test]
    fn malformed_input_is_one_error() {
        assert_eq!(
            decode(b"dXNlcg==", STANDARD, Some(b'=')),
            Ok(b"user".to_vec())
        );
        // Padding is not counted; leftover bits are dropped.
        assert_eq!(
            decode(b"dXNlcg", STANDARD, Some(b'=')),
            Ok(b"user".to_vec())
        );
        assert_eq!(
            decode(b"dXNlcg=", STANDARD, Some(b'=')),
            Ok(b"user".to_vec())
        );
        assert_eq!(decode(b"!!!!", STANDARD, Some(b'=')), Err(Malformed));
        assert_eq!(decode(b"dXNl=cg", STANDARD, Some(b'=')), Err(Malformed));
        assert_eq!(decode(b"AP__", STANDARD, Some(b'=')), Err(Malformed));
        assert_eq!(decode(b"AP__", URL_SAFE, None), Ok(vec![0, 255, 255]));
        assert_eq!(decode(b"AA==", URL_SAFE, None), Err(Malformed));
    }
}
