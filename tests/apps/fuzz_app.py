"""App for tests/test_fuzz_asgi.py (property-based tests of send() and receive()).

``POST /send?id=ID``: the JSON body is ``{"messages": [...]}``, tagged values decoded by
``decode`` (``{"b": latin-1 str}`` bytes, ``{"s": str}``, ``{"i": int}``, ``{"f": float}``,
``{"l": [...]}`` list, ``{"t": [...]}`` tuple, ``{"d": [[k, v], ...]}`` dict, JSON null/bools
as themselves). Each message is passed to ``send()``; the outcome of every call ("ok" or the
exception type name, and whether it is an allowed type) is stored under ID.

``POST /receive?id=ID``: calls ``receive()`` in a loop until ``http.disconnect`` or the last
body chunk and stores the messages (and any exception) under ID; answers 200 with the body size.

``GET /report?id=ID`` returns what was stored; ``GET /hello`` answers 200.
Standard library only, 3.9 syntax (it may run under PyPy).
"""

import asyncio
import json
from urllib.parse import parse_qs

from tests.apps.common import lifespan

ALLOWED = (TypeError, ValueError, RuntimeError, KeyError, OSError)
REPORTS = {}


def decode(value):
    if isinstance(value, dict) and len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "b":
            return inner.encode("latin-1")
        if tag == "s":
            return inner
        if tag in ("i", "f"):
            return inner if tag == "i" else float(inner)
        if tag == "l":
            return [decode(v) for v in inner]
        if tag == "t":
            return tuple(decode(v) for v in inner)
        if tag == "d":
            out = {}
            for k, v in inner:
                k = decode(k)
                try:
                    out[k] = decode(v)
                except TypeError:  # unhashable key
                    pass
            return out
    return value


async def read_body(receive):
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return bytes(body)


async def respond(send, status, body):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def route_send(query, receive, send):
    rid = query["id"][0]
    results = []
    try:
        body = await read_body(receive)
        if body is None:
            return
        messages = [decode(m) for m in json.loads(body.decode("utf-8"))["messages"]]
        for message in messages:
            try:
                await send(message)
                results.append({"outcome": "ok"})
            except Exception as exc:  # noqa: BLE001 - the outcome is the point
                results.append(
                    {
                        "outcome": type(exc).__name__,
                        "allowed": isinstance(exc, ALLOWED),
                        "msg": str(exc)[:200],
                    }
                )
    finally:
        REPORTS[rid] = {"results": results}


async def route_receive(query, receive, send):
    rid = query["id"][0]
    messages = []
    report = {"state": "started", "messages": messages}
    REPORTS[rid] = report
    total = 0
    try:
        while True:
            message = await asyncio.wait_for(receive(), 20)
            body = message.get("body", b"")
            total += len(body)
            messages.append(
                {
                    "type": message["type"],
                    "len": len(body),
                    "more_body": message.get("more_body", False),
                }
            )
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
    except BaseException as exc:
        report["raised"] = type(exc).__name__ + ": " + str(exc)[:200]
        report["state"] = "done"
        raise
    report["state"] = "done"
    if messages and messages[-1]["type"] == "http.request":
        await respond(send, 200, json.dumps({"size": total}).encode())


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    if scope["type"] != "http":
        return
    query = parse_qs(scope["query_string"].decode("latin-1"))
    path = scope["path"]
    if path == "/send":
        await route_send(query, receive, send)
    elif path == "/receive":
        await route_receive(query, receive, send)
    elif path == "/report":
        await respond(send, 200, json.dumps(REPORTS.get(query["id"][0])).encode())
    else:
        await respond(send, 200, b"hello")
