//! Python exception types raised by the core.

use pyo3::create_exception;
use pyo3::exceptions::PyOSError;

// An OSError subclass, as ASGI spec 2.4 asks for `send()` on a closed connection.
create_exception!(
    ferrocorn,
    ClientDisconnected,
    PyOSError,
    "The client went away (or the response already completed); the message was not sent."
);
