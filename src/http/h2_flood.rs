//! Frames that make no progress, counted (RFC 9113 §10.5: "an endpoint MAY treat activity
//! that is suspicious as a connection error of type ENHANCE_YOUR_CALM").
//!
//! h2 answers or absorbs every frame it is sent: a client flooding PINGs or SETTINGS makes
//! the server write an ACK for each, WINDOW_UPDATEs of +1, PRIORITY, RST_STREAM for unknown
//! streams or empty DATA cost a frame's processing each, and none of them moves a request
//! forward (the 2019 HTTP/2 CVEs: CVE-2019-9512 ping flood, -9515 settings flood, -9518
//! empty frames). `FrameScanner` splits the byte stream into frames by their 9-byte headers
//! (handing a payload over only when its caller asks: `h2_frame_rules` reads SETTINGS);
//! `FloodBudget` charges a token for each such frame and closes the connection when a burst
//! runs out. Tokens come back with time and with real work:
//! each DATA frame the server sends earns the WINDOW_UPDATEs a client returns for it, each
//! new request the control frames that may come with it. The numbers are generous: a real
//! client never comes near them.

use std::time::Duration;

/// Tokens a connection starts with and can hold at most.
pub(crate) const BURST: u32 = 5_000;
/// Tokens returned per second.
const REFILL_PER_SECOND: u32 = 1_000;
/// Tokens each DATA frame the server sends earns: a WINDOW_UPDATE for the stream and one for
/// the connection, and a PING a client's bandwidth estimator may send with it (gRPC's BDP).
const EARNED_PER_DATA_SENT: u32 = 4;
/// Tokens each new request stream earns (a PRIORITY, a WINDOW_UPDATE, an RST_STREAM...).
const EARNED_PER_REQUEST: u32 = 4;

const CLIENT_PREFACE_LEN: usize = 24;

/// RFC 9113 §6's frame types.
pub(crate) mod frame_kind {
    pub(crate) const DATA: u8 = 0x0;
    pub(crate) const HEADERS: u8 = 0x1;
    pub(crate) const PRIORITY: u8 = 0x2;
    pub(crate) const RST_STREAM: u8 = 0x3;
    pub(crate) const SETTINGS: u8 = 0x4;
    pub(crate) const PING: u8 = 0x6;
    pub(crate) const GOAWAY: u8 = 0x7;
    pub(crate) const WINDOW_UPDATE: u8 = 0x8;
    pub(crate) const CONTINUATION: u8 = 0x9;
}
use frame_kind::{CONTINUATION, DATA, HEADERS};

pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;

/// RFC 9113 §7's ENHANCE_YOUR_CALM.
pub(crate) const ENHANCE_YOUR_CALM: u32 = 0xb;

/// A frame's 9-byte header (RFC 9113 §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrameHead {
    pub(crate) len: u32,
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
}

impl FrameHead {
    fn parse(b: &[u8; 9]) -> Self {
        FrameHead {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Scan {
    /// Bytes of the client's connection preface still to skip.
    Preface(usize),
    /// `have` bytes of the next frame header so far.
    Head { buf: [u8; 9], have: usize },
    /// Payload bytes of the current frame still to pass; whether they go to the sink.
    Payload { left: u32, capture: bool },
}

/// What to do with a frame whose header was just read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnFrame {
    Pass,
    /// Hand its payload to `FrameSink::payload`, in pieces as it passes.
    Capture,
    /// Stop where the frame begins.
    StopBefore,
}

/// What a scan does with the frames it finds (`FrameScanner::feed_frames`).
pub(crate) trait FrameSink {
    /// A frame header just read.
    fn frame(&mut self, head: FrameHead) -> OnFrame;
    /// A piece of a captured frame's payload, in order; false stops the scan where that
    /// frame began.
    fn payload(&mut self, piece: &[u8]) -> bool;
}

/// Finds the frame headers in one direction of an HTTP/2 connection, bytes as they pass.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FrameScanner {
    scan: Scan,
}

impl FrameScanner {
    /// What a client sends: the preface, then frames.
    pub(crate) fn client() -> Self {
        FrameScanner {
            scan: Scan::Preface(CLIENT_PREFACE_LEN),
        }
    }

