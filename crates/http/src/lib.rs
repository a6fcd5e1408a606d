//! Sans-io HTTP/1 codec: parsing and serialising messages with strict framing.
//!
//! `lacquer-http` does no I/O. The server feeds it the bytes it read from a
//! client or backend socket and gets message heads back; it asks it how the
//! body is framed, decodes chunked bodies in place, and has heads serialised
//! into its output buffer. The same code serves both the client side
//! (requests in, responses out) and the backend side (requests out,
//! responses in).
//!
//! - [`parse_request`] / [`parse_request_buf`], [`parse_response`] /
//!   [`parse_response_buf`]: heads from bytes, under [`Limits`] that mirror
//!   varnishd's `http_req_*` / `http_resp_*` parameters.
//! - [`Headers`]: ordered, case-preserving field list sharing the received
//!   buffer; [`RequestHead`], [`ResponseHead`].
//! - [`BodyKind`], [`request_body_kind`], [`response_body_kind`]: framing.
//! - [`ChunkedDecoder`], [`encode_chunk`], [`encode_last_chunk`]: chunked
//!   coding.
//! - [`write_request_head`], [`write_response_head`]: serialisation.
//! - [`base64`]: base64 in its variants, one decoder for every user.
//! - [`date`]: HTTP dates (`VTIM_parse`/`VTIM_format`), `strftime`, the
//!   clock in epoch seconds.
//! - [`do_connection`], [`keep_alive`], [`strip_hop_by_hop`], [`expect`]:
//!   connection semantics; [`reason_phrase`]: default reasons.
//!
//! # Lifecycle / invariants
//!
//! - A head is returned only when complete: `Ok(None)` means "read more", and
//!   the codec never guesses at a head it has not fully seen. Parsing is
//!   stateless, so a caller simply retries with the longer buffer (after a
//!   read that [`may_complete_head`]).
//! - Every limit is checked before any work proportional to it: a head over
//!   `max_head` bytes, a header line over `max_line`, more than `max_headers`
//!   fields, a chunk-size line or trailer section over its limit is an error,
//!   never an allocation. Bad input never panics.
//! - A request head that parses has exactly one body framing ([`BodyKind`]);
//!   any message two HTTP/1 implementations could frame differently is
//!   refused (400 for requests, 503 for backend responses): conflicting or
//!   duplicated `Content-Length`, `Content-Length` with `Transfer-Encoding`,
//!   any coding but `chunked`, malformed numbers, bare CR, control bytes, NUL,
//!   whitespace before a colon or at the start of the first field. So the
//!   codec never forwards an ambiguous message: what it serialises is built
//!   from the parsed fields, not copied from the wire, and framing fields
//!   come from what it decided.
//! - Obsolete line folding is replaced by spaces before anything looks at the
//!   field (as varnishd does and RFC 9112 §5.2 allows), or refused when
//!   [`Limits::allow_obs_fold`] is off; either way no folded line is forwarded.
//! - Absolute-form targets are rewritten to origin-form and `Host`, so the
//!   target and `Host` never disagree downstream.
//! - Header order, duplicates and name spelling are preserved exactly from
//!   parse to serialisation; only the whitespace around values is normalised
//!   (`name: value`).
//! - The chunked decoder consumes exactly the body and nothing after it:
//!   pipelined bytes after the last chunk are left to the caller.
//! - Fields set after parsing (VCL) are trusted: the VCL layer must check
//!   them with [`is_valid_name`] / [`is_valid_value`] (Varnish
//!   `validate_headers`) before they reach a serialiser.

pub mod base64;
pub mod chunked;
pub mod conn;
pub mod date;
mod error;
pub mod framing;
pub mod h2;
pub mod headers;
pub mod hpack;
pub mod parse;
pub mod proxy;
pub mod status;
pub mod write;

pub use chunked::{
    CHUNK_END, ChunkedDecoder, ChunkedLimits, Decoded, LAST_CHUNK, encode_chunk,
    encode_chunk_header, encode_last_chunk,
};
pub use conn::{
    Expect, FILTER_FETCH, FILTER_INSERT, FILTER_PASS, FILTER_PASS_OBJ, Persistence, do_connection,
    expect, header_flags, keep_alive, persistence, strip_hop_by_hop,
};
pub use error::{Error, ErrorKind};
pub use framing::{BodyKind, parse_content_length, request_body_kind, response_body_kind};
pub use headers::{Headers, is_valid_name, is_valid_value};
pub use parse::{
    Limits, RequestHead, ResponseHead, Version, may_complete_head, parse_request,
    parse_request_buf, parse_response, parse_response_buf,
};
pub use status::reason_phrase;
pub use write::{
    WriteBuf, request_head_len, response_head_len, write_decimal, write_minimal_response,
    write_request_head, write_response_head,
};
