"""The main ASGI test app: one route per behaviour the black-box tests exercise.

Runs inside the server process (CPython or PyPy 3.9): standard library only, 3.9 syntax.
Routes are matched on ``scope["path"]`` with ``scope["root_path"]`` stripped.

Cross-request observations (e.g. "the app saw http.disconnect") are stored in ``REPORTS`` keyed
by an ``id`` query parameter and read back through ``GET /report?id=...``.
"""

import asyncio
import hashlib
import json
import os
import sys
import time
from urllib.parse import parse_qs

from tests.apps.common import iter_pattern

REPORTS = {}


def latin1(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    return value


def jsonable(value):
    """Recursive JSON-safe copy: bytes -> latin-1 str, tuples -> lists, others -> repr."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def type_names(value):
    if value is None:
        return None
    return [type(v).__name__ for v in value]


def scope_dump(scope):
    headers = scope.get("headers")
    item_types = []
    for item in headers or ():
        item_types.append(
            [type(item).__name__, len(item), type(item[0]).__name__, type(item[1]).__name__]
        )
    state = scope.get("state")
    return {
        "keys": sorted(scope.keys()),
        "type": scope.get("type"),
        "asgi": jsonable(scope.get("asgi")),
        "http_version": scope.get("http_version"),
        "method": scope.get("method"),
        "scheme": scope.get("scheme"),
        "path": scope.get("path"),
        "path_type": type(scope.get("path")).__name__,
        "raw_path": latin1(scope.get("raw_path")),
        "raw_path_type": type(scope.get("raw_path")).__name__,
        "query_string": latin1(scope.get("query_string")),
        "query_string_type": type(scope.get("query_string")).__name__,
        "root_path": scope.get("root_path"),
        "headers": jsonable(headers),
        "headers_type": type(headers).__name__,
        "header_item_types": item_types,
        "client": jsonable(scope.get("client")),
        "client_type": type(scope.get("client")).__name__,
        "client_item_types": type_names(scope.get("client")),
        "server": jsonable(scope.get("server")),
        "server_type": type(scope.get("server")).__name__,
        "server_item_types": type_names(scope.get("server")),
        "extensions": jsonable(scope.get("extensions")),
        "has_state": "state" in scope,
        "state": jsonable(dict(state)) if isinstance(state, dict) else jsonable(state),
    }


async def send_response(send, status, body, headers=None, content_type=b"text/plain"):
    hdrs = [(b"content-type", content_type)]
    if headers:
        hdrs.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


async def send_json(send, obj, status=200):
    await send_response(
        send, status, json.dumps(obj).encode("utf-8"), content_type=b"application/json"
    )


async def read_body(receive):
    """Read the whole request body; returns (body, messages) or (None, messages) on disconnect."""
    chunks = []
    messages = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            messages.append({"type": "http.disconnect"})
            return None, messages
        body = message.get("body", b"")
        more = message.get("more_body", False)
        messages.append({"type": message["type"], "len": len(body), "more_body": more})
        chunks.append(body)
        if not more:
            return b"".join(chunks), messages


def qparam(query, name, default=None):
    values = query.get(name)
    return values[0] if values else default


# ---------------------------------------------------------------- routes


async def route_hello(scope, receive, send, query):
    await send_response(send, 200, b"hello world")


async def route_index(scope, receive, send, query):
    # Echoes the index so pipelining tests can check ordering.
    await send_response(send, 200, qparam(query, "i", "").encode())


async def route_scope(scope, receive, send, query):
    await read_body(receive)
    await send_json(send, scope_dump(scope))


async def route_state_mutate(scope, receive, send, query):
    state = scope["state"]
    state["added_by_request"] = "yes"
    state["startup_value"] = "changed-by-request"
    await send_json(send, {"ok": True})


async def route_echo(scope, receive, send, query):
    """Reads the whole body, answers with its size, sha256 and the body itself (if small)."""
    body, messages = await read_body(receive)
    if body is None:
        rid = qparam(query, "id")
        if rid:
            REPORTS[rid] = {"messages": messages}
        return  # client went away: nothing to answer
    result = {
        "size": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
        "messages": len(messages),
    }
    if len(body) <= 4096:
        result["body"] = body.decode("latin-1")
    await send_json(send, result)


async def route_upload(scope, receive, send, query):
    """Streams the body through sha256 without keeping it; reports the receive() pattern."""
    h = hashlib.sha256()
    size = 0
    count = 0
    more_flags = []
    types = set()
    while True:
        message = await receive()
        types.add(message["type"])
        if message["type"] != "http.request":
            break
        body = message.get("body", b"")
        h.update(body)
        size += len(body)
        count += 1
        more = message.get("more_body", False)
        more_flags.append(more)
        if not more:
            break
    await send_json(
        send,
        {
            "size": size,
            "sha256": h.hexdigest(),
            "messages": count,
            "all_but_last_more": all(more_flags[:-1]) if more_flags else None,
            "last_more": more_flags[-1] if more_flags else None,
            "types": sorted(types),
        },
    )


async def route_messages(scope, receive, send, query):
    """Reports each receive() message (type, body length, more_body)."""
    _, messages = await read_body(receive)
    await send_json(send, {"messages": messages})


async def route_after_response(scope, receive, send, query):
    """Reads the body, completes the response, then records what the next receive() gives."""
    rid = qparam(query, "id")
    await read_body(receive)
    await send_response(send, 200, b"done")
    try:
        message = await asyncio.wait_for(receive(), 10)
        REPORTS[rid] = {"next": message.get("type")}
    except asyncio.TimeoutError:
        REPORTS[rid] = {"next": "timeout"}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        REPORTS[rid] = {"next": "raised", "exc": type(exc).__name__, "msg": str(exc)}


async def route_respond_then_read(scope, receive, send, query):
    """Answers at once, then reads the whole body and records its size (or the disconnect)."""
    rid = qparam(query, "id")
    await send_response(send, 200, b"answered")
    body, messages = await read_body(receive)
    REPORTS[rid] = {"size": None if body is None else len(body), "messages": len(messages)}


async def route_wait_disconnect(scope, receive, send, query):
    """Reads until http.disconnect and records the message sequence; never answers."""
    rid = qparam(query, "id")
    messages = []
    REPORTS[rid] = {"state": "waiting", "messages": messages}
    while True:
        try:
            message = await asyncio.wait_for(receive(), 20)
        except asyncio.TimeoutError:
            messages.append({"type": "timeout"})
            break
        messages.append(
            {
                "type": message["type"],
                "len": len(message.get("body", b"")),
                "more_body": message.get("more_body", False),
            }
        )
        if message["type"] == "http.disconnect":
            break
    REPORTS[rid] = {"state": "done", "messages": messages}


async def route_send_after_disconnect(scope, receive, send, query):
    """Waits for http.disconnect, then tries to respond; records how send() fails."""
    import ferrocorn

    rid = qparam(query, "id")
    mode = qparam(query, "mode", "catch")
    REPORTS[rid] = {"state": "waiting"}
    while True:
        try:
            message = await asyncio.wait_for(receive(), 20)
        except asyncio.TimeoutError:
            REPORTS[rid] = {"state": "done", "raised": "no-disconnect-seen"}
            return
        if message["type"] == "http.disconnect":
            break
    try:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain")],
            }
        )
        await send({"type": "http.response.body", "body": b"too late"})
        REPORTS[rid] = {"state": "done", "raised": None}
    except BaseException as exc:
        REPORTS[rid] = {
            "state": "done",
            "raised": type(exc).__name__,
            "is_oserror": isinstance(exc, OSError),
            "is_client_disconnected": isinstance(exc, ferrocorn.ClientDisconnected),
        }
        if mode == "raise":
            raise


async def route_write_until_gone(scope, receive, send, query):
    """Streams a small chunk every 50 ms until send() fails; records how (at most 20 s)."""
    rid = qparam(query, "id")
    REPORTS[rid] = {"state": "writing"}
    await send({"type": "http.response.start", "status": 200, "headers": []})
    try:
        for _ in range(400):
            await send({"type": "http.response.body", "body": b"tick\n", "more_body": True})
            await asyncio.sleep(0.05)
        REPORTS[rid] = {"state": "done", "raised": None}
    except BaseException as exc:
        REPORTS[rid] = {"state": "done", "raised": type(exc).__name__}


async def route_report(scope, receive, send, query):
    rid = qparam(query, "id")
    await send_json(send, REPORTS.get(rid))


async def route_stream(scope, receive, send, query):
    """Streams ``size`` pattern bytes in ``chunk``-sized body messages.

    ``cl=1`` sets Content-Length itself, ``declare=N`` sets a wrong one; otherwise the server
    chooses the framing.
    """
    size = int(qparam(query, "size", "100000"))
    chunk = int(qparam(query, "chunk", "16384"))
    headers = [(b"content-type", b"application/octet-stream")]
    if qparam(query, "cl") == "1":
        headers.append((b"content-length", str(size).encode()))
    elif qparam(query, "declare"):
        # a deliberately wrong Content-Length
        headers.append((b"content-length", qparam(query, "declare").encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for piece in iter_pattern(size, chunk):
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def route_status(scope, receive, send, query):
    """Answers with ``code``; ``mode=stream`` sends the (empty) body in two messages."""
    code = int(qparam(query, "code", "200"))
    await send({"type": "http.response.start", "status": code, "headers": []})
    if qparam(query, "mode") == "stream":
        await send({"type": "http.response.body", "body": b"", "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def route_error_before(scope, receive, send, query):
    raise RuntimeError("boom-before-response-7f3a")


async def route_error_after(scope, receive, send, query):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"partial-data-", "more_body": True})
    await asyncio.sleep(0.05)
    raise RuntimeError("boom-after-response-started-9c1d")


async def route_no_response(scope, receive, send, query):
    return None


async def route_invalid(scope, receive, send, query):
    """Sends one invalid message (``kind``), then a valid response reporting the exception."""
    kind = qparam(query, "kind")
    started = False
    good_start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"application/json")],
    }
    try:
        if kind == "str_body":
            await send(good_start)
            started = True
            await send({"type": "http.response.body", "body": "a str body"})
        elif kind == "str_header_name":
            await send({"type": "http.response.start", "status": 200, "headers": [("x-a", b"b")]})
        elif kind == "str_header_value":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", "b")]})
        elif kind == "missing_status":
            await send({"type": "http.response.start", "headers": []})
        elif kind == "unknown_type":
            await send({"type": "http.response.bogus-kind"})
        elif kind == "body_before_start":
            await send({"type": "http.response.body", "body": b"x"})
        elif kind == "second_start":
            await send(good_start)
            started = True
            await send(good_start)
        elif kind == "crlf_header_value":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"x-bad", b"a\r\nX-Injected: yes")],
                }
            )
        elif kind == "nul_header_value":
            # A NUL inside a value must not shift the later pairs (PyPy packs headers).
            headers = [(b"x-a", b"a\0b"), (b"x-b", b"c")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
        elif kind == "status_600":
            await send({"type": "http.response.start", "status": 600, "headers": []})
        elif kind == "bool_status":
            await send({"type": "http.response.start", "status": True, "headers": []})
        elif kind == "int_trailers":
            await send({"type": "http.response.start", "status": 200, "trailers": 1})
        else:
            raise AssertionError("unknown kind %r" % kind)
        result = {"raised": None}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        result = {"raised": type(exc).__name__, "message": str(exc)}
    if not started:
        await send(good_start)
    await send({"type": "http.response.body", "body": json.dumps(result).encode()})


class _Bytes(bytes):
    pass


class _Message(dict):
    pass


async def route_shapes(scope, receive, send, query):
    """A valid response in a less common shape (``kind``): every one must go out as sent."""
    kind = qparam(query, "kind")
    start = {"type": "http.response.start", "status": 200, "headers": [(b"x-shape", b"ok")]}
    body = {"type": "http.response.body", "body": b"shape " + kind.encode()}
    if kind == "tuple_of_lists":
        start["headers"] = ([b"x-shape", b"ok"], [b"x-second", b"2"])
    elif kind == "bytes_subclass":
        start["headers"] = [(_Bytes(b"x-shape"), _Bytes(b"ok"))]
    elif kind == "no_headers_key":
        del start["headers"]
    elif kind == "empty_header_value":
        start["headers"] = [(b"x-shape", b"ok"), (b"x-empty", b"")]
    elif kind == "dict_subclass":
        start, body = _Message(start), _Message(body)
    elif kind == "bytearray_body":
        body["body"] = bytearray(body["body"])
    elif kind == "no_body_key":
        await send(start)
        await send({"type": "http.response.body", "body": b"shape ", "more_body": True})
        await send({"type": "http.response.body", "body": kind.encode(), "more_body": True})
        await send({"type": "http.response.body"})
        return
    elif kind == "truthy_more_body":
        await send(start)
        await send({"type": "http.response.body", "body": b"shape ", "more_body": 1})
        await send({"type": "http.response.body", "body": kind.encode(), "more_body": 0})
        return
    else:
        raise AssertionError("unknown kind %r" % kind)
    await send(start)
    await send(body)


# Module-level, so that every request sends the very same objects (see route_repeat).
_REPEAT_PIECES = {
    "A": b"".join(iter_pattern(20000)),
    "B": b"B" * 5000,
    "C": b"C" * 300,
}


async def route_repeat(scope, receive, send, query):
    """Sends the pieces named by ``seq`` (e.g. ``AABA``) as body messages, each the same
    bytes object every time: the server must send each of them whole, however often."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for name in qparam(query, "seq"):
        piece = _REPEAT_PIECES[name]
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def route_slow(scope, receive, send, query):
    seconds = float(qparam(query, "s", "1"))
    tag = qparam(query, "tag", "")
    print("SLOW-START %s" % tag, flush=True)
    await asyncio.sleep(seconds)
    await send_response(send, 200, ("slept %s" % seconds).encode())


async def route_expect(scope, receive, send, query):
    """Waits ``delay`` seconds before the first receive() (for Expect: 100-continue)."""
    delay = float(qparam(query, "delay", "0"))
    if delay:
        await asyncio.sleep(delay)
    body, _ = await read_body(receive)
    await send_response(send, 200, b"got:" + (body or b""))


async def route_read_when(scope, receive, send, query):
    """Reads nothing until the file named by ?until= exists (awaiting, at most 30 s), then
    streams the body through sha256 and answers {"size", "sha256"}."""
    until = query["until"][0]
    deadline = time.monotonic() + 30
    while not os.path.exists(until) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    h = hashlib.sha256()
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        body = message.get("body", b"")
        h.update(body)
        size += len(body)
        if not message.get("more_body", False):
            break
    await send_json(send, {"size": size, "sha256": h.hexdigest()})


async def route_hop_fields(scope, receive, send, query):
    """A response carrying HTTP/1.1's connection-specific fields (and a TE that is not
    "trailers"), which an HTTP/2 or HTTP/3 message must not carry, beside a field to keep."""
    headers = [
        (b"connection", b"keep-alive"),
        (b"keep-alive", b"timeout=5"),
        (b"proxy-connection", b"keep-alive"),
        (b"upgrade", b"foo"),
        (b"te", b"gzip"),
        (b"x-kept", b"yes"),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"hop"})


