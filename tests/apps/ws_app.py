"""The WebSocket test app: one route per behaviour ``tests/test_websocket.py`` exercises.

Runs inside the server process (CPython or PyPy 3.9): standard library only, 3.9 syntax.
WebSocket routes are matched on ``scope["path"]`` with ``scope["root_path"]`` stripped; HTTP
requests get ``/hello``, ``/report?id=...`` (observations stored in ``REPORTS``) and, for any
other path, a JSON description of the HTTP scope (so ``--ws none`` tests can see what arrived).
"""

import asyncio
import json
import struct
import sys
from urllib.parse import parse_qs

from tests.apps.common import lifespan, pattern_chunk

REPORTS = {}
# asyncio.Events that ``GET /release?id=...`` sets (see ws_slow_app)
RELEASES = {}


def jsonable(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def scope_dump(scope):
    extensions = scope.get("extensions")
    state = scope.get("state")
    return {
        "keys": sorted(scope.keys()),
        "type": scope.get("type"),
        "asgi": jsonable(scope.get("asgi")),
        "http_version": scope.get("http_version"),
        "scheme": scope.get("scheme"),
        "path": scope.get("path"),
        "path_type": type(scope.get("path")).__name__,
        "raw_path": jsonable(scope.get("raw_path")),
        "raw_path_type": type(scope.get("raw_path")).__name__,
        "query_string": jsonable(scope.get("query_string")),
        "query_string_type": type(scope.get("query_string")).__name__,
        "root_path": scope.get("root_path"),
        "headers": jsonable(scope.get("headers")),
        "header_types": sorted(
            {"%s/%s" % (type(n).__name__, type(v).__name__) for n, v in scope.get("headers", ())}
        ),
        "client": jsonable(scope.get("client")),
        "client_types": [type(v).__name__ for v in scope.get("client") or ()],
        "server": jsonable(scope.get("server")),
        "server_types": [type(v).__name__ for v in scope.get("server") or ()],
        "subprotocols": jsonable(scope.get("subprotocols")),
        "subprotocols_type": type(scope.get("subprotocols")).__name__,
        "extensions": (
            sorted(extensions.keys()) if isinstance(extensions, dict) else jsonable(extensions)
        ),
        "state": jsonable(dict(state)) if isinstance(state, dict) else jsonable(state),
    }


def qparam(query, name, default=None):
    values = query.get(name)
    return values[0] if values else default


def describe(exc):
    return {"raised": type(exc).__name__, "message": str(exc)}


async def wait_disconnect(receive, timeout=60):
    """Receive until websocket.disconnect; returns (message, number of data messages)."""
    count = 0
    while True:
        message = await asyncio.wait_for(receive(), timeout)
        if message["type"] == "websocket.disconnect":
            return message, count
        count += 1


def disconnect_info(message):
    return {
        "type": message["type"],
        "code": message.get("code"),
        "reason": message.get("reason"),
    }


# ---------------------------------------------------------------- WebSocket routes


async def ws_scope(scope, receive, send, query):
    connect = await receive()
    await send({"type": "websocket.accept"})
    dump = scope_dump(scope)
    dump["first_message"] = connect["type"]
    await send({"type": "websocket.send", "text": json.dumps(dump)})
    await wait_disconnect(receive)


async def ws_echo(scope, receive, send, query):
    """Echoes text and bytes. ``subprotocol``/``hdr`` shape the accept; ``id`` records the end.

    A text message ``close:<code>:<reason>`` makes the app close with that code and reason.
    """
    rid = qparam(query, "id")
    connect = await receive()
    report = {"first": connect["type"], "messages": 0, "state": "open"}
    if rid:
        REPORTS[rid] = report
    accept = {"type": "websocket.accept"}
    if qparam(query, "subprotocol"):
        accept["subprotocol"] = qparam(query, "subprotocol")
    headers = []
    for item in query.get("hdr", []):
        name, _, value = item.partition(":")
        headers.append((name.encode("latin-1"), value.encode("latin-1")))
    if headers:
        accept["headers"] = headers
    await send(accept)
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            report["disconnect"] = disconnect_info(message)
            report["state"] = "done"
            return
        report["messages"] += 1
        text = message.get("text")
        if text is not None:
            if text.startswith("close:"):
                _, code, reason = text.split(":", 2)
                await send({"type": "websocket.close", "code": int(code), "reason": reason})
                message = await wait_disconnect(receive, 20)
                report["disconnect"] = disconnect_info(message[0])
                report["state"] = "done"
                return
            await send({"type": "websocket.send", "text": text})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})


