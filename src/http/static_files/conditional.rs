//! Validators and conditional requests (RFC 9110 §8.8, §13): the `ETag` and
//! `Last-Modified` of a file, and what `If-Match`, `If-Unmodified-Since`, `If-None-Match`,
//! `If-Modified-Since` and `If-Range` make of a request, in §13.2.2's order.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE};
use http::HeaderMap;

/// What identifies one version of a file: its size, modification time and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Validators {
    pub(crate) size: u64,
    pub(crate) modified: SystemTime,
    pub(crate) inode: u64,
}

impl Validators {
    /// A strong entity tag, `"<inode>-<mtime ns>-<size>"` in hex, with `suffix` telling
    /// the precompressed representations apart (`-br`, `-gz`).
    pub(crate) fn etag(&self, suffix: &str) -> String {
        let nanos = self
            .modified
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("\"{:x}-{nanos:x}-{:x}{suffix}\"", self.inode, self.size)
    }

    /// `Last-Modified` as an IMF-fixdate.
    pub(crate) fn last_modified(&self) -> String {
        httpdate::fmt_http_date(self.modified)
    }

    /// The modification time at the second (what an HTTP date can say).
    fn modified_secs(&self) -> u64 {
        self.modified
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }
}

/// What the preconditions decide.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// Answer normally; `range_applies`: a `Range` header may be honoured (no `If-Range`,
    /// or one that matches).
    Proceed { range_applies: bool },
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// Evaluates the preconditions of a GET or HEAD for the representation whose `etag` and
/// `validators` are given.
pub(crate) fn evaluate(headers: &HeaderMap, etag: &str, validators: &Validators) -> Precondition {
    let modified = validators.modified_secs();
    if let Some(value) = header_text(headers, IF_MATCH.as_str()) {
        if !list_matches(value, etag, true) {
            return Precondition::Failed;
        }
    } else if let Some(since) = header_date(headers, IF_UNMODIFIED_SINCE.as_str()) {
        if modified > since {
            return Precondition::Failed;
        }
    }
    if let Some(value) = header_text(headers, IF_NONE_MATCH.as_str()) {
        if list_matches(value, etag, false) {
            return Precondition::NotModified;
        }
    } else if let Some(since) = header_date(headers, IF_MODIFIED_SINCE.as_str()) {
        if modified <= since {
            return Precondition::NotModified;
        }
    }
    let range_applies = match header_text(headers, IF_RANGE.as_str()) {
        None => true,
        // An entity tag: a strong comparison (§13.1.5); a date: the exact Last-Modified.
        Some(value) if value.trim_start().starts_with(['"', 'W']) => {
            strong_equal(value.trim(), etag)
        }
        Some(value) => httpdate::parse_http_date(value.trim())
            .ok()
            .and_then(|date| date.duration_since(UNIX_EPOCH).ok())
            .is_some_and(|date| date.as_secs() == modified),
    };
    Precondition::Proceed { range_applies }
}

/// The header's value if present once as text (a repeated list header is joined by the
/// client's comma anyway; we read the first).
fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// An HTTP date header as seconds since the epoch; an invalid date is ignored (§13.1.3).
fn header_date(headers: &HeaderMap, name: &str) -> Option<u64> {
    let date = httpdate::parse_http_date(header_text(headers, name)?.trim()).ok()?;
    date.duration_since(UNIX_EPOCH)
        .ok()
        .map(|d: Duration| d.as_secs())
}

/// Whether an `If-Match`/`If-None-Match` list (or `*`) matches `etag`: strong comparison
/// for If-Match, weak for If-None-Match (§13.1.1, §13.1.2).
fn list_matches(value: &str, etag: &str, strong: bool) -> bool {
    if value.trim() == "*" {
        return true;
    }
    value.split(',').map(str::trim).any(|tag| {
        if strong {
            strong_equal(tag, etag)
        } else {
            opaque(tag) == opaque(etag)
        }
    })
}

/// Both strong and the same (a weak tag never matches strongly).
fn strong_equal(tag: &str, etag: &str) -> bool {
    !tag.starts_with("W/") && tag == etag
}

