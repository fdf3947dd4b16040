//! `HttpProtocol`: the `receive`/`send` pair one HTTP request hands to the app.
//!
//! Both complete synchronously whenever they can (ARCHITECTURE.md, hot path steps 5–6) and
//! only fall back to an asyncio future when they must wait for tokio: a body chunk not yet
//! read, or a full response channel (backpressure). Which response message may come when,
//! and what it does, is response.rs: `send()` here converts the message, performs what that
//! decides, and raises what it refuses.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, Version};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict};

use crate::access_log::json::RequestFields;
use crate::asgi::access::{self, version_text, AccessLog, CallAccess, Outcome};
use crate::asgi::errors::log_warning;
use crate::asgi::loop_ctx::LoopCtx;
use crate::asgi::messages::{
    as_dict, body_bytes, message_type, parse_early_hint, parse_pathsend, parse_response_body,
    parse_response_start, parse_response_trailers, parse_trailers_flag, parse_zerocopysend,
};
use crate::asgi::response::{Action, End, Fault, HeadBody, Incoming};
use crate::asgi::waiters::{self, client_disconnected, Channel};
use crate::bridge::{
    BodyTx, CloseGuard, FileSource, OpenError, OutChunk, ResponseBody, RoomWaiter, SpanError,
};
use crate::bridge::{
    DeferredMessage, DeferredSend, EarlyHint, HttpCloseGuard, HttpExchange, HttpState, RequestBody,
};
use crate::bridge::{PendingRequest, Waiters};
use crate::http::responses::{build_response, error_response};

/// What the access log needs; moved out of the request head before the scope is built.
pub(crate) struct RequestLine {
    pub(crate) method: Method,
    pub(crate) uri: Uri,
    pub(crate) version: Version,
    pub(crate) peer: Option<SocketAddr>,
    /// Response trailers can reach the client (`PendingRequest::trailers`).
    pub(crate) trailers: bool,
    /// `http.response.early_hint` can reach the client (`PendingRequest::early_hints`).
    pub(crate) early_hints: bool,
    /// The headers the JSON access line shows; only with `--log-format json`.
    pub(crate) fields: Option<Box<RequestFields>>,
}

impl RequestLine {
    /// What the access log and the response rules keep of `req`'s head (both dispatch paths).
    pub(crate) fn of(req: &PendingRequest, log: Option<&AccessLog>) -> Self {
        RequestLine {
            method: req.head.method.clone(),
            uri: req.head.uri.clone(),
            version: req.head.version,
            peer: req.conn.peer,
            trailers: req.trailers,
            early_hints: req.early_hints,
            fields: access::request_fields(log, &req.head.headers),
        }
    }
}

/// The warning about HTTP/1.1 trailers without a `Trailer` field is logged once per process.
static UNNAMED_TRAILERS_WARNED: AtomicBool = AtomicBool::new(false);

#[pyclass(frozen, module = "ferrocorn._ferrocorn")]
pub(crate) struct HttpProtocol {
    pub(crate) ex: Arc<HttpExchange>,
    ctx: Arc<LoopCtx>,
    line: RequestLine,
    /// The drain batch this request belongs to until its response completes (relay.rs).
    batch: AtomicU64,
    access: CallAccess,
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

/// The exception the app sees for a response fault (response.rs): ClientDisconnected, a
/// ValueError for its own headers, a RuntimeError for a message out of turn.
fn fault_error(fault: Fault) -> PyErr {
    match fault {
        Fault::Disconnected => client_disconnected(),
        Fault::InvalidContentLength(_) | Fault::ContentLengthsDisagree => {
            PyValueError::new_err(fault.to_string())
        }
        _ => PyRuntimeError::new_err(fault.to_string()),
    }
}

/// The file of `http.response.pathsend`, opened now so that `send()` raises before anything
/// went out: the OSError subclass of the failure (FileNotFoundError, PermissionError,
/// IsADirectoryError...) naming the path, or ValueError for a relative path or a file that
/// is not a regular one.
fn open_file(path: &std::path::Path) -> PyResult<FileSource> {
    FileSource::open(path).map_err(|err| match err {
        OpenError::NotAbsolute => PyValueError::new_err(format!(
            "'path' of 'http.response.pathsend' must be absolute, got {:?}",
            path.display().to_string()
        )),
        OpenError::NotAFile => match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => PyOSError::new_err((
                libc::EISDIR,
                "Is a directory (http.response.pathsend)",
                path.display().to_string(),
            )),
            _ => PyValueError::new_err(format!(
                "'path' of 'http.response.pathsend' is not a regular file: {:?}",
                path.display().to_string()
            )),
        },
        OpenError::Io(io) => PyOSError::new_err((
            io.raw_os_error().unwrap_or(libc::EIO),
            format!("{io} (http.response.pathsend)"),
            path.display().to_string(),
        )),
    })
}

