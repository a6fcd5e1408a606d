#![no_main]
//! libFuzzer target for `lacquer_fuzzing::file_read` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::file_read(data));
