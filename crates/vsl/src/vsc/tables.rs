//! Declarative counter tables of Varnish 7.1: one schema per section kind
//! (MAIN, MGT, MEMPOOL, SMA, SMU, SMF, VBE, LCK, DEBUG of the test vmod,
//! and MSE for Lacquer's persistent store, named as Varnish Enterprise
//! names its store's section; plus Lacquer's own TLS section for its
//! built-in TLS, and VMOD_CURL for the HTTP calls VCL makes through vmods
//! curl and http, as a vmod publishes its own set), with each counter's type,
//! format, level, the one-line description varnishstat prints and a longer
//! description. Each schema also defines an enum naming its counters, used
//! as the index on the hot path (`main.inc(Main::cache_hit)`).

use super::{CounterDef, CounterType, Format, Level, Schema};

schema! {
    Main, MAIN, "MAIN", "Main counters";
    summs: Counter, Integer, Debug, "stat summ operations",
        "How many times per-thread statistics were folded into the global counters.";
    uptime: Counter, Duration, Info, "Child process uptime",
        "Seconds the child (worker) process has been running.";
    sess_conn: Counter, Integer, Info, "Sessions accepted",
        "Client connections accepted successfully.";
    sess_fail: Counter, Integer, Info, "Session accept failures",
        "Client connections whose accept() failed; the sum of the sess_fail_* counters.";
    sess_fail_econnaborted: Counter, Integer, Info, "Session accept failures: connection aborted",
        "accept() failures because the client aborted the connection first; normally harmless.";
    sess_fail_eintr: Counter, Integer, Info, "Session accept failures: interrupted system call",
        "accept() failures because a signal interrupted the call; normally harmless.";
    sess_fail_emfile: Counter, Integer, Info, "Session accept failures: too many open files",
        "accept() failures for lack of file descriptors; raise the open files limit.";
    sess_fail_ebadf: Counter, Integer, Info, "Session accept failures: bad file descriptor",
        "accept() failures on an invalid listen socket; indicates a bug.";
    sess_fail_enomem: Counter, Integer, Info, "Session accept failures: not enough memory",
        "accept() failures for lack of kernel (socket buffer) memory.";
    sess_fail_other: Counter, Integer, Info, "Session accept failures: other",
        "accept() failures for any other reason; see SessError records in the raw log.";
    client_req_400: Counter, Integer, Info, "Client requests received, subject to 400 errors",
        "Client requests rejected with 400 because they could not be parsed.";
    client_req_417: Counter, Integer, Info, "Client requests received, subject to 417 errors",
        "Client requests rejected with 417 because of an unsupported Expect header.";
    client_req: Counter, Integer, Info, "Good client requests received",
        "Client requests that were parsed successfully.";
    esi_req: Counter, Integer, Info, "ESI subrequests",
        "ESI sub-requests started.";
    cache_hit: Counter, Integer, Info, "Cache hits",
        "Lookups that found an object and delivered it without contacting a backend.";
    cache_hit_grace: Counter, Integer, Info, "Cache grace hits",
        "Cache hits on objects past their TTL but within grace; also counted in cache_hit.";
    cache_hitpass: Counter, Integer, Info, "Cache hits for pass.",
        "Lookups that found a hit-for-pass object and therefore passed.";
    cache_hitmiss: Counter, Integer, Info, "Cache hits for miss.",
        "Lookups that found a hit-for-miss object and fetched without request coalescing.";
    cache_miss: Counter, Integer, Info, "Cache misses",
        "Lookups that found nothing usable, so the object was fetched from a backend.";
    beresp_uncacheable: Counter, Integer, Info, "Uncacheable backend responses",
        "Backend responses marked uncacheable (hit-for-miss objects).";
    beresp_shortlived: Counter, Integer, Info, "Shortlived objects",
        "Objects stored in transient storage because their lifetime was short.";
    backend_conn: Counter, Integer, Info, "Backend conn. success",
        "Backend connections opened successfully.";
    backend_unhealthy: Counter, Integer, Info, "Backend conn. not attempted",
        "Backend connections not tried because the backend was sick.";
    backend_busy: Counter, Integer, Info, "Backend conn. too many",
        "Backend connections not tried because max_connections was reached.";
    backend_fail: Counter, Integer, Info, "Backend conn. failures",
        "Backend connection attempts that failed.";
    backend_reuse: Counter, Integer, Info, "Backend conn. reuses",
        "Backend requests sent over a recycled (kept-alive) connection.";
    backend_recycle: Counter, Integer, Info, "Backend conn. recycles",
        "Backend connections put back into the pool for reuse after a response.";
    backend_retry: Counter, Integer, Info, "Backend conn. retry",
        "Backend requests retried on a fresh connection after a reused one failed.";
    fetch_head: Counter, Integer, Info, "Fetch no body (HEAD)",
        "Fetches without a body because the request was HEAD.";
    fetch_length: Counter, Integer, Info, "Fetch with Length",
        "Fetches with a body delimited by Content-Length.";
    fetch_chunked: Counter, Integer, Info, "Fetch chunked",
        "Fetches with a chunked body.";
    fetch_eof: Counter, Integer, Info, "Fetch EOF",
        "Fetches with a body delimited by connection close.";
    fetch_bad: Counter, Integer, Info, "Fetch bad T-E",
        "Fetches whose body length could not be determined.";
    fetch_none: Counter, Integer, Info, "Fetch no body",
        "Fetches with an empty body.";
    fetch_1xx: Counter, Integer, Info, "Fetch no body (1xx)",
        "Fetches without a body because the status was 1xx.";
    fetch_204: Counter, Integer, Info, "Fetch no body (204)",
        "Fetches without a body because the status was 204.";
    fetch_304: Counter, Integer, Info, "Fetch no body (304)",
        "Fetches without a body because the status was 304.";
    fetch_failed: Counter, Integer, Info, "Fetch failed (all causes)",
        "Fetches that failed, for any reason.";
    fetch_no_thread: Counter, Integer, Info, "Fetch failed (no thread)",
        "Fetches that failed because no worker thread was available.";
    pools: Gauge, Integer, Info, "Number of thread pools",
        "Thread pools in use (parameter thread_pools).";
    threads: Gauge, Integer, Info, "Total number of threads",
        "Worker threads in all pools.";
    threads_limited: Counter, Integer, Info, "Threads hit max",
        "Times a pool needed another thread but thread_pool_max was reached.";
    threads_created: Counter, Integer, Info, "Threads created",
        "Worker threads created.";
    threads_destroyed: Counter, Integer, Info, "Threads destroyed",
        "Worker threads destroyed.";
    threads_failed: Counter, Integer, Info, "Thread creation failed",
        "Times creating a worker thread failed.";
    thread_queue_len: Gauge, Integer, Info, "Length of session queue",
        "Tasks queued waiting for a worker thread.";
    busy_sleep: Counter, Integer, Info, "Number of requests sent to sleep on busy objhdr",
        "Requests parked because the object they wanted was being fetched.";
    busy_wakeup: Counter, Integer, Info, "Number of requests woken after sleep on busy objhdr",
        "Parked requests woken up when the fetch they waited for progressed.";
    busy_killed: Counter, Integer, Info, "Number of requests killed after sleep on busy objhdr",
        "Parked requests dropped for lack of resources.";
    sess_queued: Counter, Integer, Info, "Sessions queued for thread",
        "Sessions that had to wait for a worker thread.";
    sess_dropped: Counter, Integer, Info, "Sessions dropped for thread",
        "HTTP/1 sessions dropped because the thread queue was full.";
    req_dropped: Counter, Integer, Info, "Requests dropped",
        "HTTP/2 streams refused because the thread queue was full.";
    n_object: Gauge, Integer, Info, "object structs made",
        "Objects (headers and body) currently in the cache.";
    n_vampireobject: Gauge, Integer, Diag, "unresurrected objects",
        "Objects loaded from persistent storage that were never resurrected.";
    n_objectcore: Gauge, Integer, Info, "objectcore structs made",
        "Object cores in the cache, including busy, hit-for-pass and hit-for-miss ones.";
    n_objecthead: Gauge, Integer, Info, "objecthead structs made",
        "Distinct hash entries in the cache.";
    n_backend: Gauge, Integer, Info, "Number of backends",
        "Backends currently defined.";
    n_expired: Counter, Integer, Info, "Number of expired objects",
        "Objects removed from the cache because they reached the end of their life.";
    n_lru_nuked: Counter, Integer, Info, "Number of LRU nuked objects",
        "Objects evicted early to make room for new ones.";
    n_lru_moved: Counter, Integer, Diag, "Number of LRU moved objects",
        "Moves of objects on the LRU lists.";
    n_lru_limited: Counter, Integer, Info, "Reached nuke_limit",
        "Allocations that gave up after evicting nuke_limit objects.";
    losthdr: Counter, Integer, Info, "HTTP header overflows",
        "HTTP headers dropped because the header table was full.";
    s_sess: Counter, Integer, Info, "Total sessions seen",
        "Sessions seen since start.";
    n_pipe: Gauge, Integer, Info, "Number of ongoing pipe sessions",
        "Pipe sessions currently open.";
    pipe_limited: Counter, Integer, Info, "Pipes hit pipe_sess_max",
        "Pipe attempts refused because pipe_sess_max was reached.";
    s_pipe: Counter, Integer, Info, "Total pipe sessions seen",
        "Requests handled in pipe mode.";
    s_pass: Counter, Integer, Info, "Total pass-ed requests seen",
        "Requests handled in pass mode.";
    s_fetch: Counter, Integer, Info, "Total backend fetches initiated",
        "Backend fetches started.";
    s_bgfetch: Counter, Integer, Info, "Total backend background fetches initiated",
        "Backend fetches started in the background (grace refreshes).";
    s_synth: Counter, Integer, Info, "Total synthetic responses made",
        "Synthetic responses produced.";
    s_req_hdrbytes: Counter, Bytes, Info, "Request header bytes",
        "Bytes of request headers received from clients.";
    s_req_bodybytes: Counter, Bytes, Info, "Request body bytes",
        "Bytes of request bodies received from clients.";
    s_resp_hdrbytes: Counter, Bytes, Info, "Response header bytes",
        "Bytes of response headers sent to clients.";
    s_resp_bodybytes: Counter, Bytes, Info, "Response body bytes",
        "Bytes of response bodies sent to clients.";
    s_pipe_hdrbytes: Counter, Bytes, Info, "Pipe request header bytes",
        "Bytes of request headers received on piped sessions.";
    s_pipe_in: Counter, Bytes, Info, "Piped bytes from client",
        "Bytes passed from clients to backends in pipe sessions.";
    s_pipe_out: Counter, Bytes, Info, "Piped bytes to client",
        "Bytes passed from backends to clients in pipe sessions.";
    sess_closed: Counter, Integer, Info, "Session Closed",
        "Sessions closed.";
    sess_closed_err: Counter, Integer, Info, "Session Closed with error",
        "Sessions closed because of an error; the sc_* counters break this down.";
    sess_readahead: Counter, Integer, Info, "Session Read Ahead",
        "Requests that were already buffered when the previous one finished.";
    sess_herd: Counter, Integer, Diag, "Session herd",
        "Idle sessions handed to the waiter after timeout_linger.";
    sc_rem_close: Counter, Integer, Diag, "Session OK  REM_CLOSE",
        "Sessions closed by the client.";
    sc_req_close: Counter, Integer, Diag, "Session OK  REQ_CLOSE",
        "Sessions closed because the client asked for it.";
    sc_req_http10: Counter, Integer, Diag, "Session Err REQ_HTTP10",
        "Sessions closed because the client spoke HTTP/1.0 or older.";
    sc_rx_bad: Counter, Integer, Diag, "Session Err RX_BAD",
        "Sessions closed after receiving a malformed request.";
    sc_rx_body: Counter, Integer, Diag, "Session Err RX_BODY",
        "Sessions closed because receiving a request body failed.";
    sc_rx_junk: Counter, Integer, Diag, "Session Err RX_JUNK",
        "Sessions closed after receiving junk.";
    sc_rx_overflow: Counter, Integer, Diag, "Session Err RX_OVERFLOW",
        "Sessions closed because a request did not fit in the buffer.";
    sc_rx_timeout: Counter, Integer, Diag, "Session Err RX_TIMEOUT",
        "Sessions closed because receiving timed out.";
    sc_rx_close_idle: Counter, Integer, Diag, "Session Err RX_CLOSE_IDLE",
        "Sessions closed after timeout_idle without a request.";
    sc_tx_pipe: Counter, Integer, Diag, "Session OK  TX_PIPE",
        "Sessions closed at the end of a pipe.";
    sc_tx_error: Counter, Integer, Diag, "Session Err TX_ERROR",
        "Sessions closed after an error response.";
    sc_tx_eof: Counter, Integer, Diag, "Session OK  TX_EOF",
        "Sessions closed because the body was delimited by end of connection.";
    sc_resp_close: Counter, Integer, Diag, "Session OK  RESP_CLOSE",
        "Sessions closed because the backend or VCL asked for it.";
    sc_overload: Counter, Integer, Diag, "Session Err OVERLOAD",
        "Sessions closed because some resource ran out.";
    sc_pipe_overflow: Counter, Integer, Diag, "Session Err PIPE_OVERFLOW",
        "Sessions closed because a pipe overflowed.";
    sc_range_short: Counter, Integer, Diag, "Session Err RANGE_SHORT",
        "Sessions closed because there was not enough data for a range.";
    sc_req_http20: Counter, Integer, Diag, "Session Err REQ_HTTP20",
        "Sessions closed because HTTP/2 was refused.";
    sc_vcl_failure: Counter, Integer, Diag, "Session Err VCL_FAILURE",
        "Sessions closed because VCL failed.";
    client_resp_500: Counter, Integer, Diag, "Delivery failed due to insufficient workspace.",
        "Deliveries turned into 500 errors because the client workspace ran out.";
    ws_backend_overflow: Counter, Integer, Diag, "workspace_backend overflows",
        "Times a backend workspace ran out.";
    ws_client_overflow: Counter, Integer, Diag, "workspace_client overflows",
        "Times a client workspace ran out.";
    ws_thread_overflow: Counter, Integer, Diag, "workspace_thread overflows",
        "Times a thread workspace ran out.";
    ws_session_overflow: Counter, Integer, Diag, "workspace_session overflows",
        "Times a session workspace ran out.";
    shm_records: Counter, Integer, Diag, "SHM records",
        "Records written to the shared memory log.";
    shm_writes: Counter, Integer, Diag, "SHM writes",
        "Batches of records written to the shared memory log.";
    shm_flushes: Counter, Integer, Diag, "SHM flushes due to overflow",
        "Log buffers flushed early because they were full.";
    shm_cont: Counter, Integer, Diag, "SHM MTX contention",
        "Times a log writer had to wait for another writer.";
    shm_cycles: Counter, Integer, Diag, "SHM cycles through buffer",
        "Times the shared memory log wrapped around.";
    backend_req: Counter, Integer, Info, "Backend requests made",
        "Requests sent to backends.";
    n_vcl: Gauge, Integer, Info, "Number of loaded VCLs in total",
        "VCL programs loaded.";
    n_vcl_avail: Gauge, Integer, Diag, "Number of VCLs available",
        "VCL programs available for use.";
    n_vcl_discard: Gauge, Integer, Diag, "Number of discarded VCLs",
        "Discarded VCL programs waiting to be released.";
    vcl_fail: Counter, Integer, Info, "VCL failures",
        "VCL executions that failed.";
    bans: Gauge, Integer, Info, "Count of bans",
        "Bans on the ban list, including completed ones.";
    bans_completed: Gauge, Integer, Diag, "Number of bans marked 'completed'",
        "Bans no longer active (tested everywhere or superseded).";
    bans_obj: Gauge, Integer, Diag, "Number of bans using obj.*",
        "Bans that only use obj.* and can be tested by the lurker.";
    bans_req: Gauge, Integer, Diag, "Number of bans using req.*",
        "Bans that use req.* and can only be tested at lookup.";
    bans_added: Counter, Integer, Diag, "Bans added",
        "Bans added.";
    bans_deleted: Counter, Integer, Diag, "Bans deleted",
        "Bans removed from the list.";
    bans_tested: Counter, Integer, Diag, "Bans tested against objects (lookup)",
        "Ban-object pairs tested at lookup.";
    bans_obj_killed: Counter, Integer, Diag, "Objects killed by bans (lookup)",
        "Objects removed by bans at lookup.";
    bans_lurker_tested: Counter, Integer, Diag, "Bans tested against objects (lurker)",
        "Ban-object pairs tested by the ban lurker.";
    bans_tests_tested: Counter, Integer, Diag, "Ban tests tested against objects (lookup)",
        "Individual ban conditions tested at lookup.";
    bans_lurker_tests_tested: Counter, Integer, Diag, "Ban tests tested against objects (lurker)",
        "Individual ban conditions tested by the ban lurker.";
    bans_lurker_obj_killed: Counter, Integer, Diag, "Objects killed by bans (lurker)",
        "Objects removed by the ban lurker.";
    bans_lurker_obj_killed_cutoff: Counter, Integer, Diag, "Objects killed by bans for cutoff (lurker)",
        "Objects removed by the ban lurker to stay under ban_cutoff.";
    bans_dups: Counter, Integer, Diag, "Bans superseded by other bans",
        "Bans made redundant by an identical newer ban.";
    bans_lurker_contention: Counter, Integer, Diag, "Lurker gave way for lookup",
        "Times the ban lurker yielded to lookups.";
    bans_persisted_bytes: Gauge, Bytes, Diag, "Bytes used by the persisted ban lists",
        "Bytes taken by ban lists saved in persistent storage.";
    bans_persisted_fragmentation: Gauge, Bytes, Diag, "Extra bytes in persisted ban lists due to fragmentation",
        "Bytes wasted in persisted ban lists by removed bans.";
    n_purges: Counter, Integer, Info, "Number of purge operations executed",
        "Purge operations performed.";
    n_obj_purged: Counter, Integer, Info, "Number of purged objects",
        "Objects removed by purges.";
    exp_mailed: Counter, Integer, Diag, "Number of objects mailed to expiry thread",
        "Objects handed to the expiry thread.";
    exp_received: Counter, Integer, Diag, "Number of objects received by expiry thread",
        "Objects taken in by the expiry thread.";
    hcb_nolock: Counter, Integer, Debug, "HCB Lookups without lock",
        "Hash lookups done without taking the lock.";
    hcb_lock: Counter, Integer, Debug, "HCB Lookups with lock",
        "Hash lookups that needed the lock.";
    hcb_insert: Counter, Integer, Debug, "HCB Inserts",
        "Entries inserted into the hash.";
    esi_errors: Counter, Integer, Diag, "ESI parse errors (unlock)",
        "Errors found while parsing ESI.";
    esi_warnings: Counter, Integer, Diag, "ESI parse warnings (unlock)",
        "Warnings found while parsing ESI.";
    vmods: Gauge, Integer, Info, "Loaded VMODs",
        "VMODs loaded.";
    n_gzip: Counter, Integer, Info, "Gzip operations",
        "Gzip compressions performed.";
    n_gunzip: Counter, Integer, Info, "Gunzip operations",
        "Gzip decompressions performed.";
    n_test_gunzip: Counter, Integer, Info, "Test gunzip operations",
        "Gzip test decompressions performed (validating backend gzip).";
}

