//! The HTTP/3 (RFC 9114) and QPACK (RFC 9204) framing a GET-only load generator needs, on
//! top of quinn's streams: the request's HEADERS frame, built once per connection, and a
//! parser that reads a response stream completely (frames, the field sections' structure,
//! `:status`). No dynamic table is used or accepted: this client never advertises
//! SETTINGS_QPACK_MAX_TABLE_CAPACITY, so a server may only use static references and
//! literals (RFC 9204 section 3.2.3), and a field section referring to a dynamic entry is an
//! error. Field values other than `:status` are walked, not Huffman-decoded: the generator
//! needs the status and the body's length, nothing else from them.

use bytes::{Buf, BytesMut};

// The extension's QPACK/HPACK prefixed-integer encoder, the same source file.
#[path = "../../../src/http/prefix_int.rs"]
mod prefix_int;
// And its QUIC variable-length integers.
#[path = "../../../src/http/quic_varint.rs"]
pub mod quic_varint;

pub const FRAME_DATA: u64 = 0x00;
pub const FRAME_HEADERS: u64 = 0x01;
pub const FRAME_SETTINGS: u64 = 0x04;
pub const STREAM_CONTROL: u64 = 0x00;

/// Bytes a response's field section may take before the response counts as failed.
const MAX_FIELD_SECTION: usize = 64 * 1024;
/// Entries in QPACK's static table (RFC 9204 appendix A).
const STATIC_TABLE_LEN: u64 = 99;

/// A QPACK/HPACK prefixed integer (RFC 7541 section 5.1) whose prefix is the low `bits` of
/// `buf[0]`: `(value, bytes used)`.
fn read_prefix_int(buf: &[u8], bits: u32) -> Result<(u64, usize), Malformed> {
    let max = (1u64 << bits) - 1;
    let mut value = u64::from(*buf.first().ok_or(Malformed)?) & max;
    if value < max {
        return Ok((value, 1));
    }
    for (i, &b) in buf[1..].iter().enumerate() {
        let shift = 7 * i as u32;
        if shift > 56 {
            return Err(Malformed);
        }
        value += u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok((value, i + 2));
        }
    }
    Err(Malformed)
}

/// The HEADERS frame of `GET path` to `authority` over https: indexed static entries for
/// `:method GET`, `:scheme https` and `:path /`, literals with a static name reference for
/// the others, no Huffman coding.
pub fn request_headers_frame(authority: &str, path: &str) -> Vec<u8> {
    // Required Insert Count 0, Delta Base 0: no dynamic table.
    let mut block = vec![0x00, 0x00];
    block.push(0xc0 | 17); // :method GET
    block.push(0xc0 | 23); // :scheme https
    literal_with_static_name(&mut block, 0, authority.as_bytes()); // :authority
    if path == "/" {
        block.push(0xc0 | 1); // :path /
    } else {
        literal_with_static_name(&mut block, 1, path.as_bytes());
    }
    let mut frame = Vec::with_capacity(block.len() + 3);
    quic_varint::put(&mut frame, FRAME_HEADERS);
    quic_varint::put(&mut frame, block.len() as u64);
    frame.extend_from_slice(&block);
    frame
}

fn literal_with_static_name(out: &mut Vec<u8>, index: usize, value: &[u8]) {
    prefix_int::encode(out, 4, 0x50, index as u64); // 01 N=0 T=1, 4-bit index
    prefix_int::encode(out, 7, 0x00, value.len() as u64); // H=0, 7-bit length
    out.extend_from_slice(value);
}

/// A response stream, frame or field section that does not follow RFC 9114/9204.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed;

/// Reads one response stream chunk by chunk: HEADERS (interim 1xx responses, then the
/// final one, then optional trailers), DATA frames counted and skipped without copying
/// their payload when it arrives in chunks of its own, unknown frame types skipped (RFC 9114
/// section 9), frames not allowed on a request stream rejected.
#[derive(Default)]
pub struct ResponseReader {
    /// Frame bytes not yet parsed: a frame header, or a HEADERS frame being collected.
    pending: BytesMut,
    /// Payload bytes of the current DATA or unknown frame still to come.
    skip: u64,
    skip_is_data: bool,
    pub status: Option<u16>,
    trailers_seen: bool,
    pub body_bytes: u64,
}

