//! The static route (`--static-path-route` / `--static-path-mount`): requests under a route
//! prefix are answered from the mount by the core, before anything is queued for the loop
//! thread, so neither the app nor the loop is involved (the loop only hears of the response
//! for its access line and metrics, `Event::Served`).
//!
//! The rules are `http/static_files/`; the file-system work is `lookup`'s, on tokio's
//! blocking pool; a large file streams through the bridge's `FileBody`; a small one served
//! before may come from `cache` (checked with a `stat` per path, on this thread).

mod cache;
mod lookup;

pub(crate) use cache::StaticCache;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{
    ACCEPT_ENCODING, ACCEPT_RANGES, ALLOW, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH,
    CONTENT_RANGE, CONTENT_TYPE, ETAG, LAST_MODIFIED, LOCATION, VARY,
};
use http::{request, HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body::Body;

use crate::access_log::json::RequestFields;
use crate::bridge::{Event, FileSource, ResponseBody, Served};
use crate::config::{ServerConfig, StaticFiles, StaticRoute};
use crate::http::responses::build_response;
use crate::http::static_files::encoding::preferred;
use crate::http::static_files::path::resolve;
use crate::http::static_files::range::{content_range, unsatisfied_range};
use crate::server::conn_state::ConnCtx;
use cache::CacheKey;
use lookup::{answer_cached, look_up, Ask, Content, FileAnswer, Found, Lookup, Reply};

/// Answers a request under `route` (the caller matched its prefix).
pub(crate) async fn serve(
    head: request::Parts,
    route: &StaticRoute,
    conn: &Arc<ConnCtx>,
    arrived: Instant,
) -> Response<ResponseBody> {
    let config = &conn.shared.config;
    let response = answer(&head, route, config, &conn.shared.static_cache).await;
    if config.report_static {
        report(conn, head, &response, arrived);
    }
    response
}

async fn answer(
    head: &request::Parts,
    route: &StaticRoute,
    config: &Arc<ServerConfig>,
    cache: &StaticCache,
) -> Response<ResponseBody> {
    let is_head = head.method == Method::HEAD;
    if !is_head && head.method != Method::GET {
        let mut response = text(config, StatusCode::METHOD_NOT_ALLOWED);
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let path = head.uri.path();
    let Some(relative) = resolve(&route.prefix, path) else {
        return text(config, StatusCode::NOT_FOUND);
    };
    let key = CacheKey {
        named: route.mount.join(relative),
        slash: path.ends_with('/'),
        codings: head
            .headers
            .get(ACCEPT_ENCODING)
            .map_or_else(Vec::new, |v| preferred(v.as_bytes())),
    };
    if cache.enabled() {
        if let Some(held) = cache.get(&key) {
            if held.is_current() {
                return file_response(config, answer_cached(&held, &head.headers, is_head));
            }
            cache.forget(&key, &held);
        }
    }
    let files: &StaticFiles = &config.static_files;
    let ask = Ask {
        mount: route.mount.clone(),
        named: key.named.clone(),
        index: files.index.clone(),
        follow_symlinks: files.follow_symlinks,
        slash: key.slash,
        codings: key.codings.clone(),
        headers: head.headers.clone(),
        is_head,
        for_cache: cache.enabled(),
    };
    match tokio::task::spawn_blocking(move || look_up(ask)).await {
        Ok(Found {
            lookup: Lookup::File(file),
            to_cache,
        }) => {
            if let Some(kept) = to_cache {
                cache.insert(key, kept);
            }
            file_response(config, file)
        }
        Ok(Found {
            lookup: Lookup::AddSlash,
            ..
        }) => add_slash(config, head),
        // A lookup that panicked is a missing file to the client, and ends nothing else.
        Ok(Found {
            lookup: Lookup::Missing,
            ..
        })
        | Err(_) => text(config, StatusCode::NOT_FOUND),
    }
}

/// A short plain-text answer of the core's (404, 405, 412, 416): the reason phrase, like
/// `ResponseBody::error`, but the connection stays open (a page asks for many assets).
fn text(config: &ServerConfig, status: StatusCode) -> Response<ResponseBody> {
    let reason = status.canonical_reason().unwrap_or("Error");
    let mut headers = HeaderMap::new();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    let body = ResponseBody::full(Bytes::from_static(reason.as_bytes()), None);
    build_response(config, status, headers, body)
}

/// 301 to the directory's `/` form, where its index is served (its relative links work).
fn add_slash(config: &ServerConfig, head: &request::Parts) -> Response<ResponseBody> {
    let mut target = format!("{}/", head.uri.path());
    if let Some(query) = head.uri.query() {
        target.push('?');
        target.push_str(query);
    }
    let mut response = text(config, StatusCode::MOVED_PERMANENTLY);
    if let Ok(location) = HeaderValue::try_from(target) {
        response.headers_mut().insert(LOCATION, location);
    }
    response
}

fn file_response(config: &ServerConfig, file: FileAnswer) -> Response<ResponseBody> {
    let FileAnswer {
        content_type,
        coding,
        etag,
        last_modified,
        reply,
    } = file;
    let mut headers = HeaderMap::new();
    // The validators and caching headers go on 304s too (RFC 9110 §15.4.5).
    if let Ok(value) = HeaderValue::try_from(etag) {
        headers.insert(ETAG, value);
    }
    if let Ok(value) = HeaderValue::try_from(last_modified) {
        headers.insert(LAST_MODIFIED, value);
    }
    if let Some(max_age) = config.static_files.max_age {
        if let Ok(value) = HeaderValue::try_from(format!("max-age={max_age}")) {
            headers.insert(CACHE_CONTROL, value);
        }
    }
    // Whether a sibling exists or not, the answer depends on Accept-Encoding.
    headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
    let (status, body) = match reply {
        Reply::NotModified => (StatusCode::NOT_MODIFIED, ResponseBody::empty(None)),
        Reply::PreconditionFailed => return text(config, StatusCode::PRECONDITION_FAILED),
        Reply::Unsatisfiable(size) => {
            let mut response = text(config, StatusCode::RANGE_NOT_SATISFIABLE);
            if let Ok(value) = HeaderValue::try_from(unsatisfied_range(size)) {
                response.headers_mut().insert(CONTENT_RANGE, value);
            }
            response
                .headers_mut()
                .insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            return response;
        }
        Reply::Send { range, size, body } => {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
            headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            if let Some(coding) = coding {
                headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.coding()));
            }
            let status = match range {
                Some((start, len)) => {
                    if let Ok(value) = HeaderValue::try_from(content_range(start, len, size)) {
                        headers.insert(CONTENT_RANGE, value);
                    }
                    StatusCode::PARTIAL_CONTENT
                }
                None => StatusCode::OK,
            };
            let (len, body) = match body {
                Content::Head(len) => (len, ResponseBody::empty(None)),
                Content::Read(data) => (data.len() as u64, ResponseBody::full(data, None)),
                Content::Stream(file, offset, len) => (
                    len,
                    ResponseBody::file(FileSource::open_range(file, offset, len), None),
                ),
            };
            headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
            (status, body)
        }
    };
    build_response(config, status, headers, body)
}

/// Tells the loop thread of the response, for the access line and the metrics.
fn report(
    conn: &ConnCtx,
    head: request::Parts,
    response: &Response<ResponseBody>,
    arrived: Instant,
) {
    // What the body will send (HEAD: none; hyper leaves it out anyway).
    let bytes = response.body().size_hint().exact().unwrap_or(0);
    let served = Served {
        peer: conn.info.peer,
        fields: RequestFields::from_headers(&head.headers),
        method: head.method,
        uri: head.uri,
        version: head.version,
        status: response.status().as_u16(),
        bytes,
        duration: arrived.elapsed().as_secs_f64(),
    };
    conn.shared.wakeup.push(Event::Served(Box::new(served)));
}
