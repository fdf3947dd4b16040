//! Which precompressed sibling (`.br`, `.gz`) an `Accept-Encoding` allows (RFC 9110
//! §12.5.3): the acceptable coding with the highest q-value, Brotli on a tie.

/// A precompressed representation kept next to a file.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Precompressed {
    Brotli,
    Gzip,
}

impl Precompressed {
    /// The sibling's file-name suffix.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Precompressed::Brotli => ".br",
            Precompressed::Gzip => ".gz",
        }
    }

    /// The `Content-Encoding` value.
    pub(crate) fn coding(self) -> &'static str {
        match self {
            Precompressed::Brotli => "br",
            Precompressed::Gzip => "gzip",
        }
    }

    /// Set apart in the entity tag.
    pub(crate) fn etag_suffix(self) -> &'static str {
        match self {
            Precompressed::Brotli => "-br",
            Precompressed::Gzip => "-gz",
        }
    }
}

/// The codings to try, best first (at most two); empty when neither is acceptable.
pub(crate) fn preferred(accept_encoding: &[u8]) -> Vec<Precompressed> {
    let Ok(text) = std::str::from_utf8(accept_encoding) else {
        return Vec::new();
    };
    let (mut br, mut gzip, mut star) = (None, None, None);
    for item in text.split(',') {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim();
        let q = parts
            .find_map(|p| {
                let (key, value) = p.split_once('=')?;
                key.trim()
                    .eq_ignore_ascii_case("q")
                    .then(|| value.trim().parse::<f32>().ok())
                    .flatten()
            })
            .unwrap_or(1.0);
        let slot = if coding.eq_ignore_ascii_case("br") {
            &mut br
        } else if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            &mut gzip
        } else if coding == "*" {
            &mut star
        } else {
            continue;
        };
        *slot = Some(q);
    }
    let br = br.or(star).unwrap_or(0.0);
    let gzip = gzip.or(star).unwrap_or(0.0);
    let mut order = Vec::with_capacity(2);
    let mut push = |q: f32, coding| {
        if q > 0.0 {
            order.push((q, coding));
        }
    };
    push(br, Precompressed::Brotli);
    push(gzip, Precompressed::Gzip);
    // Stable: Brotli stays first on a tie.
    order.sort_by(|a, b| b.0.total_cmp(&a.0));
    order.into_iter().map(|(_, coding)| coding).collect()
}

#[cfg(test)]
mod tests {
    use super::Precompressed::{Brotli, Gzip};
    use super::*;

    #[test]
    fn q_values_order_the_codings() {
        assert_eq!(preferred(b"gzip, deflate, br"), vec![Brotli, Gzip]);
        assert_eq!(preferred(b"gzip"), vec![Gzip]);
        assert_eq!(preferred(b"br;q=0.5, gzip;q=0.8"), vec![Gzip, Brotli]);
        assert_eq!(preferred(b"br;q=0, gzip"), vec![Gzip]);
        assert_eq!(preferred(b"GZIP;Q=1"), vec![Gzip]);
        assert_eq!(preferred(b"*"), vec![Brotli, Gzip]);
        assert_eq!(preferred(b"*;q=0.1, br;q=0"), vec![Gzip]);
    }

    #[test]
    fn nothing_acceptable_means_the_plain_file() {
        assert!(preferred(b"").is_empty());
        assert!(preferred(b"identity").is_empty());
        assert!(preferred(b"deflate").is_empty());
        assert!(preferred(b"gzip;q=0").is_empty());
        assert!(preferred(b"\xff").is_empty());
    }

    #[test]
    fn names() {
        assert_eq!(Brotli.suffix(), ".br");
        assert_eq!(Gzip.coding(), "gzip");
    }
}
