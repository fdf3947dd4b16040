//! The rules of an HTTP response as the app sends it (`http.response.start`, `.body`,
//! `.trailers`): which message may come when, what the body must add up to, what a HEAD,
//! 204 or 304 response keeps, where promised trailers go, and what is left to do when the
//! app returns or raises.
//!
//! Every rule of `HttpState` lives here (bridge/http_state.rs holds only the data): the
//! response transitions, where a body may wait (its budgets), and what `receive()` gets
//! next of the request body (`next_incoming`). Plain Rust, no Python (the parked futures
//! the state also holds are not touched here): each response transition takes validated
//! inputs and returns `Result<Action, Fault>`. `HttpProtocol` (protocol.rs) parses the message into those
//! inputs, performs the `Action` (it owns the config, the close guards and the waiters) and
//! turns a `Fault` into the exception the app sees. The tests at the bottom pin every rule,
//! the way hyper keeps its own connection state's tests beside it (proto/h1/conn.rs).

use std::fmt;
use std::sync::Weak;

use tokio::sync::mpsc::error::TryRecvError;

use crate::bridge::{
    BodyRx, BodyTx, Budgets, EarlyHint, FileSource, HttpExchange, HttpState, InChunk, OutChunk,
    RequestBody, ResponsePhase, ResponseSender, RoomWaiter,
};
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, TRAILER};
use http::{HeaderMap, HeaderValue, StatusCode};

/// A message the app may not send now, or whose content contradicts its own headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// A second `http.response.start`.
    AlreadyStarted,
    /// `http.response.body` before `http.response.start`.
    BodyBeforeStart,
    /// `http.response.trailers` before `http.response.start`.
    TrailersBeforeStart,
    /// A Content-Length value that is not a number (the value, as text).
    InvalidContentLength(String),
    /// Several Content-Length values that disagree.
    ContentLengthsDisagree,
    /// The body outgrew the declared Content-Length, or its last message left it short.
    LengthMismatch {
        declared: u64,
        sent: u64,
        more_body: bool,
    },
    /// `http.response.trailers` when `http.response.start` did not set `trailers: True`.
    TrailersNotPromised,
    /// `http.response.trailers` before the last body message.
    BodyNotComplete,
    /// `http.response.body` after the last one, while the promised trailers are due.
    BodyAlreadyComplete,
    /// `http.response.pathsend` after body messages (it must be the whole body), or before
    /// `http.response.start`.
    FileNotWholeBody,
    /// `http.response.zerocopysend` before `http.response.start`.
    ZeroCopyBeforeStart,
    /// `http.response.zerocopysend` after the last body message, while the promised
    /// trailers are due.
    ZeroCopyAfterBody,
    /// `http.response.early_hint` after `http.response.start`.
    HintAfterStart,
    /// The client is gone, or the response is already complete (`ClientDisconnected`).
    Disconnected,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::AlreadyStarted => f.write_str(
                "Unexpected ASGI message 'http.response.start': the response has already \
                 started",
            ),
            Fault::BodyBeforeStart => f.write_str(
                "Expected ASGI message 'http.response.start', but got 'http.response.body'",
            ),
            Fault::TrailersBeforeStart => f.write_str(
                "Expected ASGI message 'http.response.start', but got 'http.response.trailers'",
            ),
            Fault::InvalidContentLength(value) => {
                write!(f, "'headers' has an invalid Content-Length value {value:?}")
            }
            Fault::ContentLengthsDisagree => {
                f.write_str("'headers' has several Content-Length values that disagree")
            }
            Fault::LengthMismatch {
                declared,
                sent,
                more_body,
            } => {
                let so_far = if *more_body { " so far" } else { "" };
                write!(
                    f,
                    "the response declares Content-Length {declared} but the body has {sent} \
                     bytes{so_far}"
                )
            }
            Fault::TrailersNotPromised => f.write_str(
                "Unexpected ASGI message 'http.response.trailers': 'http.response.start' did \
                 not set 'trailers': True",
            ),
            Fault::BodyNotComplete => f.write_str(
                "Unexpected ASGI message 'http.response.trailers': the response body is not \
                 complete (send 'http.response.body' with 'more_body': False first)",
            ),
            Fault::BodyAlreadyComplete => f.write_str(
                "Unexpected ASGI message 'http.response.body': the body is complete, expected \
                 'http.response.trailers'",
            ),
            Fault::FileNotWholeBody => f.write_str(
                "Unexpected ASGI message 'http.response.pathsend': it must come right after \
                 'http.response.start', as the whole body",
            ),
            Fault::ZeroCopyBeforeStart => f.write_str(
                "Expected ASGI message 'http.response.start', but got \
                 'http.response.zerocopysend'",
            ),
            Fault::ZeroCopyAfterBody => f.write_str(
                "Unexpected ASGI message 'http.response.zerocopysend': the body is complete, \
                 expected 'http.response.trailers'",
            ),
            Fault::HintAfterStart => f.write_str(
                "Unexpected ASGI message 'http.response.early_hint': only allowed before \
                 'http.response.start'",
            ),
            Fault::Disconnected => {
                f.write_str("the client disconnected or the response is already complete")
            }
        }
    }
}

/// The body hyper gets with the head.
pub(crate) enum HeadBody {
    /// HEAD, 204, 304: nothing (the app's body messages are dropped).
    Empty,
    /// The whole body, in the one message that started the response.
    Full(Bytes),
    /// More follows (or trailers will end it): chunks come through the channel, the first
    /// one already queued.
    Stream(BodyRx),
    /// `http.response.pathsend`: the file, read as hyper sends it.
    File(FileSource),
}

/// What `HttpProtocol` must do after a transition.
pub(crate) enum Action {
    /// Hand hyper the head with this body (after adding `Server` and `--header`). The state
    /// already moved on; if hyper is gone, report it with `client_gone`.
    Respond {
        tx: ResponseSender,
        status: StatusCode,
        headers: HeaderMap,
        body: HeadBody,
    },
    /// Queue `chunk` on the body stream (waiting if the stream is full), then hand `queued`
    /// and `tx` back to `HttpState::queued`.
    Push {
        tx: BodyTx,
        chunk: OutChunk,
        queued: Queued,
    },
    /// Nothing goes out.
    Nothing,
    /// Nothing goes out, and the response is complete now.
    Done,
}

/// What a pushed chunk does to the state once the stream took it. A body chunk that could
/// not be queued (the client left, a send still in flight) changes nothing; trailers that
/// could not leave the response Closed, their stream dropped.
pub(crate) struct Queued {
    len: u64,
    then: AfterPush,
}

enum AfterPush {
    /// More body follows.
    More,
    /// The last body message; `hold_open` when trailers will end the stream.
    LastData { hold_open: bool },
    /// The trailers (or the plain end when they were empty): the response is complete.
    Trailers,
}

/// What `HttpProtocol` must do once the app is done with the request.
pub(crate) enum End {
    Nothing,
    /// Nothing went out yet: answer with the server's own 500.
    Send500(ResponseSender),
    /// Nothing went out yet and `--timeout-request` cancelled the app: 503 + Retry-After.
    SendTimedOut(ResponseSender),
    /// The body stream was dropped without its last chunk, which makes hyper abort the
    /// connection: the client never takes a truncated body for a whole one.
    Aborted,
    /// The body is whole but the promised trailers never came: end it cleanly without them
    /// (queue `OutChunk::Last`, waiting for room if need be).
    FinishBody(BodyTx),
}

/// The Content-Length the app set, if any; several must agree.
fn declared_length(headers: &HeaderMap) -> Result<Option<u64>, Fault> {
    let mut declared = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        let parsed = std::str::from_utf8(value.as_bytes())
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                Fault::InvalidContentLength(String::from_utf8_lossy(value.as_bytes()).into())
            })?;
        if declared.is_some_and(|d| d != parsed) {
            return Err(Fault::ContentLengthsDisagree);
        }
        declared = Some(parsed);
    }
    Ok(declared)
}

/// What `receive()` has for the app right now.
pub(crate) enum Incoming {
    Request(Bytes, bool),
    Disconnect,
    Wait,
}

