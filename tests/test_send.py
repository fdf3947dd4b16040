"""send(): response framing, HEAD, bodiless statuses and backpressure."""

import hashlib
import socket
import time

import httpx
import pytest

from tests.apps.common import iter_pattern, pattern_sha256
from tests.support.helpers import (
    IncompleteResponse,
    RawConnection,
    assert_healthy,
    request_bytes,
    start_server,
)


@pytest.fixture(scope="module")
def server():
    with start_server("tests.apps.basic:app") as s:
        yield s


def pattern_bytes(size):
    return b"".join(iter_pattern(size))


@pytest.mark.parametrize(
    "kind",
    [
        "tuple_of_lists",
        "bytes_subclass",
        "no_headers_key",
        "empty_header_value",
        "dict_subclass",
        "bytearray_body",
        "no_body_key",
        "truthy_more_body",
    ],
)
def test_valid_messages_of_any_shape_go_out_as_sent(server, kind):
    # PyPy takes the common message shapes apart in Python and hands the rest to the core:
    # both must send the same response.
    resp = httpx.get(server.url + "/shapes", params={"kind": kind}, timeout=10)
    assert resp.status_code == 200
    assert resp.content == b"shape " + kind.encode()
    if kind != "no_headers_key":
        assert resp.headers["x-shape"] == "ok"
    if kind == "tuple_of_lists":
        assert resp.headers["x-second"] == "2"
    if kind == "empty_header_value":
        assert resp.headers["x-empty"] == ""


def test_the_same_body_object_sent_again_goes_out_whole(server):
    # PyPy hands a large body that was sent just before to the core as itself rather than
    # as a copy: repeats, alternations and sizes around that path must all arrive intact.
    pieces = {"A": b"".join(iter_pattern(20000)), "B": b"B" * 5000, "C": b"C" * 300}
    for seq in ("AAAA", "ABAB", "AABBA", "CACCA", "BBBBBB"):
        resp = httpx.get(server.url + "/repeat", params={"seq": seq}, timeout=10)
        assert resp.status_code == 200
        assert resp.content == b"".join(pieces[name] for name in seq), seq


def test_single_body_has_content_length(server):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/hello"))
        resp = conn.read_response()
    assert resp.status == 200
    assert resp.framing == "content-length"
    assert resp.header("content-length") == "11"
    assert resp.header("transfer-encoding") is None
    assert resp.body == b"hello world"


def test_streaming_response_chunked_on_http11(server):
    size = 300000
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/stream?size=%d&chunk=7000" % size))
        resp = conn.read_response()
        assert resp.framing == "chunked", resp
        assert resp.header("content-length") is None
        assert resp.complete
        assert resp.body == pattern_bytes(size)
        # keep-alive still works after a chunked response
        conn.send(request_bytes("GET", "/index?i=after-chunked"))
        assert conn.read_response().body == b"after-chunked"


def test_streaming_response_close_delimited_on_http10(server):
    size = 200000
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/stream?size=%d&chunk=5000" % size, version="HTTP/1.0"))
        resp = conn.read_response()
    assert resp.status == 200
    assert resp.header("transfer-encoding") is None, resp
    # close-delimited (or an exact length the server could know): the body must be complete
    assert resp.framing in ("close", "content-length"), resp
    assert resp.body == pattern_bytes(size)


def test_app_set_content_length_honoured(server):
    size = 123457
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/stream?size=%d&chunk=10000&cl=1" % size))
        resp = conn.read_response()
        assert resp.framing == "content-length", resp
        assert resp.header("content-length") == str(size)
        assert resp.header("transfer-encoding") is None
        assert resp.body == pattern_bytes(size)
        conn.send(request_bytes("GET", "/index?i=after-cl"))
        assert conn.read_response().body == b"after-cl"


def test_head_has_headers_but_no_body(server):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("HEAD", "/hello"))
        resp = conn.read_response(method="HEAD")
        assert resp.status == 200
        assert resp.header("content-type") == "text/plain"
        # Pipeline a GET: if the HEAD response carried a body, this response would be garbage.
        conn.send(request_bytes("GET", "/index?i=after-head"))
        nxt = conn.read_response()
        assert nxt.status == 200, nxt
        assert nxt.body == b"after-head"


def test_head_streaming_route_no_body(server):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("HEAD", "/stream?size=50000&chunk=1000"))
        resp = conn.read_response(method="HEAD")
        assert resp.status == 200
        conn.send(request_bytes("GET", "/index?i=after-head2"))
        nxt = conn.read_response()
        assert nxt.body == b"after-head2", nxt


@pytest.mark.parametrize("code", [204, 304])
@pytest.mark.parametrize("mode", ["single", "stream"])
def test_bodiless_status(server, code, mode):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/status?code=%d&mode=%s" % (code, mode)))
        resp = conn.read_response()
        assert resp.status == code
        assert resp.header("transfer-encoding") is None, resp
        cl = resp.header("content-length")
        assert cl in (None, "0"), resp
        conn.send(request_bytes("GET", "/index?i=after-%d" % code))
        nxt = conn.read_response()
        assert nxt is not None and nxt.status == 200, nxt
        assert nxt.body == ("after-%d" % code).encode()


