//! What tokio hands over for each request: plain Rust data only.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::asgi::websocket::WsState;
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

pub struct PendingWebSocket {
    pub head: http::request::Parts,
    pub conn: Arc<ConnInfo>,
    pub exchange: Arc<Exchange<WsState>>,
    /// `Sec-WebSocket-Protocol` offers, in order.
    pub subprotocols: Vec<String>,
}
