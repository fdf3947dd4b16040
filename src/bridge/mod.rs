//! The hand-off between the two threads: the only things both tokio (`server/`) and the
//! loop (`asgi/`) touch. tokio pushes `Event`s (`events`) on the queue and wakes the loop
//! (`wakeup`); the loop wakes tokio's connection tasks in batches (`relay`); each request or
//! WebSocket session is one `Exchange` whose loop-side state (`http_state`, `websocket`) only
//! the loop locks; `pending` is what tokio hands over per request, `body` the chunks both
//! ways, `budget` the bytes they may hold, `file_body` / `file_spans` file responses,
//! `served` what the loop is told of a response the core made alone (the static route).
//!
//! The modules are private: other layers use the names re-exported here. Dependencies run
//! one way: `events` (the closed list) over the exchange states, over `exchange`, `body`
//! and `budget`, over the generic queue in `wakeup`.
//!
//! Imports nothing from `server/` or `asgi/` (tests/test_layers.py checks it). The Python
//! objects kept here (parked futures, the relay's scheduler) are created, used and dropped on
//! the loop thread only.

mod body;
mod budget;
mod events;
mod exchange;
mod file_body;
mod file_spans;
mod http_state;
mod pending;
mod relay;
mod served;
mod waiters;
mod wakeup;
mod websocket;

#[cfg(test)]
pub(crate) use body::MERGED_CHUNK_BYTES;
pub(crate) use body::{
    BodyAborted, BodyRx, BodyTx, InChunk, InChunks, Joined, OutChunk, REQUEST_BODY_QUEUE,
};
pub(crate) use budget::{Budgets, ByteBudget, RoomWaiter};
pub(crate) use events::{Event, LogText, Wakeup};
pub(crate) use exchange::{CloseGuard, CloseInfo, Exchange, ExchangeState};
pub(crate) use file_body::{FileSource, OpenError, SpanError};
pub(crate) use file_spans::{
    in_use as file_spans_in_use, is_placeholder, lookup as lookup_file_span, Lookup,
};
pub(crate) use http_state::{
    response_channel, BufferLimits, DeferredMessage, DeferredSend, EarlyHint, HttpCloseGuard,
    HttpExchange, HttpState, Reply, RequestBody, ResponseBody, ResponsePhase, ResponseSender,
};
pub(crate) use pending::{host_port, ConnInfo, LocalAddr, PendingRequest, PendingWebSocket};
pub(crate) use relay::{mark_loop_thread, Relayed, WakeRelay};
pub(crate) use served::Served;
pub(crate) use waiters::Waiters;
pub(crate) use wakeup::mark_io_thread;
pub(crate) use websocket::{WsDecision, WsIn, WsOut, WsPhase, WsState};
