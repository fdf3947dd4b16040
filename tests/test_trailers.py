"""Response trailers: sent on HTTP/2 (h2c prior knowledge) as a trailing HEADERS frame, and on
HTTP/1.1 after the last chunk when the request says ``TE: trailers`` (advertised exactly
there); otherwise accepted and dropped; invalid trailer messages raise the documented
errors."""

import hashlib
import json
import time
from urllib.parse import quote

import httpx
import pytest

from tests.support.h2client import H2Client
from tests.support.helpers import IncompleteResponse, RawConnection, request_bytes, wait_until

APP = "tests.apps.trailers_app:app"
BODY3 = b"part-0;part-1;part-2;"
TRAILERS = [
    ("x-checksum", hashlib.sha256(BODY3).hexdigest()),
    ("x-trailer", "yes"),
    ("x-extra", "1"),
    ("x-extra", "2"),
]


@pytest.fixture
def server(server_factory):
    return server_factory(APP)


def h2_report(client, rid, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = json.loads(bytes(client.get("/report?id=" + rid).data))
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"no report for {rid}")
        time.sleep(0.05)


# ---------------------------------------------------------------- advertising


def test_extension_advertised_where_trailers_reach_the_client(server):
    with H2Client(server.port) as client:
        scope = json.loads(bytes(client.get("/scope").data))
    assert scope == {"http_version": "2", "trailers": {}}
    url = f"http://127.0.0.1:{server.port}/scope"
    assert httpx.get(url).json() == {"http_version": "1.1", "trailers": None}
    for te in ("trailers", "gzip, Trailers"):
        scope = httpx.get(url, headers={"TE": te}).json()
        assert scope == {"http_version": "1.1", "trailers": {}}, te
    assert httpx.get(url, headers={"TE": "gzip"}).json()["trailers"] is None
    # HTTP/1.0 has no chunked framing to carry them.
    with RawConnection(server.port) as conn:
        conn.send(b"GET /scope HTTP/1.0\r\nTE: trailers\r\n\r\n")
        resp = conn.read_response()
    assert json.loads(resp.body) == {"http_version": "1.0", "trailers": None}


# ---------------------------------------------------------------- HTTP/2


@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("splits", [1, 3])
def test_h2_trailers_after_data(server, parts, splits):
    body = b"".join(b"part-%d;" % i for i in range(parts))
    with H2Client(server.port) as client:
        events = []
        handle = client._handle

        def record(event):
            events.append(type(event).__name__)
            handle(event)

        client._handle = record
        stream = client.get(f"/trailers?parts={parts}&splits={splits}")
    assert stream.status == 200 and stream.reset is None and stream.ended
    assert bytes(stream.data) == body
    expected = [(n, v) for n, v in TRAILERS]
    expected[0] = ("x-checksum", hashlib.sha256(body).hexdigest())
    assert stream.trailers == expected
    # Data first, then the trailing HEADERS frame that ends the stream.
    tail = [e for e in events if e in ("DataReceived", "TrailersReceived", "StreamEnded")]
    assert tail[-2:] == ["TrailersReceived", "StreamEnded"]
    assert "DataReceived" not in tail[tail.index("TrailersReceived") :]


def test_h2_empty_trailers_end_the_stream(server):
    with H2Client(server.port) as client:
        stream = client.get("/empty")
    assert stream.ended and stream.reset is None
    assert bytes(stream.data) == b"no trailers" and stream.trailers is None


def test_h2_promised_but_not_sent_still_ends(server):
    start = len(server.output())
    with H2Client(server.port) as client:
        stream = client.get("/forgot")
        assert stream.ended and stream.reset is None and stream.trailers is None
        assert bytes(stream.data) == b"body done"
        # The connection stays usable.
        assert client.get("/trailers").trailers == TRAILERS
    wait_until(
        lambda: "without sending 'http.response.trailers'" in server.output()[start:], timeout=5
    )


def test_h2_raise_after_body_resets_stream(server):
    with H2Client(server.port) as client:
        stream = client.get("/raise")
        assert stream.reset is not None and stream.trailers is None
        # Only that stream: the connection goes on.
        assert client.get("/trailers").trailers == TRAILERS


# ---------------------------------------------------------------- invalid messages

ERRORS = [
    ("bad_flag", "TypeError", "'trailers' must be a bool, got str"),
    ("not_promised", "RuntimeError", "did not set 'trailers': True"),
    ("before_start", "RuntimeError", "Expected ASGI message 'http.response.start'"),
    ("before_body", "RuntimeError", "response body is not complete"),
    ("mid_body", "RuntimeError", "response body is not complete"),
    ("body_after", "RuntimeError", "expected 'http.response.trailers'"),
    ("forbidden", "ValueError", '"content-length", which is not allowed in trailers'),
    ("hop", "ValueError", '"connection", which is not allowed in trailers'),
    ("pseudo", "ValueError", 'invalid header name ":status"'),
    ("bad_value", "ValueError", 'invalid value for header "x-bad"'),
    ("str_name", "TypeError", "header names in 'headers' must be bytes, got str"),
]


