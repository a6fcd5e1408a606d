#![no_main]
//! libFuzzer target for `lacquer_fuzzing::h2_frames` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::h2_frames(data));
