//! What tokio hands over for each request: plain Rust data only.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::asgi::websocket::WsState;
use crate::http::exchange::Exchange;
use crate::tls::TlsInfo;

pub enum LocalAddr {
    Tcp(SocketAddr),
    Unix(Arc<str>),
}

/// A peer as "host:port" for log lines (IPv4-mapped IPv6 shown as IPv4).
pub fn host_port(addr: &SocketAddr) -> String {
    format!("{}:{}", addr.ip().to_canonical(), addr.port())
}

/// Per connection, shared by its requests.
pub struct ConnInfo {
    pub peer: Option<SocketAddr>,
    pub local: LocalAddr,
    /// Set on TLS connections (scheme `https`, `extensions["tls"]`).
    pub tls: Option<Arc<TlsInfo>>,
    /// The peer's and our IP as text, formatted once per connection instead of per request.
    pub peer_host: Box<str>,
    pub local_host: Box<str>,
}

impl ConnInfo {
    pub fn new(peer: Option<SocketAddr>, local: LocalAddr) -> Self {
        let host = |addr: &SocketAddr| addr.ip().to_canonical().to_string().into_boxed_str();
        let peer_host = peer.as_ref().map(host).unwrap_or_default();
        let local_host = match &local {
            LocalAddr::Tcp(addr) => host(addr),
            LocalAddr::Unix(_) => Box::from(""),
        };
        ConnInfo {
            peer,
            local,
            tls: None,
            peer_host,
            local_host,
        }
    }
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
