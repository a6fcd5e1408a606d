//! Runtime parameters (`-p name=value`, `param.show`, `param.set`).
//!
//! One declarative table, [`PARAMS`], describes every parameter varnishd 7.1
//! accepts: its kind, default, bounds, unit and a one-line description.
//! The daemon's flag parser, the management CLI and the generated reference
//! all read this table; nothing else hard-codes a parameter name.
//!
//! Parameters that only tune machinery Lacquer does not have (thread pools,
//! PCRE2 limits, the C compiler…) are still accepted and shown, so that
//! existing `-p` command lines and scripts keep working; their description
//! says that Lacquer ignores them and why ([`Param::effective`] is false).

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

/// What kind of value a parameter holds, with its bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// `on`/`off`.
    Bool,
    /// Seconds, as a float; VCL duration suffixes (`ms s m h d w y`) accepted.
    Duration { min: Option<f64>, max: Option<f64> },
    /// A byte count; suffixes `b k m g t` (powers of 1024) accepted.
    Bytes { min: Option<u64>, max: Option<u64> },
    /// A non-negative integer.
    Uint { min: Option<u64>, max: Option<u64> },
    /// A plain float.
    Float { min: Option<f64>, max: Option<f64> },
    /// Free text.
    Text,
    /// A set of named bits changed with `+name`/`-name` lists.
    Bits { names: &'static [&'static str] },
    /// Varnish's `min,max,timeout` pool triple.
    Pool,
}

/// One row of the parameter table.
#[derive(Debug)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    /// The default, written as an operator would type it.
    pub default: &'static str,
    /// Unit shown by `param.show` (`seconds`, `bytes`, …); empty for none.
    pub unit: &'static str,
    /// False for parameters accepted only for compatibility.
    pub effective: bool,
    pub doc: &'static str,
}

const FEATURE_BITS: &[&str] = &[
    "http2",
    "short_panic",
    "no_coredump",
    "https_scheme",
    "http_date_postel",
    "esi_ignore_https",
    "esi_disable_xml_check",
    "esi_ignore_other_elements",
    "esi_remove_bom",
    "esi_include_onerror",
    "wait_silo",
    "validate_headers",
    "busy_stats_rate",
];
const DEBUG_BITS: &[&str] = &[
    "req_state",
    "workspace",
    "waitinglist",
    "syncvsl",
    "hashedge",
    "vclrel",
    "lurker",
    "esi_chop",
    "flush_head",
    "vtc_mode",
    "witness",
    "vsm_keep",
    "slow_acceptor",
    "h2_nocheck",
    "vmod_so_keep",
    "processors",
    "protocol",
    "vcl_keep",
    "lck",
];
const EXPERIMENTAL_BITS: &[&str] = &["drop_pools"];
/// Bits of `vsl_mask` are VSL tag names, checked against the tag table.
const ANY_BITS: &[&str] = &[];

const fn dur(min: Option<f64>, max: Option<f64>) -> Kind {
    Kind::Duration { min, max }
}
const fn bytes(min: Option<u64>, max: Option<u64>) -> Kind {
    Kind::Bytes { min, max }
}
const fn uint(min: Option<u64>, max: Option<u64>) -> Kind {
    Kind::Uint { min, max }
}

macro_rules! p {
    ($name:literal, $kind:expr, $default:literal, $unit:literal, $eff:expr, $doc:literal) => {
        Param {
            name: $name,
            kind: $kind,
            default: $default,
            unit: $unit,
            effective: $eff,
            doc: $doc,
        }
    };
}

const K: u64 = 1024;
const IGNORED: bool = false;
const USED: bool = true;

/// Every parameter, sorted by name.
#[rustfmt::skip]
/// FNV-1a: parameter names are short, trusted, static strings, and the
/// request path looks several up per request; SipHash or a binary search of
/// string comparisons cost several times more.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// The position of `name` in [`PARAMS`].
fn param_index(name: &str) -> Option<usize> {
    static INDEX: OnceLock<HashMap<&'static str, usize, BuildHasherDefault<Fnv>>> = OnceLock::new();
    INDEX
        .get_or_init(|| {
            PARAMS
                .iter()
                .enumerate()
                .map(|(i, p)| (p.name, i))
                .collect()
        })
        .get(name)
        .copied()
}

