"""103 Early Hints (the ASGI ``http.response.early_hint`` extension): sent on HTTP/1.1 and
HTTP/2 (h2c and TLS) and HTTP/3 as a ``103 Early Hints`` head with one ``Link`` field per
entry, before the final response and while the app still works; advertised exactly there;
dropped for HTTP/1.0 clients and for an HTTP/2 client that shrank its HPACK table;
pipelined HTTP/1.1 responses keep their order, concurrent HTTP/2 streams each get their own;
a malformed or late hint raises naming the key; the access log shows the final status."""

import asyncio
import json
import subprocess
import uuid

import h2.settings
import pytest

from tests.support.h2client import H2Client, Stream, tls_context
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


def h2_links(head):
    return [v for k, v in head if k == "link"]


def assert_hinted(stream, tag, n):
    """n 103s, each with its two links and nothing else, all before the final response."""
    assert stream.events[: n + 1] == ["informational"] * n + ["response"], stream.events
    for i, head in enumerate(stream.informational):
        assert head[0] == (":status", "103")
        assert [k for k, _ in head] == [":status", "link", "link"]
        assert h2_links(head) == expected_links(tag, i)
    assert stream.status == 200
    assert stream.header("link") is None, "the final response carries only its own fields"


@pytest.fixture(scope="module")
def h2_tls():
    c = certs()
    server = start_server(APP, "--ssl-certfile", c.server_pem, "--ssl-keyfile", c.server_key)
    yield server, c
    server.close()


def test_http2_each_hint_is_a_103_with_a_link_field_per_entry(server):
    with H2Client(server.port) as client:
        ext = client.get("/extensions")
        assert "http.response.early_hint" in json.loads(bytes(ext.data))
        hinted = client.get("/hint?n=3&tag=b")
        assert_hinted(hinted, "b", 3)
        assert bytes(hinted.data) == b"b"
        # And a request without hints on the same connection: nothing extra.
        plain = client.get("/hint?n=0&tag=p")
        assert plain.informational == [] and bytes(plain.data) == b"p"


def test_http2_over_tls_each_hint_is_a_103(h2_tls):
    server, c = h2_tls
    with H2Client(server.port, tls_context=tls_context(c.ca_pem)) as client:
        ext = client.get("/extensions")
        assert "http.response.early_hint" in json.loads(bytes(ext.data))
        hinted = client.get("/hint?n=2&tag=t&size=100000")
        assert_hinted(hinted, "t", 2)
        assert bytes(hinted.data) == b"t" * 100000


def test_http2_the_103_arrives_while_the_app_still_waits(server):
    with H2Client(server.port) as client:
        sid = client.request("POST", "/hint-then-read", end_stream=False)
        stream = client.streams[sid]
        while not stream.informational:
            assert stream.headers is None, "the response came without its hint first"
            assert client.receive_once()
        assert stream.headers is None
        assert h2_links(stream.informational[0]) == expected_links("w", 0)
        client.send_body(sid, b"body")
        client.wait(sid)
    assert stream.status == 200 and bytes(stream.data) == b"read body"


def test_http2_hints_to_a_stream_the_client_reset_leave_the_connection_whole(server):
    """The client resets a stream whose app then hints (after reading the body it never
    gets) while another stream's app hints and waits: the connection and its other streams
    go on."""
    with H2Client(server.port) as client:
        gone = client.request("POST", "/read-then-hint?n=5&tag=gone", end_stream=False)
        waiting = client.request("POST", "/hint-then-read", end_stream=False)
        client.reset(gone)
        while not client.streams[waiting].informational:
            assert client.receive_once()
        client.send_body(waiting, b"body")
        client.wait(waiting)
        assert bytes(client.streams[waiting].data) == b"read body"
        assert_hinted(client.get("/hint?n=2&tag=next"), "next", 2)
        assert client.terminated is None


def open_streams(client, targets):
    """Open one stream per (method, path) with a single write: h2 reads their HEADERS at
    once. The streams stay open for a body."""
    sids = []
    for method, path in targets:
        sid = client.conn.get_next_available_stream_id()
        client.streams[sid] = Stream(sid)
        head = [
            (":method", method),
            (":path", path),
            (":scheme", client.scheme),
            (":authority", client.authority),
        ]
        client.conn.send_headers(sid, head, end_stream=False)
        sids.append(sid)
    client.flush()
    return sids


@pytest.mark.parametrize("transport", ["h2c", "tls"])
def test_http2_concurrent_streams_each_get_their_own_hints(server, h2_tls, transport):
    """Streams that hint and streams that stream their bodies share one connection; the
    hints are written between the other streams' DATA frames, each on its own stream."""
    if transport == "tls":
        port, kwargs = h2_tls[0].port, {"tls_context": tls_context(h2_tls[1].ca_pem)}
    else:
        port, kwargs = server.port, {}
    chunks, size = 8, 16384
    with H2Client(port, **kwargs) as client:
        targets = []
        for i in range(16):
            if i % 4 == 0:
                targets.append(("POST", f"/stream?chunks={chunks}&size={size}"))
            else:
                targets.append(("POST", f"/read-then-hint?n=3&tag=c{i}x"))
        sids = open_streams(client, targets)
        streaming = [sid for sid, t in zip(sids, targets) if t[1].startswith("/stream")]
        hinting = {sid: t[1].split("tag=")[1] for sid, t in zip(sids, targets) if "tag" in t[1]}
        # The streaming streams are mid-body...
        while not all(client.streams[s].data for s in streaming):
            assert client.receive_once()
        # ...when every stream gets its request body, in one write: the hinting apps hint
        # while the streaming ones send their second half.
        for sid in sids:
            client.conn.send_data(sid, b"x", end_stream=True)
        client.flush()
        client.wait(*sids)
        for sid in streaming:
            stream = client.streams[sid]
            assert stream.informational == [] and stream.status == 200
            assert len(stream.data) == 2 * chunks * size
        for sid, tag in hinting.items():
            stream = client.streams[sid]
            assert_hinted(stream, tag, 3)
            assert bytes(stream.data) == tag.encode()
        # The connection still works after all that.
        assert bytes(client.get("/hint?n=1&tag=after").data) == b"after"


def test_http2_a_client_that_shrank_its_hpack_table_still_gets_its_103s(server):
    """After SETTINGS_HEADER_TABLE_SIZE 0 the 103s go through the same HPACK encoder as
    every other header block (h2's `send_informational`), so they arrive and HPACK stays
    intact: each response whole after them."""
    settings = {h2.settings.SettingCodes.HEADER_TABLE_SIZE: 0}
    with H2Client(server.port, settings=settings) as client:
        for tag in ("z", "y", "x"):
            stream = client.get(f"/hint?n=2&tag={tag}", headers=[("x-same", "v" * 50)])
            assert_hinted(stream, tag, 2)
            assert stream.status == 200 and bytes(stream.data) == tag.encode()


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
