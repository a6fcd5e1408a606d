//! An ordered header list that keeps the wire order and spelling of every field.
//!
//! Parsed headers do not own their bytes: each name and value is a range into one
//! shared, reference-counted buffer (the received message head), so parsing a head
//! costs one `Vec` of small entries and no per-header allocation. Fields added or
//! replaced later (by the cache, by vmods) own their bytes as a [`Bytes`]; values
//! VCL sets are copied into one growing buffer of the list (as varnishd puts them
//! in the task's workspace), where a value set again over a longer or equal one
//! takes its place: a chain of `set`s allocates nothing once the buffer is grown.
//!
//! Names compare ASCII-case-insensitively, as in Varnish; values are raw bytes.
//! Each field also carries Varnish's "filter" mark (`HDF_FILTER`): a field named in
//! the `Connection` header is marked by [`crate::do_connection`] and left out when
//! the message is copied with [`Headers::copy_filtered`], while staying visible
//! to VCL in the meantime, as in varnishd.

use std::fmt;

use bytes::Bytes;

/// Where the bytes of a header name or value live. Kept small (12 bytes) so a
/// parsed head's field list stays compact and cheap to clone.
#[derive(Clone, Copy)]
enum Slot {
    /// A range of the shared buffer.
    Buf(u32, u32),
    /// An index into the owned values.
    Own(u32),
    /// A range of the list's own buffer of copied values.
    Local(u32, u32),
}

#[derive(Clone, Copy)]
struct Field {
    name: Slot,
    value: Slot,
    /// [`name_key`] of the name: a lookup compares names only when the
    /// keys agree, without reaching for the name's bytes.
    key: u32,
    filtered: bool,
}

/// A cheap filter for case-insensitive name comparison: the name's length
/// and its first and last bytes, lowercased. Names with different keys
/// differ; equal keys still need a full comparison. Header lookups (VCL's
/// `req.http.*`, the server's own) test it on every field before comparing
/// bytes, which rejects nearly every other field of a real request.
#[inline]
fn name_key(name: &[u8]) -> u32 {
    match (name.first(), name.last()) {
        (Some(f), Some(l)) => {
            ((name.len().min(0xffff) as u32) << 16)
                | (u32::from(f.to_ascii_lowercase()) << 8)
                | u32::from(l.to_ascii_lowercase())
        }
        _ => 0,
    }
}

