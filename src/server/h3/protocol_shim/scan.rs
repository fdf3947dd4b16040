//! The start of a request stream as it arrives, up to and including its first HEADERS frame
//! (RFC 9114 §4.1: frames of unknown or reserved types may come before it, and pass through
//! untouched), that frame handed on with `qpack::rewrite_protocol` applied. Everything after
//! it, and everything on a stream whose first known frame is not HEADERS, passes through as
//! it came, in the chunks it came in.
//!
//! Memory is bounded: only a frame header, or a HEADERS frame no longer than the limit, is
//! held; a longer one goes through unmodified (h3 refuses it as too large).

use bytes::{Bytes, BytesMut};

use super::qpack::rewrite_protocol;
use crate::http::quic_varint;

const HEADERS: u64 = 0x01;

/// The frame types of RFC 9114 §7.2 and the HTTP/2 types it reserves (§11.2.1): any other
/// type is an extension h3 skips, and so does the scan.
const KNOWN_TYPES: [u64; 11] = [0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xd];

pub(crate) struct FirstHeaders {
    /// Bytes received, not yet handed on.
    pending: BytesMut,
    /// What is left of an unknown frame's payload: handed on as it comes.
    skipping: u64,
    /// The longest HEADERS frame payload rewritten.
    limit: u64,
    done: bool,
}

impl FirstHeaders {
    pub(crate) fn new(limit: usize) -> Self {
        FirstHeaders {
            pending: BytesMut::new(),
            skipping: 0,
            limit: limit as u64,
            done: false,
        }
    }

    /// Whether the first HEADERS frame has gone by (from now on, chunks pass as they are).
    pub(crate) fn is_done(&self) -> bool {
        self.done && self.pending.is_empty()
    }

    /// Takes a chunk from the stream; returns what can be handed on now (possibly nothing).
    pub(crate) fn feed(&mut self, chunk: Bytes) -> Bytes {
        if self.is_done() {
            return chunk;
        }
        if self.pending.is_empty() && self.skipping == 0 {
            if let Some(out) = self.whole_headers(&chunk) {
                return out;
            }
        }
        self.pending.extend_from_slice(&chunk);
        let mut out = BytesMut::new();
        loop {
            if self.skipping > 0 {
                let n = usize::try_from(self.skipping)
                    .unwrap_or(usize::MAX)
                    .min(self.pending.len());
                out.extend_from_slice(&self.pending.split_to(n));
                self.skipping -= n as u64;
                if self.pending.is_empty() {
                    break;
                }
                continue;
            }
            let Some((kind, length, header_len)) = frame_header(&self.pending) else {
                break; // the header is not all here yet
            };
            if kind == HEADERS {
                if length > self.limit {
                    self.done = true;
                } else {
                    let total = header_len + length as usize;
                    if self.pending.len() < total {
                        break;
                    }
                    let frame = self.pending.split_to(total);
                    match rewrite_frame(&frame, header_len) {
                        Some(rewritten) => out.extend_from_slice(&rewritten),
                        None => out.extend_from_slice(&frame),
                    }
                    self.done = true;
                }
            } else if KNOWN_TYPES.contains(&kind) {
                // Not a request's start: h3 says what is wrong with it.
                self.done = true;
            } else {
                out.extend_from_slice(&self.pending.split_to(header_len));
                self.skipping = length;
                continue;
            }
            break;
        }
        if self.done {
            out.extend_from_slice(&self.pending.split());
        }
        out.freeze()
    }

    /// The common case: a chunk that starts with the whole HEADERS frame, handed on without a
    /// copy when there is nothing to rewrite. None: the general path decides.
    fn whole_headers(&mut self, chunk: &Bytes) -> Option<Bytes> {
        let (kind, length, header_len) = frame_header(chunk)?;
        if kind != HEADERS || length > self.limit {
            return None;
        }
        let total = header_len + length as usize;
        if chunk.len() < total {
            return None;
        }
        self.done = true;
        Some(match rewrite_frame(&chunk[..total], header_len) {
            None => chunk.clone(),
            Some(mut frame) => {
                frame.extend_from_slice(&chunk[total..]);
                Bytes::from(frame)
            }
        })
    }

    /// The stream ended: what was held goes on as it was (h3 finds it incomplete).
    pub(crate) fn finish(&mut self) -> Bytes {
        self.done = true;
        self.pending.split().freeze()
    }
}

/// A frame's type and payload length, and the length of those two varints.
fn frame_header(buf: &[u8]) -> Option<(u64, u64, usize)> {
    let (kind, a) = quic_varint::read(buf)?;
    let (length, b) = quic_varint::read(&buf[a..])?;
    Some((kind, length, a + b))
}

