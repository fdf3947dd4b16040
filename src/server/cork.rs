//! Write coalescing for pipelined HTTP/1.1 requests, with a bound.
//!
//! hyper's own `pipeline_flush` skips flushes while its read buffer holds more requests, but
//! it also lifts every limit on buffered response bodies (no backpressure). This I/O wrapper
//! does the useful half with a bound: while the client's last read returned data that hyper
//! has not yet asked past (more pipelined requests may be queued in hyper's buffer), small
//! writes are held back and go out together; they are written as soon as hyper finds nothing
//! more to read, as soon as `MAX_CORKED` bytes are held, or on shutdown.
//!
//! It is also where an idle HTTP/1.1 connection is parked (see `server::park`): asked to, it
//! ends hyper's connection with a read that reports the end of the stream, without reading
//! the socket and without shutting it down, so the stream can outlive hyper's buffers.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::bridge::is_placeholder;
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
///
/// Parking: the connection asks (`request_park`); the wrapper parks at hyper's next read if
/// hyper has written out everything (else it declines, and the request lapses).
pub(crate) struct IoSignals {
    once: AtomicBool,
    always: AtomicBool,
    input: AtomicBool,
    input_at: Stamp,
    park: AtomicU8,
}

/// `IoSignals::park` states.
const PARK_NONE: u8 = 0;
const PARK_ASKED: u8 = 1;
const PARKED: u8 = 2;

impl Default for IoSignals {
    fn default() -> Self {
        IoSignals {
            once: AtomicBool::new(false),
            always: AtomicBool::new(false),
            input: AtomicBool::new(false),
            input_at: Stamp::now(),
            park: AtomicU8::new(PARK_NONE),
        }
    }
}

impl IoSignals {
    pub(crate) fn request(&self) {
        self.once.store(true, Ordering::Relaxed);
    }

    pub(crate) fn disable_corking(&self) {
        self.always.store(true, Ordering::Relaxed);
    }

    /// Whether writes go straight out for good (`disable_corking`).
    pub(crate) fn corking_disabled(&self) -> bool {
        self.always.load(Ordering::Relaxed)
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
    pub(crate) fn went_idle(&self) {
        self.input.store(false, Ordering::Relaxed);
    }

    /// Park at hyper's next read (see the module doc).
    pub(crate) fn request_park(&self) {
        self.park.store(PARK_ASKED, Ordering::Relaxed);
    }

    /// Whether the wrapper parked since `request_park`; clears the request or the parked state
    /// either way, so that the stream reads and shuts down normally again.
    pub(crate) fn take_parked(&self) -> bool {
        self.park.swap(PARK_NONE, Ordering::Relaxed) == PARKED
    }

    fn parked(&self) -> bool {
        self.park.load(Ordering::Relaxed) == PARKED
    }

    /// When bytes first arrived since the connection last went idle (None if none have).
    pub(crate) fn input_since(&self) -> Option<Instant> {
        self.input
            .load(Ordering::Acquire)
            .then(|| self.input_at.get())
    }
}

pub(crate) struct Corked<T: AsyncWrite + Unpin> {
    inner: T,
    signals: Arc<IoSignals>,
    /// The last read returned data and hyper has not read again since: it may be parsing
    /// further pipelined requests out of its buffer.
    input_pending: bool,
    held: Vec<u8>,
    /// Bytes of `held` already written.
    written: usize,
    /// The last write to the stream could not complete: hyper still holds bytes to write, so
    /// the connection must not be parked (hyper's end of stream would drop them).
    write_blocked: bool,
}

impl<T: AsyncWrite + Unpin> Corked<T> {
    pub(crate) fn new(inner: T, signals: Arc<IoSignals>) -> Self {
        Corked {
            inner,
            signals,
            input_pending: false,
            held: Vec::new(),
            written: 0,
            write_blocked: false,
        }
    }
}

impl<T: AsyncWrite + Unpin> Corked<T> {
    /// Write out what is held. Ready(Ok) once empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.held.len() {
            let result = Pin::new(&mut self.inner).poll_write(cx, &self.held[self.written..]);
            let n = std::task::ready!(self.note_blocked(result))?;
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

    fn note_blocked<R>(&mut self, result: Poll<R>) -> Poll<R> {
        self.write_blocked = result.is_pending();
        result
    }

