"""A tiny RFC 6455 client for protocol-abuse tests: manual handshake, hand-built frames.

Nothing here validates what the server sends beyond what a test asserts; it is meant to let a
test send frames a well-behaved client library never would (unmasked frames, reserved bits,
unknown opcodes, invalid UTF-8, oversized messages) and to read the server's frames verbatim.
"""

import base64
import hashlib
import os
import socket
import struct
import time

from tests.support.wire import BufferedSocket

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def mask_bytes(payload, key):
    """XOR ``payload`` with the 4-byte ``key`` (the whole payload at once, via int arithmetic)."""
    n = len(payload)
    if not n:
        return b""
    repeated = (key * (n // 4 + 1))[:n]
    value = int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")
    return value.to_bytes(n, "big")


def encode_frame(opcode, payload=b"", fin=True, mask=True, rsv=0, key=None):
    """One frame: ``rsv`` is the 3 reserved bits (0-7), ``mask`` whether to mask it."""
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    first = (0x80 if fin else 0) | ((rsv & 7) << 4) | (opcode & 0x0F)
    n = len(payload)
    mask_bit = 0x80 if mask else 0
    if n < 126:
        head = struct.pack("!BB", first, mask_bit | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", first, mask_bit | 126, n)
    else:
        head = struct.pack("!BBQ", first, mask_bit | 127, n)
    if not mask:
        return head + payload
    if key is None:
        key = os.urandom(4)
    return head + key + mask_bytes(payload, key)


def close_payload(code, reason=""):
    return struct.pack("!H", code) + reason.encode("utf-8")


class Frame:
    def __init__(self, fin, rsv, opcode, payload, masked):
        self.fin = fin
        self.rsv = rsv
        self.opcode = opcode
        self.payload = payload
        self.masked = masked

    @property
    def close_code(self):
        if self.opcode != CLOSE or len(self.payload) < 2:
            return None
        return struct.unpack("!H", self.payload[:2])[0]

    @property
    def close_reason(self):
        return self.payload[2:].decode("utf-8", "replace")

    def __repr__(self):
        return "Frame(fin=%s, rsv=%s, opcode=%#x, len=%d, payload=%r)" % (
            self.fin,
            self.rsv,
            self.opcode,
            len(self.payload),
            self.payload[:40],
        )


class HandshakeFailed(AssertionError):
    def __init__(self, status, head, rest):
        AssertionError.__init__(self, "handshake answered %s: %r" % (status, head[:300]))
        self.status = status
        self.head = head
        self.rest = rest


class WebSocketFrames:
    """Hand-built frames over a byte transport, whatever carries it: a subclass gives ``buf``
    (bytes received, not yet taken), ``send_raw``, ``_need(n)`` (wait until ``buf`` holds n
    bytes, EOFError at the end) and ``set_timeout``, and ``response_headers``."""

    response_headers = ()

    def header(self, name):
        for n, v in self.response_headers:
            if n == name:
                return v
        return None

    def send_frame(self, opcode, payload=b"", **kwargs):
        self.send_raw(encode_frame(opcode, payload, **kwargs))

    def send_text(self, text):
        self.send_frame(TEXT, text.encode("utf-8"))

    def send_close(self, code=1000, reason=""):
        self.send_frame(CLOSE, close_payload(code, reason) if code is not None else b"")

    def recv_frame(self, timeout=None):
        """The next frame; raises EOFError at EOF, socket.timeout when nothing comes."""
        if timeout is not None:
            self.set_timeout(timeout)
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        n = b1 & 0x7F
        pos = 2
        if n == 126:
            self._need(4)
            n = struct.unpack("!H", bytes(self.buf[2:4]))[0]
            pos = 4
        elif n == 127:
            self._need(10)
            n = struct.unpack("!Q", bytes(self.buf[2:10]))[0]
            pos = 10
        masked = bool(b1 & 0x80)
        key = b""
        if masked:
            self._need(pos + 4)
            key = bytes(self.buf[pos : pos + 4])
            pos += 4
        self._need(pos + n)
        payload = bytes(self.buf[pos : pos + n])
        del self.buf[: pos + n]
        if masked:
            payload = mask_bytes(payload, key)
        return Frame(bool(b0 & 0x80), (b0 >> 4) & 7, b0 & 0x0F, payload, masked)

    def recv_until(self, opcodes, timeout=10.0):
        """Skip frames until one whose opcode is in ``opcodes``; returns (frame, skipped)."""
        deadline = time.monotonic() + timeout
        skipped = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("no frame with opcode in %r; got %r" % (opcodes, skipped))
            frame = self.recv_frame(timeout=remaining)
            if frame.opcode in opcodes:
                return frame, skipped
            skipped.append(frame)

    def expect_close(self, timeout=10.0):
        """Read until a close frame arrives (other frames skipped); returns it."""
        frame, _ = self.recv_until((CLOSE,), timeout)
        return frame


class RawWebSocket(BufferedSocket, WebSocketFrames):
    """A socket after a manual WebSocket handshake; ``recv_frame`` returns one frame."""

    recv_size = 1 << 20

    def __init__(
        self, port, path="/echo", host="127.0.0.1", timeout=10.0, extra_headers=(), handshake=True
    ):
        BufferedSocket.__init__(self, socket.create_connection((host, port), timeout=timeout))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.status = None
        self.response_headers = []
        if handshake:
            self.handshake(path, extra_headers)

    # ------------------------------------------------------------ handshake
    def handshake(self, path, extra_headers=()):
        key = base64.b64encode(os.urandom(16))
        lines = [
            "GET %s HTTP/1.1" % path,
            "Host: test",
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: %s" % key.decode(),
            "Sec-WebSocket-Version: 13",
        ]
        lines += ["%s: %s" % (n, v) for n, v in extra_headers]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        idx = self.find(b"\r\n\r\n")
        if idx < 0:
            raise HandshakeFailed(None, bytes(self.buf), b"")
        head = self.take(idx)
        del self.buf[:4]
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        self.status = int(status_line.split(" ")[1])
        self.response_headers = [
            (n.strip().lower(), v.strip())
            for n, _, v in (line.partition(":") for line in header_lines)
        ]
        if self.status != 101:
            raise HandshakeFailed(self.status, head, bytes(self.buf))
        expected = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        accept = self.header("sec-websocket-accept")
        if accept != expected:
            raise AssertionError("bad Sec-WebSocket-Accept %r (expected %r)" % (accept, expected))

    # ------------------------------------------------------------ I/O
    def _need(self, n):
        if not self.need(n):
            raise EOFError("connection closed with %d of %d bytes" % (len(self.buf), n))

    def set_timeout(self, timeout):
        self.sock.settimeout(timeout)

    def send_raw(self, data):
        self.sock.sendall(data)

    def closed_by_peer(self, timeout=5.0):
        """True if the server closes the TCP connection within ``timeout`` s (data discarded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.fill():
                    return True
            except socket.timeout:
                return False
            del self.buf[:]
        return False
