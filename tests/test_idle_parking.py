"""Idle HTTP/1.1 keep-alive connections are parked after a second of silence (0.3 s here): hyper's
connection and its buffers are released and the stream waits for the client's next bytes
(``src/server/park.rs``). To the client nothing changes: the same connection goes on serving
whatever comes next (another request, a pipelined burst, a body, a WebSocket upgrade), the
idle limits still hold, and a draining server closes it like any idle connection.
"""

import json
import socket
import sys
import time

import pytest

from tests.support.helpers import RawConnection, request_bytes, start_server
from tests.support.wsraw import RawWebSocket

# The servers here park a connection after 0.3 s of silence instead of the default second
# (FERROCORN_PARK_AFTER_MS, read by src/server/park.rs), so each wait for parking costs a
# fraction of what it would: parking happens between 0.3 and 0.6 s after a connection went
# idle (the delay plus at most one more look of the connection's timer).
PARK_ENV = {"FERROCORN_PARK_AFTER_MS": "300"}
PARKED = 0.9
KEEP_ALIVE = 4.0
HEADER = 1.5


@pytest.fixture(scope="module", params=["auto", "1"])
def server(request):
    with start_server(
        "tests.apps.basic:app",
        "--http",
        request.param,
        "--timeout-keep-alive",
        str(KEEP_ALIVE),
        "--header-read-timeout",
        str(HEADER),
        env=PARK_ENV,
    ) as s:
        yield s


def get_hello(conn):
    conn.send(request_bytes("GET", "/hello"))
    resp = conn.read_response()
    assert resp.status == 200 and resp.body == b"hello world"


def test_a_parked_connection_serves_its_next_requests(server):
    with RawConnection(server.port) as conn:
        get_hello(conn)
        for _ in range(3):
            time.sleep(PARKED)
            assert not conn.eof
            get_hello(conn)


def test_a_body_after_parking_is_read_whole(server):
    body = bytes(range(256)) * 300  # larger than one read
    with RawConnection(server.port) as conn:
        get_hello(conn)
        time.sleep(PARKED)
        conn.send(request_bytes("POST", "/echo", body=body))
        resp = conn.read_response()
        assert resp.status == 200
        assert json.loads(resp.body)["size"] == len(body)


def test_pipelined_requests_after_parking_are_answered_in_order(server):
    with RawConnection(server.port) as conn:
        get_hello(conn)
        time.sleep(PARKED)
        conn.send(b"".join(request_bytes("GET", "/scope/%d" % i) for i in range(5)))
        paths = [json.loads(conn.read_response().body)["path"] for _ in range(5)]
        assert paths == ["/scope/%d" % i for i in range(5)]


def test_a_head_sent_in_pieces_across_the_park_delay_is_not_lost(server):
    """A head that has started is hyper's to finish: no parking in the middle of it."""
    head = request_bytes("GET", "/hello")
    with RawConnection(server.port) as conn:
        get_hello(conn)
        time.sleep(PARKED)
        conn.send(head[:10])
        time.sleep(HEADER / 2)
        conn.send(head[10:])
        resp = conn.read_response()
        assert resp.status == 200 and resp.body == b"hello world"


def test_a_body_still_arriving_after_its_response_is_not_parked(server):
    """The app answers before the body has arrived. Its receive() then says the client is
    gone (the response is complete), and the server reads the rest of the body off the
    connection to keep it usable. A pause in that body is not idle time: parking there would
    make hyper take it for the client leaving mid-body, and the rest of the body would be read
    as the next request."""
    # Chunked: a body with a small Content-Length is read whole before the app is called.
    first, rest = b"a" * 1000, b"b" * 1000
    head = (
        b"POST /respond_then_read?id=slowbody HTTP/1.1\r\nHost: x\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    with RawConnection(server.port) as conn:
        conn.send(head + b"%x\r\n%s\r\n" % (len(first), first))
        resp = conn.read_response(method="POST")
        assert resp.status == 200 and resp.body == b"answered"
        time.sleep(PARKED)
        conn.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(rest), rest))
        conn.send(request_bytes("GET", "/report?id=slowbody"))
        resp = conn.read_response()
        assert resp.status == 200
        assert json.loads(resp.body) == {"size": None, "messages": 2}
        get_hello(conn)


