//! The access line of each app call, written by the core (access_log/) when the default
//! logging configuration is in effect (python/ferrocorn/_access_fastpath.py decides).
//!
//! `HttpProtocol` and `WebSocketProtocol` record their line when the app call ends, with
//! what the Python runner used to log after it: the same content, without entering
//! Python's logging. Should the configuration change while serving (a handler or filter
//! added to `ferrocorn.access`), Python diverts the lines back to its logging.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use http::Version;
use pyo3::prelude::*;

use crate::access_log::sink::AccessSink;
use crate::access_log::{Client, Line};

pub(crate) struct AccessLog {
    sink: AccessSink,
    /// The default handler colours the level name (stdout is a terminal).
    colour: bool,
    /// `callback(client, method, path, http_version, status)` once diverted to Python.
    diverted: OnceLock<Py<PyAny>>,
}

impl AccessLog {
    pub(crate) fn new(sink: AccessSink, colour: bool) -> Self {
        AccessLog {
            sink,
            colour,
            diverted: OnceLock::new(),
        }
    }

    pub(crate) fn record(&self, py: Python<'_>, line: &Line<'_>) {
        let Some(callback) = self.diverted.get() else {
            self.sink.push_with(|buf| line.write_to(buf, self.colour));
            return;
        };
        let client = match &line.client {
            Client::Text(text) => (*text).to_owned(),
            Client::Peer(peer) => peer
                .as_ref()
                .map(crate::bridge::pending::host_port)
                .unwrap_or_default(),
        };
        let args = (client, line.method, line.target, line.version, line.status);
        if let Err(err) = callback.call1(py, args) {
            err.write_unraisable(py, None);
        }
    }

    /// From now on lines go to `callback` (flush first, so that the order holds).
    pub(crate) fn divert(&self, callback: Py<PyAny>) {
        let _ = self.diverted.set(callback);
    }

    /// Returns once every line recorded so far is written.
    pub(crate) fn flush(&self) {
        self.sink.flush();
    }

    /// The core closes: write what is buffered; later lines are written as they come.
    pub(crate) fn close(&self) {
        self.sink.close();
    }
}

/// "1.0", "1.1" or "2", as the access line and `access_info()` show the version.
pub(crate) fn version_text(version: Version) -> &'static str {
    match version {
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        _ => "1.1",
    }
}

/// The path with query a line shows ("/" when the target has none).
pub(crate) fn target_text(uri: &http::Uri) -> &str {
    uri.path_and_query().map_or("/", |p| p.as_str())
}

/// One app call's part: its line is written once however the call ended, naming the
/// client the proxy headers gave when the runner set one.
#[derive(Default)]
pub(crate) struct CallAccess {
    logged: AtomicBool,
    client: OnceLock<String>,
}

/// The request as the access line shows it.
pub(crate) struct Request<'a> {
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) method: &'a str,
    pub(crate) uri: &'a http::Uri,
    pub(crate) version: &'static str,
}

impl CallAccess {
    /// Set by the runner before the app runs (`--proxy-headers` rewrote the client).
    pub(crate) fn set_client(&self, client: String) {
        let _ = self.client.set(client);
    }

    /// The app call ended: its line, when the core writes the access log.
    pub(crate) fn record(
        &self,
        py: Python<'_>,
        log: Option<&AccessLog>,
        request: Request<'_>,
        status: u16,
    ) {
        let Some(log) = log else {
            return;
        };
        if self.logged.swap(true, Ordering::Relaxed) {
            return;
        }
        let client = match self.client.get() {
            Some(text) => Client::Text(text),
            None => Client::Peer(request.peer),
        };
        let line = Line {
            client,
            method: request.method,
            target: target_text(request.uri),
            version: request.version,
            status,
        };
        log.record(py, &line);
    }
}
