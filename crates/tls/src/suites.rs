//! Cipher suites: OpenSSL's names for rustls's suites, and the mapping of
//! Hitch's `ciphers` (an OpenSSL cipher string, TLS 1.2) and
//! `ciphersuites` (TLS 1.3 names) onto the suites rustls offers.
//!
//! A cipher string is a list of elements separated by `:` (or `,` or
//! spaces). An element is a suite's OpenSSL name or aliases joined by `+`
//! (`ECDHE+AESGCM`), which select the suites that carry every alias;
//! `!` removes the suites for good, `-` removes them, `+` moves them to
//! the end; `@STRENGTH`/`@SECLEVEL=n` are accepted and have no effect
//! (every suite here is 128-bit or better AEAD). Elements that select
//! none of rustls's suites (DHE, CBC, RC4, …) are reported, not errors,
//! unless nothing at all is left.

use std::sync::Arc;

use rustls::SupportedCipherSuite;
use rustls::crypto::CryptoProvider;
use rustls::crypto::aws_lc_rs::cipher_suite as cs;

use crate::conf::Proto;

/// A TLS 1.2 suite with its OpenSSL name and the aliases it carries.
struct Tls12 {
    name: &'static str,
    suite: SupportedCipherSuite,
    aliases: &'static [&'static str],
}

const COMMON12: &[&str] = &[
    "ALL", "DEFAULT", "HIGH", "TLSv1.2", "ECDHE", "EECDH", "kECDHE", "kEECDH", "ECDH", "AEAD",
];

fn tls12() -> [Tls12; 6] {
    [
        Tls12 {
            name: "ECDHE-ECDSA-AES256-GCM-SHA384",
            suite: cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            aliases: &["aECDSA", "ECDSA", "AESGCM", "AES", "AES256", "SHA384"],
        },
        Tls12 {
            name: "ECDHE-RSA-AES256-GCM-SHA384",
            suite: cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            aliases: &["aRSA", "RSA", "AESGCM", "AES", "AES256", "SHA384"],
        },
        Tls12 {
            name: "ECDHE-ECDSA-CHACHA20-POLY1305",
            suite: cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            aliases: &["aECDSA", "ECDSA", "CHACHA20", "SHA256"],
        },
        Tls12 {
            name: "ECDHE-RSA-CHACHA20-POLY1305",
            suite: cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            aliases: &["aRSA", "RSA", "CHACHA20", "SHA256"],
        },
        Tls12 {
            name: "ECDHE-ECDSA-AES128-GCM-SHA256",
            suite: cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            aliases: &["aECDSA", "ECDSA", "AESGCM", "AES", "AES128", "SHA256"],
        },
        Tls12 {
            name: "ECDHE-RSA-AES128-GCM-SHA256",
            suite: cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            aliases: &["aRSA", "RSA", "AESGCM", "AES", "AES128", "SHA256"],
        },
    ]
}

fn tls13() -> [(&'static str, SupportedCipherSuite); 3] {
    [
        ("TLS_AES_256_GCM_SHA384", cs::TLS13_AES_256_GCM_SHA384),
        (
            "TLS_CHACHA20_POLY1305_SHA256",
            cs::TLS13_CHACHA20_POLY1305_SHA256,
        ),
        ("TLS_AES_128_GCM_SHA256", cs::TLS13_AES_128_GCM_SHA256),
    ]
}

/// OpenSSL's name for a suite (`TLS_AES_128_GCM_SHA256`,
/// `ECDHE-RSA-AES128-GCM-SHA256`), as `tls.cipher()` reports it.
pub fn openssl_name(s: SupportedCipherSuite) -> String {
    let id = s.suite();
    if let Some(t) = tls12().into_iter().find(|t| t.suite.suite() == id) {
        return t.name.to_string();
    }
    if let Some((n, _)) = tls13().into_iter().find(|(_, x)| x.suite() == id) {
        return n.to_string();
    }
    format!("{id:?}")
}

/// The TLS 1.2 suites a cipher string selects, in its order, and the
/// elements that selected nothing.
pub fn select_tls12(spec: &str) -> (Vec<SupportedCipherSuite>, Vec<String>) {
    let all = tls12();
    let mut list: Vec<usize> = Vec::new();
    let mut banned: Vec<usize> = Vec::new();
    let mut unmatched = Vec::new();
    for el in spec.split([':', ',', ' ']).filter(|s| !s.is_empty()) {
        if el.starts_with('@') {
            continue;
        }
        let (op, body) = match el.as_bytes()[0] {
            b'!' | b'-' | b'+' => (el.as_bytes()[0], &el[1..]),
            _ => (0, el),
        };
        let tags: Vec<&str> = body.split('+').collect();
        let matched: Vec<usize> = all
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.name == body
                    || tags
                        .iter()
                        .all(|t| COMMON12.contains(t) || s.aliases.contains(t))
            })
            .map(|(i, _)| i)
            .collect();
        if matched.is_empty() {
            if op == 0 {
                unmatched.push(el.to_string());
            }
            continue;
        }
        match op {
            b'!' => {
                list.retain(|i| !matched.contains(i));
                banned.extend(&matched);
            }
            b'-' => list.retain(|i| !matched.contains(i)),
            b'+' => {
                let moved: Vec<usize> = list
                    .iter()
                    .copied()
                    .filter(|i| matched.contains(i))
                    .collect();
                list.retain(|i| !matched.contains(i));
                list.extend(moved);
            }
            _ => {
                for i in matched {
                    if !list.contains(&i) && !banned.contains(&i) {
                        list.push(i);
                    }
                }
            }
        }
    }
    (list.into_iter().map(|i| all[i].suite).collect(), unmatched)
}

