//! Recognising a WebSocket upgrade request and building the 101 answer.

use data_encoding::BASE64;
use http::header::{
    HeaderMap, HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_EXTENSIONS,
    SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use http::{Method, StatusCode, Version};
use sha1::{Digest, Sha1};

/// True when `head` asks for a WebSocket (RFC 6455 §4.2.1): GET, HTTP/1.1, `Upgrade:
/// websocket`, a `Connection` header listing `upgrade`, version 13 and a key.
pub fn is_upgrade(method: &Method, version: Version, headers: &HeaderMap) -> bool {
    method == Method::GET
        && version == Version::HTTP_11
        && header_has_token(headers, &UPGRADE, "websocket")
        && header_has_token(headers, &CONNECTION, "upgrade")
        && headers.contains_key(SEC_WEBSOCKET_KEY)
}

/// A version other than 13 gets 426 with the version we speak (RFC 6455 §4.4).
pub fn version_supported(headers: &HeaderMap) -> bool {
    headers
        .get(SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v.as_bytes().trim_ascii() == b"13")
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
    let mut headers = HeaderMap::new();
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(
        SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(&accept_key(key)).map_err(|_| InvalidSubprotocol)?,
    );
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

pub(crate) const SWITCHING: StatusCode = StatusCode::SWITCHING_PROTOCOLS;

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
        assert!(!is_upgrade(&Method::GET, Version::HTTP_11, &no_conn));
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
    fn parses_subprotocol_lists() {
        let h = headers(&[
            ("sec-websocket-protocol", "chat, superchat"),
            ("sec-websocket-protocol", "v2"),
        ]);
        assert_eq!(subprotocols(&h), vec!["chat", "superchat", "v2"]);
    }
}
