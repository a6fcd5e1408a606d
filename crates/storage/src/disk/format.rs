//! The on-disk format of the persistent store (`-s mse`/`-s disk`): the
//! store file's header, object records and the ban/purge journal's
//! entries, with their encoders and checking decoders.
//!
//! Everything is little-endian. Each record and journal entry carries its
//! length and a CRC-32C computed over the store's random salt followed by
//! its bytes, so bytes that merely look like a record (a cached body that
//! contains one, a record of an earlier store in a recreated file) are
//! rejected. Decoders never panic and never trust a length field beyond
//! the bytes they were given: they are fuzzed (`fuzz/`).
//!
//! Layout (see ARCHITECTURE.md, "Persistent store"):
//!
//! ```text
//! store file:  [header: 4096 bytes][arena: records and body extents ...]
//! header:      magic "LACQUER-STORE\0\0\0" | version u32 | header size u32
//!              | granularity u64 | arena size u64 | salt u64 | created f64
//!              | crc32c(bytes 0..56) u32
//! record:      "LQO1" | payload length u32 | crc u32 | 0 u32 | payload
//!              (payload: digest, times, vxid, status, flags, reason,
//!              headers, Vary, ESI, body length and CRC, slot length,
//!              body extents)
//! journal:     "LACQUER-BANS\0\0\0\0" | version u32 | salt u64 | crc u32
//!              then entries: "LJ" | kind u8 | 0 u8 | payload length u32
//!              | crc u32 | payload
//! ```

/// The current format version. Readers accept every version up to this
/// one; a file of a newer version is refused (never overwritten).
pub const VERSION: u32 = 1;
/// Bytes before the arena.
pub const HEADER_SIZE: u64 = 4096;
/// The store file's magic.
pub const FILE_MAGIC: &[u8; 16] = b"LACQUER-STORE\0\0\0";
/// An object record's magic.
pub const RECORD_MAGIC: &[u8; 4] = b"LQO1";
/// Bytes of a record before its payload.
pub const RECORD_HEAD: usize = 16;
/// The largest record payload accepted (headers, Vary and ESI data).
pub const MAX_PAYLOAD: usize = 64 << 20;
/// The journal's magic.
pub const JOURNAL_MAGIC: &[u8; 16] = b"LACQUER-BANS\0\0\0\0";
/// Bytes of the journal's header.
pub const JOURNAL_HEAD: usize = 32;
/// Bytes of a journal entry before its payload.
pub const ENTRY_HEAD: usize = 12;

/// Why bytes are not a valid header, record or entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The magic is not there (nothing was written, or it was erased).
    #[error("no record here (magic missing)")]
    NoMagic,
    /// The bytes end before the length says (a torn or truncated write).
    #[error("truncated: the length field says more than was read")]
    Truncated,
    /// The checksum does not match (torn write, or bytes of another store).
    #[error("checksum mismatch")]
    Checksum,
    /// A field is out of range (e.g. a length larger than the record).
    #[error("malformed field: {0}")]
    Malformed(&'static str),
    /// Written by a newer Lacquer.
    #[error("format version {0} is newer than this Lacquer reads ({VERSION})")]
    Version(u32),
}

// ---------------------------------------------------------------- CRC-32C

const fn crc_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut k = 1;
        while k < 8 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            k += 1;
        }
        i += 1;
    }
    t
}

static CRC: [[u32; 256]; 8] = crc_tables();

/// A running CRC-32C (Castagnoli), slicing by 8.
#[derive(Debug, Clone, Copy)]
pub struct Crc(u32);

impl Default for Crc {
    fn default() -> Self {
        Crc(!0)
    }
}

impl Crc {
    /// A CRC seeded with a store's salt.
    pub fn salted(salt: u64) -> Crc {
        let mut c = Crc::default();
        c.update(&salt.to_le_bytes());
        c
    }

