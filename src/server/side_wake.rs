//! A connection's side futures — the server's lifecycle watch and the idle timer — polled
//! only when they woke, not on each of the connection's wakes.
//!
//! `tokio::select!` polls every branch whenever its task wakes. A keep-alive connection's
//! task wakes a few times per request (bytes in, the response handed over, the socket
//! writable), and each wake re-polled the watch and the timer: ~680 instructions per plaintext
//! request (callgrind), for futures that resolve once in a connection's life. Here they are
//! polled with a waker of their own, which marks them due before it wakes the task.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use futures_util::task::AtomicWaker;

struct SideWaker {
    due: AtomicBool,
    task: AtomicWaker,
}

impl Wake for SideWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.due.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// The side futures' waker, and whether one of them woke since they were last polled.
pub(crate) struct SideWake {
    inner: Arc<SideWaker>,
    waker: Waker,
}

impl SideWake {
    pub(crate) fn new() -> Self {
        let inner = Arc::new(SideWaker {
            due: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(inner.clone());
        SideWake { inner, waker }
    }

    /// New side futures, never polled yet: they are due.
    pub(crate) fn rearm(&self) {
        self.inner.due.store(true, Ordering::Relaxed);
    }

    /// Records the task's waker (a side wake wakes it), and takes whether the side futures
    /// are due: polled with `context()` now if so.
    pub(crate) fn take_due(&self, cx: &Context<'_>) -> bool {
        self.inner.task.register(cx.waker());
        self.inner.due.swap(false, Ordering::AcqRel)
    }

    /// The context to poll the side futures with.
    pub(crate) fn context(&self) -> Context<'_> {
        Context::from_waker(&self.waker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::Poll;

    struct Counting(std::sync::atomic::AtomicUsize);

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn due_first_then_only_after_a_side_wake_which_wakes_the_task() {
        let counted = Arc::new(Counting(Default::default()));
        let task_waker = Waker::from(counted.clone());
        let cx = Context::from_waker(&task_waker);
        let side = SideWake::new();
        assert!(side.take_due(&cx));
        assert!(!side.take_due(&cx));
        side.context().waker().wake_by_ref();
        assert_eq!(counted.0.load(Ordering::SeqCst), 1);
        assert!(side.take_due(&cx));
        assert!(!side.take_due(&cx));
        side.rearm();
        assert!(side.take_due(&cx));
    }

    #[tokio::test]
    async fn a_timer_polled_with_the_side_context_marks_it_due() {
        let side = SideWake::new();
        let mut sleep = pin!(tokio::time::sleep(std::time::Duration::from_millis(5)));
        let fired = std::future::poll_fn(|cx| {
            if side.take_due(cx) && sleep.as_mut().poll(&mut side.context()).is_ready() {
                return Poll::Ready(true);
            }
            Poll::Pending
        })
        .await;
        assert!(fired);
    }
}
