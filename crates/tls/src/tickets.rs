//! Session tickets: stateless resumption with keys that rotate.
//!
//! Every ticket key is derived from one secret and the number of the
//! rotation period it belongs to: `HKDF-SHA256(secret, "lacquer ticket
//! key" || period)` as an AES-256-GCM key. A ticket is sealed with the
//! current period's key and opens during that period and the next one, so
//! a key lives at most two periods (the period is at most 3 h, so no key
//! outlives 6 h) and a ticket never outlives its key.
//!
//! The secret is random per process unless a key file is given: then
//! every node that reads the same file derives the same keys for the same
//! period, and a client resumes on any of them without the nodes talking
//! to each other. The file holds at least 32 bytes (raw or any text, e.g.
//! `openssl rand -base64 48`); it is read once at start.
//!
//! Ticket layout: period (8 bytes, big-endian) || nonce (12) || sealed
//! session state || tag (16).
//!
//! The keys of the last two periods used are kept (derived once, not per
//! ticket: every full handshake seals two tickets), in an `ArcSwap` that
//! handshakes on every thread read without a lock.

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

/// The longest rotation period: keys live two periods, so ≤ 6 h.
pub const MAX_PERIOD_SECS: u64 = 3 * 3600;

/// A period's key, derived once.
struct PeriodKey {
    period: u64,
    key: LessSafeKey,
}

/// Stateless ticket sealing with period-derived keys.
pub struct Tickets {
    secret: [u8; 32],
    period: u64,
    rng: SystemRandom,
    /// The keys of the (at most two) periods used last, newest first.
    keys: ArcSwap<Vec<Arc<PeriodKey>>>,
    /// Clock for tests; `None` reads the system's.
    now: Option<fn() -> u64>,
}

impl std::fmt::Debug for Tickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tickets")
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Tickets {
    /// Random keys for this process alone; `period` seconds (clamped to
    /// 60 s ..= [`MAX_PERIOD_SECS`]).
    pub fn random(period: u64) -> Result<Self, String> {
        let mut secret = [0u8; 32];
        SystemRandom::new()
            .fill(&mut secret)
            .map_err(|_| "the system random generator failed".to_string())?;
        Ok(Self::with_secret(secret, period))
    }

    /// Keys shared by every node that reads `path`.
    pub fn from_file(path: &Path, period: u64) -> Result<Self, String> {
        let data = std::fs::read(path)
            .map_err(|e| format!("ticket key file {}: cannot read: {e}", path.display()))?;
        let trimmed = data.trim_ascii();
        if trimmed.len() < 32 {
            return Err(format!(
                "ticket key file {}: holds {} bytes; at least 32 are needed (e.g. openssl rand -base64 48 > FILE)",
                path.display(),
                trimmed.len()
            ));
        }
        let mut secret = [0u8; 32];
        let prk = Salt::new(HKDF_SHA256, b"lacquer ticket secret").extract(trimmed);
        prk.expand(&[b"file"], HKDF_SHA256)
            .and_then(|okm| okm.fill(&mut secret))
            .map_err(|_| "ticket key derivation failed".to_string())?;
        Ok(Self::with_secret(secret, period))
    }

    fn with_secret(secret: [u8; 32], period: u64) -> Self {
        Tickets {
            secret,
            period: period.clamp(60, MAX_PERIOD_SECS),
            rng: SystemRandom::new(),
            keys: ArcSwap::from_pointee(Vec::new()),
            now: None,
        }
    }

    fn current_period(&self) -> u64 {
        self.now.map_or_else(unix_now, |f| f()) / self.period
    }

    fn derive_key(&self, period: u64) -> Option<LessSafeKey> {
        let mut k = [0u8; 32];
        let prk = Salt::new(HKDF_SHA256, b"lacquer ticket key").extract(&self.secret);
        let info = period.to_be_bytes();
        prk.expand(&[&info], HKDF_SHA256)
            .and_then(|okm| okm.fill(&mut k))
            .ok()?;
        Some(LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &k).ok()?))
    }

    /// `period`'s key: from the cache, or derived and cached beside the
    /// newest other one (two threads that miss at once both derive the
    /// same key; one of the two caches wins).
    fn key(&self, period: u64) -> Option<Arc<PeriodKey>> {
        let cached = self.keys.load();
        if let Some(k) = cached.iter().find(|k| k.period == period) {
            return Some(k.clone());
        }
        let fresh = Arc::new(PeriodKey {
            period,
            key: self.derive_key(period)?,
        });
        let mut keep: Vec<Arc<PeriodKey>> = cached
            .iter()
            .filter(|k| k.period != period)
            .cloned()
            .collect();
        keep.sort_by_key(|k| std::cmp::Reverse(k.period));
        keep.truncate(1);
        keep.push(fresh.clone());
        keep.sort_by_key(|k| std::cmp::Reverse(k.period));
        self.keys.store(Arc::new(keep));
        Some(fresh)
    }
}

