//! The wire format of varnishd's management CLI, shared by the daemon that
//! answers (`lacquer-server`), `lacquer adm` and the vtc runner that ask,
//! so the three frame and read replies and answer the `-S` challenge the
//! same way.
//!
//! A reply is a status line, `"%-3d %-8u\n"` (status, body length: 13
//! bytes), then the body and a newline.

use std::io::Read;

use sha2::{Digest, Sha256};

/// The status line of a reply whose body is `len` bytes.
pub fn status_line(status: u16, len: usize) -> String {
    format!("{status:<3} {len:<8}\n")
}

/// Why a reply could not be read.
#[derive(Debug)]
pub enum ReplyError {
    /// The connection closed before a whole status line.
    Closed,
    /// The status line is not `STATUS LENGTH` (the line as read).
    BadStatusLine(String),
    /// Reading failed.
    Io(std::io::Error),
}

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplyError::Closed => f.write_str("CLI connection closed"),
            ReplyError::BadStatusLine(l) => write!(f, "bad CLI status line {l:?}"),
            ReplyError::Io(e) => write!(f, "reading the CLI reply: {e}"),
        }
    }
}

impl std::error::Error for ReplyError {}

/// The longest status line read before giving up on it.
const MAX_STATUS_LINE: usize = 64;

/// Reads one reply: its status and body (the final newline dropped).
pub fn read_reply(r: &mut impl Read) -> Result<(u16, Vec<u8>), ReplyError> {
    let mut line = Vec::with_capacity(13);
    let mut b = [0u8; 1];
    loop {
        match r.read(&mut b) {
            Ok(0) => return Err(ReplyError::Closed),
            Ok(_) if b[0] == b'\n' => break,
            Ok(_) => {
                line.push(b[0]);
                if line.len() > MAX_STATUS_LINE {
                    return Err(ReplyError::BadStatusLine(
                        String::from_utf8_lossy(&line).into_owned(),
                    ));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReplyError::Io(e)),
        }
    }
    let text = String::from_utf8_lossy(&line).into_owned();
    let mut it = text.split_whitespace();
    let (Some(Ok(status)), Some(Ok(len)), None) = (
        it.next().map(str::parse::<u16>),
        it.next().map(str::parse::<usize>),
        it.next(),
    ) else {
        return Err(ReplyError::BadStatusLine(text));
    };
    let mut body = vec![0u8; len + 1];
    r.read_exact(&mut body).map_err(ReplyError::Io)?;
    body.pop();
    Ok((status, body))
}

/// The answer to a `-S` challenge: SHA-256 over challenge, newline,
/// secret, challenge, newline, in lower-case hex.
pub fn auth_response(challenge: &str, secret: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(challenge.as_bytes());
    h.update(b"\n");
    h.update(secret);
    h.update(challenge.as_bytes());
    h.update(b"\n");
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_read_back_as_written() {
        let mut wire = status_line(200, 5).into_bytes();
        assert_eq!(wire.len(), 13);
        wire.extend_from_slice(b"hello\n");
        wire.extend_from_slice(status_line(107, 0).as_bytes());
        wire.push(b'\n');
        let mut r = &wire[..];
        assert_eq!(read_reply(&mut r).unwrap(), (200, b"hello".to_vec()));
        assert_eq!(read_reply(&mut r).unwrap(), (107, Vec::new()));
        assert!(matches!(read_reply(&mut r), Err(ReplyError::Closed)));
    }

    #[test]
    fn malformed_replies_are_errors() {
        let bad = |w: &[u8]| read_reply(&mut &w[..]).unwrap_err().to_string();
        assert_eq!(bad(b"xyz 5\nhello\n"), "bad CLI status line \"xyz 5\"");
        assert_eq!(bad(b"200\n"), "bad CLI status line \"200\"");
        assert_eq!(bad(b"200 5 6\n"), "bad CLI status line \"200 5 6\"");
        assert!(bad(&[b'1'; 100]).starts_with("bad CLI status line"));
        assert!(bad(b"200 9\nshort\n").starts_with("reading the CLI reply:"));
        assert_eq!(bad(b"200 "), "CLI connection closed");
    }

    #[test]
    fn auth_response_is_varnishds() {
        // Reference value computed with sha256sum over the same byte layout.
        assert_eq!(
            auth_response("abcdefghijklmnopqrstuvwxyzabcdef", b"secret\n"),
            "4612dbda0cbd8dcf32665ded74ada5fb344bbaea6f2e41ad9a99688eab0784f4"
        );
        assert_ne!(
            auth_response("abd", b"secret\n"),
            auth_response("abc", b"secret\n")
        );
    }
}