pub static PARAMS: &[Param] = &[
    p!(
        "accept_filter",
        Kind::Bool,
        "off",
        "bool",
        IGNORED,
        "Kernel accept filters; Linux has none, so this has no effect."
    ),
    p!(
        "acceptor_sleep_decay",
        Kind::Float {
            min: Some(0.0),
            max: Some(1.0)
        },
        "0.9",
        "",
        IGNORED,
        "Acceptor back-off decay; Lacquer's async acceptor does not sleep."
    ),
    p!(
        "acceptor_sleep_incr",
        dur(Some(0.0), Some(1.0)),
        "0",
        "seconds",
        IGNORED,
        "Acceptor back-off step; Lacquer's async acceptor does not sleep."
    ),
    p!(
        "acceptor_sleep_max",
        dur(Some(0.0), Some(10.0)),
        "0.05",
        "seconds",
        IGNORED,
        "Acceptor back-off cap; Lacquer's async acceptor does not sleep."
    ),
    p!(
        "auto_restart",
        Kind::Bool,
        "on",
        "bool",
        IGNORED,
        "Restart a crashed worker process; Lacquer runs as a single process."
    ),
    p!(
        "backend_idle_timeout",
        dur(Some(1.0), None),
        "60",
        "seconds",
        USED,
        "Close pooled backend connections idle for longer than this."
    ),
    p!(
        "backend_local_error_holddown",
        dur(Some(0.0), None),
        "10",
        "seconds",
        USED,
        "After a local connect error (e.g. out of ports), do not try that backend again for this long."
    ),
    p!(
        "backend_remote_error_holddown",
        dur(Some(0.0), None),
        "0.25",
        "seconds",
        USED,
        "After a connection refused or reset, do not try that backend again for this long."
    ),
    p!(
        "ban_cutoff",
        uint(Some(0), None),
        "0",
        "bans",
        USED,
        "Objects older than this many bans are dropped instead of tested (0: no cutoff)."
    ),
    p!(
        "ban_dups",
        Kind::Bool,
        "on",
        "bool",
        USED,
        "Mark older identical bans as completed when a new ban is added."
    ),
    p!(
        "ban_lurker_age",
        dur(Some(0.0), None),
        "60",
        "seconds",
        USED,
        "The ban lurker leaves bans younger than this alone."
    ),
    p!(
        "ban_lurker_batch",
        uint(Some(1), None),
        "1000",
        "",
        USED,
        "Objects the ban lurker tests before it sleeps."
    ),
    p!(
        "ban_lurker_holdoff",
        dur(Some(0.0), None),
        "0.01",
        "seconds",
        USED,
        "Pause of the ban lurker when it meets lock contention."
    ),
    p!(
        "ban_lurker_sleep",
        dur(Some(0.0), None),
        "0.01",
        "seconds",
        USED,
        "Pause of the ban lurker after each batch (0 disables the lurker)."
    ),
    p!(
        "between_bytes_timeout",
        dur(Some(0.0), None),
        "60",
        "seconds",
        USED,
        "Longest silence allowed between two reads of a backend response body."
    ),
    p!(
        "cc_command",
        Kind::Text,
        "",
        "",
        IGNORED,
        "C compiler command; Lacquer interprets VCL and compiles no C."
    ),
    p!(
        "cc_warnings",
        Kind::Text,
        "-Wall -Werror",
        "",
        IGNORED,
        "C compiler warnings; Lacquer compiles no C."
    ),
    p!(
        "cli_limit",
        bytes(Some(128), Some(99_999_999)),
        "48k",
        "bytes",
        USED,
        "Longest management CLI reply; longer replies are truncated."
    ),
    p!(
        "cli_timeout",
        dur(Some(0.0), None),
        "60",
        "seconds",
        USED,
        "Time a management CLI command may take."
    ),
    p!(
        "clock_skew",
        uint(Some(0), None),
        "10",
        "seconds",
        USED,
        "Tolerated difference between a backend's Date and ours when computing TTLs."
    ),
    p!(
        "clock_step",
        dur(Some(0.0), None),
        "1",
        "seconds",
        USED,
        "Clock jump tolerated before it is logged."
    ),
    p!(
        "connect_timeout",
        dur(Some(0.0), None),
        "3.5",
        "seconds",
        USED,
        "Default time to wait for a backend TCP connection."
    ),
    p!(
        "critbit_cooloff",
        dur(Some(60.0), Some(254.0)),
        "180",
        "seconds",
        IGNORED,
        "Critbit tree tuning; Lacquer uses a sharded hash table."
    ),
    p!(
        "curl_max_inflight",
        uint(Some(0), None),
        "10000",
        "calls",
        USED,
        "Most vmod curl calls in flight in the process; a call over the cap fails at once (status 0, curl.error() says why) and is logged as VCL_Error."
    ),
    p!(
        "curl_timeout",
        dur(Some(0.0), None),
        "10",
        "seconds",
        USED,
        "Default limit of a whole vmod curl call when VCL sets none with curl.set_timeout(); 0 is no limit."
    ),
    p!(
        "debug",
        Kind::Bits { names: DEBUG_BITS },
        "none",
        "",
        USED,
        "Debugging aids, set as +bit/-bit."
    ),
    p!(
        "default_grace",
        dur(Some(0.0), None),
        "10",
        "seconds",
        USED,
        "Grace given to objects when neither the backend nor VCL sets one."
    ),
    p!(
        "default_keep",
        dur(Some(0.0), None),
        "0",
        "seconds",
        USED,
        "Keep given to objects when VCL sets none."
    ),
    p!(
        "default_ttl",
        dur(Some(0.0), None),
        "120",
        "seconds",
        USED,
        "TTL given to objects when neither the backend nor VCL sets one."
    ),
    p!(
        "esi_parallel",
        uint(Some(1), Some(1000)),
        "10",
        "includes",
        USED,
        "Most ESI includes of one object fetched at once, ahead of their place in the page (1: one after another). Delivery stays in document order. Under -p debug=+vtc_mode (varnishtest) includes run one after another, as varnishd's, whose tests pin that order of fetches."
    ),
    p!(
        "experimental",
        Kind::Bits {
            names: EXPERIMENTAL_BITS
        },
        "none",
        "",
        IGNORED,
        "Experimental switches of varnishd; none apply to Lacquer."
    ),
    p!(
        "feature",
        Kind::Bits {
            names: FEATURE_BITS
        },
        "+validate_headers",
        "",
        USED,
        "Minor features, set as +bit/-bit."
    ),
    p!(
        "fetch_chunksize",
        bytes(Some(4 * K), None),
        "16k",
        "bytes",
        USED,
        "Size of the storage segments a fetch allocates at first."
    ),
    p!(
        "fetch_maxchunksize",
        bytes(Some(64 * K), None),
        "0.25G",
        "bytes",
        USED,
        "Largest storage segment a fetch allocates."
    ),
    p!(
        "first_byte_timeout",
        dur(Some(0.0), None),
        "60",
        "seconds",
        USED,
        "Default time to wait for the first byte of a backend response."
    ),
    p!(
        "gzip_buffer",
        bytes(Some(2 * K), None),
        "32k",
        "bytes",
        USED,
        "Buffer size for gzip and gunzip."
    ),
    p!(
        "gzip_level",
        uint(Some(0), Some(9)),
        "6",
        "",
        USED,
        "Compression level used when Lacquer gzips."
    ),
    p!(
        "gzip_memlevel",
        uint(Some(1), Some(9)),
        "8",
        "",
        USED,
        "zlib memory level used when Lacquer gzips."
    ),
    p!(
        "h2_header_table_size",
        bytes(Some(0), None),
        "4k",
        "bytes",
        USED,
        "HTTP/2 HPACK table size."
    ),
    p!(
        "h2_initial_window_size",
        bytes(Some(65535), Some(2_147_483_647)),
        "65535b",
        "bytes",
        USED,
        "HTTP/2 initial stream window."
    ),
    p!(
        "h2_max_concurrent_streams",
        uint(Some(0), None),
        "100",
        "streams",
        USED,
        "HTTP/2 concurrent streams per connection."
    ),
    p!(
        "h2_max_frame_size",
        bytes(Some(16 * K), Some(16_777_215)),
        "16k",
        "bytes",
        USED,
        "HTTP/2 largest frame."
    ),
    p!(
        "h2_max_header_list_size",
        bytes(Some(0), None),
        "2147483647b",
        "bytes",
        USED,
        "HTTP/2 largest header list."
    ),
    p!(
        "h2_rx_window_increment",
        bytes(Some(K * K), Some(K * K * K)),
        "1M",
        "bytes",
        USED,
        "HTTP/2 receive window increment."
    ),
    p!(
        "h2_rx_window_low_water",
        bytes(Some(65535), Some(K * K * K)),
        "10M",
        "bytes",
        USED,
        "HTTP/2 receive window low-water mark."
    ),
    p!(
        "h2_rxbuf_storage",
        Kind::Text,
        "Transient",
        "",
        USED,
        "Store used for HTTP/2 request bodies."
    ),
    p!(
        "http1_iovs",
        uint(Some(5), Some(1024)),
        "64",
        "",
        IGNORED,
        "writev vector size; Lacquer batches writes itself."
    ),
    p!(
        "http_gzip_support",
        Kind::Bool,
        "on",
        "bool",
        USED,
        "Normalise Accept-Encoding, fetch gzip and gunzip for clients without it."
    ),
    p!(
        "http_max_hdr",
        uint(Some(32), Some(65535)),
        "64",
        "header lines",
        USED,
        "Most header lines in a request or response."
    ),
    p!(
        "http_range_support",
        Kind::Bool,
        "on",
        "bool",
        USED,
        "Answer Range requests with 206 from cached objects."
    ),
    p!(
        "http_req_hdr_len",
        bytes(Some(40), None),
        "8k",
        "bytes",
        USED,
        "Longest single request header line."
    ),
    p!(
        "http_req_size",
        bytes(Some(256), None),
        "32k",
        "bytes",
        USED,
        "Largest request head (request line and headers)."
    ),
    p!(
        "http_resp_hdr_len",
        bytes(Some(40), None),
        "8k",
        "bytes",
        USED,
        "Longest single backend response header line."
    ),
    p!(
        "http_resp_size",
        bytes(Some(256), None),
        "32k",
        "bytes",
        USED,
        "Largest backend response head."
    ),
    p!(
        "idle_send_timeout",
        dur(Some(0.0), None),
        "60",
        "seconds",
        USED,
        "Longest a client may refuse to accept any data of a response."
    ),
    p!(
        "listen_depth",
        uint(Some(0), None),
        "1024",
        "connections",
        USED,
        "Listen queue depth of client sockets."
    ),
    p!(
        "lru_interval",
        dur(Some(0.0), None),
        "2",
        "seconds",
        USED,
        "An object hit more often than this is moved to the LRU head at most once per interval."
    ),
    p!(
        "max_esi_depth",
        uint(Some(0), None),
        "5",
        "levels",
        USED,
        "Deepest ESI include nesting."
    ),
    p!(
        "max_restarts",
        uint(Some(0), None),
        "4",
        "restarts",
        USED,
        "Most restarts of one client request; past this it fails with 503."
    ),
    p!(
        "max_retries",
        uint(Some(0), None),
        "4",
        "retries",
        USED,
        "Most retries of one backend fetch."
    ),
    p!(
        "max_vcl",
        uint(Some(0), None),
        "100",
        "",
        USED,
        "Loaded VCLs above which vcl.load warns or refuses (see max_vcl_handling)."
    ),
    p!(
        "max_vcl_handling",
        uint(Some(0), Some(2)),
        "1",
        "",
        USED,
        "Past max_vcl: 0 ignore, 1 warn, 2 refuse."
    ),
    p!(
        "memory_target",
        uint(Some(0), Some(100)),
        "0",
        "%",
        USED,
        "Varnish Enterprise's MSE governor target, changeable at run time: when set (1-100), the memory tier of -s mse is resized to this share of RAM, nuking its least recently used objects when it shrinks. 0 leaves it as it is (at startup: the size mse.conf gave)."
    ),
    p!(
        "nuke_limit",
        uint(Some(0), None),
        "50",
        "allocations",
        USED,
        "Objects one fetch may evict to make room before it fails."
    ),
    p!(
        "pcre2_depth_limit",
        uint(Some(1), None),
        "20",
        "",
        IGNORED,
        "PCRE2 limit; Lacquer's regex engine runs in linear time."
    ),
    p!(
        "pcre2_jit_compilation",
        Kind::Bool,
        "on",
        "bool",
        IGNORED,
        "PCRE2 JIT; Lacquer's regex engine is compiled at VCL load."
    ),
    p!(
        "pcre2_match_limit",
        uint(Some(1), None),
        "10000",
        "",
        IGNORED,
        "PCRE2 limit; Lacquer's regex engine runs in linear time."
    ),
    p!(
        "ping_interval",
        uint(Some(0), None),
        "3",
        "seconds",
        USED,
        "Interval between the pings the daemon logs as CLI records (Rd ping, Wr 200 PONG), where varnishd's manager pings its child; 0 turns them off."
    ),
    p!(
        "pipe_sess_max",
        uint(Some(0), None),
        "0",
        "connections",
        USED,
        "Most concurrent pipe sessions (0: no limit)."
    ),
    p!(
        "pipe_timeout",
        dur(Some(0.0), None),
        "60",
        "seconds",
        USED,
        "Idle time after which a pipe session is closed."
    ),
    p!(
        "pool_req",
        Kind::Pool,
        "10,100,10",
        "",
        IGNORED,
        "Memory pool tuning; Lacquer uses the system allocator."
    ),
    p!(
        "pool_sess",
        Kind::Pool,
        "10,100,10",
        "",
        IGNORED,
        "Memory pool tuning; Lacquer uses the system allocator."
    ),
    p!(
        "pool_vbo",
        Kind::Pool,
        "10,100,10",
        "",
        IGNORED,
        "Memory pool tuning; Lacquer uses the system allocator."
    ),
    p!(
        "prefer_ipv6",
        Kind::Bool,
        "off",
        "bool",
        USED,
        "Connect to a backend's IPv6 address when it has both."
    ),
    p!(
        "rush_exponent",
        uint(Some(2), None),
        "3",
        "requests per request",
        USED,
        "Waiting requests each woken request wakes in turn."
    ),
    p!(
        "send_timeout",
        dur(Some(0.0), None),
        "600",
        "seconds",
        USED,
        "Longest time to deliver a whole response to a client."
    ),
    p!(
        "shortlived",
        dur(Some(0.0), None),
        "10",
        "seconds",
        USED,
        "Objects with ttl+grace+keep below this go to Transient storage."
    ),
    p!(
        "sigsegv_handler",
        Kind::Bool,
        "on",
        "bool",
        IGNORED,
        "Crash handler; Rust code reports panics itself."
    ),
    p!(
        "syslog_cli_traffic",
        Kind::Bool,
        "on",
        "bool",
        USED,
        "Log management CLI commands to syslog."
    ),
    p!(
        "tcp_fastopen",
        Kind::Bool,
        "off",
        "bool",
        USED,
        "Enable TCP Fast Open on client sockets."
    ),
    p!(
        "tcp_keepalive_intvl",
        dur(Some(1.0), Some(100.0)),
        "75",
        "seconds",
        USED,
        "TCP keep-alive probe interval on client sockets."
    ),
    p!(
        "tcp_keepalive_probes",
        uint(Some(1), Some(100)),
        "9",
        "probes",
        USED,
        "TCP keep-alive probes before a client socket is dropped."
    ),
    p!(
        "tcp_keepalive_time",
        dur(Some(1.0), Some(7200.0)),
        "7200",
        "seconds",
        USED,
        "Idle time before TCP keep-alive probes start."
    ),
    p!(
        "thread_pool_add_delay",
        dur(Some(0.0), None),
        "0",
        "seconds",
        IGNORED,
        "Thread pool tuning; Lacquer runs on async tasks."
    ),
    p!(
        "thread_pool_destroy_delay",
        dur(Some(0.01), None),
        "1",
        "seconds",
        IGNORED,
        "Thread pool tuning; Lacquer runs on async tasks."
    ),
    p!(
        "thread_pool_fail_delay",
        dur(Some(0.01), None),
        "0.2",
        "seconds",
        IGNORED,
        "Thread pool tuning; Lacquer runs on async tasks."
    ),
    p!(
        "thread_pool_max",
        uint(Some(5), None),
        "5000",
        "threads",
        IGNORED,
        "Thread pool tuning; Lacquer runs on async tasks."
    ),
    p!(
        "thread_pool_min",
        uint(Some(5), None),
        "100",
        "threads",
        IGNORED,
        "Thread pool tuning; Lacquer runs on async tasks."
    ),
    p!(
        "thread_pool_reserve",
        uint(Some(0), None),
        "0",
        "threads",
        IGNORED,
        "Thread pool tuning; Lacquer runs on async tasks."
    ),
    p!(
        "thread_pool_stack",
        bytes(Some(16 * K), None),
        "80k",
        "bytes",
        IGNORED,
        "Thread pool tuning; Lacquer runs on async tasks."
    ),
    p!(
        "thread_pool_timeout",
        dur(Some(10.0), None),
        "300",
        "seconds",
        IGNORED,
        "Thread pool tuning; Lacquer runs on async tasks."
    ),
    p!(
        "thread_pool_watchdog",
        dur(Some(0.1), None),
        "60",
        "seconds",
        IGNORED,
        "Thread pool tuning; Lacquer runs on async tasks."
    ),
    p!(
        "thread_pools",
        uint(Some(1), Some(32)),
        "2",
        "pools",
        IGNORED,
        "Thread pool tuning; Lacquer runs on async tasks."
    ),
    p!(
        "thread_queue_limit",
        uint(Some(0), None),
        "20",
        "requests",
        IGNORED,
        "Thread pool tuning; Lacquer runs on async tasks."
    ),
    p!(
        "thread_stats_rate",
        uint(Some(0), None),
        "10",
        "requests",
        IGNORED,
        "Thread pool tuning; Lacquer's counters are updated directly."
    ),
    p!(
        "timeout_idle",
        dur(Some(0.0), None),
        "5",
        "seconds",
        USED,
        "Idle time after which a client connection without a request is closed."
    ),
    p!(
        "timeout_linger",
        dur(Some(0.0), None),
        "0.05",
        "seconds",
        IGNORED,
        "Thread hand-off tuning; Lacquer's idle connections cost no thread."
    ),
    p!(
        "tls_handshake_timeout",
        dur(Some(0.0), None),
        "8",
        "seconds",
        USED,
        "Time a client has to finish the TLS handshake on a TLS listener; a client that stalls or sends garbage is closed after at most this long (TLS.fail_timeout)."
    ),
    p!(
        "tls_ja3",
        Kind::Bool,
        "off",
        "bool",
        USED,
        "Read the JA3 fingerprint of each TLS client's ClientHello on Lacquer's own TLS listeners, for vmod tls's ja3()."
    ),
    p!(
        "vary_notice",
        uint(Some(1), None),
        "10",
        "variants",
        USED,
        "Log a notice when an object has more Vary variants than this."
    ),
    p!(
        "vcc_allow_inline_c",
        Kind::Bool,
        "off",
        "bool",
        IGNORED,
        "Inline C cannot run in Lacquer; VCL with C{ }C is always rejected."
    ),
    p!(
        "vcc_err_unref",
        Kind::Bool,
        "on",
        "bool",
        USED,
        "Unreferenced subs, ACLs, backends and probes are compile errors."
    ),
    p!(
        "vcc_unsafe_path",
        Kind::Bool,
        "on",
        "bool",
        USED,
        "Allow absolute paths in include and import ... from."
    ),
    p!(
        "vcl_cooldown",
        dur(Some(1.0), None),
        "600",
        "seconds",
        USED,
        "Time after which an unused VCL turns cold and releases its backends."
    ),
    p!(
        "vcl_path",
        Kind::Text,
        "/etc/varnish:/usr/share/varnish/vcl",
        "",
        USED,
        "Directories searched for relative include paths."
    ),
    p!(
        "vmod_path",
        Kind::Text,
        "/usr/lib/varnish/vmods",
        "",
        IGNORED,
        "Shared-object search path; Lacquer's vmods are built in."
    ),
    p!(
        "vsl_buffer",
        bytes(Some(267), None),
        "16k",
        "bytes",
        USED,
        "Per-task log buffer flushed to the shared log."
    ),
    p!(
        "vsl_mask",
        Kind::Bits { names: ANY_BITS },
        "-Debug,-ObjProtocol,-ObjStatus,-ObjReason,-ObjHeader,-VCL_trace,-ExpKill,-WorkThread,-Hash,-VfpAcct,-H2RxHdr,-H2RxBody,-H2TxHdr,-H2TxBody,-VdpAcct",
        "",
        USED,
        "Log tags not written to the shared log."
    ),
    p!(
        "vsl_reclen",
        bytes(Some(16), None),
        "255b",
        "bytes",
        USED,
        "Longest log record payload; longer ones are truncated."
    ),
    p!(
        "vsl_space",
        bytes(Some(K * K), Some(4 * K * K * K)),
        "80M",
        "bytes",
        USED,
        "Size of the shared-memory log ring."
    ),
    p!(
        "vsm_free_cooldown",
        dur(Some(10.0), Some(600.0)),
        "60",
        "seconds",
        USED,
        "How long freed shared-memory segments stay readable."
    ),
    p!(
        "workspace_backend",
        bytes(Some(K), None),
        "96k",
        "bytes",
        USED,
        "Per-fetch scratch space limit (header and VCL string growth)."
    ),
    p!(
        "workspace_client",
        bytes(Some(9 * K), None),
        "96k",
        "bytes",
        USED,
        "Per-request scratch space limit (header and VCL string growth)."
    ),
    p!(
        "workspace_session",
        bytes(Some(384), None),
        "0.75k",
        "bytes",
        USED,
        "Per-session scratch space limit."
    ),
    p!(
        "workspace_thread",
        bytes(Some(256), Some(8 * K)),
        "2k",
        "bytes",
        USED,
        "Per-task worker scratch space (what vmods may use besides the task's workspace)."
    ),
];

