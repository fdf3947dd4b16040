"""A small library of misbehaving raw-socket HTTP/1.1 clients (for tests/test_hostile.py).

Everything here talks to 127.0.0.1 only and every wait is bounded.
"""

import hashlib
import os
import socket
import struct
import time

from tests.support.helpers import IncompleteResponse, RawConnection, request_bytes
from tests.support.wire import BufferedSocket

# The request a smuggling attempt tries to sneak past the framing; the hostile test app counts
# every hit of /smuggled, and there must never be one.
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"

LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


# ---------------------------------------------------------------- sockets


def connect(port, timeout=10.0, rcvbuf=None):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        # before connect(), so the advertised window stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect(("127.0.0.1", port))
    return sock


def close(sock, rst=False):
    """Close ``sock``; with ``rst`` the kernel sends a TCP RST instead of a FIN."""
    try:
        if rst:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)
        sock.close()
    except OSError:
        pass


def send_then_vanish(port, data, rst=False, linger=0.05):
    """Send ``data`` (possibly a partial request) and go away without reading."""
    sock = connect(port)
    try:
        if data:
            sock.sendall(data)
        time.sleep(linger)  # let the server see the bytes before the FIN/RST
    finally:
        close(sock, rst)


def read_some(sock, at_least, timeout=10.0):
    """Read until ``at_least`` bytes have arrived (or EOF); returns them. A reset raises."""
    sock.settimeout(timeout)
    wire = BufferedSocket(sock, resets_are_eof=False)
    wire.need(at_least)
    return wire.take_all()


def half_closed_exchange(port, data, timeout=10.0):
    """Send a whole request, shutdown(SHUT_WR), then read until EOF: returns the raw bytes."""
    sock = connect(port, timeout)
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        return BufferedSocket(sock).read_until_eof()  # a reset ends it like a FIN
    finally:
        close(sock)


def dribble(conn, data, delay=0.005, step=1):
    """Send ``data`` ``step`` bytes at a time with ``delay`` s between sends."""
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(0, len(data), step):
        conn.sock.sendall(data[i : i + step])
        time.sleep(delay)


def slow_read(sock, seconds=3.0, rate=64 * 1024, step=4096):
    """Read at about ``rate`` bytes/s for ``seconds`` s; returns what arrived (stops at EOF)."""
    out = bytearray()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        piece = sock.recv(step)
        if not piece:
            break
        out += piece
        time.sleep(step / float(rate))
    return bytes(out)


def read_responses(conn, idle=1.0, method="GET"):
    """Read responses until EOF, a truncated response, or ``idle`` s of silence.

    Returns (responses, closed): ``closed`` is True when the server closed the connection."""
    conn.sock.settimeout(idle)
    responses = []
    try:
        while True:
            resp = conn.read_response(method)
            if resp is None:
                break
            responses.append(resp)
    except socket.timeout:
        pass
    except IncompleteResponse as exc:
        partial = exc.partial
        if partial is not None and not isinstance(partial, (bytes, bytearray)):
            responses.append(partial)
    except (ConnectionResetError, BrokenPipeError):
        conn.eof = True
    return responses, conn.eof


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- smuggling corpus
#
# Every payload is one request with ambiguous or invalid framing.  The SMUGGLED request sits
# where only a *wrong* interpretation of the framing would find a second request, so whatever
# the server decides (400 and close, or one correctly framed request), /smuggled is never hit.
#
#   te_cl(te)  "TE wins" probe: the smuggled request is chunk data; Content-Length covers only
#              the chunk-size line.  A server that ignores the Transfer-Encoding variant and
#              frames by Content-Length runs the smuggled request.
#   cl_te(te)  "CL wins" probe: chunked framing ends before the smuggled request; the
#              Content-Length covers it.  A server that frames by Transfer-Encoding must
#              close the connection after the response (RFC 9112 §6.1) instead of going on.
#   cl_body(cl) the smuggled request is the whole body, announced by a Content-Length
#              variant; a server that reads that header as 0/absent runs it.
#   chunked(first) a chunked body whose first line is odd; the smuggled request follows
#              where a lenient parser would think the body ended.


def _head(lines, method="POST", target="/echo", version="HTTP/1.1"):
    return (
        ("%s %s %s\r\n" % (method, target, version)).encode()
        + b"Host: x\r\n"
        + b"".join(line + b"\r\n" for line in lines)
        + b"\r\n"
    )


def te_cl(te_lines, version="HTTP/1.1"):
    size_line = b"%x\r\n" % len(SMUGGLED)
    body = size_line + SMUGGLED + b"\r\n0\r\n\r\n"
    return _head([b"Content-Length: %d" % len(size_line)] + te_lines, version=version) + body


def cl_te(te_lines, version="HTTP/1.1", cl_first=True):
    body = b"0\r\n\r\n" + SMUGGLED
    cl = [b"Content-Length: %d" % len(body)]
    lines = cl + te_lines if cl_first else te_lines + cl
    return _head(lines, version=version) + body


