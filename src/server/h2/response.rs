//! A response written into an h2 stream: its head (the HTTP/1.1 connection fields h2
//! refuses dropped, `date` added when configured, `content-length` from a body of known
//! length), then the body with h2's send-capacity backpressure, then the trailers or the
//! end of the stream. An app failing after the head went out resets the stream
//! (INTERNAL_ERROR); a client resetting it drops the body, which the app hears as a
//! disconnect.

use std::future::poll_fn;
use std::pin::pin;
use std::task::Poll;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, SendStream};
use http::header::{CONTENT_LENGTH, DATE, TE};
use http::response::Parts;
use http::{HeaderValue, Response};
use http_body::{Body, Frame};

use crate::http::headers::strip_connection_headers;
use crate::server::service::TrackedBody;

/// The head as h2 takes it: h2 refuses to send a head with an HTTP/1.1 connection field, or
/// a `TE` other than "trailers" (RFC 9113 §8.2.2), where hyper used to drop them.
pub(super) fn head(mut parts: Parts, date: bool) -> Response<()> {
    strip_connection_headers(&mut parts.headers);
    let te_other_than_trailers = parts
        .headers
        .get_all(TE)
        .iter()
        .any(|value| !value.as_bytes().eq_ignore_ascii_case(b"trailers"));
    if te_other_than_trailers {
        parts.headers.remove(TE);
    }
    if date && !parts.headers.contains_key(DATE) {
        parts.headers.insert(DATE, crate::http::date::now());
    }
    Response::from_parts(parts, ())
}

pub(super) async fn write_response(
    respond: &mut SendResponse<Bytes>,
    response: Response<TrackedBody>,
    date: bool,
) {
    let (parts, body) = response.into_parts();
    let mut head = head(parts, date);
    let end = body.is_end_stream();
    if !end && !head.headers().contains_key(CONTENT_LENGTH) {
        if let Some(length) = body.size_hint().exact() {
            head.headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from(length));
        }
    }
    let Ok(send) = respond.send_response(head, end) else {
        return; // the client reset the stream, or the connection is gone
    };
    if !end {
        pump(send, body).await;
    }
}

/// What one wait of the pump ended with.
enum Next {
    Frame(Option<Result<Frame<Bytes>, crate::bridge::BodyAborted>>),
    /// The client reset the stream (or the connection failed).
    Reset,
}

async fn pump(mut send: SendStream<Bytes>, body: TrackedBody) {
    let mut body = pin!(body);
    loop {
        // The next frame, or the client's reset, whichever comes first: a body waiting on a
        // slow app must not outlive the stream.
        let next = poll_fn(|cx| {
            if send.poll_reset(cx).is_ready() {
                return Poll::Ready(Next::Reset);
            }
            body.as_mut().poll_frame(cx).map(Next::Frame)
        })
        .await;
        let frame = match next {
            Next::Reset => return,
            Next::Frame(None) => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Next::Frame(Some(Err(_))) => {
                send.send_reset(Reason::INTERNAL_ERROR);
                return;
            }
            Next::Frame(Some(Ok(frame))) => frame,
        };
        let mut data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    // The trailer section ends the stream.
                    send.reserve_capacity(0);
                    let _ = send.send_trailers(trailers);
                    return;
                }
                continue;
            }
        };
        let eos = body.is_end_stream();
        if data.is_empty() {
            if eos {
                let _ = send.send_data(data, true);
                return;
            }
            continue;
        }
        // Handed to h2 as it grants capacity (stream and connection windows, and its send
        // buffer), so a slow client holds the app back instead of filling memory.
        while !data.is_empty() {
            send.reserve_capacity(data.len());
            let granted = poll_fn(|cx| {
                if send.poll_reset(cx).is_ready() {
                    return Poll::Ready(None);
                }
                send.poll_capacity(cx)
            })
            .await;
            let granted = match granted {
                Some(Ok(granted)) => granted,
                Some(Err(_)) | None => return,
            };
            if granted == 0 {
                continue;
            }
            let piece = data.split_to(granted.min(data.len()));
            if send.send_data(piece, eos && data.is_empty()).is_err() {
                return;
            }
        }
        if eos {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(fields: &[(&'static str, &'static str)]) -> Parts {
        let mut response = Response::new(());
        for (name, value) in fields {
            response
                .headers_mut()
                .append(*name, HeaderValue::from_static(value));
        }
        response.into_parts().0
    }

    #[test]
    fn the_head_drops_what_h2_refuses_and_keeps_the_rest() {
        let fields = [
            ("connection", "close"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "foo"),
            ("te", "gzip"),
            ("x-kept", "yes"),
        ];
        let head = head(parts(&fields), false);
        let names: Vec<_> = head.headers().keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["x-kept"]);
    }

    #[test]
    fn te_trailers_stays_and_date_is_added_only_when_missing() {
        let head1 = head(parts(&[("te", "trailers")]), true);
        assert_eq!(head1.headers()["te"], "trailers");
        assert!(head1.headers().contains_key(DATE));
        let head2 = head(parts(&[("date", "app's")]), true);
        assert_eq!(head2.headers()[DATE], "app's");
        assert!(!head(parts(&[]), false).headers().contains_key(DATE));
    }
}