schema! {
    Mgt, MGT, "MGT", "Management process counters";
    uptime: Counter, Duration, Info, "Management process uptime",
        "Seconds the management process has been running.";
    child_start: Counter, Integer, Diag, "Child process started",
        "Times the child process was started.";
    child_exit: Counter, Integer, Diag, "Child process normal exit",
        "Times the child process exited normally.";
    child_stop: Counter, Integer, Diag, "Child process unexpected exit",
        "Times the child process exited unexpectedly.";
    child_died: Counter, Integer, Diag, "Child process died (signal)",
        "Times the child process was killed by a signal.";
    child_dump: Counter, Integer, Diag, "Child process core dumped",
        "Times the child process dumped core.";
    child_panic: Counter, Integer, Diag, "Child process panic",
        "Times the child process panicked.";
}

schema! {
    Tls, TLS, "TLS", "TLS on client and backend connections";
    handshakes: Counter, Integer, Info, "Client TLS handshakes",
        "Client TLS handshakes completed (full and resumed).";
    resumed: Counter, Integer, Info, "Client TLS sessions resumed",
        "Client TLS handshakes that resumed a session (ticket or session id).";
    alpn_h2: Counter, Integer, Info, "Client TLS connections on h2",
        "Client TLS connections that chose HTTP/2 by ALPN.";
    fail_timeout: Counter, Integer, Info, "Client TLS handshakes timed out",
        "Client TLS handshakes not finished within tls_handshake_timeout.";
    fail_closed: Counter, Integer, Info, "Client TLS handshakes closed",
        "Client TLS handshakes the client closed or reset before finishing.";
    fail_junk: Counter, Integer, Info, "Client TLS handshakes on junk",
        "Client connections to a TLS listener that did not speak TLS (plain HTTP, junk, broken records).";
    fail_incompatible: Counter, Integer, Info, "Client TLS handshakes without common ground",
        "Client TLS handshakes with no protocol version, cipher suite, group or ALPN protocol in common.";
    fail_client_cert: Counter, Integer, Info, "Client TLS handshakes refused for the client certificate",
        "Client TLS handshakes where a required client certificate was missing or did not verify.";
    fail_sni_nomatch: Counter, Integer, Info, "Client TLS handshakes aborted on SNI",
        "Client TLS handshakes ended with unrecognized_name (sni-nomatch-abort).";
    fail_other: Counter, Integer, Info, "Client TLS handshakes failed otherwise",
        "Client TLS handshakes that failed for any other reason (an alert from the client, ...).";
    rx_bytes: Counter, Bytes, Info, "Client TLS bytes received",
        "Decrypted bytes read from client TLS connections.";
    tx_bytes: Counter, Bytes, Info, "Client TLS bytes sent",
        "Bytes written to client TLS connections before encryption.";
    cert_commits: Counter, Integer, Info, "Certificate set changes",
        "Certificate sets installed by tls.cert.commit or a reload (SIGHUP).";
    be_handshakes: Counter, Integer, Info, "Backend TLS handshakes",
        "TLS handshakes with backends completed.";
    be_resumed: Counter, Integer, Info, "Backend TLS sessions resumed",
        "Backend TLS handshakes that resumed a session.";
    be_fail: Counter, Integer, Info, "Backend TLS handshakes failed",
        "Backend TLS handshakes that failed (certificate rejected, timeout, alert); see FetchError records.";
}

