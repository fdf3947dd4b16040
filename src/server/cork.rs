//! Write coalescing for pipelined HTTP/1.1 requests, with a bound.
//!
//! hyper's own `pipeline_flush` skips flushes while its read buffer holds more requests, but
//! it also lifts every limit on buffered response bodies (no backpressure). This I/O wrapper
//! does the useful half with a bound: while the client's last read returned data that hyper
//! has not yet asked past (more pipelined requests may be queued in hyper's buffer), small
//! writes are held back and go out together; they are written as soon as hyper finds nothing
//! more to read, as soon as `MAX_CORKED` bytes are held, or on shutdown.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::server::stamp::Stamp;

/// Most bytes held back; beyond this writes go through (and backpressure applies).
const MAX_CORKED: usize = 64 * 1024;

/// Room for held writes kept between bursts: enough for a burst of small pipelined responses.
const KEPT_CORK_CAPACITY: usize = 4096;

/// What a connection's I/O wrapper and the rest of the connection tell each other.
///
/// To the cork: write now. Set by a streaming response body when it hands over data
/// (streamed chunks, server-sent events say, must not wait behind a pipelined request), and
/// for good once the connection stops being HTTP/1.1 request/response traffic (HTTP/2, a
/// WebSocket after the upgrade): holding writes only pays off for pipelined HTTP/1.1.
///
/// From the reads: when bytes first arrived since the connection last went idle, that is
/// when the client began its next request head (for `--header-read-timeout`, see
/// `connection::drive`).
pub struct IoSignals {
    once: AtomicBool,
    always: AtomicBool,
    input: AtomicBool,
    input_at: Stamp,
}

impl Default for IoSignals {
    fn default() -> Self {
        IoSignals {
            once: AtomicBool::new(false),
            always: AtomicBool::new(false),
            input: AtomicBool::new(false),
            input_at: Stamp::now(),
        }
    }
}

impl IoSignals {
    pub fn request(&self) {
        self.once.store(true, Ordering::Relaxed);
    }

    pub fn disable_corking(&self) {
        self.always.store(true, Ordering::Relaxed);
    }

    fn take(&self) -> bool {
        self.always.load(Ordering::Relaxed) || self.once.swap(false, Ordering::Relaxed)
    }

    /// A read returned data. Only the first since `went_idle` is timed: one clock read per
    /// request.
    fn note_input(&self) {
        if !self.input.load(Ordering::Relaxed) {
            self.input_at.set_now();
            self.input.store(true, Ordering::Release);
        }
    }

    /// The connection has no request in flight any more: the next bytes start a new head.
    pub fn went_idle(&self) {
        self.input.store(false, Ordering::Relaxed);
    }

    /// When bytes first arrived since the connection last went idle (None if none have).
    pub fn input_since(&self) -> Option<Instant> {
        self.input
            .load(Ordering::Acquire)
            .then(|| self.input_at.get())
    }
}

pub struct Corked<T> {
    inner: T,
    signals: Arc<IoSignals>,
    /// The last read returned data and hyper has not read again since: it may be parsing
    /// further pipelined requests out of its buffer.
    input_pending: bool,
    held: Vec<u8>,
    /// Bytes of `held` already written.
    written: usize,
}

impl<T> Corked<T> {
    pub fn new(inner: T, signals: Arc<IoSignals>) -> Self {
        Corked {
            inner,
            signals,
            input_pending: false,
            held: Vec::new(),
            written: 0,
        }
    }
}

impl<T: AsyncWrite + Unpin> Corked<T> {
    /// Write out what is held. Ready(Ok) once empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.held.len() {
            let n = std::task::ready!(
                Pin::new(&mut self.inner).poll_write(cx, &self.held[self.written..])
            )?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.held.clear();
        if self.held.capacity() > KEPT_CORK_CAPACITY {
            // One large held response must not stay allocated for the connection's life.
            self.held = Vec::new();
        }
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    fn can_hold(&self, len: usize) -> bool {
        self.input_pending
            && self.held.len() + len <= MAX_CORKED
            && !self.signals.always.load(Ordering::Relaxed)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Corked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // hyper wants more input, so it has answered everything it had: release the writes.
        this.input_pending = false;
        if !this.held.is_empty() {
            if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
                return Poll::Ready(Err(e));
            }
        }
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.input_pending = true;
            this.signals.note_input();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Corked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.can_hold(buf.len()) {
            this.held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if this.can_hold(len) {
            for b in bufs {
                this.held.extend_from_slice(b);
            }
            return Poll::Ready(Ok(len));
        }
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.input_pending && this.held.len() <= MAX_CORKED && !this.signals.take() {
            // More pipelined requests may follow from hyper's buffer: flush with them.
            return Poll::Ready(Ok(()));
        }
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}
