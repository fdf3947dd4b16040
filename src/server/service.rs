//! hyper's service: one call per request. Reads a small body up front, queues the request for
//! the loop thread, and waits for the app's response.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::{mpsc, oneshot, Notify};

use crate::asgi::protocol::error_response;
use crate::asgi::state::{LoopState, RequestBody};
use crate::http::body::{pump_request_body, BodyAborted, ResponseBody, REQUEST_BODY_QUEUE};
use crate::http::exchange::{CloseGuard, Exchange};
use crate::http::headers::{add_host_from_authority, expects_continue};
use crate::server::cork::FlushHint;
use crate::server::request::{ConnInfo, PendingRequest};
use crate::server::ServerShared;
use crate::wakeup::Event;
use crate::ws::handshake::is_upgrade;
use crate::ws::session::handle_upgrade;

pub struct ConnCtx {
    pub info: Arc<ConnInfo>,
    pub shared: Arc<ServerShared>,
    flush_hint: Arc<FlushHint>,
    in_flight: AtomicUsize,
    idle_since: Mutex<Instant>,
}

impl ConnCtx {
    pub fn new(info: ConnInfo, shared: Arc<ServerShared>, flush_hint: Arc<FlushHint>) -> Self {
        ConnCtx {
            info: Arc::new(info),
            shared,
            flush_hint,
            in_flight: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
        }
    }

    /// Writes go straight out from now on (see `FlushHint`).
    pub fn disable_corking(&self) {
        self.flush_hint.disable_corking();
    }

    /// How long the connection has had no request in flight (None while one is).
    pub fn idle_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        Some(
            self.idle_since
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .elapsed(),
        )
    }
}

/// One request in flight, from the service call until hyper drops its response body.
struct InFlight(Arc<ConnCtx>);

impl InFlight {
    fn new(conn: Arc<ConnCtx>) -> Self {
        conn.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(conn)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.shared.request_finished();
    }
}

/// The response body plus the in-flight marker that lives exactly as long as hyper needs it.
pub struct TrackedBody {
    inner: ResponseBody,
    in_flight: Option<InFlight>,
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = BodyAborted;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyAborted>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if self.inner.is_streaming() && matches!(polled, Poll::Ready(Some(Ok(_)))) {
            if let Some(in_flight) = &self.in_flight {
                in_flight.0.flush_hint.request();
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pub async fn handle_request(
    req: Request<Incoming>,
    conn: Arc<ConnCtx>,
) -> Result<Response<TrackedBody>, Infallible> {
    let shared = &conn.shared;
    if !shared.admit_request() {
        let response = error_response(&shared.config, StatusCode::SERVICE_UNAVAILABLE, None);
        return Ok(response.map(|inner| TrackedBody {
            inner,
            in_flight: None,
        }));
    }
    let in_flight = InFlight::new(conn.clone());
    let response = respond(req, &conn).await;
    Ok(response.map(|inner| TrackedBody {
        inner,
        in_flight: Some(in_flight),
    }))
}

async fn respond(req: Request<Incoming>, conn: &Arc<ConnCtx>) -> Response<ResponseBody> {
    let shared = &conn.shared;
    let config = &shared.config;
    if config.ws.enabled && is_upgrade(req.method(), req.version(), req.headers()) {
        return handle_upgrade(req, conn).await;
    }
    let (mut head, body) = req.into_parts();
    if head.version == Version::HTTP_2 {
        add_host_from_authority(&mut head);
    }
    let expect_continue = expects_continue(&head.headers);
    let is_head = head.method == Method::HEAD;

    let mut stream = None;
    let body_start = expect_continue.then(|| Arc::new(Notify::new()));
    let request_body = match body.size_hint().exact() {
        Some(0) => RequestBody::Full(Bytes::new()),
        Some(n) if n <= config.body_preread_limit && !expect_continue => {
            // Small and announced: read it now so the first receive() completes at once.
            match body.collect().await {
                Ok(collected) => RequestBody::Full(collected.to_bytes()),
                Err(_) => return error_response(config, StatusCode::BAD_REQUEST, None),
            }
        }
        _ => {
            let (tx, rx) = mpsc::channel(REQUEST_BODY_QUEUE);
            stream = Some((body, tx));
            RequestBody::Stream(rx)
        }
    };

    let (response_tx, response_rx) = oneshot::channel();
    let exchange = Arc::new(Exchange::new(
        shared.wakeup.clone(),
        body_start.clone(),
        LoopState::new(request_body, response_tx, is_head),
    ));
    let (failed_tx, failed_rx) = oneshot::channel::<()>();
    if let Some((body, tx)) = stream {
        let ex = exchange.clone();
        tokio::spawn(pump_request_body(body, tx, ex, body_start, failed_tx));
    } else {
        drop(failed_tx);
    }

    // Until the response is handed over, dropping this future (client gone) closes the
    // exchange; afterwards the response body carries its own guard.
    let guard = CloseGuard::new(exchange.clone());
    shared.wakeup.push(Event::Request(Box::new(PendingRequest {
        head,
        conn: conn.info.clone(),
        exchange,
    })));

    let body_failed = async {
        match failed_rx.await {
            Ok(()) => (),
            Err(_) => std::future::pending().await, // body ended normally
        }
    };
    tokio::select! {
        // Biased: a broken body is reported before the app can hear of it, so when both
        // are ready the 400 wins over whatever the app answered to the disconnect.
        biased;
        () = body_failed => error_response(config, StatusCode::BAD_REQUEST, None),
        response = response_rx => match response {
            Ok(response) => {
                guard.disarm();
                response
            }
            // The loop side dropped the request without answering (server closing).
            Err(_) => error_response(config, StatusCode::SERVICE_UNAVAILABLE, None),
        },
    }
}