    /// What the server sends: frames from the first byte.
    pub(crate) fn server() -> Self {
        FrameScanner {
            scan: Scan::Head {
                buf: [0; 9],
                have: 0,
            },
        }
    }

    /// Between two frames (a frame can be inserted here without breaking the stream).
    pub(crate) fn at_boundary(&self) -> bool {
        matches!(
            self.scan,
            Scan::Head { have: 0, .. } | Scan::Payload { left: 0, .. }
        )
    }

    /// Scans `data`; `on_frame(head)` for each frame header completed. Stops early, returning
    /// the offset where the frame began, when `on_frame` returns false.
    pub(crate) fn feed(
        &mut self,
        data: &[u8],
        on_frame: impl FnMut(FrameHead) -> bool,
    ) -> Option<usize> {
        struct Heads<F>(F);
        impl<F: FnMut(FrameHead) -> bool> FrameSink for Heads<F> {
            fn frame(&mut self, head: FrameHead) -> OnFrame {
                if (self.0)(head) {
                    OnFrame::Pass
                } else {
                    OnFrame::StopBefore
                }
            }
            fn payload(&mut self, _piece: &[u8]) -> bool {
                true
            }
        }
        self.feed_frames(data, &mut Heads(on_frame))
    }

    /// Scans `data`, telling `sink` of each frame header completed and handing it the payloads
    /// it captures. When it says stop: the offset in `data` where that frame began (0 if it
    /// began in an earlier call).
    pub(crate) fn feed_frames(&mut self, data: &[u8], sink: &mut impl FrameSink) -> Option<usize> {
        let mut i = 0;
        // Where the current frame began in `data` (0: in an earlier call).
        let mut frame_start = 0;
        while i < data.len() {
            match &mut self.scan {
                Scan::Preface(left) => {
                    let take = (*left).min(data.len() - i);
                    *left -= take;
                    i += take;
                    if *left == 0 {
                        self.scan = FrameScanner::server().scan;
                    }
                }
                Scan::Payload { left, capture } => {
                    if *left == 0 {
                        self.scan = FrameScanner::server().scan;
                        continue;
                    }
                    let take = (*left as usize).min(data.len() - i);
                    if *capture && !sink.payload(&data[i..i + take]) {
                        return Some(frame_start);
                    }
                    *left -= take as u32;
                    i += take;
                }
                Scan::Head { buf, have } => {
                    let began = i.saturating_sub(*have);
                    frame_start = began;
                    let take = (9 - *have).min(data.len() - i);
                    buf[*have..*have + take].copy_from_slice(&data[i..i + take]);
                    *have += take;
                    i += take;
                    if *have == 9 {
                        let head = FrameHead::parse(buf);
                        let action = sink.frame(head);
                        self.scan = Scan::Payload {
                            left: head.len,
                            capture: action == OnFrame::Capture,
                        };
                        if action == OnFrame::StopBefore {
                            return Some(began);
                        }
                    }
                }
            }
        }
        None
    }
}

/// The no-progress frames one connection may still send.
#[derive(Debug)]
pub(crate) struct FloodBudget {
    tokens: u32,
    /// Refill time not yet turned into tokens.
    carry: Duration,
    /// The highest client stream id seen (a HEADERS above it opens a request).
    last_stream: u32,
    /// Frames charged so far (for the log line).
    pub(crate) charged: u64,
}

impl Default for FloodBudget {
    fn default() -> Self {
        FloodBudget {
            tokens: BURST,
            carry: Duration::ZERO,
            last_stream: 0,
            charged: 0,
        }
    }
}

impl FloodBudget {
    fn earn(&mut self, tokens: u32) {
        self.tokens = self.tokens.saturating_add(tokens).min(BURST);
    }

    /// Time passed since the last call.
    pub(crate) fn refill(&mut self, elapsed: Duration) {
        self.carry += elapsed;
        let whole = self.carry.as_millis().min(u128::from(u32::MAX)) as u32;
        let tokens = whole.saturating_mul(REFILL_PER_SECOND) / 1000;
        if tokens > 0 {
            self.carry -=
                Duration::from_millis(u64::from(tokens) * 1000 / u64::from(REFILL_PER_SECOND));
            self.earn(tokens);
        }
    }

