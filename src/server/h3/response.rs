//! A response written into an HTTP/3 request stream: its head (connection-specific fields
//! dropped, `date` added), then its body and trailers. Shared by plain requests and by a
//! WebSocket's handshake (its acceptance is a head alone, its denial a whole response).

use std::pin::pin;

use bytes::Bytes;
use h3::error::Code;
use h3::server::RequestStream;
use http::header::DATE;
use http::response::Parts;
use http::Response;
use http_body_util::BodyExt;

use crate::http::headers::strip_connection_headers;
use crate::server::service::TrackedBody;

pub(crate) type SendSide = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// The head alone; Err when the client stopped or reset the stream.
pub(super) async fn send_head(send: &mut SendSide, mut parts: Parts, date: bool) -> Result<(), ()> {
    strip_connection_headers(&mut parts.headers);
    if date && !parts.headers.contains_key(DATE) {
        parts.headers.insert(DATE, crate::http::date::now());
    }
    send.send_response(Response::from_parts(parts, ()))
        .await
        .map_err(|_| ())
}

/// The head, then each body frame as the response body yields it: `send_data` waits for
/// QUIC's flow control, so a slow client holds the body in its budget (backpressure). A
/// body that fails (the app failed mid-response, or the request body broke) resets the
/// stream; a client that stopped the stream drops the body, which the app hears as a
/// disconnect.
pub(super) async fn write_response(
    send: &mut SendSide,
    response: Response<TrackedBody>,
    date: bool,
) {
    let (parts, body) = response.into_parts();
    if send_head(send, parts, date).await.is_err() {
        return;
    }
    let mut body = pin!(body);
    loop {
        let Some(frame) = body.frame().await else {
            let _ = send.finish().await;
            return;
        };
        let Ok(frame) = frame else {
            send.stop_stream(Code::H3_INTERNAL_ERROR);
            return;
        };
        let sent = match frame.into_data() {
            Ok(data) if data.is_empty() => Ok(()),
            Ok(data) => send.send_data(data).await,
            Err(frame) => match frame.into_trailers() {
                Ok(trailers) => {
                    // The trailer section ends the message.
                    if send.send_trailers(trailers).await.is_ok() {
                        let _ = send.finish().await;
                    }
                    return;
                }
                Err(_) => Ok(()),
            },
        };
        if sent.is_err() {
            return; // The client stopped or reset the stream, or the connection is gone.
        }
    }
}