async def ws_deny(scope, receive, send, query):
    """Closes before accepting: the handshake must get 403."""
    rid = qparam(query, "id")
    await receive()
    await send({"type": "websocket.close", "code": 1000})
    message = await asyncio.wait_for(receive(), 10)
    if rid:
        REPORTS[rid] = {"after_close": disconnect_info(message)}


async def ws_deny_response(scope, receive, send, query):
    """The denial-response extension: 418 (or ``status``) with a body sent in two messages."""
    await receive()
    await send(
        {
            "type": "websocket.http.response.start",
            "status": int(qparam(query, "status", "418")),
            "headers": [(b"content-type", b"text/plain"), (b"x-denied", b"yes")],
        }
    )
    await send(
        {"type": "websocket.http.response.body", "body": b"no websocket ", "more_body": True}
    )
    await send({"type": "websocket.http.response.body", "body": b"for you"})


async def ws_send_after_close(scope, receive, send, query):
    """Waits for the client to leave, then sends: records how send() fails."""
    import ferrocorn

    rid = qparam(query, "id")
    await receive()
    await send({"type": "websocket.accept"})
    REPORTS[rid] = {"state": "open"}
    await send({"type": "websocket.send", "text": "accepted"})
    message, _ = await wait_disconnect(receive, 20)
    result = {"state": "done", "disconnect": disconnect_info(message)}
    try:
        await send({"type": "websocket.send", "text": "too late"})
        result["raised"] = None
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        result.update(describe(exc))
        result["is_client_disconnected"] = isinstance(exc, ferrocorn.ClientDisconnected)
        result["is_oserror"] = isinstance(exc, OSError)
    REPORTS[rid] = result


INVALID_MESSAGES = {
    "both": {"type": "websocket.send", "bytes": b"x", "text": "x"},
    "neither": {"type": "websocket.send"},
    "str_bytes": {"type": "websocket.send", "bytes": "a str"},
    "bytes_text": {"type": "websocket.send", "text": b"some bytes"},
    "bad_code": {"type": "websocket.close", "code": 999},
    # In range but never on the wire (RFC 6455 §7.4.1: 1005/1006/1015 report, 1016-2999
    # are unassigned to applications).
    "code_1005": {"type": "websocket.close", "code": 1005},
    "code_1006": {"type": "websocket.close", "code": 1006},
    "code_1015": {"type": "websocket.close", "code": 1015},
    "code_2000": {"type": "websocket.close", "code": 2000},
    "long_reason": {"type": "websocket.close", "code": 1000, "reason": "r" * 124},
    "accept_twice": {"type": "websocket.accept"},
    "unknown_type": {"type": "websocket.bogus"},
    "send_before_accept": {"type": "websocket.send", "text": "early"},
}


async def ws_invalid(scope, receive, send, query):
    """Sends one invalid message (``kind``), then reports the exception as a text message."""
    kind = qparam(query, "kind")
    await receive()
    before_accept = kind == "send_before_accept"
    if not before_accept:
        await send({"type": "websocket.accept"})
    try:
        await send(INVALID_MESSAGES[kind])
        result = {"raised": None}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        result = describe(exc)
    if before_accept:
        await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": json.dumps(result)})
    await send({"type": "websocket.close", "code": 1000})


async def ws_slow_reader(scope, receive, send, query):
    """Sends ``n`` binary messages of ``size`` bytes as fast as send() lets it.

    Each message is an 8-byte big-endian index followed by the pattern at that index.
    """
    rid = qparam(query, "id")
    n = int(qparam(query, "n", "200"))
    size = int(qparam(query, "size", str(1 << 20)))
    await receive()
    await send({"type": "websocket.accept"})
    report = {"sent": 0, "state": "sending"}
    REPORTS[rid] = report
    for i in range(n):
        body = struct.pack("!Q", i) + pattern_chunk(i * 7, size - 8)
        await send({"type": "websocket.send", "bytes": body})
        report["sent"] = i + 1
    report["state"] = "sent"
    message, _ = await wait_disconnect(receive, 60)
    report["disconnect"] = disconnect_info(message)
    report["state"] = "done"


