//! The WebSocket protocol (RFC 6455) with permessage-deflate (RFC 7692), as plain Rust: the
//! handshake checks, the framing (frame, utf8, deflate, stream) and the options. The session
//! that runs it on a connection is `server::websocket`; the messages it exchanges with the
//! app are `bridge::websocket`.

pub(crate) mod deflate;
pub(crate) mod frame;
pub(crate) mod handshake;
pub(crate) mod stream;
pub(crate) mod utf8;

use std::time::Duration;

#[derive(Clone, Debug)]
pub(crate) struct WsConfig {
    pub enabled: bool,
    /// Largest message (and frame) accepted from a client; bigger ones close with 1009.
    pub max_size: usize,
    /// Messages read ahead of the app before reading from the client pauses.
    pub max_queue: usize,
    pub ping_interval: Option<Duration>,
    pub ping_timeout: Option<Duration>,
    /// Negotiate permessage-deflate when the client offers it.
    pub per_message_deflate: bool,
}

impl Default for WsConfig {
    fn default() -> Self {
        WsConfig {
            enabled: true,
            max_size: 16 * 1024 * 1024,
            max_queue: 32,
            ping_interval: Some(Duration::from_secs(20)),
            ping_timeout: Some(Duration::from_secs(20)),
            per_message_deflate: true,
        }
    }
}
