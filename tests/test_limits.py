"""Request limits (issue "Production operations", point 4): --limit-request-body (413),
--timeout-request-body (408), --limit-request-line (414), over HTTP/1.1 and HTTP/2.

Each limit is shown to fire (status, connection closed or stream ended, app not called where
promised, a warning naming the option) and to leave a normal client just inside it alone.
"""

import contextlib
import hashlib
import json
import time
import uuid

import pytest

from tests.apps.common import iter_pattern, pattern_sha256
from tests.support import wsraw
from tests.support.h2client import H2Client
from tests.support.helpers import IncompleteResponse, RawConnection, request_bytes, start_server

APP = "tests.apps.limits_app:app"
BODY_LIMIT = 1000
LINE_LIMIT = 200


@contextlib.contextmanager
def serving(*flags):
    with start_server(APP, *flags) as server:
        yield server
        assert server.proc.poll() is None, "server died:\n" + server.output()[-3000:]
        out = server.output()
        for bad in ("panicked", "SystemError", "Traceback"):
            assert bad not in out, out[-3000:]


@pytest.fixture(scope="module")
def body_server():
    # Bodies over 100 bytes stream, so an announced body at the limit takes the streamed path.
    with serving("--limit-request-body", str(BODY_LIMIT), "--body-preread-limit", "100") as s:
        yield s


@pytest.fixture(scope="module")
def timeout_server():
    with serving("--timeout-request-body", "1", "--body-preread-limit", "100") as s:
        yield s


@pytest.fixture(scope="module")
def line_server():
    with serving("--limit-request-line", str(LINE_LIMIT)) as s:
        yield s


@pytest.fixture(scope="module")
def default_server():
    with serving() as s:
        yield s


def new_id():
    return uuid.uuid4().hex


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def get_json(port, target):
    with RawConnection(port) as conn:
        conn.send(request_bytes("GET", target, [("Connection", "close")]))
        resp = conn.read_response()
    assert resp is not None and resp.status == 200, resp
    return json.loads(resp.body)


def report(server, rid):
    return get_json(server.port, "/report?id=" + rid)


def wait_report(server, rid, key, timeout=15.0):
    """The app's report once it has ``key`` (e.g. "send": it tried to answer)."""
    deadline = time.monotonic() + timeout
    while True:
        value = report(server, rid)
        if value is not None and key in value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("report %s never got %r: %r" % (rid, key, value))
        time.sleep(0.05)


def assert_closed(conn):
    """The server closed the connection after its response (nothing else follows)."""
    assert conn.read_response() is None
    assert conn.eof


def assert_disconnected_app(server, rid):
    """The app read some body (never more than the limit), then got http.disconnect, and its
    later send() raised ClientDisconnected."""
    value = wait_report(server, rid, "send")
    types = [m["type"] for m in value["messages"]]
    assert types[-1] == "http.disconnect", value
    assert set(types[:-1]) <= {"http.request"}, value
    assert all(m["more"] for m in value["messages"][:-1]), value
    assert value["send"] == "ClientDisconnected", value
    return value


def assert_warned(server, pattern):
    assert server.wait_for_output(r"WARNING:\s+" + pattern), server.output()[-3000:]


def wait_for(conn, needle, timeout=10.0):
    """Read into the connection's buffer until ``needle`` is there (the response started)."""
    deadline = time.monotonic() + timeout
    while needle not in conn.buf:
        assert time.monotonic() < deadline, bytes(conn.buf)
        assert conn.fill(), bytes(conn.buf)


def padded_target(rid, length):
    target = "/echo?id=%s&pad=" % rid
    return target + "x" * (length - len(target))


# ---------------------------------------------------------------- --limit-request-body, HTTP/1.1


def test_content_length_over_limit_gets_413_and_the_app_is_not_called(body_server):
    rid = new_id()
    with RawConnection(body_server.port) as conn:
        # Only the head: a server that waited for the body would never answer.
        head = [("Content-Length", str(BODY_LIMIT + 1))]
        conn.send(request_bytes("POST", "/echo?id=" + rid, head))
        resp = conn.read_response()
        assert resp is not None and resp.status == 413, resp
        assert resp.reason == "Content Too Large", resp
        assert resp.header("connection") == "close", resp
        assert_closed(conn)
    assert report(body_server, rid) is None
    assert_warned(
        body_server,
        r"413 from 127\.0\.0\.1:\d+: Content-Length 1001 is larger than "
        r"--limit-request-body \(1000 bytes\)",
    )


