"""Admission beyond --limit-concurrency (issue 22, item 2): --limit-concurrency-queue lets M
more requests wait for a slot, first come first served, each at most --timeout-queue; beyond
the queue, after the wait, or when the drain begins: 503 with Retry-After. WebSocket
sessions count against --limit-websockets, not against --limit-concurrency.

The app (tests/apps/admission_app.py) blocks each ``/block?id=N`` until the test releases
it over the app's own control port, which no server limit applies to; the metrics endpoint's
``ferrocorn_requests_queued`` tells when a request is waiting.
"""

import json
import signal
import socket
import threading
import time

import httpx
import pytest

from tests.support.h2client import H2Client
from tests.support.helpers import RawConnection, request_bytes, run_ferrocorn, wait_until
from tests.support.hostile import LINGER_RST
from tests.support.wsraw import HandshakeFailed, RawWebSocket
from tests.test_metrics import metrics_port

APP = "tests.apps.admission_app:app"


class Control:
    """The app's side channel (see the app's docstring)."""

    def __init__(self, server):
        m = server.wait_for_output(r"CONTROL PORT (\d+)", timeout=10)
        assert m, server.output()
        self.sock = socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=10)
        self.file = self.sock.makefile("rb")

    def ask(self, command):
        self.sock.sendall(command + b"\n")
        return self.file.readline().strip()

    def started(self):
        return json.loads(self.ask(b"started"))

    def release(self):
        assert self.ask(b"release") == b"ok"

    def close(self):
        self.file.close()
        self.sock.close()


def queued(port):
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("ferrocorn_requests_queued "):
            return int(float(line.split()[1]))
    raise AssertionError(text)


def sample(port, name, labels=""):
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    wanted = f"{name}{{{labels}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(wanted):
            return float(line.split()[1])
    raise AssertionError(f"{wanted!r} not in\n{text}")


def send_block(port, ident):
    conn = RawConnection(port, timeout=30)
    conn.send(request_bytes("GET", f"/block?id={ident}"))
    return conn


def assert_unavailable(response):
    assert response.status == 503
    assert response.header("retry-after") == "1"


@pytest.fixture
def queue_server(server_factory):
    """N=2 run, M=3 wait."""
    server = server_factory(
        APP,
        "--limit-concurrency",
        "2",
        "--limit-concurrency-queue",
        "3",
        "--timeout-queue",
        "60",
        "--metrics",
        "--metrics-port",
        "0",
    )
    control = Control(server)
    yield server, control, metrics_port(server)
    control.close()


def test_exactly_n_run_m_wait_in_order_and_the_next_gets_503(queue_server):
    server, control, mport = queue_server
    running = [send_block(server.port, 1), send_block(server.port, 2)]
    assert wait_until(lambda: sorted(control.started()) == [1, 2])
    waiting = []
    for ident in (3, 4, 5):
        waiting.append(send_block(server.port, ident))
        assert wait_until(lambda n=ident - 2: queued(mport) == n), server.output()
    # The sixth: beyond the queue, answered at once (the five are all still held).
    sixth = send_block(server.port, 6)
    assert_unavailable(sixth.read_response())
    assert sample(mport, "ferrocorn_responses_503_total", 'reason="queue_full"') == 1
    first_two = control.started()
    # Each release frees a slot; the oldest waiter takes it.
    for expected_len in (3, 4, 5):
        control.release()
        assert wait_until(lambda n=expected_len: len(control.started()) == n)
    assert control.started() == first_two + [3, 4, 5]
    assert queued(mport) == 0
    control.release()
    control.release()
    for conn in running + waiting:
        response = conn.read_response()
        assert response.status == 200
    for conn in running + waiting + [sixth]:
        conn.close()
    # The wait before the app call is measured for each request the app got.
    assert sample(mport, "ferrocorn_request_wait_seconds_count") == 5


