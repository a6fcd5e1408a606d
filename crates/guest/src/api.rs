//! The host API for `wasm32` guests.

#[link(wasm_import_module = "lacquer")]
unsafe extern "C" {
    fn header_get(which: i32, np: *const u8, nl: i32, op: *mut u8, oc: i32) -> i32;
    fn header_set(which: i32, np: *const u8, nl: i32, vp: *const u8, vl: i32) -> i32;
    fn header_append(which: i32, lp: *const u8, ll: i32) -> i32;
    fn header_unset(which: i32, np: *const u8, nl: i32) -> i32;
    fn field_get(which: i32, field: i32, op: *mut u8, oc: i32) -> i32;
    fn field_set(which: i32, field: i32, vp: *const u8, vl: i32) -> i32;
    fn status_get(which: i32) -> i32;
    fn status_set(which: i32, status: i32) -> i32;
    fn decide(what: i32, status: i32, rp: *const u8, rl: i32) -> i32;
    #[link_name = "forge"]
    fn forge_raw(
        cacheable: i32,
        status: i32,
        tp: *const u8,
        tl: i32,
        bp: *const u8,
        bl: i32,
    ) -> i32;
    #[link_name = "backend"]
    fn backend_raw(np: *const u8, nl: i32) -> i32;
    #[link_name = "hash_data"]
    fn hash_data_raw(p: *const u8, n: i32);
    #[link_name = "set_ttl"]
    fn set_ttl_raw(secs: f64) -> i32;
    #[link_name = "set_uncacheable"]
    fn set_uncacheable_raw(flag: i32);
    #[link_name = "ban"]
    fn ban_raw(p: *const u8, n: i32);
    #[link_name = "log"]
    fn log_raw(p: *const u8, n: i32);
    fn regex_compile(p: *const u8, n: i32) -> i32;
    fn regex_match(id: i32, p: *const u8, n: i32) -> i32;
    #[allow(clippy::too_many_arguments)]
    fn regex_subst(
        id: i32,
        sp: *const u8,
        sl: i32,
        tp: *const u8,
        tl: i32,
        all: i32,
        op: *mut u8,
        oc: i32,
    ) -> i32;
    #[link_name = "sha256"]
    fn sha256_raw(p: *const u8, n: i32, out: *mut u8);
    fn base64_encode(p: *const u8, n: i32, op: *mut u8, oc: i32) -> i32;
    fn base64_decode(p: *const u8, n: i32, op: *mut u8, oc: i32) -> i32;
    #[link_name = "arg"]
    fn arg_raw(op: *mut u8, oc: i32) -> i32;
    #[link_name = "result"]
    fn result_raw(i: i32, p: *const u8, n: i32) -> i32;
}

fn len(b: &[u8]) -> i32 {
    i32::try_from(b.len()).unwrap_or(i32::MAX)
}

/// Calls `f(out_ptr, out_cap)`, which returns the full length (negative:
/// nothing), growing the buffer once if it was short.
///
/// The buffer is not zeroed first: the host writes the bytes it returns
/// the length of (at most the capacity it is given), and only those
/// become the vector's contents.
fn read(f: impl Fn(*mut u8, i32) -> i32) -> Option<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::with_capacity(256);
    let cap = buf.capacity();
    let n = f(buf.as_mut_ptr(), i32::try_from(cap).unwrap_or(i32::MAX));
    if n < 0 {
        return None;
    }
    let mut n = n as usize;
    if n > cap {
        buf.reserve_exact(n);
        let cap = buf.capacity();
        let m = f(buf.as_mut_ptr(), i32::try_from(cap).unwrap_or(i32::MAX));
        if m < 0 {
            return None;
        }
        // The value may have changed between the calls: keep what the
        // host wrote this time, no more than fits.
        n = (m as usize).min(cap);
    }
    // SAFETY: the host wrote the first `n` bytes (it copies at most the
    // capacity it was given, and `n` is at most that capacity), so they
    // are initialised, and `n <= capacity`.
    unsafe { buf.set_len(n) };
    Some(buf)
}