/// The quoted part of an entity tag, without a `W/`.
fn opaque(tag: &str) -> &str {
    tag.strip_prefix("W/").unwrap_or(tag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn validators() -> Validators {
        Validators {
            size: 10,
            modified: UNIX_EPOCH + Duration::new(1_700_000_000, 500),
            inode: 42,
        }
    }

    fn with(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).expect("a value"));
        }
        headers
    }

    fn decide(pairs: &[(&'static str, &str)]) -> Precondition {
        let v = validators();
        evaluate(&with(pairs), &v.etag(""), &v)
    }

    const PROCEED: Precondition = Precondition::Proceed {
        range_applies: true,
    };

    #[test]
    fn validators_look_right() {
        let v = validators();
        let etag = v.etag("");
        assert!(
            etag.starts_with("\"2a-") && etag.ends_with("-a\""),
            "{etag}"
        );
        assert_ne!(v.etag("-br"), etag);
        assert_eq!(v.last_modified(), "Tue, 14 Nov 2023 22:13:20 GMT");
    }

    #[test]
    fn if_none_match_compares_weakly_and_knows_star() {
        let etag = validators().etag("");
        assert_eq!(
            decide(&[("if-none-match", &etag)]),
            Precondition::NotModified
        );
        let weak = format!("W/{etag}");
        assert_eq!(
            decide(&[("if-none-match", &weak)]),
            Precondition::NotModified
        );
        let listed = format!("\"other\", {etag}");
        assert_eq!(
            decide(&[("if-none-match", &listed)]),
            Precondition::NotModified
        );
        assert_eq!(decide(&[("if-none-match", "*")]), Precondition::NotModified);
        assert_eq!(decide(&[("if-none-match", "\"other\"")]), PROCEED);
    }

    #[test]
    fn if_modified_since_counts_only_without_if_none_match() {
        let lm = validators().last_modified();
        assert_eq!(
            decide(&[("if-modified-since", &lm)]),
            Precondition::NotModified
        );
        let later = "Wed, 15 Nov 2023 00:00:00 GMT";
        assert_eq!(
            decide(&[("if-modified-since", later)]),
            Precondition::NotModified
        );
        let earlier = "Mon, 13 Nov 2023 00:00:00 GMT";
        assert_eq!(decide(&[("if-modified-since", earlier)]), PROCEED);
        assert_eq!(decide(&[("if-modified-since", "not a date")]), PROCEED);
        // A non-matching If-None-Match wins over a matching date.
        assert_eq!(
            decide(&[("if-none-match", "\"other\""), ("if-modified-since", &lm)]),
            PROCEED
        );
    }

    #[test]
    fn if_match_and_if_unmodified_since_fail_with_412() {
        let etag = validators().etag("");
        assert_eq!(decide(&[("if-match", &etag)]), PROCEED);
        assert_eq!(decide(&[("if-match", "*")]), PROCEED);
        assert_eq!(decide(&[("if-match", "\"other\"")]), Precondition::Failed);
        let weak = format!("W/{etag}");
        assert_eq!(decide(&[("if-match", &weak)]), Precondition::Failed);
        let earlier = "Mon, 13 Nov 2023 00:00:00 GMT";
        assert_eq!(
            decide(&[("if-unmodified-since", earlier)]),
            Precondition::Failed
        );
    }

    #[test]
    fn if_range_needs_the_current_validator() {
        let v = validators();
        let no_range = Precondition::Proceed {
            range_applies: false,
        };
        assert_eq!(decide(&[("if-range", &v.etag(""))]), PROCEED);
        assert_eq!(decide(&[("if-range", "\"old\"")]), no_range);
        assert_eq!(
            decide(&[("if-range", &format!("W/{}", v.etag("")))]),
            no_range
        );
        assert_eq!(decide(&[("if-range", &v.last_modified())]), PROCEED);
        assert_eq!(
            decide(&[("if-range", "Mon, 13 Nov 2023 00:00:00 GMT")]),
            no_range
        );
    }
}
