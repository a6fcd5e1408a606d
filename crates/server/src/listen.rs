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
    let mut proto = Proto::Http;
    let mut mode = None;
    for opt in parts {
        match opt.split_once('=') {
            None if opt.eq_ignore_ascii_case("HTTP") => proto = Proto::Http,
            None if opt.eq_ignore_ascii_case("PROXY") => proto = Proto::Proxy,
            Some(("mode", m)) => {
                mode = Some(
                    u32::from_str_radix(m, 8)
                        .ok()
                        .filter(|m| *m <= 0o777)
                        .ok_or_else(|| {
                            bad(arg, format!("invalid mode \"{m}\" (octal, e.g. 0660)"))
                        })?,
                )
            }
            // Ownership changes need privileges Lacquer does not assume;
            // they are accepted and applied by the operator's service manager.
            Some(("user" | "group", _)) => {}
            _ => {
                return Err(bad(
                    arg,
                    format!(
                        "unknown option \"{opt}\" (expected HTTP, PROXY, user=, group= or mode=)"
                    ),
                ));
            }
        }
    }
    let endpoints = if addr.starts_with('/') {
        vec![Endpoint::Unix {
            path: PathBuf::from(addr),
            mode,
        }]
    } else {
        if mode.is_some() {
            return Err(bad(arg, "mode= applies only to Unix domain sockets"));
        }
        resolve(addr).map_err(|why| bad(arg, why))?
    };
    Ok(ListenSpec {
        name,
        written: addr.to_string(),
        endpoints,
        proto,
    })
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
                mode: Some(0o660)
            }]
        );
        assert!(parse_listen("/tmp/l.sock,mode=999", 0).is_err());
        assert!(parse_listen("127.0.0.1:80,mode=600", 0).is_err());
    }

    #[test]
    fn errors_are_clear() {
        let e = parse_listen("127.0.0.1:notaport", 0).unwrap_err();
        assert!(e.to_string().contains("invalid port \"notaport\""), "{e}");
        let e = parse_listen("127.0.0.1:80,SPDY", 0).unwrap_err();
        assert!(e.to_string().contains("unknown option"), "{e}");
        assert!(parse_listen("[::1:80", 0).is_err());
        assert!(parse_listen("bad name=:80", 0).is_err());
    }
}
