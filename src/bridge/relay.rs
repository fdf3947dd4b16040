//! Coalesces the loop thread's wake-ups of tokio tasks.
//!
//! Every time the loop thread completes something a tokio task waits for (a response handed
//! over, a body chunk queued), the task's waker runs on the loop thread, and tokio answers a
//! wake from another thread with an eventfd write to its driver: one syscall per response.
//! Connection tasks are therefore polled through a [`RelayedWaker`]: on the loop thread it
//! only queues itself, and the queue is handed over with one wake of a relay task on tokio,
//! which wakes the queued tasks locally (no syscall). The hand-over happens
//!
//! - as soon as every request of the latest drain (the batch) has completed its response:
//!   a lone request's response goes out at once, even if the app then blocks the loop (say a
//!   background task that never awaits). While the drain runs (apps take their first step
//!   inside it), that point is reached only once nothing more is queued behind the request
//!   at hand, or at the drain's end: otherwise each app finishing in its first step would
//!   wake tokio, once per request;
//! - otherwise from a `loop.call_soon` callback, scheduled by the first queued wake, which runs
//!   once the callbacks already queued (the rest of the batch) have run.
//!
//! Everywhere else (tokio's own I/O and timer wakes) a [`RelayedWaker`] wakes its task directly.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

use crossbeam_queue::SegQueue;
use futures_util::task::AtomicWaker;
use pyo3::prelude::*;

