//! The closed list of what tokio hands to the loop thread, and which of them wake an
//! exchange's parked `receive()` or `send()`. The queue that carries them is wakeup.rs's.

use std::sync::Arc;

use crate::bridge::exchange::{Exchange, ExchangeState};
use crate::bridge::http_state::{HttpExchange, HttpState};
use crate::bridge::pending::{PendingRequest, PendingWebSocket};
use crate::bridge::served::Served;
use crate::bridge::wakeup::WakeQueue;
use crate::bridge::websocket::WsState;

/// The loop thread's queue and its wake-up.
pub(crate) type Wakeup = WakeQueue<Event>;

/// What tokio hands to the loop thread.
pub(crate) enum Event {
    /// A new request to dispatch to the app.
    Request(Box<PendingRequest>),
    /// Something a pending `receive()` may be waiting for happened (body chunk, close).
    Receive(Arc<HttpExchange>),
    /// A `send()` that hit backpressure has been accepted (or failed) by tokio.
    SendDone(Arc<HttpExchange>),
    /// A WebSocket handshake to offer to the app.
    WebSocket(Box<PendingWebSocket>),
    WsReceive(Arc<Exchange<WsState>>),
    WsSendDone(Arc<Exchange<WsState>>),
    /// A response the static route made: for the access log and the metrics only.
    Served(Box<Served>),
    /// A warning for the `ferrocorn.error` log (a request refused by a limit); rare, so the
    /// text is boxed to keep the common events small.
    Warning(Box<LogText>),
    /// A line for the `ferrocorn.error` log at debug level (a connection closed for a bad
    /// PROXY header); only sent when that level is on.
    Debug(Box<LogText>),
}

/// The text of an `Event::Warning` or `Event::Debug`.
pub(crate) struct LogText(pub String);

impl ExchangeState for HttpState {
    type Event = Event;

    fn receive_event(exchange: Arc<Exchange<Self>>) -> Event {
        Event::Receive(exchange)
    }

    fn send_done_event(exchange: Arc<Exchange<Self>>) -> Event {
        Event::SendDone(exchange)
    }
}

impl ExchangeState for WsState {
    type Event = Event;

    fn receive_event(exchange: Arc<Exchange<Self>>) -> Event {
        Event::WsReceive(exchange)
    }

    fn send_done_event(exchange: Arc<Exchange<Self>>) -> Event {
        Event::WsSendDone(exchange)
    }
}
