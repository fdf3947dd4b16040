//! Header checks shared by every protocol version.

use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, EXPECT, HOST, TE};
use http::Version;

pub(crate) const SERVER_NAME: HeaderValue = HeaderValue::from_static("ferrocorn");

#[derive(Debug, PartialEq, Eq)]
pub enum HeaderError {
    InvalidName,
    InvalidValue,
}

/// A response header name from the app: must be an RFC 9110 token (no CR, LF, NUL, spaces).
pub fn response_header_name(name: &[u8]) -> Result<HeaderName, HeaderError> {
    HeaderName::from_bytes(name).map_err(|_| HeaderError::InvalidName)
}

/// A response header value from the app: visible ASCII, obs-text, spaces and tabs only —
/// CR, LF and NUL are refused so an app cannot inject headers or split the response.
pub fn response_header_value(value: &[u8]) -> Result<HeaderValue, HeaderError> {
    HeaderValue::from_bytes(value).map_err(|_| HeaderError::InvalidValue)
}

/// RFC 9113 §8.2.1 and §8.5 checks the HTTP/2 layer (the h2 crate) leaves to us: a field
/// value must not start or end with whitespace, and CONNECT needs `:authority`. Such a
/// request is malformed: its stream is reset with PROTOCOL_ERROR, the app never sees it.
pub(crate) fn h2_request_is_malformed(
    method: &http::Method,
    uri: &http::Uri,
    headers: &HeaderMap,
) -> bool {
    if method == http::Method::CONNECT && uri.authority().is_none() {
        return true;
    }
    headers.values().any(|value| {
        let bytes = value.as_bytes();
        matches!(bytes.first(), Some(b' ' | b'\t')) || matches!(bytes.last(), Some(b' ' | b'\t'))
    })
}

/// RFC 9114 §4.2 and §4.3.1 checks the h3 crate leaves to us (it checks the pseudo-header
/// names, lowercase field names and the authority): a request needs `:scheme` and `:path`
/// (CONNECT: `:authority` instead), carries no connection-specific field and no `TE` but
/// "trailers", and its values obey the same whitespace rule as HTTP/2's.
pub(crate) fn h3_request_is_malformed(
    method: &http::Method,
    uri: &http::Uri,
    headers: &HeaderMap,
) -> bool {
    let incomplete = if method == http::Method::CONNECT {
        uri.authority().is_none()
    } else {
        uri.scheme().is_none()
            || !uri
                .path_and_query()
                .is_some_and(|pq| !pq.as_str().is_empty())
    };
    incomplete
        || CONNECTION_SPECIFIC
            .iter()
            .any(|name| headers.contains_key(*name))
        || headers
            .get_all(TE)
            .iter()
            .any(|value| !value.as_bytes().eq_ignore_ascii_case(b"trailers"))
        || h2_request_is_malformed(method, uri, headers)
}

/// The fields HTTP/2 and HTTP/3 forbid (RFC 9113 §8.2.2, RFC 9114 §4.2): they describe one
/// HTTP/1.1 connection.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Removes from a response what an HTTP/3 message must not carry (hyper does this for
/// HTTP/2).
pub(crate) fn strip_connection_headers(headers: &mut HeaderMap) {
    for name in CONNECTION_SPECIFIC {
        headers.remove(name);
    }
}

pub(crate) fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Whether response trailers can reach this request's client, so `http.response.trailers`
/// is advertised: always on HTTP/2 and HTTP/3; on HTTP/1.1 only when the request says `TE: trailers`
/// (RFC 9110 §10.1.4), the same test hyper's HTTP/1 server makes before it writes a
/// trailer section (a `trailers` token in any `TE` line, case-insensitive); never on
/// HTTP/1.0, which has no chunked framing to carry them.
pub(crate) fn trailers_reach_client(version: Version, headers: &HeaderMap) -> bool {
    match version {
        Version::HTTP_2 | Version::HTTP_3 => true,
        Version::HTTP_11 => headers.get_all(TE).iter().any(|value| {
            value.to_str().is_ok_and(|line| {
                line.split(',')
                    .any(|token| token.trim().eq_ignore_ascii_case("trailers"))
            })
        }),
        _ => false,
    }
}

