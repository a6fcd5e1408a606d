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

use super::tweak;

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

/// Whether varnishd has the parameter on this system: `accept_filter`
/// needs the kernel's accept filters (FreeBSD) or `TCP_DEFER_ACCEPT`
/// as varnishd's build uses it, which its Linux build leaves out.
pub fn available(name: &str) -> bool {
    name != "accept_filter" || cfg!(any(target_os = "freebsd", target_os = "macos"))
}

/// The flags varnishd's `param.show -j` lists for a parameter (what a
/// change needs to take effect, and how the parameter is classed).
pub fn flags(name: &str) -> &'static [&'static str] {
    match name {
        "acceptor_sleep_decay"
        | "acceptor_sleep_incr"
        | "acceptor_sleep_max"
        | "backend_local_error_holddown"
        | "backend_remote_error_holddown"
        | "ban_cutoff"
        | "ban_lurker_holdoff"
        | "fetch_chunksize"
        | "fetch_maxchunksize"
        | "gzip_buffer"
        | "lru_interval"
        | "nuke_limit"
        | "rush_exponent"
        | "tcp_keepalive_intvl"
        | "tcp_keepalive_probes"
        | "tcp_keepalive_time"
        | "thread_pool_add_delay"
        | "thread_pool_fail_delay"
        | "thread_pool_watchdog"
        | "thread_queue_limit"
        | "thread_stats_rate"
        | "timeout_linger" => &["experimental"],
        "cc_command" | "cc_warnings" => &["must_reload", "build_options"],
        "critbit_cooloff" | "h2_rx_window_increment" | "h2_rx_window_low_water" | "http1_iovs" => {
            &["wizard"]
        }
        "default_grace" | "default_keep" | "default_ttl" => &["obj_sticky"],
        "h2_rxbuf_storage" | "listen_depth" | "ping_interval" | "sigsegv_handler"
        | "tcp_fastopen" | "vsl_space" => &["must_restart"],
        "idle_send_timeout"
        | "send_timeout"
        | "thread_pool_max"
        | "thread_pool_min"
        | "thread_pool_reserve"
        | "thread_pool_stack"
        | "workspace_backend"
        | "workspace_client"
        | "workspace_session"
        | "workspace_thread" => &["delayed_effect"],
        "thread_pool_destroy_delay" | "thread_pool_timeout" | "thread_pools" => {
            &["delayed_effect", "experimental"]
        }
        "vcl_path" | "vmod_path" => &["build_options"],
        _ => &[],
    }
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
        "struct iovec (=16 bytes)",
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
    /// Refused by the parameter's own check; `text` is varnishd's
    /// (see [`super::tweak`]), usually ending in a newline.
    #[error("{text}\n(attempting to set param '{name}' to '{value}')")]
    Refused {
        name: String,
        value: String,
        text: String,
    },
    #[error("parameter \"{0}\" is protected.")]
    Protected(String),
    /// A parameter varnishd has only where the system does
    /// (`accept_filter`: not on Linux).
    #[error("parameter \"{0}\" is not available on this platform.")]
    NotAvailable(String),
    /// A `-p` argument without `=`.
    #[error("\t-p lacks '='\n(-? gives usage)")]
    NoEquals,
}

/// Parses a boolean the way varnishd does.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "enable" => Some(true),
        "off" | "false" | "no" | "disable" => Some(false),
        _ => None,
    }
}

impl Param {
    /// Parses `text` into a value for this parameter within its static
    /// bounds, applying the bits edits to `current` for bit sets
    /// (`+a,-b`). [`ParamSet::set`] adds the bounds other parameters set.
    pub fn parse(&self, text: &str, current: Option<&Value>) -> Result<Value, ParamError> {
        tweak::parse(self, text, current, &tweak::static_bounds(self.name))
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
            Value::Bytes(b) => f.write_str(&tweak::fmt_bytes(*b)),
            Value::Uint(u64::MAX) => f.write_str("unlimited"),
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
        let i =
            param_index(canonical(name)).ok_or_else(|| ParamError::Unknown(name.to_string()))?;
        let p = &PARAMS[i];
        if !available(p.name) {
            return Err(ParamError::NotAvailable(p.name.to_string()));
        }
        let v =
            tweak::parse(p, text, Some(&self.values[i]), &self.bounds(p)).map_err(|e| match e {
                // An alias is named as it was typed, as varnishd does.
                ParamError::Refused { value, text, .. } => ParamError::Refused {
                    name: name.to_string(),
                    value,
                    text,
                },
                e => e,
            })?;
        self.values[i] = v;
        Ok(())
    }