fn text(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Which HTTP message: `req`, `bereq`, `beresp`, `resp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Http(i32);

/// The client request.
pub fn req() -> Http {
    Http(0)
}
/// The backend request.
pub fn bereq() -> Http {
    Http(1)
}
/// The backend response.
pub fn beresp() -> Http {
    Http(2)
}
/// The response to the client.
pub fn resp() -> Http {
    Http(3)
}

impl Http {
    /// The first value of header `name`; `None` when absent (or the
    /// current subroutine has no such message).
    pub fn get(self, name: &str) -> Option<String> {
        // SAFETY: the pointers and lengths describe live slices of this
        // module's memory; the host copies at most `oc` bytes to `op`.
        read(|op, oc| unsafe { header_get(self.0, name.as_ptr(), len(name.as_bytes()), op, oc) })
            .map(text)
    }

    /// Sets header `name` (replacing every occurrence); false when the
    /// name or value is not valid or the message is absent.
    pub fn set(self, name: &str, value: &str) -> bool {
        // SAFETY: both slices are live for the call; the host only reads.
        unsafe {
            header_set(
                self.0,
                name.as_ptr(),
                len(name.as_bytes()),
                value.as_ptr(),
                len(value.as_bytes()),
            ) == 0
        }
    }

    /// Appends a `Name: value` header line.
    pub fn append(self, line: &str) -> bool {
        // SAFETY: the slice is live for the call; the host only reads.
        unsafe { header_append(self.0, line.as_ptr(), len(line.as_bytes())) == 0 }
    }

    /// Removes every occurrence of header `name`.
    pub fn unset(self, name: &str) {
        // SAFETY: the slice is live for the call; the host only reads.
        unsafe {
            header_unset(self.0, name.as_ptr(), len(name.as_bytes()));
        }
    }

    fn field(self, f: i32) -> String {
        // SAFETY: the host writes at most `oc` bytes to `op`.
        read(|op, oc| unsafe { field_get(self.0, f, op, oc) })
            .map(text)
            .unwrap_or_default()
    }

    /// Field `f` read into `buf`, without the heap: `None` when the
    /// message is absent, the value does not fit or is not UTF-8.
    fn field_into(self, f: i32, buf: &mut [u8]) -> Option<&str> {
        let cap = i32::try_from(buf.len()).unwrap_or(i32::MAX);
        // SAFETY: the host writes at most `cap` bytes to `buf`, which is
        // live and writable for the call.
        let n = unsafe { field_get(self.0, f, buf.as_mut_ptr(), cap) };
        let n = usize::try_from(n).ok().filter(|&n| n <= buf.len())?;
        std::str::from_utf8(&buf[..n]).ok()
    }

    /// The URL read into `buf` (no allocation: a hook that allocates
    /// nothing leaves the allocator's pages untouched, and the sandbox
    /// resets fewer pages after the request); `None` when absent, longer
    /// than `buf` or not UTF-8 (then use [`Http::url`]).
    pub fn url_into(self, buf: &mut [u8]) -> Option<&str> {
        self.field_into(0, buf)
    }

    fn set_field(self, f: i32, v: &str) -> bool {
        // SAFETY: the slice is live for the call; the host only reads.
        unsafe { field_set(self.0, f, v.as_ptr(), len(v.as_bytes())) == 0 }
    }

    pub fn url(self) -> String {
        self.field(0)
    }
    pub fn set_url(self, url: &str) -> bool {
        self.set_field(0, url)
    }
    pub fn method(self) -> String {
        self.field(1)
    }
    pub fn set_method(self, m: &str) -> bool {
        self.set_field(1, m)
    }
    pub fn proto(self) -> String {
        self.field(2)
    }
    pub fn reason(self) -> String {
        self.field(3)
    }
    pub fn set_reason(self, r: &str) -> bool {
        self.set_field(3, r)
    }
    /// The status of a response (0 for requests).
    pub fn status(self) -> u16 {
        // SAFETY: no pointers are passed.
        u16::try_from(unsafe { status_get(self.0) }).unwrap_or(0)
    }
    pub fn set_status(self, s: u16) -> bool {
        // SAFETY: no pointers are passed.
        unsafe { status_set(self.0, i32::from(s)) == 0 }
    }
}

fn decide_with(what: i32, status: u16, reason: &str) {
    // SAFETY: the slice is live for the call; the host only reads.
    unsafe {
        decide(
            what,
            i32::from(status),
            reason.as_ptr(),
            len(reason.as_bytes()),
        );
    }
}

/// Asks VCL for a synthetic response (`want_result() == "synth"`).
pub fn synth(status: u16, reason: &str) {
    decide_with(1, status, reason)
}
pub fn pass() {
    decide_with(2, 0, "")
}
pub fn hash() {
    decide_with(3, 0, "")
}
pub fn pipe() {
    decide_with(4, 0, "")
}
pub fn purge() {
    decide_with(5, 0, "")
}
pub fn restart() {
    decide_with(6, 0, "")
}

/// Builds the response in the sandbox. Not cacheable: VCL delivers it
/// through `vcl_synth` (`wasm.run()` there writes it into `resp`).
/// Cacheable (libvmod-riscv's `forge(Cached, ...)`): `want_result()` says
/// `"backend"`, VCL routes the request to `wasm.vm_backend()` and the
/// response is stored like a backend's (TTL from [`set_ttl`] in the same
/// hook, else 120 s), so later requests hit it.
pub fn forge(cacheable: bool, status: u16, content_type: &str, body: &[u8]) {
    // SAFETY: both slices are live for the call; the host only reads.
    unsafe {
        forge_raw(
            i32::from(cacheable),
            i32::from(status),
            content_type.as_ptr(),
            len(content_type.as_bytes()),
            body.as_ptr(),
            len(body),
        );
    }
}

/// Routes the request to the VCL's backend `name`; false past the
/// tenant's `max_backends`.
pub fn backend(name: &str) -> bool {
    // SAFETY: the slice is live for the call; the host only reads.
    unsafe { backend_raw(name.as_ptr(), len(name.as_bytes())) == 0 }
}

/// Adds to the cache key (`vcl_hash`, or later through `wasm.apply_hash()`).
pub fn hash_data(d: &[u8]) {
    // SAFETY: the slice is live for the call; the host only reads.
    unsafe { hash_data_raw(d.as_ptr(), len(d)) }
}

/// Sets `beresp.ttl` (seconds).
pub fn set_ttl(secs: f64) {
    // SAFETY: no pointers are passed.
    unsafe {
        set_ttl_raw(secs);
    }
}

/// Sets `beresp.uncacheable`.
pub fn set_uncacheable(flag: bool) {
    // SAFETY: no pointers are passed.
    unsafe { set_uncacheable_raw(i32::from(flag)) }
}

/// Adds a ban (`obj.http.x ~ y` syntax).
pub fn ban(expr: &str) {
    // SAFETY: the slice is live for the call; the host only reads.
    unsafe { ban_raw(expr.as_ptr(), len(expr.as_bytes())) }
}

/// Writes a line into the request's log.
pub fn log(msg: &str) {
    // SAFETY: the slice is live for the call; the host only reads.
    unsafe { log_raw(msg.as_ptr(), len(msg.as_bytes())) }
}

pub fn sha256(d: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    // SAFETY: `out` has the 32 bytes the host writes.
    unsafe { sha256_raw(d.as_ptr(), len(d), out.as_mut_ptr()) };
    out
}

pub fn base64(d: &[u8]) -> String {
    // SAFETY: the host reads `d` and writes at most `oc` bytes to `op`.
    read(|op, oc| unsafe { base64_encode(d.as_ptr(), len(d), op, oc) })
        .map(text)
        .unwrap_or_default()
}

pub fn unbase64(d: &str) -> Option<Vec<u8>> {
    // SAFETY: the host reads `d` and writes at most `oc` bytes to `op`.
    read(|op, oc| unsafe { base64_decode(d.as_ptr(), len(d.as_bytes()), op, oc) })
}

/// The argument of `wasm.call(function, arg)`.
pub fn arg() -> Vec<u8> {
    // SAFETY: the host writes at most `oc` bytes to `op`.
    read(|op, oc| unsafe { arg_raw(op, oc) }).unwrap_or_default()
}

/// Publishes result `i` (0..8) for `wasm.result_as_string(i)` /
/// `result_value(i)`; result 0 is also what `wasm.call` returns.
pub fn set_result(i: usize, v: &[u8]) -> bool {
    // SAFETY: the slice is live for the call; the host only reads.
    unsafe { result_raw(i32::try_from(i).unwrap_or(i32::MAX), v.as_ptr(), len(v)) == 0 }
}

/// A pattern compiled by the host in `main` (Rust `regex` syntax).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regex(i32);

impl Regex {
    /// Compiles `pattern`; only in `main` (the id lives in the snapshot).
    pub fn new(pattern: &str) -> Option<Regex> {
        // SAFETY: the slice is live for the call; the host only reads.
        let id = unsafe { regex_compile(pattern.as_ptr(), len(pattern.as_bytes())) };
        (id >= 0).then_some(Regex(id))
    }

    pub fn is_match(self, s: &str) -> bool {
        // SAFETY: the slice is live for the call; the host only reads.
        unsafe { regex_match(self.0, s.as_ptr(), len(s.as_bytes())) == 1 }
    }

    /// Replaces the first match (every match with `all`); `$1` in the
    /// template is the first group.
    pub fn replace(self, s: &str, template: &str, all: bool) -> String {
        read(|op, oc| {
            // SAFETY: the host reads both slices and writes at most `oc`
            // bytes to `op`.
            unsafe {
                regex_subst(
                    self.0,
                    s.as_ptr(),
                    len(s.as_bytes()),
                    template.as_ptr(),
                    len(template.as_bytes()),
                    i32::from(all),
                    op,
                    oc,
                )
            }
        })
        .map(text)
        .unwrap_or_else(|| s.to_string())
    }
}

/// Heap the allocator holds free in the snapshot (see [`__lacquer_init`]).
const HEAP_RESERVE: usize = 48 << 10;

/// Run by the sandbox once at load, before the tenant's `main`: makes the
/// allocator set up its heap with [`HEAP_RESERVE`] bytes free, so that
/// this state is in the snapshot every request starts from. Without it a
/// tenant without a `main` that allocates has an allocator that has
/// never run, and every request's first allocation grows linear memory
/// (`memory.grow`: two `mprotect` calls and fresh pages per request).
#[unsafe(no_mangle)]
pub extern "C" fn __lacquer_init() {
    drop(std::hint::black_box(Vec::<u8>::with_capacity(HEAP_RESERVE)));
}