/// HTTP/2 carries the host in the `:authority` pseudo-header, which hyper moves into the URI.
/// The ASGI spec: pseudo-headers are removed and `:authority` is added *at the start* of
/// `headers` as `host`, *replacing* any `host` the client also sent. A request without
/// `:authority` keeps its headers as they are.
pub(crate) fn add_host_from_authority(head: &mut http::request::Parts) {
    let Some(value) = head
        .uri
        .authority()
        .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    else {
        return;
    };
    let sent = std::mem::take(&mut head.headers);
    let mut headers = HeaderMap::with_capacity(sent.len() + 1);
    headers.insert(HOST, value);
    // `into_iter` names each field once, before its first value; later values of the same
    // field come with None.
    let mut name = None;
    for (next, value) in sent {
        if next.is_some() {
            name = next;
        }
        match &name {
            Some(n) if *n != HOST => {
                headers.append(n.clone(), value);
            }
            _ => {}
        }
    }
    head.headers = headers;
}

/// `Forwarded` or any `X-Forwarded-*` header. One pass over the names (requests carry few)
/// is cheaper than five hash lookups.
pub(crate) fn has_forwarding_header(headers: &http::HeaderMap) -> bool {
    headers.keys().any(|name| {
        let name = name.as_str().as_bytes();
        name == b"forwarded" || name.starts_with(b"x-forwarded-")
    })
}

