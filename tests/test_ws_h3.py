"""WebSockets over HTTP/3 (RFC 9220), black-box, with aioquic's H3 layer as the client.

Each socket is an extended CONNECT on a request stream (``tests/support/wsh3.py``): the
server must announce SETTINGS_ENABLE_CONNECT_PROTOCOL, answer 200, then carry the frames in
the stream's DATA frames both ways. The app is ``tests/apps/ws_app.py``, as for the HTTP/1.1
and HTTP/2 WebSocket tests, whose checks this file mirrors. h3 0.0.8 refuses the value
``websocket`` by itself; the server rewrites it on the way in (``server/h3/protocol_shim``),
so the head is sent both as aioquic encodes it (Huffman-coded) and as plain literals.
"""

import json
import signal
import ssl
import subprocess
import uuid
import zlib

import httpx
import pytest

from tests.support.helpers import start_server, wait_report
from tests.support.tls_certs import certs
from tests.support.wsraw import (
    BINARY,
    CONT,
    PING,
    PONG,
    TEXT,
    HandshakeFailed,
    encode_frame,
)

pytest.importorskip("aioquic", reason="needs aioquic")
h3client = pytest.importorskip("tests.support.h3client")
from tests.support.wsh3 import (  # noqa: E402
    H3Session,
    H3WebSocket,
    plain_headers_frame,
    varint,
)

pytestmark = pytest.mark.skipif(
    subprocess.run(["openssl", "version"], capture_output=True).returncode != 0,
    reason="needs the openssl command line tool",
)

APP = "tests.apps.ws_app:app"
TAIL = b"\x00\x00\xff\xff"


@pytest.fixture(scope="module")
def c():
    return certs()


def start(c, *flags):
    return start_server(
        APP, "--http3", "--ssl-certfile", c.server_pem, "--ssl-keyfile", c.server_key, *flags
    )


@pytest.fixture(scope="module")
def server(c):
    with start(c) as s:
        yield s


@pytest.fixture(scope="module")
def client(server, c):
    """Plain HTTPS over TCP to the same server, for the app's reports."""
    with httpx.Client(base_url="https://localhost:%d" % server.port, verify=tls(c)) as h:
        yield h


def tls(c):
    return ssl.create_default_context(cafile=c.ca_pem)


def open_ws(server, c, path="/echo", **kwargs):
    return H3WebSocket(server.port, c.ca_pem, path, **kwargs)


def rid():
    return uuid.uuid4().hex[:12]


def done(report):
    return report is not None and report.get("state") == "done"


def scope_over(ws):
    frame = ws.recv_frame(timeout=10)
    assert frame.opcode == TEXT
    return json.loads(frame.payload)


# ---------------------------------------------------------------- handshake and scope


def test_settings_advertise_extended_connect(server, c):
    with H3Session(server.port, c.ca_pem) as session:
        assert session.connect_protocol_enabled()


def test_qpack_dynamic_table_stays_off(server, c):
    """The rewrite reads `:protocol` only as a literal: a client may put it in the QPACK
    dynamic table only if the server's SETTINGS_QPACK_MAX_TABLE_CAPACITY (0x01) allows one.
    Should an h3 upgrade start advertising a table, this fails and the shim needs another
    look."""
    with H3Session(server.port, c.ca_pem) as session:
        assert session.settings().get(0x01, 0) == 0


def test_aioquic_huffman_codes_the_protocol_field():
    """What the default handshake of this file sends: pylsqpack Huffman-codes `:protocol`
    and `websocket` (RFC 7541 Appendix B), so the plain-literal form needs its own test."""
    pylsqpack = pytest.importorskip("pylsqpack")
    _, section = pylsqpack.Encoder().encode(0, [(b":protocol", b"websocket")])
    assert bytes.fromhex("b95d8749c87a3f") in section  # ":protocol"
    assert bytes.fromhex("f058d072752a7f") in section  # "websocket"


@pytest.mark.parametrize("plain", [False, True], ids=["huffman", "plain"])
def test_scope(server, c, plain):
    offered = [("sec-websocket-protocol", "chat.v2, chat.v1"), ("x-custom", "yes")]
    with open_ws(server, c, handshake=False) as ws:
        ws.handshake("/scope/caf%C3%A9?a=1&b=%20x", offered, plain=plain)
        assert ws.status == 200
        scope = scope_over(ws)
        ws.send_text("still open")  # the app waits for the disconnect
    assert scope["type"] == "websocket"
    assert scope["http_version"] == "3"
    assert scope["scheme"] == "wss"
    assert scope["path"] == "/scope/caf\u00e9"
    assert scope["raw_path"] == "/scope/caf%C3%A9"
    assert scope["query_string"] == "a=1&b=%20x"
    headers = [tuple(h) for h in scope["headers"]]
    # :authority becomes host, first; no pseudo-header reaches the app.
    assert headers[0] == ("host", "localhost")
    assert not any(name.startswith(":") for name, _ in headers)
    assert ("x-custom", "yes") in headers
    assert ("sec-websocket-version", "13") in headers
    assert scope["subprotocols"] == ["chat.v2", "chat.v1"]
    assert "websocket.http.response" in scope["extensions"]
    assert scope["server"] == ["127.0.0.1", server.port]


