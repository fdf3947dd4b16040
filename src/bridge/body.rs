//! The body chunks both threads pass: request body pieces (tokio → app) and the response
//! body hyper writes (app → hyper).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc::{self, error::TryRecvError};

use crate::bridge::budget::{Budgets, Charge, CHUNK_OVERHEAD};
use crate::bridge::file_body::{FileBody, FileFailed, FileSource, FILE_CHUNK};
use crate::config::ServerConfig;
use crate::http::body_reader::BodyError;
use crate::http::responses::error_response;

/// Request body chunks in flight to the loop thread; the channel is bounded, so a slow app
/// stops tokio reading, which stops the client through TCP flow control.
pub(crate) enum InChunk {
    Data {
        data: Bytes,
        last: bool,
    },
    /// The body ended early: broken by the client, too large, or too slow.
    Failed(BodyError),
}

pub(crate) const REQUEST_BODY_QUEUE: usize = 4;

/// The most request body bytes merged into one chunk, by the body pump (pieces hyper has
/// ready) and again by `receive()` (chunks already queued). Tiny pieces (one-byte chunks,
/// small DATA frames) then cost the app one `http.request` per this many bytes instead of one
/// per piece. The same as `--body-preread-limit`'s default: a body that size already reaches
/// the app as one message. It bounds what one request holds in bytes: the queue's
/// `REQUEST_BODY_QUEUE` chunks, the one being merged and one piece held back. A single piece
/// larger than this passes through whole (it is never copied to be split).
pub(crate) const MERGED_CHUNK_BYTES: usize = 64 * 1024;

/// Request body pieces merged into one chunk of at most `MERGED_CHUNK_BYTES` (or one larger
/// piece). A lone piece passes through as it is; bytes are copied only once a second piece
/// joins it.
pub(crate) struct Joined {
    first: Bytes,
    more: Option<BytesMut>,
}

impl Joined {
    pub(crate) fn new(first: Bytes) -> Self {
        Joined { first, more: None }
    }

    fn len(&self) -> usize {
        self.more.as_ref().map_or(self.first.len(), BytesMut::len)
    }

    /// Nothing more may join.
    pub(crate) fn is_full(&self) -> bool {
        self.len() >= MERGED_CHUNK_BYTES
    }

    /// Whether `data` may join without going over the bound.
    pub(crate) fn fits(&self, data: &Bytes) -> bool {
        data.len() <= MERGED_CHUNK_BYTES.saturating_sub(self.len())
    }

    pub(crate) fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        if let Some(more) = &mut self.more {
            more.extend_from_slice(&data);
        } else if self.first.is_empty() {
            self.first = data;
        } else {
            // Sized for these two; it then grows by doubling, so its capacity stays under
            // twice the bound.
            let mut more = BytesMut::with_capacity(self.first.len() + data.len());
            more.extend_from_slice(&std::mem::take(&mut self.first));
            more.extend_from_slice(&data);
            self.more = Some(more);
        }
    }

    pub(crate) fn into_bytes(self) -> Bytes {
        match self.more {
            Some(more) => more.freeze(),
            None => self.first,
        }
    }
}

/// The loop's end of a streamed request body: `try_recv` hands out the data chunks queued so
/// far merged into one.
pub(crate) struct InChunks {
    rx: mpsc::Receiver<InChunk>,
    /// Taken from the channel, not handed out yet: a chunk that would have made the merged one
    /// too large, or a failure, which must come after the data queued before it.
    held: Option<InChunk>,
}

impl InChunks {
    pub(crate) fn new(rx: mpsc::Receiver<InChunk>) -> Self {
        InChunks { rx, held: None }
    }

    /// The next chunk merged with the data chunks queued behind it (up to
    /// `MERGED_CHUNK_BYTES`); the channel's error when nothing is queued.
    pub(crate) fn try_recv(&mut self) -> Result<InChunk, TryRecvError> {
        let first = match self.held.take() {
            Some(chunk) => chunk,
            None => self.rx.try_recv()?,
        };
        match first {
            InChunk::Data { data, last: false } => Ok(self.merge_queued(data)),
            other => Ok(other),
        }
    }

    fn merge_queued(&mut self, first: Bytes) -> InChunk {
        let mut joined = Joined::new(first);
        while !joined.is_full() {
            match self.rx.try_recv() {
                Ok(InChunk::Data { data, last }) if joined.fits(&data) => {
                    joined.push(data);
                    if last {
                        return InChunk::Data {
                            data: joined.into_bytes(),
                            last: true,
                        };
                    }
                }
                Ok(other) => {
                    self.held = Some(other);
                    break;
                }
                // Nothing more yet, or the sender is gone: the next call finds that again.
                Err(_) => break,
            }
        }
        InChunk::Data {
            data: joined.into_bytes(),
            last: false,
        }
    }
}

