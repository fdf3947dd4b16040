//! `WebSocketProtocol`: the ASGI WebSocket `receive`/`send` pair (spec 2.5), on the loop
//! thread. tokio runs the handshake and the frames (`ws::session`); this side turns app
//! messages into decisions and frames, and frames into `websocket.*` events.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, StatusCode, Uri, Version};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyString};
use tokio::sync::mpsc::{self, error::TryRecvError};

use crate::access_log::json::RequestFields;
use crate::asgi::access::{self, CallAccess, Outcome};
use crate::asgi::loop_ctx::LoopCtx;
use crate::asgi::messages::{
    as_dict, body_bytes, message_type, parse_headers, parse_response_start, type_name,
};
use crate::asgi::waiters::{self, client_disconnected, Channel};
use crate::asgi::ws_send::{self, Payload, WsAction, WsEnd, WsFault};
use crate::bridge::{
    Budgets, CloseInfo, Exchange, ResponseBody, RoomWaiter, Waiters, WsDecision, WsIn, WsOut,
    WsPhase, WsState,
};
use crate::http::responses::build_response;
use crate::ws::stream::MaskedPayload;

/// Outbound frames queued ahead of the socket before `send()` waits.
const OUTBOUND_QUEUE: usize = 16;

fn simple_message<'py>(
    py: Python<'py>,
    kind: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), kind)?;
    Ok(d)
}

fn disconnect_message(py: Python<'_>, info: CloseInfo) -> PyResult<Bound<'_, PyDict>> {
    let d = simple_message(py, intern!(py, "websocket.disconnect"))?;
    d.set_item(intern!(py, "code"), info.code)?;
    d.set_item(intern!(py, "reason"), info.reason)?;
    Ok(d)
}

impl Channel for WsState {
    fn next_message<'py>(
        &mut self,
        py: Python<'py>,
        ex: &Exchange<Self>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        if !self.connect_sent {
            self.connect_sent = true;
            return simple_message(py, intern!(py, "websocket.connect")).map(Some);
        }
        let closed_info = || ex.close_info().unwrap_or_else(CloseInfo::abnormal);
        match &self.phase {
            WsPhase::Connecting(_) | WsPhase::Denying { .. } => {
                if ex.is_closed() {
                    return disconnect_message(py, CloseInfo::abnormal()).map(Some);
                }
                Ok(None)
            }
            WsPhase::Open(_) => match self.inbound.try_recv() {
                Ok(WsIn::Text(text)) => {
                    let d = simple_message(py, intern!(py, "websocket.receive"))?;
                    // The reader validated it; this check cannot fail (and is cheap next to
                    // the copy into the Python string).
                    let text = std::str::from_utf8(&text)
                        .map_err(|e| PyValueError::new_err(e.to_string()))?;
                    d.set_item(intern!(py, "text"), PyString::new(py, text))?;
                    Ok(Some(d))
                }
                Ok(WsIn::Binary(data)) => {
                    let d = simple_message(py, intern!(py, "websocket.receive"))?;
                    d.set_item(intern!(py, "bytes"), PyBytes::new(py, &data))?;
                    Ok(Some(d))
                }
                Ok(WsIn::BinaryMasked(payload)) => {
                    let d = simple_message(py, intern!(py, "websocket.receive"))?;
                    d.set_item(intern!(py, "bytes"), unmasked_bytes(py, &payload)?)?;
                    Ok(Some(d))
                }
                Err(TryRecvError::Empty) if !ex.is_closed() => Ok(None),
                Err(_) => disconnect_message(py, closed_info()).map(Some),
            },
            WsPhase::Closed => {
                let info = ex
                    .close_info()
                    .or_else(|| self.app_close.clone())
                    .unwrap_or_else(CloseInfo::abnormal);
                disconnect_message(py, info).map(Some)
            }
        }
    }

    fn waiters(&mut self) -> &mut Waiters {
        &mut self.waiters
    }

    fn on_send_failed(&mut self) {
        self.client_gone();
    }
}

