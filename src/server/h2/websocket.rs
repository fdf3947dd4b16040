//! A WebSocket over one HTTP/2 stream (RFC 8441): the handshake through the service path
//! every multiplexed transport shares (`service::handle_multiplexed_websocket`), the 200
//! sent on the stream, then the stream handed to the WebSocket session (`ws_io`). A denial
//! is an ordinary response on the stream.

use std::sync::Arc;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use http::header::CONTENT_LENGTH;
use tokio::sync::oneshot;

use crate::server::conn_state::ConnCtx;
use crate::server::h2::response::{head, write_response};
use crate::server::h2::ws_io::H2Io;
use crate::server::service::handle_multiplexed_websocket;

pub(super) async fn serve_websocket(
    parts: http::request::Parts,
    mut respond: SendResponse<Bytes>,
    recv: RecvStream,
    conn: Arc<ConnCtx>,
) {
    let (io_tx, io_rx) = oneshot::channel::<H2Io>();
    let upgraded = async move { io_rx.await.ok() };
    let response = handle_multiplexed_websocket(parts, conn.clone(), upgraded).await;
    let date = conn.shared.config.date_header;
    // A 2xx is the acceptance (a 2xx denial was turned into a 403 already).
    if !response.status().is_success() {
        return write_response(&mut respond, response, date).await;
    }
    let (parts, _empty) = response.into_parts();
    let mut head = head(parts, date);
    // The 200 of a CONNECT opens a tunnel: it has no content (RFC 9110 §9.3.6).
    head.headers_mut().remove(CONTENT_LENGTH);
    let Ok(send) = respond.send_response(head, false) else {
        return; // the session hears of it as a socket that never opened
    };
    // The session holds the stream from here; h2 keeps the connection open (and a graceful
    // shutdown waiting) while it does.
    let _ = io_tx.send(H2Io::new(send, recv));
}
