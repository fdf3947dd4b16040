//! ferrocorn's Rust core: tokio + hyper on background threads, the ASGI hot path on the
//! Python loop thread. See DESIGN.md for the architecture this follows.

use pyo3::prelude::*;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod asgi;
pub mod config;
pub mod core;
pub mod errors;
pub mod http;
pub mod relay;
pub mod runtime;
pub mod server;
pub mod tls;
pub mod wakeup;
pub mod ws;

#[pymodule]
fn _ferrocorn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "ClientDisconnected",
        py.get_type::<errors::ClientDisconnected>(),
    )?;
    m.add_class::<core::Core>()?;
    m.add_class::<asgi::protocol::HttpProtocol>()?;
    m.add_class::<asgi::websocket::WebSocketProtocol>()?;
    m.add_class::<asgi::awaitable::Ready>()?;
    m.add_class::<asgi::runner::AppRun>()?;
    #[cfg(not(PyPy))]
    m.add_function(wrap_pyfunction!(asgi::lazy_task::promote_request_task, m)?)?;
    m.add_class::<tls::pyconfig::TlsConfig>()?;
    Ok(())
}
