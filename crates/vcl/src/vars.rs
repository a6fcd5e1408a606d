//! The table of every VCL variable of Varnish 7.1 (see vcl-var(7)): name,
//! type, the subroutines where it may be read / set / unset, the VCL
//! versions it exists in, and a stable [`VarId`] that the runtime switches on.
//!
//! This is the single source of truth: the checker resolves names through
//! [`lookup`], the runtime dispatches on [`VarId`], and the reference
//! documentation (`docs/vcl-variables.md`) is generated from it by
//! [`reference_markdown`].

use crate::subs::{BuiltinSub, SubMask};
use crate::types::Type;

pub use crate::ast::VclVersion;

/// The VCL versions a variable exists in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VclVersions {
    pub min: VclVersion,
    pub max: VclVersion,
}

impl VclVersions {
    /// Every version.
    pub const ALL: VclVersions = VclVersions {
        min: VclVersion::V40,
        max: VclVersion::V41,
    };
    /// Only VCL 4.0 (removed in 4.1).
    pub const ONLY_40: VclVersions = VclVersions {
        min: VclVersion::V40,
        max: VclVersion::V40,
    };
    /// VCL 4.1 and later.
    pub const FROM_41: VclVersions = VclVersions {
        min: VclVersion::V41,
        max: VclVersion::V41,
    };

    /// Membership test.
    pub fn contains(self, v: VclVersion) -> bool {
        self.min <= v && v <= self.max
    }

    /// Varnish's wording for why a symbol is missing in another version.
    pub fn availability(self) -> &'static str {
        if self.min == VclVersion::V41 {
            "(Only available when 4.1 <= VCL syntax)"
        } else {
            "(Only available when VCL syntax <= 4.0)"
        }
    }
}

/// Stable identity of a variable. Header variables (`req.http.*`) and
/// storage variables (`storage.<name>.*`) have one id each; the header or
/// storage name travels beside the id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VarId {
    ClientIdentity,
    ClientIp,
    ServerHostname,
    ServerIdentity,
    ServerIp,
    RemoteIp,
    LocalEndpoint,
    LocalIp,
    LocalSocket,
    Req,
    ReqBackendHint,
    ReqCanGzip,
    ReqEsi,
    ReqEsiLevel,
    ReqGrace,
    ReqHash,
    ReqHashAlwaysMiss,
    ReqHashIgnoreBusy,
    ReqHashIgnoreVary,
    ReqHttp,
    ReqIsHitmiss,
    ReqIsHitpass,
    ReqMethod,
    ReqProto,
    ReqRestarts,
    ReqStorage,
    ReqTime,
    ReqTransport,
    ReqTtl,
    ReqUrl,
    ReqXid,
    ReqTopHttp,
    ReqTopMethod,
    ReqTopProto,
    ReqTopTime,
    ReqTopUrl,
    Bereq,
    BereqBackend,
    BereqBetweenBytesTimeout,
    BereqBody,
    BereqConnectTimeout,
    BereqFirstByteTimeout,
    BereqHash,
    BereqHttp,
    BereqIsBgfetch,
    BereqIsHitmiss,
    BereqIsHitpass,
    BereqMethod,
    BereqProto,
    BereqRetries,
    BereqTime,
    BereqUncacheable,
    BereqUrl,
    BereqXid,
    Beresp,
    BerespAge,
    BerespBackend,
    BerespBackendIp,
    BerespBackendName,
    BerespBody,
    BerespDoEsi,
    BerespDoGunzip,
    BerespDoGzip,
    BerespDoStream,
    BerespFilters,
    BerespGrace,
    BerespHttp,
    BerespKeep,
    BerespProto,
    BerespReason,
    BerespStatus,
    BerespStorage,
    BerespStorageHint,
    BerespTime,
    BerespTtl,
    BerespUncacheable,
    BerespWas304,
    ObjAge,
    ObjCanEsi,
    ObjGrace,
    ObjHits,
    ObjHttp,
    ObjKeep,
    ObjProto,
    ObjReason,
    ObjStatus,
    ObjStorage,
    ObjTime,
    ObjTtl,
    ObjUncacheable,
    Resp,
    RespBody,
    RespDoEsi,
    RespFilters,
    RespHttp,
    RespIsStreaming,
    RespProto,
    RespReason,
    RespStatus,
    RespTime,
    Now,
    SessIdleSendTimeout,
    SessSendTimeout,
    SessTimeoutIdle,
    SessTimeoutLinger,
    SessXid,
    StorageFreeSpace,
    StorageHappy,
    StorageUsedSpace,
}

