//! Fuzzes the VSL query parser (and evaluation of whatever parses) with
//! arbitrary text: it must return errors, never panic or hang.

#![no_main]

use lacquer_vsl::group::{Transaction, TxType};
use lacquer_vsl::{Query, Record, Tag, Vxid};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(q) = Query::parse(&text) {
        let group = vec![Transaction {
            level: 1,
            vxid: 1001,
            parent: 1000,
            tx_type: TxType::Request,
            reason: "rxreq".to_string(),
            records: vec![
                Record::new(Tag::ReqURL, Vxid::client(1001), "/index.html"),
                Record::new(Tag::ReqHeader, Vxid::client(1001), "Host: example.com"),
                Record::new(Tag::Timestamp, Vxid::client(1001), "Resp: 1.5 0.25 0.125"),
                Record::new(Tag::RespStatus, Vxid::client(1001), "200"),
            ],
        }];
        let _ = q.matches(&group);
    }
});