    /// A frame the client sent; false once the connection has spent its budget.
    pub(crate) fn incoming(&mut self, head: FrameHead) -> bool {
        let no_progress = match head.kind {
            DATA => head.len == 0 && head.flags & END_STREAM == 0,
            HEADERS => {
                if head.stream > self.last_stream {
                    self.last_stream = head.stream;
                    self.earn(EARNED_PER_REQUEST);
                }
                false
            }
            CONTINUATION => head.len == 0 && head.flags & END_HEADERS == 0,
            // PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE and
            // the unknown types: nothing a request needs to move forward.
            _ => true,
        };
        if !no_progress {
            return true;
        }
        self.charged += 1;
        match self.tokens.checked_sub(1) {
            Some(left) => {
                self.tokens = left;
                true
            }
            None => false,
        }
    }

    /// A frame the server sent.
    pub(crate) fn outgoing(&mut self, head: FrameHead) {
        if head.kind == DATA && head.len > 0 {
            self.earn(EARNED_PER_DATA_SENT);
        }
    }
}

/// GOAWAY (RFC 9113 §6.8) with error `code`, naming `last_stream` as the last stream the
/// server may have processed.
pub(crate) fn goaway(last_stream: u32, code: u32) -> [u8; 17] {
    let mut frame = [0u8; 17];
    frame[2] = 8; // payload length
    frame[3] = frame_kind::GOAWAY;
    frame[9..13].copy_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    frame[13..17].copy_from_slice(&code.to_be_bytes());
    frame
}

impl FloodBudget {
    pub(crate) fn last_stream(&self) -> u32 {
        self.last_stream
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut out = len.to_be_bytes()[1..].to_vec();
        out.push(kind);
        out.push(flags);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn heads(scanner: &mut FrameScanner, data: &[u8]) -> Vec<FrameHead> {
        let mut out = Vec::new();
        scanner.feed(data, |h| {
            out.push(h);
            true
        });
        out
    }

    #[test]
    fn finds_frames_after_the_preface_however_the_bytes_are_split() {
        let mut stream = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        stream.extend(frame(0x4, 0, 0, &[0; 6]));
        stream.extend(frame(0x8, 0, 0, &[0, 0, 0, 1]));
        stream.extend(frame(0x0, 1, 1, b"hello"));
        for step in [1, 2, 5, 9, 13, 64] {
            let mut scanner = FrameScanner::client();
            let mut got = Vec::new();
            for piece in stream.chunks(step) {
                got.extend(heads(&mut scanner, piece));
            }
            let kinds: Vec<(u8, u32)> = got.iter().map(|h| (h.kind, h.len)).collect();
            assert_eq!(kinds, vec![(0x4, 6), (0x8, 4), (0x0, 5)], "step {step}");
            assert!(scanner.at_boundary());
        }
    }

    #[test]
    fn a_stop_reports_where_the_frame_began() {
        let mut data = frame(0x6, 0, 0, &[0; 8]);
        data.extend(frame(0x6, 0, 0, &[0; 8]));
        let mut scanner = FrameScanner::server();
        let mut seen = 0;
        let stop = scanner.feed(&data, |_| {
            seen += 1;
            seen < 2
        });
        assert_eq!(stop, Some(17));
    }

    /// Captures the payloads of the frames of type `kind`; refuses a piece holding `refuse`.
    struct Capturing {
        kind: u8,
        refuse: Option<u8>,
        captured: Vec<u8>,
    }

    impl FrameSink for Capturing {
        fn frame(&mut self, head: FrameHead) -> OnFrame {
            if head.kind == self.kind {
                OnFrame::Capture
            } else {
                OnFrame::Pass
            }
        }

        fn payload(&mut self, piece: &[u8]) -> bool {
            self.captured.extend_from_slice(piece);
            self.refuse.is_none_or(|byte| !piece.contains(&byte))
        }
    }

    #[test]
    fn captured_payloads_are_handed_over_however_the_bytes_are_split() {
        let mut data = frame(0x4, 0, 0, b"abcdef");
        data.extend(frame(0x1, 0x4, 1, b"hpack"));
        data.extend(frame(0x1, 0x4, 3, b""));
        data.extend(frame(0x0, 0x1, 1, b"body"));
        for step in [1, 4, 9, 100] {
            let mut scanner = FrameScanner::server();
            let mut sink = Capturing {
                kind: 0x4,
                refuse: None,
                captured: Vec::new(),
            };
            for piece in data.chunks(step) {
                assert_eq!(scanner.feed_frames(piece, &mut sink), None);
            }
            assert_eq!(sink.captured, b"abcdef", "step {step}");
            assert!(scanner.at_boundary());
        }
    }

    #[test]
    fn a_payload_refused_stops_where_its_frame_began() {
        let mut data = frame(0x8, 0, 0, &[0, 0, 0, 1]);
        data.extend(frame(0x4, 0, 0, b"abcdefghijkl"));
        let sink = || Capturing {
            kind: 0x4,
            refuse: Some(b'h'),
            captured: Vec::new(),
        };
        // in one piece: the SETTINGS frame begins at 13
        let mut scanner = FrameScanner::server();
        assert_eq!(scanner.feed_frames(&data, &mut sink()), Some(13));
        // its header in one call, the payload in the next: stopped at 0 of that call
        let mut scanner = FrameScanner::server();
        let mut refusing = sink();
        assert_eq!(scanner.feed_frames(&data[..24], &mut refusing), None);
        assert_eq!(scanner.feed_frames(&data[24..], &mut refusing), Some(0));
    }

    #[test]
    fn not_at_a_boundary_inside_a_frame() {
        let mut scanner = FrameScanner::server();
        heads(&mut scanner, &frame(0x0, 0, 1, b"abc")[..10]);
        assert!(!scanner.at_boundary());
    }

    fn ping() -> FrameHead {
        FrameHead {
            len: 8,
            kind: 0x6,
            flags: 0,
            stream: 0,
        }
    }

    #[test]
    fn a_flood_spends_the_burst() {
        let mut budget = FloodBudget::default();
        for _ in 0..BURST {
            assert!(budget.incoming(ping()));
        }
        assert!(!budget.incoming(ping()));
    }

    #[test]
    fn time_and_data_sent_give_tokens_back() {
        let mut budget = FloodBudget::default();
        for _ in 0..BURST {
            budget.incoming(ping());
        }
        budget.refill(Duration::from_millis(10));
        for _ in 0..10 {
            assert!(budget.incoming(ping()));
        }
        assert!(!budget.incoming(ping()));
        budget.outgoing(FrameHead {
            len: 16384,
            kind: 0x0,
            flags: 0,
            stream: 1,
        });
        for _ in 0..EARNED_PER_DATA_SENT {
            assert!(budget.incoming(ping()));
        }
        assert!(!budget.incoming(ping()));
    }

    #[test]
    fn requests_and_their_data_cost_nothing() {
        let mut budget = FloodBudget::default();
        for stream in (1..40_000).step_by(2) {
            let headers = FrameHead {
                len: 20,
                kind: 0x1,
                flags: END_HEADERS,
                stream,
            };
            let data = FrameHead {
                len: 100,
                kind: 0x0,
                flags: END_STREAM,
                stream,
            };
            assert!(budget.incoming(headers) && budget.incoming(data));
        }
        assert_eq!(budget.charged, 0);
    }

    #[test]
    fn empty_data_and_continuation_are_charged() {
        let mut budget = FloodBudget::default();
        let empty = FrameHead {
            len: 0,
            kind: 0x0,
            flags: 0,
            stream: 1,
        };
        let ending = FrameHead {
            flags: END_STREAM,
            ..empty
        };
        let continuation = FrameHead {
            kind: CONTINUATION,
            ..empty
        };
        assert!(budget.incoming(empty) && budget.incoming(ending) && budget.incoming(continuation));
        assert_eq!(budget.charged, 2);
    }

    #[test]
    fn goaway_frame_layout() {
        let frame = goaway(7, ENHANCE_YOUR_CALM);
        assert_eq!(&frame[..9], &[0, 0, 8, 7, 0, 0, 0, 0, 0]);
        assert_eq!(&frame[9..13], &7u32.to_be_bytes());
        assert_eq!(&frame[13..], &0xbu32.to_be_bytes());
    }
}
