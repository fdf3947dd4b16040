"""WebSockets over HTTP/2 (RFC 8441), black-box, with the ``h2`` library as the client.

Each socket is an extended CONNECT stream (``tests/support/wsh2.py``), over cleartext h2c
with prior knowledge and over TLS (ALPN h2). The app is ``tests/apps/ws_app.py``, as for
``tests/test_websocket.py``, whose frame-level checks also run over this transport (its
``open_ws`` fixture); this file covers what is HTTP/2's own.
"""

import json
import signal
import struct
import uuid
import zlib

import h2.errors
import httpx
import pytest

from tests.support.h2client import H2Client, Stream, tls_context
from tests.support.helpers import start_server, wait_report
from tests.support.tls_certs import certs
from tests.support.wsh2 import H2WebSocket, connect_protocol_enabled, unvalidated_client
from tests.support.wsraw import BINARY, TEXT, HandshakeFailed, encode_frame

APP = "tests.apps.ws_app:app"
TAIL = b"\x00\x00\xff\xff"


@pytest.fixture(scope="module")
def server():
    with start_server(APP) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c


@pytest.fixture(scope="module")
def tls_server():
    c = certs()
    with start_server(APP, "--ssl-certfile", c.server_pem, "--ssl-keyfile", c.server_key) as s:
        yield s


def rid():
    return uuid.uuid4().hex[:12]


def done(report):
    return report is not None and report.get("state") == "done"


def scope_over(ws):
    frame = ws.recv_frame(timeout=10)
    assert frame.opcode == TEXT
    return json.loads(frame.payload)


# ---------------------------------------------------------------- handshake and scope


def test_settings_advertise_extended_connect(server):
    with H2Client(server.port) as h2c:
        assert connect_protocol_enabled(h2c)


def test_scope(server):
    offered = [("sec-websocket-protocol", "chat.v2, chat.v1"), ("x-custom", "yes")]
    with H2WebSocket(server.port, "/scope/caf%C3%A9?a=1&b=%20x", extra_headers=offered) as ws:
        assert ws.status == 200
        scope = scope_over(ws)
        authority = ws.client.authority
    assert scope["type"] == "websocket"
    assert scope["http_version"] == "2"
    assert scope["scheme"] == "ws"
    assert scope["path"] == "/scope/caf\u00e9"
    assert scope["raw_path"] == "/scope/caf%C3%A9"
    assert scope["query_string"] == "a=1&b=%20x"
    assert "method" not in scope["keys"]
    headers = [tuple(h) for h in scope["headers"]]
    # :authority becomes host, first; no pseudo-header reaches the app.
    assert headers[0] == ("host", authority)
    assert not any(name.startswith(":") for name, _ in headers)
    assert ("x-custom", "yes") in headers
    assert ("sec-websocket-version", "13") in headers
    assert scope["subprotocols"] == ["chat.v2", "chat.v1"]
    assert "websocket.http.response" in scope["extensions"]
    assert scope["server"] == ["127.0.0.1", server.port]


def test_scope_over_tls_is_wss(tls_server):
    ctx = tls_context(certs().ca_pem)
    with H2WebSocket(tls_server.port, "/scope", tls_context=ctx) as ws:
        scope = scope_over(ws)
        ws.send_text("still open")  # the app waits for the disconnect
    assert scope["scheme"] == "wss"
    assert scope["http_version"] == "2"
    assert dict(map(tuple, scope["headers"]))["host"] == "localhost:%d" % tls_server.port


def test_echo_over_tls(tls_server):
    ctx = tls_context(certs().ca_pem)
    with H2WebSocket(tls_server.port, "/echo", tls_context=ctx) as ws:
        payload = bytes(range(256)) * 1000  # past the initial stream window both ways
        ws.send_frame(BINARY, payload)
        frame, _ = ws.recv_until((BINARY,))
        assert frame.payload == payload


def test_accept_with_subprotocol_and_headers(server):
    target = (
        "/echo?subprotocol=chat.v1&hdr=x-extra:hello&hdr=set-cookie:a=1&hdr=set-cookie:b=2"
        "&hdr=sec-websocket-accept:forged&hdr=content-length:5"
    )
    offered = [("sec-websocket-protocol", "chat.v2, chat.v1")]
    with H2WebSocket(server.port, target, extra_headers=offered) as ws:
        assert ws.status == 200
        assert ws.header("sec-websocket-protocol") == "chat.v1"
        assert ws.header("x-extra") == "hello"
        assert [v for n, v in ws.response_headers if n == "set-cookie"] == ["a=1", "b=2"]
        # RFC 8441 §5: none of HTTP/1.1's upgrade fields, no accept key, no body length.
        for name in ("sec-websocket-accept", "upgrade", "connection", "content-length"):
            assert ws.header(name) is None, name
        assert ws.header("sec-websocket-extensions") is None  # none was offered
        ws.send_text("ping?")
        frame = ws.recv_frame(timeout=10)
        assert (frame.opcode, frame.payload, frame.fin, frame.masked) == (
            TEXT,
            b"ping?",
            True,
            False,
        )


