"""WebSockets (ASGI websocket spec, RFC 6455), black-box.

Well-behaved traffic goes through the ``websockets`` client library; protocol abuse and the
backpressure checks use raw sockets and hand-built frames (``tests/support/wsraw.py``).  The app is
``tests/apps/ws_app.py``; observations from inside the app come back through ``GET /report``.
"""

import asyncio
import json
import os
import shutil
import signal
import socket
import struct
import threading
import time
import uuid

import httpx
import pytest

websockets = pytest.importorskip("websockets")

from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

from tests.apps.common import pattern_chunk  # noqa: E402
from tests.support.helpers import (  # noqa: E402
    RawConnection,
    ferrocorn_argv,
    request_bytes,
    start_server,
    wait_report,
)
from tests.support.wsh2 import H2WebSocket  # noqa: E402
from tests.support.wsraw import (  # noqa: E402
    BINARY,
    CLOSE,
    CONT,
    PING,
    PONG,
    TEXT,
    HandshakeFailed,
    RawWebSocket,
    encode_frame,
)

APP = "tests.apps.ws_app:app"
MiB = 1 << 20


@pytest.fixture(scope="module")
def server():
    with start_server(APP, "--lifespan", "on") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c


def rid():
    return uuid.uuid4().hex[:12]


def ws_url(server, target):
    return "ws://127.0.0.1:%d%s" % (server.port, target)


def ws_connect(server, target, **kwargs):
    kwargs.setdefault("max_size", None)
    kwargs.setdefault("open_timeout", 10)
    kwargs.setdefault("close_timeout", 10)
    return connect(ws_url(server, target), proxy=None, **kwargs)


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def done(report):
    return report is not None and report.get("state") == "done"


@pytest.fixture(params=["h1", "h2"])
def open_ws(request):
    """Opens a raw socket as ``RawWebSocket(port, path)`` does, over HTTP/1.1 (an upgrade) or
    HTTP/2 (an extended CONNECT, RFC 8441): the checks that take it run over both."""
    return RawWebSocket if request.param == "h1" else H2WebSocket


def upgrade_headers(extra=()):
    return [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
    ] + list(extra)


# ---------------------------------------------------------------- scope


def test_scope(server):
    async def main():
        async with ws_connect(
            server,
            "/scope/caf%C3%A9?a=1&b=%20x",
            subprotocols=["chat.v2", "chat.v1", "bin"],
            additional_headers={"X-Custom": "yes"},
        ) as ws:
            scope = json.loads(await ws.recv())
            return scope, ws.local_address, ws.subprotocol

    scope, local, chosen = run(main())
    assert scope["first_message"] == "websocket.connect"
    assert scope["type"] == "websocket"
    assert scope["scheme"] == "ws"
    assert scope["http_version"] == "1.1"
    assert scope["asgi"]["version"] == "3.0"
    assert str(scope["asgi"].get("spec_version", "2.0")).startswith("2.")
    assert scope["path"] == "/scope/caf\u00e9" and scope["path_type"] == "str"
    assert scope["raw_path"] == "/scope/caf%C3%A9" and scope["raw_path_type"] == "bytes"
    assert scope["query_string"] == "a=1&b=%20x" and scope["query_string_type"] == "bytes"
    assert scope["root_path"] == ""
    assert "method" not in scope["keys"]
    assert scope["header_types"] == ["bytes/bytes"]
    headers = [tuple(h) for h in scope["headers"]]
    assert ("x-custom", "yes") in headers
    assert ("upgrade", "websocket") in [(n, v.lower()) for n, v in headers]
    assert scope["client"] == [local[0], local[1]]
    assert scope["client_types"] == ["str", "int"]
    assert scope["server"] == ["127.0.0.1", server.port]
    assert scope["server_types"] == ["str", "int"]
    assert scope["subprotocols"] == ["chat.v2", "chat.v1", "bin"]
    assert scope["subprotocols_type"] in ("list", "tuple")
    assert chosen is None  # the app accepted without choosing one
    assert "websocket.http.response" in scope["extensions"]
    assert scope["state"] == {"startup_value": "set-at-startup"}


