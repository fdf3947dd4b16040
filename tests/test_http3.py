"""HTTP/3 over QUIC (``--http3``) with a real HTTP/3 client (aioquic): requests and
responses both ways, streaming and large bodies, many streams on one connection, a
cancelled stream, trailers, the scope and TLS extension, Alt-Svc on TCP, malformed
requests, a failing app, a framework, graceful shutdown and workers."""

import asyncio
import hashlib
import json
import os
import signal
import ssl
import subprocess

import httpx
import pytest

from tests.support.helpers import run_ferrocorn, start_server
from tests.support.tls_certs import certs

h3client = pytest.importorskip("tests.support.h3client", reason="needs aioquic")

pytestmark = pytest.mark.skipif(
    subprocess.run(["openssl", "version"], capture_output=True).returncode != 0,
    reason="needs the openssl command line tool",
)

APP = "tests.apps.h3_app:app"


@pytest.fixture(scope="module")
def c():
    return certs()


def tls_flags(c):
    return ("--ssl-certfile", c.path("server.pem"), "--ssl-keyfile", c.path("server.key"))


@pytest.fixture(scope="module")
def server(c):
    server = start_server(APP, "--http3", *tls_flags(c))
    yield server
    server.close()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def one(port, c, method, path, **kwargs):
    async with h3client.h3_connect(port, c.ca_pem) as client:
        return await client.request(method, path, **kwargs)


def test_get(server, c):
    ex = run(one(server.port, c, "GET", "/"))
    assert ex.status == 200
    assert bytes(ex.body) == b"hello h3"
    assert ex.header(b"server") == b"ferrocorn"
    assert ex.header(b"date") is not None


def test_scope(server, c):
    ex = run(one(server.port, c, "GET", "/scope?a=1&b=two", headers=[(b"x-custom", b"v")]))
    scope = json.loads(bytes(ex.body))
    assert scope["http_version"] == "3"
    assert scope["scheme"] == "https"
    assert scope["path"] == "/scope"
    assert scope["query_string"] == "a=1&b=two"
    # :authority becomes the first header, as host; no pseudo-headers.
    assert scope["headers"][0] == ["host", "localhost"]
    assert ["x-custom", "v"] in scope["headers"]
    assert not any(name.startswith(":") for name, _ in scope["headers"])
    assert scope["client"][0] == "127.0.0.1"
    assert scope["server"] == ["127.0.0.1", server.port]
    assert "tls" in scope["extensions"]
    assert "http.response.trailers" in scope["extensions"]
    assert scope["tls_version"] == 0x0304
    assert scope["server_cert"] is True


def test_post_echo_and_large_bodies_both_ways(server, c):
    payload = bytes(range(256)) * 12288  # 3 MiB

    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            small = await client.request("POST", "/echo", body=b"ping")
            large = await client.request("POST", "/echo", body=payload)
            big = await client.request("GET", "/big?n=5000000")
            return small, large, big

    small, large, big = run(main())
    assert small.status == 200 and bytes(small.body) == b"ping"
    assert large.status == 200
    assert large.header(b"x-sha256") == hashlib.sha256(payload).hexdigest().encode()
    assert bytes(large.body) == payload
    assert big.status == 200 and len(big.body) == 5_000_000


def test_streamed_request_body(server, c):
    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            ex = client.start("POST", "/digest", end=False)
            for i in range(20):
                client.send_body(ex, bytes([i]) * 1000)
                await asyncio.sleep(0)
            client.send_body(ex, b"", end=True)
            await asyncio.wait_for(ex.done.wait(), 20)
            return ex

    ex = run(main())
    expected = hashlib.sha256(b"".join(bytes([i]) * 1000 for i in range(20))).hexdigest()
    assert ex.status == 200 and bytes(ex.body).decode() == expected


def test_streaming_response(server, c):
    ex = run(one(server.port, c, "GET", "/stream?n=50&size=1000"))
    assert ex.status == 200
    assert bytes(ex.body) == b"".join(bytes([97 + i % 26]) * 1000 for i in range(50))


def test_fifty_concurrent_streams_on_one_connection(server, c):
    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            started = [client.start("POST", "/echo", body=b"n%d" % i) for i in range(50)]
            await asyncio.wait_for(asyncio.gather(*(ex.done.wait() for ex in started)), 30)
            return started

    for i, ex in enumerate(run(main())):
        assert ex.status == 200 and bytes(ex.body) == b"n%d" % i


