//! `vmod_vtc`: the utility module of Varnish's test suite (varnishtest
//! corpus VCLs import it): barrier synchronisation over TCP, sleeping,
//! NULL backend/storage/IP values, C type sizes and PROXY header
//! construction.
//!
//! The workspace functions work on the task's workspaces as the server
//! accounts them (see the `Workspace` trait): `client` is the running
//! task's own, as in varnishd. `workspace_dump` (which reads arena bytes
//! Lacquer does not have) is not provided, so VCLs using it fail to
//! compile rather than pretend. `vsl()` and `vsl_replay()` write records
//! for any transaction straight to the shared log, to fake logs in tests.
//! `vtc.panic()` fails the task with the message instead of crashing the
//! process.

use std::io::Read;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use lacquer_vcl::exec::{Context, Value, Workspace, WsKind, WsMark};

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
$Function VOID workspace_alloc(ENUM {client, backend, session, thread}, INT size)
$Function BYTES workspace_reserve(ENUM {client, backend, session, thread}, INT size)
$Function INT workspace_free(ENUM {client, backend, session, thread})
$Function VOID workspace_snapshot(ENUM {client, backend, session, thread})
$Function VOID workspace_reset(ENUM {client, backend, session, thread})
$Function BOOL workspace_overflowed(ENUM {client, backend, session, thread})
$Function VOID workspace_overflow(ENUM {client, backend, session, thread})
$Function VOID vsl(INT vxid, STRING tag, ENUM {c, b} side, STRANDS s)
$Function VOID vsl_replay(STRANDS s)
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
        ("workspace_alloc", workspace_alloc),
        ("workspace_reserve", workspace_reserve),
        ("workspace_free", workspace_free),
        ("workspace_snapshot", workspace_snapshot),
        ("workspace_reset", workspace_reset),
        ("workspace_overflowed", workspace_overflowed),
        ("workspace_overflow", workspace_overflow),
        ("vsl", vsl),
        ("vsl_replay", vsl_replay),
    ],
    classes: &[],
    event: None,
    filters: &[],
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

/// Largest transaction id `vtc.vsl()` takes (VCL's largest INT).
const VSL_ID_MAX: i64 = 999_999_999_999_999;

/// Writes one record for transaction `id`; only the low 30 bits of the id
/// reach the log, as in varnishd.
fn write_vsl(ctx: &mut dyn Context, id: i64, tag: &str, backend: bool, msg: &[u8]) -> R {
    if !(0..=VSL_ID_MAX).contains(&id) {
        return Err("id out of bounds".into());
    }
    ctx.log_raw(tag, (id & 0x3fff_ffff) as u32, backend, msg)?;
    Ok(Value::Null)
}

fn vsl(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let id = a.int(0)?.unwrap_or(0);
    let tag = lossy(a.str_or_empty(1)?).into_owned();
    let backend = a.enum_(2)? == Some("b");
    let msg = a.str_or_empty(3)?.to_vec();
    write_vsl(ctx, id, &tag, backend, &msg)
}

/// `vtc.vsl_replay()`: writes the records of a log listing, one per line,
/// either `VXID TAG SIDE PAYLOAD` (varnishlog -g raw) or varnishtest's
/// `**** v1    vsl|       VXID TAG SIDE PAYLOAD`. Lines that do not parse
/// are skipped.
fn vsl_replay(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let text = a.str_or_empty(0)?.to_vec();
    for line in text.split(|&b| b == b'\r' || b == b'\n') {
        if let Some((id, tag, backend, msg)) = parse_vsl_line(line) {
            write_vsl(ctx, id, &lossy(tag), backend, msg)?;
        }
    }
    Ok(Value::Null)
}

/// One line of a listing for [`vsl_replay`]: id, tag, backend side, payload.
fn parse_vsl_line(mut line: &[u8]) -> Option<(i64, &[u8], bool, &[u8])> {
    if line.first() == Some(&b'*') {
        let at = line.windows(4).position(|w| w == b"vsl|")?;
        line = &line[at + 4..];
    }
    // A word, and what follows the blank that ends it.
    fn word(s: &[u8]) -> Option<(&[u8], &[u8])> {
        let blank = |b: &u8| matches!(b, b' ' | b'\t');
        let start = s.iter().position(|b| !blank(b))?;
        let s = &s[start..];
        let end = s.iter().position(blank).unwrap_or(s.len());
        Some((&s[..end], s.get(end + 1..).unwrap_or(b"")))
    }
    let (id, rest) = word(line)?;
    let (neg, digits) = match id.first() {
        Some(b'-') => (true, &id[1..]),
        Some(b'+') => (false, &id[1..]),
        _ => (false, id),
    };
    let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let id = digits[..n].iter().fold(0i64, |v, d| {
        v.saturating_mul(10).saturating_add(i64::from(d - b'0'))
    });
    let id = if neg { -id } else { id };
    let (tag, rest) = word(rest)?;
    let (side, msg) = word(rest)?;
    let backend = match side.first() {
        Some(b'c') => false,
        Some(b'b') => true,
        _ => return None,
    };
    Some((id, tag, backend, msg))
}

fn sleep(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let d = a.duration(0)?.unwrap_or(0.0);
    if d > 0.0 && d.is_finite() {
        blocking(|| std::thread::sleep(Duration::from_secs_f64(d)));
    }
    Ok(Value::Null)
}

