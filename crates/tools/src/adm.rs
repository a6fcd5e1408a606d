//! `lacquer adm`: varnishadm's management CLI client. It connects to the
//! daemon's `-T` address (given, or found in the working directory),
//! answers the `-S` challenge, sends one command (or each line of standard
//! input) and prints the replies.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest, Sha256};

/// The file in the working directory where lacquerd records its `-T`
/// address and `-S` secret file.
pub const ADMIN_FILE: &str = "_.admin";

/// Reads one reply: status and body.
pub fn read_reply(r: &mut impl Read) -> Result<(u16, String), String> {
    let mut head = [0u8; 13];
    r.read_exact(&mut head)
        .map_err(|e| format!("reading the reply: {e}"))?;
    let head = String::from_utf8_lossy(&head);
    let mut it = head.split_whitespace();
    let status: u16 = it
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad reply header {head:?}"))?;
    let len: usize = it
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad reply header {head:?}"))?;
    let mut body = vec![0u8; len + 1];
    r.read_exact(&mut body)
        .map_err(|e| format!("reading the reply body: {e}"))?;
    body.pop();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Quotes one argument for the CLI line.
pub fn quote(arg: &str) -> String {
    if !arg.is_empty()
        && !arg
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b == b'"' || b == b'\\')
    {
        return arg.to_string();
    }
    let mut s = String::from("\"");
    for c in arg.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\t' => s.push_str("\\t"),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

fn auth_response(challenge: &str, secret: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(challenge.as_bytes());
    h.update(b"\n");
    h.update(secret);
    h.update(challenge.as_bytes());
    h.update(b"\n");
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A connected, authenticated CLI session.
pub struct Session {
    stream: TcpStream,
}

impl Session {
    /// Connects to `addr` (`host:port` or `host port`), authenticating with
    /// `secret` when the daemon asks.
    pub fn connect(addr: &str, secret: Option<&[u8]>) -> Result<Session, String> {
        let a = addr.trim().replace(' ', ":");
        let mut stream = TcpStream::connect(&a).map_err(|e| format!("connect {a}: {e}"))?;
        let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
        let (st, body) = read_reply(&mut stream)?;
        if st == 107 {
            let secret = secret.ok_or("the daemon requires authentication: give -S secretfile")?;
            let challenge = body.lines().next().unwrap_or_default();
            let line = format!("auth {}\n", auth_response(challenge, secret));
            stream
                .write_all(line.as_bytes())
                .map_err(|e| e.to_string())?;
            let (st, body) = read_reply(&mut stream)?;
            if st != 200 {
                return Err(format!("authentication failed: {st} {body}"));
            }
        } else if st != 200 {
            return Err(format!("unexpected banner status {st}: {body}"));
        }
        Ok(Session { stream })
    }

    /// Sends one command line and returns the reply.
    pub fn send(&mut self, line: &str) -> Result<(u16, String), String> {
        self.stream
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| e.to_string())?;
        read_reply(&mut self.stream)
    }
}

fn usage() -> i32 {
    eprintln!("usage: lacquer adm [-n workdir] [-T host:port] [-S secretfile] [command [args...]]");
    2
}

/// Runs `lacquer adm`; returns the process exit code.
pub fn main(args: &[String]) -> i32 {
    let mut t = None;
    let mut s: Option<PathBuf> = None;
    let mut n = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-T" | "-S" | "-n" if i + 1 < args.len() => {
                let v = args[i + 1].clone();
                match args[i].as_str() {
                    "-T" => t = Some(v),
                    "-S" => s = Some(v.into()),
                    _ => n = Some(v),
                }
                i += 2;
            }
            "-h" | "--help" => return usage(),
            a if a.starts_with('-') && a.len() > 1 => return usage(),
            _ => break,
        }
    }
    let cmd = &args[i..];
    if t.is_none() {
        let f = crate::workdir(n.as_deref()).join(ADMIN_FILE);
        match std::fs::read_to_string(&f) {
            Ok(text) => {
                for line in text.lines() {
                    if let Some(v) = line.strip_prefix("T ") {
                        t = Some(v.to_string());
                    } else if let Some(v) = line.strip_prefix("S ")
                        && s.is_none()
                    {
                        s = Some(v.into());
                    }
                }
            }
            Err(e) => {
                eprintln!(
                    "lacquer adm: no -T given and {} unreadable ({e}); is lacquerd running with -T?",
                    f.display()
                );
                return 2;
            }
        }
    }
    let Some(t) = t else {
        eprintln!("lacquer adm: the daemon has no management address (-T)");
        return 2;
    };
    let secret = match &s {
        Some(p) => match std::fs::read(p) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("lacquer adm: cannot read secret file {}: {e}", p.display());
                return 2;
            }
        },
        None => None,
    };
    let mut sess = match Session::connect(&t, secret.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lacquer adm: {e}");
            return 2;
        }
    };
    if !cmd.is_empty() {
        let line: Vec<String> = cmd.iter().map(|a| quote(a)).collect();
        return match sess.send(&line.join(" ")) {
            Ok((st, body)) => {
                println!("{body}");
                if st == 200 { 0 } else { 1 }
            }
            Err(e) => {
                eprintln!("lacquer adm: {e}");
                1
            }
        };
    }
    for line in BufReader::new(std::io::stdin()).lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        match sess.send(&line) {
            Ok((st, body)) => {
                println!("{st}\n{body}");
                if st == 500 {
                    break;
                }
            }
            Err(e) => {
                eprintln!("lacquer adm: {e}");
                return 1;
            }
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("vcl.list"), "vcl.list");
        assert_eq!(quote("a b"), "\"a b\"");
        assert_eq!(quote("q\"x"), "\"q\\\"x\"");
        assert_eq!(quote(""), "\"\"");
    }

    #[test]
    fn replies_parse() {
        let mut r: &[u8] = b"200 4       \nPONG\n";
        assert_eq!(read_reply(&mut r).unwrap(), (200, "PONG".to_string()));
        let mut bad: &[u8] = b"xx";
        assert!(read_reply(&mut bad).is_err());
    }
}
