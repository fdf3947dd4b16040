//! Admission beyond `--limit-concurrency`: the queue (`--limit-concurrency-queue`, each
//! place held at most `--timeout-queue`), the WebSocket session count (`--limit-websockets`)
//! and the counts of the 503s the server answers itself, by reason (for `--metrics`).
//!
//! Without a queue, `ServerShared::admit_request` stays one atomic increment; the queue's
//! semaphore exists only when `--limit-concurrency-queue` is set.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::server::Lifecycle;

/// Why the server answered a request 503 itself (the `reason` label of
/// `ferrocorn_responses_503_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unavailable {
    /// `--limit-concurrency` reached, and no queue.
    Concurrency,
    /// `--limit-concurrency-queue` requests were already waiting.
    QueueFull,
    /// Waited `--timeout-queue` without getting a slot.
    QueueTimeout,
    /// Was waiting when the graceful shutdown started.
    Draining,
    /// A WebSocket handshake beyond `--limit-websockets`.
    Websockets,
}

impl Unavailable {
    pub(crate) const ALL: [Unavailable; 5] = [
        Unavailable::Concurrency,
        Unavailable::QueueFull,
        Unavailable::QueueTimeout,
        Unavailable::Draining,
        Unavailable::Websockets,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Unavailable::Concurrency => "concurrency",
            Unavailable::QueueFull => "queue_full",
            Unavailable::QueueTimeout => "queue_timeout",
            Unavailable::Draining => "draining",
            Unavailable::Websockets => "websockets",
        }
    }
}

/// The 503s by reason; relaxed counters, read when metrics are scraped.
#[derive(Default)]
pub(crate) struct UnavailableCounts([AtomicU64; Unavailable::ALL.len()]);

impl UnavailableCounts {
    pub(crate) fn count(&self, reason: Unavailable) {
        self.0[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn get(&self, reason: Unavailable) -> u64 {
        self.0[reason as usize].load(Ordering::Relaxed)
    }
}

/// The slots of `--limit-concurrency` as a FIFO semaphore, and at most `capacity` requests
/// waiting for one.
pub(crate) struct AdmissionQueue {
    slots: Arc<Semaphore>,
    capacity: usize,
    timeout: Duration,
    waiting: AtomicUsize,
}

impl AdmissionQueue {
    pub(crate) fn new(slots: usize, capacity: usize, timeout: Duration) -> Self {
        AdmissionQueue {
            slots: Arc::new(Semaphore::new(slots.min(Semaphore::MAX_PERMITS))),
            capacity,
            timeout,
            waiting: AtomicUsize::new(0),
        }
    }

    /// Requests waiting for a slot now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// A slot, at once if one is free, else after waiting in line (first come, first served:
    /// tokio's semaphore hands a released permit to its oldest waiter). Dropping the future
    /// (the client left) gives up the place in line; the permit, once held, frees the slot
    /// when dropped (`InFlight` holds it until hyper drops the response body).
    pub(crate) async fn admit(
        &self,
        mut lifecycle: watch::Receiver<Lifecycle>,
    ) -> Result<OwnedSemaphorePermit, Unavailable> {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Ok(permit);
        }
        let _place = self.take_place()?;
        let acquire = self.slots.clone().acquire_owned();
        let draining = lifecycle.wait_for(|state| *state >= Lifecycle::Draining);
        tokio::select! {
            biased;
            permit = acquire => permit.map_err(|_| Unavailable::Draining),
            // A draining server sends the waiting requests elsewhere at once (503 +
            // Retry-After: another worker or instance can serve them now) rather than
            // holding the drain for requests that have not started.
            _ = draining => Err(Unavailable::Draining),
            () = tokio::time::sleep(self.timeout) => Err(Unavailable::QueueTimeout),
        }
    }

    fn take_place(&self) -> Result<Place<'_>, Unavailable> {
        self.waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.capacity).then_some(n + 1)
            })
            .map(|_| Place(&self.waiting))
            .map_err(|_| Unavailable::QueueFull)
    }
}

/// A place in the queue, given up when dropped (served, timed out, or the client left).
struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `--limit-websockets`: the sessions open now.
#[derive(Default)]
pub(crate) struct WebSocketCount(AtomicUsize);

impl WebSocketCount {
    /// One more session unless `limit` are open; the slot is freed when dropped.
    pub(crate) fn enter(self: &Arc<Self>, limit: usize) -> Option<WebSocketSlot> {
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| WebSocketSlot(self.clone()))
    }
}

/// One WebSocket session, counted from its handshake until the session ends.
pub(crate) struct WebSocketSlot(Arc<WebSocketCount>);

impl Drop for WebSocketSlot {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;

    fn running() -> watch::Sender<Lifecycle> {
        watch::Sender::new(Lifecycle::Running)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a test runtime")
    }

    #[test]
    fn the_queue_serves_in_order_and_refuses_beyond_its_capacity() {
        runtime().block_on(async {
            let queue = Arc::new(AdmissionQueue::new(1, 2, Duration::from_secs(60)));
            let life = running();
            let first = queue.admit(life.subscribe()).await.expect("a free slot");
            let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
            let mut waiters = Vec::new();
            for n in 0..2 {
                let (queue, rx, tx) = (queue.clone(), life.subscribe(), order_tx.clone());
                waiters.push(tokio::spawn(async move {
                    let permit = queue.admit(rx).await;
                    let _ = tx.send(n);
                    permit.map(drop)
                }));
                tokio::task::yield_now().await;
            }
            assert_eq!(queue.waiting(), 2);
            assert_eq!(
                queue.admit(life.subscribe()).await.err(),
                Some(Unavailable::QueueFull)
            );
            drop(first);
            for waiter in waiters {
                assert!(waiter.await.expect("no panic").is_ok());
            }
            assert_eq!(order_rx.recv().await, Some(0));
            assert_eq!(order_rx.recv().await, Some(1));
            assert_eq!(queue.waiting(), 0);
        });
    }

    #[test]
    fn a_waiter_times_out_or_is_sent_away_by_the_drain() {
        runtime().block_on(async {
            let queue = AdmissionQueue::new(1, 4, Duration::from_millis(10));
            let life = running();
            let _held = queue.admit(life.subscribe()).await.expect("a free slot");
            assert_eq!(
                queue.admit(life.subscribe()).await.err(),
                Some(Unavailable::QueueTimeout)
            );
            life.send_replace(Lifecycle::Draining);
            assert_eq!(
                queue.admit(life.subscribe()).await.err(),
                Some(Unavailable::Draining)
            );
            assert_eq!(queue.waiting(), 0);
        });
    }

    #[test]
    fn a_dropped_waiter_gives_up_its_place() {
        runtime().block_on(async {
            let queue = AdmissionQueue::new(1, 1, Duration::from_secs(60));
            let life = running();
            let held = queue.admit(life.subscribe()).await.expect("a free slot");
            {
                let waiting = queue.admit(life.subscribe());
                tokio::pin!(waiting);
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                assert!(waiting.as_mut().poll(&mut cx).is_pending());
                assert_eq!(queue.waiting(), 1);
            }
            assert_eq!(queue.waiting(), 0);
            drop(held);
            assert!(queue.admit(life.subscribe()).await.is_ok());
        });
    }

    #[test]
    fn websocket_sessions_are_counted_until_dropped() {
        let count = Arc::new(WebSocketCount::default());
        let one = count.enter(2);
        let two = count.enter(2);
        assert!(one.is_some() && two.is_some());
        assert!(count.enter(2).is_none());
        drop(one);
        assert!(count.enter(2).is_some());
    }
}
