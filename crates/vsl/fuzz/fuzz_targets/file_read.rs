//! Fuzz the binary log file reader (`lacquer log -r`): any input must
//! either be refused or read to its end without panicking.
#![no_main]

use lacquer_vsl::file::FileReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut r) = FileReader::new(data) {
        let mut n = 0usize;
        while let Ok(Some(_)) = r.next_record() {
            n += 1;
            assert!(n <= data.len());
        }
    }
});