thread_local! {
    /// True on a thread that runs a server's event loop (set by `Core.start`).
    static ON_LOOP_THREAD: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn mark_loop_thread() {
    ON_LOOP_THREAD.with(|on| on.set(true));
}

fn on_loop_thread() -> bool {
    ON_LOOP_THREAD.with(Cell::get)
}

/// The Python side of a flush: `loop.call_soon` and the callable it schedules.
struct Scheduler {
    call_soon: Py<PyAny>,
    flush: Py<PyAny>,
}

#[derive(Default)]
pub(crate) struct WakeRelay {
    queue: SegQueue<Arc<RelayedWaker>>,
    /// A flush callback is scheduled on the loop and has not run yet.
    flush_scheduled: AtomicBool,
    /// The relay task on tokio.
    task: AtomicWaker,
    scheduler: OnceLock<Scheduler>,
    /// The current batch (see the module comment); 0 is never a batch.
    batch: AtomicU64,
    /// Requests of the current batch whose response is not complete yet, plus one while
    /// the drain runs.
    outstanding: AtomicUsize,
    /// A drain is running (between `begin_batch` and `end_batch`).
    draining: AtomicBool,
    /// More events are queued behind the one the drain is handling.
    more_queued: AtomicBool,
}

impl WakeRelay {
    /// Called once the loop and the relay task exist; until then wakes go straight through.
    pub(crate) fn set_scheduler(&self, call_soon: Py<PyAny>, flush: Py<PyAny>) {
        let _ = self.scheduler.set(Scheduler { call_soon, flush });
    }

    fn defer(&self, waker: Arc<RelayedWaker>) {
        self.queue.push(waker);
        if self.flush_scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let scheduled = self.scheduler.get().is_some_and(|s| {
            Python::attach(|py| s.call_soon.call1(py, (s.flush.clone_ref(py),)).is_ok())
        });
        if !scheduled {
            // No loop to run the callback (not started, or closed): wake now.
            self.flush();
        }
    }

    /// Loop thread: hand everything queued since the last flush to the relay task.
    pub(crate) fn flush(&self) {
        self.flush_scheduled.store(false, Ordering::Release);
        if !self.queue.is_empty() {
            self.task.wake();
        }
    }

    /// Loop thread, at the start of a drain: the requests it dispatches form the new batch.
    /// The drain itself counts as outstanding until `end_batch`: a request whose app finishes
    /// inside the drain (eager first steps) must not hand the wakes over while more of the
    /// batch is still to be dispatched, or tokio is woken once per request.
    pub(crate) fn begin_batch(&self) {
        self.outstanding.store(1, Ordering::Relaxed);
        self.batch.fetch_add(1, Ordering::Relaxed);
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Loop thread: a request joins the current batch; returns the batch to `leave_batch` with.
    pub(crate) fn join_batch(&self) -> u64 {
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        self.batch.load(Ordering::Relaxed)
    }

    /// Loop thread, before each event of a drain: whether more events are queued behind it.
    pub(crate) fn set_more_queued(&self, more: bool) {
        self.more_queued.store(more, Ordering::Relaxed);
    }

    /// Loop thread, at the end of a drain: if every request of the batch has completed its
    /// response by now, the queued wakes go to tokio at once.
    pub(crate) fn end_batch(&self) {
        self.draining.store(false, Ordering::Relaxed);
        if self.outstanding.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.flush();
        }
    }

    /// Loop thread: the request's response is complete (or failed). The last of its batch
    /// hands the queued wakes over at once. `batch` is cleared so a request counts once.
    pub(crate) fn leave_batch(&self, batch: &AtomicU64) {
        let id = batch.swap(0, Ordering::Relaxed);
        if id == 0 || id != self.batch.load(Ordering::Relaxed) {
            return;
        }
        match self.outstanding.fetch_sub(1, Ordering::Relaxed) {
            // After the drain: the batch's last response.
            1 => self.flush(),
            // During the drain, with every response so far complete and nothing queued
            // behind the event at hand: now, not at the drain's end, in case the app keeps
            // the loop busy after responding (a background job that never awaits).
            2 if self.draining.load(Ordering::Relaxed)
                && !self.more_queued.load(Ordering::Relaxed) =>
            {
                self.flush()
            }
            _ => {}
        }
    }

    /// The relay task: wakes queued tasks from the tokio thread, where a wake is a queue push.
    pub(crate) async fn run(self: Arc<Self>) {
        std::future::poll_fn(|cx| {
            // Register before draining, so a flush racing with the drain wakes us again.
            self.task.register(cx.waker());
            while let Some(waker) = self.queue.pop() {
                waker.queued.store(false, Ordering::Release);
                waker.wake_target();
            }
            Poll::<()>::Pending
        })
        .await
    }
}

/// Stands in for a task's own waker; see the module comment.
pub(crate) struct RelayedWaker {
    relay: Arc<WakeRelay>,
    target: Mutex<Option<Waker>>,
    /// Already in the relay's queue: a second wake in the same batch adds nothing.
    queued: AtomicBool,
}

impl RelayedWaker {
    fn set_target(&self, waker: &Waker) {
        let mut target = self.target.lock().unwrap_or_else(|p| p.into_inner());
        match &*target {
            Some(current) if current.will_wake(waker) => {}
            _ => *target = Some(waker.clone()),
        }
    }

    fn wake_target(&self) {
        let target = self.target.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(waker) = &*target {
            waker.wake_by_ref();
        }
    }
}

impl Wake for RelayedWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !on_loop_thread() {
            self.wake_target();
        } else if !self.queued.swap(true, Ordering::AcqRel) {
            self.relay.defer(self.clone());
        }
    }
}

pin_project_lite::pin_project! {
    /// A future polled with a [`RelayedWaker`] in place of its task's waker.
    pub(crate) struct Relayed<F> {
        #[pin]
        inner: F,
        shared: Arc<RelayedWaker>,
        waker: Waker,
    }
}

impl<F> Relayed<F> {
    pub(crate) fn new(inner: F, relay: &Arc<WakeRelay>) -> Self {
        let shared = Arc::new(RelayedWaker {
            relay: relay.clone(),
            target: Mutex::new(None),
            queued: AtomicBool::new(false),
        });
        let waker = Waker::from(shared.clone());
        Relayed {
            inner,
            shared,
            waker,
        }
    }
}