def test_expect_continue_over_limit_gets_413_and_no_100(body_server):
    rid = new_id()
    informational = []
    with RawConnection(body_server.port) as conn:
        head = [("Content-Length", "5000"), ("Expect", "100-continue")]
        conn.send(request_bytes("POST", "/echo?id=" + rid, head))
        resp = conn.read_response(informational=informational)
        assert resp is not None and resp.status == 413, resp
        assert_closed(conn)
    assert informational == []
    assert report(body_server, rid) is None


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_body_of_exactly_the_limit_is_accepted(body_server, framing):
    body = b"".join(iter_pattern(BODY_LIMIT))
    with RawConnection(body_server.port) as conn:
        if framing == "chunked":
            conn.send(request_bytes("POST", "/echo", [("Transfer-Encoding", "chunked")]))
            for start in range(0, BODY_LIMIT, 300):
                conn.send(chunk(body[start : start + 300]))
            conn.send(b"0\r\n\r\n")
        else:
            conn.send(request_bytes("POST", "/echo", body=body))
        resp = conn.read_response()
        assert resp is not None and resp.status == 200, resp
        assert json.loads(resp.body) == {"size": BODY_LIMIT, "sha256": pattern_sha256(BODY_LIMIT)}
        # The connection stays usable.
        conn.send(request_bytes("GET", "/after"))
        resp = conn.read_response()
        assert (
            resp is not None and resp.status == 200 and json.loads(resp.body) == {"path": "/after"}
        ), resp


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_streamed_body_then_streamed_response_is_intact(body_server, framing):
    # The body ends normally before the response starts: the response must not be aborted.
    body = b"".join(iter_pattern(BODY_LIMIT))
    with RawConnection(body_server.port) as conn:
        for _ in range(2):
            if framing == "chunked":
                head = [("Transfer-Encoding", "chunked")]
                conn.send(request_bytes("POST", "/read_then_stream", head))
                conn.send(chunk(body[:500]) + chunk(body[500:]) + b"0\r\n\r\n")
            else:
                conn.send(request_bytes("POST", "/read_then_stream", body=body))
            resp = conn.read_response()
            assert resp is not None and resp.status == 200 and resp.framing == "chunked", resp
            expected = "size=%d;sha256=%s" % (BODY_LIMIT, pattern_sha256(BODY_LIMIT))
            assert resp.body == expected.encode(), resp


def test_chunked_body_over_limit_gets_413_and_the_app_a_disconnect(body_server):
    rid = new_id()
    with RawConnection(body_server.port) as conn:
        conn.send(request_bytes("POST", "/echo?id=" + rid, [("Transfer-Encoding", "chunked")]))
        conn.send(chunk(b"a" * 600))
        conn.send(chunk(b"b" * 600))  # 1200 in all; no terminating chunk: never needed
        resp = conn.read_response()
        assert resp is not None and resp.status == 413, resp
        assert resp.header("connection") == "close", resp
        assert_closed(conn)
    value = assert_disconnected_app(body_server, rid)
    assert sum(m["len"] for m in value["messages"]) <= BODY_LIMIT, value
    assert_warned(
        body_server,
        r"413 from 127\.0\.0\.1:\d+: request body larger than --limit-request-body "
        r"\(1000 bytes\)",
    )


def test_body_over_limit_after_the_response_started_aborts_it(body_server):
    rid = new_id()
    with RawConnection(body_server.port) as conn:
        target = "/stream_then_read?id=" + rid
        conn.send(request_bytes("POST", target, [("Transfer-Encoding", "chunked")]))
        wait_for(conn, b"started;")
        conn.send(chunk(b"a" * 600) + chunk(b"b" * 600))
        with pytest.raises(IncompleteResponse) as info:
            conn.read_response()
    partial = info.value.partial
    assert partial.status == 200 and partial.body.startswith(b"started;"), partial
    assert b"size=" not in partial.body, partial
    assert_disconnected_app(body_server, rid)