    /// The bounds of `p` as varnishd spells them now: some follow another
    /// parameter's value (a pool's minimum is at most its maximum, the
    /// reserve at most 95% of the minimum, a log record fits the buffer).
    pub fn bounds(&self, p: &Param) -> tweak::Bounds {
        let mut b = tweak::static_bounds(p.name);
        match p.name {
            "thread_pool_min" => {
                b.min = Some("5".to_string());
                b.max = Some(self.uint("thread_pool_max").to_string());
                b.max_reason = Some("thread_pool_max");
            }
            "thread_pool_max" => {
                b.min = Some(self.uint("thread_pool_min").to_string());
                b.min_reason = Some("thread_pool_min");
            }
            "thread_pool_reserve" => {
                b.max = Some((self.uint("thread_pool_min") * 950 / 1000).to_string());
                b.max_reason = Some("95% of thread_pool_min");
            }
            "vsl_buffer" => b.min = Some((self.bytes("vsl_reclen") + 12).to_string()),
            "vsl_reclen" if !self.is_default("vsl_buffer") => {
                b.max = Some(self.bytes("vsl_buffer").saturating_sub(12).to_string());
            }
            _ => {}
        }
        b
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
        let (name, value) = arg.split_once('=').ok_or(ParamError::NoEquals)?;
        self.set_unless_protected(name.trim(), value)
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
        let b = tweak::static_bounds(p.name);
        let bounds = (b.min, b.max);
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
        let text = |r: Result<(), ParamError>| r.unwrap_err().to_string();
        assert_eq!(
            text(s.set("gzip_level", "10")),
            "Must be no more than 9\n\n(attempting to set param 'gzip_level' to '10')"
        );
        assert_eq!(
            text(s.set("backend_idle_timeout", "0.5")),
            "Must be greater or equal to 1.000\n\n(attempting to set param 'backend_idle_timeout' to '0.5')"
        );
        assert_eq!(text(s.set("nope", "1")), "Unknown parameter \"nope\".");
        assert_eq!(
            text(s.set("auto_restart", "maybe")),
            "use \"on\" or \"off\"\n\n(attempting to set param 'auto_restart' to 'maybe')"
        );
        assert_eq!(
            text(s.set("http_req_size", "255")),
            "Must be at least 0.25k\n\n(attempting to set param 'http_req_size' to '255')"
        );
        assert_eq!(
            text(s.set("workspace_client", "1x")),
            "Could not convert to bytes.\nUnknown BYTES unit of measurement ([KMGTP][B])\n  Try something like '80k' or '120M'\n\n(attempting to set param 'workspace_client' to '1x')"
        );
        assert_eq!(
            text(s.set("vsl_reclen", "1M")),
            "Must be no more than 16372b\n\n\n(attempting to set param 'vsl_reclen' to '1M')"
        );
        assert_eq!(
            text(s.set("thread_pool_max", "1")),
            "Must be at least 100 (thread_pool_min)\n\n(attempting to set param 'thread_pool_max' to '1')"
        );
        assert_eq!(
            text(s.set("max_restarts", "")),
            "Illegal Min: 0\n\n(attempting to set param 'max_restarts' to '')"
        );
        assert_eq!(
            text(s.set("pool_sess", "1,2")),
            "Three fields required: min_pool, max_pool and max_age\n\n(attempting to set param 'pool_sess' to '1,2')"
        );
        s.set("vsl_buffer", "1k").unwrap();
        assert_eq!(
            text(s.set("vsl_reclen", "2k")),
            "Must be no more than 1012\n\n\n(attempting to set param 'vsl_reclen' to '2k')"
        );
        s.set("max_restarts", "-1").unwrap();
        assert_eq!(s.get("max_restarts").to_string(), "unlimited");
        assert_eq!(s.apply_arg("max_restarts"), Err(ParamError::NoEquals));
    }

    #[test]
    fn bits_edit_in_place() {
        let mut s = ParamSet::default();
        s.set("feature", "+http2,-validate_headers").unwrap();
        assert!(s.bit("feature", "http2"));
        assert!(!s.bit("feature", "validate_headers"));
        s.set("feature", "default").unwrap();
        assert!(s.bit("feature", "validate_headers"));
        assert_eq!(
            s.set("feature", "+nonsense").unwrap_err().to_string(),
            "Unknown feature bit (+nonsense)\n\n(attempting to set param 'feature' to '+nonsense')"
        );
        assert_eq!(
            s.set("vsl_mask", "none").unwrap_err().to_string(),
            "Missing '+' or '-' (none)\n\n(attempting to set param 'vsl_mask' to 'none')"
        );
        s.set("feature", "+HTTP2 -http2,+http2").unwrap();
        assert!(s.bit("feature", "http2"));
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
        assert_eq!(Value::Bytes(48 * 1024).to_string(), "48k");
        assert_eq!(Value::Bytes(65535).to_string(), "65535b");
        assert_eq!(Value::Bytes(256 * 1024 * 1024).to_string(), "0.25G");
        assert_eq!(Value::Uint(u64::MAX).to_string(), "unlimited");
    }
}
