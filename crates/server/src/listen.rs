//! Listen specifications (`-a`): which sockets accept client connections.
//!
//! Syntax as varnishd: `-a [name=][address][:port][,PROTO][,user=U][,group=G][,mode=M]`
//! where `address` is a host name, an IPv4 address, a bracketed IPv6 address,
//! or an absolute path for a Unix domain socket, and `PROTO` is `HTTP` (the
//! default) or `PROXY`. Host names are resolved once, at startup; a name with
//! several addresses gives one socket per address.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// The protocol spoken on a listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Http,
    /// PROXY protocol v1/v2 header first, then HTTP.
    Proxy,
}

/// Where a listener binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(SocketAddr),
    Unix {
        path: PathBuf,
        /// Permission bits for the socket file (`mode=`), octal.
        mode: Option<u32>,
        /// Owner and group of the socket file (`user=`, `group=`).
        uid: Option<u32>,
        gid: Option<u32>,
    },
}

/// One parsed `-a` argument, resolved to concrete endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenSpec {
    /// The listener's name (`a0`, `a1`, … unless given).
    pub name: String,
    /// The address as the operator wrote it, for `debug.listen_address`-style output.
    pub written: String,
    pub endpoints: Vec<Endpoint>,
    pub proto: Proto,
}

/// Why an `-a` argument was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListenError {
    #[error("-a '{arg}': {why}")]
    Bad { arg: String, why: String },
}

fn bad(arg: &str, why: impl Into<String>) -> ListenError {
    ListenError::Bad {
        arg: arg.to_string(),
        why: why.into(),
    }
}

/// Parses an `-a` argument; `index` numbers unnamed listeners (`a0`, `a1`, …).
pub fn parse_listen(arg: &str, index: usize) -> Result<ListenSpec, ListenError> {
    let mut parts = arg.split(',');
    let first = parts.next().unwrap_or_default();
    let (name, addr) = match first.split_once('=') {
        Some((n, a)) => {
            if n.is_empty()
                || !n
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(bad(arg, format!("invalid listener name \"{n}\"")));
            }
            (n.to_string(), a)
        }
        None => (format!("a{index}"), first),
    };
    // As varnishd: a sub-arg without '=' names the protocol (once); the
    // others only apply to Unix domain sockets.
    let is_path = addr.starts_with('/');
    if !is_path && addr.contains('/') {
        return Err(bad(
            arg,
            format!("Unix domain socket addresses must be absolute paths in -a ({addr})"),
        ));
    }
    let mut proto = None;
    let (mut mode, mut uid, mut gid) = (None, None, None);
    for opt in parts {
        let Some((key, val)) = opt.split_once('=') else {
            if proto.is_some() {
                return Err(bad(
                    arg,
                    format!("Too many protocol sub-args in -a ({opt})"),
                ));
            }
            proto = Some(if opt.eq_ignore_ascii_case("HTTP") {
                Proto::Http
            } else if opt.eq_ignore_ascii_case("PROXY") {
                Proto::Proxy
            } else {
                return Err(bad(arg, format!("Unknown protocol '{opt}'")));
            });
            continue;
        };
        if !is_path {
            return Err(bad(
                arg,
                format!("Invalid sub-arg {opt} for IP addresses in -a"),
            ));
        }
        match key {
            "user" => {
                if uid.is_some() {
                    return Err(bad(arg, format!("Too many user sub-args in -a ({opt})")));
                }
                uid = Some(
                    id_of("/etc/passwd", val)
                        .ok_or_else(|| bad(arg, format!("Unknown user {val} in -a")))?,
                );
            }
            "group" => {
                if gid.is_some() {
                    return Err(bad(arg, format!("Too many group sub-args in -a ({opt})")));
                }
                gid = Some(
                    id_of("/etc/group", val)
                        .ok_or_else(|| bad(arg, format!("Unknown group {val} in -a")))?,
                );
            }
            "mode" => {
                if mode.is_some() {
                    return Err(bad(arg, format!("Too many mode sub-args in -a ({opt})")));
                }
                mode = Some(parse_mode(val).map_err(|why| bad(arg, why))?);
            }
            _ => return Err(bad(arg, format!("Invalid sub-arg {opt} in -a"))),
        }
    }
    let proto = proto.unwrap_or(Proto::Http);
    let endpoints = if is_path {
        // sockaddr_un holds 107 bytes and a NUL.
        if addr.len() > 107 {
            return Err(bad(
                arg,
                format!("Got no socket(s) for {addr}: path too long for a Unix domain socket"),
            ));
        }
        vec![Endpoint::Unix {
            path: PathBuf::from(addr),
            mode,
            uid,
            gid,
        }]
    } else {
        resolve(addr).map_err(|why| bad(arg, why))?
    };
    Ok(ListenSpec {
        name,
        written: addr.to_string(),
        endpoints,
        proto,
    })
}