def test_websocket_is_not_subject_to_the_body_limit(body_server):
    ws = wsraw.RawWebSocket(body_server.port, "/ws")
    try:
        message = "m" * (BODY_LIMIT * 5)
        ws.send_text(message)
        frame = ws.recv_frame()
        assert frame.opcode == wsraw.TEXT and frame.payload == message.encode(), frame
    finally:
        ws.close()


# ---------------------------------------------------------------- --timeout-request-body, HTTP/1.1


def test_stalled_chunked_body_gets_408_and_the_app_a_disconnect(timeout_server):
    rid = new_id()
    with RawConnection(timeout_server.port) as conn:
        conn.send(request_bytes("POST", "/echo?id=" + rid, [("Transfer-Encoding", "chunked")]))
        conn.send(chunk(b"x" * 100))  # then nothing
        resp = conn.read_response()
        assert resp is not None and resp.status == 408, resp
        assert resp.reason == "Request Timeout", resp
        assert resp.header("connection") == "close", resp
        assert_closed(conn)
    value = assert_disconnected_app(timeout_server, rid)
    assert [m["len"] for m in value["messages"]] == [100, 0], value
    assert_warned(
        timeout_server,
        r"408 from 127\.0\.0\.1:\d+: no request body data for --timeout-request-body \(1s\)",
    )


def test_stalled_small_body_gets_408_before_the_app_is_called(timeout_server):
    # Announced and small: read before dispatch, so the app never hears of it.
    rid = new_id()
    with RawConnection(timeout_server.port) as conn:
        conn.send(request_bytes("POST", "/echo?id=" + rid, [("Content-Length", "50")]) + b"0123")
        resp = conn.read_response()
        assert resp is not None and resp.status == 408, resp
        assert_closed(conn)
    assert report(timeout_server, rid) is None


def test_stalled_streamed_content_length_body_gets_408(timeout_server):
    rid = new_id()
    with RawConnection(timeout_server.port) as conn:
        head = request_bytes("POST", "/echo?id=" + rid, [("Content-Length", "5000")])
        conn.send(head + b"y" * 1000)
        resp = conn.read_response()
        assert resp is not None and resp.status == 408, resp
        assert_closed(conn)
    assert_disconnected_app(timeout_server, rid)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_slow_body_within_the_timeout_is_accepted(timeout_server, framing):
    # Eight pieces 0.3 s apart: 2.1 s for the whole body, over twice the 1 s idle timeout.
    pieces = [b"%d" % i * 100 for i in range(8)]
    body = b"".join(pieces)
    with RawConnection(timeout_server.port) as conn:
        if framing == "chunked":
            conn.send(request_bytes("POST", "/echo", [("Transfer-Encoding", "chunked")]))
        else:
            conn.send(request_bytes("POST", "/echo", [("Content-Length", str(len(body)))]))
        for i, piece in enumerate(pieces):
            if i:
                time.sleep(0.3)
            conn.send(chunk(piece) if framing == "chunked" else piece)
        if framing == "chunked":
            conn.send(b"0\r\n\r\n")
        resp = conn.read_response()
    assert resp is not None and resp.status == 200, resp
    assert json.loads(resp.body) == {
        "size": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
    }


def test_timeout_does_not_run_while_the_app_is_not_reading(timeout_server):
    # The app sleeps 2.5 s before its first receive(); the client pauses 2 s mid-body. The
    # client was silent for longer than the timeout, but nobody was waiting for it.
    with RawConnection(timeout_server.port) as conn:
        conn.send(request_bytes("POST", "/echo?delay=2.5", [("Transfer-Encoding", "chunked")]))
        conn.send(chunk(b"first"))
        time.sleep(2.0)
        conn.send(chunk(b"second") + b"0\r\n\r\n")
        resp = conn.read_response()
    assert resp is not None and resp.status == 200, resp
    assert json.loads(resp.body)["size"] == len(b"firstsecond")


