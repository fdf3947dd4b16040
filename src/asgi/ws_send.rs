//! The rules of what a WebSocket app sends (ASGI spec 2.5): the handshake answer
//! (`websocket.accept`, `websocket.close` before it, or a denial response through
//! `websocket.http.response.*`), then frames (`websocket.send`, `websocket.close`), and
//! what is left to do when the app returns or raises.
//!
//! Plain Rust on `WsState` (no Python), like response.rs for HTTP: each transition takes
//! validated inputs and returns `Result<WsAction, WsFault>`; `WebSocketProtocol`
//! (websocket.rs) parses the message, performs the action (hands tokio the decision or
//! queues the frame) and turns a `WsFault` into the exception the app sees.

use std::fmt;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use tokio::sync::{mpsc, oneshot};

use crate::bridge::{CloseInfo, WsDecision, WsOut, WsPhase, WsState};
use crate::ws::frame::close_code_allowed;

/// RFC 6455 §5.5: a close frame's payload is at most 125 bytes, 2 of them the code.
pub(crate) const MAX_CLOSE_REASON: usize = 123;

/// A message the app may not send now, or one with a value a frame cannot carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WsFault {
    /// `websocket.accept` after the handshake was answered.
    AlreadyAnswered,
    /// `websocket.send` before the handshake was accepted.
    SendBeforeAccept,
    /// `websocket.close` in the middle of a denial response.
    CloseDuringDenial,
    /// `websocket.http.response.start` once the handshake is answered (or being denied).
    DenialTooLate,
    /// `websocket.http.response.body` without `websocket.http.response.start`.
    DenialBodyBeforeStart,
    /// `websocket.send` with both `bytes` and `text`.
    BothPayloads,
    /// `websocket.send` with neither.
    NoPayload,
    /// A close code a close frame may not carry (as Python shows it).
    CloseCode(String),
    /// A close reason longer than a close frame allows (its UTF-8 length).
    ReasonTooLong(usize),
    /// The peer is gone, or the app already closed (`ClientDisconnected`).
    Disconnected,
}

impl fmt::Display for WsFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WsFault::AlreadyAnswered => f.write_str(
                "Unexpected ASGI message 'websocket.accept': the handshake was already answered",
            ),
            WsFault::SendBeforeAccept => f.write_str(
                "Expected ASGI message 'websocket.accept' or 'websocket.close' before \
                 'websocket.send'",
            ),
            WsFault::CloseDuringDenial => {
                f.write_str("Unexpected ASGI message 'websocket.close' during a denial response")
            }
            WsFault::DenialTooLate => f.write_str(
                "Unexpected ASGI message 'websocket.http.response.start': only allowed before \
                 the handshake is answered",
            ),
            WsFault::DenialBodyBeforeStart => f.write_str(
                "Expected ASGI message 'websocket.http.response.start' before \
                 'websocket.http.response.body'",
            ),
            WsFault::BothPayloads => {
                f.write_str("'websocket.send' must set exactly one of 'bytes' and 'text', not both")
            }
            WsFault::NoPayload => f.write_str("'websocket.send' must set one of 'bytes' or 'text'"),
            WsFault::CloseCode(shown) => write!(
                f,
                "'code' must be a WebSocket close code that may be sent (1000-1003, 1007-1014 \
                 or 3000-4999), got {shown}"
            ),
            WsFault::ReasonTooLong(len) => write!(
                f,
                "'reason' is {len} bytes long in UTF-8; a close frame allows at most \
                 {MAX_CLOSE_REASON}"
            ),
            WsFault::Disconnected => {
                f.write_str("the client disconnected or the response is already complete")
            }
        }
    }
}

/// The one payload of a `websocket.send`: `bytes` or `text` (whatever carries them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Payload<B, T> {
    Bytes(B),
    Text(T),
}

/// `websocket.send` sets exactly one of `bytes` and `text` (a key set to None is unset);
/// checked before either value is looked at.
pub(crate) fn payload<B, T>(bytes: Option<B>, text: Option<T>) -> Result<Payload<B, T>, WsFault> {
    match (bytes, text) {
        (Some(bytes), None) => Ok(Payload::Bytes(bytes)),
        (None, Some(text)) => Ok(Payload::Text(text)),
        (Some(_), Some(_)) => Err(WsFault::BothPayloads),
        (None, None) => Err(WsFault::NoPayload),
    }
}

