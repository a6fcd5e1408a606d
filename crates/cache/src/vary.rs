//! `Vary` handling: which request header values an object variant was made for.
//!
//! When a fetched response carries `Vary`, the values of the listed headers in the
//! backend request, as VCL left it, are captured ([`VarySpec::capture`]; a value
//! varnishd's `VRY_Create` would refuse is caught first by [`check_vary`]); a later
//! request may only use that variant if its own values are the same
//! ([`VarySpec::matches`]). Header names compare case-insensitively, values
//! exactly after trailing white space is removed (as varnishd does). A header
//! absent when captured only matches requests that lack it too. As in varnishd
//! (`VRY_Create`), `*` is a header name like any other: a `Vary: *` variant
//! matches the requests that have no `*` header (builtin.vcl makes such a
//! response a hit-for-miss, which then answers every request of its hash). A
//! name that is not UTF-8 makes a variant no request matches.

/// Access to a message's headers by case-insensitive name (first occurrence).
pub trait HeaderLookup: Sync {
    /// The value of the first header called `name`, if any.
    fn header(&self, name: &str) -> Option<&[u8]>;
}

impl<K: AsRef<[u8]> + Sync, V: AsRef<[u8]> + Sync> HeaderLookup for [(K, V)] {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(k, _)| k.as_ref().eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.as_ref())
    }
}

impl<K: AsRef<[u8]> + Sync, V: AsRef<[u8]> + Sync> HeaderLookup for Vec<(K, V)> {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.as_slice().header(name)
    }
}

/// No headers at all.
impl HeaderLookup for () {
    fn header(&self, _name: &str) -> Option<&[u8]> {
        None
    }
}

fn trim_end(v: &[u8]) -> &[u8] {
    let n = v
        .iter()
        .rposition(|c| !matches!(c, b' ' | b'\t'))
        .map_or(0, |p| p + 1);
    &v[..n]
}

/// Why varnishd's `VRY_Create` refuses a response's `Vary` value; the fetch
/// then logs [`message`](VaryError::message) and makes the object a
/// hit-for-miss ("Illegal 'Vary' header from backend").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VaryError {
    /// A header name longer than 127 bytes.
    NameTooLong,
    /// The request's value for a named header is 65,535 bytes or longer.
    ValueTooLong,
    /// Two names not separated by a comma (`Vary: a b`).
    Malformed,
}

impl VaryError {
    /// The `Error` record varnishd writes for it.
    pub fn message(self) -> &'static str {
        match self {
            VaryError::NameTooLong => "Vary header name length exceeded",
            VaryError::ValueTooLong => "Vary header maximum length exceeded",
            VaryError::Malformed => "Malformed Vary header",
        }
    }
}

/// Checks a (collected) `Vary` value as `VRY_Create` parses it: names are
/// separated by commas with optional blanks (space, tab) around them, and
/// anything else after a name is an error; empty names between commas are
/// allowed. `req` is the backend request the values would be taken from.
pub fn check_vary(value: &[u8], req: &dyn HeaderLookup) -> Result<(), VaryError> {
    let blank = |c: u8| c == b' ' || c == b'\t';
    let mut p = 0;
    while p < value.len() {
        if blank(value[p]) {
            p += 1;
            continue;
        }
        let mut q = p;
        while q < value.len() && !blank(value[q]) && value[q] != b',' {
            q += 1;
        }
        if q - p > 127 {
            return Err(VaryError::NameTooLong);
        }
        if let Ok(name) = std::str::from_utf8(&value[p..q])
            && let Some(v) = req.header(name)
            && trim_end(v).len() > 0xffff - 1
        {
            return Err(VaryError::ValueTooLong);
        }
        while q < value.len() && blank(value[q]) {
            q += 1;
        }
        if q == value.len() {
            break;
        }
        if value[q] != b',' {
            return Err(VaryError::Malformed);
        }
        p = q + 1;
    }
    Ok(())
}

/// A captured header: lower-case name and value (`None`: absent).
type VaryEntry = (Box<str>, Option<Box<[u8]>>);

/// The request header values a variant was made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarySpec {
    never: bool,
    entries: Box<[VaryEntry]>,
}

