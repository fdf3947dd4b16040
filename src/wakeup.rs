//! The bridge from tokio to the loop thread: a lock-free queue plus one eventfd.
//!
//! tokio pushes events and writes the eventfd only when no wake-up is already pending, so a
//! burst of requests costs one wake-up. The loop thread reads the eventfd, clears the flag and
//! then drains everything queued (DESIGN.md, hot path points 1–2).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_queue::SegQueue;

use crate::asgi::websocket::WsState;
use crate::http::exchange::Exchange;
use crate::server::request::{PendingRequest, PendingWebSocket};

/// What tokio hands to the loop thread.
pub enum Event {
    /// A new request to dispatch to the app.
    Request(Box<PendingRequest>),
    /// Something a pending `receive()` may be waiting for happened (body chunk, close).
    Receive(Arc<Exchange>),
    /// A `send()` that hit backpressure has been accepted (or failed) by tokio.
    SendDone(Arc<Exchange>),
    /// A WebSocket handshake to offer to the app.
    WebSocket(Box<PendingWebSocket>),
    WsReceive(Arc<Exchange<WsState>>),
    WsSendDone(Arc<Exchange<WsState>>),
    /// A warning for the `ferrocorn.error` log (a request refused by a limit); rare, so the
    /// text is boxed to keep the common events small.
    Warning(Box<Warning>),
}

/// The text of an `Event::Warning`.
pub struct Warning(pub String);

pub struct Wakeup {
    queue: SegQueue<Event>,
    pending: AtomicBool,
    fd: OwnedFd,
}

impl Wakeup {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the returned descriptor is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Wakeup {
            queue: SegQueue::new(),
            pending: AtomicBool::new(false),
            // SAFETY: fd is a fresh descriptor we exclusively own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Called from tokio threads. Never touches Python.
    pub fn push(&self, event: Event) {
        self.queue.push(event);
        if !self.pending.swap(true, Ordering::AcqRel) {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a valid u64 to our eventfd. EAGAIN (counter
            // saturated) is harmless: a wake-up is pending anyway.
            unsafe {
                libc::write(
                    self.fd.as_raw_fd(),
                    &one as *const u64 as *const libc::c_void,
                    8,
                );
            }
        }
    }

    /// Called on the loop thread before draining: reset the eventfd, then the flag, so a
    /// push racing with the drain either lands in this drain or triggers a new wake-up.
    pub fn reset(&self) {
        let mut buf: u64 = 0;
        // SAFETY: reading 8 bytes into a valid u64; EAGAIN just means nothing was pending.
        unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                &mut buf as *mut u64 as *mut libc::c_void,
                8,
            );
        }
        self.pending.store(false, Ordering::Release);
    }

    pub fn pop(&self) -> Option<Event> {
        self.queue.pop()
    }
}
