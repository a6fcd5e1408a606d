//! The codec's error type: what went wrong, and what varnishd would answer.
//!
//! Every error carries the status code Varnish 7.1 uses for the same fault, so the
//! server can answer without re-deciding: 400 for a bad client request, 503 for a
//! bad backend response (the fetch fails), and no status at all when varnishd just
//! closes the connection (a request head larger than `http_req_size`).

use std::fmt;

/// Which kind of fault an [`Error`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The head is larger than [`crate::Limits::max_head`].
    HeadTooLarge,
    /// One header line is longer than [`crate::Limits::max_line`].
    HeaderTooLong,
    /// More header fields than [`crate::Limits::max_headers`].
    TooManyHeaders,
    /// The head does not follow the HTTP/1 grammar.
    Malformed,
    /// Message framing (Content-Length / Transfer-Encoding) is invalid or
    /// ambiguous.
    Framing,
    /// An HTTP/1.1 request without Host, or a request with several Host fields.
    Host,
    /// The `Connection` header names a well-known end-to-end header.
    Connection,
    /// A chunked body does not follow the chunked grammar or limits.
    Chunked,
}

/// A parse or framing error, with the status varnishd would answer with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    status: Option<u16>,
    message: String,
    /// The fault is in one header line (varnishd logs it as `BogoHeader`).
    header_fault: bool,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, status: Option<u16>, message: impl Into<String>) -> Self {
        Error {
            kind,
            status,
            message: message.into(),
            header_fault: false,
        }
    }

    /// Marks the fault as one of a header line.
    pub(crate) fn header_fault(mut self) -> Self {
        self.header_fault = true;
        self
    }

    /// Whether the fault is in one header line (control character, white
    /// space before the first header, missing or illegal name, line too
    /// long), which varnishd logs as a `BogoHeader` record of the request.
    pub fn is_header_fault(&self) -> bool {
        self.header_fault
    }

    /// A client-side (request) error: varnishd answers 400.
    pub(crate) fn req(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::new(kind, Some(400), message)
    }

    /// A backend-side (response) error: the fetch fails, the client gets 503.
    pub(crate) fn resp(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::new(kind, Some(503), message)
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The status varnishd sends for this fault, or `None` when it closes the
    /// connection without an answer.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// A human-readable description (worded like Varnish's `BogoHeader` log
    /// records where one exists).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(s) = self.status {
            write!(f, " (answered with {s})")?;
        } else {
            f.write_str(" (connection closed without answer)")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// At most 20 bytes of `b`, printable, for error messages (as Varnish logs).
pub(crate) fn excerpt(b: &[u8]) -> String {
    let b = &b[..b.len().min(20)];
    b.iter()
        .map(|&c| {
            if (0x20..0x7f).contains(&c) {
                (c as char).to_string()
            } else {
                format!("\\x{c:02x}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_accessors() {
        let e = Error::req(ErrorKind::Malformed, "bad");
        assert_eq!(e.status(), Some(400));
        assert_eq!(e.kind(), ErrorKind::Malformed);
        assert_eq!(e.to_string(), "bad (answered with 400)");
        let e = Error::new(ErrorKind::HeadTooLarge, None, "big");
        assert_eq!(e.to_string(), "big (connection closed without answer)");
        assert_eq!(Error::resp(ErrorKind::Framing, "x").status(), Some(503));
    }

    #[test]
    fn excerpt_is_short_and_printable() {
        assert_eq!(excerpt(b"a\r\nb"), "a\\x0d\\x0ab");
        assert_eq!(excerpt(&[b'x'; 50]).len(), 20);
    }
}