impl HttpState {
    /// The next `receive()` event, moving the request body along.
    pub(crate) fn next_incoming(&mut self, ex: &HttpExchange) -> Incoming {
        let st = self;
        match &mut st.body {
            RequestBody::Full(data) => {
                let data = std::mem::take(data);
                st.body = RequestBody::Done;
                return Incoming::Request(data, false);
            }
            // The chunks queued now, merged (`InChunks`): tiny pieces cost one message per
            // batch, not one each.
            RequestBody::Stream(chunks) => match chunks.try_recv() {
                Ok(InChunk::Data { data, last }) => {
                    if last {
                        st.body = RequestBody::Done;
                    }
                    return Incoming::Request(data, !last);
                }
                Ok(InChunk::Failed(err)) => {
                    st.body = RequestBody::Done;
                    st.request_body_failed(err.status());
                    return Incoming::Disconnect;
                }
                Err(TryRecvError::Disconnected) => {
                    st.body_failed = Some(StatusCode::BAD_REQUEST);
                    st.body = RequestBody::Done;
                    return Incoming::Disconnect;
                }
                Err(TryRecvError::Empty) => {
                    if !ex.is_closed() {
                        return Incoming::Wait;
                    }
                    st.body = RequestBody::Done;
                }
            },
            RequestBody::Done => {}
        }
        if st.response_complete() || ex.is_closed() {
            Incoming::Disconnect
        } else {
            Incoming::Wait
        }
    }
}

/// Where a response's body may wait: its budgets.
impl HttpState {
    /// A body stream charged to this response's budget (and its connection's).
    pub(crate) fn body_channel(&self) -> (BodyTx, BodyRx) {
        BodyTx::channel(Budgets::new(
            self.buffers.response,
            self.buffers.connection.clone(),
        ))
    }

    /// Whether a body message now must wait for room: its response's or connection's
    /// budget is used up. (Checked before its body is copied out of Python.)
    pub(crate) fn body_budget_full(&self) -> bool {
        match &self.response {
            ResponsePhase::Streaming(tx) => tx.budgets().is_full(),
            ResponsePhase::Idle(_) | ResponsePhase::Held { .. } => self
                .buffers
                .connection
                .as_ref()
                .is_some_and(|c| c.is_full()),
            _ => false,
        }
    }

    /// Register `waiter` with the full budgets; false when room appeared meanwhile.
    pub(crate) fn wait_for_room(&self, waiter: &Weak<dyn RoomWaiter>) -> bool {
        match &self.response {
            ResponsePhase::Streaming(tx) => tx.budgets().wait_for_room(waiter),
            ResponsePhase::Idle(_) | ResponsePhase::Held { .. } => match &self.buffers.connection {
                Some(connection) if connection.is_full() => {
                    connection.wait_for_room(waiter.clone())
                }
                _ => false,
            },
            _ => false,
        }
    }

    pub(crate) fn response_complete(&self) -> bool {
        matches!(
            self.response,
            ResponsePhase::Complete | ResponsePhase::Closed
        )
    }
}

impl HttpState {
    /// Whether `http.response.start` may come now. `HttpProtocol` asks before parsing the
    /// message, so this fault comes before any in the message itself.
    pub(crate) fn check_start(&self) -> Result<(), Fault> {
        match self.response {
            ResponsePhase::Idle(_) => Ok(()),
            _ => Err(self.start_out_of_turn()),
        }
    }

    /// `http.response.early_hint` (validated; `hint` None where the transport cannot carry
    /// it: HTTP/1.0 and HTTP/2, dropped then). Allowed any number of times before
    /// `http.response.start`; it changes nothing the final response depends on.
    pub(crate) fn early_hint(
        &mut self,
        hint: Option<EarlyHint>,
        client_gone: bool,
    ) -> Result<(), Fault> {
        let ResponsePhase::Idle(tx) = &mut self.response else {
            return Err(match self.response {
                ResponsePhase::Complete | ResponsePhase::Closed => Fault::Disconnected,
                _ => Fault::HintAfterStart,
            });
        };
        if client_gone {
            return Err(Fault::Disconnected);
        }
        match hint {
            // Not sent: the service future is gone, which `client_gone` reports next time.
            Some(hint) if !hint.links.is_empty() => {
                tx.hint(hint);
            }
            _ => {}
        }
        Ok(())
    }

    /// `http.response.start` when the response has already started or ended.
    fn start_out_of_turn(&self) -> Fault {
        match self.response {
            ResponsePhase::Complete | ResponsePhase::Closed => Fault::Disconnected,
            _ => Fault::AlreadyStarted,
        }
    }

    /// `http.response.start`: held until the first body message, so that a failure until
    /// then can still become a clean 500 (ARCHITECTURE.md, hot path step 5). `client_gone`:
    /// the exchange is closed.
    #[inline]
    pub(crate) fn response_start(
        &mut self,
        status: StatusCode,
        headers: HeaderMap,
        trailers: bool,
        client_gone: bool,
    ) -> Result<(), Fault> {
        self.declared_length = declared_length(&headers)?;
        self.trailers = trailers;
        if client_gone {
            self.response = ResponsePhase::Closed;
            return Err(Fault::Disconnected);
        }
        let tx = match std::mem::replace(&mut self.response, ResponsePhase::Closed) {
            ResponsePhase::Idle(tx) => tx,
            // `HttpProtocol` checks first; kept whole all the same.
            other => {
                self.response = other;
                return Err(self.start_out_of_turn());
            }
        };
        self.status = status.as_u16();
        self.response = ResponsePhase::Held {
            tx,
            status,
            headers,
        };
        Ok(())
    }

    /// HTTP/1.1 with trailers promised and accepted: they can follow only a chunked body, so
    /// a Content-Length the app declared is still checked against the body but not sent.
    /// Returns whether the head names its trailer fields in `Trailer` (RFC 9110 §6.6.2):
    /// hyper's HTTP/1 server writes only the fields named there.
    pub(crate) fn chunk_for_trailers(&mut self) -> bool {
        let ResponsePhase::Held {
            status, headers, ..
        } = &mut self.response
        else {
            return true;
        };
        if sends_no_body(self.is_head, *status) {
            return true;
        }
        headers.remove(CONTENT_LENGTH);
        headers.contains_key(TRAILER)
    }

    /// `http.response.body`. `carries_trailers`: the transport can send trailers (HTTP/2, or
    /// HTTP/1.1 with `TE: trailers`), so promised ones keep the body stream open past the
    /// last data.
    #[inline]
    pub(crate) fn response_body(
        &mut self,
        body: Bytes,
        more_body: bool,
        carries_trailers: bool,
    ) -> Result<Action, Fault> {
        if let ResponsePhase::Streaming(tx) = &self.response {
            let tx = tx.clone();
            return self.push_body(tx, body, more_body, carries_trailers);
        }
        match std::mem::replace(&mut self.response, ResponsePhase::Closed) {
            ResponsePhase::Held {
                tx,
                status,
                headers,
            } => self.respond(tx, status, headers, body, more_body, carries_trailers),
            ResponsePhase::Discarding => {
                // The protocol does not run its end-of-response step here (it does when
                // the response completes with its head, or when trailers are dropped):
                // Nothing, not Done, as before this module existed.
                self.response = if more_body {
                    ResponsePhase::Discarding
                } else {
                    self.after_last_body(None)
                };
                Ok(Action::Nothing)
            }
            other => {
                let fault = match other {
                    ResponsePhase::Idle(_) => Fault::BodyBeforeStart,
                    ResponsePhase::Trailers { .. } => Fault::BodyAlreadyComplete,
                    _ => Fault::Disconnected,
                };
                self.response = other;
                Err(fault)
            }
        }
    }

    /// `http.response.pathsend` (the file opened and measured): the whole body, right after
    /// the start. Its size becomes the Content-Length, or must match the app's; HEAD, 204
    /// and 304 send none of it. Promised trailers cannot follow a file: they are dropped, as
    /// on HTTP/1.x.
    pub(crate) fn response_file(&mut self, file: FileSource) -> Result<Action, Fault> {
        match std::mem::replace(&mut self.response, ResponsePhase::Closed) {
            ResponsePhase::Held {
                tx,
                status,
                mut headers,
            } => {
                let size = file.len();
                if let Some(declared) = self.declared_length {
                    if declared != size {
                        // Nothing went out yet: the failure can still become a clean 500.
                        self.response = ResponsePhase::Held {
                            tx,
                            status,
                            headers,
                        };
                        return Err(Fault::LengthMismatch {
                            declared,
                            sent: size,
                            more_body: false,
                        });
                    }
                }
                self.status = status.as_u16();
                let no_body = sends_no_body(self.is_head, status);
                if self.declared_length.is_none() && status != StatusCode::NO_CONTENT {
                    headers.insert(CONTENT_LENGTH, HeaderValue::from(size));
                }
                let body = if no_body {
                    HeadBody::Empty
                } else {
                    self.bytes_sent += size;
                    HeadBody::File(file)
                };
                self.response = self.after_last_body(None);
                Ok(Action::Respond {
                    tx,
                    status,
                    headers,
                    body,
                })
            }
            other => {
                let fault = match other {
                    ResponsePhase::Complete | ResponsePhase::Closed => Fault::Disconnected,
                    _ => Fault::FileNotWholeBody,
                };
                self.response = other;
                Err(fault)
            }
        }
    }

