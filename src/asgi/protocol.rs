//! `HttpProtocol`: the `receive`/`send` pair one HTTP request hands to the app.
//!
//! Both complete synchronously whenever they can (DESIGN.md points 5–6) and only fall back
//! to an asyncio future when they must wait for tokio: a body chunk not yet read, or a full
//! response channel (backpressure).

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, Version};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict};
use tokio::runtime::Handle;
use tokio::sync::mpsc::{self, error::TryRecvError, error::TrySendError};

use crate::asgi::messages::{
    as_dict, message_type, parse_response_body, parse_response_start, parse_response_trailers,
    parse_trailers_flag,
};
use crate::asgi::waiters::{self, client_disconnected, Channel};
use crate::bridge::body::{InChunk, OutChunk, ResponseBody, RESPONSE_BODY_QUEUE};
use crate::bridge::exchange::CloseGuard;
use crate::bridge::http_state::{
    HttpCloseGuard, HttpExchange, HttpState, RequestBody, ResponsePhase, ResponseSender,
};
use crate::bridge::relay::WakeRelay;
use crate::bridge::waiters::Waiters;
use crate::config::ServerConfig;
use crate::http::responses::{build_response, error_response};

/// Loop-side things every protocol object needs; one per `Core`.
pub(crate) struct LoopCtx {
    pub create_future: Py<PyAny>,
    pub runtime: Handle,
    pub config: Arc<ServerConfig>,
    /// An already-completed asyncio future (result None), shared by every `send()` that did
    /// not have to wait: awaiting a done future stays in C (no call back into the extension).
    pub done: Py<PyAny>,
    pub relay: Arc<WakeRelay>,
}

/// What the access log needs; moved out of the request head before the scope is built.
pub(crate) struct RequestLine {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub peer: Option<SocketAddr>,
}

#[pyclass(frozen, module = "ferrocorn._ferrocorn")]
pub(crate) struct HttpProtocol {
    pub(crate) ex: Arc<HttpExchange>,
    ctx: Arc<LoopCtx>,
    line: RequestLine,
    /// The drain batch this request belongs to until its response completes (relay.rs).
    batch: AtomicU64,
}

fn disconnect_message(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "http.disconnect"))?;
    Ok(d)
}

fn request_message<'py>(py: Python<'py>, body: &[u8], more: bool) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "http.request"))?;
    d.set_item(intern!(py, "body"), PyBytes::new(py, body))?;
    d.set_item(intern!(py, "more_body"), PyBool::new(py, more))?;
    Ok(d)
}

/// The app's Content-Length and the body it sends disagree.
fn length_mismatch(declared: u64, sent: u64, more_body: bool) -> PyErr {
    let so_far = if more_body { " so far" } else { "" };
    PyRuntimeError::new_err(format!(
        "the response declares Content-Length {declared} but the body has {sent} bytes{so_far}"
    ))
}

/// The Content-Length the app set, if any; several must agree.
fn declared_length(headers: &HeaderMap) -> PyResult<Option<u64>> {
    let mut declared = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        let parsed = std::str::from_utf8(value.as_bytes())
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "'headers' has an invalid Content-Length value {:?}",
                    String::from_utf8_lossy(value.as_bytes())
                ))
            })?;
        if declared.is_some_and(|d| d != parsed) {
            return Err(PyValueError::new_err(
                "'headers' has several Content-Length values that disagree",
            ));
        }
        declared = Some(parsed);
    }
    Ok(declared)
}

/// What `receive()` has for the app right now.
pub(crate) enum Incoming {
    Request(Bytes, bool),
    Disconnect,
    Wait,
}

