"""ASGI app for the request-body coalescing tests (tests/test_body_coalescing.py).

``/count`` reads the whole body and answers how it arrived: the number of ``http.request``
messages, the indexes of those with ``more_body`` false, the body's size and sha256. ``/echo``
starts a streamed response at once and sends back each message's body as it comes, so a
client can wait for its own bytes before sending more. With ``hold=1`` either waits, before
reading anything, until ``/release`` is called with the same ``id``. A call with an ``id``
query parameter is recorded in ``REPORTS`` (``GET /report?id=...``): the message types and
count, what a ``send()`` after ``http.disconnect`` did, and what ``receive()`` gave after the
last message. Standard library only, 3.9 syntax (may run on PyPy).
"""

import asyncio
import hashlib
import json
from urllib.parse import parse_qs

from tests.apps.common import lifespan

REPORTS = {}
HOLDS = {}  # id -> asyncio.Event that /release sets


def _hold(rid):
    if rid not in HOLDS:
        HOLDS[rid] = asyncio.Event()
    return HOLDS[rid]


def _param(scope, name):
    values = parse_qs(scope["query_string"].decode("latin-1")).get(name)
    return values[0] if values else None


async def _json(send, obj):
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(obj).encode()})


async def count(receive, send, report):
    digest = hashlib.sha256()
    size = messages = 0
    ends = []  # indexes of the messages with more_body false
    lens = []  # the first messages' body lengths, for a failing test's message
    while True:
        message = await receive()
        report["types"].append(message["type"])
        if message["type"] != "http.request":
            await _late_send(send, report)
            return
        body = message.get("body", b"")
        digest.update(body)
        size += len(body)
        if len(lens) < 20:
            lens.append(len(body))
        if not message.get("more_body", False):
            ends.append(messages)
        messages += 1
        report["messages"] = messages
        report["size"] = size
        if ends:
            break
    await _json(
        send,
        {
            "messages": messages,
            "ends": ends,
            "size": size,
            "sha256": digest.hexdigest(),
            "lens": lens,
        },
    )
    # Nothing more may follow the message with more_body false: the next is the disconnect.
    report["after"] = (await receive())["type"]


async def _late_send(send, report):
    """After http.disconnect: record what a send() does (it should raise)."""
    try:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"late"})
        report["send"] = "ok"
    except Exception as exc:  # noqa: BLE001 - reported to the test
        report["send"] = type(exc).__name__


async def echo(receive, send, report):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"", "more_body": True})
    report["messages"] = 0
    report["ends"] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        more = message.get("more_body", False)
        if not more:
            report["ends"].append(report["messages"])
        report["messages"] += 1
        await send(
            {"type": "http.response.body", "body": message.get("body", b""), "more_body": more}
        )
        if not more:
            return


ROUTES = {"/count": count, "/echo": echo}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    if scope["path"] == "/report":
        await _json(send, REPORTS.get(_param(scope, "id")))
        return
    rid = _param(scope, "id")
    if scope["path"] == "/release":
        _hold(rid).set()
        await _json(send, None)
        return
    report = {"types": []}
    if rid is not None:
        REPORTS[rid] = report
    if _param(scope, "hold"):
        await _hold(rid).wait()  # busy elsewhere: the body queues up meanwhile
    await ROUTES[scope["path"]](receive, send, report)