/// One row of the variable table.
#[derive(Debug)]
pub struct VarDef {
    /// Full name; header prefixes end in `.` (`req.http.`), storage
    /// variables are written `storage.<name>.free_space`.
    pub name: &'static str,
    pub id: VarId,
    pub ty: Type,
    pub read: SubMask,
    pub write: SubMask,
    pub unset: SubMask,
    pub versions: VclVersions,
    pub doc: &'static str,
}

impl VarDef {
    /// True for `xxx.http.` header families.
    pub fn is_header_family(&self) -> bool {
        self.name.ends_with('.')
    }

    /// True for `storage.<name>.*` variables.
    pub fn is_storage(&self) -> bool {
        self.name.starts_with("storage.<name>.")
    }
}

/// The complete table, sorted by name within each family as in vcl-var(7).
pub static VARIABLES: &[VarDef] = &[
    VarDef {
        name: "client.identity",
        id: VarId::ClientIdentity,
        ty: Type::String,
        read: SubMask::BOTH,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Identification of the client, used to load balance in the client director; defaults to the client IP.",
    },
    VarDef {
        name: "client.ip",
        id: VarId::ClientIp,
        ty: Type::Ip,
        read: SubMask::BOTH,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The client's IP address, either the same as remote.ip or what the PROXY protocol told us.",
    },
    VarDef {
        name: "server.hostname",
        id: VarId::ServerHostname,
        ty: Type::String,
        read: SubMask::ALL,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The host name of the server, as returned by gethostname(3).",
    },
    VarDef {
        name: "server.identity",
        id: VarId::ServerIdentity,
        ty: Type::String,
        read: SubMask::ALL,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The identity of the server, as set by the -i parameter (defaults to the host name).",
    },
    VarDef {
        name: "server.ip",
        id: VarId::ServerIp,
        ty: Type::Ip,
        read: SubMask::BOTH,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The IP address of the socket on which the client connection was received.",
    },
    VarDef {
        name: "remote.ip",
        id: VarId::RemoteIp,
        ty: Type::Ip,
        read: SubMask::BOTH,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The IP address of the other end of the TCP connection (client or proxy).",
    },
    VarDef {
        name: "local.endpoint",
        id: VarId::LocalEndpoint,
        ty: Type::String,
        read: SubMask::BOTH,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::FROM_41,
        doc: "The address of the -a socket the session was accepted on.",
    },
    VarDef {
        name: "local.ip",
        id: VarId::LocalIp,
        ty: Type::Ip,
        read: SubMask::BOTH,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The IP address and port of the local end of the TCP connection.",
    },
    VarDef {
        name: "local.socket",
        id: VarId::LocalSocket,
        ty: Type::String,
        read: SubMask::BOTH,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::FROM_41,
        doc: "The name of the -a socket the session was accepted on.",
    },
    VarDef {
        name: "req",
        id: VarId::Req,
        ty: Type::Http,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The entire request HTTP data structure, mostly useful for passing to VMODs.",
    },
    VarDef {
        name: "req.backend_hint",
        id: VarId::ReqBackendHint,
        ty: Type::Backend,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Set bereq.backend to this if we attempt to fetch.",
    },
    VarDef {
        name: "req.can_gzip",
        id: VarId::ReqCanGzip,
        ty: Type::Bool,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "True if the client provided gzip or x-gzip in the Accept-Encoding header.",
    },
    VarDef {
        name: "req.esi",
        id: VarId::ReqEsi,
        ty: Type::Bool,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ONLY_40,
        doc: "Set to false to disable ESI processing (replaced by resp.do_esi in VCL 4.1).",
    },
    VarDef {
        name: "req.esi_level",
        id: VarId::ReqEsiLevel,
        ty: Type::Int,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "How many levels of ESI requests we are currently at.",
    },
    VarDef {
        name: "req.grace",
        id: VarId::ReqGrace,
        ty: Type::Duration,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Upper limit on the object grace during lookup.",
    },
    VarDef {
        name: "req.hash",
        id: VarId::ReqHash,
        ty: Type::Blob,
        read: SubMask::of(&[
            BuiltinSub::Hit,
            BuiltinSub::Miss,
            BuiltinSub::Pass,
            BuiltinSub::Purge,
            BuiltinSub::Deliver,
        ]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The hash key of this request.",
    },
    VarDef {
        name: "req.hash_always_miss",
        id: VarId::ReqHashAlwaysMiss,
        ty: Type::Bool,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Force a cache miss for this request.",
    },
    VarDef {
        name: "req.hash_ignore_busy",
        id: VarId::ReqHashIgnoreBusy,
        ty: Type::Bool,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Ignore any busy object during cache lookup.",
    },
    VarDef {
        name: "req.hash_ignore_vary",
        id: VarId::ReqHashIgnoreVary,
        ty: Type::Bool,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Ignore the objects' Vary headers during cache lookup.",
    },
    VarDef {
        name: "req.http.",
        id: VarId::ReqHttp,
        ty: Type::Header,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::CLIENT,
        versions: VclVersions::ALL,
        doc: "The headers of the request.",
    },
    VarDef {
        name: "req.is_hitmiss",
        id: VarId::ReqIsHitmiss,
        ty: Type::Bool,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "If this request resulted in a hitmiss.",
    },
    VarDef {
        name: "req.is_hitpass",
        id: VarId::ReqIsHitpass,
        ty: Type::Bool,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "If this request resulted in a hitpass.",
    },
    VarDef {
        name: "req.method",
        id: VarId::ReqMethod,
        ty: Type::String,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The request method (GET, HEAD, ...).",
    },
    VarDef {
        name: "req.proto",
        id: VarId::ReqProto,
        ty: Type::String,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ONLY_40,
        doc: "The HTTP protocol version used by the client.",
    },
    VarDef {
        name: "req.proto",
        id: VarId::ReqProto,
        ty: Type::String,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::FROM_41,
        doc: "The HTTP protocol version used by the client (read-only in VCL 4.1).",
    },
    VarDef {
        name: "req.restarts",
        id: VarId::ReqRestarts,
        ty: Type::Int,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "How many times this request has been restarted.",
    },
    VarDef {
        name: "req.storage",
        id: VarId::ReqStorage,
        ty: Type::Stevedore,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The storage backend to use to save this request body.",
    },
    VarDef {
        name: "req.time",
        id: VarId::ReqTime,
        ty: Type::Time,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "When the request was fully received; constant across restarts.",
    },
    VarDef {
        name: "req.transport",
        id: VarId::ReqTransport,
        ty: Type::String,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The transport protocol which brought this request.",
    },
    VarDef {
        name: "req.ttl",
        id: VarId::ReqTtl,
        ty: Type::Duration,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Upper limit on the object age for cache lookups to return hit.",
    },
    VarDef {
        name: "req.url",
        id: VarId::ReqUrl,
        ty: Type::String,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The requested URL.",
    },
    VarDef {
        name: "req.xid",
        id: VarId::ReqXid,
        ty: Type::String,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Unique ID of this request.",
    },
    VarDef {
        name: "req_top.http.",
        id: VarId::ReqTopHttp,
        ty: Type::Header,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Headers of the top-level request in a tree of ESI requests.",
    },
    VarDef {
        name: "req_top.method",
        id: VarId::ReqTopMethod,
        ty: Type::String,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The request method of the top-level request.",
    },
    VarDef {
        name: "req_top.proto",
        id: VarId::ReqTopProto,
        ty: Type::String,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The protocol version of the top-level request.",
    },
    VarDef {
        name: "req_top.time",
        id: VarId::ReqTopTime,
        ty: Type::Time,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "When the top-level request was fully received.",
    },
    VarDef {
        name: "req_top.url",
        id: VarId::ReqTopUrl,
        ty: Type::String,
        read: SubMask::CLIENT,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The URL of the top-level request.",
    },
    VarDef {
        name: "bereq",
        id: VarId::Bereq,
        ty: Type::Http,
        read: SubMask::BACKEND,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The entire backend request HTTP data structure.",
    },
    VarDef {
        name: "bereq.backend",
        id: VarId::BereqBackend,
        ty: Type::Backend,
        read: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        write: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The backend or director we attempt to fetch from.",
    },
    VarDef {
        name: "bereq.between_bytes_timeout",
        id: VarId::BereqBetweenBytesTimeout,
        ty: Type::Duration,
        read: SubMask::BACKEND,
        write: SubMask::BACKEND,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Time to wait between each received byte from the backend.",
    },
    VarDef {
        name: "bereq.body",
        id: VarId::BereqBody,
        ty: Type::Body,
        read: SubMask::NONE,
        write: SubMask::NONE,
        unset: SubMask::of(&[BuiltinSub::BackendFetch]),
        versions: VclVersions::ALL,
        doc: "The request body; unset also removes Content-Length.",
    },
    VarDef {
        name: "bereq.connect_timeout",
        id: VarId::BereqConnectTimeout,
        ty: Type::Duration,
        read: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        write: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Time to wait for a backend connection to be established.",
    },
    VarDef {
        name: "bereq.first_byte_timeout",
        id: VarId::BereqFirstByteTimeout,
        ty: Type::Duration,
        read: SubMask::BACKEND,
        write: SubMask::BACKEND,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Time to wait for the first byte from the backend.",
    },
    VarDef {
        name: "bereq.hash",
        id: VarId::BereqHash,
        ty: Type::Blob,
        read: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The hash key of this request, a copy of req.hash.",
    },
    VarDef {
        name: "bereq.http.",
        id: VarId::BereqHttp,
        ty: Type::Header,
        read: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        write: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        unset: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        versions: VclVersions::ALL,
        doc: "The headers to be sent to the backend.",
    },
    VarDef {
        name: "bereq.is_bgfetch",
        id: VarId::BereqIsBgfetch,
        ty: Type::Bool,
        read: SubMask::BACKEND,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "True for background fetches of objects in grace.",
    },
    VarDef {
        name: "bereq.is_hitmiss",
        id: VarId::BereqIsHitmiss,
        ty: Type::Bool,
        read: SubMask::BACKEND,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "If this backend request was caused by a hitmiss.",
    },
    VarDef {
        name: "bereq.is_hitpass",
        id: VarId::BereqIsHitpass,
        ty: Type::Bool,
        read: SubMask::BACKEND,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "If this backend request was caused by a hitpass.",
    },
    VarDef {
        name: "bereq.method",
        id: VarId::BereqMethod,
        ty: Type::String,
        read: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        write: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The request method.",
    },
    VarDef {
        name: "bereq.proto",
        id: VarId::BereqProto,
        ty: Type::String,
        read: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        write: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        unset: SubMask::NONE,
        versions: VclVersions::ONLY_40,
        doc: "The HTTP protocol version.",
    },
    VarDef {
        name: "bereq.proto",
        id: VarId::BereqProto,
        ty: Type::String,
        read: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::FROM_41,
        doc: "The HTTP protocol version (read-only in VCL 4.1).",
    },
    VarDef {
        name: "bereq.retries",
        id: VarId::BereqRetries,
        ty: Type::Int,
        read: SubMask::BACKEND,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "How many times this request has been retried.",
    },
    VarDef {
        name: "bereq.time",
        id: VarId::BereqTime,
        ty: Type::Time,
        read: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "When we started preparing the first backend request.",
    },
    VarDef {
        name: "bereq.uncacheable",
        id: VarId::BereqUncacheable,
        ty: Type::Bool,
        read: SubMask::BACKEND,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Whether this request is uncacheable (pass or hit-for-pass).",
    },
    VarDef {
        name: "bereq.url",
        id: VarId::BereqUrl,
        ty: Type::String,
        read: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        write: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The requested URL.",
    },
    VarDef {
        name: "bereq.xid",
        id: VarId::BereqXid,
        ty: Type::String,
        read: SubMask::BACKEND.union(SubMask::of(&[BuiltinSub::Pipe])),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Unique ID of this request.",
    },
    VarDef {
        name: "beresp",
        id: VarId::Beresp,
        ty: Type::Http,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The entire backend response HTTP data structure.",
    },
    VarDef {
        name: "beresp.age",
        id: VarId::BerespAge,
        ty: Type::Duration,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The age of the object.",
    },
    VarDef {
        name: "beresp.backend",
        id: VarId::BerespBackend,
        ty: Type::Backend,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The backend we fetched from.",
    },
    VarDef {
        name: "beresp.backend.ip",
        id: VarId::BerespBackendIp,
        ty: Type::Ip,
        read: SubMask::of(&[BuiltinSub::BackendResponse]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ONLY_40,
        doc: "IP of the backend this response was fetched from.",
    },
    VarDef {
        name: "beresp.backend.name",
        id: VarId::BerespBackendName,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Name of the backend this response was fetched from.",
    },
    VarDef {
        name: "beresp.body",
        id: VarId::BerespBody,
        ty: Type::Body,
        read: SubMask::NONE,
        write: SubMask::of(&[BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "For producing a synthetic body.",
    },
    VarDef {
        name: "beresp.do_esi",
        id: VarId::BerespDoEsi,
        ty: Type::Bool,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "ESI-process the object after fetching it.",
    },
    VarDef {
        name: "beresp.do_gunzip",
        id: VarId::BerespDoGunzip,
        ty: Type::Bool,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Gunzip the object before storing it.",
    },
    VarDef {
        name: "beresp.do_gzip",
        id: VarId::BerespDoGzip,
        ty: Type::Bool,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Gzip the object before storing it.",
    },
    VarDef {
        name: "beresp.do_stream",
        id: VarId::BerespDoStream,
        ty: Type::Bool,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Deliver the object to the client while fetching it.",
    },
    VarDef {
        name: "beresp.filters",
        id: VarId::BerespFilters,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::BackendResponse]),
        write: SubMask::of(&[BuiltinSub::BackendResponse]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "List of fetch filters the body is pulled through.",
    },
    VarDef {
        name: "beresp.grace",
        id: VarId::BerespGrace,
        ty: Type::Duration,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Grace period of the object.",
    },
    VarDef {
        name: "beresp.http.",
        id: VarId::BerespHttp,
        ty: Type::Header,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        versions: VclVersions::ALL,
        doc: "The headers of the backend response.",
    },
    VarDef {
        name: "beresp.keep",
        id: VarId::BerespKeep,
        ty: Type::Duration,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Keep period of the object (for conditional refreshes).",
    },
    VarDef {
        name: "beresp.proto",
        id: VarId::BerespProto,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ONLY_40,
        doc: "The HTTP protocol version the backend replied with.",
    },
    VarDef {
        name: "beresp.proto",
        id: VarId::BerespProto,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::FROM_41,
        doc: "The HTTP protocol version the backend replied with (read-only in VCL 4.1).",
    },
    VarDef {
        name: "beresp.reason",
        id: VarId::BerespReason,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The HTTP status message returned by the server.",
    },
    VarDef {
        name: "beresp.status",
        id: VarId::BerespStatus,
        ty: Type::Int,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The HTTP status code returned by the server.",
    },
    VarDef {
        name: "beresp.storage",
        id: VarId::BerespStorage,
        ty: Type::Stevedore,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The storage backend to use to save this object.",
    },
    VarDef {
        name: "beresp.storage_hint",
        id: VarId::BerespStorageHint,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ONLY_40,
        doc: "Deprecated hint naming the storage backend to use.",
    },
    VarDef {
        name: "beresp.time",
        id: VarId::BerespTime,
        ty: Type::Time,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "When the backend headers were fully received.",
    },
    VarDef {
        name: "beresp.ttl",
        id: VarId::BerespTtl,
        ty: Type::Duration,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The object's remaining time to live.",
    },
    VarDef {
        name: "beresp.uncacheable",
        id: VarId::BerespUncacheable,
        ty: Type::Bool,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Makes the object uncacheable (hit-for-miss).",
    },
    VarDef {
        name: "beresp.was_304",
        id: VarId::BerespWas304,
        ty: Type::Bool,
        read: SubMask::of(&[BuiltinSub::BackendResponse, BuiltinSub::BackendError]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "True if a 304 refreshed an existing object.",
    },
    VarDef {
        name: "obj.age",
        id: VarId::ObjAge,
        ty: Type::Duration,
        read: SubMask::of(&[BuiltinSub::Hit, BuiltinSub::Deliver]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The age of the object.",
    },
    VarDef {
        name: "obj.can_esi",
        id: VarId::ObjCanEsi,
        ty: Type::Bool,
        read: SubMask::of(&[BuiltinSub::Hit, BuiltinSub::Deliver]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "If the object can be ESI processed.",
    },
    VarDef {
        name: "obj.grace",
        id: VarId::ObjGrace,
        ty: Type::Duration,
        read: SubMask::of(&[BuiltinSub::Hit, BuiltinSub::Deliver]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The object's grace period.",
    },
    VarDef {
        name: "obj.hits",
        id: VarId::ObjHits,
        ty: Type::Int,
        read: SubMask::of(&[BuiltinSub::Hit, BuiltinSub::Deliver]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The count of cache hits on this object.",
    },
    VarDef {
        name: "obj.http.",
        id: VarId::ObjHttp,
        ty: Type::Header,
        read: SubMask::of(&[BuiltinSub::Hit]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The headers of the cached object.",
    },
    VarDef {
        name: "obj.keep",
        id: VarId::ObjKeep,
        ty: Type::Duration,
        read: SubMask::of(&[BuiltinSub::Hit, BuiltinSub::Deliver]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The object's keep period.",
    },
    VarDef {
        name: "obj.proto",
        id: VarId::ObjProto,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::Hit]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The HTTP protocol version stored with the object.",
    },
    VarDef {
        name: "obj.reason",
        id: VarId::ObjReason,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::Hit]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The HTTP reason phrase stored with the object.",
    },
    VarDef {
        name: "obj.status",
        id: VarId::ObjStatus,
        ty: Type::Int,
        read: SubMask::of(&[BuiltinSub::Hit]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The HTTP status code stored with the object.",
    },
    VarDef {
        name: "obj.storage",
        id: VarId::ObjStorage,
        ty: Type::Stevedore,
        read: SubMask::of(&[BuiltinSub::Hit, BuiltinSub::Deliver]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The storage backend holding the object.",
    },
    VarDef {
        name: "obj.time",
        id: VarId::ObjTime,
        ty: Type::Time,
        read: SubMask::of(&[BuiltinSub::Hit, BuiltinSub::Deliver]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "When the object was created.",
    },
    VarDef {
        name: "obj.ttl",
        id: VarId::ObjTtl,
        ty: Type::Duration,
        read: SubMask::of(&[BuiltinSub::Hit, BuiltinSub::Deliver]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The object's remaining time to live.",
    },
    VarDef {
        name: "obj.uncacheable",
        id: VarId::ObjUncacheable,
        ty: Type::Bool,
        read: SubMask::of(&[BuiltinSub::Deliver]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Whether the object is uncacheable (pass, hit-for-pass, hit-for-miss).",
    },
    VarDef {
        name: "resp",
        id: VarId::Resp,
        ty: Type::Http,
        read: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The entire response HTTP data structure.",
    },
    VarDef {
        name: "resp.body",
        id: VarId::RespBody,
        ty: Type::Body,
        read: SubMask::NONE,
        write: SubMask::of(&[BuiltinSub::Synth]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "For producing a synthetic body.",
    },
    VarDef {
        name: "resp.do_esi",
        id: VarId::RespDoEsi,
        ty: Type::Bool,
        read: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        write: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        unset: SubMask::NONE,
        versions: VclVersions::FROM_41,
        doc: "Set to false to disable ESI processing.",
    },
    VarDef {
        name: "resp.filters",
        id: VarId::RespFilters,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        write: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "List of delivery filters the body is pushed through.",
    },
    VarDef {
        name: "resp.http.",
        id: VarId::RespHttp,
        ty: Type::Header,
        read: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        write: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        unset: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        versions: VclVersions::ALL,
        doc: "The headers of the response.",
    },
    VarDef {
        name: "resp.is_streaming",
        id: VarId::RespIsStreaming,
        ty: Type::Bool,
        read: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "True if the response is streamed while being fetched.",
    },
    VarDef {
        name: "resp.proto",
        id: VarId::RespProto,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        write: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        unset: SubMask::NONE,
        versions: VclVersions::ONLY_40,
        doc: "The HTTP protocol version to use for the response.",
    },
    VarDef {
        name: "resp.proto",
        id: VarId::RespProto,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::FROM_41,
        doc: "The HTTP protocol version to use for the response (read-only in VCL 4.1).",
    },
    VarDef {
        name: "resp.reason",
        id: VarId::RespReason,
        ty: Type::String,
        read: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        write: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The HTTP status message that will be returned.",
    },
    VarDef {
        name: "resp.status",
        id: VarId::RespStatus,
        ty: Type::Int,
        read: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        write: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The HTTP status code that will be returned.",
    },
    VarDef {
        name: "resp.time",
        id: VarId::RespTime,
        ty: Type::Time,
        read: SubMask::of(&[BuiltinSub::Deliver, BuiltinSub::Synth]),
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "When we started preparing the response.",
    },
    VarDef {
        name: "now",
        id: VarId::Now,
        ty: Type::Time,
        read: SubMask::ALL,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "The current time; as a string, an HTTP date.",
    },
    VarDef {
        name: "sess.idle_send_timeout",
        id: VarId::SessIdleSendTimeout,
        ty: Type::Duration,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Send timeout for individual pieces of data on client connections.",
    },
    VarDef {
        name: "sess.send_timeout",
        id: VarId::SessSendTimeout,
        ty: Type::Duration,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Total timeout for ordinary HTTP/1 responses.",
    },
    VarDef {
        name: "sess.timeout_idle",
        id: VarId::SessTimeoutIdle,
        ty: Type::Duration,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Idle timeout for this session.",
    },
    VarDef {
        name: "sess.timeout_linger",
        id: VarId::SessTimeoutLinger,
        ty: Type::Duration,
        read: SubMask::CLIENT,
        write: SubMask::CLIENT,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Linger timeout for this session.",
    },
    VarDef {
        name: "sess.xid",
        id: VarId::SessXid,
        ty: Type::String,
        read: SubMask::BOTH,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::FROM_41,
        doc: "Unique ID of this session.",
    },
    VarDef {
        name: "storage.<name>.free_space",
        id: VarId::StorageFreeSpace,
        ty: Type::Bytes,
        read: SubMask::ALL,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Free space available in the named stevedore.",
    },
    VarDef {
        name: "storage.<name>.happy",
        id: VarId::StorageHappy,
        ty: Type::Bool,
        read: SubMask::ALL,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Health status of the named stevedore.",
    },
    VarDef {
        name: "storage.<name>.used_space",
        id: VarId::StorageUsedSpace,
        ty: Type::Bytes,
        read: SubMask::ALL,
        write: SubMask::NONE,
        unset: SubMask::NONE,
        versions: VclVersions::ALL,
        doc: "Used space in the named stevedore.",
    },
];

/// The result of resolving a variable name.
#[derive(Debug)]
pub enum VarLookup {
    /// A plain variable.
    Plain(&'static VarDef),
    /// A header variable; the header name as written (not lowercased).
    Header(&'static VarDef, String),
    /// A storage variable; the storage name.
    Storage(&'static VarDef, String),
    /// The name exists, but not in the requested VCL version.
    WrongVersion(&'static VarDef),
    /// No such variable.
    NotFound,
}

/// Whether `name` is a valid header name in a `xxx.http.NAME` reference:
/// non-empty, made of VCL identifier characters, no dots.
pub fn valid_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Resolves a dotted variable name for a VCL version. `storages` lists the
/// configured stevedore names (`storage.<name>.*`).
pub fn lookup(name: &str, version: VclVersion, storages: &[String]) -> VarLookup {
    let mut wrong = None;
    for def in VARIABLES {
        let matched = if def.is_header_family() {
            match strip_prefix_nocase(name, def.name) {
                Some(h) if valid_header_name(h) => Some(VarLookup::Header(def, h.to_string())),
                _ => None,
            }
        } else if def.is_storage() {
            let attr = &def.name["storage.<name>.".len()..];
            strip_prefix_nocase(name, "storage.")
                .and_then(|rest| rest.rsplit_once('.'))
                .filter(|(_, a)| a.eq_ignore_ascii_case(attr))
                .and_then(|(st, _)| storages.iter().find(|s| s.eq_ignore_ascii_case(st)))
                .map(|st| VarLookup::Storage(def, st.clone()))
        } else if def.name.eq_ignore_ascii_case(name) {
            Some(VarLookup::Plain(def))
        } else {
            None
        };
        if let Some(found) = matched {
            if def.versions.contains(version) {
                return found;
            }
            wrong = Some(def);
        }
    }
    match wrong {
        Some(def) => VarLookup::WrongVersion(def),
        None => VarLookup::NotFound,
    }
}

/// `name` without `prefix`, the prefix compared without regard to ASCII
/// case: vcc's symbol table finds `REQ.url` and `Req.Http.X` (a header name
/// keeps the case it is written in).
fn strip_prefix_nocase<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    name.get(..prefix.len())
        .filter(|p| p.eq_ignore_ascii_case(prefix))
        .map(|_| &name[prefix.len()..])
}

/// The row for an id in a version (the first matching row).
pub fn def_of(id: VarId, version: VclVersion) -> Option<&'static VarDef> {
    VARIABLES
        .iter()
        .find(|d| d.id == id && d.versions.contains(version))
}

/// Generates the markdown reference of all variables from the table.
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "# VCL variables\n\n\
         Generated from `crates/vcl/src/vars.rs` by `lacquer_vcl::vars::reference_markdown()`; \
         do not edit by hand.\n\n\
         Subroutine groups: *client* is vcl_recv, vcl_pipe, vcl_pass, vcl_hash, vcl_purge, \
         vcl_miss, vcl_hit, vcl_deliver and vcl_synth; *backend* is vcl_backend_fetch, \
         vcl_backend_response and vcl_backend_error; *all* adds vcl_init and vcl_fini.\n",
    );
    for def in VARIABLES {
        let mut title = def.name.to_string();
        if def.is_header_family() {
            title.push('*');
        }
        out.push_str(&format!("\n## `{title}`"));
        if def.versions == VclVersions::ONLY_40 {
            out.push_str(" (VCL 4.0 only)");
        } else if def.versions == VclVersions::FROM_41 {
            out.push_str(" (VCL >= 4.1)");
        }
        out.push_str(&format!("\n\n- Type: {}\n", def.ty));
        for (what, mask) in [
            ("Readable from", def.read),
            ("Writable from", def.write),
            ("Unsettable from", def.unset),
        ] {
            if !mask.is_empty() {
                out.push_str(&format!("- {what}: {}\n", mask.describe()));
            }
        }
        out.push_str(&format!("\n{}\n", def.doc));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st() -> Vec<String> {
        vec!["s0".to_string(), "Transient".to_string()]
    }

    #[test]
    fn plain_and_header_lookup() {
        match lookup("req.url", VclVersion::V41, &st()) {
            VarLookup::Plain(d) => {
                assert_eq!(d.id, VarId::ReqUrl);
                assert!(d.write.contains(BuiltinSub::Recv));
            }
            other => panic!("{other:?}"),
        }
        match lookup("beresp.http.Set-Cookie", VclVersion::V40, &st()) {
            VarLookup::Header(d, h) => {
                assert_eq!(d.id, VarId::BerespHttp);
                assert_eq!(h, "Set-Cookie");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            lookup("req.http.req.http.foo", VclVersion::V41, &st()),
            VarLookup::NotFound
        ));
        assert!(matches!(
            lookup("req.foobar", VclVersion::V41, &st()),
            VarLookup::NotFound
        ));
        assert!(matches!(
            lookup("obj", VclVersion::V41, &st()),
            VarLookup::NotFound
        ));
    }

    #[test]
    fn versions() {
        assert!(matches!(
            lookup("sess.xid", VclVersion::V40, &st()),
            VarLookup::WrongVersion(d) if d.versions.availability().contains("4.1 <=")
        ));
        assert!(matches!(
            lookup("req.esi", VclVersion::V41, &st()),
            VarLookup::WrongVersion(_)
        ));
        match lookup("req.proto", VclVersion::V41, &st()) {
            VarLookup::Plain(d) => assert!(d.write.is_empty()),
            other => panic!("{other:?}"),
        }
        match lookup("req.proto", VclVersion::V40, &st()) {
            VarLookup::Plain(d) => assert!(!d.write.is_empty()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn storage_lookup() {
        match lookup("storage.s0.free_space", VclVersion::V41, &st()) {
            VarLookup::Storage(d, s) => {
                assert_eq!(d.id, VarId::StorageFreeSpace);
                assert_eq!(s, "s0");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            lookup("storage.foo.free_space", VclVersion::V41, &st()),
            VarLookup::NotFound
        ));
    }

    #[test]
    fn groups() {
        let now = def_of(VarId::Now, VclVersion::V41).unwrap();
        assert!(now.read.contains(BuiltinSub::Init));
        let ip = def_of(VarId::ClientIp, VclVersion::V41).unwrap();
        assert!(!ip.read.contains(BuiltinSub::Init));
        let body = def_of(VarId::BereqBody, VclVersion::V41).unwrap();
        assert!(body.unset.contains(BuiltinSub::BackendFetch));
        assert!(body.read.is_empty());
        // vcc lets vcl_init and vcl_fini read the storage variables.
        for id in [
            VarId::StorageFreeSpace,
            VarId::StorageHappy,
            VarId::StorageUsedSpace,
        ] {
            let d = def_of(id, VclVersion::V41).unwrap();
            assert!(d.read.contains(BuiltinSub::Init) && d.read.contains(BuiltinSub::Fini));
        }
    }

    #[test]
    fn committed_reference_is_up_to_date() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/vcl-variables.md");
        let want = reference_markdown();
        if std::env::var_os("LACQUER_BLESS").is_some() {
            std::fs::write(path, &want).expect("write docs/vcl-variables.md");
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            have == want,
            "docs/vcl-variables.md is stale; regenerate with LACQUER_BLESS=1 cargo test -p lacquer-vcl"
        );
    }
}
