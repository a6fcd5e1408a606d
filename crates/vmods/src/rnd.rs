//! The testable pseudo-random generator behind `std.random()` and the
//! random directors: the additive-feedback generator (x³¹ + x³ + 1) of the
//! BSD `random(3)` family that varnishd uses, so that after `debug.srandom`
//! (seed 1 by default) the suite sees exactly the numbers varnishd gives.
//!
//! Not for cryptography. Seeded from the clock at first use.

use std::sync::Mutex;

const DEG: usize = 31;
const SEP: usize = 3;

struct State {
    table: [u32; DEG],
    front: usize,
    rear: usize,
}

impl State {
    /// Seeds the table with the Park–Miller minimal standard generator and
    /// stirs it, as `srandom()` does.
    fn seeded(seed: u32) -> State {
        let mut table = [0u32; DEG];
        table[0] = seed;
        for i in 1..DEG {
            table[i] = park_miller(table[i - 1]);
        }
        let mut s = State {
            table,
            front: SEP,
            rear: 0,
        };
        for _ in 0..10 * DEG {
            s.next();
        }
        s
    }

    /// The next 31-bit value.
    fn next(&mut self) -> u32 {
        let v = self.table[self.front].wrapping_add(self.table[self.rear]);
        self.table[self.front] = v;
        self.front = (self.front + 1) % DEG;
        self.rear = (self.rear + 1) % DEG;
        v >> 1
    }
}

/// One step of x ← 16807·x mod (2³¹−1), computed in 31-bit arithmetic,
/// over the input mapped to [1, 2³¹−2] and the output mapped back to
/// start at 0.
fn park_miller(prev: u32) -> u32 {
    let x = (prev % 0x7fff_fffe) as i64 + 1;
    let mut v = 16807 * (x % 127_773) - 2836 * (x / 127_773);
    if v < 0 {
        v += 0x7fff_ffff;
    }
    (v - 1) as u32
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Restarts the sequence from `seed` (`debug.srandom`).
pub fn seed(seed: u32) {
    *STATE.lock().unwrap_or_else(|e| e.into_inner()) = Some(State::seeded(seed));
}

/// The next value in [0, 2³¹).
pub fn next_u31() -> u32 {
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    st.get_or_insert_with(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u32)
            .unwrap_or(1);
        State::seeded(t)
    })
    .next()
}

/// A value in [0, 1) from one draw (the random director's).
pub fn next_unit() -> f64 {
    next_u31() as f64 / (1u64 << 31) as f64
}

/// A value in [0, 1) built from two draws, as varnishd's testable double.
pub fn next_f64() -> f64 {
    let hi = next_u31() as f64;
    let lo = next_u31() as f64;
    hi / (1u64 << 31) as f64 + lo / (1u64 << 62) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// std_b00001.vtc: after `debug.srandom` the first std.random(0, 1)
    /// reads 0.656 with three decimals.
    #[test]
    fn seeded_sequence_matches_varnishd() {
        seed(1);
        let r = next_f64();
        assert_eq!(format!("{r:.3}"), "0.656");
        assert!((0.0..1.0).contains(&r));
    }
}
