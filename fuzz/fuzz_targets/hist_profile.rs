#![no_main]
//! libFuzzer target for `lacquer_fuzzing::hist_profile` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::hist_profile(data));
