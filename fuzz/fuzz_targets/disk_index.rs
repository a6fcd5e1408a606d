#![no_main]
//! libFuzzer target for `lacquer_fuzzing::disk_index` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::disk_index(data));
