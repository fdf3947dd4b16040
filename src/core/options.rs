//! The server's options, read straight from the Python `Config` object (python/ferrocorn/
//! config.py), which checks them; their defaults, flags and checks are declared once in
//! python/ferrocorn/options/table.py. Each field is the `Config` attribute of the same name:
//! adding an option touches that table, the field here that reads it, and what uses it.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::seconds::seconds;
use super::tls_config::TlsConfig;
use crate::config::{
    Http2Settings, Http3Settings, HttpMode, PathPolicy, SendfileMode, ServerConfig, StaticFiles,
    StaticRoute,
};
use crate::http::headers::{response_header_name, response_header_value};
use crate::proxy_protocol::{ProxyProtocol, TrustedPeers, Versions};
use crate::server::alpn_protocols;
use crate::ws::WsConfig;

/// What the core reads of a `Config`.
#[derive(FromPyObject)]
pub(crate) struct Options {
    pub(crate) root_path: String,
    server_header: bool,
    date_header: bool,
    /// `--header` values as (lowercase name, value) bytes.
    encoded_headers: Vec<(Vec<u8>, Vec<u8>)>,
    max_header_size: usize,
    max_headers: usize,
    body_preread_limit: u64,
    limit_response_buffer: usize,
    http2_connection_buffer: usize,
    header_read_timeout: Option<f64>,
    timeout_keep_alive: Option<f64>,
    limit_concurrency: Option<usize>,
    limit_concurrency_queue: Option<usize>,
    timeout_queue: f64,
    limit_websockets: Option<usize>,
    limit_max_requests: Option<u64>,
    limit_request_body: Option<u64>,
    timeout_request_body: Option<f64>,
    limit_request_line: Option<usize>,
    /// `--path-policy` as (prefix, body limit, body timeout), resolved by config.py.
    encoded_path_policies: Vec<(String, Option<u64>, Option<f64>)>,
    /// `--static-path-route`/`--static-path-mount` pairs as (prefix, canonical mount).
    encoded_static_routes: Vec<(String, String)>,
    static_path_expires: Option<u64>,
    static_path_index: Option<String>,
    static_path_follow_symlinks: bool,
    static_path_cache_size: usize,
    /// Whether the loop hears of each static response (`Config.report_static_responses`).
    report_static_responses: bool,
    pub(crate) runtime_threads: usize,
    tls: Option<Py<TlsConfig>>,
    ssl_handshake_timeout: f64,
    /// `off`, `v1`, `v2` or `auto`.
    proxy_protocol: String,
    /// `--forwarded-allow-ips` as networks for socket peers (`Config.trusted_peer_networks`).
    trusted_peer_networks: Vec<String>,
    /// Whether `ferrocorn.error` logs at debug level (`Config.error_log_debug`).
    error_log_debug: bool,
    http: String,
    /// `auto`, `on` or `off`.
    sendfile: String,
    http2_max_concurrent_streams: u32,
    http2_initial_stream_window_size: u32,
    http2_initial_connection_window_size: u32,
    http2_max_frame_size: u32,
    http2_max_header_list_size: u32,
    http2_keep_alive_interval: Option<f64>,
    http2_keep_alive_timeout: Option<f64>,
    http3: bool,
    /// None: the same as `http2_max_concurrent_streams`.
    http3_max_concurrent_streams: Option<u32>,
    ws: String,
    ws_max_size: usize,
    ws_max_queue: usize,
    ws_ping_interval: Option<f64>,
    ws_ping_timeout: Option<f64>,
    ws_per_message_deflate: bool,
}

