//! Just enough DER to read from a certificate what vmod `tls`/`proxy`
//! report: the subject common name (`client_cert_cn`), the signature
//! algorithm (`cert_sign`) and the key type and size (`cert_key`), named as
//! OpenSSL names them. Hostile input gives `None`, never a panic.

/// One TLV: (tag, contents, rest after it).
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&l0, rest) = rest.split_first()?;
    let (len, rest) = if l0 < 0x80 {
        (usize::from(l0), rest)
    } else {
        let n = usize::from(l0 & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, &x| (a << 8) | usize::from(x));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQ: u8 = 0x30;
const SET: u8 = 0x31;
/// OID 2.5.4.3 (commonName).
const CN_OID: &[u8] = &[0x55, 0x04, 0x03];

/// The subject's (last) common name of a DER certificate.
pub fn subject_cn(cert: &[u8]) -> Option<String> {
    let (t, cert, _) = tlv(cert)?;
    (t == SEQ).then_some(())?;
    let (t, tbs, _) = tlv(cert)?;
    (t == SEQ).then_some(())?;
    let mut rest = tbs;
    // Optional [0] version, then serial, signature, issuer, validity, subject.
    let (t, _, r) = tlv(rest)?;
    if t == 0xa0 {
        rest = r;
    }
    for _ in 0..4 {
        rest = tlv(rest)?.2;
    }
    let (t, mut rdns, _) = tlv(rest)?;
    (t == SEQ).then_some(())?;
    let mut cn = None;
    while !rdns.is_empty() {
        let (t, mut set, r) = tlv(rdns)?;
        (t == SET).then_some(())?;
        rdns = r;
        while !set.is_empty() {
            let (t, atv, r) = tlv(set)?;
            (t == SEQ).then_some(())?;
            set = r;
            let (t, oid, r) = tlv(atv)?;
            if t == 0x06 && oid == CN_OID {
                let (_, val, _) = tlv(r)?;
                cn = Some(String::from_utf8_lossy(val).into_owned());
            }
        }
    }
    cn
}

/// The TBS certificate's fields after the optional version: serial,
/// signature, issuer, validity, subject, subject public key info.
fn tbs_fields(cert: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let (t, cert, _) = tlv(cert)?;
    (t == SEQ).then_some(())?;
    let (t, tbs, _) = tlv(cert)?;
    (t == SEQ).then_some(())?;
    let mut rest = tbs;
    let mut out = Vec::new();
    while !rest.is_empty() && out.len() < 7 {
        let (t, v, r) = tlv(rest)?;
        if !(out.is_empty() && t == 0xa0) {
            out.push((t, v));
        }
        rest = r;
    }
    Some(out)
}

/// The certificate's signature algorithm as OpenSSL's short name
/// (`RSA-SHA256`, `ecdsa-with-SHA256`, `ED25519`).
pub fn signature_name(cert: &[u8]) -> Option<String> {
    let f = tbs_fields(cert)?;
    let (_, alg) = f.get(1)?;
    let (t, oid, _) = tlv(alg)?;
    (t == 0x06).then_some(())?;
    let name = match oid {
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b] => "RSA-SHA256",
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c] => "RSA-SHA384",
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d] => "RSA-SHA512",
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05] => "RSA-SHA1",
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a] => "RSASSA-PSS",
        [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02] => "ecdsa-with-SHA256",
        [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03] => "ecdsa-with-SHA384",
        [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04] => "ecdsa-with-SHA512",
        [0x2b, 0x65, 0x70] => "ED25519",
        _ => return None,
    };
    Some(name.to_string())
}

/// The key type and size as HAProxy reports them (`RSA2048`, `EC256`,
/// `ED25519`).
pub fn key_name(cert: &[u8]) -> Option<String> {
    let f = tbs_fields(cert)?;
    let (_, spki) = f.get(5)?;
    let (t, alg, rest) = tlv(spki)?;
    (t == SEQ).then_some(())?;
    let (t, oid, params) = tlv(alg)?;
    (t == 0x06).then_some(())?;
    match oid {
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01] => {
            // BIT STRING { SEQUENCE { INTEGER modulus, INTEGER exponent } }
            let (_, bits, _) = tlv(rest)?;
            let (_, key, _) = tlv(bits.get(1..)?)?;
            let (_, modulus, _) = tlv(key)?;
            let m = match modulus.first() {
                Some(0) => &modulus[1..],
                _ => modulus,
            };
            let lead = u32::from(*m.first()?);
            let bits = (m.len() - 1) * 8 + (32 - lead.leading_zeros()) as usize;
            Some(format!("RSA{bits}"))
        }
        [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01] => {
            let (_, curve, _) = tlv(params)?;
            let bits = match curve {
                [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07] => 256,
                [0x2b, 0x81, 0x04, 0x00, 0x22] => 384,
                [0x2b, 0x81, 0x04, 0x00, 0x23] => 521,
                _ => return None,
            };
            Some(format!("EC{bits}"))
        }
        [0x2b, 0x65, 0x70] => Some("ED25519".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_cn_and_survives_junk() {
        let ca = crate::testcerts::Ca::new("Issuer Name");
        let (der, _) = ca.leaf_der("client one", &["c.test"]);
        assert_eq!(subject_cn(&der).as_deref(), Some("client one"));
        // rcgen's default key: ECDSA P-256, signed with SHA-256.
        assert_eq!(signature_name(&der).as_deref(), Some("ecdsa-with-SHA256"));
        assert_eq!(key_name(&der).as_deref(), Some("EC256"));
        assert_eq!(subject_cn(&[]), None);
        assert_eq!(subject_cn(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        for cut in 0..der.len() {
            let _ = subject_cn(&der[..cut]);
            let _ = signature_name(&der[..cut]);
            let _ = key_name(&der[..cut]);
        }
    }
}
