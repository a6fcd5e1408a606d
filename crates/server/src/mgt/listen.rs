//! Listen specifications (`-a`): which sockets accept client connections.
//!
//! Syntax as varnishd: `-a [name=][address][:port][,PROTO][,user=U][,group=G][,mode=M]`
//! where `address` is a host name, an IPv4 address, a bracketed IPv6 address,
//! or an absolute path for a Unix domain socket, and `PROTO` is `HTTP` (the
//! default), `PROXY` or `HTTPS` (TLS, see `crate::client::tls`). Host names are resolved once, at startup; a name with
//! several addresses gives one socket per address. `user=`, `group=` and
//! `mode=` (Unix sockets only) set the socket file's owner and permissions;
//! sub-argument names may be abbreviated and errors read as varnishd's.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// The protocol spoken on a listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Http,
    /// PROXY protocol v1/v2 header first, then HTTP.
    Proxy,
    /// TLS (`https`), then HTTP/1 or HTTP/2 by ALPN (`crate::client::tls`).
    Https,
}

/// Where a listener binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(SocketAddr),
    Unix {
        path: PathBuf,
        /// Permission bits for the socket file (`mode=`), octal.
        mode: Option<u32>,
        /// Owner of the socket file (`user=`, `group=`), resolved.
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
    /// varnishd's message, which names the argument.
    #[error("{0}")]
    Bad(String),
}

fn bad(_arg: &str, why: impl Into<String>) -> ListenError {
    ListenError::Bad(why.into())
}

/// `strtol(s, &end, 8)` as varnishd parses `mode=`: `Err(true)` for
/// trailing junk (or nothing parsed), `Err(false)` for an overflow.
fn strtol8(s: &str) -> Result<i64, bool> {
    let t = s.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let n = digits
        .bytes()
        .take_while(|b| (b'0'..=b'7').contains(b))
        .count();
    if n == 0 || n != digits.len() {
        return Err(true);
    }
    let mut v: i64 = 0;
    for b in digits.bytes() {
        v = v
            .checked_mul(8)
            .and_then(|v| v.checked_add(i64::from(b - b'0')))
            .ok_or(false)?;
    }
    Ok(if neg { -v } else { v })
}

/// Whether `key` (non-empty) abbreviates `name`, as varnishd's `strncmp`.
fn abbreviates(key: &str, name: &str) -> bool {
    !key.is_empty() && name.starts_with(key)
}

/// Parses an `-a` argument; `index` numbers unnamed listeners (`a0`, `a1`, …).
pub fn parse_listen(arg: &str, index: usize) -> Result<ListenSpec, ListenError> {
    let mut parts = arg.split(',');
    let first = parts.next().unwrap_or_default();
    let (name, addr) = match first.split_once('=') {
        Some((n, a)) => {
            // As varnishd: a name starts with a letter, then letters,
            // digits, `_` or `-`.
            if !n.starts_with(|c: char| c.is_ascii_alphabetic())
                || !n
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(bad(arg, format!("invalid -a name \"{n}\"=[...]")));
            }
            (n.to_string(), a)
        }
        None => (format!("a{index}"), first),
    };
    let unix = addr.starts_with('/');
    if !unix && addr.contains('/') {
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
            } else if opt.eq_ignore_ascii_case("HTTPS") && !unix {
                Proto::Https
            } else {
                return Err(bad(arg, format!("Unknown protocol '{opt}'")));
            });
            continue;
        };
        if !unix {
            return Err(bad(
                arg,
                format!("Invalid sub-arg {opt} for IP addresses in -a"),
            ));
        }
        if abbreviates(key, "user") {
            if uid.is_some() {
                return Err(bad(arg, format!("Too many user sub-args in -a ({opt})")));
            }
            let u = nix::unistd::User::from_name(val).ok().flatten();
            uid = Some(
                u.ok_or_else(|| bad(arg, format!("Unknown user {val} in -a")))?
                    .uid
                    .as_raw(),
            );
        } else if abbreviates(key, "group") {
            if gid.is_some() {
                return Err(bad(arg, format!("Too many group sub-args in -a ({opt})")));
            }
            let g = nix::unistd::Group::from_name(val).ok().flatten();
            gid = Some(
                g.ok_or_else(|| bad(arg, format!("Unknown group {val} in -a")))?
                    .gid
                    .as_raw(),
            );
        } else if abbreviates(key, "mode") {
            if mode.is_some() {
                return Err(bad(arg, format!("Too many mode sub-args in -a ({opt})")));
            }
            if val.is_empty() {
                return Err(bad(arg, "Empty mode sub-arg in -a"));
            }
            let m = match strtol8(val) {
                Ok(m) => m,
                Err(true) => return Err(bad(arg, format!("Invalid mode sub-arg {val} in -a"))),
                Err(false) => {
                    return Err(bad(
                        arg,
                        format!(
                            "Cannot parse mode sub-arg {val} in -a: Numerical result out of range"
                        ),
                    ));
                }
            };
            if m <= 0 || m > 0o777 {
                return Err(bad(arg, format!("Mode sub-arg {val} out of range in -a")));
            }
            mode = Some(m as u32);
        } else {
            return Err(bad(arg, format!("Invalid sub-arg {opt} in -a")));
        }
    }
    let proto = proto.unwrap_or(Proto::Http);
    let endpoints = if unix {
        // sun_path holds 108 bytes with the terminating NUL.
        if addr.len() > 107 {
            return Err(bad(arg, format!("Got no socket(s) for {addr}")));
        }
        vec![Endpoint::Unix {
            path: PathBuf::from(addr),
            mode,
            uid,
            gid,
        }]
    } else {
        // varnishd's words for an address that gives no socket, then why.
        resolve(addr).map_err(|why| bad(arg, format!("Got no socket(s) for {addr}\n({why})")))?
    };
    Ok(ListenSpec {
        name,
        written: addr.to_string(),
        endpoints,
        proto,
    })
}

