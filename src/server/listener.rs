//! Accept loops for TCP and Unix listeners.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};

use crate::bridge::{ConnInfo, LocalAddr};
use crate::server::handshake::start_connection;
use crate::server::sendfile::SendFile;
use crate::server::{AcceptLoopGuard, Lifecycle, ServerShared};

pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, Arc<str>),
    /// HTTP/3: its own accept loop (server/h3/listener.rs).
    Quic(quinn::Endpoint),
}

/// Accept errors such as EMFILE are transient: back off briefly instead of spinning or dying.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// `_registered`: taken before the spawn, so `stop_accepting` also waits for a loop that has
/// not run yet; dropped (with the listener) when the loop ends.
pub(crate) async fn accept_loop(
    listener: Listener,
    shared: Arc<ServerShared>,
    _registered: AcceptLoopGuard,
) {
    let listener = match listener {
        Listener::Quic(endpoint) => {
            return crate::server::h3::accept_loop(endpoint, shared, _registered).await
        }
        other => other,
    };
    let mut lifecycle = shared.lifecycle.subscribe();
    loop {
        if *lifecycle.borrow_and_update() >= Lifecycle::StopAccepting {
            return; // Dropping the listener closes the socket.
        }
        tokio::select! {
            changed = lifecycle.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            accepted = accept_one(&listener, &shared) => {
                if accepted.is_err() {
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            }
        }
    }
}

async fn accept_one(listener: &Listener, shared: &Arc<ServerShared>) -> std::io::Result<()> {
    match listener {
        Listener::Tcp(l) => {
            let (stream, peer) = l.accept().await?;
            // Responses are written whole; Nagle would only add latency.
            let _ = stream.set_nodelay(true);
            let local = stream.local_addr()?;
            start_connection(
                SendFile::new(stream),
                ConnInfo::new(Some(peer), LocalAddr::Tcp(local)),
                shared,
            );
        }
        Listener::Quic(_) => std::future::pending().await,
        Listener::Unix(l, path) => {
            let (stream, _) = l.accept().await?;
            start_connection(
                stream,
                ConnInfo::new(None, LocalAddr::Unix(path.clone())),
                shared,
            );
        }
    }
    Ok(())
}
