//! Building the ASGI `http` scope from a request head, on the loop thread.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, OnceLock};

use http::{HeaderName, Method, Version};
use percent_encoding::percent_decode;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use rustc_hash::FxSeededState;

use crate::bridge::{ConnInfo, LocalAddr, PendingRequest, PendingWebSocket};
use crate::tls::TlsInfo;

/// Header names beyond this many distinct ones are not cached (a client sending random
/// names must not grow memory).
const HEADER_NAME_CACHE_MAX: usize = 512;

pub(crate) struct ScopeFactory {
    /// Scopes start as a copy of these: the constant keys already hold their values and the
    /// others exist (as None), so filling them in never resizes the dict.
    http_template: Py<PyDict>,
    websocket_template: Py<PyDict>,
    root_path: Py<PyString>,
    root_path_raw: Vec<u8>,
    /// The lifespan state; each request gets a shallow copy (spec).
    state: Option<Py<PyDict>>,
    header_names: Mutex<HashMap<HeaderName, Py<PyBytes>, FxSeededState>>,
    /// The server certificate PEM for `extensions["tls"]`: the same for every connection,
    /// so made into a Python string once.
    server_cert: OnceLock<Py<PyString>>,
}

impl ScopeFactory {
    pub(crate) fn new(
        py: Python<'_>,
        root_path: &str,
        state: Option<Py<PyDict>>,
    ) -> PyResult<Self> {
        // `{"version": "3.0", "spec_version": "2.5"}`, shared by every scope: it is constant.
        let asgi = PyDict::new(py);
        asgi.set_item("version", "3.0")?;
        asgi.set_item("spec_version", "2.5")?;
        let common = [
            "asgi",
            "http_version",
            "path",
            "raw_path",
            "query_string",
            "root_path",
            "headers",
            "client",
            "server",
        ];
        let http_template = PyDict::new(py);
        http_template.set_item("type", "http")?;
        http_template.set_item("scheme", "http")?;
        http_template.set_item("method", py.None())?;
        http_template.set_item("extensions", py.None())?;
        let websocket_template = PyDict::new(py);
        websocket_template.set_item("type", "websocket")?;
        websocket_template.set_item("scheme", "ws")?;
        websocket_template.set_item("subprotocols", py.None())?;
        websocket_template.set_item("extensions", py.None())?;
        for template in [&http_template, &websocket_template] {
            for key in common {
                template.set_item(key, py.None())?;
            }
            template.set_item("asgi", &asgi)?;
            template.set_item("root_path", root_path)?;
            if state.is_some() {
                template.set_item("state", py.None())?;
            }
        }
        Ok(ScopeFactory {
            http_template: http_template.unbind(),
            websocket_template: websocket_template.unbind(),
            root_path: PyString::new(py, root_path).unbind(),
            root_path_raw: root_path.as_bytes().to_vec(),
            state,
            header_names: Mutex::new(HashMap::with_hasher(header_name_hasher())),
            server_cert: OnceLock::new(),
        })
    }

