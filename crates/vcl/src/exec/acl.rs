//! Runtime form of a VCL `acl` and its matching rule.
//!
//! Varnish (`vcc_acl.c`) sorts the entries so that, among entries covering
//! an address, the one with the longest mask is tried first; the first
//! covering entry decides: a plain entry matches, a negated (`!`) entry
//! rejects. No covering entry means no match. That is longest-prefix match,
//! which is what [`Acl::lookup`] computes. With `+log` the outcome is logged
//! as `VCL_acl` (`MATCH name "addr"/mask`, `NEG_MATCH ...`, `NO_MATCH name`),
//! using each entry's source text as the compiler recorded it.

use std::net::IpAddr;

/// One ACL entry, after name resolution (a host name that resolves to
/// several addresses gives several entries).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclEntry {
    pub addr: IpAddr,
    /// Prefix length in bits (`/24`); 32 or 128 for a single address.
    pub mask: u8,
    /// `!"addr"`: a covering match rejects.
    pub negated: bool,
    /// How the entry is logged after `MATCH name `: the quoted address as
    /// written and the mask if written separately, plus ` fixed: a/m` when
    /// the compiler had to clear host bits (`"1.2.3.4"/24 fixed: 1.2.3.0/24`).
    pub log_text: Box<str>,
}

/// A compiled ACL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    pub name: Box<str>,
    /// Whether matches are logged (`acl name +log { ... }`).
    pub log: bool,
    /// Entries sorted by decreasing mask length so the first covering entry
    /// is the most specific.
    entries: Vec<AclEntry>,
}

/// Outcome of matching an address against an ACL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclResult<'a> {
    Match(&'a AclEntry),
    NegMatch(&'a AclEntry),
    NoMatch,
}

impl AclResult<'_> {
    /// Whether `ip ~ acl` is true.
    pub fn matched(&self) -> bool {
        matches!(self, AclResult::Match(_))
    }
}

fn covers(entry: &AclEntry, ip: IpAddr) -> bool {
    match (entry.addr, ip) {
        (IpAddr::V4(net), IpAddr::V4(a)) => {
            let m = u32::from(entry.mask.min(32));
            let keep = if m == 0 { 0 } else { u32::MAX << (32 - m) };
            (u32::from(net) ^ u32::from(a)) & keep == 0
        }
        (IpAddr::V6(net), IpAddr::V6(a)) => {
            let m = u32::from(entry.mask.min(128));
            let keep = if m == 0 { 0 } else { u128::MAX << (128 - m) };
            (u128::from(net) ^ u128::from(a)) & keep == 0
        }
        _ => false,
    }
}

impl Acl {
    /// Builds an ACL; the entries may come in source order.
    pub fn new(name: &str, log: bool, mut entries: Vec<AclEntry>) -> Acl {
        // Stable: among equal masks, source order is kept (Varnish rejects
        // conflicting duplicates at compile time, so ties cannot disagree).
        entries.sort_by_key(|e| std::cmp::Reverse(e.mask));
        Acl {
            name: name.into(),
            log,
            entries,
        }
    }

    /// The entries, most specific first.
    pub fn entries(&self) -> &[AclEntry] {
        &self.entries
    }

    /// Finds the deciding entry for `ip`.
    pub fn lookup(&self, ip: IpAddr) -> AclResult<'_> {
        match self.entries.iter().find(|e| covers(e, ip)) {
            Some(e) if e.negated => AclResult::NegMatch(e),
            Some(e) => AclResult::Match(e),
            None => AclResult::NoMatch,
        }
    }

    /// The `VCL_acl` log line for a result.
    pub fn log_line(&self, r: AclResult<'_>) -> String {
        match r {
            AclResult::Match(e) => format!("MATCH {} {}", self.name, e.log_text),
            AclResult::NegMatch(e) => format!("NEG_MATCH {} {}", self.name, e.log_text),
            AclResult::NoMatch => format!("NO_MATCH {}", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(addr: &str, mask: u8, negated: bool) -> AclEntry {
        AclEntry {
            addr: addr.parse().unwrap(),
            mask,
            negated,
            log_text: format!("\"{addr}\"/{mask}").into(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn more_specific_wins() {
        // The c00005.vtc table.
        let acl = Acl::new(
            "acl1",
            true,
            vec![
                e("1.2.3.0", 24, false),
                e("1.2.3.64", 26, false),
                e("1.4.4.0", 22, false),
                e("1.3.4.0", 23, false),
                e("1.3.5.0", 26, false),
                e("1.3.6.0", 25, false),
                e("1.3.6.128", 25, false),
                e("1.3.0.0", 21, false),
                e("1.4.7.0", 24, false),
                e("1.4.6.0", 24, false),
            ],
        );
        let cases = [
            ("1.2.3.63", "1.2.3.0"),
            ("1.2.3.64", "1.2.3.64"),
            ("1.3.4.255", "1.3.4.0"),
            ("1.3.5.0", "1.3.5.0"),
            ("1.3.5.255", "1.3.4.0"),
            ("1.3.6.140", "1.3.6.128"),
            ("1.3.7.255", "1.3.0.0"),
            ("1.4.5.255", "1.4.4.0"),
            ("1.4.6.64", "1.4.6.0"),
            ("1.4.7.64", "1.4.7.0"),
        ];
        for (addr, want) in cases {
            match acl.lookup(ip(addr)) {
                AclResult::Match(entry) => assert_eq!(entry.addr, ip(want), "{addr}"),
                other => panic!("{addr}: {other:?}"),
            }
        }
        assert_eq!(acl.lookup(ip("9.9.9.9")), AclResult::NoMatch);
        assert_eq!(acl.log_line(AclResult::NoMatch), "NO_MATCH acl1");
        let r = acl.lookup(ip("1.3.5.0"));
        assert_eq!(acl.log_line(r), "MATCH acl1 \"1.3.5.0\"/26");
    }

    #[test]
    fn negation_and_families() {
        let acl = Acl::new(
            "a",
            false,
            vec![
                e("127.0.0.1", 32, true),
                e("0.0.0.0", 0, false),
                e("::", 0, false),
            ],
        );
        assert!(!acl.lookup(ip("127.0.0.1")).matched());
        assert!(matches!(
            acl.lookup(ip("127.0.0.1")),
            AclResult::NegMatch(_)
        ));
        assert!(acl.lookup(ip("10.1.2.3")).matched());
        assert!(acl.lookup(ip("2001:db8::1")).matched());
        let v6 = Acl::new("b", false, vec![e("2001:db8::", 32, false)]);
        assert!(v6.lookup(ip("2001:db8:ffff::1")).matched());
        assert!(!v6.lookup(ip("2001:db9::1")).matched());
        assert!(!v6.lookup(ip("32.1.13.184")).matched());
        assert_eq!(v6.entries().len(), 1);
    }
}
