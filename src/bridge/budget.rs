//! Byte budgets for response bodies held in memory (RELIABILITY.md: memory bounded in bytes).
//!
//! Every body chunk `send()` queues is charged to its response's budget and, on HTTP/2, to
//! its connection's, from the moment it is copied out of Python until the last reference
//! to it is gone — in our queue, in hyper's write buffer or in h2's stream buffer — since
//! the chunk's `Bytes` owns the charge (`Charged`, released on drop). A `send()` that finds
//! a budget used up waits, without copying its body, until enough is released (asgi/
//! protocol.rs). So a response holds at most its budget plus one chunk, a connection at
//! most its budget plus one chunk, whatever the chunk size or how slowly the client reads.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;

/// What a queued chunk costs beyond its bytes (its allocation, the channel slot, the shared
/// `Bytes` header): a flood of tiny chunks is bounded too.
pub(crate) const CHUNK_OVERHEAD: usize = 256;

/// Woken when a budget it waits on has room again.
pub(crate) trait RoomWaiter: Send + Sync {
    fn room(self: Arc<Self>);
}

pub(crate) struct ByteBudget {
    used: AtomicUsize,
    limit: usize,
    has_waiters: AtomicBool,
    waiters: Mutex<Vec<Weak<dyn RoomWaiter>>>,
}

impl ByteBudget {
    pub(crate) fn new(limit: usize) -> Self {
        ByteBudget {
            used: AtomicUsize::new(0),
            limit: limit.max(1),
            has_waiters: AtomicBool::new(false),
            waiters: Mutex::new(Vec::new()),
        }
    }

    /// No room: a new chunk must wait. (One chunk may take the budget past its limit.)
    pub(crate) fn is_full(&self) -> bool {
        self.used.load(Ordering::Acquire) >= self.limit
    }

    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    fn charge(&self, cost: usize) {
        self.used.fetch_add(cost, Ordering::AcqRel);
    }

    fn release(&self, cost: usize) {
        let now = self.used.fetch_sub(cost, Ordering::AcqRel) - cost;
        if now < self.limit && self.has_waiters.load(Ordering::Acquire) {
            self.wake_all();
        }
    }

    /// Wake `waiter` once there is room; false (nothing registered that matters) when there
    /// is room already.
    pub(crate) fn wait_for_room(&self, waiter: Weak<dyn RoomWaiter>) -> bool {
        {
            let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
            waiters.push(waiter);
            self.has_waiters.store(true, Ordering::Release);
        }
        // Re-checked after registering: a release in between saw the registration or left
        // room that this check sees.
        if self.is_full() {
            return true;
        }
        self.wake_all();
        false
    }

    fn wake_all(&self) {
        let waiters = {
            let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
            self.has_waiters.store(false, Ordering::Release);
            std::mem::take(&mut *waiters)
        };
        for waiter in waiters {
            if let Some(waiter) = waiter.upgrade() {
                waiter.room();
            }
        }
    }
}

/// The budgets one response's chunks are charged to.
#[derive(Clone)]
pub(crate) struct Budgets {
    pub(crate) response: Arc<ByteBudget>,
    /// HTTP/2: shared by the connection's streams.
    pub(crate) connection: Option<Arc<ByteBudget>>,
}

impl Budgets {
    pub(crate) fn new(response_limit: usize, connection: Option<Arc<ByteBudget>>) -> Self {
        Budgets {
            response: Arc::new(ByteBudget::new(response_limit)),
            connection,
        }
    }

    pub(crate) fn is_full(&self) -> bool {
        self.response.is_full() || self.connection.as_ref().is_some_and(|c| c.is_full())
    }

    /// Register `waiter` with each full budget; true when it must wait.
    pub(crate) fn wait_for_room(&self, waiter: &Weak<dyn RoomWaiter>) -> bool {
        let mut waits = false;
        if self.response.is_full() {
            waits |= self.response.wait_for_room(waiter.clone());
        }
        if let Some(connection) = &self.connection {
            if connection.is_full() {
                waits |= connection.wait_for_room(waiter.clone());
            }
        }
        waits
    }

    /// `data` as a chunk charged to these budgets until its last reference is dropped.
    pub(crate) fn charge(&self, data: Bytes) -> Bytes {
        if data.is_empty() {
            return data;
        }
        let cost = data.len() + CHUNK_OVERHEAD;
        self.response.charge(cost);
        if let Some(connection) = &self.connection {
            connection.charge(cost);
        }
        Bytes::from_owner(Charged {
            data,
            cost,
            budgets: self.clone(),
        })
    }
}

