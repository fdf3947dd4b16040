//! The PyPy-only methods of `HttpProtocol`, called by python/ferrocorn/_pypy/http.py: its
//! `receive()` and `send()` pass the core plain bytes, ints and bools instead of message
//! dicts (a second `#[pymethods]` block, pyo3's `multiple-pymethods`).

use http::StatusCode;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray};

use super::packing::unpack_headers;
use crate::asgi::protocol::HttpProtocol;
use crate::asgi::response::Incoming;
use crate::bridge::RequestBody;

#[pymethods]
impl HttpProtocol {
    /// `receive()` when its message is ready now, taken apart for Python to build (PyPy,
    /// `_pypy/http.py`): the body (a bytearray) for `http.request`, with `more_body` from
    /// `more_body_pending`; False for `http.disconnect`; None when the app has to wait: the
    /// caller then awaits `receive`. The body is a bytearray, which Python turns into bytes:
    /// under cpyext a bytes object made here costs far more (10 KiB: 3.7 µs against 0.66 µs
    /// for bytearray + `bytes()`). It is returned alone, not in a tuple with the flag: PyPy
    /// turning a C tuple that holds a 10 KiB bytearray into its own took ~10 µs more than
    /// the bytearray alone (micro-benchmark), so the flag is a second call. The body is
    /// what `next_incoming` merged of the chunks queued, as on CPython.
    fn receive_ready<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        let mut st = self.ex.state();
        self.receive_called(&mut st);
        if !st.waiters.recv.is_empty() {
            return None; // earlier receivers are served first
        }
        match st.next_incoming(&self.ex) {
            Incoming::Request(data, _) => Some(PyByteArray::new(py, &data).into_any()),
            Incoming::Disconnect => Some(PyBool::new(py, false).to_owned().into_any()),
            Incoming::Wait => None,
        }
    }

    /// `more_body` of the chunk `receive_ready` just returned: the request body has not
    /// ended yet (`next_incoming` marks it done with its last chunk).
    fn more_body_pending(&self) -> bool {
        !matches!(self.ex.state().body, RequestBody::Done)
    }

    /// `send()` for an `http.response.start` already taken apart in Python (PyPy, see
    /// `_pypy/http.py`): `status` 200-599 and the headers as `count` pairs packed
    /// `name\0value\0name...`. None, with nothing changed, when the packing does not check
    /// out (a NUL inside a field shifts the count) or a header is invalid: the caller then
    /// passes the message itself to `send`, which names the fault.
    fn send_start_packed(
        &self,
        py: Python<'_>,
        status: u16,
        headers: &[u8],
        count: usize,
        trailers: bool,
    ) -> PyResult<Option<Py<PyAny>>> {
        let Some(headers) = unpack_headers(headers, count) else {
            return Ok(None);
        };
        let Some(status) = StatusCode::from_u16(status)
            .ok()
            .filter(|s| (200..=599).contains(&s.as_u16()))
        else {
            return Ok(None);
        };
        let mut st = self.ex.state();
        self.check_start(&st)?;
        self.hold_start(py, &mut st, status, headers, trailers)
            .map(Some)
    }

    /// `send()` for an `http.response.body` already taken apart in Python (PyPy): `body`
    /// bytes, or a bytearray copy of a large one (cheaper to read through cpyext).
    fn send_body_bytes(
        slf: &Bound<'_, Self>,
        body: &Bound<'_, PyAny>,
        more_body: bool,
    ) -> PyResult<Py<PyAny>> {
        Self::deliver_body(slf, body, more_body, None)
    }
}
