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
//! Hooks run on every request: build texts with `write_str` into a
//! [`Text`] on the stack (and [`json_escape_into`] for JSON) rather than
//! with `format!`, whose machinery was more than half of the example
//! hello tenant's instructions per request, and read the URL with
//! `url_into` (`examples/tenants/hello`): a hook that allocates nothing
//! leaves fewer written pages for the sandbox to reset.
//!
//! On targets other than `wasm32` the crate builds (so the host
//! workspace builds) but offers only [`json_escape`],
//! [`json_escape_into`] and [`Text`].

#[cfg(target_arch = "wasm32")]
mod api;
#[cfg(target_arch = "wasm32")]
pub use api::*;

/// Escapes `s` as the inside of a JSON string.
pub fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    // Writing into a `String` cannot fail.
    let _ = json_escape_into(&mut out, s);
    out
}

/// Writes `s` escaped as the inside of a JSON string to `out` (a
/// `String`, or a [`Text`] on the stack): builds a JSON document in one
/// buffer, without a `String` per escaped value or `format!`'s machinery
/// (which was most of a small hook's instructions). `Err` when `out` is
/// full.
pub fn json_escape_into<W: std::fmt::Write>(out: &mut W, s: &str) -> std::fmt::Result {
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
        out.write_str(&s[run..i])?;
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.write_str("\\u00")?;
            out.write_char(char::from(HEX[usize::from(b >> 4)]))?;
            out.write_char(char::from(HEX[usize::from(b & 15)]))?;
        } else {
            out.write_str(esc)?;
        }
        run = i + 1;
    }
    out.write_str(&s[run..])
}

/// Text built in a fixed buffer of `N` bytes (on the stack): a hook that
/// builds its header lines and bodies here allocates nothing, so the
/// allocator's pages stay as the snapshot left them and the sandbox has
/// fewer written pages to reset after the request. Writes that do not
/// fit fail (`Err`) and leave the text as it was.
pub struct Text<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Text<N> {
    pub const fn new() -> Text<N> {
        Text {
            buf: [0; N],
            len: 0,
        }
    }

    pub fn as_str(&self) -> &str {
        // Only whole `str`s are ever appended.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }
}

impl<const N: usize> Default for Text<N> {
    fn default() -> Text<N> {
        Text::new()
    }
}

impl<const N: usize> std::fmt::Write for Text<N> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self
            .len
            .checked_add(s.len())
            .filter(|&e| e <= N)
            .ok_or(std::fmt::Error)?;
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
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
        json_escape_into(&mut out, "q\"\t").unwrap();
        assert_eq!(out, "{\"a\":\"q\\\"\\t");
    }

    #[test]
    fn text_holds_what_fits_and_refuses_the_rest() {
        use std::fmt::Write as _;
        let mut t = Text::<8>::new();
        t.write_str("abc").unwrap();
        json_escape_into(&mut t, "\"d").unwrap();
        assert_eq!(t.as_str(), "abc\\\"d");
        assert!(t.write_str("xyz").is_err(), "9 bytes do not fit in 8");
        assert_eq!(t.as_str(), "abc\\\"d", "a refused write changes nothing");
        t.clear();
        t.write_str("ü").unwrap();
        assert_eq!(t.as_str(), "ü");
    }
}
