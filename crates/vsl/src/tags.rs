//! The VSL tag table: every log record tag of Varnish 7.1, in Varnish's
//! numbering order, with its flags, a one-line description and the names of
//! its whitespace-separated fields (what `[n]` selects in a query).
//!
//! Tag names are exactly what `varnishlog` prints; tools and VCL-visible
//! behaviour (`-i`, `-x`, `-q`, `vsl_mask`) depend on them, so the whole set
//! lives in one declarative table.

use std::fmt;

/// Payload may contain non-printable bytes; printed quoted with `%xx` escapes.
pub const F_BINARY: u8 = 1;
/// Payload comes from untrusted input and may contain anything.
pub const F_UNSAFE: u8 = 2;
/// Reserved or retired tag that Varnish 7.1 does not emit.
pub const F_UNUSED: u8 = 4;
/// Masked off by the default `vsl_mask`.
pub const F_MASKED: u8 = 8;

/// Static description of one tag.
#[derive(Debug)]
pub struct TagInfo {
    /// The tag.
    pub tag: Tag,
    /// Name as printed by varnishlog.
    pub name: &'static str,
    /// `F_*` flags.
    pub flags: u8,
    /// One-line description.
    pub desc: &'static str,
    /// Names of the whitespace-separated fields, in order (field 1 first).
    /// Empty when the payload is free text.
    pub fields: &'static [&'static str],
}

macro_rules! tag_table {
    ($( $name:ident = $id:literal, $flags:expr, $desc:literal, [$($field:literal),*]; )*) => {
        /// A VSL record tag. The discriminant is the on-disk tag number.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
        #[repr(u8)]
        #[allow(non_camel_case_types)]
        pub enum Tag {
            $(
                #[doc = $desc]
                $name = $id,
            )*
        }

        /// All tags, indexed by `tag as usize - 1`.
        pub static TAGS: &[TagInfo] = &[
            $( TagInfo {
                tag: Tag::$name,
                name: stringify!($name),
                flags: $flags,
                desc: $desc,
                fields: &[$($field),*],
            }, )*
        ];
    };
}

