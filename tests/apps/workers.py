"""Test app for the supervisor tests: which process served a request, and lifespan switches.

Standard library only, Python 3.9 syntax (it runs in the server, possibly under PyPy).

- ``GET /pid`` answers the worker's pid (``?sleep=S`` waits first, so requests overlap);
- ``GET /env?name=NAME`` answers that environment variable (``-`` when unset);
- lifespan startup writes ``startup <pid>`` to ``$TEST_WORKERS_MARKER`` (when set) and fails when
  ``$TEST_WORKERS_FAIL_STARTUP`` is set.
"""

import asyncio
import os
from urllib.parse import parse_qs


def _mark(text):
    path = os.environ.get("TEST_WORKERS_MARKER")
    if path:
        with open(path, "a") as f:
            f.write(f"{text} {os.getpid()}\n")


async def _lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if os.environ.get("TEST_WORKERS_FAIL_STARTUP"):
                await send({"type": "lifespan.startup.failed", "message": "startup-refused-7c1"})
                return
            _mark("startup")
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            _mark("shutdown")
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    query = parse_qs(scope["query_string"].decode("latin-1"))
    if scope["path"] == "/pid":
        sleep = float(query.get("sleep", ["0"])[0])
        if sleep:
            await asyncio.sleep(sleep)
        body = str(os.getpid()).encode()
    elif scope["path"] == "/env":
        body = os.environ.get(query["name"][0], "-").encode()
    else:
        body = b"workers test app"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": body})