#[pyclass(frozen, module = "ferrocorn._ferrocorn")]
pub(crate) struct WebSocketProtocol {
    ex: Arc<Exchange<WsState>>,
    ctx: Arc<LoopCtx>,
    uri: Uri,
    peer: Option<SocketAddr>,
    /// HTTP/1.1 (an upgrade) or HTTP/2 (an extended CONNECT), for the access line.
    version: Version,
    access: CallAccess,
    /// The headers the JSON access line shows; only with `--log-format json`.
    fields: Option<Box<RequestFields>>,
}

/// The exception the app sees for a fault (ws_send.rs): ClientDisconnected, a ValueError
/// for a value a frame cannot carry, a RuntimeError for a message out of turn.
fn fault_error(fault: WsFault) -> PyErr {
    match fault {
        WsFault::Disconnected => client_disconnected(),
        WsFault::BothPayloads
        | WsFault::NoPayload
        | WsFault::CloseCode(_)
        | WsFault::ReasonTooLong(_) => PyValueError::new_err(fault.to_string()),
        _ => PyRuntimeError::new_err(fault.to_string()),
    }
}

/// `websocket.close`'s `code` and `reason`, each type-checked then validated, in that order.
fn close_info(message: &Bound<'_, PyDict>) -> PyResult<CloseInfo> {
    let py = message.py();
    let code = match message.get_item(intern!(py, "code"))? {
        None => None,
        Some(c) if c.is_none() => None,
        Some(c) => {
            if c.is_instance_of::<PyBool>() || !c.is_instance_of::<PyInt>() {
                return Err(PyTypeError::new_err(format!(
                    "'code' must be an int, got {}",
                    type_name(&c)
                )));
            }
            match c.extract::<u16>() {
                Ok(code) => Some(code),
                // Not even a u16: name it as Python shows it.
                Err(_) => {
                    let shown = c.str().map(|s| s.to_string()).unwrap_or_default();
                    return Err(fault_error(WsFault::CloseCode(shown)));
                }
            }
        }
    };
    let code = ws_send::close_code(code).map_err(fault_error)?;
    let reason = match message.get_item(intern!(py, "reason"))? {
        None => String::new(),
        Some(r) if r.is_none() => String::new(),
        Some(r) => r
            .downcast::<PyString>()
            .map_err(|_| {
                PyTypeError::new_err(format!("'reason' must be a str, got {}", type_name(&r)))
            })?
            .to_str()?
            .to_owned(),
    };
    ws_send::close_reason(&reason).map_err(fault_error)?;
    Ok(CloseInfo { code, reason })
}

/// `websocket.send`'s payload: exactly one of `bytes` and `text` is set.
fn payload(message: &Bound<'_, PyDict>) -> PyResult<WsOut> {
    let py = message.py();
    let bytes = message
        .get_item(intern!(py, "bytes"))?
        .filter(|b| !b.is_none());
    let text = message
        .get_item(intern!(py, "text"))?
        .filter(|t| !t.is_none());
    match ws_send::payload(bytes, text).map_err(fault_error)? {
        Payload::Bytes(b) => Ok(WsOut::Binary(body_bytes(&b, "bytes")?)),
        Payload::Text(t) => match t.downcast::<PyString>() {
            Ok(s) => Ok(WsOut::Text(Bytes::copy_from_slice(s.to_str()?.as_bytes()))),
            Err(_) => Err(PyTypeError::new_err(format!(
                "'text' must be a str, got {}",
                type_name(&t)
            ))),
        },
    }
}

/// `websocket.accept`'s `subprotocol`: a str or None.
fn subprotocol(message: &Bound<'_, PyDict>) -> PyResult<Option<String>> {
    let py = message.py();
    match message.get_item(intern!(py, "subprotocol"))? {
        Some(s) if !s.is_none() => Ok(Some(
            s.downcast::<PyString>()
                .map_err(|_| {
                    PyTypeError::new_err(format!(
                        "'subprotocol' must be a str or None, got {}",
                        type_name(&s)
                    ))
                })?
                .to_str()?
                .to_owned(),
        )),
        _ => Ok(None),
    }
}

