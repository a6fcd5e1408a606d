//! The compact index of a persistent store: where the records of the
//! objects found at startup are, and nothing else, so that a restart with
//! millions of objects on disk costs a few dozen bytes of RAM per object
//! instead of a full cache object each.
//!
//! Recovery fills it once (the scan's survivors); from then on it only
//! shrinks: a cache lookup that misses in memory takes the entries of its
//! digest out ([`Index::take`]) and the cache reads their records and puts
//! the objects back, and when the store needs space for new objects it
//! gives up entries ([`Index::evict`]) before the cache nukes objects it
//! holds (objects not looked up since the restart are the coldest there
//! are). An entry is 24 bytes: the first 8 bytes of the digest (the record
//! read back carries the whole digest, so a collision costs a read, never a
//! wrong object), the record's offset and slot length, and when the object
//! expires (whole seconds). The table is open addressing with linear
//! probing, sized once for two thirds load, and deletes by shifting the
//! following entries back (no tombstones), so it never grows or rehashes.

/// One indexed object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Entry {
    /// The digest's first 8 bytes (0 marks a free slot, so a digest whose
    /// first bytes are all zero is filed under 1).
    pub tag: u64,
    /// Arena offset of the record.
    pub off: u64,
    /// Length of the record's extent.
    pub slot: u32,
    /// When the object expires, whole seconds since the epoch (rounded up,
    /// saturated).
    pub expires: u32,
}

impl Entry {
    /// The tag filing `digest`.
    pub fn tag_of(digest: &[u8; 32]) -> u64 {
        let mut t = [0u8; 8];
        t.copy_from_slice(&digest[..8]);
        u64::from_le_bytes(t).max(1)
    }

    /// `expires` in seconds as an entry keeps it.
    pub fn seconds(expires: f64) -> u32 {
        if expires <= 0.0 {
            0
        } else {
            expires.ceil().min(f64::from(u32::MAX)) as u32
        }
    }
}

/// The table. Not synchronised: the store keeps it under a mutex.
#[derive(Debug, Default)]
pub struct Index {
    slots: Vec<Entry>,
    len: usize,
    /// Where [`evict`](Self::evict) looks next.
    hand: usize,
}

