//! From an accepted stream to a served connection: the TLS handshake (when configured, with
//! its timeout) and the choice of protocol. Runs in tokio, per connection.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::server::connection::{serve_connection, Protocol};
use crate::server::cork::FlushHint;
use crate::server::request::ConnInfo;
use crate::server::{ConnectionGuard, ServerShared};
use crate::tls::TlsInfo;

pub async fn start_connection<S>(
    stream: S,
    mut info: ConnInfo,
    shared: Arc<ServerShared>,
    flush_hint: Arc<FlushHint>,
    // Counted from the accept, so that a drain waits for connections still in their handshake
    // or whose task has not run yet.
    _count: ConnectionGuard,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mode = shared.config.http;
    let Some(tls) = shared.config.tls.clone() else {
        // Boxed: an idle connection's task then holds only the state it needs (the handshake
        // and the cleartext/TLS variants would otherwise share one large future).
        let serve = serve_connection(stream, info, shared, Protocol::cleartext(mode), flush_hint);
        return Box::pin(serve).await;
    };
    // Boxed too: the handshake state (rustls's) is large and only needed until it completes.
    let handshake = Box::pin(finish_handshake(
        tls.acceptor.accept(stream).into_fallible(),
    ));
    // A failed or stalled handshake just closes the connection: there is nobody to answer.
    let stream = match tls.handshake_timeout {
        Some(limit) => match tokio::time::timeout(limit, handshake).await {
            Ok(Some(stream)) => stream,
            _ => return,
        },
        None => match handshake.await {
            Some(stream) => stream,
            None => return,
        },
    };
    let session = stream.get_ref().1;
    let protocol = Protocol::negotiated(mode, session.alpn_protocol());
    info.tls = Some(Arc::new(TlsInfo::new(session, tls.server_cert_pem.clone())));
    Box::pin(serve_connection(stream, info, shared, protocol, flush_hint)).await
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
