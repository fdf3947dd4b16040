"""permessage-deflate (RFC 7692), black-box.

The ``websockets`` client checks the ordinary path (it offers the extension by default); raw
sockets (``tests/support/wsraw.py``) with Python's ``zlib`` build and read compressed frames
by hand to check negotiation parameters, context takeover, window sizes and the failure
cases.
"""

import asyncio
import json
import os
import uuid
import zlib

import httpx
import pytest

websockets = pytest.importorskip("websockets")

from websockets.asyncio.client import connect  # noqa: E402

from tests.support.helpers import start_server, wait_report  # noqa: E402
from tests.support.wsraw import BINARY, CONT, PING, PONG, TEXT, RawWebSocket, encode_frame  # noqa: E402

APP = "tests.apps.ws_app:app"
TAIL = b"\x00\x00\xff\xff"
PMD = ("Sec-WebSocket-Extensions", "permessage-deflate")


@pytest.fixture(scope="module")
def server():
    with start_server(APP) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c


@pytest.fixture(scope="module")
def small_server():
    with start_server(APP, "--ws-max-size", "100000") as s:
        yield s


@pytest.fixture(scope="module")
def small_client(small_server):
    with httpx.Client(base_url=small_server.url, timeout=10) as c:
        yield c


def rid():
    return uuid.uuid4().hex[:12]


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def done(report):
    return report is not None and report.get("state") == "done"


def compress(data, compressor=None, wbits=15):
    """One message compressed as RFC 7692 says: raw deflate, sync flush, tail stripped."""
    c = compressor or zlib.compressobj(6, zlib.DEFLATED, -wbits)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(TAIL)
    return out[:-4]


def inflate(payload, decompressor=None, wbits=15):
    d = decompressor or zlib.decompressobj(-wbits)
    return d.decompress(payload + TAIL)


def json_like(n):
    rows = [
        {"id": i, "name": "user-%d" % (i % 50), "active": i % 3 == 0, "tags": ["a", "b"]}
        for i in range(n)
    ]
    return json.dumps(rows)


def noise(n, seed):
    """Incompressible bytes, reproducible."""
    out = bytearray()
    x = seed
    while len(out) < n:
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out += x.to_bytes(8, "little")
    return bytes(out[:n])


# ---------------------------------------------------------------- websockets client


def test_websockets_client_negotiates_and_round_trips(server):
    text = json_like(20000)  # about 1.2 MB, very compressible
    blob = (b"0123456789abcdef" * 4096) + noise(100000, 7)

    async def main():
        url = "ws://127.0.0.1:%d/echo" % server.port
        async with connect(url, proxy=None, max_size=None) as ws:
            header = ws.response.headers.get("Sec-WebSocket-Extensions")
            await ws.send(text)
            echoed_text = await ws.recv()
            await ws.send(blob)
            echoed_blob = await ws.recv()
            for i in range(50):  # many small ones, over the same compression context
                await ws.send("message %d" % i)
                assert await ws.recv() == "message %d" % i
            return header, echoed_text, echoed_blob

    header, echoed_text, echoed_blob = run(main())
    # websockets offers "permessage-deflate; client_max_window_bits": accepted as is.
    assert header == "permessage-deflate"
    assert echoed_text == text
    assert echoed_blob == blob


def test_websockets_client_without_compression(server):
    async def main():
        url = "ws://127.0.0.1:%d/echo" % server.port
        async with connect(url, proxy=None, compression=None) as ws:
            await ws.send("plain")
            return ws.response.headers.get("Sec-WebSocket-Extensions"), await ws.recv()

    assert run(main()) == (None, "plain")


# ---------------------------------------------------------------- negotiation


def test_server_compresses_and_client_may_mix(server):
    text = json_like(200).encode()  # about 12 KB: the next copy is within the 32 KiB window
    with RawWebSocket(server.port, "/echo", extra_headers=[PMD]) as ws:
        assert ws.header("sec-websocket-extensions") == "permessage-deflate"
        # Compressed from the client, one compression context across messages.
        compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
        decompressor = zlib.decompressobj(-15)
        payloads = []
        for _ in range(3):
            ws.send_frame(TEXT, compress(text, compressor), rsv=4)
            frame, _ = ws.recv_until((TEXT,))
            assert frame.rsv == 4 and frame.fin
            payloads.append(frame.payload)
            assert inflate(frame.payload, decompressor) == text
        assert len(payloads[0]) < len(text) // 5
        # Context takeover (the default): repeats refer back into the previous message, which
        # a fresh inflater does not have.
        assert len(payloads[1]) < len(payloads[0]) * 3 // 4
        with pytest.raises(zlib.error):
            inflate(payloads[1])
        # Uncompressed messages are allowed too (RSV1 clear), and answered compressed.
        ws.send_frame(BINARY, b"raw bytes " * 10)
        frame, _ = ws.recv_until((BINARY,))
        assert frame.rsv == 4
        assert inflate(frame.payload, decompressor) == b"raw bytes " * 10


