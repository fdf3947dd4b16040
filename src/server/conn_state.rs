//! The state of one connection that its requests share: who it is (`ConnInfo`), the
//! server, what is in flight, and since when it has been idle (for the keep-alive timer and
//! parking).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
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
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A request body keeps its connection busy until it ends, like a response does. An app may
/// answer first and read the body after: a pause in that body is not idle time (for the
/// keep-alive timer, and for parking, which hyper would take for the client leaving mid-body).
impl BodyWatch for ConnCtx {
    fn body_ended(&self) {
        self.leave();
    }
}