def test_stalled_body_after_the_response_started_aborts_it(timeout_server):
    rid = new_id()
    with RawConnection(timeout_server.port) as conn:
        target = "/stream_then_read?id=" + rid
        conn.send(request_bytes("POST", target, [("Transfer-Encoding", "chunked")]))
        wait_for(conn, b"started;")
        conn.send(chunk(b"z" * 10))  # then nothing
        with pytest.raises(IncompleteResponse) as info:
            conn.read_response()
    assert info.value.partial.body.startswith(b"started;"), info.value.partial
    assert_disconnected_app(timeout_server, rid)


# ---------------------------------------------------------------- --limit-request-line, HTTP/1.1


def test_long_request_target_gets_414_and_the_app_is_not_called(line_server):
    rid = new_id()
    with RawConnection(line_server.port) as conn:
        conn.send(request_bytes("GET", padded_target(rid, LINE_LIMIT + 1)))
        resp = conn.read_response()
        assert resp is not None and resp.status == 414, resp
        assert resp.reason == "URI Too Long", resp
        assert resp.header("connection") == "close", resp
        assert_closed(conn)
    assert report(line_server, rid) is None
    assert_warned(
        line_server,
        r"414 from 127\.0\.0\.1:\d+: request-target of 201 bytes is longer than "
        r"--limit-request-line \(200 bytes\)",
    )


def test_request_target_of_exactly_the_limit_is_served(line_server):
    rid = new_id()
    target = padded_target(rid, LINE_LIMIT)
    with RawConnection(line_server.port) as conn:
        conn.send(request_bytes("POST", target, body=b"ok"))
        resp = conn.read_response()
    assert resp is not None and resp.status == 200, resp
    assert report(line_server, rid) is not None


# ---------------------------------------------------------------- defaults


def test_defaults_leave_normal_clients_alone(default_server):
    # A 12 KiB URL (beyond gunicorn's and Apache's request-line limits) and a 2 MiB chunked
    # upload go through; a 20 KiB URL is over the 16 KiB default.
    rid = new_id()
    with RawConnection(default_server.port) as conn:
        conn.send(request_bytes("GET", padded_target(rid, 12 * 1024)))
        resp = conn.read_response()
        assert resp is not None and resp.status == 200, resp
        size = 2 * 1024 * 1024
        conn.send(request_bytes("POST", "/echo", [("Transfer-Encoding", "chunked")]))
        for piece in iter_pattern(size, 64 * 1024):
            conn.send(chunk(piece))
        conn.send(b"0\r\n\r\n")
        resp = conn.read_response()
        assert resp is not None and resp.status == 200, resp
        assert json.loads(resp.body) == {"size": size, "sha256": pattern_sha256(size)}
    with RawConnection(default_server.port) as conn:
        conn.send(request_bytes("GET", padded_target(new_id(), 20 * 1024)))
        resp = conn.read_response()
        assert resp is not None and resp.status == 414, resp


def test_default_body_limit_is_one_gib(default_server):
    # Announced sizes only: exactly 1 GiB reaches the app (which answers before reading),
    # one byte more is refused up front.
    with RawConnection(default_server.port) as conn:
        head = [("Content-Length", str(1 << 30))]
        conn.send(request_bytes("POST", "/stream_then_read", head))
        wait_for(conn, b"started;")
        assert conn.buf.startswith(b"HTTP/1.1 200 "), bytes(conn.buf)
    with RawConnection(default_server.port) as conn:
        conn.send(request_bytes("POST", "/echo", [("Content-Length", str((1 << 30) + 1))]))
        resp = conn.read_response()
        assert resp is not None and resp.status == 413, resp


def test_zero_turns_the_limits_off(server_factory):
    server = server_factory(
        APP, "--limit-request-body", "0", "--limit-request-line", "0", "--timeout-request-body", "0"
    )
    with RawConnection(server.port) as conn:
        # Far over the defaults: 16 GiB announced, a 30 KiB URL.
        head = [("Content-Length", str(16 << 30))]
        conn.send(request_bytes("POST", "/stream_then_read?pad=" + "p" * 30000, head))
        wait_for(conn, b"started;")
        assert conn.buf.startswith(b"HTTP/1.1 200 "), bytes(conn.buf)


# ---------------------------------------------------------------- HTTP/2


