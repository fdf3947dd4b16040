"""Response trailers (``http.response.trailers``): well-formed responses, and routes that send
one invalid message, record the exception in ``REPORTS`` (read back via ``/report?id=...``)
and then finish the response properly."""

import hashlib
import json
from urllib.parse import parse_qs

REPORTS = {}


def _query(scope):
    return {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}


async def _json(send, value):
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(value).encode()})


async def _drain(receive):
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body"):
            return


async def route_scope(scope, receive, send, q):
    extensions = scope.get("extensions") or {}
    await _json(
        send,
        {
            "http_version": scope["http_version"],
            "trailers": extensions.get("http.response.trailers"),
        },
    )


async def route_trailers(scope, receive, send, q):
    """``parts`` body messages, then trailers, split over ``splits`` messages."""
    parts = int(q.get("parts", "3"))
    splits = int(q.get("splits", "1"))
    chunks = [b"part-%d;" % i for i in range(parts)]
    digest = hashlib.sha256(b"".join(chunks)).hexdigest().encode()
    headers = [(b"content-type", b"text/plain")]
    if q.get("named"):
        # HTTP/1.1 sends only the trailer fields the head names (RFC 9110 §6.6.2).
        headers.append((b"trailer", q["named"].encode()))
    if q.get("length"):
        headers.append((b"content-length", str(len(b"".join(chunks))).encode()))
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "trailers": True,
            "headers": headers,
        }
    )
    for i, chunk in enumerate(chunks):
        await send({"type": "http.response.body", "body": chunk, "more_body": i < parts - 1})
    fields = [
        (b"x-checksum", digest),
        (b"x-trailer", b"yes"),
        (b"x-extra", b"1"),
        (b"x-extra", b"2"),
    ]
    step = max(1, -(-len(fields) // splits))
    groups = [fields[i : i + step] for i in range(0, len(fields), step)]
    for i, group in enumerate(groups):
        await send(
            {
                "type": "http.response.trailers",
                "headers": group,
                "more_trailers": i < len(groups) - 1,
            }
        )


async def route_empty(scope, receive, send, q):
    await send({"type": "http.response.start", "status": 200, "trailers": True})
    await send({"type": "http.response.body", "body": b"no trailers"})
    await send({"type": "http.response.trailers", "headers": []})


async def route_forgot(scope, receive, send, q):
    """Promises trailers, then returns after the body."""
    await send({"type": "http.response.start", "status": 200, "trailers": True})
    await send({"type": "http.response.body", "body": b"body", "more_body": True})
    await send({"type": "http.response.body", "body": b" done"})


async def route_raise(scope, receive, send, q):
    """Promises trailers, sends the whole body, then fails."""
    await send({"type": "http.response.start", "status": 200, "trailers": True})
    await send({"type": "http.response.body", "body": b"body"})
    raise RuntimeError("boom after the body")


async def _record(rid, send, message):
    # send() may raise before returning an awaitable, so it is called inside the try.
    try:
        await send(message)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        REPORTS[rid] = {"exc": type(exc).__name__, "msg": str(exc)}
    else:
        REPORTS[rid] = {"exc": None}


async def route_broken(scope, receive, send, q):
    """Sends the invalid message named by ``kind``, records what send() raised, then sends a
    complete, valid response."""
    kind, rid = q["kind"], q["id"]
    good = {"type": "http.response.trailers", "headers": [(b"x-after", b"ok")]}
    start = {"type": "http.response.start", "status": 200, "trailers": True}
    last = {"type": "http.response.body", "body": b"body"}
    if kind == "bad_flag":
        await _record(rid, send, {**start, "trailers": "yes"})
        await send(start)
        await send(last)
        await send(good)
    elif kind == "not_promised":
        await send({**start, "trailers": False})
        await send(last)
        await _record(rid, send, good)
    elif kind == "before_start":
        await _record(rid, send, good)
        await send(start)
        await send(last)
        await send(good)
    elif kind == "before_body":
        await send(start)
        await _record(rid, send, good)
        await send(last)
        await send(good)
    elif kind == "mid_body":
        await send(start)
        await send({"type": "http.response.body", "body": b"bo", "more_body": True})
        await _record(rid, send, good)
        await send({"type": "http.response.body", "body": b"dy"})
        await send(good)
    elif kind == "body_after":
        await send(start)
        await send(last)
        await _record(rid, send, last)
        await send(good)
    else:
        bad = {
            "forbidden": [(b"content-length", b"4")],
            "hop": [(b"connection", b"close")],
            "pseudo": [(b":status", b"200")],
            "bad_value": [(b"x-bad", b"a\r\nb")],
            "str_name": [("x-str", b"1")],
        }[kind]
        await send(start)
        await send(last)
        await _record(rid, send, {"type": "http.response.trailers", "headers": bad})
        await send(good)


async def route_report(scope, receive, send, q):
    await _json(send, REPORTS.get(q["id"]))


ROUTES = {
    "/scope": route_scope,
    "/trailers": route_trailers,
    "/empty": route_empty,
    "/forgot": route_forgot,
    "/raise": route_raise,
    "/broken": route_broken,
    "/report": route_report,
}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await _drain(receive)
    await ROUTES[scope["path"]](scope, receive, send, _query(scope))
