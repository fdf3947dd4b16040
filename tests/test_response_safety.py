"""Response-side safety (issue #7): the server never puts what an app got wrong on the wire.

* CR, LF or NUL in a response header name or value: ``send()`` raises ValueError and nothing
  is written (the app can still answer properly afterwards).
* Invalid status codes (99, 600, 1000, "200", True, ...): ``send()`` refuses them.
* A Content-Length the app declares that disagrees with the bytes it sends (fewer or more,
  single message or streamed) aborts the response: the client never receives a
  complete-looking response with wrong framing, the connection is not reused out of sync, and
  a new connection works.
"""

import json
import socket
import uuid

import pytest

from tests.support import hostile
from tests.support.helpers import IncompleteResponse, RawConnection, request_bytes, start_server


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


def get_raw(port, target):
    with RawConnection(port, timeout=10) as conn:
        conn.send(request_bytes("GET", target, [("Connection", "close")]))
        return conn.read_response()


@pytest.mark.parametrize("char", ["cr", "lf", "nul", "crlf"])
@pytest.mark.parametrize("where", ["name", "value"])
def test_header_with_control_chars_refused(server, watch, where, char):
    resp = get_raw(server.port, "/bad_header?where=%s&char=%s" % (where, char))
    assert resp is not None and resp.status == 200, resp
    assert b"x-injected" not in resp.raw_head.lower(), resp.raw_head
    assert resp.header("x-bad") is None, resp.raw_head
    result = json.loads(resp.body)
    assert result["raised"] is not None, "send() accepted a header with %s in its %s" % (
        char,
        where,
    )
    assert result["raised"]["type"] == "ValueError", result
    watch.assert_recovered()


@pytest.mark.parametrize("value", ["99", "600", "1000", "str200", "true", "neg", "none"])
def test_invalid_status_refused(server, watch, value):
    resp = get_raw(server.port, "/bad_status?value=" + value)
    assert resp is not None, "no response"
    assert resp.status == 200 and resp.body != b"accepted", "send() accepted status %s: %r" % (
        value,
        resp,
    )
    result = json.loads(resp.body)
    assert result["raised"]["type"] in ("TypeError", "ValueError"), result
    watch.assert_recovered()


@pytest.mark.parametrize("streamed", ["0", "1"], ids=["single", "streamed"])
@pytest.mark.parametrize("mode", ["fewer", "more"])
def test_wrong_content_length_aborts(server, watch, mode, streamed):
    """Content-Length: 100 declared; 60 (fewer) or 140 (more) bytes sent."""
    rid = uuid.uuid4().hex
    conn = RawConnection(server.port, timeout=10)
    try:
        # A second request is pipelined right behind: if the server kept the connection in
        # use after a body of the wrong length, its response would be read as (part of) the
        # first one, or the first one's extra bytes as the start of the second.
        conn.send(
            request_bytes("GET", "/bad_length?id=%s&mode=%s&streamed=%s" % (rid, mode, streamed))
            + request_bytes("GET", "/hello")
        )
        aborted = False
        try:
            resp = conn.read_response()
        except IncompleteResponse as exc:
            resp, aborted = exc.partial, True
        except socket.timeout:
            raise AssertionError("server left the client waiting for the missing bytes") from None
        if resp is None:
            aborted = True  # closed before any response byte: fine
        elif not aborted:
            # A complete response is acceptable only as an error the server made itself
            # (the app's response was refused before anything was written).
            assert resp.status == 500, (
                "a complete-looking response with the app's wrong framing reached the "
                "client: %r" % resp
            )
        if aborted:
            assert b"HTTP/1.1" not in (resp.body if resp is not None else b""), resp
            del conn.buf[:]  # the partial response was already taken
            assert conn.eof or conn.is_closed_by_peer(timeout=5), (
                "aborted response, connection left open"
            )
        else:
            # The connection may go on, but only in sync: the next response is intact.
            try:
                nxt = conn.read_response()
            except (OSError, IncompleteResponse):
                nxt = None
            if nxt is not None:
                assert (nxt.status, nxt.body) == (200, b"hello world"), nxt
    finally:
        conn.close()
    rep = hostile.get_json(server.port, "/report?id=" + rid)
    print("app-side outcome (%s, streamed=%s): %r; client saw: %r" % (mode, streamed, rep, resp))
    watch.assert_recovered()
