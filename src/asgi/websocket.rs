//! `WebSocketProtocol`: the ASGI WebSocket `receive`/`send` pair (spec 2.5), on the loop
//! thread. tokio runs the handshake and the frames (`ws::session`); this side turns app
//! messages into decisions and frames, and frames into `websocket.*` events.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, StatusCode, Uri};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyString};
use tokio::sync::mpsc::{self, error::TryRecvError};
use tokio::sync::oneshot;

use crate::asgi::messages::{
    as_dict, body_bytes, message_type, parse_headers, parse_response_start, type_name,
};
use crate::asgi::protocol::LoopCtx;
use crate::asgi::waiters::{self, client_disconnected, Channel};
use crate::bridge::body::ResponseBody;
use crate::bridge::exchange::Exchange;
use crate::bridge::waiters::Waiters;
use crate::bridge::websocket::{CloseInfo, WsDecision, WsIn, WsOut, WsPhase, WsState};
use crate::http::responses::build_response;
use crate::ws::frame::close_code_allowed;

/// Outbound frames queued ahead of the socket before `send()` waits.
const OUTBOUND_QUEUE: usize = 16;
/// RFC 6455 §5.5: a close frame's payload is at most 125 bytes, 2 of them the code.
const MAX_CLOSE_REASON: usize = 123;

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
            WsPhase::Open(_) | WsPhase::Closing => match self.inbound.try_recv() {
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
        self.phase = WsPhase::Closed;
    }
}

#[pyclass(frozen, module = "ferrocorn._ferrocorn")]
pub(crate) struct WebSocketProtocol {
    ex: Arc<Exchange<WsState>>,
    ctx: Arc<LoopCtx>,
    uri: Uri,
    peer: Option<SocketAddr>,
}

fn close_code(message: &Bound<'_, PyDict>) -> PyResult<CloseInfo> {
    let py = message.py();
    let code = match message.get_item(intern!(py, "code"))? {
        None => 1000,
        Some(c) if c.is_none() => 1000,
        Some(c) => {
            if c.is_instance_of::<PyBool>() || !c.is_instance_of::<PyInt>() {
                return Err(PyTypeError::new_err(format!(
                    "'code' must be an int, got {}",
                    type_name(&c)
                )));
            }
            // Only codes a close frame may carry (RFC 6455 §7.4): 1005, 1006 and 1015 report
            // a missing code or a broken connection and never go on the wire.
            c.extract::<u16>()
                .ok()
                .filter(|&c| close_code_allowed(c))
                .ok_or_else(|| {
                    let shown = c.str().map(|s| s.to_string()).unwrap_or_default();
                    PyValueError::new_err(format!(
                        "'code' must be a WebSocket close code that may be sent (1000-1003, \
                         1007-1014 or 3000-4999), got {shown}"
                    ))
                })?
        }
    };
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
    if reason.len() > MAX_CLOSE_REASON {
        return Err(PyValueError::new_err(format!(
            "'reason' is {} bytes long in UTF-8; a close frame allows at most {MAX_CLOSE_REASON}",
            reason.len()
        )));
    }
    Ok(CloseInfo { code, reason })
}

/// `websocket.send`: exactly one of `bytes` and `text` is set.
fn payload(message: &Bound<'_, PyDict>) -> PyResult<WsOut> {
    let py = message.py();
    let bytes = message
        .get_item(intern!(py, "bytes"))?
        .filter(|b| !b.is_none());
    let text = message
        .get_item(intern!(py, "text"))?
        .filter(|t| !t.is_none());
    match (bytes, text) {
        (Some(b), None) => Ok(WsOut::Binary(body_bytes(&b, "bytes")?)),
        (None, Some(t)) => match t.downcast::<PyString>() {
            Ok(s) => Ok(WsOut::Text(s.to_str()?.to_owned())),
            Err(_) => Err(PyTypeError::new_err(format!(
                "'text' must be a str, got {}",
                type_name(&t)
            ))),
        },
        (Some(_), Some(_)) => Err(PyValueError::new_err(
            "'websocket.send' must set exactly one of 'bytes' and 'text', not both",
        )),
        (None, None) => Err(PyValueError::new_err(
            "'websocket.send' must set one of 'bytes' or 'text'",
        )),
    }
}

impl WebSocketProtocol {
    pub(crate) fn new(
        ex: Arc<Exchange<WsState>>,
        ctx: Arc<LoopCtx>,
        uri: Uri,
        peer: Option<SocketAddr>,
    ) -> Self {
        WebSocketProtocol { ex, ctx, uri, peer }
    }