/// The span of `http.response.zerocopysend`, on a duplicate of the app's descriptor, checked
/// against the file now: ValueError naming the key for a span past the end or a descriptor
/// that is not a regular file (a pipe or socket has no size to frame the body with), the
/// OSError subclass of a failed dup or fstat (a closed descriptor: EBADF).
fn zerocopy_span(
    fd: std::os::fd::RawFd,
    offset: Option<u64>,
    count: Option<u64>,
) -> PyResult<FileSource> {
    FileSource::dup_span(fd, offset, count).map_err(|err| match err {
        SpanError::NotAFile => PyValueError::new_err(format!(
            "'file' of 'http.response.zerocopysend' must be a regular file (descriptor {fd} \
             is a pipe, socket, directory or device)"
        )),
        SpanError::OffsetPastEnd { offset, size } => PyValueError::new_err(format!(
            "'offset' {offset} of 'http.response.zerocopysend' is past the end of the file \
             ({size} bytes)"
        )),
        SpanError::CountPastEnd {
            offset,
            count,
            size,
        } => PyValueError::new_err(format!(
            "'count' {count} of 'http.response.zerocopysend' goes past the end of the file: \
             {} bytes from offset {offset} ({size} bytes)",
            size - offset
        )),
        SpanError::Io(io) => PyOSError::new_err((
            io.raw_os_error().unwrap_or(libc::EIO),
            format!("{io} ('file' of http.response.zerocopysend)"),
        )),
    })
}

/// A `send()` while the previous one still waits for room would overtake it.
fn refuse_overlapping_send(st: &HttpState) -> PyResult<()> {
    if st.deferred.is_some() {
        return Err(PyRuntimeError::new_err(
            "send() called before the previous send() finished",
        ));
    }
    Ok(())
}

