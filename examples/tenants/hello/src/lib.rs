//! The hello tenant (libvmod-riscv's README example): adds a header
//! carrying the URL and answers with a JSON document built here.

use lacquer_guest::{forge, json_escape, req};

#[unsafe(no_mangle)]
pub extern "C" fn on_recv() {
    let url = req().url();
    req().append(&format!("X-Hello: url={url}"));
    let body = format!(
        r#"{{"message":"Hello from WebAssembly!","url":"{}"}}"#,
        json_escape(&url)
    );
    forge(true, 200, "application/json", body.as_bytes());
}
