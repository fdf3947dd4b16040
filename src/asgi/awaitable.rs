//! An already-completed awaitable: `await Ready(v)` returns `v` without a loop iteration.

use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;

#[pyclass(module = "ferrocorn._ferrocorn")]
pub(crate) struct Ready {
    value: Option<Py<PyAny>>,
}

impl Ready {
    pub(crate) fn new(value: Option<Py<PyAny>>) -> Self {
        Ready { value }
    }
}

#[pymethods]
impl Ready {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Finishes at once: StopIteration carries the value (None when there is none).
    fn __next__(&mut self) -> PyResult<Option<Py<PyAny>>> {
        match self.value.take() {
            Some(value) => Err(PyStopIteration::new_err((value,))),
            None => Ok(None),
        }
    }

    fn send(&mut self, _value: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
        self.__next__()
    }

    #[pyo3(signature = (exc, _value=None, _tb=None))]
    fn throw(
        &mut self,
        exc: &Bound<'_, PyAny>,
        _value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.value = None;
        Err(PyErr::from_value(exc.clone()))
    }

    fn close(&mut self) {
        self.value = None;
    }
}
