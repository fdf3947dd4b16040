"""HTTP/2: h2c with prior knowledge, h2 over TLS, per-stream disconnects, flow control with
large bodies, settings, graceful shutdown, and an h2load run when h2load is installed."""

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time

import h2.events
import httpx
import pytest

from tests.apps.common import iter_pattern, pattern_sha256
from tests.support.h2client import H2Client, tls_context
from tests.support.helpers import RawConnection, request_bytes, wait_until
from tests.support.tls_certs import certs

APP = "tests.apps.basic:app"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def report(client, rid, predicate, timeout=15.0):
    """Poll ``/report?id=rid`` on the same HTTP/2 connection until ``predicate`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        value = json.loads(bytes(client.get("/report?id=" + rid).data))
        if value is not None and predicate(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"report {rid}: {value!r}")
        time.sleep(0.05)


# ---------------------------------------------------------------- protocol selection


def test_h2c_prior_knowledge_scope(server_factory):
    server = server_factory(APP)
    with H2Client(server.port) as client:
        resp = client.get("/scope?a=b")
        assert resp.status == 200
        assert resp.header("server") == "ferrocorn" and resp.header("date")
        assert resp.header("connection") is None
        scope = json.loads(bytes(resp.data))
        assert scope["http_version"] == "2" and scope["scheme"] == "http"
        assert scope["method"] == "GET" and scope["path"] == "/scope"
        assert scope["query_string"] == "a=b"
        names = [name for name, _ in scope["headers"]]
        assert not any(name.startswith(":") for name in names)
        assert dict(scope["headers"])["host"] == f"127.0.0.1:{server.port}"
        # Many requests on the one connection.
        for i in range(20):
            assert bytes(client.get(f"/index?i={i}").data) == str(i).encode()


def test_h2_over_tls_scope(server_factory):
    c = certs()
    server = server_factory(APP, "--ssl-certfile", c.server_pem, "--ssl-keyfile", c.server_key)
    with H2Client(server.port, tls_context=tls_context(c.ca_pem)) as client:
        scope = json.loads(bytes(client.get("/scope").data))
        assert scope["http_version"] == "2" and scope["scheme"] == "https"
        assert dict(scope["headers"])["host"] == f"localhost:{server.port}"


def test_http11_and_h2c_share_the_port(server_factory):
    server = server_factory(APP)
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/hello"))
        assert conn.read_response().body == b"hello world"
    with H2Client(server.port) as client:
        assert bytes(client.get("/hello").data) == b"hello world"
    # A request line that starts like the preface but is HTTP/1.1 is not mistaken for h2.
    with RawConnection(server.port) as conn:
        conn.send(b"PRI * HTTP/1.1\r\nHost: x\r\n\r\n")
        resp = conn.read_response()
        assert resp is None or resp.status >= 400


def test_http1_mode_does_not_speak_h2c(server_factory):
    server = server_factory(APP, "--http", "1")
    with RawConnection(server.port) as conn:
        conn.send(PREFACE)
        data = conn.read_until_eof()
        assert data == b"" or data.startswith(b"HTTP/1.1 4"), data


def test_http2_mode_cleartext(server_factory):
    server = server_factory(APP, "--http", "2")
    with H2Client(server.port) as client:
        assert json.loads(bytes(client.get("/scope").data))["http_version"] == "2"
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/hello"))
        assert not conn.read_until_eof().startswith(b"HTTP/1.1 200")


def test_settings_are_advertised(server_factory):
    server = server_factory(
        APP,
        "--http2-max-concurrent-streams",
        "7",
        "--http2-initial-stream-window-size",
        "100000",
        "--http2-max-frame-size",
        "32768",
        "--http2-max-header-list-size",
        "20000",
    )
    with H2Client(server.port) as client:
        client.get("/hello")
        remote = client.conn.remote_settings
        assert remote.max_concurrent_streams == 7
        assert remote.initial_window_size == 100000
        assert remote.max_frame_size == 32768
        assert remote.max_header_list_size == 20000


def test_post_bodies(server_factory):
    server = server_factory(APP)
    with H2Client(server.port) as client:
        small = client.request("POST", "/echo", [("content-length", "5")], body=b"hello")
        # No content-length: the body streams.
        streamed = client.request("POST", "/echo", body=b"x" * 200000)
        small, streamed = client.wait(small, streamed)
        assert json.loads(bytes(small.data))["body"] == "hello"
        result = json.loads(bytes(streamed.data))
        assert result["size"] == 200000
        assert result["sha256"] == hashlib.sha256(b"x" * 200000).hexdigest()


# ---------------------------------------------------------------- per-stream disconnect


def test_reset_stream_disconnects_only_that_request(server_factory):
    server = server_factory(APP)
    with H2Client(server.port) as client:
        waiting = client.request("GET", "/wait_disconnect?id=w")
        late_send = client.request("GET", "/send_after_disconnect?id=s")
        slow = client.request("GET", "/slow?s=0.5")
        report(client, "w", lambda r: r.get("state") == "waiting")
        report(client, "s", lambda r: r.get("state") == "waiting")
        client.reset(waiting)
        client.reset(late_send)
        # receive() returns http.disconnect for the reset stream ...
        got = report(client, "w", lambda r: r.get("state") == "done")
        assert got["messages"][-1]["type"] == "http.disconnect"
        # ... and send() raises ClientDisconnected.
        got = report(client, "s", lambda r: r.get("state") == "done")
        assert got["raised"] == "ClientDisconnected" and got["is_oserror"]
        # The other stream, in flight all along, completes normally.
        (slow,) = client.wait(slow)
        assert slow.status == 200 and bytes(slow.data) == b"slept 0.5"
        assert bytes(client.get("/hello").data) == b"hello world"
    assert "Traceback" not in server.output()


def test_reset_during_a_streaming_response(server_factory):
    server = server_factory(APP)
    with H2Client(server.port) as client:
        big = client.request("GET", "/stream?size=200000000&chunk=65536")
        other = client.request("GET", "/stream?size=3000000&chunk=50000")
        while len(client.streams[big].data) < 1_000_000:
            assert client.receive_once()
        client.reset(big)
        (other,) = client.wait(other)
        assert hashlib.sha256(bytes(other.data)).hexdigest() == pattern_sha256(3000000)
        assert bytes(client.get("/hello").data) == b"hello world"
    assert "Traceback" not in server.output()


def test_app_error_after_start_resets_only_its_stream(server_factory):
    server = server_factory(APP)
    with H2Client(server.port) as client:
        slow = client.request("GET", "/slow?s=0.4")
        broken = client.request("GET", "/error/after")
        broken, slow = client.wait(broken, slow)
        # A truncated body must not look complete: the stream is reset, not ended.
        assert broken.reset is not None and not broken.ended
        assert bytes(broken.data) == b"partial-data-"
        assert slow.status == 200
        assert bytes(client.get("/hello").data) == b"hello world"


def test_concurrent_streams_run_in_parallel(server_factory):
    server = server_factory(APP)
    with H2Client(server.port) as client:
        started = time.monotonic()
        sids = [client.request("GET", "/slow?s=0.5") for _ in range(20)]
        for stream in client.wait(*sids):
            assert stream.status == 200
        assert time.monotonic() - started < 3.0


# ---------------------------------------------------------------- flow control, big bodies


def upload_body(size, chunk=1 << 20):
    yield from iter_pattern(size, chunk)


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2-tls"])
def test_large_upload_and_download(server_factory, tls):
    size = 24 * 1024 * 1024
    flags = ()
    kwargs = {"http1": False, "http2": True}
    if tls:
        c = certs()
        flags = ("--ssl-certfile", c.server_pem, "--ssl-keyfile", c.server_key)
        kwargs = {"http2": True, "verify": ssl.create_default_context(cafile=c.ca_pem)}
    server = server_factory(APP, *flags)
    base = f"https://localhost:{server.port}" if tls else server.url
    with httpx.Client(base_url=base, timeout=60, **kwargs) as client:
        resp = client.post("/upload", content=upload_body(size))
        assert resp.http_version == "HTTP/2"
        result = resp.json()
        assert result["size"] == size and result["sha256"] == pattern_sha256(size)
        assert result["messages"] > 1 and result["all_but_last_more"]
        digest = hashlib.sha256()
        received = 0
        with client.stream("GET", f"/stream?size={size}&chunk=262144") as resp:
            for piece in resp.iter_bytes():
                digest.update(piece)
                received += len(piece)
        assert received == size and digest.hexdigest() == pattern_sha256(size)


def test_small_windows(server_factory):
    """Minimum windows: the server must keep granting WINDOW_UPDATEs as the app reads."""
    server = server_factory(
        APP,
        "--http2-initial-stream-window-size",
        "65535",
        "--http2-initial-connection-window-size",
        "65535",
    )
    size = 4 * 1024 * 1024
    body = b"".join(iter_pattern(size))
    with H2Client(server.port) as client:
        sids = [client.request("POST", "/upload", body=None, end_stream=False) for _ in range(2)]
        for sid in sids:
            client.send_body(sid, body)
        for stream in client.wait(*sids):
            result = json.loads(bytes(stream.data))
            assert result["size"] == size and result["sha256"] == pattern_sha256(size)


def test_a_body_the_app_has_not_read_is_held_to_a_bound(server_factory, tmp_path):
    """Flow control is the backpressure: while the app reads nothing, the server gives back
    window only for what its stream window and the app's body queue (a few chunks) hold, so
    the client stalls well short of its body; once the app reads, the rest arrives whole."""
    server = server_factory(APP, "--http2-initial-stream-window-size", "65535")
    gate = tmp_path / "gate"
    size = 8 * 1024 * 1024
    body = b"".join(iter_pattern(size))
    with H2Client(server.port) as client:
        sid = client.request("POST", f"/read_when?until={gate}", body=None, end_stream=False)
        sent = 0
        client.sock.settimeout(0.5)
        while sent < size:
            window = min(
                client.conn.local_flow_control_window(sid),
                client.conn.max_outbound_frame_size,
                size - sent,
            )
            if window > 0:
                client.conn.send_data(sid, body[sent : sent + window])
                client.flush()
                sent += window
                continue
            try:
                if not client.receive_once():
                    break
            except socket.timeout:  # TimeoutError from 3.10; PyPy 3.9 has its own
                break  # no window given back for a while: the server holds the body back
        assert 0 < sent < 1024 * 1024, sent
        gate.touch()
        client.sock.settimeout(10)
        client.send_body(sid, body[sent:])
        (stream,) = client.wait(sid)
        result = json.loads(bytes(stream.data))
        assert result["size"] == size and result["sha256"] == pattern_sha256(size)


def test_keep_alive_pings_and_drops_a_peer_that_stops_answering(server_factory):
    """--http2-keep-alive-interval: the server PINGs; a client that answers stays connected
    and served, one that stops answering is disconnected once the timeout passes."""
    server = server_factory(
        APP, "--http2-keep-alive-interval", "0.2", "--http2-keep-alive-timeout", "0.5"
    )
    with H2Client(server.port) as client:
        pings = 0
        while pings < 3:
            data = client.sock.recv(65536)
            assert data, "closed while the client answered every PING"
            for event in client.conn.receive_data(data):
                pings += isinstance(event, h2.events.PingReceived)
            client.flush()  # the PING ACKs
        assert client.get("/hello").status == 200
        # Silent from here: what arrives is read, but the ACKs are never sent.
        while client.sock.recv(65536):
            pass


def test_connection_specific_response_fields_are_dropped(server_factory):
    """An app's HTTP/1.1 connection fields (and a TE other than "trailers") would make the
    HTTP/2 head malformed (RFC 9113 §8.2.2): they are dropped, the rest goes out."""
    server = server_factory(APP)
    with H2Client(server.port) as client:
        stream = client.get("/hop_fields")
        assert stream.status == 200 and bytes(stream.data) == b"hop"
        names = {name for name, _ in stream.headers}
        assert not names & {"connection", "keep-alive", "proxy-connection", "upgrade", "te"}
        assert stream.header("x-kept") == "yes"


# ---------------------------------------------------------------- shutdown and load


def test_graceful_shutdown_finishes_open_streams(server_factory):
    server = server_factory(APP)
    with H2Client(server.port) as client:
        slow = client.request("GET", "/slow?s=1")
        assert server.wait_for_output("SLOW-START", timeout=10)
        server.proc.send_signal(signal.SIGTERM)
        (slow,) = client.wait(slow)
        assert slow.status == 200 and bytes(slow.data) == b"slept 1.0"
        wait_until(lambda: client.terminated is not None or not client.receive_once(), 10)
    assert server.wait(15) == 0


def test_idle_connection_closes_after_keep_alive_timeout(server_factory):
    server = server_factory(APP, "--timeout-keep-alive", "1")
    with H2Client(server.port) as client:
        client.get("/hello")
        started = time.monotonic()
        while client.receive_once():
            assert time.monotonic() - started < 10
        assert client.terminated is not None  # GOAWAY before closing


@pytest.mark.skipif(shutil.which("h2load") is None, reason="h2load (nghttp2-client) not installed")
def test_h2load_h2c(server_factory):
    server = server_factory(APP, "--no-access-log")
    proc = subprocess.run(
        ["h2load", "-n", "2000", "-c", "10", "-m", "10", f"{server.url}/hello"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=120,
        env=dict(os.environ, LC_ALL="C"),
    )
    out = proc.stdout.decode()
    match = re.search(
        r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, "
        r"(\d+) failed, (\d+) errored",
        out,
    )
    assert match, out
    total, done, succeeded, failed, errored = map(int, match.groups())
    assert (total, done, succeeded, failed, errored) == (2000, 2000, 2000, 0, 0), out
    assert "2xx: 2000" in out.replace("status codes: 2000 2xx", "2xx: 2000"), out


def test_authority_is_the_first_header_and_replaces_host(server_factory):
    """ASGI HTTP scope: pseudo-headers removed, ``:authority`` added at the start of
    ``headers`` as ``host``, replacing a ``host`` the client also sent."""
    server = server_factory(APP)
    with H2Client(server.port) as client:
        # The h2 library refuses to send a Host that differs from :authority; a client may.
        client.conn.config.validate_outbound_headers = False
        resp = client.get("/scope", headers=[("x-first", "1"), ("host", "other.example")])
        assert resp.status == 200
        headers = json.loads(bytes(resp.data))["headers"]
        assert headers[0] == ["host", f"127.0.0.1:{server.port}"]
        assert [name for name, _ in headers].count("host") == 1
        assert ["x-first", "1"] in headers
        # Without a host header of its own the request still gets one, first.
        resp = client.get("/scope", headers=[("x-first", "1")])
        headers = json.loads(bytes(resp.data))["headers"]
        assert headers[0] == ["host", f"127.0.0.1:{server.port}"]