tag_table! {
    Debug = 1, F_UNSAFE | F_MASKED, "Debug messages", [];
    Error = 2, 0, "Error messages", [];
    CLI = 3, 0, "CLI communication", [];
    SessOpen = 4, 0, "Client connection opened",
        ["remote_addr", "remote_port", "socket_name", "local_addr", "local_port", "start_time", "fd"];
    SessClose = 5, 0, "Client connection closed", ["reason", "duration"];
    BackendOpen = 6, 0, "Backend connection opened",
        ["fd", "backend", "remote_addr", "remote_port", "local_addr", "local_port", "connect_or_reuse"];
    BackendReuse = 7, F_UNUSED, "Backend connection put up for reuse", ["fd", "backend"];
    BackendClose = 8, 0, "Backend connection closed", ["fd", "backend", "close_or_recycle", "reason"];
    HttpGarbage = 9, F_UNSAFE, "Unparseable HTTP request", [];
    Proxy = 10, 0, "PROXY protocol information",
        ["version", "client_ip", "client_port", "server_ip", "server_port"];
    ProxyGarbage = 11, 0, "Unparseable PROXY request", [];
    Backend = 12, F_UNUSED, "Backend selected", ["fd", "vcl", "backend"];
    Length = 13, 0, "Size of object body", ["bytes"];
    FetchError = 14, 0, "Error while fetching object", [];
    ReqMethod = 15, 0, "Client request method", ["method"];
    ReqURL = 16, 0, "Client request URL", ["url"];
    ReqProtocol = 17, 0, "Client request protocol", ["protocol"];
    ReqStatus = 18, F_UNUSED, "Client request status", ["status"];
    ReqReason = 19, F_UNUSED, "Client request response", [];
    ReqHeader = 20, 0, "Client request header", ["name:", "value"];
    ReqUnset = 21, 0, "Client request unset header", ["name:", "value"];
    ReqLost = 22, F_UNUSED, "Client request lost header", [];
    RespMethod = 23, F_UNUSED, "Client response method", ["method"];
    RespURL = 24, F_UNUSED, "Client response URL", ["url"];
    RespProtocol = 25, 0, "Client response protocol", ["protocol"];
    RespStatus = 26, 0, "Client response status", ["status"];
    RespReason = 27, 0, "Client response response", [];
    RespHeader = 28, 0, "Client response header", ["name:", "value"];
    RespUnset = 29, 0, "Client response unset header", ["name:", "value"];
    RespLost = 30, F_UNUSED, "Client response lost header", [];
    BereqMethod = 31, 0, "Backend request method", ["method"];
    BereqURL = 32, 0, "Backend request URL", ["url"];
    BereqProtocol = 33, 0, "Backend request protocol", ["protocol"];
    BereqStatus = 34, F_UNUSED, "Backend request status", ["status"];
    BereqReason = 35, F_UNUSED, "Backend request response", [];
    BereqHeader = 36, 0, "Backend request header", ["name:", "value"];
    BereqUnset = 37, 0, "Backend request unset header", ["name:", "value"];
    BereqLost = 38, F_UNUSED, "Backend request lost header", [];
    BerespMethod = 39, F_UNUSED, "Backend response method", ["method"];
    BerespURL = 40, F_UNUSED, "Backend response URL", ["url"];
    BerespProtocol = 41, 0, "Backend response protocol", ["protocol"];
    BerespStatus = 42, 0, "Backend response status", ["status"];
    BerespReason = 43, 0, "Backend response response", [];
    BerespHeader = 44, 0, "Backend response header", ["name:", "value"];
    BerespUnset = 45, 0, "Backend response unset header", ["name:", "value"];
    BerespLost = 46, F_UNUSED, "Backend response lost header", [];
    ObjMethod = 47, F_UNUSED, "Object method", ["method"];
    ObjURL = 48, F_UNUSED, "Object URL", ["url"];
    ObjProtocol = 49, F_MASKED, "Object protocol", ["protocol"];
    ObjStatus = 50, F_MASKED, "Object status", ["status"];
    ObjReason = 51, F_MASKED, "Object response", [];
    ObjHeader = 52, F_MASKED, "Object header", ["name:", "value"];
    ObjUnset = 53, 0, "Object unset header", ["name:", "value"];
    ObjLost = 54, F_UNUSED, "Object lost header", [];
    BogoHeader = 55, 0, "Bogus HTTP received", [];
    LostHeader = 56, 0, "Failed attempt to set HTTP header", [];
    TTL = 57, 0, "TTL set on object",
        ["source", "ttl", "grace", "keep", "reference", "age", "date", "expires", "max_age", "cacheable"];
    Fetch_Body = 58, 0, "Body fetched from backend", ["mode", "mode_name", "stream"];
    VCL_acl = 59, 0, "VCL ACL check results", ["result", "acl", "entry"];
    VCL_call = 60, 0, "VCL method called", ["method"];
    VCL_trace = 61, F_MASKED, "VCL trace data", ["vcl", "index", "source.line.pos"];
    VCL_return = 62, 0, "VCL method return value", ["action"];
    ReqStart = 63, 0, "Client request start", ["client_ip", "client_port", "listener"];
    Hit = 64, 0, "Hit object in cache", ["vxid", "ttl", "grace", "keep", "fetched", "length"];
    HitPass = 65, 0, "Hit for pass object in cache.", ["vxid", "ttl"];
    ExpBan = 66, 0, "Object evicted due to ban", ["vxid"];
    ExpKill = 67, F_MASKED, "Object expiry event", ["event"];
    WorkThread = 68, F_MASKED, "Logs thread start/stop events", ["worker", "start_or_end"];
    ESI_xmlerror = 69, 0, "ESI parser error or warning message", [];
    Hash = 70, F_UNSAFE | F_MASKED, "Value added to hash", [];
    Backend_health = 71, 0, "Backend health check",
        ["backend", "transition", "state", "window_bits", "good", "threshold", "window",
         "response_time", "average", "response"];
    VCL_Log = 72, 0, "Log statement from VCL", [];
    VCL_Error = 73, 0, "VCL execution error message", [];
    Gzip = 74, 0, "G(un)zip performed on object",
        ["op", "phase", "esi", "bytes_in", "bytes_out", "first_bit", "last_bit", "bit_len"];
    Link = 75, 0, "Links to a child VXID", ["child_type", "child_vxid", "reason"];
    Begin = 76, 0, "Marks the start of a VXID", ["type", "parent_vxid", "reason"];
    End = 77, 0, "Marks the end of a VXID", [];
    VSL = 78, 0, "VSL API warnings and error message", [];
    Storage = 79, 0, "Where object is stored", ["type", "name"];
    Timestamp = 80, 0, "Timing information", ["label:", "absolute", "since_start", "since_last"];
    ReqAcct = 81, 0, "Request handling byte counts",
        ["hdr_rx", "body_rx", "total_rx", "hdr_tx", "body_tx", "total_tx"];
    PipeAcct = 82, 0, "Pipe byte counts", ["client_hdr", "backend_hdr", "piped_in", "piped_out"];
    BereqAcct = 83, 0, "Backend request accounting",
        ["hdr_tx", "body_tx", "total_tx", "hdr_rx", "body_rx", "total_rx"];
    VfpAcct = 84, F_MASKED, "Fetch filter accounting", ["filter", "calls", "bytes"];
    Witness = 85, 0, "Lock order witness records", [];
    BackendStart = 86, F_UNUSED, "Backend request start", ["ip", "port"];
    H2RxHdr = 87, F_BINARY | F_MASKED, "Received HTTP2 frame header", [];
    H2RxBody = 88, F_BINARY | F_MASKED, "Received HTTP2 frame body", [];
    H2TxHdr = 89, F_BINARY | F_MASKED, "Transmitted HTTP2 frame header", [];
    H2TxBody = 90, F_BINARY | F_MASKED, "Transmitted HTTP2 frame body", [];
    HitMiss = 91, 0, "Hit for miss object in cache.", ["vxid", "ttl"];
    Filters = 92, 0, "Body filters", [];
    SessError = 93, 0, "Client connection accept failed",
        ["socket_name", "local_addr", "local_port", "fd", "errno", "message"];
    VCL_use = 94, 0, "VCL in use", ["vcl", "via", "label"];
    Notice = 95, 0, "Informational messages about request handling", ["manpage:", "message"];
    VdpAcct = 96, F_MASKED, "Deliver filter accounting", ["filter", "calls", "bytes"];
}

