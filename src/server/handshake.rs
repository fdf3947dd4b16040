//! From an accepted stream to a served connection: the PROXY header (when configured), the
//! TLS handshake (when configured, with its timeout) and the choice of protocol. Runs in
//! tokio, per connection.
//!
//! The I/O wrappers a connection's bytes pass through, from hyper (HTTP/1.1) or h2 down to
//! the socket. Each layer is added where what it needs is known: the socket's kind at the
//! accept (`listener`), TLS here, the protocol once sniffed or negotiated (`connection`):
//!
//! ```text
//!   hyper (TokioIo) / h2
//!     └ H2Guard              HTTP/2 only: the frame-flood budget and   connection.rs
//!                            the frame rules h2 answers wrongly
//!     └ Batched              HTTP/2 only: read-ahead, held writes      connection.rs (h2_batch.rs)
//!     └ ReplayRewrite        replays sniffed/PROXY bytes; on HTTP/1   detect.rs (proxied.rs)
//!                            rewrites hyper's output (header order,
//!                            HTTP/1.0 status line, 103 Early Hints)
//!     └ Gathered             TLS only: HTTP/1 writes gathered into    here (tls_records.rs)
//!                            few records
//!     └ tokio-rustls         TLS only                                 here
//!     └ Corked               holds small writes until flushed; on     here (cork.rs)
//!                            drop writes what it holds (TLS alerts)
//!     └ SendFile             TCP: placeholder slices → sendfile(2)    listener.rs (sendfile.rs)
//!     └ TcpStream / UnixStream
//! ```

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::bridge::{ConnInfo, Relayed};
use crate::server::connection::{serve_connection, Protocol};
use crate::server::cork::{Corked, IoSignals};
use crate::server::proxied::{read_header, refuse};
use crate::server::tls_records::Gathered;
use crate::server::{ConnectionGuard, ServerShared};
use crate::tls::{TlsInfo, TlsServer};

/// Starts serving an accepted stream in its own task. Over TLS the handshake runs in a task
/// of its own that spawns the serving one: a task's future is as large as its largest state,
/// so a connection that went on serving would keep the handshake's room for its whole life.
/// With `--proxy-protocol`, a trusted peer's header is read first, in a task of its own too.
pub(crate) fn start_connection<S>(stream: S, info: ConnInfo, shared: &Arc<ServerShared>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Counted from the accept, so that a drain waits for connections still in their handshake
    // or whose task has not run yet.
    let count = shared.track_connection();
    match &shared.config.proxy_protocol {
        Some(proxy) if proxy.trusted.trusts(info.peer.as_ref()) => {
            let deadline = Instant::now() + proxy.timeout;
            tokio::spawn(proxy_header_then_start(
                stream,
                info,
                shared.clone(),
                count,
                deadline,
            ));
        }
        _ => start_after_accept(stream, info, shared.clone(), count, None),
    }
}

/// The PROXY header, within `deadline`; then TLS (what is left of the deadline) or HTTP.
async fn proxy_header_then_start<S>(
    stream: S,
    mut info: ConnInfo,
    shared: Arc<ServerShared>,
    count: ConnectionGuard,
    deadline: Instant,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(proxy) = shared.config.proxy_protocol.as_ref() else {
        return;
    };
    let read = read_header(stream, &mut info, proxy, &shared.wakeup);
    let stream = match tokio::time::timeout_at(deadline, read).await {
        Ok(Some(stream)) => stream,
        Ok(None) => return,
        Err(_) => {
            refuse(&info, proxy, &shared.wakeup, "no complete header in time");
            return;
        }
    };
    start_after_accept(stream, info, shared, count, Some(deadline));
}

/// TLS or cleartext, once the connection's addresses are known. `deadline`: the handshake's,
/// when a PROXY header already used part of it.
fn start_after_accept<S>(
    stream: S,
    info: ConnInfo,
    shared: Arc<ServerShared>,
    count: ConnectionGuard,
    deadline: Option<Instant>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let signals = Arc::new(IoSignals::default());
    let stream = Corked::new(stream, signals.clone());
    match shared.config.tls.clone() {
        None => {
            let protocol = Protocol::cleartext(shared.config.http);
            spawn_serving(stream, info, shared, protocol, signals, count);
        }
        Some(tls) => {
            let relay = shared.relay.clone();
            let deadline =
                deadline.or_else(|| tls.handshake_timeout.map(|limit| Instant::now() + limit));
            let handshake =
                handshake_then_serve(stream, tls, info, shared, signals, count, deadline);
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
    deadline: Option<Instant>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let identity = tls.current();
    let handshake = finish_handshake(identity.acceptor.accept(stream).into_fallible());
    // A failed or stalled handshake just closes the connection: there is nobody to answer.
    let stream = match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, handshake)
            .await
            .ok()
            .flatten(),
        None => handshake.await,
    };
    let Some(stream) = stream else {
        shared.tls_handshake_failed();
        return;
    };
    let session = stream.get_ref().1;
    let protocol = Protocol::negotiated(shared.config.http, session.alpn_protocol());
    info.tls = Some(Arc::new(TlsInfo::new(
        session,
        identity.server_cert_pem.clone(),
    )));
    // HTTP/1's pieces gathered into few records (HTTP/2 turns it off at once).
    let stream = Gathered::new(stream, signals.clone());
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
