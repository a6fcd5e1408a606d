//! Fuzz target `proxy_tlvs`: arbitrary PROXY v2 TLVs (type, 16-bit length,
//! value, as a header carries them) through `TlsInfo::from_proxy_tlvs`:
//! never reads past a TLV, and what it accepts survives re-encoding with
//! `to_proxy_tlvs` (the path native TLS takes to VCL) unchanged.
#![no_main]

use lacquer_tls::info::TlsInfo;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut tlvs = Vec::new();
    let mut rest = data;
    while rest.len() >= 3 {
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        let Some(v) = rest.get(3..3 + len) else {
            break;
        };
        tlvs.push((rest[0], v));
        rest = &rest[3 + len..];
    }
    let Some(info) = TlsInfo::from_proxy_tlvs(tlvs.iter().copied()) else {
        return;
    };
    let again = info.to_proxy_tlvs();
    let back = TlsInfo::from_proxy_tlvs(again.iter().map(|(t, v)| (*t, v.as_slice())))
        .expect("re-encoded TLS info is TLS");
    assert_eq!(back.version, info.version);
    assert_eq!(back.cipher, info.cipher);
    assert_eq!(back.alpn, info.alpn);
    assert_eq!(back.sni, info.sni);
    assert_eq!(back.client_cert, info.client_cert);
    assert_eq!(back.verify_result, info.verify_result);
});