    fn header_name<'py>(&self, py: Python<'py>, name: &HeaderName) -> Bound<'py, PyBytes> {
        let mut cache = self.header_names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = cache.get(name) {
            return b.bind(py).clone();
        }
        let b = PyBytes::new(py, name.as_str().as_bytes());
        if cache.len() < HEADER_NAME_CACHE_MAX {
            cache.insert(name.clone(), b.clone().unbind());
        }
        b
    }

    /// The `http` scope.
    pub(crate) fn build<'py>(
        &self,
        py: Python<'py>,
        req: &PendingRequest,
    ) -> PyResult<Bound<'py, PyDict>> {
        let head = &req.head;
        let scope = self.http_template.bind(py).copy()?;
        scope.set_item(
            intern!(py, "http_version"),
            py_http_version(py, head.version),
        )?;
        scope.set_item(intern!(py, "method"), method(py, &head.method))?;
        if req.conn.tls.is_some() {
            scope.set_item(intern!(py, "scheme"), intern!(py, "https"))?;
        }
        // Always present, a fresh dict per request (apps may add to it), holding what works on
        // this connection. Trailers are advertised only where they reach the client: HTTP/2,
        // and HTTP/1.1 when the request says `TE: trailers` (hyper drops them otherwise).
        let extensions = PyDict::new(py);
        extensions.set_item(intern!(py, "http.response.pathsend"), PyDict::new(py))?;
        extensions.set_item(intern!(py, "http.response.zerocopysend"), PyDict::new(py))?;
        if req.early_hints {
            extensions.set_item(intern!(py, "http.response.early_hint"), PyDict::new(py))?;
        }
        if req.trailers {
            extensions.set_item(intern!(py, "http.response.trailers"), PyDict::new(py))?;
        }
        scope.set_item(intern!(py, "extensions"), extensions)?;
        self.fill_common(py, &scope, head, &req.conn)?;
        Ok(scope)
    }

    /// The `websocket` scope.
    pub(crate) fn build_websocket<'py>(
        &self,
        py: Python<'py>,
        req: &PendingWebSocket,
    ) -> PyResult<Bound<'py, PyDict>> {
        let head = &req.head;
        let scope = self.websocket_template.bind(py).copy()?;
        scope.set_item(
            intern!(py, "http_version"),
            py_http_version(py, head.version),
        )?;
        if req.conn.tls.is_some() {
            scope.set_item(intern!(py, "scheme"), intern!(py, "wss"))?;
        }
        scope.set_item(
            intern!(py, "subprotocols"),
            PyList::new(py, req.subprotocols.iter())?,
        )?;
        // Only what works: the denial response (websocket.http.response.*).
        let extensions = PyDict::new(py);
        extensions.set_item("websocket.http.response", PyDict::new(py))?;
        scope.set_item(intern!(py, "extensions"), extensions)?;
        self.fill_common(py, &scope, head, &req.conn)?;
        Ok(scope)
    }

    /// The keys both scope types share.
    fn fill_common(
        &self,
        py: Python<'_>,
        scope: &Bound<'_, PyDict>,
        head: &http::request::Parts,
        conn: &ConnInfo,
    ) -> PyResult<()> {
        let raw_path = head.uri.path().as_bytes();
        let decoded = percent_decode(raw_path).decode_utf8_lossy();
        if self.root_path_raw.is_empty() {
            scope.set_item(intern!(py, "path"), PyString::new(py, &decoded))?;
            scope.set_item(intern!(py, "raw_path"), PyBytes::new(py, raw_path))?;
        } else {
            // The spec: `path` includes `root_path`; `raw_path` is what the client sent
            // behind the same prefix.
            let root = self.root_path.bind(py).to_str()?;
            let mut path = String::with_capacity(root.len() + decoded.len());
            path.push_str(root);
            path.push_str(&decoded);
            let mut raw = Vec::with_capacity(self.root_path_raw.len() + raw_path.len());
            raw.extend_from_slice(&self.root_path_raw);
            raw.extend_from_slice(raw_path);
            scope.set_item(intern!(py, "path"), PyString::new(py, &path))?;
            scope.set_item(intern!(py, "raw_path"), PyBytes::new(py, &raw))?;
        }
        let query = head.uri.query().unwrap_or("").as_bytes();
        scope.set_item(intern!(py, "query_string"), PyBytes::new(py, query))?;

        let headers = PyList::empty(py);
        for (name, value) in head.headers.iter() {
            let pair = PyTuple::new(
                py,
                [
                    self.header_name(py, name).into_any(),
                    PyBytes::new(py, value.as_bytes()).into_any(),
                ],
            )?;
            headers.append(pair)?;
        }
        scope.set_item(intern!(py, "headers"), headers)?;

        set_addresses(py, scope, conn)?;
        if let Some(tls) = &conn.tls {
            let extensions = match scope.get_item(intern!(py, "extensions"))? {
                Some(e) if !e.is_none() => e.downcast_into::<PyDict>()?,
                _ => {
                    let e = PyDict::new(py);
                    scope.set_item(intern!(py, "extensions"), &e)?;
                    e
                }
            };
            let cert = self
                .server_cert
                .get_or_init(|| PyString::new(py, &tls.server_cert).unbind());
            extensions.set_item(intern!(py, "tls"), tls_extension(py, tls, cert.bind(py))?)?;
        }
        if let Some(state) = &self.state {
            scope.set_item(intern!(py, "state"), state.bind(py).copy()?)?;
        }
        Ok(())
    }
}

