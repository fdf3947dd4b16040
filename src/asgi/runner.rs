//! `AppRun`: the built-in runner of one app call (ARCHITECTURE.md, hot path step 4).
//!
//! asyncio's `Task` steps it like a coroutine (`__next__`/`send`/`throw`/`close`): it calls
//! `app(scope, receive, send)`, passes every value the app's coroutine yields through to the
//! task, and when the app returns or raises it reports that straight to the request's
//! protocol object. The task is still a real `asyncio.Task` (anyio and sniffio need one);
//! what goes is the Python `async def` wrapper around the app: its frame, its attribute
//! lookups and the interpreted call of `complete()`, on every request.
//!
//! Outcomes, as the Python wrapper had them: a return completes the response (a protocol
//! fault, such as no response at all, is logged); `CancelledError` aborts it quietly; any
//! other exception aborts it (500 before the response started) and is logged with its
//! traceback, unless it is `ClientDisconnected`. The task itself always ends normally.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(not(PyPy))]
use std::sync::Mutex;
use std::sync::OnceLock;

use pyo3::exceptions::asyncio::CancelledError;
use pyo3::exceptions::{PyAttributeError, PyRuntimeError, PyStopIteration, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString, PyTuple, PyType};

use super::messages::type_name;
use super::protocol::HttpProtocol;
use super::websocket::WebSocketProtocol;
use crate::asgi::errors::log_error;

/// The request's protocol object, resolved once so the outcome is reported without a
/// Python method call. `Other` is any object with the same methods (tests use fakes).
enum Proto {
    Http(Py<HttpProtocol>),
    WebSocket(Py<WebSocketProtocol>),
    Other(Py<PyAny>),
}

impl Proto {
    fn from_any(proto: &Bound<'_, PyAny>) -> Self {
        if let Ok(http) = proto.cast::<HttpProtocol>() {
            Proto::Http(http.clone().unbind())
        } else if let Ok(ws) = proto.cast::<WebSocketProtocol>() {
            Proto::WebSocket(ws.clone().unbind())
        } else {
            Proto::Other(proto.clone().unbind())
        }
    }

    fn as_any<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        match self {
            Proto::Http(p) => p.bind(py).as_any(),
            Proto::WebSocket(p) => p.bind(py).as_any(),
            Proto::Other(p) => p.bind(py),
        }
    }

    /// `complete()`: a protocol fault to log, if any.
    fn complete(&self, py: Python<'_>) -> PyResult<Option<Cow<'static, str>>> {
        match self {
            Proto::Http(p) => Ok(p.get().complete().map(Cow::Borrowed)),
            Proto::WebSocket(p) => Ok(p.get().complete().map(Cow::Borrowed)),
            Proto::Other(p) => Ok(p
                .bind(py)
                .call_method0(intern!(py, "complete"))?
                .extract::<Option<String>>()?
                .map(Cow::Owned)),
        }
    }

    /// `fail(exc)`: whether the exception deserves an error log.
    fn fail(&self, py: Python<'_>, exc: &Bound<'_, PyAny>) -> PyResult<bool> {
        match self {
            Proto::Http(p) => Ok(p.get().fail(py, exc)),
            Proto::WebSocket(p) => Ok(p.get().fail(py, exc)),
            Proto::Other(p) => p
                .bind(py)
                .call_method1(intern!(py, "fail"), (exc,))?
                .extract(),
        }
    }
}

/// What resuming the app's awaitable gave.
enum Step<'py> {
    Yield(Bound<'py, PyAny>),
    Return,
    Raise(PyErr),
}

#[pyclass(frozen, module = "ferrocorn._ferrocorn")]
pub(crate) struct AppRun {
    app: Py<PyAny>,
    /// A Python runner (access log, metrics, proxy headers) run as
    /// `runner(app, scope, proto)` in place of the app; it reports the outcome itself.
    runner: Option<Py<PyAny>>,
    scope: Py<PyAny>,
    proto: Proto,
    /// What is stepped: the app's coroutine, or the iterator its `__await__` returned.
    inner: OnceLock<Py<PyAny>>,
    finished: AtomicBool,
    /// Set when the first step ran eagerly, outside the task (lazy_task.rs, CPython only):
    /// what that step gave, handed to the task at its own first step instead of resuming the
    /// app again.
    #[cfg(not(PyPy))]
    handoff: Mutex<Option<Handoff>>,
}

