//! hyper's service: one call per request. Reads a small body up front, queues the request for
//! the loop thread, and waits for the app's response.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, RETRY_AFTER, SEC_WEBSOCKET_VERSION, TRANSFER_ENCODING};
use http::{HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::sync::{mpsc, oneshot, Notify};

use crate::bridge::{
    response_channel, BodyAborted, BufferLimits, CloseGuard, Event, Exchange, HttpState, InChunks,
    LocalAddr, LogText, PendingRequest, Reply, RequestBody, ResponseBody, REQUEST_BODY_QUEUE,
};
use crate::config::{BodyLimits, SendfileMode, ServerConfig};
use crate::http::body_reader::{BodyError, BodyReader, InBody};
use crate::http::h1_request::check_head;
use crate::http::header_order::{is_marked, strip_marker};
use crate::http::headers::{add_host_from_authority, expects_continue, trailers_reach_client};
use crate::server::admission::{Unavailable, WebSocketSlot};
use crate::server::body_pump::pump_request_body;
use crate::server::conn_state::{ConnBusy, ConnCtx, InFlight};
use crate::server::early_hints::{HintsOut, StreamHints};
use crate::server::static_route;
use crate::server::websocket::{handle_upgrade, handshake};
use crate::server::{Admit, ServerShared};
use crate::ws::handshake::{asks_for_http1_upgrade, check_handshake, Refusal};

/// The response body plus the in-flight marker that lives exactly as long as hyper needs it.
pub(crate) struct TrackedBody {
    inner: ResponseBody,
    in_flight: Option<InFlight>,
    /// HTTP/1: the request counts as owed an answer from its head until this body is done.
    _owed: Option<ConnBusy>,
    /// For a streamed response to a streamed request: fires when the request body fails
    /// (too large, too slow, broken) after the response started, which can then only be
    /// aborted.
    body_failed: Option<oneshot::Receiver<BodyError>>,
}

impl TrackedBody {
    pub(crate) fn new(
        response: Response<ResponseBody>,
        in_flight: Option<InFlight>,
        body_failed: Option<oneshot::Receiver<BodyError>>,
    ) -> Response<TrackedBody> {
        // A complete body has nothing left to cut short: it goes out whole.
        let body_failed = body_failed.filter(|_| response.body().is_streaming());
        response.map(|inner| TrackedBody {
            inner,
            in_flight,
            _owed: None,
            body_failed,
        })
    }
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = BodyAborted;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyAborted>>> {
        if let Some(failed) = &mut self.body_failed {
            match Pin::new(failed).poll(cx) {
                Poll::Ready(Ok(_)) => {
                    self.body_failed = None;
                    return Poll::Ready(Some(Err(BodyAborted)));
                }
                Poll::Ready(Err(_)) => self.body_failed = None, // the body ended normally
                Poll::Pending => {}
            }
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if self.inner.is_streaming() && matches!(polled, Poll::Ready(Some(Ok(_)))) {
            if let Some(in_flight) = &self.in_flight {
                in_flight.chunk_taken();
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `owed`: HTTP/1's mark that the connection owes this request an answer (see
/// `ConnCtx::hold_eof`), kept until its response body is done.
pub(crate) async fn handle_request(
    req: Request<Incoming>,
    conn: Arc<ConnCtx>,
    owed: Option<ConnBusy>,
) -> Result<Response<TrackedBody>, Infallible> {
    let mut response = answer(req, conn).await;
    response.body_mut()._owed = owed;
    Ok(response)
}

async fn answer(req: Request<Incoming>, conn: Arc<ConnCtx>) -> Response<TrackedBody> {
    let arrived = Instant::now();
    // Before anything can answer it (a 503 included): its status line, if HTTP/1.0.
    conn.http10
        .request(req.version(), req.method() == Method::HEAD);
    let in_flight = match admit(&conn, || is_websocket_request(&conn.shared.config, &req)).await {
        Ok(in_flight) => in_flight,
        Err(refused) => return refused,
    };
    let version = req.version();
    let (mut response, body_failed) = respond(req, &conn, arrived).await;
    if is_marked(response.headers()) {
        // The app's header order across names: the write side puts it back (server::reorder).
        conn.reordered.expect();
    }
    if response.body().is_file()
        && version == Version::HTTP_11
        && writes_by_sendfile(&conn, &response)
    {
        response.body_mut().send_file_by_placeholder();
    }
    TrackedBody::new(response, Some(in_flight), body_failed)
}

/// HTTP/2's and HTTP/3's service (server/h2/, server/h3/): the request's head is checked
/// already (RFC 9113 §8.2, RFC 9114 §4.2, §4.3), its body is the stream's adapter. No
/// upgrades, no HTTP/1 framing rules; an extended CONNECT never comes here.
pub(crate) async fn handle_multiplexed_request(
    req: Request<InBody>,
    conn: Arc<ConnCtx>,
    hints: &StreamHints,
) -> Response<TrackedBody> {
    let arrived = Instant::now();
    let in_flight = match admit(&conn, || false).await {
        Ok(in_flight) => in_flight,
        Err(refused) => return refused,
    };
    let (response, body_failed) = match request_line_too_long(&req, &conn) {
        Some(refused) => (refused, None),
        None => {
            let (head, body) = req.into_parts();
            match conn.shared.config.static_files.route_for(head.uri.path()) {
                // The core's own files, as on TCP.
                Some(route) => (static_route::serve(head, route, &conn, arrived).await, None),
                None => respond_http(head, body, &conn, arrived, HintsOut::Queued(hints)).await,
            }
        }
    };
    let mut response = response;
    // HPACK and QPACK keep no order across names: the marker (http::header_order) goes.
    strip_marker(response.headers_mut());
    TrackedBody::new(response, Some(in_flight), body_failed)
}

/// HTTP/2's and HTTP/3's WebSocket (RFC 8441, RFC 9220): an extended CONNECT the stream's
/// request path found asking for one (`server::h2::stream`, `server::h3::request`). The
/// answer is the app's decision; `upgraded` yields the socket once the 200 went out.
pub(crate) async fn handle_multiplexed_websocket<F, Io>(
    head: http::request::Parts,
    conn: Arc<ConnCtx>,
    upgraded: F,
) -> Response<TrackedBody>
where
    F: Future<Output = Option<Io>> + Send + 'static,
    Io: crate::ws::stream::WsTransport + Send + 'static,
{
    let in_flight = match admit(&conn, || true).await {
        Ok(in_flight) => in_flight,
        Err(refused) => return refused,
    };
    let request = Request::from_parts(head, ());
    let mut response = if let Some(refused) = request_line_too_long(&request, &conn) {
        refused
    } else {
        let checked = check_handshake(request.method(), request.version(), request.headers());
        open_websocket(&conn, checked, |slot| {
            let (head, ()) = request.into_parts();
            handshake(head, &conn, slot, upgraded)
        })
        .await
    };
    // HPACK and QPACK keep no order across names: the marker (http::header_order) goes.
    strip_marker(response.headers_mut());
    TrackedBody::new(response, Some(in_flight), None)
}

/// `--limit-concurrency` (and its queue): the request runs, or gets the server's 503.
async fn admit(
    conn: &Arc<ConnCtx>,
    is_websocket: impl FnOnce() -> bool,
) -> Result<InFlight, Response<TrackedBody>> {
    let shared = &conn.shared;
    match shared.admit_request(is_websocket) {
        Admit::Run => Ok(InFlight::new(conn.clone())),
        Admit::Refused(reason) => Err(TrackedBody::new(unavailable(shared, reason), None, None)),
        Admit::Wait(queue) => {
            // In flight from here: a waiting request keeps its connection busy (no keep-alive
            // close, no parking), and dropping this (the client left) ends it like any other.
            let mut in_flight = InFlight::new(conn.clone());
            match queue.admit(shared.lifecycle.subscribe()).await {
                Ok(slot) => {
                    in_flight.hold(slot);
                    Ok(in_flight)
                }
                Err(reason) => {
                    shared.unavailable.count(reason);
                    drop(in_flight);
                    Err(TrackedBody::new(unavailable(shared, reason), None, None))
                }
            }
        }
    }
}

/// `--limit-request-line`: a request-target longer than that gets 414.
fn request_line_too_long<B>(req: &Request<B>, conn: &ConnCtx) -> Option<Response<ResponseBody>> {
    let limit = conn.shared.config.limit_request_line?;
    let length = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    (length > limit).then(|| {
        let why = format_args!(
            "request-target of {length} bytes is longer than --limit-request-line \
             ({limit} bytes)"
        );
        refuse(conn, StatusCode::URI_TOO_LONG, why)
    })
}

/// An HTTP/1.1 upgrade (HTTP/2's extended CONNECT is told apart in `server::h2::stream`).
fn is_websocket_request(config: &ServerConfig, req: &Request<Incoming>) -> bool {
    config.ws.enabled && asks_for_http1_upgrade(req.version(), req.headers())
}

/// The server's own 503 for a request it cannot take now: a retry soon may succeed.
fn unavailable(shared: &ServerShared, _reason: Unavailable) -> Response<ResponseBody> {
    let mut response = ResponseBody::error(&shared.config, StatusCode::SERVICE_UNAVAILABLE);
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// A request refused by a limit: a warning in the error log, and the answer.
fn refuse(
    conn: &ConnCtx,
    status: StatusCode,
    why: std::fmt::Arguments<'_>,
) -> Response<ResponseBody> {
    warn_limit(conn, status, why);
    ResponseBody::error(&conn.shared.config, status)
}

/// A WebSocket handshake that breaks RFC 6455 §4.2.1: 400, or 426 naming the version we
/// speak (§4.4).
/// A request that asks for a WebSocket, over any transport: `open` runs the handshake when
/// the request passed `check_handshake` and a `--limit-websockets` slot is free; otherwise
/// the refusal's 4xx or the server's 503.
async fn open_websocket<F, Fut>(
    conn: &ConnCtx,
    checked: Result<(), Refusal>,
    open: F,
) -> Response<ResponseBody>
where
    F: FnOnce(Option<WebSocketSlot>) -> Fut,
    Fut: Future<Output = Response<ResponseBody>>,
{
    if let Err(refusal) = checked {
        return refuse_websocket(conn, refusal);
    }
    match conn.shared.websocket_slot() {
        Ok(slot) => open(slot).await,
        Err(reason) => unavailable(&conn.shared, reason),
    }
}

fn refuse_websocket(conn: &ConnCtx, refusal: Refusal) -> Response<ResponseBody> {
    let mut response = refuse(
        conn,
        refusal.status(),
        format_args!("refused a WebSocket handshake: {}", refusal.reason()),
    );
    if refusal == Refusal::UnsupportedVersion {
        response
            .headers_mut()
            .insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
    }
    response
}

fn warn_limit(conn: &ConnCtx, status: StatusCode, why: std::fmt::Arguments<'_>) {
    let text = format!("{} from {}: {why}", status.as_u16(), conn.peer_text());
    conn.shared
        .wakeup
        .push(Event::Warning(Box::new(LogText(text))));
}

/// Logs why a streamed body was cut off (a broken body is the client's business, not logged).
/// `limits`: the ones this request had (the global ones, or its `--path-policy`'s).
fn warn_body_failed(conn: &ConnCtx, err: BodyError, limits: BodyLimits) {
    match err {
        BodyError::TooLarge => warn_limit(
            conn,
            err.status(),
            format_args!(
                "request body larger than --limit-request-body ({} bytes); stopped reading it \
                 (413, or the response aborted if it had started)",
                limits.limit.unwrap_or_default()
            ),
        ),
        BodyError::TimedOut => warn_limit(
            conn,
            err.status(),
            format_args!(
                "no request body data for --timeout-request-body ({}s) while the app waited \
                 for it (408, or the response aborted if it had started)",
                limits.timeout.unwrap_or_default().as_secs_f64()
            ),
        ),
        BodyError::Malformed => {}
    }
}

/// Whether a file body of this HTTP/1.1 response may go out as placeholders for sendfile(2)
/// (bridge/file_spans.rs): only where each placeholder reaches `server::sendfile` uncopied.
/// So cleartext TCP (TLS encrypts a copy; every TCP stream is wrapped in `SendFile` at the
/// accept), HTTP/1.1 (HTTP/1.0 responses are rewritten on their way out, `server::http10`;
/// HTTP/2 frames copy the data) and a Content-Length (hyper hands a chunked body over with
/// its chunk framing around each frame, uncopied too, but the rule stays simple: one span
/// of bytes, one frame). hyper writes cleartext HTTP/1.1 with vectored writes
/// (`connection::http1_builder` turns them off only over TLS), which pass the frames on
/// as they are; the write coalescing (`server::cork`) holds only writes of up to 64 KiB,
/// and placeholders are longer (`file_spans::MIN_SPAN`).
///
/// `--sendfile auto` (the default) leaves out peers on this host. There the bytes are copied
/// once anyway, by the reader, and a reader copying out of the page-cache pages sendfile
/// queues spends two to three times the CPU it spends on bytes the writer copied: 5 MB
/// bodies to wrk over loopback, wrk's CPU per response 2.8–3.1 ms against 1.0–1.3 ms, and
/// the same with a plain Python server, os.sendfile against sendall. A proxy or client on
/// the same machine pays more than sendfile saves (server + client CPU per 5 MB: ~3.8 ms
/// by sendfile, ~3.0 ms copied), so there the file is read and written like any body.
fn writes_by_sendfile(conn: &ConnCtx, response: &Response<ResponseBody>) -> bool {
    // Linux's sendfile only (server::sendfile): elsewhere, and with the `portable` feature,
    // file bodies are read and written whatever --sendfile says.
    if !cfg!(all(target_os = "linux", not(feature = "portable"))) {
        return false;
    }
    let wanted = match conn.shared.config.sendfile {
        SendfileMode::On => true,
        SendfileMode::Off => false,
        SendfileMode::Auto => !conn.info.socket_on_this_host,
    };
    wanted
        && conn.info.tls.is_none()
        && matches!(conn.info.local, LocalAddr::Tcp(_))
        && response.headers().contains_key(CONTENT_LENGTH)
        && !response.headers().contains_key(TRANSFER_ENCODING)
}

type Responded = (Response<ResponseBody>, Option<oneshot::Receiver<BodyError>>);

/// HTTP/1's request (hyper's): its head checked, then served like any other.
async fn respond(req: Request<Incoming>, conn: &Arc<ConnCtx>, arrived: Instant) -> Responded {
    let shared = &conn.shared;
    let config = &shared.config;
    // The body's length as framed (None: chunked).
    let framed = req.body().size_hint().exact().is_some();
    if let Some(problem) = check_head(
        req.version(),
        req.method(),
        req.uri(),
        req.headers(),
        framed,
    ) {
        // The client's mistake, like hyper's own 400s: answered, not logged.
        return (ResponseBody::error(config, problem.status()), None);
    }
    if let Some(refused) = request_line_too_long(&req, conn) {
        return (refused, None);
    }
    if let Some(route) = config.static_files.route_for(req.uri().path()) {
        // The core's own files: the app never sees these paths.
        let (head, _body) = req.into_parts();
        return (static_route::serve(head, route, conn, arrived).await, None);
    }
    if is_websocket_request(config, &req) {
        // A request that asks for a WebSocket gets one, a 4xx or a 503: never an HTTP scope.
        let checked = check_handshake(req.method(), req.version(), req.headers());
        let response = open_websocket(conn, checked, |slot| handle_upgrade(req, conn, slot));
        return (response.await, None);
    }
    let (head, body) = req.into_parts();
    let hints = match head.version {
        Version::HTTP_11 => HintsOut::Http1(&conn.early_hints),
        // HTTP/1.0 has no 1xx (see server::early_hints).
        _ => HintsOut::Dropped,
    };
    respond_http(head, InBody::Hyper(body), conn, arrived, hints).await
}

/// An HTTP request of any version, past its protocol's checks: the body read or streamed,
/// the request queued for the app, its response awaited.
async fn respond_http(
    mut head: http::request::Parts,
    body: InBody,
    conn: &Arc<ConnCtx>,
    arrived: Instant,
    mut hints: HintsOut<'_>,
) -> Responded {
    let shared = &conn.shared;
    let config = &shared.config;
    // The body's length as framed (None: chunked, or HTTP/2 and 3 without content-length).
    let size = body.size_hint().exact();
    let multiplexed = head.version >= Version::HTTP_2;
    // HTTP/2 and 3's `:authority`, HTTP/1's absolute-form (RFC 9112 §3.2.2: the target's
    // authority, not Host, names the host; authority-form is CONNECT's, not a scope's).
    if multiplexed || head.uri.scheme().is_some() {
        add_host_from_authority(&mut head);
    }
    let expect_continue = expects_continue(&head.headers);
    let is_head = head.method == Method::HEAD;

    let limits = config.body_limits(head.uri.path());
    if let (Some(limit), Some(size)) = (limits.limit, size) {
        if size > limit {
            // Refused before the app sees it, and before a 100 Continue invites the body.
            let why = format_args!(
                "Content-Length {size} is larger than --limit-request-body ({limit} bytes)"
            );
            return (refuse(conn, StatusCode::PAYLOAD_TOO_LARGE, why), None);
        }
    }
    let mut reader = BodyReader::new(body, limits.limit, limits.timeout);
    if !reader.is_complete() {
        conn.body_arriving();
        reader.watch(conn.clone());
    }
    let mut stream = None;
    let body_start = expect_continue.then(|| Arc::new(Notify::new()));
    let request_body = match size {
        Some(0) => RequestBody::Full(Bytes::new()),
        Some(n) if n <= config.body_preread_limit && !expect_continue => {
            // Small and announced: read it now so the first receive() completes at once.
            match reader.read_all(n).await {
                Ok(data) => RequestBody::Full(data),
                Err(err) => {
                    warn_body_failed(conn, err, limits);
                    return (ResponseBody::error(config, err.status()), None);
                }
            }
        }
        _ => {
            let (tx, rx) = mpsc::channel(REQUEST_BODY_QUEUE);
            stream = Some(tx);
            RequestBody::Stream(InChunks::new(rx))
        }
    };

    let (response_tx, response_rx) = response_channel();
    let buffers = BufferLimits {
        response: config.limit_response_buffer,
        // HTTP/1.1 sends one response at a time: its own budget is the connection's.
        connection: multiplexed.then(|| conn.response_budget.clone()),
    };
    let exchange = Arc::new(Exchange::new(
        shared.wakeup.clone(),
        body_start.clone(),
        HttpState::new(request_body, response_tx, is_head, buffers, arrived),
    ));
    // Only a streamed body can fail after dispatch; the others pay for no channel.
    let mut body_failed = None;
    if let Some(tx) = stream {
        let (failed_tx, failed_rx) = oneshot::channel();
        body_failed = Some(failed_rx);
        let ex = exchange.clone();
        let conn = conn.clone();
        tokio::spawn(async move {
            if let Some(err) = pump_request_body(reader, tx, ex, body_start, failed_tx).await {
                warn_body_failed(&conn, err, limits);
            }
        });
    }

    // Until the response is handed over, dropping this future (client gone) closes the
    // exchange; afterwards the response body carries its own guard.
    let guard = CloseGuard::new(exchange.clone());
    let trailers = trailers_reach_client(head.version, &head.headers);
    shared.wakeup.push(Event::Request(Box::new(PendingRequest {
        head,
        conn: conn.info.clone(),
        exchange,
        trailers,
        early_hints: !matches!(hints, HintsOut::Dropped),
    })));

    let mut response_rx = response_rx;
    let responded = loop {
        tokio::select! {
            // Biased: a failed body is reported before the app can hear of it, so when both
            // are ready the 400/413/408 wins over whatever the app answered to the
            // disconnect.
            biased;
            err = body_failure(&mut body_failed) => {
                break (ResponseBody::error(config, err.status()), None);
            }
            reply = &mut response_rx => match reply {
                Ok(Reply::Response(response)) => {
                    guard.disarm();
                    break (response, body_failed);
                }
                Ok(Reply::Hint(hint, next)) => {
                    hints.deliver(hint);
                    response_rx = next;
                }
                // The loop side dropped the request without answering (server closing).
                Err(_) => {
                    break (ResponseBody::error(config, StatusCode::SERVICE_UNAVAILABLE), None);
                }
            },
        }
    };
    // Whichever answer it is, its head goes after the hints (server::early_hints).
    match &hints {
        HintsOut::Http1(early_hints) => {
            std::future::poll_fn(|cx| early_hints.poll_written(cx)).await;
        }
        HintsOut::Dropped | HintsOut::Queued(_) => {}
    }
    responded
}

/// Resolves when a streamed request body fails; never when there is none, or once it ended
/// normally (then `failed` is cleared: a oneshot is polled only once to completion).
async fn body_failure(failed: &mut Option<oneshot::Receiver<BodyError>>) -> BodyError {
    if let Some(rx) = failed.as_mut() {
        if let Ok(err) = rx.await {
            return err;
        }
        *failed = None;
    }
    std::future::pending().await
}
