//! Fuzzes varnishncsa format parsing (`lacquer ncsa -F`): any string must
//! parse or give an error, never panic, in text and JSON mode.

#![no_main]

use lacquer_tools::ncsa::format::Format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = Format::parse(s, false);
        let _ = Format::parse(s, true);
    }
});
