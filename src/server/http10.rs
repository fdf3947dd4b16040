//! The status line of responses to HTTP/1.0 requests: `HTTP/1.1` (RFC 9110 §2.5: a server
//! sends its highest conformant version), keeping HTTP/1.0 framing.
//!
//! hyper's HTTP/1 server writes `HTTP/1.0` to an HTTP/1.0 peer and has no option against it
//! (`enforce_version`), and its framing for that peer is what we want (no chunked, close
//! unless keep-alive was asked for). So the write side of the connection's stream changes one
//! byte of each such head, `HTTP/1.0` → `HTTP/1.1`, and nothing else. To know where heads
//! start it follows hyper's output response by response (the head, then Content-Length
//! bytes of body), told by the service, in order, which requests were HEAD and which were
//! HTTP/1.0. It runs only on connections whose first request is HTTP/1.0; anything it cannot
//! follow for sure (a chunked or close-delimited body, an HTTP/1.1 request, a head hyper
//! wrote by itself, a head over `MAX_HEAD`) stops it for the rest of the connection, after
//! which hyper's output goes out unchanged.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use http::Version;

/// Longer heads are not followed (hyper's own limit on what it writes is far above any
/// response an app can make sensibly; past this the rewriter simply stops).
const MAX_HEAD: usize = 64 * 1024;

const UNDECIDED: u8 = 0;
const ACTIVE: u8 = 1;
const OFF: u8 = 2;

/// What the service tells the writer about one request, in arrival order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) http10: bool,
    pub(crate) head: bool,
}

/// Shared by the connection's service (which learns of each request) and its stream's write
/// side (which follows the responses). One byte of state and an empty queue when unused.
#[derive(Debug, Default)]
pub(crate) struct Http10Heads {
    state: AtomicU8,
    requests: Mutex<VecDeque<Sent>>,
}

impl Http10Heads {
    /// Every HTTP/1 request, before its response exists. The first decides: only a
    /// connection that starts with an HTTP/1.0 request is followed.
    pub(crate) fn request(&self, version: Version, head: bool) {
        let mut state = self.state.load(Ordering::Acquire);
        if state == UNDECIDED {
            state = if version == Version::HTTP_10 {
                ACTIVE
            } else {
                OFF
            };
            self.state.store(state, Ordering::Release);
        }
        if state != ACTIVE {
            return;
        }
        let sent = Sent {
            http10: version == Version::HTTP_10,
            head,
        };
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(sent);
    }

    pub(crate) fn is_active(&self) -> bool {
        self.state.load(Ordering::Acquire) == ACTIVE
    }

    fn next_request(&self) -> Option<Sent> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    fn stop(&self) {
        self.state.store(OFF, Ordering::Release);
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// Where in hyper's output the writer is.
#[derive(Debug, PartialEq, Eq)]
enum At {
    /// The next byte starts a response head.
    HeadStart,
    /// Inside a head (its bytes so far in `HeadWriter::head`), for this request.
    Head(Sent),
    /// This many body bytes before the next head.
    Body(u64),
    /// No longer followed: everything passes unchanged.
    Off,
}

/// How the next write goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Write (at most) the first `n` bytes as they are.
    Plain(usize),
    /// Write the one byte `1` in place of the buffer's first byte (`0` of `HTTP/1.0`).
    Patch,
}

/// The write side's follower (pure: `stream.rs` / `detect.rs` calls it around each write).
#[derive(Debug)]
pub(crate) struct HeadWriter {
    at: At,
    head: Vec<u8>,
}

impl Default for HeadWriter {
    fn default() -> Self {
        HeadWriter {
            at: At::HeadStart,
            head: Vec::new(),
        }
    }
}

impl HeadWriter {
    #[cfg(test)]
    fn is_off(&self) -> bool {
        self.at == At::Off
    }

