//! `103 Early Hints` on HTTP/2, written between h2's frames.
//!
//! hyper gives the service neither h2's `SendResponse` (which has `send_informational`) nor
//! the stream id. So `H2Guard`, which already walks the frame headers both ways, does it:
//!
//! - **Which stream a request is.** h2 queues a new stream for acceptance when its header
//!   block is complete, and hyper calls the service synchronously, in the connection's task,
//!   each time it accepts one (`poll_accept` pops one stream per call, after driving the
//!   connection until a read is Pending). The read side hands h2 the bytes up to the end of
//!   a new stream's header block, no further, notes that stream as the `candidate`, and makes
//!   h2's next read Pending (with the bytes that came meanwhile kept for later): h2 leaves
//!   its read loop, hyper accepts the stream and calls the service, which takes the
//!   candidate. So at most one stream waits for acceptance at a time, and it is the
//!   candidate. A stream h2 refuses (too many, malformed) is never accepted: its candidate is
//!   cleared at the next read, before any further stream is delivered. A service call that
//!   finds no candidate sends no hints.
//! - **Where the frame goes.** The service future queues the 103 as a whole HEADERS frame
//!   (`H2Hints::push`) and wakes the connection; the write side puts it into the outgoing
//!   bytes only at a frame boundary, never inside a header block (HEADERS or PUSH_PROMISE
//!   without END_HEADERS and its CONTINUATIONs), never before h2's first frame (its
//!   SETTINGS). While a frame waits, h2's writes are taken no further than the end of its
//!   current frame. h2 flushes on every pass of its connection task, and h2 flushes only
//!   whole frames, so a waiting frame goes out at the next pass. The service future holds
//!   the final response back until its frames are taken, so the 103 precedes the stream's
//!   final HEADERS.
//! - **The header block** is HPACK that leaves the dynamic table alone (`:status` and each
//!   `link` as literals without indexing, names from the static table, values not Huffman
//!   coded), so h2's encoder state stays valid for the client's decoder. Dropped instead:
//!   on a connection whose client lowered SETTINGS_HEADER_TABLE_SIZE below 4096 (RFC 7541
//!   §4.2 would then want a size update at the start of the next block), a frame larger than
//!   the client's SETTINGS_MAX_FRAME_SIZE or a header list over its
//!   SETTINGS_MAX_HEADER_LIST_SIZE, a stream h2 has reset itself (no frame may follow our
//!   own RST_STREAM; a client ignores frames on streams it reset, so those are harmless),
//!   and anything past `MAX_PENDING` bytes queued.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures_util::task::AtomicWaker;
use http::HeaderValue;
use tokio::io::AsyncWrite;

use crate::bridge::EarlyHint;
use crate::http::h2_flood::{FrameHead, OnFrame};
use crate::http::prefix_int;

/// At most this many bytes of HTTP/2 hint frames wait per connection; more are dropped
/// (hints are optional, RFC 8297 §2): an app that keeps hinting to a client that does not
/// read holds no more.
const MAX_PENDING: usize = 16 * 1024;

const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const CONTINUATION: u8 = 0x9;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;
const DEFAULT_HEADER_TABLE_SIZE: u32 = 4096;
const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;

/// One connection's hints, shared by its service futures and its I/O wrapper (`H2Guard`).
#[derive(Default)]
pub(crate) struct H2Hints {
    /// The stream whose header block the read side delivered last, not yet taken (0: none).
    candidate: AtomicU32,
    /// Whether `queue` holds frames: the write side's only cost per write without hints.
    pending: AtomicBool,
    /// The connection's task, woken when a frame is queued.
    conn: AtomicWaker,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    frames: VecDeque<Queued>,
    bytes: usize,
    /// Tickets: the last handed out, the last whose frame was taken (or dropped).
    issued: u64,
    done: u64,
    waiters: Vec<Waker>,
    /// The connection is over: nothing more is queued, nobody waits.
    closed: bool,
}

struct Queued {
    stream: u32,
    frame: Vec<u8>,
    /// HPACK's size of the header list (RFC 9113 §6.5.2), for the client's limit.
    list_size: usize,
    ticket: u64,
}