/// Looks a parameter up by name.
pub fn lookup(name: &str) -> Option<&'static Param> {
    param_index(name).map(|i| &PARAMS[i])
}

/// A deprecated second name of a parameter, as varnishd keeps them:
/// setting, resetting or showing it by name acts on its target, while
/// listings (`param.show`, `-l`, `-j`) leave it out.
#[derive(Debug)]
pub struct Alias {
    pub name: &'static str,
    pub target: &'static str,
    pub doc: &'static str,
}

/// Every alias; each target is a row of [`PARAMS`].
pub static ALIASES: &[Alias] = &[Alias {
    name: "deprecated_dummy",
    target: "debug",
    doc: "Deprecated alias for the debug parameter.",
}];

/// The alias called `name`, if there is one.
pub fn alias(name: &str) -> Option<&'static Alias> {
    ALIASES.iter().find(|a| a.name == name)
}

/// `name`, or the parameter it is an alias of.
pub fn canonical(name: &str) -> &str {
    alias(name).map_or(name, |a| a.target)
}

/// A parsed parameter value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Bool(bool),
    /// Seconds.
    Duration(f64),
    Bytes(u64),
    Uint(u64),
    Float(f64),
    Text(String),
    /// The names of the bits that are set.
    Bits(Vec<String>),
    Pool(u64, u64, f64),
}

