//! Fuzzes varnishhist profile definitions (`lacquer hist -P`): any string
//! must give a profile or an error, never panic.

#![no_main]

use lacquer_tools::hist::Profile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = Profile::parse(s);
    }
});
