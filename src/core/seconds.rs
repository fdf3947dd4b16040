//! Timeouts as Python passes them (seconds, None or 0 for none) into `Duration`s.

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A timeout in seconds from Python: None or 0 disables it.
pub(crate) fn seconds(name: &str, value: Option<f64>) -> PyResult<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(t) if t.is_finite() && t > 0.0 => Ok(Some(Duration::from_secs_f64(t))),
        Some(t) => Err(PyValueError::new_err(format!(
            "{name} must be a non-negative number of seconds, got {t}"
        ))),
    }
}
