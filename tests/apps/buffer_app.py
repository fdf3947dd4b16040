"""For tests/test_response_buffer.py: responses that stream 1 MiB chunks for as long as the
client is there (the app never stops on its own), a checked download, and counters."""

import hashlib
import json
from urllib.parse import parse_qs

from tests.apps.common import lifespan

MiB = 1 << 20
# One object sent again and again: only the server's copies cost memory.
CHUNK = b"x" * MiB

stats = {"chunks": 0, "streaming": 0}


async def _start(send, content_type=b"application/octet-stream"):
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]}
    )


async def forever(send):
    await _start(send)
    stats["streaming"] += 1
    try:
        while True:
            await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
            stats["chunks"] += 1
    except OSError:  # ClientDisconnected: the client went away
        pass
    finally:
        stats["streaming"] -= 1


async def websocket_forever(receive, send):
    """1 MiB binary messages for as long as the client is there."""
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    stats["streaming"] += 1
    try:
        while True:
            await send({"type": "websocket.send", "bytes": CHUNK})
            stats["chunks"] += 1
    except OSError:  # ClientDisconnected
        pass
    finally:
        stats["streaming"] -= 1


def _pattern(i, size):
    return hashlib.sha256(b"%d" % i).digest() * (size // 32)


async def download(send, query):
    """``size`` bytes in ``chunk``-byte messages, a known pattern (see ``expected``)."""
    size = int(query.get("size", ["0"])[0])
    chunk = int(query.get("chunk", [str(256 * 1024)])[0])
    await _start(send)
    sent, i = 0, 0
    while sent < size:
        piece = _pattern(i, chunk)[: size - sent]
        sent += len(piece)
        i += 1
        await send({"type": "http.response.body", "body": piece, "more_body": sent < size})


def expected(size, chunk):
    out, i = bytearray(), 0
    while len(out) < size:
        out += _pattern(i, chunk)[: size - len(out)]
        i += 1
    return bytes(out)


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    if scope["type"] == "websocket":
        await websocket_forever(receive, send)
        return
    path = scope["path"]
    query = parse_qs(scope["query_string"].decode())
    if path == "/forever":
        await forever(send)
    elif path == "/download":
        await download(send, query)
    elif path == "/stats":
        await _start(send, b"application/json")
        await send({"type": "http.response.body", "body": json.dumps(stats).encode()})
    else:
        await _start(send, b"text/plain")
        await send({"type": "http.response.body", "body": b"ok"})
