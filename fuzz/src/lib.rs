//! The checks behind the fuzz targets, shared with the stable-Rust smoke test
//! (`tests/corpus_smoke.rs`), which feeds the committed corpus through the same functions.
//!
//! Each `check_*` function takes arbitrary bytes, calls the server's functions with them and
//! asserts properties of the results (a panic is a finding).

use _ferrocorn::fuzzing::{
    accept_headers, is_upgrade, negotiate, response_header_name, response_header_value,
    subprotocols, version_supported, DeflateParams, Incoming, Inflater, WsReader,
};
use http::header::{HeaderMap, HeaderName, HeaderValue, SEC_WEBSOCKET_KEY};
use http::{Method, Version};
use percent_encoding::percent_decode;

/// Response header name and value from an app (`http.response.start` headers).
///
/// Layout: byte 0 is the split point (modulo the length) between the name and the value.
pub fn check_response_header(data: &[u8]) {
    let (name, value) = match data.split_first() {
        Some((&split, rest)) => rest.split_at((split as usize).min(rest.len())),
        None => (&[][..], &[][..]),
    };
    if let Ok(n) = response_header_name(name) {
        let s = n.as_str();
        assert!(!s.is_empty());
        assert!(s.eq_ignore_ascii_case(std::str::from_utf8(name).unwrap()));
        assert!(!s.bytes().any(|b| b <= b' ' || b == b':' || b >= 0x7f), "{s:?}");
    }
    if let Ok(v) = response_header_value(value) {
        assert_eq!(v.as_bytes(), value);
        assert!(!value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0), "{value:?}");
    } else {
        // Refused values must contain a control byte other than HTAB (or DEL).
        assert!(value.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f), "{value:?}");
    }
}

/// Builds a header map from `name:value` lines (lines that are not valid headers are skipped).
pub fn header_map(data: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for line in data.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    headers
}

/// WebSocket upgrade recognition, offered subprotocols and the 101 answer's headers.
///
/// Layout: byte 0 picks the method and version, the rest is `name:value` header lines; the
/// subprotocol the "app" chooses is one of the offered ones, or the last line's raw bytes.
pub fn check_ws_handshake(data: &[u8]) {
    let (sel, rest) = match data.split_first() {
        Some((&b, rest)) => (b, rest),
        None => (0, data),
    };
    let method = [Method::GET, Method::POST, Method::CONNECT, Method::HEAD][(sel & 3) as usize]
        .clone();
    let version = [Version::HTTP_11, Version::HTTP_10, Version::HTTP_2, Version::HTTP_09]
        [((sel >> 2) & 3) as usize];
    let headers = header_map(rest);
    let upgrade = is_upgrade(&method, version, &headers);
    if upgrade {
        assert!(method == Method::GET && version == Version::HTTP_11);
        assert!(headers.contains_key(SEC_WEBSOCKET_KEY));
    }
    let _ = version_supported(&headers);
    let offered = subprotocols(&headers);
    for p in &offered {
        assert!(!p.is_empty() && !p.contains(',') && p.trim() == p, "{p:?}");
    }
    let key = headers.get(SEC_WEBSOCKET_KEY).map(|v| v.as_bytes()).unwrap_or(rest);
    let last_line = rest.rsplit(|&b| b == b'\n').next().unwrap_or(&[]);
    let raw_choice = String::from_utf8_lossy(last_line).into_owned();
    let choice: Option<&str> = match (sel >> 4) & 3 {
        0 => None,
        1 => offered.first().map(String::as_str),
        2 => offered.last().map(String::as_str),
        _ => Some(raw_choice.as_str()),
    };
    let deflate = negotiate(&headers);
    if let Some(params) = &deflate {
        assert!(params.server_max_window_bits.is_none_or(|b| (8..=15).contains(&b)));
    }
    let extensions = deflate.as_ref().map(DeflateParams::response_header);
    match accept_headers(key, choice, extensions.as_deref()) {
        Ok(h) => {
            assert_eq!(h.get("upgrade").unwrap(), "websocket");
            match &extensions {
                Some(e) => {
                    assert!(e.starts_with("permessage-deflate"));
                    assert_eq!(h.get("sec-websocket-extensions").unwrap(), e.as_str());
                }
                None => assert!(h.get("sec-websocket-extensions").is_none()),
            }
            let accept = h.get("sec-websocket-accept").unwrap().as_bytes();
            assert_eq!(accept.len(), 28, "base64 of a SHA-1");
            match choice {
                Some(p) => assert_eq!(h.get("sec-websocket-protocol").unwrap().as_bytes(),
                                      p.as_bytes()),
                None => assert!(h.get("sec-websocket-protocol").is_none()),
            }
        }
        Err(_) => {
            // Only an app-chosen subprotocol that is not a valid header value may be refused.
            let p = choice.expect("accept_headers refused without a subprotocol");
            assert!(HeaderValue::from_str(p).is_err(), "{p:?} refused");
        }
    }
}

