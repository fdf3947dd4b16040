//! RFC 6455 §5 frames: header parsing (client to server) and writing (server to client),
//! payload masking, and the close frame's payload.
//!
//! Parsing checks everything that can be judged from one frame header; the rules that need
//! the message state (continuations, fragment order) live in `stream`.

/// Longest header we send (server frames are not masked).
pub(crate) const MAX_SERVER_HEADER: usize = 10;
/// RFC 6455 §5.5: control frame payloads are at most 125 bytes.
pub(crate) const MAX_CONTROL_PAYLOAD: usize = 125;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpCode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl OpCode {
    fn from_bits(bits: u8) -> Option<OpCode> {
        Some(match bits {
            0x0 => OpCode::Continuation,
            0x1 => OpCode::Text,
            0x2 => OpCode::Binary,
            0x8 => OpCode::Close,
            0x9 => OpCode::Ping,
            0xA => OpCode::Pong,
            _ => return None,
        })
    }

    fn bits(self) -> u8 {
        match self {
            OpCode::Continuation => 0x0,
            OpCode::Text => 0x1,
            OpCode::Binary => 0x2,
            OpCode::Close => 0x8,
            OpCode::Ping => 0x9,
            OpCode::Pong => 0xA,
        }
    }

    pub(crate) fn is_control(self) -> bool {
        matches!(self, OpCode::Close | OpCode::Ping | OpCode::Pong)
    }
}

/// Why the connection must be failed, as the close frame we send says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Violation {
    pub code: u16,
    pub reason: &'static str,
}

impl Violation {
    pub(crate) const fn protocol(reason: &'static str) -> Self {
        Violation { code: 1002, reason }
    }

    pub(crate) const fn invalid_data(reason: &'static str) -> Self {
        Violation { code: 1007, reason }
    }

    pub(crate) const fn policy(reason: &'static str) -> Self {
        Violation { code: 1008, reason }
    }