def test_accept_with_subprotocol_and_headers(server, c):
    target = (
        "/echo?subprotocol=chat.v1&hdr=x-extra:hello&hdr=set-cookie:a=1&hdr=set-cookie:b=2"
        "&hdr=sec-websocket-accept:forged&hdr=content-length:5"
    )
    offered = [("sec-websocket-protocol", "chat.v2, chat.v1")]
    with open_ws(server, c, target, extra_headers=offered) as ws:
        assert ws.status == 200
        assert ws.header("sec-websocket-protocol") == "chat.v1"
        assert ws.header("x-extra") == "hello"
        assert [v for n, v in ws.response_headers if n == "set-cookie"] == ["a=1", "b=2"]
        # RFC 9220 §3 (RFC 8441 §5): no upgrade fields, no accept key, no body length.
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


@pytest.mark.parametrize("plain", [False, True], ids=["huffman", "plain"])
def test_echo_text_and_bytes(server, c, plain):
    messages = [(TEXT, "h\u00e9llo".encode()), (TEXT, b""), (BINARY, b"\x00\xff"), (BINARY, b"")]
    # Past the initial stream windows both ways, and past one 64 KiB DATA frame.
    messages += [(BINARY, b"z" * 300000), (TEXT, b"x" * 70000)]
    with open_ws(server, c, handshake=False) as ws:
        ws.handshake("/echo", plain=plain)
        for opcode, payload in messages:
            ws.send_frame(opcode, payload)
            frame, _ = ws.recv_until((TEXT, BINARY))
            assert (frame.opcode, frame.payload) == (opcode, payload)


def test_reserved_frame_before_the_head_passes(server, c):
    """RFC 9114 §9: frames of reserved types may precede the HEADERS frame; the rewrite looks
    past them and hands them on."""
    head = H3WebSocket.head("/echo")
    grease = varint(0x21 + 0x1F * 3) + varint(5) + b"hello"
    with open_ws(server, c, handshake=False) as ws:
        ws.ex = ws.session.start_raw(grease + plain_headers_frame(head))
        ws.session.wait_for(lambda: ws.ex.headers is not None or ws.ex.done.is_set())
        assert ws.ex.status == 200
        ws.buf = ws.ex.body
        ws.send_text("after grease")
        assert ws.recv_until((TEXT,))[0].payload == b"after grease"


def test_a_head_over_the_limit_is_refused_431(c):
    """A HEADERS frame longer than the header limit is left to h3 (the shim holds no more
    than the limit), which answers 431."""
    with start(c, "--max-header-size", "1024") as srv:
        with H3WebSocket(srv.port, c.ca_pem, handshake=False) as ws:
            ex = ws.open_stream("/echo", [("x-big", "b" * 2000)], plain=True)
            ws.session.wait(ex)
            assert ex.status == 431
            assert ws.session.request("GET", "/hello").status == 200


def test_fragments_and_ping_pong(server, c):
    text = "Hello, w\u00f6rld \u2603".encode("utf-8")
    with open_ws(server, c) as ws:
        ws.send_frame(TEXT, text[:3], fin=False)
        ws.send_frame(PING, b"between fragments")  # control frames may interleave
        ws.send_frame(CONT, text[3:], fin=True)
        pong, _ = ws.recv_until((PONG,))
        assert pong.payload == b"between fragments"
        frame, _ = ws.recv_until((TEXT,))
        assert frame.fin and frame.payload == text
        ws.send_frame(PING, bytes(range(125)))
        frame = ws.recv_frame(timeout=10)
        assert frame.opcode == PONG and frame.payload == bytes(range(125))


def test_permessage_deflate(server, c):
    text = b'{"row": 1, "name": "a fairly repetitive json document"}, ' * 200
    offer = [("sec-websocket-extensions", "permessage-deflate")]
    with open_ws(server, c, extra_headers=offer) as ws:
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


# ---------------------------------------------------------------- closing


def test_app_close_ends_the_stream(server, c, client):
    r = rid()
    with open_ws(server, c, "/echo?id=%s" % r) as ws:
        ws.send_text("close:4001:bye from the app")
        frame = ws.expect_close()
        assert (frame.close_code, frame.close_reason) == (4001, "bye from the app")
        ws.send_close(4001)
        # Closing the socket is the stream's FIN, not a reset.
        assert ws.closed_by_peer(10)
        assert ws.ex.reset is None
        # The connection carries on.
        assert ws.session.request("GET", "/hello").status == 200
    report = wait_report(client, r, done)
    assert report["disconnect"]["code"] == 4001