impl H2Hints {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The service call's stream, if the read side just delivered its header block.
    pub(crate) fn take_stream(&self) -> Option<u32> {
        match self.candidate.swap(0, Ordering::AcqRel) {
            0 => None,
            id => Some(id),
        }
    }

    /// Queues a 103 for `stream`; the ticket to wait for (None: dropped).
    pub(crate) fn push(&self, stream: u32, hint: &EarlyHint) -> Option<u64> {
        let (frame, list_size) = encode_frame(stream, &hint.links)?;
        let mut queue = self.queue();
        if queue.closed || queue.bytes + frame.len() > MAX_PENDING {
            return None;
        }
        queue.issued += 1;
        let ticket = queue.issued;
        queue.bytes += frame.len();
        queue.frames.push_back(Queued {
            stream,
            frame,
            list_size,
            ticket,
        });
        self.pending.store(true, Ordering::Release);
        drop(queue);
        self.conn.wake();
        Some(ticket)
    }

    /// Ready once the frame of `ticket` (and every one before it) is taken by the write side,
    /// dropped, or the connection is over.
    pub(crate) fn poll_taken(&self, ticket: u64, cx: &mut Context<'_>) -> Poll<()> {
        let mut queue = self.queue();
        if queue.closed || queue.done >= ticket {
            return Poll::Ready(());
        }
        if !queue.waiters.iter().any(|w| w.will_wake(cx.waker())) {
            queue.waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }

    #[inline]
    fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    fn pop(&self) -> Option<Queued> {
        let mut queue = self.queue();
        let next = queue.frames.pop_front();
        if let Some(next) = &next {
            queue.bytes -= next.frame.len();
        }
        if queue.frames.is_empty() {
            self.pending.store(false, Ordering::Release);
        }
        next
    }

    fn mark_done(&self, ticket: u64) {
        let mut queue = self.queue();
        queue.done = ticket;
        for waker in queue.waiters.drain(..) {
            waker.wake();
        }
    }

    /// The connection is over (or closing): queued frames go nowhere, waiters are let go.
    pub(crate) fn close(&self) {
        let mut queue = self.queue();
        queue.closed = true;
        queue.frames.clear();
        queue.bytes = 0;
        self.pending.store(false, Ordering::Release);
        self.candidate.store(0, Ordering::Release);
        for waker in queue.waiters.drain(..) {
            waker.wake();
        }
    }
}

/// Where the read side stands with the stream it delivered last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    /// Nothing delivered that waits for acceptance.
    Open,
    /// A new stream's header block ended the last read: h2's next read is to be Pending.
    Delivered,
    /// That Pending was returned: hyper has accepted the stream (or h2 refused it) by the
    /// next read, which clears the candidate.
    Yielded,
}

/// The I/O wrapper's side of the hints: what it learns from the frames both ways, and the
/// frame it is inserting.
pub(crate) struct HintSide {
    shared: Arc<H2Hints>,
    gate: Gate,
    /// The highest stream the client opened (a HEADERS above it opens a new one).
    last_opened: u32,
    /// A new stream whose header block continues in CONTINUATION frames.
    opening: Option<u32>,
    /// The incoming SETTINGS entry being read, in pieces.
    setting: [u8; 6],
    setting_have: usize,
    /// The client lowered its HPACK table below the default: no hints on this connection.
    table_lowered: bool,
    max_frame_size: u32,
    max_header_list: Option<u32>,
    /// h2 has written its first frame (its SETTINGS).
    started: bool,
    /// h2 is inside a header block: CONTINUATION frames follow.
    in_block: bool,
    reset: ResetWindow,
    /// The frame being inserted, and how much of it is written.
    inserting: Option<(Queued, usize)>,
    /// The waker last registered in `shared.conn`.
    registered: Option<Waker>,
}

impl HintSide {
    pub(crate) fn new(shared: Arc<H2Hints>) -> Self {
        HintSide {
            shared,
            gate: Gate::Open,
            last_opened: 0,
            opening: None,
            setting: [0; 6],
            setting_have: 0,
            table_lowered: false,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            max_header_list: None,
            started: false,
            in_block: false,
            reset: ResetWindow::default(),
            inserting: None,
            registered: None,
        }
    }