/// `a` and `b` are equal ignoring ASCII case, as
/// `<[u8]>::eq_ignore_ascii_case`, compared eight bytes at a time: a name
/// VCL looks up is found with a few word operations instead of a case
/// fold per byte on both sides.
#[inline]
fn eq_name(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 4 {
        return a.iter().zip(b).all(|(x, y)| x.eq_ignore_ascii_case(y));
    }
    if n < 8 {
        // The first and the last four bytes (overlapping) as one word.
        let half = |s: &[u8]| {
            let mut w = [0; 8];
            w[..4].copy_from_slice(&s[..4]);
            w[4..].copy_from_slice(&s[n - 4..]);
            fold_word(u64::from_le_bytes(w))
        };
        return half(a) == half(b);
    }
    let word = |s: &[u8], at: usize| {
        let mut w = [0; 8];
        w.copy_from_slice(&s[at..at + 8]);
        fold_word(u64::from_le_bytes(w))
    };
    let mut at = 0;
    while at + 8 < n {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    // The last eight bytes, overlapping the previous word if need be.
    word(a, n - 8) == word(b, n - 8)
}

/// Every ASCII capital of an eight-byte word made lowercase.
#[inline]
fn fold_word(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = ONES * 0x80;
    // Seven-bit values plus a bias set a byte's high bit without carrying
    // into the next byte: at or above 'A', then above 'Z'.
    let low = x & !HIGH;
    let from_a = low.wrapping_add(ONES * u64::from(0x80 - b'A'));
    let past_z = low.wrapping_add(ONES * u64::from(0x7f - b'Z'));
    let capital = from_a & !past_z & !x & HIGH;
    x | (capital >> 2)
}

/// The bytes fields point into: the received head plus values added later.
#[derive(Clone, Default)]
struct Store {
    buf: Bytes,
    owned: Vec<Bytes>,
    /// Copied values ([`Slot::Local`]), unused ranges included until
    /// [`Headers::compact`] drops them.
    local: Vec<u8>,
}

/// Bytes of copied values a list keeps before it looks for unused ones.
const LOCAL_SLACK: usize = 4096;
/// Bytes reserved for copied values when a list copies its first one.
const LOCAL_FIRST: usize = 1024;

impl Store {
    #[inline]
    fn get(&self, slot: Slot) -> &[u8] {
        match slot {
            Slot::Buf(s, e) => &self.buf[s as usize..e as usize],
            Slot::Own(i) => &self.owned[i as usize],
            Slot::Local(s, e) => &self.local[s as usize..e as usize],
        }
    }

    fn own(&mut self, b: Bytes) -> Slot {
        self.owned.push(b);
        Slot::Own((self.owned.len() - 1) as u32)
    }

    /// A copy of `v` in the list's buffer (owned, in the unlikely case
    /// the buffer would pass 4 GB).
    fn copy(&mut self, v: &[u8]) -> Slot {
        if self.local.capacity() == 0 {
            // Room for the few values a VCL usually sets, in one allocation.
            self.local.reserve(LOCAL_FIRST.max(v.len()));
        }
        let start = self.local.len();
        match u32::try_from(start + v.len()) {
            Ok(end) => {
                self.local.extend_from_slice(v);
                Slot::Local(start as u32, end)
            }
            Err(_) => self.own(Bytes::copy_from_slice(v)),
        }
    }

    /// A copy of `v` to replace the value in `old`: in its place when it
    /// is a copied value at least as long, or the last one copied.
    fn recopy(&mut self, old: Slot, v: &[u8]) -> Slot {
        if let Slot::Local(s, e) = old {
            let (s, e) = (s as usize, e as usize);
            if v.len() <= e - s {
                self.local[s..s + v.len()].copy_from_slice(v);
                return Slot::Local(s as u32, (s + v.len()) as u32);
            }
            if e == self.local.len() {
                self.local.truncate(s);
            }
        }
        self.copy(v)
    }

    /// A [`Bytes`] for a slot: shares the parsed buffer or an owned value,
    /// copies a value from the buffer of copied values.
    fn share(&self, slot: Slot) -> Bytes {
        match slot {
            Slot::Buf(s, e) => self.buf.slice(s as usize..e as usize),
            Slot::Own(i) => self.owned[i as usize].clone(),
            Slot::Local(..) => Bytes::copy_from_slice(self.get(slot)),
        }
    }
}

/// How many fields of a list fall in each of 64 buckets of name keys: a
/// lookup of a name whose bucket is empty (most names VCL asks for and
/// finds absent) answers without a scan, and a `set` of a name alone in its
/// bucket knows there is no later line to remove. A count that reached 255
/// stays there (no longer proves anything, never wrong).
#[derive(Clone)]
struct Census([u8; 64]);

impl Default for Census {
    fn default() -> Self {
        Census([0; 64])
    }
}

impl Census {
    #[inline]
    fn bucket(key: u32) -> usize {
        (key.wrapping_mul(0x9e37_79b1) >> 26) as usize
    }
    #[inline]
    fn add(&mut self, key: u32) {
        let c = &mut self.0[Self::bucket(key)];
        *c = c.saturating_add(1);
    }
    #[inline]
    fn sub(&mut self, key: u32) {
        let c = &mut self.0[Self::bucket(key)];
        if *c != u8::MAX {
            *c = c.saturating_sub(1);
        }
    }
    /// False when no field can have this key.
    #[inline]
    fn any(&self, key: u32) -> bool {
        self.0[Self::bucket(key)] != 0
    }
    /// True when at most one field can have this key.
    #[inline]
    fn single(&self, key: u32) -> bool {
        self.0[Self::bucket(key)] <= 1
    }
}

/// An ordered list of header fields, preserving order, duplicates and case.
#[derive(Clone, Default)]
pub struct Headers {
    store: Store,
    fields: Vec<Field>,
    census: Census,
}

impl Headers {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty list with room for `n` fields.
    pub fn with_capacity(n: usize) -> Self {
        Headers {
            store: Store::default(),
            fields: Vec::with_capacity(n),
            census: Census::default(),
        }
    }

    /// A list whose fields are ranges of `buf`, given as `(name start, value
    /// start, value end)` with each name ending where its value starts (the
    /// cache's packed layout). Sharing `buf` costs one reference count, not
    /// one per field; `extra` reserves room for fields added afterwards.
    ///
    /// # Panics
    /// If a range lies outside `buf` or is reversed: the caller's packing is
    /// broken (an internal invariant, never input).
    pub fn from_packed(buf: Bytes, ranges: &[(u32, u32, u32)], extra: usize) -> Self {
        let mut fields = Vec::with_capacity(ranges.len() + extra);
        let mut census = Census::default();
        for &(n, vs, ve) in ranges {
            assert!(
                n <= vs && vs <= ve && ve as usize <= buf.len(),
                "packed header range ({n}, {vs}, {ve}) outside a {}-byte buffer",
                buf.len()
            );
            let key = name_key(&buf[n as usize..vs as usize]);
            census.add(key);
            fields.push(Field {
                name: Slot::Buf(n, vs),
                value: Slot::Buf(vs, ve),
                key,
                filtered: false,
            });
        }
        Headers {
            store: Store {
                buf,
                owned: Vec::with_capacity(extra * 2),
                local: Vec::new(),
            },
            fields,
            census,
        }
    }

    /// Adds a field whose name and value are ranges of the buffer given later
    /// to [`Headers::set_buf`] (used by the parser, which passes the name's
    /// bytes for its [`name_key`]).
    pub(crate) fn push_range(&mut self, name: (u32, u32), value: (u32, u32), spelled: &[u8]) {
        self.push_field(Field {
            name: Slot::Buf(name.0, name.1),
            value: Slot::Buf(value.0, value.1),
            key: name_key(spelled),
            filtered: false,
        });
    }

    /// Points the range-backed fields at their buffer (used by the parser once
    /// the head's final buffer exists).
    pub(crate) fn set_buf(&mut self, buf: Bytes) {
        self.store.buf = buf;
    }

    /// Adds a field at the end, counted in the census.
    #[inline]
    fn push_field(&mut self, f: Field) {
        self.census.add(f.key);
        self.fields.push(f);
    }

    /// Drops owned and copied values no field uses any more, once they
    /// dominate (a VCL loop of `set`/`unset` must not grow the list without
    /// bound).
    #[inline]
    fn compact(&mut self) {
        if self.store.owned.len() > 16 || self.store.local.len() > LOCAL_SLACK {
            self.compact_slow();
        }
    }

    #[inline(never)]
    fn compact_slow(&mut self) {
        let owned_waste =
            self.store.owned.len() > 16 && self.store.owned.len() > self.fields.len() * 4;
        let local_waste = self.store.local.len() > LOCAL_SLACK && {
            let live: usize = self
                .fields
                .iter()
                .map(|f| match f.value {
                    Slot::Local(s, e) => (e - s) as usize,
                    _ => 0,
                })
                .sum();
            self.store.local.len() > 2 * live
        };
        if !owned_waste && !local_waste {
            return;
        }
        let mut owned = Vec::with_capacity(self.fields.len() * 2);
        let mut local = Vec::with_capacity(self.store.local.len() / 2);
        for f in &mut self.fields {
            for slot in [&mut f.name, &mut f.value] {
                match *slot {
                    Slot::Own(i) => {
                        owned.push(self.store.owned[i as usize].clone());
                        *slot = Slot::Own((owned.len() - 1) as u32);
                    }
                    Slot::Local(s, e) => {
                        let at = local.len() as u32;
                        local.extend_from_slice(&self.store.local[s as usize..e as usize]);
                        *slot = Slot::Local(at, at + (e - s));
                    }
                    Slot::Buf(..) => {}
                }
            }
        }
        self.store.owned = owned;
        self.store.local = local;
    }

    /// Number of fields (duplicates counted separately).
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// True when there is no field at all.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    #[inline]
    fn name_of(&self, f: &Field) -> &[u8] {
        self.store.get(f.name)
    }

    #[inline]
    fn value_of(&self, f: &Field) -> &[u8] {
        self.store.get(f.value)
    }

    /// True when field `f` is called `name`, whose [`name_key`] is `key`.
    #[inline]
    fn is_named(&self, f: &Field, key: u32, name: &[u8]) -> bool {
        f.key == key && eq_name(self.name_of(f), name)
    }

    /// The index of the first field called `name` at or after `from`.
    #[inline]
    fn position(&self, from: usize, key: u32, name: &[u8]) -> Option<usize> {
        if !self.census.any(key) {
            return None;
        }
        let fields = self.fields.get(from..)?;
        // Keys of four fields at a time, without a branch per field: most
        // groups hold none of the name.
        let mut at = 0;
        for q in fields.chunks_exact(4) {
            if (q[0].key == key) | (q[1].key == key) | (q[2].key == key) | (q[3].key == key) {
                break;
            }
            at += 4;
        }
        while at < fields.len() {
            let f = &fields[at];
            if f.key == key && eq_name(self.name_of(f), name) {
                return Some(from + at);
            }
            at += 1;
        }
        None
    }

    /// The value of the first field called `name` (case-insensitive).
    #[inline]
    pub fn get(&self, name: impl AsRef<[u8]>) -> Option<&[u8]> {
        let name = name.as_ref();
        self.position(0, name_key(name), name)
            .map(|i| self.value_of(&self.fields[i]))
    }

    /// Like [`Headers::get`], but only if the value is valid UTF-8.
    pub fn get_str(&self, name: impl AsRef<[u8]>) -> Option<&str> {
        self.get(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The values of every field called `name`, in wire order.
    pub fn get_all<'a, 'n>(
        &'a self,
        name: &'n [u8],
    ) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
        self.named(name).map(|(_, v)| v)
    }

    /// Every field called `name` as `(name as spelled, value)`, in wire
    /// order.
    pub fn named<'a, 'n>(
        &'a self,
        name: &'n [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + use<'a, 'n> {
        let key = name_key(name);
        self.fields
            .iter()
            .filter(move |f| self.is_named(f, key, name))
            .map(|f| (self.name_of(f), self.value_of(f)))
    }

    /// True when at least one field is called `name`.
    pub fn contains(&self, name: impl AsRef<[u8]>) -> bool {
        self.get(name).is_some()
    }

    /// How many fields are called `name`.
    pub fn count(&self, name: impl AsRef<[u8]>) -> usize {
        self.named(name.as_ref()).count()
    }

    /// Adds a field at the end. The caller is responsible for the field being
    /// valid (see [`is_valid_name`] and [`is_valid_value`]): VCL-set values are
    /// checked there, as with Varnish's `validate_headers` feature.
    pub fn append(&mut self, name: impl Into<Bytes>, value: impl Into<Bytes>) {
        let name: Bytes = name.into();
        let key = name_key(&name);
        let name = self.store.own(name);
        let value = self.store.own(value.into());
        self.push_field(Field {
            name,
            value,
            key,
            filtered: false,
        });
    }

    /// Replaces every field called `name` by one field with `value`, placed where
    /// the first one was (appended when there was none). The new field keeps the
    /// spelling of the old first field's name.
    pub fn set(&mut self, name: impl Into<Bytes>, value: impl Into<Bytes>) {
        self.set_named(&name.into(), value);
    }

    /// [`Headers::set`] with the name as [`Bytes`]: it is kept only when a
    /// field is appended.
    fn set_named(&mut self, name: &Bytes, value: impl Into<Bytes>) {
        let value: Bytes = value.into();
        let key = name_key(name);
        let Some(first) = self.position(0, key, name) else {
            let value = self.store.own(value);
            self.push_named(name, key, value);
            self.compact();
            return;
        };
        if !self.census.single(key) {
            self.remove_after(first + 1, key, name);
        }
        // Reuse the owned slot of a value set before, if any.
        let slot = match self.fields[first].value {
            Slot::Own(j) => {
                self.store.owned[j as usize] = value;
                Slot::Own(j)
            }
            Slot::Buf(..) | Slot::Local(..) => self.store.own(value),
        };
        let f = &mut self.fields[first];
        f.value = slot;
        f.filtered = false;
        self.compact();
    }

    /// VCL's `set <which>.http.<name> = value`, as varnishd's `VRT_SetHdr`:
    /// every field called `name` goes, and one field spelled as `name` (the
    /// VCL's spelling) is appended with a copy of `value`, kept in the
    /// list's buffer of copied values. When the one such field is already
    /// last and spelled so, its value is replaced where it is (in place of
    /// the old copy when that is not shorter): a chain of sets of one
    /// header allocates nothing.
    pub fn set_copied(&mut self, name: &Bytes, value: &[u8]) {
        let key = name_key(name);
        let last = self.fields.len().checked_sub(1);
        match self.position(0, key, name) {
            Some(first)
                if Some(first) == last && self.store.get(self.fields[first].name) == &name[..] =>
            {
                let slot = self.store.recopy(self.fields[first].value, value);
                let f = &mut self.fields[first];
                f.value = slot;
                f.filtered = false;
            }
            found => {
                if let Some(first) = found {
                    self.remove_after(first, key, name);
                }
                let value = self.store.copy(value);
                self.push_named(name, key, value);
            }
        }
        self.compact();
    }

    /// Appends a field called `name` (with key `key`, the name kept as
    /// given) whose value is already in the store.
    fn push_named(&mut self, name: &Bytes, key: u32, value: Slot) {
        let name = self.store.own(name.clone());
        self.push_field(Field {
            name,
            value,
            key,
            filtered: false,
        });
    }

    /// Removes the fields called `name` from index `from` on; the list is
    /// left as it is when there are none (the usual case).
    fn remove_after(&mut self, from: usize, key: u32, name: &[u8]) -> usize {
        let Some(next) = self.position(from, key, name) else {
            return 0;
        };
        if self.census.single(key) {
            // The only field that can have this name.
            self.fields.remove(next);
            self.census.sub(key);
            return 1;
        }
        // Shift the fields kept after the first one going down over it.
        let before = self.fields.len();
        let mut kept = next;
        for i in next + 1..before {
            let f = self.fields[i];
            if !(f.key == key && eq_name(self.store.get(f.name), name)) {
                self.fields[kept] = f;
                kept += 1;
            }
        }
        self.fields.truncate(kept);
        // Every field removed had this key (the first one found included).
        for _ in kept..before {
            self.census.sub(key);
        }
        before - kept
    }

    /// Removes every field called `name`; returns how many were removed.
    pub fn remove(&mut self, name: impl AsRef<[u8]>) -> usize {
        let name = name.as_ref();
        let removed = self.remove_after(0, name_key(name), name);
        if removed > 0 {
            self.compact();
        }
        removed
    }

    /// Keeps only the fields for which `keep(name, value)` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) {
        let (store, census) = (&self.store, &mut self.census);
        self.fields.retain(|f| {
            let k = keep(store.get(f.name), store.get(f.value));
            if !k {
                census.sub(f.key);
            }
            k
        });
        self.compact();
    }

    /// Every field as `(name, value)`, in wire order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> + '_ {
        self.fields
            .iter()
            .map(|f| (self.name_of(f), self.value_of(f)))
    }

    /// True when any field called `name` lists `token` (case-insensitive) in its
    /// comma-separated value, e.g. `has_token("Connection", "close")`.
    pub fn has_token(&self, name: impl AsRef<[u8]>, token: impl AsRef<[u8]>) -> bool {
        let token = token.as_ref();
        self.get_all(name.as_ref())
            .any(|v| tokens(v).any(|t| t.eq_ignore_ascii_case(token)))
    }

    /// Varnish `http_HdrIs`: the first field called `name` has exactly the value
    /// `value` (case-insensitive, surrounding whitespace ignored).
    pub fn value_is(&self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> bool {
        self.get(name)
            .is_some_and(|v| trim(v).eq_ignore_ascii_case(value.as_ref()))
    }

    /// Looks up a directive in a comma-separated header such as `Cache-Control`:
    /// `None` when absent, `Some(None)` for a bare directive (`no-cache`),
    /// `Some(Some(arg))` for `max-age=3` (quotes around the argument removed).
    /// All fields called `name` are searched, first match wins.
    pub fn directive(
        &self,
        name: impl AsRef<[u8]>,
        directive: impl AsRef<[u8]>,
    ) -> Option<Option<&[u8]>> {
        let directive = directive.as_ref();
        for v in self.get_all(name.as_ref()) {
            for t in tokens(v) {
                let (key, arg) = match t.iter().position(|&b| b == b'=') {
                    Some(eq) => (trim(&t[..eq]), Some(unquote(trim(&t[eq + 1..])))),
                    None => (t, None),
                };
                if key.eq_ignore_ascii_case(directive) {
                    return Some(arg);
                }
            }
        }
        None
    }

    /// Varnish `http_CollectHdr`: merges every field called `name` into the first
    /// one, values joined with `", "`. Does nothing with fewer than two fields.
    pub fn collect(&mut self, name: impl AsRef<[u8]>) {
        let name = name.as_ref();
        if self.count(name) < 2 {
            return;
        }
        let mut joined = Vec::new();
        for v in self.get_all(name) {
            if !joined.is_empty() {
                joined.extend_from_slice(b", ");
            }
            joined.extend_from_slice(v);
        }
        let spelled = Bytes::copy_from_slice(self.get_name(name).unwrap_or(name));
        self.set(spelled, joined);
    }

    /// The wire spelling of the first field called `name`.
    fn get_name(&self, name: &[u8]) -> Option<&[u8]> {
        self.named(name).next().map(|(n, _)| n)
    }

    /// Marks every field called `name` as filtered (Varnish `HDF_FILTER`): it
    /// stays visible but [`Headers::copy_filtered`] leaves it out.
    pub fn mark_filtered(&mut self, name: impl AsRef<[u8]>) {
        let name = name.as_ref();
        let key = name_key(name);
        let store = &self.store;
        for f in &mut self.fields {
            if f.key == key && eq_name(store.get(f.name), name) {
                f.filtered = true;
            }
        }
    }

    /// True when some field called `name` carries the filter mark.
    pub fn is_filtered(&self, name: impl AsRef<[u8]>) -> bool {
        let name = name.as_ref();
        let key = name_key(name);
        self.fields
            .iter()
            .any(|f| f.filtered && self.is_named(f, key, name))
    }

    /// Varnish `http_FilterReq`/`http_FilterResp`: appends to `out` every field
    /// that is neither filter-marked nor flagged in `mask` by the well-known
    /// header table ([`crate::header_flags`]). Parsed and owned bytes are
    /// shared; values VCL set (in the buffer of copied values) are copied.
    pub fn copy_filtered(&self, mask: u8, out: &mut Headers) {
        if out.fields.is_empty() && out.store.owned.is_empty() && out.store.local.is_empty() {
            out.store.buf = self.store.buf.clone();
        }
        // Ranges stay valid when both lists share the same buffer.
        let same_buf = out.store.buf.as_ptr() == self.store.buf.as_ptr()
            && out.store.buf.len() == self.store.buf.len();
        for f in &self.fields {
            let name = self.name_of(f);
            if f.filtered || crate::conn::header_flags(name) & mask != 0 {
                continue;
            }
            let mut copy = |slot: Slot| match slot {
                Slot::Buf(..) if same_buf => slot,
                Slot::Local(..) => out.store.copy(self.store.get(slot)),
                _ => out.store.own(self.store.share(slot)),
            };
            let field = Field {
                name: copy(f.name),
                value: copy(f.value),
                key: f.key,
                filtered: false,
            };
            out.push_field(field);
        }
    }

    /// Number of bytes [`Headers::write_to`] produces.
    pub fn wire_len(&self) -> usize {
        self.fields
            .iter()
            .map(|f| {
                let sep = if Self::bare(f) { 1 } else { 2 };
                self.name_of(f).len() + sep + self.value_of(f).len() + 2
            })
            .sum()
    }

    /// Whether a field is written `name:` with nothing after the colon: an
    /// empty value that came off the wire (a range of the shared buffer:
    /// parsed, or a cached object's packed headers), as varnishd, which
    /// keeps a received `Name:` line as it was. An empty value VCL set is
    /// written `name: `, as varnishd prints `"%s %s"`.
    fn bare(f: &Field) -> bool {
        matches!(f.value, Slot::Buf(s, e) if s == e)
    }

    /// Serialises every field as `name: value\r\n` (`name:\r\n` for an
    /// empty value received so), in order (no final CRLF).
    pub fn write_to(&self, out: &mut impl crate::write::WriteBuf) {
        for f in &self.fields {
            out.put(self.name_of(f));
            out.put(if Self::bare(f) { b":" } else { b": " });
            out.put(self.value_of(f));
            out.put(b"\r\n");
        }
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            }))
            .finish()
    }
}

