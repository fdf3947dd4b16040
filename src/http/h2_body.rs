//! A request body read from its h2 stream (`http::body_reader::InBody::H2`). Each DATA
//! payload's flow-control window is released as the body pump takes it, and the pump takes
//! only as fast as the app reads (its queue is bounded): a client cannot make the server
//! hold more than the stream window plus that queue.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::RecvStream;
use http_body::{Body, Frame, SizeHint};

use crate::http::body_fault::BodyFault;

pub(crate) struct H2Body {
    recv: RecvStream,
    /// What `content-length` announced and has not arrived yet (h2 itself resets a stream
    /// whose DATA disagrees with it).
    remaining: Option<u64>,
    data_done: bool,
    ended: bool,
}

impl H2Body {
    pub(crate) fn new(recv: RecvStream, length: Option<u64>) -> Self {
        H2Body {
            recv,
            remaining: length,
            data_done: false,
            ended: false,
        }
    }
}

impl Body for H2Body {
    type Data = Bytes;
    type Error = BodyFault;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFault>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if !this.data_done {
            match this.recv.poll_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(data))) => {
                    // Taken: the client may send as much again.
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    if let Some(remaining) = &mut this.remaining {
                        *remaining = remaining.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(Some(Err(_))) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(BodyFault)));
                }
                Poll::Ready(None) => this.data_done = true,
            }
        }
        let polled = match this.recv.poll_trailers(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(Some(trailers))) => Some(Ok(Frame::trailers(trailers))),
            Poll::Ready(Ok(None)) => None,
            Poll::Ready(Err(_)) => Some(Err(BodyFault)),
        };
        this.ended = true;
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.recv.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.is_end_stream() {
            return SizeHint::with_exact(0);
        }
        match self.remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