schema! {
    Mempool, MEMPOOL, "MEMPOOL", "Memory pool counters";
    live: Gauge, Integer, Debug, "In use",
        "Items of this pool currently handed out.";
    pool: Gauge, Integer, Debug, "In Pool",
        "Items waiting in the pool for reuse.";
    sz_wanted: Gauge, Bytes, Debug, "Size requested",
        "Item size asked for.";
    sz_actual: Gauge, Bytes, Debug, "Size allocated",
        "Item size actually allocated.";
    allocs: Counter, Integer, Debug, "Allocations",
        "Items handed out.";
    frees: Counter, Integer, Debug, "Frees",
        "Items given back.";
    recycle: Counter, Integer, Debug, "Recycled from pool",
        "Items handed out from the pool instead of freshly allocated.";
    timeout: Counter, Integer, Debug, "Timed out from pool",
        "Pooled items released after sitting unused too long.";
    toosmall: Counter, Integer, Debug, "Too small to recycle",
        "Items released instead of pooled because they were too small.";
    surplus: Counter, Integer, Debug, "Too many for pool",
        "Items released instead of pooled because the pool was full.";
    randry: Counter, Integer, Debug, "Pool ran dry",
        "Times the pool was empty when an item was wanted.";
}

schema! {
    Sma, SMA, "SMA", "Malloc stevedore counters";
    c_req: Counter, Integer, Info, "Allocator requests",
        "Allocation requests made to this storage.";
    c_fail: Counter, Integer, Info, "Allocator failures",
        "Allocation requests this storage could not satisfy.";
    c_bytes: Counter, Bytes, Info, "Bytes allocated",
        "Bytes allocated from this storage since start.";
    c_freed: Counter, Bytes, Info, "Bytes freed",
        "Bytes given back to this storage since start.";
    g_alloc: Gauge, Integer, Info, "Allocations outstanding",
        "Allocations currently outstanding.";
    g_bytes: Gauge, Bytes, Info, "Bytes outstanding",
        "Bytes currently allocated.";
    g_space: Gauge, Bytes, Info, "Bytes available",
        "Bytes still available.";
}

