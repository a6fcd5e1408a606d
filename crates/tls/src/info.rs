//! What a TLS connection negotiated, in the form VCL sees it.
//!
//! [`TlsInfo`] is filled either from a handshake Lacquer ran itself
//! ([`TlsInfo::of_server`]) or from the TLVs of a PROXY v2 header sent by
//! a TLS terminator in front (Hitch, HAProxy: [`TlsInfo::from_proxy_tlvs`]),
//! so vmod `tls` and vmod `proxy` answer the same in both setups. Version
//! and cipher names are OpenSSL's (`TLSv1.3`, `TLS_AES_256_GCM_SHA384`),
//! as the terminators put them in their TLVs.

use rustls::server::ServerConnection;
use rustls::{HandshakeKind, ProtocolVersion};

use crate::certs::LoadedCert;
use crate::suites::openssl_name;

/// The negotiated parameters of a client connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsInfo {
    /// `TLSv1.2`, `TLSv1.3`.
    pub version: String,
    /// OpenSSL's name of the cipher suite.
    pub cipher: String,
    /// The SNI name the client sent.
    pub sni: Option<String>,
    /// The ALPN protocol chosen (`h2`, `http/1.1`).
    pub alpn: Option<String>,
    /// The client presented a certificate on this connection.
    pub client_cert: bool,
    /// The subject common name of the client's certificate.
    pub client_cert_cn: Option<String>,
    /// The session was resumed (ticket or session id).
    pub resumed: bool,
    /// The verification result as OpenSSL's `X509_V_*` code: 0 is OK (or
    /// no certificate asked for).
    pub verify_result: i64,
    /// The server certificate's signature algorithm (`ecdsa-with-SHA256`).
    pub sig_alg: Option<String>,
    /// The server certificate's key (`RSA2048`, `EC256`).
    pub key_alg: Option<String>,
}

/// OpenSSL's name of a protocol version.
pub fn version_name(v: ProtocolVersion) -> String {
    match v {
        ProtocolVersion::TLSv1_3 => "TLSv1.3".into(),
        ProtocolVersion::TLSv1_2 => "TLSv1.2".into(),
        ProtocolVersion::TLSv1_1 => "TLSv1.1".into(),
        ProtocolVersion::TLSv1_0 => "TLSv1".into(),
        other => format!("{other:?}"),
    }
}

impl TlsInfo {
    /// From a server connection whose handshake has finished; `leaf` is
    /// the certificate it presented.
    pub fn of_server(c: &ServerConnection, leaf: Option<&LoadedCert>) -> Self {
        let cert = c.peer_certificates().and_then(|c| c.first());
        TlsInfo {
            version: c.protocol_version().map(version_name).unwrap_or_default(),
            cipher: c
                .negotiated_cipher_suite()
                .map(openssl_name)
                .unwrap_or_default(),
            sni: c.server_name().map(str::to_string),
            alpn: c
                .alpn_protocol()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
            client_cert: cert.is_some(),
            client_cert_cn: cert.and_then(|c| crate::der::subject_cn(c.as_ref())),
            resumed: c.handshake_kind() == Some(HandshakeKind::Resumed),
            verify_result: 0,
            sig_alg: leaf.and_then(|l| l.sig_alg.clone()),
            key_alg: leaf.and_then(|l| l.key_alg.clone()),
        }
    }

