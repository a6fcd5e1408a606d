//! Fuzz target `h2frame`: arbitrary bytes as HTTP/2 frames (a 9-byte
//! header, then the payload) through the runner's frame parser, checking:
//! - the frame header re-encodes to the same 9 bytes;
//! - a parsed DATA, HEADERS or PUSH_PROMISE frame accounts for every
//!   payload byte (pad-length byte, padding, priority or promised stream,
//!   and content);
//! - fixed-size frames only parse at their exact size.
#![no_main]

use lacquer_vtc::h2::frame::{self, Head, Meta, flags, types};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let mut h9 = [0u8; 9];
    h9.copy_from_slice(&data[..9]);
    let head = Head::parse(&h9);
    assert_eq!(head.encode(), h9);
    let payload = &data[9..];
    let Ok(meta) = frame::parse(head.typ, head.flags, payload) else {
        return;
    };
    let padded = head.flags & flags::PADDED != 0;
    match meta {
        Meta::Data { padded: p, body } => {
            let extra = if padded { 1 + usize::from(p) } else { 0 };
            assert_eq!(body.len() + extra, payload.len());
        }
        Meta::Headers {
            padded: p,
            prio,
            promised,
            block,
        } => {
            let mut extra = 0;
            if padded && head.typ != types::CONTINUATION {
                extra += 1 + usize::from(p);
            }
            if prio.is_some() {
                extra += 5;
            }
            if promised.is_some() {
                extra += 4;
            }
            assert_eq!(block.len() + extra, payload.len());
        }
        Meta::Priority(_) => assert_eq!(payload.len(), 5),
        Meta::Rst(_) | Meta::WinUp(_) => assert_eq!(payload.len(), 4),
        Meta::Ping { .. } => assert_eq!(payload.len(), 8),
        Meta::Settings { pairs, .. } => assert_eq!(pairs.len() * 6, payload.len()),
        Meta::Goaway { debug, .. } => {
            assert_eq!(8 + debug.map_or(0, |d| d.len()), payload.len());
        }
    }
    let wire = frame::encode(head.typ, head.flags, head.stream, payload).unwrap();
    assert_eq!(&wire[9..], payload);
});
