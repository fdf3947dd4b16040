//! A WebSocket's bytes over an HTTP/2 stream (RFC 8441 §5): the stream's DATA frames both
//! ways, as the `AsyncRead + AsyncWrite` the WebSocket session works on. Reads copy straight
//! out of h2's received `Bytes`; writes go to `SendStream::send_data` in the task that
//! wrote them, as h2 grants capacity (no channel and no second task, as hyper's upgraded
//! stream had). Shutdown is END_STREAM; dropped before it, h2 resets the stream (CANCEL).
//!
//! Buffering is bounded: one received DATA payload, and what h2's send buffer holds (a
//! write waits for capacity, which h2 grants only while that buffer has room).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::server::stream_io::{gather, read_out};
use crate::ws::stream::WsTransport;

/// The most bytes one write asks h2 for: a DATA frame's worth is granted at a time anyway.
const MAX_WRITE: usize = 256 * 1024;

pub(crate) struct H2Io {
    recv: RecvStream,
    send: SendStream<Bytes>,
    /// Received, not yet read.
    chunk: Bytes,
    read_ended: bool,
    finished: bool,
}

impl H2Io {
    pub(super) fn new(send: SendStream<Bytes>, recv: RecvStream) -> Self {
        H2Io {
            recv,
            send,
            chunk: Bytes::new(),
            read_ended: false,
            finished: false,
        }
    }

    /// Waits until h2 can take up to `wanted` bytes; how many it can.
    fn poll_granted(&mut self, cx: &mut Context<'_>, wanted: usize) -> Poll<io::Result<usize>> {
        if self.finished {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        loop {
            let available = self.send.capacity();
            if available > 0 {
                return Poll::Ready(Ok(available.min(wanted)));
            }
            self.send.reserve_capacity(wanted);
            match ready!(self.send.poll_capacity(cx)) {
                Some(Ok(0)) => {}
                Some(Ok(granted)) => return Poll::Ready(Ok(granted.min(wanted))),
                Some(Err(_)) | None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            }
        }
    }

    fn send(&mut self, data: Bytes) -> io::Result<()> {
        self.send
            .send_data(data, false)
            .map_err(|_| io::ErrorKind::BrokenPipe.into())
    }
}

impl WsTransport for H2Io {
    fn takes_owned(&self) -> bool {
        true
    }

    /// h2's DATA payloads as they are: a large binary message is kept as these
    /// (`ws::stream::MaskedPayload`), not copied into the session's buffer.
    fn poll_read_chunk(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<Option<Bytes>>> {
        self.get_mut().poll_chunk(cx)
    }

    /// As much of `data` as h2 grants now, handed over as it is (a slice of the same
    /// allocation): h2 frames it without a copy.
    fn poll_write_owned(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &mut Bytes,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let n = ready!(this.poll_granted(cx, data.len()))?;
        let piece = data.split_to(n.min(data.len()));
        Poll::Ready(this.send(piece))
    }
}

impl H2Io {
    /// The next DATA payload, its window given back as it is taken.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        if !self.chunk.is_empty() {
            return Poll::Ready(Ok(Some(std::mem::take(&mut self.chunk))));
        }
        if self.read_ended {
            return Poll::Ready(Ok(None));
        }
        match ready!(self.recv.poll_data(cx)) {
            Some(Ok(data)) => {
                // Taken: the window reopens while the session works on it.
                let _ = self.recv.flow_control().release_capacity(data.len());
                Poll::Ready(Ok(Some(data)))
            }
            None => {
                self.read_ended = true;
                Poll::Ready(Ok(None))
            }
            Some(Err(_)) => Poll::Ready(Err(io::ErrorKind::ConnectionReset.into())),
        }
    }
}

impl AsyncRead for H2Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.chunk.is_empty() && !this.read_ended {
            if let Some(data) = ready!(this.poll_chunk(cx))? {
                this.chunk = data;
            }
        }
        read_out(&mut this.chunk, buf);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for H2Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let this = self.get_mut();
        let n = ready!(this.poll_granted(cx, buf.len().min(MAX_WRITE)))?;
        this.send(Bytes::copy_from_slice(&buf[..n]))?;
        Poll::Ready(Ok(n))
    }

    /// A WebSocket frame's header and payload in one DATA frame where the window allows.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        let this = self.get_mut();
        let n = ready!(this.poll_granted(cx, total.min(MAX_WRITE)))?;
        this.send(gather(bufs, n))?;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// h2 writes what it was given as the connection is polled: nothing to wait for here.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.finished {
            this.finished = true;
            this.send
                .send_data(Bytes::new(), true)
                .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        }
        Poll::Ready(Ok(()))
    }
}