    /// The first body message: the held head goes to hyper, with the body whole, empty or
    /// streamed.
    #[inline]
    fn respond(
        &mut self,
        tx: ResponseSender,
        status: StatusCode,
        mut headers: HeaderMap,
        body: Bytes,
        more_body: bool,
        carries_trailers: bool,
    ) -> Result<Action, Fault> {
        self.status = status.as_u16();
        let no_body = sends_no_body(self.is_head, status);
        if let (false, Some(declared)) = (no_body, self.declared_length) {
            let sent = body.len() as u64;
            if sent > declared || (!more_body && sent != declared) {
                // Nothing went out yet: keep the head so the failure becomes a clean 500.
                self.response = ResponsePhase::Held {
                    tx,
                    status,
                    headers,
                };
                return Err(Fault::LengthMismatch {
                    declared,
                    sent,
                    more_body,
                });
            }
        }
        // Trailers that will go out keep the stream open past the last data.
        let hold_open = self.trailers && carries_trailers;
        let head_body = if no_body {
            // HEAD mirrors GET's Content-Length when the whole body came in one message.
            if self.is_head
                && !more_body
                && !headers.contains_key(CONTENT_LENGTH)
                && !body.is_empty()
            {
                headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
            }
            // No body means nothing for trailers to follow: they are accepted and dropped.
            self.response = if more_body {
                ResponsePhase::Discarding
            } else {
                self.after_last_body(None)
            };
            HeadBody::Empty
        } else if !(more_body || hold_open) {
            self.bytes_sent += body.len() as u64;
            self.response = self.after_last_body(None);
            HeadBody::Full(body)
        } else {
            // Streamed: either more body follows, or trailers will end the stream (a Full
            // body would end it right after the data).
            let (otx, orx) = self.body_channel();
            if !body.is_empty() {
                self.bytes_sent += body.len() as u64;
                // The receiver is right here: this cannot fail.
                let _ = otx.send(OutChunk::Data(body));
            }
            self.response = if more_body {
                ResponsePhase::Streaming(otx)
            } else {
                self.after_last_body(Some(otx))
            };
            HeadBody::Stream(orx)
        };
        Ok(Action::Respond {
            tx,
            status,
            headers,
            body: head_body,
        })
    }

    /// A body message after the head went out, on the stream `tx`.
    #[inline]
    fn push_body(
        &mut self,
        tx: BodyTx,
        body: Bytes,
        more_body: bool,
        carries_trailers: bool,
    ) -> Result<Action, Fault> {
        let len = body.len() as u64;
        self.push(tx, len, more_body, carries_trailers, |last| {
            if last {
                OutChunk::Last(body)
            } else {
                OutChunk::Data(body)
            }
        })
    }

    /// `len` more body bytes on the stream `tx`, as the chunk `chunk(last)` makes (`last`:
    /// it ends the body).
    #[inline]
    fn push(
        &mut self,
        tx: BodyTx,
        len: u64,
        more_body: bool,
        carries_trailers: bool,
        chunk: impl FnOnce(bool) -> OutChunk,
    ) -> Result<Action, Fault> {
        if let Some(declared) = self.declared_length {
            let total = self.bytes_sent + len;
            if total > declared || (!more_body && total != declared) {
                // Part of the body is out: abort the connection rather than let the client
                // read a body whose framing is wrong.
                self.response = ResponsePhase::Closed;
                return Err(Fault::LengthMismatch {
                    declared,
                    sent: total,
                    more_body,
                });
            }
        }
        // With trailers to carry, the last data does not end the stream; they will.
        let hold_open = self.trailers && carries_trailers;
        let (chunk, then) = if more_body {
            (chunk(false), AfterPush::More)
        } else {
            (chunk(!hold_open), AfterPush::LastData { hold_open })
        };
        Ok(Action::Push {
            tx,
            chunk,
            queued: Queued { len, then },
        })
    }

    /// `http.response.zerocopysend` (the span checked against the file): the whole body
    /// when it is the first body message and the last, as `http.response.pathsend`; else a
    /// span of a streamed body, which body messages and other spans may precede or follow
    /// (chunked on HTTP/1.1 unless the app declared a Content-Length, checked as bodies are).
    pub(crate) fn response_zerocopy(
        &mut self,
        file: FileSource,
        more_body: bool,
        carries_trailers: bool,
    ) -> Result<Action, Fault> {
        let hold_open = self.trailers && carries_trailers;
        match &self.response {
            ResponsePhase::Streaming(tx) => {
                let tx = tx.clone();
                let len = file.len();
                return self.push(tx, len, more_body, carries_trailers, |last| {
                    OutChunk::File {
                        source: file,
                        last,
                        charge: None,
                    }
                });
            }
            ResponsePhase::Held { .. } if !more_body && !hold_open => {
                return self.response_file(file);
            }
            ResponsePhase::Held { status, .. } if !sends_no_body(self.is_head, *status) => {}
            // HEAD, 204, 304, or dropped: what an empty body message does.
            ResponsePhase::Held { .. } | ResponsePhase::Discarding => {
                return self.response_body(Bytes::new(), more_body, carries_trailers);
            }
            ResponsePhase::Idle(_) => return Err(Fault::ZeroCopyBeforeStart),
            ResponsePhase::Trailers { .. } => return Err(Fault::ZeroCopyAfterBody),
            ResponsePhase::Complete | ResponsePhase::Closed => return Err(Fault::Disconnected),
        }
        // The first body message, with more to come: the head goes out with a stream that
        // starts with this span.
        let len = file.len();
        if let Some(declared) = self.declared_length {
            if len > declared || (!more_body && len != declared) {
                return Err(Fault::LengthMismatch {
                    declared,
                    sent: len,
                    more_body,
                });
            }
        }
        let action = self.respond_streamed();
        let ResponsePhase::Streaming(tx) = &self.response else {
            return action;
        };
        let tx = tx.clone();
        // The receiver is in `action`: this cannot fail.
        let _ = tx.send(OutChunk::File {
            source: file,
            last: !more_body && !hold_open,
            charge: None,
        });
        self.bytes_sent += len;
        if !more_body {
            self.response = self.after_last_body(hold_open.then_some(tx));
        }
        action
    }

    /// The held head goes to hyper with an empty body stream, the phase `Streaming`.
    fn respond_streamed(&mut self) -> Result<Action, Fault> {
        match std::mem::replace(&mut self.response, ResponsePhase::Closed) {
            ResponsePhase::Held {
                tx,
                status,
                headers,
            } => {
                self.status = status.as_u16();
                let (otx, orx) = self.body_channel();
                self.response = ResponsePhase::Streaming(otx);
                Ok(Action::Respond {
                    tx,
                    status,
                    headers,
                    body: HeadBody::Stream(orx),
                })
            }
            other => {
                self.response = other;
                Err(Fault::Disconnected)
            }
        }
    }

    /// The stream took a pushed chunk (`tx` is the sender it went through). True when the
    /// response is complete now.
    pub(crate) fn queued(&mut self, queued: Queued, tx: BodyTx) -> bool {
        self.bytes_sent += queued.len;
        match queued.then {
            AfterPush::More => false,
            AfterPush::LastData { hold_open } => {
                self.response = self.after_last_body(hold_open.then_some(tx));
                self.response_complete()
            }
            AfterPush::Trailers => {
                self.response = ResponsePhase::Complete;
                true
            }
        }
    }

    /// The phase after the last body message: Complete, or waiting for the promised
    /// trailers (with the body stream still open when they can go out).
    fn after_last_body(&self, tx: Option<BodyTx>) -> ResponsePhase {
        if self.trailers {
            ResponsePhase::Trailers {
                tx,
                map: HeaderMap::new(),
            }
        } else {
            ResponsePhase::Complete
        }
    }

    /// `http.response.trailers` (validated: no forbidden fields): collected, and sent with
    /// the last one, or dropped when they cannot go out (HTTP/1.x, or no body).
    pub(crate) fn response_trailers(
        &mut self,
        headers: HeaderMap,
        more_trailers: bool,
    ) -> Result<Action, Fault> {
        if matches!(self.response, ResponsePhase::Idle(_)) {
            return Err(Fault::TrailersBeforeStart);
        }
        if !self.trailers {
            return Err(Fault::TrailersNotPromised);
        }
        match std::mem::replace(&mut self.response, ResponsePhase::Closed) {
            ResponsePhase::Trailers { tx, mut map } => {
                // Appended, not replaced: a later message may repeat a field name.
                for (name, value) in headers.iter() {
                    map.append(name.clone(), value.clone());
                }
                if more_trailers {
                    self.response = ResponsePhase::Trailers { tx, map };
                    return Ok(Action::Nothing);
                }
                let Some(tx) = tx else {
                    // Nowhere to put them (HTTP/1.x or no body): dropped, as documented.
                    self.response = ResponsePhase::Complete;
                    return Ok(Action::Done);
                };
                // Until the stream takes them the response stays Closed: a send that cannot
                // queue them drops the stream, which aborts the body.
                // An empty trailer section is just the end of the body.
                let chunk = if map.is_empty() {
                    OutChunk::Last(Bytes::new())
                } else {
                    OutChunk::Trailers(map)
                };
                Ok(Action::Push {
                    tx,
                    chunk,
                    queued: Queued {
                        len: 0,
                        then: AfterPush::Trailers,
                    },
                })
            }
            other => {
                let fault = match other {
                    ResponsePhase::Complete | ResponsePhase::Closed => Fault::Disconnected,
                    _ => Fault::BodyNotComplete,
                };
                self.response = other;
                Err(fault)
            }
        }
    }

