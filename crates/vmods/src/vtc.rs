//! `vmod_vtc`: the utility module of Varnish's test suite (varnishtest
//! corpus VCLs import it): barrier synchronisation over TCP, sleeping,
//! NULL backend/storage/IP values, C type sizes and PROXY header
//! construction.
//!
//! The workspace functions and the VSL writers are not provided: Lacquer
//! has no per-task workspaces to exhaust and no way to write arbitrary log
//! tags from VCL, so VCLs using them fail to compile rather than pretend.
//! `vtc.panic()` fails the task with the message instead of crashing the
//! process.

use std::io::Read;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use lacquer_vcl::exec::{Context, Value};

use crate::args::{Args, lossy};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module vtc
$Function VOID barrier_sync(STRING addr, DURATION timeout=0)
$Function BACKEND no_backend()
$Function STEVEDORE no_stevedore()
$Function IP no_ip()
$Function VOID panic(STRANDS)
$Function VOID sleep(DURATION)
$Function INT typesize(STRING)
$Function BLOB proxy_header(ENUM {v1, v2} version, IP client, IP server, STRING authority=0)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("barrier_sync", barrier_sync as FuncImpl),
        ("no_backend", null),
        ("no_stevedore", null),
        ("no_ip", null),
        ("panic", panic),
        ("sleep", sleep),
        ("typesize", typesize),
        ("proxy_header", proxy_header),
    ],
    classes: &[],
    event: None,
};

type R = Result<Value, String>;

/// `host port` (varnishtest's `${bN_sock}`) or `host:port`.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let s = s.trim();
    let (h, p) = match s.split_once(' ') {
        Some((h, p)) => (h.trim(), p.trim()),
        None => s.rsplit_once(':')?,
    };
    let h = h.trim_start_matches('[').trim_end_matches(']');
    (h, p.parse::<u16>().ok()?).to_socket_addrs().ok()?.next()
}

/// Runs a blocking wait. On the daemon's multi-threaded runtime the worker
/// hands its other tasks to a peer first, so a VCL sleeping here never
/// starves the requests that are to wake it (the suite sleeps in one
/// request while another swaps a backend).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

fn barrier_sync(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    blocking(|| barrier_wait(a))
}

fn barrier_wait(a: &Args<'_>) -> R {
    let addr = lossy(a.str_or_empty(0)?).into_owned();
    let timeout = a.duration(1)?.unwrap_or(0.0);
    let fail = |m: String| Err(format!("vtc.barrier_sync(\"{addr}\"): {m}"));
    let Some(sa) = parse_addr(&addr) else {
        return fail("bad address".into());
    };
    let t = (timeout > 0.0).then(|| Duration::from_secs_f64(timeout));
    let conn = match t {
        Some(t) => TcpStream::connect_timeout(&sa, t),
        None => TcpStream::connect(sa),
    };
    let mut sock = match conn {
        Ok(s) => s,
        Err(e) => return fail(format!("connect failed: {e}")),
    };
    if let Err(e) = sock.set_read_timeout(t) {
        return fail(e.to_string());
    }
    // The barrier releases everyone by closing the connections.
    let mut buf = [0u8; 64];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return Ok(Value::Null),
            Ok(_) => {}
            Err(e) => return fail(format!("read failed: {e}")),
        }
    }
}

fn null(_: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Null)
}

/// Panics the cache process (its requests fail, it stops serving).
fn panic(env: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let why = lossy(a.str_or_empty(0)?).into_owned();
    env.host.panic(&why);
    Err(format!("vtc.panic(): {why}"))
}

fn sleep(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let d = a.duration(0)?.unwrap_or(0.0);
    if d > 0.0 && d.is_finite() {
        blocking(|| std::thread::sleep(Duration::from_secs_f64(d)));
    }
    Ok(Value::Null)
}