def test_response_goes_out_while_the_app_blocks_the_loop_after_it(server, c, tmp_path):
    """The stream tasks' wakes are relayed (handed to tokio in batches): a response must
    still leave as soon as it is complete, not wait for the loop to run again."""
    fifo = tmp_path / "unblock"
    os.mkfifo(fifo)
    try:
        ex = run(one(server.port, c, "GET", f"/respond-then-block?fifo={fifo}"))
        assert ex.status == 200 and bytes(ex.body) == b"answered"
    finally:
        try:
            # Lets the app (and the loop) go on; ENXIO if it never opened the FIFO.
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
    # The loop runs again: the next request is served.
    assert run(one(server.port, c, "GET", "/")).status == 200


def test_trailers(server, c):
    ex = run(one(server.port, c, "GET", "/trailers", headers=[(b"te", b"trailers")]))
    assert ex.status == 200
    assert bytes(ex.body) == b"body"
    assert ex.trailers == [(b"x-checksum", b"abc")]


def test_cancelled_stream_disconnects_only_its_request(server, c):
    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            doomed = client.start("GET", "/cancel-me")
            await asyncio.wait_for(doomed.data_seen.wait(), 20)
            client.cancel(doomed)
            # The connection's other streams go on.
            after = await client.request("GET", "/stream?n=5&size=10")
            for _ in range(200):
                report = json.loads(bytes((await client.request("GET", "/cancelled")).body))
                if report:
                    return after, report
                await asyncio.sleep(0.05)
            return after, []

    after, report = run(main())
    assert after.status == 200 and len(after.body) == 50
    assert report == [{"error": "ClientDisconnected", "receive": "http.disconnect"}]


def test_app_failing_midway_resets_only_its_stream(server, c):
    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            failed = await client.request("GET", "/fail-midway")
            fine = await client.request("GET", "/")
            return failed, fine

    failed, fine = run(main())
    assert failed.reset == h3client.H3_INTERNAL_ERROR
    assert fine.status == 200
    assert "the app failed mid-response" in server.output()


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(
            [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"localhost")],
            id="missing-path",
        ),
        pytest.param(
            [(b":method", b"GET"), (b":authority", b"localhost"), (b":path", b"/")],
            id="missing-scheme",
        ),
        pytest.param(
            [
                (b":method", b"GET"),
                (b":scheme", b"https"),
                (b":authority", b"localhost"),
                (b":path", b"/"),
                (b"X-Upper", b"1"),
            ],
            id="uppercase-name",
        ),
        pytest.param(
            [
                (b":method", b"GET"),
                (b":scheme", b"https"),
                (b":authority", b"localhost"),
                (b":path", b"/"),
                (b"connection", b"keep-alive"),
            ],
            id="connection-header",
        ),
        pytest.param(
            [
                (b":method", b"GET"),
                (b":scheme", b"https"),
                (b":authority", b"localhost"),
                (b":path", b"/"),
                (b":bogus", b"1"),
            ],
            id="unknown-pseudo-header",
        ),
    ],
)
def test_malformed_request_resets_its_stream(server, c, head):
    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            bad = await client.request("GET", "/", raw_head=head)
            good = await client.request("GET", "/")
            return bad, good

    bad, good = run(main())
    assert bad.reset == h3client.H3_MESSAGE_ERROR, (bad.reset, bad.headers)
    assert good.status == 200


SETTINGS_ENABLE_CONNECT_PROTOCOL = 0x08


def test_extended_connect_is_offered(server, c):
    """WebSockets over HTTP/3 (RFC 9220, tests/test_ws_h3.py) need the server's SETTINGS to
    carry SETTINGS_ENABLE_CONNECT_PROTOCOL=1."""

    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            good = await client.request("GET", "/")  # the server's SETTINGS came before
            return good, dict(client.h3.received_settings or {})

    good, settings = run(main())
    assert good.status == 200
    assert settings.get(SETTINGS_ENABLE_CONNECT_PROTOCOL) == 1, settings


