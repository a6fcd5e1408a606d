#![no_main]
//! libFuzzer target for `lacquer_fuzzing::vsl_query` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::vsl_query(data));
