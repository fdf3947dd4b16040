//! The hand-off between the two threads: the only things both tokio (`server/`) and the
//! loop (`asgi/`) touch. tokio pushes `Event`s on the queue and wakes the loop (`wakeup`);
//! the loop wakes tokio's connection tasks in batches (`relay`); each request or WebSocket
//! session is one `Exchange` whose loop-side state (`http_state`, `websocket`) only the loop
//! locks; `pending` is what tokio hands over per request, `body` the chunks both ways, `served`
//! what the loop is told of a response the core made alone (the static route).
//!
//! Imports nothing from `server/` or `asgi/` (tests/test_layers.py checks it). The Python
//! objects kept here (parked futures, the relay's scheduler) are created, used and dropped on
//! the loop thread only.

pub(crate) mod body;
pub(crate) mod budget;
pub(crate) mod exchange;
pub(crate) mod file_body;
pub(crate) mod file_spans;
pub(crate) mod http_state;
pub(crate) mod pending;
pub(crate) mod relay;
pub(crate) mod served;
pub(crate) mod waiters;
pub(crate) mod wakeup;
pub(crate) mod websocket;