schema! {
    Smu, SMU, "SMU", "Umem stevedore counters";
    c_req: Counter, Integer, Info, "Allocator requests",
        "Allocation requests made to this storage.";
    c_fail: Counter, Integer, Info, "Allocator failures",
        "Allocation requests this storage could not satisfy.";
    c_bytes: Counter, Bytes, Info, "Bytes allocated",
        "Bytes allocated from this storage since start.";
    c_freed: Counter, Bytes, Info, "Bytes freed",
        "Bytes given back to this storage since start.";
    g_alloc: Gauge, Integer, Info, "Allocations outstanding",
        "Allocations currently outstanding.";
    g_bytes: Gauge, Bytes, Info, "Bytes outstanding",
        "Bytes currently allocated.";
    g_space: Gauge, Bytes, Info, "Bytes available",
        "Bytes still available.";
}

schema! {
    Smf, SMF, "SMF", "File stevedore counters";
    c_req: Counter, Integer, Info, "Allocator requests",
        "Allocation requests made to this storage.";
    c_fail: Counter, Integer, Info, "Allocator failures",
        "Allocation requests this storage could not satisfy.";
    c_bytes: Counter, Bytes, Info, "Bytes allocated",
        "Bytes allocated from this storage since start.";
    c_freed: Counter, Bytes, Info, "Bytes freed",
        "Bytes given back to this storage since start.";
    g_alloc: Gauge, Integer, Info, "Allocations outstanding",
        "Allocations currently outstanding.";
    g_bytes: Gauge, Bytes, Info, "Bytes outstanding",
        "Bytes currently allocated.";
    g_space: Gauge, Bytes, Info, "Bytes available",
        "Bytes still available.";
    g_smf: Gauge, Integer, Info, "N struct smf",
        "Extent structures in use by the file storage.";
    g_smf_frag: Gauge, Integer, Info, "N small free smf",
        "Small free extents (fragmentation).";
    g_smf_large: Gauge, Integer, Info, "N large free smf",
        "Large free extents.";
}

