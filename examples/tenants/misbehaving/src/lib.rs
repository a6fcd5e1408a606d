//! A tenant that misbehaves on purpose, to show the sandbox holding:
//! `/loop` spins forever (stopped by its budget), `/bomb` allocates
//! without end (trapped at `max_memory`), `/oob` reads outside its
//! memory (trapped), anything else answers normally.

use lacquer_guest::{req, synth};

#[unsafe(no_mangle)]
pub extern "C" fn on_recv() {
    match req().url().as_str() {
        "/loop" => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        "/bomb" => {
            let mut keep: Vec<Vec<u8>> = Vec::new();
            loop {
                keep.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&keep);
            }
        }
        "/oob" => {
            let p = 0xffff_fff0usize as *const u64;
            // SAFETY: deliberately not: this address is outside the
            // module's memory, and the sandbox turns the read into a trap.
            let v = unsafe { std::ptr::read_volatile(p) };
            std::hint::black_box(v);
        }
        _ => synth(200, "well behaved"),
    }
}
