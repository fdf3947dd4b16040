//! RFC 9113's rules on a client's frames that the `h2` crate enforces with the wrong error
//! code, checked from the frame headers alone (`h2_flood::FrameScanner` finds them).
//!
//! h2 answers every frame it fails to load, and data on a stream the client has already
//! ended, with GOAWAY(PROTOCOL_ERROR). RFC 9113 names other codes, and clients and test
//! tools (h2spec) tell them apart:
//! - a PRIORITY that is not 5 octets long, a RST_STREAM or WINDOW_UPDATE not 4, a PING not 8,
//!   a GOAWAY under 8, a SETTINGS that is not a multiple of 6 or an ACK that carries a
//!   payload: FRAME_SIZE_ERROR (§6.3–§6.9, §4.2);
//! - DATA or HEADERS on a stream the client ended (END_STREAM) or reset: STREAM_CLOSED
//!   (§5.1, "half-closed (remote)" and "closed");
//! - SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1: FLOW_CONTROL_ERROR (§6.5.2), the one check
//!   that reads a payload (SETTINGS payloads are handed over by the scanner);
//! - a first frame that is not SETTINGS: PROTOCOL_ERROR, an invalid preface (§3.4), which h2
//!   does not check at all.
//!
//! The first two are stream errors for some frames; a server may answer any stream error as
//! a connection error (§5.4.1), which is what the guard does with the code returned here.
//! Inside a field block (HEADERS without END_HEADERS, then CONTINUATIONs) nothing is checked:
//! any other frame there is h2's PROTOCOL_ERROR, which is the right code.

use crate::http::h2_flood::{frame_kind, FrameHead, END_HEADERS, END_STREAM};

/// RFC 9113 §7 error codes.
pub(crate) const PROTOCOL_ERROR: u32 = 0x1;
pub(crate) const FLOW_CONTROL_ERROR: u32 = 0x3;
pub(crate) const STREAM_CLOSED: u32 = 0x5;
pub(crate) const FRAME_SIZE_ERROR: u32 = 0x6;

/// SETTINGS' ACK flag (and PING's).
const ACK: u8 = 0x1;
/// RFC 9113 §6.5.2.
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const MAX_WINDOW: u32 = 0x7fff_ffff;

/// How many of the streams the client ended most recently are remembered. Data on an older
/// one still ends the connection, through h2, with PROTOCOL_ERROR.
const ENDED_REMEMBERED: usize = 32;

/// The rules' state for one connection's incoming frames.
#[derive(Debug)]
pub(crate) struct FrameRules {
    /// No frame yet: the first must be SETTINGS.
    first: bool,
    /// Inside a field block: CONTINUATION frames until one with END_HEADERS.
    in_field_block: bool,
    ended: EndedStreams,
    /// The SETTINGS frame whose payload is being read, if any.
    settings: Option<SettingsPayload>,
}

/// A SETTINGS payload read as it passes: octets still to come, and the part of a 6-octet
/// entry read so far.
#[derive(Debug)]
struct SettingsPayload {
    left: u32,
    entry: [u8; 6],
    have: usize,
}

impl Default for FrameRules {
    fn default() -> Self {
        FrameRules {
            first: true,
            in_field_block: false,
            ended: EndedStreams::default(),
            settings: None,
        }
    }
}

