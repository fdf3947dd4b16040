//! QUIC's variable-length integers (RFC 9000 §16), which HTTP/3 frames are built of: the
//! first byte's two high bits give the length (1, 2, 4 or 8 bytes), the rest is the value,
//! most significant byte first.

/// The integer at the start of `buf`: its value and how many bytes it took; None when `buf`
/// ends first.
pub(crate) fn read(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    let bytes = buf.get(..len)?;
    let mut value = u64::from(first & 0x3f);
    for byte in &bytes[1..] {
        value = (value << 8) | u64::from(*byte);
    }
    Some((value, len))
}

/// Appends `value` (below 2^62) in the fewest bytes.
pub(crate) fn put(out: &mut Vec<u8>, value: u64) {
    debug_assert!(value < 1 << 62, "a QUIC varint holds 62 bits");
    match value {
        0..=0x3f => out.push(value as u8),
        0x40..=0x3fff => out.extend_from_slice(&(value as u16 | 0x4000).to_be_bytes()),
        0x4000..=0x3fff_ffff => out.extend_from_slice(&(value as u32 | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(value | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::{put, read};

    #[test]
    fn values_round_trip_in_the_fewest_bytes() {
        for (value, len) in [
            (0, 1),
            (63, 1),
            (64, 2),
            (16_383, 2),
            (16_384, 4),
            (1 << 30, 8),
            ((1 << 62) - 1, 8),
        ] {
            let mut out = Vec::new();
            put(&mut out, value);
            assert_eq!(out.len(), len, "{value}");
            assert_eq!(read(&out), Some((value, len)));
            assert_eq!(read(&out[..len - 1]), None, "{value} cut short");
        }
    }

    #[test]
    fn rfc_9000_examples() {
        // RFC 9000 appendix A.1.
        assert_eq!(
            read(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]),
            Some((151_288_809_941_952_652, 8))
        );
        assert_eq!(read(&[0x9d, 0x7f, 0x3e, 0x7d]), Some((494_878_333, 4)));
        assert_eq!(read(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(read(&[0x25]), Some((37, 1)));
        assert_eq!(read(&[0x40, 0x25]), Some((37, 2)));
    }
}