/// The outcome of an eager first step, waiting for the task's first step.
#[cfg(not(PyPy))]
pub(crate) enum Handoff {
    /// The app waits on this (usually a future): the task must see it yielded.
    Yielded(Py<PyAny>),
    /// The app already finished.
    Finished,
}

impl AppRun {
    /// The runner for `proto` (an `HttpProtocol`, a `WebSocketProtocol`, or an object with
    /// their methods): it runs `app`, or the Python `runner(app, scope, proto)` when given.
    pub(crate) fn new(
        app: Py<PyAny>,
        runner: Option<Py<PyAny>>,
        scope: Py<PyAny>,
        proto: &Bound<'_, PyAny>,
    ) -> Self {
        AppRun {
            app,
            runner,
            scope,
            proto: Proto::from_any(proto),
            inner: OnceLock::new(),
            finished: AtomicBool::new(false),
            #[cfg(not(PyPy))]
            handoff: Mutex::new(None),
        }
    }

    /// Calls the app and gets what `await` would step: the coroutine itself, or the
    /// iterator from `__await__` for any other awaitable.
    fn start<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let proto = self.proto.as_any(py);
        if let Some(runner) = &self.runner {
            let awaitable =
                runner
                    .bind(py)
                    .call1((self.app.bind(py), self.scope.bind(py), proto))?;
            return awaitable_iterator(awaitable);
        }
        let awaitable = self.app.bind(py).call1((
            self.scope.bind(py),
            proto.getattr(intern!(py, "receive"))?,
            proto.getattr(intern!(py, "send"))?,
        ))?;
        awaitable_iterator(awaitable)
    }

    /// Resumes the app with `send(value)` or `throw(exc)`; `Ok(Some)` is a value yielded to
    /// the task, `Ok(None)` means this body has finished.
    fn resume(
        &self,
        py: Python<'_>,
        value: Option<&Bound<'_, PyAny>>,
        throw: Option<&Bound<'_, PyTuple>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        #[cfg(not(PyPy))]
        if let Some(handoff) = self.take_handoff() {
            match handoff {
                Handoff::Finished => return Ok(None),
                // The task was cancelled before its first step: the app gets the
                // exception at the await it is suspended in, as if the task had stepped it.
                Handoff::Yielded(_) if throw.is_some() => {}
                Handoff::Yielded(yielded) => return Ok(Some(yielded)),
            }
        }
        if self.finished.load(Ordering::Relaxed) {
            return Err(PyRuntimeError::new_err(
                "cannot reuse already awaited coroutine",
            ));
        }
        let inner = match self.inner.get() {
            Some(inner) => inner.bind(py).clone(),
            None => {
                if let Some(args) = throw {
                    // Thrown in before the first step (the task was cancelled before it
                    // ran): the app never starts; the outcome is reported all the same.
                    return Ok(self.finish(py, Step::Raise(thrown_error(args)?)));
                }
                match self.start(py) {
                    Ok(inner) => {
                        let _ = self.inner.set(inner.clone().unbind());
                        inner
                    }
                    Err(err) => return Ok(self.finish(py, Step::Raise(err))),
                }
            }
        };
        let step = match throw {
            None => send(py, &inner, value),
            Some(args) => throw_into(py, &inner, args)?,
        };
        match step {
            Step::Yield(yielded) => Ok(Some(yielded.unbind())),
            outcome => Ok(self.finish(py, outcome)),
        }
    }

    /// Runs the first step outside any task (the caller has made a placeholder task
    /// current): `Some` is what the app yielded, `None` that it finished.
    #[cfg(not(PyPy))]
    pub(crate) fn step_eagerly(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.resume(py, None, None)
    }

    /// What the task's first step returns instead of resuming the app.
    #[cfg(not(PyPy))]
    pub(crate) fn set_handoff(&self, handoff: Handoff) {
        *self.handoff.lock().unwrap_or_else(|p| p.into_inner()) = Some(handoff);
    }

    #[cfg(not(PyPy))]
    fn take_handoff(&self) -> Option<Handoff> {
        self.handoff
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Reports how the app ended to the protocol object; always `None` (the body is done).
    fn finish(&self, py: Python<'_>, outcome: Step<'_>) -> Option<Py<PyAny>> {
        self.finished.store(true, Ordering::Relaxed);
        match outcome {
            // The Python runner reported the app's outcome itself.
            Step::Return | Step::Yield(_) if self.runner.is_some() => {}
            Step::Return | Step::Yield(_) => match self.proto.complete(py) {
                Ok(Some(fault)) => log_error(py, &fault, None),
                Ok(None) => {}
                Err(err) => log_error(py, "Error reporting the end of a request", Some(err)),
            },
            Step::Raise(err) if err.is_instance_of::<CancelledError>(py) => {
                if let Err(err) = self.proto.fail(py, &py.None().into_bound(py)) {
                    log_error(py, "Error reporting a cancelled request", Some(err));
                }
            }
            Step::Raise(err) => {
                let exc = err.into_value(py).into_bound(py).into_any();
                let message = if self.runner.is_some() {
                    "Exception in the Python runner of an ASGI application"
                } else {
                    "Exception in ASGI application"
                };
                match self.proto.fail(py, &exc) {
                    Ok(true) => log_error(py, message, Some(PyErr::from_value(exc))),
                    Ok(false) => {}
                    Err(err) => log_error(py, message, Some(err)),
                }
            }
        }
        None
    }

    /// An attribute of the app's coroutine, for introspection (`inspect`, `Task.get_stack`,
    /// anyio's task state); `default` before the app started or when it has none.
    fn inner_attr(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyString>,
        default: Py<PyAny>,
    ) -> Py<PyAny> {
        self.inner
            .get()
            .and_then(|inner| inner.bind(py).getattr(name).ok())
            .map(Bound::unbind)
            .unwrap_or(default)
    }
}

