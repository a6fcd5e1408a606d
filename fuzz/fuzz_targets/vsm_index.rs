#![no_main]
//! libFuzzer target for `lacquer_fuzzing::vsm_index` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::vsm_index(data));
