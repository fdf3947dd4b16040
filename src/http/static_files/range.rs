//! The `Range` request header (RFC 9110 §14.2): one byte range is served as 206, an
//! unsatisfiable one is 416, anything else (several ranges, another unit, bad syntax) is
//! ignored and the whole representation sent, as §14.2 allows.

/// What a `Range` header asks of a representation of `size` bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RangeAsk {
    /// Send everything (no range, or one we answer with the whole file).
    Whole,
    /// Send `len` bytes from `start` (206).
    Part { start: u64, len: u64 },
    /// 416 with `Content-Range: bytes */size`.
    Unsatisfiable,
}

/// Parses `value` against a representation of `size` bytes.
pub(crate) fn parse_range(value: &[u8], size: u64) -> RangeAsk {
    let Ok(text) = std::str::from_utf8(value) else {
        return RangeAsk::Whole;
    };
    let Some(spec) = strip_unit(text.trim()) else {
        return RangeAsk::Whole;
    };
    if spec.contains(',') {
        return RangeAsk::Whole; // multipart/byteranges is not offered
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return RangeAsk::Whole;
    };
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        // A suffix: the last N bytes.
        let Some(n) = digits(last) else {
            return RangeAsk::Whole;
        };
        if n == 0 || size == 0 {
            return RangeAsk::Unsatisfiable;
        }
        let len = n.min(size);
        return RangeAsk::Part {
            start: size - len,
            len,
        };
    }
    let Some(start) = digits(first) else {
        return RangeAsk::Whole;
    };
    let end = if last.is_empty() {
        None
    } else {
        match digits(last) {
            Some(end) if end >= start => Some(end),
            _ => return RangeAsk::Whole, // invalid: last < first
        }
    };
    if start >= size {
        return RangeAsk::Unsatisfiable;
    }
    let end = end.map_or(size - 1, |end| end.min(size - 1));
    RangeAsk::Part {
        start,
        len: end - start + 1,
    }
}

/// The spec after `bytes=` (the unit is case-insensitive).
fn strip_unit(text: &str) -> Option<&str> {
    let (unit, spec) = text.split_once('=')?;
    unit.trim().eq_ignore_ascii_case("bytes").then_some(spec)
}

/// A non-empty run of ASCII digits that fits a u64.
fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `Content-Range` of a part: `bytes START-END/SIZE`.
pub(crate) fn content_range(start: u64, len: u64, size: u64) -> String {
    format!("bytes {start}-{}/{size}", start + len - 1)
}

/// `Content-Range` of a 416: `bytes */SIZE`.
pub(crate) fn unsatisfied_range(size: u64) -> String {
    format!("bytes */{size}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(start: u64, len: u64) -> RangeAsk {
        RangeAsk::Part { start, len }
    }

    #[test]
    fn single_ranges() {
        assert_eq!(parse_range(b"bytes=0-9", 100), part(0, 10));
        assert_eq!(parse_range(b"bytes=10-", 100), part(10, 90));
        assert_eq!(parse_range(b"bytes=-5", 100), part(95, 5));
        assert_eq!(parse_range(b"bytes=-500", 100), part(0, 100));
        assert_eq!(parse_range(b"bytes=90-200", 100), part(90, 10));
        assert_eq!(parse_range(b"Bytes = 99-99", 100), part(99, 1));
    }

    #[test]
    fn unsatisfiable_ranges() {
        assert_eq!(parse_range(b"bytes=100-", 100), RangeAsk::Unsatisfiable);
        assert_eq!(parse_range(b"bytes=500-600", 100), RangeAsk::Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-0", 100), RangeAsk::Unsatisfiable);
        assert_eq!(parse_range(b"bytes=0-", 0), RangeAsk::Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-1", 0), RangeAsk::Unsatisfiable);
    }

    #[test]
    fn what_we_do_not_serve_as_a_range_gets_the_whole_file() {
        for value in [
            &b"bytes=0-1,5-6"[..],
            b"items=0-1",
            b"bytes=5-1",
            b"bytes=a-b",
            b"bytes=",
            b"bytes=-",
            b"bytes=+1-2",
            b"0-1",
            b"bytes=99999999999999999999999-",
            b"\xff",
        ] {
            assert_eq!(parse_range(value, 100), RangeAsk::Whole, "{value:?}");
        }
    }

    #[test]
    fn content_range_values() {
        assert_eq!(content_range(0, 10, 100), "bytes 0-9/100");
        assert_eq!(unsatisfied_range(100), "bytes */100");
    }
}