def h2_wait_for_data(client, sid, needle, timeout=10.0):
    deadline = time.monotonic() + timeout
    while needle not in client.streams[sid].data:
        assert time.monotonic() < deadline, client.streams[sid].data
        assert client.receive_once(), "connection closed"


def h2_assert_usable(client):
    stream = client.get("/still-there")
    assert stream.status == 200 and json.loads(bytes(stream.data)) == {"path": "/still-there"}


def test_h2_content_length_over_limit_gets_413_on_that_stream(body_server):
    rid = new_id()
    with H2Client(body_server.port) as client:
        sid = client.request(
            "POST", "/echo?id=" + rid, [("content-length", str(BODY_LIMIT + 1))], end_stream=False
        )
        (stream,) = client.wait(sid)
        assert stream.status == 413, stream.headers
        assert bytes(stream.data) == b"Content Too Large"
        h2_assert_usable(client)
    assert report(body_server, rid) is None


def test_h2_body_over_limit_gets_413_on_that_stream(body_server):
    rid = new_id()
    with H2Client(body_server.port) as client:
        sid = client.request("POST", "/echo?id=" + rid, end_stream=False)
        client.send_body(sid, b"a" * 600, end_stream=False)
        client.send_body(sid, b"b" * 600, end_stream=False)
        (stream,) = client.wait(sid)
        assert stream.status == 413, stream.headers
        h2_assert_usable(client)
    assert_disconnected_app(body_server, rid)


def test_h2_body_of_exactly_the_limit_is_accepted(body_server):
    body = b"".join(iter_pattern(BODY_LIMIT))
    with H2Client(body_server.port) as client:
        sid = client.request("POST", "/echo", end_stream=False)
        client.send_body(sid, body[:400], end_stream=False)
        client.send_body(sid, body[400:], end_stream=True)
        (stream,) = client.wait(sid)
    assert stream.status == 200, stream.headers
    assert json.loads(bytes(stream.data)) == {
        "size": BODY_LIMIT,
        "sha256": pattern_sha256(BODY_LIMIT),
    }


def test_h2_streamed_body_then_streamed_response_is_intact(body_server):
    body = b"".join(iter_pattern(BODY_LIMIT))
    with H2Client(body_server.port) as client:
        sid = client.request("POST", "/read_then_stream", end_stream=False)
        client.send_body(sid, body[:500], end_stream=False)
        client.send_body(sid, body[500:], end_stream=True)
        (stream,) = client.wait(sid)
    assert stream.status == 200 and stream.ended, stream.__dict__
    expected = "size=%d;sha256=%s" % (BODY_LIMIT, pattern_sha256(BODY_LIMIT))
    assert bytes(stream.data) == expected.encode()


def test_h2_body_over_limit_after_the_response_started_resets_only_that_stream(body_server):
    rid = new_id()
    with H2Client(body_server.port) as client:
        sid = client.request("POST", "/stream_then_read?id=" + rid, end_stream=False)
        h2_wait_for_data(client, sid, b"started;")
        client.send_body(sid, b"a" * 1200, end_stream=False)
        (stream,) = client.wait(sid)
        assert stream.reset is not None, stream.__dict__
        assert not stream.ended
        h2_assert_usable(client)
    assert_disconnected_app(body_server, rid)


def test_h2_stalled_body_gets_408_on_that_stream(timeout_server):
    rid = new_id()
    with H2Client(timeout_server.port) as client:
        sid = client.request("POST", "/echo?id=" + rid, end_stream=False)
        client.send_body(sid, b"x" * 100, end_stream=False)  # then nothing
        (stream,) = client.wait(sid)
        assert stream.status == 408, stream.headers
        h2_assert_usable(client)
    assert_disconnected_app(timeout_server, rid)


def test_h2_long_path_gets_414_on_that_stream(line_server):
    rid = new_id()
    with H2Client(line_server.port) as client:
        stream = client.get(padded_target(rid, LINE_LIMIT + 1))
        assert stream.status == 414, stream.headers
        ok = client.get(padded_target(new_id(), LINE_LIMIT))
        assert ok.status == 200, ok.headers
    assert report(line_server, rid) is None