/// Size of a C struct with members of the given types (`p` pointer, `i`
/// int, `u` unsigned, `d` double, `f` float, `l` long, `s` short, `c`
/// char, `z` size_t, `o` off_t, `j` intmax_t) on this 64-bit platform,
/// with natural alignment; -1 for an unknown type letter.
pub(crate) fn typesize_of(s: &[u8]) -> i64 {
    let (mut size, mut max_align) = (0u64, 0u64);
    for c in s {
        let l = match c {
            b'p' | b'd' | b'l' | b'z' | b'o' | b'j' => 8,
            b'i' | b'u' | b'f' => 4,
            b's' => 2,
            b'c' => 1,
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

fn proxy_header(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let v2 = a.enum_(0)? == Some("v2");
    let c = a.ip(1)?.ok_or("vtc.proxy_header(): client IP is NULL")?;
    let s = a.ip(2)?.ok_or("vtc.proxy_header(): server IP is NULL")?;
    let auth = a.str(3)?.filter(|x| !x.is_empty());
    let header = if v2 {
        lacquer_http::proxy::encode_v2(c, s, auth)
    } else {
        lacquer_http::proxy::encode_v1(&c.ip().to_string(), &c.port().to_string(), s)
    };
    Ok(Value::Blob(header.into()))
}

/// The workspace a `vtc.workspace_*` call names: an error (failing the
/// task) when the task has no such workspace, where varnishd would crash.
fn ws<'c>(
    ctx: &'c mut dyn Context,
    a: &Args<'_>,
    f: &str,
) -> Result<&'c mut dyn Workspace, String> {
    let name = a.enum_(0)?.unwrap_or_default();
    let which = match name {
        "client" => WsKind::Task,
        "backend" => WsKind::Backend,
        "session" => WsKind::Session,
        _ => WsKind::Thread,
    };
    ctx.workspace(which)
        .ok_or_else(|| format!("vtc.{f}({name}): no such workspace in this task"))
}

/// A size argument: a negative one asks for all but that many bytes.
fn wanted(ws: &dyn Workspace, size: i64) -> i64 {
    if size < 0 {
        size.saturating_add(i64::try_from(ws.free()).unwrap_or(i64::MAX))
    } else {
        size
    }
}

fn workspace_alloc(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let size = a.int(1)?.unwrap_or(0);
    let ws = ws(ctx, a, "workspace_alloc")?;
    let n = wanted(ws, size);
    if n <= 0 {
        return Err("Attempted negative WS allocation".to_string());
    }
    if !ws.alloc(n as u64) {
        return Err("vtc.workspace_alloc".to_string());
    }
    Ok(Value::Null)
}

/// Reserves and releases at once: the size reserved, 0 when it does not
/// fit (which does not mark the workspace overflowed).
fn workspace_reserve(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let size = a.int(1)?.unwrap_or(0);
    let ws = ws(ctx, a, "workspace_reserve")?;
    let n = wanted(ws, size);
    if n <= 0 {
        return Err("Attempted negative WS reservation".to_string());
    }
    let fits = u64::try_from(n).is_ok_and(|n| n <= ws.free());
    Ok(Value::Bytes(if fits { n } else { 0 }))
}

fn workspace_free(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let ws = ws(ctx, a, "workspace_free")?;
    Ok(Value::Int(i64::try_from(ws.free()).unwrap_or(i64::MAX)))
}

/// The one snapshot `vtc.workspace_snapshot()` keeps per VCL (as
/// varnishd's vmod, concurrent tasks cannot each have theirs).
struct Snapshot(WsMark);

fn workspace_snapshot(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let mark = ws(ctx, a, "workspace_snapshot")?.snapshot();
    env.vcl_state().insert(0, Snapshot(mark));
    Ok(Value::Null)
}

fn workspace_reset(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let mark = env
        .vcl_state()
        .get::<Snapshot>(0)
        .map(|s| s.0)
        .ok_or("vtc.workspace_reset(): no snapshot taken")?;
    ws(ctx, a, "workspace_reset")?.reset(mark);
    Ok(Value::Null)
}

fn workspace_overflowed(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Bool(
        ws(ctx, a, "workspace_overflowed")?.overflowed(),
    ))
}

fn workspace_overflow(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    ws(ctx, a, "workspace_overflow")?.mark_overflow();
    Ok(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vsl_listing_lines() {
        assert_eq!(
            parse_vsl_line(b"**** v1    vsl|       1000 Begin           c sess 0 HTTP/1"),
            Some((1000, &b"Begin"[..], false, &b"sess 0 HTTP/1"[..]))
        );
        assert_eq!(
            parse_vsl_line(b"1001 Filters         b "),
            Some((1001, &b"Filters"[..], true, &b""[..]))
        );
        assert_eq!(
            parse_vsl_line(b"9000 End c"),
            Some((9000, &b"End"[..], false, &b""[..]))
        );
        assert_eq!(parse_vsl_line(b"**** v1    CLI RX|200"), None);
        assert_eq!(parse_vsl_line(b"x Begin c y"), None);
        assert_eq!(parse_vsl_line(b"1 Begin x y"), None);
        assert_eq!(parse_vsl_line(b""), None);
    }

    #[test]
    fn type_sizes() {
        assert_eq!(typesize_of(b"p"), 8);
        assert_eq!(typesize_of(b"i"), 4);
        assert_eq!(typesize_of(b"si"), 8);
        assert_eq!(typesize_of(b"ip"), 16);
        assert_eq!(typesize_of(b"pi"), 16);
        // varnishd 7.1's figures for a BLOB descriptor and a char.
        assert_eq!(typesize_of(b"uzp"), 24);
        assert_eq!(typesize_of(b"c"), 1);
        assert_eq!(typesize_of(b""), 0);
        assert_eq!(typesize_of(b"x"), -1);
    }

    #[test]
    fn addresses() {
        assert_eq!(parse_addr("127.0.0.1 8080").unwrap().port(), 8080);
        assert_eq!(parse_addr("127.0.0.1:81").unwrap().port(), 81);
        assert!(parse_addr("nope").is_none());
    }
}
