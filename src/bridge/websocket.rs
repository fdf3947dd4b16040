//! What a WebSocket session and its app exchange: the messages each way, the app's decision
//! on the handshake, and the loop-side state kept in the session's `Exchange`.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use tokio::sync::{mpsc, oneshot};

use crate::bridge::budget::Budgets;
use crate::bridge::exchange::CloseInfo;
use crate::bridge::http_state::ResponseBody;
use crate::bridge::waiters::Waiters;
use crate::ws::stream::MaskedPayload;

/// From the client, through a bounded channel (`max_queue`), to the app's `receive()`.
pub(crate) enum WsIn {
    /// Valid UTF-8 (checked by the reader).
    Text(Bytes),
    Binary(Bytes),
    /// A large binary message still masked, unmasked as it is copied into the app's `bytes`.
    BinaryMasked(MaskedPayload),
}

/// From the app's `send()` to the socket.
pub(crate) enum WsOut {
    /// UTF-8 (the app's str), as bytes so that it can carry a budget charge like `Binary`.
    Text(Bytes),
    Binary(Bytes),
    Close {
        code: u16,
        reason: String,
    },
}

/// The app's answer to `websocket.connect`.
pub(crate) enum WsDecision {
    Accept {
        subprotocol: Option<String>,
        headers: HeaderMap,
        outbound: mpsc::Receiver<WsOut>,
    },
    /// 403 for a close before accept, or the app's denial response.
    Reject(http::Response<ResponseBody>),
}

pub(crate) enum WsPhase {
    /// Waiting for the app's `websocket.accept` / `websocket.close` / denial response.
    Connecting(oneshot::Sender<WsDecision>),
    /// Collecting a denial response (`websocket.http.response.*`).
    Denying {
        tx: oneshot::Sender<WsDecision>,
        status: StatusCode,
        headers: HeaderMap,
        body: Vec<u8>,
    },
    Open(mpsc::Sender<WsOut>),
    /// Refused, closed by the app (`websocket.close`), or the peer is gone.
    Closed,
}

pub(crate) struct WsState {
    pub(crate) phase: WsPhase,
    pub(crate) inbound: mpsc::Receiver<WsIn>,
    pub(crate) connect_sent: bool,
    pub(crate) app_close: Option<CloseInfo>,
    pub(crate) waiters: Waiters,
    pub(crate) status: u16,
    /// The bytes of outgoing messages not yet written, set at the accept
    /// (`--limit-response-buffer` per connection): `send()` waits while it is used up.
    pub(crate) out_budget: Option<Budgets>,
}

impl WsOut {
    /// The message with its payload charged to `budgets` until the writer drops it.
    pub(crate) fn charged(self, budgets: &Budgets) -> Self {
        match self {
            WsOut::Text(text) => WsOut::Text(budgets.charge(text)),
            WsOut::Binary(data) => WsOut::Binary(budgets.charge(data)),
            close @ WsOut::Close { .. } => close,
        }
    }
}

impl WsState {
    pub(crate) fn new(
        decision: oneshot::Sender<WsDecision>,
        inbound: mpsc::Receiver<WsIn>,
    ) -> Self {
        WsState {
            phase: WsPhase::Connecting(decision),
            inbound,
            connect_sent: false,
            app_close: None,
            waiters: Waiters::default(),
            status: 0,
            out_budget: None,
        }
    }
}
