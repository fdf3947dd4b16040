//! One HTTP/2 request stream: the checks h2 leaves to us, the request run through the
//! shared service (`service::handle_multiplexed_request`, as HTTP/3's) with its early hints sent as they come
//! (`send_informational`), the response written (`response`), or the stream handed to the
//! WebSocket session (`websocket`). A malformed request's stream is reset with
//! PROTOCOL_ERROR; a client resetting the stream drops the service future, which the app
//! hears as a disconnect.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::{Request, StatusCode};

use crate::bridge::ResponseBody;
use crate::http::body_reader::InBody;
use crate::http::h2_body::H2Body;
use crate::http::headers::{content_length, h2_request_is_malformed};
use crate::server::conn_state::ConnCtx;
use crate::server::early_hints::{informational, StreamHints};
use crate::server::h2::response::write_response;
use crate::server::h2::websocket::serve_websocket;
use crate::server::service::{handle_multiplexed_request, TrackedBody};
use crate::ws::handshake::asks_for_websocket_over_h2;

/// What one wait for the service ended with.
enum Step<R> {
    Response(R),
    /// The app sent early hints: they go out before the wait goes on.
    Hints,
    /// The client reset the stream.
    Reset,
}

pub(super) async fn serve_stream(
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    conn: Arc<ConnCtx>,
) {
    let (parts, recv) = request.into_parts();
    if h2_request_is_malformed(&parts.method, &parts.uri, &parts.headers) {
        respond.send_reset(Reason::PROTOCOL_ERROR);
        return;
    }
    let Ok(length) = content_length(&parts.headers) else {
        respond.send_reset(Reason::PROTOCOL_ERROR);
        return;
    };
    let date = conn.shared.config.date_header;
    if let Some(protocol) = parts.extensions.get::<h2::ext::Protocol>() {
        let websocket = conn.shared.config.ws.enabled
            && asks_for_websocket_over_h2(&parts.method, Some(protocol.as_str()));
        if websocket && length.unwrap_or(0) == 0 {
            return serve_websocket(parts, respond, recv, conn).await;
        }
        // An extended CONNECT for a protocol other than WebSocket: no ASGI scope carries it.
        let response = ResponseBody::error(&conn.shared.config, StatusCode::BAD_REQUEST);
        let response = TrackedBody::new(response, None, None);
        return write_response(&mut respond, response, date).await;
    }
    let body = InBody::H2(H2Body::new(recv, length));
    let hints = StreamHints::default();
    let mut service = pin!(handle_multiplexed_request(
        Request::from_parts(parts, body),
        conn.clone(),
        &hints
    ));
    let response = loop {
        let step = poll_fn(|cx| {
            if let Poll::Ready(response) = service.as_mut().poll(cx) {
                return Poll::Ready(Step::Response(response));
            }
            if !hints.is_empty() {
                return Poll::Ready(Step::Hints);
            }
            if respond.poll_reset(cx).is_ready() {
                return Poll::Ready(Step::Reset);
            }
            Poll::Pending
        })
        .await;
        // Queued as the service ran (the response's own poll included): before the head.
        while let Some(hint) = hints.pop() {
            if respond.send_informational(informational(hint)).is_err() {
                return;
            }
        }
        match step {
            Step::Response(response) => break response,
            Step::Hints => {}
            Step::Reset => return,
        }
    };
    write_response(&mut respond, response, date).await;
}
