//! One QUIC connection serving HTTP/3: the handshake, h3's control streams, a task per
//! request stream, and the end: GOAWAY when the server drains (the requests in flight
//! finish), or when it has been idle for `--timeout-keep-alive`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use h3::error::Code;
use rustls_pki_types::CertificateDer;
use tokio::task::JoinSet;

use crate::bridge::{ConnInfo, LocalAddr, Relayed};
use crate::server::conn_state::ConnCtx;
use crate::server::cork::IoSignals;
use crate::server::h3::protocol_shim;
use crate::server::h3::request::{serve_stream, Resolver};
use crate::server::idle::sleep_until_or_never;
use crate::server::{Lifecycle, ServerShared};
use crate::tls::TlsInfo;

type H3Conn = h3::server::Connection<protocol_shim::Connection, Bytes>;

/// How the connection's serving loop ended.
enum End {
    /// GOAWAY sent (draining, or idle): the streams in flight finish, then it closes.
    Graceful,
    /// The peer closed, the transport failed, or the server is closing: nothing to wait for.
    Now,
}

pub(crate) async fn serve_connection(
    incoming: quinn::Incoming,
    local: std::net::SocketAddr,
    server_cert: Arc<str>,
    shared: Arc<ServerShared>,
) {
    // Counted from the handshake on, so a drain waits for it like for a TCP connection.
    let _count = shared.track_connection();
    let Ok(quic) = incoming.await else {
        shared.tls_handshake_failed();
        return;
    };
    let mut info = ConnInfo::new(Some(quic.remote_address()), LocalAddr::Tcp(local));
    let chain = quic
        .peer_identity()
        .and_then(|identity| identity.downcast::<Vec<CertificateDer<'static>>>().ok())
        .map(|chain| *chain)
        .unwrap_or_default();
    info.tls = Some(Arc::new(TlsInfo::quic(&chain, server_cert)));
    let conn = Arc::new(ConnCtx::new(
        info,
        shared.clone(),
        Arc::new(IoSignals::default()),
    ));
    let websockets = shared.config.ws.enabled;
    // With WebSockets, request heads go through the shim that lets h3 take RFC 9220's
    // `:protocol: websocket`; a HEADERS frame longer than the header limit is not looked at.
    let shim_limit = websockets.then_some(shared.config.max_header_size.saturating_add(64));
    let mut h3 = match h3::server::builder()
        .max_field_section_size(shared.config.max_header_size as u64)
        // No reserved "grease" frame at the end of the first response stream: aioquic (Python's
        // HTTP/3 client) then never reports that stream as ended.
        .send_grease(false)
        // SETTINGS_ENABLE_CONNECT_PROTOCOL: WebSockets over HTTP/3 (RFC 9220).
        .enable_extended_connect(websockets)
        .build::<_, Bytes>(protocol_shim::Connection::new(quic.clone(), shim_limit))
        .await
    {
        Ok(h3) => h3,
        Err(_) => return,
    };
    let mut streams = JoinSet::new();
    let end = serve_streams(&mut h3, &mut streams, &conn).await;
    if let End::Graceful = end {
        // The streams accepted before the GOAWAY finish, and those h3 still hands out (the
        // client opened them before it saw the GOAWAY); h3 refuses later ones itself. A
        // client that keeps the connection open idle does not hold the drain up.
        let mut lifecycle = shared.lifecycle.subscribe();
        let mut accepting = true;
        while !streams.is_empty() {
            tokio::select! {
                _ = streams.join_next() => {}
                _ = lifecycle.wait_for(|state| *state >= Lifecycle::Closing) => break,
                accepted = h3.accept(), if accepting => match accepted {
                    Ok(Some(resolver)) => {
                        streams.spawn(stream_task(resolver, &conn));
                    }
                    Ok(None) | Err(_) => accepting = false,
                },
            }
        }
    }
    streams.abort_all();
    quic.close(
        Code::H3_NO_ERROR.value().try_into().unwrap_or_default(),
        b"",
    );
    // Let the CONNECTION_CLOSE go out before the handle (and the endpoint's last use) goes.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), quic.closed()).await;
}

/// Accepts request streams until the connection ends or is asked to.
async fn serve_streams(h3: &mut H3Conn, streams: &mut JoinSet<()>, conn: &Arc<ConnCtx>) -> End {
    let shared = &conn.shared;
    let mut lifecycle = shared.lifecycle.subscribe();
    let keep_alive = shared.config.timeout_keep_alive;
    loop {
        if *lifecycle.borrow_and_update() >= Lifecycle::Draining {
            return goaway(h3).await;
        }
        // Idle while nothing is in flight (the keep-alive timer), counted from the last end.
        let idle_deadline = match (keep_alive, streams.is_empty(), conn.idle_state()) {
            (Some(limit), true, Some(idle)) => Some(idle.since + limit),
            _ => None,
        };
        tokio::select! {
            changed = lifecycle.changed() => if changed.is_err() { return End::Now },
            accepted = h3.accept() => match accepted {
                Ok(Some(resolver)) => {
                    streams.spawn(stream_task(resolver, conn));
                    reap(streams);
                }
                // The client sent GOAWAY and its requests are done, or the connection failed.
                Ok(None) | Err(_) => return End::Now,
            },
            Some(_) = streams.join_next(), if !streams.is_empty() => reap(streams),
            () = sleep_until_or_never(idle_deadline) => return goaway(h3).await,
        }
    }
}

/// Joins the stream tasks that have ended (a batch of responses ends many at once), without
/// a turn of the accept loop each: every turn polls h3's connection (quinn's lock) again.
fn reap(streams: &mut JoinSet<()>) {
    while streams.try_join_next().is_some() {}
}

/// A request stream's task. Its waker is relayed (bridge/relay.rs) like an HTTP/2 stream's:
/// the responses the loop thread completes in one batch wake tokio once, so quinn's driver
/// then finds them all written and packs them into the same datagrams, instead of one wake,
/// one driver run and one UDP send per response.
///
/// The stream's future (the whole service call) is boxed: spawned as it is, its several
/// kilobytes were copied into the task and again at each stage change of the task.
fn stream_task(resolver: Resolver, conn: &Arc<ConnCtx>) -> Relayed<Pin<Box<StreamFuture>>> {
    Relayed::new(
        Box::pin(serve_stream(resolver, conn.clone())),
        &conn.shared.relay,
    )
}

type StreamFuture = dyn Future<Output = ()> + Send;

async fn goaway(h3: &mut H3Conn) -> End {
    match h3.shutdown(0).await {
        Ok(()) => End::Graceful,
        Err(_) => End::Now,
    }
}
