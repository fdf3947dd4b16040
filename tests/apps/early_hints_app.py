"""The early-hint tests' app (standard library only: runs under PyPy too).

Routes: ``/hint?n&size&tag`` (n early hints of two links each, then a response of size
bytes), ``/hint-then-read`` (one hint, then the request body before answering: the client
sees the 103 while the app still waits), ``/read-then-hint?n&tag`` (the request body first,
then n hints, then the response), ``/stream?chunks&size`` (chunks of size bytes, then the
request body awaited, then as many chunks again: a stream that is mid-body at a moment the
client chooses), ``/extensions`` (the scope's extension names as JSON), ``/bad?case`` (a
malformed or late hint; the error's type and text as the body)."""

import json
from urllib.parse import parse_qs


def _query(scope):
    return {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}


def links(tag, i):
    return [
        f"</{tag}{i}.css>; rel=preload; as=style".encode(),
        f"</{tag}{i}.js>; rel=preload; as=script".encode(),
    ]


async def _respond(send, status, body, headers=()):
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive):
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return bytes(body)


BAD = {
    "not-a-list": {"links": b"</a.css>; rel=preload"},
    "str-entry": {"links": ["</a.css>; rel=preload"]},
    "crlf": {"links": [b"</a.css>\r\nSet-Cookie: x=1"]},
    "nul": {"links": [b"</a.css>\x00"]},
    "empty-entry": {"links": [b""]},
    "missing": {},
    "too-many": {"links": [b"</a.css>"] * 101},
}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    assert scope["type"] == "http"
    path = scope["path"]
    q = _query(scope)
    if path == "/hint":
        tag = q.get("tag", "h")
        for i in range(int(q.get("n", "1"))):
            await send({"type": "http.response.early_hint", "links": links(tag, i)})
        body = tag.encode() * int(q.get("size", "1"))
        await _respond(send, 200, body, [(b"content-type", b"text/plain")])
    elif path == "/hint-then-read":
        await send({"type": "http.response.early_hint", "links": links("w", 0)})
        body = await _read_body(receive)
        await _respond(send, 200, b"read " + (body or b""))
    elif path == "/read-then-hint":
        await _read_body(receive)
        tag = q.get("tag", "r")
        for i in range(int(q.get("n", "1"))):
            await send({"type": "http.response.early_hint", "links": links(tag, i)})
        await _respond(send, 200, tag.encode())
    elif path == "/stream":
        chunks, size = int(q.get("chunks", "4")), int(q.get("size", "16384"))
        start = {"type": "http.response.start", "status": 200, "headers": []}
        await send(start)
        chunk = b"s" * size
        for _ in range(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await _read_body(receive)
        for _ in range(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/extensions":
        await _respond(send, 200, json.dumps(sorted(scope["extensions"])).encode())
    elif path == "/bad":
        case = q["case"]
        if case == "after-start":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            message = {"type": "http.response.early_hint", "links": links("late", 0)}
        else:
            message = {"type": "http.response.early_hint", **BAD[case]}
        try:
            await send(message)
        except Exception as exc:  # noqa: BLE001 - the test reads what was raised
            outcome = f"{type(exc).__name__}: {exc}".encode()
        else:
            outcome = b"sent"
        if case == "after-start":
            await send({"type": "http.response.body", "body": outcome})
        else:
            await _respond(send, 200, outcome)
    else:
        await _respond(send, 404, b"no such route")