    pub(crate) fn close(&self) {
        self.shared.close();
    }

    // ------------------------------------------------------------ read side

    /// Whether h2's read loop must be left before anything more is delivered (see the
    /// module comment); marks it left.
    pub(crate) fn must_yield(&mut self) -> bool {
        match self.gate {
            Gate::Open => false,
            Gate::Delivered => {
                self.gate = Gate::Yielded;
                true
            }
            Gate::Yielded => {
                // Accepted and taken, or refused: either way no longer a candidate.
                self.shared.candidate.store(0, Ordering::Release);
                self.gate = Gate::Open;
                false
            }
        }
    }

    /// A frame from the client: stop after it when it ends a new stream's header block;
    /// capture SETTINGS.
    pub(crate) fn incoming(&mut self, head: FrameHead) -> OnFrame {
        match head.kind {
            HEADERS if head.stream > self.last_opened && head.stream % 2 == 1 => {
                self.last_opened = head.stream;
                if head.flags & END_HEADERS != 0 {
                    self.opening = None;
                    OnFrame::StopAfter
                } else {
                    self.opening = Some(head.stream);
                    OnFrame::Pass
                }
            }
            CONTINUATION if head.flags & END_HEADERS != 0 && self.opening.is_some() => {
                OnFrame::StopAfter
            }
            SETTINGS if head.flags & ACK == 0 => {
                self.setting_have = 0;
                OnFrame::Capture
            }
            _ => OnFrame::Pass,
        }
    }

    /// The scan stopped after a new stream's header block, which h2 gets now.
    pub(crate) fn delivered(&mut self) {
        let stream = self.opening.take().unwrap_or(self.last_opened);
        self.shared.candidate.store(stream, Ordering::Release);
        self.gate = Gate::Delivered;
    }

    /// Payload bytes of a client SETTINGS frame.
    pub(crate) fn settings(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = (6 - self.setting_have).min(bytes.len());
            self.setting[self.setting_have..self.setting_have + take]
                .copy_from_slice(&bytes[..take]);
            self.setting_have += take;
            bytes = &bytes[take..];
            if self.setting_have == 6 {
                self.setting_have = 0;
                let s = self.setting;
                let id = u16::from_be_bytes([s[0], s[1]]);
                let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
                match id {
                    SETTINGS_HEADER_TABLE_SIZE if value < DEFAULT_HEADER_TABLE_SIZE => {
                        self.table_lowered = true;
                    }
                    SETTINGS_MAX_FRAME_SIZE => self.max_frame_size = value,
                    SETTINGS_MAX_HEADER_LIST_SIZE => self.max_header_list = Some(value),
                    _ => {}
                }
            }
        }
    }

    // ------------------------------------------------------------ write side

    /// The connection's task, for `H2Hints::push` to wake: registered when it changes (h2
    /// flushes several times per request, always from the same task).
    #[inline]
    pub(crate) fn register(&mut self, waker: &Waker) {
        if self.registered.as_ref().is_some_and(|w| w.will_wake(waker)) {
            return;
        }
        self.shared.conn.register(waker);
        self.registered = Some(waker.clone());
    }

    /// Whether a frame waits to be inserted (one relaxed load when none does).
    #[inline]
    pub(crate) fn wants_to_insert(&self) -> bool {
        self.inserting.is_some() || self.shared.is_pending()
    }

    /// A frame h2 wrote.
    pub(crate) fn outgoing(&mut self, head: FrameHead) {
        self.started = true;
        match head.kind {
            HEADERS | PUSH_PROMISE => self.in_block = head.flags & END_HEADERS == 0,
            CONTINUATION => self.in_block = head.flags & END_HEADERS == 0,
            RST_STREAM => self.reset.record(head.stream),
            _ => {}
        }
    }

    /// Whether a frame may go in at this boundary of h2's bytes.
    pub(crate) fn may_insert_at_boundary(&self) -> bool {
        self.started && !self.in_block
    }

    /// Writes the queued frames through `inner`, called at a boundary where
    /// `may_insert_at_boundary`; Ready once none is left.
    pub(crate) fn poll_insert<S: AsyncWrite + Unpin>(
        &mut self,
        mut inner: Pin<&mut S>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if let Some((queued, written)) = &mut self.inserting {
                while *written < queued.frame.len() {
                    match inner.as_mut().poll_write(cx, &queued.frame[*written..]) {
                        Poll::Ready(Ok(0)) => {
                            self.shared.close();
                            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                        }
                        Poll::Ready(Ok(n)) => *written += n,
                        Poll::Ready(Err(e)) => {
                            self.shared.close();
                            return Poll::Ready(Err(e));
                        }
                        Poll::Pending => return Poll::Pending,
                    }
                }
                let ticket = queued.ticket;
                self.inserting = None;
                self.shared.mark_done(ticket);
            }
            if !self.shared.is_pending() {
                return Poll::Ready(Ok(()));
            }
            let Some(next) = self.shared.pop() else {
                return Poll::Ready(Ok(()));
            };
            if self.allows(&next) {
                self.inserting = Some((next, 0));
            } else {
                self.shared.mark_done(next.ticket);
            }
        }
    }

    /// Whether the client can take this frame on this stream (see the module comment).
    fn allows(&self, queued: &Queued) -> bool {
        !self.table_lowered
            && queued.frame.len() - 9 <= self.max_frame_size as usize
            && self
                .max_header_list
                .map_or(true, |max| queued.list_size <= max as usize)
            && queued.stream <= self.last_opened
            && !self.reset.was_reset(queued.stream)
    }

    /// The bytes of h2's next write that may go before a waiting frame: to the end of the
    /// current frame, or a frame header's worth at a boundary where none may go in.
    pub(crate) fn write_limit(&self, left_in_frame: usize) -> usize {
        if left_in_frame == 0 {
            9
        } else {
            left_in_frame
        }
    }
}

