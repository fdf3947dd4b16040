//! Recognising a WebSocket handshake — an HTTP/1.1 upgrade (RFC 6455) or an HTTP/2 extended
//! CONNECT (RFC 8441) — and building its answer: the 101, or HTTP/2's 200.

use data_encoding::BASE64;
use http::header::{
    HeaderMap, HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_EXTENSIONS,
    SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use http::{Method, StatusCode, Version};
use sha1::{Digest, Sha1};

/// `Upgrade: websocket` with a `Connection` header listing `upgrade`: the client asks for a
/// WebSocket. Whether it may have one is `check_handshake`'s answer.
pub(crate) fn asks_for_websocket(headers: &HeaderMap) -> bool {
    header_has_token(headers, &UPGRADE, "websocket")
        && header_has_token(headers, &CONNECTION, "upgrade")
}

/// An HTTP/1.x request that asks for a WebSocket by upgrade. Over HTTP/2 and 3 those fields
/// mean nothing (a WebSocket is an extended CONNECT there, `asks_for_websocket_over_h2`).
pub(crate) fn asks_for_http1_upgrade(version: Version, headers: &HeaderMap) -> bool {
    version <= Version::HTTP_11 && asks_for_websocket(headers)
}

/// RFC 8441 §4: an HTTP/2 extended CONNECT whose `:protocol` is `websocket` (an upgrade
/// token, compared case-insensitively as `Upgrade` values are) asks for a WebSocket.
pub(crate) fn asks_for_websocket_over_h2(method: &Method, protocol: Option<&str>) -> bool {
    method == Method::CONNECT && protocol.is_some_and(|p| p.eq_ignore_ascii_case("websocket"))
}

/// Why a request that asks for a WebSocket cannot have one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not an HTTP/1.1 (or later) GET, or no valid `Sec-WebSocket-Key`: 400.
    BadRequest(&'static str),
    /// A `Sec-WebSocket-Version` other than 13: 426 with the version we speak (§4.4).
    UnsupportedVersion,
}

impl Refusal {
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Refusal::BadRequest(_) => StatusCode::BAD_REQUEST,
            Refusal::UnsupportedVersion => StatusCode::UPGRADE_REQUIRED,
        }
    }

    /// For the log line.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::BadRequest(why) => why,
            Refusal::UnsupportedVersion => "Sec-WebSocket-Version is not 13",
        }
    }
}

/// RFC 6455 §4.2.1, for a request that asks for a WebSocket: a GET of HTTP/1.1, one
/// `Sec-WebSocket-Key` that is base64 of 16 bytes, and `Sec-WebSocket-Version: 13`. Over
/// HTTP/2 and 3 (RFC 8441 §5, RFC 9220 §3) the extended CONNECT replaces the GET and the key, so only the
/// version is checked.
pub(crate) fn check_handshake(
    method: &Method,
    version: Version,
    headers: &HeaderMap,
) -> Result<(), Refusal> {
    if version >= Version::HTTP_2 && method == Method::CONNECT {
        return if version_supported(headers) {
            Ok(())
        } else {
            Err(Refusal::UnsupportedVersion)
        };
    }
    if method != Method::GET {
        return Err(Refusal::BadRequest("a WebSocket handshake must be a GET"));
    }
    if version != Version::HTTP_11 {
        return Err(Refusal::BadRequest("a WebSocket handshake needs HTTP/1.1"));
    }
    let mut keys = headers.get_all(SEC_WEBSOCKET_KEY).iter();
    let valid_key = match (keys.next(), keys.next()) {
        (Some(key), None) => key_is_valid(key.as_bytes()),
        _ => false,
    };
    if !valid_key {
        return Err(Refusal::BadRequest(
            "Sec-WebSocket-Key is missing, repeated or not base64 of 16 bytes",
        ));
    }
    if !version_supported(headers) {
        return Err(Refusal::UnsupportedVersion);
    }
    Ok(())
}

/// A nonce of 16 bytes, base64-encoded (24 characters with padding).
fn key_is_valid(key: &[u8]) -> bool {
    BASE64
        .decode(key.trim_ascii())
        .is_ok_and(|nonce| nonce.len() == 16)
}

/// True when `head` asks for a WebSocket and may have one (RFC 6455 §4.2.1).
pub fn is_upgrade(method: &Method, version: Version, headers: &HeaderMap) -> bool {
    asks_for_http1_upgrade(version, headers) && check_handshake(method, version, headers).is_ok()
}

/// The fields of the `101` answer that the handshake itself sets: an app's own values for
/// them (in `websocket.accept` headers) are dropped, since they would contradict what the
/// server negotiated (the subprotocol is chosen through `websocket.accept`'s `subprotocol`).
pub(crate) fn is_handshake_field(name: &http::HeaderName) -> bool {
    [
        UPGRADE,
        CONNECTION,
        SEC_WEBSOCKET_ACCEPT,
        SEC_WEBSOCKET_EXTENSIONS,
        SEC_WEBSOCKET_PROTOCOL,
    ]
    .contains(name)
}