def test_scope_without_subprotocols(server):
    async def main():
        async with ws_connect(server, "/scope") as ws:
            return json.loads(await ws.recv())

    scope = run(main())
    assert scope["subprotocols"] == []
    assert scope["query_string"] == ""


def test_http_scope_does_not_advertise_the_websocket_extension(client):
    scope = client.get("/scope").json()
    assert scope["type"] == "http"
    assert not scope["extensions"] or "websocket.http.response" not in scope["extensions"]


def test_root_path():
    with start_server(APP, "--root-path", "/api") as srv:

        async def main():
            async with ws_connect(srv, "/scope/x?q=1") as ws:
                return json.loads(await ws.recv())

        scope = run(main())
    assert scope["root_path"] == "/api"
    assert scope["path"] == "/api/scope/x"
    assert scope["raw_path"] == "/api/scope/x"
    assert scope["query_string"] == "q=1"


# ---------------------------------------------------------------- handshake and messages


def test_accept_with_subprotocol_and_headers(server):
    async def main():
        target = "/echo?subprotocol=chat.v1&hdr=x-extra:hello&hdr=x-second:2"
        async with ws_connect(server, target, subprotocols=["chat.v2", "chat.v1"]) as ws:
            await ws.send("ping?")
            return ws.subprotocol, dict(ws.response.headers), await ws.recv()

    chosen, headers, echoed = run(main())
    lowered = {k.lower(): v for k, v in headers.items()}
    assert chosen == "chat.v1"
    assert lowered.get("sec-websocket-protocol") == "chat.v1"
    assert lowered.get("x-extra") == "hello"
    assert lowered.get("x-second") == "2"
    assert echoed == "ping?"
    # The client offers permessage-deflate (with client_max_window_bits): accepted as is.
    assert lowered.get("sec-websocket-extensions") == "permessage-deflate"


def test_raw_handshake_response(server):
    with RawWebSocket(server.port, "/echo?hdr=x-extra:raw") as ws:
        assert ws.status == 101
        assert (ws.header("upgrade") or "").lower() == "websocket"
        assert "upgrade" in (ws.header("connection") or "").lower()
        assert ws.header("x-extra") == "raw"
        assert ws.header("sec-websocket-protocol") is None
        ws.send_text("hi")
        frame = ws.recv_frame(timeout=10)
        assert (frame.opcode, frame.payload, frame.fin, frame.masked) == (TEXT, b"hi", True, False)


def test_accept_headers_all_go_out_but_the_handshake_fields(server):
    """Every header of ``websocket.accept`` reaches the 101, repeated names included; the
    handshake's own fields (Upgrade, Connection, Sec-WebSocket-Accept/-Extensions/-Protocol)
    keep the server's values."""
    target = (
        "/echo?hdr=set-cookie:a=1&hdr=x-mid:m&hdr=set-cookie:b=2"
        "&hdr=sec-websocket-accept:forged&hdr=upgrade:other&hdr=sec-websocket-protocol:p"
    )
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", target, upgrade_headers()))
        _, status, _, headers, _ = conn.read_head()
    assert status == 101
    lowered = [(name.lower(), value) for name, value in headers]
    assert [v for n, v in lowered if n == "set-cookie"] == ["a=1", "b=2"]
    assert ("x-mid", "m") in lowered
    assert [v for n, v in lowered if n == "sec-websocket-accept"] == [
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    ]
    assert [v.lower() for n, v in lowered if n == "upgrade"] == ["websocket"]
    assert not any(n == "sec-websocket-protocol" for n, _ in lowered)