/// `websocket.close`'s `code` (None when unset: 1000). Only codes a close frame may carry
/// (RFC 6455 §7.4): 1005, 1006 and 1015 report a missing code or a broken connection and
/// never go on the wire.
pub(crate) fn close_code(code: Option<u16>) -> Result<u16, WsFault> {
    match code {
        None => Ok(1000),
        Some(code) if close_code_allowed(code) => Ok(code),
        Some(code) => Err(WsFault::CloseCode(code.to_string())),
    }
}

/// `websocket.close`'s `reason` must fit a close frame.
pub(crate) fn close_reason(reason: &str) -> Result<(), WsFault> {
    if reason.len() > MAX_CLOSE_REASON {
        return Err(WsFault::ReasonTooLong(reason.len()));
    }
    Ok(())
}

/// What `WebSocketProtocol` must do after a transition.
pub(crate) enum WsAction {
    /// Refuse the handshake with the server's own 403 (a close before accept); once tokio
    /// took it, `WsState::refused` with `close`.
    Forbid {
        tx: oneshot::Sender<WsDecision>,
        close: CloseInfo,
    },
    /// Hand tokio the app's denial response.
    Deny {
        tx: oneshot::Sender<WsDecision>,
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
    },
    /// Queue `frame` for the socket (waiting if the queue is full).
    Frame {
        tx: mpsc::Sender<WsOut>,
        frame: WsOut,
    },
    /// Nothing goes out.
    Nothing,
}

/// What `WebSocketProtocol` must do once the app is done.
pub(crate) enum WsEnd {
    Nothing,
    /// The handshake was never answered: refuse it with the server's own 500.
    Refuse500(oneshot::Sender<WsDecision>),
    /// Close the open socket with this code, even when the outbound queue is full.
    Close(mpsc::Sender<WsOut>, u16),
}

impl WsState {
    /// `websocket.accept` (its subprotocol and headers already validated): the sender to
    /// hand tokio `WsDecision::Accept` on, with a new outbound channel; once tokio took it,
    /// `opened` with that channel's sender. Closed until then.
    pub(crate) fn accept(&mut self) -> Result<oneshot::Sender<WsDecision>, WsFault> {
        match std::mem::replace(&mut self.phase, WsPhase::Closed) {
            WsPhase::Connecting(tx) => Ok(tx),
            other => {
                let fault = match other {
                    WsPhase::Closed => WsFault::Disconnected,
                    _ => WsFault::AlreadyAnswered,
                };
                self.phase = other;
                Err(fault)
            }
        }
    }

    /// tokio took the accept. Open even if the session has already ended (the client left
    /// right after the 101): `receive()` then reports the disconnect.
    pub(crate) fn opened(&mut self, outbound: mpsc::Sender<WsOut>) {
        self.status = 101;
        self.phase = WsPhase::Open(outbound);
    }

    /// `websocket.send` with its payload.
    pub(crate) fn send(&self, frame: WsOut) -> Result<WsAction, WsFault> {
        match &self.phase {
            WsPhase::Open(tx) => Ok(WsAction::Frame {
                tx: tx.clone(),
                frame,
            }),
            WsPhase::Connecting(_) | WsPhase::Denying { .. } => Err(WsFault::SendBeforeAccept),
            WsPhase::Closed => Err(WsFault::Disconnected),
        }
    }

    /// `websocket.close` (code and reason validated): refuses the handshake with 403 before
    /// accept, sends the close frame after.
    pub(crate) fn close(&mut self, info: CloseInfo) -> Result<WsAction, WsFault> {
        match std::mem::replace(&mut self.phase, WsPhase::Closed) {
            WsPhase::Connecting(tx) => {
                self.status = StatusCode::FORBIDDEN.as_u16();
                Ok(WsAction::Forbid { tx, close: info })
            }
            WsPhase::Open(tx) => {
                // Closed at once: `receive()` then reports the disconnect with this code
                // unless tokio has the peer's.
                self.app_close = Some(info.clone());
                Ok(WsAction::Frame {
                    tx,
                    frame: WsOut::Close {
                        code: info.code,
                        reason: info.reason,
                    },
                })
            }
            other => {
                let fault = match other {
                    WsPhase::Denying { .. } => WsFault::CloseDuringDenial,
                    _ => WsFault::Disconnected,
                };
                self.phase = other;
                Err(fault)
            }
        }
    }

