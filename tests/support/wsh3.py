"""A WebSocket over one HTTP/3 request stream (RFC 9220) for tests: the extended CONNECT on
aioquic's H3 layer (``tests/support/h3client.py``), then the same hand-built frames as
``wsraw.RawWebSocket`` (``WebSocketFrames``) in the stream's DATA frames, so a test written
against that class runs over HTTP/3 too.

aioquic is asyncio; the tests are synchronous, like the HTTP/1.1 and HTTP/2 ones. So an
``H3Session`` runs one QUIC connection on an event loop in its own thread, and every call
into aioquic goes through that loop. Several sockets may share one session (each is one
stream of the connection).
"""

from __future__ import annotations

import asyncio
import socket
import threading

from aioquic.h3.connection import HeadersState

from tests.support.h3client import Exchange, h3_connect
from tests.support.wsraw import HandshakeFailed, WebSocketFrames

SETTINGS_ENABLE_CONNECT_PROTOCOL = 0x08


class H3Session:
    """One HTTP/3 connection driven from a background event loop."""

    def __init__(self, port: int, ca_file: str, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.cond = threading.Condition()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._cm = h3_connect(port, ca_file)
        try:
            self.client = self.call(self._cm.__aenter__())
        except BaseException:
            self._stop_loop()
            raise
        received = self.client.quic_event_received

        def received_and_notify(event) -> None:
            received(event)
            with self.cond:
                self.cond.notify_all()

        self.client.quic_event_received = received_and_notify

    def call(self, coro, timeout: float | None = None):
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout or self.timeout + 20)

    def run(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` on the loop's thread (aioquic is not thread-safe)."""

        async def job():
            return fn(*args, **kwargs)

        return self.call(job())

    def wait_for(self, predicate, timeout: float | None = None) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout or self.timeout)

    def settings(self) -> dict:
        """The server's SETTINGS (waits for them)."""
        if not self.wait_for(lambda: self.client.h3.received_settings is not None):
            raise AssertionError("no SETTINGS from the server")
        return dict(self.client.h3.received_settings)

    def connect_protocol_enabled(self) -> bool:
        return self.settings().get(SETTINGS_ENABLE_CONNECT_PROTOCOL, 0) == 1

    def start(self, *args, **kwargs) -> Exchange:
        return self.run(self.client.start, *args, **kwargs)

    def wait(self, ex: Exchange, timeout: float | None = None) -> Exchange:
        if not self.wait_for(ex.done.is_set, timeout):
            raise AssertionError("stream %d did not end" % ex.stream_id)
        return ex

    def request(self, method: str, path: str, **kwargs) -> Exchange:
        return self.wait(self.start(method, path, **kwargs))

    def start_raw(self, frame: bytes) -> Exchange:
        """Opens a request stream with ``frame`` (a HEADERS frame built by the test) as its
        first bytes, bypassing aioquic's QPACK encoder; DATA may follow by ``send_body``."""

        def send() -> Exchange:
            quic = self.client._quic
            stream_id = quic.get_next_available_stream_id()
            ex = Exchange(stream_id)
            self.client.exchanges[stream_id] = ex
            quic.send_stream_data(stream_id, frame, end_stream=False)
            # aioquic's H3 layer then lets DATA follow the head it did not send itself.
            # aioquic 1.3 made _get_or_create_stream a context manager; 1.2 (Python < 3.10)
            # returns the stream.
            got = self.client.h3._get_or_create_stream(stream_id)
            if hasattr(got, "__enter__"):
                with got as stream:
                    stream.headers_send_state = HeadersState.AFTER_HEADERS
            else:
                got.headers_send_state = HeadersState.AFTER_HEADERS
            self.client.transmit()
            return ex

        return self.run(send)

    def close(self) -> None:
        try:
            self.call(self._cm.__aexit__(None, None, None))
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def varint(value: int) -> bytes:
    """RFC 9000 §16 variable-length integer."""
    for length, flag in ((1, 0x00), (2, 0x40), (4, 0x80), (8, 0xC0)):
        if value < 1 << (8 * length - 2):
            return (value | flag << (8 * length - 8)).to_bytes(length, "big")
    raise ValueError(value)


def prefix_int(value: int, bits: int, flags: int = 0) -> bytes:
    """RFC 7541 §5.1 prefixed integer."""
    mask = (1 << bits) - 1
    if value < mask:
        return bytes([flags | value])
    out = bytearray([flags | mask])
    value -= mask
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def plain_headers_frame(fields: list[tuple[bytes, bytes]]) -> bytes:
    """A HEADERS frame whose field section has every field as a literal with a literal name,
    neither string Huffman-coded (RFC 9204 §4.5.6), and no dynamic table."""
    section = bytearray(b"\x00\x00")
    for name, value in fields:
        section += prefix_int(len(name), 3, 0x20) + name
        section += prefix_int(len(value), 7) + value
    return varint(0x01) + varint(len(section)) + bytes(section)


class H3WebSocket(WebSocketFrames):
    """``RawWebSocket``'s interface over an extended CONNECT stream of HTTP/3."""

    def __init__(
        self,
        port: int,
        ca_file: str,
        path: str = "/echo",
        extra_headers=(),
        handshake: bool = True,
        session: H3Session | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.owns_session = session is None
        self.session = session or H3Session(port, ca_file, timeout)
        self.timeout = timeout
        self.ex: Exchange | None = None
        self.status = None
        self.response_headers: list[tuple[str, str]] = []
        self.buf = bytearray()
        if handshake:
            try:
                self.handshake(path, extra_headers)
            except BaseException:
                self.close()
                raise

    # ------------------------------------------------------------ handshake
    @staticmethod
    def head(path, extra_headers=(), protocol="websocket", version="13"):
        head = [
            (b":method", b"CONNECT"),
            (b":protocol", protocol.encode()),
            (b":scheme", b"https"),
            (b":path", path.encode()),
            (b":authority", b"localhost"),
        ]
        if version is not None:
            head.append((b"sec-websocket-version", version.encode()))
        head += [(n.lower().encode(), v.encode()) for n, v in extra_headers]
        return head

    def open_stream(self, path, extra_headers=(), plain=False, **kwargs) -> Exchange:
        """Sends the extended CONNECT (RFC 9220 §3), unanswered. ``plain``: the head as plain
        literals (aioquic's encoder Huffman-codes ``:protocol`` and its value)."""
        if not self.session.connect_protocol_enabled():
            raise AssertionError("the server did not send SETTINGS_ENABLE_CONNECT_PROTOCOL")
        head = self.head(path, extra_headers, **kwargs)
        if plain:
            self.ex = self.session.start_raw(plain_headers_frame(head))
        else:
            self.ex = self.session.start("CONNECT", path, raw_head=head, end=False)
        return self.ex

    def handshake(self, path, extra_headers=(), **kwargs) -> None:
        ex = self.open_stream(path, extra_headers, **kwargs)
        if not self.session.wait_for(lambda: ex.headers is not None or ex.done.is_set()):
            raise AssertionError("no answer to the extended CONNECT")
        self.status = ex.status if ex.headers is not None else None
        self.response_headers = [
            (n.decode(), v.decode()) for n, v in ex.headers or () if not n.startswith(b":")
        ]
        # The stream's received bytes are our buffer (``WebSocketFrames`` takes from it).
        self.buf = ex.body
        if self.status != 200:
            if self.status is not None:
                self.session.wait(ex)
            raise HandshakeFailed(self.status, repr(ex.headers).encode(), bytes(ex.body))

    # ------------------------------------------------------------ I/O
    def set_timeout(self, timeout):
        self.timeout = timeout

    def _need(self, n):
        ex = self.ex
        if not self.session.wait_for(lambda: len(self.buf) >= n or ex.done.is_set(), self.timeout):
            raise socket.timeout("%d of %d bytes" % (len(self.buf), n))
        if len(self.buf) < n:
            raise EOFError("stream closed with %d of %d bytes" % (len(self.buf), n))

    def send_raw(self, data):
        self.session.run(self.session.client.send_body, self.ex, data)

    def end(self):
        """Our FIN: the half-close a TCP FIN is on HTTP/1.1."""

        def fin():
            try:
                self.session.client.send_body(self.ex, b"", end=True)
            except Exception:
                pass  # already closed: reset, or ended before

        self.session.run(fin)

    def reset(self):
        self.session.run(self.session.client.cancel, self.ex)

    def closed_by_peer(self, timeout=5.0):
        """True if the server ends (FIN) or resets the stream within ``timeout`` s (data
        discarded); then ends our side too."""
        if not self.session.wait_for(self.ex.done.is_set, timeout):
            return False
        del self.buf[:]
        if self.ex.reset is None:
            self.end()
        return True

    def close(self):
        if self.owns_session:
            self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
