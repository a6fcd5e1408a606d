#![no_main]
//! libFuzzer target for `lacquer_fuzzing::arena` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::arena(data));