    /// hyper is gone (the head or a chunk found its channel closed): nothing more can be
    /// sent.
    pub(crate) fn client_gone(&mut self) {
        self.response = ResponsePhase::Closed;
    }

    /// The request body failed (malformed, too large, too slow): tokio answers with
    /// `status` itself (400, 413, 408) unless the response had started, and aborts a
    /// started one.
    pub(crate) fn request_body_failed(&mut self, status: StatusCode) {
        self.body_failed = Some(status);
        match self.response {
            ResponsePhase::Idle(_) | ResponsePhase::Held { .. } => {
                // A response the app sends after this disconnect could go nowhere, so its
                // send() says so.
                self.status = status.as_u16();
                self.response = ResponsePhase::Closed;
            }
            ResponsePhase::Streaming(_) | ResponsePhase::Trailers { tx: Some(_), .. } => {
                // tokio aborts the started response; dropping its sender here too makes
                // the app's next send() raise rather than race the abort.
                self.response = ResponsePhase::Closed;
            }
            _ => {}
        }
    }

    /// The app raised (or could not be started): a 500 if nothing went out yet, an abort if
    /// the response started. `client_gone`: the exchange is closed.
    #[inline]
    pub(crate) fn app_failed(&mut self, client_gone: bool) -> End {
        match std::mem::replace(&mut self.response, ResponsePhase::Closed) {
            ResponsePhase::Idle(tx) | ResponsePhase::Held { tx, .. } => {
                if client_gone || self.body_failed.is_some() {
                    // Nobody to answer, or tokio already answers for the failed body.
                    if let Some(status) = self.body_failed {
                        self.status = status.as_u16();
                    }
                    return End::Nothing;
                }
                if self.timed_out {
                    self.status = 503;
                    return End::SendTimedOut(tx);
                }
                self.status = 500;
                End::Send500(tx)
            }
            ResponsePhase::Streaming(_) => End::Aborted,
            ResponsePhase::Discarding | ResponsePhase::Trailers { tx: None, .. } => {
                self.response = ResponsePhase::Complete;
                End::Nothing
            }
            // The body is whole but the trailers (often a status or checksum) are missing:
            // abort, like a truncated body, so the client does not take it for a success.
            ResponsePhase::Trailers { tx: Some(_), .. } => End::Aborted,
            other @ (ResponsePhase::Complete | ResponsePhase::Closed) => {
                self.response = other;
                End::Nothing
            }
        }
    }

    /// The app returned. With the `End`, the protocol fault for the error log when the
    /// response was left unfinished.
    #[inline]
    pub(crate) fn app_returned(&mut self, client_gone: bool) -> (End, Option<&'static str>) {
        let fault = match &self.response {
            ResponsePhase::Idle(_) => {
                "ASGI callable returned without starting a response; sent 500"
            }
            ResponsePhase::Held { .. } => {
                "ASGI callable returned without sending a response body; sent 500"
            }
            ResponsePhase::Streaming(_) => {
                "ASGI callable returned without completing the response; aborted it"
            }
            ResponsePhase::Trailers { .. } => {
                let end = match std::mem::replace(&mut self.response, ResponsePhase::Complete) {
                    ResponsePhase::Trailers { tx: Some(tx), .. } => End::FinishBody(tx),
                    _ => End::Nothing,
                };
                return (
                    end,
                    Some(
                        "ASGI callable promised trailers but returned without sending \
                         'http.response.trailers'; ended the response without them",
                    ),
                );
            }
            // The usual case: nothing left to do, and nothing to move.
            ResponsePhase::Complete | ResponsePhase::Closed => return (End::Nothing, None),
            ResponsePhase::Discarding => return (self.app_failed(client_gone), None),
        };
        let end = self.app_failed(client_gone);
        let fault = (!matches!(end, End::Nothing)).then_some(fault);
        (end, fault)
    }
}

