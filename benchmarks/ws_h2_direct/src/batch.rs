//! A copy of ferrocorn's `src/server/h2_batch.rs` (tests left out), so hyper's and the
//! direct h2 server here batch their socket I/O as ferrocorn does.
//!
//! Batched socket I/O for an HTTP/2 connection, both ways.
//!
//! Reads: h2 reads about one frame at a time (its buffer grows to the frame being read), so a
//! client's large upload or WebSocket message cost a system call per 16 KiB frame. Here a
//! small read is served from a read-ahead buffer filled `READ_AHEAD` bytes at a time; a
//! read with `DIRECT_READ_MIN` of room goes straight to the socket. The buffer is released once the
//! socket has nothing more, so an idle connection holds none.
//!
//! Writes:
//! h2 writes each DATA frame on its own (a frame is at most the client's
//! SETTINGS_MAX_FRAME_SIZE, 16 KiB in browsers) and flushes after each one, so a large
//! response or WebSocket message went out as one small socket write per frame, each paying
//! for a system call and, on a local peer, the whole TCP receive path. This wrapper holds
//! what h2 writes and writes it in large pieces: when `MAX_HELD` bytes are held, when a flush
//! finds less than `DEFER_MIN` held (a small answer goes out at once, as before), or when h2
//! flushes again without having written anything in between (the burst is over). A flush it
//! defers wakes the connection's task, so that next flush comes right away.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::io::poll_read_buf;

/// Most bytes read ahead of h2.
const READ_AHEAD: usize = 256 * 1024;
/// A read with this much room goes straight to the socket (h2 reading a large frame, when
/// the client sends them): copying it through the read-ahead would cost more than it saves.
const DIRECT_READ_MIN: usize = 64 * 1024;
/// Most bytes held; writes beyond it wait until the held bytes are out (backpressure).
const MAX_HELD: usize = 256 * 1024;
/// A flush with fewer bytes held writes them at once: a small answer does not wait.
const DEFER_MIN: usize = 16 * 1024;
/// Room kept between bursts (enough for a burst of small frames); a larger buffer is released
/// once written out, so an idle connection keeps little.
const KEEP_CAPACITY: usize = 4 * 1024;

pub struct Batched<S: AsyncWrite + Unpin> {
    inner: S,
    held: Vec<u8>,
    /// Bytes of `held` already written.
    written: usize,
    /// Something was written since the last flush.
    dirty: bool,
    /// Bytes read ahead of h2, from `read_pos` on.
    ahead: BytesMut,
    read_pos: usize,
}

impl<S: AsyncWrite + Unpin> Batched<S> {
    pub fn new(inner: S) -> Self {
        Batched {
            inner,
            held: Vec::new(),
            written: 0,
            dirty: false,
            ahead: BytesMut::new(),
            read_pos: 0,
        }
    }

    fn held_len(&self) -> usize {
        self.held.len() - self.written
    }
}

impl<S: AsyncWrite + Unpin> Batched<S> {
    /// Writes out everything held; Ready once it is out.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.held.len() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.held[self.written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.held.clear();
        self.written = 0;
        if self.held.capacity() > KEEP_CAPACITY {
            self.held = Vec::new();
        }
        Poll::Ready(Ok(()))
    }

    /// Makes room for `len` more bytes: Ready(true) when they may be held, Ready(false) when
    /// they are too many to hold and should be written directly (nothing is held then).
    fn poll_room(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<bool>> {
        if self.held_len() + len > MAX_HELD {
            if let Err(e) = std::task::ready!(self.poll_drain(cx)) {
                return Poll::Ready(Err(e));
            }
        }
        if len > MAX_HELD {
            return Poll::Ready(Ok(false));
        }
        if self.held.is_empty() && len >= DEFER_MIN {
            // A burst of large frames begins: its whole room at once, rather than regrowing
            // (and copying) the buffer as it fills.
            self.held.reserve_exact(MAX_HELD);
        }
        Poll::Ready(Ok(true))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Batched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.read_pos == this.ahead.len() {
            if buf.remaining() >= DIRECT_READ_MIN {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            this.ahead.clear();
            this.read_pos = 0;
            this.ahead.reserve(READ_AHEAD);
            std::task::ready!(poll_read_buf(
                Pin::new(&mut this.inner),
                cx,
                &mut this.ahead
            ))?;
        }
        let ahead = &this.ahead[this.read_pos..];
        let n = ahead.len().min(buf.remaining());
        buf.put_slice(&ahead[..n]);
        this.read_pos += n;
        if this.read_pos == this.ahead.len() && this.ahead.len() < READ_AHEAD {
            // The socket had no more: an idle connection keeps no buffer.
            this.ahead = BytesMut::new();
            this.read_pos = 0;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Batched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match std::task::ready!(this.poll_room(cx, data.len())) {
            Ok(true) => {
                this.held.extend_from_slice(data);
                this.dirty = true;
                Poll::Ready(Ok(data.len()))
            }
            Ok(false) => Pin::new(&mut this.inner).poll_write(cx, data),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let len = bufs.iter().map(|b| b.len()).sum();
        match std::task::ready!(this.poll_room(cx, len)) {
            Ok(true) => {
                for slice in bufs {
                    this.held.extend_from_slice(slice);
                }
                this.dirty = true;
                Poll::Ready(Ok(len))
            }
            Ok(false) => Pin::new(&mut this.inner).poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        // Slices are gathered into `held`, whatever the socket below supports.
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.dirty && this.held_len() >= DEFER_MIN {
            // More frames may follow in this burst: h2 flushes after each. Its next flush,
            // with nothing written meanwhile, writes them all.
            this.dirty = false;
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        this.dirty = false;
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// A connection dropped with bytes held (an error ended it, h2's GOAWAY may be among them):
/// one last write that does not wait.
impl<S: AsyncWrite + Unpin> Drop for Batched<S> {
    fn drop(&mut self) {
        if self.held_len() > 0 {
            let _ = self.poll_drain(&mut Context::from_waker(std::task::Waker::noop()));
        }
    }
}
