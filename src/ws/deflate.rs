//! permessage-deflate (RFC 7692): choosing an offer from `Sec-WebSocket-Extensions`, and the
//! per-message compressor and decompressor.
//!
//! Choices:
//! - We answer the first offer we can accept; offers with unknown, duplicate or malformed
//!   parameters are skipped (RFC 7692 §7.1: such an offer must be declined).
//! - `server_no_context_takeover` and `client_no_context_takeover` are echoed when offered
//!   and honoured: our compressor, respectively decompressor, starts afresh for each message.
//! - `server_max_window_bits=N` is echoed and our compressor uses a window of 2^N bytes
//!   (the zlib-rs backend of flate2 supports 9-15). zlib cannot compress raw deflate with an
//!   8-bit window, so for `server_max_window_bits=8` we accept the offer but send every
//!   message uncompressed, which RFC 7692 allows per message (RSV1 clear).
//! - `client_max_window_bits` is accepted with or without a value and never answered: our
//!   decompressor uses the largest window (15), which decodes any smaller one.
//! - Decompression stops as soon as a message exceeds `--ws-max-size` (a deflate bomb closes
//!   with 1009 having inflated at most that much).

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use http::header::{HeaderMap, SEC_WEBSOCKET_EXTENSIONS};

use crate::ws::frame::Violation;

/// RFC 7692 §7.2.1: a compressed message ends with an empty stored block, `00 00 ff ff`,
/// which the sender strips and the receiver appends.
const TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];

/// zlib level 1-9. A server compresses every outgoing message on every connection. Level 1
/// (zlib-rs' "quick" strategy) measured 2-8 times faster than level 3 on the Autobahn text,
/// HTML and JSON samples, for output about a quarter larger.
const LEVEL: u32 = 1;

/// The parameters of the permessage-deflate offer we accepted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeflateParams {
    pub server_no_context_takeover: bool,
    pub client_no_context_takeover: bool,
    /// The window our compressor must stay within (offered by the client; echoed).
    pub server_max_window_bits: Option<u8>,
}

impl DeflateParams {
    /// Our `Sec-WebSocket-Extensions` answer.
    pub fn response_header(&self) -> String {
        let mut answer = String::from("permessage-deflate");
        if self.server_no_context_takeover {
            answer.push_str("; server_no_context_takeover");
        }
        if self.client_no_context_takeover {
            answer.push_str("; client_no_context_takeover");
        }
        if let Some(bits) = self.server_max_window_bits {
            answer.push_str("; server_max_window_bits=");
            answer.push_str(&bits.to_string());
        }
        answer
    }
}

/// The first acceptable permessage-deflate offer of the request, if any.
pub fn negotiate(headers: &HeaderMap) -> Option<DeflateParams> {
    headers
        .get_all(SEC_WEBSOCKET_EXTENSIONS)
        .iter()
        .flat_map(|value| parse_extensions(value.as_bytes()))
        .flatten()
        .filter(|ext| ext.name.eq_ignore_ascii_case("permessage-deflate"))
        .find_map(|ext| accept_offer(&ext.params))
}

fn accept_offer(params: &[(String, Option<String>)]) -> Option<DeflateParams> {
    let mut accepted = DeflateParams::default();
    let mut seen = [false; 4];
    for (name, value) in params {
        let (slot, ok) = match name.to_ascii_lowercase().as_str() {
            "server_no_context_takeover" => {
                accepted.server_no_context_takeover = true;
                (0, value.is_none())
            }
            "client_no_context_takeover" => {
                accepted.client_no_context_takeover = true;
                (1, value.is_none())
            }
            "server_max_window_bits" => {
                let bits = value.as_deref().and_then(window_bits);
                accepted.server_max_window_bits = bits;
                (2, bits.is_some())
            }
            "client_max_window_bits" => (
                3,
                value.as_deref().map_or(true, |v| window_bits(v).is_some()),
            ),
            _ => return None,
        };
        if !ok || std::mem::replace(&mut seen[slot], true) {
            return None;
        }
    }
    Some(accepted)
}

