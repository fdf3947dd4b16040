//! Settings the network side needs; plain Rust data, shared read-only by every task.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};

use crate::proxy_protocol::ProxyProtocol;
use crate::tls::TlsServer;

/// `--http`: which protocols a connection may speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HttpMode {
    /// HTTP/1.1, plus HTTP/2 by ALPN on TLS or by the prior-knowledge preface on cleartext.
    Auto,
    Http1,
    Http2,
}

/// `--sendfile`: when a file body of a cleartext HTTP/1.1 response goes out by sendfile(2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendfileMode {
    /// To peers on other hosts; a peer on this host (loopback, or our own address) gets the
    /// file read and written as bytes (`server::service::writes_by_sendfile` says why).
    Auto,
    On,
    Off,
}

/// HTTP/2 connection settings (`--http2-*`).
#[derive(Clone, Debug)]
pub(crate) struct Http2Settings {
    pub(crate) max_concurrent_streams: u32,
    pub(crate) initial_stream_window_size: u32,
    pub(crate) initial_connection_window_size: u32,
    pub(crate) max_frame_size: u32,
    pub(crate) max_header_list_size: u32,
    /// Send PING frames this often (None: never).
    pub(crate) keep_alive_interval: Option<Duration>,
    /// Close the connection when a PING is not answered within this.
    pub(crate) keep_alive_timeout: Duration,
}

impl Default for Http2Settings {
    fn default() -> Self {
        Http2Settings {
            max_concurrent_streams: 100,
            initial_stream_window_size: 1024 * 1024,
            initial_connection_window_size: 2 * 1024 * 1024,
            max_frame_size: 16 * 1024,
            max_header_list_size: 64 * 1024,
            keep_alive_interval: None,
            keep_alive_timeout: Duration::from_secs(20),
        }
    }
}
use crate::ws::WsConfig;

/// `--http3-*`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Http3Settings {
    /// Request streams a client may have open at once (QUIC's bidirectional stream limit).
    pub(crate) max_concurrent_streams: u32,
}

/// `--path-policy`: the body limits of requests under a path prefix, already resolved
/// against the global ones (a key the policy does not set has the global value).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PathPolicy {
    /// Normalised by config.py: starts with `/`; see `prefix_matches`.
    pub(crate) prefix: String,
    pub(crate) limit_request_body: Option<u64>,
    pub(crate) timeout_request_body: Option<Duration>,
}

/// The body limits one request gets: the global ones, or its path policy's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BodyLimits {
    pub(crate) limit: Option<u64>,
    pub(crate) timeout: Option<Duration>,
}

/// Whether `path` (raw, as the client sent it, without the query) is under `prefix`: at a
/// segment boundary, so `/upload` covers `/upload` and `/upload/...` but not `/uploads`; a
/// prefix ending in `/` covers what starts with it (`/` covers everything). The same rule
/// as config.py's `PathPolicy.matches`.
pub(crate) fn prefix_matches(prefix: &str, path: &str) -> bool {
    path.starts_with(prefix)
        && (prefix.ends_with('/')
            || path.len() == prefix.len()
            || path.as_bytes()[prefix.len()] == b'/')
}

/// `--static-path-route` / `--static-path-mount`: files under `mount` answered by the core
/// for requests under `prefix`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StaticRoute {
    /// Normalised by config.py: starts with `/`, no trailing `/` (unless it is `/`).
    pub(crate) prefix: String,
    /// Canonical (config.py resolved it): the root no served file may be outside of.
    pub(crate) mount: std::path::PathBuf,
}

/// The static route's settings; `routes` empty: no static route (one branch per request).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct StaticFiles {
    pub(crate) routes: Vec<StaticRoute>,
    /// `--static-path-expires`: `Cache-Control: max-age=N` (None: no header).
    pub(crate) max_age: Option<u64>,
    /// `--static-path-index`: the file a directory request gets (None: 404).
    pub(crate) index: Option<String>,
    /// `--static-path-follow-symlinks`: serve what a symlink names outside the mount.
    pub(crate) follow_symlinks: bool,
    /// `--static-path-cache-size`: bytes of small files kept in memory (0: none).
    pub(crate) cache_bytes: usize,
}

impl StaticFiles {
    /// The route a raw path is under (first match), if any.
    pub(crate) fn route_for(&self, path: &str) -> Option<&StaticRoute> {
        if self.routes.is_empty() {
            return None;
        }
        self.routes
            .iter()
            .find(|route| prefix_matches(&route.prefix, path))
    }
}

