//! The tokio side: accepting, serving connections with hyper, turning requests into events.
//! Nothing in here touches Python. The modules are private; `core/` uses the names
//! re-exported below.

mod admission;
mod body_pump;
mod conn_state;
mod connection;
mod cork;
mod detect;
mod early_hints;
pub(crate) mod h2;
mod h2_batch;
mod h2_guard;
mod h3;
mod handshake;
mod http10;
mod idle;
mod listener;
mod park;
mod probes;
mod proxied;
mod reorder;
mod runtime;
mod sendfile;
mod service;
mod side_wake;
mod stamp;
mod static_route;
mod stream_io;
mod tls_records;
mod websocket;

// What the core (`core/`) drives: the runtime, the listeners and their accept loops, the
// health-probe responder, the lifecycle every connection watches.
pub(crate) use admission::Unavailable;
pub(crate) use connection::alpn_protocols;
pub(crate) use h3::{endpoint as h3_endpoint, reload as h3_reload};
pub(crate) use listener::{accept_loop, Listener};
pub(crate) use probes::{serve_probes, ProbeState};
pub(crate) use runtime::IoRuntime;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::bridge::{WakeRelay, Wakeup};
use crate::config::ServerConfig;
use crate::server::admission::{AdmissionQueue, UnavailableCounts, WebSocketCount, WebSocketSlot};
use crate::server::static_route::StaticCache;

/// Where the server is in its life; connections and accept loops watch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Lifecycle {
    Running,
    /// Listeners closed; open connections carry on.
    StopAccepting,
    /// Connections finish their in-flight request, then close (idle ones close now).
    Draining,
    /// Everything still open is dropped.
    Closing,
}

pub(crate) struct ServerShared {
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) wakeup: Arc<Wakeup>,
    pub(crate) lifecycle: watch::Sender<Lifecycle>,
    /// Batches the loop thread's wake-ups of connection tasks (see relay.rs).
    pub(crate) relay: Arc<WakeRelay>,
    connections: AtomicUsize,
    /// Accept loops still running; `stop_accepting` waits for none (see `AcceptLoopGuard`).
    accept_loops: Mutex<usize>,
    accept_loops_ended: Condvar,
    requests_in_flight: AtomicUsize,
    requests_total: AtomicU64,
    /// `--limit-concurrency-queue`: the slots as a FIFO semaphore (None: the atomic count).
    queue: Option<AdmissionQueue>,
    websockets: Arc<WebSocketCount>,
    pub(crate) unavailable: UnavailableCounts,
    tls_handshake_failures: AtomicU64,
    /// `--static-path-cache-size`: the static route's small files (static_route/cache.rs).
    pub(crate) static_cache: StaticCache,
}

/// What `admit_request` decided.
pub(crate) enum Admit<'a> {
    Run,
    /// Wait for a slot of the queue (`AdmissionQueue::admit`), then run or be refused.
    Wait(&'a AdmissionQueue),
    Refused(Unavailable),
}

impl ServerShared {
    pub(crate) fn new(config: Arc<ServerConfig>, wakeup: Arc<Wakeup>) -> Self {
        ServerShared {
            wakeup,
            lifecycle: watch::Sender::new(Lifecycle::Running),
            relay: Arc::new(WakeRelay::default()),
            connections: AtomicUsize::new(0),
            accept_loops: Mutex::new(0),
            accept_loops_ended: Condvar::new(),
            requests_in_flight: AtomicUsize::new(0),
            requests_total: AtomicU64::new(0),
            queue: config
                .limit_concurrency
                .zip(config.limit_concurrency_queue)
                .map(|(slots, places)| AdmissionQueue::new(slots, places, config.timeout_queue)),
            websockets: Arc::default(),
            unavailable: UnavailableCounts::default(),
            tls_handshake_failures: AtomicU64::new(0),
            static_cache: StaticCache::new(config.static_files.cache_bytes),
            config,
        }
    }

    pub(crate) fn set_lifecycle(&self, state: Lifecycle) {
        // Never go backwards (a late stop_accepting must not undo a drain).
        self.lifecycle.send_if_modified(|current| {
            if state > *current {
                *current = state;
                true
            } else {
                false
            }
        });
    }

    pub(crate) fn active_connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub(crate) fn requests_total(&self) -> u64 {
        self.requests_total.load(Ordering::Relaxed)
    }