/// Why a value was refused; the text follows varnishd's CLI replies.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error("Unknown parameter \"{0}\".")]
    Unknown(String),
    #[error("Invalid value \"{value}\" for parameter \"{name}\": {why}")]
    Invalid {
        name: String,
        value: String,
        why: String,
    },
    #[error("Must be at least {min} (parameter \"{name}\")")]
    TooSmall { name: String, min: String },
    #[error("Must be no more than {max} (parameter \"{name}\")")]
    TooBig { name: String, max: String },
    #[error("parameter \"{0}\" is protected.")]
    Protected(String),
    /// Out of the range another parameter's value sets.
    #[error("Must be {bound} ({by})")]
    Related { bound: String, by: String },
}

fn invalid(p: &Param, value: &str, why: impl Into<String>) -> ParamError {
    ParamError::Invalid {
        name: p.name.to_string(),
        value: value.to_string(),
        why: why.into(),
    }
}

/// Parses a boolean the way varnishd does.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "enable" => Some(true),
        "off" | "false" | "no" | "disable" => Some(false),
        _ => None,
    }
}

/// Parses a duration: a number with an optional VCL unit (`ms s m h d w y`).
pub fn parse_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.trim().parse().ok()?;
    let mult = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "w" => 7.0 * 86_400.0,
        "y" => 365.0 * 86_400.0,
        _ => return None,
    };
    let v = n * mult;
    v.is_finite().then_some(v)
}