#[derive(Clone, Debug)]
pub(crate) struct ServerConfig {
    /// Add `Server: ferrocorn` unless the app set its own.
    pub(crate) server_header: bool,
    /// Let hyper add a cached `Date` header.
    pub(crate) date_header: bool,
    /// Extra headers added to every response (`--header`).
    pub(crate) extra_headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) max_header_size: usize,
    pub(crate) max_headers: usize,
    /// Bodies with a Content-Length up to this are read before dispatch.
    pub(crate) body_preread_limit: u64,
    /// Response body bytes one response may hold before `send()` waits (bridge/budget.rs).
    pub(crate) limit_response_buffer: usize,
    /// The same for all streams of one HTTP/2 connection together.
    pub(crate) http2_connection_buffer: usize,
    pub(crate) header_read_timeout: Option<Duration>,
    /// Close a keep-alive connection idle (no request in flight) for this long.
    pub(crate) timeout_keep_alive: Option<Duration>,
    /// Answer 503 instead of dispatching beyond this many requests in flight.
    pub(crate) limit_concurrency: Option<usize>,
    /// `--limit-concurrency-queue`: this many more requests may wait for a slot, each at
    /// most `timeout_queue`.
    pub(crate) limit_concurrency_queue: Option<usize>,
    pub(crate) timeout_queue: Duration,
    /// `--limit-websockets`: WebSocket sessions open at once (counted apart from requests).
    pub(crate) limit_websockets: Option<usize>,
    /// `--limit-max-requests`: the request that reaches it starts the drain.
    pub(crate) limit_max_requests: Option<u64>,
    /// Largest request body: a Content-Length above it gets 413 up front, a streamed body is
    /// cut off (413, or an abort once the response started) when it grows past it.
    pub(crate) limit_request_body: Option<u64>,
    /// How long the server waits for the next piece of a request body while the app waits in
    /// `receive()` (408, or an abort once the response started).
    pub(crate) timeout_request_body: Option<Duration>,
    /// Longest request-target (path and query; HTTP/2 `:path`): longer ones get 414.
    pub(crate) limit_request_line: Option<usize>,
    /// First match wins; empty unless `--path-policy` is given (then one scan per request).
    pub(crate) path_policies: Vec<PathPolicy>,
    /// `--static-path-*`: answered by the core, never the app.
    pub(crate) static_files: Arc<StaticFiles>,
    /// Whether the loop hears of each static response (`Event::Served`): with the access
    /// log or `--metrics` on.
    pub(crate) report_static: bool,
    pub(crate) http: HttpMode,
    pub(crate) sendfile: SendfileMode,
    pub(crate) http2: Http2Settings,
    /// `--http3`: served on the UDP socket at the TCP address (server/h3/); None when off.
    pub(crate) http3: Option<Http3Settings>,
    /// Serve TLS on every listener when set.
    pub(crate) tls: Option<Arc<TlsServer>>,
    /// `--proxy-protocol` (None: off, no header is looked for).
    pub(crate) proxy_protocol: Option<ProxyProtocol>,
    pub(crate) ws: WsConfig,
}

impl ServerConfig {
    /// The body limits of a request for `path`: its first matching policy's, else the
    /// global ones. Without policies this is two copies.
    pub(crate) fn body_limits(&self, path: &str) -> BodyLimits {
        if !self.path_policies.is_empty() {
            if let Some(p) = self
                .path_policies
                .iter()
                .find(|p| prefix_matches(&p.prefix, path))
            {
                return BodyLimits {
                    limit: p.limit_request_body,
                    timeout: p.timeout_request_body,
                };
            }
        }
        BodyLimits {
            limit: self.limit_request_body,
            timeout: self.timeout_request_body,
        }
    }
}

/// For unit tests: the defaults users get are `Config`'s (python/ferrocorn/options/table.py),
/// read through `core::options`.
#[cfg(test)]
impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            server_header: true,
            date_header: true,
            extra_headers: Vec::new(),
            max_header_size: 64 * 1024,
            max_headers: 100,
            body_preread_limit: 64 * 1024,
            limit_response_buffer: 1024 * 1024,
            http2_connection_buffer: 4 * 1024 * 1024,
            header_read_timeout: Some(Duration::from_secs(30)),
            timeout_keep_alive: Some(Duration::from_secs(5)),
            limit_concurrency: None,
            limit_concurrency_queue: None,
            timeout_queue: Duration::from_secs(30),
            limit_websockets: None,
            limit_max_requests: None,
            limit_request_body: Some(1 << 30),
            timeout_request_body: Some(Duration::from_secs(60)),
            limit_request_line: Some(16 * 1024),
            path_policies: Vec::new(),
            static_files: Arc::default(),
            report_static: false,
            http: HttpMode::Auto,
            sendfile: SendfileMode::Auto,
            http2: Http2Settings::default(),
            http3: None,
            tls: None,
            proxy_protocol: None,
            ws: WsConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_at_segment_boundaries() {
        assert!(prefix_matches("/upload", "/upload"));
        assert!(prefix_matches("/upload", "/upload/a/b"));
        assert!(!prefix_matches("/upload", "/uploads"));
        assert!(!prefix_matches("/upload", "/"));
        assert!(prefix_matches("/upload/", "/upload/x"));
        assert!(!prefix_matches("/upload/", "/upload"));
        assert!(prefix_matches("/", "/anything"));
    }

    #[test]
    fn the_first_matching_policy_wins() {
        let policy = |prefix: &str, limit| PathPolicy {
            prefix: prefix.into(),
            limit_request_body: limit,
            timeout_request_body: None,
        };
        let config = ServerConfig {
            limit_request_body: Some(10),
            path_policies: vec![
                policy("/a/b", Some(1)),
                policy("/a", Some(2)),
                policy("/c", None),
            ],
            ..ServerConfig::default()
        };
        assert_eq!(config.body_limits("/a/b/c").limit, Some(1));
        assert_eq!(config.body_limits("/a/bc").limit, Some(2));
        assert_eq!(config.body_limits("/c").limit, None);
        let other = config.body_limits("/d");
        assert_eq!(other.limit, Some(10));
        assert_eq!(other.timeout, config.timeout_request_body);
    }
}
