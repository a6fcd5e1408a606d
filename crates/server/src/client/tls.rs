//! Built-in TLS on the client side: the handshake of a connection accepted
//! on a TLS listener (`-a ADDR,https` and the frontends of `-A
//! hitch.conf`), its `TLS.*` counts, and the decrypted stream the session
//! then serves. The listeners' setup, `tls.cert.*` and SIGHUP are the
//! manager's (`mgt::tls`); the state both use is `runtime::tls`.
//!
//! The TLS machinery itself (configuration, certificates, SNI, tickets,
//! rustls configs) is the `lacquer-tls` crate; this module is the glue to
//! the daemon. An accepted connection on a TLS listener runs its handshake
//! here under `tls_handshake_timeout` (a client that stalls or sends junk
//! costs its task at most that long and is counted by cause); then the
//! decrypted stream goes to the same session code as plain HTTP, HTTP/2
//! included when ALPN chose `h2`. What the handshake negotiated reaches
//! VCL as the TLVs a TLS terminator would have sent in a PROXY v2 header,
//! so vmod `proxy` (and vmod `tls`, which reads the same) answer alike
//! behind Hitch and with Lacquer's own TLS.
//!
//! Certificates: `-a …,https` listeners and `-A` frontends without their
//! own `pem-file` share the top-level certificates of the `-A` file; the
//! `tls.cert.*` commands and SIGHUP act on that shared set (a frontend
//! with its own `pem-file`s keeps them, re-read on SIGHUP).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use lacquer_tls::server::{Failure, TlsFrontend};
use lacquer_tls::tokio_rustls::server::TlsStream;
use lacquer_vsl::vsc::tables::Tls;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::client::session::SessInfoArgs;
use crate::client::sock::{ClientStream, Readable, SockCtl};
use crate::pid;
use crate::runtime::state::Shared;
use crate::runtime::tls::TlsState;

/// A decrypted client connection, as the session reads and writes it.
pub struct TlsConn {
    inner: TlsStream<ClientStream>,
    tls: Arc<TlsState>,
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.tls.counters.add(Tls::rx_bytes, n as u64);
        }
        r
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.tls.counters.add(Tls::tx_bytes, n as u64);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            self.tls.counters.add(Tls::tx_bytes, n as u64);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Readable for TlsConn {
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (io, conn) = self.inner.get_ref();
        // Decrypted bytes (or the client's close_notify) already wait.
        if !conn.wants_read() {
            return Poll::Ready(Ok(()));
        }
        io.poll_readable(cx)
    }
}

/// The PROXY v2 TLV bytes (type, 16-bit length, value) that describe a
/// finished handshake, as a TLS terminator in front would send them.
fn tlv_bytes(info: &lacquer_tls::info::TlsInfo) -> Vec<u8> {
    let mut out = Vec::new();
    for (t, v) in info.to_proxy_tlvs() {
        push_tlv(&mut out, t, &v);
    }
    out
}

/// Appends one TLV (a value longer than 64 KiB is cut).
fn push_tlv(out: &mut Vec<u8>, t: u8, v: &[u8]) {
    let len = u16::try_from(v.len()).unwrap_or(u16::MAX);
    out.push(t);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&v[..usize::from(len)]);
}

/// The JA3 string of the client's ClientHello (`tls_ja3`), read by peeking
/// at the socket before the handshake consumes it. A hello split over
/// several TCP segments is looked at again each millisecond until it is
/// whole; the caller's handshake timeout bounds the wait. `None` for
/// anything that is not a ClientHello (the handshake then says why).
async fn client_ja3(stream: &ClientStream) -> Option<String> {
    use lacquer_tls::ja3::{Ja3, MAX_HELLO, fingerprint};
    let mut buf = vec![0u8; MAX_HELLO + 5];
    let mut last = 0;
    loop {
        let n = stream.peek(&mut buf).await.ok()?;
        match fingerprint(&buf[..n]) {
            Ja3::Fingerprint(s) => return Some(s),
            Ja3::NotHello => return None,
            // Nothing new arrived, or the connection closed: the
            // handshake will tell.
            Ja3::NeedMore if n == 0 || n == buf.len() => return None,
            Ja3::NeedMore => {
                if n == last {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                last = n;
            }
        }
    }
}

/// Runs the handshake of a connection accepted on a TLS listener, then
/// serves it as any session. The caller holds the session guard.
pub async fn serve(
    sh: Arc<Shared>,
    tls: Arc<TlsState>,
    fe: Arc<TlsFrontend>,
    stream: ClientStream,
    mut args: SessInfoArgs,
    ctl: SockCtl,
) {
    let (timeout, h2, ja3_on) = {
        let p = sh.params();
        (
            p.duration(pid!("tls_handshake_timeout")),
            p.bit(pid!("feature"), "http2"),
            p.flag(pid!("tls_ja3")),
        )
    };
    let limit = std::time::Duration::from_secs_f64(timeout.clamp(0.0, 1e9));
    let failed = |failure: Failure, msg: &str| {
        tls.counters.inc(match failure {
            Failure::Timeout => Tls::fail_timeout,
            Failure::Closed => Tls::fail_closed,
            Failure::Junk => Tls::fail_junk,
            Failure::Incompatible => Tls::fail_incompatible,
            Failure::ClientCert => Tls::fail_client_cert,
            Failure::SniNoMatch => Tls::fail_sni_nomatch,
            Failure::Other => Tls::fail_other,
        });
        sh.vsl.log_immediate(
            lacquer_vsl::Tag::Error,
            lacquer_vsl::Vxid::plain(0),
            format_args!(
                "TLS handshake failed ({}): listener {} client {} {}: {msg}",
                failure.name(),
                args.listener,
                args.client.ip(),
                args.client.port()
            ),
        );
    };
    let handshake = async {
        let ja3 = match ja3_on {
            true => client_ja3(&stream).await,
            false => None,
        };
        (ja3, fe.accept(stream, h2).await)
    };
    let (ja3, conn) = match tokio::time::timeout(limit, handshake).await {
        Err(_) => (None, Err(None)),
        Ok((ja3, r)) => (ja3, r.map_err(Some)),
    };
    let conn = match conn {
        Err(None) => {
            failed(Failure::Timeout, "tls_handshake_timeout");
            return;
        }
        Err(Some(e)) => {
            failed(e.failure, &e.msg);
            return;
        }
        Ok(c) => c,
    };
    let (conn, info) = conn;
    tls.counters.inc(Tls::handshakes);
    if info.resumed {
        tls.counters.inc(Tls::resumed);
    }
    if info.alpn.as_deref() == Some("h2") {
        tls.counters.inc(Tls::alpn_h2);
    }
    args.tlvs = tlv_bytes(&info);
    if let Some(s) = ja3 {
        push_tlv(
            &mut args.tlvs,
            lacquer_http::proxy::PP2_TYPE_LACQUER_JA3,
            s.as_bytes(),
        );
    }
    let conn = TlsConn {
        inner: conn,
        tls: tls.clone(),
    };
    crate::client::session::serve(sh, conn, args, Some(ctl)).await;
}
