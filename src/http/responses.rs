//! The responses the server itself makes (400, 413, 500, 503, ...) and the headers every
//! response gets (`Server`, `--header`). Generic over the body type: the bridge's
//! `ResponseBody` wraps the text.

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_TYPE, SERVER};
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::config::ServerConfig;

/// A response with `Server` and the `--header` values added.
pub(crate) fn build_response<B>(
    config: &ServerConfig,
    status: StatusCode,
    mut headers: HeaderMap,
    body: B,
) -> http::Response<B> {
    if config.server_header && !headers.contains_key(SERVER) {
        headers.insert(SERVER, crate::http::headers::SERVER_NAME);
    }
    for (name, value) in &config.extra_headers {
        headers.append(name.clone(), value.clone());
    }
    let mut response = http::Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// A plain-text error response the server makes itself; the body is the reason phrase
/// (the caller wraps it, e.g. `.map(|text| ResponseBody::full(text, guard))`). The connection
/// closes after it.
pub(crate) fn error_response(config: &ServerConfig, status: StatusCode) -> http::Response<Bytes> {
    // RFC 9110 renamed 413; the http crate still has the RFC 7231 name.
    let renamed = (status == StatusCode::PAYLOAD_TOO_LARGE).then_some("Content Too Large");
    let text = renamed.or(status.canonical_reason()).unwrap_or("Error");
    let mut headers = HeaderMap::new();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    let mut response = build_response(config, status, headers, Bytes::from_static(text.as_bytes()));
    if let Some(reason) = renamed {
        // The HTTP/1 status line's reason phrase (HTTP/2 has none).
        response
            .extensions_mut()
            .insert(hyper::ext::ReasonPhrase::from_static(reason.as_bytes()));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_responses_close_and_name_the_status() {
        let config = ServerConfig::default();
        let response = error_response(&config, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(response.body().as_ref(), b"Content Too Large");
        assert_eq!(response.headers()[CONNECTION], "close");
        assert!(response
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .is_some());
        let response = error_response(&config, StatusCode::BAD_REQUEST);
        assert_eq!(response.body().as_ref(), b"Bad Request");
        assert!(response
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .is_none());
    }
}
