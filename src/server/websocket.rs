//! The tokio side of one WebSocket: waits for the app's handshake decision, answers 101 (or
//! the refusal), then moves frames between the socket and the app's channels until the
//! close handshake, a protocol error, a lost peer or server shutdown ends it.
//!
//! Over HTTP/2 (RFC 8441) the same session runs on one stream: the handshake is an extended
//! CONNECT answered `200`, and hyper's `Upgraded` carries the frames in that stream's DATA
//! frames (our shutdown is its END_STREAM), so only the answer's status and fields differ.
//! Over HTTP/3 (RFC 9220) likewise, the stream's DATA frames carried by `h3::ws_io`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::header::{CONTENT_LENGTH, SEC_WEBSOCKET_KEY};
use http::{Request, Response, StatusCode, Version};
use hyper::body::Incoming as IncomingBody;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, Interval};

use crate::bridge::{
    CloseGuard, CloseInfo, Event, Exchange, LogText, PendingWebSocket, ResponseBody, WsDecision,
    WsIn, WsOut, WsState,
};
use crate::http::headers::add_host_from_authority;
use crate::http::responses::build_response;
use crate::server::admission::WebSocketSlot;
use crate::server::conn_state::{ConnBusy, ConnCtx};
use crate::server::{Lifecycle, ServerShared};
use crate::ws::deflate::{negotiate, DeflateParams, Deflater, Inflater};
use crate::ws::frame::{close_payload, OpCode};
use crate::ws::handshake::{
    accept_headers, accept_status, is_handshake_field, negotiated_headers, subprotocols,
};
use crate::ws::stream::{Incoming, ReadError, WsReader, WsTransport, WsWriter};

/// How long we wait for the peer's close frame after sending ours.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long we keep reading (and discarding) after our half-close, waiting for the peer to
/// close its side.
const LINGER: Duration = Duration::from_secs(2);

/// An HTTP/1.1 upgrade or an HTTP/2 extended CONNECT (RFC 8441): the socket is hyper's
/// `Upgraded` once the answer went out.
pub(crate) async fn handle_upgrade(
    mut req: Request<IncomingBody>,
    conn: &Arc<ConnCtx>,
    slot: Option<WebSocketSlot>,
) -> Response<ResponseBody> {
    let on_upgrade = hyper::upgrade::on(&mut req);
    let (head, _body) = req.into_parts();
    let upgraded = async move { on_upgrade.await.ok().map(TokioIo::new) };
    handshake(head, conn, slot, upgraded).await
}