impl ProducesTickets for Tickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.period).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let period = self.current_period();
        let key = self.key(period)?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(8 + NONCE_LEN + plain.len() + 16);
        out.extend_from_slice(&period.to_be_bytes());
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        key.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&out[..8]),
                &mut body,
            )
            .ok()?;
        out.extend_from_slice(&body);
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < 8 + NONCE_LEN + 16 {
            return None;
        }
        let period = u64::from_be_bytes(cipher[..8].try_into().ok()?);
        let now = self.current_period();
        if period != now && period.checked_add(1) != Some(now) {
            return None;
        }
        let key = self.key(period)?;
        let nonce = Nonce::try_assume_unique_for_key(&cipher[8..8 + NONCE_LEN]).ok()?;
        let mut body = cipher[8 + NONCE_LEN..].to_vec();
        let plain = key
            .key
            .open_in_place(nonce, Aad::from(&cipher[..8]), &mut body)
            .ok()?;
        let n = plain.len();
        body.truncate(n);
        Some(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_and_tamper() {
        let t = Tickets::random(3600).unwrap();
        let c = t.encrypt(b"session state").unwrap();
        assert_eq!(t.decrypt(&c).unwrap(), b"session state");
        let mut bad = c.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(t.decrypt(&bad).is_none());
        assert!(t.decrypt(&c[..20]).is_none());
        assert!(t.decrypt(&[]).is_none());
        // Another process's random keys do not open it.
        assert!(Tickets::random(3600).unwrap().decrypt(&c).is_none());
    }

    #[test]
    fn keys_expire_after_two_periods() {
        let mut t = Tickets::random(60).unwrap();
        t.now = Some(|| 6000);
        let c = t.encrypt(b"x").unwrap();
        t.now = Some(|| 6060);
        assert!(t.decrypt(&c).is_some(), "next period still opens");
        t.now = Some(|| 6120);
        assert!(t.decrypt(&c).is_none(), "two periods on it does not");
        // Keys are kept for the two newest periods used, and one derived
        // again after it left the cache is the same key.
        let periods = |t: &Tickets| t.keys.load().iter().map(|k| k.period).collect::<Vec<_>>();
        t.now = Some(|| 6060);
        t.encrypt(b"y").unwrap();
        t.now = Some(|| 6120);
        t.encrypt(b"z").unwrap();
        assert_eq!(periods(&t), [102, 101]);
        t.now = Some(|| 6000);
        assert!(t.decrypt(&c).is_some(), "the period's key is derived again");
        assert_eq!(periods(&t), [102, 100]);
        assert_eq!(Tickets::random(99_999).unwrap().period, MAX_PERIOD_SECS);
    }

    #[test]
    fn a_shared_file_gives_nodes_the_same_keys() {
        let dir = std::env::temp_dir().join(format!("lacquer-tickets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("k");
        std::fs::write(&f, "0123456789abcdef0123456789abcdef0123\n").unwrap();
        let a = Tickets::from_file(&f, 3600).unwrap();
        let b = Tickets::from_file(&f, 3600).unwrap();
        let c = a.encrypt(b"shared").unwrap();
        assert_eq!(b.decrypt(&c).unwrap(), b"shared");
        std::fs::write(&f, "short").unwrap();
        let e = Tickets::from_file(&f, 3600).unwrap_err();
        assert!(e.contains("at least 32"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