impl ResponseReader {
    pub fn feed(&mut self, mut chunk: &[u8]) -> Result<(), Malformed> {
        if self.skip > 0 {
            let n = (self.skip.min(chunk.len() as u64)) as usize;
            self.skipped(n);
            chunk = &chunk[n..];
        }
        if chunk.is_empty() {
            return Ok(());
        }
        self.pending.extend_from_slice(chunk);
        loop {
            let Some((ty, n1)) = quic_varint::read(&self.pending) else {
                return Ok(());
            };
            let Some((len, n2)) = quic_varint::read(&self.pending[n1..]) else {
                return Ok(());
            };
            let head = n1 + n2;
            match ty {
                FRAME_HEADERS => {
                    if len as usize > MAX_FIELD_SECTION {
                        return Err(Malformed);
                    }
                    let len = len as usize;
                    if self.pending.len() < head + len {
                        return Ok(());
                    }
                    let status = field_section_status(&self.pending[head..head + len])?;
                    self.headers(status)?;
                    self.pending.advance(head + len);
                }
                // DATA before the final response's HEADERS, or after trailers.
                FRAME_DATA if self.final_status().is_none() || self.trailers_seen => {
                    return Err(Malformed)
                }
                // CANCEL_PUSH, SETTINGS, PUSH_PROMISE (no push was allowed), GOAWAY,
                // MAX_PUSH_ID and the reserved HTTP/2 types (RFC 9114 sections 7.2, 11.2.1).
                0x02..=0x09 | 0x0d => return Err(Malformed),
                _ => {
                    self.pending.advance(head);
                    let here = (len.min(self.pending.len() as u64)) as usize;
                    self.skip = len;
                    self.skip_is_data = ty == FRAME_DATA;
                    self.skipped(here);
                    self.pending.advance(here);
                    if self.skip > 0 {
                        return Ok(());
                    }
                }
            }
        }
    }

    fn skipped(&mut self, n: usize) {
        self.skip -= n as u64;
        if self.skip_is_data {
            self.body_bytes += n as u64;
        }
    }

    fn final_status(&self) -> Option<u16> {
        self.status.filter(|s| *s >= 200)
    }

    fn headers(&mut self, status: Option<u16>) -> Result<(), Malformed> {
        if self.trailers_seen {
            return Err(Malformed);
        }
        if self.final_status().is_some() {
            // Trailers: no pseudo-header allowed.
            if status.is_some() {
                return Err(Malformed);
            }
            self.trailers_seen = true;
            return Ok(());
        }
        match status {
            Some(s) if (100..600).contains(&s) => self.status = Some(s),
            _ => return Err(Malformed),
        }
        Ok(())
    }

    /// Ready for the next response, keeping the buffer.
    pub fn reset(&mut self) {
        self.pending.clear();
        self.skip = 0;
        self.skip_is_data = false;
        self.status = None;
        self.trailers_seen = false;
        self.body_bytes = 0;
    }

    /// Where the stream ended: the final status, if the response was complete.
    pub fn finish(&self) -> Result<u16, Malformed> {
        if !self.pending.is_empty() || self.skip > 0 {
            return Err(Malformed);
        }
        self.final_status().ok_or(Malformed)
    }
}

/// Walks an encoded field section (RFC 9204 section 4.5) and returns its `:status`, if any;
/// errors on a dynamic-table reference, a static index out of range, a truncated
/// representation or more than one `:status`.
pub fn field_section_status(mut block: &[u8]) -> Result<Option<u16>, Malformed> {
    let (required_insert_count, n) = read_prefix_int(block, 8)?;
    if required_insert_count != 0 {
        return Err(Malformed);
    }
    block = &block[n..];
    let (_delta_base, n) = read_prefix_int(block, 7)?;
    block = &block[n..];
    let mut status = None;
    let mut set_status = |value: u16| {
        if status.replace(value).is_some() {
            return Err(Malformed);
        }
        Ok(())
    };
    while let Some(&first) = block.first() {
        if first & 0x80 != 0 {
            // Indexed field line; T (0x40) must say static.
            if first & 0x40 == 0 {
                return Err(Malformed);
            }
            let (index, n) = read_prefix_int(block, 6)?;
            if index >= STATIC_TABLE_LEN {
                return Err(Malformed);
            }
            if let Some(value) = static_status(index) {
                set_status(value)?;
            }
            block = &block[n..];
        } else if first & 0x40 != 0 {
            // Literal field line with name reference; T (0x10) must say static.
            if first & 0x10 == 0 {
                return Err(Malformed);
            }
            let (index, n) = read_prefix_int(block, 4)?;
            if index >= STATIC_TABLE_LEN {
                return Err(Malformed);
            }
            let (value, huffman, used) = read_string(&block[n..], 7)?;
            if static_status(index).is_some() {
                set_status(status_value(value, huffman)?)?;
            }
            block = &block[n + used..];
        } else if first & 0x20 != 0 {
            // Literal field line with literal name: H is 0x08, 3-bit length prefix.
            let (name, huffman, used) = read_string(block, 3)?;
            // A pseudo-header spelled out literally could only be ":status"; refuse it
            // rather than decode it (an encoder uses the static name).
            if !huffman && name.first() == Some(&b':') {
                return Err(Malformed);
            }
            let (_, _, used2) = read_string(&block[used..], 7)?;
            block = &block[used + used2..];
        } else {
            // Indexed with post-base index, or literal with post-base name reference:
            // both refer to the dynamic table.
            return Err(Malformed);
        }
    }
    Ok(status)
}

