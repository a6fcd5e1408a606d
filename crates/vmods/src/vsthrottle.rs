//! `vmod_vsthrottle` (varnish-modules): per-key rate limiting with token
//! buckets shared by every task of the process.
//!
//! A bucket is identified by (key, limit, period, block) and holds up to
//! `limit` tokens, refilled at `limit` per `period`; `is_denied` takes one.
//! With a `block` duration, an empty bucket refuses everything for that
//! long. Idle buckets are dropped now and then to bound memory.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use lacquer_vcl::exec::{Context, Value};

use crate::args::Args;
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module vsthrottle
$Function BOOL is_denied(STRING key, INT limit, DURATION period, DURATION block=0)
$Function VOID return_token(STRING key, INT limit, DURATION period, DURATION block=0)
$Function INT remaining(STRING key, INT limit, DURATION period, DURATION block=0)
$Function DURATION blocked(STRING key, INT limit, DURATION period, DURATION block)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("is_denied", is_denied as FuncImpl),
        ("return_token", return_token),
        ("remaining", remaining),
        ("blocked", blocked),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

#[derive(Clone, Debug)]
struct Bucket {
    tokens: u64,
    capacity: u64,
    period: f64,
    last_used: f64,
    blocked_until: f64,
}

impl Bucket {
    /// Adds the tokens earned since the last successful take.
    fn refill(&mut self, now: f64) {
        let delta = (now - self.last_used).max(0.0);
        let earned = (delta / self.period) * self.capacity as f64;
        if earned >= 1.0 {
            self.tokens = (self.tokens + earned as u64).min(self.capacity);
        }
    }
}

type BucketKey = (Vec<u8>, i64, u64, u64);

struct Table {
    buckets: HashMap<BucketKey, Bucket>,
    calls: u64,
}

fn table() -> &'static Mutex<Table> {
    static T: OnceLock<Mutex<Table>> = OnceLock::new();
    T.get_or_init(|| {
        Mutex::new(Table {
            buckets: HashMap::new(),
            calls: 0,
        })
    })
}

/// Runs `f` on the bucket for the call's arguments (created full).
fn with_bucket<T>(
    ctx: &dyn Context,
    a: &Args<'_>,
    f: impl FnOnce(&mut Bucket, f64) -> T,
) -> Result<T, String> {
    let key = a.str_or_empty(0)?.to_vec();
    let limit = a.int(1)?.unwrap_or(0);
    let period = a.duration(2)?.unwrap_or(0.0);
    let block = a.duration(3)?.unwrap_or(0.0);
    let now = ctx.now();
    let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
    t.calls += 1;
    if t.calls.is_multiple_of(4096) {
        t.buckets
            .retain(|_, b| now - b.last_used < b.period * 2.0 || b.blocked_until > now);
    }
    let b = t
        .buckets
        .entry((key, limit, period.to_bits(), block.to_bits()))
        .or_insert_with(|| Bucket {
            tokens: limit as u64,
            capacity: limit as u64,
            period,
            last_used: now,
            blocked_until: 0.0,
        });
    Ok(f(b, now))
}

/// A limit or period that is not positive: no bucket is kept for it, as in
/// varnish-modules (the call is denied, `remaining()` is the limit as an
/// unsigned number, nothing is blocked); no VCL failure.
fn invalid(a: &Args<'_>) -> Result<Option<i64>, String> {
    let limit = a.int(1)?.unwrap_or(0);
    let period = a.duration(2)?.unwrap_or(0.0);
    Ok((limit <= 0 || period <= 0.0 || !period.is_finite()).then_some(limit))
}

fn is_denied(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    if invalid(a)?.is_some() {
        return Ok(Value::Bool(true));
    }
    let block = a.duration(3)?.unwrap_or(0.0);
    let denied = with_bucket(ctx, a, |b, now| {
        if b.blocked_until > now {
            return true;
        }
        b.refill(now);
        if b.tokens > 0 {
            b.tokens -= 1;
            b.last_used = now;
            false
        } else {
            if block > 0.0 {
                b.blocked_until = now + block;
            }
            true
        }
    })?;
    Ok(Value::Bool(denied))
}

fn return_token(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    if invalid(a)?.is_some() {
        return Ok(Value::Null);
    }
    with_bucket(ctx, a, |b, _| {
        if b.tokens < b.capacity {
            b.tokens += 1;
        }
    })?;
    Ok(Value::Null)
}

fn remaining(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    if let Some(limit) = invalid(a)? {
        return Ok(Value::Int(i64::from(limit as u32)));
    }
    let n = with_bucket(ctx, a, |b, now| {
        b.refill(now);
        b.tokens
    })?;
    Ok(Value::Int(n as i64))
}

fn blocked(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    if invalid(a)?.is_some() {
        return Ok(Value::Duration(0.0));
    }
    let d = with_bucket(ctx, a, |b, now| (b.blocked_until - now).max(0.0))?;
    Ok(Value::Duration(d))
}
