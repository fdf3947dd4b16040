//! The PROXY protocol (HAProxy's, v1 text and v2 binary): a load balancer in front of the
//! server sends one header before the connection's own bytes, saying whom it accepted the
//! connection from. Plain Rust: the header's parser (`header`), the peers allowed to send
//! one (`trust`) and the `--proxy-protocol` setting. Reading it off a socket is
//! `server::proxied`.

pub(crate) mod header;
pub(crate) mod trust;

use std::time::Duration;

pub(crate) use header::{parse, Parsed, Versions};
pub(crate) use trust::TrustedPeers;

/// `--proxy-protocol` when not `off`: which headers, from whom, and how long one may take.
#[derive(Clone, Debug)]
pub(crate) struct ProxyProtocol {
    pub(crate) versions: Versions,
    /// `--forwarded-allow-ips`: only these peers' connections are read for a header; any
    /// other peer is served as a plain connection.
    pub(crate) trusted: TrustedPeers,
    /// The header must be complete within this (`--ssl-handshake-timeout`); over TLS the
    /// handshake then has what is left of it.
    pub(crate) timeout: Duration,
    /// Whether a refused header is worth a debug line (the log level is debug or lower):
    /// otherwise a misbehaving peer costs no event per connection.
    pub(crate) log_refusals: bool,
}
