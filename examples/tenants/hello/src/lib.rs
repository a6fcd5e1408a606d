//! The hello tenant (libvmod-riscv's README example): adds a header
//! carrying the URL and answers with a JSON document built here.
//!
//! Both texts are built in one buffer with `push_str` rather than
//! `format!`: Rust's formatting machinery (dynamic dispatch through
//! `fmt::Write`, an allocation per `format!`) was most of this hook's
//! instructions, and the hook runs on every request.

use lacquer_guest::{forge, json_escape_into, req};

const LINE: &str = "X-Hello: url=";
const HEAD: &str = r#"{"message":"Hello from WebAssembly!","url":""#;
const TAIL: &str = r#""}"#;

#[unsafe(no_mangle)]
pub extern "C" fn on_recv() {
    let url = req().url();
    let mut buf = String::with_capacity(HEAD.len() + 2 * url.len() + TAIL.len());
    buf.push_str(LINE);
    buf.push_str(&url);
    req().append(&buf);
    buf.clear();
    buf.push_str(HEAD);
    json_escape_into(&mut buf, &url);
    buf.push_str(TAIL);
    forge(true, 200, "application/json", buf.as_bytes());
}
