//! Protocol-independent pieces of one request/response exchange, shared by tokio and the loop.

pub mod body;
pub mod exchange;
pub mod h1_request;
pub mod headers;
pub mod limits;