/// Parses a byte size with an optional `b k m g t` suffix (powers of 1024);
/// fractions such as `0.25G` are allowed.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.trim().parse().ok()?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1024.0,
        "m" | "mb" => 1024.0 * 1024.0,
        "g" | "gb" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let v = n * mult;
    (v.is_finite() && v >= 0.0 && v < u64::MAX as f64).then(|| v.round() as u64)
}

/// Formats a byte count the way `param.show` does: the largest unit that
/// divides it exactly (`48k`, `65535b`, `256M`).
pub fn format_bytes(v: u64) -> String {
    const UNITS: [(u64, char); 5] = [
        (1 << 40, 'T'),
        (1 << 30, 'G'),
        (1 << 20, 'M'),
        (1 << 10, 'k'),
        (1, 'b'),
    ];
    for (size, unit) in UNITS {
        if v != 0 && v.is_multiple_of(size) {
            return format!("{}{unit}", v / size);
        }
    }
    "0b".to_string()
}

impl Param {
    /// Parses `text` into a value for this parameter, applying the bits
    /// edits to `current` for bit sets (`+a,-b`).
    pub fn parse(&self, text: &str, current: Option<&Value>) -> Result<Value, ParamError> {
        let v = match self.kind {
            Kind::Bool => Value::Bool(
                parse_bool(text).ok_or_else(|| invalid(self, text, "use \"on\" or \"off\""))?,
            ),
            Kind::Duration { min, max } => {
                let v = parse_duration(text)
                    .ok_or_else(|| invalid(self, text, "expected seconds, e.g. 2.5 or 10s"))?;
                if let Some(m) = min.filter(|m| v < *m) {
                    return Err(self.too_small(format!("{m:.3}")));
                }
                if let Some(m) = max.filter(|m| v > *m) {
                    return Err(self.too_big(format!("{m:.3}")));
                }
                Value::Duration(v)
            }
            Kind::Bytes { min, max } => {
                let v = parse_bytes(text)
                    .ok_or_else(|| invalid(self, text, "expected a size, e.g. 64k or 1M"))?;
                if let Some(m) = min.filter(|m| v < *m) {
                    return Err(self.too_small(format_bytes(m)));
                }
                if let Some(m) = max.filter(|m| v > *m) {
                    return Err(self.too_big(format_bytes(m)));
                }
                Value::Bytes(v)
            }
            Kind::Uint { min, max } => {
                let v: u64 = if text.trim() == "unlimited" {
                    u64::MAX
                } else {
                    text.trim()
                        .parse()
                        .map_err(|_| invalid(self, text, "expected a whole number"))?
                };
                if let Some(m) = min.filter(|m| v < *m) {
                    return Err(self.too_small(m.to_string()));
                }
                if let Some(m) = max.filter(|m| v > *m) {
                    return Err(self.too_big(m.to_string()));
                }
                Value::Uint(v)
            }
            Kind::Float { min, max } => {
                let v: f64 = text
                    .trim()
                    .parse()
                    .ok()
                    .filter(|v: &f64| v.is_finite())
                    .ok_or_else(|| invalid(self, text, "expected a number"))?;
                if let Some(m) = min.filter(|m| v < *m) {
                    return Err(self.too_small(m.to_string()));
                }
                if let Some(m) = max.filter(|m| v > *m) {
                    return Err(self.too_big(m.to_string()));
                }
                Value::Float(v)
            }
            Kind::Text => Value::Text(text.to_string()),
            Kind::Bits { names } => self.parse_bits(text, names, current)?,
            Kind::Pool => {
                let parts: Vec<&str> = text.split(',').map(str::trim).collect();
                let bad = || invalid(self, text, "expected min_pool,max_pool,max_age");
                if parts.len() != 3 {
                    return Err(bad());
                }
                let lo: u64 = parts[0].parse().map_err(|_| bad())?;
                let hi: u64 = parts[1].parse().map_err(|_| bad())?;
                let age = parse_duration(parts[2]).ok_or_else(bad)?;
                if lo > hi {
                    return Err(invalid(self, text, "min_pool exceeds max_pool"));
                }
                Value::Pool(lo, hi, age)
            }
        };
        Ok(v)
    }

