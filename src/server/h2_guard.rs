//! The I/O wrapper of an HTTP/2 connection that enforces `http::h2_flood`: it watches the
//! frame headers going both ways and, once the client has spent its budget of frames that
//! make no progress, stops feeding h2, writes GOAWAY(ENHANCE_YOUR_CALM) itself (at a frame
//! boundary of what h2 wrote, so the stream stays well-formed) and ends the connection.
//! The same frame walk serves HTTP/2's early hints (`server::h2_hints`): it learns the
//! client's SETTINGS and each new stream's id, and puts the 103 frames in between h2's.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http::h2_flood::{goaway_enhance_your_calm, FloodBudget, FrameScanner, OnFrame, Stop};
use crate::server::h2_hints::{H2Hints, HintSide};

enum Phase {
    Serving,
    /// The budget ran out: the GOAWAY bytes still to write, then the end.
    Closing {
        goaway: [u8; 17],
        written: usize,
    },
    /// Nothing more is read or written.
    Closed,
}

pub(crate) struct H2Guard<S> {
    inner: S,
    incoming: FrameScanner,
    outgoing: FrameScanner,
    budget: FloodBudget,
    last_refill: Instant,
    phase: Phase,
    /// Called once when the budget runs out, with the frames charged.
    on_flood: Option<Box<dyn FnOnce(u64) + Send>>,
    hints: HintSide,
    /// Bytes read from the socket but held back from h2 (see `server::h2_hints`).
    carry: BytesMut,
}

impl<S> H2Guard<S> {
    pub(crate) fn new(
        inner: S,
        on_flood: impl FnOnce(u64) + Send + 'static,
        hints: Arc<H2Hints>,
    ) -> Self {
        H2Guard {
            inner,
            incoming: FrameScanner::client(),
            outgoing: FrameScanner::server(),
            budget: FloodBudget::default(),
            last_refill: Instant::now(),
            phase: Phase::Serving,
            on_flood: Some(Box::new(on_flood)),
            hints: HintSide::new(hints),
            carry: BytesMut::new(),
        }
    }

    fn trip(&mut self) {
        self.hints.close();
        if let Some(on_flood) = self.on_flood.take() {
            on_flood(self.budget.charged);
        }
        // Mid-frame, a GOAWAY would corrupt what h2 was writing: then just close.
        self.phase = if self.outgoing.at_boundary() {
            Phase::Closing {
                goaway: goaway_enhance_your_calm(self.budget.last_stream()),
                written: 0,
            }
        } else {
            Phase::Closed
        };
    }
}