/// hyper is gone (the client left): a response or chunk could not be handed over.
pub(crate) struct Gone;

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
        self.client_gone();
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
            access: CallAccess::default(),
        }
    }

    /// The app call ended: the core's access line, when the core writes them.
    fn log_access(&self, outcome: Outcome) {
        let request = access::Request {
            peer: self.line.peer,
            method: self.line.method.as_str(),
            uri: &self.line.uri,
            version: version_text(self.line.version),
            fields: self.line.fields.as_deref(),
        };
        self.access
            .record(self.ctx.access_log.as_ref(), request, outcome);
    }

    /// The call's outcome for the access line, read while the state is locked.
    fn outcome(&self, st: &HttpState) -> Outcome {
        Outcome::new(self.ctx.access_log.as_ref(), st.status, || {
            (st.bytes_sent, st.received_at.elapsed().as_secs_f64())
        })
    }

    fn guard(&self) -> Option<HttpCloseGuard> {
        Some(CloseGuard::new(self.ex.clone()))
    }

    /// Whether promised trailers can reach the client (where
    /// `extensions["http.response.trailers"]` is advertised): HTTP/2, and HTTP/1.1 with
    /// `TE: trailers` — hyper's HTTP/1 server drops them without it.
    fn carries_trailers(&self) -> bool {
        self.line.trailers
    }

    /// Promised trailers never came: end the body cleanly without them rather than abort,
    /// since the body itself is whole. (Gone already: nothing to end.)
    fn end_without_trailers(&self, tx: BodyTx) {
        let _ = tx.send(OutChunk::Last(Bytes::new()));
    }

    /// The response's (or its connection's) body budget is used up: the message waits,
    /// its body not copied, until room appears (bridge/budget.rs); then `on_send_done`
    /// sends it as if `send()` were called then. `future` is the one the app already
    /// awaits when this is a retry. None: room appeared meanwhile, send it now.
    #[cold]
    fn defer(
        &self,
        slf: &Bound<'_, Self>,
        st: &mut HttpState,
        message: DeferredMessage,
        future: Option<Py<PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        if !self.arm_wait(st) {
            return Ok(None);
        }
        let future = match future {
            Some(future) => future,
            None => self.ctx.create_future.call0(py)?,
        };
        st.deferred = Some(DeferredSend {
            proto: slf.clone().into_any().unbind(),
            message,
            future: future.clone_ref(py),
        });
        Ok(Some(future))
    }

    /// Whether a body message must wait for room before it is taken apart.
    #[inline]
    pub(crate) fn must_wait(&self, st: &HttpState) -> bool {
        st.body_budget_full() && !self.ex.is_closed()
    }

    /// A send must wait for room: ask to be told (`Event::SendDone`) when room appears.
    /// False when room appeared meanwhile: send now.
    pub(crate) fn arm_wait(&self, st: &HttpState) -> bool {
        // Armed before registering: a room() right after must find it armed.
        self.ex.arm_send();
        let waiter: Arc<dyn RoomWaiter> = self.ex.clone();
        st.wait_for_room(&Arc::downgrade(&waiter))
    }

    /// `send()`, or the retry of a deferred one (`future`: what the app awaits).
    fn deliver(
        slf: &Bound<'_, Self>,
        message: &Bound<'_, PyAny>,
        future: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let this = slf.get();
        this.deliver_with(slf.py(), message, |st, deferred| {
            this.defer(slf, st, deferred, future)
        })
    }

    /// `send(message)` of a request the PyPy fast path runs (asgi/pypy/fast.rs), for the
    /// messages it does not take apart itself: the awaitable, or None when a budget is full
    /// and the message must wait (nothing was taken; an `Event::SendDone` follows, after
    /// which the fast path sends it again).
    #[cfg(PyPy)]
    pub(crate) fn deliver_unparked(
        &self,
        py: Python<'_>,
        message: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        self.deliver_with(py, message, |st, _| {
            Ok(self.arm_wait(st).then(|| py.None()))
        })
    }

    /// The message's parse and delivery; `wait` is called when a body budget is full,
    /// returning what `send()` returns while the message waits, or None when room appeared
    /// meanwhile (then it is sent now).
    fn deliver_with(
        &self,
        py: Python<'_>,
        message: &Bound<'_, PyAny>,
        wait: impl FnOnce(&mut HttpState, DeferredMessage) -> PyResult<Option<Py<PyAny>>>,
    ) -> PyResult<Py<PyAny>> {
        let this = self;
        let message = as_dict(message)?;
        let kind = message_type(message)?;
        let kind = kind.to_str()?;
        let mut st = this.ex.state();
        refuse_overlapping_send(&st)?;
        match kind {
            "http.response.start" => {
                this.check_start(&st)?;
                let (status, headers) = parse_response_start(message)?;
                let trailers = parse_trailers_flag(message)?;
                this.hold_start(py, &mut st, status, headers, trailers)
            }
            "http.response.body" => {
                if this.must_wait(&st) {
                    let deferred = DeferredMessage::Message(message.clone().unbind());
                    if let Some(waits) = wait(&mut st, deferred)? {
                        return Ok(waits);
                    }
                }
                let (body, more_body) = parse_response_body(message)?;
                this.send_body(py, &mut st, body, more_body)
            }
            "http.response.trailers" => {
                let (headers, more_trailers) = parse_response_trailers(message)?;
                this.send_trailers(py, &mut st, headers, more_trailers)
            }
            "http.response.zerocopysend" => {
                if this.must_wait(&st) {
                    let deferred = DeferredMessage::Message(message.clone().unbind());
                    if let Some(waits) = wait(&mut st, deferred)? {
                        return Ok(waits);
                    }
                }
                let send = parse_zerocopysend(message)?;
                let file = zerocopy_span(send.fd, send.offset, send.count)?;
                let action = st
                    .response_zerocopy(file, send.more_body, this.carries_trailers())
                    .map_err(fault_error)?;
                this.perform(py, &mut st, action)
            }
            "http.response.early_hint" => {
                let links = parse_early_hint(message)?;
                // Validated everywhere, sent only where it can reach the client.
                let hint = this.line.early_hints.then_some(EarlyHint { links });
                st.early_hint(hint, this.ex.is_closed())
                    .map_err(fault_error)?;
                Ok(this.ctx.done.clone_ref(py))
            }
            "http.response.pathsend" => {
                let path = parse_pathsend(message)?;
                let file = open_file(&path)?;
                let action = st.response_file(file).map_err(fault_error)?;
                this.perform(py, &mut st, action)
            }
            other => Err(PyValueError::new_err(format!(
                "Unexpected ASGI message type {other:?} for an HTTP request (expected \
                 'http.response.start', 'http.response.body', 'http.response.trailers', \
                 'http.response.pathsend', 'http.response.zerocopysend' or \
                 'http.response.early_hint')"
            ))),
        }
    }

    /// PyPy's `send_body_bytes`, or its retry once deferred.
    pub(crate) fn deliver_body(
        slf: &Bound<'_, Self>,
        body: &Bound<'_, PyAny>,
        more_body: bool,
        future: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let this = slf.get();
        let mut st = this.ex.state();
        refuse_overlapping_send(&st)?;
        if this.must_wait(&st) {
            let deferred = DeferredMessage::Body(body.clone().unbind(), more_body);
            if let Some(waits) = this.defer(slf, &mut st, deferred, future)? {
                return Ok(waits);
            }
        }
        let body = body_bytes(body, "body")?;
        this.send_body(slf.py(), &mut st, body, more_body)
    }

    /// tokio reported a change (body chunk, close): wake parked receivers.
    pub(crate) fn on_receive_event(py: Python<'_>, ex: &Arc<HttpExchange>) -> PyResult<()> {
        waiters::on_receive_event(py, ex)
    }

    /// A body budget has room again (or the client left): send the deferred message, and
    /// complete (or fail) the future the app awaits with the outcome.
    pub(crate) fn on_send_done(py: Python<'_>, ex: &Arc<HttpExchange>) -> PyResult<()> {
        let Some(deferred) = ex.state().deferred.take() else {
            return Ok(()); // a second wake for the same wait
        };
        let future = deferred.future.bind(py);
        if waiters::future_done(future) {
            return Ok(()); // cancelled: the app no longer waits for it, nothing is sent
        }
        let proto = deferred.proto.bind(py).downcast::<HttpProtocol>()?;
        let reuse = Some(deferred.future.clone_ref(py));
        let outcome = match &deferred.message {
            DeferredMessage::Message(message) => Self::deliver(proto, message.bind(py), reuse),
            DeferredMessage::Body(body, more) => {
                Self::deliver_body(proto, body.bind(py), *more, reuse)
            }
        };
        match outcome {
            Ok(result) if result.is(future) => Ok(()), // still no room: waits again
            Ok(_) => future
                .call_method1(intern!(py, "set_result"), (py.None(),))
                .map(drop),
            Err(err) => future
                .call_method1(intern!(py, "set_exception"), (err.into_value(py),))
                .map(drop),
        }
    }

    fn response_done(&self, py: Python<'_>, st: &mut HttpState) -> PyResult<()> {
        self.ctx.relay.leave_batch(&self.batch);
        // A receive() parked waiting for more (e.g. a disconnect watcher) now gets
        // http.disconnect: the spec's "after the response has been sent".
        waiters::resolve_receivers(py, &self.ex, st)
    }

    /// Carry out what the state machine decided (response.rs). Inlined into each caller:
    /// `send()` of a plaintext response is the hot path, and a call here cost it ~70
    /// instructions (callgrind) in moving the `Action` and matching it apart from its making.
    #[inline(always)]
    fn perform(&self, py: Python<'_>, st: &mut HttpState, action: Action) -> PyResult<Py<PyAny>> {
        if self
            .carry_out(st, action)
            .map_err(|Gone| client_disconnected())?
        {
            self.response_done(py, st)?;
        }
        Ok(self.ctx.done.clone_ref(py))
    }

    /// The part of `perform` that needs no Python: hands the response or chunk to hyper.
    /// Ok(true) when the response is now complete; Err when hyper is gone (the client left).
    #[inline(always)]
    pub(crate) fn carry_out(&self, st: &mut HttpState, action: Action) -> Result<bool, Gone> {
        match action {
            Action::Respond {
                tx,
                status,
                headers,
                body,
            } => {
                let body = match body {
                    HeadBody::Empty => ResponseBody::empty(self.guard()),
                    HeadBody::Full(data) => ResponseBody::full(data, self.guard()),
                    HeadBody::Stream(rx) => ResponseBody::stream(rx, self.guard()),
                    HeadBody::File(file) => ResponseBody::file(file, self.guard()),
                };
                let response = build_response(&self.ctx.config, status, headers, body);
                if tx.send(response).is_err() {
                    st.client_gone();
                    return Err(Gone);
                }
                Ok(st.response_complete())
            }
            Action::Push { tx, chunk, queued } => {
                // Never waits here: a full budget made send() wait before the message was
                // taken apart (`defer`).
                if tx.send(chunk).is_err() {
                    st.client_gone();
                    return Err(Gone);
                }
                Ok(st.queued(queued, tx))
            }
            Action::Nothing => Ok(false),
            Action::Done => Ok(true),
        }
    }

    /// Carry out what is left once the app is done (response.rs `End`): usually nothing,
    /// checked inline (a call here cost every request ~20 instructions, callgrind).
    #[inline]
    fn finish(&self, end: End) {
        if !matches!(end, End::Nothing | End::Aborted) {
            self.finish_unfinished(end);
        }
    }

    #[cold]
    fn finish_unfinished(&self, end: End) {
        match end {
            End::Nothing | End::Aborted => {}
            End::Send500(tx) => {
                let response = error_response(&self.ctx.config, StatusCode::INTERNAL_SERVER_ERROR);
                let _ = tx.send(response.map(|text| ResponseBody::full(text, self.guard())));
            }
            End::SendTimedOut(tx) => {
                let mut response =
                    error_response(&self.ctx.config, StatusCode::SERVICE_UNAVAILABLE);
                // The server gave up on this request, not on the client: a retry may succeed.
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static("1"));
                let _ = tx.send(response.map(|text| ResponseBody::full(text, self.guard())));
            }
            End::FinishBody(tx) => self.end_without_trailers(tx),
        }
    }

    /// The request could not be handed to the app: answer 500 (or abort) and clean up.
    pub(crate) fn fail_internal(&self) {
        let mut st = self.ex.state();
        let end = st.app_failed(self.ex.is_closed());
        self.finish(end);
        self.release(&mut st);
    }

    /// Whether `http.response.start` may come now (asked before parsing it, so this fault
    /// comes before any in the message).
    pub(crate) fn check_start(&self, st: &HttpState) -> PyResult<()> {
        st.check_start().map_err(fault_error)
    }

    /// A validated `http.response.start`, held until the first body message.
    pub(crate) fn hold_start(
        &self,
        py: Python<'_>,
        st: &mut HttpState,
        status: StatusCode,
        headers: HeaderMap,
        trailers: bool,
    ) -> PyResult<Py<PyAny>> {
        st.response_start(status, headers, trailers, self.ex.is_closed())
            .map_err(fault_error)?;
        if trailers && self.line.trailers && self.line.version < Version::HTTP_2 {
            self.chunk_for_trailers(py, st);
        }
        Ok(self.ctx.done.clone_ref(py))
    }

    /// HTTP/1.1 trailers go in a chunked body, naming their fields in the head's `Trailer`
    /// field. Without one they cannot be sent (hyper writes only named fields): the app
    /// hears of it once per process, in the log.
    #[cold]
    fn chunk_for_trailers(&self, py: Python<'_>, st: &mut HttpState) {
        if !st.chunk_for_trailers() && !UNNAMED_TRAILERS_WARNED.swap(true, Ordering::Relaxed) {
            let _ = log_warning(
                py,
                "An HTTP/1.1 response promised trailers without a 'trailer' header naming \
                 them: over HTTP/1.1 only the trailer fields named there are sent, so these \
                 are dropped (logged once)",
            );
        }
    }

    /// A validated `http.response.body`.
    pub(crate) fn send_body(
        &self,
        py: Python<'_>,
        st: &mut HttpState,
        body: Bytes,
        more_body: bool,
    ) -> PyResult<Py<PyAny>> {
        let action = st
            .response_body(body, more_body, self.carries_trailers())
            .map_err(fault_error)?;
        self.perform(py, st, action)
    }

    /// A validated `http.response.trailers`.
    fn send_trailers(
        &self,
        py: Python<'_>,
        st: &mut HttpState,
        headers: HeaderMap,
        more_trailers: bool,
    ) -> PyResult<Py<PyAny>> {
        let action = st
            .response_trailers(headers, more_trailers)
            .map_err(fault_error)?;
        self.perform(py, st, action)
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
        st.deferred = None;
        self.ex.disarm_receive();
    }
}

