//! WebSockets over HTTP/1.1 Upgrade (RFC 6455) with permessage-deflate (RFC 7692): the
//! handshake checks, the framing (frame, utf8, deflate, stream) and the tokio-side session
//! that moves messages between the socket and the app's channels.

pub mod deflate;
pub mod frame;
pub mod handshake;
pub mod session;
pub mod stream;
pub mod utf8;

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct WsConfig {
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

use bytes::Bytes;
use http::HeaderMap;
use tokio::sync::mpsc;

use crate::http::body::ResponseBody;

/// From the client, through a bounded channel (`max_queue`), to the app's `receive()`.
pub enum WsIn {
    /// Valid UTF-8 (checked by the reader).
    Text(Bytes),
    Binary(Bytes),
}

/// From the app's `send()` to the socket.
pub enum WsOut {
    Text(String),
    Binary(Bytes),
    Close { code: u16, reason: String },
}

/// The app's answer to `websocket.connect`.
pub enum WsDecision {
    Accept {
        subprotocol: Option<String>,
        headers: HeaderMap,
        outbound: mpsc::Receiver<WsOut>,
    },
    /// 403 for a close before accept, or the app's denial response.
    Reject(http::Response<ResponseBody>),
}

/// How the session ended, as `websocket.disconnect` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloseInfo {
    pub code: u16,
    pub reason: String,
}

impl CloseInfo {
    /// 1006: the connection was lost without a close frame (never sent on the wire).
    pub fn abnormal() -> Self {
        CloseInfo {
            code: 1006,
            reason: String::new(),
        }
    }
}