/// A string literal whose length prefix is the low `bits` of `buf[0]` and whose H flag is
/// the bit just above it: `(bytes, huffman, bytes used)`.
fn read_string(buf: &[u8], bits: u32) -> Result<(&[u8], bool, usize), Malformed> {
    let huffman = buf.first().ok_or(Malformed)? & (1 << bits) != 0;
    let (len, n) = read_prefix_int(buf, bits)?;
    let end = n
        .checked_add(usize::try_from(len).map_err(|_| Malformed)?)
        .ok_or(Malformed)?;
    let value = buf.get(n..end).ok_or(Malformed)?;
    Ok((value, huffman, end))
}

/// The status of a static table entry named `:status` (RFC 9204 appendix A).
fn static_status(index: u64) -> Option<u16> {
    Some(match index {
        24 => 103,
        25 => 200,
        26 => 304,
        27 => 404,
        28 => 503,
        63 => 100,
        64 => 204,
        65 => 206,
        66 => 302,
        67 => 400,
        68 => 403,
        69 => 421,
        70 => 425,
        71 => 500,
        _ => return None,
    })
}

/// A literal `:status` value: three ASCII digits, plain or Huffman-coded (RFC 7541 appendix
/// B: '0'–'2' are the 5-bit codes 0–2, '3'–'9' the 6-bit codes 25–31; padding is up to 7
/// one-bits).
fn status_value(value: &[u8], huffman: bool) -> Result<u16, Malformed> {
    let mut digits = [0u8; 3];
    let mut count = 0;
    if huffman {
        let total = value.len() * 8;
        let bit = |i: usize| (value[i / 8] >> (7 - i % 8)) & 1;
        let mut i = 0;
        while total - i >= 5 {
            let mut code = 0u8;
            for k in 0..5 {
                code = (code << 1) | bit(i + k);
            }
            let digit = if code <= 2 {
                i += 5;
                code
            } else if (12..=15).contains(&code) && total - i >= 6 {
                let six = (code << 1) | bit(i + 5);
                if six < 25 {
                    return Err(Malformed); // '/' (24): not a digit
                }
                i += 6;
                six - 22
            } else {
                break;
            };
            if count == 3 {
                return Err(Malformed);
            }
            digits[count] = digit;
            count += 1;
        }
        if total - i >= 8 || (i..total).any(|k| bit(k) == 0) {
            return Err(Malformed);
        }
    } else {
        if value.len() > 3 {
            return Err(Malformed);
        }
        for &b in value {
            if !b.is_ascii_digit() {
                return Err(Malformed);
            }
            digits[count] = b - b'0';
            count += 1;
        }
    }
    if count != 3 {
        return Err(Malformed);
    }
    Ok(digits.iter().fold(0u16, |acc, d| acc * 10 + u16::from(*d)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ty: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        quic_varint::put(&mut out, ty);
        quic_varint::put(&mut out, payload.len() as u64);
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn prefix_ints_round_trip() {
        for (bits, v) in [
            (4, 3),
            (4, 15),
            (4, 16),
            (7, 126),
            (7, 127),
            (7, 300),
            (3, 7000),
        ] {
            let mut out = Vec::new();
            prefix_int::encode(&mut out, bits as u8, 0, v as u64);
            assert_eq!(read_prefix_int(&out, bits), Ok((v as u64, out.len())));
        }
    }

    #[test]
    fn request_frame_is_a_static_field_section() {
        let frame = request_headers_frame("localhost:4433", "/x");
        let (ty, n1) = quic_varint::read(&frame).unwrap();
        let (len, n2) = quic_varint::read(&frame[n1..]).unwrap();
        assert_eq!(ty, FRAME_HEADERS);
        assert_eq!(len as usize, frame.len() - n1 - n2);
        let block = &frame[n1 + n2..];
        assert_eq!(&block[..4], &[0, 0, 0xd1, 0xd7]);
        assert_eq!(field_section_status(block), Ok(None));
        assert!(block.ends_with(b"/x"));
    }

    #[test]
    fn statuses_indexed_and_literal() {
        assert_eq!(field_section_status(&[0, 0, 0xc0 | 25]), Ok(Some(200)));
        assert_eq!(field_section_status(&[0, 0, 0xff, 71 - 63]), Ok(Some(500)));
        // Literal with static name :status, plain "201".
        assert_eq!(
            field_section_status(&[0, 0, 0x50 | 0x0f, 24 - 15, 3, b'2', b'0', b'1']),
            Ok(Some(201))
        );
        // Huffman "200" is 0x10 0x01 (RFC 7541 appendix B); "103" is 0x08 0x19.
        assert_eq!(
            field_section_status(&[0, 0, 0x5f, 10, 0x82, 0x10, 0x01]),
            Ok(Some(200))
        );
        assert_eq!(
            field_section_status(&[0, 0, 0x5f, 10, 0x82, 0x08, 0x19]),
            Ok(Some(103))
        );
        // Zero padding bits, a dynamic reference, two statuses, a truncated literal.
        assert_eq!(
            field_section_status(&[0, 0, 0x5f, 10, 0x82, 0x10, 0x00]),
            Err(Malformed)
        );
        assert_eq!(field_section_status(&[0, 0, 0x80 | 1]), Err(Malformed));
        assert_eq!(field_section_status(&[1, 0, 0xc0 | 25]), Err(Malformed));
        assert_eq!(field_section_status(&[0, 0, 0xd9, 0xd9]), Err(Malformed));
        assert_eq!(field_section_status(&[0, 0, 0x54, 5, b'a']), Err(Malformed));
        // A literal name and value (Huffman flag set on the value: not decoded).
        assert_eq!(
            field_section_status(&[0, 0, 0xd9, 0x21, b'x', 0x82, 0xff, 0xff]),
            Ok(Some(200))
        );
    }

    #[test]
    fn response_split_anywhere() {
        let mut stream = frame(0x21, b"grease");
        stream.extend(frame(FRAME_HEADERS, &[0, 0, 0xc0 | 24])); // 103
        stream.extend(frame(FRAME_HEADERS, &[0, 0, 0xd9, 0x5c, 2, b'1', b'3']));
        stream.extend(frame(FRAME_DATA, b"Hello, World!"));
        stream.extend(frame(FRAME_DATA, &[7u8; 300]));
        stream.extend(frame(FRAME_HEADERS, &[0, 0, 0x21, b'x', 1, b'y'])); // trailers
        for step in [1, 2, 3, 7, 64, stream.len()] {
            let mut reader = ResponseReader::default();
            for chunk in stream.chunks(step) {
                reader.feed(chunk).unwrap();
            }
            assert_eq!(reader.finish(), Ok(200), "chunks of {step}");
            assert_eq!(reader.body_bytes, 313);
        }
    }

    #[test]
    fn bad_responses() {
        let data_first = frame(FRAME_DATA, b"x");
        assert_eq!(ResponseReader::default().feed(&data_first), Err(Malformed));
        let settings = [
            frame(FRAME_HEADERS, &[0, 0, 0xd9]),
            frame(FRAME_SETTINGS, &[]),
        ]
        .concat();
        assert_eq!(ResponseReader::default().feed(&settings), Err(Malformed));
        let mut cut = ResponseReader::default();
        cut.feed(&frame(FRAME_HEADERS, &[0, 0, 0xd9])).unwrap();
        cut.feed(&[FRAME_DATA as u8, 5, b'a']).unwrap();
        assert_eq!(cut.finish(), Err(Malformed));
        let mut interim_only = ResponseReader::default();
        interim_only
            .feed(&frame(FRAME_HEADERS, &[0, 0, 0xc0 | 24]))
            .unwrap();
        assert_eq!(interim_only.finish(), Err(Malformed));
    }
}
