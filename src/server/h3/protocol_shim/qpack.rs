//! The `:protocol` field line of a QPACK field section (RFC 9204 §4.5), rewritten so that h3
//! 0.0.8 takes a WebSocket's extended CONNECT (RFC 9220): `websocket` becomes
//! `webtransport`, which h3 parses; a genuine `webtransport` becomes `connect-udp`, so that
//! h3's `Protocol::WEB_TRANSPORT` can only ever mean a WebSocket. `connect-udp` (genuine or
//! not) is a protocol ferrocorn does not serve: both are answered 400, as HTTP/2 answers a
//! `:protocol` other than `websocket`.
//!
//! `:protocol` is not in QPACK's static table and h3 decodes without a dynamic table (it
//! advertises no SETTINGS_QPACK_MAX_TABLE_CAPACITY, so the capacity is 0 and every section
//! has Required Insert Count 0): the field can only come as a literal with a literal name.
//! Its name and value may be Huffman-coded (RFC 7541 Appendix B); a coded string has one
//! encoding, so comparing the bytes with the encodings of the few strings we look for is
//! exact, and no decoder is needed. Only the rewritten line changes (re-encoded as plain
//! literals); every other byte stays as it came.

use crate::http::prefix_int;

/// The values rewritten, and what they become.
const REWRITES: [(&[u8], &[u8]); 2] = [
    (b"websocket", b"webtransport"),
    (b"webtransport", b"connect-udp"),
];

const PROTOCOL: &[u8] = b":protocol";

/// The section with its `:protocol` line rewritten, or None when there is nothing to
/// rewrite (no such line, another value, a section that does not parse: h3 judges those).
pub(super) fn rewrite_protocol(section: &[u8]) -> Option<Vec<u8>> {
    let mut pos = 0;
    // Encoded Field Section Prefix: Required Insert Count, then Delta Base.
    let required_insert_count = prefix_int(section, &mut pos, 8)?;
    if required_insert_count != 0 {
        return None; // refers to a dynamic table h3 never allows
    }
    prefix_int(section, &mut pos, 7)?;
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    while pos < section.len() {
        let start = pos;
        let first = section[pos];
        if first & 0x80 != 0 {
            prefix_int(section, &mut pos, 6)?; // indexed field line
        } else if first & 0x40 != 0 {
            prefix_int(section, &mut pos, 4)?; // literal with name reference
            string(section, &mut pos, 7)?;
        } else if first & 0x20 != 0 {
            // Literal with literal name: 001N H + name length (3-bit prefix).
            let never_indexed = first & 0x10 != 0;
            let name = string(section, &mut pos, 3)?;
            let value = string(section, &mut pos, 7)?;
            if let Some(new_value) = replacement(section, name, value) {
                let out = out.get_or_insert_with(|| Vec::with_capacity(section.len() + 8));
                out.extend_from_slice(&section[copied..start]);
                literal_line(out, never_indexed, PROTOCOL, new_value);
                copied = pos;
            }
        } else if first & 0x10 != 0 {
            prefix_int(section, &mut pos, 4)?; // indexed field line, post-base
        } else {
            prefix_int(section, &mut pos, 3)?; // literal with post-base name reference
            string(section, &mut pos, 7)?;
        }
    }
    let mut out = out?;
    out.extend_from_slice(&section[copied..]);
    Some(out)
}

/// A string literal's place in the section: whether it is Huffman-coded, and its bytes.
#[derive(Clone, Copy)]
struct Literal {
    huffman: bool,
    start: usize,
    end: usize,
}

/// What the value of a `:protocol` line becomes, if it is one we rewrite.
fn replacement(section: &[u8], name: Literal, value: Literal) -> Option<&'static [u8]> {
    if !is(section, name, PROTOCOL) {
        return None;
    }
    REWRITES
        .iter()
        .find(|(from, _)| is(section, value, from))
        .map(|(_, to)| *to)
}

/// Whether the literal spells `text`, plainly or Huffman-coded.
fn is(section: &[u8], literal: Literal, text: &[u8]) -> bool {
    let bytes = &section[literal.start..literal.end];
    if literal.huffman {
        huffman::coded(text).is_some_and(|coded| coded == bytes)
    } else {
        bytes == text
    }
}

