"""A WebSocket over one HTTP/2 stream (RFC 8441) for tests: the extended CONNECT handshake,
then the same hand-built frames as ``wsraw.RawWebSocket`` (``WebSocketFrames``), so a test
written against that class runs over either transport.

Several sockets may share one ``H2Client`` (pass ``client=``): each is one stream of that
connection, and reading for one also takes in what arrives for the others.
"""

import socket
import time

import h2.config
import h2.exceptions
import h2.settings

from tests.support.h2client import H2Client, Stream
from tests.support.wsraw import HandshakeFailed, WebSocketFrames


def connect_protocol_enabled(client, timeout=10.0):
    """Whether the server's SETTINGS carry SETTINGS_ENABLE_CONNECT_PROTOCOL=1 (waits for
    its first SETTINGS frame)."""
    deadline = time.monotonic() + timeout
    while not client.settings_received:
        if time.monotonic() > deadline:
            raise AssertionError("no SETTINGS from the server in %.0fs" % timeout)
        if not client.receive_once():
            raise AssertionError("connection closed before the server's SETTINGS")
    code = h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL
    return client.conn.remote_settings.get(code, 0) == 1


def unvalidated_client(port, **kwargs):
    """An ``H2Client`` whose h2 state machine lets malformed requests out (to test how the
    server answers them)."""
    client = H2Client(port, **kwargs)
    client.conn.config = h2.config.H2Configuration(
        client_side=True, header_encoding="utf-8", validate_outbound_headers=False
    )
    return client


class H2WebSocket(WebSocketFrames):
    """``RawWebSocket``'s interface over an extended CONNECT stream."""

    def __init__(
        self,
        port,
        path="/echo",
        host="127.0.0.1",
        timeout=10.0,
        extra_headers=(),
        handshake=True,
        client=None,
        tls_context=None,
    ):
        self.owns_client = client is None
        if client is None:
            client = H2Client(port, host=host, tls_context=tls_context, timeout=timeout)
        self.client = client
        self.sock = client.sock
        self.sid = None
        self.status = None
        self.response_headers = []
        self.buf = bytearray()
        if handshake:
            self.handshake(path, extra_headers)

    # ------------------------------------------------------------ handshake
    def open_stream(self, path, extra_headers=(), protocol="websocket", version="13"):
        """Send the extended CONNECT (RFC 8441 §4) and return the stream id, unanswered."""
        if not connect_protocol_enabled(self.client):
            raise AssertionError("the server did not send SETTINGS_ENABLE_CONNECT_PROTOCOL")
        client = self.client
        sid = client.conn.get_next_available_stream_id()
        head = [
            (":method", "CONNECT"),
            (":protocol", protocol),
            (":scheme", client.scheme),
            (":path", path),
            (":authority", client.authority),
        ]
        if version is not None:
            head.append(("sec-websocket-version", version))
        head += [(n.lower(), v) for n, v in extra_headers]
        client.streams[sid] = Stream(sid)
        client.conn.send_headers(sid, head, end_stream=False)
        client.flush()
        self.sid = sid
        return sid

    def handshake(self, path, extra_headers=(), **kwargs):
        sid = self.open_stream(path, extra_headers, **kwargs)
        stream = self.client.streams[sid]
        deadline = time.monotonic() + 10.0
        while stream.headers is None and not stream.done:
            if time.monotonic() > deadline:
                raise AssertionError("no answer to the extended CONNECT")
            if not self.client.receive_once():
                break
        self.status = stream.status
        self.response_headers = [(n, v) for n, v in stream.headers or () if n[0] != ":"]
        # The stream's received bytes are our buffer (``WebSocketFrames`` takes from it).
        self.buf = stream.data
        if self.status != 200:
            if self.status is not None:
                self.client.wait(sid)
            head = repr(stream.headers).encode()
            # A connection left open answers no PING: the server's graceful shutdown would
            # wait for it.
            self.close()
            raise HandshakeFailed(self.status, head, bytes(stream.data))

    @property
    def stream(self):
        return self.client.streams[self.sid]

    # ------------------------------------------------------------ I/O
    def set_timeout(self, timeout):
        self.sock.settimeout(timeout)

    def _need(self, n):
        while len(self.buf) < n:
            if self.stream.done or not self.client.receive_once():
                raise EOFError("stream closed with %d of %d bytes" % (len(self.buf), n))

    def send_raw(self, data):
        self.client.send_body(self.sid, data, end_stream=False)

    def end(self):
        """Our END_STREAM: the half-close a TCP FIN is on HTTP/1.1."""
        try:
            self.client.conn.end_stream(self.sid)
            self.client.flush()
        except (h2.exceptions.ProtocolError, OSError):
            pass  # already closed: reset, or ended before

    def closed_by_peer(self, timeout=5.0):
        """True if the server ends (END_STREAM) or resets the stream within ``timeout`` s
        (data discarded); then ends our side too."""
        deadline = time.monotonic() + timeout
        while not self.stream.done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(max(0.01, remaining))
            try:
                if not self.client.receive_once():
                    return True
            except socket.timeout:
                return False
            del self.buf[:]
        if self.stream.reset is None:
            self.end()
        return True

    def close(self):
        if self.owns_client:
            self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