impl WebSocketProtocol {
    pub(crate) fn new(
        ex: Arc<Exchange<WsState>>,
        ctx: Arc<LoopCtx>,
        uri: Uri,
        peer: Option<SocketAddr>,
        version: Version,
        fields: Option<Box<RequestFields>>,
    ) -> Self {
        WebSocketProtocol {
            ex,
            ctx,
            uri,
            peer,
            version,
            access: CallAccess::default(),
            fields,
        }
    }

    /// The status the line shows, as the client saw it: an accepted socket's is 101, or 200
    /// over HTTP/2 and 3 (RFC 8441 §5, RFC 9220 §3), where a 2xx denial went out as 403
    /// (`server/websocket.rs`).
    fn shown_status(&self, status: u16) -> u16 {
        match status {
            101 if self.version >= Version::HTTP_2 => 200,
            200..=299 if self.version >= Version::HTTP_2 => 403,
            _ => status,
        }
    }

    /// The session ended: the core's access line, when the core writes them.
    fn log_access(&self, status: u16) {
        let status = self.shown_status(status);
        let request = access::Request {
            peer: self.peer,
            method: "WEBSOCKET",
            uri: &self.uri,
            version: access::version_text(self.version),
            fields: self.fields.as_deref(),
        };
        // A session's line shows no bytes or duration, as access_info() does.
        let outcome = Outcome::new(None, status, || (0, 0.0));
        self.access
            .record(self.ctx.access_log.as_ref(), request, outcome);
    }

    pub(crate) fn on_receive_event(py: Python<'_>, ex: &Arc<Exchange<WsState>>) -> PyResult<()> {
        waiters::on_receive_event(py, ex)
    }

    pub(crate) fn on_send_done(py: Python<'_>, ex: &Arc<Exchange<WsState>>) -> PyResult<()> {
        waiters::on_send_done(py, ex)
    }

    /// The message just queued used up the connection's outgoing budget (bridge/budget.rs):
    /// `send()` completes once the writer has written enough of what is queued, so a client
    /// that stops reading holds at most the budget plus one message of ours.
    #[cold]
    fn wait_for_room(&self, py: Python<'_>, st: &mut WsState) -> PyResult<Py<PyAny>> {
        let Some(budgets) = &st.out_budget else {
            return Ok(self.ctx.done.clone_ref(py));
        };
        self.ex.arm_send();
        let waiter: Arc<dyn RoomWaiter> = self.ex.clone();
        if !budgets.wait_for_room(&Arc::downgrade(&waiter)) {
            self.ex.disarm_send();
            return Ok(self.ctx.done.clone_ref(py));
        }
        let fut = self.ctx.create_future.call0(py)?;
        // Completed by the SendDone that room (or the client leaving) brings, as a
        // backpressured send is (`waiters::on_send_done`).
        self.ex
            .send_ok
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let waiters = st.waiters();
        waiters.send = Some(fut.clone_ref(py));
        waiters.send_in_flight = true;
        Ok(fut)
    }

    /// Carry out what the state machine decided (ws_send.rs).
    fn perform(&self, py: Python<'_>, st: &mut WsState, action: WsAction) -> PyResult<Py<PyAny>> {
        let answer = match action {
            WsAction::Frame { tx, frame } => {
                let frame = match &st.out_budget {
                    Some(budgets) => frame.charged(budgets),
                    None => frame,
                };
                let sent = waiters::send_or_park(py, &self.ctx, &self.ex, st, &tx, frame)?;
                if sent.is(&self.ctx.done) && st.out_budget.as_ref().is_some_and(Budgets::is_full) {
                    return self.wait_for_room(py, st);
                }
                return Ok(sent);
            }
            WsAction::Nothing => return Ok(self.ctx.done.clone_ref(py)),
            WsAction::Forbid { tx, close } => {
                let response = ResponseBody::error(&self.ctx.config, StatusCode::FORBIDDEN);
                let sent = tx.send(WsDecision::Reject(response)).is_ok();
                if sent {
                    st.refused(close);
                }
                sent
            }
            WsAction::Deny {
                tx,
                status,
                headers,
                body,
            } => {
                let response = build_response(
                    &self.ctx.config,
                    status,
                    headers,
                    ResponseBody::full(body, None),
                );
                tx.send(WsDecision::Reject(response)).is_ok()
            }
        };
        if !answer {
            return Err(client_disconnected());
        }
        // The handshake is answered: a parked receive() gets what follows.
        waiters::resolve_receivers(py, &self.ex, st)?;
        Ok(self.ctx.done.clone_ref(py))
    }