impl Options {
    /// The tokio side's configuration. `Config` has validated the values already; what is
    /// checked again here is what a caller that builds the core by hand could get wrong.
    pub(crate) fn server_config(&self, py: Python<'_>) -> PyResult<ServerConfig> {
        let http = http_mode(&self.http)?;
        let http2 = Http2Settings {
            max_concurrent_streams: self.http2_max_concurrent_streams,
            initial_stream_window_size: self.http2_initial_stream_window_size,
            initial_connection_window_size: self.http2_initial_connection_window_size,
            max_frame_size: self.http2_max_frame_size,
            max_header_list_size: self.http2_max_header_list_size,
            keep_alive_interval: seconds(
                "http2_keep_alive_interval",
                self.http2_keep_alive_interval,
            )?,
            keep_alive_timeout: seconds("http2_keep_alive_timeout", self.http2_keep_alive_timeout)?
                .unwrap_or(Http2Settings::default().keep_alive_timeout),
        };
        let tls = self.tls.as_ref().map(|t| {
            let t = t.borrow(py);
            Arc::new(
                t.loaded
                    .with_alpn(alpn_protocols(http), t.handshake_timeout),
            )
        });
        Ok(ServerConfig {
            server_header: self.server_header,
            date_header: self.date_header,
            extra_headers: extra_headers(&self.encoded_headers)?,
            max_header_size: self.max_header_size,
            max_headers: self.max_headers,
            body_preread_limit: self.body_preread_limit,
            limit_response_buffer: self.limit_response_buffer,
            http2_connection_buffer: self.http2_connection_buffer,
            header_read_timeout: seconds("header_read_timeout", self.header_read_timeout)?,
            timeout_keep_alive: seconds("timeout_keep_alive", self.timeout_keep_alive)?,
            limit_concurrency: self.limit_concurrency,
            limit_concurrency_queue: self.limit_concurrency_queue.filter(|&n| n > 0),
            timeout_queue: seconds("timeout_queue", Some(self.timeout_queue))?
                .unwrap_or(Duration::from_secs(30)),
            limit_websockets: self.limit_websockets,
            limit_max_requests: self.limit_max_requests,
            limit_request_body: self.limit_request_body.filter(|&n| n > 0),
            timeout_request_body: seconds("timeout_request_body", self.timeout_request_body)?,
            limit_request_line: self.limit_request_line.filter(|&n| n > 0),
            path_policies: self
                .encoded_path_policies
                .iter()
                .map(|(prefix, limit, timeout)| {
                    Ok(PathPolicy {
                        prefix: prefix.clone(),
                        limit_request_body: limit.filter(|&n| n > 0),
                        timeout_request_body: seconds("path_policy body-timeout", *timeout)?,
                    })
                })
                .collect::<PyResult<_>>()?,
            static_files: Arc::new(StaticFiles {
                routes: self
                    .encoded_static_routes
                    .iter()
                    .map(|(prefix, mount)| StaticRoute {
                        prefix: prefix.clone(),
                        mount: mount.into(),
                    })
                    .collect(),
                max_age: self.static_path_expires.filter(|&n| n > 0),
                index: self.static_path_index.clone().filter(|i| !i.is_empty()),
                follow_symlinks: self.static_path_follow_symlinks,
                cache_bytes: self.static_path_cache_size,
            }),
            report_static: self.report_static_responses && !self.encoded_static_routes.is_empty(),
            http,
            sendfile: sendfile_mode(&self.sendfile)?,
            http2,
            http3: self.http3.then(|| Http3Settings {
                max_concurrent_streams: self
                    .http3_max_concurrent_streams
                    .unwrap_or(self.http2_max_concurrent_streams),
            }),
            tls,
            proxy_protocol: self.proxy_protocol()?,
            ws: WsConfig {
                enabled: self.ws != "none",
                max_size: self.ws_max_size,
                max_queue: self.ws_max_queue,
                ping_interval: seconds("ws_ping_interval", self.ws_ping_interval)?,
                ping_timeout: seconds("ws_ping_timeout", self.ws_ping_timeout)?,
                per_message_deflate: self.ws_per_message_deflate,
            },
        })
    }
}

impl Options {
    fn proxy_protocol(&self) -> PyResult<Option<ProxyProtocol>> {
        let versions = match self.proxy_protocol.as_str() {
            "off" => return Ok(None),
            "v1" => Versions::V1,
            "v2" => Versions::V2,
            "auto" => Versions::Any,
            other => {
                return Err(PyValueError::new_err(format!(
                    "invalid proxy_protocol {other:?}: expected \"off\", \"v1\", \"v2\" or \"auto\""
                )))
            }
        };
        let trusted = TrustedPeers::parse(&self.trusted_peer_networks)
            .map_err(|e| PyValueError::new_err(format!("invalid forwarded_allow_ips: {e}")))?;
        let timeout = seconds("ssl_handshake_timeout", Some(self.ssl_handshake_timeout))?
            .ok_or_else(|| PyValueError::new_err("ssl_handshake_timeout must be above 0"))?;
        Ok(Some(ProxyProtocol {
            versions,
            trusted,
            timeout,
            log_refusals: self.error_log_debug,
        }))
    }
}

fn extra_headers(
    headers: &[(Vec<u8>, Vec<u8>)],
) -> PyResult<Vec<(http::HeaderName, http::HeaderValue)>> {
    headers
        .iter()
        .map(|(name, value)| {
            let name = response_header_name(name).map_err(|_| {
                PyValueError::new_err(format!(
                    "invalid header name {:?}",
                    String::from_utf8_lossy(name)
                ))
            })?;
            let value = response_header_value(value)
                .map_err(|_| PyValueError::new_err(format!("invalid value for header {name}")))?;
            Ok((name, value))
        })
        .collect()
}

fn sendfile_mode(value: &str) -> PyResult<SendfileMode> {
    match value {
        "auto" => Ok(SendfileMode::Auto),
        "on" => Ok(SendfileMode::On),
        "off" => Ok(SendfileMode::Off),
        other => Err(PyValueError::new_err(format!(
            "invalid sendfile {other:?}: expected \"auto\", \"on\" or \"off\""
        ))),
    }
}

fn http_mode(value: &str) -> PyResult<HttpMode> {
    match value {
        "auto" => Ok(HttpMode::Auto),
        "1" | "1.1" => Ok(HttpMode::Http1),
        "2" => Ok(HttpMode::Http2),
        other => Err(PyValueError::new_err(format!(
            "invalid http {other:?}: expected \"auto\", \"1\" or \"2\""
        ))),
    }
}