impl HttpState {
    /// The next `receive()` event, moving the request body along.
    pub(crate) fn next_incoming(&mut self, ex: &HttpExchange) -> Incoming {
        let st = self;
        match &mut st.body {
            RequestBody::Full(data) => {
                let data = std::mem::take(data);
                st.body = RequestBody::Done;
                return Incoming::Request(data, false);
            }
            RequestBody::Stream(rx) => match rx.try_recv() {
                Ok(InChunk::Data { data, last }) => {
                    if last {
                        st.body = RequestBody::Done;
                    }
                    return Incoming::Request(data, !last);
                }
                Ok(InChunk::Failed(err)) => {
                    st.body_failed = Some(err.status());
                    st.body = RequestBody::Done;
                    match st.response {
                        ResponsePhase::Idle(_) | ResponsePhase::Held { .. } => {
                            // tokio answers 400/413/408 itself: a response the app sends
                            // after this disconnect could go nowhere, so send() says so.
                            st.status = err.status().as_u16();
                            st.response = ResponsePhase::Closed;
                        }
                        ResponsePhase::Streaming(_)
                        | ResponsePhase::Trailers { tx: Some(_), .. } => {
                            // tokio aborts the started response; dropping its sender here too
                            // makes the app's next send() raise rather than race the abort.
                            st.response = ResponsePhase::Closed;
                        }
                        _ => {}
                    }
                    return Incoming::Disconnect;
                }
                Err(TryRecvError::Disconnected) => {
                    st.body_failed = Some(StatusCode::BAD_REQUEST);
                    st.body = RequestBody::Done;
                    return Incoming::Disconnect;
                }
                Err(TryRecvError::Empty) => {
                    if !ex.is_closed() {
                        return Incoming::Wait;
                    }
                    st.body = RequestBody::Done;
                }
            },
            RequestBody::Done => {}
        }
        if st.response_complete() || ex.is_closed() {
            Incoming::Disconnect
        } else {
            Incoming::Wait
        }
    }
}

impl Channel for HttpState {
    /// The next message for `receive()`, or None when it has to wait for tokio.
    fn next_message<'py>(
        &mut self,
        py: Python<'py>,
        ex: &HttpExchange,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        match self.next_incoming(ex) {
            Incoming::Request(data, more) => request_message(py, &data, more).map(Some),
            Incoming::Disconnect => disconnect_message(py).map(Some),
            Incoming::Wait => Ok(None),
        }
    }

    fn waiters(&mut self) -> &mut Waiters {
        &mut self.waiters
    }

    fn on_send_failed(&mut self) {
        self.response = ResponsePhase::Closed;
    }
}

impl HttpProtocol {
    pub(crate) fn new(
        ex: Arc<HttpExchange>,
        ctx: Arc<LoopCtx>,
        line: RequestLine,
        batch: u64,
    ) -> Self {
        HttpProtocol {
            ex,
            ctx,
            line,
            batch: AtomicU64::new(batch),
        }
    }

    fn guard(&self) -> Option<HttpCloseGuard> {
        Some(CloseGuard::new(self.ex.clone()))
    }

    /// Whether promised trailers can reach the client. Only HTTP/2 (where
    /// `extensions["http.response.trailers"]` is advertised): hyper's HTTP/1 server writes
    /// trailers only with `TE: trailers` plus a matching `Trailer` response header and
    /// silently drops them otherwise, so HTTP/1 does not offer them at all.
    fn carries_trailers(&self) -> bool {
        self.line.version == Version::HTTP_2
    }

    /// The phase after the last body message: Complete, or waiting for the promised
    /// trailers (with the body stream still open when they can go out).
    fn after_last_body(st: &HttpState, tx: Option<mpsc::Sender<OutChunk>>) -> ResponsePhase {
        if st.trailers {
            ResponsePhase::Trailers {
                tx,
                map: HeaderMap::new(),
            }
        } else {
            ResponsePhase::Complete
        }
    }

    /// Promised trailers never came: end the body cleanly without them rather than abort,
    /// since the body itself is whole.
    fn end_without_trailers(&self, tx: mpsc::Sender<OutChunk>) {
        match tx.try_send(OutChunk::Last(Bytes::new())) {
            Ok(()) | Err(TrySendError::Closed(_)) => {}
            Err(TrySendError::Full(chunk)) => {
                // The client is still reading earlier chunks; the end waits its turn.
                self.ctx.runtime.spawn(async move {
                    let _ = tx.send(chunk).await;
                });
            }
        }
    }