/// The handshake of any transport: the app's decision, and its answer. `upgraded` yields
/// the socket once the answer went out (None: it could not), and is awaited only if the
/// app accepted.
pub(crate) async fn handshake<F, Io>(
    mut head: http::request::Parts,
    conn: &Arc<ConnCtx>,
    slot: Option<WebSocketSlot>,
    upgraded: F,
) -> Response<ResponseBody>
where
    F: Future<Output = Option<Io>> + Send + 'static,
    Io: WsTransport + Send + 'static,
{
    let shared = &conn.shared;
    let config = &shared.config;
    let version = head.version;
    // HTTP/2 (RFC 8441) and HTTP/3 (RFC 9220): an extended CONNECT answered 200.
    let multiplexed = version >= Version::HTTP_2;
    if multiplexed || head.uri.scheme().is_some() {
        // The scope's `host` comes from `:authority` (or HTTP/1's absolute-form, RFC 9112
        // §3.2.2), as for http scopes.
        add_host_from_authority(&mut head);
    }
    let key = head
        .headers
        .get(SEC_WEBSOCKET_KEY)
        .map(|k| k.as_bytes().to_vec())
        .unwrap_or_default();
    let offered = subprotocols(&head.headers);
    let deflate = if config.ws.per_message_deflate {
        negotiate(&head.headers)
    } else {
        None
    };
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
            let extensions = deflate.as_ref().map(DeflateParams::response_header);
            let negotiated = if multiplexed {
                negotiated_headers(subprotocol.as_deref(), extensions.as_deref())
            } else {
                accept_headers(&key, subprotocol.as_deref(), extensions.as_deref())
            };
            let Ok(mut response_headers) = negotiated else {
                return ResponseBody::error(config, StatusCode::INTERNAL_SERVER_ERROR);
            };
            for (name, value) in &headers {
                // Every header of the app's goes out, repeated ones included, except the
                // handshake's own fields: extensions change the framing, which is ours alone,
                // and the accept key, upgrade and subprotocol answer what we negotiated.
                // On HTTP/2 and 3 a length would announce a body the 200 of a CONNECT cannot
                // have (hyper resets such a stream).
                let reserved = is_handshake_field(name) || (multiplexed && *name == CONTENT_LENGTH);
                if !reserved {
                    response_headers.append(name.clone(), value.clone());
                }
            }
            // After the 101 the socket carries WebSocket frames: nothing to coalesce.
            conn.disable_corking();
            let shared = shared.clone();
            // HTTP/2 and 3: the connection is busy while the socket is open, so the
            // keep-alive timer does not GOAWAY a connection whose only stream is a WebSocket.
            let busy = multiplexed.then(|| ConnBusy::new(conn.clone()));
            tokio::spawn(async move {
                // Counted against --limit-websockets until the session ends.
                let _slot = slot;
                let _busy = busy;
                match upgraded.await {
                    Some(io) => {
                        let session = Session {
                            io,
                            reader: WsReader::new(
                                shared.config.ws.max_size,
                                deflate.as_ref().map(Inflater::new),
                            ),
                            writer: WsWriter::new(deflate.as_ref().and_then(Deflater::new)),
                        };
                        session
                            .run(in_tx, outbound, &exchange, guard, &shared)
                            .await;
                    }
                    None => {
                        exchange.set_close_info(CloseInfo::abnormal());
                        drop(guard);
                    }
                }
            });
            build_response(
                config,
                accept_status(version),
                response_headers,
                ResponseBody::empty(None),
            )
        }
        Ok(WsDecision::Reject(response)) if multiplexed && response.status().is_success() => {
            // A 2xx on an extended CONNECT's stream *is* the acceptance (RFC 8441 §5, RFC
            // 9220 §3): the client would take the denial for an open socket.
            let text = format!(
                "a WebSocket denial response to {} over HTTP/{} had status {}, which would \
                 accept the socket; answered 403 instead",
                conn.peer_text(),
                if version == Version::HTTP_3 { "3" } else { "2" },
                response.status().as_u16()
            );
            shared.wakeup.push(Event::Warning(Box::new(LogText(text))));
            ResponseBody::error(config, StatusCode::FORBIDDEN)
        }
        Ok(WsDecision::Reject(response)) => response,
        Err(_) => ResponseBody::error(config, StatusCode::SERVICE_UNAVAILABLE),
    }
}

/// HTTP/1.1's upgraded connection: writes copy into the socket anyway.
impl WsTransport for TokioIo<hyper::upgrade::Upgraded> {}

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

/// Hand a message to the app through the slot reserved for it.
fn deliver(
    permit: &mut Option<mpsc::Permit<'_, WsIn>>,
    message: WsIn,
    exchange: &Arc<Exchange<WsState>>,
) {
    if let Some(permit) = permit.take() {
        permit.send(message);
        exchange.wake_receiver();
    }
}

/// One open WebSocket: the socket, and the framing state of each direction.
struct Session<Io> {
    io: Io,
    reader: WsReader,
    writer: WsWriter,
}

impl<Io: WsTransport> Session<Io> {
    async fn close_frame(&mut self, code: u16, reason: &str) -> std::io::Result<()> {
        self.writer
            .control(&mut self.io, OpCode::Close, &close_payload(code, reason))
            .await
    }

    async fn run(
        mut self,
        in_tx: mpsc::Sender<WsIn>,
        out_rx: mpsc::Receiver<WsOut>,
        exchange: &Arc<Exchange<WsState>>,
        guard: CloseGuard<WsState>,
        shared: &Arc<ServerShared>,
    ) {
        // Counted like a connection so graceful shutdown waits for the close handshake.
        let count = shared.track_connection();
        let info = self.exchange_frames(&in_tx, out_rx, exchange, shared).await;
        exchange.set_close_info(info);
        // Tells receive() the socket is closed.
        drop(guard);
        drop(count);
        self.close_transport().await;
    }

