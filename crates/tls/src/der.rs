//! Just enough DER to read a certificate's subject common name, which
//! vmod `tls`/`proxy` report for a client certificate (`client_cert_cn`)
//! and `tls.cert.list` shows. Hostile input gives `None`, never a panic.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_cn_and_survives_junk() {
        let ca = crate::testcerts::Ca::new("Issuer Name");
        let (der, _) = ca.leaf_der("client one", &["c.test"]);
        assert_eq!(subject_cn(&der).as_deref(), Some("client one"));
        assert_eq!(subject_cn(&[]), None);
        assert_eq!(subject_cn(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        for cut in 0..der.len() {
            let _ = subject_cn(&der[..cut]);
        }
    }
}