    /// Feed bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        let mut c = self.0;
        while data.len() >= 8 {
            let lo = c ^ u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
            c = CRC[7][(lo & 0xff) as usize]
                ^ CRC[6][((lo >> 8) & 0xff) as usize]
                ^ CRC[5][((lo >> 16) & 0xff) as usize]
                ^ CRC[4][(lo >> 24) as usize]
                ^ CRC[3][data[4] as usize]
                ^ CRC[2][data[5] as usize]
                ^ CRC[1][data[6] as usize]
                ^ CRC[0][data[7] as usize];
            data = &data[8..];
        }
        for &b in data {
            c = (c >> 8) ^ CRC[0][((c ^ u32::from(b)) & 0xff) as usize];
        }
        self.0 = c;
    }

    /// The checksum of everything fed.
    pub fn value(self) -> u32 {
        !self.0
    }
}

/// CRC-32C of `data` alone.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut c = Crc::default();
    c.update(data);
    c.value()
}

// ---------------------------------------------------------------- header

/// The store file's header.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FileHeader {
    /// Format version the file was written with.
    pub version: u32,
    /// Allocation unit of the arena.
    pub granularity: u64,
    /// Bytes of the arena (after the header).
    pub arena_size: u64,
    /// Random salt of this store's checksums.
    pub salt: u64,
    /// When the file was laid out (seconds since the epoch).
    pub created: f64,
}

impl FileHeader {
    /// The header's bytes (a whole [`HEADER_SIZE`] block).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_SIZE as usize);
        b.extend_from_slice(FILE_MAGIC);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        b.extend_from_slice(&self.granularity.to_le_bytes());
        b.extend_from_slice(&self.arena_size.to_le_bytes());
        b.extend_from_slice(&self.salt.to_le_bytes());
        b.extend_from_slice(&self.created.to_le_bytes());
        let crc = crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.resize(HEADER_SIZE as usize, 0);
        b
    }

    /// Read a header; `Err(NoMagic)` for a file never laid out (zeros).
    pub fn decode(b: &[u8]) -> Result<FileHeader, FormatError> {
        if b.len() < 60 {
            return Err(FormatError::Truncated);
        }
        if &b[..16] != FILE_MAGIC {
            return Err(FormatError::NoMagic);
        }
        let mut r = Reader::new(&b[16..60]);
        let version = r.u32()?;
        let hsize = r.u32()?;
        let granularity = r.u64()?;
        let arena_size = r.u64()?;
        let salt = r.u64()?;
        let created = r.f64()?;
        let crc = r.u32()?;
        if crc != crc32c(&b[..56]) {
            return Err(FormatError::Checksum);
        }
        if version > VERSION {
            return Err(FormatError::Version(version));
        }
        if u64::from(hsize) != HEADER_SIZE {
            return Err(FormatError::Malformed("header size"));
        }
        if granularity == 0 || !granularity.is_power_of_two() {
            return Err(FormatError::Malformed("granularity"));
        }
        Ok(FileHeader {
            version,
            granularity,
            arena_size,
            salt,
            created,
        })
    }
}

// ---------------------------------------------------------------- records

/// A body extent an object record names: arena offset, extent length and
/// the body bytes at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyExtent {
    /// Offset in the arena.
    pub off: u64,
    /// Length of the extent (whole granules).
    pub len: u64,
    /// Body bytes at its start.
    pub used: u64,
}

/// The `Vary` values an object variant was stored for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VaryRecord {
    /// `Vary: *`: no request matches.
    pub never: bool,
    /// Lower-case header names and the captured values (`None`: absent).
    pub entries: Vec<(String, Option<Vec<u8>>)>,
}

/// Flag bits of [`ObjectRecord::flags`].
pub mod flags {
    /// The stored body is gzipped by the cache.
    pub const GZIP: u8 = 1;
    /// The fetch gzipped or gunzipped the backend's body.
    pub const GZIP_CHANGED: u8 = 2;
}