impl PartialEq for Headers {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Headers {}

/// Trims spaces and tabs at both ends.
pub fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| b != b' ' && b != b'\t');
    match start {
        None => &[],
        Some(s) => {
            let e = v
                .iter()
                .rposition(|&b| b != b' ' && b != b'\t')
                .unwrap_or(s);
            &v[s..=e]
        }
    }
}

fn unquote(v: &[u8]) -> &[u8] {
    if v.len() >= 2 && v[0] == b'"' && v[v.len() - 1] == b'"' {
        &v[1..v.len() - 1]
    } else {
        v
    }
}

/// Splits a comma-separated header value into trimmed, non-empty elements.
pub fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',').map(trim).filter(|t| !t.is_empty())
}

/// RFC 9110 `tchar`.
#[inline]
pub fn is_tchar(b: u8) -> bool {
    matches!(b,
        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9'
        | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+'
        | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
}

/// True for a non-empty RFC 9110 token (a valid header name).
pub fn is_valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&b| is_tchar(b))
}

/// True when `value` can be sent as a field value: no CR, LF, NUL or other
/// control character except horizontal tab (Varnish `validate_headers`).
pub fn is_valid_value(value: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let byte_ok = |b: u8| b == b'\t' || (b >= 0x20 && b != 0x7f);
    // Eight bytes at a time: a word with no byte below 0x20 and none equal
    // to 0x7f is valid as a whole; only a word that may hold one (a tab, or
    // a real control byte) is looked at byte by byte.
    let mut words = value.chunks_exact(8);
    for w in &mut words {
        let mut word = [0; 8];
        word.copy_from_slice(w);
        let x = u64::from_le_bytes(word);
        let below_space = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
        let d = x ^ (ONES * 0x7f);
        let del = d.wrapping_sub(ONES) & !d & HIGH;
        if below_space | del != 0 && !w.iter().all(|&b| byte_ok(b)) {
            return false;
        }
    }
    words.remainder().iter().all(|&b| byte_ok(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Headers {
        let mut h = Headers::new();
        h.append("Host", "example.com");
        h.append("Accept", "text/html");
        h.append("X-Foo", "1");
        h.append("x-foo", "2");
        h.append("Cache-Control", "no-cache, max-age=3, s-maxage=\"10\"");
        h
    }

    #[test]
    fn get_is_case_insensitive_and_first_wins() {
        let h = sample();
        assert_eq!(h.get("HOST"), Some(&b"example.com"[..]));
        assert_eq!(h.get("x-FOO"), Some(&b"1"[..]));
        assert_eq!(h.get("nope"), None);
        assert_eq!(h.get_str("accept"), Some("text/html"));
        assert_eq!(h.count("X-Foo"), 2);
        assert!(h.contains("cache-control"));
        assert!(!h.contains("cache"));
    }

    #[test]
    fn from_packed_shares_the_buffer_and_accepts_edits() {
        let buf = Bytes::from_static(b"Content-Typetext/htmlETag\"x\"");
        let mut h = Headers::from_packed(buf, &[(0, 12, 21), (21, 25, 28)], 2);
        assert_eq!(h.get("content-type"), Some(&b"text/html"[..]));
        assert_eq!(h.get("etag"), Some(&b"\"x\""[..]));
        h.set("ETag", "\"y\"");
        h.append("Age", "3");
        let all: Vec<_> = h.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        assert_eq!(
            all,
            vec![
                (b"Content-Type".to_vec(), b"text/html".to_vec()),
                (b"ETag".to_vec(), b"\"y\"".to_vec()),
                (b"Age".to_vec(), b"3".to_vec()),
            ]
        );
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn from_packed_rejects_a_broken_range() {
        Headers::from_packed(Bytes::from_static(b"ab"), &[(0, 1, 3)], 0);
    }

    #[test]
    fn get_all_preserves_order() {
        let h = sample();
        let all: Vec<_> = h.get_all(b"X-FOO").collect();
        assert_eq!(all, vec![&b"1"[..], &b"2"[..]]);
    }

    #[test]
    fn set_replaces_in_place_of_first() {
        let mut h = sample();
        h.set("X-FOO", "3");
        let names: Vec<_> = h.iter().map(|(n, _)| n.to_vec()).collect();
        assert_eq!(
            names,
            vec![
                b"Host".to_vec(),
                b"Accept".to_vec(),
                b"X-Foo".to_vec(),
                b"Cache-Control".to_vec()
            ]
        );
        assert_eq!(h.get("x-foo"), Some(&b"3"[..]));
        h.set("New", "v");
        assert_eq!(h.iter().last().unwrap(), (&b"New"[..], &b"v"[..]));
    }

    #[test]
    fn remove_and_retain() {
        let mut h = sample();
        assert_eq!(h.remove("x-foo"), 2);
        assert_eq!(h.remove("x-foo"), 0);
        assert_eq!(h.len(), 3);
        h.retain(|n, _| !n.eq_ignore_ascii_case(b"accept"));
        assert_eq!(h.len(), 2);
        assert!(!h.contains("Accept"));
    }

    #[test]
    fn tokens_and_directives() {
        let mut h = sample();
        h.append("Connection", "close , X-Foo");
        h.append("connection", "Upgrade");
        assert!(h.has_token("connection", "CLOSE"));
        assert!(h.has_token("connection", "x-foo"));
        assert!(h.has_token("connection", "upgrade"));
        assert!(!h.has_token("connection", "keep-alive"));
        assert_eq!(
            h.directive("cache-control", "MAX-AGE"),
            Some(Some(&b"3"[..]))
        );
        assert_eq!(
            h.directive("cache-control", "s-maxage"),
            Some(Some(&b"10"[..]))
        );
        assert_eq!(h.directive("cache-control", "no-cache"), Some(None));
        assert_eq!(h.directive("cache-control", "private"), None);
        assert!(h.value_is("accept", "TEXT/HTML"));
        assert!(!h.value_is("accept", "text"));
    }

    #[test]
    fn collect_merges_duplicates() {
        let mut h = sample();
        h.collect("x-foo");
        assert_eq!(h.count("x-foo"), 1);
        assert_eq!(h.get("X-Foo"), Some(&b"1, 2"[..]));
        let before = h.clone();
        h.collect("host");
        assert_eq!(h, before);
    }

    #[test]
    fn filtering() {
        let mut h = sample();
        h.append("Transfer-Encoding", "chunked");
        h.mark_filtered("x-foo");
        assert!(h.is_filtered("X-Foo"));
        assert!(h.contains("x-foo"));
        let mut out = Headers::new();
        h.copy_filtered(crate::conn::FILTER_PASS, &mut out);
        assert!(!out.contains("x-foo"));
        assert!(!out.contains("transfer-encoding"));
        assert!(out.contains("host"));
        assert!(out.contains("cache-control"));
    }

    #[test]
    fn repeated_edits_stay_bounded() {
        let mut h = sample();
        for i in 0..1000 {
            h.set("X-Loop", format!("{i}"));
            h.append("X-Tmp", "t");
            h.remove("x-tmp");
        }
        assert_eq!(h.get("x-loop"), Some(&b"999"[..]));
        assert!(h.store.owned.len() <= 64, "{}", h.store.owned.len());
        assert_eq!(h.len(), 6);
        assert_eq!(h.get("host"), Some(&b"example.com"[..]));
        assert_eq!(h.get("cache-control").map(<[u8]>::len), Some(34));
    }

    #[test]
    fn copy_into_non_empty_list() {
        let mut out = Headers::new();
        out.append("First", "1");
        let mut src = Headers::new();
        src.set_buf(Bytes::from_static(b"Name: value"));
        src.push_range((0, 4), (6, 11), b"Name");
        src.append("B", "2");
        src.copy_filtered(0, &mut out);
        let all: Vec<_> = out.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        assert_eq!(
            all,
            vec![
                (b"First".to_vec(), b"1".to_vec()),
                (b"Name".to_vec(), b"value".to_vec()),
                (b"B".to_vec(), b"2".to_vec())
            ]
        );
    }

    #[test]
    fn validity_helpers() {
        assert!(is_valid_name(b"X-Foo_1"));
        assert!(!is_valid_name(b""));
        assert!(!is_valid_name(b"X Foo"));
        assert!(!is_valid_name(b"X:Foo"));
        assert!(is_valid_value(b"a\tb c\x80"));
        assert!(!is_valid_value(b"a\r\nb"));
        assert!(!is_valid_value(b"a\0"));
        assert_eq!(trim(b"  a b \t"), b"a b");
        assert_eq!(trim(b"   "), b"");
        let t: Vec<_> = tokens(b" a, ,b ,c").collect();
        assert_eq!(t, vec![&b"a"[..], &b"b"[..], &b"c"[..]]);
    }

    #[test]
    fn word_wise_value_check_agrees_with_bytes() {
        let slow = |v: &[u8]| v.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f));
        // Every byte value at every position of values around word sizes.
        for len in [1, 7, 8, 9, 16, 17] {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut v = vec![b'a'; len];
                    v[at] = b;
                    assert_eq!(is_valid_value(&v), slow(&v), "{v:?}");
                    v.iter_mut().for_each(|x| *x = x.wrapping_add(0x80));
                    v[at] = b;
                    assert_eq!(is_valid_value(&v), slow(&v), "{v:?}");
                }
            }
        }
    }

    #[test]
    fn name_keys_filter_without_false_negatives() {
        for (a, b) in [("Host", "host"), ("X-FOO", "x-foo"), ("A", "a")] {
            assert_eq!(name_key(a.as_bytes()), name_key(b.as_bytes()));
        }
        assert_ne!(name_key(b"Accept"), name_key(b"Cookie"));
        assert_ne!(name_key(b"Host"), name_key(b"Hos"));
        assert_eq!(name_key(b""), 0);
        // Same key, different names: the full comparison decides.
        let mut h = Headers::new();
        h.append("Ab-Xc", "1");
        h.append("aB-yC", "2");
        assert_eq!(h.get("ab-yc"), Some(&b"2"[..]));
        assert_eq!(h.remove("AB-XC"), 1);
        assert_eq!(h.get("ab-xc"), None);
        assert_eq!(h.remove("AB-XC"), 0);
        h.set("Ab-Yc", "3");
        assert_eq!(
            h.iter().collect::<Vec<_>>(),
            vec![(&b"aB-yC"[..], &b"3"[..])]
        );
    }

    #[test]
    fn word_wise_name_comparison_agrees_with_bytes() {
        let bytes: Vec<u8> = (0..=255u8).collect();
        for len in [1, 5, 8, 9, 15, 16, 17] {
            for at in 0..len {
                for &x in &bytes {
                    for y in [
                        x,
                        x ^ 0x20,
                        x.to_ascii_lowercase(),
                        x.to_ascii_uppercase(),
                        b'a',
                        b'Z',
                        b'-',
                    ] {
                        let mut a = vec![b'K'; len];
                        let mut b = vec![b'k'; len];
                        a[at] = x;
                        b[at] = y;
                        assert_eq!(eq_name(&a, &b), a.eq_ignore_ascii_case(&b), "{a:?} {b:?}");
                    }
                }
            }
        }
        assert!(!eq_name(b"Host", b"hos"));
        assert!(eq_name(b"X-Forwarded-Proto", b"x-forwarded-proto"));
    }

    /// The census counts what the fields hold.
    fn assert_census(h: &Headers) {
        let mut c = Census::default();
        for f in &h.fields {
            c.add(f.key);
        }
        assert_eq!(c.0, h.census.0);
    }

    #[test]
    fn census_follows_every_change() {
        let mut h = sample();
        assert_census(&h);
        let names: Vec<&[u8]> = vec![b"X-Foo", b"host", b"Set-Cookie", b"A", b"x-FOO", b"Vary"];
        for i in 0..2000usize {
            let n = names[(i * 7) % names.len()];
            match i % 6 {
                0 => h.append(Bytes::copy_from_slice(n), "v"),
                1 => h.set_copied(&Bytes::copy_from_slice(n), b"w"),
                2 => {
                    h.remove(n);
                }
                3 => h.set(Bytes::copy_from_slice(n), "x"),
                4 => h.retain(|k, _| !k.eq_ignore_ascii_case(n) || i % 4 == 0),
                _ => {
                    let mut out = Headers::new();
                    h.copy_filtered(0, &mut out);
                    assert_census(&out);
                    h = out;
                }
            }
            assert_census(&h);
            for n in &names {
                assert_eq!(
                    h.get(n),
                    h.iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(n))
                        .map(|(_, v)| v)
                );
            }
        }
        let p = Headers::from_packed(
            Bytes::from_static(b"HostaVary*"),
            &[(0, 4, 5), (5, 9, 10)],
            0,
        );
        assert_census(&p);
        assert_eq!(p.get("accept"), None);
    }

    #[test]
    fn copied_values_stay_bounded_and_right() {
        let mut h = sample();
        let names = [Bytes::from_static(b"Cookie"), Bytes::from_static(b"X-Foo")];
        for i in 0..10_000usize {
            let v = vec![b'a' + (i % 26) as u8; (i * 7919) % 700];
            h.set_copied(&names[i % 2], &v);
            assert_eq!(h.get(&names[i % 2][..]), Some(&v[..]));
            if i % 3 == 0 {
                h.remove("cookie");
            }
        }
        assert!(
            h.store.local.len() <= 2 * LOCAL_SLACK,
            "{}",
            h.store.local.len()
        );
        assert_eq!(h.get("host"), Some(&b"example.com"[..]));
        // A copy into another list takes the copied values along.
        let mut out = Headers::new();
        h.copy_filtered(0, &mut out);
        assert_eq!(out, h);
    }

    #[test]
    fn set_copied_appends_one_line_spelled_as_vcl_spells_it() {
        let mut h = Headers::new();
        h.append("A", "old");
        h.append("B", "b");
        h.append("dup", "1");
        h.append("Dup", "2");
        h.set_copied(&Bytes::from_static(b"a"), b"new");
        h.set_copied(&Bytes::from_static(b"DUP"), b"one");
        let lines: Vec<_> = h.iter().collect();
        assert_eq!(
            lines,
            [
                (&b"B"[..], &b"b"[..]),
                (&b"a"[..], &b"new"[..]),
                (&b"DUP"[..], &b"one"[..]),
            ]
        );
        // Already last and spelled so: replaced where it is.
        h.set_copied(&Bytes::from_static(b"DUP"), b"two");
        assert_eq!(h.iter().last(), Some((&b"DUP"[..], &b"two"[..])));
        assert_eq!(h.len(), 3);
    }

    #[test]
    fn set_copied_reuses_an_unshared_value() {
        let mut h = sample();
        let name = Bytes::from_static(b"X-New");
        h.set_copied(&name, b"first value");
        let kept = h.clone();
        h.set_copied(&name, b"second");
        h.set_copied(&name, b"third, longer than the first value");
        assert_eq!(
            h.get("x-new"),
            Some(&b"third, longer than the first value"[..])
        );
        // The clone still sees its own value.
        assert_eq!(kept.get("x-new"), Some(&b"first value"[..]));
        h.set_copied(&Bytes::from_static(b"x-foo"), b"9");
        assert_eq!(h.count("X-Foo"), 1);
        assert_eq!(h.get("x-foo"), Some(&b"9"[..]));
    }

    #[test]
    fn set_named_shares_the_name_only_when_appending() {
        let mut h = sample();
        let name = Bytes::copy_from_slice(b"X-Foo");
        h.set_named(&name, "3");
        assert_eq!(h.count("x-foo"), 1);
        assert_eq!(h.get("x-foo"), Some(&b"3"[..]));
        let new = Bytes::copy_from_slice(b"X-New");
        h.set_named(&new, "4");
        assert_eq!(h.iter().last(), Some((&b"X-New"[..], &b"4"[..])));
        // Parsed (buffer-backed) fields are found by key as well.
        let p = Headers::from_packed(
            Bytes::from_static(b"HostaVary*"),
            &[(0, 4, 5), (5, 9, 10)],
            0,
        );
        assert_eq!(p.get("vary"), Some(&b"*"[..]));
        assert_eq!(p.get("HOST"), Some(&b"a"[..]));
    }

    #[test]
    fn wire_format() {
        let h = sample();
        let mut out = Vec::new();
        h.write_to(&mut out);
        assert_eq!(out.len(), h.wire_len());
        assert!(out.starts_with(b"Host: example.com\r\nAccept: text/html\r\n"));
    }
}