/// A response that carries no body whatever the app sends: one to HEAD, a 204, a 304.
fn sends_no_body(is_head: bool, status: StatusCode) -> bool {
    is_head || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::{BufferLimits, RequestBody};
    use tokio::sync::mpsc::error::TryRecvError;

    /// `carries_trailers`: HTTP/2 can send trailers, HTTP/1.x does not offer them.
    const H2: bool = true;
    const H1: bool = false;

    fn exchange(is_head: bool) -> HttpState {
        let (tx, _rx) = crate::bridge::response_channel();
        let buffers = BufferLimits {
            response: 1 << 20,
            connection: None,
        };
        HttpState::new(
            RequestBody::Done,
            tx,
            is_head,
            buffers,
            std::time::Instant::now(),
        )
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    /// An exchange past a valid `http.response.start`.
    fn started(
        is_head: bool,
        status: u16,
        pairs: &[(&'static str, &'static str)],
        trailers: bool,
    ) -> HttpState {
        let mut st = exchange(is_head);
        let status = StatusCode::from_u16(status).unwrap();
        assert_eq!(
            st.response_start(status, headers(pairs), trailers, false),
            Ok(())
        );
        st
    }

    fn phase(st: &HttpState) -> &'static str {
        match st.response {
            ResponsePhase::Idle(_) => "idle",
            ResponsePhase::Held { .. } => "held",
            ResponsePhase::Streaming(_) => "streaming",
            ResponsePhase::Discarding => "discarding",
            ResponsePhase::Trailers { tx: Some(_), .. } => "trailers (stream open)",
            ResponsePhase::Trailers { tx: None, .. } => "trailers (dropped)",
            ResponsePhase::Complete => "complete",
            ResponsePhase::Closed => "closed",
        }
    }

    fn fault(result: Result<Action, Fault>) -> Fault {
        match result {
            Err(fault) => fault,
            Ok(_) => panic!("expected a fault"),
        }
    }

    fn body(st: &mut HttpState, data: &'static [u8], more: bool, h2: bool) -> Action {
        match st.response_body(Bytes::from_static(data), more, h2) {
            Ok(action) => action,
            Err(fault) => panic!("unexpected fault: {fault}"),
        }
    }

    /// The head an `Action::Respond` hands hyper.
    fn head(action: Action) -> (StatusCode, HeaderMap, HeadBody) {
        match action {
            Action::Respond {
                status,
                headers,
                body,
                ..
            } => (status, headers, body),
            _ => panic!("expected the head"),
        }
    }

    /// Perform an `Action::Push` as `HttpProtocol` does (the stream has room): whether the
    /// response is complete afterwards.
    fn queue(st: &mut HttpState, action: Action) -> bool {
        let Action::Push { tx, chunk, queued } = action else {
            panic!("expected a push")
        };
        assert!(tx.send(chunk).is_ok(), "the stream is open");
        st.queued(queued, tx)
    }

    /// A body message after the head, queued.
    fn queue_body(st: &mut HttpState, data: &'static [u8], more: bool, h2: bool) -> bool {
        let action = body(st, data, more, h2);
        queue(st, action)
    }

    /// The last trailers message, queued.
    fn queue_trailers(st: &mut HttpState, map: HeaderMap, more: bool) -> bool {
        let action = st.response_trailers(map, more).expect("trailers accepted");
        queue(st, action)
    }

    fn stream(body: HeadBody) -> BodyRx {
        match body {
            HeadBody::Stream(rx) => rx,
            HeadBody::Empty => panic!("expected a stream, got an empty body"),
            HeadBody::Full(_) => panic!("expected a stream, got a full body"),
            HeadBody::File(_) => panic!("expected a stream, got a file"),
        }
    }

    /// The next chunk hyper would read, as text.
    fn next_chunk(rx: &mut BodyRx) -> String {
        match rx.try_recv() {
            Ok(OutChunk::Data(data)) => format!("data {:?}", String::from_utf8_lossy(&data)),
            Ok(OutChunk::Last(data)) => format!("last {:?}", String::from_utf8_lossy(&data)),
            Ok(OutChunk::Trailers(map)) => {
                let fields: Vec<String> = map
                    .iter()
                    .map(|(n, v)| format!("{n}: {}", v.to_str().unwrap()))
                    .collect();
                format!("trailers {}", fields.join(", "))
            }
            Ok(OutChunk::File { source, last, .. }) => {
                format!("file of {} bytes, last {last}", source.len())
            }
            Err(TryRecvError::Empty) => "nothing yet".into(),
            Err(TryRecvError::Disconnected) => "dropped".into(),
        }
    }

    fn end_kind(end: &End) -> &'static str {
        match end {
            End::Nothing => "nothing",
            End::Send500(_) => "500",
            End::SendTimedOut(_) => "503",
            End::Aborted => "abort",
            End::FinishBody(_) => "finish body",
        }
    }

    // Message order.

    #[test]
    fn early_hints_go_ahead_of_the_response_and_only_before_its_start() {
        use crate::bridge::{response_channel, Reply};
        let (tx, mut rx) = response_channel();
        let buffers = BufferLimits {
            response: 1 << 20,
            connection: None,
        };
        let mut st = HttpState::new(
            RequestBody::Done,
            tx,
            false,
            buffers,
            std::time::Instant::now(),
        );
        let hint = |v: &'static str| EarlyHint {
            links: vec![HeaderValue::from_static(v)],
        };
        assert_eq!(st.early_hint(Some(hint("</a.css>")), false), Ok(()));
        assert_eq!(st.early_hint(None, false), Ok(()), "dropped, no fault");
        assert_eq!(st.early_hint(Some(hint("</b.js>")), false), Ok(()));
        let mut seen = Vec::new();
        let next = loop {
            match rx.try_recv() {
                Ok(Reply::Hint(hint, next)) => {
                    seen.push(hint.links[0].to_str().unwrap().to_owned());
                    rx = next;
                }
                Ok(Reply::Response(_)) => panic!("no response yet"),
                Err(_) => break rx,
            }
        };
        assert_eq!(seen, ["</a.css>", "</b.js>"]);
        let status = StatusCode::OK;
        assert_eq!(
            st.response_start(status, headers(&[]), false, false),
            Ok(())
        );
        assert_eq!(
            st.early_hint(Some(hint("</c.css>")), false),
            Err(Fault::HintAfterStart)
        );
        assert!(st
            .response_body(Bytes::from_static(b"x"), false, H1)
            .is_ok());
        drop(next);
        let mut gone = exchange(false);
        assert_eq!(
            gone.early_hint(Some(hint("</a.css>")), true),
            Err(Fault::Disconnected)
        );
    }

    #[test]
    fn start_then_one_body_hands_hyper_a_full_body() {
        let mut st = started(false, 200, &[("content-type", "text/plain")], false);
        assert_eq!(phase(&st), "held");
        assert_eq!(st.status, 200);
        let (status, headers, body) = head(body(&mut st, b"Hello", false, H1));
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers["content-type"], "text/plain");
        assert!(matches!(body, HeadBody::Full(ref b) if b == "Hello"));
        assert_eq!(phase(&st), "complete");
        assert!(st.response_complete());
        assert_eq!(st.bytes_sent, 5);
    }

    #[test]
    fn start_alone_sends_nothing() {
        // Held until the first body message, so a failure until then is still a clean 500.
        let st = started(false, 200, &[], false);
        assert_eq!(phase(&st), "held");
        assert_eq!(st.bytes_sent, 0);
    }

    #[test]
    fn body_before_start_is_refused_and_changes_nothing() {
        let mut st = exchange(false);
        let f = fault(st.response_body(Bytes::from_static(b"x"), false, H1));
        assert_eq!(f, Fault::BodyBeforeStart);
        assert_eq!(
            f.to_string(),
            "Expected ASGI message 'http.response.start', but got 'http.response.body'"
        );
        assert_eq!(phase(&st), "idle");
        assert_eq!(st.check_start(), Ok(()));
    }

    #[test]
    fn trailers_before_start_are_refused() {
        let mut st = exchange(false);
        let f = fault(st.response_trailers(HeaderMap::new(), false));
        assert_eq!(f, Fault::TrailersBeforeStart);
        assert_eq!(
            f.to_string(),
            "Expected ASGI message 'http.response.start', but got 'http.response.trailers'"
        );
        assert_eq!(phase(&st), "idle");
    }

    #[test]
    fn second_start_is_refused_while_the_response_is_open() {
        let mut st = started(false, 200, &[], false);
        assert_eq!(st.check_start(), Err(Fault::AlreadyStarted));
        assert_eq!(
            Fault::AlreadyStarted.to_string(),
            "Unexpected ASGI message 'http.response.start': the response has already started"
        );
        // Even unchecked, start keeps the held head whole.
        let again = st.response_start(StatusCode::NOT_FOUND, HeaderMap::new(), false, false);
        assert_eq!(again, Err(Fault::AlreadyStarted));
        assert_eq!(phase(&st), "held");
        assert_eq!(st.status, 200);

        let _ = head(body(&mut st, b"a", true, H1));
        assert_eq!(st.check_start(), Err(Fault::AlreadyStarted));
    }

    #[test]
    fn start_after_the_response_ended_reports_a_disconnect() {
        let mut st = started(false, 200, &[], false);
        let _ = head(body(&mut st, b"", false, H1));
        assert_eq!(phase(&st), "complete");
        assert_eq!(st.check_start(), Err(Fault::Disconnected));
    }

    #[test]
    fn body_after_the_last_one_reports_a_disconnect() {
        let mut st = started(false, 200, &[], false);
        let _ = head(body(&mut st, b"done", false, H1));
        assert_eq!(
            fault(st.response_body(Bytes::new(), false, H1)),
            Fault::Disconnected
        );
        assert_eq!(phase(&st), "complete");
    }

    // Streamed bodies.

    #[test]
    fn streamed_body_goes_through_the_channel_in_order() {
        let mut st = started(false, 200, &[], false);
        let (_, _, hb) = head(body(&mut st, b"ab", true, H1));
        let mut rx = stream(hb);
        assert_eq!(phase(&st), "streaming");
        assert_eq!(next_chunk(&mut rx), r#"data "ab""#);
        assert!(!queue_body(&mut st, b"cd", true, H1));
        assert_eq!(next_chunk(&mut rx), r#"data "cd""#);
        assert!(queue_body(&mut st, b"e", false, H1));
        assert_eq!(next_chunk(&mut rx), r#"last "e""#);
        assert_eq!(phase(&st), "complete");
        assert_eq!(st.bytes_sent, 5);
    }

    #[test]
    fn an_empty_first_chunk_queues_nothing() {
        let mut st = started(false, 200, &[], false);
        let (_, _, hb) = head(body(&mut st, b"", true, H1));
        let mut rx = stream(hb);
        assert_eq!(next_chunk(&mut rx), "nothing yet");
        assert_eq!(st.bytes_sent, 0);
    }

    #[test]
    fn a_chunk_counts_only_once_queued() {
        // A push that fails (client gone, send in flight) leaves the state as it was.
        let mut st = started(false, 200, &[], false);
        let _rx = stream(head(body(&mut st, b"ab", true, H1)).2);
        let action = body(&mut st, b"cd", false, H1);
        assert!(matches!(action, Action::Push { .. }));
        drop(action);
        assert_eq!(phase(&st), "streaming");
        assert_eq!(st.bytes_sent, 2);
    }

    // Content-Length.

    #[test]
    fn content_length_exact_in_one_message() {
        let mut st = started(false, 200, &[("content-length", "5")], false);
        assert_eq!(st.declared_length, Some(5));
        let (_, headers, hb) = head(body(&mut st, b"Hello", false, H1));
        assert_eq!(headers["content-length"], "5");
        assert!(matches!(hb, HeadBody::Full(_)));
        assert_eq!(phase(&st), "complete");
    }

    #[test]
    fn content_length_too_short_in_one_message_keeps_the_head_for_a_500() {
        let mut st = started(false, 200, &[("content-length", "5")], false);
        let f = fault(st.response_body(Bytes::from_static(b"Hel"), false, H1));
        assert_eq!(
            f,
            Fault::LengthMismatch {
                declared: 5,
                sent: 3,
                more_body: false
            }
        );
        assert_eq!(
            f.to_string(),
            "the response declares Content-Length 5 but the body has 3 bytes"
        );
        assert_eq!(phase(&st), "held");
        assert_eq!(st.bytes_sent, 0);
        // The app then raises: nothing went out, so the client gets a clean 500.
        assert_eq!(end_kind(&st.app_failed(false)), "500");
        assert_eq!(st.status, 500);
    }

    #[test]
    fn content_length_too_long_in_the_first_message() {
        let mut st = started(false, 200, &[("content-length", "2")], false);
        let f = fault(st.response_body(Bytes::from_static(b"abc"), true, H1));
        assert_eq!(
            f,
            Fault::LengthMismatch {
                declared: 2,
                sent: 3,
                more_body: true
            }
        );
        assert_eq!(
            f.to_string(),
            "the response declares Content-Length 2 but the body has 3 bytes so far"
        );
        assert_eq!(phase(&st), "held");
    }

    #[test]
    fn content_length_streamed_exact() {
        let mut st = started(false, 200, &[("content-length", "5")], false);
        let mut rx = stream(head(body(&mut st, b"ab", true, H1)).2);
        assert!(!queue_body(&mut st, b"", true, H1));
        assert!(queue_body(&mut st, b"cde", false, H1));
        assert_eq!(next_chunk(&mut rx), r#"data "ab""#);
        assert_eq!(next_chunk(&mut rx), r#"data """#);
        assert_eq!(next_chunk(&mut rx), r#"last "cde""#);
        assert_eq!(phase(&st), "complete");
    }

    #[test]
    fn content_length_streamed_too_long_aborts() {
        let mut st = started(false, 200, &[("content-length", "5")], false);
        let mut rx = stream(head(body(&mut st, b"abc", true, H1)).2);
        let f = fault(st.response_body(Bytes::from_static(b"def"), true, H1));
        assert_eq!(
            f,
            Fault::LengthMismatch {
                declared: 5,
                sent: 6,
                more_body: true
            }
        );
        // Part of the body is out: the stream is dropped without its end, hyper aborts.
        assert_eq!(phase(&st), "closed");
        assert_eq!(next_chunk(&mut rx), r#"data "abc""#);
        assert_eq!(next_chunk(&mut rx), "dropped");
        assert_eq!(
            fault(st.response_body(Bytes::new(), false, H1)),
            Fault::Disconnected
        );
    }

    #[test]
    fn content_length_streamed_too_short_at_the_end_aborts() {
        let mut st = started(false, 200, &[("content-length", "5")], false);
        let _rx = stream(head(body(&mut st, b"ab", true, H1)).2);
        let f = fault(st.response_body(Bytes::from_static(b"c"), false, H1));
        assert_eq!(
            f,
            Fault::LengthMismatch {
                declared: 5,
                sent: 3,
                more_body: false
            }
        );
        assert_eq!(phase(&st), "closed");
    }

    #[test]
    fn content_length_values_may_repeat_if_they_agree() {
        let st = started(
            false,
            200,
            &[("content-length", "5"), ("content-length", " 5 ")],
            false,
        );
        assert_eq!(st.declared_length, Some(5));
    }

    #[test]
    fn content_length_values_that_disagree_are_refused() {
        let mut st = exchange(false);
        let pairs = headers(&[("content-length", "5"), ("content-length", "6")]);
        let f = st
            .response_start(StatusCode::OK, pairs, true, false)
            .unwrap_err();
        assert_eq!(f, Fault::ContentLengthsDisagree);
        assert_eq!(
            f.to_string(),
            "'headers' has several Content-Length values that disagree"
        );
        // Refused before anything else changed: the start may be sent again.
        assert_eq!(phase(&st), "idle");
        assert!(!st.trailers);
        assert_eq!(st.status, 0);
    }

    #[test]
    fn content_length_that_is_not_a_number_is_refused() {
        for value in ["abc", "-1", "", "5 5", "18446744073709551616"] {
            let mut st = exchange(false);
            let mut map = HeaderMap::new();
            map.insert(CONTENT_LENGTH, HeaderValue::from_str(value).unwrap());
            let f = st
                .response_start(StatusCode::OK, map, false, false)
                .unwrap_err();
            assert_eq!(f, Fault::InvalidContentLength(value.into()));
            assert_eq!(phase(&st), "idle");
        }
        assert_eq!(
            Fault::InvalidContentLength("abc".into()).to_string(),
            r#"'headers' has an invalid Content-Length value "abc""#
        );
    }

    #[test]
    fn content_length_is_checked_before_the_client_is() {
        let mut st = exchange(false);
        let f = st.response_start(
            StatusCode::OK,
            headers(&[("content-length", "x")]),
            false,
            true,
        );
        assert_eq!(f, Err(Fault::InvalidContentLength("x".into())));
        assert_eq!(phase(&st), "idle");
    }

    // HEAD, 204, 304.

    #[test]
    fn head_drops_the_body_and_mirrors_its_length() {
        let mut st = started(true, 200, &[], false);
        let (_, headers, hb) = head(body(&mut st, b"Hello", false, H1));
        assert!(matches!(hb, HeadBody::Empty));
        assert_eq!(headers["content-length"], "5");
        assert_eq!(phase(&st), "complete");
        assert_eq!(st.bytes_sent, 0);
    }

    #[test]
    fn head_keeps_the_apps_content_length() {
        let mut st = started(true, 200, &[("content-length", "100")], false);
        // No mismatch for HEAD: the body is not sent.
        let (_, headers, hb) = head(body(&mut st, b"Hello", false, H1));
        assert!(matches!(hb, HeadBody::Empty));
        assert_eq!(headers["content-length"], "100");
    }

    #[test]
    fn head_adds_no_length_for_an_empty_or_streamed_body() {
        let mut st = started(true, 200, &[], false);
        let (_, headers, _) = head(body(&mut st, b"", false, H1));
        assert!(!headers.contains_key(CONTENT_LENGTH));

        let mut st = started(true, 200, &[], false);
        let (_, headers, hb) = head(body(&mut st, b"part", true, H1));
        assert!(!headers.contains_key(CONTENT_LENGTH));
        assert!(matches!(hb, HeadBody::Empty));
        assert_eq!(phase(&st), "discarding");
    }

    #[test]
    fn head_discards_the_rest_of_a_streamed_body() {
        let mut st = started(true, 200, &[("content-length", "3")], false);
        let _ = head(body(&mut st, b"ab", true, H1));
        assert!(matches!(body(&mut st, b"cdef", true, H1), Action::Nothing));
        assert_eq!(phase(&st), "discarding");
        // The end: complete, but Nothing to do (not Done: the protocol finishes it when
        // the app returns, as before).
        assert!(matches!(body(&mut st, b"", false, H1), Action::Nothing));
        assert_eq!(phase(&st), "complete");
        assert_eq!(st.bytes_sent, 0);
    }

    #[test]
    fn no_content_and_not_modified_drop_the_body() {
        for status in [204, 304] {
            let mut st = started(false, status, &[("content-length", "10")], false);
            let (s, headers, hb) = head(body(&mut st, b"body", false, H1));
            assert_eq!(s.as_u16(), status);
            assert!(matches!(hb, HeadBody::Empty));
            // Not HEAD: nothing mirrored, the app's header left alone, no mismatch.
            assert_eq!(headers["content-length"], "10");
            assert_eq!(phase(&st), "complete");

            let mut st = started(false, status, &[], false);
            let (_, headers, _) = head(body(&mut st, b"body", false, H1));
            assert!(!headers.contains_key(CONTENT_LENGTH));
        }
    }

    #[test]
    fn not_found_keeps_its_body() {
        let mut st = started(false, 404, &[], false);
        let (_, _, hb) = head(body(&mut st, b"nope", false, H1));
        assert!(matches!(hb, HeadBody::Full(_)));
    }

    // Trailers.

    #[test]
    fn promised_trailers_end_the_stream_on_http2() {
        let mut st = started(false, 200, &[], true);
        // One body message, yet streamed: the trailers will end the stream.
        let mut rx = stream(head(body(&mut st, b"data", false, H2)).2);
        assert_eq!(phase(&st), "trailers (stream open)");
        assert_eq!(next_chunk(&mut rx), r#"data "data""#);
        let first = st.response_trailers(headers(&[("x-checksum", "abc")]), true);
        assert!(matches!(first, Ok(Action::Nothing)));
        let last = st
            .response_trailers(headers(&[("x-checksum", "def"), ("x-status", "ok")]), false)
            .ok()
            .unwrap();
        assert!(queue(&mut st, last));
        assert_eq!(
            next_chunk(&mut rx),
            "trailers x-checksum: abc, x-checksum: def, x-status: ok"
        );
        assert_eq!(phase(&st), "complete");
    }

    #[test]
    fn promised_trailers_after_a_streamed_body_on_http2() {
        let mut st = started(false, 200, &[("content-length", "4")], true);
        let mut rx = stream(head(body(&mut st, b"ab", true, H2)).2);
        // The last data does not end the stream.
        assert!(!queue_body(&mut st, b"cd", false, H2));
        assert_eq!(phase(&st), "trailers (stream open)");
        assert_eq!(next_chunk(&mut rx), r#"data "ab""#);
        assert_eq!(next_chunk(&mut rx), r#"data "cd""#);
        assert!(queue_trailers(&mut st, headers(&[("x-a", "1")]), false));
        assert_eq!(next_chunk(&mut rx), "trailers x-a: 1");
        assert_eq!(st.bytes_sent, 4);
    }

    #[test]
    fn an_empty_trailer_section_just_ends_the_body() {
        let mut st = started(false, 200, &[], true);
        let mut rx = stream(head(body(&mut st, b"x", false, H2)).2);
        assert!(queue_trailers(&mut st, HeaderMap::new(), false));
        assert_eq!(next_chunk(&mut rx), r#"data "x""#);
        assert_eq!(next_chunk(&mut rx), r#"last """#);
    }

    #[test]
    fn promised_trailers_are_dropped_on_http1() {
        let mut st = started(false, 200, &[], true);
        let (_, _, hb) = head(body(&mut st, b"data", false, H1));
        assert!(matches!(hb, HeadBody::Full(_)));
        assert_eq!(phase(&st), "trailers (dropped)");
        let done = st.response_trailers(headers(&[("x-a", "1")]), false);
        assert!(matches!(done, Ok(Action::Done)));
        assert_eq!(phase(&st), "complete");
    }

    #[test]
    fn promised_trailers_are_dropped_without_a_body() {
        let mut st = started(true, 200, &[], true);
        let _ = head(body(&mut st, b"data", false, H2));
        assert_eq!(phase(&st), "trailers (dropped)");
        assert!(matches!(
            st.response_trailers(HeaderMap::new(), false),
            Ok(Action::Done)
        ));
    }

    #[test]
    fn trailers_that_were_not_promised_are_refused() {
        let mut st = started(false, 200, &[], false);
        let f = fault(st.response_trailers(HeaderMap::new(), false));
        assert_eq!(f, Fault::TrailersNotPromised);
        assert_eq!(
            f.to_string(),
            "Unexpected ASGI message 'http.response.trailers': 'http.response.start' did not \
             set 'trailers': True"
        );
        // Even once the response is complete: the app's mistake, not a disconnect.
        let _ = head(body(&mut st, b"", false, H2));
        assert_eq!(
            fault(st.response_trailers(HeaderMap::new(), false)),
            Fault::TrailersNotPromised
        );
    }

    #[test]
    fn trailers_before_the_body_ends_are_refused() {
        let mut st = started(false, 200, &[], true);
        let f = fault(st.response_trailers(HeaderMap::new(), false));
        assert_eq!(f, Fault::BodyNotComplete);
        assert_eq!(phase(&st), "held");
        assert!(f.to_string().contains("the response body is not complete"));

        let _rx = stream(head(body(&mut st, b"a", true, H2)).2);
        assert_eq!(
            fault(st.response_trailers(HeaderMap::new(), false)),
            Fault::BodyNotComplete
        );
        assert_eq!(phase(&st), "streaming");
    }

    #[test]
    fn body_after_the_last_one_while_trailers_are_due_is_refused() {
        let mut st = started(false, 200, &[], true);
        let _rx = stream(head(body(&mut st, b"a", false, H2)).2);
        let f = fault(st.response_body(Bytes::from_static(b"b"), false, H2));
        assert_eq!(f, Fault::BodyAlreadyComplete);
        assert_eq!(
            f.to_string(),
            "Unexpected ASGI message 'http.response.body': the body is complete, expected \
             'http.response.trailers'"
        );
        assert_eq!(phase(&st), "trailers (stream open)");
    }

    #[test]
    fn trailers_after_the_trailers_report_a_disconnect() {
        let mut st = started(false, 200, &[], true);
        let _rx = stream(head(body(&mut st, b"a", false, H2)).2);
        assert!(queue_trailers(&mut st, HeaderMap::new(), false));
        assert_eq!(
            fault(st.response_trailers(HeaderMap::new(), false)),
            Fault::Disconnected
        );
    }

    #[test]
    fn trailers_that_cannot_be_queued_leave_the_response_closed() {
        // A final trailers message whose push fails drops the stream: the body aborts.
        let mut st = started(false, 200, &[], true);
        let mut rx = stream(head(body(&mut st, b"a", false, H2)).2);
        let action = st.response_trailers(HeaderMap::new(), false).unwrap();
        assert_eq!(phase(&st), "closed");
        drop(action);
        assert_eq!(next_chunk(&mut rx), r#"data "a""#);
        assert_eq!(next_chunk(&mut rx), "dropped");
    }

    // Disconnects.

    #[test]
    fn start_after_the_client_left_reports_a_disconnect() {
        let mut st = exchange(false);
        let result = st.response_start(StatusCode::OK, HeaderMap::new(), true, true);
        assert_eq!(result, Err(Fault::Disconnected));
        assert_eq!(phase(&st), "closed");
        assert!(st.trailers);
        assert_eq!(st.status, 0);
        assert_eq!(
            fault(st.response_body(Bytes::new(), false, H1)),
            Fault::Disconnected
        );
        assert_eq!(st.check_start(), Err(Fault::Disconnected));
        // Nobody to answer.
        assert_eq!(end_kind(&st.app_failed(true)), "nothing");
    }

    #[test]
    fn hyper_gone_when_the_head_goes_out() {
        let mut st = started(false, 200, &[], false);
        let _ = head(body(&mut st, b"a", true, H1));
        st.client_gone();
        assert_eq!(phase(&st), "closed");
        assert_eq!(
            fault(st.response_body(Bytes::new(), false, H1)),
            Fault::Disconnected
        );
        let (end, log) = st.app_returned(true);
        assert_eq!(end_kind(&end), "nothing");
        assert_eq!(log, None);
    }

    #[test]
    fn request_body_failing_before_the_head_lets_tokio_answer() {
        for mut st in [exchange(false), started(false, 200, &[], false)] {
            st.request_body_failed(StatusCode::PAYLOAD_TOO_LARGE);
            assert_eq!(phase(&st), "closed");
            assert_eq!(st.status, 413);
            assert_eq!(
                fault(st.response_body(Bytes::new(), false, H1)),
                Fault::Disconnected
            );
            assert_eq!(end_kind(&st.app_failed(false)), "nothing");
        }
    }

    #[test]
    fn request_body_failing_after_the_head_aborts_the_response() {
        let mut st = started(false, 200, &[], false);
        let mut rx = stream(head(body(&mut st, b"a", true, H1)).2);
        st.request_body_failed(StatusCode::REQUEST_TIMEOUT);
        assert_eq!(phase(&st), "closed");
        assert_eq!(st.status, 200);
        assert_eq!(st.body_failed, Some(StatusCode::REQUEST_TIMEOUT));
        assert_eq!(next_chunk(&mut rx), r#"data "a""#);
        assert_eq!(next_chunk(&mut rx), "dropped");

        let mut st = started(false, 200, &[], true);
        let _rx = stream(head(body(&mut st, b"a", false, H2)).2);
        st.request_body_failed(StatusCode::BAD_REQUEST);
        assert_eq!(phase(&st), "closed");
    }

    #[test]
    fn request_body_failing_after_the_response_changes_nothing() {
        let mut st = started(false, 200, &[], false);
        let _ = head(body(&mut st, b"a", false, H1));
        st.request_body_failed(StatusCode::BAD_REQUEST);
        assert_eq!(phase(&st), "complete");
        assert_eq!(st.status, 200);

        let mut st = started(false, 200, &[], true);
        let _ = head(body(&mut st, b"a", false, H1));
        st.request_body_failed(StatusCode::BAD_REQUEST);
        assert_eq!(phase(&st), "trailers (dropped)");
    }

    // The app returns.

    #[test]
    fn returning_without_a_start_sends_500() {
        let mut st = exchange(false);
        let (end, log) = st.app_returned(false);
        assert_eq!(end_kind(&end), "500");
        assert_eq!(
            log,
            Some("ASGI callable returned without starting a response; sent 500")
        );
        assert_eq!(st.status, 500);
        assert_eq!(phase(&st), "closed");
    }

    #[test]
    fn returning_without_a_start_after_the_client_left_is_quiet() {
        let mut st = exchange(false);
        let (end, log) = st.app_returned(true);
        assert_eq!(end_kind(&end), "nothing");
        assert_eq!(log, None);
        assert_eq!(st.status, 0);

        // A failed request body: tokio answers with its own status.
        let mut st = exchange(false);
        st.body_failed = Some(StatusCode::BAD_REQUEST);
        let (end, log) = st.app_returned(false);
        assert_eq!(end_kind(&end), "nothing");
        assert_eq!(log, None);
        assert_eq!(st.status, 400);
    }

    #[test]
    fn returning_without_a_body_sends_500() {
        let mut st = started(false, 204, &[], false);
        let (end, log) = st.app_returned(false);
        assert_eq!(end_kind(&end), "500");
        assert_eq!(
            log,
            Some("ASGI callable returned without sending a response body; sent 500")
        );
        assert_eq!(st.status, 500);
    }

    #[test]
    fn returning_mid_stream_aborts() {
        let mut st = started(false, 200, &[], false);
        let mut rx = stream(head(body(&mut st, b"a", true, H1)).2);
        let (end, log) = st.app_returned(false);
        assert_eq!(end_kind(&end), "abort");
        assert_eq!(
            log,
            Some("ASGI callable returned without completing the response; aborted it")
        );
        assert_eq!(phase(&st), "closed");
        assert_eq!(next_chunk(&mut rx), r#"data "a""#);
        assert_eq!(next_chunk(&mut rx), "dropped");
    }

    #[test]
    fn returning_with_trailers_pending_ends_the_body_without_them() {
        let log = Some(
            "ASGI callable promised trailers but returned without sending \
             'http.response.trailers'; ended the response without them",
        );
        let mut st = started(false, 200, &[], true);
        let _rx = stream(head(body(&mut st, b"a", false, H2)).2);
        let (end, fault) = st.app_returned(false);
        assert_eq!(end_kind(&end), "finish body");
        assert_eq!(fault, log);
        assert_eq!(phase(&st), "complete");

        // HTTP/1: nothing to end, but the app's mistake is still logged.
        let mut st = started(false, 200, &[], true);
        let _ = head(body(&mut st, b"a", false, H1));
        let (end, fault) = st.app_returned(false);
        assert_eq!(end_kind(&end), "nothing");
        assert_eq!(fault, log);
        assert_eq!(phase(&st), "complete");
    }

    #[test]
    fn returning_after_a_complete_response_is_quiet() {
        let mut st = started(false, 200, &[], false);
        let _ = head(body(&mut st, b"a", false, H1));
        let (end, log) = st.app_returned(false);
        assert_eq!(end_kind(&end), "nothing");
        assert_eq!(log, None);
        assert_eq!(phase(&st), "complete");
        assert_eq!(st.status, 200);

        // HEAD mid-stream: nothing was going out anyway.
        let mut st = started(true, 200, &[], false);
        let _ = head(body(&mut st, b"a", true, H1));
        let (end, log) = st.app_returned(false);
        assert_eq!(end_kind(&end), "nothing");
        assert_eq!(log, None);
        assert_eq!(phase(&st), "complete");
    }

    // The app raises.

    #[test]
    fn failing_before_the_head_sends_500() {
        let mut st = exchange(false);
        assert_eq!(end_kind(&st.app_failed(false)), "500");
        assert_eq!(st.status, 500);
        let mut st = started(false, 201, &[], false);
        assert_eq!(end_kind(&st.app_failed(false)), "500");
        assert_eq!(st.status, 500);
        assert_eq!(phase(&st), "closed");
        // Once: a second failure finds nothing to answer.
        assert_eq!(end_kind(&st.app_failed(false)), "nothing");
    }

    #[test]
    fn failing_after_the_head_aborts() {
        let mut st = started(false, 200, &[], false);
        let _rx = stream(head(body(&mut st, b"a", true, H1)).2);
        assert_eq!(end_kind(&st.app_failed(false)), "abort");
        assert_eq!(phase(&st), "closed");
        assert_eq!(st.status, 200);

        // Promised trailers that can go out are part of the response: abort without them.
        let mut st = started(false, 200, &[], true);
        let _rx = stream(head(body(&mut st, b"a", false, H2)).2);
        assert_eq!(end_kind(&st.app_failed(false)), "abort");
        assert_eq!(phase(&st), "closed");
    }

    #[test]
    fn failing_when_nothing_more_would_go_out_completes() {
        let mut st = started(false, 200, &[], true);
        let _ = head(body(&mut st, b"a", false, H1));
        assert_eq!(end_kind(&st.app_failed(false)), "nothing");
        assert_eq!(phase(&st), "complete");

        let mut st = started(true, 200, &[], false);
        let _ = head(body(&mut st, b"a", true, H1));
        assert_eq!(end_kind(&st.app_failed(false)), "nothing");
        assert_eq!(phase(&st), "complete");

        let mut st = started(false, 200, &[], false);
        let _ = head(body(&mut st, b"a", false, H1));
        assert_eq!(end_kind(&st.app_failed(false)), "nothing");
        assert_eq!(phase(&st), "complete");
    }

    fn file_of(len: usize) -> FileSource {
        use std::io::Write;
        let path = std::env::temp_dir().join(format!(
            "ferrocorn-response-file-{}-{len}",
            std::process::id()
        ));
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(&vec![b'x'; len]))
            .expect("a temp file");
        let source = FileSource::open(&path).expect("opens");
        let _ = std::fs::remove_file(path);
        source
    }

    #[test]
    fn a_file_is_the_whole_body_with_its_length() {
        let mut st = started(false, 200, &[], false);
        let (status, headers, body) = head(st.response_file(file_of(1234)).expect("sent"));
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers.get(CONTENT_LENGTH).unwrap(), "1234");
        assert!(matches!(body, HeadBody::File(_)));
        assert_eq!(phase(&st), "complete");
        assert_eq!(st.bytes_sent, 1234);
    }

    #[test]
    fn a_file_must_match_the_declared_length_and_can_still_be_a_500() {
        let mut st = started(false, 200, &[("content-length", "10")], false);
        assert!(matches!(
            st.response_file(file_of(11)),
            Err(Fault::LengthMismatch {
                declared: 10,
                sent: 11,
                ..
            })
        ));
        assert_eq!(phase(&st), "held");
    }

    #[test]
    fn head_gets_the_length_and_no_file() {
        let mut st = started(true, 200, &[], false);
        let (_, headers, body) = head(st.response_file(file_of(77)).expect("sent"));
        assert_eq!(headers.get(CONTENT_LENGTH).unwrap(), "77");
        assert!(matches!(body, HeadBody::Empty));
        assert_eq!(phase(&st), "complete");
    }

    #[test]
    fn a_file_after_body_messages_or_before_start_is_refused() {
        let mut st = started(false, 200, &[], false);
        let _ = head(body(&mut st, b"abc", true, H1));
        assert_eq!(
            st.response_file(file_of(3)).err(),
            Some(Fault::FileNotWholeBody)
        );
        let mut idle = exchange(false);
        assert_eq!(
            idle.response_file(file_of(3)).err(),
            Some(Fault::FileNotWholeBody)
        );
    }

    #[test]
    fn a_lone_span_is_the_whole_body_and_spans_with_more_stream() {
        let mut st = started(false, 200, &[], false);
        let action = st.response_zerocopy(file_of(500), false, H1).expect("sent");
        let (_, headers, body) = head(action);
        assert_eq!(headers.get(CONTENT_LENGTH).unwrap(), "500");
        assert!(matches!(body, HeadBody::File(_)));
        assert_eq!(phase(&st), "complete");

        let mut st = started(false, 200, &[], false);
        let action = st.response_zerocopy(file_of(300), true, H1).expect("sent");
        let (_, headers, body) = head(action);
        assert!(
            headers.get(CONTENT_LENGTH).is_none(),
            "chunked: the length is not known"
        );
        let HeadBody::Stream(mut rx) = body else {
            panic!("expected a stream")
        };
        assert!(matches!(
            rx.try_recv(),
            Ok(OutChunk::File { last: false, .. })
        ));
        assert_eq!(phase(&st), "streaming");
        assert!(!queue_body(&mut st, b"abc", true, H1));
        let action = st.response_zerocopy(file_of(301), false, H1).expect("sent");
        assert!(
            queue(&mut st, action),
            "the last span completes the response"
        );
        assert_eq!(st.bytes_sent, 604);
    }

    #[test]
    fn spans_are_checked_against_the_declared_length() {
        let mut st = started(false, 200, &[("content-length", "400")], false);
        let _ = head(st.response_zerocopy(file_of(300), true, H1).expect("sent"));
        assert_eq!(
            fault(st.response_zerocopy(file_of(301), false, H1)),
            Fault::LengthMismatch {
                declared: 400,
                sent: 601,
                more_body: false
            }
        );
        assert_eq!(phase(&st), "closed");
        let mut held = started(false, 200, &[("content-length", "10")], false);
        assert!(matches!(
            held.response_zerocopy(file_of(311), true, H1),
            Err(Fault::LengthMismatch { sent: 311, .. })
        ));
        assert_eq!(phase(&held), "held", "nothing went out: still a clean 500");
    }

    #[test]
    fn spans_for_head_are_dropped_and_out_of_turn_spans_refused() {
        let mut st = started(true, 200, &[], false);
        assert!(matches!(
            head(st.response_zerocopy(file_of(302), true, H1).expect("sent")).2,
            HeadBody::Empty
        ));
        assert_eq!(phase(&st), "discarding");
        let mut idle = exchange(false);
        assert_eq!(
            fault(idle.response_zerocopy(file_of(303), false, H1)),
            Fault::ZeroCopyBeforeStart
        );
    }
}