    pub(crate) const fn too_big() -> Self {
        Violation {
            code: 1009,
            reason: "message too big",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub fin: bool,
    /// RSV1: "compressed" under permessage-deflate (RFC 7692 §6).
    pub rsv1: bool,
    pub opcode: OpCode,
    pub mask: [u8; 4],
    pub len: u64,
}

/// Parse a client frame header from the start of `buf`. `Ok(None)`: more bytes are needed.
/// `rsv1_allowed` is true when permessage-deflate was negotiated.
///
/// The first two bytes are judged as soon as they arrive, so a bad frame fails the
/// connection without waiting for the rest of its header.
pub(crate) fn parse_header(
    buf: &[u8],
    rsv1_allowed: bool,
) -> Result<Option<(FrameHeader, usize)>, Violation> {
    let (b0, b1) = match buf {
        [b0, b1, ..] => (*b0, *b1),
        _ => return Ok(None),
    };
    let fin = b0 & 0x80 != 0;
    let rsv1 = b0 & 0x40 != 0;
    if b0 & 0x30 != 0 {
        return Err(Violation::protocol("reserved bits set"));
    }
    let opcode = OpCode::from_bits(b0 & 0x0F).ok_or(Violation::protocol("reserved opcode"))?;
    if rsv1 && !rsv1_allowed {
        return Err(Violation::protocol("RSV1 set without an extension"));
    }
    // RFC 7692 §6: RSV1 marks the first frame of a compressed message, never a control
    // frame or a continuation.
    if rsv1 && (opcode.is_control() || opcode == OpCode::Continuation) {
        return Err(Violation::protocol(
            "RSV1 set on a control or continuation frame",
        ));
    }
    if b1 & 0x80 == 0 {
        return Err(Violation::protocol("client frames must be masked"));
    }
    let short = u64::from(b1 & 0x7F);
    if opcode.is_control() {
        if !fin {
            return Err(Violation::protocol("fragmented control frame"));
        }
        if short > MAX_CONTROL_PAYLOAD as u64 {
            return Err(Violation::protocol("control frame payload over 125 bytes"));
        }
    }
    let (len, at) = match short {
        126 => match buf.get(2..4) {
            Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(b) => {
                let mut word = [0u8; 8];
                word.copy_from_slice(b);
                let len = u64::from_be_bytes(word);
                if len >> 63 != 0 {
                    return Err(Violation::protocol("64-bit length with the top bit set"));
                }
                (len, 10)
            }
            None => return Ok(None),
        },
        n => (n, 2),
    };
    let Some(m) = buf.get(at..at + 4) else {
        return Ok(None);
    };
    let header = FrameHeader {
        fin,
        rsv1,
        opcode,
        mask: [m[0], m[1], m[2], m[3]],
        len,
    };
    Ok(Some((header, at + 4)))
}

/// Write an (unmasked) server frame header into `out`; returns its length.
pub(crate) fn encode_header(
    out: &mut [u8; MAX_SERVER_HEADER],
    fin: bool,
    rsv1: bool,
    opcode: OpCode,
    len: usize,
) -> usize {
    out[0] = (u8::from(fin) << 7) | (u8::from(rsv1) << 6) | opcode.bits();
    if len < 126 {
        out[1] = len as u8;
        2
    } else if let Ok(short) = u16::try_from(len) {
        out[1] = 126;
        out[2..4].copy_from_slice(&short.to_be_bytes());
        4
    } else {
        out[1] = 127;
        out[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    }
}

/// XOR `data` with the masking key, `data` starting `offset` bytes into the payload.
/// Sixteen bytes at a time (one SSE2 register on x86-64).
pub(crate) fn apply_mask(data: &mut [u8], key: [u8; 4], offset: usize) {
    let r = offset % 4;
    let key = [key[r], key[(r + 1) % 4], key[(r + 2) % 4], key[(r + 3) % 4]];
    let mut repeated = [0u8; 16];
    for (i, byte) in repeated.iter_mut().enumerate() {
        *byte = key[i % 4];
    }
    let wide = u128::from_ne_bytes(repeated);
    let mut chunks = data.chunks_exact_mut(16);
    for chunk in &mut chunks {
        let mut word = [0u8; 16];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u128::from_ne_bytes(word) ^ wide).to_ne_bytes());
    }
    // Whole words consumed a multiple of 4 bytes: the tail starts at key[0].
    for (byte, k) in chunks.into_remainder().iter_mut().zip(key.iter().cycle()) {
        *byte ^= k;
    }
}

/// RFC 6455 §7.4: the codes a peer may put in a close frame. 1004-1006 and 1015 are
/// reserved for reporting and must never be sent; 1012-1014 are IANA-registered since;
/// 3000-4999 belong to libraries, frameworks and applications.
pub fn close_code_allowed(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// A client's close frame payload: `None` when it carries no code (1005 to the app).
pub(crate) fn parse_close(payload: &[u8]) -> Result<Option<(u16, String)>, Violation> {
    match payload {
        [] => Ok(None),
        [_] => Err(Violation::protocol("close payload of one byte")),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !close_code_allowed(code) {
                return Err(Violation::protocol("invalid close code"));
            }
            let reason = std::str::from_utf8(reason)
                .map_err(|_| Violation::invalid_data("close reason is not UTF-8"))?;
            Ok(Some((code, reason.to_owned())))
        }
    }
}

/// The payload of a close frame we send: the code, then as much of the reason as fits in
/// a control frame without splitting a character.
pub(crate) fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(MAX_CONTROL_PAYLOAD - 2);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut payload = Vec::with_capacity(2 + end);
    payload.extend_from_slice(&code.to_be_bytes());
    payload.extend_from_slice(&reason.as_bytes()[..end]);
    payload
}

