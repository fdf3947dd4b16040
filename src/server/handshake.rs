//! From an accepted stream to a served connection: the TLS handshake (when configured, with
//! its timeout) and the choice of protocol. Runs in tokio, per connection.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::bridge::pending::ConnInfo;
use crate::bridge::relay::Relayed;
use crate::server::connection::{serve_connection, Protocol};
use crate::server::cork::{Corked, IoSignals};
use crate::server::{ConnectionGuard, ServerShared};
use crate::tls::{TlsInfo, TlsServer};

/// Starts serving an accepted stream in its own task. Over TLS the handshake runs in a task
/// of its own that spawns the serving one: a task's future is as large as its largest state,
/// so a connection that went on serving would keep the handshake's room for its whole life.
pub(crate) fn start_connection<S>(stream: S, info: ConnInfo, shared: &Arc<ServerShared>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Counted from the accept, so that a drain waits for connections still in their handshake
    // or whose task has not run yet.
    let count = shared.track_connection();
    let signals = Arc::new(IoSignals::default());
    let stream = Corked::new(stream, signals.clone());
    let shared = shared.clone();
    match shared.config.tls.clone() {
        None => {
            let protocol = Protocol::cleartext(shared.config.http);
            spawn_serving(stream, info, shared, protocol, signals, count);
        }
        Some(tls) => {
            let relay = shared.relay.clone();
            let handshake = handshake_then_serve(stream, tls, info, shared, signals, count);
            tokio::spawn(Relayed::new(handshake, &relay));
        }
    }
}

fn spawn_serving<S>(
    stream: S,
    info: ConnInfo,
    shared: Arc<ServerShared>,
    protocol: Protocol,
    signals: Arc<IoSignals>,
    count: ConnectionGuard,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let relay = shared.relay.clone();
    let serve = serve_connection(stream, info, shared, protocol, signals, count);
    tokio::spawn(Relayed::new(serve, &relay));
}

async fn handshake_then_serve<S>(
    stream: S,
    tls: Arc<TlsServer>,
    mut info: ConnInfo,
    shared: Arc<ServerShared>,
    signals: Arc<IoSignals>,
    count: ConnectionGuard,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let handshake = finish_handshake(tls.acceptor.accept(stream).into_fallible());
    // A failed or stalled handshake just closes the connection: there is nobody to answer.
    let stream = match tls.handshake_timeout {
        Some(limit) => tokio::time::timeout(limit, handshake).await.ok().flatten(),
        None => handshake.await,
    };
    let Some(stream) = stream else {
        shared.tls_handshake_failed();
        return;
    };
    let session = stream.get_ref().1;
    let protocol = Protocol::negotiated(shared.config.http, session.alpn_protocol());
    info.tls = Some(Arc::new(TlsInfo::new(session, tls.server_cert_pem.clone())));
    spawn_serving(stream, info, shared, protocol, signals, count);
}

/// The handshake; on failure, the alert rustls queued (say `protocol_version` to a client
/// below `--ssl-min-version`) is flushed before the connection closes: the cork may hold it,
/// and a client deserves the reason rather than a bare EOF.
async fn finish_handshake<S>(
    handshake: tokio_rustls::FallibleAccept<S>,
) -> Option<tokio_rustls::server::TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match handshake.await {
        Ok(stream) => Some(stream),
        Err((_, mut io)) => {
            let _ = io.flush().await;
            let _ = io.shutdown().await;
            None
        }
    }
}
