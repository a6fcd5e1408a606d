//! The client's TCP socket as VCL may tune it: `std.set_ip_tos()` and vmod
//! `tcp` (congestion control, pacing, `TCP_INFO`).
//!
//! A client TCP connection is served through a [`ClientStream`] that shares
//! the socket with a [`SockCtl`] handle the request task keeps, so VCL can
//! change socket options while the session owns the stream. Options with a
//! safe binding go through `socket2` (`IP_TOS` / `IPV6_TCLASS`,
//! `TCP_CONGESTION`). Two have none, and `unsafe` is not an option here:
//!
//! - pacing (`tcp.set_socket_pace()`, `SO_MAX_PACING_RATE` in varnishd) is
//!   done by the stream itself: once a rate is set, writes go out in slices
//!   of about 20 ms worth of bytes, each no earlier than the rate allows.
//!   Unlike the kernel's pacing this needs no `fq` qdisc, and it works on
//!   loopback too; within a slice the kernel still sends at line rate.
//! - `TCP_INFO` is read through the kernel's sock_diag netlink interface
//!   (what `ss -ti` reads), which finds the connection by its addresses;
//!   [`diag_request`] and [`parse_diag_reply`] are the sans-io halves.
//!
//! On a Unix-socket connection the handle holds a duplicate of the
//! session's descriptor: `SO_SNDBUF` (`debug.sndbuf()`) applies there too,
//! the TCP options answer that the connection is not TCP.
//!
//! The handle holds the socket only as long as the session's request
//! task: a fetch that outlives the client never keeps its connection open.
//!
//! [`Readable`] lets an idle session wait for the client's next bytes
//! without holding a read buffer (`crate::client::session`).

use std::io::{self, Read};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use lacquer_vcl::exec::TcpInfo;
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// A client TCP connection, readable and writable by the session, with
/// the pacing VCL asked for applied to writes.
pub struct ClientStream {
    tcp: Arc<TcpStream>,
    /// Bytes per second, 0 for no pacing; shared with the [`SockCtl`].
    pace: Arc<AtomicU64>,
    /// When the next paced write may start.
    next: Option<Instant>,
    sleep: Option<Pin<Box<Sleep>>>,
}

/// The request task's handle on the client socket.
#[derive(Clone)]
pub struct SockCtl {
    conn: Conn,
    pace: Arc<AtomicU64>,
}

/// The socket behind a [`SockCtl`].
#[derive(Clone)]
enum Conn {
    Tcp(Arc<TcpStream>),
    /// A Unix-socket connection (a duplicate of the session's descriptor):
    /// only options of any socket (`SO_SNDBUF`) apply.
    Unix(Arc<OwnedFd>),
}

/// What a TCP-only option answers on a Unix socket.
const NOT_TCP: &str = "not a TCP connection (Unix socket)";

/// Splits an accepted connection into the session's stream and the
/// handle VCL uses.
pub fn client_stream(tcp: TcpStream) -> (ClientStream, SockCtl) {
    let tcp = Arc::new(tcp);
    let pace = Arc::new(AtomicU64::new(0));
    (
        ClientStream {
            tcp: tcp.clone(),
            pace: pace.clone(),
            next: None,
            sleep: None,
        },
        SockCtl {
            conn: Conn::Tcp(tcp),
            pace,
        },
    )
}

/// The handle of a Unix-socket connection, on a duplicate of its
/// descriptor (the session keeps the stream).
pub fn unix_ctl(fd: OwnedFd) -> SockCtl {
    SockCtl {
        conn: Conn::Unix(Arc::new(fd)),
        pace: Arc::new(AtomicU64::new(0)),
    }
}

/// How many bytes one paced write may carry: about 20 ms at `rate`, at
/// least one full-size segment.
fn quantum(rate: u64) -> usize {
    (rate / 50).clamp(1448, 256 * 1024) as usize
}

impl ClientStream {
    /// Waits until a paced write may start; `Ready` at once without pacing.
    fn poll_pace(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(next) = self.next else {
            return Poll::Ready(());
        };
        if Instant::now() >= next {
            self.sleep = None;
            return Poll::Ready(());
        }
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(next)));
        if sleep.deadline() != next {
            sleep.as_mut().reset(next);
        }
        ready!(sleep.as_mut().poll(cx));
        self.sleep = None;
        Poll::Ready(())
    }

    /// Accounts `n` bytes written at `rate`.
    fn charge(&mut self, n: usize, rate: u64) {
        let now = Instant::now();
        let base = self.next.map_or(now, |t| t.max(now));
        self.next = Some(base + Duration::from_secs_f64(n as f64 / rate as f64));
    }
}