def test_echo_text_and_bytes(server):
    big = pattern_chunk(3, 300000)

    async def main():
        async with ws_connect(server, "/echo") as ws:
            out = []
            for message in ["h\u00e9llo \u2603", "", b"\x00\xff\x10", b"", big, "x" * 70000]:
                await ws.send(message)
                out.append((message, await ws.recv()))
            return out

    for sent, got in run(main()):
        assert type(got) is type(sent)
        assert got == sent


def test_app_close_with_code_and_reason(server, client):
    r = rid()

    async def main():
        async with ws_connect(server, "/echo?id=%s" % r) as ws:
            await ws.send("close:4001:bye from the app")
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            return ws.close_code, ws.close_reason

    code, reason = run(main())
    assert (code, reason) == (4001, "bye from the app")
    report = wait_report(client, r, done)
    assert report["disconnect"]["type"] == "websocket.disconnect"


def test_client_close_with_code_and_reason(server, client):
    r = rid()

    async def main():
        async with ws_connect(server, "/echo?id=%s" % r) as ws:
            await ws.send("one")
            assert await ws.recv() == "one"
            await ws.close(code=4002, reason="client says bye")

    run(main())
    report = wait_report(client, r, done)
    assert report["first"] == "websocket.connect"
    assert report["messages"] == 1
    assert report["disconnect"] == {
        "type": "websocket.disconnect",
        "code": 4002,
        "reason": "client says bye",
    }


def test_client_close_without_code_gives_1005(server, client, open_ws):
    r = rid()
    with open_ws(server.port, "/echo?id=%s" % r) as ws:
        ws.send_text("ready")
        assert ws.recv_until((TEXT,))[0].payload == b"ready"
        ws.send_close(code=None)
        frame = ws.expect_close()
        assert frame.close_code in (None, 1000, 1005)
        assert ws.closed_by_peer(10)
    report = wait_report(client, r, done)
    assert report["disconnect"]["code"] == 1005


def test_accept_race():
    """A client that closes right after the 101 must not make the app's accept raise.

    The handshake did complete (the client got its 101), so ``send(websocket.accept)`` must
    succeed and the next ``receive()`` must report the client's close code."""
    ids = []
    bad = []
    # Server and client share one CPU, so the woken tokio thread and client tend to run before
    # the loop thread resumes inside send(): that widens the race window on an idle machine.
    argv = ferrocorn_argv(APP, "--no-access-log")
    if shutil.which("taskset"):
        argv = ["taskset", "-c", "0"] + argv
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    with start_server(APP, argv=argv) as srv, httpx.Client(base_url=srv.url, timeout=10) as client:
        if affinity and 0 in affinity:
            os.sched_setaffinity(0, {0})
        try:
            for i in range(200):
                r = rid()
                ids.append(r)
                with RawWebSocket(srv.port, "/echo?id=%s" % r) as ws:
                    ws.send_close(4000 + i)
                    ws.expect_close()
                    ws.closed_by_peer(5)
        finally:
            if affinity:
                os.sched_setaffinity(0, affinity)
        deadline = time.monotonic() + 15
        for i, r in enumerate(ids):
            while True:
                report = client.get("/report", params={"id": r}).json()
                if done(report) or (report and "error" in report) or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            if not done(report) or report["disconnect"]["code"] != 4000 + i:
                bad.append(report)
    assert not bad, "%d of %d sessions went wrong, e.g. %r" % (len(bad), len(ids), bad[0])


def test_abrupt_tcp_drop_gives_1006(server, client):
    r = rid()
    ws = RawWebSocket(server.port, "/echo?id=%s" % r)
    ws.send_text("still there?")
    assert ws.recv_frame(timeout=10).payload == b"still there?"
    ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ws.close()  # RST, no close frame
    report = wait_report(client, r, done)
    assert report["disconnect"]["code"] == 1006


