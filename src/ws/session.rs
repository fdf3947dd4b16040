//! The tokio side of one WebSocket: waits for the app's handshake decision, answers 101 (or
//! the refusal), then moves frames between the socket and the app's channels until the
//! close handshake, a protocol error, a lost peer or server shutdown ends it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http::header::{HeaderValue, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, Interval};
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use crate::asgi::protocol::{build_response, error_response};
use crate::asgi::websocket::WsState;
use crate::http::body::ResponseBody;
use crate::http::exchange::{CloseGuard, Exchange};
use crate::server::request::PendingWebSocket;
use crate::server::service::ConnCtx;
use crate::server::{Lifecycle, ServerShared};
use crate::wakeup::Event;
use crate::ws::handshake::{accept_headers, subprotocols, version_supported, SWITCHING};
use crate::ws::{CloseInfo, WsDecision, WsIn, WsOut};

/// How long we wait for the peer's close frame after sending ours.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn handle_upgrade(
    mut req: Request<Incoming>,
    conn: &Arc<ConnCtx>,
) -> Response<ResponseBody> {
    let shared = &conn.shared;
    let config = &shared.config;
    if !version_supported(req.headers()) {
        // RFC 6455 §4.4: say which version we speak.
        let mut response = error_response(config, StatusCode::UPGRADE_REQUIRED, None);
        response
            .headers_mut()
            .insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        return response;
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    let (head, _body) = req.into_parts();
    let key = head
        .headers
        .get(SEC_WEBSOCKET_KEY)
        .map(|k| k.as_bytes().to_vec())
        .unwrap_or_default();
    let offered = subprotocols(&head.headers);
    let (in_tx, in_rx) = mpsc::channel(config.ws.max_queue.max(1));
    let (decision_tx, decision_rx) = oneshot::channel();
    let exchange = Arc::new(Exchange::new(
        shared.wakeup.clone(),
        None,
        WsState::new(decision_tx, in_rx),
    ));
    // Until the session ends, dropping this (client gone mid-handshake, or the end of the
    // session) is what tells `receive()` the socket is closed.
    let guard = CloseGuard::new(exchange.clone());
    shared
        .wakeup
        .push(Event::WebSocket(Box::new(PendingWebSocket {
            head,
            conn: conn.info.clone(),
            exchange: exchange.clone(),
            subprotocols: offered,
        })));

    match decision_rx.await {
        Ok(WsDecision::Accept {
            subprotocol,
            headers,
            outbound,
        }) => {
            let Ok(mut response_headers) = accept_headers(&key, subprotocol.as_deref()) else {
                return error_response(config, StatusCode::INTERNAL_SERVER_ERROR, None);
            };
            for (name, value) in &headers {
                if !response_headers.contains_key(name) {
                    response_headers.append(name.clone(), value.clone());
                }
            }
            // After the 101 the socket carries WebSocket frames: nothing to coalesce.
            conn.disable_corking();
            let shared = shared.clone();
            tokio::spawn(async move {
                match on_upgrade.await {
                    Ok(upgraded) => {
                        run_session(upgraded, in_tx, outbound, &exchange, &shared).await
                    }
                    Err(_) => exchange.set_close_info(CloseInfo::abnormal()),
                }
                drop(guard);
            });
            build_response(
                config,
                SWITCHING,
                response_headers,
                ResponseBody::empty(None),
            )
        }
        Ok(WsDecision::Reject(response)) => response,
        Err(_) => error_response(config, StatusCode::SERVICE_UNAVAILABLE, None),
    }
}

/// The close code to send for a broken stream; None when the connection is simply gone.
fn error_close_code(error: &WsError) -> Option<u16> {
    match error {
        // The peer closed TCP without a close frame: the connection is lost (1006).
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => None,
        WsError::Protocol(_) => Some(1002),
        WsError::Utf8(_) => Some(1007),
        WsError::Capacity(_) => Some(1009),
        WsError::ConnectionClosed | WsError::AlreadyClosed | WsError::Io(_) => None,
        _ => Some(1011),
    }
}

fn close_message(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason.to_owned().into(),
    }))
}

