//! The body chunks both threads pass: request body pieces (tokio → app) and the response
//! body hyper writes (app → hyper).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

use crate::bridge::budget::Budgets;
use crate::bridge::exchange::CloseGuard;
use crate::bridge::http_state::HttpState;
use crate::config::ServerConfig;
use crate::http::body_reader::BodyError;
use crate::http::responses::error_response;

/// Request body chunks in flight to the loop thread; the channel is bounded, so a slow app
/// stops tokio reading, which stops the client through TCP flow control.
pub(crate) enum InChunk {
    Data {
        data: Bytes,
        last: bool,
    },
    /// The body ended early: broken by the client, too large, or too slow.
    Failed(BodyError),
}

pub(crate) const REQUEST_BODY_QUEUE: usize = 4;

/// Response body chunks from `send()` to hyper.
pub(crate) enum OutChunk {
    Data(Bytes),
    /// The final chunk (`more_body` false); the body ends cleanly only after this.
    Last(Bytes),
    /// Response trailers (HTTP/2 only): they end the body, so a body promised trailers sends
    /// its last data as `Data` and then this.
    Trailers(HeaderMap),
}

/// The sending half of a streamed response body. The queue has no bound in chunks: every
/// data chunk is charged to the response's byte budgets instead (bridge/budget.rs), and
/// `send()` waits while they are full.
#[derive(Clone)]
pub(crate) struct BodyTx {
    tx: mpsc::UnboundedSender<OutChunk>,
    budgets: Budgets,
}

pub(crate) type BodyRx = mpsc::UnboundedReceiver<OutChunk>;

/// hyper is gone: the chunk could not be queued.
#[derive(Debug)]
pub(crate) struct BodyClosed;

impl BodyTx {
    pub(crate) fn channel(budgets: Budgets) -> (BodyTx, BodyRx) {
        let (tx, rx) = mpsc::unbounded_channel();
        (BodyTx { tx, budgets }, rx)
    }

    /// Queue `chunk`, its data charged to the budgets until hyper has let go of it.
    pub(crate) fn send(&self, chunk: OutChunk) -> Result<(), BodyClosed> {
        let chunk = match chunk {
            OutChunk::Data(data) => OutChunk::Data(self.budgets.charge(data)),
            OutChunk::Last(data) => OutChunk::Last(self.budgets.charge(data)),
            trailers @ OutChunk::Trailers(_) => trailers,
        };
        self.tx.send(chunk).map_err(|_| BodyClosed)
    }

    pub(crate) fn budgets(&self) -> &Budgets {
        &self.budgets
    }
}

enum Kind {
    Empty,
    Full(Option<Bytes>),
    Stream { rx: BodyRx, finished: bool },
}

/// The body hyper writes. A stream whose sender goes away without `Last` yields an error,
/// which makes hyper abort the connection: a client never sees a clean end of a truncated
/// body.
pub(crate) struct ResponseBody {
    kind: Kind,
    _guard: Option<CloseGuard<HttpState>>,
}

#[derive(Debug)]
pub(crate) struct BodyAborted;

impl std::fmt::Display for BodyAborted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("response body aborted by the application")
    }
}

impl std::error::Error for BodyAborted {}

impl ResponseBody {
    pub(crate) fn empty(guard: Option<CloseGuard<HttpState>>) -> Self {
        ResponseBody {
            kind: Kind::Empty,
            _guard: guard,
        }
    }

    pub(crate) fn full(data: Bytes, guard: Option<CloseGuard<HttpState>>) -> Self {
        if data.is_empty() {
            return Self::empty(guard);
        }
        ResponseBody {
            kind: Kind::Full(Some(data)),
            _guard: guard,
        }
    }

    pub(crate) fn stream(rx: BodyRx, guard: Option<CloseGuard<HttpState>>) -> Self {
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
    /// A response the server makes itself (`http::responses::error_response`), with nothing
    /// watching it.
    pub(crate) fn error(config: &ServerConfig, status: StatusCode) -> http::Response<Self> {
        error_response(config, status).map(|text| ResponseBody::full(text, None))
    }

    /// Streamed from the app (chunks arrive over time), as opposed to one known body.
    pub(crate) fn is_streaming(&self) -> bool {
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
