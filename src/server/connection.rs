//! Serving one accepted (and, for TLS, handshaken) connection — HTTP/1.1 with hyper, HTTP/2
//! with ours (`server::h2`) — and ending it on shutdown.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use crate::bridge::{ConnInfo, Event, LogText};
use crate::config::HttpMode;
use crate::server::conn_state::{ConnBusy, ConnCtx, IdleState};
use crate::server::cork::IoSignals;
use crate::server::detect::{sniff, ReplayRewrite};
use crate::server::h2::H2Connection;
use crate::server::h2_batch::Batched;
use crate::server::h2_guard::{H2Guard, LastHeard};
use crate::server::idle::{
    earliest, first_bytes_timeout, sleep_until_or_never, IdleCheck, IdleRules,
};
use crate::server::park::{park_after, park_due, wait_parked};
use crate::server::service::handle_request;
use crate::server::side_wake::SideWake;
use crate::server::{ConnectionGuard, Lifecycle, ServerShared};

const HYPER_DEFAULT_MAX_HEADERS: usize = 100;

/// Which protocol a connection speaks, as far as is known before its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Http1,
    Http2,
    /// Look for the HTTP/2 preface (cleartext, or TLS without ALPN, in `--http auto`).
    Detect,
}

impl Protocol {
    pub(crate) fn cleartext(mode: HttpMode) -> Self {
        match mode {
            HttpMode::Auto => Protocol::Detect,
            HttpMode::Http1 => Protocol::Http1,
            HttpMode::Http2 => Protocol::Http2,
        }
    }

    /// After a TLS handshake: ALPN decides; a client that offered no ALPN is treated like a
    /// cleartext one.
    pub(crate) fn negotiated(mode: HttpMode, alpn: Option<&[u8]>) -> Self {
        match alpn {
            Some(b"h2") => Protocol::Http2,
            Some(_) => Protocol::Http1,
            None => Protocol::cleartext(mode),
        }
    }
}

/// The ALPN protocols to offer for `--http`, most preferred first.
pub(crate) fn alpn_protocols(mode: HttpMode) -> &'static [&'static [u8]] {
    match mode {
        HttpMode::Auto => &[b"h2", b"http/1.1"],
        HttpMode::Http1 => &[b"http/1.1"],
        HttpMode::Http2 => &[b"h2"],
    }
}

/// The HTTP/1.1 connection settings from the server config.
fn http1_builder(shared: &ServerShared, tls: bool) -> http1::Builder {
    let config = &shared.config;
    let mut builder = http1::Builder::new();
    if tls {
        // Vectored writes become one TLS record per slice; one flat buffer makes one record
        // for head and body.
        builder.writev(false);
    }
    builder
        .keep_alive(true)
        .half_close(false)
        .max_header_size(config.max_header_size)
        // Ours instead (see `IdleRules`): hyper's runs from the moment it waits for a head,
        // so it would also cut idle keep-alive connections at the header timeout.
        .header_read_timeout(None)
        .auto_date_header(config.date_header)
        // Not `pipeline_flush`: it lets hyper buffer a streaming body without limit (its
        // can_buffer() is always true then), which defeats response backpressure.
        .pipeline_flush(false);
    if config.max_headers != HYPER_DEFAULT_MAX_HEADERS {
        // Only when asked: a custom limit moves hyper's header array to the heap.
        builder.max_headers(config.max_headers);
    }
    builder
}

/// How long a connection that has not started a request yet may still start one once the
/// server drains. One accepted just before the listener closed usually has its first request
/// in flight (clients write right after connecting); closing it unanswered would fail that
/// request during every rolling restart. Browsers' unused pre-connections wait this long.
const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(1);

/// While draining, how often `drive` looks whether the first request has started: coarse, as
/// many silent connections may be waiting; a request that starts meanwhile is served anyway
/// (the graceful shutdown that follows only ends the connection after its response).
const FIRST_REQUEST_POLL: Duration = Duration::from_millis(25);

