//! `LoopCtx`: what every protocol object on the loop needs, made once per `Core`.

use std::sync::Arc;

use pyo3::prelude::*;
use tokio::runtime::Handle;

use crate::asgi::access::AccessLog;
use crate::bridge::WakeRelay;
use crate::config::ServerConfig;

/// Loop-side things every protocol object needs; one per `Core`.
pub(crate) struct LoopCtx {
    pub(crate) create_future: Py<PyAny>,
    pub(crate) runtime: Handle,
    pub(crate) config: Arc<ServerConfig>,
    /// An already-completed asyncio future (result None), shared by every `send()` that did
    /// not have to wait: awaiting a done future stays in C (no call back into the extension).
    pub(crate) done: Py<PyAny>,
    pub(crate) relay: Arc<WakeRelay>,
    /// The core writes the access lines (default logging configuration); None: the
    /// runner logs them through Python, or there is no access log.
    pub(crate) access_log: Option<AccessLog>,
}
