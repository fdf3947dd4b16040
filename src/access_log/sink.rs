//! The access log's writer: lines are appended to a buffer in memory and written to a file
//! descriptor (stdout) by a thread of its own, so neither the loop thread nor tokio ever
//! waits on the terminal or the pipe behind stdout.
//!
//! A line is written within `FLUSH_INTERVAL` of being pushed; `flush()` (the core's close)
//! writes everything pushed so far before returning, and after `close()` lines are written
//! as they are pushed, so a graceful stop loses none. The buffer is bounded in bytes: past
//! `MAX_PENDING` a producer waits for the writer, as a blocking write to stdout would.

use std::os::fd::RawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a line may wait in memory before it is written.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_millis(100);
/// A batch this large is written at once, without waiting for the interval.
const FLUSH_BYTES: usize = 64 * 1024;
/// The most the buffer holds before producers wait for the writer.
const MAX_PENDING: usize = 1024 * 1024;
/// One write(2) is at most this large (PIPE_BUF on Linux) and ends at a line end: a pipe
/// takes such a write whole, so lines of several workers sharing stdout never interleave
/// mid-line, as they do not with Python's one write per record.
const ATOMIC_WRITE: usize = 4096;
/// How long `flush()` waits for a writer that cannot write (stdout blocked), so that a
/// stuck terminal cannot hang the shutdown forever.
const FLUSH_LIMIT: Duration = Duration::from_secs(10);

struct State {
    pending: Vec<u8>,
    /// Bytes pushed and bytes written since the start (for `flush`).
    pushed: u64,
    written: u64,
    /// `flush()` is waiting: write without waiting for the interval.
    urgent: bool,
    /// `close()` began: the writer empties the buffer and stops.
    closing: bool,
    /// The writer stopped: `push_with` writes directly.
    direct: bool,
}

