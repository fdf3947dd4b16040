"""Response bodies held in memory are bounded in bytes (src/bridge/budget.rs): clients that
stop reading, on HTTP/1.1 or on HTTP/2 streams held at a zero window, make the app's
``send()`` wait instead of the worker's memory grow, whatever the chunk size; other clients
are served meanwhile, and a slow reader still gets every byte.

The app streams 1 MiB chunks for as long as the client is connected (tests/apps/buffer_app.py).
Without the byte budget each stalled response held about 10 of them (8 queued, 1 parked,
1 in hyper's or h2's buffer).
"""

import hashlib
import socket
import time

import h2.settings
import httpx
import pytest

from tests.apps.buffer_app import expected
from tests.support.h2client import H2Client
from tests.support.helpers import start_server, wait_until
from tests.support.hostile import fd_count

APP = "tests.apps.buffer_app:app"
MiB = 1 << 20
# The target of the byte budgets: the attack grows the worker by less than this.
RSS_BUDGET = 128 * MiB


def left_nothing_behind(server, rss_before, fds_before):
    """RSS back within 10% of its level before the attack (the loop thread hands freed memory
    back once a second: Core.release_memory), and no descriptor left open."""
    assert wait_until(lambda: server.rss_kb() * 1024 <= rss_before * 1.1, timeout=30), (
        "RSS %.1f MiB, was %.1f" % (server.rss_kb() * 1024 / MiB, rss_before / MiB)
    )
    # At most as many: the baseline may still have counted a closing connection of its own.
    assert wait_until(lambda: fd_count(server.pid) <= fds_before, timeout=10), fd_count(server.pid)


def stats(server):
    return httpx.get(server.url + "/stats", timeout=10).json()


def settled_chunks(server, streaming):
    """Wait until ``streaming`` responses are running and their send() calls all wait (the
    chunk count stops growing); returns the count."""
    assert wait_until(lambda: stats(server)["streaming"] >= streaming, timeout=30), stats(server)
    last = -1
    for _ in range(100):
        now = stats(server)["chunks"]
        if now == last:
            return now
        last = now
        time.sleep(0.5)
    raise AssertionError("the app never stopped sending: %r" % stats(server))


def stalled_reader(port, path="/forever"):
    """An HTTP/1.1 client that sends its request and never reads."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
    return sock


def served_meanwhile(server):
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for _ in range(20):
            response = client.get("/small")
            assert response.status_code == 200 and response.text == "ok"


def stall(open_clients, streaming):
    """Serve the app to clients that stop reading (``open_clients(port)`` opens them and
    returns what to close) until every one of the ``streaming`` responses waits in send();
    checks that the worker grew by less than ``RSS_BUDGET`` meanwhile, served others, and
    once the clients left gave memory and descriptors back. Returns the chunks the app got
    out."""
    with start_server(APP, "--no-access-log") as server:
        served_meanwhile(server)  # warm: the baseline includes what serving needs anyway
        before = server.rss_kb() * 1024
        fds_before = fd_count(server.pid)
        clients = open_clients(server.port)
        try:
            chunks = settled_chunks(server, streaming)
            grown = server.rss_kb() * 1024 - before
            served_meanwhile(server)
        finally:
            for client in clients:
                client.close()
        assert grown < RSS_BUDGET, "RSS grew by %.0f MiB (%d chunks)" % (grown / MiB, chunks)
        # The stalled responses end when their clients go; the server carries on, and gives
        # the memory and descriptors back.
        assert wait_until(lambda: stats(server)["streaming"] == 0, timeout=30), stats(server)
        served_meanwhile(server)
        left_nothing_behind(server, before, fds_before)
    return chunks


def test_stalled_http11_readers_do_not_grow_memory():
    readers = 64
    chunks = stall(lambda port: [stalled_reader(port) for _ in range(readers)], readers)
    # Every response got one chunk or two out before its send() had to wait.
    assert chunks <= readers * 3, chunks


def zero_window_streams(port, streams):
    """One HTTP/2 connection whose streams never get any window."""
    client = H2Client(port, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    client.receive_once()  # the server's SETTINGS and the ACK of ours
    for _ in range(streams):
        client.request("GET", "/forever")
    return [client]


def test_http2_streams_at_zero_window_do_not_grow_memory():
    streams = 100
    chunks = stall(lambda port: zero_window_streams(port, streams), streams)
    # The connection's budget (4 MiB by default) is shared by its streams.
    assert chunks <= 8, chunks


def stalled_websocket(port):
    """A WebSocket client that completes the handshake and then never reads."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    return sock


def test_stalled_websocket_readers_do_not_grow_memory():
    readers = 32
    chunks = stall(lambda port: [stalled_websocket(port) for _ in range(readers)], readers)
    # The connection's budget (1 MiB) took one message or two before send() waited.
    assert chunks <= readers * 4, chunks


@pytest.mark.parametrize("chunk", [1024, 256 * 1024, 3 * MiB])
def test_a_slow_reader_gets_every_byte(chunk):
    size = 12 * MiB
    with start_server(APP, "--no-access-log", "--limit-response-buffer", "65536") as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(
            b"GET /download?size=%d&chunk=%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            % (size, chunk)
        )
        time.sleep(1.0)  # the app's send() waits: its budget is full, nobody reads
        data = bytearray()
        sock.settimeout(30)
        while True:
            got = sock.recv(1 << 20)
            if not got:
                break
            data += got
        sock.close()
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    # Chunked framing: decode it (by offset: slicing the rest off at each of 12k chunks
    # copied ~75 GB and took most of a minute).
    decoded = bytearray()
    at = 0
    while at < len(body):
        eol = body.index(b"\r\n", at)
        n = int(body[at:eol], 16)
        if n == 0:
            break
        decoded += body[eol + 2 : eol + 2 + n]
        at = eol + 2 + n + 2
    want = expected(size, chunk)
    assert len(decoded) == size
    assert hashlib.sha256(decoded).digest() == hashlib.sha256(want).digest()


def test_http2_slow_stream_gets_every_byte_and_others_go_on():
    size = 8 * MiB
    with start_server(APP, "--no-access-log", "--http2-connection-buffer", "262144") as server:
        client = H2Client(server.port)
        try:
            big = client.request("GET", "/download?size=%d&chunk=%d" % (size, 128 * 1024))
            small = client.request("GET", "/small")
            done = client.wait(big, small, timeout=60)
        finally:
            client.close()
    assert done[1].status == 200 and bytes(done[1].data) == b"ok"
    assert bytes(done[0].data) == expected(size, 128 * 1024)
