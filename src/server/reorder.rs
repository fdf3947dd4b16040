//! The write side's part of `http::header_order`: on an HTTP/1 connection whose service
//! announced a marked response head (`ReorderedHeads::expect`), `detect::ReplayRewrite` passes
//! hyper's bytes through `OrderWriter`, which finds the marker line, takes the rest of the
//! head from hyper and writes the app's order in its place (from its own buffer, before any
//! byte after it). One relaxed load per write on connections that never had one.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::http::header_order::{find_marker, reorder_head};

/// Marked heads announced on this connection and not yet written (ConnCtx).
#[derive(Debug, Default)]
pub(crate) struct ReorderedHeads {
    pending: AtomicUsize,
}

impl ReorderedHeads {
    /// A marked response is about to go to hyper.
    pub(crate) fn expect(&self) {
        self.pending.fetch_add(1, Ordering::AcqRel);
    }

    #[inline]
    pub(crate) fn is_expected(&self) -> bool {
        self.pending.load(Ordering::Relaxed) > 0
    }

    fn written(&self) {
        // Never below zero: a marker hyper writes is one the service announced.
        let _ = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// What to do with the start of hyper's buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Write its first `n` bytes as they are.
    Plain(usize),
    /// Its first `n` bytes were taken into `OrderWriter::output`: report them written.
    Taken(usize),
}

/// The reordered head not yet written.
#[derive(Debug, Default)]
pub(crate) struct OrderWriter {
    out: Vec<u8>,
    sent: usize,
}

impl OrderWriter {
    /// Bytes of a reordered head still to write (before anything else).
    pub(crate) fn output(&self) -> &[u8] {
        &self.out[self.sent..]
    }

    pub(crate) fn has_output(&self) -> bool {
        self.sent < self.out.len()
    }

    pub(crate) fn sent(&mut self, n: usize) {
        self.sent += n;
        if self.sent >= self.out.len() {
            self.out = Vec::new();
            self.sent = 0;
        }
    }

    /// How to write `buf` (not empty), with no output pending.
    pub(crate) fn step(&mut self, buf: &[u8], heads: &ReorderedHeads) -> Step {
        match find_marker(buf) {
            None => Step::Plain(buf.len()),
            Some(0) => match reorder_head(buf) {
                Some((out, replaced)) => {
                    heads.written();
                    self.out = out;
                    self.sent = 0;
                    Step::Taken(replaced)
                }
                None => Step::Plain(buf.len()),
            },
            // Up to the marker line; the next write starts with it.
            Some(at) => Step::Plain(at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::header_order::marker_name;

    /// Writes `chunks` (hyper's output) through the writer, as `detect::ReplayRewrite` does, taking
    /// at most `max` bytes per write.
    fn wire(chunks: &[Vec<u8>], max: usize, announced: usize) -> Vec<u8> {
        let heads = ReorderedHeads::default();
        for _ in 0..announced {
            heads.expect();
        }
        let mut writer = OrderWriter::default();
        let mut wire = Vec::new();
        for chunk in chunks {
            let mut rest = &chunk[..];
            while !rest.is_empty() || writer.has_output() {
                if writer.has_output() {
                    let n = writer.output().len().min(max);
                    wire.extend_from_slice(&writer.output()[..n]);
                    writer.sent(n);
                    continue;
                }
                if !heads.is_expected() {
                    wire.extend_from_slice(rest);
                    break;
                }
                match writer.step(rest, &heads) {
                    Step::Plain(n) => {
                        let n = n.min(max);
                        assert!(n > 0);
                        wire.extend_from_slice(&rest[..n]);
                        rest = &rest[n..];
                    }
                    Step::Taken(n) => rest = &rest[n..],
                }
            }
        }
        assert!(!heads.is_expected());
        wire
    }

    fn marked_head(body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 200 OK\r\n{}: a b a\r\na: 1\r\na: 3\r\nb: 2\r\ncontent-length: {}\r\n\r\n{body}",
            marker_name().as_str(),
            body.len()
        )
        .into_bytes()
    }

    #[test]
    fn reorders_marked_heads_whatever_the_write_sizes() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec();
        let chunks = [
            plain.clone(),
            marked_head("hello"),
            plain.clone(),
            marked_head("x"),
        ];
        let expected = [
            &plain[..],
            b"HTTP/1.1 200 OK\r\na: 1\r\nb: 2\r\na: 3\r\ncontent-length: 5\r\n\r\nhello",
            &plain[..],
            b"HTTP/1.1 200 OK\r\na: 1\r\nb: 2\r\na: 3\r\ncontent-length: 1\r\n\r\nx",
        ]
        .concat();
        for max in [1, 3, 7, 64, 4096] {
            assert_eq!(wire(&chunks, max, 2), expected, "writes of {max}");
        }
    }

    #[test]
    fn one_buffer_holding_several_responses() {
        let all = [marked_head("ab"), marked_head("c")].concat();
        let out = String::from_utf8(wire(&[all], 4096, 2)).unwrap();
        assert_eq!(out.matches("a: 1\r\nb: 2\r\na: 3\r\n").count(), 2);
        assert!(!out.contains("x-ferrocorn-order"));
    }
}