def test_a_queued_client_that_leaves_frees_its_place(server_factory):
    server = server_factory(
        APP,
        "--limit-concurrency",
        "1",
        "--limit-concurrency-queue",
        "1",
        "--metrics",
        "--metrics-port",
        "0",
    )
    control = Control(server)
    mport = metrics_port(server)
    first = send_block(server.port, 1)
    assert wait_until(lambda: control.started() == [1])
    leaver = send_block(server.port, 2)
    assert wait_until(lambda: queued(mport) == 1)
    # Gone for certain: a reset (a FIN after a complete request is a half-close, whose
    # client still waits for the answer: test_http11_edges).
    leaver.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)
    leaver.close()
    assert wait_until(lambda: queued(mport) == 0), server.output()
    # The place is free again: the next one waits instead of getting 503.
    third = send_block(server.port, 3)
    assert wait_until(lambda: queued(mport) == 1)
    control.release()
    assert first.read_response().status == 200
    assert wait_until(lambda: control.started() == [1, 3])
    control.release()
    assert third.read_response().status == 200
    assert sample(mport, "ferrocorn_responses_503_total", 'reason="queue_full"') == 0
    first.close()
    third.close()
    control.close()


def test_a_request_waiting_past_timeout_queue_gets_503(server_factory):
    server = server_factory(
        APP,
        "--limit-concurrency",
        "1",
        "--limit-concurrency-queue",
        "2",
        "--timeout-queue",
        "0.3",
        "--metrics",
        "--metrics-port",
        "0",
    )
    control = Control(server)
    mport = metrics_port(server)
    first = send_block(server.port, 1)
    assert wait_until(lambda: control.started() == [1])
    late = send_block(server.port, 2)
    assert_unavailable(late.read_response())
    assert control.started() == [1]  # the app never saw it
    assert sample(mport, "ferrocorn_responses_503_total", 'reason="queue_timeout"') == 1
    control.release()
    assert first.read_response().status == 200
    for conn in (first, late):
        conn.close()
    control.close()


def test_without_a_queue_the_limit_answers_503_with_retry_after(server_factory):
    server = server_factory(APP, "--limit-concurrency", "1", "--metrics", "--metrics-port", "0")
    control = Control(server)
    mport = metrics_port(server)
    first = send_block(server.port, 1)
    assert wait_until(lambda: control.started() == [1])
    second = send_block(server.port, 2)
    assert_unavailable(second.read_response())
    assert sample(mport, "ferrocorn_responses_503_total", 'reason="concurrency"') == 1
    control.release()
    assert first.read_response().status == 200
    for conn in (first, second):
        conn.close()
    control.close()


def test_http2_streams_queue_like_requests(server_factory):
    server = server_factory(
        APP,
        "--limit-concurrency",
        "2",
        "--limit-concurrency-queue",
        "3",
        "--metrics",
        "--metrics-port",
        "0",
    )
    control = Control(server)
    mport = metrics_port(server)
    client = H2Client(server.port, timeout=30)
    sids = [client.request("GET", "/block?id=1"), client.request("GET", "/block?id=2")]
    assert wait_until(lambda: sorted(control.started()) == [1, 2])
    for ident in (3, 4, 5):
        sids.append(client.request("GET", f"/block?id={ident}"))
        assert wait_until(lambda n=ident - 2: queued(mport) == n)
    sixth = client.request("GET", "/block?id=6")
    client.wait(sixth)
    assert client.streams[sixth].status == 503
    assert client.streams[sixth].header("retry-after") == "1"
    first_two = control.started()
    for n in range(5):
        control.release()
        if n < 3:
            assert wait_until(lambda k=n: len(control.started()) == 3 + k)
    client.wait(*sids)
    assert [client.streams[s].status for s in sids] == [200] * 5
    assert control.started() == first_two + [3, 4, 5]
    client.close()
    control.close()