    /// What to write of `buf` next. Writes stop at each head's end and each body's end, so
    /// that the state changes only at the edges of what was written.
    pub(crate) fn next(&mut self, buf: &[u8], heads: &Http10Heads) -> Next {
        if self.at == At::HeadStart {
            self.at = match heads.next_request() {
                Some(sent) if sent.http10 => At::Head(sent),
                // An HTTP/1.1 request, or a head hyper wrote by itself (a 400 for a
                // malformed request, after which it closes): stop following.
                _ => {
                    heads.stop();
                    At::Off
                }
            };
            self.head.clear();
        }
        match &self.at {
            At::Off | At::HeadStart => Next::Plain(buf.len()),
            At::Body(left) => {
                Next::Plain(usize::try_from(*left).map_or(buf.len(), |l| l.min(buf.len())))
            }
            At::Head(_) => {
                let seen = self.head.len();
                if seen < 7 {
                    return Next::Plain(buf.len().min(7 - seen));
                }
                if seen == 7 && self.head == b"HTTP/1." && buf.first() == Some(&b'0') {
                    return Next::Patch;
                }
                Next::Plain(head_end(&self.head, buf).unwrap_or(buf.len()))
            }
        }
    }

    /// `written`: the bytes of hyper's output that just went out (a prefix of what `next`
    /// allowed; for `Next::Patch`, hyper's own byte).
    pub(crate) fn wrote(&mut self, written: &[u8], heads: &Http10Heads) {
        match &mut self.at {
            At::Off | At::HeadStart => {}
            At::Body(left) => {
                *left -= written.len() as u64;
                if *left == 0 {
                    self.at = At::HeadStart;
                }
            }
            At::Head(sent) => {
                let sent = *sent;
                self.head.extend_from_slice(written);
                if self.head.len() > MAX_HEAD {
                    self.give_up(heads);
                } else if self.head.ends_with(b"\r\n\r\n") {
                    self.at = self.after_head(sent, heads);
                    self.head = Vec::new();
                }
            }
        }
    }

    fn give_up(&mut self, heads: &Http10Heads) {
        heads.stop();
        self.at = At::Off;
        self.head = Vec::new();
    }

    /// The head is whole: how its body is framed, for the request it answers.
    fn after_head(&self, sent: Sent, heads: &Http10Heads) -> At {
        let Some(framing) = body_framing(&self.head, sent.head) else {
            heads.stop();
            return At::Off;
        };
        match framing {
            Framing::Informational => At::Head(sent), // the final response follows
            Framing::Length(0) => At::HeadStart,
            Framing::Length(n) => At::Body(n),
        }
    }
}

enum Framing {
    /// A 1xx: the same request's final response comes next.
    Informational,
    Length(u64),
}

/// The body length a head announces (RFC 9112 §6.3); None for what is not followed: chunked,
/// close-delimited, or a head that does not parse.
fn body_framing(head: &[u8], head_request: bool) -> Option<Framing> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let status: u16 = lines.next()?.get(9..12)?.parse().ok()?;
    if (100..200).contains(&status) {
        return Some(Framing::Informational);
    }
    let mut length = None;
    for line in lines {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return None;
        }
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.trim().parse::<u64>().ok()?);
        }
    }
    if head_request || status == 204 || status == 304 {
        return Some(Framing::Length(0));
    }
    length.map(Framing::Length)
}

