//! HTTP/3 over QUIC (`--http3`): quinn's endpoint on the UDP socket at the TCP listener's
//! address, h3 on each connection, and each request through the same service as HTTP/2
//! (`server::service::handle_multiplexed_request`). Nothing here touches Python.
//!
//! `listener`: the accept loop; `connection`: one QUIC connection (GOAWAY, drain, keep-alive
//! close); `request`: one request stream (the RFC 9114 head checks, the service call);
//! `response`: a response written into the stream; `body`: the request body as an
//! `http_body::Body`; `quic_config`: the rustls and transport settings; `protocol_shim`: what lets h3 take a WebSocket's
//! extended CONNECT (RFC 9220); `websocket`: such a request served by the WebSocket
//! session (`server::websocket`) over `ws_io`, the stream as a byte stream.

mod body;
mod connection;
mod listener;
mod protocol_shim;
mod quic_config;
mod request;
mod response;
mod websocket;
mod ws_io;

pub(crate) use listener::{accept_loop, endpoint, reload};
