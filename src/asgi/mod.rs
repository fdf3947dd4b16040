//! The ASGI side: everything here runs on the loop thread with the GIL held.

pub mod awaitable;
#[cfg(not(PyPy))] // needs the C API's contextvars functions, which PyPy lacks
pub mod lazy_task;
pub mod messages;
pub mod protocol;
pub mod runner;
pub mod scope;
pub mod state;
pub mod waiters;
pub mod websocket;