def test_abrupt_fin_without_close_frame_gives_1006(server, client):
    r = rid()
    ws = RawWebSocket(server.port, "/echo?id=%s" % r)
    ws.send_text("x")
    assert ws.recv_frame(timeout=10).payload == b"x"
    ws.sock.shutdown(socket.SHUT_WR)  # EOF, no close frame
    report = wait_report(client, r, done)
    ws.close()
    assert report["disconnect"]["code"] == 1006


def test_close_before_accept_is_403(server, client):
    r = rid()
    with pytest.raises(HandshakeFailed) as info:
        RawWebSocket(server.port, "/deny?id=%s" % r)
    assert info.value.status == 403

    async def main():
        async with ws_connect(server, "/deny"):
            pass

    with pytest.raises(InvalidStatus) as info2:
        run(main())
    assert info2.value.response.status_code == 403
    report = wait_report(client, r)
    assert report["after_close"]["type"] == "websocket.disconnect"


def test_denial_response(server):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/deny_response", upgrade_headers()))
        resp = conn.read_response()
    assert resp.status == 418
    assert resp.body == b"no websocket for you"
    assert resp.header("x-denied") == "yes"
    assert resp.header("content-type") == "text/plain"
    assert resp.header("sec-websocket-accept") is None

    async def main():
        async with ws_connect(server, "/deny_response"):
            pass

    with pytest.raises(InvalidStatus) as info:
        run(main())
    assert info.value.response.status_code == 418
    assert info.value.response.body == b"no websocket for you"


def test_send_after_client_close_raises_client_disconnected(server, client):
    r = rid()

    async def main():
        async with ws_connect(server, "/send_after_close?id=%s" % r) as ws:
            assert await ws.recv() == "accepted"
            await ws.close(code=1000)

    run(main())
    report = wait_report(client, r, done)
    assert report["raised"] == "ClientDisconnected", report
    assert report["is_client_disconnected"] and report["is_oserror"]


def test_app_returning_after_accept_closes_1000(server):
    async def main():
        async with ws_connect(server, "/accept_return") as ws:
            assert await ws.recv() == "bye"
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            return ws.close_code

    assert run(main()) == 1000


def test_app_raising_after_accept_closes_1011(server):
    async def main():
        async with ws_connect(server, "/raise_after_accept") as ws:
            assert await ws.recv() == "about to fail"
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            return ws.close_code

    assert run(main()) == 1011
    assert server.wait_for_output("ws-app-failure-4e1b", timeout=10), "traceback not logged"


@pytest.mark.parametrize("route", ["/return_without_accept", "/raise_before_accept"])
def test_unanswered_handshake_is_500(server, route):
    with pytest.raises(HandshakeFailed) as info:
        RawWebSocket(server.port, route)
    assert info.value.status == 500


INVALID = [
    # kind, accepted exception types, words the message must contain
    ("both", ("ValueError", "TypeError"), ["bytes", "text"]),
    ("neither", ("ValueError", "TypeError"), ["bytes", "text"]),
    ("str_bytes", ("TypeError",), ["bytes"]),
    ("bytes_text", ("TypeError",), ["text"]),
    ("bad_code", ("ValueError",), ["code", "999"]),
    ("code_1005", ("ValueError",), ["code", "1005"]),
    ("code_1006", ("ValueError",), ["code", "1006"]),
    ("code_1015", ("ValueError",), ["code", "1015"]),
    ("code_2000", ("ValueError",), ["code", "2000"]),
    ("long_reason", ("ValueError",), ["reason"]),
    ("accept_twice", ("RuntimeError",), ["websocket.accept"]),
    ("unknown_type", ("ValueError", "RuntimeError", "TypeError"), ["websocket.bogus"]),
    ("send_before_accept", ("RuntimeError",), ["websocket.accept"]),
]


@pytest.mark.parametrize("kind,types,words", INVALID, ids=[k for k, _, _ in INVALID])
def test_invalid_messages(server, kind, types, words):
    async def main():
        async with ws_connect(server, "/invalid?kind=%s" % kind) as ws:
            result = json.loads(await ws.recv())
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            return result, ws.close_code

    result, code = run(main())
    assert result["raised"] in types, result
    for word in words:
        assert word in result["message"], result
    assert code == 1000  # the socket stayed usable after the refused message