struct Shared {
    fd: RawFd,
    state: Mutex<State>,
    /// The writer waits here for lines (and for `urgent`/`closing`).
    work: Condvar,
    /// Producers wait here for room, `flush()` for `written` to advance.
    progress: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(crate) struct AccessSink {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl AccessSink {
    /// Starts the writer thread for `fd`, which stays owned by the caller (it is stdout).
    pub(crate) fn start(fd: RawFd) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            fd,
            state: Mutex::new(State {
                pending: Vec::new(),
                pushed: 0,
                written: 0,
                urgent: false,
                closing: false,
                direct: false,
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
        });
        let thread_shared = shared.clone();
        let writer = std::thread::Builder::new()
            .name("ferrocorn-access-log".into())
            .spawn(move || write_batches(&thread_shared))?;
        Ok(AccessSink {
            shared,
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Appends what `line` writes into the buffer (one or more whole lines).
    pub(crate) fn push_with(&self, line: impl FnOnce(&mut Vec<u8>)) {
        let shared = &*self.shared;
        let mut st = shared.lock();
        while st.pending.len() >= MAX_PENDING && !st.direct {
            st = shared.progress.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.direct {
            let mut own = Vec::with_capacity(128);
            line(&mut own);
            // Under the lock: direct writes keep their order.
            write_lines(shared.fd, &own);
            return;
        }
        let before = st.pending.len();
        line(&mut st.pending);
        let after = st.pending.len();
        st.pushed += (after - before) as u64;
        drop(st);
        // The writer only needs waking to start a batch's interval or to cut it short.
        if before == 0 || (before < FLUSH_BYTES && after >= FLUSH_BYTES) {
            shared.work.notify_one();
        }
    }

    /// Returns once every line pushed so far is written (or `FLUSH_LIMIT` passed).
    pub(crate) fn flush(&self) {
        let shared = &*self.shared;
        let deadline = Instant::now() + FLUSH_LIMIT;
        let mut st = shared.lock();
        let target = st.pushed;
        while st.written < target && !st.direct {
            st.urgent = true;
            shared.work.notify_one();
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            st = shared
                .progress
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Writes what is buffered, stops the writer; later lines are written as pushed.
    pub(crate) fn close(&self) {
        let Some(writer) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        self.shared.lock().closing = true;
        self.shared.work.notify_one();
        let _ = writer.join();
        let mut st = self.shared.lock();
        st.direct = true;
        // Anything a producer added after the writer's last batch.
        let rest = std::mem::take(&mut st.pending);
        write_lines(self.shared.fd, &rest);
        drop(st);
        self.shared.progress.notify_all();
    }
}

impl Drop for AccessSink {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writer thread: waits for a first line, gives the batch `FLUSH_INTERVAL` to grow (cut
/// short by size, `flush` or `close`), writes it outside the lock, and again.
fn write_batches(shared: &Shared) {
    let mut batch = Vec::new();
    loop {
        let mut st = shared.lock();
        while st.pending.is_empty() && !st.closing {
            st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        let deadline = Instant::now() + FLUSH_INTERVAL;
        while !st.closing && !st.urgent && st.pending.len() < FLUSH_BYTES {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            st = shared
                .work
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        st.urgent = false;
        std::mem::swap(&mut st.pending, &mut batch);
        let upto = st.pushed;
        let last = st.closing && batch.is_empty();
        drop(st);
        shared.progress.notify_all(); // room for waiting producers
        if last {
            return;
        }
        write_lines(shared.fd, &batch);
        batch.clear();
        if batch.capacity() > MAX_PENDING {
            batch = Vec::new(); // a burst does not keep its memory
        }
        shared.lock().written = upto;
        shared.progress.notify_all();
    }
}

/// Writes `data` (whole lines) in writes of at most `ATOMIC_WRITE` bytes cut at line ends.
/// A failed write drops the rest of the batch: there is nowhere left to report it.
fn write_lines(fd: RawFd, mut data: &[u8]) {
    while !data.is_empty() {
        let cut = line_cut(data, ATOMIC_WRITE);
        let (chunk, rest) = data.split_at(cut);
        if write_all(fd, chunk).is_err() {
            return;
        }
        data = rest;
    }
}

/// Where the next write ends: after the last newline within `limit` bytes, or after the
/// first line when a single line is longer than that.
fn line_cut(data: &[u8], limit: usize) -> usize {
    if data.len() <= limit {
        return data.len();
    }
    match data[..limit].iter().rposition(|&b| b == b'\n') {
        Some(i) => i + 1,
        None => data
            .iter()
            .position(|&b| b == b'\n')
            .map_or(data.len(), |i| i + 1),
    }
}

fn write_all(fd: RawFd, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        // SAFETY: `data` is a valid buffer of `data.len()` bytes; `fd` is the caller's.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n >= 0 {
            data = &data[n as usize..];
            continue;
        }
        let err = std::io::Error::last_os_error();
        match err.kind() {
            std::io::ErrorKind::Interrupted => {}
            // A non-blocking stdout (some supervisors set it): wait until it takes more.
            std::io::ErrorKind::WouldBlock => wait_writable(fd)?,
            _ => return Err(err),
        }
    }
    Ok(())
}

fn wait_writable(fd: RawFd) -> std::io::Result<()> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, 1000) };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;

    fn pipe() -> (std::fs::File, std::fs::File) {
        let mut fds = [0; 2];
        // SAFETY: two ints for pipe(2) to fill.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: fresh descriptors owned by nobody else.
        unsafe {
            use std::os::fd::FromRawFd;
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        }
    }

    #[test]
    fn cuts_at_line_ends_within_the_limit() {
        assert_eq!(line_cut(b"ab\ncd\n", 100), 6);
        assert_eq!(line_cut(b"ab\ncd\nef\n", 7), 6);
        assert_eq!(line_cut(b"abcdefgh\nx\n", 4), 9);
        assert_eq!(line_cut(b"abcdefgh", 4), 8);
    }

    #[test]
    fn flush_writes_everything_pushed_in_order() {
        let (mut read, write) = pipe();
        let sink = AccessSink::start(write.as_raw_fd()).expect("thread");
        for i in 0..1000 {
            sink.push_with(|buf| buf.extend_from_slice(format!("line {i}\n").as_bytes()));
        }
        sink.flush();
        sink.close();
        sink.push_with(|buf| buf.extend_from_slice(b"after close\n"));
        drop(write);
        let mut out = String::new();
        read.read_to_string(&mut out).expect("utf-8");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1001);
        assert_eq!(lines[0], "line 0");
        assert_eq!(lines[999], "line 999");
        assert_eq!(lines[1000], "after close");
    }

    #[test]
    fn a_line_is_written_without_flush_within_the_interval() {
        let (mut read, write) = pipe();
        let sink = AccessSink::start(write.as_raw_fd()).expect("thread");
        sink.push_with(|buf| buf.extend_from_slice(b"one\n"));
        let mut got = [0u8; 4];
        // Blocks until the writer thread wrote it on its own.
        read.read_exact(&mut got).expect("the line");
        assert_eq!(&got, b"one\n");
        drop(sink);
    }

    #[test]
    fn a_full_buffer_waits_for_the_writer_instead_of_growing() {
        let (mut read, write) = pipe();
        let sink = Arc::new(AccessSink::start(write.as_raw_fd()).expect("thread"));
        let line = vec![b'x'; 1023];
        let producer = {
            let sink = sink.clone();
            std::thread::spawn(move || {
                for _ in 0..4096 {
                    sink.push_with(|buf| {
                        buf.extend_from_slice(&line);
                        buf.push(b'\n');
                    });
                    let pending = sink.shared.lock().pending.len();
                    assert!(pending <= MAX_PENDING + 1024, "buffer grew to {pending}");
                }
                sink.flush();
            })
        };
        let mut total = 0;
        let mut chunk = vec![0u8; 65536];
        while total < 4096 * 1024 {
            total += read.read(&mut chunk).expect("read");
        }
        producer.join().expect("producer");
        assert_eq!(total, 4096 * 1024);
    }
}