/// A version other than 13 gets 426 with the version we speak (RFC 6455 §4.4).
pub fn version_supported(headers: &HeaderMap) -> bool {
    let mut versions = headers.get_all(SEC_WEBSOCKET_VERSION).iter();
    match (versions.next(), versions.next()) {
        (Some(v), None) => v.as_bytes().trim_ascii() == b"13",
        _ => false,
    }
}

fn header_has_token(headers: &HeaderMap, name: &http::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|value| {
        value
            .as_bytes()
            .split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// The subprotocols the client offered, in order.
pub fn subprotocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// RFC 6455 §4.2.2: `Sec-WebSocket-Accept` is base64(SHA-1(key + this GUID)).
const ACCEPT_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

pub(crate) fn accept_key(key: &[u8]) -> String {
    let mut sha1 = Sha1::new();
    sha1.update(key);
    sha1.update(ACCEPT_GUID);
    BASE64.encode(&sha1.finalize())
}

/// The subprotocol the app chose is not a valid header value.
#[derive(Debug)]
pub struct InvalidSubprotocol;

/// The headers of the `101 Switching Protocols` answer, before the app's extra headers;
/// `extensions` is our `Sec-WebSocket-Extensions` answer, if an extension was agreed.
pub fn accept_headers(
    key: &[u8],
    subprotocol: Option<&str>,
    extensions: Option<&str>,
) -> Result<HeaderMap, InvalidSubprotocol> {
    let mut headers = negotiated_headers(subprotocol, extensions)?;
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(
        SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(&accept_key(key)).map_err(|_| InvalidSubprotocol)?,
    );
    Ok(headers)
}

/// What both handshakes answer with: the chosen subprotocol and the agreed extensions. On
/// its own it is the header set of HTTP/2's `200` (RFC 8441 §5: no key, no upgrade).
pub(crate) fn negotiated_headers(
    subprotocol: Option<&str>,
    extensions: Option<&str>,
) -> Result<HeaderMap, InvalidSubprotocol> {
    let mut headers = HeaderMap::new();
    if let Some(protocol) = subprotocol {
        headers.insert(
            SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_str(protocol).map_err(|_| InvalidSubprotocol)?,
        );
    }
    if let Some(extensions) = extensions {
        headers.insert(
            SEC_WEBSOCKET_EXTENSIONS,
            HeaderValue::from_str(extensions).map_err(|_| InvalidSubprotocol)?,
        );
    }
    Ok(headers)
}

/// The status that accepts a handshake: `101` over HTTP/1.1, a `200` on an HTTP/2 or 3 extended
/// CONNECT's stream (RFC 8441 §5).
pub(crate) fn accept_status(version: Version) -> StatusCode {
    if version >= Version::HTTP_2 {
        StatusCode::OK
    } else {
        StatusCode::SWITCHING_PROTOCOLS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn recognises_upgrades() {
        let h = headers(&[
            ("upgrade", "WebSocket"),
            ("connection", "keep-alive, Upgrade"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-version", "13"),
        ]);
        assert!(is_upgrade(&Method::GET, Version::HTTP_11, &h));
        assert!(version_supported(&h));
        assert!(!is_upgrade(&Method::POST, Version::HTTP_11, &h));
        assert!(!is_upgrade(&Method::GET, Version::HTTP_10, &h));
        let no_conn = headers(&[("upgrade", "websocket"), ("sec-websocket-key", "x")]);
        assert!(!asks_for_websocket(&no_conn));
        assert!(!is_upgrade(&Method::GET, Version::HTTP_11, &no_conn));
        // the fields mean nothing over HTTP/2, even on an extended CONNECT (fuzz finding)
        assert!(!is_upgrade(&Method::CONNECT, Version::HTTP_2, &h));
        assert!(!is_upgrade(&Method::GET, Version::HTTP_2, &h));
    }

    fn handshake(method: Method, version: Version, extra: &[(&str, &str)]) -> Result<(), Refusal> {
        let mut pairs = vec![("upgrade", "websocket"), ("connection", "Upgrade")];
        pairs.extend_from_slice(extra);
        let h = headers(&pairs);
        assert!(asks_for_websocket(&h));
        check_handshake(&method, version, &h)
    }

    const KEY: (&str, &str) = ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
    const V13: (&str, &str) = ("sec-websocket-version", "13");

    #[test]
    fn handshake_rules_of_rfc_6455_4_2_1() {
        assert_eq!(
            handshake(Method::GET, Version::HTTP_11, &[KEY, V13]),
            Ok(())
        );
        let bad = |r: Result<(), Refusal>| r.map_err(|e| e.status());
        assert_eq!(
            bad(handshake(Method::POST, Version::HTTP_11, &[KEY, V13])),
            Err(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            bad(handshake(Method::GET, Version::HTTP_10, &[KEY, V13])),
            Err(StatusCode::BAD_REQUEST)
        );
        // Missing, not base64, the wrong length, repeated.
        for keys in [
            &[][..],
            &[("sec-websocket-key", "not base64!")],
            &[("sec-websocket-key", "dGhlIHNhbXBsZQ==")],
            &[KEY, KEY],
        ] {
            let mut extra = keys.to_vec();
            extra.push(V13);
            assert_eq!(
                bad(handshake(Method::GET, Version::HTTP_11, &extra)),
                Err(StatusCode::BAD_REQUEST),
                "{keys:?}"
            );
        }
        for version in [&[][..], &[("sec-websocket-version", "8")], &[V13, V13]] {
            let mut extra = vec![KEY];
            extra.extend_from_slice(version);
            assert_eq!(
                handshake(Method::GET, Version::HTTP_11, &extra),
                Err(Refusal::UnsupportedVersion),
                "{version:?}"
            );
        }
    }

    #[test]
    fn extended_connect_rules_of_rfc_8441() {
        assert!(asks_for_websocket_over_h2(
            &Method::CONNECT,
            Some("websocket")
        ));
        assert!(asks_for_websocket_over_h2(
            &Method::CONNECT,
            Some("WebSocket")
        ));
        assert!(!asks_for_websocket_over_h2(&Method::CONNECT, None));
        assert!(!asks_for_websocket_over_h2(
            &Method::CONNECT,
            Some("webtransport")
        ));
        assert!(!asks_for_websocket_over_h2(&Method::GET, Some("websocket")));
        // No key needed, the version still is: 426 naming 13 otherwise.
        let connect = |pairs: &[(&str, &str)]| {
            check_handshake(&Method::CONNECT, Version::HTTP_2, &headers(pairs))
        };
        assert_eq!(connect(&[V13]), Ok(()));
        for version in [&[][..], &[("sec-websocket-version", "8")], &[V13, V13]] {
            assert_eq!(
                connect(version),
                Err(Refusal::UnsupportedVersion),
                "{version:?}"
            );
        }
        // A GET over HTTP/2 is not a handshake of either kind.
        assert!(check_handshake(&Method::GET, Version::HTTP_2, &headers(&[KEY, V13])).is_err());
        assert_eq!(accept_status(Version::HTTP_2), StatusCode::OK);
        assert_eq!(
            accept_status(Version::HTTP_11),
            StatusCode::SWITCHING_PROTOCOLS
        );
        // HTTP/3 (RFC 9220): HTTP/2's rules.
        let h3 = |pairs: &[(&str, &str)]| {
            check_handshake(&Method::CONNECT, Version::HTTP_3, &headers(pairs))
        };
        assert_eq!(h3(&[V13]), Ok(()));
        assert_eq!(h3(&[]), Err(Refusal::UnsupportedVersion));
        assert_eq!(accept_status(Version::HTTP_3), StatusCode::OK);
    }

    #[test]
    fn the_h2_answer_has_no_upgrade_fields() {
        let h = negotiated_headers(Some("chat"), Some("permessage-deflate")).unwrap();
        assert_eq!(h[SEC_WEBSOCKET_PROTOCOL], "chat");
        assert_eq!(h[SEC_WEBSOCKET_EXTENSIONS], "permessage-deflate");
        for name in [UPGRADE, CONNECTION, SEC_WEBSOCKET_ACCEPT] {
            assert!(!h.contains_key(&name), "{name}");
        }
        assert!(negotiated_headers(Some("bad\r\nvalue"), None).is_err());
    }

    #[test]
    fn accept_key_matches_rfc_example() {
        let h = accept_headers(b"dGhlIHNhbXBsZSBub25jZQ==", Some("chat"), None).unwrap();
        assert_eq!(h[SEC_WEBSOCKET_ACCEPT], "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!(h[SEC_WEBSOCKET_PROTOCOL], "chat");
        assert!(!h.contains_key(SEC_WEBSOCKET_EXTENSIONS));
        let h = accept_headers(b"x", None, Some("permessage-deflate")).unwrap();
        assert_eq!(h[SEC_WEBSOCKET_EXTENSIONS], "permessage-deflate");
        assert!(!h.contains_key(SEC_WEBSOCKET_PROTOCOL));
    }

    #[test]
    fn only_the_handshake_fields_are_reserved() {
        for name in [
            "upgrade",
            "connection",
            "sec-websocket-accept",
            "sec-websocket-protocol",
        ] {
            assert!(
                is_handshake_field(&http::HeaderName::from_static(name)),
                "{name}"
            );
        }
        assert!(is_handshake_field(&SEC_WEBSOCKET_EXTENSIONS));
        for name in [
            "set-cookie",
            "server",
            "x-anything",
            "sec-websocket-version",
        ] {
            assert!(
                !is_handshake_field(&http::HeaderName::from_static(name)),
                "{name}"
            );
        }
    }

    #[test]
    fn parses_subprotocol_lists() {
        let h = headers(&[
            ("sec-websocket-protocol", "chat, superchat"),
            ("sec-websocket-protocol", "v2"),
        ]);
        assert_eq!(subprotocols(&h), vec!["chat", "superchat", "v2"]);
    }
}
