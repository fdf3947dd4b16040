"""Connection timeouts over HTTP/1.1: --timeout-keep-alive between requests, and
--header-read-timeout from the first byte of a request head to its end.

The two are separate: a keep-alive longer than the header timeout (the usual setting behind a
load balancer that idles connections out at 60 s: keep-alive 75 s) must hold an idle
connection for the whole keep-alive, while a client that starts a head and stalls is cut at
the header timeout whatever the keep-alive.
"""

import time

import pytest

from tests.support.helpers import RawConnection, request_bytes, start_server

KEEP_ALIVE = 3.0
HEADER = 1.0
PARTIAL_HEAD = b"GET /hello HTTP/1.1\r\nHost: x\r\n"


@pytest.fixture(scope="module")
def server():
    with start_server(
        "tests.apps.basic:app",
        "--timeout-keep-alive",
        str(KEEP_ALIVE),
        "--header-read-timeout",
        str(HEADER),
    ) as s:
        yield s


def get_hello(conn):
    conn.send(request_bytes("GET", "/hello"))
    resp = conn.read_response()
    assert resp.status == 200 and resp.body == b"hello world"


def closed_within(conn, limit):
    """Seconds until the server closed ``conn`` (which must not send anything meanwhile)."""
    started = time.monotonic()
    assert conn.is_closed_by_peer(timeout=limit), "still open"
    return time.monotonic() - started


def test_idle_connection_outlives_the_header_timeout(server):
    with RawConnection(server.port) as conn:
        get_hello(conn)
        time.sleep(HEADER + 0.8)
        assert not conn.eof
        get_hello(conn)  # the same connection, still served


def test_idle_connection_closes_at_the_keep_alive_timeout(server):
    with RawConnection(server.port) as conn:
        get_hello(conn)
        waited = closed_within(conn, KEEP_ALIVE + 3)
        assert waited > KEEP_ALIVE - 0.5, waited


def test_stalled_head_is_cut_at_the_header_timeout(server):
    with RawConnection(server.port) as conn:
        get_hello(conn)
        time.sleep(0.5)
        conn.send(PARTIAL_HEAD)
        # From its first byte: well before the keep-alive would end the connection.
        waited = closed_within(conn, KEEP_ALIVE)
        assert HEADER - 0.3 < waited < KEEP_ALIVE - 0.5, waited


def test_stalled_first_head_is_cut_at_the_header_timeout(server):
    with RawConnection(server.port) as conn:
        conn.send(PARTIAL_HEAD)
        waited = closed_within(conn, KEEP_ALIVE)
        assert HEADER - 0.3 < waited < KEEP_ALIVE - 0.5, waited


def test_silent_new_connection_closes_at_the_shorter_timeout(server):
    with RawConnection(server.port) as conn:
        waited = closed_within(conn, KEEP_ALIVE)
        assert waited < KEEP_ALIVE - 0.5, waited


def test_head_sent_slowly_within_the_header_timeout_is_served(server):
    with RawConnection(server.port) as conn:
        get_hello(conn)
        time.sleep(HEADER + 0.5)  # idle first: the head's time starts at its first byte
        data = request_bytes("GET", "/hello")
        for i in range(0, len(data), 8):
            conn.send(data[i : i + 8])
            time.sleep(0.05)
        resp = conn.read_response()
        assert resp.status == 200 and resp.body == b"hello world"


def test_a_served_request_resets_the_keep_alive(server):
    with RawConnection(server.port) as conn:
        for _ in range(3):
            get_hello(conn)
            time.sleep(KEEP_ALIVE * 0.6)
        get_hello(conn)