# ---------------------------------------------------------------- protocol duties (raw frames)


def test_fragmented_text_is_reassembled(server, open_ws):
    text = "Hello, w\u00f6rld \u2603".encode("utf-8")
    cut1, cut2 = 3, text.index(b"\xc3\xb6") + 1  # the second cut splits a code point
    with open_ws(server.port, "/echo") as ws:
        ws.send_frame(TEXT, text[:cut1], fin=False)
        ws.send_frame(CONT, text[cut1:cut2], fin=False)
        ws.send_frame(PING, b"between fragments")  # control frames may interleave
        ws.send_frame(CONT, text[cut2:], fin=True)
        pong, _ = ws.recv_until((PONG,))
        assert pong.payload == b"between fragments"
        frame, _ = ws.recv_until((TEXT,))
        assert frame.fin and frame.payload == text
        # fragmented binary too
        ws.send_frame(BINARY, b"\x00\x01", fin=False)
        ws.send_frame(CONT, b"\x02", fin=True)
        frame, _ = ws.recv_until((BINARY,))
        assert frame.payload == b"\x00\x01\x02"


def test_ping_gets_pong_with_same_payload(server, open_ws):
    with open_ws(server.port, "/echo") as ws:
        payload = bytes(range(125))
        ws.send_frame(PING, payload)
        frame = ws.recv_frame(timeout=10)
        assert frame.opcode == PONG and frame.payload == payload and frame.fin
        ws.send_frame(PING, b"")
        frame = ws.recv_frame(timeout=10)
        assert frame.opcode == PONG and frame.payload == b""
        # an unsolicited pong is ignored
        ws.send_frame(PONG, b"unsolicited")
        ws.send_text("after pong")
        frame, _ = ws.recv_until((TEXT,))
        assert frame.payload == b"after pong"


def expect_protocol_close(server, client, frames, code, target="/echo", open_ws=RawWebSocket):
    r = rid()
    with open_ws(server.port, "%s?id=%s" % (target, r)) as ws:
        # One echo first, so the app's accept has completed (see test_accept_race).
        ws.send_text("ready")
        assert ws.recv_until((TEXT,))[0].payload == b"ready"
        for data in frames:
            ws.send_raw(data)
        frame = ws.expect_close()
        assert frame.close_code == code, frame
        ws.send_close(code)
        assert ws.closed_by_peer(10)
    report = wait_report(client, r, done)
    return report


def test_invalid_utf8_text_closes_1007(server, client, open_ws):
    frames = [encode_frame(TEXT, b"ok \xff\xfe bad")]
    report = expect_protocol_close(server, client, frames, 1007, open_ws=open_ws)
    assert report["disconnect"]["code"] == 1007
    assert report["messages"] == 1  # only the "ready" probe


def test_invalid_utf8_across_fragments_closes_1007(server, client):
    frames = [encode_frame(TEXT, b"abc\xc3", fin=False), encode_frame(CONT, b"(", fin=True)]
    expect_protocol_close(server, client, frames, 1007)


def test_invalid_utf8_close_reason_closes_1007(server, client):
    frames = [encode_frame(CLOSE, struct.pack("!H", 1000) + b"\xff")]
    expect_protocol_close(server, client, frames, 1007)


def test_unmasked_client_frame_closes_1002(server, client, open_ws):
    frames = [encode_frame(TEXT, b"naked", mask=False)]
    report = expect_protocol_close(server, client, frames, 1002, open_ws=open_ws)
    assert report["messages"] == 1  # only the "ready" probe


