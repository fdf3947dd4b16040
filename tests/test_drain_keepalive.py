"""No request is lost to a stop: during a graceful drain every busy keep-alive connection's
next request is answered (with ``Connection: close``) instead of meeting a closed socket,
single process and supervised. And a supervised stop refuses new connections rather than
accepting them into a socket nobody will serve."""

import re
import signal
import socket
import threading

import pytest

from tests.support.helpers import start_server

CONNS = 8
REQUEST = b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"


def _read_response(sock, buf):
    """(head, body, rest) of one response, or None at EOF before it is complete."""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
    length = int(m.group(1)) if m else 0
    while len(rest) < length:
        data = sock.recv(65536)
        if not data:
            return None
        rest += data
    return head, rest[:length], rest[length:]


def _busy_client(port, served, outcomes, i):
    """Requests back to back on one connection until the server says it closes; how it
    ended: ('clean', n) or ('lost', n, why) with n the responses received."""
    n = 0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            buf = b""
            while True:
                sock.sendall(REQUEST)
                got = _read_response(sock, buf)
                if got is None:
                    outcomes[i] = ("lost", n, "closed before the response")
                    return
                head, body, buf = got
                n += 1
                if n == 1:
                    served.release()
                assert head.startswith(b"HTTP/1.1 200") and body == b"hello world", head
                if b"\r\nconnection: close" in head.lower():
                    outcomes[i] = ("clean", n)
                    return
    except OSError as exc:
        outcomes[i] = ("lost", n, repr(exc))


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["single", "supervised"])
def test_busy_keep_alive_connections_end_with_a_response(workers):
    with start_server("tests.apps.basic:app", "--no-access-log", *workers) as server:
        outcomes = [None] * CONNS
        served = threading.Semaphore(0)
        threads = [
            threading.Thread(target=_busy_client, args=(server.port, served, outcomes, i))
            for i in range(CONNS)
        ]
        for t in threads:
            t.start()
        for _ in range(CONNS):
            assert served.acquire(timeout=60), outcomes
        server.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(60)
        assert server.wait(60) == 0, server.output()
    lost = [o for o in outcomes if o is None or o[0] != "clean"]
    assert not lost, outcomes


def test_supervised_stop_refuses_new_connections():
    """From the stop on, a new connection is served or refused: never accepted into the
    supervisor's copy of the socket and left there unanswered."""
    with start_server(
        "tests.apps.basic:app", "--workers", "2", "--timeout-graceful-shutdown", "30"
    ) as server:
        # A request in flight keeps the workers draining for a while.
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        slow.sendall(b"GET /slow?s=3&tag=drain HTTP/1.1\r\nHost: x\r\n\r\n")
        assert server.wait_for_output("SLOW-START drain", timeout=20)
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait_for_output("Shutting down", timeout=20)
        outcomes = []
        while server.proc.poll() is None and len(outcomes) < 20:
            try:
                with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                    sock.sendall(REQUEST)
                    got = _read_response(sock, b"")
                    outcomes.append("answered" if got else "dropped")
            except ConnectionRefusedError:
                outcomes.append("refused")
            except OSError as exc:
                outcomes.append("dropped: %r" % exc)
        assert _read_response(slow, b"") is not None
        slow.close()
        assert server.wait(60) == 0
    assert outcomes and all(o in ("answered", "refused") for o in outcomes), outcomes


def test_an_idle_connections_next_request_is_its_last():
    """Idle when the drain starts, a keep-alive connection's next request is answered, and
    that response is its last (``Connection: close``, then the server closes), not one of
    several served while the drain looks in again later."""
    with start_server("tests.apps.basic:app", "--no-access-log") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(REQUEST)
            got = _read_response(sock, b"")
            assert got is not None and b"connection: close" not in got[0].lower(), got
            server.proc.send_signal(signal.SIGTERM)
            # Logged once the core drains (after "Shutting down", which comes before it).
            assert server.wait_for_output(r"Waiting for connections to close", timeout=30), (
                server.output()
            )
            sock.sendall(REQUEST)
            got = _read_response(sock, got[2])
            assert got is not None, "closed before the response"
            head, body, rest = got
            assert head.startswith(b"HTTP/1.1 200") and body == b"hello world", head
            assert b"\r\nconnection: close" in head.lower(), head
            assert rest == b"" and sock.recv(1) == b""  # closed after it
        assert server.wait(60) == 0, server.output()
