//! The I/O wrapper of an HTTP/2 connection that enforces `http::h2_flood` and
//! `http::h2_frame_rules`: it watches the frame headers going both ways and, once the client
//! has spent its budget of frames that make no progress or sent a frame those rules refuse,
//! stops feeding h2 (which never sees that frame), writes the GOAWAY itself
//! (ENHANCE_YOUR_CALM, or the rule's error code; at a frame boundary of what h2 wrote, so the
//! stream stays well-formed) and ends the connection.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http::h2_flood::{
    goaway, FloodBudget, FrameHead, FrameScanner, FrameSink, OnFrame, ENHANCE_YOUR_CALM,
};
use crate::http::h2_frame_rules::FrameRules;

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
    rules: FrameRules,
    last_refill: Instant,
    phase: Phase,
    /// Whether h2 has written a frame (its SETTINGS): a GOAWAY must not come first.
    wrote_frame: bool,
    /// Called once when the budget runs out, with the frames charged.
    on_flood: Option<Box<dyn FnOnce(u64) + Send>>,
    /// When the client last sent something (`server::h2`'s keep-alive PINGs only a quiet
    /// connection).
    heard: Arc<LastHeard>,
}

/// When bytes last came from the client, shared by the guard (which sees every read) and the
/// connection's keep-alive.
pub(crate) struct LastHeard {
    start: Instant,
    /// Milliseconds after `start`.
    at: AtomicU64,
}

impl LastHeard {
    pub(crate) fn new() -> Self {
        LastHeard {
            start: Instant::now(),
            at: AtomicU64::new(0),
        }
    }

    fn record(&self, now: Instant) {
        let ms = u64::try_from((now - self.start).as_millis()).unwrap_or(u64::MAX);
        self.at.store(ms, Ordering::Relaxed);
    }

    pub(crate) fn last(&self) -> Instant {
        self.start + std::time::Duration::from_millis(self.at.load(Ordering::Relaxed))
    }
}

impl<S> H2Guard<S> {
    pub(crate) fn new(
        inner: S,
        on_flood: impl FnOnce(u64) + Send + 'static,
        heard: Arc<LastHeard>,
    ) -> Self {
        H2Guard {
            inner,
            incoming: FrameScanner::client(),
            outgoing: FrameScanner::server(),
            budget: FloodBudget::default(),
            rules: FrameRules::default(),
            last_refill: Instant::now(),
            phase: Phase::Serving,
            wrote_frame: false,
            on_flood: Some(Box::new(on_flood)),
            heard,
        }
    }

    /// Ends the connection with GOAWAY(`code`).
    fn trip(&mut self, code: u32) {
        if code == ENHANCE_YOUR_CALM {
            if let Some(on_flood) = self.on_flood.take() {
                on_flood(self.budget.charged);
            }
        }
        // Mid-frame, a GOAWAY would corrupt what h2 was writing: then just close.
        self.phase = if self.wrote_frame && self.outgoing.at_boundary() {
            Phase::Closing {
                goaway: goaway(self.budget.last_stream(), code),
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
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if !matches!(result, Poll::Ready(Ok(()))) || buf.filled().len() == start {
            return result;
        }
        let now = Instant::now();
        this.budget.refill(now - this.last_refill);
        this.last_refill = now;
        this.heard.record(now);
        let mut judge = Judge {
            rules: &mut this.rules,
            budget: &mut this.budget,
            code: ENHANCE_YOUR_CALM,
        };
        let stop = this
            .incoming
            .feed_frames(&buf.filled()[start..], &mut judge);
        if let Some(offset) = stop {
            let code = judge.code;
            // h2 never sees the frame that broke the budget or a rule, nor what came after.
            buf.set_filled(start + offset);
            this.trip(code);
            if buf.filled().len() == start {
                return this.poll_goaway(cx).map(|()| Ok(()));
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The client's frames as the guard judges them: RFC 9113's rules first, then the flood
/// budget; `code` is what to end the connection with once one of them says stop.
struct Judge<'a> {
    rules: &'a mut FrameRules,
    budget: &'a mut FloodBudget,
    code: u32,
}

impl FrameSink for Judge<'_> {
    fn frame(&mut self, head: FrameHead) -> OnFrame {
        if let Err(code) = self.rules.check(head) {
            self.code = code;
            OnFrame::StopBefore
        } else if !self.budget.incoming(head) {
            OnFrame::StopBefore
        } else if self.rules.wants_payload() {
            OnFrame::Capture
        } else {
            OnFrame::Pass
        }
    }

    fn payload(&mut self, piece: &[u8]) -> bool {
        match self.rules.payload(piece) {
            Ok(()) => true,
            Err(code) => {
                self.code = code;
                false
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> H2Guard<S> {
    fn feed_outgoing(&mut self, data: &[u8]) {
        let budget = &mut self.budget;
        let wrote_frame = &mut self.wrote_frame;
        self.outgoing.feed(data, |head| {
            budget.outgoing(head);
            *wrote_frame = true;
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