/// What a send of the PyPy fast path did (asgi/pypy/fast.rs), as the code its C functions
/// return.
#[cfg_attr(not(PyPy), allow(dead_code))]
pub(crate) enum Sent {
    /// Handed over; the response goes on.
    Done = 0,
    /// Handed over, and the response is complete: parked receivers get `http.disconnect`.
    Complete = 1,
    /// A body budget is full: nothing was taken; an `Event::SendDone` follows.
    Wait = 2,
    /// The client is gone (`ClientDisconnected`).
    Disconnected = 3,
    /// Refused: the message itself, sent the slow way, raises the error that names it.
    Fault = 4,
}

/// The operations the PyPy fast path performs without Python objects: the same state
/// transitions as `send()`, `receive()`, `complete()` and `fail()`, reported as plain values.
#[cfg_attr(not(PyPy), allow(dead_code))]
impl HttpProtocol {
    /// `http.response.start` with headers already checked (`unpack_headers`). Promised
    /// trailers take the slow way (`Fault`), which knows how to chunk for them.
    pub(crate) fn send_start_plain(&self, status: StatusCode, headers: HeaderMap) -> Sent {
        let mut st = self.ex.state();
        if st.deferred.is_some() || st.check_start().is_err() {
            return Sent::Fault;
        }
        match st.response_start(status, headers, false, self.ex.is_closed()) {
            Ok(()) => Sent::Done,
            Err(_) => Sent::Fault,
        }
    }

