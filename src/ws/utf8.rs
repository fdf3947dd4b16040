//! UTF-8 validation of a text message that arrives in pieces (fragments, or a frame read in
//! several reads). RFC 6455 §8.1 lets an endpoint fail the connection as soon as the bytes
//! so far cannot be the start of valid UTF-8; this says so at the first such byte, not at the
//! end of the message.

#[derive(Default, Debug)]
pub(crate) struct Utf8Validator {
    /// The start of a character split across pieces (at most 3 bytes).
    partial: [u8; 4],
    partial_len: usize,
}

/// The bytes are not (and cannot become) valid UTF-8.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct InvalidUtf8;

/// How many bytes a character starting with `lead` takes (1 for an invalid lead byte: the
/// validator reports it then).
fn char_width(lead: u8) -> usize {
    match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => 1,
    }
}

impl Utf8Validator {
    pub(crate) fn reset(&mut self) {
        self.partial_len = 0;
    }

    /// Check the next piece of the message.
    pub(crate) fn feed(&mut self, mut piece: &[u8]) -> Result<(), InvalidUtf8> {
        if self.partial_len > 0 {
            // Complete the split character first.
            let width = char_width(self.partial[0]);
            let take = (width - self.partial_len).min(piece.len());
            self.partial[self.partial_len..self.partial_len + take].copy_from_slice(&piece[..take]);
            self.partial_len += take;
            piece = &piece[take..];
            match std::str::from_utf8(&self.partial[..self.partial_len]) {
                Ok(_) => self.partial_len = 0,
                Err(e) if e.error_len().is_none() => {
                    // Still a valid prefix; the piece was too short to finish it.
                    debug_assert!(piece.is_empty());
                    return Ok(());
                }
                Err(_) => return Err(InvalidUtf8),
            }
        }
        match std::str::from_utf8(piece) {
            Ok(_) => Ok(()),
            // `error_len() == None`: the piece ends inside a character that may still be
            // completed by the next piece.
            Err(e) if e.error_len().is_none() => {
                let tail = &piece[e.valid_up_to()..];
                self.partial[..tail.len()].copy_from_slice(tail);
                self.partial_len = tail.len();
                Ok(())
            }
            Err(_) => Err(InvalidUtf8),
        }
    }

    /// The message ended: a character left unfinished makes it invalid.
    pub(crate) fn finish(&mut self) -> Result<(), InvalidUtf8> {
        let complete = self.partial_len == 0;
        self.partial_len = 0;
        if complete {
            Ok(())
        } else {
            Err(InvalidUtf8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_split(bytes: &[u8]) -> Result<(), InvalidUtf8> {
        // Every way of cutting the message in two (and byte by byte) must agree with
        // checking it whole.
        let whole = std::str::from_utf8(bytes).is_ok();
        for cut in 0..=bytes.len() {
            let mut v = Utf8Validator::default();
            let result = v
                .feed(&bytes[..cut])
                .and_then(|()| v.feed(&bytes[cut..]))
                .and_then(|()| v.finish());
            assert_eq!(result.is_ok(), whole, "cut at {cut} of {bytes:x?}");
        }
        let mut v = Utf8Validator::default();
        let result = bytes
            .iter()
            .try_for_each(|b| v.feed(std::slice::from_ref(b)))
            .and_then(|()| v.finish());
        assert_eq!(result.is_ok(), whole);
        result
    }

    #[test]
    fn agrees_with_whole_message_validation() {
        assert!(check_split("κόσμε".as_bytes()).is_ok());
        assert!(check_split("Hello-µ@ßöäüàá-UTF-8!!".as_bytes()).is_ok());
        assert!(check_split("\u{10FFFF}\u{FFFF}\u{0}".as_bytes()).is_ok());
        assert!(check_split(b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80").is_err());
        assert!(check_split(b"\xf4\x90\x80\x80").is_err());
        assert!(check_split(b"\xc0\xaf").is_err());
        assert!(check_split(b"abc\xe2\x82").is_err());
        assert!(check_split(b"\xff").is_err());
    }

    #[test]
    fn fails_at_the_first_impossible_byte() {
        // Autobahn 6.4.x: the first fragment ends in a byte that no continuation can fix.
        let mut v = Utf8Validator::default();
        assert!(v.feed("κόσμε".as_bytes()).is_ok());
        assert_eq!(v.feed(b"\xf4\x90"), Err(InvalidUtf8));
        let mut v = Utf8Validator::default();
        assert!(v.feed(b"\xf4").is_ok());
        assert_eq!(v.feed(b"\x90"), Err(InvalidUtf8));
        // A valid prefix is not an error until the message ends.
        let mut v = Utf8Validator::default();
        assert!(v.feed(b"\xf0\x9f").is_ok());
        assert_eq!(v.finish(), Err(InvalidUtf8));
    }
}