#[pymethods]
impl AppRun {
    #[new]
    fn py_new(app: Py<PyAny>, scope: Py<PyAny>, proto: &Bound<'_, PyAny>) -> Self {
        Self::new(app, None, scope, proto)
    }

    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.resume(py, None, None)
    }

    fn send(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        yielded_or_stop(self.resume(py, Some(value), None)?)
    }

    #[pyo3(signature = (*args))]
    fn throw(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        if args.is_empty() || args.len() > 3 {
            return Err(PyTypeError::new_err(format!(
                "throw expected at least 1 argument and at most 3, got {}",
                args.len()
            )));
        }
        yielded_or_stop(self.resume(py, None, Some(args))?)
    }

    /// Closes the app's coroutine. An app still running is cancelled: its response is
    /// aborted, as for `CancelledError`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.finished.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        let closed = match self.inner.get() {
            Some(inner) => match inner.bind(py).getattr(intern!(py, "close")) {
                Ok(close) => close.call0().map(drop),
                Err(_) => Ok(()),
            },
            None => Ok(()),
        };
        let failed = self.proto.fail(py, &py.None().into_bound(py)).map(drop);
        closed.and(failed)
    }

    #[getter]
    fn cr_frame(&self, py: Python<'_>) -> Py<PyAny> {
        self.inner_attr(py, intern!(py, "cr_frame"), py.None())
    }

    #[getter]
    fn cr_await(&self, py: Python<'_>) -> Py<PyAny> {
        self.inner_attr(py, intern!(py, "cr_await"), py.None())
    }

    #[getter]
    fn cr_code(&self, py: Python<'_>) -> Py<PyAny> {
        self.inner_attr(py, intern!(py, "cr_code"), py.None())
    }

    #[getter]
    fn cr_running(&self, py: Python<'_>) -> Py<PyAny> {
        let no = PyBool::new(py, false).to_owned().into_any().unbind();
        self.inner_attr(py, intern!(py, "cr_running"), no)
    }

    #[getter]
    fn __qualname__(&self, py: Python<'_>) -> Py<PyAny> {
        let name = PyString::new(py, "AppRun").into_any().unbind();
        self.inner_attr(py, intern!(py, "__qualname__"), name)
    }
}

/// A method's answer to a step: the yielded value, or StopIteration once the body is done.
fn yielded_or_stop(step: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
    step.ok_or_else(|| PyStopIteration::new_err(()))
}

