//! The HTTP rules of the static route (`--static-path-*`), as plain Rust: which file a
//! request path names under a mount (`path`), the `Range` header (`range`), the
//! conditional requests and validators (`conditional`), the precompressed sibling the
//! client accepts (`encoding`) and the `Content-Type` of an extension (`mime`). The I/O is
//! `server/static_route.rs`'s.

pub(crate) mod conditional;
pub(crate) mod encoding;
pub(crate) mod mime;
pub(crate) mod path;
pub(crate) mod range;
