"""``--timeout-request``: an HTTP app call still running the given time after its request
arrived is cancelled (its ``finally`` runs); an unanswered request gets 503 with
``Retry-After``, a started response is aborted; one log line per timeout; WebSockets are
exempt, and calls that end in time are untouched."""

import socket
import uuid

import httpx
import pytest

from tests.support.helpers import start_server
from tests.support.wsraw import TEXT, RawWebSocket

APP = "tests.apps.timeout_app:app"


@pytest.fixture(scope="module")
def server():
    with start_server(APP, "--timeout-request", "0.5", "--no-access-log") as s:
        yield s


@pytest.mark.parametrize("http2", [False, True])
def test_an_unanswered_request_gets_503_and_the_app_is_cancelled(server, http2):
    tag = uuid.uuid4().hex
    with httpx.Client(base_url=server.url, timeout=10, http1=not http2, http2=http2) as client:
        response = client.get("/slow", params={"s": "30", "tag": tag})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert server.wait_for_output("finally ran %s" % tag, timeout=5), server.output()
    assert server.wait_for_output(
        r"Request timed out after 0\.5s \(--timeout-request\); cancelled the app: GET /slow",
        timeout=5,
    ), server.output()


def test_a_started_response_is_aborted(server):
    tag = uuid.uuid4().hex
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(b"GET /stream?stream=1&s=30&tag=%s HTTP/1.1\r\nHost: x\r\n\r\n" % tag.encode())
    data = b""
    while True:
        got = sock.recv(65536)
        if not got:
            break
        data += got
    sock.close()
    assert data.startswith(b"HTTP/1.1 200")
    assert b"first" in data
    # Closed without the chunked body's end: the client can tell it is truncated.
    assert not data.endswith(b"0\r\n\r\n")
    assert server.wait_for_output("finally ran %s" % tag, timeout=5), server.output()


def test_requests_that_end_in_time_are_untouched(server):
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for _ in range(20):
            response = client.get("/quick", params={"s": "0.01"})
            assert response.status_code == 200 and response.text == "done"


def test_websockets_are_exempt(server):
    # The raw client: websockets' threaded sync client raised "cannot release un-acquired
    # lock" from its own thread once under PyPy.
    with RawWebSocket(server.port, "/ws?s=1.2") as ws:
        frame = ws.recv_frame(timeout=10)
        assert frame.opcode == TEXT and frame.payload == b"still here"


def test_without_the_option_nothing_is_cancelled():
    with start_server(APP, "--no-access-log") as server:
        response = httpx.get(server.url + "/slow", params={"s": "1.0"}, timeout=10)
        assert response.status_code == 200 and response.text == "done"