/// What `await obj` steps: a coroutine (or generator-based coroutine) itself, else the
/// iterator its `__await__` returns.
fn awaitable_iterator(obj: Bound<'_, PyAny>) -> PyResult<Bound<'_, PyAny>> {
    let py = obj.py();
    #[cfg(not(PyPy))]
    // SAFETY: type checks on a live object.
    if unsafe {
        pyo3::ffi::PyCoro_CheckExact(obj.as_ptr()) != 0
            || pyo3::ffi::PyGen_CheckExact(obj.as_ptr()) != 0
    } {
        return Ok(obj);
    }
    match obj.getattr(intern!(py, "__await__")) {
        Ok(method) => {
            let iterator = method.call0()?;
            if iterator.hasattr(intern!(py, "__next__"))? {
                Ok(iterator)
            } else {
                Err(PyTypeError::new_err(format!(
                    "__await__() returned non-iterator of type '{}'",
                    type_name(&iterator)
                )))
            }
        }
        Err(err) if !err.is_instance_of::<PyAttributeError>(py) => Err(err),
        // A generator-based coroutine (`types.coroutine`) has no `__await__`.
        Err(_) if obj.hasattr(intern!(py, "send"))? && obj.hasattr(intern!(py, "throw"))? => {
            Ok(obj)
        }
        Err(_) => Err(PyTypeError::new_err(format!(
            "the ASGI application returned an object of type '{}', which can't be used in \
             'await' expression",
            type_name(&obj)
        ))),
    }
}

/// `send(value)` into the app's awaitable (`None` first and usually).
fn send<'py>(
    py: Python<'py>,
    inner: &Bound<'py, PyAny>,
    value: Option<&Bound<'py, PyAny>>,
) -> Step<'py> {
    #[cfg(all(Py_3_10, not(PyPy)))]
    {
        use pyo3::ffi;
        let arg = value.map_or(py.None().into_ptr(), |v| v.clone().into_ptr());
        let mut result: *mut ffi::PyObject = std::ptr::null_mut();
        // SAFETY: `inner` and `arg` are live references; PyIter_Send returns a new
        // reference in `result` for NEXT and RETURN, and sets an exception for ERROR.
        let status = unsafe { ffi::PyIter_Send(inner.as_ptr(), arg, &mut result) };
        // SAFETY: `arg` was created above as an owned reference.
        unsafe { ffi::Py_DECREF(arg) };
        match status {
            ffi::PySendResult::PYGEN_NEXT => {
                // SAFETY: a new reference on NEXT.
                Step::Yield(unsafe { Bound::from_owned_ptr(py, result) })
            }
            ffi::PySendResult::PYGEN_RETURN => {
                // SAFETY: a new reference on RETURN; the app's return value is not used.
                drop(unsafe { Bound::<PyAny>::from_owned_ptr(py, result) });
                Step::Return
            }
            ffi::PySendResult::PYGEN_ERROR => Step::Raise(PyErr::fetch(py)),
        }
    }
    #[cfg(not(all(Py_3_10, not(PyPy))))]
    {
        let result = match value {
            None => inner.call_method1(intern!(py, "send"), (py.None(),)),
            Some(v) => inner.call_method1(intern!(py, "send"), (v,)),
        };
        method_step(py, result)
    }
}

/// `throw(...)` into the app's awaitable. One without a `throw` method gets the exception
/// raised at its `await`, as `yield from` does.
fn throw_into<'py>(
    py: Python<'py>,
    inner: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
) -> PyResult<Step<'py>> {
    match inner.getattr(intern!(py, "throw")) {
        Ok(throw) => Ok(method_step(py, throw.call1(args))),
        Err(err) if err.is_instance_of::<PyAttributeError>(py) => {
            Ok(Step::Raise(thrown_error(args)?))
        }
        Err(err) => Ok(Step::Raise(err)),
    }
}

/// The outcome of a `send`/`throw` method call: StopIteration is the return.
fn method_step<'py>(py: Python<'py>, result: PyResult<Bound<'py, PyAny>>) -> Step<'py> {
    match result {
        Ok(yielded) => Step::Yield(yielded),
        Err(err) if err.is_instance_of::<PyStopIteration>(py) => Step::Return,
        Err(err) => Step::Raise(err),
    }
}

/// The exception `throw(type[, value[, tb]])` stands for.
fn thrown_error(args: &Bound<'_, PyTuple>) -> PyResult<PyErr> {
    let exc = args.get_item(0)?;
    match args.get_item(1) {
        Ok(value) if !value.is_none() && exc.is_instance_of::<PyType>() => {
            Ok(PyErr::from_value(exc.call1((value,))?))
        }
        _ => Ok(PyErr::from_value(exc)),
    }
}