def test_websockets_have_their_own_limit_and_cannot_starve_http(server_factory):
    server = server_factory(
        APP,
        "--limit-concurrency",
        "1",
        "--limit-websockets",
        "2",
        "--metrics",
        "--metrics-port",
        "0",
    )
    control = Control(server)
    mport = metrics_port(server)
    sockets = [RawWebSocket(server.port, "/ws"), RawWebSocket(server.port, "/ws")]
    with pytest.raises(HandshakeFailed) as refused:
        RawWebSocket(server.port, "/ws")
    assert refused.value.status == 503
    assert b"retry-after: 1" in refused.value.head.lower()
    assert sample(mport, "ferrocorn_responses_503_total", 'reason="websockets"') == 1
    # Two sessions open, yet HTTP still has its slot.
    assert httpx.get(f"http://127.0.0.1:{server.port}/fast", timeout=10).status_code == 200
    sockets[0].send_text("hi")
    assert sockets[0].recv_frame().payload == b"hi"
    # A session that ends frees its place.
    sockets.pop().close()

    def reopened():
        try:
            sockets.append(RawWebSocket(server.port, "/ws"))
        except HandshakeFailed:
            return False
        return True

    assert wait_until(reopened)
    for ws in sockets:
        ws.close()
    control.close()


def test_draining_answers_the_waiting_requests_503(server_factory):
    server = server_factory(
        APP,
        "--limit-concurrency",
        "1",
        "--limit-concurrency-queue",
        "2",
        "--metrics",
        "--metrics-port",
        "0",
        "--timeout-graceful-shutdown",
        "30",
    )
    control = Control(server)
    mport = metrics_port(server)
    first = send_block(server.port, 1)
    assert wait_until(lambda: control.started() == [1])
    waiting = send_block(server.port, 2)
    assert wait_until(lambda: queued(mport) == 1)
    server.proc.send_signal(signal.SIGTERM)
    assert_unavailable(waiting.read_response())
    # The request in flight still finishes.
    control.release()
    assert first.read_response().status == 200
    assert server.wait(timeout=20) == 0
    for conn in (first, waiting):
        conn.close()


def test_with_workers_every_request_is_served(server_factory):
    server = server_factory(
        APP,
        "--workers",
        "2",
        "--limit-concurrency",
        "1",
        "--limit-concurrency-queue",
        "50",
    )
    results = []

    def get():
        results.append(httpx.get(f"http://127.0.0.1:{server.port}/fast", timeout=30).status_code)

    threads = [threading.Thread(target=get) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 20


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--limit-concurrency-queue", "3"), "--limit-concurrency-queue needs --limit-concurrency"),
        (("--limit-concurrency", "1", "--limit-concurrency-queue", "0"), "limit_concurrency_queue"),
        (("--timeout-queue", "0"), "timeout_queue"),
        (("--limit-websockets", "0"), "limit_websockets"),
    ],
)
def test_bad_values_fail_at_start_up_with_one_line(flags, message):
    result = run_ferrocorn(APP, *flags)
    assert result.returncode != 0
    stderr = result.stderr.decode()
    assert message in stderr and len(stderr.strip().splitlines()) == 1, stderr


def test_a_queued_request_outlives_the_keep_alive_timer(server_factory):
    # Waiting is not idling: neither --timeout-keep-alive nor parking (after 1 s idle) may
    # close the connection of a request that waits for a slot.
    server = server_factory(
        APP,
        "--limit-concurrency",
        "1",
        "--limit-concurrency-queue",
        "1",
        "--timeout-keep-alive",
        "1",
        "--metrics",
        "--metrics-port",
        "0",
    )
    control = Control(server)
    mport = metrics_port(server)
    first = send_block(server.port, 1)
    assert wait_until(lambda: control.started() == [1])
    waiting = send_block(server.port, 2)
    assert wait_until(lambda: queued(mport) == 1)
    time.sleep(2.5)  # past the keep-alive timeout and the parking delay
    control.release()
    assert first.read_response().status == 200
    assert wait_until(lambda: control.started() == [1, 2])
    control.release()
    assert waiting.read_response().status == 200
    for conn in (first, waiting):
        conn.close()
    control.close()
