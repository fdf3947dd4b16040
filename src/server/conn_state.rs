//! The state of one connection that its requests share: who it is (`ConnInfo`), the
//! server, what is in flight, and since when it has been idle (for the keep-alive timer and
//! parking).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;

use crate::bridge::{ByteBudget, ConnInfo};
use crate::http::body_reader::BodyWatch;
use crate::server::cork::IoSignals;
use crate::server::early_hints::Http1Hints;
use crate::server::http10::Http10Heads;
use crate::server::reorder::ReorderedHeads;
use crate::server::stamp::Stamp;
use crate::server::ServerShared;

pub(crate) struct ConnCtx {
    pub(crate) info: Arc<ConnInfo>,
    pub(crate) shared: Arc<ServerShared>,
    /// HTTP/2: the response body bytes all streams may hold (`--http2-connection-buffer`).
    pub(crate) response_budget: Arc<ByteBudget>,
    signals: Arc<IoSignals>,
    in_flight: AtomicUsize,
    /// Requests being read (a body still arriving); `in_flight` counts them too.
    bodies_arriving: AtomicUsize,
    /// HTTP/1: the client's end of stream, held back from hyper while responses are owed
    /// (see `hold_eof`); the task to wake when the last is done.
    eof_waker: Mutex<Option<Waker>>,
    eof_held: AtomicBool,
    /// The body reader that last waited for hyper (see `body_waiting`), and whether it
    /// waited while the end of stream was held: then the body is cut short.
    body_waker: Mutex<Option<Waker>>,
    body_starved: AtomicBool,
    /// Whether a request has ever started on this connection (see `drive`'s drain grace).
    started: AtomicBool,
    idle_since: Stamp,
    /// HTTP/1: which requests the write side's `HTTP/1.1` status lines are for.
    pub(crate) http10: Http10Heads,
    /// HTTP/1: marked response heads the write side is to put in the app's order.
    pub(crate) reordered: ReorderedHeads,
    /// HTTP/1.1: `103 Early Hints` heads the write side is to send (`server::early_hints`).
    pub(crate) early_hints: Http1Hints,
}

impl ConnCtx {
    pub(crate) fn new(info: ConnInfo, shared: Arc<ServerShared>, signals: Arc<IoSignals>) -> Self {
        ConnCtx {
            info: Arc::new(info),
            response_budget: Arc::new(ByteBudget::new(shared.config.http2_connection_buffer)),
            shared,
            signals,
            in_flight: AtomicUsize::new(0),
            bodies_arriving: AtomicUsize::new(0),
            eof_waker: Mutex::new(None),
            eof_held: AtomicBool::new(false),
            body_waker: Mutex::new(None),
            body_starved: AtomicBool::new(false),
            started: AtomicBool::new(false),
            idle_since: Stamp::now(),
            http10: Http10Heads::default(),
            reordered: ReorderedHeads::default(),
            early_hints: Http1Hints::default(),
        }
    }

    /// Who the client is, for a log line: "host:port", or what a Unix socket peer is.
    pub(crate) fn peer_text(&self) -> String {
        match self.info.peer {
            Some(peer) => crate::bridge::host_port(&peer),
            None => "a Unix socket client".to_owned(),
        }
    }

    /// Writes go straight out from now on (see `IoSignals`).
    pub(crate) fn disable_corking(&self) {
        self.signals.disable_corking();
    }

    /// Whether a request has started on this connection (its head was read).
    pub(crate) fn has_started_a_request(&self) -> bool {
        self.started.load(Ordering::Relaxed)
    }

    /// Ask the I/O wrapper to park the connection at hyper's next read (see `server::park`).
    pub(crate) fn request_park(&self) {
        self.signals.request_park();
    }

    /// Whether the connection parked since `request_park` (clears the request either way).
    pub(crate) fn take_parked(&self) -> bool {
        self.signals.take_parked()
    }

    /// Where the connection stands between requests; None while a request is in flight.
    pub(crate) fn idle_state(&self) -> Option<IdleState> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        Some(IdleState {
            since: self.idle_since.get(),
            head_started: self.signals.input_since(),
        })
    }
}

/// A connection with no request in flight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdleState {
    /// Since when: the last response, or the connection's start.
    pub(crate) since: Instant,
    /// When the client began sending its next request head, if it has.
    pub(crate) head_started: Option<Instant>,
}

