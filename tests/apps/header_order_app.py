"""Responses whose headers interleave field names (ASGI: their order is preserved on
HTTP/1.1). Standard library only, 3.9 syntax (runs under PyPy too)."""

import os

INTERLEAVED = [
    (b"set-cookie", b"a=1"),
    (b"x-mid", b"m"),
    (b"set-cookie", b"b=2"),
    (b"content-type", b"text/plain"),
    (b"x-mid", b"n"),
]


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        if scope["path"] == "/deny":
            await send(
                {"type": "websocket.http.response.start", "status": 403, "headers": INTERLEAVED}
            )
            await send({"type": "websocket.http.response.body", "body": b"no"})
            return
        await send({"type": "websocket.accept", "headers": INTERLEAVED})
        await send({"type": "websocket.close", "code": 1000})
        return
    path = scope["path"]
    if path == "/grouped":
        headers = [(b"set-cookie", b"a=1"), (b"set-cookie", b"b=2"), (b"x-mid", b"m")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"grouped"})
        return
    # Not a list: any iterable of pairs is a valid `headers`.
    headers = iter(INTERLEAVED) if path == "/iterable" else INTERLEAVED
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    if path == "/file":
        # A file body (sendfile on cleartext HTTP/1.1) behind an interleaved head.
        target = scope["query_string"].decode() or os.path.abspath(__file__)
        await send({"type": "http.response.pathsend", "path": target})
        return
    if path == "/stream":
        size = int(scope["query_string"] or b"3")
        chunk = b"x" * 65536
        while size > 0:
            part = chunk[: min(size, len(chunk))]
            size -= len(part)
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.body", "body": b"ordered"})
