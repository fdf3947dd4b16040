//! `ProbeServer`, the Python handle of the health-probe listener (`--health-port`,
//! server/probes.rs): its own one-thread tokio runtime, started before lifespan startup (so
//! `/readyz` can say 503 until it completed) and independent of the server `Core` and of
//! the Python loop. The single-process server and the supervisor both use it.

use std::os::fd::FromRawFd;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use crate::server::{serve_probes, IoRuntime, ProbeState};

#[pyclass(frozen, module = "ferrocorn._ferrocorn")]
pub(crate) struct ProbeServer {
    state: Arc<ProbeState>,
    runtime: Mutex<Option<IoRuntime>>,
}

#[pymethods]
impl ProbeServer {
    /// Takes ownership of `fd`, a bound and listening TCP socket, and serves it at once
    /// (not ready until `set_ready(True)`).
    #[new]
    fn new(fd: i32) -> PyResult<Self> {
        // SAFETY: the caller hands over a listening socket it no longer uses.
        let listener = unsafe { std::net::TcpListener::from_raw_fd(fd) };
        listener.set_nonblocking(true)?;
        let runtime = IoRuntime::start(1, || {})
            .map_err(|e| PyOSError::new_err(format!("cannot start the probe runtime: {e}")))?;
        let state = Arc::new(ProbeState::default());
        {
            let _enter = runtime.handle().enter();
            let listener = tokio::net::TcpListener::from_std(listener)?;
            runtime
                .handle()
                .spawn(serve_probes(listener, state.clone()));
        }
        Ok(ProbeServer {
            state,
            runtime: Mutex::new(Some(runtime)),
        })
    }

    /// What `/readyz` answers from now on: 200 when true, 503 when false. An atomic store:
    /// safe to call from a signal handler.
    fn set_ready(&self, ready: bool) {
        self.state.set_ready(ready);
    }

    fn is_ready(&self) -> bool {
        self.state.is_ready()
    }

    /// Stops the listener (the socket closes) and its thread.
    fn close(&self, py: Python<'_>) {
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(mut runtime) = runtime {
            py.detach(move || runtime.stop());
        }
    }
}