/// RFC 9204 §4.1.2: a string literal whose length has a `bits`-bit prefix, the Huffman
/// flag being the bit above it.
fn string(section: &[u8], pos: &mut usize, bits: u8) -> Option<Literal> {
    let huffman = section.get(*pos)? & (1 << bits) != 0;
    let len = usize::try_from(prefix_int(section, pos, bits)?).ok()?;
    let start = *pos;
    let end = start.checked_add(len).filter(|end| *end <= section.len())?;
    *pos = end;
    Some(Literal {
        huffman,
        start,
        end,
    })
}

/// RFC 7541 §5.1 prefixed integer (as QPACK uses it), `bits` of the first byte.
fn prefix_int(section: &[u8], pos: &mut usize, bits: u8) -> Option<u64> {
    let mask = ((1u16 << bits) - 1) as u8;
    let first = section.get(*pos)? & mask;
    *pos += 1;
    if first < mask {
        return Some(u64::from(first));
    }
    let mut value = u64::from(mask);
    let mut shift = 0u32;
    loop {
        let byte = *section.get(*pos)?;
        *pos += 1;
        if shift > 56 {
            return None;
        }
        value = value.checked_add(u64::from(byte & 0x7f) << shift)?;
        shift += 7;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
}

/// A literal field line with a literal name, neither string Huffman-coded.
fn literal_line(out: &mut Vec<u8>, never_indexed: bool, name: &[u8], value: &[u8]) {
    let flags = 0x20 | if never_indexed { 0x10 } else { 0 };
    prefix_int::encode(out, 3, flags, name.len() as u64);
    out.extend_from_slice(name);
    prefix_int::encode(out, 7, 0, value.len() as u64);
    out.extend_from_slice(value);
}

/// The canonical Huffman code of HPACK (RFC 7541 Appendix B), for the characters of the
/// strings this module looks for only.
mod huffman {
    use std::sync::OnceLock;

    use super::{PROTOCOL, REWRITES};

    /// (character, code, length in bits)
    const CODES: [(u8, u32, u8); 14] = [
        (b':', 0x5c, 7),
        (b'a', 0x3, 5),
        (b'b', 0x23, 6),
        (b'c', 0x4, 5),
        (b'e', 0x5, 5),
        (b'k', 0x75, 7),
        (b'l', 0x28, 6),
        (b'n', 0x2a, 6),
        (b'o', 0x7, 5),
        (b'p', 0x2b, 6),
        (b'r', 0x2c, 6),
        (b's', 0x8, 5),
        (b't', 0x9, 5),
        (b'w', 0x78, 7),
    ];

    /// The strings looked for, coded once.
    static CODED: OnceLock<[(&[u8], Vec<u8>); 3]> = OnceLock::new();

    /// The Huffman coding of one of the strings this module looks for.
    pub(super) fn coded(text: &[u8]) -> Option<&'static [u8]> {
        let table = CODED.get_or_init(|| {
            [PROTOCOL, REWRITES[0].0, REWRITES[1].0]
                .map(|text| (text, encode(text).unwrap_or_default()))
        });
        table
            .iter()
            .find(|(known, _)| *known == text)
            .map(|(_, coded)| coded.as_slice())
    }

    /// The Huffman coding of `text` (padded with the EOS prefix, all ones), or None for a
    /// character outside the table.
    pub(super) fn encode(text: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(text.len());
        let mut acc: u64 = 0;
        let mut bits: u32 = 0;
        for ch in text {
            let &(_, code, len) = CODES.iter().find(|(c, _, _)| c == ch)?;
            acc = (acc << len) | u64::from(code);
            bits += u32::from(len);
            while bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        if bits > 0 {
            let pad = 8 - bits;
            out.push(((acc << pad) | ((1 << pad) - 1)) as u8);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encodings the Python `hpack` library (an independent implementation of RFC 7541)
    /// gives for these strings.
    const HPACK_SAYS: [(&[u8], &str); 3] = [
        (b":protocol", "b95d8749c87a3f"),
        (b"websocket", "f058d072752a7f"),
        (b"webtransport", "f058d360ea4567b13f"),
    ];

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn huff(text: &[u8]) -> Vec<u8> {
        huffman::encode(text).unwrap()
    }

    /// A plain or Huffman string literal with a `bits`-bit length prefix.
    fn lit(out: &mut Vec<u8>, flags: u8, bits: u8, text: &[u8], coded: bool) {
        let bytes = if coded { huff(text) } else { text.to_vec() };
        let h = if coded { 1 << bits } else { 0 };
        prefix_int::encode(out, bits, flags | h, bytes.len() as u64);
        out.extend_from_slice(&bytes);
    }

    /// A section: prefix 0/0, `:method CONNECT` (static index 15), the `:protocol` line
    /// (name and value each plain or coded), `:path` by name reference with a value, and a
    /// literal `sec-websocket-version: 13` after it.
    fn section(value: &[u8], name_coded: bool, value_coded: bool) -> Vec<u8> {
        let mut s = vec![0x00, 0x00, 0xc0 | 15];
        lit(&mut s, 0x20, 3, PROTOCOL, name_coded);
        lit(&mut s, 0, 7, value, value_coded);
        s.push(0x50 | 1); // :path, static index 1, literal value
        lit(&mut s, 0, 7, b"/chat", false);
        lit(&mut s, 0x20, 3, b"sec-websocket-version", false);
        lit(&mut s, 0, 7, b"13", false);
        s
    }

    #[test]
    fn huffman_matches_an_independent_encoder() {
        for (text, expected) in HPACK_SAYS {
            assert_eq!(hex(&huff(text)), expected);
            assert_eq!(hex(huffman::coded(text).unwrap()), expected);
        }
        assert!(huffman::encode(b"websocket!").is_none());
    }

    #[test]
    fn every_form_of_websocket_becomes_a_plain_webtransport() {
        for (name_coded, value_coded) in
            [(false, false), (true, false), (false, true), (true, true)]
        {
            let input = section(b"websocket", name_coded, value_coded);
            let output = rewrite_protocol(&input).unwrap();
            assert_eq!(output, section(b"webtransport", false, false));
        }
    }

    #[test]
    fn genuine_webtransport_becomes_connect_udp() {
        for coded in [false, true] {
            let output = rewrite_protocol(&section(b"webtransport", coded, coded)).unwrap();
            assert_eq!(output, section(b"connect-udp", false, false));
        }
    }

    #[test]
    fn other_lines_keep_their_bytes_and_the_never_indexed_bit_stays() {
        let mut input = vec![0x00, 0x00];
        lit(&mut input, 0x20, 3, b"ocean", true);
        lit(&mut input, 0, 7, b"b", true);
        let before = input.clone();
        lit(&mut input, 0x30, 3, PROTOCOL, true); // N set
        lit(&mut input, 0, 7, b"websocket", true);
        // GET (static 17), post-base index 3, post-base name reference 2 with value "z".
        let tail = [0xd1, 0x13, 0x02, 0x01, b'z'];
        input.extend_from_slice(&tail);
        let output = rewrite_protocol(&input).unwrap();
        let line_at = before.len();
        let mut expected = before;
        literal_line(&mut expected, true, PROTOCOL, b"webtransport");
        expected.extend_from_slice(&tail);
        assert_eq!(output, expected);
        assert_eq!(output[line_at] & 0xf0, 0x30);
    }

    #[test]
    fn nothing_to_rewrite() {
        assert!(rewrite_protocol(&section(b"connect-udp", false, false)).is_none());
        assert!(rewrite_protocol(&section(b"WebSocket", false, false)).is_none());
        assert!(rewrite_protocol(&[0x00, 0x00, 0xd1]).is_none()); // a plain GET
                                                                  // A `:protocol`-like name that is another header's value.
        let mut s = vec![0x00, 0x00];
        lit(&mut s, 0x20, 3, b"x-protocol", false);
        lit(&mut s, 0, 7, b"websocket", false);
        assert!(rewrite_protocol(&s).is_none());
        // Truncated sections and a dynamic table reference are left to h3.
        let full = section(b"websocket", false, false);
        // Cut anywhere before the end of the `:protocol` line (3 + 11 + 10 bytes: a name
        // length of 9 takes a continuation byte after its 3-bit prefix).
        for cut in 0..24 {
            assert!(rewrite_protocol(&full[..cut]).is_none(), "cut at {cut}");
        }
        assert!(rewrite_protocol(&full[..24]).is_some());
        let mut dynamic = full.clone();
        dynamic[0] = 0x02;
        assert!(rewrite_protocol(&dynamic).is_none());
    }

    #[test]
    fn long_lengths_use_continuation_bytes() {
        let mut out = Vec::new();
        prefix_int::encode(&mut out, 3, 0x20, 300);
        let mut pos = 0;
        assert_eq!(prefix_int(&out, &mut pos, 3), Some(300));
        assert_eq!(pos, out.len());
        assert_eq!(prefix_int(&[0xff; 12], &mut 0, 8), None);
    }
}
