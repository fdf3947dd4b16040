"""ASGI app for the request-limit tests (tests/test_limits.py).

Every call with an ``id`` query parameter is recorded in ``REPORTS`` (read back through
``GET /report?id=...``), so a test can tell whether the app was called at all and what its
``receive()`` and ``send()`` did. Standard library only, 3.9 syntax (may run on PyPy).
"""

import asyncio
import hashlib
import json
from urllib.parse import parse_qs

from tests.apps.common import lifespan

REPORTS = {}


def _param(scope, name, default=None):
    values = parse_qs(scope["query_string"].decode("latin-1")).get(name)
    return values[0] if values else default


async def _json(send, obj, status=200):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(obj).encode()})


async def _read(receive, report):
    """Reads the body into ``report["messages"]``; returns it, or None on http.disconnect."""
    chunks = []
    while True:
        message = await receive()
        body = message.get("body", b"")
        report["messages"].append(
            {"type": message["type"], "len": len(body), "more": message.get("more_body", False)}
        )
        if message["type"] == "http.disconnect":
            return None
        chunks.append(body)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _late_send(send, report, messages):
    """After http.disconnect: try to go on sending and record what send() did."""
    try:
        for message in messages:
            await send(message)
        report["send"] = "ok"
    except Exception as exc:  # noqa: BLE001 - reported to the test
        report["send"] = type(exc).__name__


async def echo(scope, receive, send, report):
    """Reads the whole body (after ``delay`` seconds without reading) and answers its digest."""
    delay = float(_param(scope, "delay", "0"))
    if delay:
        await asyncio.sleep(delay)
    body = await _read(receive, report)
    if body is None:
        start = {"type": "http.response.start", "status": 200, "headers": []}
        await _late_send(send, report, [start, {"type": "http.response.body", "body": b"x"}])
        return
    await _json(send, {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()})


async def stream_then_read(scope, receive, send, report):
    """Starts a streamed response first, then reads the body; answers its size at the end."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"started;", "more_body": True})
    body = await _read(receive, report)
    if body is None:
        more = {"type": "http.response.body", "body": b"more", "more_body": True}
        await _late_send(send, report, [more])
        return
    await send({"type": "http.response.body", "body": b"size=%d" % len(body)})


async def read_then_stream(scope, receive, send, report):
    """Reads the whole body, then answers its digest in a streamed (several-message) body."""
    body = await _read(receive, report)
    if body is None:
        return
    digest = hashlib.sha256(body).hexdigest().encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for piece in (b"size=%d;" % len(body), b"sha256=", digest):
        await send({"type": "http.response.body", "body": piece, "more_body": True})
        await asyncio.sleep(0.01)
    await send({"type": "http.response.body", "body": b""})


ROUTES = {
    "/echo": echo,
    "/stream_then_read": stream_then_read,
    "/read_then_stream": read_then_stream,
}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    if scope["type"] == "websocket":
        await websocket_echo(receive, send)
        return
    if scope["path"] == "/report":
        await _json(send, REPORTS.get(_param(scope, "id")))
        return
    report = {"messages": []}
    rid = _param(scope, "id")
    if rid is not None:
        REPORTS[rid] = report
    route = ROUTES.get(scope["path"])
    if route is None:
        await _json(send, {"path": scope["path"]})
        return
    await route(scope, receive, send, report)
    report["done"] = True


async def websocket_echo(receive, send):
    while True:
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.accept"})
        elif message["type"] == "websocket.receive":
            if message.get("bytes") is not None:
                await send({"type": "websocket.send", "bytes": message["bytes"]})
            else:
                await send({"type": "websocket.send", "text": message["text"]})
        else:
            return