/// Everything needed to put an object back in the cache.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ObjectRecord {
    /// The objhead digest.
    pub digest: [u8; 32],
    /// When the object entered the cache (bans issued later apply to it).
    pub inserted_at: f64,
    /// `t_origin` of the object.
    pub t_origin: f64,
    /// ttl from `t_origin`.
    pub ttl: f64,
    /// grace after the ttl.
    pub grace: f64,
    /// keep after the grace.
    pub keep: f64,
    /// vxid of the fetch.
    pub vxid: u32,
    /// Response status.
    pub status: u16,
    /// [`flags`] bits.
    pub flags: u8,
    /// Reason phrase.
    pub reason: Vec<u8>,
    /// Response headers in order.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// Vary data of the variant.
    pub vary: Option<VaryRecord>,
    /// ESI instructions.
    pub esi: Option<Vec<u8>>,
    /// Body length.
    pub body_len: u64,
    /// CRC-32C (salted) of the body bytes.
    pub body_crc: u32,
    /// Length of the extent holding the record itself (whole granules, at
    /// least the record's length).
    pub slot_len: u64,
    /// Where the body is, in order.
    pub extents: Vec<BodyExtent>,
}

fn put_bytes16(b: &mut Vec<u8>, v: &[u8]) {
    let n = v.len().min(u16::MAX as usize);
    b.extend_from_slice(&(n as u16).to_le_bytes());
    b.extend_from_slice(&v[..n]);
}

fn put_bytes32(b: &mut Vec<u8>, v: &[u8]) {
    let n = v.len().min(u32::MAX as usize);
    b.extend_from_slice(&(n as u32).to_le_bytes());
    b.extend_from_slice(&v[..n]);
}

