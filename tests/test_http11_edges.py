"""HTTP/1.1 edges other parsers agree on (RFC 9112), over raw sockets against a real server:
chunked applied twice, request-targets of none of the four forms, the absolute-form's host,
and a client that half-closes after its request (it still gets its response) next to one
that is really gone (the app hears of it)."""

import json
import socket
import time
import uuid

import httpx
import pytest

from tests.support import hostile
from tests.support.helpers import (
    RawConnection,
    assert_healthy,
    request_bytes,
    start_server,
    wait_report,
)
from tests.test_http11 import expect_400_and_close


@pytest.fixture(scope="module")
def server():
    with start_server("tests.apps.basic:app") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=15) as c:
        yield c


CHUNKED_TWICE = {
    "one-field": b"Transfer-Encoding: chunked, chunked\r\n",
    "one-field-mixed-case": b"Transfer-Encoding: chunked,Chunked\r\n",
    "two-fields": b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    "gzip-then-two": b"Transfer-Encoding: gzip, chunked\r\nTransfer-Encoding: chunked\r\n",
}


@pytest.mark.parametrize("fields", sorted(CHUNKED_TWICE))
def test_chunked_applied_twice_is_400_and_close(server, fields):
    """RFC 9112 §6.1: a sender MUST NOT apply chunked more than once; the framing of such a
    message is uncertain, so it is refused and the connection closed (nothing after it may be
    read as a request)."""
    smuggled = request_bytes("GET", "/index?i=SMUGGLED")
    payload = (
        b"POST /echo HTTP/1.1\r\nHost: x\r\n"
        + CHUNKED_TWICE[fields]
        + b"\r\n5\r\nhello\r\n0\r\n\r\n"
        + smuggled
    )
    with RawConnection(server.port) as conn:
        conn.send(payload)
        resp = conn.read_response()
        assert resp is not None and resp.status == 400, resp
        assert conn.is_closed_by_peer(timeout=5), "connection left open after the 400"
    assert_healthy(server.port)


def test_chunked_once_is_still_served(server):
    payload = (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n"
    )
    with RawConnection(server.port) as conn:
        conn.send(payload)
        resp = conn.read_response()
    assert resp.status == 200 and json.loads(resp.body)["body"] == "hello", resp


BAD_TARGETS = {
    "bang": b"GET ! HTTP/1.1",
    "word": b"GET hello HTTP/1.1",
    "authority-form-get": b"GET example.com:443 HTTP/1.1",
    "authority-form-post": b"POST example.com:80 HTTP/1.1",
    "asterisk-get": b"GET * HTTP/1.1",
    "absolute-form-userinfo": b"GET http://user@example.com/ HTTP/1.1",
}


@pytest.mark.parametrize("line", sorted(BAD_TARGETS))
def test_target_of_none_of_the_four_forms_is_400(server, line):
    """RFC 9112 §3.2: origin-form, absolute-form, authority-form (CONNECT only), asterisk-form
    (OPTIONS only). Anything else never reaches the app (it would see an empty path)."""
    expect_400_and_close(server.port, BAD_TARGETS[line] + b"\r\nHost: x\r\n\r\n")
    assert_healthy(server.port)


@pytest.mark.parametrize(
    "line", [b"OPTIONS * HTTP/1.1", b"GET /hello HTTP/1.1", b"GET http://x/hello HTTP/1.1"]
)
def test_targets_of_the_four_forms_are_served(server, line):
    with RawConnection(server.port) as conn:
        conn.send(line + b"\r\nHost: x\r\n\r\n")
        resp = conn.read_response()
    assert resp is not None and resp.status != 400, resp


