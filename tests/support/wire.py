"""The one buffered socket reader of the raw test clients: a socket and the bytes received on
it that nobody has taken yet.

The HTTP/1.x client (``helpers.RawConnection``), the WebSocket client (``wsraw.RawWebSocket``),
the HTTP/2 frame client (``h2frames.H2Conn``) and the small readers in ``hostile.py`` and the
tests build on it; what they parse stays theirs, and so do the errors they raise on a short
read. Everything waits only as long as the socket's timeout (or a given deadline) allows.
"""

import socket
import time

from tests.support.sockets import SocketOwner


class BufferedSocket(SocketOwner):
    """``sock`` plus ``buf`` (received, not yet taken) and ``eof`` (the peer closed)."""

    recv_size = 65536  # bytes asked of one recv() when the caller does not say

    def __init__(self, sock, resets_are_eof=True):
        """``resets_are_eof``: a reset (or broken pipe) while receiving ends the stream like a
        FIN; with False it raises, for readers that must not mistake one for the other."""
        self.sock = sock
        self.buf = bytearray()
        self.eof = False
        self.resets_are_eof = resets_are_eof

    def fill(self, size=None, deadline=None):
        """Receive once into ``buf``: True when bytes came, False at EOF (at once once ``eof``
        is set). With ``deadline`` (a ``time.monotonic()`` value) the socket waits until then
        and None means that it passed; without one, the socket's own timeout applies and
        ``socket.timeout`` propagates."""
        if self.eof:
            return False
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(size or self.recv_size)
        except socket.timeout:
            if deadline is None:
                raise
            return None
        except (ConnectionResetError, BrokenPipeError):
            if not self.resets_are_eof:
                raise
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def need(self, n, deadline=None):
        """Fill until ``buf`` holds at least ``n`` bytes (nothing is taken): True, False when
        the stream ended first, None when the deadline passed first."""
        while len(self.buf) < n:
            filled = self.fill(max(self.recv_size, n - len(self.buf)), deadline)
            if not filled:
                return filled
        return True

    def find(self, marker, deadline=None):
        """Fill until ``marker`` is in ``buf`` (nothing is taken): its index, -1 when the
        stream ended first, None when the deadline passed first."""
        start = 0
        while True:
            idx = self.buf.find(marker, start)
            if idx >= 0:
                return idx
            # Only the new bytes (and a marker's length before them) need searching again.
            start = max(0, len(self.buf) - len(marker) + 1)
            filled = self.fill(deadline=deadline)
            if not filled:
                return -1 if filled is False else None

    def take(self, n):
        """The first ``n`` buffered bytes, removed from ``buf``."""
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def take_all(self):
        """Everything buffered, removed from ``buf``."""
        return self.take(len(self.buf))

    def read_until_eof(self):
        """Everything until the peer closes (what was buffered included)."""
        while self.fill():
            pass
        return self.take_all()