/// Highest tag number in use.
pub const MAX_TAG: u8 = 96;

/// The tag reference `lacquerd -x vsl` prints, in `varnishd -x vsl`'s
/// reStructuredText layout: each tag in use, its description, its fields
/// and whether the default `vsl_mask` hides it.
pub fn reference_rst() -> String {
    let mut out =
        String::from("\n.. The following is autogenerated output from lacquerd -x vsl\n\n");
    for t in TAGS.iter().filter(|t| t.flags & F_UNUSED == 0) {
        out.push_str(&format!(
            "\n{}\n{}\n\n{}\n\n",
            t.name,
            "-".repeat(t.name.len()),
            t.desc
        ));
        if !t.fields.is_empty() {
            out.push_str(&format!("Fields: {}\n\n", t.fields.join(", ")));
        }
        if t.flags & F_MASKED != 0 {
            out.push_str("NB: This log record is masked by default.\n\n");
        }
    }
    out
}

impl Tag {
    /// Tag with on-disk number `n`, if any.
    pub fn from_u8(n: u8) -> Option<Tag> {
        if n == 0 || n > MAX_TAG {
            return None;
        }
        Some(TAGS[usize::from(n) - 1].tag)
    }

    /// The table entry.
    pub fn info(self) -> &'static TagInfo {
        &TAGS[self as usize - 1]
    }

    /// Name as printed by varnishlog.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// `F_*` flags.
    pub fn flags(self) -> u8 {
        self.info().flags
    }

    /// Exact, case-insensitive name lookup.
    pub fn from_name(name: &str) -> Option<Tag> {
        TAGS.iter()
            .find(|t| t.name.eq_ignore_ascii_case(name))
            .map(|t| t.tag)
    }

    /// Name lookup like Varnish's `VSL_Name2Tag`: case insensitive, and a
    /// unique prefix of a tag name also selects it.
    pub fn lookup(name: &str) -> Result<Tag, TagError> {
        if let Some(t) = Tag::from_name(name) {
            return Ok(t);
        }
        let mut found = None;
        for t in TAGS {
            if t.name.len() >= name.len() && t.name[..name.len()].eq_ignore_ascii_case(name) {
                if found.is_some() {
                    return Err(TagError::Ambiguous(name.to_string()));
                }
                found = Some(t.tag);
            }
        }
        found.ok_or_else(|| TagError::Unknown(name.to_string()))
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Failure to resolve a tag name or glob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    /// No tag has this name.
    #[error("unknown VSL tag \"{0}\" (see vsl(7) for the list of tags)")]
    Unknown(String),
    /// The name is a prefix of several tags.
    #[error("ambiguous VSL tag \"{0}\": it is a prefix of several tags, give more of the name")]
    Ambiguous(String),
    /// A glob with a `*` in the middle or several `*`.
    #[error("bad VSL tag glob \"{0}\": '*' is only allowed at the start or the end")]
    BadGlob(String),
    /// A glob that selects nothing.
    #[error("VSL tag glob \"{0}\" matches no tag")]
    NoMatch(String),
}