/// A charge with no bytes of its own: a file span queued on a response stream, whose reads
/// it stands for until the span is sent (bridge/body.rs `OutChunk::File`).
pub(crate) struct Charge(#[allow(dead_code)] Charged);

impl Budgets {
    /// `cost` charged to these budgets until the returned `Charge` is dropped.
    pub(crate) fn charge_span(&self, cost: usize) -> Charge {
        self.response.charge(cost);
        if let Some(connection) = &self.connection {
            connection.charge(cost);
        }
        Charge(Charged {
            data: Bytes::new(),
            cost,
            budgets: self.clone(),
        })
    }
}

/// A chunk's bytes and the charge they carry, released when the last `Bytes` pointing into
/// them is dropped (wherever that happens: loop thread, tokio, hyper, h2).
struct Charged {
    data: Bytes,
    cost: usize,
    budgets: Budgets,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Charged {
    fn drop(&mut self) {
        self.budgets.response.release(self.cost);
        if let Some(connection) = &self.budgets.connection {
            connection.release(self.cost);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl RoomWaiter for Counter {
        fn room(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waiter() -> (Arc<Counter>, Weak<dyn RoomWaiter>) {
        let counter = Arc::new(Counter::default());
        let as_dyn: Arc<dyn RoomWaiter> = counter.clone();
        let weak = Arc::downgrade(&as_dyn);
        (counter, weak)
    }

    #[test]
    fn a_chunk_is_charged_until_its_last_slice_is_dropped() {
        let budgets = Budgets::new(1000, None);
        let chunk = budgets.charge(Bytes::from(vec![7u8; 600]));
        let cost = 600 + CHUNK_OVERHEAD;
        assert_eq!(budgets.response.used(), cost);
        let slice = chunk.slice(10..20);
        drop(chunk);
        assert_eq!(
            budgets.response.used(),
            cost,
            "a slice keeps the whole chunk"
        );
        assert_eq!(&slice[..], &[7u8; 10][..]);
        drop(slice);
        assert_eq!(budgets.response.used(), 0);
    }

    #[test]
    fn one_chunk_may_pass_the_limit_then_the_budget_is_full() {
        let budgets = Budgets::new(1000, None);
        assert!(!budgets.is_full());
        let big = budgets.charge(Bytes::from(vec![0u8; 5000]));
        assert!(budgets.is_full());
        drop(big);
        assert!(!budgets.is_full());
    }

    #[test]
    fn empty_chunks_cost_nothing() {
        let budgets = Budgets::new(10, None);
        let empty = budgets.charge(Bytes::new());
        assert_eq!(budgets.response.used(), 0);
        drop(empty);
    }

    #[test]
    fn a_waiter_is_woken_once_room_appears() {
        let budgets = Budgets::new(1000, None);
        let chunk = budgets.charge(Bytes::from(vec![0u8; 2000]));
        let (counter, weak) = waiter();
        assert!(budgets.wait_for_room(&weak));
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
        drop(chunk);
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn no_wait_when_there_is_room() {
        let budgets = Budgets::new(1000, None);
        let (_counter, weak) = waiter();
        assert!(!budgets.wait_for_room(&weak));
    }

    #[test]
    fn the_connection_budget_is_shared_by_its_streams() {
        let connection = Arc::new(ByteBudget::new(1000));
        let a = Budgets::new(10_000, Some(connection.clone()));
        let b = Budgets::new(10_000, Some(connection.clone()));
        let held = a.charge(Bytes::from(vec![0u8; 900]));
        assert!(!a.response.is_full());
        assert!(b.is_full(), "stream b waits for the connection's room");
        let (counter, weak) = waiter();
        assert!(b.wait_for_room(&weak));
        drop(held);
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert!(!b.is_full());
    }

    #[test]
    fn a_dropped_waiter_is_skipped() {
        let budgets = Budgets::new(10, None);
        let chunk = budgets.charge(Bytes::from(vec![0u8; 100]));
        let (counter, weak) = waiter();
        assert!(budgets.wait_for_room(&weak));
        drop(counter);
        drop(chunk); // wakes nobody, panics nowhere
        assert_eq!(budgets.response.used(), 0);
    }
}