    /// Carry out what is left once the app is done (ws_send.rs `WsEnd`).
    fn finish(&self, end: WsEnd) {
        match end {
            WsEnd::Nothing => {}
            WsEnd::Refuse500(tx) => {
                let response =
                    ResponseBody::error(&self.ctx.config, StatusCode::INTERNAL_SERVER_ERROR);
                let _ = tx.send(WsDecision::Reject(response));
            }
            WsEnd::Close(tx, code) => self.close_from_server(tx, code),
        }
    }

    /// Queue a close frame even when the outbound queue is full.
    fn close_from_server(&self, tx: mpsc::Sender<WsOut>, code: u16) {
        let close = WsOut::Close {
            code,
            reason: String::new(),
        };
        if let Err(mpsc::error::TrySendError::Full(close)) = tx.try_send(close) {
            self.ctx.runtime.spawn(async move {
                let _ = tx.send(close).await;
            });
        }
    }

    /// The handshake could not be handed to the app: refuse it with 500.
    pub(crate) fn fail_internal(&self) {
        let mut st = self.ex.state();
        let end = st.app_failed();
        self.finish(end);
        self.release(&mut st);
    }

    /// `websocket.accept`: hand tokio the accept with a fresh outbound channel.
    fn accept(
        &self,
        py: Python<'_>,
        st: &mut WsState,
        message: &Bound<'_, PyDict>,
    ) -> PyResult<Py<PyAny>> {
        let subprotocol = subprotocol(message)?;
        let headers = match message.get_item(intern!(py, "headers"))? {
            Some(h) if !h.is_none() => parse_headers(&h, "headers", true)?,
            _ => HeaderMap::new(),
        };
        let tx = st.accept().map_err(fault_error)?;
        let (out_tx, out_rx) = mpsc::channel(OUTBOUND_QUEUE);
        let decision = WsDecision::Accept {
            subprotocol,
            headers,
            outbound: out_rx,
        };
        if tx.send(decision).is_err() {
            return Err(client_disconnected());
        }
        st.opened(out_tx);
        st.out_budget = Some(Budgets::new(self.ctx.config.limit_response_buffer, None));
        waiters::resolve_receivers(py, &self.ex, st)?;
        Ok(self.ctx.done.clone_ref(py))
    }

    /// `websocket.send`: a text or binary frame.
    fn send_frame(
        &self,
        py: Python<'_>,
        st: &mut WsState,
        message: &Bound<'_, PyDict>,
    ) -> PyResult<Py<PyAny>> {
        let frame = payload(message)?;
        let action = st.send(frame).map_err(fault_error)?;
        self.perform(py, st, action)
    }

    /// `websocket.close`: a 403 before accept, the close frame after.
    fn close(
        &self,
        py: Python<'_>,
        st: &mut WsState,
        message: &Bound<'_, PyDict>,
    ) -> PyResult<Py<PyAny>> {
        let info = close_info(message)?;
        let action = st.close(info).map_err(fault_error)?;
        self.perform(py, st, action)
    }

    /// `websocket.http.response.start`: a denial response begins (parsed only when one may).
    fn deny_start(
        &self,
        py: Python<'_>,
        st: &mut WsState,
        message: &Bound<'_, PyDict>,
    ) -> PyResult<Py<PyAny>> {
        st.check_deny().map_err(fault_error)?;
        let (status, headers) = parse_response_start(message)?;
        st.deny_start(status, headers).map_err(fault_error)?;
        Ok(self.ctx.done.clone_ref(py))
    }

