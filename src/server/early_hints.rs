//! `103 Early Hints` on the transports that can carry them.
//!
//! hyper 1.x has no server API for an informational response, so on HTTP/1.1 the service
//! future hands the 103's bytes to the connection's write side (`detect::ReplayRewrite`), which
//! writes them when hyper flushes: hyper calls the I/O's `poll_flush` only once its own
//! write buffer is empty, so everything of earlier responses is out by then. The service
//! future holds the final response back until the hints are written, so they always come
//! before its head. Pipelined requests keep their order: hyper serves one request of a
//! connection at a time, and a request's hints go out while its response is awaited.
//!
//! HTTP/2 and HTTP/3: the service future queues each hint (`StreamHints`) for the stream's
//! task, which polls the service and sends what it queued before the wait goes on: h2's
//! `send_informational` (`h2::stream`), a 103 HEADERS frame on the request stream
//! (`h3::request`); the hints queued as the response came still go before its head.
//! HTTP/1.0 has no 1xx: hints are dropped there.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use crate::bridge::EarlyHint;

/// At most this many bytes of HTTP/1.1 hints wait for the client at once; hints beyond it
/// are dropped (they are optional, RFC 8297 §2): a client that does not read cannot make
/// an app that keeps hinting hold memory without bound.
const MAX_PENDING: usize = 16 * 1024;

/// HTTP/2 and HTTP/3: hints queued for the request stream's writer; more are dropped.
const STREAM_QUEUE: usize = 8;

/// Where a request's hints go.
pub(crate) enum HintsOut<'a> {
    /// HTTP/1.0: nowhere.
    Dropped,
    /// HTTP/1.1: the connection's write side.
    Http1(&'a Http1Hints),
    /// HTTP/2 and HTTP/3: the request stream's writer (`server::h2::stream`,
    /// `server::h3::request`).
    Queued(&'a StreamHints),
}

impl HintsOut<'_> {
    pub(crate) fn deliver(&mut self, hint: EarlyHint) {
        match self {
            HintsOut::Dropped => {}
            HintsOut::Http1(hints) => hints.push(&hint),
            HintsOut::Queued(hints) => hints.push(hint),
        }
    }
}

/// An HTTP/2 or HTTP/3 request's hints not yet written. The service future and the stream's
/// writer run in the same task (`h2::stream` and `h3::request` poll the service, then write
/// what it queued), so a queue borrowed by both does, without the channel (two allocations)
/// that every request paid for before any app sent a hint: nothing is allocated until a
/// hint comes.
#[derive(Default)]
pub(crate) struct StreamHints {
    queue: Mutex<VecDeque<EarlyHint>>,
}

impl StreamHints {
    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<EarlyHint>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a hint; beyond `STREAM_QUEUE` it is dropped (hints are optional, RFC 8297 §2):
    /// the writer drains the queue after every poll of the service, so it only fills when an
    /// app sends more hints in one go than that.
    fn push(&self, hint: EarlyHint) {
        let mut queue = self.queue();
        if queue.len() < STREAM_QUEUE {
            queue.push_back(hint);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue().is_empty()
    }

    /// The oldest hint not yet written.
    pub(crate) fn pop(&self) -> Option<EarlyHint> {
        self.queue().pop_front()
    }
}

/// An HTTP/1 connection's hints not yet written, shared by its service future and its
/// write side.
#[derive(Default)]
pub(crate) struct Http1Hints {
    /// Whether `slot` holds bytes: the write side's only cost on a flush without hints.
    pending: AtomicBool,
    slot: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    bytes: BytesMut,
    /// The service future waiting for the bytes to be written.
    waiter: Option<Waker>,
}

impl Http1Hints {
    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues one `103 Early Hints` head (dropped when `MAX_PENDING` would be passed).
    fn push(&self, hint: &EarlyHint) {
        let mut slot = self.slot();
        let size = head_len(&hint.links);
        if slot.bytes.len() + size > MAX_PENDING {
            return;
        }
        write_head(&mut slot.bytes, &hint.links);
        self.pending.store(true, Ordering::Release);
    }

