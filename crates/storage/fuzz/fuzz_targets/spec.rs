//! `-s` arguments and byte counts: any text is parsed or refused with a
//! message, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = lacquer_storage::spec::vnum_bytes(text);
    let _ = lacquer_storage::parse_size(text);
    let args: Vec<&str> = text.split('\n').collect();
    if let Ok(specs) = lacquer_storage::parse_storage_args(&args) {
        assert!(specs.iter().any(|s| s.name == "Transient"));
    }
});