impl FrameRules {
    /// A frame header the client sent: the error code to end the connection with when it
    /// breaks a rule above (then the frame must not reach h2).
    pub(crate) fn check(&mut self, head: FrameHead) -> Result<(), u32> {
        // (A payload is always handed over before the next header; this only makes sure.)
        self.settings = None;
        if std::mem::take(&mut self.first)
            && (head.kind != frame_kind::SETTINGS || head.flags & ACK != 0)
        {
            return Err(PROTOCOL_ERROR);
        }
        if self.in_field_block {
            if head.kind == frame_kind::CONTINUATION && head.flags & END_HEADERS != 0 {
                self.in_field_block = false;
            }
            return Ok(());
        }
        let size_ok = match head.kind {
            frame_kind::PRIORITY => head.len == 5,
            frame_kind::RST_STREAM | frame_kind::WINDOW_UPDATE => head.len == 4,
            frame_kind::PING => head.len == 8,
            frame_kind::GOAWAY => head.len >= 8,
            frame_kind::SETTINGS if head.flags & ACK != 0 => head.len == 0,
            frame_kind::SETTINGS => head.len % 6 == 0,
            _ => true,
        };
        if !size_ok {
            return Err(FRAME_SIZE_ERROR);
        }
        match head.kind {
            frame_kind::DATA | frame_kind::HEADERS if head.stream != 0 => {
                if self.ended.contains(head.stream) {
                    return Err(STREAM_CLOSED);
                }
                if head.kind == frame_kind::HEADERS && head.flags & END_HEADERS == 0 {
                    self.in_field_block = true;
                }
                if head.flags & END_STREAM != 0 {
                    self.ended.insert(head.stream);
                }
            }
            frame_kind::RST_STREAM if head.stream != 0 => self.ended.insert(head.stream),
            frame_kind::SETTINGS if head.flags & ACK == 0 && head.len > 0 => {
                self.settings = Some(SettingsPayload {
                    left: head.len,
                    entry: [0; 6],
                    have: 0,
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether the frame `check` just passed has a payload to hand to `payload`.
    pub(crate) fn wants_payload(&self) -> bool {
        self.settings.is_some()
    }

    /// A piece of that payload, in order; the error code when it breaks a rule (then the
    /// frame must not reach h2).
    pub(crate) fn payload(&mut self, mut piece: &[u8]) -> Result<(), u32> {
        let Some(settings) = &mut self.settings else {
            return Ok(());
        };
        while !piece.is_empty() && settings.left > 0 {
            let take = (6 - settings.have)
                .min(piece.len())
                .min(settings.left as usize);
            settings.entry[settings.have..settings.have + take].copy_from_slice(&piece[..take]);
            settings.have += take;
            settings.left -= take as u32;
            piece = &piece[take..];
            if settings.have == 6 {
                settings.have = 0;
                let [i0, i1, v0, v1, v2, v3] = settings.entry;
                let id = u16::from_be_bytes([i0, i1]);
                let value = u32::from_be_bytes([v0, v1, v2, v3]);
                if id == SETTINGS_INITIAL_WINDOW_SIZE && value > MAX_WINDOW {
                    self.settings = None;
                    return Err(FLOW_CONTROL_ERROR);
                }
            }
        }
        if settings.left == 0 {
            self.settings = None;
        }
        Ok(())
    }
}

/// The client's most recently ended streams, a fixed ring.
#[derive(Debug, Default)]
struct EndedStreams {
    ids: [u32; ENDED_REMEMBERED],
    next: usize,
    /// The highest id in `ids` (a new request's stream is above it: no search).
    highest: u32,
}

impl EndedStreams {
    fn contains(&self, stream: u32) -> bool {
        stream <= self.highest && self.ids.contains(&stream)
    }

    fn insert(&mut self, stream: u32) {
        if self.contains(stream) {
            return;
        }
        self.ids[self.next] = stream;
        self.next = (self.next + 1) % ENDED_REMEMBERED;
        self.highest = self.highest.max(stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(kind: u8, flags: u8, stream: u32, len: u32) -> FrameHead {
        FrameHead {
            len,
            kind,
            flags,
            stream,
        }
    }

    fn after_settings() -> FrameRules {
        let mut rules = FrameRules::default();
        assert_eq!(rules.check(head(frame_kind::SETTINGS, 0, 0, 0)), Ok(()));
        rules
    }

    #[test]
    fn the_first_frame_must_be_settings() {
        for bad in [
            head(frame_kind::PING, 0, 0, 8),
            head(frame_kind::HEADERS, END_HEADERS, 1, 10),
            head(frame_kind::SETTINGS, ACK, 0, 0),
        ] {
            let mut rules = FrameRules::default();
            assert_eq!(rules.check(bad), Err(PROTOCOL_ERROR), "{bad:?}");
        }
        let mut rules = after_settings();
        assert_eq!(rules.check(head(frame_kind::PING, 0, 0, 8)), Ok(()));
    }

    #[test]
    fn fixed_size_frames_of_another_size_are_frame_size_errors() {
        let cases = [
            (frame_kind::PRIORITY, 0, 1, 5, true),
            (frame_kind::PRIORITY, 0, 1, 4, false),
            (frame_kind::RST_STREAM, 0, 1, 4, true),
            (frame_kind::RST_STREAM, 0, 3, 3, false),
            (frame_kind::RST_STREAM, 0, 3, 5, false),
            (frame_kind::WINDOW_UPDATE, 0, 0, 4, true),
            (frame_kind::WINDOW_UPDATE, 0, 0, 3, false),
            (frame_kind::PING, 0, 0, 8, true),
            (frame_kind::PING, ACK, 0, 9, false),
            (frame_kind::GOAWAY, 0, 0, 8, true),
            (frame_kind::GOAWAY, 0, 0, 40, true),
            (frame_kind::GOAWAY, 0, 0, 4, false),
            (frame_kind::SETTINGS, 0, 0, 0, true),
            (frame_kind::SETTINGS, 0, 0, 18, true),
            (frame_kind::SETTINGS, 0, 0, 5, false),
            (frame_kind::SETTINGS, ACK, 0, 0, true),
            (frame_kind::SETTINGS, ACK, 0, 6, false),
            (0xfa, 0, 0, 3, true), // an unknown type: ignored, whatever its size
        ];
        for (kind, flags, stream, len, ok) in cases {
            let mut rules = after_settings();
            let want = if ok { Ok(()) } else { Err(FRAME_SIZE_ERROR) };
            let got = rules.check(head(kind, flags, stream, len));
            assert_eq!(got, want, "kind {kind:#x} flags {flags} len {len}");
        }
    }

    #[test]
    fn data_or_headers_on_a_stream_the_client_ended_is_stream_closed() {
        let mut rules = after_settings();
        let open = head(frame_kind::HEADERS, END_HEADERS, 1, 20);
        assert_eq!(rules.check(open), Ok(()));
        assert_eq!(rules.check(head(frame_kind::DATA, 0, 1, 10)), Ok(()));
        assert_eq!(
            rules.check(head(frame_kind::DATA, END_STREAM, 1, 0)),
            Ok(())
        );
        // still allowed on an ended stream
        assert_eq!(
            rules.check(head(frame_kind::WINDOW_UPDATE, 0, 1, 4)),
            Ok(())
        );
        assert_eq!(rules.check(head(frame_kind::PRIORITY, 0, 1, 5)), Ok(()));
        assert_eq!(rules.check(head(frame_kind::RST_STREAM, 0, 1, 4)), Ok(()));
        assert_eq!(
            rules.check(head(frame_kind::DATA, 0, 1, 4)),
            Err(STREAM_CLOSED)
        );
        let trailers = head(frame_kind::HEADERS, END_HEADERS | END_STREAM, 1, 4);
        assert_eq!(rules.check(trailers), Err(STREAM_CLOSED));
        // another stream is not affected
        let mut rules = after_settings();
        let get = head(frame_kind::HEADERS, END_HEADERS | END_STREAM, 3, 20);
        assert_eq!(rules.check(get), Ok(()));
        let post = head(frame_kind::HEADERS, END_HEADERS, 5, 20);
        assert_eq!(rules.check(post), Ok(()));
        assert_eq!(rules.check(head(frame_kind::DATA, 0, 5, 10)), Ok(()));
        assert_eq!(
            rules.check(head(frame_kind::DATA, 0, 3, 10)),
            Err(STREAM_CLOSED)
        );
    }

    #[test]
    fn a_stream_the_client_reset_is_closed() {
        let mut rules = after_settings();
        assert_eq!(
            rules.check(head(frame_kind::HEADERS, END_HEADERS, 1, 9)),
            Ok(())
        );
        assert_eq!(rules.check(head(frame_kind::RST_STREAM, 0, 1, 4)), Ok(()));
        assert_eq!(
            rules.check(head(frame_kind::DATA, 0, 1, 1)),
            Err(STREAM_CLOSED)
        );
    }

    #[test]
    fn trailers_end_a_stream_and_their_continuations_pass() {
        let mut rules = after_settings();
        assert_eq!(
            rules.check(head(frame_kind::HEADERS, END_HEADERS, 1, 9)),
            Ok(())
        );
        assert_eq!(rules.check(head(frame_kind::DATA, 0, 1, 100)), Ok(()));
        // trailers in a HEADERS with END_STREAM and a CONTINUATION
        assert_eq!(
            rules.check(head(frame_kind::HEADERS, END_STREAM, 1, 9)),
            Ok(())
        );
        let last = head(frame_kind::CONTINUATION, END_HEADERS, 1, 9);
        assert_eq!(rules.check(last), Ok(()));
        assert_eq!(
            rules.check(head(frame_kind::DATA, 0, 1, 1)),
            Err(STREAM_CLOSED)
        );
    }

    #[test]
    fn nothing_is_checked_inside_a_field_block() {
        let mut rules = after_settings();
        assert_eq!(
            rules.check(head(frame_kind::HEADERS, END_STREAM, 1, 9)),
            Ok(())
        );
        // not allowed here, but h2's PROTOCOL_ERROR (§6.10) is the right answer
        assert_eq!(rules.check(head(frame_kind::PING, 0, 0, 3)), Ok(()));
        assert_eq!(rules.check(head(frame_kind::CONTINUATION, 0, 1, 9)), Ok(()));
        let last = head(frame_kind::CONTINUATION, END_HEADERS, 1, 9);
        assert_eq!(rules.check(last), Ok(()));
        assert_eq!(
            rules.check(head(frame_kind::PING, 0, 0, 3)),
            Err(FRAME_SIZE_ERROR)
        );
    }

    #[test]
    fn the_ended_streams_are_remembered_in_a_bounded_ring() {
        let mut rules = after_settings();
        let total = ENDED_REMEMBERED as u32 + 8;
        for i in 0..total {
            let get = head(frame_kind::HEADERS, END_HEADERS | END_STREAM, 2 * i + 1, 9);
            assert_eq!(rules.check(get), Ok(()));
        }
        // the oldest ones are forgotten (h2 still refuses them, with PROTOCOL_ERROR)
        assert_eq!(rules.check(head(frame_kind::DATA, 0, 1, 1)), Ok(()));
        let newest = 2 * (total - 1) + 1;
        assert_eq!(
            rules.check(head(frame_kind::DATA, 0, newest, 1)),
            Err(STREAM_CLOSED)
        );
        let recent = 2 * (total - ENDED_REMEMBERED as u32) + 1;
        assert_eq!(
            rules.check(head(frame_kind::DATA, 0, recent, 1)),
            Err(STREAM_CLOSED)
        );
    }

    fn settings_payload(entries: &[(u16, u32)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (id, value) in entries {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&value.to_be_bytes());
        }
        out
    }

    /// Hands `payload` over in pieces of `step`; the first error.
    fn read_settings(rules: &mut FrameRules, payload: &[u8], step: usize) -> Result<(), u32> {
        let len = payload.len() as u32;
        rules.check(head(frame_kind::SETTINGS, 0, 0, len))?;
        assert!(rules.wants_payload());
        for piece in payload.chunks(step) {
            rules.payload(piece)?;
        }
        assert!(!rules.wants_payload());
        Ok(())
    }

    #[test]
    fn an_initial_window_over_2_to_the_31_is_a_flow_control_error() {
        let good = settings_payload(&[(0x3, 100), (0x4, MAX_WINDOW), (0x5, 1 << 20)]);
        let bad = settings_payload(&[(0x3, 100), (0x4, MAX_WINDOW + 1)]);
        // other settings' values are h2's to check (its codes are right for them)
        let other = settings_payload(&[(0x2, 7), (0x5, 1), (0xff, u32::MAX)]);
        for step in [1, 5, 6, 7, 100] {
            let mut rules = after_settings();
            assert_eq!(
                read_settings(&mut rules, &good, step),
                Ok(()),
                "step {step}"
            );
            assert_eq!(
                read_settings(&mut rules, &other, step),
                Ok(()),
                "step {step}"
            );
            let got = read_settings(&mut rules, &bad, step);
            assert_eq!(got, Err(FLOW_CONTROL_ERROR), "step {step}");
        }
        // an ACK has no payload to read; nor does an empty SETTINGS
        let mut rules = after_settings();
        assert_eq!(rules.check(head(frame_kind::SETTINGS, ACK, 0, 0)), Ok(()));
        assert!(!rules.wants_payload());
        assert_eq!(rules.check(head(frame_kind::SETTINGS, 0, 0, 0)), Ok(()));
        assert!(!rules.wants_payload());
    }
}
