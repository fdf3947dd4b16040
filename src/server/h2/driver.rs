//! One HTTP/2 connection: the handshake with the server's settings, then accepting streams
//! (each its own task, relayed like hyper's were: `bridge::relay`), answering the client's
//! PINGs and sending ours for `--http2-keep-alive-interval`, and the graceful shutdown that
//! `server::connection::drive` asks for (GOAWAY, then the open streams finish). It is a
//! plain future so `drive` can poll it beside the lifecycle and idle timers as it did
//! hyper's connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::server::{Connection, Handshake, SendResponse};
use h2::{Ping, PingPong, Reason, RecvStream};
use http::Request;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Sleep};

use crate::bridge::Relayed;
use crate::server::conn_state::ConnCtx;
use crate::server::h2::stream::serve_stream;
use crate::server::h2_guard::LastHeard;
use crate::server::ServerShared;

/// h2's send buffer per stream: what `SendStream::poll_capacity` lets an app get ahead of a
/// slow client (hyper's default, kept).
const MAX_SEND_BUFFER: usize = 400 * 1024;
/// Streams h2 may reset for our own errors before it takes the peer for abusive (hyper's).
const MAX_LOCAL_ERROR_RESETS: usize = 1024;

enum State<T> {
    Handshaking(Pin<Box<Handshake<T, Bytes>>>),
    Serving(Box<Connection<T, Bytes>>),
    Done,
}

pub(crate) struct H2Connection<T> {
    state: State<T>,
    conn: Arc<ConnCtx>,
    /// Asked for before the handshake finished: done as soon as it does.
    shutdown: bool,
    keep_alive: Option<KeepAlive>,
    heard: Arc<LastHeard>,
}

/// The connection settings from the server config (`--http2-*`).
fn builder(shared: &ServerShared) -> h2::server::Builder {
    let settings = &shared.config.http2;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(settings.max_concurrent_streams)
        .initial_window_size(settings.initial_stream_window_size)
        .initial_connection_window_size(settings.initial_connection_window_size)
        .max_frame_size(settings.max_frame_size)
        .max_header_list_size(settings.max_header_list_size)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS));
    if shared.config.ws.enabled {
        // SETTINGS_ENABLE_CONNECT_PROTOCOL: WebSockets over HTTP/2 (RFC 8441). Without it h2
        // resets any stream that sends `:protocol`.
        builder.enable_connect_protocol();
    }
    builder
}

impl<T> H2Connection<T>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    /// `heard`: when the client last sent something, kept by the I/O beneath (`H2Guard`).
    pub(crate) fn new(io: T, conn: Arc<ConnCtx>, heard: Arc<LastHeard>) -> Self {
        let handshake = builder(&conn.shared).handshake(io);
        H2Connection {
            state: State::Handshaking(Box::pin(handshake)),
            conn,
            shutdown: false,
            keep_alive: None,
            heard,
        }
    }

    /// GOAWAY: no new streams; the open ones finish, then the connection ends.
    pub(crate) fn graceful_shutdown(self: Pin<&mut Self>) {
        let this = self.get_mut();
        this.shutdown = true;
        if let State::Serving(connection) = &mut this.state {
            connection.graceful_shutdown();
        }
    }

    fn spawn(&self, request: Request<RecvStream>, respond: SendResponse<Bytes>) {
        // Boxed: the stream's future (the whole service call) is several kilobytes, which
        // spawning it unboxed would copy into the task and again at each of its stages.
        let future = Box::pin(serve_stream(request, respond, self.conn.clone()));
        tokio::spawn(Relayed::new(future, &self.conn.shared.relay));
    }
}

impl<T> Future for H2Connection<T>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Handshaking(handshake) => match handshake.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(_)) => this.state = State::Done,
                    Poll::Ready(Ok(mut connection)) => {
                        if this.shutdown {
                            connection.graceful_shutdown();
                        }
                        let settings = &this.conn.shared.config.http2;
                        this.keep_alive =
                            match (settings.keep_alive_interval, connection.ping_pong()) {
                                (Some(every), Some(ping_pong)) => Some(KeepAlive::new(
                                    ping_pong,
                                    every,
                                    settings.keep_alive_timeout,
                                    this.heard.clone(),
                                )),
                                _ => None,
                            };
                        this.state = State::Serving(Box::new(connection));
                    }
                },
                State::Serving(connection) => {
                    if let Some(keep_alive) = &mut this.keep_alive {
                        if keep_alive.poll_dead(cx) {
                            // The peer stopped answering PINGs: it is gone, or stuck.
                            connection.abrupt_shutdown(Reason::NO_ERROR);
                            this.state = State::Done;
                            continue;
                        }
                    }
                    match connection.poll_accept(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Some(Ok((request, respond)))) => {
                            this.spawn(request, respond);
                        }
                        // None: closed (after a GOAWAY both ways, the streams done); an
                        // error: h2 has sent its GOAWAY already. Either way it is over.
                        Poll::Ready(Some(Err(_))) | Poll::Ready(None) => this.state = State::Done,
                    }
                }
                State::Done => return Poll::Ready(()),
            }
        }
    }
}

/// Our PINGs: one once the client has been quiet for `every`; a PING unanswered after
/// `timeout` ends the connection. A client that keeps sending needs none.
struct KeepAlive {
    ping_pong: PingPong,
    every: Duration,
    timeout: Duration,
    timer: Pin<Box<Sleep>>,
    awaiting_pong: bool,
    heard: Arc<LastHeard>,
}

impl KeepAlive {
    fn new(ping_pong: PingPong, every: Duration, timeout: Duration, heard: Arc<LastHeard>) -> Self {
        KeepAlive {
            ping_pong,
            every,
            timeout,
            timer: Box::pin(tokio::time::sleep(every)),
            awaiting_pong: false,
            heard,
        }
    }

    /// Whether the peer is to be given up on; registers for the next step otherwise.
    fn poll_dead(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.awaiting_pong {
                match self.ping_pong.poll_pong(cx) {
                    Poll::Ready(Ok(_)) => {
                        self.awaiting_pong = false;
                        self.timer.as_mut().reset(Instant::now() + self.every);
                    }
                    Poll::Ready(Err(_)) => return true,
                    Poll::Pending => {}
                }
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            if self.awaiting_pong {
                return true; // timed out
            }
            let quiet_until = Instant::from_std(self.heard.last()) + self.every;
            if quiet_until > Instant::now() {
                // Heard from since the timer was set: quiet for `every` from then on first.
                self.timer.as_mut().reset(quiet_until);
                continue;
            }
            if self.ping_pong.send_ping(Ping::opaque()).is_err() {
                return true;
            }
            self.awaiting_pong = true;
            self.timer.as_mut().reset(Instant::now() + self.timeout);
        }
    }
}
