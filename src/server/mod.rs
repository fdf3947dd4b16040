//! The tokio side: accepting, serving connections with hyper, turning requests into events.
//! Nothing in here touches Python.

pub(crate) mod body_pump;
pub(crate) mod conn_state;
pub(crate) mod connection;
pub(crate) mod cork;
pub(crate) mod detect;
pub(crate) mod h2_guard;
pub(crate) mod handshake;
pub(crate) mod idle;
pub(crate) mod listener;
pub(crate) mod park;
pub(crate) mod probes;
pub(crate) mod runtime;
pub(crate) mod service;
pub(crate) mod stamp;
pub(crate) mod websocket;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::bridge::relay::WakeRelay;
use crate::bridge::wakeup::Wakeup;
use crate::config::ServerConfig;

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
}

impl ServerShared {
    pub(crate) fn new(config: Arc<ServerConfig>, wakeup: Arc<Wakeup>) -> Self {
        ServerShared {
            config,
            wakeup,
            lifecycle: watch::Sender::new(Lifecycle::Running),
            relay: Arc::new(WakeRelay::default()),
            connections: AtomicUsize::new(0),
            accept_loops: Mutex::new(0),
            accept_loops_ended: Condvar::new(),
            requests_in_flight: AtomicUsize::new(0),
            requests_total: AtomicU64::new(0),
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

    /// Admit a request unless `--limit-concurrency` is reached. The request that reaches
    /// `--limit-max-requests` starts the drain at once: no new connections (a worker's
    /// replacement, or the other workers, take them from the listening socket, which stays
    /// open), and the requests in flight get `Connection: close` / GOAWAY, instead of the
    /// connections serving on until Python's next tick notices.
    pub(crate) fn admit_request(&self) -> bool {
        let in_flight = self.requests_in_flight.fetch_add(1, Ordering::SeqCst);
        let total = self.requests_total.fetch_add(1, Ordering::Relaxed) + 1;
        if self.config.limit_max_requests == Some(total) {
            self.set_lifecycle(Lifecycle::Draining);
        }
        match self.config.limit_concurrency {
            Some(limit) if in_flight >= limit => {
                self.requests_in_flight.fetch_sub(1, Ordering::SeqCst);
                false
            }
            _ => true,
        }
    }

    pub(crate) fn request_finished(&self) {
        self.requests_in_flight.fetch_sub(1, Ordering::SeqCst);
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
