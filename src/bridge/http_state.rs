//! The loop-side state of one HTTP exchange, kept inside its `Exchange` and locked only by
//! the loop thread; tokio creates it with the request. The data only: its rules are in
//! asgi/response.rs.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokio::sync::oneshot;

use crate::bridge::body::{BodyTx, GuardedBody, InChunks};
use crate::bridge::budget::ByteBudget;
use crate::bridge::exchange::{CloseGuard, Exchange};
use crate::bridge::waiters::Waiters;

/// What the loop hands the service future waiting for a response: the response, or an
/// early hint (103) followed by the receiver of what comes next. Each hint takes a fresh
/// oneshot so that a response without hints pays for nothing but the enum's tag.
// The response is the common variant: boxing it would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Reply {
    Response(http::Response<ResponseBody>),
    Hint(EarlyHint, oneshot::Receiver<Reply>),
}

/// One `http.response.early_hint`: the `Link` field values, validated as header values.
pub(crate) struct EarlyHint {
    pub(crate) links: Vec<HeaderValue>,
}

/// The service future's end of the response hand-over (see `Reply`).
pub(crate) type ResponseReceiver = oneshot::Receiver<Reply>;

/// The loop's end of the response hand-over.
pub(crate) struct ResponseSender(oneshot::Sender<Reply>);

/// A fresh hand-over for one request.
pub(crate) fn response_channel() -> (ResponseSender, ResponseReceiver) {
    let (tx, rx) = oneshot::channel();
    (ResponseSender(tx), rx)
}

impl ResponseSender {
    /// The response; Err when the service future is gone (the client left).
    pub(crate) fn send(self, response: http::Response<ResponseBody>) -> Result<(), ()> {
        self.0.send(Reply::Response(response)).map_err(drop)
    }

    /// An early hint ahead of the response; false when the service future is gone.
    pub(crate) fn hint(&mut self, hint: EarlyHint) -> bool {
        let (next_tx, next_rx) = oneshot::channel();
        let tx = std::mem::replace(&mut self.0, next_tx);
        tx.send(Reply::Hint(hint, next_rx)).is_ok()
    }
}

pub(crate) enum RequestBody {
    /// Read by tokio before dispatch (small, with a Content-Length): the first `receive()`
    /// completes at once.
    Full(Bytes),
    /// Streamed through a bounded channel; each `receive()` takes what is queued, merged.
    Stream(InChunks),
    /// All of it was delivered (or the app is done with the request).
    Done,
}

pub(crate) enum ResponsePhase {
    /// Nothing sent yet; `tx` hands the response to hyper's service future.
    Idle(ResponseSender),
    /// `http.response.start` is held until the first body message, so a failure can still
    /// turn into a clean 500.
    Held {
        tx: ResponseSender,
        status: StatusCode,
        headers: HeaderMap,
    },
    /// The head went to hyper; body chunks follow through `tx`.
    Streaming(BodyTx),
    /// HEAD, 204, 304: the app may still send body messages; they are dropped.
    Discarding,
    /// The body is done but `http.response.start` promised trailers; `map` collects the
    /// `http.response.trailers` messages until `more_trailers` is false. `tx` is the open
    /// body stream that will end with them, or None when they cannot go out (HTTP/1.x, or a
    /// response without a body) and are dropped.
    Trailers { tx: Option<BodyTx>, map: HeaderMap },
    /// The last body message was sent.
    Complete,
    /// Gone: the client left before the head was sent, or the response was aborted.
    Closed,
}

/// How much of a response body may wait in memory (bridge/budget.rs).
#[derive(Clone)]
pub(crate) struct BufferLimits {
    /// Bytes per response (`--limit-response-buffer`).
    pub(crate) response: usize,
    /// HTTP/2: the connection's budget, shared by its streams (`--http2-connection-buffer`).
    pub(crate) connection: Option<Arc<ByteBudget>>,
}

/// A `send()` waiting for room in a budget: its message is kept as the app passed it (its
/// body not copied yet) and sent as if `send()` were called when room appears.
pub(crate) struct DeferredSend {
    /// The `HttpProtocol` that sends it.
    pub(crate) proto: Py<PyAny>,
    pub(crate) message: DeferredMessage,
    /// What the app awaits.
    pub(crate) future: Py<PyAny>,
}

pub(crate) enum DeferredMessage {
    /// The message dict, as `send()` got it.
    Message(Py<PyDict>),
    /// PyPy's `send_body_bytes(body, more_body)`.
    Body(Py<PyAny>, bool),
}

pub(crate) struct HttpState {
    pub(crate) body: RequestBody,
    pub(crate) response: ResponsePhase,
    /// Futures of parked `receive()` and backpressured `send()` calls.
    pub(crate) waiters: Waiters,
    pub(crate) receive_called: bool,
    /// The request body failed (malformed, too large, too slow); tokio answers with this
    /// status itself (400, 413, 408) unless the response had started.
    pub(crate) body_failed: Option<StatusCode>,
    /// The app's own Content-Length, checked against the body it sends.
    pub(crate) declared_length: Option<u64>,
    pub(crate) is_head: bool,
    /// `http.response.start` had `trailers: True`: the last body message does not end the
    /// response, `http.response.trailers` does.
    pub(crate) trailers: bool,
    /// For the access log.
    pub(crate) status: u16,
    pub(crate) bytes_sent: u64,
    /// When hyper handed the request over, before any wait in the admission queue (for
    /// the access log's duration and the metrics' wait before the app call).
    pub(crate) received_at: Instant,
    pub(crate) buffers: BufferLimits,
    pub(crate) deferred: Option<DeferredSend>,
    /// `--timeout-request` cancelled the app: an unanswered request gets 503, not 500.
    pub(crate) timed_out: bool,
    /// The handle the PyPy fast path knows this exchange by (asgi/pypy/fast.rs), so that
    /// its events reach it; 0 for an exchange it does not run.
    #[cfg_attr(not(PyPy), allow(dead_code))]
    pub(crate) fast_handle: u64,
}

impl HttpState {
    pub(crate) fn new(
        body: RequestBody,
        tx: ResponseSender,
        is_head: bool,
        buffers: BufferLimits,
        received_at: Instant,
    ) -> Self {
        HttpState {
            body,
            response: ResponsePhase::Idle(tx),
            waiters: Waiters::default(),
            receive_called: false,
            body_failed: None,
            declared_length: None,
            is_head,
            trailers: false,
            status: 0,
            bytes_sent: 0,
            received_at,
            buffers,
            deferred: None,
            timed_out: false,
            fast_handle: 0,
        }
    }
}

/// An HTTP request's exchange.
pub(crate) type HttpExchange = Exchange<HttpState>;
/// Marks an HTTP exchange closed when dropped (see `CloseGuard`).
pub(crate) type HttpCloseGuard = CloseGuard<HttpState>;
/// The body hyper writes for an app's response, holding the exchange open until hyper
/// drops it (also a WebSocket denial's body).
pub(crate) type ResponseBody = GuardedBody<HttpCloseGuard>;