impl ObjectRecord {
    /// The payload bytes (without the record head).
    fn payload(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(
            160 + self.reason.len()
                + self
                    .headers
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 6)
                    .sum::<usize>()
                + self.extents.len() * 24,
        );
        b.extend_from_slice(&self.digest);
        for f in [
            self.inserted_at,
            self.t_origin,
            self.ttl,
            self.grace,
            self.keep,
        ] {
            b.extend_from_slice(&f.to_le_bytes());
        }
        b.extend_from_slice(&self.vxid.to_le_bytes());
        b.extend_from_slice(&self.status.to_le_bytes());
        b.push(self.flags);
        put_bytes16(&mut b, &self.reason);
        b.extend_from_slice(&(self.headers.len() as u32).to_le_bytes());
        for (k, v) in &self.headers {
            put_bytes16(&mut b, k);
            put_bytes32(&mut b, v);
        }
        match &self.vary {
            None => b.push(0),
            Some(v) => {
                b.push(if v.never { 2 } else { 1 });
                b.extend_from_slice(&(v.entries.len() as u32).to_le_bytes());
                for (name, val) in &v.entries {
                    put_bytes16(&mut b, name.as_bytes());
                    match val {
                        None => b.push(0),
                        Some(val) => {
                            b.push(1);
                            put_bytes32(&mut b, val);
                        }
                    }
                }
            }
        }
        match &self.esi {
            None => b.push(0),
            Some(e) => {
                b.push(1);
                put_bytes32(&mut b, e);
            }
        }
        b.extend_from_slice(&self.body_len.to_le_bytes());
        b.extend_from_slice(&self.body_crc.to_le_bytes());
        b.extend_from_slice(&self.slot_len.to_le_bytes());
        b.extend_from_slice(&(self.extents.len() as u32).to_le_bytes());
        for x in &self.extents {
            b.extend_from_slice(&x.off.to_le_bytes());
            b.extend_from_slice(&x.len.to_le_bytes());
            b.extend_from_slice(&x.used.to_le_bytes());
        }
        b
    }

    /// The whole record: head (magic, length, salted checksum) and payload.
    pub fn encode(&self, salt: u64) -> Vec<u8> {
        let payload = self.payload();
        let len = payload.len() as u32;
        let mut crc = Crc::salted(salt);
        crc.update(&len.to_le_bytes());
        crc.update(&payload);
        let mut b = Vec::with_capacity(RECORD_HEAD + payload.len());
        b.extend_from_slice(RECORD_MAGIC);
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&crc.value().to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&payload);
        b
    }

    /// The total length of the record starting at `b`, from its head
    /// alone (to know how much to read); checks magic and bounds only.
    pub fn peek_len(b: &[u8]) -> Result<usize, FormatError> {
        if b.len() < RECORD_HEAD {
            return Err(FormatError::Truncated);
        }
        if &b[..4] != RECORD_MAGIC {
            return Err(FormatError::NoMagic);
        }
        let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(FormatError::Malformed("record length"));
        }
        Ok(RECORD_HEAD + len)
    }

    /// The payload of the record at the start of `b`, once its magic,
    /// length, reserved bytes and salted checksum are checked: what both
    /// `decode` and the recovery scan's `summary` read fields from.
    /// Also gives the record's total length.
    fn checked_payload(b: &[u8], salt: u64) -> Result<(&[u8], usize), FormatError> {
        let total = Self::peek_len(b)?;
        let Some(payload) = b.get(RECORD_HEAD..total) else {
            return Err(FormatError::Truncated);
        };
        if b[12..16] != [0; 4] {
            return Err(FormatError::Malformed("reserved bytes"));
        }
        let mut crc = Crc::salted(salt);
        crc.update(&b[4..8]);
        crc.update(payload);
        if crc.value() != u32::from_le_bytes([b[8], b[9], b[10], b[11]]) {
            return Err(FormatError::Checksum);
        }
        Ok((payload, total))
    }

    /// Decode the record at the start of `b` (which may hold more bytes
    /// after it). Checks magic, length, checksum and every field.
    pub fn decode(b: &[u8], salt: u64) -> Result<ObjectRecord, FormatError> {
        let (payload, total) = Self::checked_payload(b, salt)?;
        let mut r = Reader::new(payload);
        let mut rec = ObjectRecord {
            digest: r.array()?,
            inserted_at: r.f64()?,
            t_origin: r.f64()?,
            ttl: r.f64()?,
            grace: r.f64()?,
            keep: r.f64()?,
            vxid: r.u32()?,
            status: r.u16()?,
            flags: r.u8()?,
            reason: r.bytes16()?.to_vec(),
            ..ObjectRecord::default()
        };
        let n = r.count(6)?;
        rec.headers = Vec::with_capacity(n);
        for _ in 0..n {
            let k = r.bytes16()?.to_vec();
            let v = r.bytes32()?.to_vec();
            rec.headers.push((k, v));
        }
        rec.vary = match r.u8()? {
            0 => None,
            t @ (1 | 2) => {
                let n = r.count(3)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let name = std::str::from_utf8(r.bytes16()?)
                        .map_err(|_| FormatError::Malformed("vary header name"))?
                        .to_owned();
                    let val = match r.u8()? {
                        0 => None,
                        1 => Some(r.bytes32()?.to_vec()),
                        _ => return Err(FormatError::Malformed("vary value tag")),
                    };
                    entries.push((name, val));
                }
                Some(VaryRecord {
                    never: t == 2,
                    entries,
                })
            }
            _ => return Err(FormatError::Malformed("vary tag")),
        };
        rec.esi = match r.u8()? {
            0 => None,
            1 => Some(r.bytes32()?.to_vec()),
            _ => return Err(FormatError::Malformed("esi tag")),
        };
        rec.body_len = r.u64()?;
        rec.body_crc = r.u32()?;
        rec.slot_len = r.u64()?;
        if (rec.slot_len as u128) < total as u128 {
            return Err(FormatError::Malformed(
                "record slot shorter than the record",
            ));
        }
        let n = r.count(24)?;
        let mut sum = 0u64;
        for _ in 0..n {
            let x = BodyExtent {
                off: r.u64()?,
                len: r.u64()?,
                used: r.u64()?,
            };
            if x.used > x.len || x.off.checked_add(x.len).is_none() {
                return Err(FormatError::Malformed("body extent"));
            }
            sum = sum.saturating_add(x.used);
            rec.extents.push(x);
        }
        if sum != rec.body_len {
            return Err(FormatError::Malformed("body length"));
        }
        if !r.is_empty() {
            return Err(FormatError::Malformed("trailing bytes"));
        }
        for f in [rec.inserted_at, rec.t_origin, rec.ttl, rec.grace, rec.keep] {
            if !f.is_finite() {
                return Err(FormatError::Malformed("timing"));
            }
        }
        Ok(rec)
    }
}