def test_client_close_with_code_and_reason(server, c, client):
    r = rid()
    with open_ws(server, c, "/echo?id=%s" % r) as ws:
        ws.send_text("one")
        assert ws.recv_until((TEXT,))[0].payload == b"one"
        ws.send_close(4002, "client says bye")
        assert ws.expect_close().close_code == 4002
        assert ws.closed_by_peer(10)
    report = wait_report(client, r, done)
    assert report["disconnect"] == {
        "type": "websocket.disconnect",
        "code": 4002,
        "reason": "client says bye",
    }


def test_client_reset_is_1006_for_the_app(server, c, client):
    r = rid()
    with open_ws(server, c, "/echo?id=%s" % r) as ws:
        ws.send_text("one")
        assert ws.recv_until((TEXT,))[0].payload == b"one"
        ws.reset()
        # Only that stream: the connection still serves.
        assert ws.session.request("GET", "/hello").status == 200
    report = wait_report(client, r, done)
    assert report["disconnect"]["code"] == 1006


@pytest.mark.parametrize(
    "frame, code",
    [
        (encode_frame(TEXT, b"ok \xff\xfe bad"), 1007),
        (encode_frame(TEXT, b"naked", mask=False), 1002),
        (encode_frame(0x3, b"opcode 3"), 1002),
    ],
    ids=["bad-utf8", "unmasked", "opcode-3"],
)
def test_protocol_violations_close(server, c, client, frame, code):
    r = rid()
    with open_ws(server, c, "/echo?id=%s" % r) as ws:
        ws.send_text("ready")
        assert ws.recv_until((TEXT,))[0].payload == b"ready"
        ws.send_raw(frame)
        assert ws.expect_close().close_code == code
        ws.send_close(code)
        assert ws.closed_by_peer(10)
    assert wait_report(client, r, done)["disconnect"]["code"] == code


# ---------------------------------------------------------------- refusals


def test_denial_response_is_an_ordinary_response(server, c):
    with open_ws(server, c, handshake=False) as ws:
        ex = ws.open_stream("/deny_response")
        ws.session.wait(ex)
        assert ex.status == 418
        assert ex.header(b"x-denied") == b"yes"
        assert ex.header(b"content-type") == b"text/plain"
        assert bytes(ex.body) == b"no websocket for you"
        assert ex.reset is None


def test_a_2xx_denial_is_answered_403(server, c):
    """On HTTP/3 as on HTTP/2 a 2xx answer to the CONNECT is the acceptance."""
    with pytest.raises(HandshakeFailed) as info:
        open_ws(server, c, "/deny_response?status=200")
    assert info.value.status == 403
    assert server.wait_for_output("over HTTP/3 had status 200", timeout=10)
    assert server.wait_for_output(r'"WEBSOCKET /deny_response\?status=200 HTTP/3" 403', timeout=10)


def test_close_before_accept_is_403(server, c, client):
    r = rid()
    with pytest.raises(HandshakeFailed) as info:
        open_ws(server, c, "/deny?id=%s" % r)
    assert info.value.status == 403
    assert wait_report(client, r)["after_close"]["type"] == "websocket.disconnect"


@pytest.mark.parametrize("version", [None, "8"], ids=["missing", "8"])
def test_unsupported_version_is_426(server, c, version):
    with open_ws(server, c, handshake=False) as ws:
        ex = ws.open_stream("/echo", version=version)
        ws.session.wait(ex)
        assert ex.status == 426
        assert ex.header(b"sec-websocket-version") == b"13"


@pytest.mark.parametrize("plain", [False, True], ids=["huffman", "plain"])
@pytest.mark.parametrize("protocol", ["webtransport", "connect-udp"])
def test_other_protocols_are_400(server, c, protocol, plain):
    """A genuine `webtransport` is never taken for a WebSocket (the shim rewrites it to a
    value h3 knows and ferrocorn refuses), nor is any other protocol."""
    with open_ws(server, c, handshake=False) as ws:
        ex = ws.open_stream("/echo", protocol=protocol, plain=plain)
        ws.session.wait(ex)
        assert ex.status == 400
        assert ws.session.request("GET", "/hello").status == 200