    /// Answers a park request at a read: parks (an end of stream for hyper) when nothing is
    /// left to write, else declines.
    fn park_now(&self) -> bool {
        match self.signals.park.load(Ordering::Relaxed) {
            PARK_NONE => false,
            PARKED => true,
            _ if self.held.is_empty() && !self.write_blocked => {
                self.signals.park.store(PARKED, Ordering::Relaxed);
                true
            }
            _ => {
                self.signals.park.store(PARK_NONE, Ordering::Relaxed);
                false
            }
        }
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
        if this.park_now() {
            // hyper sees the client close between requests and lets go of the stream.
            return Poll::Ready(Ok(()));
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
        if this.can_hold(buf.len()) && !is_placeholder(buf) {
            this.held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        std::task::ready!(this.poll_drain(cx))?;
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.note_blocked(result)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if this.can_hold(len) && !bufs.iter().any(|b| is_placeholder(b)) {
            for b in bufs {
                this.held.extend_from_slice(b);
            }
            return Poll::Ready(Ok(len));
        }
        std::task::ready!(this.poll_drain(cx))?;
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.note_blocked(result)
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
        if this.signals.parked() {
            // hyper's close after the parking end of stream: the stream stays open.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// A connection dropped with bytes held (an error ended it): one last write that does not
/// wait. Over TLS these are rustls' last records, a fatal alert above all: rustls writes it
/// from inside a read (the read that found the bad record), which is input hyper has not
/// asked past, so the cork holds it; the error then ends the connection with no flush.
/// Without this the peer would get a bare close instead of the alert (RFC 8446 §5.2, §6).
impl<T: AsyncWrite + Unpin> Drop for Corked<T> {
    fn drop(&mut self) {
        if self.written < self.held.len() {
            let waker = no_wake();
            let _ = self.poll_drain(&mut Context::from_waker(&waker));
        }
    }
}

/// Nothing to wake: the connection is gone (`Waker::noop` needs a newer Rust than ours).
struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

/// The waker of a last write that does not wait (a wrapper dropped with bytes held; also
/// `h2_batch`'s).
pub(super) fn no_wake() -> Waker {
    Waker::from(Arc::new(NoWake))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn corked<T: AsyncWrite + Unpin>(inner: T) -> (Corked<T>, Arc<IoSignals>) {
        let signals = Arc::new(IoSignals::default());
        (Corked::new(inner, signals.clone()), signals)
    }

    #[tokio::test]
    async fn parking_ends_the_stream_for_hyper_but_keeps_the_socket_and_its_bytes() {
        let (mut client, server) = tokio::io::duplex(1024);
        let (mut io, signals) = corked(server);
        client.write_all(b"next request").await.unwrap();
        signals.request_park();
        let mut buf = [0u8; 64];
        assert_eq!(
            io.read(&mut buf).await.unwrap(),
            0,
            "hyper sees an end of stream"
        );
        io.shutdown().await.unwrap(); // hyper's close: not passed on
        assert!(signals.take_parked());

        // The client's bytes are still there to read, and the stream still writes.
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"next request");
        io.write_all(b"answer").await.unwrap();
        signals.request(); // else held for a pipelined request that may follow
        io.flush().await.unwrap();
        let n = client.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"answer");
        // Not parked any more: a shutdown goes through.
        io.shutdown().await.unwrap();
        assert_eq!(client.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn held_bytes_go_out_when_the_connection_is_dropped() {
        let (mut client, server) = tokio::io::duplex(1024);
        let (mut io, _signals) = corked(server);
        client.write_all(b"request").await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(io.read(&mut buf).await.unwrap(), 7);
        // Written after a read hyper has not asked past: held.
        io.write_all(b"alert").await.unwrap();
        drop(io);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"alert");
    }

    #[tokio::test]
    async fn parking_is_declined_while_hyper_still_has_bytes_to_write() {
        let (mut client, server) = tokio::io::duplex(8);
        let (mut io, signals) = corked(server);
        let response = [b'r'; 64];
        let blocked = std::future::poll_fn(|cx| {
            let first = Pin::new(&mut io).poll_write(cx, &response);
            assert!(matches!(first, Poll::Ready(Ok(8))));
            Poll::Ready(
                Pin::new(&mut io)
                    .poll_write(cx, &response[8..])
                    .is_pending(),
            )
        })
        .await;
        assert!(blocked, "the client reads nothing, so the write must block");
        client.write_all(b"x").await.unwrap();
        signals.request_park();
        let mut buf = [0u8; 8];
        assert_eq!(io.read(&mut buf).await.unwrap(), 1, "read as usual");
        assert!(!signals.take_parked());
    }
}