/// What the recovery scan keeps of a record (see
/// [`ObjectRecord::summary`]): no headers, nothing allocated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordSummary {
    /// The objhead digest.
    pub digest: [u8; 32],
    /// When the object entered the cache.
    pub inserted_at: f64,
    /// `t_origin + ttl + grace + keep`: when it is gone for good.
    pub expires: f64,
    /// Body length.
    pub body_len: u64,
    /// Length of the extent holding the record.
    pub slot_len: u64,
}

impl ObjectRecord {
    /// Check the record at the start of `b` as [`decode`](Self::decode)
    /// does (magic, length, checksum, every field) but keep only what the
    /// recovery scan needs, appending its body extents to `extents` (on an
    /// error `extents` is left as it was).
    pub fn summary(
        b: &[u8],
        salt: u64,
        extents: &mut Vec<BodyExtent>,
    ) -> Result<RecordSummary, FormatError> {
        let (payload, total) = Self::checked_payload(b, salt)?;
        let mut r = Reader::new(payload);
        let digest = r.array()?;
        let inserted_at = r.f64()?;
        let (t_origin, ttl, grace, keep) = (r.f64()?, r.f64()?, r.f64()?, r.f64()?);
        for f in [inserted_at, t_origin, ttl, grace, keep] {
            if !f.is_finite() {
                return Err(FormatError::Malformed("timing"));
            }
        }
        r.take(4 + 2 + 1)?;
        r.bytes16()?;
        for _ in 0..r.count(6)? {
            r.bytes16()?;
            r.bytes32()?;
        }
        match r.u8()? {
            0 => {}
            1 | 2 => {
                for _ in 0..r.count(3)? {
                    std::str::from_utf8(r.bytes16()?)
                        .map_err(|_| FormatError::Malformed("vary header name"))?;
                    match r.u8()? {
                        0 => {}
                        1 => {
                            r.bytes32()?;
                        }
                        _ => return Err(FormatError::Malformed("vary value tag")),
                    }
                }
            }
            _ => return Err(FormatError::Malformed("vary tag")),
        }
        match r.u8()? {
            0 => {}
            1 => {
                r.bytes32()?;
            }
            _ => return Err(FormatError::Malformed("esi tag")),
        }
        let body_len = r.u64()?;
        r.u32()?;
        let slot_len = r.u64()?;
        if (slot_len as u128) < total as u128 {
            return Err(FormatError::Malformed(
                "record slot shorter than the record",
            ));
        }
        let n = r.count(24)?;
        let mark = extents.len();
        let mut sum = 0u64;
        for _ in 0..n {
            let x = BodyExtent {
                off: r.u64()?,
                len: r.u64()?,
                used: r.u64()?,
            };
            if x.used > x.len || x.off.checked_add(x.len).is_none() {
                extents.truncate(mark);
                return Err(FormatError::Malformed("body extent"));
            }
            sum = sum.saturating_add(x.used);
            extents.push(x);
        }
        if sum != body_len || !r.is_empty() {
            extents.truncate(mark);
            return Err(FormatError::Malformed("body length"));
        }
        Ok(RecordSummary {
            digest,
            inserted_at,
            expires: t_origin + ttl + grace + keep,
            body_len,
            slot_len,
        })
    }
}

// ---------------------------------------------------------------- journal

