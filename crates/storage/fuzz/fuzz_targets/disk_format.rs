//! The persistent store's on-disk format: any bytes given to the record,
//! header and journal decoders are decoded or refused, never a panic and
//! never an allocation larger than the input allows; a record that decodes
//! encodes back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lacquer_storage::disk::format::{FileHeader, JournalEntry, ObjectRecord, decode_journal};

fuzz_target!(|data: &[u8]| {
    let salt = 0x5eed;
    if let Ok(r) = ObjectRecord::decode(data, salt) {
        let len = ObjectRecord::peek_len(data).unwrap();
        assert_eq!(r.encode(salt), &data[..len]);
    }
    let _ = FileHeader::decode(data);
    let _ = JournalEntry::decode(data, salt);
    if let Ok((_, entries, valid)) = decode_journal(data) {
        assert!(valid <= data.len());
        assert!(entries.len() <= data.len());
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = lacquer_storage::disk::conf::MseConf::parse(text);
    }
});
