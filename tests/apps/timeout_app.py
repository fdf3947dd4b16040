"""For tests/test_request_timeout.py: handlers that outlive ``--timeout-request``."""

import asyncio
import sys
from urllib.parse import parse_qs

from tests.apps.common import lifespan


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        await asyncio.sleep(float(parse_qs(scope["query_string"].decode())["s"][0]))
        await send({"type": "websocket.send", "text": "still here"})
        await send({"type": "websocket.close", "code": 1000})
        return
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    tag = query.get("tag", "")
    seconds = float(query.get("s", "0"))
    start = {"type": "http.response.start", "status": 200, "headers": []}
    try:
        if query.get("stream"):
            await send(start)
            await send({"type": "http.response.body", "body": b"first", "more_body": True})
            await asyncio.sleep(seconds)
        else:
            await asyncio.sleep(seconds)
            await send(start)
        await send({"type": "http.response.body", "body": b"done"})
    finally:
        print("finally ran %s" % tag, flush=True)
        sys.stdout.flush()