/// One entry of the ban/purge journal.
#[derive(Debug, Clone, PartialEq)]
pub enum JournalEntry {
    /// A ban, as its expression text.
    Ban {
        /// When it was issued.
        time: f64,
        /// The expression (`ban.list` form).
        text: String,
    },
    /// A purge of one objhead (hard when ttl, grace and keep are 0).
    Purge {
        /// When it was issued.
        time: f64,
        /// The objhead digest.
        digest: [u8; 32],
        /// New ttl (negative: unchanged).
        ttl: f64,
        /// New grace (negative: unchanged).
        grace: f64,
        /// New keep (negative: unchanged).
        keep: f64,
    },
}

impl JournalEntry {
    /// When it was issued.
    pub fn time(&self) -> f64 {
        match self {
            JournalEntry::Ban { time, .. } | JournalEntry::Purge { time, .. } => *time,
        }
    }

    /// The entry's bytes.
    pub fn encode(&self, salt: u64) -> Vec<u8> {
        let mut p = Vec::new();
        let kind = match self {
            JournalEntry::Ban { time, text } => {
                p.extend_from_slice(&time.to_le_bytes());
                p.extend_from_slice(text.as_bytes());
                1u8
            }
            JournalEntry::Purge {
                time,
                digest,
                ttl,
                grace,
                keep,
            } => {
                p.extend_from_slice(&time.to_le_bytes());
                p.extend_from_slice(digest);
                for f in [ttl, grace, keep] {
                    p.extend_from_slice(&f.to_le_bytes());
                }
                2u8
            }
        };
        let len = p.len() as u32;
        let mut crc = Crc::salted(salt);
        crc.update(&[kind]);
        crc.update(&len.to_le_bytes());
        crc.update(&p);
        let mut b = Vec::with_capacity(ENTRY_HEAD + p.len());
        b.extend_from_slice(b"LJ");
        b.push(kind);
        b.push(0);
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&crc.value().to_le_bytes());
        b.extend_from_slice(&p);
        b
    }

    /// Decode the entry at the start of `b`; returns it and its length.
    pub fn decode(b: &[u8], salt: u64) -> Result<(JournalEntry, usize), FormatError> {
        if b.len() < ENTRY_HEAD {
            return Err(FormatError::Truncated);
        }
        if &b[..2] != b"LJ" {
            return Err(FormatError::NoMagic);
        }
        let kind = b[2];
        let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(FormatError::Malformed("entry length"));
        }
        let Some(p) = b.get(ENTRY_HEAD..ENTRY_HEAD + len) else {
            return Err(FormatError::Truncated);
        };
        let mut crc = Crc::salted(salt);
        crc.update(&[kind]);
        crc.update(&b[4..8]);
        crc.update(p);
        if crc.value() != u32::from_le_bytes([b[8], b[9], b[10], b[11]]) {
            return Err(FormatError::Checksum);
        }
        let mut r = Reader::new(p);
        let time = r.f64()?;
        if !time.is_finite() {
            return Err(FormatError::Malformed("entry time"));
        }
        let e = match kind {
            1 => JournalEntry::Ban {
                time,
                text: std::str::from_utf8(r.rest())
                    .map_err(|_| FormatError::Malformed("ban text"))?
                    .to_owned(),
            },
            2 => {
                let e = JournalEntry::Purge {
                    time,
                    digest: r.array()?,
                    ttl: r.f64()?,
                    grace: r.f64()?,
                    keep: r.f64()?,
                };
                if !r.is_empty() {
                    return Err(FormatError::Malformed("trailing bytes"));
                }
                e
            }
            _ => return Err(FormatError::Malformed("entry kind")),
        };
        Ok((e, ENTRY_HEAD + len))
    }
}