    fn parse_bits(
        &self,
        text: &str,
        names: &[&str],
        current: Option<&Value>,
    ) -> Result<Value, ParamError> {
        let mut set: Vec<String> = match current {
            Some(Value::Bits(b)) => b.clone(),
            _ => Vec::new(),
        };
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item {
                "none" => set.clear(),
                "default" => {
                    set = match self.parse_bits(self.default, names, None)? {
                        Value::Bits(b) => b,
                        _ => unreachable!("parse_bits always yields bits"),
                    }
                }
                _ => {
                    let (add, name) = match item.as_bytes()[0] {
                        b'+' => (true, &item[1..]),
                        b'-' => (false, &item[1..]),
                        _ => {
                            return Err(invalid(
                                self,
                                text,
                                format!("\"{item}\": use +name or -name"),
                            ));
                        }
                    };
                    let known = if names.is_empty() {
                        lacquer_vsl::Tag::from_name(name).is_some()
                    } else {
                        names.contains(&name)
                    };
                    if !known {
                        return Err(invalid(self, text, format!("unknown bit \"{name}\"")));
                    }
                    set.retain(|n| n != name);
                    // For vsl_mask the bits listed are the masked tags, so a
                    // "-Tag" adds the tag to the mask set; elsewhere "+bit" sets.
                    let adds = if names.is_empty() { !add } else { add };
                    if adds {
                        set.push(name.to_string());
                    }
                }
            }
        }
        // Kept in table order (tag order for vsl_mask), as varnishd shows
        // them, whatever order they were set in.
        set.sort_by_key(|n| {
            if names.is_empty() {
                lacquer_vsl::Tag::from_name(n).map_or(usize::MAX, |t| t as usize)
            } else {
                names.iter().position(|x| x == n).unwrap_or(usize::MAX)
            }
        });
        Ok(Value::Bits(set))
    }

    /// A value as `param.show` prints it: bits with the sign that sets
    /// them (`+bit`; `-Tag` for the tags `vsl_mask` masks), other kinds
    /// as their [`Value`] text.
    pub fn show(&self, v: &Value) -> String {
        match (self.kind, v) {
            (Kind::Bits { names }, Value::Bits(b)) if !b.is_empty() => {
                let sign = if names.is_empty() { '-' } else { '+' };
                b.iter()
                    .map(|n| format!("{sign}{n}"))
                    .collect::<Vec<_>>()
                    .join(",")
            }
            _ => v.to_string(),
        }
    }

    fn too_small(&self, min: String) -> ParamError {
        ParamError::TooSmall {
            name: self.name.to_string(),
            min,
        }
    }

    fn too_big(&self, max: String) -> ParamError {
        ParamError::TooBig {
            name: self.name.to_string(),
            max,
        }
    }

    /// The parsed default value.
    pub fn default_value(&self) -> Value {
        self.parse(self.default, None)
            .unwrap_or_else(|e| panic!("parameter table default is invalid: {e}"))
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => f.write_str(if *b { "on" } else { "off" }),
            Value::Duration(d) => write!(f, "{d:.3}"),
            Value::Bytes(b) => f.write_str(&format_bytes(*b)),
            Value::Uint(u) => write!(f, "{u}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Text(t) => f.write_str(t),
            Value::Bits(b) if b.is_empty() => f.write_str("none"),
            Value::Bits(b) => f.write_str(&b.join(",")),
            Value::Pool(a, b, c) => write!(f, "{a},{b},{c}"),
        }
    }
}