@pytest.mark.parametrize(
    "frame",
    [
        encode_frame(TEXT, b"rsv1", rsv=4),
        encode_frame(TEXT, b"rsv2", rsv=2),
        encode_frame(BINARY, b"rsv3", rsv=1),
        encode_frame(0x3, b"opcode 3"),
        encode_frame(0xB, b"opcode 11"),
        encode_frame(PING, b"fragmented ping", fin=False),
        encode_frame(PING, b"p" * 126),
        encode_frame(CONT, b"continuation without start"),
    ],
    ids=[
        "rsv1",
        "rsv2",
        "rsv3",
        "opcode3",
        "opcode11",
        "fragmented-ping",
        "long-ping",
        "orphan-continuation",
    ],
)
def test_protocol_violations_close_1002(server, client, frame):
    expect_protocol_close(server, client, [frame], 1002)


def test_bad_close_code_from_client_closes_1002(server, client, open_ws):
    frames = [encode_frame(CLOSE, struct.pack("!H", 999))]
    expect_protocol_close(server, client, frames, 1002, open_ws=open_ws)


@pytest.fixture(scope="module")
def small_server():
    with start_server(APP, "--ws-max-size", "1024") as s:
        yield s


@pytest.fixture(scope="module")
def small_client(small_server):
    with httpx.Client(base_url=small_server.url, timeout=10) as c:
        yield c


def test_max_size_boundary_is_accepted(small_server, open_ws):
    with open_ws(small_server.port, "/echo") as ws:
        ws.send_frame(BINARY, b"b" * 1024)
        frame, _ = ws.recv_until((BINARY,))
        assert frame.payload == b"b" * 1024


def test_message_over_max_size_closes_1009(small_server, small_client, open_ws):
    report = expect_protocol_close(
        small_server, small_client, [encode_frame(BINARY, b"x" * 2000)], 1009, open_ws=open_ws
    )
    assert report["disconnect"]["code"] == 1009
    assert report["messages"] == 1  # only the "ready" probe


def test_fragmented_message_over_max_size_closes_1009(small_server, small_client, open_ws):
    frames = [encode_frame(TEXT, b"y" * 600, fin=False), encode_frame(CONT, b"y" * 600)]
    expect_protocol_close(small_server, small_client, frames, 1009, open_ws=open_ws)


def test_over_max_size_with_websockets_client(small_server):
    async def main():
        async with ws_connect(small_server, "/echo") as ws:
            await ws.send("z" * 5000)
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            return ws.close_code

    assert run(main()) == 1009


def test_shutdown_sends_1012_and_exits_0():
    srv = start_server(APP)
    try:
        ids = [rid(), rid()]
        sockets = [RawWebSocket(srv.port, "/wait?id=%s" % i) for i in ids]
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            for i in ids:
                wait_report(c, i)
        srv.proc.send_signal(signal.SIGTERM)
        for ws in sockets:
            frame = ws.expect_close(timeout=10)
            assert frame.close_code == 1012, frame
            ws.send_close(1012)
        assert srv.wait(20) == 0, srv.output()
        for ws in sockets:
            assert ws.closed_by_peer(5)
            ws.close()
    finally:
        srv.kill()
        srv.close()


# ---------------------------------------------------------------- options


def test_ws_none_serves_upgrade_as_plain_http():
    with start_server(APP, "--ws", "none") as srv:
        with RawConnection(srv.port) as conn:
            conn.send(request_bytes("GET", "/echo?x=1", upgrade_headers()))
            resp = conn.read_response()
    assert resp.status == 200, resp
    scope = json.loads(resp.body)
    assert scope["type"] == "http"
    assert scope["path"] == "/echo"
    assert ("upgrade", "websocket") in [tuple(h) for h in scope["headers"]]


@pytest.mark.parametrize("impl", ["websockets", "wsproto"])
def test_ws_implementation_names_are_accepted(impl):
    """uvicorn's --ws values select the same (Rust) implementation."""
    with start_server(APP, "--ws", impl) as srv:

        async def main():
            async with ws_connect(srv, "/echo") as ws:
                await ws.send("hi")
                return await ws.recv()

        assert run(main()) == "hi"


