//! Log records as readers see them, and transaction ids (VXIDs) with the
//! client/backend marker bits Varnish keeps next to the id.

use crate::tags::Tag;

/// Marker bit: record belongs to a client-side transaction (session/request).
pub const CLIENT_MARKER: u32 = 1 << 30;
/// Marker bit: record belongs to a backend-side transaction.
pub const BACKEND_MARKER: u32 = 1 << 31;
/// Mask of the id part of a marked VXID.
pub const VXID_MASK: u32 = !(CLIENT_MARKER | BACKEND_MARKER);

/// A transaction id together with its side marker, as stored in records.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Vxid(u32);

impl Vxid {
    /// Id 0 without marker: non-transactional records (CLI, Backend_health).
    pub const NONE: Vxid = Vxid(0);

    /// A client-side (session or request) transaction id.
    pub fn client(id: u32) -> Vxid {
        Vxid((id & VXID_MASK) | CLIENT_MARKER)
    }

    /// A backend-side transaction id.
    pub fn backend(id: u32) -> Vxid {
        Vxid((id & VXID_MASK) | BACKEND_MARKER)
    }

    /// An id without side marker.
    pub fn plain(id: u32) -> Vxid {
        Vxid(id & VXID_MASK)
    }

    /// From the raw stored word (id plus marker bits).
    pub fn from_raw(raw: u32) -> Vxid {
        Vxid(raw)
    }

    /// Raw stored word.
    pub fn raw(self) -> u32 {
        self.0
    }

    /// The id without markers.
    pub fn id(self) -> u32 {
        self.0 & VXID_MASK
    }

    /// Which side the record is marked for.
    pub fn side(self) -> Side {
        if self.0 & CLIENT_MARKER != 0 {
            Side::Client
        } else if self.0 & BACKEND_MARKER != 0 {
            Side::Backend
        } else {
            Side::None
        }
    }
}

/// Side marker of a record.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Side {
    /// Client transaction (`c` in varnishlog raw output).
    Client,
    /// Backend transaction (`b`).
    Backend,
    /// Neither (`-`).
    None,
}

impl Side {
    /// The letter varnishlog prints for this side.
    pub fn letter(self) -> char {
        match self {
            Side::Client => 'c',
            Side::Backend => 'b',
            Side::None => '-',
        }
    }
}

/// One log record, copied out of the shared memory.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Record {
    /// Tag.
    pub tag: Tag,
    /// Transaction id with side marker.
    pub vxid: Vxid,
    /// Payload bytes (no terminator).
    pub data: Vec<u8>,
}

impl Record {
    /// Builds a record (used by tests and by tools replaying logs).
    pub fn new(tag: Tag, vxid: Vxid, data: impl Into<Vec<u8>>) -> Record {
        Record {
            tag,
            vxid,
            data: data.into(),
        }
    }

    /// Payload as text (lossy for non-UTF-8 bytes).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers() {
        assert_eq!(Vxid::client(1001).id(), 1001);
        assert_eq!(Vxid::client(1001).side(), Side::Client);
        assert_eq!(Vxid::backend(1002).side(), Side::Backend);
        assert_eq!(Vxid::NONE.side(), Side::None);
        assert_eq!(Vxid::from_raw(Vxid::backend(7).raw()), Vxid::backend(7));
        assert_eq!(Vxid::plain(u32::MAX).id(), VXID_MASK);
        assert_eq!(Side::Backend.letter(), 'b');
    }
}
