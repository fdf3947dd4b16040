//! What tokio hands over for each request: plain Rust data only.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::http::exchange::Exchange;
use crate::tls::TlsInfo;

pub enum LocalAddr {
    Tcp(SocketAddr),
    Unix(Arc<str>),
}

/// Per connection, shared by its requests.
pub struct ConnInfo {
    pub peer: Option<SocketAddr>,
    pub local: LocalAddr,
    /// Set on TLS connections (scheme `https`, `extensions["tls"]`).
    pub tls: Option<Arc<TlsInfo>>,
}

pub struct PendingRequest {
    pub head: http::request::Parts,
    pub conn: Arc<ConnInfo>,
    pub exchange: Arc<Exchange>,
}