impl TagError {
    /// The message Varnish's tools print for a bad tag list (`-i`, `-x`,
    /// the tag part of `-I`/`-X`), after the option name.
    pub fn list_message(&self) -> String {
        match self {
            TagError::Unknown(n) | TagError::NoMatch(n) => format!("\"{n}\" matches zero tags"),
            TagError::Ambiguous(n) => format!("\"{n}\" is ambiguous"),
            TagError::BadGlob(n) => format!("Syntax error in \"{n}\""),
        }
    }
}

/// A set of tags (bitset over tag numbers).
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct TagSet([u64; 2]);

impl TagSet {
    /// The empty set.
    pub const fn empty() -> TagSet {
        TagSet([0; 2])
    }

    /// Every tag.
    pub fn all() -> TagSet {
        let mut s = TagSet::empty();
        for t in TAGS {
            s.insert(t.tag);
        }
        s
    }

    /// The tags masked by Varnish's default `vsl_mask`.
    pub fn default_mask() -> TagSet {
        let mut s = TagSet::empty();
        for t in TAGS.iter().filter(|t| t.flags & F_MASKED != 0) {
            s.insert(t.tag);
        }
        s
    }

    /// Adds a tag.
    pub fn insert(&mut self, t: Tag) {
        let n = t as usize;
        self.0[n / 64] |= 1 << (n % 64);
    }

    /// Removes a tag.
    pub fn remove(&mut self, t: Tag) {
        let n = t as usize;
        self.0[n / 64] &= !(1 << (n % 64));
    }

    /// Membership test.
    #[inline]
    pub fn contains(&self, t: Tag) -> bool {
        let n = t as usize;
        self.0[n / 64] & (1 << (n % 64)) != 0
    }

    /// True if no tag is in the set.
    pub fn is_empty(&self) -> bool {
        self.0 == [0; 2]
    }