/// Size of a C struct with members of the given types (`p` pointer, `i`
/// int, `d` double, `f` float, `l` long, `s` short, `z` size_t, `o`
/// off_t, `j` intmax_t) on this 64-bit platform, with natural alignment;
/// -1 for an unknown type letter.
pub(crate) fn typesize_of(s: &[u8]) -> i64 {
    let (mut size, mut max_align) = (0u64, 0u64);
    for c in s {
        let l = match c {
            b'p' | b'd' | b'l' | b'z' | b'o' | b'j' => 8,
            b'i' | b'f' => 4,
            b's' => 2,
            _ => return -1,
        };
        max_align = max_align.max(l);
        size = size.next_multiple_of(l) + l;
    }
    if max_align > 0 {
        size = size.next_multiple_of(max_align);
    }
    size as i64
}

fn typesize(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Int(typesize_of(a.str_or_empty(0)?)))
}

/// A PROXY protocol header (v1 text or v2 binary with an optional
/// authority TLV) for these addresses.
pub(crate) fn proxy_header_bytes(
    v2: bool,
    c: SocketAddr,
    s: SocketAddr,
    authority: Option<&[u8]>,
) -> Vec<u8> {
    if !v2 {
        let fam = if c.is_ipv4() { "TCP4" } else { "TCP6" };
        return format!(
            "PROXY {fam} {} {} {} {}\r\n",
            c.ip(),
            s.ip(),
            c.port(),
            s.port()
        )
        .into_bytes();
    }
    let mut out = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    out.push(0x21); // version 2, PROXY command
    let mut body = Vec::new();
    match (c, s) {
        (SocketAddr::V4(c), SocketAddr::V4(s)) => {
            out.push(0x11);
            body.extend_from_slice(&c.ip().octets());
            body.extend_from_slice(&s.ip().octets());
        }
        _ => {
            out.push(0x21);
            let v6 = |a: SocketAddr| match a {
                SocketAddr::V4(a) => a.ip().to_ipv6_mapped().octets(),
                SocketAddr::V6(a) => a.ip().octets(),
            };
            body.extend_from_slice(&v6(c));
            body.extend_from_slice(&v6(s));
        }
    }
    body.extend_from_slice(&c.port().to_be_bytes());
    body.extend_from_slice(&s.port().to_be_bytes());
    if let Some(auth) = authority {
        body.push(0x02);
        body.extend_from_slice(&(auth.len() as u16).to_be_bytes());
        body.extend_from_slice(auth);
    }
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

fn proxy_header(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let v2 = a.enum_(0)? == Some("v2");
    let c = a.ip(1)?.ok_or("vtc.proxy_header(): client IP is NULL")?;
    let s = a.ip(2)?.ok_or("vtc.proxy_header(): server IP is NULL")?;
    let auth = a.str(3)?.filter(|x| !x.is_empty());
    Ok(Value::Blob(proxy_header_bytes(v2, c, s, auth).into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_sizes() {
        assert_eq!(typesize_of(b"p"), 8);
        assert_eq!(typesize_of(b"i"), 4);
        assert_eq!(typesize_of(b"si"), 8);
        assert_eq!(typesize_of(b"ip"), 16);
        assert_eq!(typesize_of(b"pi"), 16);
        assert_eq!(typesize_of(b""), 0);
        assert_eq!(typesize_of(b"x"), -1);
    }

    #[test]
    fn proxy_headers() {
        let c: SocketAddr = "1.2.3.4:1234".parse().unwrap();
        let s: SocketAddr = "5.6.7.8:80".parse().unwrap();
        assert_eq!(
            proxy_header_bytes(false, c, s, None),
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1234 80\r\n"
        );
        let v2 = proxy_header_bytes(true, c, s, Some(b"a.b"));
        assert_eq!(&v2[..12], b"\r\n\r\n\0\r\nQUIT\n");
        assert_eq!(v2[12..14], [0x21, 0x11]);
        assert_eq!(u16::from_be_bytes([v2[14], v2[15]]) as usize, v2.len() - 16);
        assert_eq!(&v2[v2.len() - 6..], b"\x02\x00\x03a.b");
    }

    #[test]
    fn addresses() {
        assert_eq!(parse_addr("127.0.0.1 8080").unwrap().port(), 8080);
        assert_eq!(parse_addr("127.0.0.1:81").unwrap().port(), 81);
        assert!(parse_addr("nope").is_none());
    }
}
