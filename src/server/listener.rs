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
/// `release`: for a listener adopted while serving (`Core.adopt_tcp`): when it fires (or its
/// sender is dropped) the loop just lets go of its descriptor. The socket stays open in the
/// supervisor, so what is queued on it waits for the slot's own worker instead of a reset.
pub(crate) async fn accept_loop(
    listener: Listener,
    shared: Arc<ServerShared>,
    _registered: AcceptLoopGuard,
    release: Option<tokio::sync::oneshot::Receiver<()>>,
) {
    let listener = match listener {
        Listener::Quic(endpoint) => {
            return crate::server::h3::accept_loop(endpoint, shared, _registered).await
        }
        other => other,
    };
    let mut lifecycle = shared.lifecycle.subscribe();
    let released = async move {
        match release {
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(released);
    loop {
        if *lifecycle.borrow_and_update() >= Lifecycle::StopAccepting {
            take_the_backlog(listener, &shared);
            return;
        }
        tokio::select! {
            changed = lifecycle.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = &mut released => return,
            accepted = accept_one(&listener, &shared) => {
                if accepted.is_err() {
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            }
        }
    }
}

/// Before the listener closes: the connections the kernel already completed (its accept
/// queue) are taken and served like any other, without waiting for more. Closing the socket
/// with them queued would reset clients whose connect() had succeeded: a stop must serve a
/// connection or refuse it, never accept and drop it. (One completing between the last
/// accept and the close is the only one left; any later connect is refused.)
fn take_the_backlog(listener: Listener, shared: &Arc<ServerShared>) {
    match listener {
        Listener::Tcp(l) => {
            let Ok(l) = l.into_std() else { return };
            while let Ok((stream, peer)) = l.accept() {
                let Ok(stream) = into_tokio_tcp(stream) else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let Ok(local) = stream.local_addr() else {
                    continue;
                };
                start_connection(
                    SendFile::new(stream),
                    ConnInfo::new(Some(peer), LocalAddr::Tcp(local)),
                    shared,
                );
            }
        }
        Listener::Unix(l, path) => {
            let Ok(l) = l.into_std() else { return };
            while let Ok((stream, _)) = l.accept() {
                let stream = stream
                    .set_nonblocking(true)
                    .and_then(|()| tokio::net::UnixStream::from_std(stream));
                if let Ok(stream) = stream {
                    start_connection(
                        stream,
                        ConnInfo::new(None, LocalAddr::Unix(path.clone())),
                        shared,
                    );
                }
            }
        }
        Listener::Quic(_) => {}
    }
    // The std listener, non-blocking (tokio's `into_std` keeps the flag), dropped here.
}

fn into_tokio_tcp(stream: std::net::TcpStream) -> std::io::Result<tokio::net::TcpStream> {
    stream.set_nonblocking(true)?;
    tokio::net::TcpStream::from_std(stream)
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