    /// `http.response.body` with bytes.
    pub(crate) fn send_body_plain(&self, body: &[u8], more_body: bool) -> Sent {
        let mut st = self.ex.state();
        if st.deferred.is_some() {
            return Sent::Fault;
        }
        if self.must_wait(&st) && self.arm_wait(&st) {
            return Sent::Wait;
        }
        let action = match st.response_body(
            Bytes::copy_from_slice(body),
            more_body,
            self.carries_trailers(),
        ) {
            Ok(action) => action,
            Err(Fault::Disconnected) => return Sent::Disconnected,
            Err(_) => return Sent::Fault,
        };
        match self.carry_out(&mut st, action) {
            Ok(true) => {
                self.ctx.relay.leave_batch(&self.batch);
                Sent::Complete
            }
            Ok(false) => Sent::Done,
            Err(Gone) => Sent::Disconnected,
        }
    }

    /// `receive()`: what is ready now; on `Wait` the exchange is armed, so an
    /// `Event::Receive` follows the next change.
    pub(crate) fn receive_plain(&self) -> Incoming {
        let mut st = self.ex.state();
        self.receive_called(&mut st);
        match st.next_incoming(&self.ex) {
            Incoming::Wait => {}
            ready => return ready,
        }
        // Armed before looking again, so a change landing in between is not missed.
        self.ex.arm_receive();
        let again = st.next_incoming(&self.ex);
        if !matches!(again, Incoming::Wait) {
            self.ex.disarm_receive();
        }
        again
    }