/// Response body chunks from `send()` to hyper.
pub(crate) enum OutChunk {
    Data(Bytes),
    /// The final chunk (`more_body` false); the body ends cleanly only after this.
    Last(Bytes),
    /// Response trailers (HTTP/2 only): they end the body, so a body promised trailers sends
    /// its last data as `Data` and then this.
    Trailers(HeaderMap),
    /// A span of a file (`http.response.zerocopysend` with more to come, or after body
    /// messages), read as hyper asks; `last` ends the body after it. `charge` (set by
    /// `BodyTx::send`) stands for the read it will hold, so queued spans (each an open
    /// descriptor) are bounded by the budgets like data.
    File {
        source: FileSource,
        last: bool,
        charge: Option<Charge>,
    },
}

/// What a queued file span costs the budgets: the chunk it will read at a time.
const FILE_SPAN_COST: usize = FILE_CHUNK + CHUNK_OVERHEAD;

/// The sending half of a streamed response body. The queue has no bound in chunks: every
/// data chunk is charged to the response's byte budgets instead (bridge/budget.rs), and
/// `send()` waits while they are full.
#[derive(Clone)]
pub(crate) struct BodyTx {
    tx: mpsc::UnboundedSender<OutChunk>,
    budgets: Budgets,
}

pub(crate) type BodyRx = mpsc::UnboundedReceiver<OutChunk>;

/// hyper is gone: the chunk could not be queued.
#[derive(Debug)]
pub(crate) struct BodyClosed;

impl BodyTx {
    pub(crate) fn channel(budgets: Budgets) -> (BodyTx, BodyRx) {
        let (tx, rx) = mpsc::unbounded_channel();
        (BodyTx { tx, budgets }, rx)
    }

    /// Queue `chunk`, its data charged to the budgets until hyper has let go of it.
    pub(crate) fn send(&self, chunk: OutChunk) -> Result<(), BodyClosed> {
        let chunk = match chunk {
            OutChunk::Data(data) => OutChunk::Data(self.budgets.charge(data)),
            OutChunk::Last(data) => OutChunk::Last(self.budgets.charge(data)),
            trailers @ OutChunk::Trailers(_) => trailers,
            OutChunk::File { source, last, .. } => OutChunk::File {
                source,
                last,
                charge: Some(self.budgets.charge_span(FILE_SPAN_COST)),
            },
        };
        self.tx.send(chunk).map_err(|_| BodyClosed)
    }

    pub(crate) fn budgets(&self) -> &Budgets {
        &self.budgets
    }
}

enum Kind {
    Empty,
    Full(Option<Bytes>),
    Stream {
        rx: BodyRx,
        finished: bool,
        /// The file span being sent, whether it ends the body, and its charge.
        reading: Option<(FileBody, bool, Option<Charge>)>,
    },
    /// `http.response.pathsend`: read as hyper asks (bridge/file_body.rs).
    File(FileBody),
}

/// The body hyper writes. A stream whose sender goes away without `Last` yields an error,
/// which makes hyper abort the connection: a client never sees a clean end of a truncated
/// body. `G` is held until hyper drops the body: the exchange's close guard (the alias
/// `ResponseBody` in http_state.rs), generic so that this file needs no exchange type.
pub(crate) struct GuardedBody<G> {
    kind: Kind,
    _guard: Option<G>,
}

#[derive(Debug)]
pub(crate) struct BodyAborted;

impl std::fmt::Display for BodyAborted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("response body aborted by the application")
    }
}

impl std::error::Error for BodyAborted {}

impl<G> GuardedBody<G> {
    pub(crate) fn empty(guard: Option<G>) -> Self {
        GuardedBody {
            kind: Kind::Empty,
            _guard: guard,
        }
    }

    pub(crate) fn full(data: Bytes, guard: Option<G>) -> Self {
        if data.is_empty() {
            return Self::empty(guard);
        }
        GuardedBody {
            kind: Kind::Full(Some(data)),
            _guard: guard,
        }
    }

    pub(crate) fn file(source: FileSource, guard: Option<G>) -> Self {
        GuardedBody {
            kind: Kind::File(FileBody::new(source)),
            _guard: guard,
        }
    }

