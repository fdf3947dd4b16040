//! A shim between h3 and quinn that lets h3 0.0.8 take a WebSocket's extended CONNECT
//! (RFC 9220). h3 parses `:protocol` into `h3::ext::Protocol`, which knows `webtransport`
//! and `connect-udp` only: `:protocol: websocket` is a malformed request to it, reset before
//! ferrocorn sees it. So each request stream's first HEADERS frame is rewritten on its way
//! in: `websocket` becomes `webtransport`, and a genuine `webtransport` becomes
//! `connect-udp` (`qpack` says why), which makes a request h3 resolves with
//! `Protocol::WEB_TRANSPORT` a WebSocket's, and only that. Nothing is remembered per stream.
//!
//! When h3 accepts `websocket` itself, this module goes, and `request::is_websocket` looks
//! for that value instead.
//!
//! `quic`: h3's QUIC traits over h3-quinn, request streams through `scan`; `scan`: the
//! frames before and of the first HEADERS frame; `qpack`: the field section's rewrite.

mod qpack;
mod quic;
mod scan;

pub(crate) use quic::{Connection, RecvStream};