async def route_no_read(scope, receive, send, query):
    """Never reads the request body."""
    await send_response(send, 200, b"not reading your body")


async def route_block_after(scope, receive, send, query):
    """Responds, then blocks the event loop (time.sleep, no await) until the file named by
    ?until= exists (at most 20 s) -- like a background job that never awaits. Streamed with
    ?stream=1: the last chunk is sent, then the loop blocks."""
    until = query["until"][0]
    if query.get("stream"):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part1,", "more_body": True})
        await send({"type": "http.response.body", "body": b"part2"})
    else:
        await send_response(send, 200, b"sent before blocking")
    deadline = time.monotonic() + 20
    while not os.path.exists(until) and time.monotonic() < deadline:
        time.sleep(0.01)


ROUTES = {
    "/": route_hello,
    "/block_after": route_block_after,
    "/hello": route_hello,
    "/index": route_index,
    "/scope": route_scope,
    "/state/mutate": route_state_mutate,
    "/echo": route_echo,
    "/upload": route_upload,
    "/messages": route_messages,
    "/after_response": route_after_response,
    "/respond_then_read": route_respond_then_read,
    "/wait_disconnect": route_wait_disconnect,
    "/send_after_disconnect": route_send_after_disconnect,
    "/report": route_report,
    "/write_until_gone": route_write_until_gone,
    "/stream": route_stream,
    "/status": route_status,
    "/error/before": route_error_before,
    "/error/after": route_error_after,
    "/no_response": route_no_response,
    "/invalid": route_invalid,
    "/shapes": route_shapes,
    "/repeat": route_repeat,
    "/slow": route_slow,
    "/expect": route_expect,
    "/no_read": route_no_read,
    "/read_when": route_read_when,
    "/hop_fields": route_hop_fields,
}


