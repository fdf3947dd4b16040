//! The health-probe listener (`--health-port`): `GET /livez` and `GET /readyz` answered on
//! a tokio thread of its own, so they answer while the Python loop is blocked by the app.
//! The answers are `http/probes.rs`'s; what the readiness is, Python sets
//! (`core/probes.rs` `ProbeServer.set_ready`). Bounded against hostile clients: at most
//! `MAX_CONNECTIONS` at once (more are closed unanswered), a head of at most
//! `http::probes::MAX_HEAD` bytes, and `CONNECTION_TIMEOUT` for the whole exchange.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::http::probes::{answer, head_end, head_too_large, MAX_HEAD};

const MAX_CONNECTIONS: usize = 64;
/// From accept to the response written (a probe is one small exchange on a fast network).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// After the response: how long unread request bytes are drained before the close, so the
/// close is a FIN and not a reset that could destroy the response on its way.
const LINGER: Duration = Duration::from_millis(500);
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// What the probes report, shared with Python's side.
#[derive(Default)]
pub(crate) struct ProbeState {
    ready: AtomicBool,
    connections: AtomicUsize,
}

impl ProbeState {
    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

/// Accepts until the runtime is dropped.
pub(crate) async fn serve_probes(listener: TcpListener, state: Arc<ProbeState>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // EMFILE and the like are transient: back off, never spin or die.
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        if state.connections.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            state.connections.fetch_sub(1, Ordering::SeqCst);
            drop(stream);
            continue;
        }
        let state = state.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, probe(stream, &state)).await;
            state.connections.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

async fn probe(mut stream: TcpStream, state: &ProbeState) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let response = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(()); // gone before a whole head: nothing to answer
        }
        let scanned_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&buf[scanned_from..]).map(|e| e + scanned_from) {
            break answer(&buf[..end], state.is_ready());
        }
        if buf.len() > MAX_HEAD {
            break head_too_large();
        }
    };
    stream.write_all(&response).await?;
    stream.shutdown().await?;
    let _ = tokio::time::timeout(LINGER, async {
        while stream.read(&mut chunk).await.unwrap_or(0) > 0 {}
    })
    .await;
    Ok(())
}
