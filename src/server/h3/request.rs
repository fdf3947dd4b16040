//! One HTTP/3 request stream: its head resolved and checked (RFC 9114 §4.2, §4.3), the
//! request run through the shared service, the response written into the stream
//! (`response`), or the stream handed to `websocket` (RFC 9220). A malformed request gets
//! its stream reset with H3_MESSAGE_ERROR; an app failing after its response started resets
//! only its stream (H3_INTERNAL_ERROR).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use h3::error::Code;
use h3::server::RequestResolver;
use http::{Request, StatusCode};

use crate::bridge::ResponseBody;
use crate::http::body_reader::InBody;
use crate::http::headers::{content_length, h3_request_is_malformed};
use crate::server::conn_state::ConnCtx;
use crate::server::early_hints::{informational, StreamHints};
use crate::server::h3::body::H3Body;
use crate::server::h3::response::{write_response, SendSide};
use crate::server::h3::websocket::serve_websocket;
use crate::server::service::{handle_multiplexed_request, TrackedBody};

pub(crate) type Resolver = RequestResolver<crate::server::h3::protocol_shim::Connection, Bytes>;

/// Serves one request stream to its end. Every failure ends at most this stream: a broken
/// or reset stream is the client's business, not logged.
pub(crate) async fn serve_stream(resolver: Resolver, conn: Arc<ConnCtx>) {
    let mut resolve = pin!(resolver.resolve_request());
    // The head mostly came in the packet that opened the stream: then it is ready at once,
    // and no timer is set up for it.
    let first = std::future::poll_fn(|cx| Poll::Ready(resolve.as_mut().poll(cx))).await;
    let resolved = match (first, conn.shared.config.header_read_timeout) {
        (Poll::Ready(resolved), _) => resolved,
        (Poll::Pending, Some(limit)) => match tokio::time::timeout(limit, resolve).await {
            Ok(resolved) => resolved,
            // Dropping the stream resets it: a head that never came is not a request.
            Err(_) => return,
        },
        (Poll::Pending, None) => resolve.await,
    };
    // h3 has reset a stream it found malformed itself (pseudo-headers, field names).
    let Ok((head, stream)) = resolved else {
        return;
    };
    let (mut send, mut recv) = stream.split();
    let length = match content_length(head.headers()) {
        Ok(length) => length,
        Err(()) => return reject(&mut send, &mut recv),
    };
    if h3_request_is_malformed(head.method(), head.uri(), head.headers()) {
        return reject(&mut send, &mut recv);
    }
    if let Some(protocol) = head.extensions().get::<h3::ext::Protocol>().copied() {
        if !extended_connect_is_whole(head.method(), head.uri()) {
            return reject(&mut send, &mut recv);
        }
        if is_websocket(&conn, head.method(), protocol) {
            return serve_websocket(head, send, recv, conn).await;
        }
        // An extended CONNECT for a protocol other than WebSocket: no ASGI scope carries it
        // (as on HTTP/2).
        let response = ResponseBody::error(&conn.shared.config, StatusCode::BAD_REQUEST);
        let response = TrackedBody::new(response, None, None);
        return write_response(&mut send, response, conn.shared.config.date_header).await;
    }
    let body = InBody::Other(Box::pin(H3Body::new(recv, length).await));
    let (parts, ()) = head.into_parts();
    let hints = StreamHints::default();
    let mut service = pin!(handle_multiplexed_request(
        Request::from_parts(parts, body),
        conn.clone(),
        &hints
    ));
    // The app's `103 Early Hints` go out on the stream while its response is awaited: a
    // hint is queued only while the service is polled, so each poll is followed by writing
    // what it queued, and the hints queued as the response came still go before it.
    let response = loop {
        let polled = std::future::poll_fn(|cx| match service.as_mut().poll(cx) {
            Poll::Ready(response) => Poll::Ready(Some(response)),
            Poll::Pending if hints.is_empty() => Poll::Pending,
            Poll::Pending => Poll::Ready(None),
        })
        .await;
        while let Some(hint) = hints.pop() {
            if send.send_response(informational(hint)).await.is_err() {
                return; // The client stopped or reset the stream.
            }
        }
        if let Some(response) = polled {
            break response;
        }
    };
    write_response(&mut send, response, conn.shared.config.date_header).await;
}

/// An extended CONNECT asking for a WebSocket (RFC 9220): h3 resolves `:protocol:
/// websocket` as `webtransport` (the shim in `protocol_shim` rewrote it so that h3 takes
/// it, and rewrote a genuine `webtransport` away), and only with WebSockets on.
fn is_websocket(conn: &ConnCtx, method: &http::Method, protocol: h3::ext::Protocol) -> bool {
    conn.shared.config.ws.enabled
        && method == http::Method::CONNECT
        && protocol == h3::ext::Protocol::WEB_TRANSPORT
}

/// RFC 8441 §4 (RFC 9220 §3): an extended CONNECT is a CONNECT that carries `:scheme` and
/// `:path` as well as `:protocol` (h3 checks none of that).
fn extended_connect_is_whole(method: &http::Method, uri: &http::Uri) -> bool {
    method == http::Method::CONNECT
        && uri.scheme().is_some()
        && uri
            .path_and_query()
            .is_some_and(|pq| !pq.as_str().is_empty())
}

/// RFC 9114 §4.1.2: a malformed request is a stream error of type H3_MESSAGE_ERROR.
fn reject(send: &mut SendSide, recv: &mut crate::server::h3::body::RecvSide) {
    send.stop_stream(Code::H3_MESSAGE_ERROR);
    recv.stop_sending(Code::H3_MESSAGE_ERROR);
}