/// The journal's header for a store of `salt`.
pub fn journal_header(salt: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(JOURNAL_HEAD);
    b.extend_from_slice(JOURNAL_MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&salt.to_le_bytes());
    let crc = crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Read a journal: its salt and the entries up to the first invalid one,
/// with the length of the valid prefix (a torn tail is cut there).
pub fn decode_journal(b: &[u8]) -> Result<(u64, Vec<JournalEntry>, usize), FormatError> {
    if b.len() < JOURNAL_HEAD {
        return Err(FormatError::Truncated);
    }
    if &b[..16] != JOURNAL_MAGIC {
        return Err(FormatError::NoMagic);
    }
    let mut r = Reader::new(&b[16..JOURNAL_HEAD]);
    let version = r.u32()?;
    let salt = r.u64()?;
    if r.u32()? != crc32c(&b[..28]) {
        return Err(FormatError::Checksum);
    }
    if version > VERSION {
        return Err(FormatError::Version(version));
    }
    let mut at = JOURNAL_HEAD;
    let mut out = Vec::new();
    while at < b.len() {
        match JournalEntry::decode(&b[at..], salt) {
            Ok((e, n)) => {
                out.push(e);
                at += n;
            }
            Err(_) => break,
        }
    }
    Ok((salt, out, at))
}

// ---------------------------------------------------------------- reader

/// A bounds-checked little-endian reader.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Self {
        Reader { b }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if self.b.len() < n {
            return Err(FormatError::Truncated);
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn f64(&mut self) -> Result<f64, FormatError> {
        Ok(f64::from_le_bytes(self.array()?))
    }

    fn bytes16(&mut self) -> Result<&'a [u8], FormatError> {
        let n = self.u16()? as usize;
        self.take(n)
    }

    fn bytes32(&mut self) -> Result<&'a [u8], FormatError> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// A count of items of at least `min` bytes each, checked against the
    /// bytes left so that a forged count cannot make a huge allocation.
    fn count(&mut self, min: usize) -> Result<usize, FormatError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.b.len() {
            return Err(FormatError::Malformed("count larger than the record"));
        }
        Ok(n)
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.b)
    }

    fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ObjectRecord {
        ObjectRecord {
            digest: [7; 32],
            inserted_at: 1_700_000_000.5,
            t_origin: 1_700_000_000.0,
            ttl: 120.0,
            grace: 10.0,
            keep: 3600.0,
            vxid: 1002,
            status: 200,
            flags: flags::GZIP,
            reason: b"OK".to_vec(),
            headers: vec![
                (b"Content-Type".to_vec(), b"text/html".to_vec()),
                (b"Vary".to_vec(), b"Accept-Language".to_vec()),
            ],
            vary: Some(VaryRecord {
                never: false,
                entries: vec![
                    ("accept-language".into(), Some(b"fr".to_vec())),
                    ("x-absent".into(), None),
                ],
            }),
            esi: Some(b"esi-bytes".to_vec()),
            body_len: 5000,
            body_crc: 0xdead_beef,
            slot_len: 4096,
            extents: vec![
                BodyExtent {
                    off: 4096,
                    len: 4096,
                    used: 4096,
                },
                BodyExtent {
                    off: 16384,
                    len: 4096,
                    used: 904,
                },
            ],
        }
    }

    #[test]
    fn crc32c_known_values() {
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31) as u8).collect();
        let mut c = Crc::default();
        c.update(&data[..333]);
        c.update(&data[333..]);
        assert_eq!(c.value(), crc32c(&data));
    }

    #[test]
    fn record_round_trips() {
        let r = sample();
        let mut b = r.encode(42);
        assert_eq!(ObjectRecord::peek_len(&b).unwrap(), b.len());
        b.extend_from_slice(&[0xaa; 100]);
        assert_eq!(ObjectRecord::decode(&b, 42).unwrap(), r);
        let never = ObjectRecord {
            vary: Some(VaryRecord {
                never: true,
                entries: vec![],
            }),
            esi: None,
            ..sample()
        };
        assert_eq!(ObjectRecord::decode(&never.encode(1), 1).unwrap(), never);
    }

    #[test]
    fn record_rejects_damage() {
        let b = sample().encode(42);
        // Another store's salt.
        assert_eq!(ObjectRecord::decode(&b, 43), Err(FormatError::Checksum));
        // Every truncation.
        for n in 0..b.len() {
            assert!(ObjectRecord::decode(&b[..n], 42).is_err(), "{n}");
        }
        // Every single bit flip.
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(ObjectRecord::decode(&c, 42).is_err(), "{i}");
        }
        // Erased magic, as a dropped object's record is.
        let mut c = b.clone();
        c[..8].fill(0);
        assert_eq!(ObjectRecord::decode(&c, 42), Err(FormatError::NoMagic));
    }

    /// The fuzz target's property over deterministic mutations of valid
    /// records and journals (the `disk_format` target explores further).
    #[test]
    fn mutated_input_is_refused_or_round_trips() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let rec = sample().encode(5);
        let mut journal = journal_header(5);
        journal.extend_from_slice(
            &JournalEntry::Ban {
                time: 1.0,
                text: "req.url ~ /".into(),
            }
            .encode(5),
        );
        for round in 0..20_000 {
            let base = if round % 2 == 0 { &rec } else { &journal };
            let mut b = base.clone();
            for _ in 0..=(rnd() % 4) {
                match rnd() % 3 {
                    0 if !b.is_empty() => {
                        let i = (rnd() as usize) % b.len();
                        b[i] = rnd() as u8;
                    }
                    1 => b.truncate((rnd() as usize) % (b.len() + 1)),
                    _ => b.push(rnd() as u8),
                }
            }
            // Half the records get a valid checksum again, so that the
            // field decoders see the damage.
            if round % 4 == 0 && b.len() >= RECORD_HEAD {
                let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
                if let Some(p) = b.get(RECORD_HEAD..RECORD_HEAD.saturating_add(len)) {
                    let mut c = Crc::salted(5);
                    c.update(&b[4..8]);
                    c.update(p);
                    let v = c.value().to_le_bytes();
                    b[8..12].copy_from_slice(&v);
                }
            }
            if let Ok(r) = ObjectRecord::decode(&b, 5) {
                let len = ObjectRecord::peek_len(&b).unwrap();
                assert_eq!(r.encode(5), &b[..len]);
            }
            let _ = FileHeader::decode(&b);
            let _ = JournalEntry::decode(&b, 5);
            if let Ok((_, es, valid)) = decode_journal(&b) {
                assert!(valid <= b.len() && es.len() <= b.len());
            }
        }
    }

    #[test]
    fn header_round_trips_and_refuses_newer() {
        let h = FileHeader {
            version: VERSION,
            granularity: 4096,
            arena_size: 1 << 30,
            salt: 99,
            created: 1.5,
        };
        let b = h.encode();
        assert_eq!(b.len() as u64, HEADER_SIZE);
        assert_eq!(FileHeader::decode(&b).unwrap(), h);
        assert_eq!(
            FileHeader::decode(&vec![0; 4096]),
            Err(FormatError::NoMagic)
        );
        let newer = FileHeader { version: 9, ..h }.encode();
        assert_eq!(FileHeader::decode(&newer), Err(FormatError::Version(9)));
        let mut bad = b.clone();
        bad[30] ^= 1;
        assert_eq!(FileHeader::decode(&bad), Err(FormatError::Checksum));
    }

    #[test]
    fn journal_round_trips_and_cuts_a_torn_tail() {
        let e1 = JournalEntry::Ban {
            time: 5.0,
            text: "obj.http.x ~ y".into(),
        };
        let e2 = JournalEntry::Purge {
            time: 6.0,
            digest: [3; 32],
            ttl: 0.0,
            grace: 0.0,
            keep: 0.0,
        };
        let mut b = journal_header(8);
        b.extend_from_slice(&e1.encode(8));
        b.extend_from_slice(&e2.encode(8));
        let full = b.len();
        let (salt, es, valid) = decode_journal(&b).unwrap();
        assert_eq!((salt, es, valid), (8, vec![e1.clone(), e2.clone()], full));
        let torn = &b[..full - 3];
        let (_, es, valid) = decode_journal(torn).unwrap();
        assert_eq!(es, vec![e1]);
        assert_eq!(valid, full - e2.encode(8).len());
    }
}
