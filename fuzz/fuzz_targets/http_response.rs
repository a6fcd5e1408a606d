#![no_main]
//! libFuzzer target for `lacquer_fuzzing::http_response` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::http_response(data));