impl Index {
    /// A table for `n` entries at most.
    pub fn with_capacity(n: usize) -> Index {
        let cap = if n == 0 { 0 } else { (n + n / 2).max(8) };
        Index {
            slots: vec![Entry::default(); cap],
            len: 0,
            hand: 0,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of RAM the table takes.
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Entry>()
    }

    fn home(&self, tag: u64) -> usize {
        // Multiply-shift: the tag's bits are already uniform (a hash).
        ((u128::from(tag) * self.slots.len() as u128) >> 64) as usize
    }

    /// Add an entry; false when the table is full (it never is when built
    /// with room for every entry).
    pub fn insert(&mut self, e: Entry) -> bool {
        if e.tag == 0 || self.len + 1 >= self.slots.len() {
            return false;
        }
        let n = self.slots.len();
        let mut i = self.home(e.tag);
        while self.slots[i].tag != 0 {
            i = (i + 1) % n;
        }
        self.slots[i] = e;
        self.len += 1;
        true
    }

    /// Whether some entry has `tag`.
    pub fn contains(&self, tag: u64) -> bool {
        self.find(tag).is_some()
    }

    fn find(&self, tag: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let n = self.slots.len();
        let mut i = self.home(tag);
        loop {
            match self.slots[i].tag {
                0 => return None,
                t if t == tag => return Some(i),
                _ => i = (i + 1) % n,
            }
        }
    }

    /// Take out every entry with `tag`.
    pub fn take(&mut self, tag: u64) -> Vec<Entry> {
        let mut out = Vec::new();
        while let Some(i) = self.find(tag) {
            out.push(self.remove_at(i));
        }
        out
    }

    /// Take out the entry at slot `i` and shift the entries after it that
    /// probed past it back, so every entry stays reachable from its home.
    fn remove_at(&mut self, mut i: usize) -> Entry {
        let n = self.slots.len();
        let gone = self.slots[i];
        self.slots[i] = Entry::default();
        self.len -= 1;
        let mut j = i;
        loop {
            j = (j + 1) % n;
            let e = self.slots[j];
            if e.tag == 0 {
                break;
            }
            let h = self.home(e.tag);
            // Move `e` into the hole when its home is not cyclically in
            // (i, j].
            let stays = if i <= j {
                i < h && h <= j
            } else {
                i < h || h <= j
            };
            if !stays {
                self.slots[i] = e;
                self.slots[j] = Entry::default();
                i = j;
            }
        }
        gone
    }

    /// Take out one entry to free its space: the first expired one (at
    /// `now`, seconds) among the next few from the hand, otherwise the one
    /// at the hand (in slot order, i.e. in no particular order of use: none
    /// of them was looked up since the restart).
    pub fn evict(&mut self, now: u32) -> Option<Entry> {
        if self.len == 0 {
            return None;
        }
        let n = self.slots.len();
        let mut first = None;
        let mut seen = 0;
        let mut i = self.hand % n;
        while seen < 16 {
            let e = self.slots[i];
            if e.tag != 0 {
                if e.expires <= now {
                    first = Some(i);
                    break;
                }
                first.get_or_insert(i);
                seen += 1;
            }
            i = (i + 1) % n;
            if i == self.hand % n {
                break;
            }
        }
        let at = first?;
        self.hand = at;
        Some(self.remove_at(at))
    }

    /// A copy of every entry (verification and tests walk it without
    /// holding the table).
    pub fn entries(&self) -> Vec<Entry> {
        self.slots.iter().filter(|e| e.tag != 0).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u64, off: u64) -> Entry {
        Entry {
            tag,
            off,
            slot: 512,
            expires: 100,
        }
    }

    #[test]
    fn entries_are_24_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 24);
        let ix = Index::with_capacity(1000);
        assert!(ix.bytes() <= 1000 * 36);
    }

    #[test]
    fn take_finds_every_entry_of_a_tag_and_nothing_else() {
        let mut ix = Index::with_capacity(300);
        // Tags crowded into few homes, so probe chains wrap and overlap.
        for i in 0..300u64 {
            assert!(ix.insert(e(u64::MAX - (i % 7), i)));
        }
        let got = ix.take(u64::MAX - 3);
        assert_eq!(got.len(), 43);
        assert!(got.iter().all(|x| x.off % 7 == 3));
        assert!(!ix.contains(u64::MAX - 3));
        for k in [0u64, 1, 2, 4, 5, 6] {
            assert!(ix.contains(u64::MAX - k), "{k}");
        }
        let rest: usize = (0..7).map(|k| ix.take(u64::MAX - k).len()).sum();
        assert_eq!(rest, 300 - 43);
        assert!(ix.is_empty());
    }

    #[test]
    fn removal_keeps_wrapped_chains_reachable() {
        let mut ix = Index::with_capacity(10);
        // Homes near the end of the table, chains wrapping to slot 0.
        let tags: Vec<u64> = (0..9).map(|i| u64::MAX - i).collect();
        for (i, t) in tags.iter().enumerate() {
            assert!(ix.insert(e(*t, i as u64)));
        }
        for t in &tags {
            assert_eq!(ix.take(*t).len(), 1, "{t}");
        }
        assert!(ix.is_empty());
    }

    #[test]
    fn evict_prefers_expired_entries_then_takes_any() {
        let mut ix = Index::with_capacity(4);
        ix.insert(e(1 << 60, 1));
        let mut old = e(2 << 60, 2);
        old.expires = 10;
        ix.insert(old);
        assert_eq!(ix.evict(50).map(|x| x.off), Some(2));
        assert_eq!(ix.evict(50).map(|x| x.off), Some(1));
        assert_eq!(ix.evict(50), None);
    }
}