async fn tick(interval: &mut Option<Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

async fn run_session(
    upgraded: Upgraded,
    in_tx: mpsc::Sender<WsIn>,
    mut out_rx: mpsc::Receiver<WsOut>,
    exchange: &Arc<Exchange<WsState>>,
    shared: &Arc<ServerShared>,
) {
    // Counted like a connection so graceful shutdown waits for the close handshake.
    let _count = shared.track_connection();
    let ws_config = &shared.config.ws;
    let config = WebSocketConfig::default()
        .max_message_size(Some(ws_config.max_size))
        .max_frame_size(Some(ws_config.max_size));
    let ws =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
    let (mut sink, mut stream) = ws.split();
    let mut lifecycle = shared.lifecycle.subscribe();
    let mut ping = ws_config.ping_interval.map(|every| {
        let mut interval = tokio::time::interval_at(Instant::now() + every, every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval
    });
    let mut pong_deadline: Option<Instant> = None;
    let mut permit = None;
    // Set once we sent our close frame: then we only wait for the peer's.
    let mut closing: Option<(Instant, CloseInfo)> = None;

    let info = loop {
        let reading = closing.is_some() || permit.is_some();
        tokio::select! {
            reserved = in_tx.reserve(), if permit.is_none() && closing.is_none() => match reserved {
                Ok(p) => permit = Some(p),
                Err(_) => break CloseInfo::abnormal(),
            },
            message = stream.next(), if reading => match message {
                Some(Ok(Message::Text(text))) => {
                    if let Some(p) = permit.take() {
                        p.send(WsIn::Text(text.as_str().to_owned()));
                        exchange.wake_receiver();
                    }
                }
                Some(Ok(Message::Binary(data))) => {
                    if let Some(p) = permit.take() {
                        p.send(WsIn::Binary(data));
                        exchange.wake_receiver();
                    }
                }
                Some(Ok(Message::Pong(_))) => pong_deadline = None,
                // tungstenite answers pings itself (flushed on the next read or write).
                Some(Ok(Message::Ping(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(frame))) => {
                    // tungstenite queued the echo of the close frame: push it out.
                    let _ = sink.flush().await;
                    if let Some((_, ours)) = closing {
                        break ours;
                    }
                    break match frame {
                        Some(frame) => CloseInfo {
                            code: u16::from(frame.code),
                            reason: frame.reason.as_str().to_owned(),
                        },
                        None => CloseInfo { code: 1005, reason: String::new() },
                    };
                }
                Some(Err(error)) => match error_close_code(&error) {
                    Some(code) if closing.is_none() => {
                        let _ = sink.send(close_message(code, "")).await;
                        break CloseInfo { code, reason: String::new() };
                    }
                    _ => break CloseInfo::abnormal(),
                },
                None => break closing.map(|(_, ours)| ours).unwrap_or_else(CloseInfo::abnormal),
            },
            out = out_rx.recv(), if closing.is_none() => {
                let sent = match out {
                    Some(WsOut::Text(text)) => sink.send(Message::text(text)).await,
                    Some(WsOut::Binary(data)) => sink.send(Message::binary(data)).await,
                    Some(WsOut::Close { code, reason }) => {
                        let sent = sink.send(close_message(code, &reason)).await;
                        closing = Some((Instant::now() + CLOSE_TIMEOUT, CloseInfo { code, reason }));
                        sent
                    }
                    // The app side went away without a close: close normally.
                    None => {
                        let sent = sink.send(close_message(1000, "")).await;
                        closing = Some((Instant::now() + CLOSE_TIMEOUT, CloseInfo { code: 1000, reason: String::new() }));
                        sent
                    }
                };
                if sent.is_err() {
                    break CloseInfo::abnormal();
                }
            },
            () = tick(&mut ping), if closing.is_none() => {
                if pong_deadline.is_some_and(|d| Instant::now() >= d) {
                    // Unresponsive peer: give up on it (1006 to the app, as the peer is gone).
                    let _ = sink.send(close_message(1011, "keepalive ping timeout")).await;
                    break CloseInfo::abnormal();
                }
                if sink.send(Message::Ping(Default::default())).await.is_err() {
                    break CloseInfo::abnormal();
                }
                if pong_deadline.is_none() {
                    pong_deadline = ws_config.ping_timeout.map(|t| Instant::now() + t);
                }
            },
            () = sleep_until(closing.as_ref().map(|(d, _)| *d)) => {
                break closing.map(|(_, ours)| ours).unwrap_or_else(CloseInfo::abnormal);
            },
            changed = lifecycle.changed() => {
                let state = if changed.is_ok() { *lifecycle.borrow() } else { Lifecycle::Closing };
                if state >= Lifecycle::Closing {
                    break CloseInfo::abnormal();
                }
                if state >= Lifecycle::Draining && closing.is_none() {
                    let _ = sink.send(close_message(1012, "server shutting down")).await;
                    closing = Some((Instant::now() + CLOSE_TIMEOUT, CloseInfo { code: 1012, reason: String::new() }));
                }
            },
        }
    };
    exchange.set_close_info(info);
}