/// The streams h2 reset itself, among the last `2 * WINDOW_BITS` stream ids: a stream below
/// the window counts as reset (a hint for a stream that old is dropped), so the record is
/// both bounded and never wrong in the unsafe direction.
#[derive(Default)]
struct ResetWindow {
    /// The lowest stream id the bits cover (odd; 0 before the first reset: all covered).
    base: u32,
    bits: [u64; WINDOW_WORDS],
}

const WINDOW_WORDS: usize = 16;
const WINDOW_BITS: u32 = (WINDOW_WORDS * 64) as u32;

impl ResetWindow {
    fn record(&mut self, stream: u32) {
        if stream == 0 || stream % 2 == 0 {
            return;
        }
        if self.base == 0 {
            self.base = 1;
        }
        if stream < self.base {
            return;
        }
        let slot = (stream - self.base) / 2;
        if slot >= WINDOW_BITS {
            // Slide: the window's new top is this stream.
            let shift = slot - WINDOW_BITS + 1;
            self.shift(shift);
            self.base += 2 * shift;
        }
        let slot = (stream - self.base) / 2;
        self.bits[(slot / 64) as usize] |= 1 << (slot % 64);
    }

    fn shift(&mut self, slots: u32) {
        if slots >= WINDOW_BITS {
            self.bits = [0; WINDOW_WORDS];
            return;
        }
        let mut shifted = [0u64; WINDOW_WORDS];
        for slot in slots..WINDOW_BITS {
            if self.bits[(slot / 64) as usize] & (1 << (slot % 64)) != 0 {
                let to = slot - slots;
                shifted[(to / 64) as usize] |= 1 << (to % 64);
            }
        }
        self.bits = shifted;
    }

    fn was_reset(&self, stream: u32) -> bool {
        if self.base == 0 {
            return false;
        }
        if stream < self.base {
            return true;
        }
        let slot = (stream - self.base) / 2;
        slot < WINDOW_BITS && self.bits[(slot / 64) as usize] & (1 << (slot % 64)) != 0
    }
}

/// HPACK static table (RFC 7541 Appendix A): `:status` (index 8, "200") and `link` (45).
const STATUS_INDEX: u32 = 8;
const LINK_INDEX: u32 = 45;

