"""The single pure-ASGI application served by every server in the benchmark suite.

No framework, no middleware: each server gets exactly the same Python work per
request, so differences in the numbers come from the server itself.

Routes
------
GET  /plaintext       b"Hello, World!" (text/plain)            -- TechEmpower plaintext
GET  /json            {"message": "Hello, World!"} via json.dumps -- TechEmpower JSON
GET  /10k             a 10 KiB body
POST /echo            reads the request body and streams it back: one response body
                      message per received chunk (more_body=True), then an empty final one
GET  /stream?size=N   N bytes (default 1 MiB) streamed in 64 KiB chunks
GET  /sleep           awaits asyncio.sleep(0.01), then a small body
"""

from __future__ import annotations

import asyncio
import json

PLAINTEXT = b"Hello, World!"
TEN_KIB = b"x" * 10240
CHUNK_SIZE = 64 * 1024
CHUNK = b"s" * CHUNK_SIZE
DEFAULT_STREAM_SIZE = 1024 * 1024
SLEEP_BODY = b"slept"

_TEXT = [(b"content-type", b"text/plain")]
_JSON = [(b"content-type", b"application/json")]
_OCTET = [(b"content-type", b"application/octet-stream")]


def _len(n: int) -> tuple[bytes, bytes]:
    return (b"content-length", str(n).encode())


async def _respond(send, status: int, headers: list, body: bytes) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": headers + [_len(len(body))]}
    )
    await send({"type": "http.response.body", "body": body})


def _stream_size(query: bytes) -> int:
    for part in query.split(b"&"):
        key, _, value = part.partition(b"=")
        if key == b"size":
            try:
                return max(0, int(value))
            except ValueError:
                return -1
    return DEFAULT_STREAM_SIZE


async def _lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send) -> None:
    kind = scope["type"]
    if kind == "lifespan":
        await _lifespan(receive, send)
        return
    if kind != "http":
        # No websocket route here: refuse anything else cleanly.
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1000})
        return

    path = scope["path"]
    if path == "/plaintext":
        await _respond(send, 200, _TEXT, PLAINTEXT)
    elif path == "/json":
        await _respond(send, 200, _JSON, json.dumps({"message": "Hello, World!"}).encode())
    elif path == "/10k":
        await _respond(send, 200, _TEXT, TEN_KIB)
    elif path == "/echo":
        # Streamed echo, no content-length: chunked transfer encoding on HTTP/1.1.
        await send({"type": "http.response.start", "status": 200, "headers": _OCTET})
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            more = message.get("more_body", False)
            chunk = message.get("body", b"")
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    elif path == "/stream":
        size = _stream_size(scope.get("query_string", b""))
        if size < 0:
            await _respond(send, 400, _TEXT, b"bad size")
            return
        await send({"type": "http.response.start", "status": 200, "headers": _OCTET + [_len(size)]})
        remaining = size
        while remaining > CHUNK_SIZE:
            await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
            remaining -= CHUNK_SIZE
        await send({"type": "http.response.body", "body": CHUNK[:remaining], "more_body": False})
    elif path == "/sleep":
        await asyncio.sleep(0.01)
        await _respond(send, 200, _TEXT, SLEEP_BODY)
    else:
        await _respond(send, 404, _TEXT, b"Not Found")