def test_unsupported_version_is_426(server):
    headers = [h for h in upgrade_headers() if h[0] != "Sec-WebSocket-Version"]
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/echo", headers + [("Sec-WebSocket-Version", "8")]))
        resp = conn.read_response()
    assert resp.status == 426
    assert resp.header("sec-websocket-version") == "13"


def _without(name):
    return [h for h in upgrade_headers() if h[0] != name]


@pytest.mark.parametrize(
    "method,version,headers",
    [
        ("GET", "HTTP/1.1", _without("Sec-WebSocket-Key")),
        ("GET", "HTTP/1.1", _without("Sec-WebSocket-Key") + [("Sec-WebSocket-Key", "not base64!")]),
        # base64 of 10 bytes, not 16.
        (
            "GET",
            "HTTP/1.1",
            _without("Sec-WebSocket-Key") + [("Sec-WebSocket-Key", "dGhlIHNhbXBsZQ==")],
        ),
        ("GET", "HTTP/1.1", upgrade_headers([("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")])),
        ("POST", "HTTP/1.1", upgrade_headers([("Content-Length", "0")])),
        ("GET", "HTTP/1.0", upgrade_headers()),
    ],
    ids=["no-key", "key-not-base64", "key-not-16-bytes", "two-keys", "post", "http-1.0"],
)
def test_invalid_handshake_is_400_and_never_reaches_the_app(server, method, version, headers):
    """RFC 6455 §4.2.1: a request asking for a WebSocket that breaks the handshake rules gets
    a 400 from the server: not a WebSocket scope, and not an HTTP scope either (the app would
    answer 200 with its scope, or 101)."""
    with RawConnection(server.port) as conn:
        conn.send(request_bytes(method, "/echo", headers, version=version))
        resp = conn.read_response()
    assert resp.status == 400, resp
    # The worker goes on serving.
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/hello"))
        assert conn.read_response().body == b"hello world"


@pytest.fixture(scope="module")
def ping_server():
    with start_server(APP, "--ws-ping-interval", "0.5", "--ws-ping-timeout", "0.5") as s:
        yield s


def test_server_sends_pings_and_answered_pings_keep_it_open(ping_server, open_ws):
    with open_ws(ping_server.port, "/echo") as ws:
        pings = 0
        deadline = time.monotonic() + 20
        while pings < 3 and time.monotonic() < deadline:
            frame = ws.recv_frame(timeout=10)
            assert frame.opcode == PING, frame
            pings += 1
            ws.send_frame(PONG, frame.payload)
        assert pings == 3
        ws.send_text("alive")
        frame, skipped = ws.recv_until((TEXT,), timeout=10)
        assert frame.payload == b"alive"
        assert all(f.opcode == PING for f in skipped)


def test_unanswered_pings_disconnect(ping_server, open_ws):
    r = rid()
    with open_ws(ping_server.port, "/echo?id=%s" % r) as ws:
        seen = []
        deadline = time.monotonic() + 20
        closed = False
        while time.monotonic() < deadline:
            try:
                frame = ws.recv_frame(timeout=max(0.1, deadline - time.monotonic()))
            except (EOFError, ConnectionError):
                closed = True
                break
            seen.append(frame.opcode)
            if frame.opcode == CLOSE:
                closed = ws.closed_by_peer(10)
                break
        assert PING in seen
        assert closed, seen
    with httpx.Client(base_url=ping_server.url, timeout=10) as c:
        report = wait_report(c, r, done)
    assert report["disconnect"]["code"] in (1006, 1011)


# ---------------------------------------------------------------- backpressure and load


def sample_rss(server, seconds, interval=0.05):
    peak = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, server.rss_kb())
        time.sleep(interval)
    return peak


