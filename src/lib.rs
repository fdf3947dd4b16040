//! ferrocorn's Rust core: tokio + hyper on background threads, the ASGI hot path on the
//! Python loop thread. ARCHITECTURE.md maps the layers; from the bottom up:
//!
//! - `http`, `ws`, `tls`, `proxy_protocol`, `config`, `access_log`: protocol rules, options and the access
//!   log's writer as plain Rust;
//! - `bridge`: the hand-off both threads share (queue + eventfd, relay, exchanges);
//! - `server` (tokio threads, never Python) and `asgi` (loop thread, GIL held), which never
//!   import each other;
//! - `core`: the `Core` class that Python drives, and the module below.

use pyo3::prelude::*;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod access_log;
mod asgi;
mod bridge;
mod config;
mod core;
mod http;
#[cfg(test)]
mod layers;
mod proxy_protocol;
mod server;
mod tls;
mod ws;

/// The pure functions the fuzz targets (`fuzz/`) drive; nothing else of the crate is public.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::http::headers::{response_header_name, response_header_value};
    pub use crate::ws::deflate::{negotiate, DeflateParams, Inflater};
    pub use crate::ws::frame::close_code_allowed;
    pub use crate::ws::handshake::{accept_headers, is_upgrade, subprotocols, version_supported};
    pub use crate::ws::stream::{Incoming, WsReader};
}

#[pymodule]
fn _ferrocorn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The Python side's platform switch (SO_REUSEPORT balancing): false on macOS, the BSDs
    // and a Linux build with the `portable` feature.
    m.add(
        "LINUX_FAST_PATHS",
        cfg!(all(target_os = "linux", not(feature = "portable"))),
    )?;
    m.add(
        "ClientDisconnected",
        py.get_type::<asgi::errors::ClientDisconnected>(),
    )?;
    m.add_class::<core::Core>()?;
    m.add_class::<core::probes::ProbeServer>()?;
    m.add_class::<asgi::protocol::HttpProtocol>()?;
    m.add_class::<asgi::websocket::WebSocketProtocol>()?;
    m.add_class::<asgi::awaitable::Ready>()?;
    m.add_class::<asgi::runner::AppRun>()?;
    #[cfg(not(PyPy))]
    m.add_function(wrap_pyfunction!(asgi::lazy_task::promote_request_task, m)?)?;
    m.add_class::<core::tls_config::TlsConfig>()?;
    Ok(())
}
