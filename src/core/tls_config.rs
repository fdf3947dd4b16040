//! `TlsConfig`: the Python-facing handle on a loaded TLS configuration. Python builds one at
//! start-up (so a bad file or password fails before anything is served) and hands it to
//! `Core`.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::tls::settings::{load, ClientAuth, LoadedTls, MinVersion, TlsOptions};

#[pyclass(frozen, module = "ferrocorn._ferrocorn")]
pub(crate) struct TlsConfig {
    pub(crate) loaded: LoadedTls,
    pub(crate) handshake_timeout: Option<Duration>,
}

fn client_auth(value: &str) -> PyResult<ClientAuth> {
    match value {
        "none" => Ok(ClientAuth::None),
        "optional" => Ok(ClientAuth::Optional),
        "required" => Ok(ClientAuth::Required),
        other => Err(PyValueError::new_err(format!(
            "invalid cert_reqs {other:?}: expected \"none\", \"optional\" or \"required\""
        ))),
    }
}

fn min_version(value: &str) -> PyResult<MinVersion> {
    match value {
        "1.2" => Ok(MinVersion::Tls12),
        "1.3" => Ok(MinVersion::Tls13),
        other => Err(PyValueError::new_err(format!(
            "invalid min_version {other:?}: expected \"1.2\" or \"1.3\""
        ))),
    }
}

#[pymethods]
impl TlsConfig {
    #[new]
    #[pyo3(signature = (
        certfile, keyfile=None, *, password=None, ca_certs=None, cert_reqs="none",
        min_version="1.2", ciphers=None, handshake_timeout=Some(10.0)
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        certfile: PathBuf,
        keyfile: Option<PathBuf>,
        password: Option<String>,
        ca_certs: Option<PathBuf>,
        cert_reqs: &str,
        min_version: &str,
        ciphers: Option<String>,
        handshake_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let opts = TlsOptions {
            certfile,
            keyfile,
            password: password.map(String::into_bytes),
            ca_certs,
            client_auth: client_auth(cert_reqs)?,
            min_version: self::min_version(min_version)?,
            ciphers,
        };
        let handshake_timeout = super::seconds::seconds("handshake_timeout", handshake_timeout)?;
        // File reads and key decryption (scrypt can be slow) need no GIL.
        let loaded = py.detach(|| load(&opts)).map_err(PyValueError::new_err)?;
        Ok(TlsConfig {
            loaded,
            handshake_timeout,
        })
    }

    /// The server certificate, PEM-encoded.
    #[getter]
    fn server_cert(&self) -> &str {
        &self.loaded.server_cert_pem
    }
}