@pytest.mark.parametrize("kind, exc, msg", ERRORS, ids=[e[0] for e in ERRORS])
def test_h2_invalid_messages(server, kind, exc, msg):
    with H2Client(server.port) as client:
        stream = client.get(f"/broken?kind={kind}&id=h2-{kind}")
        report = h2_report(client, f"h2-{kind}")
    assert report["exc"] == exc, report
    assert msg in report["msg"], report
    # The app recovered: the response is whole.
    assert stream.ended and stream.reset is None
    assert bytes(stream.data) == b"body"
    if kind == "not_promised":
        assert stream.trailers is None
    else:
        assert stream.trailers == [("x-after", "ok")]


# ---------------------------------------------------------------- HTTP/1.1


NAMED = "x-checksum, x-trailer, x-extra"
NAMED_Q = quote(NAMED)


def h1_get(conn, path, te=True):
    conn.send(request_bytes("GET", path, [("TE", "trailers")] if te else []))
    return conn.read_response()


@pytest.mark.parametrize("parts, splits", [(1, 1), (3, 1), (3, 3)])
def test_h1_trailers_after_the_last_chunk(server, parts, splits):
    body = b"".join(b"part-%d;" % i for i in range(parts))
    with RawConnection(server.port) as conn:
        resp = h1_get(conn, f"/trailers?parts={parts}&splits={splits}&named={NAMED_Q}")
        assert resp.status == 200 and resp.framing == "chunked"
        assert resp.header("trailer") == NAMED
        assert resp.body == body
        expected = [(n, v) for n, v in TRAILERS]
        expected[0] = ("x-checksum", hashlib.sha256(body).hexdigest())
        assert resp.trailers == expected
        # The framing was right: the connection serves the next request.
        again = h1_get(conn, f"/trailers?named={NAMED_Q}")
        assert again.body == BODY3 and again.trailers == TRAILERS
        assert not conn.buf


def test_h1_declared_length_becomes_chunked_when_trailers_go(server):
    """Trailers follow only a chunked body: the app's Content-Length is checked, not sent."""
    with RawConnection(server.port) as conn:
        resp = h1_get(conn, f"/trailers?length=1&named={NAMED_Q}")
        assert resp.framing == "chunked" and resp.header("content-length") is None
        assert resp.body == BODY3 and resp.trailers == TRAILERS
        # Without TE: trailers the same response keeps its length and has no trailers.
        resp = h1_get(conn, f"/trailers?length=1&named={NAMED_Q}", te=False)
        assert resp.framing == "content-length" and resp.body == BODY3
        assert resp.trailers == []


def test_h1_only_named_fields_are_sent(server):
    with RawConnection(server.port) as conn:
        resp = h1_get(conn, "/trailers?named=x-trailer")
        assert resp.body == BODY3 and resp.trailers == [("x-trailer", "yes")]


def test_h1_unnamed_trailers_dropped_with_one_warning(server):
    start = len(server.output())
    with RawConnection(server.port) as conn:
        for _ in range(2):
            resp = h1_get(conn, "/trailers?parts=3")
            assert resp.body == BODY3 and resp.trailers == []
    wait_until(lambda: "without a 'trailer' header" in server.output()[start:], timeout=5)
    assert server.output()[start:].count("without a 'trailer' header") == 1


def test_h1_without_te_no_trailer_fields(server):
    with RawConnection(server.port) as conn:
        for path in ("/trailers?parts=3", f"/trailers?parts=1&named={NAMED_Q}", "/forgot"):
            resp = h1_get(conn, path, te=False)
            assert resp.status == 200 and resp.complete is not False
            assert resp.trailers == []
        resp = h1_get(conn, "/trailers?parts=3", te=False)
        assert resp.body == BODY3
        assert not conn.buf


@pytest.mark.parametrize("te", [False, True])
def test_h1_empty_or_missing_trailers_end_cleanly(server, te):
    with RawConnection(server.port) as conn:
        resp = h1_get(conn, "/empty", te=te)
        assert resp.body == b"no trailers" and resp.trailers == []
        resp = h1_get(conn, "/forgot", te=te)
        assert resp.body == b"body done" and resp.trailers == []
        assert h1_get(conn, f"/trailers?named={NAMED_Q}", te=te).body == BODY3


def test_h1_raise_after_body_aborts_only_with_trailers_due(server):
    url = f"http://127.0.0.1:{server.port}"
    # Trailers cannot follow: the body is whole, the response ends cleanly.
    assert httpx.get(url + "/raise").content == b"body"
    # Trailers were due: the connection is aborted, never a clean end (hyper may drop the
    # buffered head and body with it, or cut the chunked body short).
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/raise", [("TE", "trailers")]))
        try:
            resp = conn.read_response()
        except IncompleteResponse:
            resp = None
        assert resp is None
    assert httpx.get(url + "/trailers").content == BODY3


@pytest.mark.parametrize("te", [False, True], ids=["no-te", "te-trailers"])
@pytest.mark.parametrize("kind, exc, msg", ERRORS, ids=[e[0] for e in ERRORS])
def test_h1_invalid_messages(server, kind, exc, msg, te):
    """The same validation as on HTTP/2, whether or not the trailers can go out."""
    url = f"http://127.0.0.1:{server.port}"
    rid = f"h1-{kind}-{te}"
    headers = {"TE": "trailers"} if te else {}
    with httpx.Client() as client:
        resp = client.get(f"{url}/broken?kind={kind}&id={rid}", headers=headers)
        assert resp.status_code == 200 and resp.content == b"body"
        report = client.get(f"{url}/report?id={rid}").json()
    assert report["exc"] == exc, report
    assert msg in report["msg"], report
