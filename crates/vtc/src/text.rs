//! Byte/text conversions. Test files and wire data are arbitrary bytes; the
//! runner keeps them in `String`s where each char U+0000..U+00FF stands for
//! one byte (Latin-1), so that escapes like `\x80` and binary responses
//! survive unchanged and regexes match byte-wise.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

/// Bytes to a Latin-1 string (one char per byte).
pub fn latin1(b: &[u8]) -> String {
    b.iter().map(|&c| c as char).collect()
}

/// Latin-1 string back to bytes. Chars above U+00FF (only possible from
/// outside sources such as environment values) are UTF-8 encoded.
pub fn bytes(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        let u = c as u32;
        if u < 256 {
            out.push(u as u8);
        } else {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    out
}

/// Latin-1 string to an OS string holding the original bytes.
pub fn os_str(s: &str) -> OsString {
    OsString::from_vec(bytes(s))
}

/// Human-readable form of a Latin-1 string (the original bytes, decoded as
/// UTF-8 where valid).
pub fn display(s: &str) -> String {
    String::from_utf8_lossy(&bytes(s)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(bytes(&latin1(&b)), b);
        assert_eq!(display(&latin1("é".as_bytes())), "é");
    }
}

/// Compile a PCRE-style pattern (as used in vtc files) with
/// `fancy_regex`, first turning `\Q...\E` literal sections into escaped
/// text, which `fancy_regex` does not know.
pub fn compile_regex(pat: &str) -> Result<fancy_regex::Regex, String> {
    let mut out = String::with_capacity(pat.len());
    let mut rest = pat;
    while let Some(i) = rest.find("\\Q") {
        out.push_str(&rest[..i]);
        let lit = &rest[i + 2..];
        let (lit, next) = match lit.find("\\E") {
            Some(j) => (&lit[..j], &lit[j + 2..]),
            None => (lit, ""),
        };
        out.push_str(&fancy_regex::escape(lit));
        rest = next;
    }
    out.push_str(rest);
    fancy_regex::Regex::new(&out).map_err(|e| e.to_string())
}

/// Match like PCRE without multiline: `$` also matches just before a
/// final newline of the subject.
pub fn re_match(re: &fancy_regex::Regex, s: &str) -> bool {
    if re.is_match(s).unwrap_or(false) {
        return true;
    }
    match s.strip_suffix('\n') {
        Some(t) => re.is_match(t).unwrap_or(false),
        None => false,
    }
}

#[cfg(test)]
mod regex_tests {
    use super::*;

    #[test]
    fn quoted_sections() {
        let r = compile_regex(r"^\Qip: 1.2\E$").unwrap();
        assert!(r.is_match("ip: 1.2").unwrap());
        assert!(!r.is_match("ip: 1x2").unwrap());
        let r = compile_regex("^ *0$").unwrap();
        assert!(re_match(&r, "0\n"));
        assert!(!re_match(&r, "0\n1\n"));
    }
}