def test_slow_client_backpressure(server, client):
    """200 x 1 MiB to a client that reads nothing for 2 s: memory bounded, all data intact."""
    r = rid()
    n = 200
    base = server.rss_kb()
    ws = RawWebSocket(server.port, "/slow_reader?id=%s&n=%d&size=%d" % (r, n, MiB))
    try:
        ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
        wait_report(client, r)
        peak = sample_rss(server, 2.0)
        stalled = client.get("/report", params={"id": r}).json()
        assert stalled["sent"] < n, stalled  # send() did wait for the client
        growth_mb = (peak - base) / 1024.0
        print(
            "slow client: server RSS grew by %.1f MB; the app had sent %d of %d"
            % (growth_mb, stalled["sent"], n)
        )
        assert growth_mb < 100, "server RSS grew by %.1f MB" % growth_mb
        for i in range(n):
            frame = ws.recv_frame(timeout=30)
            assert frame.opcode == BINARY and frame.fin, frame
            assert len(frame.payload) == MiB
            assert struct.unpack("!Q", frame.payload[:8])[0] == i
            assert frame.payload[8:] == pattern_chunk(i * 7, MiB - 8), "message %d corrupted" % i
        ws.send_close(1000)
        ws.expect_close()
    finally:
        ws.close()
    report = wait_report(client, r, done)
    assert report["sent"] == n


def test_fast_client_backpressure(server, client):
    """5,000 x 64 KiB at an app that does not receive for 2 s: memory bounded, all in order."""
    r = rid()
    n, size = 5000, 64 * 1024
    base = server.rss_kb()
    ws = RawWebSocket(server.port, "/slow_app?id=%s" % r)
    ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 256 * 1024)
    wait_report(client, r)
    errors = []
    progress = [0]

    def flood():
        try:
            for i in range(n):
                payload = struct.pack("!Q", i) + pattern_chunk(i * 7, size - 8)
                # an all-zero mask key leaves the payload as is: cheap and still a masked frame
                ws.send_raw(encode_frame(BINARY, payload, key=b"\x00\x00\x00\x00"))
                progress[0] = i + 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    sender = threading.Thread(target=flood, daemon=True)
    sender.start()
    try:
        peak = sample_rss(server, 2.0)
        during = client.get("/report", params={"id": r}).json()
        growth_mb = (peak - base) / 1024.0
        print(
            "fast client: server RSS grew by %.1f MB; the client had sent %d of %d"
            % (growth_mb, progress[0], n)
        )
        assert growth_mb < 100, "server RSS grew by %.1f MB" % growth_mb
        assert progress[0] < n, "the server read 5,000 messages while the app slept"
        assert during["received"] == 0 and during["state"] == "sleeping", during
        assert client.get("/release", params={"id": r}).json() == {"released": True}
        sender.join(90)
        assert not sender.is_alive(), "sending stalled at %d messages" % progress[0]
        assert not errors, errors
        report = wait_report(client, r, lambda rep: rep and rep["received"] >= n, timeout=60)
        assert report["received"] == n
        assert report["in_order"] and report["intact"], report
        assert report["bytes"] == n * size
        ws.send_close(1000)
        ws.expect_close()
    finally:
        ws.close()
    assert wait_report(client, r, done)["disconnect"]["code"] == 1000


def test_200_concurrent_clients(server):
    clients, rounds = 200, 20

    async def one(i):
        async with ws_connect(server, "/echo", ping_interval=None, open_timeout=30) as ws:
            for j in range(rounds):
                if j % 2:
                    message = ("client %d message %d " % (i, j)) * (j + 1)
                else:
                    message = struct.pack("!II", i, j) * (j + 1)
                await ws.send(message)
                got = await ws.recv()
                if got != message:
                    return "client %d message %d: got %r" % (i, j, got[:40])
        return None

    async def main():
        return await asyncio.gather(*(one(i) for i in range(clients)), return_exceptions=True)

    results = run(main(), timeout=50)
    failures = [r for r in results if r is not None]
    assert not failures, failures[:5]
