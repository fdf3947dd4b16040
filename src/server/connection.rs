//! Serving one accepted connection with hyper, and ending it on shutdown.

use std::sync::Arc;

use hyper::rt::{Read, Write};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioTimer;

use crate::server::cork::FlushHint;
use crate::server::request::ConnInfo;
use crate::server::service::{handle_request, ConnCtx};
use crate::server::{Lifecycle, ServerShared};

const HYPER_DEFAULT_MAX_HEADERS: usize = 100;

/// hyper's header-read timer costs a timer-wheel update per request. Our keep-alive timer
/// (serve_connection) already cuts off a connection with no request in flight — and a request
/// is not in flight until its head is complete — so hyper's timer is only needed when the
/// header timeout is the shorter of the two, or keep-alive is off.
fn hyper_header_timeout(config: &crate::config::ServerConfig) -> Option<std::time::Duration> {
    match (config.header_read_timeout, config.keep_alive_timeout) {
        (Some(header), Some(idle)) if idle <= header => None,
        (header, _) => header,
    }
}

/// The HTTP/1.1 connection settings from the server config.
fn http1_builder(shared: &ServerShared) -> http1::Builder {
    let config = &shared.config;
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .keep_alive(config.keep_alive)
        .half_close(false)
        .max_header_size(config.max_header_size)
        .header_read_timeout(hyper_header_timeout(config))
        .auto_date_header(config.date_header)
        // Not `pipeline_flush`: it lets hyper buffer a streaming body without limit (its
        // can_buffer() is always true then), which defeats response backpressure.
        .pipeline_flush(false);
    if config.max_headers != HYPER_DEFAULT_MAX_HEADERS {
        // Only when asked: a custom limit moves hyper's header array to the heap.
        builder.max_headers(config.max_headers);
    }
    builder
}

pub async fn serve_connection<I>(
    io: I,
    info: ConnInfo,
    shared: Arc<ServerShared>,
    flush_hint: Arc<FlushHint>,
) where
    I: Read + Write + Unpin + Send + 'static,
{
    let _count = shared.track_connection();
    let mut lifecycle = shared.lifecycle.subscribe();
    let ctx = Arc::new(ConnCtx::new(info, shared.clone(), flush_hint));
    let conn_ctx = ctx.clone();
    let service = service_fn(move |req| handle_request(req, conn_ctx.clone()));
    let keep_alive_timeout = shared.config.keep_alive_timeout;
    let connection = http1_builder(&shared)
        .serve_connection(io, service)
        .with_upgrades();
    let mut connection = std::pin::pin!(connection);
    let mut draining = false;
    loop {
        if !draining && *lifecycle.borrow_and_update() >= Lifecycle::Draining {
            // Idle keep-alive connections close now; busy ones after their response.
            connection.as_mut().graceful_shutdown();
            draining = true;
        }
        if *lifecycle.borrow() >= Lifecycle::Closing {
            return;
        }
        // The keep-alive timer: re-armed on every pass, fires only while no request is in
        // flight (hyper's own header timer also runs while idle, but longer).
        let idle_deadline = async {
            match (keep_alive_timeout, draining) {
                (Some(timeout), false) => {
                    let idle = ctx.idle_for().unwrap_or_default();
                    tokio::time::sleep(timeout.saturating_sub(idle)).await
                }
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = connection.as_mut() => return,
            changed = lifecycle.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = idle_deadline => {
                if let (Some(timeout), Some(idle)) = (keep_alive_timeout, ctx.idle_for()) {
                    if idle >= timeout {
                        connection.as_mut().graceful_shutdown();
                        draining = true;
                    }
                }
            }
        }
    }
}
