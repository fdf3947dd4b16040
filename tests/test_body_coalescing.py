"""Tiny request-body pieces are merged before they reach the app (issue 18, item 3).

A body sent as many tiny chunks (HTTP/1.1) or DATA frames (HTTP/2) reaches the app as a few
``http.request`` messages holding whatever had arrived when it called ``receive()``, not one
message per piece; the body stays exact, ``more_body`` is false on the last message only, the
body-size limit still cuts the body off at the same byte, and a client that sends slowly gets
each piece through without the server waiting for more.

The counts are bounds on messages, not on time: 100,000 one-byte pieces sent in one write
arrived as 100,001 messages before merging.
"""

import hashlib
import json
import socket
import time
import uuid

import pytest
from hyperframe.frame import DataFrame, RstStreamFrame

from tests.support import h2frames
from tests.support.h2frames import MAX_WINDOW, H2Conn
from tests.support.helpers import RawConnection, request_bytes, start_server

APP = "tests.apps.coalesce_app:app"
PIECES = 100_000
# Far below one message per piece; a merged body of 100,000 bytes needs only a few.
MAX_MESSAGES = 1000
# One-byte DATA frames sent at once: well within what the h2 crate lets a client buffer.
H2_BATCH = 1000
LIMIT = H2_BATCH