/// The current value of every parameter, indexed like [`PARAMS`].
#[derive(Clone, Debug)]
pub struct ParamSet {
    values: Vec<Value>,
    /// Made read-only by `-r`: the CLI may not change them.
    protected: Vec<bool>,
}

impl Default for ParamSet {
    fn default() -> Self {
        ParamSet {
            values: PARAMS.iter().map(Param::default_value).collect(),
            protected: vec![false; PARAMS.len()],
        }
    }
}

/// A parameter named in the code: its index in [`PARAMS`], found at compile
/// time by [`pid!`](crate::pid) so the request path reads parameters by
/// index instead of hashing names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pid(usize);

impl Pid {
    /// The parameter called `name`. In a `const` context (see
    /// [`pid!`](crate::pid)) an unknown name fails the build.
    pub const fn of(name: &str) -> Pid {
        let mut i = 0;
        while i < PARAMS.len() {
            if const_eq(PARAMS[i].name.as_bytes(), name.as_bytes()) {
                return Pid(i);
            }
            i += 1;
        }
        panic!("no such parameter in params::PARAMS");
    }
}

const fn const_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// `pid!("name")`: the [`Pid`] of a parameter, resolved and checked at
/// compile time.
#[macro_export]
macro_rules! pid {
    ($name:literal) => {
        const { $crate::runtime::params::Pid::of($name) }
    };
}

/// How code names a parameter: by name (looked up) or by [`Pid`].
pub trait ParamKey: Copy {
    /// Index in [`PARAMS`].
    ///
    /// # Panics
    /// If a name is not in [`PARAMS`]: callers name parameters statically.
    fn index(self) -> usize;
}

impl ParamKey for &str {
    fn index(self) -> usize {
        param_index(self).unwrap_or_else(|| panic!("no parameter named {self}"))
    }
}

impl ParamKey for Pid {
    #[inline]
    fn index(self) -> usize {
        self.0
    }
}

impl ParamSet {
    /// Every parameter as `name value` lines (values as `param.show`
    /// prints them), in table order.
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for p in PARAMS {
            out.push_str(p.name);
            out.push(' ');
            out.push_str(&p.show(self.get(p.name)));
            out.push('\n');
        }
        out
    }

    /// Sets `name` from its text form.
    pub fn set(&mut self, name: &str, text: &str) -> Result<(), ParamError> {
        let name = canonical(name);
        let i = param_index(name).ok_or_else(|| ParamError::Unknown(name.to_string()))?;
        let v = PARAMS[i].parse(text, Some(&self.values[i]))?;
        self.check_related(name, &v)?;
        self.values[i] = v;
        Ok(())
    }

    /// The bounds one parameter puts on another, as varnishd's: a pool's
    /// minimum is at most its maximum, and the reserve at most 95% of the
    /// minimum.
    fn check_related(&self, name: &str, v: &Value) -> Result<(), ParamError> {
        let Value::Uint(n) = *v else { return Ok(()) };
        let rel = |bound: String, by: &str| {
            Err(ParamError::Related {
                bound,
                by: by.to_string(),
            })
        };
        match name {
            "thread_pool_min" if n > self.uint("thread_pool_max") => rel(
                format!("no more than {}", self.uint("thread_pool_max")),
                "thread_pool_max",
            ),
            "thread_pool_max" if n < self.uint("thread_pool_min") => rel(
                format!("at least {}", self.uint("thread_pool_min")),
                "thread_pool_min",
            ),
            "thread_pool_reserve" if n > self.uint("thread_pool_min") * 95 / 100 => rel(
                format!("no more than {}", self.uint("thread_pool_min") * 95 / 100),
                "95% of thread_pool_min",
            ),
            _ => Ok(()),
        }
    }

    /// Makes a parameter read-only (`-r`): later [`ParamSet::set_unless_protected`]
    /// calls, which the CLI makes, are refused.
    pub fn protect(&mut self, name: &str) -> Result<(), ParamError> {
        let i =
            param_index(canonical(name)).ok_or_else(|| ParamError::Unknown(name.to_string()))?;
        self.protected[i] = true;
        Ok(())
    }

    /// [`ParamSet::set`], unless `-r` made the parameter read-only.
    pub fn set_unless_protected(&mut self, name: &str, text: &str) -> Result<(), ParamError> {
        if param_index(canonical(name)).is_some_and(|i| self.protected[i]) {
            return Err(ParamError::Protected(name.to_string()));
        }
        self.set(name, text)
    }

    /// Applies a `-p name=value` argument.
    pub fn apply_arg(&mut self, arg: &str) -> Result<(), ParamError> {
        let (name, value) = arg.split_once('=').ok_or_else(|| ParamError::Invalid {
            name: arg.to_string(),
            value: String::new(),
            why: "expected name=value".to_string(),
        })?;
        self.set(name.trim(), value)
    }

    /// The current value of a parameter.
    ///
    /// # Panics
    /// If a name is not in [`PARAMS`]: callers name parameters statically.
    pub fn get(&self, key: impl ParamKey) -> &Value {
        &self.values[key.index()]
    }

    /// A duration parameter in seconds.
    pub fn duration(&self, key: impl ParamKey) -> f64 {
        match self.get(key) {
            Value::Duration(d) => *d,
            v => panic!("parameter {} is not a duration: {v:?}", name_of(key)),
        }
    }

    /// A byte-size parameter.
    pub fn bytes(&self, key: impl ParamKey) -> u64 {
        match self.get(key) {
            Value::Bytes(b) => *b,
            v => panic!("parameter {} is not a byte size: {v:?}", name_of(key)),
        }
    }

    /// An integer parameter.
    pub fn uint(&self, key: impl ParamKey) -> u64 {
        match self.get(key) {
            Value::Uint(u) => *u,
            v => panic!("parameter {} is not an integer: {v:?}", name_of(key)),
        }
    }

    /// A boolean parameter.
    pub fn flag(&self, key: impl ParamKey) -> bool {
        match self.get(key) {
            Value::Bool(b) => *b,
            v => panic!("parameter {} is not a boolean: {v:?}", name_of(key)),
        }
    }

    /// Whether bit `bit` of a bits parameter is set.
    pub fn bit(&self, key: impl ParamKey, bit: &str) -> bool {
        match self.get(key) {
            Value::Bits(b) => b.iter().any(|n| n == bit),
            v => panic!("parameter {} is not a bit set: {v:?}", name_of(key)),
        }
    }

    /// Whether `name` still has its default value.
    pub fn is_default(&self, name: &str) -> bool {
        lookup(name).is_some_and(|p| *self.get(name) == p.default_value())
    }
}