    /// tokio reported a change (body chunk, close): wake parked receivers.
    pub(crate) fn on_receive_event(py: Python<'_>, ex: &Arc<HttpExchange>) -> PyResult<()> {
        waiters::on_receive_event(py, ex)
    }

    /// tokio accepted (or refused) a backpressured body chunk.
    pub(crate) fn on_send_done(py: Python<'_>, ex: &Arc<HttpExchange>) -> PyResult<()> {
        waiters::on_send_done(py, ex)
    }

    fn response_done(&self, py: Python<'_>, st: &mut HttpState) -> PyResult<()> {
        self.ctx.relay.leave_batch(&self.batch);
        // A receive() parked waiting for more (e.g. a disconnect watcher) now gets
        // http.disconnect: the spec's "after the response has been sent".
        waiters::resolve_receivers(py, &self.ex, st)
    }

    fn start_response(
        &self,
        py: Python<'_>,
        st: &mut HttpState,
        tx: ResponseSender,
        (status, mut headers): (StatusCode, HeaderMap),
        body: Bytes,
        more_body: bool,
    ) -> PyResult<Py<PyAny>> {
        st.status = status.as_u16();
        let no_body =
            st.is_head || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
        if let (false, Some(declared)) = (no_body, st.declared_length) {
            let sent = body.len() as u64;
            if sent > declared || (!more_body && sent != declared) {
                // Nothing went out yet: keep the head so the failure becomes a clean 500.
                st.response = ResponsePhase::Held {
                    tx,
                    status,
                    headers,
                };
                return Err(length_mismatch(declared, sent, more_body));
            }
        }
        // Trailers that will go out keep the stream open past the last data.
        let hold_open = st.trailers && self.carries_trailers();
        let response_body;
        if no_body {
            // HEAD mirrors GET's Content-Length when the whole body came in one message.
            if st.is_head && !more_body && !headers.contains_key(CONTENT_LENGTH) && !body.is_empty()
            {
                headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
            }
            response_body = ResponseBody::empty(self.guard());
            // No body means nothing for trailers to follow: they are accepted and dropped.
            st.response = if more_body {
                ResponsePhase::Discarding
            } else {
                Self::after_last_body(st, None)
            };
        } else if !(more_body || hold_open) {
            st.bytes_sent += body.len() as u64;
            response_body = ResponseBody::full(body, self.guard());
            st.response = Self::after_last_body(st, None);
        } else {
            // Streamed: either more body follows, or trailers will end the stream (a Full
            // body would end it right after the data).
            let (otx, orx) = mpsc::channel(RESPONSE_BODY_QUEUE);
            if !body.is_empty() {
                st.bytes_sent += body.len() as u64;
                // A fresh channel has room: this cannot fail.
                let _ = otx.try_send(OutChunk::Data(body));
            }
            response_body = ResponseBody::stream(orx, self.guard());
            st.response = if more_body {
                ResponsePhase::Streaming(otx)
            } else {
                Self::after_last_body(st, Some(otx))
            };
        }
        let response = build_response(&self.ctx.config, status, headers, response_body);
        if tx.send(response).is_err() {
            st.response = ResponsePhase::Closed;
            return Err(client_disconnected());
        }
        if st.response_complete() {
            self.response_done(py, st)?;
        }
        Ok(self.ctx.done.clone_ref(py))
    }