    pub(crate) fn stream(rx: BodyRx, guard: Option<G>) -> Self {
        GuardedBody {
            kind: Kind::Stream {
                rx,
                finished: false,
                reading: None,
            },
            _guard: guard,
        }
    }
}

impl<G> GuardedBody<G> {
    /// A response the server makes itself (`http::responses::error_response`), with nothing
    /// watching it.
    pub(crate) fn error(config: &ServerConfig, status: StatusCode) -> http::Response<Self> {
        error_response(config, status).map(|text| GuardedBody::full(text, None))
    }

    /// A file body (`http.response.pathsend`, a lone `http.response.zerocopysend`).
    #[inline]
    pub(crate) fn is_file(&self) -> bool {
        matches!(self.kind, Kind::File(_))
    }

    /// A file body sends its spans as placeholders for sendfile(2): only for a response
    /// whose connection writes them that way (server/service.rs). Other bodies are unchanged.
    pub(crate) fn send_file_by_placeholder(&mut self) {
        if let Kind::File(file) = &mut self.kind {
            file.send_by_placeholder();
        }
    }

    /// Streamed (chunks arrive over time: from the app, or read from a file), as opposed to
    /// one known body.
    pub(crate) fn is_streaming(&self) -> bool {
        matches!(self.kind, Kind::Stream { .. } | Kind::File(_))
    }
}