/// Client bytes after the handshake, through the WebSocket frame reader.
///
/// Layout: byte 0 picks permessage-deflate on/off (bit 0), a small or large --ws-max-size
/// (bit 1) and how many bytes arrive per read (bits 2-7); the rest is the client's stream.
/// The reader must never panic, must stop at the first violation with a close code we send,
/// and what it delivers must respect the size limit and (for text) be UTF-8.
pub fn check_ws_frames(data: &[u8]) {
    let (sel, rest) = match data.split_first() {
        Some((&b, rest)) => (b, rest),
        None => (0, data),
    };
    let inflater = (sel & 1 != 0).then(|| Inflater::new(&DeflateParams::default()));
    let max_size = if sel & 2 != 0 { 1 << 20 } else { 64 };
    let step = usize::from(sel >> 2) + 1;
    let mut reader = WsReader::new(max_size, inflater);
    for piece in rest.chunks(step) {
        reader.feed(piece);
        loop {
            match reader.next_buffered() {
                Ok(None) => break,
                Ok(Some(Incoming::Text(t))) => {
                    assert!(t.len() <= max_size);
                    assert!(std::str::from_utf8(&t).is_ok());
                }
                Ok(Some(Incoming::Binary(b))) => assert!(b.len() <= max_size),
                Ok(Some(Incoming::BinaryMasked(m))) => assert!(m.len() <= max_size),
                Ok(Some(Incoming::Ping(p) | Incoming::Pong(p))) => assert!(p.len() <= 125),
                Ok(Some(Incoming::Close(Some((code, reason))))) => {
                    assert!(_ferrocorn::fuzzing::close_code_allowed(code));
                    assert!(reason.len() <= 123);
                }
                Ok(Some(Incoming::Close(None))) => {}
                Err(v) => {
                    assert!([1002, 1007, 1009].contains(&v.code), "{v:?}");
                    return;
                }
            }
        }
    }
}

/// Percent-decoding of the request path, exactly as `src/asgi/scope.rs` builds `scope["path"]`.
pub fn decode_path(raw: &[u8]) -> String {
    percent_decode(raw).decode_utf8_lossy().into_owned()
}

pub fn check_path_decode(data: &[u8]) {
    let decoded = decode_path(data);
    if !data.contains(&b'%') {
        assert_eq!(decoded, String::from_utf8_lossy(data));
    }
    if let Ok(s) = std::str::from_utf8(data) {
        // Decoding never makes a valid string longer.
        assert!(decoded.len() <= s.len() + 2 * s.matches('%').count() * 3);
    }
    // Decoding the percent-encoded form of the output gives the output back.
    let reencoded =
        percent_encoding::utf8_percent_encode(&decoded, percent_encoding::NON_ALPHANUMERIC)
            .to_string();
    assert_eq!(decode_path(reencoded.as_bytes()), decoded);
}