/// The TLS 1.3 suites a `ciphersuites` string selects, in its order, and
/// the names rustls does not have.
pub fn select_tls13(spec: &str) -> (Vec<SupportedCipherSuite>, Vec<String>) {
    let all = tls13();
    let mut out = Vec::new();
    let mut unknown = Vec::new();
    for name in spec.split([':', ',', ' ']).filter(|s| !s.is_empty()) {
        match all.iter().find(|(n, _)| *n == name) {
            Some((_, s)) => {
                if !out
                    .iter()
                    .any(|o: &SupportedCipherSuite| o.suite() == s.suite())
                {
                    out.push(*s);
                }
            }
            None => unknown.push(name.to_string()),
        }
    }
    (out, unknown)
}

/// The aws-lc-rs provider with the cipher suites the options select.
pub fn provider_for(
    ciphers: Option<&str>,
    ciphersuites: Option<&str>,
    protos: &[Proto],
) -> Result<CryptoProvider, String> {
    let mut suites = Vec::new();
    if protos.contains(&Proto::Tls13) {
        match ciphersuites {
            Some(spec) => {
                let (s, unknown) = select_tls13(spec);
                if s.is_empty() {
                    return Err(format!(
                        "ciphersuites \"{spec}\" names no TLS 1.3 suite Lacquer offers (it has TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256, TLS_AES_128_GCM_SHA256){}",
                        if unknown.is_empty() {
                            String::new()
                        } else {
                            format!("; unknown: {}", unknown.join(" "))
                        }
                    ));
                }
                suites.extend(s);
            }
            None => suites.extend(tls13().iter().map(|(_, s)| *s)),
        }
    }
    if protos.contains(&Proto::Tls12) {
        match ciphers {
            Some(spec) => {
                let (s, _) = select_tls12(spec);
                if s.is_empty() {
                    return Err(format!(
                        "ciphers \"{spec}\" selects no TLS 1.2 suite Lacquer offers (it has the ECDHE AES-GCM and CHACHA20-POLY1305 suites)"
                    ));
                }
                suites.extend(s);
            }
            None => suites.extend(tls12().iter().map(|t| t.suite)),
        }
    }
    Ok(CryptoProvider {
        cipher_suites: suites,
        ..rustls::crypto::aws_lc_rs::default_provider()
    })
}

/// The default provider, for what needs no suite selection.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[SupportedCipherSuite]) -> Vec<String> {
        v.iter().map(|s| openssl_name(*s)).collect()
    }

    #[test]
    fn hitch_default_cipher_string() {
        let (s, unmatched) = select_tls12("EECDH+AESGCM:EDH+AESGCM:AES256+EECDH:AES256+EDH");
        assert_eq!(
            names(&s),
            [
                "ECDHE-ECDSA-AES256-GCM-SHA384",
                "ECDHE-RSA-AES256-GCM-SHA384",
                "ECDHE-ECDSA-AES128-GCM-SHA256",
                "ECDHE-RSA-AES128-GCM-SHA256",
            ]
        );
        assert_eq!(unmatched, ["EDH+AESGCM", "AES256+EDH"]);
    }

    #[test]
    fn operators_and_names() {
        let (s, _) = select_tls12("HIGH:!aECDSA:-CHACHA20:+AES256:@STRENGTH");
        assert_eq!(
            names(&s),
            ["ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384"]
        );
        let (s, _) = select_tls12("ECDHE-RSA-CHACHA20-POLY1305:ALL");
        assert_eq!(names(&s)[0], "ECDHE-RSA-CHACHA20-POLY1305");
        assert_eq!(s.len(), 6);
        let (s, _) = select_tls12("!RSA:ALL");
        assert_eq!(s.len(), 3);
        assert!(select_tls12("RC4-SHA:DES-CBC3-SHA").0.is_empty());
    }

    #[test]
    fn tls13_names_and_errors() {
        let (s, unknown) = select_tls13(
            "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_CCM_SHA256:TLS_AES_128_GCM_SHA256",
        );
        assert_eq!(
            names(&s),
            ["TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"]
        );
        assert_eq!(unknown, ["TLS_AES_128_CCM_SHA256"]);
        let e = provider_for(None, Some("TLS_AES_128_CCM_SHA256"), &[Proto::Tls13]).unwrap_err();
        assert!(e.contains("names no TLS 1.3 suite"), "{e}");
        let e = provider_for(Some("RC4"), None, &[Proto::Tls12]).unwrap_err();
        assert!(e.contains("selects no TLS 1.2 suite"), "{e}");
        // The TLS 1.2 string does not matter when only 1.3 is offered.
        let p = provider_for(Some("RC4"), None, &[Proto::Tls13]).unwrap();
        assert_eq!(p.cipher_suites.len(), 3);
    }
}
