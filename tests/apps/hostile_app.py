"""ASGI app for the hostile-client and response-safety tests (tests/test_hostile.py,
tests/test_response_safety.py).  Standard library only, Python 3.9 syntax (runs under PyPy).

  GET  /hello                 "hello world"
  GET  /smuggled              counts hits: no hostile request may ever reach it
  GET  /counters              {"smuggled": n, "hits": {path: n}}
  GET  /tasks                 {"tasks": len(asyncio.all_tasks())} (this request's task included)
  POST /echo                  {"size", "sha256"} of the body (and the body itself if small)
  POST /upload_sha            {"size", "sha256"} of a body hashed as it streams (not kept)
  GET  /stream?size=&chunk=   ``size`` pattern bytes in ``chunk``-sized messages
  GET  /slow_stream?id=       an endless-looking slow stream; records how it ended in REPORTS
  POST /upload_watch?id=      reads the body; records the messages (and http.disconnect)
  GET  /report?id=            REPORTS[id]
  GET  /bad_header?where=&char=, /bad_status?value=, /bad_length?mode=&streamed=
                              response-side safety probes (see the functions)
"""

import asyncio
import hashlib
import json
from urllib.parse import parse_qs

from tests.apps.common import iter_pattern, lifespan

REPORTS = {}
HITS = {}
SMUGGLED = [0]


def qparam(query, name, default=None):
    values = query.get(name)
    return values[0] if values else default


async def respond(send, status, body, content_type=b"text/plain"):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type)],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def respond_json(send, obj, status=200):
    await respond(send, status, json.dumps(obj).encode(), b"application/json")


async def route_hello(scope, receive, send, query):
    await respond(send, 200, b"hello world")


async def route_smuggled(scope, receive, send, query):
    SMUGGLED[0] += 1
    print("SMUGGLED REQUEST REACHED THE APP: %r" % (scope.get("raw_path"),), flush=True)
    await respond(send, 200, b"SMUGGLED")


async def route_counters(scope, receive, send, query):
    await respond_json(send, {"smuggled": SMUGGLED[0], "hits": HITS})


async def route_tasks(scope, receive, send, query):
    await respond_json(send, {"tasks": len(asyncio.all_tasks())})


async def route_echo(scope, receive, send, query):
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    result = {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    if len(body) <= 4096:
        result["body"] = body.decode("latin-1")
    await respond_json(send, result)


async def route_upload_sha(scope, receive, send, query):
    """Streams the body through sha256 without keeping it."""
    h = hashlib.sha256()
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body = message.get("body", b"")
        h.update(body)
        size += len(body)
        if not message.get("more_body", False):
            break
    await respond_json(send, {"size": size, "sha256": h.hexdigest()})


async def route_stream(scope, receive, send, query):
    size = int(qparam(query, "size", "100000"))
    chunk = int(qparam(query, "chunk", "65536"))
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/octet-stream")],
        }
    )
    for piece in iter_pattern(size, chunk):
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def route_slow_stream(scope, receive, send, query):
    """Streams 4 KiB every 20 ms for up to 30 s; records how it stopped."""
    rid = qparam(query, "id")
    REPORTS[rid] = {"state": "streaming"}
    try:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/octet-stream")],
            }
        )
        for _ in range(1500):
            await send({"type": "http.response.body", "body": b"s" * 4096, "more_body": True})
            await asyncio.sleep(0.02)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        REPORTS[rid] = {"state": "completed"}
    except BaseException as exc:
        REPORTS[rid] = {
            "state": "stopped",
            "exc": type(exc).__name__,
            "oserror": isinstance(exc, OSError),
        }
        raise


async def route_upload_watch(scope, receive, send, query):
    """Reads the request body; records the message sequence (ends at http.disconnect)."""
    rid = qparam(query, "id")
    messages = []
    REPORTS[rid] = {"state": "reading", "messages": messages}
    size = 0
    while True:
        try:
            message = await asyncio.wait_for(receive(), 30)
        except asyncio.TimeoutError:
            REPORTS[rid] = {"state": "timeout", "messages": messages, "size": size}
            return
        messages.append(message["type"])
        if message["type"] == "http.disconnect":
            REPORTS[rid] = {"state": "disconnect", "messages": messages, "size": size}
            return
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    REPORTS[rid] = {"state": "complete", "messages": messages, "size": size}
    await respond_json(send, {"size": size})


