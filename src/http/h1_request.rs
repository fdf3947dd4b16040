//! HTTP/1.x request-head checks that hyper's parser leaves to us (RFC 9112).
//!
//! hyper already refuses what breaks framing (conflicting Content-Length, a Transfer-Encoding
//! that does not end in chunked, Transfer-Encoding in HTTP/1.0) and closes the connection after
//! a request that had both Content-Length and Transfer-Encoding. What it lets through, and the
//! RFC does not: a missing, repeated or invalid Host (§3.2, a MUST), a request-target of none
//! of the four forms (§3.2: `GET !`, authority-form outside CONNECT, `*` outside OPTIONS), an
//! absolute-form whose authority is no valid host (§3.2.2: it, not Host, names the host),
//! chunked applied twice (§6.1: a 400, as the framing is no longer certain), and transfer
//! codings other than chunked, which it would hand to the app still applied (§6.1, 501).

use http::header::{HeaderMap, HOST, TRANSFER_ENCODING};
use http::{Method, StatusCode, Uri, Version};

/// Why a request head is refused, with the status to answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeadProblem {
    MissingHost,
    RepeatedHost,
    InvalidHost,
    InvalidTarget,
    ChunkedTwice,
    UnsupportedTransferCoding,
}

impl HeadProblem {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            HeadProblem::UnsupportedTransferCoding => StatusCode::NOT_IMPLEMENTED,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// The first problem with an HTTP/1.x request head, if any. `length_known`: the body has a
/// Content-Length (or none at all), so there is no Transfer-Encoding to look at.
pub(crate) fn check_head(
    version: Version,
    method: &Method,
    target: &Uri,
    headers: &HeaderMap,
    length_known: bool,
) -> Option<HeadProblem> {
    if let Some(problem) = check_target(method, target) {
        return Some(problem);
    }
    let mut hosts = headers.get_all(HOST).iter();
    match (hosts.next(), hosts.next()) {
        // Only HTTP/1.1 requires one: an HTTP/1.0 client may leave it out.
        (None, _) if version == Version::HTTP_11 => return Some(HeadProblem::MissingHost),
        (None, _) => {}
        (Some(_), Some(_)) => return Some(HeadProblem::RepeatedHost),
        (Some(host), None) => {
            if !is_valid_host(host.as_bytes()) {
                return Some(HeadProblem::InvalidHost);
            }
        }
    }
    if length_known {
        return None;
    }
    // Every coding of every Transfer-Encoding field, in order (empty list elements skipped).
    let codings = || {
        headers.get_all(TRANSFER_ENCODING).iter().flat_map(|value| {
            value
                .as_bytes()
                .split(|&b| b == b',')
                .map(<[u8]>::trim_ascii)
                .filter(|coding| !coding.is_empty())
        })
    };
    let is_chunked = |coding: &[u8]| coding.eq_ignore_ascii_case(b"chunked");
    if codings().filter(|c| is_chunked(c)).count() > 1 {
        return Some(HeadProblem::ChunkedTwice);
    }
    codings()
        .any(|c| !is_chunked(c))
        .then_some(HeadProblem::UnsupportedTransferCoding)
}

/// RFC 9112 §3.2's four forms, as the http crate parsed the target: origin-form (a path from
/// `/`), absolute-form (a scheme; its authority must be a valid host, with no userinfo, as it
/// replaces Host), authority-form (an authority alone: CONNECT only) and asterisk-form
/// (OPTIONS only). Anything else (`!`, which parses as an authority) names no resource.
fn check_target(method: &Method, target: &Uri) -> Option<HeadProblem> {
    let valid = if target.scheme().is_some() {
        target
            .authority()
            .is_some_and(|a| !a.host().is_empty() && is_valid_host(a.as_str().as_bytes()))
    } else if target.authority().is_some() {
        method == Method::CONNECT
    } else if target.path() == "*" {
        method == Method::OPTIONS
    } else {
        target.path().starts_with('/')
    };
    (!valid).then_some(HeadProblem::InvalidTarget)
}

/// reg-name characters (RFC 3986 §3.2.2: unreserved, pct-encoded's `%`, sub-delims).
const REG_NAME: [bool; 256] = byte_set(b"-._~%!$&'()*+,;=");
/// What may stand inside an IP-literal's brackets, loosely: IPv6 and IPvFuture characters.
const IP_LITERAL: [bool; 256] = byte_set(b":.-_~!$&'()*+,;=");

/// ASCII letters and digits plus `extra`.
const fn byte_set(extra: &[u8]) -> [bool; 256] {
    let mut set = [false; 256];
    let mut b = 0;
    while b < 256 {
        set[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let mut i = 0;
    while i < extra.len() {
        set[extra[i] as usize] = true;
        i += 1;
    }
    set
}

/// `Host = uri-host [ ":" port ]` (RFC 9110 §7.2, RFC 3986 §3.2.2); empty is allowed (a target
/// URI without an authority). No userinfo, no spaces, a port of digits only.
fn is_valid_host(value: &[u8]) -> bool {
    let (host, port) = if let Some(rest) = value.strip_prefix(b"[") {
        // IP-literal: what is inside the brackets is checked loosely (hex, dots, colons and
        // the IPvFuture characters), the brackets and the port strictly.
        let Some(end) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let inside = &rest[..end];
        let literal_ok = !inside.is_empty() && inside.iter().all(|&b| IP_LITERAL[b as usize]);
        if !literal_ok {
            return false;
        }
        match &rest[end + 1..] {
            [] => (&b""[..], None),
            [b':', port @ ..] => (&b""[..], Some(port)),
            _ => return false,
        }
    } else {
        match value.iter().rposition(|&b| b == b':') {
            Some(colon) => (&value[..colon], Some(&value[colon + 1..])),
            None => (value, None),
        }
    };
    let reg_name_ok = host.iter().all(|&b| REG_NAME[b as usize]);
    let port_ok = port.map_or(true, |p| p.iter().all(u8::is_ascii_digit));
    reg_name_ok && port_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn check_head(
        version: Version,
        headers: &HeaderMap,
        length_known: bool,
    ) -> Option<HeadProblem> {
        super::check_head(
            version,
            &Method::GET,
            &Uri::from_static("/"),
            headers,
            length_known,
        )
    }

    fn target(method: &str, target: &str) -> Option<HeadProblem> {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        check_target(&method, &target.parse().unwrap())
    }

    #[test]
    fn targets_of_the_four_forms_only() {
        for (method, good) in [
            ("GET", "/"),
            ("GET", "/a?b=c"),
            ("GET", "http://example.com:8080/p?q"),
            ("GET", "http://example.com"),
            ("GET", "https://[::1]:8443/"),
            ("CONNECT", "example.com:443"),
            ("OPTIONS", "*"),
        ] {
            assert_eq!(target(method, good), None, "{method} {good}");
        }
        for (method, bad) in [
            ("GET", "!"),
            ("GET", "example.com:443"),
            ("POST", "example.com"),
            ("GET", "*"),
            ("GET", "http://user@example.com/"),
        ] {
            assert_eq!(
                target(method, bad),
                Some(HeadProblem::InvalidTarget),
                "{method} {bad}"
            );
        }
        assert_eq!(HeadProblem::InvalidTarget.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn chunked_applied_twice_is_refused() {
        let v11 = Version::HTTP_11;
        for fields in [
            &[&b"chunked, chunked"[..]][..],
            &[b"chunked", b"chunked"],
            &[b"chunked,Chunked"],
            &[b"gzip, chunked", b"chunked"],
        ] {
            let mut map = head(&[("host", b"a")]);
            for value in fields {
                map.append(TRANSFER_ENCODING, HeaderValue::from_bytes(value).unwrap());
            }
            assert_eq!(
                check_head(v11, &map, false),
                Some(HeadProblem::ChunkedTwice),
                "{fields:?}"
            );
        }
        let mut map = head(&[("host", b"a")]);
        map.append(TRANSFER_ENCODING, HeaderValue::from_static("chunked, "));
        assert_eq!(check_head(v11, &map, false), None);
        assert_eq!(HeadProblem::ChunkedTwice.status(), StatusCode::BAD_REQUEST);
    }

    fn head(headers: &[(&str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn http11_needs_exactly_one_host() {
        let v11 = Version::HTTP_11;
        assert_eq!(
            check_head(v11, &head(&[]), true),
            Some(HeadProblem::MissingHost)
        );
        assert_eq!(check_head(v11, &head(&[("host", b"a")]), true), None);
        assert_eq!(
            check_head(v11, &head(&[("host", b"a"), ("host", b"a")]), true),
            Some(HeadProblem::RepeatedHost)
        );
        // HTTP/1.0 may leave it out, but not repeat it.
        assert_eq!(check_head(Version::HTTP_10, &head(&[]), true), None);
        assert_eq!(
            check_head(
                Version::HTTP_10,
                &head(&[("host", b"a"), ("host", b"b")]),
                true
            ),
            Some(HeadProblem::RepeatedHost)
        );
    }

    #[test]
    fn host_values() {
        for good in [
            &b""[..],
            b"example.com",
            b"example.com:8000",
            b"example.com:",
            b"127.0.0.1:80",
            b"[::1]",
            b"[::1]:8000",
            b"[v1.fe80::a+en1]",
            b"xn--bcher-kva.example",
            b"a%20b",
            b"localhost",
        ] {
            assert!(is_valid_host(good), "{:?}", String::from_utf8_lossy(good));
        }
        for bad in [
            &b"a b"[..],
            b"user@example.com",
            b"example.com:80x",
            b"example.com:80:90",
            b"[::1",
            b"[]",
            b"[::1]x",
            b"[::1]:8o",
            b"exa/mple",
            b"a\tb",
        ] {
            assert!(!is_valid_host(bad), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn only_chunked_is_a_supported_transfer_coding() {
        let v11 = Version::HTTP_11;
        let with_te = |te: &'static [u8]| head(&[("host", b"a"), ("transfer-encoding", te)]);
        assert_eq!(check_head(v11, &with_te(b"chunked"), false), None);
        assert_eq!(check_head(v11, &with_te(b"Chunked"), false), None);
        for te in [
            &b"gzip, chunked"[..],
            b"deflate,chunked",
            b"x-custom, chunked",
        ] {
            assert_eq!(
                check_head(v11, &with_te(te), false),
                Some(HeadProblem::UnsupportedTransferCoding),
                "{te:?}"
            );
        }
        assert_eq!(
            HeadProblem::UnsupportedTransferCoding.status(),
            StatusCode::NOT_IMPLEMENTED
        );
        assert_eq!(HeadProblem::InvalidHost.status(), StatusCode::BAD_REQUEST);
    }
}