impl VarySpec {
    /// Capture the values named by a response's `Vary` header value(s) from the
    /// request. Returns `None` when `Vary` names no header (nothing to match).
    pub fn capture<'a, I>(vary_values: I, req: &dyn HeaderLookup) -> Option<VarySpec>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let mut never = false;
        let mut entries: Vec<VaryEntry> = Vec::new();
        for v in vary_values {
            for tok in v.split(|c| *c == b',') {
                let tok = trim_end(tok);
                let start = tok.iter().position(|c| !matches!(c, b' ' | b'\t'));
                let Some(start) = start else { continue };
                let tok = &tok[start..];
                let Ok(name) = std::str::from_utf8(tok) else {
                    never = true;
                    continue;
                };
                let name = name.to_ascii_lowercase();
                if entries.iter().any(|(n, _)| **n == *name) {
                    continue;
                }
                let val = req.header(&name).map(|v| Box::<[u8]>::from(trim_end(v)));
                entries.push((name.into_boxed_str(), val));
            }
        }
        if entries.is_empty() && !never {
            return None;
        }
        Some(VarySpec {
            never,
            entries: entries.into_boxed_slice(),
        })
    }

    /// The same header names with `req`'s values: the variant `req` would
    /// get if the response varies as this one did (varnishd's predictive
    /// vary for busy objects).
    pub fn for_request(&self, req: &dyn HeaderLookup) -> VarySpec {
        VarySpec {
            never: self.never,
            entries: self
                .entries
                .iter()
                .map(|(n, _)| {
                    (
                        n.clone(),
                        req.header(n).map(|v| Box::<[u8]>::from(trim_end(v))),
                    )
                })
                .collect(),
        }
    }

    /// Whether a request may use the variant.
    pub fn matches(&self, req: &dyn HeaderLookup) -> bool {
        !self.never
            && self
                .entries
                .iter()
                .all(|(name, val)| match (req.header(name), val) {
                    (None, None) => true,
                    (Some(r), Some(v)) => trim_end(r) == &v[..],
                    _ => false,
                })
    }

    /// A spec from its parts (as [`never`](Self::never) and
    /// [`entries`](Self::entries) give them; a persistent store's record).
    pub fn from_parts(never: bool, entries: Vec<(String, Option<Vec<u8>>)>) -> VarySpec {
        VarySpec {
            never,
            entries: entries
                .into_iter()
                .map(|(n, v)| (n.into_boxed_str(), v.map(Vec::into_boxed_slice)))
                .collect(),
        }
    }

    /// Whether no request matches (a header name that is not UTF-8).
    pub fn never(&self) -> bool {
        self.never
    }

    /// The captured (lower-case) header names and values.
    pub fn entries(&self) -> impl Iterator<Item = (&str, Option<&[u8]>)> {
        self.entries.iter().map(|(n, v)| (&**n, v.as_deref()))
    }

    /// What this spec costs the object's store, as varnishd sizes its vary
    /// string: per header a 2-byte value length, a 1-byte name length, the
    /// name with ':' and NUL, and the value; a 3-byte terminator; rounded up
    /// to 8 bytes.
    pub fn storage_size(&self) -> usize {
        let entries: usize = self
            .entries
            .iter()
            .map(|(n, v)| 2 + 1 + n.len() + 2 + v.as_ref().map_or(0, |v| v.len()))
            .sum();
        (entries + 3).next_multiple_of(8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_and_match() {
        let req: Vec<(&str, &str)> = vec![("Accept-Encoding", "gzip  "), ("X-Foo", "1")];
        let spec = VarySpec::capture([&b"accept-encoding, X-Bar"[..]], &req).unwrap();
        assert_eq!(
            spec.entries().collect::<Vec<_>>(),
            vec![("accept-encoding", Some(&b"gzip"[..])), ("x-bar", None)]
        );
        assert!(spec.matches(&req));
        let other: Vec<(&str, &str)> = vec![("accept-encoding", "gzip")];
        assert!(spec.matches(&other));
        let br: Vec<(&str, &str)> = vec![("accept-encoding", "br")];
        assert!(!spec.matches(&br));
        let with_bar: Vec<(&str, &str)> = vec![("accept-encoding", "gzip"), ("x-bar", "")];
        assert!(!spec.matches(&with_bar));
        assert!(!spec.matches(&()));
    }

    #[test]
    fn vary_values_refused_as_vry_create_does() {
        let ok: [&[u8]; 6] = [b"a", b" a , b ", b"a,,b", b",", b"\ta\t,\tb", b""];
        for v in ok {
            assert_eq!(
                check_vary(v, &()),
                Ok(()),
                "{:?}",
                String::from_utf8_lossy(v)
            );
        }
        assert_eq!(check_vary(b"a b", &()), Err(VaryError::Malformed));
        assert_eq!(check_vary(b"a, b;q=1 c", &()), Err(VaryError::Malformed));
        let long = "x".repeat(127);
        assert_eq!(check_vary(long.as_bytes(), &()), Ok(()));
        let longer = "x".repeat(128);
        assert_eq!(
            check_vary(longer.as_bytes(), &()),
            Err(VaryError::NameTooLong)
        );
        let big = "v".repeat(0xffff);
        let req: Vec<(&str, &str)> = vec![("X-Big", &big)];
        assert_eq!(check_vary(b"x-big", &req), Err(VaryError::ValueTooLong));
        let fits: Vec<(&str, &str)> = vec![("X-Big", &big[1..])];
        assert_eq!(check_vary(b"x-big", &fits), Ok(()));
    }

    #[test]
    fn star_and_empty() {
        assert!(VarySpec::capture([&b" , "[..]], &()).is_none());
        // `*` names a header, as in varnishd: absent, it matches requests
        // without one.
        let s = VarySpec::capture([&b"*"[..]], &()).unwrap();
        assert!(s.matches(&()));
        let star: Vec<(&str, &str)> = vec![("*", "x")];
        assert!(!s.matches(&star));
        let odd = VarySpec::capture([&b"\xff"[..]], &()).unwrap();
        assert!(!odd.matches(&()));
        let dup = VarySpec::capture([&b"A, a"[..], &b"a"[..]], &()).unwrap();
        assert_eq!(dup.entries().count(), 1);
        assert!(dup.matches(&()));
    }
}