schema! {
    Mse, MSE, "MSE", "Persistent store counters";
    recovered: Gauge, Integer, Info, "Objects recovered",
        "Objects found again in the store file at startup.";
    recovered_bytes: Gauge, Bytes, Info, "Bytes recovered",
        "Body bytes of the objects found again at startup.";
    recovery_us: Gauge, Integer, Info, "Recovery time",
        "Microseconds the startup scan of the store file took.";
    scanned_bytes: Gauge, Bytes, Info, "Bytes scanned",
        "Bytes of the store file the startup scan read.";
    dropped_damaged: Gauge, Integer, Info, "Damaged records dropped",
        "Records dropped at startup: torn, truncated or failing their checksum.";
    dropped_conflict: Gauge, Integer, Info, "Conflicting records dropped",
        "Records dropped at startup: naming space past the end of the file or owned by a newer record.";
    dropped_stale: Gauge, Integer, Info, "Stale records dropped",
        "Recovered objects not reinserted: expired, or purged before the restart.";
    records: Counter, Integer, Info, "Records written",
        "Object records written (objects made persistent).";
    record_failures: Counter, Integer, Info, "Record failures",
        "Objects not made persistent: no space for the record, a body outside the store, or a write error.";
    journal_entries: Gauge, Integer, Info, "Journal entries",
        "Ban and purge entries in the journal.";
    journal_failures: Counter, Integer, Info, "Journal failures",
        "Ban or purge journal appends that failed.";
    syncs: Counter, Integer, Info, "Syncs",
        "fdatasync calls of the store's writer.";
    verified: Counter, Integer, Info, "Bodies verified",
        "Recovered bodies read back and checked against their record's checksum.";
    verify_failures: Counter, Integer, Info, "Bodies mismatched",
        "Recovered bodies whose bytes no longer matched their record (removed).";
    indexed: Gauge, Integer, Info, "Objects in the index",
        "Objects found at startup and not looked up or evicted since (on disk, in the compact index only).";
    index_bytes: Gauge, Bytes, Info, "Index size",
        "Bytes of RAM the compact index of the objects on disk takes.";
    materialized: Counter, Integer, Info, "Objects materialised",
        "Objects of the index put back in the cache by a lookup or purge of their digest.";
    index_evicted: Counter, Integer, Info, "Index objects evicted",
        "Objects of the index given up to make room for new ones, never looked up since the restart.";
}

