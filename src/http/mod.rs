//! HTTP rules as plain Rust, used by the tokio side: request-head checks (`h1_request`,
//! `headers`), the checks on HTTP/2 frames before h2 reads them (`h2_flood`,
//! `h2_frame_rules`), reading a request body within its limits (`body_reader`; an HTTP/2
//! stream's body is `h2_body`), the responses the server makes itself (`responses`), the
//! cached `Date` (`date`), HPACK/QPACK's prefixed integers (`prefix_int`), QUIC's
//! variable-length integers (`quic_varint`), and the static route's rules (`static_files`).
//! No threads, no Python.

pub(crate) mod body_fault;
pub(crate) mod body_reader;
pub(crate) mod date;
pub(crate) mod h1_request;
pub(crate) mod h2_body;
pub(crate) mod h2_flood;
pub(crate) mod h2_frame_rules;
pub(crate) mod header_order;
pub(crate) mod headers;
pub(crate) mod prefix_int;
pub(crate) mod probes;
pub(crate) mod quic_varint;
pub(crate) mod responses;
pub(crate) mod static_files;