/// The 103 as one HEADERS frame (END_HEADERS, not END_STREAM) and its header list size;
/// None if it would not fit a frame's 24-bit length.
fn encode_frame(stream: u32, links: &[HeaderValue]) -> Option<(Vec<u8>, usize)> {
    let mut frame = vec![0u8; 9];
    literal(&mut frame, STATUS_INDEX, b"103");
    let mut list_size = ":status".len() + 3 + 32;
    for value in links {
        literal(&mut frame, LINK_INDEX, value.as_bytes());
        list_size += "link".len() + value.len() + 32;
    }
    let len = u32::try_from(frame.len() - 9)
        .ok()
        .filter(|&l| l < 1 << 24)?;
    frame[..3].copy_from_slice(&len.to_be_bytes()[1..]);
    frame[3] = HEADERS;
    frame[4] = END_HEADERS;
    frame[5..9].copy_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    Some((frame, list_size))
}

/// "Literal Header Field without Indexing — Indexed Name" (RFC 7541 §6.2.2): leaves the
/// dynamic table as it is; the value as a plain string.
fn literal(out: &mut Vec<u8>, name_index: u32, value: &[u8]) {
    prefix_int::encode(out, 4, 0x00, u64::from(name_index));
    prefix_int::encode(out, 7, 0x00, value.len() as u64);
    out.extend_from_slice(value);
}

/// Where a request's hints go on HTTP/2: its stream, and the ticket of its last frame.
pub(crate) struct H2StreamHints {
    shared: Arc<H2Hints>,
    stream: u32,
    last: Option<u64>,
}

impl H2StreamHints {
    pub(crate) fn new(shared: Arc<H2Hints>, stream: u32) -> Self {
        H2StreamHints {
            shared,
            stream,
            last: None,
        }
    }

    pub(crate) fn push(&mut self, hint: &EarlyHint) {
        if let Some(ticket) = self.shared.push(self.stream, hint) {
            self.last = Some(ticket);
        }
    }