schema! {
    Vbe, VBE, "VBE", "Backend counters";
    happy: Bitmap, Bitmap, Info, "Happy health probes",
        "Bitmap of the last 64 health probes, newest in the lowest bit; 1 means healthy.";
    bereq_hdrbytes: Counter, Bytes, Info, "Request header bytes",
        "Bytes of request headers sent to this backend.";
    bereq_bodybytes: Counter, Bytes, Info, "Request body bytes",
        "Bytes of request bodies sent to this backend.";
    beresp_hdrbytes: Counter, Bytes, Info, "Response header bytes",
        "Bytes of response headers received from this backend.";
    beresp_bodybytes: Counter, Bytes, Info, "Response body bytes",
        "Bytes of response bodies received from this backend.";
    pipe_hdrbytes: Counter, Bytes, Info, "Pipe request header bytes",
        "Bytes of request headers sent to this backend on pipes.";
    pipe_out: Counter, Bytes, Info, "Piped bytes to backend",
        "Bytes passed to this backend in pipe sessions.";
    pipe_in: Counter, Bytes, Info, "Piped bytes from backend",
        "Bytes passed from this backend in pipe sessions.";
    conn: Gauge, Integer, Info, "Concurrent connections used",
        "Connections to this backend currently in use.";
    req: Counter, Integer, Info, "Backend requests sent",
        "Requests sent to this backend.";
    unhealthy: Counter, Integer, Info, "Fetches not attempted due to backend being unhealthy",
        "Fetches not tried because this backend was sick.";
    busy: Counter, Integer, Info, "Fetches not attempted due to backend being busy",
        "Fetches not tried because this backend reached max_connections.";
    fail: Counter, Integer, Info, "Connections failed",
        "Connection attempts to this backend that failed; fail_* break this down.";
    fail_eacces: Counter, Integer, Diag, "Connections failed with EACCES or EPERM",
        "Connections refused locally with EACCES or EPERM.";
    fail_eaddrnotavail: Counter, Integer, Diag, "Connections failed with EADDRNOTAVAIL",
        "Connections failed with EADDRNOTAVAIL (no local address or port).";
    fail_econnrefused: Counter, Integer, Diag, "Connections failed with ECONNREFUSED",
        "Connections refused by the backend host.";
    fail_enetunreach: Counter, Integer, Diag, "Connections failed with ENETUNREACH",
        "Connections failed because the network was unreachable.";
    fail_etimedout: Counter, Integer, Diag, "Connections failed ETIMEDOUT",
        "Connections that timed out.";
    fail_other: Counter, Integer, Diag, "Connections failed for other reason",
        "Connections failed for another reason.";
    helddown: Counter, Integer, Diag, "Connection opens not attempted",
        "Connection attempts skipped during backoff after a failure.";
}