    fn stream_chunk(
        &self,
        py: Python<'_>,
        st: &mut HttpState,
        body: Bytes,
        more_body: bool,
    ) -> PyResult<Py<PyAny>> {
        let ResponsePhase::Streaming(otx) = &st.response else {
            return Err(client_disconnected());
        };
        let otx = otx.clone();
        let len = body.len() as u64;
        if let Some(declared) = st.declared_length {
            let total = st.bytes_sent + len;
            if total > declared || (!more_body && total != declared) {
                // Part of the body is out: abort the connection rather than let the client
                // read a body whose framing is wrong.
                st.response = ResponsePhase::Closed;
                return Err(length_mismatch(declared, total, more_body));
            }
        }
        // With trailers to carry, the last data does not end the stream; they will.
        let hold_open = st.trailers && self.carries_trailers();
        let chunk = if more_body || hold_open {
            OutChunk::Data(body)
        } else {
            OutChunk::Last(body)
        };
        let result = waiters::send_or_park(py, &self.ctx, &self.ex, st, &otx, chunk)?;
        st.bytes_sent += len;
        if !more_body {
            st.response = Self::after_last_body(st, hold_open.then_some(otx));
            if st.response_complete() {
                self.response_done(py, st)?;
            }
        }
        Ok(result)
    }

    /// `http.response.trailers`: collect them, and end the body with them on the last one.
    fn send_trailers(
        &self,
        py: Python<'_>,
        st: &mut HttpState,
        headers: HeaderMap,
        more_trailers: bool,
    ) -> PyResult<Py<PyAny>> {
        if matches!(st.response, ResponsePhase::Idle(_)) {
            return Err(PyRuntimeError::new_err(
                "Expected ASGI message 'http.response.start', but got 'http.response.trailers'",
            ));
        }
        if !st.trailers {
            return Err(PyRuntimeError::new_err(
                "Unexpected ASGI message 'http.response.trailers': 'http.response.start' did \
                 not set 'trailers': True",
            ));
        }
        match std::mem::replace(&mut st.response, ResponsePhase::Closed) {
            ResponsePhase::Trailers { tx, mut map } => {
                // Appended, not replaced: a later message may repeat a field name.
                for (name, value) in headers.iter() {
                    map.append(name.clone(), value.clone());
                }
                if more_trailers {
                    st.response = ResponsePhase::Trailers { tx, map };
                    return Ok(self.ctx.done.clone_ref(py));
                }
                let Some(tx) = tx else {
                    // Nowhere to put them (HTTP/1.x or no body): dropped, as documented.
                    st.response = ResponsePhase::Complete;
                    self.response_done(py, st)?;
                    return Ok(self.ctx.done.clone_ref(py));
                };
                // An empty trailer section is just the end of the body.
                let chunk = if map.is_empty() {
                    OutChunk::Last(Bytes::new())
                } else {
                    OutChunk::Trailers(map)
                };
                let result = waiters::send_or_park(py, &self.ctx, &self.ex, st, &tx, chunk)?;
                st.response = ResponsePhase::Complete;
                self.response_done(py, st)?;
                Ok(result)
            }
            done @ (ResponsePhase::Complete | ResponsePhase::Closed) => {
                st.response = done;
                Err(client_disconnected())
            }
            other => {
                st.response = other;
                Err(PyRuntimeError::new_err(
                    "Unexpected ASGI message 'http.response.trailers': the response body is \
                     not complete (send 'http.response.body' with 'more_body': False first)",
                ))
            }
        }
    }