def test_server_no_context_takeover_makes_each_message_independent(server):
    text = json_like(200).encode()  # would shrink to a few bytes with context takeover
    offer = ("Sec-WebSocket-Extensions", "permessage-deflate; server_no_context_takeover")
    with RawWebSocket(server.port, "/echo", extra_headers=[offer]) as ws:
        assert ws.header("sec-websocket-extensions") == (
            "permessage-deflate; server_no_context_takeover"
        )
        sizes = []
        for _ in range(3):
            ws.send_frame(TEXT, text)
            frame, _ = ws.recv_until((TEXT,))
            assert frame.rsv == 4
            # A fresh inflater for every message: no back-references into earlier ones.
            assert inflate(frame.payload) == text
            sizes.append(len(frame.payload))
        assert sizes[0] == sizes[1] == sizes[2]


def test_client_no_context_takeover_is_echoed_and_fresh_streams_decode(server):
    offer = (
        "Sec-WebSocket-Extensions",
        "permessage-deflate; client_no_context_takeover; client_max_window_bits",
    )
    with RawWebSocket(server.port, "/echo", extra_headers=[offer]) as ws:
        assert ws.header("sec-websocket-extensions") == (
            "permessage-deflate; client_no_context_takeover"
        )
        decompressor = zlib.decompressobj(-15)
        for i in range(3):
            message = ("independent %d " % i).encode() * 200
            ws.send_frame(BINARY, compress(message), rsv=4)  # a new compressor each time
            frame, _ = ws.recv_until((BINARY,))
            assert inflate(frame.payload, decompressor) == message


def test_server_max_window_bits_is_honoured(server):
    # 1 KiB of noise repeated at a 2 KiB distance: referring back to it needs a window over
    # 1 KiB, which a 2^10-byte inflater refuses ("invalid distance too far back").
    block = noise(1024, 3)
    message = block + noise(1024, 4) + block + noise(1024, 5) + block
    offer = ("Sec-WebSocket-Extensions", "permessage-deflate; server_max_window_bits=10")
    with RawWebSocket(server.port, "/echo", extra_headers=[offer]) as ws:
        assert ws.header("sec-websocket-extensions") == (
            "permessage-deflate; server_max_window_bits=10"
        )
        decompressor = zlib.decompressobj(-10)
        for _ in range(3):
            ws.send_frame(BINARY, message)
            frame, _ = ws.recv_until((BINARY,))
            assert frame.rsv == 4
            assert inflate(frame.payload, decompressor) == message


def test_server_max_window_bits_8_is_accepted_and_sent_uncompressed(server):
    offer = ("Sec-WebSocket-Extensions", "permessage-deflate; server_max_window_bits=8")
    with RawWebSocket(server.port, "/echo", extra_headers=[offer]) as ws:
        assert ws.header("sec-websocket-extensions") == (
            "permessage-deflate; server_max_window_bits=8"
        )
        text = b"eight bits " * 100
        ws.send_frame(TEXT, compress(text), rsv=4)
        frame, _ = ws.recv_until((TEXT,))
        assert (frame.rsv, frame.payload) == (0, text)


@pytest.mark.parametrize(
    "value, expected",
    [
        (
            "permessage-deflate; server_max_window_bits=7, "
            "permessage-deflate; client_no_context_takeover",
            "permessage-deflate; client_no_context_takeover",
        ),
        (
            "permessage-deflate; server_no_context_takeover; server_no_context_takeover, "
            "permessage-deflate",
            "permessage-deflate",
        ),
        ("x-unknown-ext; a=1, permessage-deflate; bogus_param", None),
        ("permessage-deflate; server_max_window_bits", None),
        ("permessage-deflate; client_max_window_bits=16", None),
        ('permessage-deflate; client_max_window_bits="12"', "permessage-deflate"),
        (
            "PerMessage-Deflate; Server_No_Context_Takeover",
            "permessage-deflate; server_no_context_takeover",
        ),
    ],
)
def test_offer_parsing(server, value, expected):
    with RawWebSocket(
        server.port, "/echo", extra_headers=[("Sec-WebSocket-Extensions", value)]
    ) as ws:
        assert ws.header("sec-websocket-extensions") == expected
        ws.send_text("still works")
        frame, _ = ws.recv_until((TEXT,))
        got = inflate(frame.payload) if frame.rsv == 4 else frame.payload
        assert got == b"still works"
        assert frame.rsv == (4 if expected else 0)


def test_offers_on_several_header_lines(server):
    headers = [
        ("Sec-WebSocket-Extensions", "permessage-deflate; server_max_window_bits=99"),
        ("Sec-WebSocket-Extensions", "permessage-deflate; server_max_window_bits=12"),
    ]
    with RawWebSocket(server.port, "/echo", extra_headers=headers) as ws:
        assert ws.header("sec-websocket-extensions") == (
            "permessage-deflate; server_max_window_bits=12"
        )