def cl_body(cl_lines):
    return _head(cl_lines) + SMUGGLED


def chunked(first_line, rest=b""):
    return _head([b"Transfer-Encoding: chunked"]) + first_line + rest


def _n(value):
    return str(value).encode()


N = len(SMUGGLED)

SMUGGLING_CORPUS = [
    # -- Content-Length + Transfer-Encoding, both orders
    ("cl-then-te", cl_te([b"Transfer-Encoding: chunked"], cl_first=True)),
    ("te-then-cl", cl_te([b"Transfer-Encoding: chunked"], cl_first=False)),
    ("te-cl-te-wins", te_cl([b"Transfer-Encoding: chunked"])),
    ("cl-te-http10", cl_te([b"Transfer-Encoding: chunked"], version="HTTP/1.0")),
    ("te-cl-http10", te_cl([b"Transfer-Encoding: chunked"], version="HTTP/1.0")),
    # -- Transfer-Encoding spelling: casing and whitespace
    ("te-Chunked", te_cl([b"Transfer-Encoding: Chunked"])),
    ("te-CHUNKED-name-lower", te_cl([b"transfer-encoding: CHUNKED"])),
    ("te-tab", te_cl([b"Transfer-Encoding:\tchunked"])),
    ("te-trailing-space", te_cl([b"Transfer-Encoding: chunked   "])),
    ("te-space-before-colon", te_cl([b"Transfer-Encoding : chunked"])),
    ("te-space-before-colon-clte", cl_te([b"Transfer-Encoding : chunked"])),
    ("te-leading-space-name", te_cl([b" Transfer-Encoding: chunked"])),
    ("te-vertical-tab", te_cl([b"Transfer-Encoding:\x0bchunked"])),
    ("te-xchunked", te_cl([b"Transfer-Encoding: xchunked"])),
    ("te-chunked-x", te_cl([b"Transfer-Encoding: chunked-x"])),
    ("te-quoted", te_cl([b'Transfer-Encoding: "chunked"'])),
    ("te-identity", te_cl([b"Transfer-Encoding: identity"])),
    ("te-chunked-identity", te_cl([b"Transfer-Encoding: chunked, identity"])),
    ("te-chunked-identity-clte", cl_te([b"Transfer-Encoding: chunked, identity"])),
    ("te-identity-chunked", te_cl([b"Transfer-Encoding: identity, chunked"])),
    ("te-chunked-chunked", te_cl([b"Transfer-Encoding: chunked, chunked"])),
    ("te-empty-element", te_cl([b"Transfer-Encoding: , chunked"])),
    # -- duplicate Transfer-Encoding headers
    (
        "te-dup-chunked-identity",
        te_cl([b"Transfer-Encoding: chunked", b"Transfer-Encoding: identity"]),
    ),
    (
        "te-dup-identity-chunked",
        te_cl([b"Transfer-Encoding: identity", b"Transfer-Encoding: chunked"]),
    ),
    ("te-dup-clte", cl_te([b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"])),
    # -- Content-Length oddities (the smuggled request is the body)
    ("cl-plus-sign", cl_body([b"Content-Length: +" + _n(N)])),
    ("cl-minus-sign", cl_body([b"Content-Length: -" + _n(N)])),
    ("cl-list-same", cl_body([b"Content-Length: %d, %d" % (N, N)])),
    ("cl-list-0-last", cl_body([b"Content-Length: %d, 0" % N])),
    ("cl-list-0-first", cl_body([b"Content-Length: 0, %d" % N])),
    ("cl-dup-0-last", cl_body([b"Content-Length: %d" % N, b"Content-Length: 0"])),
    ("cl-dup-0-first", cl_body([b"Content-Length: 0", b"Content-Length: %d" % N])),
    ("cl-inner-space", cl_body([b"Content-Length: 0 %d" % N])),
    ("cl-surrounding-space", cl_body([b"Content-Length:   %d   " % N])),
    ("cl-hex-prefix", cl_body([b"Content-Length: 0x%x" % N])),
    ("cl-leading-zeros", cl_body([b"Content-Length: 000%d" % N])),
    ("cl-space-before-colon", cl_body([b"Content-Length : %d" % N])),
    ("cl-2-pow-64", cl_body([b"Content-Length: 18446744073709551616"])),  # wraps to 0
    ("cl-nul", cl_body([b"Content-Length: %d\x00" % N])),
    # -- obs-fold (a line starting with SP/HTAB continues the previous field)
    ("fold-te-value", te_cl([b"Transfer-Encoding:", b" chunked"])),
    ("fold-te-after-other", cl_te([b"X-Fold: a", b" Transfer-Encoding: chunked"])),
    ("fold-te-tab", te_cl([b"Transfer-Encoding: identity", b"\tchunked"])),
    ("fold-cl-value", cl_body([b"Content-Length:", b" %d" % N])),
    # -- bare LF / bare CR inside the head
    ("bare-lf-before-te", te_cl([b"X-A: a\nTransfer-Encoding: chunked"])),
    ("bare-lf-before-te-clte", cl_te([b"X-A: a\nTransfer-Encoding: chunked"])),
    ("bare-cr-before-te-clte", cl_te([b"X-A: a\rTransfer-Encoding: chunked"])),
    ("bare-cr-in-te", te_cl([b"Transfer-Encoding: chunked\r"])),
    # -- NUL in the head
    ("nul-in-te-value", te_cl([b"Transfer-Encoding: chunked\x00"])),
    ("nul-in-header-value-clte", cl_te([b"X-A: a\x00b", b"Transfer-Encoding: chunked"])),
    ("nul-in-header-name", te_cl([b"X-\x00A: b", b"Transfer-Encoding: chunked"])),
    # -- chunk-size line tricks (Transfer-Encoding: chunked only)
    (
        "chunk-ext-quoted-crlf",
        chunked(b'5;ext="a\r\nhello\r\n0\r\n\r\n' + SMUGGLED + b'"\r\nhello\r\n0\r\n\r\n'),
    ),
    ("chunk-ext-bare-lf", chunked(b"5;ext=a\nb\r\nhello\r\n0\r\n\r\n", SMUGGLED)),
    ("chunk-size-overflow", chunked(b"ffffffffffffffffff\r\n", b"hello\r\n0\r\n\r\n" + SMUGGLED)),
    ("chunk-size-wraps-to-5", chunked(b"10000000000000005\r\nhello\r\n0\r\n\r\n", SMUGGLED)),
    ("chunk-size-hex-prefix", chunked(b"0x5\r\n\r\n", SMUGGLED)),
    ("chunk-size-minus-zero", chunked(b"-0\r\n\r\n", SMUGGLED)),
    ("chunk-size-negative", chunked(b"-5\r\nhello\r\n0\r\n\r\n", SMUGGLED)),
    ("chunk-size-plus", chunked(b"+5\r\nhello\r\n0\r\n\r\n", SMUGGLED)),
    ("chunk-size-bare-lf", chunked(b"5\nhello\r\n0\r\n\r\n", SMUGGLED)),
    ("chunk-data-overrun", chunked(b"3\r\nhello\r\n0\r\n\r\n", SMUGGLED)),
    ("chunk-last-no-crlf", chunked(b"0\r\n", SMUGGLED)),
]


# ---------------------------------------------------------------- server-side watch


def get_json(port, target, timeout=10.0):
    import json

    with RawConnection(port, timeout=timeout) as conn:
        conn.send(request_bytes("GET", target, [("Connection", "close")]))
        resp = conn.read_response()
    assert resp is not None and resp.status == 200, resp
    return json.loads(resp.body.decode("utf-8"))


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


class ServerWatch:
    """Baseline of a server worker's open file descriptors and asyncio tasks (the hostile app's
    ``/tasks`` route), and the check that a scenario left nothing behind."""

    FD_SLACK = 2

    def __init__(self, server):
        self.server = server
        self.base_fds = None
        self.base_tasks = None
        self.smuggled_seen = 0

    def fds(self):
        return fd_count(self.server.pid)

    def tasks(self):
        return get_json(self.server.port, "/tasks")["tasks"]

    def take_baseline(self):
        for _ in range(3):
            self.healthy()
        time.sleep(0.3)
        fds, tasks = [], []
        for _ in range(6):
            tasks.append(self.tasks())
            time.sleep(0.05)
            fds.append(self.fds())
        self.base_fds = min(fds)
        self.base_tasks = min(tasks)
        self.smuggled_seen = self.smuggled_hits()
        return self

    def resync(self):
        """Forget smuggled hits counted before now (a failed test may have left some)."""
        self.smuggled_seen = self.smuggled_hits()

    def healthy(self):
        with RawConnection(self.server.port, timeout=10) as conn:
            conn.send(request_bytes("GET", "/hello", [("Connection", "close")]))
            resp = conn.read_response()
        assert resp is not None and resp.status == 200 and resp.body == b"hello world", resp

    def smuggled_hits(self):
        return get_json(self.server.port, "/counters")["smuggled"]

    def assert_recovered(self, timeout=10.0):
        """The server answers a normal request on a fresh connection, nothing was smuggled,
        and its fds (within FD_SLACK) and asyncio tasks come back to the baseline."""
        assert self.server.proc.poll() is None, "server died:\n" + self.server.output()[-3000:]
        self.healthy()
        hits = self.smuggled_hits()
        new_hits, self.smuggled_seen = hits - self.smuggled_seen, hits
        assert new_hits == 0, "a smuggled request reached the app (%d times)" % new_hits
        deadline = time.monotonic() + timeout
        while True:
            tasks = self.tasks()
            fds = self.fds()
            if abs(fds - self.base_fds) <= self.FD_SLACK and tasks <= self.base_tasks:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    "server did not return to its baseline within %.0fs: fds %d (baseline %d), "
                    "asyncio tasks %d (baseline %d)"
                    % (timeout, fds, self.base_fds, tasks, self.base_tasks)
                )
            time.sleep(0.1)
