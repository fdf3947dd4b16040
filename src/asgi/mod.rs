//! The ASGI side: everything here runs on the loop thread with the GIL held. It reads the
//! hand-off (`bridge/`) and never imports the tokio side (`server/`).

pub(crate) mod access;
pub(crate) mod awaitable;
pub(crate) mod dispatch;
pub(crate) mod errors;
#[cfg(not(PyPy))] // needs the C API's contextvars functions, which PyPy lacks
pub(crate) mod lazy_task;
pub(crate) mod loop_ctx;
pub(crate) mod messages;
pub(crate) mod protocol;
pub(crate) mod response;
// Everything PyPy-only; the pure packing is unit-tested on any build.
#[cfg(any(PyPy, test))]
pub(crate) mod pypy;
pub(crate) mod runner;
pub(crate) mod scope;
pub(crate) mod spawn;
pub(crate) mod waiters;
pub(crate) mod websocket;
pub(crate) mod ws_send;
