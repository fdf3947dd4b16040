"""HTTP/1.0 requests get an ``HTTP/1.1`` status line (RFC 9110 §2.5: a server sends its
highest conformant version) with HTTP/1.0 framing: no chunked body, the connection closed
after the response unless the request asked for keep-alive (src/server/http10.rs)."""

import socket
import ssl

import pytest

from tests.support.helpers import RawConnection, request_bytes, start_server
from tests.support.tls_certs import certs


@pytest.fixture(scope="module")
def server():
    with start_server("tests.apps.basic:app") as s:
        yield s


def get10(path, headers=(), method="GET", body=b""):
    return request_bytes(method, path, list(headers), body=body, version="HTTP/1.0")


KEEP = [("Connection", "keep-alive")]


def test_status_line_is_http11_and_the_connection_closes(server):
    with RawConnection(server.port) as conn:
        conn.send(get10("/index?i=10"))
        resp = conn.read_response()
        assert resp.version == "HTTP/1.1" and resp.status == 200
        assert resp.raw_head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert resp.body == b"10" and resp.header("transfer-encoding") is None
        assert conn.is_closed_by_peer(timeout=5), "HTTP/1.0 connection left open"


def test_keep_alive_heads_all_http11(server):
    with RawConnection(server.port) as conn:
        for i in range(4):
            conn.send(get10("/index?i=k%d" % i, KEEP))
            resp = conn.read_response()
            assert resp is not None, "closed despite Connection: keep-alive"
            assert resp.version == "HTTP/1.1", resp.raw_head
            assert resp.body == ("k%d" % i).encode()


def test_pipelined_keep_alive_with_head_and_a_body_that_looks_like_a_head(server):
    fake = b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n"
    payload = (
        get10("/index?i=a", KEEP)
        + get10("/index?i=b", KEEP, method="HEAD")
        + get10("/echo", KEEP, method="POST", body=fake * 3)
        + get10("/index?i=c", KEEP)
    )
    with RawConnection(server.port) as conn:
        conn.send(payload)
        first = conn.read_response()
        head = conn.read_response(method="HEAD")
        echoed = conn.read_response()
        last = conn.read_response()
    assert [r.version for r in (first, head, echoed, last)] == ["HTTP/1.1"] * 4
    assert first.body == b"a" and head.body == b"" and last.body == b"c"
    assert head.header("content-length") == "1"
    # The body is the app's, byte for byte: its "HTTP/1.0" stays.
    assert b'"size": %d' % (len(fake) * 3) in echoed.body


@pytest.mark.parametrize("size", [0, 1, 200_000])
def test_streamed_body_close_delimited(server, size):
    with RawConnection(server.port) as conn:
        conn.send(get10("/stream?size=%d&chunk=5000" % size))
        resp = conn.read_response()
    assert resp.version == "HTTP/1.1" and resp.header("transfer-encoding") is None
    assert resp.framing in ("close", "content-length") and len(resp.body) == size


def test_large_body_with_length_then_next_request(server):
    with RawConnection(server.port) as conn:
        conn.send(get10("/stream?size=3000000&chunk=65536&cl=1", KEEP))
        resp = conn.read_response()
        assert resp.version == "HTTP/1.1" and len(resp.body) == 3_000_000
        conn.send(get10("/index?i=next", KEEP))
        resp = conn.read_response()
        assert resp.version == "HTTP/1.1" and resp.body == b"next"


def test_http11_after_http10_on_one_connection(server):
    with RawConnection(server.port) as conn:
        conn.send(get10("/index?i=old", KEEP))
        assert conn.read_response().version == "HTTP/1.1"
        conn.send(request_bytes("GET", "/stream?size=70000&chunk=7000"))
        resp = conn.read_response()
        assert resp.version == "HTTP/1.1" and resp.framing == "chunked"
        assert len(resp.body) == 70000
        conn.send(request_bytes("GET", "/index?i=new"))
        assert conn.read_response().body == b"new"


def test_errors_and_core_answers_too(server):
    with RawConnection(server.port) as conn:
        conn.send(get10("/error/before", KEEP))
        resp = conn.read_response()
        assert (resp.version, resp.status) == ("HTTP/1.1", 500)
    # A malformed request: hyper's own 400 (its version is hyper's), and the worker serves on.
    with RawConnection(server.port) as conn:
        conn.send(b"GET /index?i=x HTTP/1.0\r\nBad Header\r\n\r\n")
        resp = conn.read_response()
        assert resp.status == 400
    with RawConnection(server.port) as conn:
        conn.send(get10("/index?i=ok"))
        resp = conn.read_response()
        assert resp.version == "HTTP/1.1" and resp.body == b"ok"


def test_http10_over_tls():
    c = certs()
    flags = ["--ssl-certfile", c.path("server.pem"), "--ssl-keyfile", c.path("server.key")]
    with start_server("tests.apps.basic:app", *flags) as server:
        ctx = ssl.create_default_context(cafile=c.ca_pem)
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock = ctx.wrap_socket(raw, server_hostname="localhost")
        with RawConnection(sock=sock) as conn:
            for i in range(2):
                conn.send(get10("/index?i=t%d" % i, KEEP))
                resp = conn.read_response()
                assert resp.version == "HTTP/1.1" and resp.body == ("t%d" % i).encode()