def test_alt_svc_on_tcp(server, c):
    with httpx.Client(verify=ssl.create_default_context(cafile=c.ca_pem)) as http:
        response = http.get("https://localhost:%d/" % server.port)
    assert response.status_code == 200
    assert response.headers["alt-svc"] == 'h3=":%d"; ma=86400' % server.port


def test_http3_needs_a_certificate():
    result = run_ferrocorn(APP, "--http3", "--port", "0")
    assert result.returncode != 0
    assert b"http3 requires ssl_certfile" in result.stderr + result.stdout


def test_fastapi_over_http3(server_factory, c):
    pytest.importorskip("fastapi")
    server = server_factory("tests.frameworks.fastapi_app:app", "--http3", *tls_flags(c))
    ex = run(one(server.port, c, "GET", "/json"))
    assert ex.status == 200
    assert json.loads(bytes(ex.body))
    assert ex.header(b"content-type") == b"application/json"


def test_graceful_shutdown_finishes_the_request_in_flight(server_factory, c):
    server = server_factory(APP, "--http3", *tls_flags(c))

    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            ex = client.start("GET", "/slow?t=0.5")
            loop = asyncio.get_running_loop()
            marker = await loop.run_in_executor(
                None, server.wait_for_output, "slow request in flight"
            )
            assert marker is not None
            server.proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(ex.done.wait(), 20)
            return ex

    ex = run(main())
    assert ex.status == 200 and bytes(ex.body) == b"finished"
    assert server.wait(20) == 0


def test_workers_each_serve_http3(server_factory, c):
    server = server_factory(APP, "--http3", "--workers", "2", *tls_flags(c))

    async def main():
        results = []
        for _ in range(4):  # new connections, spread by the kernel over the workers
            results.append(await one(server.port, c, "GET", "/"))
        return results

    assert all(ex.status == 200 and bytes(ex.body) == b"hello h3" for ex in run(main()))


def test_body_limit_applies(server_factory, c):
    server = server_factory(APP, "--http3", "--limit-request-body", "1000", *tls_flags(c))

    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            refused = await client.request("POST", "/echo", body=b"z" * 5000)
            fine = await client.request("POST", "/echo", body=b"z" * 500)
            return refused, fine

    refused, fine = run(main())
    assert refused.status == 413
    assert fine.status == 200 and len(fine.body) == 500


def test_static_route_over_http3(server_factory, c, tmp_path):
    """--static-path-* answers HTTP/3 requests too, with its range and validator rules."""
    (tmp_path / "a.txt").write_bytes(b"0123456789" * 100)
    server = server_factory(
        APP,
        "--http3",
        "--static-path-route",
        "/static",
        "--static-path-mount",
        str(tmp_path),
        *tls_flags(c),
    )

    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            whole = await client.request("GET", "/static/a.txt")
            part = await client.request(
                "GET", "/static/a.txt", headers=[(b"range", b"bytes=10-19")]
            )
            missing = await client.request("GET", "/static/../h3_app.py")
            app = await client.request("GET", "/")
            return whole, part, missing, app

    whole, part, missing, app = run(main())
    assert whole.status == 200 and bytes(whole.body) == b"0123456789" * 100
    assert whole.header(b"etag") is not None
    assert part.status == 206 and bytes(part.body) == b"0123456789"
    assert missing.status == 404
    assert app.status == 200 and bytes(app.body) == b"hello h3"


def test_head_that_never_completes_ends_its_stream(server_factory, c):
    """--header-read-timeout bounds an HTTP/3 request head too: a HEADERS frame whose
    payload never comes ends its stream without a response; the connection serves on."""
    server = server_factory(APP, "--http3", "--header-read-timeout", "1", *tls_flags(c))

    async def main():
        async with h3client.h3_connect(server.port, c.ca_pem) as client:
            stream_id = client._quic.get_next_available_stream_id()
            stalled = h3client.Exchange(stream_id)
            client.exchanges[stream_id] = stalled
            # A HEADERS frame (type 0x01) announcing 16 bytes of field section, none sent.
            client._quic.send_stream_data(stream_id, b"\x01\x10", end_stream=False)
            client.transmit()
            await asyncio.wait_for(stalled.done.wait(), 20)
            good = await client.request("GET", "/")
            return stalled, good

    stalled, good = run(main())
    assert stalled.headers is None, stalled.headers
    assert good.status == 200
