//! The prefixed integers of HPACK and QPACK field sections (RFC 7541 §5.1, which RFC 9204
//! §4.1.1 reuses): a value that fits in the first byte's low `prefix_bits` bits goes there,
//! a larger one fills them and continues in 7-bit groups, least significant first.

/// Appends `value` with a `prefix_bits`-bit prefix (1..=8); `flags` are the first byte's
/// high bits.
pub(crate) fn encode(out: &mut Vec<u8>, prefix_bits: u8, flags: u8, value: u64) {
    let max = (1u64 << prefix_bits) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn small_values_fit_the_prefix() {
        let mut out = Vec::new();
        encode(&mut out, 5, 0xa0, 10);
        assert_eq!(out, [0xaa], "RFC 7541 C.1.1");
    }

    #[test]
    fn larger_values_continue_in_seven_bit_groups() {
        let mut out = Vec::new();
        encode(&mut out, 5, 0, 1337);
        assert_eq!(out, [31, 154, 10], "RFC 7541 C.1.2");
        out.clear();
        encode(&mut out, 7, 0, 127);
        assert_eq!(out, [127, 0], "exactly the prefix's maximum");
        out.clear();
        encode(&mut out, 8, 0, 42);
        assert_eq!(out, [42], "RFC 7541 C.1.3");
    }
}
