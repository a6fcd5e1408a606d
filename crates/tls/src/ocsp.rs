//! OCSP staples cached in Hitch's `ocsp-dir`.
//!
//! Hitch keeps the OCSP response of each certificate in `ocsp-dir` under
//! a file named by the hex MD5 digest of the certificate's file name as
//! the configuration wrote it (`pem-file = "/etc/hitch/a.pem"` →
//! `<ocsp-dir>/<md5("/etc/hitch/a.pem")>`), and staples it before any
//! `ocsp-resp-file`. Lacquer reads the same files, so a directory that
//! Hitch (or a cron job that fetches responses for it) keeps filled
//! staples the same responses. Lacquer fetches nothing itself. MD5 is used
//! only to find the file name Hitch chose, never for security, so it is
//! written out here (RFC 1321) instead of pulling in a crate for it.

use std::path::{Path, PathBuf};

/// Where Hitch keeps the cached OCSP response of the certificate in `cert`.
pub fn cached_staple_path(dir: &Path, cert: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let digest = md5(cert.as_os_str().as_bytes());
    let mut name = String::with_capacity(32);
    for b in digest {
        name.push_str(&format!("{b:02x}"));
    }
    dir.join(name)
}

/// The cached response for `cert`, if `dir` holds one that looks like DER
/// (a SEQUENCE). A missing or unreadable file means no staple, as in
/// Hitch: the cache may not be filled yet.
pub fn cached_staple(dir: &Path, cert: &Path) -> Option<Vec<u8>> {
    let der = std::fs::read(cached_staple_path(dir, cert)).ok()?;
    (der.first() == Some(&0x30) && der.len() > 2).then_some(der)
}

/// Per-round left-rotation amounts (RFC 1321, 3.4).
const SHIFTS: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9,
    14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15,
    21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

/// The MD5 digest of `data`.
fn md5(data: &[u8]) -> [u8; 16] {
    // K[i] = floor(abs(sin(i + 1)) * 2^32), computed once per call: exact
    // in f64 for these magnitudes.
    let k: Vec<u32> = (0..64)
        .map(|i| (((i + 1) as f64).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let mut state: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    let mut msg = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_le_bytes());
    for block in msg.chunks_exact(64) {
        let m: Vec<u32> = block
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let [mut a, mut b, mut c, mut d] = state;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let rotated = a
                .wrapping_add(f)
                .wrapping_add(k[i])
                .wrapping_add(m[g])
                .rotate_left(SHIFTS[i]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(rotated);
        }
        state[0] = state[0].wrapping_add(a);
        state[1] = state[1].wrapping_add(b);
        state[2] = state[2].wrapping_add(c);
        state[3] = state[3].wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, w) in state.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(d: [u8; 16]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn md5_matches_the_rfc_1321_test_suite() {
        for (input, want) in [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ] {
            assert_eq!(hex(md5(input.as_bytes())), want, "{input:?}");
        }
    }

    #[test]
    fn the_cached_file_is_named_as_hitch_names_it_and_read_only_when_der() {
        let dir = crate::testcerts::tempdir("ocspdir");
        let cert = Path::new("/etc/hitch/a.pem");
        let p = cached_staple_path(&dir, cert);
        // As `printf %s /etc/hitch/a.pem | md5sum` gives.
        assert_eq!(
            p.file_name().unwrap().to_str().unwrap(),
            "e94edadaadd0d4f3d6066c6afc6193ec"
        );
        assert_eq!(cached_staple(&dir, cert), None, "no file yet");
        std::fs::write(&p, "not der").unwrap();
        assert_eq!(cached_staple(&dir, cert), None);
        std::fs::write(&p, [0x30, 0x03, 0x0a, 0x01, 0x00]).unwrap();
        assert_eq!(
            cached_staple(&dir, cert).as_deref(),
            Some(&[0x30, 0x03, 0x0a, 0x01, 0x00][..])
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
