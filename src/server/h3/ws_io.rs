//! A WebSocket's bytes over an HTTP/3 request stream (RFC 9220 §3): the DATA frames of
//! the stream both ways, as the `AsyncRead + AsyncWrite` the WebSocket session works on.
//! Shutdown is the stream's FIN; dropped before it (the session aborted, or a write never
//! finished), the stream is reset instead (H3_REQUEST_CANCELLED, RFC 9220 §3's analogue of
//! a TCP RST): quinn would finish a dropped stream, and the peer would take a cut-off socket
//! for a closed one.
//!
//! Buffering is bounded: one received chunk (what quinn hands over), and one write of at
//! most `MAX_WRITE` bytes in flight, which `send_data` holds until QUIC's flow control
//! takes it (backpressure: the next write waits for it).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use h3::error::{Code, StreamError};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use crate::server::h3::body::RecvSide;
use crate::server::h3::response::SendSide;
use crate::server::stream_io::{gather, read_out};

/// The most bytes one write takes: one DATA frame.
const MAX_WRITE: usize = 64 * 1024;

type Sending = Pin<Box<dyn Future<Output = (Guarded, Result<(), StreamError>)> + Send>>;

/// The send side, reset when dropped unless its FIN went out.
struct Guarded {
    stream: Box<SendSide>,
    finished: bool,
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if !self.finished {
            self.stream.stop_stream(Code::H3_REQUEST_CANCELLED);
        }
    }
}

enum SendState {
    Idle(Guarded),
    /// A DATA frame, or the FIN, on its way.
    Busy(Sending, bool),
    Finished,
    Failed,
}

pub(crate) struct H3Io {
    recv: RecvSide,
    /// Received, not yet read.
    chunk: Bytes,
    read_ended: bool,
    send: SendState,
    /// Dropped with this: the request stream's task waits for that, so the connection
    /// counts the socket as a stream in flight (drain and keep-alive wait for it).
    _done: oneshot::Sender<()>,
}

impl H3Io {
    pub(crate) fn new(send: SendSide, recv: RecvSide, done: oneshot::Sender<()>) -> Self {
        H3Io {
            recv,
            chunk: Bytes::new(),
            read_ended: false,
            send: SendState::Idle(Guarded {
                stream: Box::new(send),
                finished: false,
            }),
            _done: done,
        }
    }

    /// Drives the DATA frame or FIN in flight to its end.
    fn poll_sent(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let SendState::Busy(sending, finishing) = &mut self.send {
            let finishing = *finishing;
            let (mut guarded, result) = ready!(sending.as_mut().poll(cx));
            self.send = match (&result, finishing) {
                (Err(_), _) => SendState::Failed,
                (Ok(()), true) => {
                    guarded.finished = true;
                    SendState::Finished
                }
                (Ok(()), false) => SendState::Idle(guarded),
            };
            if result.is_err() {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
        }
        match self.send {
            SendState::Failed => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn start_send(&mut self, cx: &mut Context<'_>, data: Bytes) -> Poll<io::Result<usize>> {
        ready!(self.poll_sent(cx))?;
        let n = data.len();
        match std::mem::replace(&mut self.send, SendState::Failed) {
            SendState::Idle(mut guarded) => {
                self.send = SendState::Busy(
                    Box::pin(async move {
                        let result = guarded.stream.send_data(data).await;
                        (guarded, result)
                    }),
                    false,
                );
                // Started now; flush (or the next write) drives it to its end.
                let _ = self.poll_sent(cx);
                Poll::Ready(Ok(n))
            }
            other => {
                self.send = other;
                Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()))
            }
        }
    }
}

impl AsyncRead for H3Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.chunk.is_empty() && !this.read_ended {
            match ready!(this.recv.poll_recv_data(cx)) {
                Ok(Some(mut data)) => this.chunk = data.copy_to_bytes(data.remaining()),
                Ok(None) => this.read_ended = true,
                Err(_) => return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into())),
            }
        }
        read_out(&mut this.chunk, buf);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for H3Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = buf.len().min(MAX_WRITE);
        self.get_mut()
            .start_send(cx, Bytes::copy_from_slice(&buf[..n]))
    }

    /// A WebSocket frame's header and payload in one DATA frame.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().start_send(cx, gather(bufs, MAX_WRITE))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_sent(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            ready!(this.poll_sent(cx))?;
            match std::mem::replace(&mut this.send, SendState::Finished) {
                SendState::Idle(mut guarded) => {
                    this.send = SendState::Busy(
                        Box::pin(async move {
                            let result = guarded.stream.finish().await;
                            (guarded, result)
                        }),
                        true,
                    );
                }
                SendState::Finished => return Poll::Ready(Ok(())),
                other => {
                    this.send = other;
                    return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
                }
            }
        }
    }
}

/// h3 frames what it is given, but each write here is copied into a DATA frame of its own.
impl crate::ws::stream::WsTransport for H3Io {}

impl Drop for H3Io {
    fn drop(&mut self) {
        // The send side resets itself (`Guarded`) unless it finished.
        if !self.read_ended {
            self.recv.stop_sending(Code::H3_NO_ERROR);
        }
    }
}