    /// Send a server-made error response if nothing went out yet, or abort a started one.
    /// Returns what happened, for the log.
    fn fail_response(&self, st: &mut HttpState) -> Option<&'static str> {
        match std::mem::replace(&mut st.response, ResponsePhase::Closed) {
            ResponsePhase::Idle(tx) | ResponsePhase::Held { tx, .. } => {
                if self.ex.is_closed() || st.body_failed.is_some() {
                    // Nobody to answer, or tokio already answers for the failed body.
                    if let Some(status) = st.body_failed {
                        st.status = status.as_u16();
                    }
                    return None;
                }
                st.status = 500;
                let response = error_response(&self.ctx.config, StatusCode::INTERNAL_SERVER_ERROR);
                let _ = tx.send(response.map(|text| ResponseBody::full(text, self.guard())));
                Some("sent 500")
            }
            // Dropping the sender without a final chunk makes hyper abort the connection.
            ResponsePhase::Streaming(_) => Some("aborted the response"),
            ResponsePhase::Discarding | ResponsePhase::Trailers { tx: None, .. } => {
                st.response = ResponsePhase::Complete;
                None
            }
            // The body is whole but the trailers (often a status or checksum) are missing:
            // abort, like a truncated body, so the client does not take it for a success.
            ResponsePhase::Trailers { tx: Some(_), .. } => Some("aborted the response"),
            other @ (ResponsePhase::Complete | ResponsePhase::Closed) => {
                st.response = other;
                None
            }
        }
    }

    /// The request could not be handed to the app: answer 500 (or abort) and clean up.
    pub(crate) fn fail_internal(&self) {
        let mut st = self.ex.state();
        self.fail_response(&mut st);
        self.release(&mut st);
    }

    /// `http.response.start` when the response has already started or ended.
    pub(crate) fn start_out_of_turn(&self, st: &HttpState) -> PyErr {
        match st.response {
            ResponsePhase::Complete | ResponsePhase::Closed => client_disconnected(),
            _ => PyRuntimeError::new_err(
                "Unexpected ASGI message 'http.response.start': the response has already \
                 started",
            ),
        }
    }

    /// A validated `http.response.start`, for a response still Idle (the caller checked):
    /// held until the first body message (DESIGN.md point 5).
    pub(crate) fn hold_start(
        &self,
        py: Python<'_>,
        st: &mut HttpState,
        status: StatusCode,
        headers: HeaderMap,
        trailers: bool,
    ) -> PyResult<Py<PyAny>> {
        st.declared_length = declared_length(&headers)?;
        st.trailers = trailers;
        if self.ex.is_closed() {
            st.response = ResponsePhase::Closed;
            return Err(client_disconnected());
        }
        let tx = match std::mem::replace(&mut st.response, ResponsePhase::Closed) {
            ResponsePhase::Idle(tx) => tx,
            // Callers check first (so this fault comes before any parse error); kept whole
            // all the same.
            other => {
                st.response = other;
                return Err(self.start_out_of_turn(st));
            }
        };
        st.status = status.as_u16();
        st.response = ResponsePhase::Held {
            tx,
            status,
            headers,
        };
        Ok(self.ctx.done.clone_ref(py))
    }

    /// A validated `http.response.body`.
    pub(crate) fn send_body(
        &self,
        py: Python<'_>,
        st: &mut HttpState,
        body: Bytes,
        more_body: bool,
    ) -> PyResult<Py<PyAny>> {
        match std::mem::replace(&mut st.response, ResponsePhase::Closed) {
            ResponsePhase::Idle(tx) => {
                st.response = ResponsePhase::Idle(tx);
                Err(PyRuntimeError::new_err(
                    "Expected ASGI message 'http.response.start', but got 'http.response.body'",
                ))
            }
            ResponsePhase::Held {
                tx,
                status,
                headers,
            } => self.start_response(py, st, tx, (status, headers), body, more_body),
            streaming @ ResponsePhase::Streaming(_) => {
                st.response = streaming;
                self.stream_chunk(py, st, body, more_body)
            }
            ResponsePhase::Discarding => {
                st.response = if more_body {
                    ResponsePhase::Discarding
                } else {
                    Self::after_last_body(st, None)
                };
                Ok(self.ctx.done.clone_ref(py))
            }
            trailers @ ResponsePhase::Trailers { .. } => {
                st.response = trailers;
                Err(PyRuntimeError::new_err(
                    "Unexpected ASGI message 'http.response.body': the body is complete, \
                     expected 'http.response.trailers'",
                ))
            }
            other => {
                st.response = other;
                Err(client_disconnected())
            }
        }
    }

    /// The first `receive()` answers `Expect: 100-continue`, not earlier.
    pub(crate) fn receive_called(&self, st: &mut HttpState) {
        if !st.receive_called {
            st.receive_called = true;
            if let Some(start) = &self.ex.body_start {
                start.notify_one();
            }
        }
    }

    /// The app is done: stop reading the request body and forget parked futures.
    fn release(&self, st: &mut HttpState) {
        self.ctx.relay.leave_batch(&self.batch);
        st.body = RequestBody::Done;
        if let Some(start) = &self.ex.body_start {
            start.notify_one();
        }
        st.waiters.clear();
        self.ex.disarm_receive();
    }
}

