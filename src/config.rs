//! Settings the network side needs; plain Rust data, shared read-only by every task.

use std::time::Duration;

use http::{HeaderName, HeaderValue};

use crate::ws::WsConfig;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Add `Server: ferrocorn` unless the app set its own.
    pub server_header: bool,
    /// Let hyper add a cached `Date` header.
    pub date_header: bool,
    /// Extra headers added to every response (`--header`).
    pub extra_headers: Vec<(HeaderName, HeaderValue)>,
    pub max_header_size: usize,
    pub max_headers: usize,
    /// Bodies with a Content-Length up to this are read before dispatch.
    pub body_preread_limit: u64,
    pub header_read_timeout: Option<Duration>,
    pub keep_alive: bool,
    /// Close a keep-alive connection idle (no request in flight) for this long.
    pub keep_alive_timeout: Option<Duration>,
    /// Answer 503 instead of dispatching beyond this many requests in flight.
    pub limit_concurrency: Option<usize>,
    pub ws: WsConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            server_header: true,
            date_header: true,
            extra_headers: Vec::new(),
            max_header_size: 64 * 1024,
            max_headers: 100,
            body_preread_limit: 64 * 1024,
            header_read_timeout: Some(Duration::from_secs(30)),
            keep_alive: true,
            keep_alive_timeout: Some(Duration::from_secs(5)),
            limit_concurrency: None,
            ws: WsConfig::default(),
        }
    }
}