/// RFC 7692 §7.1.2: a decimal 8-15 without leading zeros.
fn window_bits(value: &str) -> Option<u8> {
    if value.starts_with('0') || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok().filter(|bits| (8..=15).contains(bits))
}

/// One element of an extension list: a name and its parameters (quoted values unquoted).
#[derive(Debug, PartialEq, Eq)]
struct Extension {
    name: String,
    params: Vec<(String, Option<String>)>,
}

/// RFC 6455 §9.1 `extension-list` of one header line; a malformed element yields `None`
/// in its place (and parsing resumes after the next comma).
fn parse_extensions(value: &[u8]) -> Vec<Option<Extension>> {
    let mut cursor = Cursor { s: value, at: 0 };
    let mut list = Vec::new();
    loop {
        cursor.skip_ows();
        match cursor.peek() {
            None => return list,
            Some(b',') => cursor.at += 1, // empty elements are allowed by the #rule
            Some(_) => {
                let element = cursor.extension();
                cursor.skip_ows();
                let ended = matches!(cursor.peek(), None | Some(b','));
                if element.is_some() && ended {
                    list.push(element);
                } else {
                    list.push(None);
                    cursor.skip_element();
                }
            }
        }
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    fn token(&mut self) -> Option<String> {
        let start = self.at;
        while self.peek().is_some_and(is_tchar) {
            self.at += 1;
        }
        (self.at > start).then(|| String::from_utf8_lossy(&self.s[start..self.at]).into_owned())
    }

    fn quoted(&mut self) -> Option<String> {
        self.at += 1; // the opening quote
        let mut out = Vec::new();
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return String::from_utf8(out).ok();
                }
                b'\\' => {
                    self.at += 1;
                    out.push(self.peek()?);
                }
                b => out.push(b),
            }
            self.at += 1;
        }
    }

    fn extension(&mut self) -> Option<Extension> {
        let name = self.token()?;
        let mut params = Vec::new();
        loop {
            self.skip_ows();
            if self.peek() != Some(b';') {
                return Some(Extension { name, params });
            }
            self.at += 1;
            self.skip_ows();
            let key = self.token()?;
            self.skip_ows();
            let value = if self.peek() == Some(b'=') {
                self.at += 1;
                self.skip_ows();
                let value = if self.peek() == Some(b'"') {
                    self.quoted()?
                } else {
                    self.token()?
                };
                // RFC 6455 §9.1: a quoted value must still be a token once unquoted.
                if value.is_empty() || !value.bytes().all(is_tchar) {
                    return None;
                }
                Some(value)
            } else {
                None
            };
            params.push((key, value));
        }
    }

    /// Move past the next comma that is not inside a quoted string.
    fn skip_element(&mut self) {
        let mut quoted = false;
        while let Some(b) = self.peek() {
            self.at += 1;
            match b {
                b'\\' if quoted => self.at += 1,
                b'"' => quoted = !quoted,
                b',' if !quoted => return,
                _ => {}
            }
        }
    }
}

/// zlib did not produce a complete flushed block: the message is sent uncompressed.
#[derive(Debug)]
pub(crate) struct CompressFailed;

/// The server's compressor. Created on first use: connections that never send a large
/// enough message never pay for the zlib state.
pub(crate) struct Deflater {
    inner: Option<Compress>,
    window_bits: u8,
    no_context_takeover: bool,
}

impl Deflater {
    /// None when the agreed window is one zlib cannot produce (8 bits): we then send
    /// uncompressed messages only.
    pub(crate) fn new(params: &DeflateParams) -> Option<Self> {
        let window_bits = params.server_max_window_bits.unwrap_or(15);
        (window_bits >= 9).then_some(Deflater {
            inner: None,
            window_bits,
            no_context_takeover: params.server_no_context_takeover,
        })
    }

