//! quinn's server configuration: the TLS configuration `--ssl-*` loaded (src/tls/), with
//! ALPN `h3` (QUIC always runs TLS 1.3), and the transport limits from the server's options.

use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::QuicServerConfig;
use quinn::{IdleTimeout, TransportConfig, VarInt};

use crate::config::ServerConfig;
use crate::tls::TlsServer;

/// The ALPN token of HTTP/3 (RFC 9114 §3.1).
const ALPN_H3: &[u8] = b"h3";

/// How long a QUIC connection may go without a packet before it is gone: the peer vanished.
/// Idle HTTP connections are closed sooner, by `--timeout-keep-alive` (connection.rs).
const TRANSPORT_IDLE: Duration = Duration::from_secs(30);

/// Pings while a request is in flight but nothing moves (an app thinking for long), so the
/// transport's idle timer does not end the connection under it.
const KEEP_ALIVE_PING: Duration = Duration::from_secs(10);

/// The unidirectional streams a client may open: its control and two QPACK streams, and a
/// few for extensions (grease). Push is never enabled.
const MAX_UNI_STREAMS: u32 = 8;

/// The server configuration for the certificate `tls` presents now.
pub(crate) fn server_config(
    tls: &TlsServer,
    config: &ServerConfig,
    max_streams: u32,
) -> Result<quinn::ServerConfig, String> {
    let mut rustls_config = (*tls.current().acceptor.config().as_ref()).clone();
    rustls_config.alpn_protocols = vec![ALPN_H3.to_vec()];
    // No 0-RTT: requests in early data can be replayed by an attacker.
    rustls_config.max_early_data_size = 0;
    let crypto = QuicServerConfig::try_from(rustls_config)
        .map_err(|e| format!("the TLS configuration cannot serve QUIC: {e}"))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(transport(config, max_streams)));
    Ok(server)
}

fn transport(config: &ServerConfig, max_streams: u32) -> TransportConfig {
    let mut transport = TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(VarInt::from_u32(max_streams))
        .max_concurrent_uni_streams(VarInt::from_u32(MAX_UNI_STREAMS))
        .keep_alive_interval(Some(KEEP_ALIVE_PING));
    if let Ok(idle) = IdleTimeout::try_from(TRANSPORT_IDLE) {
        transport.max_idle_timeout(Some(idle));
    }
    // Per stream and per connection, like HTTP/2's windows: what a client may send ahead of
    // the app reading it (flow control is the request body's backpressure).
    let stream_window = config.http2.initial_stream_window_size;
    let conn_window = config.http2.initial_connection_window_size;
    transport
        .stream_receive_window(VarInt::from_u32(stream_window))
        .receive_window(VarInt::from_u32(conn_window));
    transport
}
