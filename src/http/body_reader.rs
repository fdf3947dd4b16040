//! Reading a request body within `--limit-request-body` and `--timeout-request-body`.
//!
//! The idle timer costs nothing while the body arrives as fast as it is read: it is created
//! the first time a read has to wait, and it is not re-armed per chunk. Each wait only moves a
//! plain deadline forward; when the timer fires before that deadline it is pushed back to it.
//!
//! `next` waits for the next piece; `next_ready` only takes one that has arrived already, so
//! the body pump can merge tiny pieces without holding any back (server/body_pump.rs).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::StatusCode;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use crate::http::body_fault::BodyFault;
use crate::http::h2_body::H2Body;

/// A request body as a protocol delivers it: hyper's (HTTP/1.1), h2's stream (HTTP/2,
/// `http::h2_body::H2Body`), or another protocol's adapter (HTTP/3's over its QUIC stream).
/// One branch per poll, no box for the two common ones.
pub(crate) enum InBody {
    Hyper(Incoming),
    H2(H2Body),
    Other(Pin<Box<dyn Body<Data = Bytes, Error = BodyFault> + Send>>),
}

impl From<Incoming> for InBody {
    fn from(body: Incoming) -> Self {
        InBody::Hyper(body)
    }
}

impl Body for InBody {
    type Data = Bytes;
    type Error = BodyFault;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFault>>> {
        match self.get_mut() {
            InBody::Hyper(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|polled| polled.map(|frame| frame.map_err(|_| BodyFault))),
            InBody::H2(body) => Pin::new(body).poll_frame(cx),
            InBody::Other(body) => body.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            InBody::Hyper(body) => body.is_end_stream(),
            InBody::H2(body) => body.is_end_stream(),
            InBody::Other(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            InBody::Hyper(body) => body.size_hint(),
            InBody::H2(body) => body.size_hint(),
            InBody::Other(body) => body.size_hint(),
        }
    }
}

/// Why the server stopped reading a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// Bad framing, a reset, a broken connection.
    Malformed,
    /// The body grew past `--limit-request-body`.
    TooLarge,
    /// Nothing arrived for `--timeout-request-body` while the app waited for it.
    TimedOut,
}

impl BodyError {
    /// The answer when no response has started yet.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            BodyError::Malformed => StatusCode::BAD_REQUEST,
            BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::TimedOut => StatusCode::REQUEST_TIMEOUT,
        }
    }
}

/// What the body's consumer is doing when the idle timer fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Consumer {
    /// Waiting for the next piece (parked in `receive()`, or the server before dispatch).
    Waiting,
    /// Busy with something else: a silent client costs nobody anything yet.
    Busy,
    /// Done with the request: stop reading quietly.
    Gone,
}

/// One step of reading a request body.
#[derive(Debug)]
pub(crate) enum Piece {
    /// Data (empty only when it is the end); `last` when the body ends with it.
    Data { data: Bytes, last: bool },
    /// The body cannot be read on.
    Failed(BodyError),
    /// The consumer went away while the reader waited.
    Abandoned,
}

/// Told once when a request body has been read to its end or given up (see `BodyReader::watch`).
pub(crate) trait BodyWatch: Send + Sync {
    fn body_ended(&self);

    /// The reader waits for hyper to hand over more of the body (`cx` is the reader's).
    fn body_waiting(&self, _cx: &mut Context<'_>) {}
}

pub(crate) struct BodyReader {
    body: InBody,
    limit: Option<u64>,
    received: u64,
    timeout: Option<Duration>,
    timer: Option<Pin<Box<Sleep>>>,
    watch: Option<Arc<dyn BodyWatch>>,
}

type Polled = Option<Result<Frame<Bytes>, BodyFault>>;

impl Drop for BodyReader {
    fn drop(&mut self) {
        self.ended();
    }
}

impl BodyReader {
    pub(crate) fn new(
        body: impl Into<InBody>,
        limit: Option<u64>,
        timeout: Option<Duration>,
    ) -> Self {
        BodyReader {
            body: body.into(),
            limit,
            received: 0,
            timeout,
            timer: None,
            watch: None,
        }
    }

    /// Whether hyper has nothing more to read for this body.
    pub(crate) fn is_complete(&self) -> bool {
        self.body.is_end_stream()
    }

    /// `watch` is told when the body ends: read to its end, failed, or dropped unread.
    pub(crate) fn watch(&mut self, watch: Arc<dyn BodyWatch>) {
        self.watch = Some(watch);
    }

    fn ended(&mut self) {
        if let Some(watch) = self.watch.take() {
            watch.body_ended();
        }
    }