    /// tokio took the 403 of a close before accept: `receive()` reports the app's code.
    pub(crate) fn refused(&mut self, close: CloseInfo) {
        self.app_close = Some(close);
    }

    /// Whether `websocket.http.response.start` may come now. `WebSocketProtocol` asks
    /// before parsing the message, so this fault comes first.
    pub(crate) fn check_deny(&self) -> Result<(), WsFault> {
        match self.phase {
            WsPhase::Connecting(_) => Ok(()),
            _ => Err(WsFault::DenialTooLate),
        }
    }

    /// `websocket.http.response.start` (validated): a denial response begins.
    pub(crate) fn deny_start(
        &mut self,
        status: StatusCode,
        headers: HeaderMap,
    ) -> Result<(), WsFault> {
        match std::mem::replace(&mut self.phase, WsPhase::Closed) {
            WsPhase::Connecting(tx) => {
                self.status = status.as_u16();
                self.phase = WsPhase::Denying {
                    tx,
                    status,
                    headers,
                    body: Vec::new(),
                };
                Ok(())
            }
            other => {
                self.phase = other;
                Err(WsFault::DenialTooLate)
            }
        }
    }

    /// `websocket.http.response.body`: collected until the last one, which sends the denial.
    pub(crate) fn deny_body(&mut self, body: &[u8], more_body: bool) -> Result<WsAction, WsFault> {
        match std::mem::replace(&mut self.phase, WsPhase::Closed) {
            WsPhase::Denying {
                tx,
                status,
                headers,
                body: mut collected,
            } => {
                collected.extend_from_slice(body);
                if more_body {
                    self.phase = WsPhase::Denying {
                        tx,
                        status,
                        headers,
                        body: collected,
                    };
                    return Ok(WsAction::Nothing);
                }
                self.status = status.as_u16();
                Ok(WsAction::Deny {
                    tx,
                    status,
                    headers,
                    body: Bytes::from(collected),
                })
            }
            other => {
                self.phase = other;
                Err(WsFault::DenialBodyBeforeStart)
            }
        }
    }

    /// The peer is gone (a frame found the queue closed).
    pub(crate) fn client_gone(&mut self) {
        self.phase = WsPhase::Closed;
    }

    /// The app raised (or could not be started): refuse an unanswered handshake with 500,
    /// close an open socket with 1011.
    pub(crate) fn app_failed(&mut self) -> WsEnd {
        match std::mem::replace(&mut self.phase, WsPhase::Closed) {
            WsPhase::Connecting(tx) | WsPhase::Denying { tx, .. } => {
                self.status = StatusCode::INTERNAL_SERVER_ERROR.as_u16();
                WsEnd::Refuse500(tx)
            }
            WsPhase::Open(tx) => WsEnd::Close(tx, 1011),
            other => {
                self.phase = other;
                WsEnd::Nothing
            }
        }
    }

