//! Parking `receive()` and backpressured `send()` on asyncio futures until tokio reports
//! progress. Shared by the HTTP and WebSocket protocol objects.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokio::sync::mpsc::{self, error::TrySendError};

use crate::asgi::awaitable::Ready;
use crate::asgi::errors::ClientDisconnected;
use crate::asgi::loop_ctx::LoopCtx;
use crate::bridge::{Exchange, ExchangeState, Waiters};

/// A loop-side exchange state that can produce `receive()` messages.
pub(crate) trait Channel: ExchangeState {
    /// The next message, or None when `receive()` has to wait for tokio.
    fn next_message<'py>(
        &mut self,
        py: Python<'py>,
        ex: &Exchange<Self>,
    ) -> PyResult<Option<Bound<'py, PyDict>>>;

    fn waiters(&mut self) -> &mut Waiters;

    /// A backpressured send found the channel closed: the peer is gone.
    fn on_send_failed(&mut self);
}

/// Whether an exception the app raised deserves an error log (a disconnect does not).
pub(crate) fn worth_logging(py: Python<'_>, exc: &Bound<'_, PyAny>) -> bool {
    !exc.is_instance(&py.get_type::<ClientDisconnected>())
        .unwrap_or(false)
}

/// The access log's client ("host:port", empty for Unix sockets) and path with query.
pub(crate) fn access_client_and_path(
    peer: Option<std::net::SocketAddr>,
    uri: &http::Uri,
) -> (String, String) {
    let client = peer
        .as_ref()
        .map(crate::bridge::host_port)
        .unwrap_or_default();
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    (client, path)
}

pub(crate) fn client_disconnected() -> PyErr {
    ClientDisconnected::new_err("the client disconnected or the response is already complete")
}

pub(crate) fn future_done(fut: &Bound<'_, PyAny>) -> bool {
    fut.call_method0(intern!(fut.py(), "done"))
        .and_then(|d| d.is_truthy())
        .unwrap_or(true)
}

/// Hand out messages to parked `receive()` futures, in order, while there are any.
pub(crate) fn resolve_receivers<S: Channel>(
    py: Python<'_>,
    ex: &Exchange<S>,
    st: &mut S,
) -> PyResult<()> {
    let mut waiters = std::mem::take(&mut st.waiters().recv);
    let mut result = Ok(());
    while let Some(front) = waiters.front() {
        let fut = front.bind(py).clone();
        if future_done(&fut) {
            waiters.pop_front(); // cancelled: its message stays queued for the next call
            continue;
        }
        match st.next_message(py, ex) {
            Ok(Some(msg)) => {
                waiters.pop_front();
                if let Err(e) = fut.call_method1(intern!(py, "set_result"), (msg,)) {
                    result = Err(e);
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if waiters.is_empty() {
        ex.disarm_receive();
    } else {
        ex.arm_receive();
    }
    st.waiters().recv = waiters;
    result
}

/// `receive()`: a completed awaitable when a message is ready, else a parked future.
pub(crate) fn receive<S: Channel>(
    py: Python<'_>,
    ctx: &LoopCtx,
    ex: &Exchange<S>,
    st: &mut S,
) -> PyResult<Py<PyAny>> {
    if st.waiters().recv.is_empty() {
        if let Some(msg) = st.next_message(py, ex)? {
            return Ok(Py::new(py, Ready::new(Some(msg.into_any().unbind())))?.into_any());
        }
    }
    let fut = ctx.create_future.call0(py)?;
    st.waiters().recv.push_back(fut.clone_ref(py));
    // Arm before re-checking so a change landing in between is not missed.
    ex.arm_receive();
    resolve_receivers(py, ex, st)?;
    Ok(fut)
}

/// tokio reported a change: wake parked receivers.
pub(crate) fn on_receive_event<S: Channel>(py: Python<'_>, ex: &Arc<Exchange<S>>) -> PyResult<()> {
    let mut st = ex.state();
    if st.waiters().recv.is_empty() {
        return Ok(());
    }
    resolve_receivers(py, ex, &mut st)
}

/// Queue `item` for tokio: a completed awaitable when the channel has room, else a future
/// that completes once tokio took it (backpressure). Err(ClientDisconnected) when closed.
pub(crate) fn send_or_park<S: Channel, T: Send + 'static>(
    py: Python<'_>,
    ctx: &LoopCtx,
    ex: &Arc<Exchange<S>>,
    st: &mut S,
    tx: &mpsc::Sender<T>,
    item: T,
) -> PyResult<Py<PyAny>> {
    if st.waiters().send_in_flight {
        return Err(PyRuntimeError::new_err(
            "send() called before the previous send() finished",
        ));
    }
    match tx.try_send(item) {
        Ok(()) => Ok(ctx.done.clone_ref(py)),
        Err(TrySendError::Full(item)) => {
            let fut = ctx.create_future.call0(py)?;
            let waiters = st.waiters();
            waiters.send = Some(fut.clone_ref(py));
            waiters.send_in_flight = true;
            let tx = tx.clone();
            let ex = ex.clone();
            ctx.runtime.spawn(async move {
                let ok = tx.send(item).await.is_ok();
                ex.send_ok.store(ok, Ordering::SeqCst);
                ex.send_done();
            });
            Ok(fut)
        }
        Err(TrySendError::Closed(_)) => {
            st.on_send_failed();
            Err(client_disconnected())
        }
    }
}

/// tokio accepted (or refused) a backpressured item.
pub(crate) fn on_send_done<S: Channel>(py: Python<'_>, ex: &Arc<Exchange<S>>) -> PyResult<()> {
    let mut st = ex.state();
    st.waiters().send_in_flight = false;
    let ok = ex.send_ok.load(Ordering::SeqCst);
    if !ok {
        st.on_send_failed();
    }
    let Some(fut) = st.waiters().send.take() else {
        return Ok(());
    };
    drop(st);
    let fut = fut.bind(py);
    if future_done(fut) {
        return Ok(());
    }
    if ok {
        fut.call_method1(intern!(py, "set_result"), (py.None(),))?;
    } else {
        fut.call_method1(
            intern!(py, "set_exception"),
            (client_disconnected().into_value(py),),
        )?;
    }
    Ok(())
}
