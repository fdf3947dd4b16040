//! HTTP/3 over QUIC (`--http3`): quinn's endpoint on the UDP socket at the TCP listener's
//! address, h3 on each connection, and each request through the same service as HTTP/2
//! (`server::service::handle_h3_request`). Nothing here touches Python.
//!
//! `listener`: the accept loop; `connection`: one QUIC connection (GOAWAY, drain, keep-alive
//! close); `request`: one request stream (the RFC 9114 head checks, the response written
//! into the stream); `body`: the request body as an `http_body::Body`; `quic_config`: the
//! rustls and transport settings.

pub(crate) mod body;
pub(crate) mod connection;
pub(crate) mod listener;
pub(crate) mod quic_config;
pub(crate) mod request;