    /// Admit a request unless `--limit-concurrency` is reached (`Wait`: with a queue, the
    /// semaphore decides). A WebSocket handshake (`is_websocket`, asked only when a limit is
    /// set) is not held to it: sessions have `--limit-websockets`. The request that reaches
    /// `--limit-max-requests` starts the drain at once: no new connections (a worker's
    /// replacement, or the other workers, take them from the listening socket, which stays
    /// open), and the requests in flight get `Connection: close` / GOAWAY, instead of the
    /// connections serving on until Python's next tick notices.
    pub(crate) fn admit_request(&self, is_websocket: impl FnOnce() -> bool) -> Admit<'_> {
        let in_flight = self.requests_in_flight.fetch_add(1, Ordering::SeqCst);
        let total = self.requests_total.fetch_add(1, Ordering::Relaxed) + 1;
        if self.config.limit_max_requests == Some(total) {
            self.set_lifecycle(Lifecycle::Draining);
        }
        match self.config.limit_concurrency {
            Some(limit) if !is_websocket() => match &self.queue {
                Some(queue) => Admit::Wait(queue),
                None if in_flight >= limit => {
                    self.request_refused(Unavailable::Concurrency);
                    Admit::Refused(Unavailable::Concurrency)
                }
                None => Admit::Run,
            },
            _ => Admit::Run,
        }
    }

    /// A request `admit_request` counted is answered 503 without running (and without an
    /// `InFlight`, whose drop would count it out).
    pub(crate) fn request_refused(&self, reason: Unavailable) {
        self.requests_in_flight.fetch_sub(1, Ordering::SeqCst);
        self.unavailable.count(reason);
    }

    pub(crate) fn request_finished(&self) {
        self.requests_in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// Requests waiting in the admission queue now.
    pub(crate) fn requests_queued(&self) -> usize {
        self.queue.as_ref().map_or(0, AdmissionQueue::waiting)
    }

    /// `--limit-websockets`: Ok(None) without a limit, Err when that many sessions are open.
    pub(crate) fn websocket_slot(&self) -> Result<Option<WebSocketSlot>, Unavailable> {
        match self.config.limit_websockets {
            None => Ok(None),
            Some(limit) => match self.websockets.enter(limit) {
                Some(slot) => Ok(Some(slot)),
                None => {
                    self.unavailable.count(Unavailable::Websockets);
                    Err(Unavailable::Websockets)
                }
            },
        }
    }

    pub(crate) fn tls_handshake_failed(&self) {
        self.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn tls_handshake_failures(&self) -> u64 {
        self.tls_handshake_failures.load(Ordering::Relaxed)
    }

    /// Registers an accept loop before it is spawned; dropping the guard (the loop returned,
    /// or the runtime dropped it) deregisters it.
    pub(crate) fn track_accept_loop(self: &Arc<Self>) -> AcceptLoopGuard {
        *self.accept_loops.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        AcceptLoopGuard(self.clone())
    }

    /// Blocks (without the GIL, from the caller) until every accept loop has returned, at
    /// most `limit`: after that no connection can be accepted, so the count of connections
    /// is final except for closes. Returns whether they all ended.
    pub(crate) fn wait_accept_loops_ended(&self, limit: Duration) -> bool {
        let loops = self.accept_loops.lock().unwrap_or_else(|p| p.into_inner());
        let (loops, _) = self
            .accept_loops_ended
            .wait_timeout_while(loops, limit, |n| *n > 0)
            .unwrap_or_else(|p| p.into_inner());
        *loops == 0
    }

    pub(crate) fn track_connection(self: &Arc<Self>) -> ConnectionGuard {
        self.connections.fetch_add(1, Ordering::SeqCst);
        ConnectionGuard(self.clone())
    }
}

/// Counts a running accept loop (see `ServerShared::track_accept_loop`).
pub(crate) struct AcceptLoopGuard(Arc<ServerShared>);

impl Drop for AcceptLoopGuard {
    fn drop(&mut self) {
        let mut loops = self
            .0
            .accept_loops
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *loops = loops.saturating_sub(1);
        if *loops == 0 {
            self.0.accept_loops_ended.notify_all();
        }
    }
}

/// Counts a live connection; the count drops even if the connection task panics.
pub(crate) struct ConnectionGuard(Arc<ServerShared>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}