def test_echo_text_and_bytes(server):
    messages = [(TEXT, "h\u00e9llo".encode()), (TEXT, b""), (BINARY, b"\x00\xff"), (BINARY, b"")]
    messages += [(BINARY, b"z" * 300000), (TEXT, b"x" * 70000)]
    with H2WebSocket(server.port, "/echo") as ws:
        for opcode, payload in messages:
            ws.send_frame(opcode, payload)
            frame, _ = ws.recv_until((TEXT, BINARY))
            assert (frame.opcode, frame.payload) == (opcode, payload)


def test_permessage_deflate(server):
    text = b'{"row": 1, "name": "a fairly repetitive json document"}, ' * 200
    offer = [("sec-websocket-extensions", "permessage-deflate")]
    with H2WebSocket(server.port, "/echo", extra_headers=offer) as ws:
        assert ws.header("sec-websocket-extensions") == "permessage-deflate"
        compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
        decompressor = zlib.decompressobj(-15)
        for _ in range(2):
            data = compressor.compress(text) + compressor.flush(zlib.Z_SYNC_FLUSH)
            ws.send_frame(TEXT, data[:-4], rsv=4)
            frame, _ = ws.recv_until((TEXT,))
            assert frame.rsv == 4
            assert len(frame.payload) < len(text) // 5
            assert decompressor.decompress(frame.payload + TAIL) == text


def test_app_close_ends_the_stream(server, client):
    r = rid()
    with H2WebSocket(server.port, "/echo?id=%s" % r) as ws:
        ws.send_text("close:4001:bye from the app")
        frame = ws.expect_close()
        assert (frame.close_code, frame.close_reason) == (4001, "bye from the app")
        ws.send_close(4001)
        # Closing the socket is END_STREAM on its stream, not a reset.
        assert ws.closed_by_peer(10)
        assert ws.stream.ended and ws.stream.reset is None
        # The connection carries on.
        assert ws.client.get("/hello").status == 200
    report = wait_report(client, r, done)
    assert report["disconnect"]["code"] == 4001


def test_client_close_with_code_and_reason(server, client):
    r = rid()
    with H2WebSocket(server.port, "/echo?id=%s" % r) as ws:
        ws.send_text("one")
        assert ws.recv_until((TEXT,))[0].payload == b"one"
        ws.send_close(4002, "client says bye")
        frame = ws.expect_close()
        assert frame.close_code == 4002
        assert ws.closed_by_peer(10)
    report = wait_report(client, r, done)
    assert report["disconnect"] == {
        "type": "websocket.disconnect",
        "code": 4002,
        "reason": "client says bye",
    }


def test_client_reset_is_1006_for_the_app(server, client):
    r = rid()
    with H2WebSocket(server.port, "/echo?id=%s" % r) as ws:
        ws.send_text("one")
        assert ws.recv_until((TEXT,))[0].payload == b"one"
        ws.client.reset(ws.sid)
        # Only that stream: the connection still serves.
        assert ws.client.get("/hello").status == 200
    report = wait_report(client, r, done)
    assert report["disconnect"]["code"] == 1006


# ---------------------------------------------------------------- refusals


def test_denial_response_is_an_ordinary_response(server):
    with pytest.raises(HandshakeFailed) as info:
        H2WebSocket(server.port, "/deny_response")
    ws_stream = info.value
    assert ws_stream.status == 418
    assert ws_stream.rest == b"no websocket for you"


def test_denial_response_headers(server):
    ws = H2WebSocket(server.port, handshake=False)
    with ws:
        sid = ws.open_stream("/deny_response")
        (stream,) = ws.client.wait(sid)
        assert stream.status == 418
        assert stream.header("x-denied") == "yes"
        assert stream.header("content-type") == "text/plain"
        assert bytes(stream.data) == b"no websocket for you"
        # Ended whole; a RST_STREAM(NO_ERROR) may follow to stop our side (RFC 9113 §8.1).
        assert stream.ended and stream.reset in (None, h2.errors.ErrorCodes.NO_ERROR)