    async fn exchange_frames(
        &mut self,
        in_tx: &mpsc::Sender<WsIn>,
        mut out_rx: mpsc::Receiver<WsOut>,
        exchange: &Arc<Exchange<WsState>>,
        shared: &Arc<ServerShared>,
    ) -> CloseInfo {
        let ws_config = &shared.config.ws;
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

        loop {
            // Reading pauses while the app has `max_queue` messages unread (backpressure);
            // the peer's close is still awaited once we sent ours.
            let reading = closing.is_some() || permit.is_some();
            tokio::select! {
                reserved = in_tx.reserve(), if permit.is_none() && closing.is_none() => match reserved {
                    Ok(p) => permit = Some(p),
                    Err(_) => return CloseInfo::abnormal(),
                },
                incoming = self.reader.read_from(&mut self.io), if reading => match incoming {
                    Ok(Incoming::Text(text)) => deliver(&mut permit, WsIn::Text(text), exchange),
                    Ok(Incoming::Binary(data)) => deliver(&mut permit, WsIn::Binary(data), exchange),
                    Ok(Incoming::BinaryMasked(data)) => {
                        deliver(&mut permit, WsIn::BinaryMasked(data), exchange)
                    }
                    Ok(Incoming::Ping(payload)) => {
                        // After our close frame nothing more is sent (RFC 6455 §5.5.1).
                        if closing.is_none()
                            && self.writer.control(&mut self.io, OpCode::Pong, &payload).await.is_err()
                        {
                            return CloseInfo::abnormal();
                        }
                    }
                    Ok(Incoming::Pong(_)) => pong_deadline = None,
                    Ok(Incoming::Close(frame)) => {
                        if let Some((_, ours)) = closing {
                            return ours;
                        }
                        // Echo the peer's code (none if it sent none), RFC 6455 §5.5.1.
                        let echo = match &frame {
                            Some((code, _)) => close_payload(*code, ""),
                            None => Vec::new(),
                        };
                        let _ = self.writer.control(&mut self.io, OpCode::Close, &echo).await;
                        return match frame {
                            Some((code, reason)) => CloseInfo { code, reason },
                            None => CloseInfo { code: 1005, reason: String::new() },
                        };
                    }
                    Err(ReadError::Violation(violation)) => {
                        if let Some((_, ours)) = closing {
                            return ours;
                        }
                        let _ = self.close_frame(violation.code, violation.reason).await;
                        return CloseInfo { code: violation.code, reason: String::new() };
                    }
                    Err(ReadError::Lost) => {
                        return closing.map(|(_, ours)| ours).unwrap_or_else(CloseInfo::abnormal);
                    }
                },
                out = out_rx.recv(), if closing.is_none() => {
                    let sent = match out {
                        Some(WsOut::Text(text)) => {
                            self.writer.message_owned(&mut self.io, true, text).await
                        }
                        Some(WsOut::Binary(data)) => {
                            self.writer.message_owned(&mut self.io, false, data).await
                        }
                        Some(WsOut::Close { code, reason }) => {
                            let sent = self.close_frame(code, &reason).await;
                            closing = Some((Instant::now() + CLOSE_TIMEOUT, CloseInfo { code, reason }));
                            sent
                        }
                        // The app side went away without a close: close normally.
                        None => {
                            let sent = self.close_frame(1000, "").await;
                            closing = Some((Instant::now() + CLOSE_TIMEOUT, CloseInfo { code: 1000, reason: String::new() }));
                            sent
                        }
                    };
                    if sent.is_err() {
                        return CloseInfo::abnormal();
                    }
                },
                () = tick(&mut ping), if closing.is_none() => {
                    if pong_deadline.is_some_and(|d| Instant::now() >= d) {
                        // Unresponsive peer: give up on it (1006 to the app, as the peer is gone).
                        let _ = self.close_frame(1011, "keepalive ping timeout").await;
                        return CloseInfo::abnormal();
                    }
                    if self.writer.control(&mut self.io, OpCode::Ping, &[]).await.is_err() {
                        return CloseInfo::abnormal();
                    }
                    if pong_deadline.is_none() {
                        pong_deadline = ws_config.ping_timeout.map(|t| Instant::now() + t);
                    }
                },
                () = sleep_until(closing.as_ref().map(|(d, _)| *d)) => {
                    return closing.map(|(_, ours)| ours).unwrap_or_else(CloseInfo::abnormal);
                },
                changed = lifecycle.changed() => {
                    let state = if changed.is_ok() { *lifecycle.borrow() } else { Lifecycle::Closing };
                    if state >= Lifecycle::Closing {
                        return CloseInfo::abnormal();
                    }
                    if state >= Lifecycle::Draining && closing.is_none() {
                        let _ = self.close_frame(1012, "server shutting down").await;
                        closing = Some((Instant::now() + CLOSE_TIMEOUT, CloseInfo { code: 1012, reason: String::new() }));
                    }
                },
            }
        }
    }

    /// RFC 6455 §7.1.1: the server closes the TCP connection first. Half-close, then read
    /// (and discard) until the peer closes too, for a bounded time: closing with unread
    /// input would reset the connection, and a reset can destroy the close frame we just
    /// sent before the peer reads it.
    async fn close_transport(mut self) {
        let _ = tokio::time::timeout(LINGER, async {
            if self.io.shutdown().await.is_err() {
                return;
            }
            let mut sink = [0u8; 4096];
            while let Ok(1..) = self.io.read(&mut sink).await {}
        })
        .await;
    }
}
