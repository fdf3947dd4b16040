//! HTTP/3 over QUIC (`--http3`): quinn's endpoint on the UDP socket at the TCP listener's
//! address, h3 on each connection, and each request through the same service as HTTP/2
//! (`server::service::handle_h3_request`). Nothing here touches Python.
//!
//! `listener`: the accept loop; `connection`: one QUIC connection (GOAWAY, drain, keep-alive
//! close); `request`: one request stream (the RFC 9114 head checks, the response written
//! into the stream); `body`: the request body as an `http_body::Body`; `quic_config`: the
//! rustls and transport settings.

mod body;
mod connection;
mod listener;
mod quic_config;
mod request;

pub(crate) use listener::{accept_loop, endpoint, reload};