    /// The next data piece; trailers are skipped (ASGI has no request trailers).
    pub(crate) async fn next(&mut self, consumer: impl Fn() -> Consumer) -> Piece {
        loop {
            match self.frame(&consumer).await {
                Ok(polled) => {
                    if let Some(piece) = self.piece(polled) {
                        return piece;
                    }
                }
                Err(stop) => {
                    self.ended();
                    return stop;
                }
            }
        }
    }

    /// The next piece if it has arrived already: None when reading on would wait for the
    /// client (no timer is involved). For merging tiny pieces without delaying any.
    pub(crate) async fn next_ready(&mut self) -> Option<Piece> {
        if let Some(piece) = poll_fn(|cx| Poll::Ready(self.ready_piece(cx))).await {
            return Some(piece);
        }
        // Not ready may only mean that hyper's connection task has not handed the next piece
        // over yet: HTTP/1.1 passes chunks one at a time through a one-slot channel, refilled
        // by that task once the poll just made woke it. Let it run once, then look again.
        let_others_run().await;
        poll_fn(|cx| Poll::Ready(self.ready_piece(cx))).await
    }

    /// A piece hyper holds ready now, past frames that carry none.
    fn ready_piece(&mut self, cx: &mut Context<'_>) -> Option<Piece> {
        loop {
            let Poll::Ready(polled) = Pin::new(&mut self.body).poll_frame(cx) else {
                return None;
            };
            if let Some(piece) = self.piece(polled) {
                return Some(piece);
            }
        }
    }

    /// What a frame from hyper is to the app; None for one that carries nothing (trailers, an
    /// empty DATA frame before the end).
    fn piece(&mut self, polled: Polled) -> Option<Piece> {
        let data = match polled {
            None => {
                self.ended();
                return Some(Piece::Data {
                    data: Bytes::new(),
                    last: true,
                });
            }
            Some(Err(_)) => {
                self.ended();
                return Some(Piece::Failed(BodyError::Malformed));
            }
            Some(Ok(frame)) => frame.into_data().ok()?,
        };
        let last = self.body.is_end_stream();
        if data.is_empty() && !last {
            return None;
        }
        self.received += data.len() as u64;
        if self.limit.is_some_and(|limit| self.received > limit) {
            self.ended();
            return Some(Piece::Failed(BodyError::TooLarge));
        }
        if last {
            self.ended();
        }
        Some(Piece::Data { data, last })
    }

    /// A whole body of `size` bytes (announced by Content-Length), read before dispatch.
    pub(crate) async fn read_all(&mut self, size: u64) -> Result<Bytes, BodyError> {
        let mut joined: Option<BytesMut> = None;
        loop {
            match self.next(|| Consumer::Waiting).await {
                Piece::Data { data, last } => {
                    if last && joined.is_none() {
                        return Ok(data); // one piece, the usual case: no copy
                    }
                    let buf = joined.get_or_insert_with(|| {
                        BytesMut::with_capacity(usize::try_from(size).unwrap_or(0))
                    });
                    buf.extend_from_slice(&data);
                    if last {
                        return Ok(buf.split().freeze());
                    }
                }
                Piece::Failed(err) => return Err(err),
                Piece::Abandoned => return Err(BodyError::Malformed),
            }
        }
    }

    /// The next frame, or how the wait ended without one.
    async fn frame(&mut self, consumer: &impl Fn() -> Consumer) -> Result<Polled, Piece> {
        let watch = self.watch.as_deref();
        let mut next = self.body.frame();
        let mut frame = poll_fn(|cx| {
            let polled = Pin::new(&mut next).poll(cx);
            if let (Poll::Pending, Some(watch)) = (&polled, watch) {
                watch.body_waiting(cx);
            }
            polled
        });
        // Already buffered (the usual case for bodies sent with their head): no timer.
        if let Poll::Ready(polled) = poll_fn(|cx| Poll::Ready(Pin::new(&mut frame).poll(cx))).await
        {
            return Ok(polled);
        }
        let Some(timeout) = self.timeout else {
            return Ok(frame.await);
        };
        let mut deadline = Instant::now() + timeout;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        loop {
            tokio::select! {
                biased;
                polled = &mut frame => return Ok(polled),
                () = timer.as_mut() => {
                    let now = Instant::now();
                    if now < deadline {
                        // Armed by an earlier wait: this wait started later.
                        timer.as_mut().reset(deadline);
                        continue;
                    }
                    match consumer() {
                        Consumer::Waiting => return Err(Piece::Failed(BodyError::TimedOut)),
                        Consumer::Gone => return Err(Piece::Abandoned),
                        Consumer::Busy => {
                            deadline = now + timeout;
                            timer.as_mut().reset(deadline);
                        }
                    }
                }
            }
        }
    }
}

/// Lets the tasks already woken run before this one goes on: it is woken at once, so it goes
/// to the back of the run queue. Unlike `tokio::task::yield_now` it does not also wait for the
/// runtime to poll the I/O driver, a system call it would cost per piece.
async fn let_others_run() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
}