    /// The tags in the set, in tag order.
    pub fn iter(&self) -> impl Iterator<Item = Tag> + '_ {
        TAGS.iter().map(|t| t.tag).filter(|t| self.contains(*t))
    }

    /// Raw bits (for storing in atomics).
    pub fn to_bits(self) -> [u64; 2] {
        self.0
    }

    /// From raw bits.
    pub fn from_bits(bits: [u64; 2]) -> TagSet {
        TagSet(bits)
    }

    /// Tags selected by a glob: a name (or unique prefix), `*`, `Prefix*`
    /// or `*Suffix` (case insensitive), like Varnish's `VSL_Glob2Tags`.
    pub fn from_glob(glob: &str) -> Result<TagSet, TagError> {
        let stars = glob.matches('*').count();
        let mut s = TagSet::empty();
        if stars == 0 {
            s.insert(Tag::lookup(glob)?);
            return Ok(s);
        }
        if glob == "*" {
            return Ok(TagSet::all());
        }
        let lower = glob.to_ascii_lowercase();
        let test: Box<dyn Fn(&str) -> bool> = if stars == 1 && lower.ends_with('*') {
            let p = lower[..lower.len() - 1].to_string();
            Box::new(move |n: &str| n.starts_with(&p))
        } else if stars == 1 && lower.starts_with('*') {
            let p = lower[1..].to_string();
            Box::new(move |n: &str| n.ends_with(&p))
        } else {
            return Err(TagError::BadGlob(glob.to_string()));
        };
        for t in TAGS {
            if test(&t.name.to_ascii_lowercase()) {
                s.insert(t.tag);
            }
        }
        if s.is_empty() {
            return Err(TagError::NoMatch(glob.to_string()));
        }
        Ok(s)
    }

    /// Comma-separated list of globs (varnishlog `-i`/`-x` syntax).
    pub fn from_list(list: &str) -> Result<TagSet, TagError> {
        let mut s = TagSet::empty();
        for item in list.split(',') {
            let g = TagSet::from_glob(item.trim())?;
            s.0[0] |= g.0[0];
            s.0[1] |= g.0[1];
        }
        Ok(s)
    }

    /// Applies a `vsl_mask` parameter value to `self` (the current mask):
    /// comma separated items `-Tag` (mask off), `+Tag` (log again),
    /// `default` (Varnish's default mask), `none` (log everything) or
    /// `all` (mask everything). Tags may be globs.
    pub fn apply_mask_spec(self, spec: &str) -> Result<TagSet, TagError> {
        let mut s = self;
        for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item {
                "default" => s = TagSet::default_mask(),
                "none" => s = TagSet::empty(),
                "all" => s = TagSet::all(),
                _ => {
                    let (add, glob) = match item.as_bytes()[0] {
                        b'-' => (true, &item[1..]),
                        b'+' => (false, &item[1..]),
                        _ => (true, item),
                    };
                    for t in TagSet::from_glob(glob)?.iter() {
                        if add {
                            s.insert(t);
                        } else {
                            s.remove(t);
                        }
                    }
                }
            }
        }
        Ok(s)
    }

    /// Renders the mask as a `vsl_mask` value (`-Tag,-Tag`), `none` if empty.
    pub fn to_mask_spec(&self) -> String {
        if self.is_empty() {
            return "none".to_string();
        }
        self.iter()
            .map(|t| format!("-{}", t.name()))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl fmt::Debug for TagSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_lists_used_tags_and_default_mask() {
        let r = reference_rst();
        assert!(r.contains("\nReqURL\n------\n"));
        assert!(r.contains("\nDebug\n-----\n"));
        let debug = &r[r.find("\nDebug\n").unwrap()..];
        let next = debug[1..].find("\n\n\n").map_or(debug.len(), |i| i + 1);
        assert!(
            debug[..next].contains("masked by default"),
            "{}",
            &debug[..next]
        );
        for t in TAGS.iter().filter(|t| t.flags & F_UNUSED != 0) {
            assert!(!r.contains(&format!("\n{}\n", t.name)), "{}", t.name);
        }
    }

    #[test]
    fn table_is_dense_and_ordered() {
        assert_eq!(TAGS.len(), usize::from(MAX_TAG));
        for (i, t) in TAGS.iter().enumerate() {
            assert_eq!(t.tag as usize, i + 1, "{}", t.name);
            assert_eq!(Tag::from_u8(t.tag as u8), Some(t.tag));
        }
        assert_eq!(Tag::from_u8(0), None);
        assert_eq!(Tag::from_u8(MAX_TAG + 1), None);
    }

    #[test]
    fn names_and_lookup() {
        assert_eq!(Tag::ReqURL.name(), "ReqURL");
        assert_eq!(Tag::from_name("requrl"), Some(Tag::ReqURL));
        assert_eq!(Tag::lookup("Backend_h"), Ok(Tag::Backend_health));
        assert_eq!(Tag::lookup("Backend"), Ok(Tag::Backend));
        assert!(matches!(Tag::lookup("Req"), Err(TagError::Ambiguous(_))));
        assert!(matches!(Tag::lookup("Nope"), Err(TagError::Unknown(_))));
        assert_eq!(Tag::VCL_call.to_string(), "VCL_call");
    }

    #[test]
    fn default_mask_matches_varnish() {
        assert_eq!(
            TagSet::default_mask().to_mask_spec(),
            "-Debug,-ObjProtocol,-ObjStatus,-ObjReason,-ObjHeader,-VCL_trace,-ExpKill,\
             -WorkThread,-Hash,-VfpAcct,-H2RxHdr,-H2RxBody,-H2TxHdr,-H2TxBody,-VdpAcct"
        );
    }

    #[test]
    fn globs() {
        let e = TagSet::from_glob("*Error").unwrap();
        assert_eq!(
            e.iter().collect::<Vec<_>>(),
            vec![
                Tag::Error,
                Tag::FetchError,
                Tag::ESI_xmlerror,
                Tag::VCL_Error,
                Tag::SessError
            ]
        );
        let r = TagSet::from_glob("Resp*").unwrap();
        assert!(r.contains(Tag::RespHeader) && !r.contains(Tag::ReqHeader));
        assert_eq!(TagSet::from_glob("*").unwrap(), TagSet::all());
        assert!(matches!(
            TagSet::from_glob("R*q"),
            Err(TagError::BadGlob(_))
        ));
        assert!(matches!(
            TagSet::from_glob("Zz*"),
            Err(TagError::NoMatch(_))
        ));
        let l = TagSet::from_list("ReqURL, RespStatus").unwrap();
        assert_eq!(l.iter().count(), 2);
    }

    #[test]
    fn mask_specs() {
        let m = TagSet::default_mask()
            .apply_mask_spec("+Debug,-ReqURL")
            .unwrap();
        assert!(!m.contains(Tag::Debug));
        assert!(m.contains(Tag::ReqURL));
        assert!(m.contains(Tag::Hash));
        assert_eq!(m.apply_mask_spec("none").unwrap(), TagSet::empty());
        assert_eq!(
            TagSet::empty().apply_mask_spec("default").unwrap(),
            TagSet::default_mask()
        );
        assert!(TagSet::empty().apply_mask_spec("-Bogus").is_err());
    }
}
