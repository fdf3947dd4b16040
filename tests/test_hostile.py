"""Hostile clients (issue #7): disconnects at every stage, resets, half-closed sockets, slow
readers and writers, pipelined garbage and a request-smuggling corpus.

After every scenario the server must answer a normal request on a fresh connection, no
smuggled request may have reached the app, and the worker's open file descriptors and asyncio
tasks must come back to their baseline (``ServerWatch.assert_recovered``).
"""

import json
import socket
import time
import uuid

import pytest

from tests.apps.common import pattern_sha256
from tests.support import hostile
from tests.support.helpers import (
    IncompleteResponse,
    RawConnection,
    request_bytes,
    start_server,
    wait_until,
)


@pytest.fixture(scope="module")
def server():
    with start_server("tests.apps.hostile_app:app") as s:
        yield s


@pytest.fixture(scope="module")
def module_watch(server):
    return hostile.ServerWatch(server).take_baseline()


@pytest.fixture
def watch(module_watch):
    module_watch.resync()
    return module_watch


def report(server, rid):
    return hostile.get_json(server.port, "/report?id=" + rid)


def wait_report(server, rid, predicate, timeout=15.0):
    last = [None]

    def check():
        last[0] = report(server, rid)
        return last[0] is not None and predicate(last[0])

    assert wait_until(check, timeout=timeout, interval=0.1), "report %s: %r" % (rid, last[0])
    return last[0]


# ---------------------------------------------------------------- disconnects at every stage


def _partial_upload_cl(rid):
    head = request_bytes(
        "POST", "/upload_watch?id=" + rid, [("Content-Length", str(5 * 1024 * 1024))]
    )
    return head + b"u" * (300 * 1024)


def _partial_upload_chunked(rid):
    head = request_bytes("POST", "/upload_watch?id=" + rid, [("Transfer-Encoding", "chunked")])
    return head + (b"4000\r\n" + b"c" * 0x4000 + b"\r\n") * 8 + b"4000\r\n" + b"c" * 100