    /// From PROXY v2 TLVs (type, value) as a TLS terminator sends them:
    /// `PP2_TYPE_ALPN` (0x01), `PP2_TYPE_AUTHORITY` (0x02) and
    /// `PP2_TYPE_SSL` (0x20) with its `VERSION` (0x21), `CN` (0x22) and
    /// `CIPHER` (0x23) sub-TLVs. `None` when the header says the client
    /// did not use TLS.
    pub fn from_proxy_tlvs<'a>(tlvs: impl IntoIterator<Item = (u8, &'a [u8])>) -> Option<Self> {
        let mut info = TlsInfo::default();
        let mut ssl = false;
        for (t, v) in tlvs {
            match t {
                0x01 => info.alpn = Some(String::from_utf8_lossy(v).into_owned()),
                0x02 => info.sni = Some(String::from_utf8_lossy(v).into_owned()),
                0x20 if v.len() >= 5 => {
                    let client = v[0];
                    // PP2_CLIENT_SSL
                    ssl = client & 0x01 != 0;
                    // PP2_CLIENT_CERT_CONN
                    info.client_cert = client & 0x02 != 0;
                    info.verify_result = i64::from(u32::from_be_bytes([v[1], v[2], v[3], v[4]]));
                    let mut sub = &v[5..];
                    while sub.len() >= 3 {
                        let st = sub[0];
                        let len = usize::from(u16::from_be_bytes([sub[1], sub[2]]));
                        let Some(val) = sub.get(3..3 + len) else {
                            break;
                        };
                        let s = String::from_utf8_lossy(val).into_owned();
                        match st {
                            0x21 => info.version = s,
                            0x22 => info.client_cert_cn = Some(s),
                            0x23 => info.cipher = s,
                            0x24 => info.sig_alg = Some(s),
                            0x25 => info.key_alg = Some(s),
                            _ => {}
                        }
                        sub = &sub[3 + len..];
                    }
                }
                _ => {}
            }
        }
        ssl.then_some(info)
    }

    /// The PROXY v2 TLVs a terminator would send for this connection (the
    /// inverse of [`TlsInfo::from_proxy_tlvs`]), so both paths share one
    /// reading.
    pub fn to_proxy_tlvs(&self) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        if let Some(a) = &self.alpn {
            out.push((0x01, a.as_bytes().to_vec()));
        }
        if let Some(s) = &self.sni {
            out.push((0x02, s.as_bytes().to_vec()));
        }
        // PP2_CLIENT_SSL, and PP2_CLIENT_CERT_CONN | PP2_CLIENT_CERT_SESS
        // (a certificate on this connection is one in its session too).
        let mut ssl = vec![0x01 | if self.client_cert { 0x06 } else { 0 }];
        ssl.extend_from_slice(
            &u32::try_from(self.verify_result)
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        let mut sub = |t: u8, v: &str| {
            let v = &v.as_bytes()[..v.len().min(usize::from(u16::MAX))];
            ssl.push(t);
            ssl.extend_from_slice(&u16::try_from(v.len()).unwrap_or(u16::MAX).to_be_bytes());
            ssl.extend_from_slice(v);
        };
        sub(0x21, &self.version);
        if let Some(cn) = &self.client_cert_cn {
            sub(0x22, cn);
        }
        sub(0x23, &self.cipher);
        if let Some(a) = &self.sig_alg {
            sub(0x24, a);
        }
        if let Some(a) = &self.key_alg {
            sub(0x25, a);
        }
        out.push((0x20, ssl));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_tlvs_round_trip() {
        let i = TlsInfo {
            version: "TLSv1.3".into(),
            cipher: "TLS_AES_256_GCM_SHA384".into(),
            sni: Some("www.example.com".into()),
            alpn: Some("h2".into()),
            client_cert: true,
            client_cert_cn: Some("client one".into()),
            resumed: false,
            verify_result: 0,
            sig_alg: Some("ecdsa-with-SHA256".into()),
            key_alg: Some("EC256".into()),
        };
        let tlvs = i.to_proxy_tlvs();
        let back = TlsInfo::from_proxy_tlvs(tlvs.iter().map(|(t, v)| (*t, v.as_slice()))).unwrap();
        assert_eq!(back, i);
    }

    #[test]
    fn proxy_tlvs_hostile_input() {
        assert_eq!(TlsInfo::from_proxy_tlvs([]), None);
        // Not TLS: the client bit is clear.
        assert_eq!(
            TlsInfo::from_proxy_tlvs([(0x20, &[0, 0, 0, 0, 0][..])]),
            None
        );
        // A sub-TLV longer than its parent is ignored, not read past.
        let v = [1, 0, 0, 0, 0, 0x21, 0, 99, b'T'];
        let i = TlsInfo::from_proxy_tlvs([(0x20, &v[..])]).unwrap();
        assert_eq!(i.version, "");
        // Too short an SSL TLV is not TLS.
        assert_eq!(TlsInfo::from_proxy_tlvs([(0x20, &[1, 0][..])]), None);
    }
}