/// A masked client frame, as a client library would build it (for tests of the readers).
#[cfg(test)]
pub(crate) fn masked_client_frame(b0: u8, payload: &[u8], key: [u8; 4]) -> Vec<u8> {
    let mut out = vec![b0];
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n <= 0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&key);
    let start = out.len();
    out.extend_from_slice(payload);
    apply_mask(&mut out[start..], key, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ws::frame::masked_client_frame as client_frame;

    fn parse(buf: &[u8]) -> Result<Option<(FrameHeader, usize)>, Violation> {
        parse_header(buf, false)
    }

    #[test]
    fn parses_the_three_length_forms() {
        for len in [0usize, 5, 125, 126, 65535, 65536, 100_000] {
            let frame = client_frame(0x82, &vec![7u8; len], [1, 2, 3, 4]);
            let (h, at) = parse(&frame).unwrap().unwrap();
            assert_eq!(h.len, len as u64);
            assert_eq!(h.opcode, OpCode::Binary);
            assert!(h.fin && !h.rsv1);
            assert_eq!(h.mask, [1, 2, 3, 4]);
            assert_eq!(frame.len() - at, len);
        }
    }

    #[test]
    fn needs_more_bytes_until_the_header_is_complete() {
        let frame = client_frame(0x81, &[b'x'; 300], [9, 9, 9, 9]);
        for cut in 0..8 {
            assert_eq!(parse(&frame[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(parse(&frame[..8]).unwrap().is_some());
        let long = client_frame(0x82, &vec![0; 70_000], [1, 1, 1, 1]);
        assert_eq!(parse(&long[..13]), Ok(None));
        assert!(parse(&long[..14]).unwrap().is_some());
    }

    #[test]
    fn rejects_protocol_violations() {
        let cases: &[(&[u8], u16)] = &[
            (&[0x81, 0x00], 1002),               // unmasked
            (&[0xC1, 0x80], 1002),               // RSV1 without extension
            (&[0xA1, 0x80], 1002),               // RSV2
            (&[0x91, 0x80], 1002),               // RSV3
            (&[0x83, 0x80], 1002),               // reserved data opcode
            (&[0x8B, 0x80], 1002),               // reserved control opcode
            (&[0x09, 0x80], 1002),               // fragmented ping
            (&[0x89, 0x80 | 126, 0, 126], 1002), // ping over 125 bytes
            (&[0x88, 0x80 | 127], 1002),         // close with a 64-bit length
        ];
        for (buf, code) in cases {
            assert_eq!(parse(buf).map_err(|v| v.code), Err(*code), "{buf:x?}");
        }
        let msb = [0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        assert_eq!(parse(&msb).map_err(|v| v.code), Err(1002));
    }

    #[test]
    fn rsv1_only_on_first_data_frames_when_negotiated() {
        assert!(
            parse_header(&[0xC1, 0x80, 0, 0, 0, 0], true)
                .unwrap()
                .unwrap()
                .0
                .rsv1
        );
        assert!(parse_header(&[0x41, 0x80, 0, 0, 0, 0], true).is_ok());
        for b0 in [0xC0u8, 0xC9, 0xC8, 0xCA] {
            assert_eq!(
                parse_header(&[b0, 0x80, 0, 0, 0, 0], true).map_err(|v| v.code),
                Err(1002)
            );
        }
    }

    #[test]
    fn masking_round_trips_at_any_offset() {
        let key = [0x12, 0x34, 0x56, 0x78];
        let original: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let mut whole = original.clone();
        apply_mask(&mut whole, key, 0);
        for (i, b) in whole.iter().enumerate() {
            assert_eq!(*b, original[i] ^ key[i % 4]);
        }
        // Unmasking in uneven pieces gives the same bytes as in one go.
        let mut pieces = whole.clone();
        let mut at = 0;
        for size in [1usize, 3, 7, 8, 13, 100, 868] {
            apply_mask(&mut pieces[at..at + size], key, at);
            at += size;
        }
        assert_eq!(at, 1000);
        assert_eq!(pieces, original);
    }

    #[test]
    fn encodes_server_headers() {
        let mut out = [0u8; MAX_SERVER_HEADER];
        assert_eq!(encode_header(&mut out, true, false, OpCode::Text, 5), 2);
        assert_eq!(&out[..2], &[0x81, 5]);
        assert_eq!(encode_header(&mut out, true, true, OpCode::Binary, 126), 4);
        assert_eq!(&out[..4], &[0xC2, 126, 0, 126]);
        assert_eq!(
            encode_header(&mut out, false, false, OpCode::Binary, 65536),
            10
        );
        assert_eq!(&out[..10], &[0x02, 127, 0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(encode_header(&mut out, true, false, OpCode::Close, 2), 2);
        assert_eq!(&out[..2], &[0x88, 2]);
    }

    #[test]
    fn validates_close_payloads() {
        assert_eq!(parse_close(&[]), Ok(None));
        assert_eq!(parse_close(&[3]).map_err(|v| v.code), Err(1002));
        assert_eq!(
            parse_close(&close_payload(1000, "bye")),
            Ok(Some((1000, "bye".to_owned())))
        );
        assert_eq!(
            parse_close(&close_payload(4999, "")),
            Ok(Some((4999, String::new())))
        );
        for bad in [
            0u16, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535,
        ] {
            assert_eq!(
                parse_close(&bad.to_be_bytes()).map_err(|v| v.code),
                Err(1002),
                "{bad}"
            );
        }
        for good in [
            1000u16, 1001, 1002, 1003, 1007, 1010, 1011, 1012, 1014, 3000, 4000,
        ] {
            assert!(parse_close(&good.to_be_bytes()).is_ok(), "{good}");
        }
        let mut bad_utf8 = 1000u16.to_be_bytes().to_vec();
        bad_utf8.extend_from_slice(b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80");
        assert_eq!(parse_close(&bad_utf8).map_err(|v| v.code), Err(1007));
    }

    #[test]
    fn close_payload_truncates_on_a_character_boundary() {
        let reason = "é".repeat(100); // 200 bytes
        let payload = close_payload(1000, &reason);
        assert!(payload.len() <= MAX_CONTROL_PAYLOAD);
        assert!(std::str::from_utf8(&payload[2..]).is_ok());
        assert_eq!(payload.len(), 2 + 122);
    }
}