def test_a_2xx_denial_is_answered_403(server):
    """On HTTP/2 a 2xx answer to the CONNECT is the acceptance: a denial cannot use one."""
    with pytest.raises(HandshakeFailed) as info:
        H2WebSocket(server.port, "/deny_response?status=200")
    assert info.value.status == 403
    assert server.wait_for_output("over HTTP/2 had status 200", timeout=10)
    assert server.wait_for_output(r'"WEBSOCKET /deny_response\?status=200 HTTP/2" 403', timeout=10)


def test_close_before_accept_is_403(server, client):
    r = rid()
    with pytest.raises(HandshakeFailed) as info:
        H2WebSocket(server.port, "/deny?id=%s" % r)
    assert info.value.status == 403
    report = wait_report(client, r)
    assert report["after_close"]["type"] == "websocket.disconnect"


@pytest.mark.parametrize("version", [None, "8"], ids=["missing", "8"])
def test_unsupported_version_is_426(server, version):
    ws = H2WebSocket(server.port, handshake=False)
    with ws:
        sid = ws.open_stream("/echo", version=version)
        (stream,) = ws.client.wait(sid)
        assert stream.status == 426
        assert stream.header("sec-websocket-version") == "13"


def test_other_protocol_is_400(server):
    ws = H2WebSocket(server.port, handshake=False)
    with ws:
        sid = ws.open_stream("/echo", protocol="webtransport")
        (stream,) = ws.client.wait(sid)
        assert stream.status == 400
        assert ws.client.get("/hello").status == 200


def test_connect_without_protocol_is_reset(server):
    """A CONNECT with :scheme and :path but no :protocol is malformed (RFC 9113 §8.5)."""
    with unvalidated_client(server.port) as h2c:
        assert connect_protocol_enabled(h2c)
        sid = h2c.request("CONNECT", "/echo", [("sec-websocket-version", "13")], end_stream=False)
        (stream,) = h2c.wait(sid)
        assert stream.reset == h2.errors.ErrorCodes.PROTOCOL_ERROR
        assert h2c.get("/hello").status == 200


def test_ws_none_does_not_advertise_and_resets_protocol():
    with start_server(APP, "--ws", "none") as srv, unvalidated_client(srv.port) as h2c:
        assert not connect_protocol_enabled(h2c)
        sid = h2c.conn.get_next_available_stream_id()
        h2c.streams[sid] = Stream(sid)
        h2c.conn.send_headers(
            sid,
            [
                (":method", "CONNECT"),
                (":protocol", "websocket"),
                (":scheme", "http"),
                (":path", "/echo"),
                (":authority", h2c.authority),
                ("sec-websocket-version", "13"),
            ],
        )
        h2c.flush()
        (stream,) = h2c.wait(sid)
        assert stream.reset == h2.errors.ErrorCodes.PROTOCOL_ERROR
        assert h2c.get("/hello").status == 200


# ---------------------------------------------------------------- streams side by side


def test_two_sockets_and_a_get_on_one_connection(server):
    with H2WebSocket(server.port, "/echo") as a:
        b = H2WebSocket(0, "/echo", client=a.client)
        get = a.client.request("GET", "/hello")
        for i in range(20):
            a.send_text("a%d" % i)
            b.send_frame(BINARY, b"b%d" % i)
        for i in range(20):
            assert b.recv_until((BINARY,))[0].payload == b"b%d" % i
            assert a.recv_until((TEXT,))[0].payload == b"a%d" % i
        (stream,) = a.client.wait(get)
        assert stream.status == 200 and bytes(stream.data) == b"hello world"
        b.send_close(1000)
        assert b.expect_close().close_code == 1000
        # One socket closed, the other still echoes.
        a.send_text("after b")
        assert a.recv_until((TEXT,))[0].payload == b"after b"


def test_large_messages_both_ways(server):
    """Messages larger than a DATA frame and than the stream window, both ways: the server
    sends each as h2 grants capacity (pieces of the message itself) and the client gets it
    whole, byte for byte; a medium one after a large one too."""
    large = bytes(range(256)) * 4096 + b"tail"
    with H2WebSocket(server.port, "/echo") as ws:
        for payload in (large, large[:70001], large[:16385]):
            ws.send_frame(BINARY, payload)
            frame = ws.recv_until((BINARY,), timeout=20)[0]
            assert len(frame.payload) == len(payload) and frame.payload == payload
        ws.send_text("after")
        assert ws.recv_until((TEXT,))[0].payload == b"after"


