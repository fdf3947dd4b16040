//! What tokio hands over for each request: plain Rust data only.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::http::exchange::Exchange;

pub enum LocalAddr {
    Tcp(SocketAddr),
    Unix(Arc<str>),
}

/// Per connection, shared by its requests.
pub struct ConnInfo {
    pub peer: Option<SocketAddr>,
    pub local: LocalAddr,
}

pub struct PendingRequest {
    pub head: http::request::Parts,
    pub conn: Arc<ConnInfo>,
    pub exchange: Arc<Exchange>,
}