/// The announced body length; Err for a value that is no length, or lengths that disagree.
pub(crate) fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ()> {
    let mut length = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        let n = value
            .to_str()
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .ok_or(())?;
        if length.is_some_and(|seen| seen != n) {
            return Err(());
        }
        length = Some(n);
    }
    Ok(length)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_lengths(values: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(CONTENT_LENGTH, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn content_length_agrees_or_is_refused() {
        assert_eq!(content_length(&with_lengths(&[])), Ok(None));
        assert_eq!(content_length(&with_lengths(&["42"])), Ok(Some(42)));
        assert_eq!(content_length(&with_lengths(&["7", "7"])), Ok(Some(7)));
        assert_eq!(content_length(&with_lengths(&["7", "8"])), Err(()));
        assert_eq!(content_length(&with_lengths(&["-1"])), Err(()));
        assert_eq!(content_length(&with_lengths(&["1e3"])), Err(()));
        assert_eq!(
            content_length(&with_lengths(&["99999999999999999999999"])),
            Err(())
        );
    }

    fn h3_malformed(method: &str, uri: &str, fields: &[(&str, &str)]) -> bool {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let method = http::Method::from_bytes(method.as_bytes()).unwrap();
        h3_request_is_malformed(&method, &uri.parse().unwrap(), &headers)
    }

    #[test]
    fn h3_requests_need_scheme_and_path_and_no_connection_fields() {
        assert!(!h3_malformed("GET", "https://example.com/a?b", &[]));
        assert!(!h3_malformed(
            "GET",
            "https://example.com/",
            &[("te", "trailers")]
        ));
        assert!(h3_malformed("GET", "//example.com/", &[]));
        assert!(h3_malformed(
            "GET",
            "https://example.com/",
            &[("connection", "close")]
        ));
        assert!(h3_malformed(
            "GET",
            "https://example.com/",
            &[("transfer-encoding", "chunked")]
        ));
        assert!(h3_malformed(
            "GET",
            "https://example.com/",
            &[("te", "gzip")]
        ));
        assert!(h3_malformed(
            "GET",
            "https://example.com/",
            &[("x-a", " padded")]
        ));
        assert!(!h3_malformed("CONNECT", "example.com:443", &[]));
    }

    #[test]
    fn strips_connection_fields_from_responses() {
        let mut headers = HeaderMap::new();
        headers.insert("connection", HeaderValue::from_static("close"));
        headers.insert("keep-alive", HeaderValue::from_static("5"));
        headers.insert("x-kept", HeaderValue::from_static("1"));
        strip_connection_headers(&mut headers);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key("x-kept"));
    }

    fn te(lines: &[&'static str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(TE, HeaderValue::from_static(line));
        }
        map
    }

    #[test]
    fn trailers_reach_http2_always_and_http11_with_te_trailers() {
        assert!(trailers_reach_client(Version::HTTP_2, &HeaderMap::new()));
        assert!(!trailers_reach_client(Version::HTTP_11, &HeaderMap::new()));
        assert!(trailers_reach_client(Version::HTTP_11, &te(&["trailers"])));
        assert!(trailers_reach_client(
            Version::HTTP_11,
            &te(&["gzip, Trailers"])
        ));
        assert!(trailers_reach_client(
            Version::HTTP_11,
            &te(&["gzip", "trailers"])
        ));
        assert!(!trailers_reach_client(Version::HTTP_11, &te(&["gzip"])));
        assert!(!trailers_reach_client(
            Version::HTTP_11,
            &te(&["trailersx"])
        ));
        assert!(!trailers_reach_client(Version::HTTP_10, &te(&["trailers"])));
    }

    fn h2_head(authority: Option<&str>, headers: &[(&str, &str)]) -> http::request::Parts {
        let uri = match authority {
            Some(a) => format!("http://{a}/p"),
            None => "/p".to_owned(),
        };
        let mut builder = http::Request::builder()
            .uri(uri)
            .version(http::Version::HTTP_2);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn pairs(head: &http::request::Parts) -> Vec<(String, String)> {
        head.headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    #[test]
    fn authority_becomes_the_first_header_and_replaces_host() {
        let mut head = h2_head(
            Some("a.example:8443"),
            &[
                ("x-one", "1"),
                ("host", "b.example"),
                ("x-two", "2"),
                ("x-one", "3"),
            ],
        );
        add_host_from_authority(&mut head);
        let expected = [
            ("host", "a.example:8443"),
            ("x-one", "1"),
            ("x-one", "3"),
            ("x-two", "2"),
        ];
        let expected: Vec<_> = expected
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(pairs(&head), expected);
    }

    #[test]
    fn without_authority_the_headers_stay() {
        let mut head = h2_head(None, &[("x-one", "1"), ("host", "b.example")]);
        add_host_from_authority(&mut head);
        let got = pairs(&head);
        assert_eq!(got.len(), 2);
        assert!(got.contains(&("host".to_owned(), "b.example".to_owned())));
    }

    fn malformed(method: &str, uri: &str, headers: &[(&str, &[u8])]) -> bool {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        let method = http::Method::from_bytes(method.as_bytes()).unwrap();
        h2_request_is_malformed(&method, &uri.parse().unwrap(), &map)
    }

    #[test]
    fn h2_values_with_surrounding_whitespace_are_malformed() {
        assert!(!malformed("GET", "/", &[("x", b"a b"), ("y", b"")]));
        assert!(malformed("GET", "/", &[("x", b" a")]));
        assert!(malformed("GET", "/", &[("x", b"a\t")]));
        assert!(malformed("GET", "/", &[("ok", b"v"), ("x", b"\tv")]));
    }

    #[test]
    fn h2_connect_needs_an_authority() {
        assert!(malformed("CONNECT", "/", &[]));
        assert!(!malformed("CONNECT", "example.com:443", &[]));
        assert!(!malformed("GET", "/", &[]));
    }

    #[test]
    fn host_comes_from_the_authority() {
        let (mut head, ()) = http::Request::get("https://example.com:8443/x")
            .body(())
            .unwrap()
            .into_parts();
        add_host_from_authority(&mut head);
        assert_eq!(head.headers[HOST], "example.com:8443");
        let (mut head, ()) = http::Request::get("https://example.com/x")
            .header(HOST, "other")
            .body(())
            .unwrap()
            .into_parts();
        add_host_from_authority(&mut head);
        assert_eq!(head.headers[HOST], "example.com");
        assert_eq!(head.headers.get_all(HOST).iter().count(), 1);
        let (mut head, ()) = http::Request::get("/x").body(()).unwrap().into_parts();
        add_host_from_authority(&mut head);
        assert!(!head.headers.contains_key(HOST));
    }

    #[test]
    fn names_must_be_tokens() {
        assert!(response_header_name(b"x-ok").is_ok());
        assert_eq!(
            response_header_name(b"X-Upper").unwrap().as_str(),
            "x-upper"
        );
        for bad in [&b"bad name"[..], b"bad\r\nname", b"nul\0", b"", b"colon:"] {
            assert_eq!(
                response_header_name(bad),
                Err(HeaderError::InvalidName),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn values_refuse_injection() {
        assert!(response_header_value(b"text/plain; charset=utf-8").is_ok());
        assert!(response_header_value(b"tab\tok").is_ok());
        for bad in [&b"a\r\nSet-Cookie: x"[..], b"a\nb", b"a\rb", b"nul\0"] {
            assert_eq!(
                response_header_value(bad),
                Err(HeaderError::InvalidValue),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn expect_continue_is_case_insensitive() {
        let mut h = HeaderMap::new();
        assert!(!expects_continue(&h));
        h.insert(EXPECT, HeaderValue::from_static("100-Continue"));
        assert!(expects_continue(&h));
    }
}
