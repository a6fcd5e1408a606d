//! Fuzz the shared-memory index reader (`_.vsm_mgt/_.index`, read by
//! `lacquer adm -n`): any text must give an answer without panicking, and
//! never a file name outside the directory.
#![no_main]

use lacquer_vsl::vsm::live_segment;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for (class, ident) in [("Arg", "-T"), ("Arg", "-S"), ("Stat", "")] {
        if let Some(f) = live_segment(&text, class, ident) {
            assert!(f.starts_with("_.") && !f.contains('/'));
        }
    }
});
