//! The ASGI side: everything here runs on the loop thread with the GIL held.

pub mod awaitable;
pub mod messages;
pub mod protocol;
pub mod scope;
pub mod state;
pub mod waiters;
pub mod websocket;