def test_a_large_message_in_tiny_data_frames(server):
    """A large binary message whose bytes come in DATA frames of a few bytes each (the
    header split across them too) arrives whole, and the socket goes on."""
    payload = bytes(range(256)) * 400 + b"end"
    wire = encode_frame(BINARY, payload)
    with H2WebSocket(server.port, "/echo") as ws:
        for at in range(0, len(wire), 97):
            ws.send_raw(wire[at : at + 97])
        frame = ws.recv_until((BINARY,), timeout=20)[0]
        assert frame.payload == payload
        ws.send_text("after")
        assert ws.recv_until((TEXT,))[0].payload == b"after"


def test_slow_reader_does_not_stall_the_other_streams(server, client):
    """A socket whose client stops reading fills only its own stream window: the app's
    send() waits, and the other socket and requests of the connection go on."""
    r = rid()
    n, size = 40, 64 * 1024
    with H2WebSocket(server.port, "/echo") as echo:
        slow = H2WebSocket(0, "/slow_reader?id=%s&n=%d&size=%d" % (r, n, size), client=echo.client)
        sid = slow.sid
        echo.client.hold(sid)
        first = wait_report(client, r, lambda rep: rep is not None and rep["sent"] > 0)
        assert first["state"] == "sending"
        for i in range(5):
            echo.send_text("still here %d" % i)
            assert echo.recv_until((TEXT,))[0].payload == b"still here %d" % i
            assert echo.client.get("/hello").status == 200
        stalled = client.get("/report", params={"id": r}).json()
        assert stalled["state"] == "sending" and stalled["sent"] < n, stalled
        echo.client.release(sid)
        received = 0
        while received < n:
            frame, _ = slow.recv_until((BINARY,), timeout=20)
            index = struct.unpack("!Q", frame.payload[:8])[0]
            assert (index, len(frame.payload)) == (received, size)
            received += 1
        slow.send_close(1000)
        assert slow.expect_close().close_code == 1000
    report = wait_report(client, r, done)
    assert report["sent"] == n


# ---------------------------------------------------------------- limits and shutdown


def test_message_over_max_size_closes_1009():
    with start_server(APP, "--ws-max-size", "1024") as srv:
        with H2WebSocket(srv.port, "/echo") as ws:
            ws.send_frame(BINARY, b"b" * 1024)
            assert ws.recv_until((BINARY,))[0].payload == b"b" * 1024
            ws.send_frame(BINARY, b"x" * 2000)
            assert ws.expect_close().close_code == 1009
            assert ws.closed_by_peer(10)


def test_limit_websockets_counts_h2_sockets():
    with start_server(APP, "--limit-websockets", "1") as srv:
        with H2WebSocket(srv.port, "/echo") as ws:
            with pytest.raises(HandshakeFailed) as info:
                H2WebSocket(0, "/echo", client=ws.client)
            assert info.value.status == 503
            ws.send_close(1000)
            assert ws.expect_close().close_code == 1000
            assert ws.closed_by_peer(10)
            # The slot is free again once the session ended.
            again = H2WebSocket(0, "/echo", client=ws.client)
            again.send_text("back")
            assert again.recv_until((TEXT,))[0].payload == b"back"


def test_shutdown_sends_1012_on_every_socket_and_exits_0():
    srv = start_server(APP)
    try:
        ids = [rid(), rid()]
        first = H2WebSocket(srv.port, "/wait?id=%s" % ids[0])
        sockets = [first, H2WebSocket(0, "/wait?id=%s" % ids[1], client=first.client)]
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            for i in ids:
                wait_report(c, i)
        srv.proc.send_signal(signal.SIGTERM)
        for ws in sockets:
            frame = ws.expect_close(timeout=10)
            assert frame.close_code == 1012, frame
            ws.send_close(1012)
        for ws in sockets:
            assert ws.closed_by_peer(10)
        assert srv.wait(20) == 0, srv.output()
        first.close()
    finally:
        srv.kill()
        srv.close()


def test_access_log_line(server):
    marker = rid()
    with H2WebSocket(server.port, "/echo?m=%s" % marker) as ws:
        ws.send_close(1000)
        assert ws.expect_close().close_code == 1000
        assert ws.closed_by_peer(10)
    assert server.wait_for_output(r'"WEBSOCKET /echo\?m=%s HTTP/2" ' % marker, timeout=10), (
        server.output()[-2000:]
    )
