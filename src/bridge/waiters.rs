//! The asyncio futures of `receive()` and `send()` calls parked on the loop, kept in an
//! exchange's loop-side state. Only the loop thread touches them (asgi/waiters.rs parks and
//! resolves them).

use std::collections::VecDeque;

use pyo3::prelude::*;

/// The futures handed out by `receive()` and `send()` that tokio has yet to complete.
#[derive(Default)]
pub(crate) struct Waiters {
    pub(crate) recv: VecDeque<Py<PyAny>>,
    pub(crate) send: Option<Py<PyAny>>,
    pub(crate) send_in_flight: bool,
}

impl Waiters {
    pub(crate) fn clear(&mut self) {
        self.recv.clear();
        self.send = None;
    }
}