fn name_of(key: impl ParamKey) -> &'static str {
    PARAMS[key.index()].name
}

/// The parameter reference (`lacquerd -x parameter`), generated from [`PARAMS`].
pub fn reference_markdown() -> String {
    use std::fmt::Write as _;
    let mut out = String::from("# Lacquer runtime parameters\n\n");
    for p in PARAMS {
        let _ = writeln!(out, "## {}\n", p.name);
        if !p.unit.is_empty() {
            let _ = writeln!(out, "* Units: {}", p.unit);
        }
        let _ = writeln!(out, "* Default: {}", p.default);
        let bounds = match p.kind {
            Kind::Duration { min, max } | Kind::Float { min, max } => {
                (min.map(|m| m.to_string()), max.map(|m| m.to_string()))
            }
            Kind::Bytes { min, max } => (min.map(format_bytes), max.map(format_bytes)),
            Kind::Uint { min, max } => (min.map(|m| m.to_string()), max.map(|m| m.to_string())),
            _ => (None, None),
        };
        if let Some(m) = bounds.0 {
            let _ = writeln!(out, "* Minimum: {m}");
        }
        if let Some(m) = bounds.1 {
            let _ = writeln!(out, "* Maximum: {m}");
        }
        if let Kind::Bits { names } = p.kind
            && !names.is_empty()
        {
            let _ = writeln!(out, "* Bits: {}", names.join(", "));
        }
        if !p.effective {
            let _ = writeln!(out, "* Accepted for compatibility; no effect in Lacquer.");
        }
        let _ = writeln!(out, "\n{}\n", p.doc);
    }
    out
}

/// The connect-error holddowns the parameters ask for.
pub fn holddown(p: &ParamSet) -> crate::backend::pool::Holddown {
    let d = |name| std::time::Duration::from_secs_f64(p.duration(name).max(0.0));
    crate::backend::pool::Holddown {
        local: d("backend_local_error_holddown"),
        remote: d("backend_remote_error_holddown"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_defaults_parse() {
        for w in PARAMS.windows(2) {
            assert!(w[0].name < w[1].name, "{} !< {}", w[0].name, w[1].name);
        }
        let set = ParamSet::default();
        assert_eq!(set.duration("default_ttl"), 120.0);
        assert_eq!(set.bytes("http_req_size"), 32 * 1024);
        assert_eq!(set.bytes("fetch_maxchunksize"), 256 * 1024 * 1024);
        assert_eq!(set.uint("max_restarts"), 4);
        assert!(set.flag("http_gzip_support"));
        assert!(set.bit("feature", "validate_headers"));
        assert!(set.bit("vsl_mask", "Debug"));
    }

    #[test]
    fn aliases_act_on_their_target() {
        for a in ALIASES {
            assert!(lookup(a.target).is_some(), "{} -> {}", a.name, a.target);
            assert!(lookup(a.name).is_none(), "{} is both", a.name);
        }
        let mut set = ParamSet::default();
        set.set("deprecated_dummy", "+syncvsl").unwrap();
        assert!(set.bit("debug", "syncvsl"));
        set.protect("deprecated_dummy").unwrap();
        assert!(matches!(
            set.set_unless_protected("debug", "-syncvsl"),
            Err(ParamError::Protected(_))
        ));
    }

    #[test]
    fn set_and_bounds() {
        let mut s = ParamSet::default();
        s.apply_arg("default_ttl=1h").unwrap();
        assert_eq!(s.duration("default_ttl"), 3600.0);
        s.set("http_req_size", "64k").unwrap();
        assert_eq!(s.bytes("http_req_size"), 65536);
        assert!(matches!(
            s.set("gzip_level", "10"),
            Err(ParamError::TooBig { .. })
        ));
        assert!(matches!(
            s.set("backend_idle_timeout", "0.5"),
            Err(ParamError::TooSmall { .. })
        ));
        assert!(matches!(s.set("nope", "1"), Err(ParamError::Unknown(_))));
        assert!(matches!(
            s.set("auto_restart", "maybe"),
            Err(ParamError::Invalid { .. })
        ));
        assert!(s.apply_arg("max_restarts").is_err());
    }

    #[test]
    fn bits_edit_in_place() {
        let mut s = ParamSet::default();
        s.set("feature", "+http2,-validate_headers").unwrap();
        assert!(s.bit("feature", "http2"));
        assert!(!s.bit("feature", "validate_headers"));
        s.set("feature", "default").unwrap();
        assert!(s.bit("feature", "validate_headers"));
        assert!(s.set("feature", "+nonsense").is_err());
        s.set("debug", "+vtc_mode").unwrap();
        assert!(s.bit("debug", "vtc_mode"));
        s.set("vsl_mask", "+Debug,-Hash").unwrap();
        assert!(!s.bit("vsl_mask", "Debug"));
        assert!(s.bit("vsl_mask", "Hash"));
    }

    #[test]
    fn reference_lists_every_parameter() {
        let doc = reference_markdown();
        for p in PARAMS {
            assert!(doc.contains(&format!("## {}\n", p.name)), "{}", p.name);
        }
    }

    #[test]
    fn byte_formatting() {
        assert_eq!(format_bytes(48 * 1024), "48k");
        assert_eq!(format_bytes(65535), "65535b");
        assert_eq!(format_bytes(256 * 1024 * 1024), "256M");
        assert_eq!(parse_bytes("0.75k"), Some(768));
        assert_eq!(parse_bytes("banana"), None);
        assert_eq!(parse_duration("1.5m"), Some(90.0));
        assert_eq!(parse_duration("10x"), None);
    }
}
