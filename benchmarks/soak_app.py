"""Small combined ASGI app for the soak run (benchmarks/soak.py).

Routes: ``/`` hello, ``/echo`` (POST: body echoed back), ``/stream?size=N`` (streamed download
in 16 KiB chunks), ``/tasks`` (``len(asyncio.all_tasks())`` as text) and a WebSocket echo on
any path. Standard library only, 3.9 syntax (it may run under PyPy).
"""

import asyncio
from urllib.parse import parse_qs

CHUNK = b"0123456789abcdef" * 1024  # 16 KiB


async def _read_body(receive):
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return bytes(body)


async def _respond(send, status, body, content_type=b"text/plain"):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type)],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _http(scope, receive, send):
    path = scope["path"]
    if path == "/echo":
        body = await _read_body(receive)
        if body is None:
            return
        await _respond(send, 200, body, b"application/octet-stream")
    elif path == "/stream":
        query = parse_qs(scope["query_string"].decode("latin-1"))
        size = int(query.get("size", ["262144"])[0])
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/octet-stream")],
            }
        )
        sent = 0
        while sent < size:
            piece = CHUNK[: min(len(CHUNK), size - sent)]
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            sent += len(piece)
        await send({"type": "http.response.body", "body": b""})
    elif path == "/tasks":
        await _respond(send, 200, str(len(asyncio.all_tasks())).encode())
    else:
        await _respond(send, 200, b"hello, soak")


async def _websocket(scope, receive, send):
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.receive":
            if message.get("text") is not None:
                await send({"type": "websocket.send", "text": message["text"]})
            else:
                await send({"type": "websocket.send", "bytes": message.get("bytes")})
        else:
            return


async def app(scope, receive, send):
    kind = scope["type"]
    if kind == "http":
        await _http(scope, receive, send)
    elif kind == "websocket":
        await _websocket(scope, receive, send)
    elif kind == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
