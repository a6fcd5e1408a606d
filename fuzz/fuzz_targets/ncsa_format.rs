#![no_main]
//! libFuzzer target for `lacquer_fuzzing::ncsa_format` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::ncsa_format(data));