/// One request in flight, from the service call until hyper drops its response body; with
/// `--limit-concurrency-queue` it holds the request's slot, which goes to the first request
/// waiting when this is dropped.
pub(crate) struct InFlight {
    conn: Arc<ConnCtx>,
    /// Held only to be dropped with the request.
    slot: Option<OwnedSemaphorePermit>,
}

impl InFlight {
    pub(crate) fn new(conn: Arc<ConnCtx>) -> Self {
        conn.enter();
        conn.started.store(true, Ordering::Relaxed);
        InFlight { conn, slot: None }
    }

    /// The admission queue gave this request its slot.
    pub(crate) fn hold(&mut self, slot: OwnedSemaphorePermit) {
        self.slot = Some(slot);
    }

    /// hyper took a chunk of a streamed response: corked writes go out (see `IoSignals`).
    pub(crate) fn chunk_taken(&self) {
        self.conn.signals.request();
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.conn.leave();
        self.conn.shared.request_finished();
    }
}

/// Something other than a request keeps the connection busy while this lives: a WebSocket
/// on one of an HTTP/2 connection's streams, which outlives its CONNECT's response.
pub(crate) struct ConnBusy(Arc<ConnCtx>);

impl ConnBusy {
    pub(crate) fn new(conn: Arc<ConnCtx>) -> Self {
        conn.enter();
        ConnBusy(conn)
    }
}

impl Drop for ConnBusy {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl ConnCtx {
    /// One more thing in flight: a response, or a request body still arriving.
    pub(crate) fn enter(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
    }

    /// One thing in flight is over.
    fn leave(&self) {
        self.idle_since.set_now();
        self.signals.went_idle();
        let left = self.in_flight.fetch_sub(1, Ordering::SeqCst) - 1;
        if left == 0 && self.eof_held.load(Ordering::SeqCst) {
            // The last response is out: hyper may see the client's end of stream now.
            self.wake_eof_holder();
        }
    }

    /// A request body is still to be read (it counts as in flight until it ends).
    pub(crate) fn body_arriving(&self) {
        self.bodies_arriving.fetch_add(1, Ordering::SeqCst);
        self.enter();
    }

    /// HTTP/1 half-close (RFC 9112 §9.6: a client may close its sending side and still read
    /// the response), asked at the read that found the client's end of stream. While a
    /// request owes its response, the end of stream is held back (Pending; this task is woken
    /// when nothing is owed any more), so hyper does not drop the request as abandoned.
    /// A body still arriving is the exception: if its reader waits for bytes while the end
    /// is held, they can never come, and hyper gets the end (the body fails, the app hears
    /// `http.disconnect`). A client that is really gone is noticed when a write to it fails;
    /// one that resets the connection, at once (a reset is an error, not an end of stream).
    pub(crate) fn hold_eof(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.in_flight.load(Ordering::SeqCst) == 0 {
            return Poll::Ready(());
        }
        let body_open = self.bodies_arriving.load(Ordering::SeqCst) > 0;
        if body_open && self.body_starved.load(Ordering::SeqCst) {
            return Poll::Ready(());
        }
        if let Ok(mut waker) = self.eof_waker.lock() {
            *waker = Some(cx.waker().clone());
        }
        self.eof_held.store(true, Ordering::SeqCst);
        if body_open {
            // The reader may be waiting already: it looks again, and says if it still waits.
            if let Some(waker) = self.body_waker.lock().ok().and_then(|mut w| w.take()) {
                waker.wake();
            }
        }
        // Re-checked after publishing the waker: a `leave` in between would have missed it.
        if self.in_flight.load(Ordering::SeqCst) == 0 {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    fn wake_eof_holder(&self) {
        if let Some(waker) = self.eof_waker.lock().ok().and_then(|mut w| w.take()) {
            waker.wake();
        }
    }
}

impl BodyWatch for ConnCtx {
    fn body_ended(&self) {
        self.bodies_arriving.fetch_sub(1, Ordering::SeqCst);
        self.leave();
    }

    fn body_waiting(&self, cx: &mut Context<'_>) {
        if self.eof_held.load(Ordering::SeqCst) {
            // Waiting for bytes after the client's end of stream: the body is cut short.
            self.body_starved.store(true, Ordering::SeqCst);
            self.wake_eof_holder();
        } else if let Ok(mut waker) = self.body_waker.lock() {
            *waker = Some(cx.waker().clone());
        }
    }
}
