//! hyper's service: one call per request. Reads a small body up front, queues the request for
//! the loop thread, and waits for the app's response.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::{mpsc, oneshot, Notify};

use crate::asgi::protocol::error_response;
use crate::asgi::state::{LoopState, RequestBody};
use crate::http::body::{pump_request_body, ResponseBody, REQUEST_BODY_QUEUE};
use crate::http::exchange::{CloseGuard, Exchange};
use crate::http::headers::expects_continue;
use crate::server::request::{ConnInfo, PendingRequest};
use crate::server::ServerShared;
use crate::wakeup::Event;

pub struct ConnCtx {
    pub info: Arc<ConnInfo>,
    pub shared: Arc<ServerShared>,
}

pub async fn handle_request(
    req: Request<Incoming>,
    conn: Arc<ConnCtx>,
) -> Result<Response<ResponseBody>, Infallible> {
    let shared = &conn.shared;
    let config = &shared.config;
    let (head, body) = req.into_parts();
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
                Err(_) => return Ok(error_response(config, StatusCode::BAD_REQUEST, None)),
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
        tokio::spawn(async move {
            if pump_request_body(body, tx, ex, body_start).await {
                let _ = failed_tx.send(());
            }
        });
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
        response = response_rx => match response {
            Ok(response) => {
                guard.disarm();
                Ok(response)
            }
            // The loop side dropped the request without answering (server closing).
            Err(_) => Ok(error_response(config, StatusCode::SERVICE_UNAVAILABLE, None)),
        },
        // A broken request body (bad chunk size, ...) before the app answered: 400, close.
        () = body_failed => Ok(error_response(config, StatusCode::BAD_REQUEST, None)),
    }
}
