//! The bridge from tokio to the loop thread: a lock-free queue plus one eventfd (a pipe on
//! systems without eventfd, and with the `portable` feature). What the queue carries is
//! events.rs's list.
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

/// The queue of events of type `E` (events.rs: `Event`) and the descriptor that wakes the
/// loop.
pub(crate) struct WakeQueue<E> {
    queue: SegQueue<E>,
    pending: AtomicBool,
    /// Events pushed on I/O threads since the last wake-up they caused.
    held: AtomicUsize,
    fd: WakeFd,
}

/// The descriptor the loop thread watches, and the one tokio writes to wake it: one eventfd
/// on Linux; a pipe's two ends elsewhere.
#[cfg(all(target_os = "linux", not(feature = "portable")))]
struct WakeFd {
    read: OwnedFd,
}

#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
struct WakeFd {
    read: OwnedFd,
    write: OwnedFd,
}

impl WakeFd {
    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the returned descriptor is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we exclusively own.
        let read = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(WakeFd { read })
    }

    /// pipe() then fcntl (macOS has no pipe2): a child forked in between may inherit the
    /// pipe, which costs it two descriptors and nothing else.
    #[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
    fn new() -> io::Result<Self> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe writes two descriptors into the array on success.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both are fresh descriptors we exclusively own.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        for fd in [read.as_raw_fd(), write.as_raw_fd()] {
            // SAFETY: fcntl on descriptors we own.
            let ok = unsafe {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) == 0
                    && libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) == 0
            };
            if !ok {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(WakeFd { read, write })
    }

    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    fn write_fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    #[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
    fn write_fd(&self) -> RawFd {
        self.write.as_raw_fd()
    }

    /// One wake-up. EAGAIN (eventfd counter saturated, pipe full) is harmless: a wake-up
    /// is pending anyway.
    fn signal(&self) {
        let one: u64 = 1;
        // An eventfd takes exactly 8 bytes; one byte is enough in a pipe.
        let len = if cfg!(all(target_os = "linux", not(feature = "portable"))) {
            8
        } else {
            1
        };
        // SAFETY: writing `len` (<= 8) bytes from a valid u64.
        unsafe {
            libc::write(
                self.write_fd(),
                &one as *const u64 as *const libc::c_void,
                len,
            );
        }
    }

    /// Consume what `signal` wrote. EAGAIN just means nothing was pending.
    fn drain(&self) {
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reading at most 64 bytes into a valid buffer that long.
            let n = unsafe {
                libc::read(
                    self.read.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            // An eventfd's read takes all (8 bytes); a pipe may hold several writes.
            if n < buf.len() as isize {
                return;
            }
        }
    }
}

impl<E> WakeQueue<E> {
    pub(crate) fn new() -> io::Result<Self> {
        Ok(WakeQueue {
            queue: SegQueue::new(),
            pending: AtomicBool::new(false),
            held: AtomicUsize::new(0),
            fd: WakeFd::new()?,
        })
    }

    /// The descriptor the loop thread watches for readability.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.read.as_raw_fd()
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
            self.fd.signal();
        }
    }

    /// Called on the loop thread before draining: reset the eventfd, then the flag, so a
    /// push racing with the drain either lands in this drain or triggers a new wake-up.
    pub(crate) fn reset(&self) {
        self.fd.drain();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the loop thread's descriptor polls readable now.
    fn readable(fd: RawFd) -> bool {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(&mut pfd, 1, 0) == 1 }
    }

    #[test]
    fn a_wake_up_is_readable_once_until_reset() {
        // The eventfd, or with the `portable` feature the pipe.
        let wakeup = WakeQueue::<()>::new().expect("a wake-up descriptor");
        assert!(!readable(wakeup.fd()));
        wakeup.signal();
        wakeup.signal(); // already pending: writes nothing more
        assert!(readable(wakeup.fd()));
        wakeup.reset();
        assert!(!readable(wakeup.fd()), "reset left a wake-up behind");
        for _ in 0..3 {
            wakeup.signal();
            assert!(readable(wakeup.fd()));
            wakeup.reset();
        }
        assert!(!readable(wakeup.fd()));
    }
}