def test_httpx_streaming_roundtrip(server):
    size = 5 * 1024 * 1024 + 3
    with httpx.Client(base_url=server.url, timeout=30) as client:
        resp = client.get("/stream", params={"size": size, "chunk": 65536})
    assert resp.status_code == 200
    assert hashlib.sha256(resp.content).hexdigest() == pattern_sha256(size)


@pytest.mark.timeout(120)
def test_backpressure_slow_reader(server):
    """A 100 MB streamed response to a client that stops reading for a while must not be
    buffered in the server: RSS growth stays far below the body size."""
    size = 100 * 1024 * 1024
    baseline = server.rss_kb()
    conn = RawConnection(server.port, timeout=30)
    try:
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        conn.send(request_bytes("GET", "/stream?size=%d&chunk=262144&cl=1" % size))
        head = conn.read_head()
        assert head is not None and head[1] == 200, head
        headers = dict((k.lower(), v) for k, v in head[3])
        assert headers.get("content-length") == str(size)
        # Stop reading: an unbounded server would pull the whole body into memory now.
        time.sleep(2.0)
        peak = server.rss_kb()
        h = hashlib.sha256()
        h.update(bytes(conn.buf))
        received = len(conn.buf)
        del conn.buf[:]
        next_sample = received + 10 * 1024 * 1024
        while received < size:
            data = conn.sock.recv(min(1 << 20, size - received))
            if not data:
                break
            h.update(data)
            received += len(data)
            if received >= next_sample:
                peak = max(peak, server.rss_kb())
                next_sample += 10 * 1024 * 1024
                time.sleep(0.01)  # stay a somewhat slow reader
        assert received == size, "body truncated at %d of %d bytes" % (received, size)
        assert h.hexdigest() == pattern_sha256(size)
    finally:
        conn.close()
    growth_mb = (peak - baseline) / 1024.0
    assert growth_mb < 50, "server RSS grew by %.1f MB for a 100 MB slow download" % growth_mb


def test_body_shorter_than_content_length_is_aborted(server):
    """The app declares 5000 bytes but sends 3000: the client must see an aborted exchange
    (connection closed), never a hang or a clean response."""
    with RawConnection(server.port, timeout=10) as conn:
        conn.send(request_bytes("GET", "/stream?size=3000&chunk=1000&declare=5000"))
        try:
            resp = conn.read_response()
        except IncompleteResponse as exc:
            resp = exc.partial
        except socket.timeout:
            raise AssertionError("server kept the connection open with a short body") from None
        # acceptable: nothing at all (closed/reset), a truncated 200, or a 500
        if resp is not None and resp.status == 200:
            assert not resp.complete, resp
            assert len(resp.body) <= 3000
        elif resp is not None:
            assert resp.status == 500, resp
    assert_healthy(server.port)


def test_body_longer_than_content_length_not_leaked(server):
    """The app declares 1000 bytes but sends 3000: the extra bytes must not reach the client as
    (part of) the next response on the same connection."""
    with RawConnection(server.port, timeout=10) as conn:
        conn.send(request_bytes("GET", "/stream?size=3000&chunk=1000&declare=1000"))
        resp = conn.read_response()
        assert resp is not None
        if resp.status == 200:
            assert len(resp.body) == 1000
            assert resp.body == pattern_bytes(1000)
        try:
            conn.send(request_bytes("GET", "/index?i=next-after-overlong"))
            nxt = conn.read_response()
        except (OSError, IncompleteResponse):
            nxt = None  # the server closed the connection: acceptable
        if nxt is not None:
            assert nxt.status == 200 and nxt.body == b"next-after-overlong", nxt
    assert_healthy(server.port)


@pytest.mark.parametrize("stream", [False, True])
def test_response_goes_out_while_the_app_blocks_the_loop(server_factory, tmp_path, stream):
    """A complete response reaches the client even when the app then blocks the event loop
    without awaiting (a background job doing synchronous work): the server must not hold it
    back until the loop runs again. The app only unblocks once the client has the response
    (or after 20 s), so a held-back response shows up as a read timeout here. A long
    keep-alive timeout keeps the connection's idle timer from waking its task meanwhile."""
    server = server_factory("tests.apps.basic:app", "--timeout-keep-alive", "60")
    flag = tmp_path / "client-has-response"
    target = "/block_after?until=%s%s" % (flag, "&stream=1" if stream else "")
    try:
        with RawConnection(server.port, timeout=10) as conn:
            conn.send(request_bytes("GET", target))
            resp = conn.read_response()
    finally:
        flag.write_text("done")
    assert resp.status == 200
    assert resp.body == (b"part1,part2" if stream else b"sent before blocking")
    assert_healthy(server.port)