schema! {
    Lck, LCK, "LCK", "Lock counters";
    creat: Counter, Integer, Debug, "Created locks",
        "Locks of this class created.";
    destroy: Counter, Integer, Debug, "Destroyed locks",
        "Locks of this class destroyed.";
    locks: Counter, Integer, Debug, "Lock Operations",
        "Lock operations on this class.";
    dbg_busy: Counter, Integer, Debug, "Contended lock operations",
        "Lock operations that had to wait (only counted with debug flags).";
    dbg_try_fail: Counter, Integer, Debug, "Contended trylock operations",
        "Try-lock operations that failed (only counted with debug flags).";
}

schema! {
    Debug, DEBUG, "DEBUG", "Example counters";
    count: Counter, Integer, Debug, "arbitrary counter",
        "What the test vmod debug counts (`debug.vsc_count()`), while it keeps the set (`debug.vsc_new()`).";
}

schema! {
    VmodCurl, VMOD_CURL, "VMOD_CURL", "HTTP calls from VCL (vmods curl and http)";
    calls: Counter, Integer, Info, "Calls made",
        "HTTP calls vmod curl (get, head, fetch, post) and vmod http (req_send) started.";
    failed: Counter, Integer, Info, "Calls without a response",
        "Calls that ended without an HTTP response (refused, reset, timed out, bad answer): status 0 in VCL.";
    timeouts: Counter, Integer, Info, "Calls timed out",
        "Calls that reached their timeout (set_timeout, set_connect_timeout or curl_timeout); also counted in failed.";
    inflight_cap: Counter, Integer, Info, "Calls refused at the in-flight cap",
        "Calls refused at once because curl_max_inflight calls were already in flight.";
}

/// Every schema above, for tools that look counters up by kind.
pub static ALL: &[&Schema] = &[
    &MAIN, &MGT, &TLS, &MEMPOOL, &SMA, &SMU, &SMF, &MSE, &VBE, &LCK, &DEBUG, &VMOD_CURL,
];

/// The schema of a section kind (`"VBE"`), if known.
pub fn schema_for_kind(kind: &str) -> Option<&'static Schema> {
    ALL.iter().copied().find(|s| s.kind == kind)
}
