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
use std::time::SystemTime;

use http::Version;
use pyo3::prelude::*;

use crate::access_log::json::{JsonLine, RequestFields};
use crate::access_log::sink::AccessSink;
use crate::access_log::{Client, Line};
use crate::bridge::Served;

pub(crate) struct AccessLog {
    sink: AccessSink,
    /// The default handler colours the level name (stdout is a terminal).
    colour: bool,
    /// `--log-format json`: the line is access_log/json.rs's object.
    json: bool,
    /// `callback(client, method, path, http_version, status)` once diverted to Python.
    diverted: OnceLock<Py<PyAny>>,
}

impl AccessLog {
    pub(crate) fn new(sink: AccessSink, colour: bool, json: bool) -> Self {
        AccessLog {
            sink,
            colour,
            json,
            diverted: OnceLock::new(),
        }
    }

    /// Whether lines need the request's `RequestFields` and the call's `Outcome` measures.
    pub(crate) fn is_json(&self) -> bool {
        self.json
    }

    /// Needs no GIL unless the lines are diverted to Python (the PyPy fast path records its
    /// lines without holding Python objects).
    pub(crate) fn record(&self, line: &Line<'_>, extra: Extra<'_>) {
        let Some(callback) = self.diverted.get() else {
            if self.json {
                let now = SystemTime::now();
                let json = JsonLine {
                    line,
                    bytes: extra.bytes,
                    duration: extra.duration,
                    fields: extra.fields,
                };
                self.sink.push_with(|buf| json.write_to(buf, now));
            } else {
                self.sink.push_with(|buf| line.write_to(buf, self.colour));
            }
            return;
        };
        let client = match &line.client {
            Client::Text(text) => (*text).to_owned(),
            Client::Peer(peer) => peer
                .as_ref()
                .map(crate::bridge::host_port)
                .unwrap_or_default(),
        };
        let args = (client, line.method, line.target, line.version, line.status);
        Python::attach(|py| {
            if let Err(err) = callback.call1(py, args) {
                err.write_unraisable(py, None);
            }
        });
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

/// "1.0", "1.1", "2" or "3", as the access line and `access_info()` show the version.
pub(crate) fn version_text(version: Version) -> &'static str {
    match version {
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
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
    /// The headers the JSON line shows (kept only when it is on).
    pub(crate) fields: Option<&'a RequestFields>,
}

/// How the app call ended, as the line shows it.
#[derive(Clone, Copy)]
pub(crate) struct Outcome {
    pub(crate) status: u16,
    /// Response body bytes sent; only measured for the JSON line (else 0).
    pub(crate) bytes: u64,
    /// Seconds since the request arrived; only measured for the JSON line (else 0).
    pub(crate) duration: f64,
}

impl Outcome {
    /// `status`, and the measures `measure` takes only when `log` writes JSON lines: the
    /// text line costs no clock read.
    pub(crate) fn new(
        log: Option<&AccessLog>,
        status: u16,
        measure: impl FnOnce() -> (u64, f64),
    ) -> Self {
        let (bytes, duration) = if log.is_some_and(AccessLog::is_json) {
            measure()
        } else {
            (0, 0.0)
        };
        Outcome {
            status,
            bytes,
            duration,
        }
    }
}

/// What the JSON line adds to `Line`.
pub(crate) struct Extra<'a> {
    bytes: u64,
    duration: f64,
    fields: Option<&'a RequestFields>,
}

/// The request's `RequestFields`, taken from its head only when `log` writes JSON lines.
pub(crate) fn request_fields(
    log: Option<&AccessLog>,
    headers: &http::HeaderMap,
) -> Option<Box<RequestFields>> {
    log.filter(|log| log.is_json())
        .map(|_| Box::new(RequestFields::from_headers(headers)))
}

impl CallAccess {
    /// Set by the runner before the app runs (`--proxy-headers` rewrote the client).
    pub(crate) fn set_client(&self, client: String) {
        let _ = self.client.set(client);
    }

    /// The app call ended: its line, when the core writes the access log.
    pub(crate) fn record(&self, log: Option<&AccessLog>, request: Request<'_>, outcome: Outcome) {
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
            status: outcome.status,
        };
        let extra = Extra {
            bytes: outcome.bytes,
            duration: outcome.duration,
            fields: request.fields,
        };
        log.record(&line, extra);
    }
}

/// A response the core made without the app (the static route): the same line an app
/// call's would be, with the socket's peer as the client.
pub(crate) fn record_served(log: &AccessLog, served: &Served) {
    let line = Line {
        client: Client::Peer(served.peer),
        method: served.method.as_str(),
        target: target_text(&served.uri),
        version: version_text(served.version),
        status: served.status,
    };
    let extra = Extra {
        bytes: served.bytes,
        duration: served.duration,
        fields: Some(&served.fields),
    };
    log.record(&line, extra);
}