# name -> (bytes to send given an id, whether the app must have been told)
DISCONNECT_STAGES = {
    "before-any-byte": (lambda rid: b"", False),
    "mid-request-line": (lambda rid: b"GET /hel", False),
    "request-line-only": (lambda rid: b"GET /hello HTTP/1.1\r\n", False),
    "mid-headers": (lambda rid: b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Long: abcdef", False),
    "head-complete-body-missing": (
        lambda rid: request_bytes("POST", "/echo", [("Content-Length", "1000")]),
        False,
    ),
    "mid-upload-cl-preread": (
        lambda rid: request_bytes("POST", "/echo", [("Content-Length", "50000")]) + b"p" * 9000,
        False,
    ),
    "mid-upload-cl-streamed": (_partial_upload_cl, True),
    "mid-upload-chunked": (_partial_upload_chunked, True),
    "mid-chunk-size-line": (
        lambda rid: (
            request_bytes("POST", "/upload_watch?id=" + rid, [("Transfer-Encoding", "chunked")])
            + b"5\r\nhello\r\n1f"
        ),
        True,
    ),
}


@pytest.mark.parametrize("rst", [False, True], ids=["fin", "rst"])
@pytest.mark.parametrize("stage", sorted(DISCONNECT_STAGES))
def test_disconnect_during_request(server, watch, stage, rst):
    rid = uuid.uuid4().hex
    make, app_told = DISCONNECT_STAGES[stage]
    hostile.send_then_vanish(server.port, make(rid), rst=rst, linger=0.2)
    if app_told:
        rep = wait_report(server, rid, lambda r: r.get("state") != "reading")
        assert rep["state"] == "disconnect", rep
        assert rep["messages"][-1] == "http.disconnect", rep
    watch.assert_recovered()


@pytest.mark.parametrize("rst", [False, True], ids=["fin", "rst"])
def test_disconnect_mid_response_slow_stream(server, watch, rst):
    """The client leaves while the app streams: the app's next send() fails (or it is
    cancelled) and its task ends."""
    rid = uuid.uuid4().hex
    sock = hostile.connect(server.port)
    try:
        sock.sendall(request_bytes("GET", "/slow_stream?id=" + rid))
        assert len(hostile.read_some(sock, 20000)) >= 20000
    finally:
        hostile.close(sock, rst)
    rep = wait_report(server, rid, lambda r: r.get("state") != "streaming")
    assert rep["state"] == "stopped", rep
    watch.assert_recovered()


@pytest.mark.parametrize("rst", [False, True], ids=["fin", "rst"])
def test_disconnect_mid_response_backpressured(server, watch, rst):
    """The client leaves while a large response is blocked on backpressure."""
    sock = hostile.connect(server.port, rcvbuf=65536)
    try:
        sock.sendall(request_bytes("GET", "/stream?size=%d" % (64 << 20)))
        hostile.read_some(sock, 1 << 20)
        time.sleep(0.2)
    finally:
        hostile.close(sock, rst)
    watch.assert_recovered()


@pytest.mark.parametrize("rst", [False, True], ids=["fin", "rst"])
@pytest.mark.parametrize(
    "extra",
    [b"", b"GET /hel", b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"],
    ids=["nothing", "partial-next", "unread-next"],
)
def test_disconnect_after_response(server, watch, extra, rst):
    with RawConnection(server.port, timeout=10) as conn:
        conn.send(request_bytes("GET", "/hello") + extra)
        resp = conn.read_response()
        assert resp.status == 200 and resp.body == b"hello world"
        if rst:
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, hostile.LINGER_RST)
    watch.assert_recovered()


def test_many_resets_in_a_row(server, watch):
    """50 connections reset at assorted stages, back to back."""
    payloads = [
        b"",
        b"GET /hello HTTP/1.1\r\n",
        request_bytes("GET", "/hello"),
        request_bytes("POST", "/echo", [("Content-Length", "100000")]) + b"x" * 70000,
    ]
    for i in range(50):
        hostile.send_then_vanish(server.port, payloads[i % len(payloads)], rst=True, linger=0)
    watch.assert_recovered()


# ---------------------------------------------------------------- half-closed sockets


def _parse_all(raw):
    conn = RawConnection(sock=socket.socket())  # a parser over bytes we already have
    conn.sock.close()
    conn.buf = bytearray(raw)
    conn.eof = True
    out = []
    while True:
        try:
            resp = conn.read_response()
        except IncompleteResponse as exc:
            out.append(exc.partial)  # a truncated response: the assertions name it
            return out
        if resp is None:
            return out
        out.append(resp)


HALF_CLOSE_TRIES = 5

# A client FIN (shutdown(SHUT_WR)) after a complete request is a half-close (RFC 9112 §9.6):
# the client still reads, so it gets every response it asked for (server/conn_state.rs
# `hold_eof`; test_http11_edges has the slow-app cases). A response must never be partial or
# corrupt, and the worker recovers.


def _all_complete(resps, expected):
    assert len(resps) == len(expected), resps
    assert all(getattr(r, "complete", True) for r in resps), resps
    assert [(r.status, r.body) for r in resps] == expected[: len(resps)], resps


def test_half_closed_get_is_answered(server, watch):
    for _ in range(HALF_CLOSE_TRIES):
        raw = hostile.half_closed_exchange(server.port, request_bytes("GET", "/hello"))
        _all_complete(_parse_all(raw), [(200, b"hello world")])
    watch.assert_recovered()


@pytest.mark.parametrize("size", [1000, 300 * 1024], ids=["preread", "streamed"])
def test_half_closed_post_is_answered(server, watch, size):
    body = bytes(range(256)) * (size // 256)
    for _ in range(HALF_CLOSE_TRIES):
        raw = hostile.half_closed_exchange(server.port, request_bytes("POST", "/echo", body=body))
        resps = _parse_all(raw)
        assert len(resps) == 1, raw[:500]
        if resps:
            assert resps[0].status == 200 and resps[0].complete, raw[:500]
            assert json.loads(resps[0].body)["sha256"] == hostile.sha256(body)
    watch.assert_recovered()


def test_half_closed_large_response_never_truncated_silently(server, watch):
    size = 4 * 1024 * 1024
    for _ in range(HALF_CLOSE_TRIES):
        raw = hostile.half_closed_exchange(
            server.port, request_bytes("GET", "/stream?size=%d" % size), timeout=30
        )
        resps = _parse_all(raw)
        assert len(resps) <= 1, raw[:300]
        if resps and resps[0].complete:
            # A response that ends cleanly must be whole.
            assert len(resps[0].body) == size, resps[0]
            assert hostile.sha256(resps[0].body) == pattern_sha256(size)
    watch.assert_recovered()


def test_half_closed_pipelined_all_answered(server, watch):
    reqs = b"".join(request_bytes("GET", "/hello") for _ in range(3))
    for _ in range(HALF_CLOSE_TRIES):
        raw = hostile.half_closed_exchange(server.port, reqs)
        _all_complete(_parse_all(raw), [(200, b"hello world")] * 3)
    watch.assert_recovered()


# ---------------------------------------------------------------- slow readers and writers


def test_slow_reader_20mb_intact(server, watch):
    size = 20 * 1024 * 1024
    sock = hostile.connect(server.port, rcvbuf=65536)
    conn = RawConnection(sock=sock, timeout=30)
    try:
        conn.send(request_bytes("GET", "/stream?size=%d" % size))
        # ~64 KB/s for 3 s, then everything as fast as possible
        slow = hostile.slow_read(sock, seconds=3.0, rate=64 * 1024)
        assert slow, "nothing arrived while reading slowly"
        conn.buf += slow
        resp = conn.read_response()
    finally:
        conn.close()
    assert resp.status == 200
    assert len(resp.body) == size
    assert hostile.sha256(resp.body) == pattern_sha256(size)
    watch.assert_recovered()


def test_slow_writer_head_byte_by_byte(server, watch):
    with RawConnection(server.port, timeout=30) as conn:
        hostile.dribble(conn, request_bytes("GET", "/hello", [("X-Dribble", "yes")]), delay=0.01)
        resp = conn.read_response()
    assert resp.status == 200 and resp.body == b"hello world"
    watch.assert_recovered()


def test_slow_writer_body_byte_by_byte(server, watch):
    body = b"slow-body-" * 30
    with RawConnection(server.port, timeout=30) as conn:
        hostile.dribble(conn, request_bytes("POST", "/echo", body=body), delay=0.002)
        resp = conn.read_response()
    assert resp.status == 200
    assert json.loads(resp.body)["body"] == body.decode()
    watch.assert_recovered()


def test_slow_writer_chunked_byte_by_byte(server, watch):
    pieces = [b"alpha-", b"beta-" * 10, b"gamma"]
    wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    with RawConnection(server.port, timeout=30) as conn:
        conn.send(request_bytes("POST", "/echo", [("Transfer-Encoding", "chunked")]))
        hostile.dribble(conn, wire, delay=0.003)
        resp = conn.read_response()
    assert resp.status == 200
    assert json.loads(resp.body)["body"] == b"".join(pieces).decode()
    watch.assert_recovered()


# ---------------------------------------------------------------- pipelined garbage


GARBAGE = {
    "tls-client-hello": b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 32,
    "words": b"GARBAGE GARBAGE GARBAGE\r\n\r\n",
    "no-version": b"GET /hello\r\n\r\n",
    "nul-bytes": b"\x00\x00\x00\x00\r\n\r\n",
    "bad-header-line": b"GET /hello HTTP/1.1\r\nHost: x\r\nNo Colon Here\r\n\r\n",
    "space-in-target": b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",
}


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_pipelined_garbage_after_valid_request(server, watch, garbage):
    with RawConnection(server.port, timeout=10) as conn:
        conn.send(request_bytes("GET", "/hello") + GARBAGE[garbage] + hostile.SMUGGLED)
        responses, closed = hostile.read_responses(conn, idle=3.0)
    summary = [(r.status, r.body[:40]) for r in responses]
    assert summary[:1] == [(200, b"hello world")], summary
    assert len(responses) == 2 and responses[1].status == 400, summary
    assert closed, "connection left open after the garbage"
    watch.assert_recovered()


# ---------------------------------------------------------------- request smuggling corpus


# hyper's chunked decoder skips a chunk extension up to the first CRLF without parsing quoted
# strings, so `5;ext="a<CRLF>...` is accepted instead of refused (llhttp and h11 refuse it).
# Exploitable only behind a proxy that lets a quoted string span CRLF; tracked, not hidden.
_KNOWN_HYPER_GAPS = {"chunk-ext-quoted-crlf"}


def _corpus_params():
    for name, payload in hostile.SMUGGLING_CORPUS:
        marks = ()
        if name in _KNOWN_HYPER_GAPS:
            marks = pytest.mark.xfail(strict=True, reason="hyper ignores chunk-ext quoting")
        yield pytest.param(payload, id=name, marks=marks)


@pytest.mark.parametrize("payload", list(_corpus_params()))
def test_smuggling_corpus(server, watch, payload):
    with RawConnection(server.port, timeout=10) as conn:
        try:
            conn.send(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        responses, closed = hostile.read_responses(conn, idle=1.5)
    summary = [(r.status, r.body[:60]) for r in responses]
    assert all(b"SMUGGLED" not in r.body for r in responses), summary
    assert len(responses) <= 1, "one request answered as several: %r" % summary
    watch.assert_recovered()
