//! The tokio task that moves a streamed request body from hyper to the app's channel, merging
//! the pieces that have already arrived into one chunk each time.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, Notify};

use crate::bridge::{HttpExchange, InChunk, Joined};
use crate::http::body_reader::{BodyError, BodyReader, Consumer, Piece};

/// Moves a streamed request body from hyper to the app's `receive()`, each chunk holding what
/// had arrived when it was sent (`join_ready`): a client's one-byte chunks or tiny DATA
/// frames then cost the loop one wake-up per batch instead of one each. When the body fails,
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
    // A piece read while merging that belongs after the chunk being sent.
    let mut held = None;
    loop {
        let piece = match held.take() {
            Some(piece) => piece,
            None => reader.next(consumer).await,
        };
        match piece {
            Piece::Data { data, last } => {
                let (data, last) = if last {
                    (data, true)
                } else {
                    join_ready(&mut reader, data, &mut held).await
                };
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

/// `first` merged with the pieces that have arrived already (up to `MERGED_CHUNK_BYTES`), and
/// whether the body ends with them. A piece that does not fit, or a failure, goes to `held`:
/// it comes after this chunk, so the data before a failure still reaches the app first.
async fn join_ready(
    reader: &mut BodyReader,
    first: Bytes,
    held: &mut Option<Piece>,
) -> (Bytes, bool) {
    let mut joined = Joined::new(first);
    while !joined.is_full() {
        match reader.next_ready().await {
            Some(Piece::Data { data, last }) if joined.fits(&data) => {
                joined.push(data);
                if last {
                    return (joined.into_bytes(), true);
                }
            }
            Some(other) => {
                *held = Some(other);
                break;
            }
            None => break,
        }
    }
    (joined.into_bytes(), false)
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Mutex;

    use http_body_util::Empty;
    use hyper::body::Incoming;
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper::{Request, Response};
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncWriteExt, DuplexStream};

    use super::*;
    use crate::bridge::{
        BufferLimits, Exchange, HttpState, RequestBody, Wakeup, MERGED_CHUNK_BYTES,
        REQUEST_BODY_QUEUE,
    };

    const HEAD: &[u8] = b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n";

    fn one_byte_chunks(count: usize) -> Vec<u8> {
        b"1\r\nx\r\n".repeat(count)
    }

    /// What the app's channel got: (length, last) per chunk, `Err` for the failure.
    type Got = Result<(usize, bool), BodyError>;

    fn got(chunk: InChunk) -> Got {
        match chunk {
            InChunk::Data { data, last } => Ok((data.len(), last)),
            InChunk::Failed(err) => Err(err),
        }
    }

    /// A real hyper HTTP/1.1 connection over an in-memory stream (the client end returned,
    /// `HEAD` already written) and the body pump on its request, feeding the channel returned.
    async fn pump(limit: Option<u64>) -> (DuplexStream, mpsc::Receiver<InChunk>) {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(HEAD).await.unwrap();
        let (body_tx, body_rx) = oneshot::channel::<Incoming>();
        let slot = Mutex::new(Some(body_tx));
        let service = service_fn(move |req: Request<Incoming>| {
            if let Some(tx) = slot.lock().unwrap().take() {
                let _ = tx.send(req.into_body());
            }
            // Never answers: the body is read while the service waits, as in service.rs.
            async { std::future::pending::<Result<Response<Empty<Bytes>>, Infallible>>().await }
        });
        tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(server), service));
        let reader = BodyReader::new(body_rx.await.unwrap(), limit, None);
        let (response_tx, _) = crate::bridge::response_channel();
        let exchange = Arc::new(Exchange::new(
            Arc::new(Wakeup::new().expect("an eventfd")),
            None,
            HttpState::new(
                RequestBody::Done,
                response_tx,
                false,
                BufferLimits {
                    response: 1 << 20,
                    connection: None,
                },
                std::time::Instant::now(),
            ),
        ));
        let (tx, rx) = mpsc::channel(REQUEST_BODY_QUEUE);
        let (failed, _) = oneshot::channel();
        tokio::spawn(pump_request_body(reader, tx, exchange, None, failed));
        (client, rx)
    }

    async fn all(mut rx: mpsc::Receiver<InChunk>) -> Vec<Got> {
        let mut out = Vec::new();
        while let Some(chunk) = rx.recv().await {
            out.push(got(chunk));
        }
        out
    }

    // The tokio runtime of these tests has one thread, like the server's default: there the
    // pump sees every chunk hyper has already received, however hyper hands them over.

    #[tokio::test]
    async fn chunks_that_arrived_together_make_one() {
        let (mut client, rx) = pump(None).await;
        let mut body = one_byte_chunks(1000);
        body.extend_from_slice(b"0\r\n\r\n");
        client.write_all(&body).await.unwrap();
        assert_eq!(all(rx).await, vec![Ok((1000, true))]);
    }

    #[tokio::test]
    async fn a_merged_chunk_stops_at_the_bound() {
        let (mut client, rx) = pump(None).await;
        let mut body = one_byte_chunks(MERGED_CHUNK_BYTES + 10);
        body.extend_from_slice(b"0\r\n\r\n");
        client.write_all(&body).await.unwrap();
        assert_eq!(
            all(rx).await,
            vec![Ok((MERGED_CHUNK_BYTES, false)), Ok((10, true))]
        );
    }

    #[tokio::test]
    async fn the_limit_comes_after_the_data_before_it() {
        let (mut client, rx) = pump(Some(500)).await;
        client.write_all(&one_byte_chunks(1000)).await.unwrap();
        assert_eq!(
            all(rx).await,
            vec![Ok((500, false)), Err(BodyError::TooLarge)]
        );
    }

    #[tokio::test]
    async fn a_chunk_goes_on_without_waiting_for_more() {
        let (mut client, mut rx) = pump(None).await;
        for _ in 0..3 {
            client.write_all(&one_byte_chunks(1)).await.unwrap();
            assert_eq!(rx.recv().await.map(got), Some(Ok((1, false))));
        }
        client.write_all(b"0\r\n\r\n").await.unwrap();
        assert_eq!(rx.recv().await.map(got), Some(Ok((0, true))));
    }
}
