"""103 Early Hints (the ASGI ``http.response.early_hint`` extension): sent on HTTP/1.1 and
HTTP/3 as a ``103 Early Hints`` head with one ``Link`` field per entry, before the final
response and while the app still works; advertised exactly there; dropped for HTTP/1.0
clients and on HTTP/2 (hyper has no server API for a 1xx); pipelined HTTP/1.1 responses keep
their order; a malformed or late hint raises naming the key; the access log shows the final
status."""

import asyncio
import json
import subprocess
import uuid

import pytest

from tests.support.h2client import H2Client
from tests.support.helpers import RawConnection, request_bytes, start_server
from tests.support.tls_certs import certs

APP = "tests.apps.early_hints_app:app"


def expected_links(tag, i):
    return [
        f"</{tag}{i}.css>; rel=preload; as=style",
        f"</{tag}{i}.js>; rel=preload; as=script",
    ]


@pytest.fixture(scope="module")
def server():
    server = start_server(APP, "--access-log", "--limit-request-body", "64")
    yield server
    server.close()


def get(port, target, version="HTTP/1.1"):
    """One request; (informational responses, final response)."""
    with RawConnection(port) as conn:
        conn.send(request_bytes("GET", target, version=version))
        informational = []
        final = conn.read_response(informational=informational)
    return informational, final


# ---------------------------------------------------------------- HTTP/1.1


def test_each_hint_is_a_103_with_a_link_field_per_entry(server):
    informational, final = get(server.port, "/hint?n=3&tag=a")
    assert [r.status for r in informational] == [103, 103, 103]
    for i, hint in enumerate(informational):
        assert hint.raw_head.startswith(b"HTTP/1.1 103 Early Hints\r\n")
        assert [name for name, _ in hint.headers] == ["Link", "Link"]
        assert hint.header_all("link") == expected_links("a", i)
    assert final.status == 200
    assert final.body == b"a"
    assert final.header("link") is None, "the final response carries only its own fields"


def test_the_103_arrives_while_the_app_still_waits(server):
    """The app hints, then waits for the request body: the 103 must come before it."""
    with RawConnection(server.port) as conn:
        conn.send(
            request_bytes("POST", "/hint-then-read", headers=[("Transfer-Encoding", "chunked")])
        )
        version, status, reason, headers, raw = conn.read_head()
        assert (version, status, reason) == ("HTTP/1.1", 103, "Early Hints")
        assert [v for _, v in headers] == expected_links("w", 0)
        conn.send(b"4\r\nbody\r\n0\r\n\r\n")
        final = conn.read_response()
    assert final.status == 200
    assert final.body == b"read body"


def test_the_server_own_answer_after_a_hint_follows_it(server):
    """A request body over --limit-request-body after the app hinted: the 413 the server
    answers itself comes after the 103, as a final response."""
    with RawConnection(server.port) as conn:
        conn.send(
            request_bytes("POST", "/hint-then-read", headers=[("Transfer-Encoding", "chunked")])
        )
        informational = []
        head = conn.read_head()
        assert head[1] == 103
        conn.send(b"80\r\n" + b"x" * 128 + b"\r\n0\r\n\r\n")
        final = conn.read_response(informational=informational)
    assert informational == []
    assert final.status == 413


def test_pipelined_responses_keep_their_order(server):
    """The first response is large, so hyper still holds its tail unwritten (the client reads
    nothing until everything is sent) when the next request's hints come: they must still go
    after it."""
    size = 2_000_000
    with RawConnection(server.port, timeout=20) as conn:
        conn.send(
            request_bytes("GET", f"/hint?n=1&tag=p&size={size}")
            + request_bytes("GET", "/extensions")
            + request_bytes("GET", "/hint?n=2&tag=q")
            + request_bytes("GET", "/hint?n=0&tag=r")
        )
        seen = []
        for _ in range(4):
            informational = []
            final = conn.read_response(informational=informational)
            seen.append(([r.header_all("link") for r in informational], final))
    (h1, r1), (h2, r2), (h3, r3), (h4, r4) = seen
    assert h1 == [expected_links("p", 0)]
    assert r1.status == 200 and r1.body == b"p" * size
    assert h2 == [] and r2.status == 200 and b"http.response.early_hint" in r2.body
    assert h3 == [expected_links("q", 0), expected_links("q", 1)]
    assert r3.status == 200 and r3.body == b"q"
    assert h4 == [] and r4.status == 200 and r4.body == b"r"


def test_advertised_on_http11_not_to_http10_clients(server):
    _, final = get(server.port, "/extensions")
    assert "http.response.early_hint" in json.loads(final.body)
    _, final = get(server.port, "/extensions", version="HTTP/1.0")
    assert "http.response.early_hint" not in json.loads(final.body)