    pub(crate) fn on_receive_event(py: Python<'_>, ex: &Arc<Exchange<WsState>>) -> PyResult<()> {
        waiters::on_receive_event(py, ex)
    }

    pub(crate) fn on_send_done(py: Python<'_>, ex: &Arc<Exchange<WsState>>) -> PyResult<()> {
        waiters::on_send_done(py, ex)
    }

    fn reject(
        &self,
        st: &mut WsState,
        tx: oneshot::Sender<WsDecision>,
        response: http::Response<ResponseBody>,
    ) -> PyResult<()> {
        st.status = response.status().as_u16();
        st.phase = WsPhase::Closed;
        tx.send(WsDecision::Reject(response))
            .map_err(|_| client_disconnected())
    }

    fn server_error(&self, st: &mut WsState) {
        match std::mem::replace(&mut st.phase, WsPhase::Closed) {
            WsPhase::Connecting(tx) | WsPhase::Denying { tx, .. } => {
                let response =
                    ResponseBody::error(&self.ctx.config, StatusCode::INTERNAL_SERVER_ERROR);
                let _ = self.reject(st, tx, response);
            }
            WsPhase::Open(tx) => self.close_from_server(tx, 1011),
            other => st.phase = other,
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
        self.server_error(&mut st);
        self.release(&mut st);
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
        let done = || Ok(self.ctx.done.clone_ref(py));
        match kind {
            "websocket.accept" => {
                let subprotocol = match message.get_item(intern!(py, "subprotocol"))? {
                    Some(s) if !s.is_none() => Some(
                        s.downcast::<PyString>()
                            .map_err(|_| {
                                PyTypeError::new_err(format!(
                                    "'subprotocol' must be a str or None, got {}",
                                    type_name(&s)
                                ))
                            })?
                            .to_str()?
                            .to_owned(),
                    ),
                    _ => None,
                };
                let headers = match message.get_item(intern!(py, "headers"))? {
                    Some(h) if !h.is_none() => parse_headers(&h, "headers")?,
                    _ => HeaderMap::new(),
                };
                match std::mem::replace(&mut st.phase, WsPhase::Closed) {
                    WsPhase::Connecting(tx) => {
                        let (out_tx, out_rx) = mpsc::channel(OUTBOUND_QUEUE);
                        let decision = WsDecision::Accept {
                            subprotocol,
                            headers,
                            outbound: out_rx,
                        };
                        if tx.send(decision).is_err() {
                            return Err(client_disconnected());
                        }
                        // Accepted even if the session has already ended (the client left
                        // right after the 101): receive() then reports the disconnect.
                        st.status = 101;
                        st.phase = WsPhase::Open(out_tx);
                        waiters::resolve_receivers(py, &self.ex, &mut st)?;
                        done()
                    }
                    other => {
                        let closed = matches!(other, WsPhase::Closed | WsPhase::Closing);
                        st.phase = other;
                        if closed {
                            return Err(client_disconnected());
                        }
                        Err(PyRuntimeError::new_err(
                            "Unexpected ASGI message 'websocket.accept': the handshake was \
                             already answered",
                        ))
                    }
                }
            }
            "websocket.send" => {
                let out = payload(message)?;
                match &st.phase {
                    WsPhase::Open(tx) => {
                        let tx = tx.clone();
                        waiters::send_or_park(py, &self.ctx, &self.ex, &mut st, &tx, out)
                    }
                    WsPhase::Connecting(_) | WsPhase::Denying { .. } => {
                        Err(PyRuntimeError::new_err(
                            "Expected ASGI message 'websocket.accept' or 'websocket.close' before \
                         'websocket.send'",
                        ))
                    }
                    WsPhase::Closing | WsPhase::Closed => Err(client_disconnected()),
                }
            }
            "websocket.close" => {
                let info = close_code(message)?;
                match std::mem::replace(&mut st.phase, WsPhase::Closed) {
                    WsPhase::Connecting(tx) => {
                        // Closing before accepting refuses the handshake with 403.
                        let response = ResponseBody::error(&self.ctx.config, StatusCode::FORBIDDEN);
                        self.reject(&mut st, tx, response)?;
                        st.app_close = Some(info);
                        waiters::resolve_receivers(py, &self.ex, &mut st)?;
                        done()
                    }
                    WsPhase::Open(tx) => {
                        st.app_close = Some(info.clone());
                        let result = waiters::send_or_park(
                            py,
                            &self.ctx,
                            &self.ex,
                            &mut st,
                            &tx,
                            WsOut::Close {
                                code: info.code,
                                reason: info.reason,
                            },
                        );
                        if !matches!(st.phase, WsPhase::Closed) {
                            st.phase = WsPhase::Closing;
                        }
                        result
                    }
                    WsPhase::Denying {
                        tx,
                        status,
                        headers,
                        body,
                    } => {
                        st.phase = WsPhase::Denying {
                            tx,
                            status,
                            headers,
                            body,
                        };
                        Err(PyRuntimeError::new_err(
                            "Unexpected ASGI message 'websocket.close' during a denial response",
                        ))
                    }
                    other @ (WsPhase::Closing | WsPhase::Closed) => {
                        st.phase = other;
                        Err(client_disconnected())
                    }
                }
            }
            "websocket.http.response.start" => {
                match std::mem::replace(&mut st.phase, WsPhase::Closed) {
                    WsPhase::Connecting(tx) => {
                        let (status, headers) = match parse_response_start(message) {
                            Ok(head) => head,
                            Err(e) => {
                                st.phase = WsPhase::Connecting(tx);
                                return Err(e);
                            }
                        };
                        st.status = status.as_u16();
                        st.phase = WsPhase::Denying {
                            tx,
                            status,
                            headers,
                            body: Vec::new(),
                        };
                        done()
                    }
                    other => {
                        st.phase = other;
                        Err(PyRuntimeError::new_err(
                        "Unexpected ASGI message 'websocket.http.response.start': only allowed \
                         before the handshake is answered",
                    ))
                    }
                }
            }
            "websocket.http.response.body" => {
                let body = match message.get_item(intern!(py, "body"))? {
                    Some(b) => body_bytes(&b, "body")?,
                    None => Bytes::new(),
                };
                let more = match message.get_item(intern!(py, "more_body"))? {
                    Some(m) => m.is_truthy()?,
                    None => false,
                };
                match std::mem::replace(&mut st.phase, WsPhase::Closed) {
                    WsPhase::Denying {
                        tx,
                        status,
                        headers,
                        body: mut collected,
                    } => {
                        collected.extend_from_slice(&body);
                        if more {
                            st.phase = WsPhase::Denying {
                                tx,
                                status,
                                headers,
                                body: collected,
                            };
                            return done();
                        }
                        let response = build_response(
                            &self.ctx.config,
                            status,
                            headers,
                            ResponseBody::full(Bytes::from(collected), None),
                        );
                        self.reject(&mut st, tx, response)?;
                        waiters::resolve_receivers(py, &self.ex, &mut st)?;
                        done()
                    }
                    other => {
                        st.phase = other;
                        Err(PyRuntimeError::new_err(
                            "Expected ASGI message 'websocket.http.response.start' before \
                             'websocket.http.response.body'",
                        ))
                    }
                }
            }
            other => Err(PyValueError::new_err(format!(
                "Unexpected ASGI message type {other:?} for a WebSocket connection"
            ))),
        }
    }

    /// The app returned: refuse an unanswered handshake (500), close an open socket (1000).
    pub(crate) fn complete(&self) -> Option<&'static str> {
        let mut st = self.ex.state();
        let fault = match std::mem::replace(&mut st.phase, WsPhase::Closed) {
            phase @ (WsPhase::Connecting(_) | WsPhase::Denying { .. }) => {
                st.phase = phase;
                if self.ex.is_closed() {
                    None
                } else {
                    self.server_error(&mut st);
                    Some("ASGI callable returned without answering the WebSocket handshake; sent 500")
                }
            }
            WsPhase::Open(tx) => {
                self.close_from_server(tx, 1000);
                None
            }
            _ => None,
        };
        self.release(&mut st);
        fault
    }

    pub(crate) fn fail(&self, py: Python<'_>, exc: &Bound<'_, PyAny>) -> bool {
        let mut st = self.ex.state();
        self.server_error(&mut st);
        self.release(&mut st);
        waiters::worth_logging(py, exc)
    }

    #[allow(clippy::type_complexity)]
    fn access_info(&self) -> (String, String, String, &'static str, u16, u64, f64) {
        let st = self.ex.state();
        let (client, path) = waiters::access_client_and_path(self.peer, &self.uri);
        (
            client,
            "WEBSOCKET".to_owned(),
            path,
            "1.1",
            st.status,
            0,
            0.0,
        )
    }
}