def pattern(n):
    return (bytes(range(251)) * (n // 251 + 1))[:n]


@pytest.fixture(scope="module")
def server():
    with start_server(APP) as s:
        yield s


@pytest.fixture(scope="module")
def limit_server():
    with start_server(APP, "--limit-request-body", str(LIMIT)) as s:
        yield s


def chunked(body, final=b"0\r\n\r\n"):
    """``body`` as one-byte chunks, all in one buffer so they arrive together."""
    return b"".join(b"1\r\n%c\r\n" % byte for byte in body) + final


def h1_count(server, wire, timeout=30.0):
    rid = uuid.uuid4().hex
    head = request_bytes("POST", "/count?id=" + rid, [("Transfer-Encoding", "chunked")])
    with RawConnection(server.port, timeout=timeout) as conn:
        conn.send(head + wire)
        resp = conn.read_response()
    assert resp is not None and resp.status == 200, resp
    assert_nothing_after_the_last(server, rid)
    return json.loads(resp.body)


def h2_count(server, frames):
    """POST /count over HTTP/2, its DATA ``frames`` (stream 1) sent with the head at once."""
    rid = uuid.uuid4().hex
    with h2_conn(server.port) as conn:
        conn.send(h2_request(conn, 1, "/count?id=" + rid), frames)
        resp = conn.response(1)
    assert resp.status == 200, resp.headers
    assert_nothing_after_the_last(server, rid)
    return json.loads(bytes(resp.body))


def assert_nothing_after_the_last(server, rid):
    """The app's receive() after the message with more_body false gave http.disconnect."""
    assert report(server, rid, "after")["after"] == "http.disconnect"


def h2_conn(port):
    """A raw HTTP/2 connection whose windows let any echo through (it never sends
    WINDOW_UPDATE for what it reads)."""
    conn = H2Conn(port, timeout=30.0).handshake((h2frames.S.INITIAL_WINDOW_SIZE, MAX_WINDOW))
    conn.send(h2frames.window_update(0, MAX_WINDOW - 65535))
    return conn


def h2_frames(sid, body, end=True):
    """``body`` as one-byte DATA frames; ``end``: an empty DATA frame ends the stream."""
    frames = [h2frames.data(sid, body[i : i + 1]) for i in range(len(body))]
    if end:
        frames.append(h2frames.data(sid, b"", end_stream=True))
    return b"".join(frames)


def h2_request(conn, sid, path, end_stream=False):
    return h2frames.headers(sid, conn.block(conn.request_fields("POST", path)), end_stream)


def h2_wait_echo(conn, size):
    """Read until ``size`` body bytes of stream 1 came back."""
    resp = conn.responses.setdefault(1, h2frames.Response(1))

    def echoed(frame):
        assert not isinstance(frame, RstStreamFrame), frame
        return isinstance(frame, DataFrame) and len(resp.body) >= size

    if len(resp.body) < size:
        conn.wait_for(echoed, "%d bytes echoed" % size)


def assert_exact(result, body):
    assert result["size"] == len(body), result
    assert result["sha256"] == hashlib.sha256(body).hexdigest(), result
    # more_body is false on the last message, and on that one only.
    assert result["ends"] == [result["messages"] - 1], result


def report(server, rid, key, timeout=15.0):
    """The app's report for ``rid`` once it has ``key``."""
    deadline = time.monotonic() + timeout
    while True:
        with RawConnection(server.port) as conn:
            conn.send(request_bytes("GET", "/report?id=" + rid, [("Connection", "close")]))
            value = json.loads(conn.read_response().body)
        if value is not None and key in value:
            return value
        assert time.monotonic() < deadline, value
        time.sleep(0.05)


# ---------------------------------------------------------------- many tiny pieces


def test_h1_one_byte_chunks_arrive_in_few_messages(server):
    body = pattern(PIECES)
    result = h1_count(server, chunked(body))
    assert_exact(result, body)
    assert result["messages"] < MAX_MESSAGES, result


def test_h2_one_byte_data_frames_arrive_in_few_messages(server):
    # The h2 crate refuses a connection that buffers too many tiny DATA frames unread (about
    # 4,000 with our 2 MiB connection window: GOAWAY "too_many_data_frames"), so the frames go
    # in batches, each sent at once and echoed back whole before the next.
    rid = uuid.uuid4().hex
    body = pattern(PIECES)
    with h2_conn(server.port) as conn:
        conn.send(h2_request(conn, 1, "/echo?id=" + rid))
        for start in range(0, PIECES, H2_BATCH):
            conn.send(h2_frames(1, body[start : start + H2_BATCH], end=False))
            h2_wait_echo(conn, start + H2_BATCH)
        conn.send(h2frames.data(1, b"", end_stream=True))
        resp = conn.response(1)
    assert resp.status == 200 and bytes(resp.body) == body, resp.headers
    value = report(server, rid, "ends")
    assert value["ends"] == [value["messages"] - 1], value
    assert value["messages"] < MAX_MESSAGES, value


def test_h2_last_data_frame_ends_the_stream(server):
    body = pattern(H2_BATCH)
    frames = h2_frames(1, body[:-1], end=False) + h2frames.data(1, body[-1:], end_stream=True)
    assert_exact(h2_count(server, frames), body)


@pytest.mark.parametrize("size", [0, 1])
def test_h1_body_of_at_most_one_byte_is_one_message(server, size):
    body = pattern(size)
    result = h1_count(server, chunked(body))
    assert_exact(result, body)
    assert result["messages"] == 1, result


def test_h2_empty_body_ended_by_an_empty_data_frame_is_one_message(server):
    result = h2_count(server, h2frames.data(1, b"", end_stream=True))
    assert_exact(result, b"")
    assert result["messages"] == 1, result


def test_h1_large_chunks_keep_their_bytes(server):
    # Chunks larger than any merge bound, mixed with tiny ones: still the exact body.
    pieces = [pattern(200_000), b"x", pattern(70_000), b"y" * 3, pattern(1)]
    wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    result = h1_count(server, wire)
    assert_exact(result, b"".join(pieces))


# ---------------------------------------------------------------- chunks queued for a busy app

# Pieces written one by one while the app is busy: the body pump queues the first few as chunks
# of their own (REQUEST_BODY_QUEUE, 4), then waits with one more; hyper and the kernel hold the
# rest. Handed out one by one that is 6 messages or more; merged when the app asks: the queued
# chunks, the one the pump waited with, the rest (and the end, should it come last).
BUSY_PIECES = 20
MAX_BUSY_MESSAGES = 4


def send_to_busy_app(server, sock, send_head, send_piece, send_end):
    """Sends a body in BUSY_PIECES separate writes on ``sock`` while the app waits, then lets
    the app read; returns the body."""
    # No Nagle: a small write would wait for the ACK of the one before and could come last.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rid = uuid.uuid4().hex
    send_head("/count?hold=1&id=" + rid)
    for i in range(BUSY_PIECES):
        send_piece(b"p%02d;" % i)
        time.sleep(0.01)  # apart, so that they need not arrive together
    send_end()
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/release?id=" + rid, [("Connection", "close")]))
        assert conn.read_response().status == 200
    return b"".join(b"p%02d;" % i for i in range(BUSY_PIECES))


def test_h1_chunks_queued_for_a_busy_app_arrive_merged(server):
    with RawConnection(server.port, timeout=30.0) as conn:
        body = send_to_busy_app(
            server,
            conn.sock,
            lambda target: conn.send(
                request_bytes("POST", target, [("Transfer-Encoding", "chunked")])
            ),
            lambda piece: conn.send(b"%x\r\n%s\r\n" % (len(piece), piece)),
            lambda: conn.send(b"0\r\n\r\n"),
        )
        resp = conn.read_response()
    assert resp.status == 200, resp
    result = json.loads(resp.body)
    assert_exact(result, body)
    assert result["messages"] <= MAX_BUSY_MESSAGES, result


def test_h2_frames_queued_for_a_busy_app_arrive_merged(server):
    with h2_conn(server.port) as conn:
        body = send_to_busy_app(
            server,
            conn.sock,
            lambda target: conn.send(h2_request(conn, 1, target)),
            lambda piece: conn.send(h2frames.data(1, piece)),
            lambda: conn.send(h2frames.data(1, b"", end_stream=True)),
        )
        resp = conn.response(1)
    assert resp.status == 200, resp.headers
    result = json.loads(bytes(resp.body))
    assert_exact(result, body)
    assert result["messages"] <= MAX_BUSY_MESSAGES, result


# ---------------------------------------------------------------- the body-size limit


def test_h1_limit_crossed_while_merging_gets_413_and_the_app_a_disconnect(limit_server):
    rid = uuid.uuid4().hex
    body = pattern(LIMIT + 1)
    with RawConnection(limit_server.port, timeout=30.0) as conn:
        head = request_bytes("POST", "/count?id=" + rid, [("Transfer-Encoding", "chunked")])
        conn.send(head + chunked(body, final=b""))  # no end: the limit comes first
        resp = conn.read_response()
        assert resp is not None and resp.status == 413, resp
        assert resp.header("connection") == "close", resp
        assert conn.read_response() is None
    assert_cut_off(report(limit_server, rid, "send"))


def test_h2_limit_crossed_while_merging_gets_413_on_that_stream(limit_server):
    rid = uuid.uuid4().hex
    body = pattern(LIMIT + 1)
    with h2_conn(limit_server.port) as conn:
        conn.send(h2_request(conn, 1, "/count?id=" + rid), h2_frames(1, body, end=False))
        resp = conn.response(1)
        assert resp.status == 413, resp.headers
    assert_cut_off(report(limit_server, rid, "send"))


def assert_cut_off(value):
    """The app got every byte up to the limit, then http.disconnect, and a later send()
    raised ClientDisconnected."""
    types = value["types"]
    assert types[-1] == "http.disconnect" and set(types[:-1]) == {"http.request"}, value
    assert value["size"] == LIMIT, value
    assert value["send"] == "ClientDisconnected", value


# ---------------------------------------------------------------- slow clients


def test_h1_slow_client_gets_each_chunk_through_without_more(server):
    # Lockstep: each chunk must reach the app (and come back) before the next is sent, so a
    # server that waited for more bytes to merge would never answer.
    with RawConnection(server.port, timeout=10.0) as conn:
        conn.send(request_bytes("POST", "/echo", [("Transfer-Encoding", "chunked")]))
        for i in range(5):
            piece = b"piece-%d;" % i
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            assert conn.find(piece) >= 0, bytes(conn.buf)
        conn.send(b"0\r\n\r\n")
        resp = conn.read_response()
    assert resp.status == 200, resp
    assert resp.body == b"".join(b"piece-%d;" % i for i in range(5)), resp


def test_h2_slow_client_gets_each_frame_through_without_more(server):
    with h2_conn(server.port) as conn:
        conn.send(h2_request(conn, 1, "/echo"))
        sent = b""
        for i in range(5):
            piece = b"piece-%d;" % i
            conn.send(h2frames.data(1, piece))
            sent += piece
            h2_wait_echo(conn, len(sent))
        conn.send(h2frames.data(1, b"", end_stream=True))
        resp = conn.response(1)
    assert resp.status == 200, resp.headers
    assert bytes(resp.body) == sent
