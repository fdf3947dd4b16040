//! Python exception types raised by the core.

use pyo3::create_exception;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

// An OSError subclass, as ASGI spec 2.4 asks for `send()` on a closed connection.
create_exception!(
    ferrocorn,
    ClientDisconnected,
    PyOSError,
    "The client went away (or the response already completed); the message was not sent."
);

/// The "ferrocorn.error" logger, looked up once.
fn error_logger(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    LOGGER
        .get_or_try_init(py, || {
            py.import("logging")?
                .call_method1("getLogger", ("ferrocorn.error",))
                .map(Bound::unbind)
        })
        .map(|logger| logger.bind(py))
}

/// Logs on "ferrocorn.error", with a traceback when an exception is given. If logging itself
/// fails (a broken handler), the failure goes to stderr rather than being lost.
pub(crate) fn log_error(py: Python<'_>, message: &str, exc: Option<PyErr>) {
    let logged = error_logger(py).and_then(|logger| match exc {
        Some(exc) => {
            let kwargs = PyDict::new(py);
            kwargs.set_item("exc_info", exc.into_value(py))?;
            logger
                .call_method("error", (message,), Some(&kwargs))
                .map(drop)
        }
        None => logger.call_method1("error", (message,)).map(drop),
    });
    if let Err(err) = logged {
        err.print(py);
    }
}

/// Logs a debug line on "ferrocorn.error".
pub(crate) fn log_debug(py: Python<'_>, message: &str) -> PyResult<()> {
    error_logger(py)?
        .call_method1("debug", (message,))
        .map(drop)
}

/// Logs a warning on "ferrocorn.error".
pub(crate) fn log_warning(py: Python<'_>, message: &str) -> PyResult<()> {
    error_logger(py)?
        .call_method1("warning", (message,))
        .map(drop)
}