/// The header-name cache's hasher: FxHash, seeded per process. Every request header is
/// looked up here, and std's SipHash cost ~220 instructions per name (callgrind: 880 of
/// ~45,000 per plaintext request); Fx hashes a short name in a few. The seed (from std's
/// random keys) keeps a client from aiming names at one bucket in advance, and the cache
/// stops growing at `HEADER_NAME_CACHE_MAX` names whatever it is sent.
fn header_name_hasher() -> FxSeededState {
    FxSeededState::with_seed(RandomState::new().hash_one(0x5eed_u64) as usize)
}

fn set_addresses(py: Python<'_>, scope: &Bound<'_, PyDict>, conn: &ConnInfo) -> PyResult<()> {
    match conn.peer {
        Some(peer) => scope.set_item(intern!(py, "client"), (&*conn.peer_host, peer.port()))?,
        None => scope.set_item(intern!(py, "client"), py.None())?,
    }
    match &conn.local {
        LocalAddr::Tcp(local) => {
            scope.set_item(intern!(py, "server"), (&*conn.local_host, local.port()))?
        }
        LocalAddr::Unix(path) => {
            scope.set_item(intern!(py, "server"), (path.as_ref(), py.None()))?
        }
    }
    Ok(())
}

/// `extensions["tls"]` (ASGI TLS extension), a fresh dict per request since apps may
/// mutate it.
fn tls_extension<'py>(
    py: Python<'py>,
    tls: &TlsInfo,
    server_cert: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "server_cert"), server_cert)?;
    let chain = PyList::empty(py);
    for pem in &tls.client_cert_chain {
        chain.append(pem)?;
    }
    d.set_item(intern!(py, "client_cert_chain"), chain)?;
    d.set_item(
        intern!(py, "client_cert_name"),
        tls.client_cert_name.as_deref(),
    )?;
    // The handshake refuses invalid client certificates outright, so a connection that got
    // this far never has a verification error to report.
    d.set_item(intern!(py, "client_cert_error"), py.None())?;
    d.set_item(intern!(py, "tls_version"), tls.tls_version)?;
    d.set_item(intern!(py, "cipher_suite"), tls.cipher_suite)?;
    Ok(d)
}

fn py_http_version(py: Python<'_>, version: Version) -> &Bound<'_, PyString> {
    match version {
        Version::HTTP_10 => intern!(py, "1.0"),
        Version::HTTP_2 => intern!(py, "2"),
        Version::HTTP_3 => intern!(py, "3"),
        _ => intern!(py, "1.1"),
    }
}

fn method<'py>(py: Python<'py>, method: &Method) -> Bound<'py, PyString> {
    let interned = match *method {
        Method::GET => intern!(py, "GET"),
        Method::POST => intern!(py, "POST"),
        Method::PUT => intern!(py, "PUT"),
        Method::DELETE => intern!(py, "DELETE"),
        Method::HEAD => intern!(py, "HEAD"),
        Method::OPTIONS => intern!(py, "OPTIONS"),
        Method::PATCH => intern!(py, "PATCH"),
        _ => return PyString::new(py, method.as_str()),
    };
    interned.clone()
}
