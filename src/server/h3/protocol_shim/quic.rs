//! h3's QUIC traits over h3-quinn's types, unchanged except that each request stream (a
//! bidirectional stream the client opens) goes through `scan::FirstHeaders` before h3
//! reads it. Everything else is handed straight to h3-quinn.

use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};

use super::scan::FirstHeaders;

pub(crate) struct Connection {
    inner: h3_quinn::Connection,
    /// The longest HEADERS frame rewritten; None: no rewriting at all (WebSockets off).
    limit: Option<usize>,
}

impl Connection {
    pub(crate) fn new(quic: quinn::Connection, limit: Option<usize>) -> Self {
        Connection {
            inner: h3_quinn::Connection::new(quic),
            limit,
        }
    }
}

impl<B: Buf> quic::Connection<B> for Connection {
    type RecvStream = h3_quinn::RecvStream;
    type OpenStreams = OpenStreams;

    fn poll_accept_recv(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::RecvStream, ConnectionErrorIncoming>> {
        quic::Connection::<B>::poll_accept_recv(&mut self.inner, cx)
    }

    fn poll_accept_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, ConnectionErrorIncoming>> {
        let limit = self.limit;
        quic::Connection::<B>::poll_accept_bidi(&mut self.inner, cx)
            .map_ok(|stream| BidiStream::new(stream, limit))
    }

    fn opener(&self) -> Self::OpenStreams {
        OpenStreams(quic::Connection::<B>::opener(&self.inner))
    }
}

impl<B: Buf> quic::OpenStreams<B> for Connection {
    type BidiStream = BidiStream<B>;
    type SendStream = h3_quinn::SendStream<B>;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_bidi(&mut self.inner, cx)
            .map_ok(|stream| BidiStream::new(stream, None))
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_send(&mut self.inner, cx)
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        quic::OpenStreams::<B>::close(&mut self.inner, code, reason)
    }
}

/// The streams the server opens itself (its control and QPACK streams): as h3-quinn's.
pub(crate) struct OpenStreams(h3_quinn::OpenStreams);

impl Clone for OpenStreams {
    fn clone(&self) -> Self {
        OpenStreams(self.0.clone())
    }
}

impl<B: Buf> quic::OpenStreams<B> for OpenStreams {
    type BidiStream = BidiStream<B>;
    type SendStream = h3_quinn::SendStream<B>;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_bidi(&mut self.0, cx)
            .map_ok(|stream| BidiStream::new(stream, None))
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_send(&mut self.0, cx)
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        quic::OpenStreams::<B>::close(&mut self.0, code, reason)
    }
}

pub(crate) struct BidiStream<B: Buf> {
    send: h3_quinn::SendStream<B>,
    recv: RecvStream,
}

impl<B: Buf> BidiStream<B> {
    fn new(stream: h3_quinn::BidiStream<B>, limit: Option<usize>) -> Self {
        let (send, recv) = quic::BidiStream::split(stream);
        BidiStream {
            send,
            recv: RecvStream {
                inner: recv,
                scan: limit.map(FirstHeaders::new),
                ended: false,
            },
        }
    }
}

impl<B: Buf> quic::BidiStream<B> for BidiStream<B> {
    type SendStream = h3_quinn::SendStream<B>;
    type RecvStream = RecvStream;

    fn split(self) -> (Self::SendStream, Self::RecvStream) {
        (self.send, self.recv)
    }
}

impl<B: Buf> quic::SendStream<B> for BidiStream<B> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<T: Into<WriteBuf<B>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }

    fn reset(&mut self, reset_code: u64) {
        self.send.reset(reset_code)
    }

    fn send_id(&self) -> StreamId {
        self.send.send_id()
    }
}

impl<B: Buf> quic::RecvStream for BidiStream<B> {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        self.recv.poll_data(cx)
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.recv.stop_sending(error_code)
    }

    fn recv_id(&self) -> StreamId {
        self.recv.recv_id()
    }
}

/// A request stream's receiving side: its first HEADERS frame through the scan.
pub(crate) struct RecvStream {
    inner: h3_quinn::RecvStream,
    /// Until the first HEADERS frame has gone by.
    scan: Option<FirstHeaders>,
    /// The stream ended while the scan held bytes: they went first, the end is next.
    ended: bool,
}

impl quic::RecvStream for RecvStream {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        if self.ended {
            return Poll::Ready(Ok(None));
        }
        loop {
            let Some(scan) = &mut self.scan else {
                return self.inner.poll_data(cx);
            };
            let out = match self.inner.poll_data(cx) {
                Poll::Ready(Ok(Some(chunk))) => scan.feed(chunk),
                Poll::Ready(Ok(None)) => {
                    let rest = scan.finish();
                    self.scan = None;
                    if rest.is_empty() {
                        return Poll::Ready(Ok(None));
                    }
                    // The held bytes first; the end on the next poll.
                    self.ended = true;
                    return Poll::Ready(Ok(Some(rest)));
                }
                other => return other,
            };
            if scan.is_done() {
                self.scan = None;
            }
            if !out.is_empty() {
                return Poll::Ready(Ok(Some(out)));
            }
            // Nothing to hand on yet: poll again (registers the waker when nothing came).
        }
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.inner.stop_sending(error_code)
    }

    fn recv_id(&self) -> StreamId {
        self.inner.recv_id()
    }
}