/// The HEADERS frame with its field section rewritten and its length fixed (its type
/// varint kept as it came); None when there is nothing to rewrite.
fn rewrite_frame(frame: &[u8], header_len: usize) -> Option<Vec<u8>> {
    let section = rewrite_protocol(&frame[header_len..])?;
    let type_len = quic_varint::read(frame).map_or(1, |(_, len)| len);
    let mut out = Vec::with_capacity(frame.len() + 8);
    out.extend_from_slice(&frame[..type_len]);
    quic_varint::put(&mut out, section.len() as u64);
    out.extend_from_slice(&section);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;

    /// Hands the rest of a chunk on; for the tests' byte-at-a-time feeding.
    fn feed_all(scan: &mut FirstHeaders, mut input: Bytes, step: usize) -> Vec<u8> {
        let mut out = Vec::new();
        while input.has_remaining() {
            let n = step.min(input.len());
            out.extend_from_slice(&scan.feed(input.split_to(n)));
        }
        out.extend_from_slice(&scan.finish());
        out
    }

    /// A field section: prefix, then `:protocol` = `value` as plain literals.
    fn section(value: &[u8]) -> Vec<u8> {
        let mut s = vec![0x00, 0x00, 0xc0 | 15, 0x20 | 7, 2];
        s.extend_from_slice(b":protocol");
        s.push(value.len() as u8);
        s.extend_from_slice(value);
        s
    }

    fn frame(kind: u64, payload: &[u8], long_length: bool) -> Vec<u8> {
        let mut f = Vec::new();
        quic_varint::put(&mut f, kind);
        if long_length {
            f.extend_from_slice(&(payload.len() as u16 | 0x4000).to_be_bytes());
        } else {
            quic_varint::put(&mut f, payload.len() as u64);
        }
        f.extend_from_slice(payload);
        f
    }

    fn run(input: &[u8], limit: usize, step: usize) -> Vec<u8> {
        let mut scan = FirstHeaders::new(limit);
        feed_all(&mut scan, Bytes::copy_from_slice(input), step)
    }

    #[test]
    fn the_first_headers_frame_is_rewritten_whatever_the_chunks() {
        let data = frame(0x00, b"websocket bytes", false);
        let mut input = frame(HEADERS, &section(b"websocket"), true);
        input.extend_from_slice(&data);
        let mut expected = frame(HEADERS, &section(b"webtransport"), false);
        expected.extend_from_slice(&data);
        for step in [1, 2, 5, input.len()] {
            assert_eq!(run(&input, 1024, step), expected, "step {step}");
        }
    }

    #[test]
    fn unknown_frames_before_it_pass_through() {
        let grease = frame(0x21, &[7u8; 300], false); // a reserved type, 0x1f * N + 0x21
        let mut input = grease.clone();
        input.extend_from_slice(&frame(HEADERS, &section(b"webtransport"), false));
        let mut expected = grease;
        expected.extend_from_slice(&frame(HEADERS, &section(b"connect-udp"), false));
        for step in [1, 7, input.len()] {
            assert_eq!(run(&input, 1024, step), expected, "step {step}");
        }
    }

    #[test]
    fn passthrough_when_there_is_nothing_to_rewrite() {
        let cases = [
            frame(HEADERS, &[0x00, 0x00, 0xd1, 0xd7], false), // GET, no :protocol
            frame(0x00, b"data first", false),                // h3 rejects this
            frame(HEADERS, &section(b"websocket"), false),    // over the limit below
        ];
        for (i, input) in cases.iter().enumerate() {
            let limit = if i == 2 { 8 } else { 1024 };
            for step in [1, input.len()] {
                assert_eq!(&run(input, limit, step), input, "case {i} step {step}");
            }
        }
        // A stream that ends inside the frame: what came is handed on.
        let whole = frame(HEADERS, &section(b"websocket"), false);
        assert_eq!(run(&whole[..10], 1024, 3), &whole[..10]);
    }

    #[test]
    fn after_the_first_headers_chunks_go_untouched() {
        let mut scan = FirstHeaders::new(1024);
        let head = frame(HEADERS, &section(b"websocket"), false);
        assert!(!scan.feed(Bytes::from(head)).is_empty());
        assert!(scan.is_done());
        let later = Bytes::from(frame(HEADERS, &section(b"websocket"), false));
        assert_eq!(scan.feed(later.clone()), later);
    }

    #[test]
    fn a_head_with_nothing_to_rewrite_is_handed_on_uncopied() {
        let mut input = frame(HEADERS, &[0x00, 0x00, 0xd1, 0xd7], false);
        input.extend_from_slice(&frame(0x00, b"body", false));
        let chunk = Bytes::from(input);
        let mut scan = FirstHeaders::new(1024);
        let out = scan.feed(chunk.clone());
        assert_eq!(out.as_ptr(), chunk.as_ptr());
        assert_eq!(out, chunk);
        assert!(scan.is_done());
    }
}