impl<S: AsyncWrite + Unpin> H2Guard<S> {
    /// Writes what is left of the GOAWAY; Ready once it is out (or cannot be).
    fn poll_goaway(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while let Phase::Closing { goaway, written } = &mut self.phase {
            if *written == goaway.len() {
                let _ = Pin::new(&mut self.inner).poll_flush(cx);
                self.phase = Phase::Closed;
                break;
            }
            match Pin::new(&mut self.inner).poll_write(cx, &goaway[*written..]) {
                Poll::Ready(Ok(n)) if n > 0 => *written += n,
                Poll::Ready(_) => self.phase = Phase::Closed,
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(())
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for H2Guard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !matches!(this.phase, Phase::Serving) {
            // The end of the stream for h2, once the GOAWAY is out.
            return this.poll_goaway(cx).map(|()| Ok(()));
        }
        let start = buf.filled().len();
        if this.hints.must_yield() {
            // A new stream's header block ended the last read: h2 leaves its read loop now,
            // so hyper accepts that stream before h2 sees another (server::h2_hints).
            if this.carry.is_empty() {
                match Pin::new(&mut this.inner).poll_read(cx, buf) {
                    Poll::Ready(Ok(())) if buf.filled().len() > start => {
                        this.carry.extend_from_slice(&buf.filled()[start..]);
                        buf.set_filled(start);
                    }
                    // Nothing more yet (the socket wakes the task), the end, or an error.
                    other => return other,
                }
            }
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let from_carry = !this.carry.is_empty();
        if from_carry {
            let n = this.carry.len().min(buf.remaining());
            buf.put_slice(&this.carry[..n]);
        } else {
            let result = Pin::new(&mut this.inner).poll_read(cx, buf);
            if !matches!(result, Poll::Ready(Ok(()))) || buf.filled().len() == start {
                return result;
            }
        }
        let now = Instant::now();
        this.budget.refill(now - this.last_refill);
        this.last_refill = now;
        let budget = &mut this.budget;
        let hints = std::cell::RefCell::new(&mut this.hints);
        let got = buf.filled().len() - start;
        let stop = this.incoming.feed_frames(
            &buf.filled()[start..],
            |head| {
                if !budget.incoming(head) {
                    return OnFrame::StopBefore;
                }
                hints.borrow_mut().incoming(head)
            },
            |payload| hints.borrow_mut().settings(payload),
        );
        match stop {
            None => {
                if from_carry {
                    this.carry.advance(got);
                }
            }
            Some(Stop::After(used)) => {
                // The end of a new stream's header block: the rest waits (see above).
                if from_carry {
                    this.carry.advance(used);
                } else {
                    this.carry.extend_from_slice(&buf.filled()[start + used..]);
                }
                buf.set_filled(start + used);
                this.hints.delivered();
            }
            Some(Stop::Before(offset)) => {
                // h2 never sees the frame that broke the budget, nor what came after it.
                this.carry = BytesMut::new();
                buf.set_filled(start + offset);
                this.trip();
                if buf.filled().len() == start {
                    return this.poll_goaway(cx).map(|()| Ok(()));
                }
            }
        }
        if from_carry && this.carry.is_empty() {
            // Its allocation goes with its last byte.
            this.carry = BytesMut::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> H2Guard<S> {
    /// With a hint frame waiting: puts it in if h2's bytes are at a boundary where one may
    /// go; then how many of h2's next bytes may go before it (None: any number).
    fn poll_hints(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<usize>>> {
        if !self.hints.wants_to_insert() {
            return Poll::Ready(Ok(None));
        }
        if self.outgoing.at_boundary() && self.hints.may_insert_at_boundary() {
            std::task::ready!(self.hints.poll_insert(Pin::new(&mut self.inner), cx))?;
            if !self.hints.wants_to_insert() {
                return Poll::Ready(Ok(None));
            }
        }
        Poll::Ready(Ok(Some(
            self.hints.write_limit(self.outgoing.left_in_frame()),
        )))
    }

    fn feed_outgoing(&mut self, data: &[u8]) {
        let budget = &mut self.budget;
        let hints = &mut self.hints;
        self.outgoing.feed(data, |head| {
            budget.outgoing(head);
            hints.outgoing(head);
            true
        });
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for H2Guard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !matches!(this.phase, Phase::Serving) {
            // What h2 still writes after the GOAWAY is dropped: the connection is over.
            return Poll::Ready(Ok(data.len()));
        }
        let data = match std::task::ready!(this.poll_hints(cx))? {
            Some(limit) => &data[..limit.min(data.len())],
            None => data,
        };
        let result = Pin::new(&mut this.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = result {
            this.feed_outgoing(&data[..n]);
        }
        result
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !matches!(this.phase, Phase::Serving) {
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        if let Some(limit) = std::task::ready!(this.poll_hints(cx))? {
            // A hint waits for the end of h2's current frame: that much of the first slice.
            let Some(first) = bufs.iter().find(|b| !b.is_empty()) else {
                return Poll::Ready(Ok(0));
            };
            let data = &first[..limit.min(first.len())];
            let result = Pin::new(&mut this.inner).poll_write(cx, data);
            if let Poll::Ready(Ok(n)) = result {
                this.feed_outgoing(&data[..n]);
            }
            return result;
        }
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(mut n)) = result {
            for slice in bufs {
                if n == 0 {
                    break;
                }
                let take = n.min(slice.len());
                this.feed_outgoing(&slice[..take]);
                n -= take;
            }
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !matches!(this.phase, Phase::Serving) {
            return Poll::Ready(Ok(()));
        }
        // h2 flushes on every pass of the connection's task, with whole frames written: the
        // place where a queued hint goes out, and the task a new one wakes.
        this.hints.register(cx.waker());
        std::task::ready!(this.poll_hints(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.phase, Phase::Closing { .. }) && this.poll_goaway(cx).is_pending() {
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// The connection is over: its queued hints go nowhere, their requests wait no longer.
impl<S> Drop for H2Guard<S> {
    fn drop(&mut self) {
        self.hints.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::EarlyHint;
    use crate::server::h2_hints::H2StreamHints;
    use http::HeaderValue;

    /// A socket that keeps what is written and gives `input` to the first read.
    #[derive(Default)]
    struct Sink(Vec<u8>, Vec<u8>);

    impl AsyncRead for Sink {
        fn poll_read(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            if this.1.is_empty() {
                return Poll::Pending;
            }
            let n = this.1.len().min(buf.remaining());
            buf.put_slice(&this.1[..n]);
            this.1.drain(..n);
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Sink {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.get_mut().0.extend_from_slice(data);
            Poll::Ready(Ok(data.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        out.push(kind);
        out.push(flags);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// (kind, stream, payload length) of each frame in `bytes`.
    fn frames(bytes: &[u8]) -> Vec<(u8, u32, usize)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let len = u32::from_be_bytes([0, bytes[at], bytes[at + 1], bytes[at + 2]]) as usize;
            let stream = u32::from_be_bytes(bytes[at + 5..at + 9].try_into().unwrap());
            out.push((bytes[at + 3], stream, len));
            at += 9 + len;
        }
        assert_eq!(at, bytes.len(), "whole frames");
        out
    }

    /// Writes `data` as h2 would, `step` bytes per call, as far as the guard takes it.
    fn write_all(guard: &mut H2Guard<Sink>, data: &[u8], step: usize) {
        let waker = crate::server::cork::no_wake();
        let mut cx = Context::from_waker(&waker);
        let mut at = 0;
        while at < data.len() {
            let end = (at + step).min(data.len());
            match Pin::new(&mut *guard).poll_write(&mut cx, &data[at..end]) {
                Poll::Ready(Ok(n)) => {
                    assert!(n > 0);
                    at += n;
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_hint_goes_in_at_the_next_frame_boundary_of_what_h2_writes() {
        let shared = Arc::new(H2Hints::default());
        let mut guard = H2Guard::new(Sink::default(), |_| {}, shared.clone());
        // The client opened streams 1 and 3 (their HEADERS read through the guard).
        let waker = crate::server::cork::no_wake();
        let mut cx = Context::from_waker(&waker);
        let mut input = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        input.extend(frame(0x4, 0, 0, &[]));
        input.extend(frame(0x1, 0x5, 1, b"hpack"));
        input.extend(frame(0x1, 0x5, 3, b"hpack"));
        let mut hints = HintSide::new(shared.clone());
        // Feed the incoming side directly (no AsyncRead socket here): the frames it saw.
        let mut scanner = FrameScanner::client();
        let mut at = 0;
        while let Some(Stop::After(used)) =
            scanner.feed_frames(&input[at..], |h| hints.incoming(h), |_| {})
        {
            at += used;
            hints.delivered();
            hints.must_yield();
            hints.must_yield();
        }
        guard.hints = hints;

        let settings = frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]);
        let headers_without_end = frame(0x1, 0x0, 1, &[0x88]);
        let continuation = frame(0x9, 0x4, 1, &[0x88]);
        let data = frame(0x0, 0, 1, &[7u8; 1000]);
        write_all(&mut guard, &settings, 1000);
        write_all(&mut guard, &data[..100], 1000);
        // A hint arrives mid-DATA: h2's writes are cut at the frame's end, then it goes in.
        let hint = EarlyHint {
            links: vec![HeaderValue::from_static("</a.css>; rel=preload")],
        };
        let mut stream3 = H2StreamHints::new(shared.clone(), 3);
        stream3.push(&hint);
        let mut rest = data[100..].to_vec();
        rest.extend(&headers_without_end);
        write_all(&mut guard, &rest, 4000);
        assert!(stream3.poll_taken(&mut cx).is_ready());
        // Another while h2 is inside a header block: after its CONTINUATION.
        stream3.push(&hint);
        write_all(&mut guard, &continuation, 3);
        let mut tail = data.clone();
        tail.extend(&data);
        write_all(&mut guard, &tail, 700);
        assert!(stream3.poll_taken(&mut cx).is_ready());
        let kinds: Vec<(u8, u32)> = frames(&guard.inner.0)
            .into_iter()
            .map(|(kind, stream, _)| (kind, stream))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (0x4, 0),
                (0x0, 1),
                (0x1, 3), // the first hint, right after the DATA frame it waited for
                (0x1, 1),
                (0x9, 1),
                (0x1, 3), // the second, after the header block's end
                (0x0, 1),
                (0x0, 1),
            ]
        );
    }

    /// What one read through the guard gives: Some(bytes), or None for Pending.
    fn read(guard: &mut H2Guard<Sink>, wakes: &Arc<Wakes>) -> Option<Vec<u8>> {
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut space = [0u8; 4096];
        let mut buf = ReadBuf::new(&mut space);
        match Pin::new(guard).poll_read(&mut cx, &mut buf) {
            Poll::Ready(Ok(())) => Some(buf.filled().to_vec()),
            Poll::Ready(Err(e)) => panic!("{e}"),
            Poll::Pending => None,
        }
    }

    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn each_new_stream_header_block_ends_a_read_and_names_the_next_service_call() {
        let shared = Arc::new(H2Hints::default());
        let mut input = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        input.extend(frame(0x4, 0, 0, &[0, 5, 0, 0, 0x40, 0]));
        let first_end = input.len() + 9 + 5;
        input.extend(frame(0x1, 0x4, 1, b"hpack")); // HEADERS 1, END_HEADERS
        input.extend(frame(0x0, 0x1, 1, b"body")); // its DATA
        input.extend(frame(0x1, 0x0, 3, b"hp")); // HEADERS 3 ...
        input.extend(frame(0x9, 0x4, 3, b"ack")); // ... ends in a CONTINUATION
        input.extend(frame(0x1, 0x5, 1, b"trailers")); // not a new stream
        let mut guard = H2Guard::new(Sink(Vec::new(), input.clone()), |_| {}, shared.clone());
        let wakes = Arc::new(Wakes::default());

        let got = read(&mut guard, &wakes).unwrap();
        assert_eq!(
            got,
            input[..first_end],
            "up to the end of stream 1's header block"
        );
        // h2 reads again: Pending (the rest kept, the task woken) so hyper accepts stream 1.
        assert_eq!(read(&mut guard, &wakes), None);
        assert_eq!(wakes.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(shared.take_stream(), Some(1), "the service call takes it");
        let got = read(&mut guard, &wakes).unwrap();
        let second_end = first_end + 13 + 11 + 12;
        assert_eq!(got, input[first_end..second_end]);
        assert_eq!(read(&mut guard, &wakes), None);
        // Stream 3 refused by h2: no service call; the next read clears it.
        let got = read(&mut guard, &wakes).unwrap();
        assert_eq!(got, input[second_end..]);
        assert_eq!(shared.take_stream(), None);
        assert_eq!(read(&mut guard, &wakes), None, "the socket has no more");
    }

    #[test]
    fn nothing_goes_in_before_h2_first_frame() {
        let shared = Arc::new(H2Hints::default());
        let mut guard = H2Guard::new(Sink::default(), |_| {}, shared.clone());
        let waker = crate::server::cork::no_wake();
        let mut cx = Context::from_waker(&waker);
        let mut stream = H2StreamHints::new(shared, 1);
        stream.push(&EarlyHint {
            links: vec![HeaderValue::from_static("</a.css>")],
        });
        let flushed = Pin::new(&mut guard).poll_flush(&mut cx);
        assert!(matches!(flushed, Poll::Ready(Ok(()))));
        assert!(guard.inner.0.is_empty());
        assert!(stream.poll_taken(&mut cx).is_pending());
        drop(guard);
        assert!(
            stream.poll_taken(&mut cx).is_ready(),
            "a closed connection lets its waiters go"
        );
    }
}
