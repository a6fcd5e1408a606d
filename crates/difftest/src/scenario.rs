//! What one differential test is: a VCL (subroutine bodies as lists of
//! statements, so the minimiser can drop them one by one), a scripted
//! backend (responses per URL path, with framing, delays, truncation or raw
//! malformed bytes) and a client script (raw request bytes per connection,
//! pipelining, early close). Scenarios are saved as JSON regression cases.

use serde::{Deserialize, Serialize};

/// How the scripted backend frames a response body.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length`.
    Length,
    /// `Transfer-Encoding: chunked`, the body in pieces of a few bytes.
    Chunked,
    /// No length: the body ends when the backend closes the connection.
    Close,
    /// Neither a length nor a body (1xx/204/304, or a bodiless 200).
    None,
}

/// One response of the scripted backend.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct BeResp {
    /// The request path (without query) this response answers, or `*`.
    pub url: String,
    pub status: u16,
    pub reason: String,
    /// Headers besides the framing ones, in order.
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Send the body gzipped, with `Content-Encoding: gzip`.
    pub gzip: bool,
    pub framing: Framing,
    /// Wait before the response head (a stalled backend when it exceeds
    /// `first_byte_timeout`).
    pub delay_ms: u64,
    /// Wait after the first half of the body (past `between_bytes_timeout`
    /// it stalls the fetch).
    pub stall_ms: u64,
    /// Send only half of the body, then close.
    pub truncate: bool,
    /// Send these bytes verbatim instead of a response, then close.
    pub raw: Option<String>,
}

impl BeResp {
    /// A response of `raw` bytes sent verbatim for `url`, then a close.
    pub fn raw(url: &str, raw: String) -> BeResp {
        BeResp {
            url: url.into(),
            status: 0,
            reason: String::new(),
            headers: vec![],
            body: String::new(),
            gzip: false,
            framing: Framing::Close,
            delay_ms: 0,
            stall_ms: 0,
            truncate: false,
            raw: Some(raw),
        }
    }
}

/// One client request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Step {
    /// Client connection number (connections open on first use).
    pub conn: usize,
    /// The request bytes as sent (possibly malformed on purpose).
    pub raw: String,
    /// Send the next step's bytes in the same write before reading this
    /// step's response (the next step must use the same connection).
    pub pipeline: bool,
    /// Close the connection right after sending, without reading.
    pub close_early: bool,
    /// Wait this long before sending (to let a TTL run out).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wait_ms: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A whole scenario.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Scenario {
    /// The generator seed that made it (0 for hand-written cases).
    pub seed: u64,
    /// `(subroutine name, statements)`; the harness adds `vcl 4.1;`,
    /// `import std;` and the backend declaration.
    pub subs: Vec<(String, Vec<String>)>,
    pub backend: Vec<BeResp>,
    pub steps: Vec<Step>,
    /// Lines added inside the backend declaration (`.probe = { ... }`,
    /// timeouts); requests for [`crate::backend::PROBE_PATH`] are the
    /// probe's and are neither scripted nor recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backend_attrs: Vec<String>,
    /// Top-level declarations after the backend (`acl`, `probe`, `sub`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decls: Vec<String>,
    /// Run-time parameters set (`param.set`) for this scenario only and
    /// reset (`param.reset`) after it: `http_range_support`,
    /// `http_gzip_support`, `feature` (ESI and date flags).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<(String, String)>,
}

impl Scenario {
    /// The VCL text with the backend at `port`.
    pub fn vcl(&self, port: u16) -> String {
        let mut s = format!(
            "vcl 4.1;\nimport std;\n\nbackend default {{\n  .host = \"127.0.0.1\";\n  .port = \"{port}\";\n"
        );
        for a in &self.backend_attrs {
            for l in a.lines() {
                s.push_str("  ");
                s.push_str(l);
                s.push('\n');
            }
        }
        s.push_str("}\n");
        for d in &self.decls {
            s.push('\n');
            s.push_str(d);
            s.push('\n');
        }
        for (name, body) in &self.subs {
            s.push_str(&format!("\nsub {name} {{\n"));
            for st in body {
                for l in st.lines() {
                    s.push_str("  ");
                    s.push_str(l);
                    s.push('\n');
                }
            }
            s.push_str("}\n");
        }
        s
    }

    /// Size measure the minimiser reduces.
    pub fn weight(&self) -> usize {
        self.subs.iter().map(|(_, b)| b.len() + 1).sum::<usize>()
            + self
                .backend
                .iter()
                .map(|r| 1 + r.headers.len())
                .sum::<usize>()
            + self.steps.len()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a scenario always serialises")
    }

    pub fn from_json(s: &str) -> Result<Self, String> {
        serde_json::from_str(s).map_err(|e| format!("not a difftest scenario: {e}"))
    }
}