def test_a_parked_connection_closes_at_the_keep_alive_timeout(server):
    with RawConnection(server.port) as conn:
        get_hello(conn)
        time.sleep(PARKED)
        assert not conn.is_closed_by_peer(timeout=0.1), "closed early"
        started = time.monotonic()
        assert conn.is_closed_by_peer(timeout=KEEP_ALIVE + 3), "still open"
        idle_for = time.monotonic() - started + PARKED
        assert idle_for > KEEP_ALIVE - 0.5, idle_for


def test_a_stalled_head_after_parking_is_cut_at_the_header_timeout(server):
    with RawConnection(server.port) as conn:
        get_hello(conn)
        time.sleep(PARKED)
        conn.send(b"GET /hello HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        assert conn.is_closed_by_peer(timeout=KEEP_ALIVE), "still open"
        waited = time.monotonic() - started
        assert HEADER - 0.4 < waited < KEEP_ALIVE - PARKED - 0.5, waited


def test_a_client_that_closes_while_parked_is_let_go(server):
    for _ in range(3):
        with RawConnection(server.port) as conn:
            get_hello(conn)
            time.sleep(PARKED)
    with RawConnection(server.port) as conn:
        get_hello(conn)  # still serving


def test_a_websocket_upgrade_after_parking():
    with start_server("tests.apps.ws_app:app", env=PARK_ENV) as server:
        ws = RawWebSocket(server.port, handshake=False)
        with ws:
            ws.sock.sendall(request_bytes("GET", "/plain"))
            conn = RawConnection(sock=ws.sock)
            assert conn.read_response().status in (200, 404)
            time.sleep(PARKED)
            ws.handshake("/echo")
            ws.send_text("after parking")
            frame, _ = ws.recv_until({0x1})
            assert frame.payload == b"after parking"


def test_draining_closes_parked_connections_at_once():
    with start_server(
        "tests.apps.basic:app", "--timeout-graceful-shutdown", "20", env=PARK_ENV
    ) as server:
        conns = [RawConnection(server.port) for _ in range(3)]
        try:
            for conn in conns:
                get_hello(conn)
            time.sleep(PARKED)
            started = time.monotonic()
            server.stop()
            assert server.proc.returncode == 0
            # Closed like any idle connection, not held until the graceful timeout.
            assert time.monotonic() - started < 10
            for conn in conns:
                assert conn.is_closed_by_peer(timeout=5)
        finally:
            for conn in conns:
                conn.close()


def test_parked_connections_give_their_memory_back():
    """Each parked connection lets go of hyper's buffers (an 8 KiB read and an 8 KiB write
    buffer, a touched page each) and its connection state: ~9 KiB of resident memory per
    connection measured. Without parking the server's RSS does not fall once the connections
    are idle; this asks for a third of the measured drop (PyPy's own heap moves by a few MB
    meanwhile, hence so many connections). Measured 2026-12-01: CPython 11.9 KiB per
    connection; PyPy 2.5-2.7 KiB, its busy RSS 52 MB lower than before the byte budgets and
    the loop thread's memory release (3.9 KiB then), so PyPy is asked for 2 KiB."""
    count = 3000
    with start_server("tests.apps.basic:app", "--timeout-keep-alive", "60", env=PARK_ENV) as server:
        socks = []
        try:
            request = request_bytes("GET", "/hello")
            for _ in range(count):
                s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                s.sendall(request)
                socks.append(s)
            for s in socks:
                conn = RawConnection(sock=s)
                assert conn.read_response().status == 200
            busy = server.rss_kb()
            time.sleep(PARKED + 1)
            parked = server.rss_kb()
            per_connection = 2 if sys.implementation.name == "pypy" else 3
            assert busy - parked > per_connection * count, (busy, parked)
            # And every connection is still there to serve.
            for s in socks[:: count // 10]:
                conn = RawConnection(sock=s)
                conn.send(request)
                assert conn.read_response().status == 200
        finally:
            for s in socks:
                s.close()