/// A `mode=` sub-arg: octal, 1 to 0777, with varnishd's messages.
fn parse_mode(val: &str) -> Result<u32, String> {
    if val.is_empty() {
        return Err("Empty mode sub-arg in -a".to_string());
    }
    let digits = val.strip_prefix(['-', '+']).unwrap_or(val);
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(format!("Invalid mode sub-arg {val} in -a"));
    }
    let m = i64::from_str_radix(val, 8)
        .map_err(|e| format!("Cannot parse mode sub-arg {val} in -a: {e}"))?;
    if !(1..=0o777).contains(&m) {
        return Err(format!("Mode sub-arg {val} out of range in -a"));
    }
    Ok(m as u32)
}

/// The numeric id of a user or group, from `/etc/passwd` or `/etc/group`
/// (`name:x:id:...`), as getpwnam/getgrnam would give it.
fn id_of(file: &str, name: &str) -> Option<u32> {
    if name.is_empty() {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

/// Refuses two `-a` arguments that would bind the same address (varnishd's
/// "have same address").
pub fn check_distinct(specs: &[ListenSpec]) -> Result<(), String> {
    for (i, a) in specs.iter().enumerate() {
        for b in &specs[i + 1..] {
            let same = a.endpoints.iter().any(|x| {
                b.endpoints.iter().any(|y| match (x, y) {
                    (Endpoint::Tcp(p), Endpoint::Tcp(q)) => p == q,
                    (Endpoint::Unix { path: p, .. }, Endpoint::Unix { path: q, .. }) => p == q,
                    _ => false,
                })
            });
            if same {
                return Err(format!(
                    "-a arguments {} and {} have same address",
                    a.written, b.written
                ));
            }
        }
    }
    Ok(())
}

/// Resolves `host[:port]`, `[v6]:port`, `:port` or `host` (port 80).
pub fn resolve(addr: &str) -> Result<Vec<Endpoint>, String> {
    let (host, port) = split_host_port(addr)?;
    let port: u16 = match port {
        None => 80,
        Some(p) => p
            .parse()
            .ok()
            .or_else(|| service_port(p))
            .ok_or_else(|| format!("invalid port \"{p}\""))?,
    };
    let hosts: Vec<SocketAddr> = if host.is_empty() {
        vec![
            SocketAddr::from(([0, 0, 0, 0], port)),
            SocketAddr::from(([0u16; 8], port)),
        ]
    } else {
        (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve \"{host}\": {e}"))?
            .collect()
    };
    if hosts.is_empty() {
        return Err(format!("\"{host}\" has no addresses"));
    }
    let mut out: Vec<Endpoint> = Vec::new();
    for h in hosts {
        let e = Endpoint::Tcp(h);
        if !out.contains(&e) {
            out.push(e);
        }
    }
    Ok(out)
}

/// Splits `host:port`, honouring `[v6]:port` and bare IPv6 addresses.
pub fn split_host_port(addr: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(rest) = addr.strip_prefix('[') {
        let (host, tail) = rest
            .split_once(']')
            .ok_or_else(|| format!("unterminated '[' in \"{addr}\""))?;
        return match tail {
            "" => Ok((host, None)),
            t => t
                .strip_prefix(':')
                .map(|p| (host, Some(p)))
                .ok_or_else(|| format!("junk after ']' in \"{addr}\"")),
        };
    }
    match addr.matches(':').count() {
        0 => Ok((addr, None)),
        1 => {
            let (h, p) = addr.split_once(':').expect("one colon present");
            Ok((h, Some(p)))
        }
        // A bare IPv6 address without a port.
        _ => Ok((addr, None)),
    }
}

fn service_port(name: &str) -> Option<u16> {
    match name {
        "http" => Some(80),
        "https" => Some(443),
        "http-alt" => Some(8080),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_named() {
        let s = parse_listen("127.0.0.1:6081", 0).unwrap();
        assert_eq!(s.name, "a0");
        assert_eq!(s.proto, Proto::Http);
        assert_eq!(
            s.endpoints,
            vec![Endpoint::Tcp("127.0.0.1:6081".parse().unwrap())]
        );
        let s = parse_listen("foo=[::1]:80,PROXY", 3).unwrap();
        assert_eq!(s.name, "foo");
        assert_eq!(s.proto, Proto::Proxy);
        assert_eq!(
            s.endpoints,
            vec![Endpoint::Tcp("[::1]:80".parse().unwrap())]
        );
    }

    #[test]
    fn wildcard_and_default_port() {
        let s = parse_listen(":8080", 1).unwrap();
        assert_eq!(s.endpoints.len(), 2);
        let s = parse_listen("127.0.0.1", 1).unwrap();
        assert_eq!(
            s.endpoints,
            vec![Endpoint::Tcp("127.0.0.1:80".parse().unwrap())]
        );
    }

    #[test]
    fn unix_sockets() {
        let s = parse_listen("/tmp/l.sock,mode=660", 0).unwrap();
        assert_eq!(
            s.endpoints,
            vec![Endpoint::Unix {
                path: "/tmp/l.sock".into(),
                mode: Some(0o660),
                uid: None,
                gid: None,
            }]
        );
        let err = |a: &str| parse_listen(a, 0).unwrap_err().to_string();
        assert!(err("/tmp/l.sock,mode=999").contains("Invalid mode sub-arg 999"));
        assert!(err("/tmp/l.sock,mode=").contains("Empty mode sub-arg"));
        assert!(err("/tmp/l.sock,mode=1666").contains("Mode sub-arg 1666 out of range"));
        assert!(err("/tmp/l.sock,mode=0").contains("Mode sub-arg 0 out of range"));
        assert!(err("/tmp/l.sock,mode=-1").contains("Mode sub-arg -1 out of range"));
        assert!(
            err(&format!("/tmp/l.sock,mode={}", "7".repeat(30)))
                .contains("Cannot parse mode sub-arg 7")
        );
        assert!(err("/tmp/l.sock,mode=6,mode=6").contains("Too many mode sub-args"));
        assert!(err("127.0.0.1:80,mode=600").contains("Invalid sub-arg mode=600 for IP addresses"));
        assert!(err("/tmp/l.sock,user=").contains("Unknown user "));
        assert!(err("/tmp/l.sock,group=").contains("Unknown group "));
        assert!(err("/tmp/l.sock,=foo").contains("Invalid sub-arg =foo"));
        assert!(err("foo/bar.sock").contains("must be absolute paths"));
        assert!(err(&format!("/{}", "x".repeat(120))).contains("Got no socket"));
        let root = parse_listen("/tmp/l.sock,user=root,group=root", 0).unwrap();
        assert!(matches!(
            root.endpoints[0],
            Endpoint::Unix {
                uid: Some(0),
                gid: Some(0),
                ..
            }
        ));
        let twice = [
            parse_listen("/tmp/l.sock", 0).unwrap(),
            parse_listen("/tmp/l.sock", 1).unwrap(),
        ];
        assert!(
            check_distinct(&twice)
                .unwrap_err()
                .contains("have same address")
        );
    }

    #[test]
    fn errors_are_clear() {
        let e = parse_listen("127.0.0.1:notaport", 0).unwrap_err();
        assert!(e.to_string().contains("invalid port \"notaport\""), "{e}");
        let e = parse_listen("127.0.0.1:80,SPDY", 0).unwrap_err();
        assert!(e.to_string().contains("Unknown protocol 'SPDY'"), "{e}");
        let e = parse_listen("127.0.0.1:80,PROXY,FOO", 0).unwrap_err();
        assert!(e.to_string().contains("Too many protocol sub-args"), "{e}");
        assert!(parse_listen("[::1:80", 0).is_err());
        assert!(parse_listen("bad name=:80", 0).is_err());
    }
}
