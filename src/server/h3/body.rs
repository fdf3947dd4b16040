//! A request body read from its QUIC stream, as the `http_body::Body` the body reader takes
//! (`http::body_reader::InBody::Other`). QUIC's flow control is the backpressure: the stream
//! window opens only as the pump takes data, which it does only as fast as the app reads.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use h3::server::RequestStream;
use http_body::{Body, Frame, SizeHint};

use crate::http::body_fault::BodyFault;

pub(crate) type RecvSide = RequestStream<crate::server::h3::protocol_shim::RecvStream, Bytes>;

pub(crate) struct H3Body {
    recv: RecvSide,
    /// What `content-length` announced and is still to come (RFC 9114 §4.1.2: a body that
    /// disagrees with it is malformed).
    remaining: Option<u64>,
    /// What arrived with the head, found by `H3Body::new`, handed out first.
    first: Option<Bytes>,
    ended: bool,
}

impl H3Body {
    /// Looks once (without waiting) at what the stream holds: a request whose stream ended
    /// with its head (most GETs) then has an empty body, which needs no pump.
    pub(crate) async fn new(mut recv: RecvSide, length: Option<u64>) -> Self {
        let polled = poll_fn(|cx| Poll::Ready(recv.poll_recv_data(cx))).await;
        let mut body = H3Body {
            recv,
            remaining: length,
            first: None,
            ended: false,
        };
        match polled {
            Poll::Ready(Ok(Some(mut data))) => {
                body.first = Some(data.copy_to_bytes(data.remaining()));
            }
            // An error is seen again at the first poll_frame.
            Poll::Ready(Ok(None)) => body.ended = body.remaining.unwrap_or(0) == 0,
            Poll::Ready(Err(_)) | Poll::Pending => {}
        }
        body
    }

    fn count(&mut self, data: Bytes) -> Option<Result<Frame<Bytes>, BodyFault>> {
        if let Some(remaining) = &mut self.remaining {
            match remaining.checked_sub(data.len() as u64) {
                Some(left) => *remaining = left,
                None => return self.fail(),
            }
        }
        Some(Ok(Frame::data(data)))
    }

    fn fail(&mut self) -> Option<Result<Frame<Bytes>, BodyFault>> {
        self.ended = true;
        Some(Err(BodyFault))
    }
}

impl Body for H3Body {
    type Data = Bytes;
    type Error = BodyFault;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFault>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(self.count(first));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        match self.recv.poll_recv_data(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(mut data))) => {
                let data = data.copy_to_bytes(data.remaining());
                Poll::Ready(self.count(data))
            }
            // Request trailers are not read: ASGI has none.
            Poll::Ready(Ok(None)) if self.remaining.unwrap_or(0) == 0 => {
                self.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(Ok(None)) | Poll::Ready(Err(_)) => Poll::Ready(self.fail()),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.first.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        if self.is_end_stream() {
            return SizeHint::with_exact(0);
        }
        match self.remaining {
            // Counted down as pieces are handed out: the first one is still in it.
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