    /// Compress one whole message into `out` (cleared first), without the `00 00 ff ff`
    /// tail. Err only if zlib misbehaves: the message then goes out uncompressed.
    pub(crate) fn compress(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), CompressFailed> {
        out.clear();
        if input.is_empty() {
            // An empty stored block (its tail stripped). zlib would emit nothing for it after
            // a previous flush.
            out.push(0x00);
            return Ok(());
        }
        let result = self.deflate(input, out);
        if result.is_err() {
            // The compressor may hold input the peer will never see, which later messages
            // could refer back to: start a new stream next time.
            self.inner = None;
        }
        result
    }

    fn deflate(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressFailed> {
        let window_bits = self.window_bits;
        let zlib = self.inner.get_or_insert_with(|| {
            Compress::new_with_window_bits(Compression::new(LEVEL), false, window_bits)
        });
        loop {
            out.reserve(input.len() / 2 + 64);
            let before = zlib.total_in();
            zlib.compress_vec(input, out, FlushCompress::Sync)
                .map_err(|_| CompressFailed)?;
            let consumed = usize::try_from(zlib.total_in() - before).map_err(|_| CompressFailed)?;
            input = input.get(consumed..).ok_or(CompressFailed)?;
            // Done when all input went in and zlib did not run out of room (so the sync
            // flush completed).
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        if !out.ends_with(&TAIL) {
            return Err(CompressFailed);
        }
        out.truncate(out.len() - TAIL.len());
        if self.no_context_takeover {
            zlib.reset();
        }
        Ok(())
    }
}

/// The server's decompressor for the client's compressed messages.
pub struct Inflater {
    inner: Option<Decompress>,
    no_context_takeover: bool,
}

impl Inflater {
    pub fn new(params: &DeflateParams) -> Self {
        Inflater {
            inner: None,
            no_context_takeover: params.client_no_context_takeover,
        }
    }

    /// Inflate the next piece of a compressed message onto `out`, failing with 1009 as soon
    /// as `out` would exceed `limit` bytes and with 1007 on corrupt data.
    pub(crate) fn inflate(
        &mut self,
        mut input: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<(), Violation> {
        let corrupt = Violation::invalid_data("invalid compressed data");
        let zlib = self.inner.get_or_insert_with(|| Decompress::new(false));
        loop {
            if out.len() == out.capacity() {
                // Grow by doubling, never past one byte over the limit: that byte is how we
                // notice the message is too big without inflating any further.
                let wanted = (out.capacity() * 2)
                    .max(out.len() + (input.len() * 4).max(1024))
                    .min(limit.saturating_add(1));
                if wanted <= out.len() {
                    return Err(Violation::too_big());
                }
                out.reserve_exact(wanted - out.len());
            }
            let (in_before, out_before) = (zlib.total_in(), zlib.total_out());
            let status = zlib
                .decompress_vec(input, out, FlushDecompress::Sync)
                .map_err(|_| corrupt)?;
            if out.len() > limit {
                return Err(Violation::too_big());
            }
            let consumed = usize::try_from(zlib.total_in() - in_before).map_err(|_| corrupt)?;
            input = input.get(consumed..).ok_or(corrupt)?;
            if status == Status::StreamEnd {
                // A block with BFINAL set (RFC 7692 §7.2.3.3): what follows is a new stream.
                zlib.reset(false);
                if input.is_empty() {
                    return Ok(());
                }
                continue;
            }
            let room_left = out.len() < out.capacity();
            if input.is_empty() && room_left {
                return Ok(());
            }
            if consumed == 0 && zlib.total_out() == out_before && room_left {
                return Err(corrupt);
            }
        }
    }

    /// The message ended: inflate the tail the sender stripped.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<(), Violation> {
        self.inflate(&TAIL, out, limit)?;
        if self.no_context_takeover {
            if let Some(zlib) = &mut self.inner {
                zlib.reset(false);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn offer(values: &[&str]) -> Option<DeflateParams> {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(SEC_WEBSOCKET_EXTENSIONS, HeaderValue::from_str(v).unwrap());
        }
        negotiate(&headers)
    }

    #[test]
    fn accepts_plain_and_parameterised_offers() {
        assert_eq!(
            offer(&["permessage-deflate"]),
            Some(DeflateParams::default())
        );
        assert_eq!(offer(&[]), None);
        assert_eq!(offer(&["x-webkit-deflate-frame"]), None);
        let p = offer(&["permessage-deflate; client_max_window_bits"]).unwrap();
        assert_eq!(p, DeflateParams::default());
        assert_eq!(p.response_header(), "permessage-deflate");
        let p = offer(&[
            "permessage-deflate;server_no_context_takeover ; client_no_context_takeover;\
             server_max_window_bits=10; client_max_window_bits=\"9\"",
        ])
        .unwrap();
        assert_eq!(
            p,
            DeflateParams {
                server_no_context_takeover: true,
                client_no_context_takeover: true,
                server_max_window_bits: Some(10),
            }
        );
        assert_eq!(
            p.response_header(),
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover; \
             server_max_window_bits=10"
        );
    }

    #[test]
    fn skips_bad_offers_and_answers_the_first_good_one() {
        let bad = [
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; server_max_window_bits=7",
            "permessage-deflate; server_max_window_bits=16",
            "permessage-deflate; server_max_window_bits=010",
            "permessage-deflate; server_max_window_bits=1a",
            "permessage-deflate; client_max_window_bits=0",
            "permessage-deflate; server_no_context_takeover=1",
            "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
            "permessage-deflate; server_max_window_bits=9; server_max_window_bits=10",
            "permessage-deflate; unknown_param",
            "permessage-deflate; server_max_window_bits=\"1,0\"",
            "permessage-deflate; ; x",
            "permessage-deflate server_no_context_takeover",
        ];
        for b in bad {
            assert_eq!(offer(&[b]), None, "{b}");
            let with_fallback = format!("{b}, permessage-deflate; client_no_context_takeover");
            assert_eq!(
                offer(&[&with_fallback]),
                Some(DeflateParams {
                    client_no_context_takeover: true,
                    ..Default::default()
                }),
                "{with_fallback}"
            );
        }
        // Offers spread over several header lines, other extensions in between.
        let p = offer(&[
            "foo; bar=\"a;b\", permessage-deflate; server_max_window_bits=99",
            "x, permessage-deflate; server_max_window_bits=12",
            "permessage-deflate",
        ]);
        assert_eq!(p.unwrap().server_max_window_bits, Some(12));
    }

    fn round_trip(params: &DeflateParams, messages: &[Vec<u8>]) -> Vec<usize> {
        let mut deflater = Deflater::new(params).unwrap();
        let mut inflater = Inflater::new(&DeflateParams::default());
        let mut sizes = Vec::new();
        let mut compressed = Vec::new();
        for m in messages {
            deflater.compress(m, &mut compressed).unwrap();
            sizes.push(compressed.len());
            let mut out = Vec::new();
            // Feed it in pieces, as fragments would arrive.
            for piece in compressed.chunks(7) {
                inflater.inflate(piece, &mut out, usize::MAX).unwrap();
            }
            inflater.finish(&mut out, usize::MAX).unwrap();
            assert_eq!(&out, m);
        }
        sizes
    }

    #[test]
    fn compresses_and_decompresses_with_and_without_context() {
        let json = br#"{"user": "someone", "action": "update", "values": [1, 2, 3]}"#.repeat(20);
        let messages = vec![
            json.clone(),
            json.clone(),
            Vec::new(),
            (0..=255u8).collect(),
        ];
        let with_context = round_trip(&DeflateParams::default(), &messages);
        assert!(with_context[0] < json.len() / 5);
        // The second copy refers back to the first.
        assert!(with_context[1] < with_context[0] / 2, "{with_context:?}");
        let fresh = DeflateParams {
            server_no_context_takeover: true,
            ..Default::default()
        };
        let without = round_trip(&fresh, &messages);
        assert_eq!(without[0], without[1]);
        for bits in 9..=15 {
            let small = DeflateParams {
                server_max_window_bits: Some(bits),
                ..Default::default()
            };
            round_trip(&small, &messages);
        }
        let eight = DeflateParams {
            server_max_window_bits: Some(8),
            ..Default::default()
        };
        assert!(Deflater::new(&eight).is_none());
    }

    #[test]
    fn compressor_keeps_to_the_agreed_window() {
        // A block of noise repeated at a distance of 2 KiB: a 32 KiB window would refer back
        // to it, which an inflater with a smaller window rejects.
        let mut noise = Vec::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..2048 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            noise.push(x as u8);
        }
        let message = [noise.clone(), noise.clone(), noise].concat();
        for bits in 9..=15u8 {
            let params = DeflateParams {
                server_max_window_bits: Some(bits),
                ..Default::default()
            };
            let mut compressed = Vec::new();
            Deflater::new(&params)
                .unwrap()
                .compress(&message, &mut compressed)
                .unwrap();
            compressed.extend_from_slice(&TAIL);
            let mut zlib = Decompress::new_with_window_bits(false, bits);
            let mut out = Vec::with_capacity(message.len() + 16);
            zlib.decompress_vec(&compressed, &mut out, FlushDecompress::Sync)
                .unwrap();
            assert_eq!(out, message, "window {bits}");
            if bits >= 12 {
                assert!(compressed.len() < message.len() / 2, "window {bits}");
            }
        }
    }

    #[test]
    fn no_context_takeover_messages_inflate_with_a_fresh_inflater() {
        let params = DeflateParams {
            server_no_context_takeover: true,
            ..Default::default()
        };
        let mut deflater = Deflater::new(&params).unwrap();
        let text = b"hello hello hello hello hello hello".repeat(10);
        let mut compressed = Vec::new();
        for _ in 0..3 {
            deflater.compress(&text, &mut compressed).unwrap();
            let mut out = Vec::new();
            let mut inflater = Inflater::new(&params);
            inflater.inflate(&compressed, &mut out, usize::MAX).unwrap();
            inflater.finish(&mut out, usize::MAX).unwrap();
            assert_eq!(out, text);
        }
    }

    #[test]
    fn inflation_stops_at_the_limit() {
        let mut deflater = Deflater::new(&DeflateParams::default()).unwrap();
        let zeros = vec![0u8; 4 << 20];
        let mut bomb = Vec::new();
        deflater.compress(&zeros, &mut bomb).unwrap();
        assert!(bomb.len() < 100_000);
        let mut inflater = Inflater::new(&DeflateParams::default());
        let mut out = Vec::new();
        let limit = 100_000;
        let err = inflater
            .inflate(&bomb, &mut out, limit)
            .and_then(|()| inflater.finish(&mut out, limit));
        assert_eq!(err.map_err(|v| v.code), Err(1009));
        assert!(out.capacity() <= limit + 1);
        // Exactly at the limit is fine.
        let mut deflater = Deflater::new(&DeflateParams::default()).unwrap();
        let mut inflater = Inflater::new(&DeflateParams::default());
        let mut out = Vec::new();
        let mut small = Vec::new();
        deflater.compress(&zeros[..limit], &mut small).unwrap();
        inflater.inflate(&small, &mut out, limit).unwrap();
        inflater.finish(&mut out, limit).unwrap();
        assert_eq!(out.len(), limit);
    }

    #[test]
    fn corrupt_data_is_1007() {
        let mut inflater = Inflater::new(&DeflateParams::default());
        let mut out = Vec::new();
        // BTYPE=11 is reserved.
        let result = inflater.inflate(&[0xFF, 0xFF, 0xFF], &mut out, 1 << 20);
        assert_eq!(result.map_err(|v| v.code), Err(1007));
    }
}