#[pymethods]
impl HttpProtocol {
    fn receive(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut st = self.ex.state();
        self.receive_called(&mut st);
        waiters::receive(py, &self.ctx, &self.ex, &mut st)
    }

    fn send(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let message = as_dict(message)?;
        let kind = message_type(message)?;
        let kind = kind.to_str()?;
        let mut st = self.ex.state();
        match kind {
            "http.response.start" => {
                if !matches!(st.response, ResponsePhase::Idle(_)) {
                    return Err(self.start_out_of_turn(&st));
                }
                let (status, headers) = parse_response_start(message)?;
                let trailers = parse_trailers_flag(message)?;
                self.hold_start(py, &mut st, status, headers, trailers)
            }
            "http.response.body" => {
                let (body, more_body) = parse_response_body(message)?;
                self.send_body(py, &mut st, body, more_body)
            }
            "http.response.trailers" => {
                let (headers, more_trailers) = parse_response_trailers(message)?;
                self.send_trailers(py, &mut st, headers, more_trailers)
            }
            other => Err(PyValueError::new_err(format!(
                "Unexpected ASGI message type {other:?} for an HTTP request (expected \
                 'http.response.start', 'http.response.body' or 'http.response.trailers')"
            ))),
        }
    }

    /// The app returned. A str names a protocol fault for the error log.
    pub(crate) fn complete(&self) -> Option<&'static str> {
        let mut st = self.ex.state();
        let fault = match &st.response {
            ResponsePhase::Idle(_) => self
                .fail_response(&mut st)
                .map(|_| "ASGI callable returned without starting a response; sent 500"),
            ResponsePhase::Held { .. } => self
                .fail_response(&mut st)
                .map(|_| "ASGI callable returned without sending a response body; sent 500"),
            ResponsePhase::Streaming(_) => self
                .fail_response(&mut st)
                .map(|_| "ASGI callable returned without completing the response; aborted it"),
            ResponsePhase::Trailers { .. } => {
                if let ResponsePhase::Trailers { tx: Some(tx), .. } =
                    std::mem::replace(&mut st.response, ResponsePhase::Complete)
                {
                    self.end_without_trailers(tx);
                }
                Some(
                    "ASGI callable promised trailers but returned without sending \
                     'http.response.trailers'; ended the response without them",
                )
            }
            _ => self.fail_response(&mut st),
        };
        self.release(&mut st);
        fault
    }

    /// The app raised. Returns whether the exception deserves an error log.
    pub(crate) fn fail(&self, py: Python<'_>, exc: &Bound<'_, PyAny>) -> bool {
        let mut st = self.ex.state();
        self.fail_response(&mut st);
        self.release(&mut st);
        waiters::worth_logging(py, exc)
    }

    /// (client "host:port", method, path?query, http_version, status, body bytes sent,
    /// seconds since the request arrived).
    #[allow(clippy::type_complexity)]
    fn access_info(&self) -> (String, String, String, &'static str, u16, u64, f64) {
        let st = self.ex.state();
        let (client, path) = waiters::access_client_and_path(self.line.peer, &self.line.uri);
        let version = match self.line.version {
            Version::HTTP_10 => "1.0",
            Version::HTTP_2 => "2",
            _ => "1.1",
        };
        (
            client,
            self.line.method.as_str().to_owned(),
            path,
            version,
            st.status,
            st.bytes_sent,
            st.received_at.elapsed().as_secs_f64(),
        )
    }
}