/// Where the head ends in `buf` (the offset just past its `\r\n\r\n`), the head's bytes so
/// far being `head`.
fn head_end(head: &[u8], buf: &[u8]) -> Option<usize> {
    let carried = &head[head.len().saturating_sub(3)..];
    let mut window = Vec::with_capacity(carried.len() + buf.len().min(MAX_HEAD));
    window.extend_from_slice(carried);
    window.extend_from_slice(&buf[..buf.len().min(MAX_HEAD)]);
    window
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4 - carried.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `out` (hyper's output, in `chunks`) through the writer, as a stream would with
    /// writes that take everything offered; returns what went on the wire.
    fn wire(requests: &[(Version, bool)], chunks: &[&[u8]]) -> Vec<u8> {
        let heads = Http10Heads::default();
        for (version, head) in requests {
            heads.request(*version, *head);
        }
        let mut writer = HeadWriter::default();
        let mut out = Vec::new();
        for chunk in chunks {
            let mut rest: &[u8] = chunk;
            while !rest.is_empty() {
                if !heads.is_active() && writer.is_off() {
                    out.extend_from_slice(rest);
                    break;
                }
                match writer.next(rest, &heads) {
                    Next::Plain(n) => {
                        assert!(n > 0);
                        out.extend_from_slice(&rest[..n]);
                        writer.wrote(&rest[..n], &heads);
                        rest = &rest[n..];
                    }
                    Next::Patch => {
                        out.push(b'1');
                        writer.wrote(&rest[..1], &heads);
                        rest = &rest[1..];
                    }
                }
            }
        }
        out
    }

    const V10: Version = Version::HTTP_10;
    const V11: Version = Version::HTTP_11;

    #[test]
    fn rewrites_each_head_and_nothing_in_the_bodies() {
        let body = b"HTTP/1.0 200 OK\r\n\r\n"; // a body that looks like a head
        let first = [
            b"HTTP/1.0 200 OK\r\ncontent-length: 19\r\n\r\n".as_slice(),
            body,
        ]
        .concat();
        let second = b"HTTP/1.0 404 Not Found\r\ncontent-length: 2\r\n\r\nno".to_vec();
        let out = wire(&[(V10, false), (V10, false)], &[&first, &second]);
        let expected = [
            b"HTTP/1.1 200 OK\r\ncontent-length: 19\r\n\r\n".as_slice(),
            body,
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nno",
        ]
        .concat();
        assert_eq!(out, expected);
    }

    #[test]
    fn follows_heads_split_anywhere() {
        let all = b"HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\nabcHTTP/1.0 204 No Content\r\n\r\nHTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\nz";
        for split in 1..all.len() {
            let out = wire(
                &[(V10, false), (V10, false), (V10, false)],
                &[&all[..split], &all[split..]],
            );
            let text = String::from_utf8(out).unwrap();
            assert_eq!(
                text.matches("HTTP/1.1 ").count(),
                3,
                "split at {split}: {text}"
            );
            assert!(!text.contains("HTTP/1.0"), "split at {split}");
        }
    }

    #[test]
    fn head_requests_have_no_body_after_their_length() {
        let out = wire(
            &[(V10, true), (V10, false)],
            &[b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\nHTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok"],
        );
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
        );
    }

    #[test]
    fn stops_at_what_it_cannot_follow() {
        // Close-delimited body: the connection ends with it; nothing after is touched.
        let out = wire(&[(V10, false)], &[b"HTTP/1.0 200 OK\r\n\r\nHTTP/1.0 x"]);
        assert_eq!(out, b"HTTP/1.1 200 OK\r\n\r\nHTTP/1.0 x");
        // A connection that starts with HTTP/1.1 is never followed.
        let out = wire(
            &[(V11, false)],
            &[b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"],
        );
        assert_eq!(out, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
        // A head hyper wrote without a request (a 400): left as it is.
        let out = wire(&[], &[b"HTTP/1.0 400 Bad Request\r\n\r\n"]);
        assert_eq!(out, b"HTTP/1.0 400 Bad Request\r\n\r\n");
        // An HTTP/1.1 request after an HTTP/1.0 one: its response and all after pass as is.
        let out = wire(
            &[(V10, false), (V11, false)],
            &[b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"],
        );
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"
        );
    }

    #[test]
    fn informational_heads_keep_the_request() {
        let out = wire(
            &[(V10, false)],
            &[b"HTTP/1.0 103 Early Hints\r\nlink: x\r\n\r\nHTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n"],
        );
        assert_eq!(
            out,
            b"HTTP/1.1 103 Early Hints\r\nlink: x\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
        );
    }
}
