"""Response header order across field names (ASGI: "order must be preserved in the HTTP
response"). hyper's HeaderMap groups a name's values; the write side puts an interleaving
app's order back on HTTP/1.1 (src/http/header_order.rs, src/server/reorder.rs). HTTP/2 keeps
each name's values in order (its order across names is the encoder's)."""

import os
import socket
import ssl

import pytest

from tests.support.h2client import H2Client, tls_context
from tests.support.helpers import RawConnection, request_bytes, start_server
from tests.support.tls_certs import certs
from tests.support.wsraw import HandshakeFailed, RawWebSocket

APP = "tests.apps.header_order_app:app"
APP_ORDER = [
    ("set-cookie", "a=1"),
    ("x-mid", "m"),
    ("set-cookie", "b=2"),
    ("content-type", "text/plain"),
    ("x-mid", "n"),
]


@pytest.fixture(scope="module")
def server():
    # `--sendfile on`: the file bodies below go out by sendfile(2) although the client is on
    # this host.
    with start_server(APP, "--sendfile", "on") as s:
        yield s


def app_fields(headers):
    """The app's fields, in wire order (the server's own — date, server, length — left out)."""
    names = {n for n, _ in APP_ORDER}
    return [(n.lower(), v) for n, v in headers if n.lower() in names]


def assert_no_marker(raw_head):
    assert b"x-ferrocorn-order" not in raw_head.lower(), raw_head


def test_interleaved_names_keep_the_apps_order(server):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/"))
        resp = conn.read_response()
    assert resp.status == 200 and resp.body == b"ordered"
    assert app_fields(resp.headers) == APP_ORDER, resp.raw_head
    assert_no_marker(resp.raw_head)
    # The server's own fields are all still there, after the app's.
    names = [n.lower() for n, _ in resp.headers]
    assert resp.header("content-length") == "7"
    assert "date" in names and names.index("date") > names.index("x-mid")


def test_grouped_and_iterable_headers(server):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/grouped") + request_bytes("GET", "/iterable"))
        grouped = conn.read_response()
        iterable = conn.read_response()
    assert [(n, v) for n, v in grouped.headers if n in ("set-cookie", "x-mid")] == [
        ("set-cookie", "a=1"),
        ("set-cookie", "b=2"),
        ("x-mid", "m"),
    ]
    assert app_fields(iterable.headers) == APP_ORDER
    assert_no_marker(grouped.raw_head + iterable.raw_head)


def test_pipelined_chunked_head_and_plain_responses_all_intact(server):
    payload = (
        request_bytes("GET", "/stream?200000")
        + request_bytes("GET", "/grouped")
        + request_bytes("HEAD", "/")
        + request_bytes("GET", "/stream?5")
        + request_bytes("GET", "/")
    )
    with RawConnection(server.port) as conn:
        conn.send(payload)
        big = conn.read_response()
        grouped = conn.read_response()
        head = conn.read_response(method="HEAD")
        small = conn.read_response()
        last = conn.read_response()
    assert big.framing == "chunked" and big.body == b"x" * 200000
    assert grouped.body == b"grouped"
    assert head.body == b"" and small.body == b"xxxxx" and last.body == b"ordered"
    for resp in (big, head, small, last):
        assert app_fields(resp.headers) == APP_ORDER, resp.raw_head
        assert_no_marker(resp.raw_head)


def test_file_bodies_pipelined_with_interleaved_heads(server, tmp_path):
    """File bodies go out by sendfile on cleartext HTTP/1.1, next to heads being reordered."""
    big = tmp_path / "big.bin"
    expected = os.urandom(300_000)
    big.write_bytes(expected)
    file_req = request_bytes("GET", "/file?" + str(big))
    payload = (
        file_req + request_bytes("GET", "/") + file_req + request_bytes("GET", "/stream?70000")
    )
    with RawConnection(server.port) as conn:
        conn.send(payload)
        responses = [conn.read_response() for _ in range(4)]
    assert [r.body for r in responses] == [expected, b"ordered", expected, b"x" * 70000]
    for resp in responses:
        assert app_fields(resp.headers) == APP_ORDER, resp.raw_head
        assert_no_marker(resp.raw_head)


def test_many_responses_on_one_connection_with_a_slow_reader(server):
    """Bodies larger than the socket buffers: heads are written after partial writes."""
    with RawConnection(server.port) as conn:
        conn.send(b"".join(request_bytes("GET", "/stream?3000000") for _ in range(4)))
        for _ in range(4):
            resp = conn.read_response()
            assert resp.body == b"x" * 3000000
            assert app_fields(resp.headers) == APP_ORDER


def test_http10_keep_alive_gets_http11_status_and_the_order(server):
    req = request_bytes("GET", "/", [("Connection", "keep-alive")], version="HTTP/1.0")
    with RawConnection(server.port) as conn:
        for _ in range(2):
            conn.send(req)
            resp = conn.read_response()
            assert resp.version == "HTTP/1.1" and resp.body == b"ordered"
            assert app_fields(resp.headers) == APP_ORDER


def test_websocket_accept_and_denial_keep_the_order(server):
    ws = RawWebSocket(server.port, path="/")
    try:
        assert app_fields(ws.response_headers) == APP_ORDER, ws.response_headers
        assert all("x-ferrocorn-order" not in n for n, _ in ws.response_headers)
    finally:
        ws.close()
    with pytest.raises(HandshakeFailed) as denied:
        RawWebSocket(server.port, path="/deny")
    assert denied.value.status == 403
    lines = denied.value.head.decode("latin-1").split("\r\n")[1:]
    fields = [tuple(p.strip() for p in line.split(":", 1)) for line in lines if line]
    assert app_fields(fields) == APP_ORDER
    assert_no_marker(denied.value.head)


def test_tls_http11_and_http2():
    c = certs()
    flags = ["--ssl-certfile", c.path("server.pem"), "--ssl-keyfile", c.path("server.key")]
    with start_server(APP, *flags) as server:
        ctx = ssl.create_default_context(cafile=c.ca_pem)
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        with RawConnection(sock=ctx.wrap_socket(raw, server_hostname="localhost")) as conn:
            conn.send(request_bytes("GET", "/"))
            resp = conn.read_response()
        assert app_fields(resp.headers) == APP_ORDER
        assert_no_marker(resp.raw_head)
        with H2Client(server.port, tls_context=tls_context(c.ca_pem)) as client:
            stream = client.get("/")
        names = [n for n, _ in stream.headers]
        assert not any(n.startswith("x-ferrocorn-order") for n in names), names
        # Each name's values in the app's order; every field there.
        assert [v for n, v in stream.headers if n == "set-cookie"] == ["a=1", "b=2"]
        assert [v for n, v in stream.headers if n == "x-mid"] == ["m", "n"]
        assert bytes(stream.data) == b"ordered"
