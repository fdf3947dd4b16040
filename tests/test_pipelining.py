"""Pipelined requests: responses are coalesced into fewer writes (server/cork.rs), which must
never reorder them, lose them, or hold back a streamed response."""

import socket

import pytest

from tests.support.helpers import start_server
from tests.support.wire import BufferedSocket


@pytest.fixture(scope="module")
def server():
    with start_server(
        "tests.apps.stream_app:app", "--no-access-log", "--timeout-graceful-shutdown", "1"
    ) as srv:
        yield srv


def read_until(wire, marker, limit=1 << 20):
    """Everything received until ``marker`` has arrived (or the server closed)."""
    while marker not in wire.buf and wire.fill():
        assert len(wire.buf) < limit
    return wire.take_all()


def connect(server, timeout):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    return BufferedSocket(sock, resets_are_eof=False)


def test_many_pipelined_requests_answered_in_order(server):
    n = 200
    payload = b"".join(b"GET /r%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(n))
    with connect(server, timeout=20) as wire:
        wire.sock.sendall(payload)
        data = read_until(wire, b"/r%d" % (n - 1))
    assert data.count(b"HTTP/1.1 200 OK") == n
    positions = [data.index(b"/r%d" % i) for i in range(n)]
    assert positions == sorted(positions)


def test_streamed_event_not_held_behind_a_pipelined_request(server):
    """The first event goes out at once even though another request waits in the pipe."""
    with connect(server, timeout=10) as wire:
        wire.sock.sendall(
            b"GET /events HTTP/1.1\r\nHost: x\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        # The app sleeps 30 s before its last event: a held-back first event times out here.
        data = read_until(wire, b"data: first")
    assert b"data: first" in data


def test_partial_pipelined_request_completes(server):
    """A response must not be held while the server waits for the rest of the next request."""
    with connect(server, timeout=10) as wire:
        wire.sock.sendall(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/1.1\r\nHo")
        first = read_until(wire, b"/one")
        assert b"HTTP/1.1 200 OK" in first
        wire.sock.sendall(b"st: x\r\n\r\n")
        second = read_until(wire, b"/two")
        assert b"/two" in second