    /// Whether hints wait to be written (one relaxed load).
    #[inline]
    pub(crate) fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    /// Ready once every queued hint is written (or the connection failed).
    pub(crate) fn poll_written(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.pending.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        let mut slot = self.slot();
        if slot.bytes.is_empty() {
            return Poll::Ready(());
        }
        slot.waiter = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The write side: writes what is queued through `write`; Ready once nothing is left.
    pub(crate) fn poll_write_with(
        &self,
        mut write: impl FnMut(&[u8]) -> Poll<std::io::Result<usize>>,
    ) -> Poll<std::io::Result<()>> {
        let mut slot = self.slot();
        while !slot.bytes.is_empty() {
            match write(&slot.bytes) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => {
                    let _ = slot.bytes.split_to(n);
                }
                Poll::Ready(Err(e)) => {
                    // The connection is broken: nothing will be written; let the waiter go.
                    slot.bytes.clear();
                    self.pending.store(false, Ordering::Release);
                    if let Some(waker) = slot.waiter.take() {
                        waker.wake();
                    }
                    return Poll::Ready(Err(e));
                }
            }
        }
        // The allocation goes with the last byte.
        slot.bytes = BytesMut::new();
        self.pending.store(false, Ordering::Release);
        if let Some(waker) = slot.waiter.take() {
            waker.wake();
        }
        Poll::Ready(Ok(()))
    }
}

const STATUS_LINE: &[u8] = b"HTTP/1.1 103 Early Hints\r\n";
const LINK: &[u8] = b"Link: ";

fn head_len(links: &[HeaderValue]) -> usize {
    let fields: usize = links.iter().map(|v| LINK.len() + v.len() + 2).sum();
    STATUS_LINE.len() + fields + 2
}

/// `HTTP/1.1 103 Early Hints`, one `Link` field per value, the blank line.
fn write_head(out: &mut BytesMut, links: &[HeaderValue]) {
    out.reserve(head_len(links));
    out.extend_from_slice(STATUS_LINE);
    for value in links {
        out.extend_from_slice(LINK);
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// HTTP/2 and HTTP/3: the 103 as a response head (h2's `send_informational`, h3's
/// `send_response`).
pub(crate) fn informational(hint: EarlyHint) -> Response<()> {
    let mut headers = HeaderMap::with_capacity(hint.links.len());
    for value in hint.links {
        headers.append(http::header::LINK, value);
    }
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::EARLY_HINTS;
    *response.headers_mut() = headers;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(values: &[&'static str]) -> EarlyHint {
        EarlyHint {
            links: values.iter().map(|v| HeaderValue::from_static(v)).collect(),
        }
    }

    #[test]
    fn a_hint_is_one_103_head_with_a_link_field_per_value() {
        let hints = Http1Hints::default();
        assert!(!hints.is_pending());
        hints.push(&hint(&[
            "</a.css>; rel=preload; as=style",
            "</b.js>; rel=preload",
        ]));
        hints.push(&hint(&["</c.css>"]));
        assert!(hints.is_pending());
        let mut out = Vec::new();
        // A socket that takes 7 bytes at a time.
        let done = hints.poll_write_with(|buf| {
            let n = buf.len().min(7);
            out.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        });
        assert!(matches!(done, Poll::Ready(Ok(()))));
        assert!(!hints.is_pending());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload; as=style\r\n\
             Link: </b.js>; rel=preload\r\n\r\n\
             HTTP/1.1 103 Early Hints\r\nLink: </c.css>\r\n\r\n"
        );
    }

    #[test]
    fn hints_past_the_bound_are_dropped() {
        let hints = Http1Hints::default();
        let long: &'static str = Box::leak("x".repeat(1000).into_boxed_str());
        for _ in 0..100 {
            hints.push(&hint(&[long]));
        }
        let mut written = 0;
        let _ = hints.poll_write_with(|buf| {
            written += buf.len();
            Poll::Ready(Ok(buf.len()))
        });
        assert!(written <= MAX_PENDING, "{written}");
        assert!(written > MAX_PENDING - 1100, "{written}");
    }

    #[test]
    fn the_103_for_http3_carries_each_link() {
        let response = informational(hint(&["</a.css>", "</b.js>"]));
        assert_eq!(response.status().as_u16(), 103);
        let links: Vec<_> = response.headers().get_all("link").iter().collect();
        assert_eq!(links, ["</a.css>", "</b.js>"]);
    }
}
