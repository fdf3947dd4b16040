//! Starting PyPy requests: through `_pypy/starter.py`'s `start(runner, app, scope, proto)`,
//! which runs the first step in the drain and sets up the asyncio task only if it is needed
//! (one call into Python per request), with the scope packed when it can be.

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict};

use super::packing::pack_scope;
use crate::asgi::protocol::HttpProtocol;
use crate::bridge::PendingRequest;

/// `start` from `ferrocorn._pypy.starter.pypy_starter`.
pub(crate) struct Starter {
    start: Py<PyAny>,
}

impl Starter {
    /// The Python `start(runner, app, scope, proto)`.
    pub(crate) fn start_fn(&self) -> &Py<PyAny> {
        &self.start
    }

    /// None when the loop has a task factory, which the starter would bypass: those requests
    /// go through `TaskSpawner` (and the scope dict builder). `name`: the name of the tasks
    /// it sets up (spawn.rs `task_name`).
    pub(crate) fn for_loop(
        py: Python<'_>,
        event_loop: &Bound<'_, PyAny>,
        has_factory: bool,
        (root_path, state): (&str, Option<&Py<PyDict>>),
        name: &str,
    ) -> PyResult<Option<Self>> {
        if has_factory {
            return Ok(None);
        }
        let start = py.import("ferrocorn._pypy.starter")?.call_method1(
            "pypy_starter",
            (event_loop, root_path, state.map(|s| s.bind(py)), name),
        )?;
        Ok(Some(Starter {
            start: start.unbind(),
        }))
    }

    /// Start `app` in the Python `runner` with its scope dict.
    pub(crate) fn start(
        &self,
        py: Python<'_>,
        (app, runner): (&Py<PyAny>, &Py<PyAny>),
        scope: &Bound<'_, PyDict>,
        proto: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let args = (runner.bind(py), app.bind(py), scope, proto);
        self.start.bind(py).call1(args).map(drop)
    }

    /// Start an HTTP request with its scope packed (`packing::pack_scope`), which `start`
    /// unpacks in Python. None when the scope cannot be packed.
    pub(crate) fn start_packed(
        &self,
        py: Python<'_>,
        (app, runner): (&Py<PyAny>, &Py<PyAny>),
        req: &PendingRequest,
        proto: &Bound<'_, HttpProtocol>,
    ) -> Option<PyResult<()>> {
        let packed = PyByteArray::new(py, &pack_scope(req)?);
        let args = (runner.bind(py), app.bind(py), packed, proto);
        Some(self.start.bind(py).call1(args).map(drop))
    }
}

/// A Python runner's coroutine, run as it is: on PyPy it is cheaper than `AppRun` stepping
/// it from Rust.
pub(crate) fn python_runner<'py>(
    py: Python<'py>,
    runner: &Py<PyAny>,
    app: &Py<PyAny>,
    scope: Bound<'py, PyDict>,
    proto: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    runner.bind(py).call1((app.bind(py), scope, proto))
}