def test_an_http10_client_gets_no_103(server):
    informational, final = get(server.port, "/hint?n=2&tag=old", version="HTTP/1.0")
    assert informational == []
    assert final.status == 200
    assert final.body == b"old"


BAD = [
    ("not-a-list", "TypeError: 'links' must be a list of bytes, got bytes"),
    ("str-entry", "TypeError: 'links'[0] must be bytes, got str"),
    ("crlf", "ValueError: 'links'[0] is not a valid header value"),
    ("nul", "ValueError: 'links'[0] is not a valid header value"),
    ("empty-entry", "ValueError: 'links'[0] is empty"),
    ("missing", "ValueError: 'http.response.early_hint' message is missing the required 'links'"),
    ("too-many", "ValueError: 'links' has 101 entries"),
    (
        "after-start",
        "RuntimeError: Unexpected ASGI message 'http.response.early_hint': only allowed "
        "before 'http.response.start'",
    ),
]


@pytest.mark.parametrize("case,error", BAD, ids=[case for case, _ in BAD])
def test_a_malformed_or_late_hint_raises_naming_the_key(server, case, error):
    informational, final = get(server.port, f"/bad?case={case}")
    assert informational == [], "nothing of a refused hint goes out"
    assert final.status == 200
    assert final.body.decode().startswith(error), final.body


def test_the_access_log_shows_the_final_status(server):
    tag = uuid.uuid4().hex
    _, final = get(server.port, f"/hint?n=2&tag={tag}")
    assert final.status == 200
    assert server.wait_for_output(tag, timeout=10), server.output()
    lines = [line for line in server.output().splitlines() if tag in line]
    assert len(lines) == 1, lines
    assert " 200" in lines[0] and "103" not in lines[0].replace(tag, ""), lines[0]


# ---------------------------------------------------------------- HTTP/2


def test_http2_neither_advertises_nor_sends(server):
    """hyper 1.x cannot send a 1xx on a server stream: not advertised; a hint sent all the
    same is dropped and the response is whole."""
    with H2Client(server.port) as client:
        ext = client.get("/extensions")
        assert "http.response.early_hint" not in json.loads(bytes(ext.data))
        hinted = client.get("/hint?n=2&tag=h2")
        assert hinted.status == 200
        assert bytes(hinted.data) == b"h2"


# ---------------------------------------------------------------- HTTP/3

needs_h3 = pytest.mark.skipif(
    subprocess.run(["openssl", "version"], capture_output=True).returncode != 0,
    reason="needs the openssl command line tool",
)


@pytest.fixture(scope="module")
def h3():
    h3client = pytest.importorskip("tests.support.h3client", reason="needs aioquic")
    c = certs()
    server = start_server(
        APP,
        "--http3",
        "--ssl-certfile",
        c.path("server.pem"),
        "--ssl-keyfile",
        c.path("server.key"),
    )
    yield server, c, h3client
    server.close()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def links_of(head):
    return [v.decode() for k, v in head if k == b"link"]


@needs_h3
def test_http3_sends_each_hint_as_a_103_head(h3):
    server, c, h3client = h3

    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            hinted = await client.request("GET", "/hint?n=2&tag=q")
            ext = await client.request("GET", "/extensions")
            return hinted, ext

    hinted, ext = run(main())
    assert [dict(h)[b":status"] for h in hinted.informational] == [b"103", b"103"]
    assert [links_of(h) for h in hinted.informational] == [
        expected_links("q", 0),
        expected_links("q", 1),
    ]
    assert hinted.status == 200 and bytes(hinted.body) == b"q"
    assert "http.response.early_hint" in json.loads(bytes(ext.body))


@needs_h3
def test_http3_the_103_arrives_while_the_app_still_waits(h3):
    server, c, h3client = h3

    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            ex = client.start("POST", "/hint-then-read", end=False)
            while not ex.informational:
                assert not ex.done.is_set(), "the response came without its hint first"
                await asyncio.sleep(0.01)
            assert ex.headers is None
            client.send_body(ex, b"body", end=True)
            await asyncio.wait_for(ex.done.wait(), 20)
            return ex

    ex = run(main())
    assert [links_of(h) for h in ex.informational] == [expected_links("w", 0)]
    assert ex.status == 200 and bytes(ex.body) == b"read body"


@needs_h3
def test_http3_a_late_hint_raises(h3):
    server, c, h3client = h3

    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            return await client.request("GET", "/bad?case=after-start")

    ex = run(main())
    assert ex.informational == []
    assert bytes(ex.body).startswith(b"RuntimeError: Unexpected ASGI message")