impl<F: Future> Future for Relayed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        this.shared.set_target(cx.waker());
        let mut relayed = Context::from_waker(this.waker);
        this.inner.poll(&mut relayed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A relay and one relayed waker whose target counts its wakes.
    /// Registers a counting waker as the relay task's.
    fn count_relay_wakes(relay: &WakeRelay) -> Arc<Count> {
        let relay_task = Arc::new(Count(AtomicUsize::new(0)));
        relay.task.register(&Waker::from(relay_task.clone()));
        relay_task
    }

    fn relayed() -> (Arc<WakeRelay>, Arc<RelayedWaker>, Arc<Count>) {
        let relay = Arc::new(WakeRelay::default());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let shared = Arc::new(RelayedWaker {
            relay: relay.clone(),
            target: Mutex::new(None),
            queued: AtomicBool::new(false),
        });
        shared.set_target(&Waker::from(count.clone()));
        (relay, shared, count)
    }

    #[test]
    fn off_the_loop_thread_wakes_go_straight_through() {
        let (relay, shared, count) = relayed();
        Waker::from(shared.clone()).wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(relay.queue.is_empty());
    }

    #[test]
    fn on_the_loop_thread_wakes_are_queued_once_until_relayed() {
        std::thread::spawn(|| {
            mark_loop_thread();
            let (relay, shared, count) = relayed();
            // No scheduler yet: `defer` flushes at once, but the queue still holds the waker
            // for the relay task; a second wake before the relay ran adds nothing.
            let waker = Waker::from(shared.clone());
            waker.wake_by_ref();
            waker.wake_by_ref();
            assert_eq!(relay.queue.len(), 1);
            assert_eq!(count.0.load(Ordering::SeqCst), 0);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(async {
                let relay_task = tokio::spawn(relay.clone().run());
                tokio::task::yield_now().await;
                relay_task.abort();
            });
            assert_eq!(count.0.load(Ordering::SeqCst), 1);
            assert!(relay.queue.is_empty());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_last_response_of_a_batch_hands_the_wakes_over() {
        std::thread::spawn(|| {
            mark_loop_thread();
            let (relay, shared, _) = relayed();
            let relay_task = count_relay_wakes(&relay);
            relay.begin_batch();
            let (first, second) = (
                AtomicU64::new(relay.join_batch()),
                AtomicU64::new(relay.join_batch()),
            );
            // The drain ends with both responses still to come.
            relay.end_batch();
            // As if a call_soon flush were already pending (there is no loop here).
            relay.flush_scheduled.store(true, Ordering::SeqCst);
            Waker::from(shared.clone()).wake_by_ref();
            relay.leave_batch(&first);
            relay.leave_batch(&first); // counted once only
            assert_eq!(relay_task.0.load(Ordering::SeqCst), 0);
            relay.leave_batch(&second);
            assert_eq!(relay_task.0.load(Ordering::SeqCst), 1);
            // A request of an older batch does not count against the new one.
            relay.begin_batch();
            let current = AtomicU64::new(relay.join_batch());
            relay.end_batch();
            relay.leave_batch(&AtomicU64::new(1));
            assert_eq!(relay.outstanding.load(Ordering::SeqCst), 1);
            relay.leave_batch(&current);
            assert_eq!(relay.outstanding.load(Ordering::SeqCst), 0);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn responses_completed_inside_the_drain_wait_for_the_rest_of_it() {
        std::thread::spawn(|| {
            mark_loop_thread();
            let (relay, shared, _) = relayed();
            let relay_task = count_relay_wakes(&relay);
            relay.flush_scheduled.store(true, Ordering::SeqCst);
            relay.begin_batch();
            // Each request's app finishes during the drain (an eager first step), with more
            // requests queued behind it.
            relay.set_more_queued(true);
            for _ in 0..3 {
                let request = AtomicU64::new(relay.join_batch());
                Waker::from(shared.clone()).wake_by_ref();
                relay.leave_batch(&request);
                assert_eq!(relay_task.0.load(Ordering::SeqCst), 0);
            }
            relay.end_batch();
            assert_eq!(relay_task.0.load(Ordering::SeqCst), 1);

            // The last queued request: its response goes out when it completes, even if the
            // app keeps the loop busy (the drain does not end) after that.
            let relay_task = count_relay_wakes(&relay); // a wake consumed the last one
            relay.flush_scheduled.store(true, Ordering::SeqCst);
            relay.begin_batch();
            relay.set_more_queued(false);
            let request = AtomicU64::new(relay.join_batch());
            Waker::from(shared.clone()).wake_by_ref();
            relay.leave_batch(&request);
            assert_eq!(relay_task.0.load(Ordering::SeqCst), 1);
            relay.end_batch();
        })
        .join()
        .unwrap();
    }
}