    /// The app returned: as `complete()`.
    pub(crate) fn complete_plain(&self) -> Option<&'static str> {
        self.complete()
    }

    /// The app raised or was cancelled: as `fail()`, without the exception (the caller
    /// decides whether it is logged).
    pub(crate) fn fail_plain(&self) {
        let mut st = self.ex.state();
        let end = st.app_failed(self.ex.is_closed());
        self.finish(end);
        self.release(&mut st);
        let outcome = self.outcome(&st);
        drop(st);
        self.log_access(outcome);
    }
}

#[pymethods]
impl HttpProtocol {
    fn receive(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut st = self.ex.state();
        self.receive_called(&mut st);
        waiters::receive(py, &self.ctx, &self.ex, &mut st)
    }

    fn send(slf: &Bound<'_, Self>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        Self::deliver(slf, message, None)
    }

    /// The app returned. A str names a protocol fault for the error log.
    pub(crate) fn complete(&self) -> Option<&'static str> {
        let mut st = self.ex.state();
        let (end, fault) = st.app_returned(self.ex.is_closed());
        self.finish(end);
        self.release(&mut st);
        let outcome = self.outcome(&st);
        drop(st);
        self.log_access(outcome);
        fault
    }

    /// The app raised. Returns whether the exception deserves an error log.
    pub(crate) fn fail(&self, py: Python<'_>, exc: &Bound<'_, PyAny>) -> bool {
        self.fail_plain();
        waiters::worth_logging(py, exc)
    }

    /// `--timeout-request` is cancelling the app (python/ferrocorn/_asgi.py): if nothing
    /// was sent, the client gets 503 with Retry-After instead of the 500 of a failure.
    fn timed_out(&self) {
        self.ex.state().timed_out = true;
    }

    /// Seconds from the request's arrival (before any wait in the admission queue) to now;
    /// the metrics runner asks as the app call starts.
    fn waited(&self) -> f64 {
        self.ex.state().received_at.elapsed().as_secs_f64()
    }

    /// The client the access line names (the proxy headers' rewrite of the scope); set
    /// before the app runs, by the runner.
    fn set_access_client(&self, client: String) {
        self.access.set_client(client);
    }

    /// (client "host:port", method, path?query, http_version, status, body bytes sent,
    /// seconds since the request arrived).
    #[allow(clippy::type_complexity)]
    fn access_info(&self) -> (String, String, String, &'static str, u16, u64, f64) {
        let st = self.ex.state();
        let (client, path) = waiters::access_client_and_path(self.line.peer, &self.line.uri);
        let version = version_text(self.line.version);
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
