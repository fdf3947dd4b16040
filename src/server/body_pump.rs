//! The tokio task that moves a streamed request body from hyper to the app's channel.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Notify};

use crate::bridge::body::InChunk;
use crate::bridge::http_state::HttpExchange;
use crate::http::body_reader::{BodyError, BodyReader, Consumer, Piece};

/// Moves a streamed request body from hyper to the app's `receive()`. When the body fails,
/// `failed` fires first (the service then answers 400/413/408, or aborts a response that
/// already started), and only then does the app see `http.disconnect`, so its reaction cannot
/// race that answer. Returns the failure, for the log.
pub(crate) async fn pump_request_body(
    mut reader: BodyReader,
    tx: mpsc::Sender<InChunk>,
    exchange: Arc<HttpExchange>,
    start: Option<Arc<Notify>>,
    failed: oneshot::Sender<BodyError>,
) -> Option<BodyError> {
    if let Some(start) = start {
        // Expect: 100-continue — hyper answers 100 on the first poll, so wait for the app.
        start.notified().await;
        if tx.is_closed() {
            return None; // The app finished without reading: never ask for the body.
        }
    }
    // The idle timeout counts only while the app waits in receive(): a body held back by a
    // busy app (backpressure) is not the client's fault.
    let consumer = || {
        if tx.is_closed() {
            Consumer::Gone
        } else if exchange.receive_waiting() {
            Consumer::Waiting
        } else {
            Consumer::Busy
        }
    };
    loop {
        match reader.next(consumer).await {
            Piece::Data { data, last } => {
                if tx.send(InChunk::Data { data, last }).await.is_err() {
                    return None; // The app is done with the request; drop the rest.
                }
                exchange.wake_receiver();
                if last {
                    return None;
                }
            }
            Piece::Failed(err) => {
                // Stop reading first: hyper then closes (HTTP/1) or resets (HTTP/2) the rest.
                drop(reader);
                let _ = failed.send(err);
                let _ = tx.send(InChunk::Failed(err)).await;
                exchange.wake_receiver();
                return Some(err);
            }
            Piece::Abandoned => return None,
        }
    }
}
