//! Everything PyPy-only on the Rust side, behind one `cfg` in `asgi/mod.rs` (the pure packing
//! is also built for unit tests on any interpreter). Under PyPy every object the extension makes or
//! reads crosses cpyext, which costs more than the work itself, so PyPy requests take a
//! different path at three points (ARCHITECTURE.md, "The PyPy split"):
//!
//! - the scope crosses as one packed bytearray that Python unpacks (`packing`,
//!   python/ferrocorn/_pypy/scope.py);
//! - requests start through `_pypy/starter.py`'s `start`, which runs the first step and sets
//!   up the asyncio task only when needed (`start`);
//! - `receive()` and `send()` are Python functions handing the core plain bytes, ints and
//!   bools (`http`, python/ferrocorn/_pypy/http.py).
//!
//! With the default runner (`fast`, python/ferrocorn/_pypy/fast.py) the drain itself is
//! Python: requests, bodies and responses cross as buffers and integers through `extern "C"`
//! functions that cffi calls, with no cpyext object per request; the three points above then
//! serve only what the fast path leaves to the PyO3 dispatcher.

#[cfg(PyPy)]
pub(crate) mod fast;
#[cfg(PyPy)]
mod http;
pub(crate) mod packing;
#[cfg(PyPy)]
mod start;

#[cfg(PyPy)]
pub(crate) use start::{python_runner, Starter};
