"""Response trailers: sent on HTTP/2 (h2c prior knowledge) as a trailing HEADERS frame,
advertised only there; on HTTP/1.1 they are accepted and dropped; invalid trailer messages
raise the documented errors."""

import hashlib
import json
import time

import httpx
import pytest

from tests.support.h2client import H2Client
from tests.support.helpers import RawConnection, request_bytes, wait_until

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


def test_extension_advertised_on_h2_only(server):
    with H2Client(server.port) as client:
        scope = json.loads(bytes(client.get("/scope").data))
    assert scope == {"http_version": "2", "trailers": {}}
    scope = httpx.get(f"http://127.0.0.1:{server.port}/scope").json()
    assert scope == {"http_version": "1.1", "trailers": None}
    # Even a client that accepts trailers does not get them over HTTP/1.1.
    scope = httpx.get(f"http://127.0.0.1:{server.port}/scope", headers={"TE": "trailers"}).json()
    assert scope["trailers"] is None


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


def test_h1_trailers_dropped_body_intact(server):
    url = f"http://127.0.0.1:{server.port}"
    with httpx.Client() as client:
        for path in (
            "/trailers?parts=1",
            "/trailers?parts=3&splits=3",
            "/empty",
            "/forgot",
            "/raise",
        ):
            resp = client.get(url + path, headers={"TE": "trailers"})
            assert resp.status_code == 200
        assert client.get(url + "/trailers").content == BODY3


@pytest.mark.parametrize("te", [None, "trailers"])
def test_h1_wire_has_no_trailer_fields(server, te):
    headers = [("TE", te)] if te else []
    with RawConnection(server.port) as conn:
        for path in ("/trailers?parts=3", "/trailers?parts=1", "/forgot"):
            conn.send(request_bytes("GET", path, headers))
            resp = conn.read_response()
            assert resp.status == 200 and resp.complete is not False
            assert resp.header("trailer") is None
        # Keep-alive survives: the framing was right.
        conn.send(request_bytes("GET", "/trailers?parts=3"))
        resp = conn.read_response()
        assert resp.body == BODY3
        # Nothing after the last response (no stray trailer section).
        assert not conn.buf


@pytest.mark.parametrize("kind, exc, msg", ERRORS, ids=[e[0] for e in ERRORS])
def test_h1_invalid_messages(server, kind, exc, msg):
    url = f"http://127.0.0.1:{server.port}"
    with httpx.Client() as client:
        resp = client.get(f"{url}/broken?kind={kind}&id=h1-{kind}")
        assert resp.status_code == 200 and resp.content == b"body"
        report = client.get(f"{url}/report?id=h1-{kind}").json()
    assert report["exc"] == exc, report
    assert msg in report["msg"], report