/// Resolves once the server drains and then `FIRST_REQUEST_GRACE` has passed (never if the
/// lifecycle channel closes first: the connection ends with the runtime then).
async fn drained_past_grace(lifecycle: &mut watch::Receiver<Lifecycle>) {
    while *lifecycle.borrow_and_update() < Lifecycle::Draining {
        if lifecycle.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
    tokio::time::sleep(FIRST_REQUEST_GRACE).await
}

/// Waits for enough bytes to tell HTTP/2 from HTTP/1; None when the connection should close
/// (client gone or silent too long, or silent past the drain grace).
async fn detect<S>(
    io: S,
    shared: &ServerShared,
    lifecycle: &mut watch::Receiver<Lifecycle>,
) -> Option<(ReplayRewrite<S>, bool)>
where
    S: AsyncRead + Unpin,
{
    let deadline = async {
        match first_bytes_timeout(&shared.config) {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        sniffed = sniff(io) => sniffed.ok().flatten(),
        () = deadline => None,
        () = drained_past_grace(lifecycle) => None,
    }
}

pub(crate) async fn serve_connection<S>(
    io: S,
    info: ConnInfo,
    shared: Arc<ServerShared>,
    protocol: Protocol,
    signals: Arc<IoSignals>,
    _count: ConnectionGuard,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut lifecycle = shared.lifecycle.subscribe();
    let (io, http2) = match protocol {
        Protocol::Http1 => (ReplayRewrite::new(io), false),
        Protocol::Http2 => (ReplayRewrite::new(io), true),
        Protocol::Detect => match Box::pin(detect(io, &shared, &mut lifecycle)).await {
            Some(detected) => detected,
            None => return,
        },
    };
    let ctx = Arc::new(ConnCtx::new(info, shared.clone(), signals));
    if http2 {
        ctx.disable_corking();
        // Ours on the h2 crate (server::h2), over the flood guard and the socket batching.
        let heard = Arc::new(LastHeard::new());
        let io = H2Guard::new(Batched::new(io), flood_warning(&ctx), heard.clone());
        let connection = Box::pin(H2Connection::new(io, ctx.clone(), heard));
        let rules = IdleRules::http2(&shared.config);
        drive(
            connection,
            |c| c.graceful_shutdown(),
            &ctx,
            rules,
            &mut lifecycle,
            None,
            false,
        )
        .await;
        return;
    }
    let rules = IdleRules::http1(&shared.config);
    let tls = ctx.info.tls.is_some();
    // See `server::park`: not over TLS.
    let park_after = (!tls).then(park_after);
    let mut io = io;
    io.rewrite_http1_output(ctx.clone());
    loop {
        // Boxed per request: hyper keeps room for the service future in every connection for
        // its whole life, so an unboxed ~2 KiB future would sit in each idle keep-alive
        // connection.
        let conn_ctx = ctx.clone();
        let service = service_fn(move |req| {
            // Owed from the moment hyper has the head, before the future first runs: hyper
            // may read the client's end of stream in between (see `ConnCtx::hold_eof`).
            let owed = ConnBusy::new(conn_ctx.clone());
            Box::pin(handle_request(req, conn_ctx.clone(), Some(owed)))
        });
        let connection = http1_builder(&shared, tls)
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        let connection = Box::pin(connection);
        let driven = drive(
            connection,
            |c| c.graceful_shutdown(),
            &ctx,
            rules,
            &mut lifecycle,
            park_after,
            true,
        );
        let Some(parked) = driven.await else {
            return;
        };
        let Some(parts) = Pin::into_inner(parked).into_parts() else {
            return; // upgraded: cannot be, the connection was idle
        };
        io = parts.io.into_inner();
        // Empty when parked between requests; kept rather than assumed.
        io.unread(parts.read_buf);
        if !wait_parked(&mut io, &ctx, rules, &mut lifecycle).await {
            return;
        }
    }
}

/// The log line for a connection `H2Guard` closes.
fn flood_warning(ctx: &ConnCtx) -> impl FnOnce(u64) + Send + 'static {
    let wakeup = ctx.shared.wakeup.clone();
    let peer = ctx.peer_text();
    move |charged| {
        let text = format!(
            "HTTP/2 connection from {peer} closed with ENHANCE_YOUR_CALM: {charged} frames \
             that make no progress (PING, SETTINGS, WINDOW_UPDATE, PRIORITY, RST_STREAM, \
             empty DATA) faster than the server allows"
        );
        wakeup.push(Event::Warning(Box::new(LogText(text))));
    }
}

/// Runs a connection (hyper's HTTP/1, or our HTTP/2) until it ends, shutting it down gracefully when the server drains
/// or an idle limit (`IdleRules`) is up, and dropping it on close. With `park_after`, parks it
/// once it has been idle that long (see `server::park`): returns the finished connection then,
/// to take the stream back from; None when the connection is over.
async fn drive<C, G>(
    mut connection: Pin<Box<C>>,
    graceful_shutdown: G,
    ctx: &ConnCtx,
    rules: IdleRules,
    lifecycle: &mut watch::Receiver<Lifecycle>,
    park_after: Option<Duration>,
    http1_grace: bool,
) -> Option<Pin<Box<C>>>
where
    C: Future,
    G: Fn(Pin<&mut C>),
{
    let mut shut_down = false;
    // While draining: when the grace for the next request (or the first) is up.
    let mut first_request_by: Option<Instant> = None;
    let mut drain_started: Option<Instant> = None;
    let mut park_declined_at: Option<Instant> = None;
    let side = SideWake::new();
    loop {
        let state = *lifecycle.borrow_and_update();
        if state >= Lifecycle::Closing {
            return None;
        }
        if !shut_down && state >= Lifecycle::Draining {
            // Busy connections are shut down now: hyper ends them after their response
            // (HTTP/1: with `Connection: close`; HTTP/2: GOAWAY, then the open streams
            // finish). A connection that has not started a request yet gets
            // FIRST_REQUEST_GRACE to start one: hyper's graceful shutdown would close it
            // unread. So does an idle HTTP/1 keep-alive connection (`http1_grace`), counted
            // from its last response: a busy client's next request is usually on its way,
            // and answered (with `Connection: close`) rather than met by a closed socket.
            let now = Instant::now();
            let drained_at = *drain_started.get_or_insert(now);
            let wait_until = if !ctx.has_started_a_request() {
                Some(drained_at + FIRST_REQUEST_GRACE)
            } else if !http1_grace {
                None
            } else {
                match ctx.idle_state() {
                    None => None, // in flight: hyper closes after its response
                    // Its head is arriving: wait for it to be read.
                    Some(IdleState {
                        head_started: Some(_),
                        ..
                    }) => Some(now + FIRST_REQUEST_POLL),
                    Some(idle) => Some(idle.since + FIRST_REQUEST_GRACE),
                }
            };
            match wait_until {
                Some(by) if now < by => first_request_by = Some(by),
                _ => {
                    graceful_shutdown(connection.as_mut());
                    shut_down = true;
                }
            }
        }
        // The idle timer: re-armed on every pass. While draining before the next request,
        // a short poll for its start instead.
        let next = match (shut_down, first_request_by) {
            (true, _) => None,
            (false, Some(by)) => Some(by.min(Instant::now() + FIRST_REQUEST_POLL)),
            (false, None) => {
                let now = Instant::now();
                let idle = ctx.idle_state();
                let started = ctx.has_started_a_request();
                let look = match rules.check(idle, started, now) {
                    IdleCheck::Close => {
                        graceful_shutdown(connection.as_mut());
                        shut_down = true;
                        None
                    }
                    IdleCheck::Cut => return None,
                    IdleCheck::LookAgainAt(at) => Some(at),
                    IdleCheck::Nothing => None,
                };
                // Nothing wakes this loop when a request starts or ends, nor when a head
                // that started turns out complete: while not due to park, look again a
                // park delay later.
                let park_at = match park_after {
                    Some(after) if !shut_down => Some(match idle {
                        Some(idle) if started => {
                            park_due(&idle, after, park_declined_at).unwrap_or(now + after)
                        }
                        _ => now + after,
                    }),
                    _ => None,
                };
                match park_at {
                    Some(at) if at <= now => {
                        ctx.request_park();
                        let polled = std::future::poll_fn(|cx| {
                            Poll::Ready(connection.as_mut().poll(cx).is_ready())
                        })
                        .await;
                        let parked = ctx.take_parked();
                        if polled {
                            return parked.then_some(connection);
                        }
                        // Declined (hyper still had bytes to write): later.
                        park_declined_at = Some(now);
                        continue;
                    }
                    at => earliest(look, at),
                }
            }
        };
        // The connection, and the lifecycle watch and the timer only when they woke
        // (server::side_wake): whichever is ready first.
        let mut timer = pin!(sleep_until_or_never(next));
        let mut changed = pin!(lifecycle.changed());
        side.rearm();
        // Draining, and waiting for this connection's next request: hyper calls the service
        // from inside the connection's poll, so a request that started shows here at once.
        let awaiting_request = !shut_down && first_request_by.is_some();
        let woke = std::future::poll_fn(|cx| {
            if connection.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Woke::Ended);
            }
            if awaiting_request && ctx.idle_state().is_none() {
                return Poll::Ready(Woke::RequestStarted);
            }
            if side.take_due(cx) {
                let mut side_cx = side.context();
                if let Poll::Ready(changed) = changed.as_mut().poll(&mut side_cx) {
                    return Poll::Ready(Woke::Lifecycle(changed.is_ok()));
                }
                if timer.as_mut().poll(&mut side_cx).is_ready() {
                    return Poll::Ready(Woke::Timer);
                }
            }
            Poll::Pending
        })
        .await;
        match woke {
            Woke::Ended | Woke::Lifecycle(false) => return None,
            Woke::Lifecycle(true) | Woke::Timer | Woke::RequestStarted => {}
        }
    }
}

/// What ended one wait of `drive`.
enum Woke {
    /// The connection is over.
    Ended,
    /// The server's lifecycle changed (false: its channel closed).
    Lifecycle(bool),
    /// The idle timer is up.
    Timer,
    /// While draining, the request the connection waited for started: shut it down now,
    /// so that its response is the last (`Connection: close`), not one poll later.
    RequestStarted,
}