    /// `websocket.http.response.body`: collected, and sent with the last one.
    fn deny_body(
        &self,
        py: Python<'_>,
        st: &mut WsState,
        message: &Bound<'_, PyDict>,
    ) -> PyResult<Py<PyAny>> {
        let body = match message.get_item(intern!(py, "body"))? {
            Some(b) => body_bytes(&b, "body")?,
            None => Bytes::new(),
        };
        let more = match message.get_item(intern!(py, "more_body"))? {
            Some(m) => m.is_truthy()?,
            None => false,
        };
        let action = st.deny_body(&body, more).map_err(fault_error)?;
        self.perform(py, st, action)
    }

    fn release(&self, st: &mut WsState) {
        st.waiters.clear();
        self.ex.disarm_receive();
    }
}

#[pymethods]
impl WebSocketProtocol {
    fn receive(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut st = self.ex.state();
        waiters::receive(py, &self.ctx, &self.ex, &mut st)
    }

    fn send(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let message = as_dict(message)?;
        let kind = message_type(message)?;
        let kind = kind.to_str()?;
        let mut st = self.ex.state();
        match kind {
            "websocket.accept" => self.accept(py, &mut st, message),
            "websocket.send" => self.send_frame(py, &mut st, message),
            "websocket.close" => self.close(py, &mut st, message),
            "websocket.http.response.start" => self.deny_start(py, &mut st, message),
            "websocket.http.response.body" => self.deny_body(py, &mut st, message),
            other => Err(PyValueError::new_err(format!(
                "Unexpected ASGI message type {other:?} for a WebSocket connection"
            ))),
        }
    }

    /// The app returned: refuse an unanswered handshake (500), close an open socket (1000).
    pub(crate) fn complete(&self) -> Option<&'static str> {
        let mut st = self.ex.state();
        let (end, fault) = st.app_returned(self.ex.is_closed());
        self.finish(end);
        self.release(&mut st);
        let status = st.status;
        drop(st);
        self.log_access(status);
        fault
    }

    pub(crate) fn fail(&self, py: Python<'_>, exc: &Bound<'_, PyAny>) -> bool {
        let mut st = self.ex.state();
        let end = st.app_failed();
        self.finish(end);
        self.release(&mut st);
        let status = st.status;
        drop(st);
        self.log_access(status);
        waiters::worth_logging(py, exc)
    }

    /// As `HttpProtocol.set_access_client`.
    fn set_access_client(&self, client: String) {
        self.access.set_client(client);
    }

    #[allow(clippy::type_complexity)]
    fn access_info(&self) -> (String, String, String, &'static str, u16, u64, f64) {
        let st = self.ex.state();
        let (client, path) = waiters::access_client_and_path(self.peer, &self.uri);
        (
            client,
            "WEBSOCKET".to_owned(),
            path,
            access::version_text(self.version),
            self.shown_status(st.status),
            0,
            0.0,
        )
    }
}

/// A `bytes` holding `payload` unmasked, written once: PyO3's `PyBytes::new_with` zeroes
/// the buffer first, a pass over the whole message that the copy then overwrites.
fn unmasked_bytes<'py>(py: Python<'py>, payload: &MaskedPayload) -> PyResult<Bound<'py, PyBytes>> {
    let len = isize::try_from(payload.len())
        .map_err(|_| PyValueError::new_err("WebSocket message too large"))?;
    // SAFETY: with a null source CPython (and PyPy's cpyext) allocate a `bytes` of `len`
    // bytes whose content the caller is to fill in before it is shared; the object is ours
    // alone until returned. `unmask_into` writes every byte of it: the payload's parts
    // (`head` and `chunks`) add up to its length by construction (`WsReader` gathers until
    // they do).
    unsafe {
        let object = pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), len);
        let bytes = Bound::from_owned_ptr_or_err(py, object)?.downcast_into_unchecked::<PyBytes>();
        let data = pyo3::ffi::PyBytes_AsString(bytes.as_ptr()).cast::<u8>();
        if data.is_null() {
            return Err(PyErr::fetch(py));
        }
        payload.unmask_into(std::slice::from_raw_parts_mut(data, payload.len()));
        Ok(bytes)
    }
}
