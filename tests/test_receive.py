"""receive(): request bodies, disconnects and Expect: 100-continue."""

import hashlib
import json
import socket
import time
import uuid

import httpx
import pytest

from tests.apps.common import iter_pattern, pattern_sha256
from tests.support.helpers import RawConnection, request_bytes, start_server, wait_report
from tests.support.hostile import LINGER_RST


@pytest.fixture(scope="module")
def server():
    with start_server("tests.apps.basic:app", "--lifespan", "on") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def test_small_body_single_message(client):
    body = b"0123456789" * 10
    resp = client.post("/messages", content=body)
    assert resp.status_code == 200, resp.text
    assert resp.json()["messages"] == [{"type": "http.request", "len": 100, "more_body": False}]


def test_empty_body_single_message(client):
    resp = client.get("/messages")
    assert resp.status_code == 200, resp.text
    assert resp.json()["messages"] == [{"type": "http.request", "len": 0, "more_body": False}]


def test_echo_body_roundtrip(client):
    body = bytes(range(256)) * 10
    resp = client.post("/echo", content=body)
    data = resp.json()
    assert data["size"] == len(body)
    assert data["sha256"] == hashlib.sha256(body).hexdigest()


@pytest.mark.timeout(120)
def test_big_upload_streamed_in_chunks(client):
    total = 50 * 1024 * 1024
    resp = client.post(
        "/upload",
        content=iter_pattern(total, 256 * 1024),
        headers={"Content-Length": str(total)},
    )
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["size"] == total
    assert data["sha256"] == pattern_sha256(total)
    assert data["messages"] > 1, "a 50 MB body should arrive in several http.request messages"
    assert data["all_but_last_more"] is True
    assert data["last_more"] is False
    assert data["types"] == ["http.request"]


@pytest.mark.timeout(120)
def test_big_chunked_upload(client):
    # A generator body without Content-Length: httpx sends Transfer-Encoding: chunked.
    total = 8 * 1024 * 1024 + 12345
    resp = client.post("/upload", content=iter_pattern(total, 100000))
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["size"] == total
    assert data["sha256"] == pattern_sha256(total)
    assert data["last_more"] is False


def test_chunked_request_body_raw(server):
    body = b"5\r\nhello\r\n1;ext=1\r\n \r\na\r\n0123456789\r\n0\r\n\r\n"
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("POST", "/echo", [("Transfer-Encoding", "chunked")], body))
        resp = conn.read_response()
    assert resp.status == 200, resp
    data = json.loads(resp.body)
    assert data["body"] == "hello 0123456789"
    assert data["size"] == 16


def test_chunked_request_body_sent_in_pieces(server):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("POST", "/echo", [("Transfer-Encoding", "chunked")]))
        for piece in (b"3\r\nabc\r\n", b"4\r\ndefg\r\n", b"0\r\n\r\n"):
            time.sleep(0.05)
            conn.send(piece)
        resp = conn.read_response()
    assert resp.status == 200, resp
    assert json.loads(resp.body)["body"] == "abcdefg"


def test_disconnect_after_body_and_response(client):
    rid = uuid.uuid4().hex
    resp = client.post("/after_response", params={"id": rid}, content=b"some body")
    assert resp.status_code == 200
    assert resp.text == "done"
    # The client keeps its keep-alive connection open: the response being complete is enough.
    report = wait_report(client, rid)
    assert report == {"next": "http.disconnect"}


def test_client_disconnect_while_app_waits_for_body(client, server):
    rid = uuid.uuid4().hex
    conn = RawConnection(server.port)
    conn.send(
        request_bytes(
            # larger than any pre-read buffer, so the app is called before the body is complete
            "POST",
            "/wait_disconnect?id=%s" % rid,
            [("Content-Length", str(10 * 1024 * 1024))],
        )
        + b"only-18-bytes-sent"
    )
    wait_report(client, rid)
    time.sleep(0.3)  # let the app block in receive()
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    report = wait_report(client, rid, lambda r: r is not None and r["state"] == "done")
    types = [m["type"] for m in report["messages"]]
    assert types[-1] == "http.disconnect", report
    assert all(t == "http.request" for t in types[:-1]), report
    assert sum(m["len"] for m in report["messages"]) <= 18


def test_client_disconnect_while_app_waits_after_empty_body(client, server):
    rid = uuid.uuid4().hex
    conn = RawConnection(server.port)
    conn.send(request_bytes("GET", "/wait_disconnect?id=%s" % rid))
    # first receive() gives the (empty) request body; the second one waits
    wait_report(client, rid, lambda r: r is not None and r.get("messages"))
    # Gone for certain: a reset. A plain close() is a FIN, which after a complete request
    # may be a half-close whose client still waits for the response (test_http11_edges).
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)
    conn.close()
    report = wait_report(client, rid, lambda r: r is not None and r["state"] == "done")
    assert [m["type"] for m in report["messages"]] == ["http.request", "http.disconnect"], report


def test_expect_100_continue_sent_only_when_app_reads(server):
    with RawConnection(server.port) as conn:
        conn.send(
            request_bytes(
                "POST",
                "/expect?delay=1.0",
                [("Content-Length", "5"), ("Expect", "100-continue")],
            )
        )
        # The app sleeps 1 s before its first receive(): nothing may arrive before that.
        conn.sock.settimeout(0.4)
        try:
            early = conn.sock.recv(1024)
        except socket.timeout:
            early = b""
        assert early == b"", "server answered before the app called receive(): %r" % early
        conn.sock.settimeout(10)
        head = conn.read_head()
        assert head is not None, "connection closed instead of 100 Continue"
        assert head[1] == 100, head
        assert head[4].startswith(b"HTTP/1.1 100")
        conn.send(b"hello")
        resp = conn.read_response()
    assert resp.status == 200
    assert resp.body == b"got:hello"


def test_expect_100_continue_not_sent_when_app_does_not_read(server):
    with RawConnection(server.port) as conn:
        conn.send(
            request_bytes(
                "POST",
                "/no_read",
                [("Content-Length", "5"), ("Expect", "100-continue")],
            )
        )
        informational = []
        resp = conn.read_response(informational=informational)
    assert resp is not None and resp.status == 200, resp
    assert resp.body == b"not reading your body"
    assert informational == [], "server sent 100 Continue although the app never read the body"
    assert b"100 Continue" not in resp.raw_head


def test_server_still_healthy(client):
    assert client.get("/hello").text == "hello world"