async def route_report(scope, receive, send, query):
    await respond_json(send, REPORTS.get(qparam(query, "id")))


# ---------------------------------------------------------------- response-side safety

BAD_CHARS = {"cr": b"\r", "lf": b"\n", "nul": b"\x00", "crlf": b"\r\n"}


def describe(exc):
    if exc is None:
        return None
    return {"type": type(exc).__name__, "message": str(exc)}


async def route_bad_header(scope, receive, send, query):
    """Tries a start message whose header name or value holds CR/LF/NUL; then answers a clean
    200 with what send() did."""
    bad = BAD_CHARS[qparam(query, "char")]
    if qparam(query, "where") == "name":
        header = (b"x-bad" + bad + b"x-injected", b"yes")
    else:
        header = (b"x-bad", b"a" + bad + b"x-injected: yes")
    raised = None
    try:
        await send({"type": "http.response.start", "status": 200, "headers": [header]})
    except Exception as exc:  # noqa: BLE001 - reported
        raised = exc
    if raised is None:
        # it was accepted: finish that response, so the test sees what went on the wire
        await send({"type": "http.response.body", "body": b"accepted"})
        return
    await respond_json(send, {"raised": describe(raised)})


STATUS_VALUES = {
    "99": 99,
    "600": 600,
    "1000": 1000,
    "str200": "200",
    "true": True,
    "neg": -200,
    "float": 200.0,
    "none": None,
}


async def route_bad_status(scope, receive, send, query):
    value = STATUS_VALUES[qparam(query, "value")]
    raised = None
    try:
        await send({"type": "http.response.start", "status": value, "headers": []})
    except Exception as exc:  # noqa: BLE001 - reported
        raised = exc
    if raised is None:
        await send({"type": "http.response.body", "body": b"accepted"})
        return
    await respond_json(send, {"raised": describe(raised)})


async def route_bad_length(scope, receive, send, query):
    """Declares Content-Length 100 and sends ``mode`` (fewer: 60, more: 140) bytes, in one
    message or (``streamed=1``) in two.  Records in REPORTS what send() did; lets exceptions
    propagate (as an app would)."""
    rid = qparam(query, "id")
    mode = qparam(query, "mode")
    streamed = qparam(query, "streamed") == "1"
    total = 60 if mode == "fewer" else 140
    body = (b"0123456789" * 14)[:total]
    REPORTS[rid] = {"state": "started"}
    try:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"100")],
            }
        )
        if streamed:
            await send({"type": "http.response.body", "body": body[:50], "more_body": True})
            await asyncio.sleep(0.05)
            await send({"type": "http.response.body", "body": body[50:], "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            await send({"type": "http.response.body", "body": body})
        REPORTS[rid] = {"state": "done", "raised": None}
    except BaseException as exc:
        REPORTS[rid] = {"state": "done", "raised": describe(exc)}
        raise


ROUTES = {
    "/": route_hello,
    "/hello": route_hello,
    "/smuggled": route_smuggled,
    "/counters": route_counters,
    "/tasks": route_tasks,
    "/echo": route_echo,
    "/upload_sha": route_upload_sha,
    "/stream": route_stream,
    "/slow_stream": route_slow_stream,
    "/upload_watch": route_upload_watch,
    "/report": route_report,
    "/bad_header": route_bad_header,
    "/bad_status": route_bad_status,
    "/bad_length": route_bad_length,
}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    path = scope["path"]
    HITS[path] = HITS.get(path, 0) + 1
    if path.startswith("/smuggled"):
        await route_smuggled(scope, receive, send, {})
        return
    handler = ROUTES.get(path)
    query = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True)
    if handler is None:
        await respond(send, 404, ("no route %s" % path).encode())
        return
    await handler(scope, receive, send, query)
