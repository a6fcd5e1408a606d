//! The hello tenant (libvmod-riscv's README example): adds a header
//! carrying the URL and answers with a JSON document built here.
//!
//! Both texts are built in one buffer on the stack with `write_str`
//! rather than `format!`, and the URL is read into a stack buffer:
//! Rust's formatting machinery (dynamic dispatch, an allocation per
//! `format!`) was most of this hook's instructions, and a hook that
//! never allocates leaves the allocator's pages as the snapshot has
//! them, so the sandbox resets one written page after the request
//! instead of three. A URL too long for the buffers takes the heap.

use lacquer_guest::{Text, forge, json_escape_into, req};

const LINE: &str = "X-Hello: url=";
const HEAD: &str = r#"{"message":"Hello from WebAssembly!","url":""#;
const TAIL: &str = r#""}"#;

#[unsafe(no_mangle)]
pub extern "C" fn on_recv() {
    let mut url = [0u8; 512];
    let mut buf = Text::<1200>::new();
    match req().url_into(&mut url) {
        Some(url) => hello(&mut buf, url),
        None => hello(&mut String::new(), &req().url()),
    }
}

/// Appends the header and forges the body, both built in `buf`.
fn hello<W: TextBuf>(buf: &mut W, url: &str) {
    // The stack buffer holds any URL that fits its own buffer, escaped
    // (at most 6 bytes per byte: 512 * 6 > 1200 only for URLs made of
    // control characters, which then go to the heap).
    if buf.write_str(LINE).and_then(|()| buf.write_str(url)).is_err() {
        return hello(&mut String::new(), url);
    }
    req().append(buf.text());
    buf.reset();
    if buf
        .write_str(HEAD)
        .and_then(|()| json_escape_into(buf, url))
        .and_then(|()| buf.write_str(TAIL))
        .is_err()
    {
        return hello_body(&mut String::new(), url);
    }
    forge(true, 200, "application/json", buf.text().as_bytes());
}

/// The body alone, when the stack buffer was too small for it.
fn hello_body(buf: &mut String, url: &str) {
    buf.push_str(HEAD);
    let _ = json_escape_into(buf, url);
    buf.push_str(TAIL);
    forge(true, 200, "application/json", buf.as_bytes());
}

/// A stack [`Text`] or a `String`.
trait TextBuf: std::fmt::Write {
    fn text(&self) -> &str;
    fn reset(&mut self);
}

impl<const N: usize> TextBuf for Text<N> {
    fn text(&self) -> &str {
        self.as_str()
    }
    fn reset(&mut self) {
        self.clear()
    }
}

impl TextBuf for String {
    fn text(&self) -> &str {
        self
    }
    fn reset(&mut self) {
        self.clear()
    }
}
