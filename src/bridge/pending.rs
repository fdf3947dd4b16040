//! What tokio hands over for each request: plain Rust data only.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::bridge::exchange::Exchange;
use crate::bridge::http_state::HttpState;
use crate::bridge::websocket::WsState;
use crate::tls::TlsInfo;

pub(crate) enum LocalAddr {
    Tcp(SocketAddr),
    Unix(Arc<str>),
}

/// A peer as "host:port" for log lines (IPv4-mapped IPv6 shown as IPv4).
pub(crate) fn host_port(addr: &SocketAddr) -> String {
    format!("{}:{}", addr.ip().to_canonical(), addr.port())
}

/// Per connection, shared by its requests.
pub(crate) struct ConnInfo {
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) local: LocalAddr,
    /// Set on TLS connections (scheme `https`, `extensions["tls"]`).
    pub(crate) tls: Option<Arc<TlsInfo>>,
    /// The peer's and our IP as text, formatted once per connection instead of per request.
    pub(crate) peer_host: Box<str>,
    pub(crate) local_host: Box<str>,
    /// Whether the socket's peer is on this host: a loopback address, or our own address.
    /// Of the socket, not of a PROXY header (`server::proxied` keeps it), for `--sendfile
    /// auto` (`server::service::writes_by_sendfile`).
    pub(crate) socket_on_this_host: bool,
}

impl ConnInfo {
    pub(crate) fn new(peer: Option<SocketAddr>, local: LocalAddr) -> Self {
        let host = |addr: &SocketAddr| addr.ip().to_canonical().to_string().into_boxed_str();
        let peer_host = peer.as_ref().map(host).unwrap_or_default();
        let local_host = match &local {
            LocalAddr::Tcp(addr) => host(addr),
            LocalAddr::Unix(_) => Box::from(""),
        };
        let socket_on_this_host = match (&peer, &local) {
            (Some(peer), LocalAddr::Tcp(local)) => {
                let peer = peer.ip().to_canonical();
                peer.is_loopback() || peer == local.ip().to_canonical()
            }
            _ => false,
        };
        ConnInfo {
            peer,
            local,
            tls: None,
            peer_host,
            local_host,
            socket_on_this_host,
        }
    }
}

pub(crate) struct PendingRequest {
    pub(crate) head: http::request::Parts,
    pub(crate) conn: Arc<ConnInfo>,
    pub(crate) exchange: Arc<Exchange<HttpState>>,
    /// Response trailers can reach the client (`http::headers::trailers_reach_client`):
    /// decided off the loop thread, read by the scope and the response.
    pub(crate) trailers: bool,
    /// `http.response.early_hint` can reach the client (HTTP/1.1, HTTP/2 and HTTP/3: see
    /// `server::early_hints`).
    pub(crate) early_hints: bool,
}

pub(crate) struct PendingWebSocket {
    pub(crate) head: http::request::Parts,
    pub(crate) conn: Arc<ConnInfo>,
    pub(crate) exchange: Arc<Exchange<WsState>>,
    /// `Sec-WebSocket-Protocol` offers, in order.
    pub(crate) subprotocols: Vec<String>,
}

#[cfg(test)]
impl PendingRequest {
    /// A request with a fresh exchange whose response goes nowhere (unit tests).
    pub(crate) fn for_test(head: http::request::Parts, conn: ConnInfo) -> Self {
        use crate::bridge::http_state::{BufferLimits, HttpState, RequestBody};
        let (tx, _rx) = crate::bridge::http_state::response_channel();
        let wakeup = Arc::new(crate::bridge::events::Wakeup::new().expect("an eventfd"));
        let buffers = BufferLimits {
            response: 1 << 20,
            connection: None,
        };
        let state = HttpState::new(
            RequestBody::Done,
            tx,
            false,
            buffers,
            std::time::Instant::now(),
        );
        PendingRequest {
            trailers: crate::http::headers::trailers_reach_client(head.version, &head.headers),
            early_hints: false,
            head,
            conn: Arc::new(conn),
            exchange: Arc::new(Exchange::new(wakeup, None, state)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_this_host(peer: &str, local: &str) -> bool {
        let info = ConnInfo::new(
            Some(peer.parse().unwrap()),
            LocalAddr::Tcp(local.parse().unwrap()),
        );
        info.socket_on_this_host
    }

    #[test]
    fn peers_on_this_host_are_loopback_or_our_own_address() {
        assert!(on_this_host("127.0.0.1:5000", "127.0.0.1:8000"));
        assert!(on_this_host("127.8.0.1:5000", "0.0.0.0:8000"));
        assert!(on_this_host("[::1]:5000", "[::1]:8000"));
        assert!(on_this_host("[::ffff:127.0.0.1]:5000", "[::]:8000"));
        assert!(on_this_host("192.0.2.7:5000", "192.0.2.7:8000"));
        assert!(on_this_host("[::ffff:192.0.2.7]:5000", "192.0.2.7:8000"));
        assert!(!on_this_host("192.0.2.8:5000", "192.0.2.7:8000"));
        assert!(!on_this_host("[2001:db8::1]:5000", "[2001:db8::2]:8000"));
        assert!(!ConnInfo::new(None, LocalAddr::Unix(Arc::from("/tmp/s"))).socket_on_this_host);
    }
}
