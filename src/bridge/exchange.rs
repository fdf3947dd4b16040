//! The state of one exchange (an HTTP request and its response, or a WebSocket session)
//! that both threads can see.
//!
//! tokio only touches the atomics; everything else (including Python futures) sits behind
//! `state`, which only the loop thread locks (so the lock is never contended).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::bridge::budget::RoomWaiter;
use crate::bridge::wakeup::WakeQueue;

/// A `receive()` is parked on the loop and wants an `Event::Receive` on the next change.
const RECV_WAITING: u8 = 1;
/// The client is gone, or hyper has finished with the response (it dropped our body).
const CLOSED: u8 = 2;
/// A `send()` waits for room in a body budget (bridge/budget.rs): closing must wake it too.
const SEND_WAITING: u8 = 4;

/// The loop-side state types (HTTP, WebSocket) say which events wake them (events.rs).
pub(crate) trait ExchangeState: Send + Sized + 'static {
    /// What the loop thread's queue carries.
    type Event: Send + 'static;
    /// The event that wakes this exchange's parked `receive()`.
    fn receive_event(exchange: Arc<Exchange<Self>>) -> Self::Event;
    /// The event that completes this exchange's backpressured `send()`.
    fn send_done_event(exchange: Arc<Exchange<Self>>) -> Self::Event;
}

/// How a WebSocket session ended, as `websocket.disconnect` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CloseInfo {
    pub(crate) code: u16,
    pub(crate) reason: String,
}

impl CloseInfo {
    /// 1006: the connection was lost without a close frame (never sent on the wire).
    pub(crate) fn abnormal() -> Self {
        CloseInfo {
            code: 1006,
            reason: String::new(),
        }
    }
}

pub(crate) struct Exchange<S: ExchangeState> {
    flags: AtomicU8,
    wakeup: Arc<WakeQueue<S::Event>>,
    /// For streamed request bodies: the body pump waits on this before its first read when
    /// the client sent `Expect: 100-continue` (hyper sends the 100 on that first read).
    pub(crate) body_start: Option<Arc<Notify>>,
    /// Outcome of the last backpressured send (true = accepted by the body channel).
    pub(crate) send_ok: AtomicBool,
    /// WebSocket: how the session ended; tokio writes it before marking the exchange closed.
    close_info: Mutex<Option<CloseInfo>>,
    state: Mutex<S>,
}

impl<S: ExchangeState> Exchange<S> {
    pub(crate) fn new(
        wakeup: Arc<WakeQueue<S::Event>>,
        body_start: Option<Arc<Notify>>,
        state: S,
    ) -> Self {
        Exchange {
            flags: AtomicU8::new(0),
            wakeup,
            body_start,
            send_ok: AtomicBool::new(false),
            close_info: Mutex::new(None),
            state: Mutex::new(state),
        }
    }

    /// Loop thread only.
    pub(crate) fn state(&self) -> MutexGuard<'_, S> {
        // A poisoned lock only means a panic happened while it was held; the state itself
        // is still consistent enough to finish the exchange.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_close_info(&self, info: CloseInfo) {
        *self.close_info.lock().unwrap_or_else(|p| p.into_inner()) = Some(info);
    }

    pub(crate) fn close_info(&self) -> Option<CloseInfo> {
        self.close_info
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.flags.load(Ordering::SeqCst) & CLOSED != 0
    }

    /// Loop side: ask to be woken on the next change. The caller re-checks afterwards.
    pub(crate) fn arm_receive(&self) {
        self.flags.fetch_or(RECV_WAITING, Ordering::SeqCst);
    }

    pub(crate) fn disarm_receive(&self) {
        self.flags.fetch_and(!RECV_WAITING, Ordering::SeqCst);
    }

    /// tokio side: whether a `receive()` is parked waiting for the next change.
    pub(crate) fn receive_waiting(&self) -> bool {
        self.flags.load(Ordering::SeqCst) & RECV_WAITING != 0
    }

    /// tokio side: something changed; wake the loop only if a receive() is parked.
    pub(crate) fn wake_receiver(self: &Arc<Self>) {
        if self.flags.fetch_and(!RECV_WAITING, Ordering::SeqCst) & RECV_WAITING != 0 {
            self.wakeup.push(S::receive_event(self.clone()));
        }
    }

    /// tokio side: a backpressured `send()` finished (see `send_ok`).
    pub(crate) fn send_done(self: &Arc<Self>) {
        self.wakeup.push(S::send_done_event(self.clone()));
    }

    pub(crate) fn mark_closed(self: &Arc<Self>) {
        let before = self.flags.fetch_or(CLOSED, Ordering::SeqCst);
        self.wake_receiver();
        if before & SEND_WAITING != 0 {
            self.wake_sender();
        }
    }

    /// Loop side: a `send()` waits for room; `room()` or closing wakes it (once).
    pub(crate) fn arm_send(&self) {
        self.flags.fetch_or(SEND_WAITING, Ordering::SeqCst);
    }

    /// Loop side: the wait armed by `arm_send` is not needed after all.
    pub(crate) fn disarm_send(&self) {
        self.flags.fetch_and(!SEND_WAITING, Ordering::SeqCst);
    }

    fn wake_sender(self: &Arc<Self>) {
        if self.flags.fetch_and(!SEND_WAITING, Ordering::SeqCst) & SEND_WAITING != 0 {
            self.send_done();
        }
    }
}

impl<S: ExchangeState> RoomWaiter for Exchange<S> {
    fn room(self: Arc<Self>) {
        self.wake_sender();
    }
}

/// Marks the exchange closed when dropped: held by hyper's service future until the response
/// is handed over, then by the response body until hyper is done with it. Either drop means
/// "no more can be sent", which is what `http.disconnect` and `ClientDisconnected` report.
pub(crate) struct CloseGuard<S: ExchangeState>(Option<Arc<Exchange<S>>>);

impl<S: ExchangeState> CloseGuard<S> {
    pub(crate) fn new(exchange: Arc<Exchange<S>>) -> Self {
        CloseGuard(Some(exchange))
    }

    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl<S: ExchangeState> Drop for CloseGuard<S> {
    fn drop(&mut self) {
        if let Some(exchange) = self.0.take() {
            exchange.mark_closed();
        }
    }
}
