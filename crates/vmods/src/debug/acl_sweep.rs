//! `debug.sweep_acl()` and `debug.time_acl()`: walk a range of addresses
//! through an ACL, as Varnish's test vmod does to check (and time) the
//! ACL matcher over whole subnets.
//!
//! The sweep steps the last 32 bits of an IPv4 address, or the last 64
//! of an IPv6 one, from `ip0` up to `ip1` inclusive. `sweep_acl` writes a
//! `Debug` record per 64 addresses (`Sweep: <first address>` and one `X`
//! or `-` per address for match or not) and returns the SHA-256 of those
//! records, so a test can pin a whole map in one value. `time_acl` matches
//! the range `rounds` times and returns the time per address.

use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;
use std::time::Instant;

use bytes::Bytes;
use lacquer_vcl::exec::{Context, LogKind, Value};
use sha2::{Digest, Sha256};

use super::acl_arg;
use crate::Env;
use crate::args::Args;

type R = Result<Value, String>;

/// A walk over `ip0..=ip1`.
struct Sweep {
    probe: SocketAddr,
    end: IpAddr,
    /// The stepped part of the address: the whole IPv4 address or the
    /// low 64 bits of an IPv6 one.
    start: u64,
    that: u64,
    step: u64,
    /// Addresses visited over every round.
    count: u64,
}

/// Address family numbers as varnishd prints them (`PF_INET`,
/// `PF_INET6`).
fn family(ip: &IpAddr) -> u32 {
    match ip {
        IpAddr::V4(_) => 2,
        IpAddr::V6(_) => 10,
    }
}

impl Sweep {
    fn new(a: &Args<'_>) -> Result<Sweep, String> {
        let (Some(ip0), Some(ip1)) = (a.ip(1)?, a.ip(2)?) else {
            return Err("Sweep: a NULL IP address".into());
        };
        let step = a.int(3)?.unwrap_or(1);
        let step = u64::try_from(step)
            .ok()
            .filter(|s| *s > 0)
            .ok_or_else(|| format!("Sweep: step must be positive, not {step}"))?;
        let start = match (ip0.ip(), ip1.ip()) {
            (IpAddr::V4(s), IpAddr::V4(e)) => {
                if s > e {
                    return Err("Sweep: ipv4.end < ipv4.start".into());
                }
                u64::from(u32::from(s))
            }
            (IpAddr::V6(s), IpAddr::V6(e)) => {
                if s > e {
                    return Err("Sweep: ipv6.end < ipv6.start".into());
                }
                u128::from(s) as u64
            }
            (s, e) => {
                return Err(format!(
                    "IPs have different families (0x{:x} vs 0x{:x})",
                    family(&s),
                    family(&e)
                ));
            }
        };
        Ok(Sweep {
            probe: ip0,
            end: ip1.ip(),
            start,
            that: start,
            step,
            count: 0,
        })
    }

    fn reset(&mut self) {
        self.that = self.start;
        self.set_probe();
    }

    fn set_probe(&mut self) {
        let ip = match self.probe.ip() {
            IpAddr::V4(_) => IpAddr::V4((self.that as u32).into()),
            IpAddr::V6(v) => {
                let high = u128::from(v) & !u128::from(u64::MAX);
                IpAddr::V6((high | u128::from(self.that)).into())
            }
        };
        self.probe.set_ip(ip);
    }

    /// Moves to the next address; `false` once past the end. varnishd
    /// wraps around within the stepped bits (and so never ends when `ip1`
    /// is the last address); this stops at the wrap instead.
    fn step(&mut self) -> bool {
        self.count += 1;
        let limit = match self.probe.ip() {
            IpAddr::V4(_) => u64::from(u32::MAX),
            IpAddr::V6(_) => u64::MAX,
        };
        match self.that.checked_add(self.step).filter(|t| *t <= limit) {
            Some(t) => self.that = t,
            None => return false,
        }
        self.set_probe();
        self.probe.ip() <= self.end
    }
}

/// `sweep_acl(acl, ip0, ip1, step)`: the match map of the range, logged
/// and hashed.
pub(super) fn sweep_acl(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let acl = acl_arg(a, 0)?;
    let mut sw = Sweep::new(a)?;
    let mut sha = Sha256::new();
    let mut line = String::new();
    let mut flush = |ctx: &mut dyn Context, line: &mut String| {
        ctx.log(LogKind::Debug, line.as_bytes());
        sha.update(line.as_bytes());
        line.clear();
    };
    for j in 0u64.. {
        if j & 0x3f == 0 {
            line.push_str(&format!("Sweep: {:<15}", sw.probe.ip()));
        }
        let hit = a.vcl().acl_match(ctx, acl, sw.probe)?;
        line.push(if hit { 'X' } else { '-' });
        if j & 0x3f == 0x3f {
            flush(ctx, &mut line);
        }
        if !sw.step() {
            break;
        }
    }
    if !line.is_empty() {
        flush(ctx, &mut line);
    }
    Ok(Value::Blob(Bytes::from(sha.finalize().to_vec())))
}

/// `time_acl(acl, ip0, ip1, step, rounds)`: matches the range once to
/// warm up, then `rounds` times; the time per address matched.
pub(super) fn time_acl(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let acl = acl_arg(a, 0)?;
    let rounds = a.int(4)?.unwrap_or(1000);
    if rounds <= 0 {
        return Err(format!("Timed ACL: rounds must be positive, not {rounds}"));
    }
    let mut sw = Sweep::new(a)?;
    let walk = |sw: &mut Sweep, ctx: &mut dyn Context| -> Result<(), String> {
        loop {
            a.vcl().acl_match(ctx, acl, sw.probe)?;
            if !sw.step() {
                return Ok(());
            }
        }
    };
    walk(&mut sw, ctx)?;
    sw.count = 0;
    // Monotonic seconds, counted from the first timing in the process
    // (varnishd prints its monotonic clock, an equally arbitrary origin).
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    let t0 = origin.elapsed().as_secs_f64();
    for _ in 0..rounds {
        sw.reset();
        walk(&mut sw, ctx)?;
    }
    let t1 = origin.elapsed().as_secs_f64();
    let elapsed = t1 - t0;
    let d = elapsed / sw.count as f64;
    ctx.log(
        LogKind::Debug,
        format!(
            "Timed ACL: {t0:.9} -> {t1:.9} = {elapsed:.9} {:.9}/round, {d:.9}/IP {} IPs",
            elapsed / rounds as f64,
            sw.count
        )
        .as_bytes(),
    );
    Ok(Value::Duration(d))
}