@pytest.mark.parametrize("missing", [b":scheme", b":path"])
def test_extended_connect_without_scheme_or_path_is_reset(server, c, missing):
    """RFC 8441 §4 (RFC 9220 §3): an extended CONNECT carries :scheme and :path."""
    head = [field for field in H3WebSocket.head("/echo") if field[0] != missing]
    with H3Session(server.port, c.ca_pem) as session:
        ex = session.wait(session.start("CONNECT", "/echo", raw_head=head, end=False))
        assert ex.headers is None and ex.reset == h3client.H3_MESSAGE_ERROR
        assert session.request("GET", "/hello").status == 200


def test_protocol_on_a_get_is_reset(server, c):
    head = [(b":method", b"GET")] + H3WebSocket.head("/echo")[1:]
    with H3Session(server.port, c.ca_pem) as session:
        ex = session.wait(session.start("GET", "/echo", raw_head=head))
        assert ex.headers is None and ex.reset == h3client.H3_MESSAGE_ERROR


def test_unknown_protocol_is_reset_by_h3(server, c):
    with open_ws(server, c, handshake=False) as ws:
        ex = ws.open_stream("/echo", protocol="chat")
        ws.session.wait(ex)
        assert ex.headers is None and ex.reset == h3client.H3_MESSAGE_ERROR
        assert ws.session.request("GET", "/hello").status == 200


def test_ws_none_does_not_advertise_and_resets_websocket(c):
    with start(c, "--ws", "none") as srv, H3Session(srv.port, c.ca_pem) as session:
        assert session.settings().get(0x08, 0) == 0
        ex = session.start("CONNECT", "/echo", raw_head=H3WebSocket.head("/echo"), end=False)
        session.wait(ex)
        assert ex.headers is None and ex.reset == h3client.H3_MESSAGE_ERROR
        assert session.request("GET", "/hello").status == 200


# ---------------------------------------------------------------- streams side by side


def test_two_sockets_and_a_get_on_one_connection(server, c):
    with open_ws(server, c) as a:
        b = H3WebSocket(0, c.ca_pem, "/echo", session=a.session)
        get = a.session.start("GET", "/hello")
        for i in range(20):
            a.send_text("a%d" % i)
            b.send_frame(BINARY, b"b%d" % i)
        for i in range(20):
            assert b.recv_until((BINARY,))[0].payload == b"b%d" % i
            assert a.recv_until((TEXT,))[0].payload == b"a%d" % i
        a.session.wait(get)
        assert get.status == 200 and bytes(get.body) == b"hello world"
        b.send_close(1000)
        assert b.expect_close().close_code == 1000
        # One socket closed, the other still echoes.
        a.send_text("after b")
        assert a.recv_until((TEXT,))[0].payload == b"after b"


# ---------------------------------------------------------------- limits and shutdown


def test_message_over_max_size_closes_1009(c):
    with start(c, "--ws-max-size", "1024") as srv:
        with H3WebSocket(srv.port, c.ca_pem, "/echo") as ws:
            ws.send_frame(BINARY, b"b" * 1024)
            assert ws.recv_until((BINARY,))[0].payload == b"b" * 1024
            ws.send_frame(BINARY, b"x" * 2000)
            assert ws.expect_close().close_code == 1009
            assert ws.closed_by_peer(10)


def test_limit_websockets_counts_h3_sockets(c):
    with start(c, "--limit-websockets", "1") as srv:
        with H3WebSocket(srv.port, c.ca_pem, "/echo") as ws:
            with pytest.raises(HandshakeFailed) as info:
                H3WebSocket(0, c.ca_pem, "/echo", session=ws.session)
            assert info.value.status == 503
            ws.send_close(1000)
            assert ws.expect_close().close_code == 1000
            assert ws.closed_by_peer(10)
            # The slot is free again once the session ended.
            again = H3WebSocket(0, c.ca_pem, "/echo", session=ws.session)
            again.send_text("back")
            assert again.recv_until((TEXT,))[0].payload == b"back"


def test_shutdown_sends_1012_on_every_socket_and_exits_0(c):
    srv = start(c)
    try:
        ids = [rid(), rid()]
        first = H3WebSocket(srv.port, c.ca_pem, "/wait?id=%s" % ids[0])
        sockets = [first, H3WebSocket(0, c.ca_pem, "/wait?id=%s" % ids[1], session=first.session)]
        base = "https://localhost:%d" % srv.port
        with httpx.Client(base_url=base, verify=tls(c), timeout=10) as h:
            for i in ids:
                wait_report(h, i)
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


def test_access_log_line(server, c):
    marker = rid()
    with open_ws(server, c, "/echo?m=%s" % marker) as ws:
        ws.send_close(1000)
        assert ws.expect_close().close_code == 1000
        assert ws.closed_by_peer(10)
    # The status the client saw: 200, as on HTTP/2 (101 is HTTP/1.1's).
    assert server.wait_for_output(r'"WEBSOCKET /echo\?m=%s HTTP/3" 200' % marker, timeout=10), (
        server.output()[-2000:]
    )