    /// Ready once every hint of this request is taken by the write side (or dropped).
    pub(crate) fn poll_taken(&self, cx: &mut Context<'_>) -> Poll<()> {
        match self.last {
            None => Poll::Ready(()),
            Some(ticket) => self.shared.poll_taken(ticket, cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes the representations `encode_frame` uses (and only those).
    fn decode(block: &[u8]) -> Vec<(String, String)> {
        fn int(block: &[u8], i: &mut usize, prefix: u8) -> u32 {
            let max = (1u32 << prefix) - 1;
            let mut v = u32::from(block[*i]) & max;
            *i += 1;
            if v == max {
                let mut shift = 0;
                loop {
                    let b = block[*i];
                    *i += 1;
                    v += u32::from(b & 0x7f) << shift;
                    shift += 7;
                    if b & 0x80 == 0 {
                        break;
                    }
                }
            }
            v
        }
        let mut out = Vec::new();
        let mut i = 0;
        while i < block.len() {
            assert_eq!(block[i] & 0xf0, 0, "literal without indexing");
            let name = match int(block, &mut i, 4) {
                8 => ":status",
                45 => "link",
                other => panic!("index {other}"),
            };
            assert_eq!(block[i] & 0x80, 0, "not Huffman coded");
            let len = int(block, &mut i, 7) as usize;
            out.push((
                name.to_owned(),
                String::from_utf8(block[i..i + len].to_vec()).unwrap(),
            ));
            i += len;
        }
        out
    }

    fn hint(values: &[&str]) -> EarlyHint {
        EarlyHint {
            links: values
                .iter()
                .map(|v| HeaderValue::from_str(v).unwrap())
                .collect(),
        }
    }

    #[test]
    fn the_frame_is_headers_with_end_headers_and_a_table_free_block() {
        let long = format!("</{}.css>; rel=preload", "x".repeat(300));
        let (frame, list_size) =
            encode_frame(7, &hint(&["</a.css>; rel=preload; as=style", &long]).links).unwrap();
        let len = u32::from_be_bytes([0, frame[0], frame[1], frame[2]]) as usize;
        assert_eq!(len, frame.len() - 9);
        assert_eq!(frame[3], 0x1, "HEADERS");
        assert_eq!(frame[4], 0x4, "END_HEADERS only");
        assert_eq!(&frame[5..9], &7u32.to_be_bytes());
        // Known bytes: :status 103, then link (index 45 = 15 + 30).
        assert_eq!(&frame[9..14], &[0x08, 0x03, b'1', b'0', b'3']);
        assert_eq!(&frame[14..16], &[0x0f, 30]);
        assert_eq!(
            decode(&frame[9..]),
            vec![
                (":status".to_owned(), "103".to_owned()),
                (
                    "link".to_owned(),
                    "</a.css>; rel=preload; as=style".to_owned()
                ),
                ("link".to_owned(), long.clone()),
            ]
        );
        assert_eq!(list_size, 42 + (36 + 31) + (36 + long.len()));
    }

    fn head(kind: u8, flags: u8, stream: u32) -> FrameHead {
        FrameHead {
            len: 0,
            kind,
            flags,
            stream,
        }
    }

    #[test]
    fn only_a_new_stream_header_block_end_stops_the_read() {
        let mut side = HintSide::new(Arc::default());
        assert_eq!(
            side.incoming(head(HEADERS, END_HEADERS, 1)),
            OnFrame::StopAfter
        );
        side.delivered();
        assert_eq!(side.shared.take_stream(), Some(1));
        assert_eq!(side.shared.take_stream(), None);
        // Trailers on stream 1: not new.
        assert_eq!(side.incoming(head(HEADERS, END_HEADERS, 1)), OnFrame::Pass);
        // A block in pieces: the stop is at its last CONTINUATION.
        assert_eq!(side.incoming(head(HEADERS, 0, 3)), OnFrame::Pass);
        assert_eq!(side.incoming(head(CONTINUATION, 0, 3)), OnFrame::Pass);
        assert_eq!(
            side.incoming(head(CONTINUATION, END_HEADERS, 3)),
            OnFrame::StopAfter
        );
        side.delivered();
        assert!(side.must_yield(), "h2's next read is Pending");
        assert!(!side.must_yield(), "the one after goes on");
        assert_eq!(
            side.shared.take_stream(),
            None,
            "not taken: cleared (refused)"
        );
    }

    #[test]
    fn settings_are_read_in_pieces() {
        let mut side = HintSide::new(Arc::default());
        let mut payload = Vec::new();
        payload.extend_from_slice(&[0, 5, 0, 0, 0x40, 0]); // MAX_FRAME_SIZE 16384
        payload.extend_from_slice(&[0, 6, 0, 0, 0x01, 0]); // MAX_HEADER_LIST_SIZE 256
        payload.extend_from_slice(&[0, 1, 0, 0, 0x01, 0]); // HEADER_TABLE_SIZE 256
        assert_eq!(side.incoming(head(SETTINGS, 0, 0)), OnFrame::Capture);
        for piece in payload.chunks(4) {
            side.settings(piece);
        }
        assert_eq!(side.max_frame_size, 16384);
        assert_eq!(side.max_header_list, Some(256));
        assert!(side.table_lowered);
        assert_eq!(side.incoming(head(SETTINGS, ACK, 0)), OnFrame::Pass);
    }

    #[test]
    fn a_larger_table_keeps_hints() {
        let mut side = HintSide::new(Arc::default());
        side.incoming(head(SETTINGS, 0, 0));
        side.settings(&[0, 1, 0, 1, 0, 0]); // 65536, as browsers send
        assert!(!side.table_lowered);
    }

    /// A socket that takes `step` bytes per write and records them.
    struct Sink {
        out: Vec<u8>,
        step: usize,
    }

    impl AsyncWrite for Sink {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            let n = data.len().min(this.step);
            this.out.extend_from_slice(&data[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn insert_all(side: &mut HintSide, sink: &mut Sink) {
        let waker = crate::server::cork::no_wake();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(
            side.poll_insert(Pin::new(sink), &mut cx),
            Poll::Ready(Ok(()))
        ));
    }

    #[test]
    fn frames_go_in_order_and_waiters_learn_it() {
        let shared = Arc::new(H2Hints::default());
        let mut side = HintSide::new(shared.clone());
        side.last_opened = 5;
        side.outgoing(head(SETTINGS, 0, 0));
        let mut first = H2StreamHints::new(shared.clone(), 3);
        let mut second = H2StreamHints::new(shared.clone(), 5);
        first.push(&hint(&["</a.css>"]));
        second.push(&hint(&["</b.css>"]));
        first.push(&hint(&["</c.css>"]));
        let waker = crate::server::cork::no_wake();
        let mut cx = Context::from_waker(&waker);
        assert!(first.poll_taken(&mut cx).is_pending());
        let mut sink = Sink {
            out: Vec::new(),
            step: 5,
        };
        insert_all(&mut side, &mut sink);
        assert!(first.poll_taken(&mut cx).is_ready());
        assert!(second.poll_taken(&mut cx).is_ready());
        let mut streams = Vec::new();
        let mut at = 0;
        while at < sink.out.len() {
            let len = u32::from_be_bytes([0, sink.out[at], sink.out[at + 1], sink.out[at + 2]]);
            let stream = u32::from_be_bytes(sink.out[at + 5..at + 9].try_into().unwrap());
            let fields = decode(&sink.out[at + 9..at + 9 + len as usize]);
            streams.push((stream, fields[1].1.clone()));
            at += 9 + len as usize;
        }
        assert_eq!(
            streams,
            vec![
                (3, "</a.css>".to_owned()),
                (5, "</b.css>".to_owned()),
                (3, "</c.css>".to_owned())
            ]
        );
    }

    #[test]
    fn hints_are_dropped_where_the_client_cannot_take_them() {
        let shared = Arc::new(H2Hints::default());
        let mut side = HintSide::new(shared.clone());
        side.last_opened = 9;
        side.outgoing(head(RST_STREAM, 0, 7));
        let mut sink = Sink {
            out: Vec::new(),
            step: 1000,
        };
        // Reset by the server; not opened yet; too large for the client's frames.
        H2StreamHints::new(shared.clone(), 7).push(&hint(&["</a.css>"]));
        H2StreamHints::new(shared.clone(), 11).push(&hint(&["</a.css>"]));
        side.max_frame_size = 10;
        H2StreamHints::new(shared.clone(), 9).push(&hint(&["</a.css>"]));
        insert_all(&mut side, &mut sink);
        assert!(sink.out.is_empty());
        side.max_frame_size = DEFAULT_MAX_FRAME_SIZE;
        side.table_lowered = true;
        H2StreamHints::new(shared.clone(), 9).push(&hint(&["</a.css>"]));
        insert_all(&mut side, &mut sink);
        assert!(sink.out.is_empty());
    }

    #[test]
    fn pending_hints_are_bounded() {
        let shared = H2Hints::default();
        let long = "x".repeat(1000);
        let accepted = (0..100)
            .filter(|_| shared.push(1, &hint(&[&long])).is_some())
            .count();
        assert!(accepted * 1000 <= MAX_PENDING, "{accepted}");
        assert!(accepted > 0);
        assert!(shared.queue().bytes <= MAX_PENDING);
    }

    #[test]
    fn a_header_block_in_pieces_keeps_hints_out() {
        let mut side = HintSide::new(Arc::default());
        assert!(!side.may_insert_at_boundary(), "not before h2's SETTINGS");
        side.outgoing(head(SETTINGS, 0, 0));
        assert!(side.may_insert_at_boundary());
        side.outgoing(head(HEADERS, 0, 1));
        assert!(!side.may_insert_at_boundary());
        side.outgoing(head(CONTINUATION, 0, 1));
        assert!(!side.may_insert_at_boundary());
        side.outgoing(head(CONTINUATION, END_HEADERS, 1));
        assert!(side.may_insert_at_boundary());
        side.outgoing(head(PUSH_PROMISE, 0, 1));
        assert!(!side.may_insert_at_boundary());
    }

    #[test]
    fn the_reset_window_slides_and_counts_what_fell_out_as_reset() {
        let mut window = ResetWindow::default();
        assert!(!window.was_reset(1));
        window.record(3);
        assert!(window.was_reset(3) && !window.was_reset(1) && !window.was_reset(5));
        let far = 3 + 2 * WINDOW_BITS + 100;
        window.record(far);
        assert!(window.was_reset(far));
        assert!(window.was_reset(3), "below the window: counted as reset");
        assert!(!window.was_reset(far - 2));
        assert!(!window.was_reset(far + 2));
    }
}