def _write_marker(env_name, text):
    path = os.environ.get(env_name)
    if path:
        with open(path, "a") as f:
            f.write(text + "\n")


async def lifespan(scope, receive, send):
    _write_marker("TEST_APP_LIFESPAN_MARKER", "lifespan-called")
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            delay = float(os.environ.get("TEST_APP_STARTUP_DELAY", "0"))
            if delay:
                await asyncio.sleep(delay)
            state = scope.get("state")
            if state is not None:
                state["startup_value"] = "set-at-startup"
            _write_marker("TEST_APP_STARTUP_MARKER", "startup-ran")
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            _write_marker("TEST_APP_SHUTDOWN_MARKER", "shutdown-ran")
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    if scope["type"] != "http":
        raise RuntimeError("unsupported scope type %r" % scope["type"])
    path = scope["path"]
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    query = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True)
    handler = ROUTES.get(path)
    if handler is None and path.startswith("/scope/"):
        handler = route_scope  # /scope/<anything>: dump the scope for any path
    if handler is None:
        await send_response(send, 404, ("no route %s" % path).encode("utf-8"))
        return
    await handler(scope, receive, send, query)


def create_app():
    """Factory used by ``--factory`` tests."""

    async def factory_app(scope, receive, send):
        if scope["type"] == "lifespan":
            await lifespan(scope, receive, send)
            return
        await send_response(send, 200, b"from factory")

    return factory_app


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run through ferrocorn: python -m ferrocorn tests.apps.basic:app")