    /// The app returned: refuse an unanswered handshake (500) unless the client is gone,
    /// close an open socket (1000). With the `WsEnd`, the fault for the error log.
    pub(crate) fn app_returned(&mut self, client_gone: bool) -> (WsEnd, Option<&'static str>) {
        match std::mem::replace(&mut self.phase, WsPhase::Closed) {
            phase @ (WsPhase::Connecting(_) | WsPhase::Denying { .. }) => {
                self.phase = phase;
                if client_gone {
                    return (WsEnd::Nothing, None);
                }
                (
                    self.app_failed(),
                    Some(
                        "ASGI callable returned without answering the WebSocket handshake; \
                         sent 500",
                    ),
                )
            }
            WsPhase::Open(tx) => (WsEnd::Close(tx, 1000), None),
            _ => (WsEnd::Nothing, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn session() -> WsState {
        let (tx, _decision) = oneshot::channel();
        let (_in_tx, in_rx) = mpsc::channel(1);
        WsState::new(tx, in_rx)
    }

    /// A session whose accept tokio took, and the socket's end of its outbound queue.
    fn open() -> (WsState, mpsc::Receiver<WsOut>) {
        let mut st = session();
        let _tx = st.accept().expect("an accept");
        let (out_tx, out_rx) = mpsc::channel(4);
        st.opened(out_tx);
        (st, out_rx)
    }

    /// A session in the middle of a denial response.
    fn denying() -> WsState {
        let mut st = session();
        let mut headers = HeaderMap::new();
        headers.insert("x-why", HeaderValue::from_static("nope"));
        assert_eq!(st.deny_start(StatusCode::NOT_FOUND, headers), Ok(()));
        st
    }

    fn phase(st: &WsState) -> &'static str {
        match st.phase {
            WsPhase::Connecting(_) => "connecting",
            WsPhase::Denying { .. } => "denying",
            WsPhase::Open(_) => "open",
            WsPhase::Closed => "closed",
        }
    }

    fn fault(result: Result<WsAction, WsFault>) -> WsFault {
        match result {
            Err(fault) => fault,
            Ok(_) => panic!("expected a fault"),
        }
    }

    fn info(code: u16, reason: &str) -> CloseInfo {
        CloseInfo {
            code,
            reason: reason.into(),
        }
    }

    /// What a queued frame is, as text.
    fn frame(out: WsOut) -> String {
        match out {
            WsOut::Text(text) => format!("text {:?}", String::from_utf8_lossy(&text)),
            WsOut::Binary(data) => format!("bytes {data:?}"),
            WsOut::Close { code, reason } => format!("close {code} {reason:?}"),
        }
    }

    fn end_kind(end: &WsEnd) -> String {
        match end {
            WsEnd::Nothing => "nothing".into(),
            WsEnd::Refuse500(_) => "500".into(),
            WsEnd::Close(_, code) => format!("close {code}"),
        }
    }

    // The handshake answer.

    #[test]
    fn accept_opens_once_tokio_has_it() {
        let mut st = session();
        let tx = st.accept().expect("an accept");
        // Closed until tokio took the answer: a failed hand-off leaves nothing open.
        assert_eq!(phase(&st), "closed");
        assert_eq!(st.status, 0);
        drop(tx);
        let (out_tx, _out_rx) = mpsc::channel(1);
        st.opened(out_tx);
        assert_eq!(phase(&st), "open");
        assert_eq!(st.status, 101);
    }

    #[test]
    fn accept_after_the_answer_is_refused() {
        let (mut st, _rx) = open();
        assert_eq!(st.accept().err(), Some(WsFault::AlreadyAnswered));
        assert_eq!(phase(&st), "open");

        let mut st = denying();
        assert_eq!(st.accept().err(), Some(WsFault::AlreadyAnswered));
        assert_eq!(phase(&st), "denying");
    }

    #[test]
    fn accept_after_a_close_reports_a_disconnect() {
        let (mut st, _rx) = open();
        let _ = st.close(info(1000, "")).unwrap();
        assert_eq!(st.accept().err(), Some(WsFault::Disconnected));

        let mut st = session();
        st.client_gone();
        assert_eq!(st.accept().err(), Some(WsFault::Disconnected));
    }

    #[test]
    fn close_before_accept_forbids_the_handshake() {
        let mut st = session();
        let action = st.close(info(4001, "go away")).unwrap();
        let WsAction::Forbid { close, .. } = action else {
            panic!("expected a 403")
        };
        assert_eq!(close, info(4001, "go away"));
        assert_eq!(st.status, 403);
        assert_eq!(phase(&st), "closed");
        // The app's code is what receive() reports, once tokio took the 403.
        assert_eq!(st.app_close, None);
        st.refused(close);
        assert_eq!(st.app_close, Some(info(4001, "go away")));
    }

    #[test]
    fn close_on_an_open_socket_sends_the_frame() {
        let (mut st, mut rx) = open();
        let WsAction::Frame { tx, frame: out } = st.close(info(1001, "bye")).unwrap() else {
            panic!("expected a frame")
        };
        assert_eq!(st.app_close, Some(info(1001, "bye")));
        assert_eq!(phase(&st), "closed");
        // The state let go of the queue: it ends after the close frame.
        assert!(tx.try_send(out).is_ok());
        drop(tx);
        assert_eq!(frame(rx.try_recv().unwrap()), r#"close 1001 "bye""#);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn after_a_close_everything_reports_a_disconnect() {
        let (mut st, _rx) = open();
        let _ = st.close(info(1000, "")).unwrap();
        assert_eq!(
            fault(st.send(WsOut::Text("late".into()))),
            WsFault::Disconnected
        );
        assert_eq!(fault(st.close(info(1000, ""))), WsFault::Disconnected);
    }

    #[test]
    fn close_during_a_denial_is_refused() {
        let mut st = denying();
        assert_eq!(fault(st.close(info(1000, ""))), WsFault::CloseDuringDenial);
        assert_eq!(phase(&st), "denying");
    }

    // Frames.

    #[test]
    fn send_queues_the_frame_on_the_socket() {
        let (st, mut rx) = open();
        let WsAction::Frame { tx, frame: out } = st.send(WsOut::Text("hi".into())).unwrap() else {
            panic!("expected a frame")
        };
        assert!(tx.try_send(out).is_ok());
        assert_eq!(frame(rx.try_recv().unwrap()), r#"text "hi""#);
        assert_eq!(phase(&st), "open");
    }

    #[test]
    fn send_before_accept_is_refused() {
        let st = session();
        assert_eq!(
            fault(st.send(WsOut::Binary(Bytes::from_static(b"x")))),
            WsFault::SendBeforeAccept
        );
        assert_eq!(
            fault(denying().send(WsOut::Text("x".into()))),
            WsFault::SendBeforeAccept
        );
    }

    #[test]
    fn send_after_the_peer_left_reports_a_disconnect() {
        let (mut st, _rx) = open();
        st.client_gone();
        assert_eq!(
            fault(st.send(WsOut::Text("x".into()))),
            WsFault::Disconnected
        );
    }

    // Denial responses.

    #[test]
    fn a_denial_response_collects_its_body() {
        let st = session();
        assert_eq!(st.check_deny(), Ok(()));
        let mut st = denying();
        assert_eq!(phase(&st), "denying");
        assert_eq!(st.status, 404);
        assert!(matches!(st.deny_body(b"ab", true), Ok(WsAction::Nothing)));
        assert!(matches!(st.deny_body(b"", true), Ok(WsAction::Nothing)));
        let WsAction::Deny {
            status,
            headers,
            body,
            ..
        } = st.deny_body(b"cd", false).unwrap()
        else {
            panic!("expected the denial")
        };
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(headers["x-why"], "nope");
        assert_eq!(body, "abcd");
        assert_eq!(phase(&st), "closed");
        assert_eq!(st.status, 404);
    }

    #[test]
    fn a_denial_starts_only_before_the_answer() {
        let (mut st, _rx) = open();
        assert_eq!(st.check_deny(), Err(WsFault::DenialTooLate));
        let started = st.deny_start(StatusCode::FORBIDDEN, HeaderMap::new());
        assert_eq!(started, Err(WsFault::DenialTooLate));
        assert_eq!(phase(&st), "open");

        let mut st = denying();
        assert_eq!(st.check_deny(), Err(WsFault::DenialTooLate));
        let again = st.deny_start(StatusCode::FORBIDDEN, HeaderMap::new());
        assert_eq!(again, Err(WsFault::DenialTooLate));
        assert_eq!(st.status, 404);

        // Not a disconnect: the app's mistake.
        let mut st = session();
        st.client_gone();
        assert_eq!(st.check_deny(), Err(WsFault::DenialTooLate));
    }

    #[test]
    fn a_denial_body_needs_its_start() {
        let mut st = session();
        assert_eq!(
            fault(st.deny_body(b"x", false)),
            WsFault::DenialBodyBeforeStart
        );
        assert_eq!(phase(&st), "connecting");
        let (mut st, _rx) = open();
        assert_eq!(
            fault(st.deny_body(b"x", false)),
            WsFault::DenialBodyBeforeStart
        );
        assert_eq!(phase(&st), "open");
    }

    // Message contents.

    #[test]
    fn send_carries_exactly_one_payload() {
        assert_eq!(payload(Some(1), None::<&str>), Ok(Payload::Bytes(1)));
        assert_eq!(payload(None::<u8>, Some("t")), Ok(Payload::Text("t")));
        assert_eq!(payload(Some(1), Some("t")), Err(WsFault::BothPayloads));
        assert_eq!(payload(None::<u8>, None::<&str>), Err(WsFault::NoPayload));
    }

    #[test]
    fn close_codes_are_those_a_frame_may_carry() {
        assert_eq!(close_code(None), Ok(1000));
        for code in [1000, 1001, 1003, 1007, 1011, 1014, 3000, 4999] {
            assert_eq!(close_code(Some(code)), Ok(code));
        }
        for code in [0, 999, 1004, 1005, 1006, 1015, 2000, 2999, 5000, 65535] {
            assert_eq!(
                close_code(Some(code)),
                Err(WsFault::CloseCode(code.to_string()))
            );
        }
    }

    #[test]
    fn close_reasons_fit_a_frame() {
        assert_eq!(close_reason(""), Ok(()));
        assert_eq!(close_reason(&"a".repeat(123)), Ok(()));
        assert_eq!(
            close_reason(&"a".repeat(124)),
            Err(WsFault::ReasonTooLong(124))
        );
        // Counted in UTF-8 bytes: 62 characters of 2 bytes each.
        assert_eq!(
            close_reason(&"é".repeat(62)),
            Err(WsFault::ReasonTooLong(124))
        );
    }

    #[test]
    fn faults_read_as_before() {
        let cases = [
            (
                WsFault::AlreadyAnswered,
                "Unexpected ASGI message 'websocket.accept': the handshake was already answered",
            ),
            (
                WsFault::SendBeforeAccept,
                "Expected ASGI message 'websocket.accept' or 'websocket.close' before \
                 'websocket.send'",
            ),
            (
                WsFault::CloseDuringDenial,
                "Unexpected ASGI message 'websocket.close' during a denial response",
            ),
            (
                WsFault::DenialTooLate,
                "Unexpected ASGI message 'websocket.http.response.start': only allowed before \
                 the handshake is answered",
            ),
            (
                WsFault::DenialBodyBeforeStart,
                "Expected ASGI message 'websocket.http.response.start' before \
                 'websocket.http.response.body'",
            ),
            (
                WsFault::BothPayloads,
                "'websocket.send' must set exactly one of 'bytes' and 'text', not both",
            ),
            (
                WsFault::NoPayload,
                "'websocket.send' must set one of 'bytes' or 'text'",
            ),
            (
                WsFault::CloseCode("1005".into()),
                "'code' must be a WebSocket close code that may be sent (1000-1003, 1007-1014 \
                 or 3000-4999), got 1005",
            ),
            (
                WsFault::ReasonTooLong(124),
                "'reason' is 124 bytes long in UTF-8; a close frame allows at most 123",
            ),
        ];
        for (fault, text) in cases {
            assert_eq!(fault.to_string(), text);
        }
    }

    // The app is done.

    #[test]
    fn returning_without_an_answer_refuses_with_500() {
        for mut st in [session(), denying()] {
            let (end, log) = st.app_returned(false);
            assert_eq!(end_kind(&end), "500");
            assert_eq!(
                log,
                Some("ASGI callable returned without answering the WebSocket handshake; sent 500")
            );
            assert_eq!(st.status, 500);
            assert_eq!(phase(&st), "closed");
        }
    }

    #[test]
    fn returning_without_an_answer_after_the_client_left_is_quiet() {
        let mut st = session();
        let (end, log) = st.app_returned(true);
        assert_eq!(end_kind(&end), "nothing");
        assert_eq!(log, None);
        assert_eq!(phase(&st), "connecting");
        assert_eq!(st.status, 0);
    }

    #[test]
    fn returning_closes_an_open_socket_normally() {
        let (mut st, _rx) = open();
        let (end, log) = st.app_returned(false);
        assert_eq!(end_kind(&end), "close 1000");
        assert_eq!(log, None);
        assert_eq!(phase(&st), "closed");

        let (end, log) = st.app_returned(false);
        assert_eq!(end_kind(&end), "nothing");
        assert_eq!(log, None);
    }

    #[test]
    fn failing_refuses_or_closes_with_an_error() {
        for mut st in [session(), denying()] {
            assert_eq!(end_kind(&st.app_failed()), "500");
            assert_eq!(st.status, 500);
            assert_eq!(phase(&st), "closed");
        }
        let (mut st, _rx) = open();
        assert_eq!(end_kind(&st.app_failed()), "close 1011");
        assert_eq!(phase(&st), "closed");
        assert_eq!(st.status, 101);
        assert_eq!(end_kind(&st.app_failed()), "nothing");
    }
}
