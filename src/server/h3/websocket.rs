//! A WebSocket over one HTTP/3 request stream (RFC 9220): the handshake through the same
//! service path as HTTP/2's (`service::handle_multiplexed_websocket`), the 200 sent on the stream,
//! then the stream handed to the WebSocket session as a byte stream (`ws_io`). A denial
//! is an ordinary response on the stream. The stream's task lives as long as the socket:
//! the connection counts it in flight, so a drain waits for the close handshake and the
//! keep-alive timer leaves the connection open.

use std::sync::Arc;

use http::Request;
use tokio::sync::oneshot;

use crate::server::conn_state::ConnCtx;
use crate::server::h3::body::RecvSide;
use crate::server::h3::response::{send_head, write_response, SendSide};
use crate::server::h3::ws_io::H3Io;
use crate::server::service::handle_multiplexed_websocket;

pub(crate) async fn serve_websocket(
    head: Request<()>,
    mut send: SendSide,
    recv: RecvSide,
    conn: Arc<ConnCtx>,
) {
    let (io_tx, io_rx) = oneshot::channel::<H3Io>();
    let upgraded = async move { io_rx.await.ok() };
    let (parts, ()) = head.into_parts();
    let response = handle_multiplexed_websocket(parts, conn.clone(), upgraded).await;
    let date = conn.shared.config.date_header;
    // A 2xx is the acceptance (a 2xx denial was turned into a 403 already).
    if !response.status().is_success() {
        return write_response(&mut send, response, date).await;
    }
    let (parts, _empty) = response.into_parts();
    if send_head(&mut send, parts, date).await.is_err() {
        return; // the session hears of it as a socket that never opened
    }
    let (done_tx, done_rx) = oneshot::channel();
    if io_tx.send(H3Io::new(send, recv, done_tx)).is_ok() {
        let _ = done_rx.await;
    }
}
