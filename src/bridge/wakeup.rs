//! The bridge from tokio to the loop thread: a lock-free queue plus one eventfd. What the
//! queue carries is events.rs's list.
//!
//! tokio pushes events and writes the eventfd only when no wake-up is already pending, so a
//! burst of requests costs one wake-up. The loop thread reads the eventfd, clears the flag and
//! then drains everything queued (ARCHITECTURE.md, hot path steps 1–2).
//!
//! On the I/O runtime's own threads the wake-up is also held back until the thread is about to
//! park (`flush`, from tokio's `on_thread_park`) or `MAX_HELD` events are waiting: everything
//! one pass of tokio parsed then reaches the loop in one wake-up, instead of the loop thread
//! being woken (and, on a shared core, switched to) for the first request of the pass.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crossbeam_queue::SegQueue;

/// Most events held back on an I/O thread before the loop is woken anyway (a bound on the
/// latency added under a load that keeps tokio from parking).
const MAX_HELD: usize = 64;

thread_local! {
    static IO_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Called on each I/O runtime thread as it starts: its pushes are held until it parks.
pub(crate) fn mark_io_thread() {
    IO_THREAD.with(|io| io.set(true));
}

/// The queue of events of type `E` (events.rs: `Event`) and the eventfd that wakes the loop.
pub(crate) struct WakeQueue<E> {
    queue: SegQueue<E>,
    pending: AtomicBool,
    /// Events pushed on I/O threads since the last wake-up they caused.
    held: AtomicUsize,
    fd: OwnedFd,
}

impl<E> WakeQueue<E> {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the returned descriptor is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(WakeQueue {
            queue: SegQueue::new(),
            pending: AtomicBool::new(false),
            held: AtomicUsize::new(0),
            // SAFETY: fd is a fresh descriptor we exclusively own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Called from tokio threads (and the loop thread). Never touches Python.
    pub(crate) fn push(&self, event: E) {
        self.queue.push(event);
        if IO_THREAD.with(Cell::get) && self.held.fetch_add(1, Ordering::AcqRel) + 1 < MAX_HELD {
            return; // `flush` wakes the loop when this thread parks.
        }
        self.held.store(0, Ordering::Release);
        self.signal();
    }

    /// I/O thread about to park: wake the loop for what it pushed in this pass.
    pub(crate) fn flush(&self) {
        if self.held.swap(0, Ordering::AcqRel) > 0 {
            self.signal();
        }
    }

    fn signal(&self) {
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
    pub(crate) fn reset(&self) {
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

    pub(crate) fn pop(&self) -> Option<E> {
        self.queue.pop()
    }

    /// Nothing queued (a push racing with this call may land either way).
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}
