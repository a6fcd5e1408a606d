#![no_main]
//! libFuzzer target for `lacquer_fuzzing::tls_ja3` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::tls_ja3(data));
