#![no_main]
//! libFuzzer target for `lacquer_fuzzing::mse_conf` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::mse_conf(data));