impl<G: Unpin> Body for GuardedBody<G> {
    type Data = Bytes;
    type Error = BodyAborted;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyAborted>>> {
        match &mut self.kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Kind::Stream {
                rx,
                finished,
                reading,
            } => loop {
                if *finished {
                    return Poll::Ready(None);
                }
                if let Some((file, last, _)) = reading {
                    match file.poll_chunk(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Some(Ok(data))) => {
                            return Poll::Ready(Some(Ok(Frame::data(data))))
                        }
                        Poll::Ready(Some(Err(FileFailed))) => {
                            *finished = true;
                            *reading = None;
                            return Poll::Ready(Some(Err(BodyAborted)));
                        }
                        Poll::Ready(None) => {
                            *finished = *last;
                            *reading = None;
                            continue;
                        }
                    }
                }
                return match rx.poll_recv(cx) {
                    Poll::Ready(Some(OutChunk::Data(data))) => {
                        if data.is_empty() {
                            continue;
                        }
                        Poll::Ready(Some(Ok(Frame::data(data))))
                    }
                    Poll::Ready(Some(OutChunk::Last(data))) => {
                        *finished = true;
                        if data.is_empty() {
                            return Poll::Ready(None);
                        }
                        Poll::Ready(Some(Ok(Frame::data(data))))
                    }
                    Poll::Ready(Some(OutChunk::Trailers(map))) => {
                        *finished = true;
                        Poll::Ready(Some(Ok(Frame::trailers(map))))
                    }
                    Poll::Ready(Some(OutChunk::File {
                        source,
                        last,
                        charge,
                    })) => {
                        *reading = Some((FileBody::new(source), last, charge));
                        continue;
                    }
                    Poll::Ready(None) => {
                        *finished = true;
                        Poll::Ready(Some(Err(BodyAborted)))
                    }
                    Poll::Pending => Poll::Pending,
                };
            },
            Kind::File(file) => file
                .poll_chunk(cx)
                .map(|chunk| chunk.map(|c| c.map(Frame::data).map_err(|_| BodyAborted))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Full(data) => data.is_none(),
            Kind::Stream { finished, .. } => *finished,
            Kind::File(file) => file.is_end(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Full(Some(data)) => SizeHint::with_exact(data.len() as u64),
            Kind::Full(None) => SizeHint::with_exact(0),
            Kind::Stream { .. } => SizeHint::default(),
            Kind::File(file) => SizeHint::with_exact(file.remaining()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(chunk: &InChunk) -> (&[u8], bool) {
        match chunk {
            InChunk::Data { data, last } => (data, *last),
            InChunk::Failed(err) => panic!("a failure ({err:?}) where data was expected"),
        }
    }

    fn queue(chunks: Vec<InChunk>) -> InChunks {
        let (tx, rx) = mpsc::channel(chunks.len().max(1));
        for chunk in chunks {
            assert!(tx.try_send(chunk).is_ok());
        }
        InChunks::new(rx) // `tx` dropped: the channel reports Disconnected once empty
    }

    fn piece(bytes: &'static [u8], last: bool) -> InChunk {
        InChunk::Data {
            data: Bytes::from_static(bytes),
            last,
        }
    }

    #[test]
    fn a_lone_piece_passes_through_uncopied() {
        let first = Bytes::from(vec![7u8; 10]);
        let ptr = first.as_ptr();
        let mut joined = Joined::new(first);
        joined.push(Bytes::new());
        let out = joined.into_bytes();
        assert_eq!(out.as_ptr(), ptr);
        assert_eq!(out.len(), 10);
    }

    #[test]
    fn an_empty_first_piece_takes_the_next_uncopied() {
        let next = Bytes::from(vec![1u8; 3]);
        let ptr = next.as_ptr();
        let mut joined = Joined::new(Bytes::new());
        joined.push(next);
        assert_eq!(joined.into_bytes().as_ptr(), ptr);
    }

    #[test]
    fn pieces_join_in_order_up_to_the_bound() {
        let mut joined = Joined::new(Bytes::from_static(b"ab"));
        joined.push(Bytes::from_static(b"c"));
        joined.push(Bytes::from_static(b"de"));
        assert!(!joined.is_full());
        let rest = Bytes::from(vec![b'x'; MERGED_CHUNK_BYTES - 5]);
        assert!(joined.fits(&rest));
        assert!(!joined.fits(&Bytes::from(vec![b'x'; MERGED_CHUNK_BYTES - 4])));
        joined.push(rest);
        assert!(joined.is_full());
        assert!(joined.fits(&Bytes::new()));
        assert!(!joined.fits(&Bytes::from_static(b"y")));
        let out = joined.into_bytes();
        assert_eq!(out.len(), MERGED_CHUNK_BYTES);
        assert_eq!(&out[..6], b"abcdex");
    }

    #[test]
    fn a_piece_larger_than_the_bound_stays_whole() {
        let big = Bytes::from(vec![0u8; MERGED_CHUNK_BYTES * 2]);
        let joined = Joined::new(big.clone());
        assert!(joined.is_full());
        assert_eq!(joined.into_bytes(), big);
    }

    #[test]
    fn queued_chunks_merge_into_one_with_the_end() {
        let mut chunks = queue(vec![
            piece(b"a", false),
            piece(b"b", false),
            piece(b"", true),
        ]);
        assert_eq!(data(&chunks.try_recv().unwrap()), (&b"ab"[..], true));
        assert!(matches!(chunks.try_recv(), Err(TryRecvError::Disconnected)));
    }

    #[test]
    fn merging_stops_at_what_is_queued() {
        let (tx, rx) = mpsc::channel(4);
        let mut chunks = InChunks::new(rx);
        assert!(tx.try_send(piece(b"a", false)).is_ok());
        assert!(tx.try_send(piece(b"b", false)).is_ok());
        assert_eq!(data(&chunks.try_recv().unwrap()), (&b"ab"[..], false));
        assert!(matches!(chunks.try_recv(), Err(TryRecvError::Empty)));
        assert!(tx.try_send(piece(b"c", true)).is_ok());
        assert_eq!(data(&chunks.try_recv().unwrap()), (&b"c"[..], true));
    }

    #[test]
    fn a_failure_comes_after_the_data_before_it() {
        let mut chunks = queue(vec![
            piece(b"a", false),
            piece(b"b", false),
            InChunk::Failed(BodyError::TooLarge),
            piece(b"never", false),
        ]);
        assert_eq!(data(&chunks.try_recv().unwrap()), (&b"ab"[..], false));
        assert!(matches!(
            chunks.try_recv(),
            Ok(InChunk::Failed(BodyError::TooLarge))
        ));
    }

    #[test]
    fn a_chunk_that_does_not_fit_comes_next() {
        let big = Bytes::from(vec![b'z'; MERGED_CHUNK_BYTES]);
        let mut chunks = queue(vec![
            piece(b"a", false),
            InChunk::Data {
                data: big.clone(),
                last: false,
            },
            piece(b"b", true),
        ]);
        assert_eq!(data(&chunks.try_recv().unwrap()), (&b"a"[..], false));
        assert_eq!(data(&chunks.try_recv().unwrap()), (&big[..], false));
        assert_eq!(data(&chunks.try_recv().unwrap()), (&b"b"[..], true));
    }

    #[test]
    fn a_lone_queued_chunk_is_not_copied() {
        let first = Bytes::from(vec![3u8; 100]);
        let ptr = first.as_ptr();
        let mut chunks = queue(vec![InChunk::Data {
            data: first,
            last: false,
        }]);
        match chunks.try_recv() {
            Ok(InChunk::Data { data, last: false }) => assert_eq!(data.as_ptr(), ptr),
            _ => panic!("expected the chunk"),
        }
    }
}