/// Refuses two `-a` arguments that name one address, as varnishd does
/// before it binds anything.
pub fn check_distinct(specs: &[ListenSpec]) -> Result<(), ListenError> {
    for (i, a) in specs.iter().enumerate() {
        for b in &specs[i + 1..] {
            let same = |x: &Endpoint, y: &Endpoint| match (x, y) {
                (Endpoint::Unix { path: p, .. }, Endpoint::Unix { path: q, .. }) => p == q,
                (Endpoint::Tcp(p), Endpoint::Tcp(q)) => p == q && p.port() != 0,
                _ => false,
            };
            if a.endpoints
                .iter()
                .any(|x| b.endpoints.iter().any(|y| same(x, y)))
            {
                return Err(ListenError::Bad(format!(
                    "-a arguments {} and {} have same address",
                    a.written, b.written
                )));
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
        let s = parse_listen("/tmp/l.sock,u=root,gr=root", 0).unwrap();
        assert!(matches!(
            s.endpoints[0],
            Endpoint::Unix {
                uid: Some(0),
                gid: Some(0),
                ..
            }
        ));
    }

    #[test]
    fn sub_arg_errors_as_varnishd() {
        let e = |a: &str| parse_listen(a, 0).unwrap_err().to_string();
        assert_eq!(
            e("127.0.0.1:80,user=u"),
            "Invalid sub-arg user=u for IP addresses in -a"
        );
        assert_eq!(e("/s,mode=999"), "Invalid mode sub-arg 999 in -a");
        assert_eq!(
            e("/s,mode=666devilish"),
            "Invalid mode sub-arg 666devilish in -a"
        );
        assert_eq!(e("/s,mode="), "Empty mode sub-arg in -a");
        assert_eq!(e("/s,mode=1666"), "Mode sub-arg 1666 out of range in -a");
        assert_eq!(e("/s,mode=0"), "Mode sub-arg 0 out of range in -a");
        assert_eq!(e("/s,mode=-1"), "Mode sub-arg -1 out of range in -a");
        assert!(
            e("/s,mode=77777777777777777777777777777777")
                .starts_with("Cannot parse mode sub-arg 7")
        );
        assert!(
            e("/s,mode=-77777777777777777777777777777777")
                .starts_with("Cannot parse mode sub-arg -7")
        );
        assert_eq!(
            e("/s,mode=660,mode=600"),
            "Too many mode sub-args in -a (mode=600)"
        );
        assert_eq!(e("/s,foo=bar"), "Invalid sub-arg foo=bar in -a");
        assert_eq!(e("/s,userfoo=u"), "Invalid sub-arg userfoo=u in -a");
        assert_eq!(e("/s,=foo"), "Invalid sub-arg =foo in -a");
        assert_eq!(e("/s,foobar"), "Unknown protocol 'foobar'");
        assert_eq!(
            e("/s,PROXY,HTTP"),
            "Too many protocol sub-args in -a (HTTP)"
        );
        assert_eq!(e("/s,user="), "Unknown user  in -a");
        assert_eq!(e("/s,group="), "Unknown group  in -a");
        assert_eq!(
            e("foo/bar.sock"),
            "Unix domain socket addresses must be absolute paths in -a (foo/bar.sock)"
        );
    }

    #[test]
    fn same_address_twice_is_refused() {
        let specs = [
            parse_listen("127.0.0.1:38484", 0).unwrap(),
            parse_listen("127.0.0.1:38484", 1).unwrap(),
        ];
        assert_eq!(
            check_distinct(&specs).unwrap_err().to_string(),
            "-a arguments 127.0.0.1:38484 and 127.0.0.1:38484 have same address"
        );
        let any_port = [
            parse_listen("127.0.0.1:0", 0).unwrap(),
            parse_listen("127.0.0.1:0", 1).unwrap(),
        ];
        assert!(check_distinct(&any_port).is_ok(), "port 0 picks two ports");
        let long = format!("/{}", "x".repeat(120));
        assert!(
            parse_listen(&long, 0)
                .unwrap_err()
                .to_string()
                .starts_with("Got no socket(s) for /xxx")
        );
    }

    #[test]
    fn errors_are_clear() {
        let e = parse_listen("127.0.0.1:notaport", 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Got no socket(s) for 127.0.0.1:notaport\n(invalid port \"notaport\")"
        );
        let e = parse_listen("1foo=:0", 0).unwrap_err();
        assert_eq!(e.to_string(), "invalid -a name \"1foo\"=[...]");
        let e = parse_listen("127.0.0.1:80,SPDY", 0).unwrap_err();
        assert!(e.to_string().contains("Unknown protocol"), "{e}");
        assert!(parse_listen("[::1:80", 0).is_err());
        assert!(parse_listen("bad name=:80", 0).is_err());
    }
}
