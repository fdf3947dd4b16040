//! Request bodies (tokio → app) and response bodies (app → hyper).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::http::exchange::{CloseGuard, Exchange};
use crate::http::limits::{BodyError, BodyReader, Consumer, Piece};

/// Request body chunks in flight to the loop thread; the channel is bounded, so a slow app
/// stops tokio reading, which stops the client through TCP flow control.
pub enum InChunk {
    Data {
        data: Bytes,
        last: bool,
    },
    /// The body ended early: broken by the client, too large, or too slow.
    Failed(BodyError),
}

pub const REQUEST_BODY_QUEUE: usize = 4;

/// Moves a streamed request body from hyper to the app's `receive()`. When the body fails,
/// `failed` fires first (the service then answers 400/413/408, or aborts a response that
/// already started), and only then does the app see `http.disconnect`, so its reaction cannot
/// race that answer. Returns the failure, for the log.
pub async fn pump_request_body(
    mut reader: BodyReader,
    tx: mpsc::Sender<InChunk>,
    exchange: Arc<Exchange>,
    start: Option<Arc<Notify>>,
    failed: oneshot::Sender<BodyError>,
) -> Option<BodyError> {
    if let Some(start) = start {
        // Expect: 100-continue — hyper answers 100 on the first poll, so wait for the app.
        start.notified().await;
        if tx.is_closed() {
            return None; // The app finished without reading: never ask for the body.
        }
    }
    // The idle timeout counts only while the app waits in receive(): a body held back by a
    // busy app (backpressure) is not the client's fault.
    let consumer = || {
        if tx.is_closed() {
            Consumer::Gone
        } else if exchange.receive_waiting() {
            Consumer::Waiting
        } else {
            Consumer::Busy
        }
    };
    loop {
        match reader.next(consumer).await {
            Piece::Data { data, last } => {
                if tx.send(InChunk::Data { data, last }).await.is_err() {
                    return None; // The app is done with the request; drop the rest.
                }
                exchange.wake_receiver();
                if last {
                    return None;
                }
            }
            Piece::Failed(err) => {
                // Stop reading first: hyper then closes (HTTP/1) or resets (HTTP/2) the rest.
                drop(reader);
                let _ = failed.send(err);
                let _ = tx.send(InChunk::Failed(err)).await;
                exchange.wake_receiver();
                return Some(err);
            }
            Piece::Abandoned => return None,
        }
    }
}

/// Response body chunks from `send()` to hyper.
pub enum OutChunk {
    Data(Bytes),
    /// The final chunk (`more_body` false); the body ends cleanly only after this.
    Last(Bytes),
    /// Response trailers (HTTP/2 only): they end the body, so a body promised trailers sends
    /// its last data as `Data` and then this.
    Trailers(HeaderMap),
}

pub const RESPONSE_BODY_QUEUE: usize = 8;

enum Kind {
    Empty,
    Full(Option<Bytes>),
    Stream {
        rx: mpsc::Receiver<OutChunk>,
        finished: bool,
    },
}

/// The body hyper writes. A stream whose sender goes away without `Last` yields an error,
/// which makes hyper abort the connection: a client never sees a clean end of a truncated
/// body.
pub struct ResponseBody {
    kind: Kind,
    _guard: Option<CloseGuard>,
}

#[derive(Debug)]
pub struct BodyAborted;

impl std::fmt::Display for BodyAborted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("response body aborted by the application")
    }
}

impl std::error::Error for BodyAborted {}

impl ResponseBody {
    pub fn empty(guard: Option<CloseGuard>) -> Self {
        ResponseBody {
            kind: Kind::Empty,
            _guard: guard,
        }
    }

    pub fn full(data: Bytes, guard: Option<CloseGuard>) -> Self {
        if data.is_empty() {
            return Self::empty(guard);
        }
        ResponseBody {
            kind: Kind::Full(Some(data)),
            _guard: guard,
        }
    }

    pub fn stream(rx: mpsc::Receiver<OutChunk>, guard: Option<CloseGuard>) -> Self {
        ResponseBody {
            kind: Kind::Stream {
                rx,
                finished: false,
            },
            _guard: guard,
        }
    }
}

impl ResponseBody {
    /// Streamed from the app (chunks arrive over time), as opposed to one known body.
    pub fn is_streaming(&self) -> bool {
        matches!(self.kind, Kind::Stream { .. })
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BodyAborted;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyAborted>>> {
        match &mut self.kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Kind::Stream { rx, finished } => loop {
                if *finished {
                    return Poll::Ready(None);
                }
                return match rx.poll_recv(cx) {
                    Poll::Ready(Some(OutChunk::Data(data))) => {
                        if data.is_empty() {
                            continue;
                        }
                        Poll::Ready(Some(Ok(Frame::data(data))))
                    }
                    Poll::Ready(Some(OutChunk::Last(data))) => {
                        *finished = true;
                        if data.is_empty() {
                            return Poll::Ready(None);
                        }
                        Poll::Ready(Some(Ok(Frame::data(data))))
                    }
                    Poll::Ready(Some(OutChunk::Trailers(map))) => {
                        *finished = true;
                        Poll::Ready(Some(Ok(Frame::trailers(map))))
                    }
                    Poll::Ready(None) => {
                        *finished = true;
                        Poll::Ready(Some(Err(BodyAborted)))
                    }
                    Poll::Pending => Poll::Pending,
                };
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Full(data) => data.is_none(),
            Kind::Stream { finished, .. } => *finished,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Full(Some(data)) => SizeHint::with_exact(data.len() as u64),
            Kind::Full(None) => SizeHint::with_exact(0),
            Kind::Stream { .. } => SizeHint::default(),
        }
    }
}
