//! Guest SDK for Lacquer tenant programs: safe Rust over the sandbox's
//! host API (core-module imports under `lacquer`, pointer/length
//! arguments; see `lacquer-sandbox`'s `host` module for the table).
//!
//! A tenant is a `cdylib` crate built for `wasm32-unknown-unknown` that
//! exports the hooks it wants as `extern "C"` functions without
//! arguments (`on_recv`, `on_hash`, `on_deliver`, `on_backend_response`,
//! ... one per VCL subroutine, called by `wasm.run()`), any functions
//! VCL calls by name (`wasm.vcall`, `wasm.call`), and optionally `main`,
//! run once at load (compile regexes there; the memory it leaves is the
//! starting point of every request):
//!
//! ```ignore
//! use lacquer_guest::{req, forge};
//! #[unsafe(no_mangle)]
//! pub extern "C" fn on_recv() {
//!     let url = req().url();
//!     req().append(&format!("X-Hello: url={url}"));
//!     forge(true, 200, "application/json", br#"{"message":"Hello from WebAssembly!"}"#);
//! }
//! ```
//!
//! Build tenants with a small stack (`RUSTFLAGS="-C
//! link-arg=-zstack-size=65536"`; this repository's `.cargo/config.toml`
//! sets it for its own tenants, when cargo runs from inside the
//! repository, where it finds that file): Rust's default 1 MiB stack is part of
//! the tenant's linear memory, which the sandbox walks page by page to
//! reset after every request.
//!
//! Hooks run on every request: build texts with `push_str` (and
//! [`json_escape_into`] for JSON) rather than `format!`, whose machinery
//! was more than half of the example hello tenant's instructions per
//! request (`examples/tenants/hello`).
//!
//! On targets other than `wasm32` the crate builds (so the host
//! workspace builds) but offers only [`json_escape`] and
//! [`json_escape_into`].

#[cfg(target_arch = "wasm32")]
mod api;
#[cfg(target_arch = "wasm32")]
pub use api::*;

/// Escapes `s` as the inside of a JSON string.
pub fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    json_escape_into(&mut out, s);
    out
}

/// Appends `s` escaped as the inside of a JSON string to `out`: builds a
/// JSON document in one buffer, without a `String` per escaped value or
/// `format!`'s machinery (which is most of a small hook's instructions).
pub fn json_escape_into(out: &mut String, s: &str) {
    // Runs of bytes that need no escape are copied whole (every byte
    // that does is ASCII, so the runs end on character boundaries).
    let mut run = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            b if b < 0x20 => "",
            _ => continue,
        };
        out.push_str(&s[run..i]);
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        } else {
            out.push_str(esc);
        }
        run = i + 1;
    }
    out.push_str(&s[run..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escape_quotes_backslashes_and_controls() {
        assert_eq!(json_escape("a\"b\\c\nd\u{1}"), "a\\\"b\\\\c\\nd\\u0001");
        assert_eq!(json_escape("plain/ü"), "plain/ü");
        assert_eq!(json_escape("\u{1f}x\u{0}"), "\\u001fx\\u0000");
        let mut out = String::from("{\"a\":\"");
        json_escape_into(&mut out, "q\"\t");
        assert_eq!(out, "{\"a\":\"q\\\"\\t");
    }
}
