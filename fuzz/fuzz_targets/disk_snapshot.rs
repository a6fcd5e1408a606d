#![no_main]
//! libFuzzer target for `lacquer_fuzzing::disk_snapshot` (see crates/fuzzing).
libfuzzer_sys::fuzz_target!(|data: &[u8]| lacquer_fuzzing::disk_snapshot(data));