def _scope(server, target, host=b"ignored.example"):
    with RawConnection(server.port) as conn:
        conn.send(b"GET " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\nX-A: 1\r\n\r\n")
        resp = conn.read_response()
    assert resp.status == 200, resp
    return json.loads(resp.body)


def test_absolute_form_sets_the_host_from_its_authority(server):
    """RFC 9112 §3.2.2: the origin server MUST ignore Host and use the target's authority."""
    scope = _scope(server, b"http://real.example:8080/scope?q=1")
    hosts = [value for name, value in scope["headers"] if name == "host"]
    assert hosts == ["real.example:8080"], scope["headers"]
    assert scope["headers"][0] == ["host", "real.example:8080"], scope["headers"]
    assert ["x-a", "1"] in scope["headers"]
    assert scope["path"] == "/scope" and scope["query_string"] == "q=1", scope
    # The connection's scheme, not the target's.
    assert scope["scheme"] == "http"


def test_origin_form_keeps_the_host_field(server):
    scope = _scope(server, b"/scope", host=b"field.example")
    assert [v for n, v in scope["headers"] if n == "host"] == ["field.example"]


# ---------------------------------------------------------------- half-close


def test_half_closed_client_gets_a_slow_response(server):
    """RFC 9112 §9.6: a client may close its sending side after the request and still read
    the response (uvicorn, hypercorn, h2corn and nginx answer it). The app here takes its
    time, so the FIN certainly arrives before the response is ready."""
    for request in (
        request_bytes("GET", "/slow?s=0.5"),
        request_bytes("POST", "/echo", body=b"x" * 1000),
        request_bytes("POST", "/echo", body=b"y" * (300 * 1024)),
    ):
        raw = hostile.half_closed_exchange(server.port, request)
        with RawConnection(sock=socket.socket()) as conn:
            conn.buf = bytearray(raw)
            conn.eof = True
            resp = conn.read_response()
            assert resp is not None and resp.status == 200, raw[:300]
            assert conn.read_response() is None, "more than one response"
    assert_healthy(server.port)


def test_half_closed_pipelined_requests_all_answered(server):
    reqs = b"".join(request_bytes("GET", "/slow?s=0.1&tag=%d" % i) for i in range(3))
    raw = hostile.half_closed_exchange(server.port, reqs)
    with RawConnection(sock=socket.socket()) as conn:
        conn.buf = bytearray(raw)
        conn.eof = True
        statuses = []
        while (resp := conn.read_response()) is not None:
            statuses.append(resp.status)
    assert statuses == [200, 200, 200], raw[:500]


def test_half_close_mid_body_is_a_disconnect(server, client):
    """A FIN before the body is complete ends the request: the app's receive() reports
    http.disconnect (the body can never complete)."""
    rid = uuid.uuid4().hex
    sock = hostile.connect(server.port, 10)
    try:
        sock.sendall(
            request_bytes(
                "POST", "/wait_disconnect?id=%s" % rid, [("Content-Length", str(1 << 20))]
            )
            + b"partial"
        )
        wait_report(client, rid)
        sock.shutdown(socket.SHUT_WR)
        report = wait_report(client, rid, lambda r: r is not None and r["state"] == "done")
    finally:
        hostile.close(sock)
    assert report["messages"][-1]["type"] == "http.disconnect", report


def test_reset_client_is_noticed_while_the_app_waits(server, client):
    """A client that is really gone (a reset) is still noticed at once: receive() returns
    http.disconnect without the app writing anything."""
    rid = uuid.uuid4().hex
    sock = hostile.connect(server.port, 10)
    sock.sendall(request_bytes("GET", "/wait_disconnect?id=%s" % rid))
    wait_report(client, rid, lambda r: r is not None and r.get("messages"))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, hostile.LINGER_RST)
    sock.close()
    report = wait_report(client, rid, lambda r: r is not None and r["state"] == "done")
    types = [m["type"] for m in report["messages"]]
    assert types == ["http.request", "http.disconnect"], report


def test_closed_client_is_noticed_when_a_write_fails(server, client):
    """A client that closed (FIN, then gone) looks like a half-close until the server writes:
    the write meets a reset, and the app's next send() raises ClientDisconnected."""
    rid = uuid.uuid4().hex
    sock = hostile.connect(server.port, 10)
    sock.sendall(request_bytes("GET", "/write_until_gone?id=%s" % rid))
    wait_report(client, rid)
    sock.close()
    report = wait_report(client, rid, lambda r: r is not None and r["state"] == "done")
    assert report["raised"] == "ClientDisconnected", report
    time.sleep(0.2)
    assert_healthy(server.port)
