//! HTTP/2 on the `h2` crate, without hyper (HTTP/1.1 stays on hyper). Owning the streams
//! lets a WebSocket over HTTP/2 (RFC 8441) read h2's `Bytes` and hand it `Bytes` to send,
//! where hyper's upgraded stream copied every piece each way through a channel and a task
//! of its own; and early hints go out through h2's `send_informational` instead of frames
//! spliced into the connection's output.
//!
//! `driver`: the connection (handshake, settings, accepting streams, keep-alive PING,
//! graceful shutdown); `stream`: one request stream (checks, the service call, early hints,
//! the client's reset); `response`: a response written into the stream with
//! h2's send-capacity backpressure; `websocket` and `ws_io`: an extended CONNECT served by
//! the WebSocket session over the stream. The request body (h2's `RecvStream` as an
//! `http_body::Body`) is the protocol layer's: `http::h2_body`.

mod driver;
mod response;
mod stream;
mod websocket;
mod ws_io;

pub(crate) use driver::H2Connection;