impl ClientStream {
    /// Copies what has arrived on the socket into `buf` without taking it
    /// (waits until something has).
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.tcp.peek(buf).await
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.tcp.poll_read_ready(cx))?;
            match self.tcp.try_read_buf(buf) {
                Ok(_) => return Poll::Ready(Ok(())),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// A client stream the session can wait on without reading: between
/// requests an idle session holds no read buffer (`crate::client::session`).
pub trait Readable {
    /// Ready when the peer sent bytes, closed, or the socket failed.
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl Readable for ClientStream {
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tcp.poll_read_ready(cx)
    }
}

impl Readable for tokio::net::UnixStream {
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let rate = this.pace.load(Ordering::Relaxed);
        let buf = if rate > 0 {
            ready!(this.poll_pace(cx));
            &buf[..buf.len().min(quantum(rate))]
        } else {
            buf
        };
        loop {
            ready!(this.tcp.poll_write_ready(cx))?;
            match this.tcp.try_write(buf) {
                Ok(n) => {
                    if rate > 0 {
                        this.charge(n, rate);
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.pace.load(Ordering::Relaxed) > 0 {
            let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| b);
            return self.poll_write(cx, first);
        }
        loop {
            ready!(self.tcp.poll_write_ready(cx))?;
            match self.tcp.try_write_vectored(bufs) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(SockRef::from(&*self.tcp).shutdown(Shutdown::Write))
    }
}

impl SockCtl {
    /// The TCP connection; an error on a Unix socket.
    fn tcp(&self) -> io::Result<&TcpStream> {
        match &self.conn {
            Conn::Tcp(t) => Ok(t),
            Conn::Unix(_) => Err(io::Error::new(io::ErrorKind::Unsupported, NOT_TCP)),
        }
    }

    /// Makes the coming close a reset (`SO_LINGER` 0), as a client that
    /// overflowed the receive buffer sees from varnishd, which closes
    /// with the rest of the request unread. No-op on a Unix socket.
    pub fn reset_on_close(&self) {
        if let Ok(t) = self.tcp() {
            // Best effort: without it the close is an orderly one.
            let _ = SockRef::from(t).set_linger(Some(std::time::Duration::ZERO));
        }
    }

    /// Whether the connection is TCP (else a Unix socket).
    pub fn is_tcp(&self) -> bool {
        matches!(self.conn, Conn::Tcp(_))
    }

    /// `std.set_ip_tos()`: the IPv4 TOS byte or the IPv6 traffic class.
    /// As varnishd's setsockopt(2) call, a value out of 0..255 is no VCL
    /// error: the kernel keeps the low byte of an IPv4 TOS, and an IPv6
    /// traffic class out of range is left unchanged.
    pub fn set_tos(&self, tos: i64) -> io::Result<()> {
        let tcp = self.tcp()?;
        let s = SockRef::from(tcp);
        match tcp.local_addr()? {
            SocketAddr::V4(_) => s.set_tos_v4((tos & 0xff) as u32),
            SocketAddr::V6(_) => match u32::try_from(tos).ok().filter(|t| *t <= 255) {
                Some(t) => s.set_tclass_v6(t),
                None => Ok(()),
            },
        }
    }

    /// `TCP_CONGESTION`: switches the congestion control algorithm.
    pub fn set_congestion(&self, name: &[u8]) -> io::Result<()> {
        SockRef::from(self.tcp()?).set_tcp_congestion(name)
    }

    /// The congestion control algorithm in use.
    pub fn congestion(&self) -> io::Result<Vec<u8>> {
        let mut name = SockRef::from(self.tcp()?).tcp_congestion()?;
        if let Some(nul) = name.iter().position(|&b| b == 0) {
            name.truncate(nul);
        }
        Ok(name)
    }

    /// `SO_SNDBUF` (`debug.sndbuf()`): returns the descriptor, the old and
    /// the resulting sizes (the kernel doubles and bounds what it is given).
    pub fn set_send_buffer(&self, size: u64) -> Result<(i32, usize, usize), String> {
        let (s, fd) = match &self.conn {
            Conn::Tcp(t) => (SockRef::from(&**t), t.as_raw_fd()),
            Conn::Unix(f) => (SockRef::from(&**f), f.as_raw_fd()),
        };
        let err = |e: io::Error| format!("SO_SNDBUF: {e}");
        let old = s.send_buffer_size().map_err(err)?;
        s.set_send_buffer_size(usize::try_from(size).unwrap_or(usize::MAX))
            .map_err(err)?;
        let actual = s.send_buffer_size().map_err(err)?;
        Ok((fd, old, actual))
    }

    /// Paces delivery to `bytes_per_sec` (0: no pacing) from the next write on.
    pub fn set_pacing(&self, bytes_per_sec: u64) {
        self.pace.store(bytes_per_sec, Ordering::Relaxed);
    }

    /// `TCP_INFO` of the connection, through sock_diag.
    pub fn tcp_info(&self) -> io::Result<TcpInfo> {
        let tcp = self.tcp()?;
        let local = tcp.local_addr()?;
        let peer = tcp.peer_addr()?;
        let nl = Socket::new(
            Domain::from(AF_NETLINK),
            Type::DGRAM,
            Some(Protocol::from(NETLINK_SOCK_DIAG)),
        )?;
        nl.set_read_timeout(Some(Duration::from_secs(1)))?;
        nl.send(&diag_request(local, peer))?;
        let mut buf = vec![0u8; 8192];
        let n = (&nl).read(&mut buf)?;
        parse_diag_reply(&buf[..n])
    }
}

const AF_NETLINK: i32 = 16;
const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_CONG: u16 = 4;
const IPPROTO_TCP: u8 = 6;
/// `sizeof(struct nlmsghdr)`, `sizeof(struct inet_diag_msg)`.
const NLMSG_HDR: usize = 16;
const DIAG_MSG: usize = 72;

/// The sock_diag request for the TCP connection `local` ↔ `peer` (as seen
/// from this host), asking for `TCP_INFO` and the congestion algorithm.
pub fn diag_request(local: SocketAddr, peer: SocketAddr) -> Vec<u8> {
    let v6 = local.is_ipv6();
    let octets = |a: SocketAddr| -> [u8; 16] {
        let mut o = [0u8; 16];
        match (a.ip(), v6) {
            (IpAddr::V4(ip), false) => o[..4].copy_from_slice(&ip.octets()),
            (IpAddr::V4(ip), true) => o = ip.to_ipv6_mapped().octets(),
            (IpAddr::V6(ip), _) => o = ip.octets(),
        }
        o
    };
    let mut m = Vec::with_capacity(NLMSG_HDR + 56);
    m.extend_from_slice(&((NLMSG_HDR + 56) as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
    // struct inet_diag_req_v2
    m.push(if v6 { 10 } else { 2 }); // AF_INET6 / AF_INET
    m.push(IPPROTO_TCP);
    m.push((1 << (INET_DIAG_INFO - 1) | 1 << (INET_DIAG_CONG - 1)) as u8);
    m.push(0);
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // any state
    // struct inet_diag_sockid: ports and addresses in network order
    m.extend_from_slice(&local.port().to_be_bytes());
    m.extend_from_slice(&peer.port().to_be_bytes());
    m.extend_from_slice(&octets(local));
    m.extend_from_slice(&octets(peer));
    m.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // INET_DIAG_NOCOOKIE
    m.extend_from_slice(&u32::MAX.to_ne_bytes());
    m
}

fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Reads the kernel's answer to [`diag_request`].
pub fn parse_diag_reply(reply: &[u8]) -> io::Result<TcpInfo> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("sock_diag: {what}"));
    let len = ne_u32(reply, 0).ok_or_else(|| bad("short reply"))? as usize;
    let kind = ne_u16(reply, 4).ok_or_else(|| bad("short reply"))?;
    let msg = reply.get(..len).ok_or_else(|| bad("truncated reply"))?;
    if kind == NLMSG_ERROR {
        let errno = ne_u32(msg, NLMSG_HDR).ok_or_else(|| bad("short error"))? as i32;
        return Err(io::Error::from_raw_os_error(-errno));
    }
    if kind != SOCK_DIAG_BY_FAMILY {
        return Err(bad(&format!("unexpected message type {kind}")));
    }
    let mut info = None;
    let mut congestion = Vec::new();
    let mut at = NLMSG_HDR + DIAG_MSG;
    while at + 4 <= msg.len() {
        let alen = usize::from(ne_u16(msg, at).unwrap_or(0));
        let atype = ne_u16(msg, at + 2).unwrap_or(0);
        if alen < 4 || at + alen > msg.len() {
            return Err(bad("bad attribute length"));
        }
        let data = &msg[at + 4..at + alen];
        match atype {
            INET_DIAG_INFO => info = Some(data),
            INET_DIAG_CONG => {
                congestion = data.split(|&b| b == 0).next().unwrap_or_default().to_vec();
            }
            _ => {}
        }
        at += alen.div_ceil(4) * 4;
    }
    let t = info.ok_or_else(|| bad("no TCP_INFO in the reply"))?;
    let field = |off: usize| ne_u32(t, off).unwrap_or(0);
    Ok(TcpInfo {
        snd_mss: field(16),
        rcv_mss: field(20),
        lost: field(32),
        retrans: field(36),
        pmtu: field(60),
        rtt_us: field(68),
        rttvar_us: field(72),
        snd_cwnd: field(80),
        advmss: field(84),
        reordering: field(88),
        congestion,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout() {
        let r = diag_request(
            "127.0.0.1:6081".parse().unwrap(),
            "127.0.0.2:40000".parse().unwrap(),
        );
        assert_eq!(r.len(), 72);
        assert_eq!(ne_u32(&r, 0), Some(72));
        assert_eq!(ne_u16(&r, 4), Some(SOCK_DIAG_BY_FAMILY));
        assert_eq!(r[16], 2, "AF_INET");
        assert_eq!(r[18], 0b1010, "TCP_INFO and congestion asked for");
        assert_eq!(&r[24..28], &[0x17, 0xc1, 0x9c, 0x40], "ports, big-endian");
        assert_eq!(&r[28..32], &[127, 0, 0, 1]);
        assert_eq!(&r[44..48], &[127, 0, 0, 2]);
        let r6 = diag_request("[::1]:80".parse().unwrap(), "[::1]:81".parse().unwrap());
        assert_eq!(r6[16], 10, "AF_INET6");
        assert_eq!(r6[43], 1);
    }

    fn reply(attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![0u8; DIAG_MSG];
        for (t, d) in attrs {
            let len = 4 + d.len();
            body.extend_from_slice(&(len as u16).to_ne_bytes());
            body.extend_from_slice(&t.to_ne_bytes());
            body.extend_from_slice(d);
            body.resize(body.len().div_ceil(4) * 4, 0);
        }
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn reply_fields() {
        let mut ti = vec![0u8; 120];
        ti[16..20].copy_from_slice(&1448u32.to_ne_bytes());
        ti[68..72].copy_from_slice(&152_000u32.to_ne_bytes());
        ti[88..92].copy_from_slice(&3u32.to_ne_bytes());
        let r = reply(&[(INET_DIAG_CONG, b"cubic\0".to_vec()), (INET_DIAG_INFO, ti)]);
        let i = parse_diag_reply(&r).unwrap();
        assert_eq!(i.snd_mss, 1448);
        assert_eq!(i.rtt_us, 152_000);
        assert_eq!(i.reordering, 3);
        assert_eq!(i.congestion, b"cubic");
    }

    #[test]
    fn reply_errors() {
        assert!(parse_diag_reply(b"").is_err());
        assert!(parse_diag_reply(&reply(&[])).is_err(), "no TCP_INFO");
        let mut e = Vec::new();
        e.extend_from_slice(&20u32.to_ne_bytes());
        e.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        e.extend_from_slice(&[0; 10]);
        e.extend_from_slice(&(-2i32).to_ne_bytes());
        assert_eq!(parse_diag_reply(&e).unwrap_err().raw_os_error(), Some(2));
        let mut r = reply(&[(INET_DIAG_INFO, vec![0; 8])]);
        let at = NLMSG_HDR + DIAG_MSG;
        r[at..at + 2].copy_from_slice(&200u16.to_ne_bytes());
        assert!(parse_diag_reply(&r).is_err(), "attribute past the end");
    }

    #[tokio::test]
    async fn real_socket_options_and_info() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        let (_stream, ctl) = client_stream(s);
        ctl.set_tos(0x10).unwrap();
        // Out of 0..255 is no error (varnishd does not check it either).
        ctl.set_tos(300).unwrap();
        let current = ctl.congestion().unwrap();
        assert!(!current.is_empty());
        ctl.set_congestion(&current).unwrap();
        assert!(ctl.set_congestion(b"no-such-algorithm").is_err());
        let i = ctl.tcp_info().unwrap();
        assert!(i.snd_mss > 0, "{i:?}");
        assert_eq!(i.congestion, current);
        drop(c);
    }
}