async def ws_slow_app(scope, receive, send, query):
    """Does not receive until ``GET /release?id=...`` (at most ``delay`` s), then receives
    everything and checks the order.

    Messages are expected to start with an 8-byte big-endian index (0, 1, 2, ...) followed by
    ``size - 8`` pattern bytes at that index.
    """
    rid = qparam(query, "id")
    delay = float(qparam(query, "delay", "30"))
    await receive()
    await send({"type": "websocket.accept"})
    report = {"received": 0, "in_order": True, "intact": True, "bytes": 0, "state": "sleeping"}
    release = RELEASES[rid] = asyncio.Event()
    REPORTS[rid] = report
    try:
        await asyncio.wait_for(release.wait(), delay)
    except asyncio.TimeoutError:
        report["release"] = "timeout"
    report["state"] = "receiving"
    expected = 0
    while True:
        message = await asyncio.wait_for(receive(), 60)
        if message["type"] == "websocket.disconnect":
            report["disconnect"] = disconnect_info(message)
            break
        data = message.get("bytes")
        if data is None:
            report["intact"] = False
            continue
        index = struct.unpack("!Q", data[:8])[0]
        if index != expected:
            report["in_order"] = False
        if data[8:] != pattern_chunk(index * 7, len(data) - 8):
            report["intact"] = False
        expected = index + 1
        report["received"] += 1
        report["bytes"] += len(data)
        if message.get("text") is not None:
            report["intact"] = False
    report["state"] = "done"


async def ws_wait(scope, receive, send, query):
    """Accepts and waits for the end of the session; records the disconnect."""
    rid = qparam(query, "id")
    await receive()
    await send({"type": "websocket.accept"})
    report = {"state": "open"}
    if rid:
        REPORTS[rid] = report
    message, count = await wait_disconnect(receive, 120)
    report["disconnect"] = disconnect_info(message)
    report["messages"] = count
    report["state"] = "done"


async def ws_accept_return(scope, receive, send, query):
    """Accepts and returns at once: the server must close the socket normally (1000)."""
    await receive()
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": "bye"})


async def ws_raise_after_accept(scope, receive, send, query):
    """Accepts, then raises: the server must close with 1011."""
    await receive()
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": "about to fail"})
    raise RuntimeError("ws-app-failure-4e1b")


async def ws_return_without_accept(scope, receive, send, query):
    """Never answers the handshake: the server must refuse it (500)."""
    await receive()


async def ws_raise_before_accept(scope, receive, send, query):
    await receive()
    raise RuntimeError("ws-handshake-failure-77c2")


WS_ROUTES = {
    "/accept_return": ws_accept_return,
    "/raise_after_accept": ws_raise_after_accept,
    "/return_without_accept": ws_return_without_accept,
    "/raise_before_accept": ws_raise_before_accept,
    "/scope": ws_scope,
    "/echo": ws_echo,
    "/deny": ws_deny,
    "/deny_response": ws_deny_response,
    "/send_after_close": ws_send_after_close,
    "/invalid": ws_invalid,
    "/slow_reader": ws_slow_reader,
    "/slow_app": ws_slow_app,
    "/wait": ws_wait,
}


# ---------------------------------------------------------------- HTTP


async def send_json(send, value, status=200):
    body = json.dumps(value).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def http_app(scope, receive, send, path, query):
    while True:  # drain the request body
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body"):
            break
    if path == "/hello":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hello world"})
    elif path == "/release":
        event = RELEASES.get(qparam(query, "id"))
        if event is not None:
            event.set()
        await send_json(send, {"released": event is not None})
    elif path == "/report":
        await send_json(send, REPORTS.get(qparam(query, "id")))
    else:
        await send_json(send, scope_dump(scope))


def _store_startup_value(scope):
    state = scope.get("state")
    if state is not None:
        state["startup_value"] = "set-at-startup"


async def app(scope, receive, send):
    kind = scope["type"]
    if kind == "lifespan":
        await lifespan(scope, receive, send, on_startup=_store_startup_value)
        return
    path = scope["path"]
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    query = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True)
    if kind == "http":
        await http_app(scope, receive, send, path, query)
        return
    if kind != "websocket":
        raise RuntimeError("unsupported scope type %r" % kind)
    handler = WS_ROUTES.get(path)
    if handler is None and path.startswith("/scope/"):
        handler = ws_scope
    if handler is None:
        await receive()
        await send({"type": "websocket.close", "code": 1008, "reason": "no route"})
        return
    try:
        await handler(scope, receive, send, query)
    except BaseException as exc:
        # Make an escaping exception visible to the test through the route's report.
        report = REPORTS.get(qparam(query, "id"))
        if isinstance(report, dict):
            report["error"] = describe(exc)
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run through ferrocorn: python -m ferrocorn tests.apps.ws_app:app")