def test_app_extensions_header_is_not_duplicated(server):
    target = "/echo?hdr=sec-websocket-extensions:x-app-ext&hdr=x-other:1"
    with RawWebSocket(server.port, target, extra_headers=[PMD]) as ws:
        values = [v for n, v in ws.response_headers if n == "sec-websocket-extensions"]
        assert values == ["permessage-deflate"]
        assert ws.header("x-other") == "1"
    with RawWebSocket(server.port, target) as ws:
        # Not negotiated: the app cannot announce an extension the server does not run.
        assert ws.header("sec-websocket-extensions") is None
        ws.send_frame(TEXT, compress(b"x" * 100), rsv=4)
        assert ws.expect_close().close_code == 1002


def test_flag_off_means_no_extension():
    with start_server(APP, "--no-ws-per-message-deflate") as srv:
        with RawWebSocket(srv.port, "/echo", extra_headers=[PMD]) as ws:
            assert ws.header("sec-websocket-extensions") is None
            ws.send_text("plain")
            frame, _ = ws.recv_until((TEXT,))
            assert (frame.rsv, frame.payload) == (0, b"plain")
            ws.send_frame(TEXT, compress(b"compressed anyway " * 10), rsv=4)
            assert ws.expect_close().close_code == 1002


def test_env_var_turns_it_off():
    env = dict(os.environ, FERROCORN_WS_PER_MESSAGE_DEFLATE="false")
    with start_server(APP, env=env) as srv:
        with RawWebSocket(srv.port, "/echo", extra_headers=[PMD]) as ws:
            assert ws.header("sec-websocket-extensions") is None


# ---------------------------------------------------------------- messages and failures


def expect_close(port, frames, code, client, extra_headers=(PMD,)):
    r = rid()
    with RawWebSocket(port, "/echo?id=%s" % r, extra_headers=list(extra_headers)) as ws:
        ws.send_text("ready")
        assert ws.recv_until((TEXT,))[0].rsv in (0, 4)
        for data in frames:
            ws.send_raw(data)
        frame = ws.expect_close()
        assert frame.close_code == code, frame
        ws.send_close(code)
        assert ws.closed_by_peer(10)
    return wait_report(client, r, done)


def test_rsv1_without_negotiation_closes_1002(server, client):
    report = expect_close(
        server.port,
        [encode_frame(TEXT, compress(b"hello" * 20), rsv=4)],
        1002,
        client,
        extra_headers=(),
    )
    assert report["disconnect"]["code"] == 1002
    assert report["messages"] == 1


def test_fragmented_compressed_message(server):
    text = ("fragmented and compressed \u00e9\u2603 " * 300).encode()
    payload = compress(text)
    third = len(payload) // 3
    with RawWebSocket(server.port, "/echo", extra_headers=[PMD]) as ws:
        ws.send_frame(TEXT, payload[:third], fin=False, rsv=4)
        ws.send_frame(PING, b"in between")
        ws.send_frame(CONT, payload[third : 2 * third], fin=False)
        ws.send_frame(CONT, payload[2 * third :], fin=True)
        pong, _ = ws.recv_until((PONG,))
        assert pong.payload == b"in between" and pong.rsv == 0
        frame, _ = ws.recv_until((TEXT,))
        assert inflate(frame.payload) == text


def test_rsv1_on_a_continuation_closes_1002(server, client):
    payload = compress(b"abc" * 100)
    frames = [
        encode_frame(BINARY, payload[:5], fin=False, rsv=4),
        encode_frame(CONT, payload[5:], fin=True, rsv=4),
    ]
    expect_close(server.port, frames, 1002, client)


def test_compressed_invalid_utf8_closes_1007(server, client):
    frames = [encode_frame(TEXT, compress(b"valid then \xff\xfe invalid"), rsv=4)]
    report = expect_close(server.port, frames, 1007, client)
    assert report["disconnect"]["code"] == 1007


def test_corrupt_compressed_data_closes_1007(server, client):
    frames = [encode_frame(BINARY, b"\xff\xff\xff\xff garbage", rsv=4)]
    expect_close(server.port, frames, 1007, client)


def test_deflate_bomb_closes_1009(small_server, small_client):
    bomb = compress(b"\x00" * (50 << 20))  # 50 MB of zeros in about 50 KB
    assert len(bomb) < 100000
    report = expect_close(
        small_server.port, [encode_frame(BINARY, bomb, rsv=4)], 1009, small_client
    )
    assert report["disconnect"]["code"] == 1009
    assert report["messages"] == 1


def test_fragmented_bomb_closes_1009(small_server, small_client):
    bomb = compress(b"a" * (1 << 20))
    half = len(bomb) // 2
    frames = [
        encode_frame(TEXT, bomb[:half], fin=False, rsv=4),
        encode_frame(CONT, bomb[half:], fin=True),
    ]
    expect_close(small_server.port, frames, 1009, small_client)


def test_max_size_applies_after_decompression_boundary(small_server):
    with RawWebSocket(small_server.port, "/echo", extra_headers=[PMD]) as ws:
        exact = b"q" * 100000
        ws.send_frame(BINARY, compress(exact), rsv=4)
        frame, _ = ws.recv_until((BINARY,))
        assert inflate(frame.payload) == exact
